/*
 * The CUDA backend, as far as a machine can check it.
 *
 * Everywhere (no toolkit, no GPU needed):
 *  - the `cuda` kernel table (cuda_table.h through the loader) covers every
 *    op of the Qwen3 graph for f32/f16/bf16/q8_0/q4_K/q6_K weights and the
 *    ladder types (q2_K, q3_K, q5_K, iq2_xxs/xs/s, iq1_s/m, tq1_0/tq2_0), ref covers
 *    every entry, and each entry dispatches to itself;
 *  - probing never loads the module; the loader's error paths (no module, a
 *    library that is not a module, a file that is not a library) give clear
 *    messages, each checked in a child process (loading happens once);
 *  - with the module built: it loads (ABI, layout and kernel list agree), and
 *    without a GPU creating a context fails with a clear message; loading a
 *    model and `pocketllm run` with --device cuda fail cleanly, not crash.
 * With a GPU:
 *  - every (op, dtype) of the table against the ref backend on random inputs
 *    (typical and edge shapes, strided views, decode and prefill paths), with
 *    test_ops' thresholds, guard bytes around every device buffer, inputs
 *    checked unmodified;
 *  - graph capture and replay with changing inputs (a decode step's
 *    kv_store + attention as positions advance, rms_norm + matmul);
 *  - device-side input checks surface at the next download and then clear;
 *  - a tiny model on cuda against cpu (the engine's path: weights uploaded
 *    once, inputs up and logits down per call), and a plan larger than the
 *    device refused before loading (PL_ERR_DOES_NOT_FIT naming the device).
 *
 * Modes: `test_cuda --bandwidth` prints copy bandwidths; `test_cuda --perf`
 * times Qwen3-0.6B/1.7B-shaped matmuls and attention (used by
 * scripts/gpu-check.sh). Neither runs under ctest.
 */
#include "testutil.h"
#include "ophelpers.h"
#include "backends/cuda/cuda_module.h"
#include "backends/cuda/cuda_table.h"
#include "core/fp16.h"
#include "graph/graph.h"
#include "kernels/abi.h"
#include "kernels/device.h"
#include "quant/quant.h"
#include "pocketllm.h"
#include <dlfcn.h>
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#ifndef PL_TEST_CUDA_MODULE_BUILT
#define PL_TEST_CUDA_MODULE_BUILT 0
#endif

#define GUARD 64
#define GUARD_BYTE 0xA5
#define NAN_BYTE 0xFF
#define DST PL_MAX_SRC

static const pl_dtype weight_types[] = {PL_F32,    PL_F16,   PL_BF16,  PL_Q8_0,  PL_Q4_K,  PL_Q6_K,  PL_Q2_K,
                                        PL_Q3_K,   PL_Q5_K,  PL_IQ2_XXS, PL_IQ2_XS, PL_IQ2_S, PL_IQ1_S, PL_IQ1_M,
                                        PL_TQ1_0,  PL_TQ2_0};
#define N_WT (sizeof weight_types / sizeof weight_types[0])

/* ---- the table -------------------------------------------------------------------------------- */

static void test_table(void) {
    const pl_backend *b = &pl_backend_cuda, *ref = pl_backend_find("ref");
    CHECK(!strcmp(b->name, "cuda") && b->summary && !b->awaits && b->probe && b->ctx_create && b->ctx_free,
          "the cuda backend is an implemented backend");
    CHECK(b->n_kernels == 2 * N_WT + 11, "cuda lists %zu kernels", b->n_kernels);
    for (size_t i = 0; i < N_WT; i++) {
        CHECK(pl_backend_supports(b, PL_OP_GET_ROWS, weight_types[i]), "get_rows %s", pl_dtype_name(weight_types[i]));
        CHECK(pl_backend_supports(b, PL_OP_MATMUL, weight_types[i]), "matmul %s", pl_dtype_name(weight_types[i]));
    }
    CHECK(pl_backend_supports(b, PL_OP_RMS_NORM, PL_F32) && pl_backend_supports(b, PL_OP_ADD, PL_F32) &&
              pl_backend_supports(b, PL_OP_SWIGLU, PL_F32) && pl_backend_supports(b, PL_OP_ROPE, PL_F32),
          "f32 elementwise ops");
    CHECK(pl_backend_supports(b, PL_OP_KV_STORE, PL_F16) && pl_backend_supports(b, PL_OP_KV_STORE, PL_F32) &&
              pl_backend_supports(b, PL_OP_ATTENTION, PL_F16) && pl_backend_supports(b, PL_OP_ATTENTION, PL_F32),
          "f16 and f32 KV caches");
    CHECK(!pl_backend_supports(b, PL_OP_MATMUL, PL_IQ3_XXS) && !pl_backend_supports(b, PL_OP_MATMUL, PL_IQ4_XS) &&
              !pl_backend_supports(b, PL_OP_MATMUL, PL_Q4_0),
          "no kernels beyond the listed weight types");
    for (int op = 0; op < PL_OP_COUNT; op++) {
        bool any = false;
        for (size_t i = 0; i < b->n_kernels; i++) any = any || b->kernels[i].op == (pl_op)op;
        /* the MoE ops (qwen3moe) have no cuda kernels yet: models/qwen3moe.c
         * refuses a cuda load naming the op, before any device work */
        const bool moe = op == PL_OP_MOE_TOPK || op == PL_OP_MATMUL_ID || op == PL_OP_MOE_COMBINE;
        if (moe) CHECK(!any, "cuda lists %s: update qwen3moe's refusal and this test", pl_op_name((pl_op)op));
        else CHECK(any, "cuda has no kernel for op %s", pl_op_name((pl_op)op));
    }
    for (size_t i = 0; i < b->n_kernels; i++) {
        const pl_kernel *k = &b->kernels[i];
        const pl_op_schema *s = pl_op_schema_get(k->op);
        CHECK(s && k->run && k->work_size, "kernel %zu well formed", i);
        if (!s) continue;
        const uint64_t km = s->key_operand < 0 ? s->dst_dtypes : s->src_dtypes[s->key_operand];
        CHECK(km & PL_DTMASK(k->key), "%s: key %s allowed by the schema", s->name, pl_dtype_name(k->key));
        CHECK(pl_backend_lookup(b, k->op, k->key) == k, "%s %s dispatches to itself", s->name, pl_dtype_name(k->key));
        CHECK(ref && pl_backend_supports(ref, k->op, k->key), "ref covers %s %s", s->name, pl_dtype_name(k->key));
    }
    const pl_backend *reg = pl_backend_find("cuda");
    CHECK(reg == &pl_backend_cuda, "the registry's cuda is the loader's backend");
    CHECK(b->device && b->device->mem_info && b->device->buffer_alloc && b->device->buffer_free && b->device->upload &&
              b->device->download && b->device->synchronize && b->graph_execute,
          "the cuda backend has device ops and graph_execute");
}

/* ---- loading ------------------------------------------------------------------------------------ */

static bool module_loaded_now(const char *path) {
    void *h = dlopen(path, RTLD_NOW | RTLD_NOLOAD);
    if (h) dlclose(h);
    return h != NULL;
}

/* In a child: load with PL_CUDA_MODULE=env and expect status want and a
 * message containing sub. */
static void expect_load_error(const char *env, pl_status want, const char *sub) {
    fflush(stdout);
    fflush(stderr);
    pid_t pid = fork();
    if (pid == 0) {
        setenv(PL_CUDA_MODULE_ENV, env, 1);
        pl_exec_ctx *ctx = NULL;
        pl_status st = pl_backend_cuda.ctx_create(0, &ctx);
        const bool ok = st == want && !ctx && strstr(pl_last_error(), sub) && strstr(pl_last_error(), "cuda");
        if (!ok) fprintf(stderr, "  child: status %d, message: %s\n", (int)st, pl_last_error());
        else printf("  %s -> %s\n", env, pl_last_error());
        fflush(stdout);
        _exit(ok ? 0 : 1);
    }
    int ws = 0;
    waitpid(pid, &ws, 0);
    CHECK(WIFEXITED(ws) && WEXITSTATUS(ws) == 0, "loading '%s' should fail with '%s' (child %s %d)", env, sub,
          WIFSIGNALED(ws) ? "killed by signal" : "exited", WIFSIGNALED(ws) ? WTERMSIG(ws) : WEXITSTATUS(ws));
}

static void test_loader_errors(void) {
    expect_load_error("/nonexistent/" PL_CUDA_MODULE_FILE, PL_ERR_UNSUPPORTED, "not found");
    char lib[PATH_MAX];
    snprintf(lib, sizeof lib, "%s/../lib/libpocketllm.so", PL_TEST_BIN);
    if (access(lib, R_OK) == 0) expect_load_error(lib, PL_ERR_UNSUPPORTED, "not a PocketLLM CUDA module");
    expect_load_error(pl_fixture("PROVENANCE.md"), PL_ERR_UNSUPPORTED, "cannot load");
}

/* ---- test tensors on host and device --------------------------------------------------------------- */

typedef struct xt {
    pl_tensor h, d;          /* same shape and strides; host / device data */
    unsigned char *hbase;    /* GUARD | span | GUARD */
    unsigned char *dbase;
    size_t span;
} xt;

typedef struct xcase {
    pl_op op;
    pl_dtype key;
    char desc[128];
    pl_node nh, nd;
    xt t[PL_MAX_SRC + 1];
} xcase;

static const pl_cuda_module *g_mod;
static pl_exec_ctx *g_cu, *g_ref;

static size_t span_of(const pl_tensor *t) {
    size_t s = pl_dtype_row_size(t->dtype, t->ne[0]);
    for (int d = 1; d < PL_MAX_DIMS; d++) s += (size_t)(t->ne[d] - 1) * t->nb[d];
    return s;
}

static pl_tensor *mk(xcase *c, int slot, pl_dtype dt, int nd, int64_t ne0, int64_t ne1, int64_t ne2, size_t pad) {
    xt *x = &c->t[slot];
    const int64_t ne[4] = {ne0, ne1, ne2, 1};
    pl_tensor_init(&x->h, dt, nd, ne, NULL);
    if (pad) {
        x->h.nb[1] = pl_dtype_row_size(dt, ne0) + pad;
        x->h.nb[2] = x->h.nb[1] * (size_t)ne1 + pad;
        x->h.nb[3] = x->h.nb[2] * (size_t)ne2 + pad;
    }
    snprintf(x->h.name, sizeof x->h.name, slot == DST ? "dst" : "src%d", slot);
    x->span = span_of(&x->h);
    x->hbase = malloc(x->span + 2 * GUARD);
    memset(x->hbase, GUARD_BYTE, GUARD);
    memset(x->hbase + GUARD, NAN_BYTE, x->span);
    memset(x->hbase + GUARD + x->span, GUARD_BYTE, GUARD);
    x->h.data = x->hbase + GUARD;
    if (slot == DST) c->nh.dst = &x->h;
    else c->nh.src[slot] = &x->h;
    return &x->h;
}

static float *f32p(const pl_tensor *t, int64_t i0, int64_t i1, int64_t i2) {
    return (float *)((char *)pl_tensor_row(t, i1, i2, 0) + i0 * 4);
}

static void fill_f32(pl_tensor *t, pl_rng *r, float sigma) {
    for (int64_t i2 = 0; i2 < t->ne[2]; i2++)
        for (int64_t i1 = 0; i1 < t->ne[1]; i1++) pl_fill_normal(r, f32p(t, 0, i1, i2), t->ne[0], sigma);
}

static void set_i32(pl_tensor *t, int64_t i, int32_t v) { memcpy((char *)t->data + i * 4, &v, 4); }

/* Device copies of every buffer (guards included) and the device node. */
static bool to_device(xcase *c) {
    c->nd = c->nh;
    for (int s = 0; s <= DST; s++) {
        xt *x = &c->t[s];
        if (!x->hbase) continue;
        void *p = NULL;
        if (g_mod->device->buffer_alloc(g_cu, PL_BUF_SCRATCH, x->span + 2 * GUARD, &p) != PL_OK) return false;
        x->dbase = p;
        if (g_mod->device->upload(g_cu, x->dbase, x->hbase, x->span + 2 * GUARD) != PL_OK) return false;
        x->d = x->h;
        x->d.data = x->dbase + GUARD;
        if (s == DST) c->nd.dst = &x->d;
        else c->nd.src[s] = &x->d;
    }
    return true;
}

static void free_case(xcase *c) {
    for (int s = 0; s <= DST; s++) {
        free(c->t[s].hbase);
        if (c->t[s].dbase) g_mod->device->buffer_free(g_cu, c->t[s].dbase);
    }
    memset(c, 0, sizeof *c);
}

static bool guards_ok(const unsigned char *b, size_t span) {
    for (size_t i = 0; i < GUARD; i++)
        if (b[i] != GUARD_BYTE || b[GUARD + span + i] != GUARD_BYTE) return false;
    return true;
}

static float *values(const pl_tensor *shape, const unsigned char *base, int64_t *n) {
    pl_tensor t = *shape;
    t.data = (void *)(base + GUARD);
    *n = pl_tensor_nelements(&t);
    float *v = malloc((size_t)*n * sizeof *v);
    int64_t k = 0;
    for (int64_t i2 = 0; i2 < t.ne[2]; i2++)
        for (int64_t i1 = 0; i1 < t.ne[1]; i1++, k += t.ne[0])
            pl_dequantize_row(t.dtype, pl_tensor_row(&t, i1, i2, 0), v + k, t.ne[0]);
    return v;
}

static double threshold(pl_op op, pl_dtype key) {
    if ((op == PL_OP_MATMUL || op == PL_OP_ATTENTION) && key != PL_F32) return 5e-4;
    return 1e-7;
}

typedef struct stats { int cases, failed; double worst; } stats;

/* Runs ref on the host buffers and cuda on the device buffers; compares. */
static void run_xcase(xcase *c, stats *stt) {
    const pl_backend *ref = pl_backend_find("ref");
    const pl_kernel *rk = pl_backend_lookup(ref, c->op, c->key);
    CHECK(pl_node_validate(&c->nh) == PL_OK, "harness built an invalid node [%s]: %s", c->desc, pl_last_error());
    if (!to_device(c)) {
        CHECK(0, "%s %s [%s]: device buffers: %s", pl_op_name(c->op), pl_dtype_name(c->key), c->desc, pl_last_error());
        return;
    }
    xt *dx = &c->t[DST];
    /* ref, on the host */
    size_t rws = rk->work_size ? rk->work_size(&c->nh, 1) : 0;
    void *rwork = malloc(rws + 1);
    g_ref->work = rwork;
    g_ref->work_size = rws;
    pl_status rst = rk->run(g_ref, &c->nh);
    g_ref->work = NULL;
    g_ref->work_size = 0;
    free(rwork);
    CHECK(rst == PL_OK, "ref %s [%s]: %s", pl_op_name(c->op), c->desc, pl_last_error());
    /* cuda */
    const size_t ws = g_mod->work_size(&c->nd, 1);
    void *work = NULL;
    unsigned char *wguard = calloc(1, ws + 2 * GUARD);
    memset(wguard, GUARD_BYTE, ws + 2 * GUARD);
    pl_status st = g_mod->device->buffer_alloc(g_cu, PL_BUF_SCRATCH, ws + 2 * GUARD, &work);
    if (st == PL_OK) st = g_mod->device->upload(g_cu, work, wguard, ws + 2 * GUARD);
    g_cu->work = ws ? (unsigned char *)work + GUARD : NULL;
    g_cu->work_size = ws;
    if (st == PL_OK) st = g_mod->run(g_cu, &c->nd);
    unsigned char *out = malloc(dx->span + 2 * GUARD);
    pl_status dst_st = g_mod->device->download(g_cu, out, dx->dbase, dx->span + 2 * GUARD);
    if (st == PL_OK) st = dst_st;
    CHECK(st == PL_OK, "cuda %s %s [%s]: %s", pl_op_name(c->op), pl_dtype_name(c->key), c->desc, pl_last_error());
    bool ok = st == PL_OK && rst == PL_OK;
    if (work) {
        g_mod->device->download(g_cu, wguard, work, ws + 2 * GUARD);
        if (!guards_ok(wguard, ws)) {
            CHECK(0, "cuda %s [%s]: wrote outside its %zu-byte work buffer", pl_op_name(c->op), c->desc, ws);
            ok = false;
        }
        g_mod->device->buffer_free(g_cu, work);
    }
    g_cu->work = NULL;
    g_cu->work_size = 0;
    free(wguard);
    if (!guards_ok(out, dx->span)) {
        CHECK(0, "cuda %s [%s]: wrote outside its output", pl_op_name(c->op), c->desc);
        ok = false;
    }
    for (int s = 0; s < PL_MAX_SRC; s++) {
        xt *x = &c->t[s];
        if (!x->dbase) continue;
        unsigned char *back = malloc(x->span + 2 * GUARD);
        g_mod->device->download(g_cu, back, x->dbase, x->span + 2 * GUARD);
        if (memcmp(back, x->hbase, x->span + 2 * GUARD)) {
            CHECK(0, "cuda %s [%s]: modified input src%d", pl_op_name(c->op), c->desc, s);
            ok = false;
        }
        free(back);
    }
    /* Bytes between the rows of a strided output (a KV cache) are left alone:
     * the ref's rows put into the device result must give the ref's buffer. */
    unsigned char *chk = malloc(dx->span + 2 * GUARD);
    memcpy(chk, out, dx->span + 2 * GUARD);
    const size_t rs = pl_dtype_row_size(dx->h.dtype, dx->h.ne[0]);
    for (int64_t i2 = 0; i2 < dx->h.ne[2]; i2++)
        for (int64_t i1 = 0; i1 < dx->h.ne[1]; i1++) {
            const size_t off = GUARD + (size_t)i1 * dx->h.nb[1] + (size_t)i2 * dx->h.nb[2];
            memcpy(chk + off, dx->hbase + off, rs);
        }
    if (memcmp(chk, dx->hbase, dx->span + 2 * GUARD)) {
        CHECK(0, "cuda %s [%s]: wrote between the rows of its output", pl_op_name(c->op), c->desc);
        ok = false;
    }
    free(chk);
    int64_t na, nb;
    float *va = values(&dx->h, out, &na), *vb = values(&dx->h, dx->hbase, &nb);
    const double e = pl_nmse(va, vb, na), thr = threshold(c->op, c->key);
    CHECK(e <= thr, "cuda %s %s [%s]: NMSE %.3e > %.1e", pl_op_name(c->op), pl_dtype_name(c->key), c->desc, e, thr);
    if (getenv("PL_TEST_VERBOSE"))
        printf("    %s %s [%s]: NMSE %.3e\n", pl_op_name(c->op), pl_dtype_name(c->key), c->desc, e);
    stt->cases++;
    stt->failed += !(ok && e <= thr);
    if (e > stt->worst || e != e) stt->worst = e;
    free(va);
    free(vb);
    free(out);
}

static xcase *new_case(xcase *c, pl_op op, pl_dtype key) {
    memset(c, 0, sizeof *c);
    c->op = op;
    c->key = key;
    c->nh.op = op;
    return c;
}

/* ---- op cases ------------------------------------------------------------------------------------ */

static void cases_matmul(pl_dtype key, pl_rng *r, stats *st) {
    const int64_t bs = pl_dtype_get(key)->block_size;
    const int64_t Ks[] = {bs == 1 ? 33 : bs == 32 ? 64 : 256, 512, 2048};
    const int64_t Ns[] = {1, 17, 130};
    const int64_t Ms[] = {1, 2, 3, 8, 9, 70};
    for (int ki = 0; ki < 3; ki++)
        for (int ni = 0; ni < 3; ni++)
            for (int mi = 0; mi < 6; mi++) {
                const int64_t K = Ks[ki], N = Ns[ni], M = Ms[mi];
                const size_t xpad = (mi % 2) ? 16 : 0, wpad = (ni == 1 && mi == 2) ? 8 : 0;
                xcase c;
                new_case(&c, PL_OP_MATMUL, key);
                snprintf(c.desc, sizeof c.desc, "K=%lld N=%lld M=%lld%s%s", (long long)K, (long long)N, (long long)M,
                         xpad ? " x-strided" : "", wpad ? " W-strided" : "");
                pl_fill_rows(mk(&c, 0, key, 2, K, N, 1, wpad), r, 1.0f);
                fill_f32(mk(&c, 1, PL_F32, 2, K, M, 1, xpad), r, 1.0f);
                mk(&c, DST, PL_F32, 2, N, M, 1, 0);
                run_xcase(&c, st);
                free_case(&c);
            }
    /* split-K: few long rows */
    const int64_t Ms2[] = {1, 4, 40};
    for (int mi = 0; mi < 3; mi++) {
        xcase c;
        new_case(&c, PL_OP_MATMUL, key);
        snprintf(c.desc, sizeof c.desc, "K=8192 N=5 M=%lld (split-K)", (long long)Ms2[mi]);
        pl_fill_rows(mk(&c, 0, key, 2, 8192, 5, 1, 0), r, 1.0f);
        fill_f32(mk(&c, 1, PL_F32, 2, 8192, Ms2[mi], 1, 0), r, 1.0f);
        mk(&c, DST, PL_F32, 2, 5, Ms2[mi], 1, 0);
        run_xcase(&c, st);
        free_case(&c);
    }
}

static void cases_get_rows(pl_dtype key, pl_rng *r, stats *st) {
    const int64_t bs = pl_dtype_get(key)->block_size;
    const int64_t Cs[] = {bs == 1 ? 33 : bs == 32 ? 96 : 768, 1024};
    const int64_t ns[] = {1, 7, 33};
    for (int ci = 0; ci < 2; ci++)
        for (int ni = 0; ni < 3; ni++) {
            const int64_t C = Cs[ci], R = 13, n = ns[ni];
            const size_t pad = (ci + ni) % 2 ? 8 : 0;
            xcase c;
            new_case(&c, PL_OP_GET_ROWS, key);
            snprintf(c.desc, sizeof c.desc, "C=%lld n=%lld%s", (long long)C, (long long)n, pad ? " strided" : "");
            pl_fill_rows(mk(&c, 0, key, 2, C, R, 1, pad), r, 1.0f);
            pl_tensor *ids = mk(&c, 1, PL_I32, 1, n, 1, 1, 0);
            for (int64_t i = 0; i < n; i++) set_i32(ids, i, i == 0 ? (int32_t)(R - 1) : (int32_t)pl_rng_int(r, 0, R - 1));
            mk(&c, DST, PL_F32, 2, C, n, 1, 0);
            run_xcase(&c, st);
            free_case(&c);
        }
}

static void cases_small(pl_rng *r, stats *st) {
    static const int64_t nshapes[][3] = {{64, 1, 1}, {128, 48, 1}, {1000, 3, 1}, {128, 4, 3}, {4096, 3, 1}};
    for (int i = 0; i < 5; i++) {
        xcase c;
        new_case(&c, PL_OP_RMS_NORM, PL_F32);
        const size_t pad = i % 2 ? 12 : 0;
        const int nd = nshapes[i][2] > 1 ? 3 : 2;
        snprintf(c.desc, sizeof c.desc, "[%lld, %lld, %lld]%s", (long long)nshapes[i][0], (long long)nshapes[i][1],
                 (long long)nshapes[i][2], pad ? " strided" : "");
        fill_f32(mk(&c, 0, PL_F32, nd, nshapes[i][0], nshapes[i][1], nshapes[i][2], pad), r, 2.0f);
        pl_tensor *w = mk(&c, 1, PL_F32, 1, nshapes[i][0], 1, 1, 0);
        pl_fill_unif(r, w->data, nshapes[i][0], 0.5f, 1.5f);
        mk(&c, DST, PL_F32, nd, nshapes[i][0], nshapes[i][1], nshapes[i][2], 0);
        c.nh.fparams[0] = i % 2 ? 1e-5f : 1e-6f;
        run_xcase(&c, st);
        free_case(&c);
    }
    static const int64_t ashapes[][2] = {{1, 1}, {17, 7}, {1024, 33}};
    for (int i = 0; i < 3; i++)
        for (int bc = 0; bc < 2; bc++) {
            xcase c;
            new_case(&c, PL_OP_ADD, PL_F32);
            const size_t pad = (i + bc) % 2 ? 8 : 0;
            snprintf(c.desc, sizeof c.desc, "[%lld, %lld]%s%s", (long long)ashapes[i][0], (long long)ashapes[i][1],
                     bc ? " broadcast" : "", pad ? " strided" : "");
            fill_f32(mk(&c, 0, PL_F32, 2, ashapes[i][0], ashapes[i][1], 1, pad), r, 1.0f);
            fill_f32(mk(&c, 1, PL_F32, bc ? 1 : 2, ashapes[i][0], bc ? 1 : ashapes[i][1], 1, bc ? 0 : 4), r, 1.0f);
            mk(&c, DST, PL_F32, 2, ashapes[i][0], ashapes[i][1], 1, 0);
            run_xcase(&c, st);
            free_case(&c);

            new_case(&c, PL_OP_SWIGLU, PL_F32);
            snprintf(c.desc, sizeof c.desc, "[%lld, %lld]%s", (long long)ashapes[i][0], (long long)ashapes[i][1],
                     pad ? " strided" : "");
            fill_f32(mk(&c, 0, PL_F32, 2, ashapes[i][0], ashapes[i][1], 1, pad), r, 4.0f);
            fill_f32(mk(&c, 1, PL_F32, 2, ashapes[i][0], ashapes[i][1], 1, 0), r, 1.0f);
            mk(&c, DST, PL_F32, 2, ashapes[i][0], ashapes[i][1], 1, 0);
            run_xcase(&c, st);
            free_case(&c);
        }
    static const int rcfg[][5] = {
        {64, 1, 1, 64, 0}, {128, 4, 7, 128, 2}, {128, 4, 7, 64, 0}, {64, 2, 33, 32, 2}, {128, 16, 3, 128, 2}, {8, 3, 5, 8, 0},
    };
    for (int i = 0; i < 6; i++) {
        xcase c;
        new_case(&c, PL_OP_ROPE, PL_F32);
        const int64_t hd = rcfg[i][0], nh = rcfg[i][1], nt = rcfg[i][2];
        const size_t pad = i % 3 == 1 ? 16 : 0;
        c.nh.iparams[0] = rcfg[i][3];
        c.nh.iparams[1] = rcfg[i][4];
        c.nh.fparams[0] = i % 2 ? 1000000.0f : 10000.0f;
        c.nh.fparams[1] = i == 3 ? 0.25f : 1.0f;
        snprintf(c.desc, sizeof c.desc, "[%lld, %lld, %lld] n_rot=%d %s%s", (long long)hd, (long long)nh, (long long)nt,
                 rcfg[i][3], rcfg[i][4] ? "neox" : "normal", pad ? " strided" : "");
        fill_f32(mk(&c, 0, PL_F32, 3, hd, nh, nt, pad), r, 1.0f);
        pl_tensor *pos = mk(&c, 1, PL_I32, 1, nt, 1, 1, 0);
        for (int64_t t = 0; t < nt; t++) set_i32(pos, t, t == 0 ? 0 : t == 1 ? 1 : (int32_t)pl_rng_int(r, 0, 40000));
        mk(&c, DST, PL_F32, 3, hd, nh, nt, 0);
        run_xcase(&c, st);
        free_case(&c);
    }
}

static void pick_slots(pl_rng *r, pl_tensor *pos, pl_tensor *seq, int64_t n_tok, int64_t n_ctx, int64_t n_seq,
                       bool prefill) {
    const int64_t p0 = prefill ? pl_rng_int(r, 0, n_ctx - n_tok) : 0;
    bool *used = calloc((size_t)(n_ctx * n_seq), 1);
    for (int64_t t = 0; t < n_tok; t++) {
        int32_t p, s;
        if (prefill) {
            p = (int32_t)(p0 + t);
            s = 0;
        } else {
            do {
                p = (int32_t)pl_rng_int(r, 0, n_ctx - 1);
                s = (int32_t)pl_rng_int(r, 0, n_seq - 1);
            } while (used[s * n_ctx + p]);
        }
        used[s * n_ctx + p] = true;
        set_i32(pos, t, p);
        set_i32(seq, t, s);
    }
    free(used);
}

static void cases_cache(pl_dtype key, pl_rng *r, stats *st) {
    static const int64_t kcfg[][3] = {{64, 1, 0}, {256, 7, 1}, {128, 33, 0}, {1024, 5, 1}};
    for (int i = 0; i < 4; i++) {
        xcase c;
        new_case(&c, PL_OP_KV_STORE, key);
        const int64_t kv_dim = kcfg[i][0], nt = kcfg[i][1], n_ctx = 48, n_seq = 3;
        const size_t pad = i == 2 ? 32 : 0;
        snprintf(c.desc, sizeof c.desc, "kv_dim=%lld n_tok=%lld %s%s", (long long)kv_dim, (long long)nt,
                 kcfg[i][2] ? "prefill" : "scattered", pad ? " cache-strided" : "");
        fill_f32(mk(&c, 0, PL_F32, 2, kv_dim, nt, 1, i == 3 ? 8 : 0), r, 3.0f);
        pick_slots(r, mk(&c, 1, PL_I32, 1, nt, 1, 1, 0), mk(&c, 2, PL_I32, 1, nt, 1, 1, 0), nt, n_ctx, n_seq, kcfg[i][2]);
        pl_fill_rows(mk(&c, DST, key, 3, kv_dim, n_ctx, n_seq, pad), r, 1.0f);
        run_xcase(&c, st);
        free_case(&c);
    }
    static const int acfg[][7] = {
        /* head_dim, n_head, n_kv_head, n_tok, prefill, n_ctx, q pad */
        {64, 4, 2, 1, 0, 48, 24},   {128, 4, 1, 7, 1, 48, 0},    {64, 8, 8, 7, 0, 48, 24},
        {128, 16, 8, 33, 1, 48, 0}, {32, 6, 3, 2, 1, 48, 0},     {96, 4, 2, 3, 0, 48, 0},
        {256, 8, 2, 2, 0, 64, 0},   {128, 16, 8, 1, 0, 1000, 0}, {128, 32, 8, 2, 0, 700, 8},
        {128, 16, 8, 64, 1, 300, 0},
    };
    for (int i = 0; i < 10; i++) {
        xcase c;
        new_case(&c, PL_OP_ATTENTION, key);
        const int64_t hd = acfg[i][0], nh = acfg[i][1], nkv = acfg[i][2], nt = acfg[i][3], n_ctx = acfg[i][5];
        const int64_t n_seq = 2;
        c.nh.iparams[0] = (int32_t)nkv;
        c.nh.fparams[0] = 1.0f / sqrtf((float)hd);
        snprintf(c.desc, sizeof c.desc, "head_dim=%lld n_head=%lld n_kv=%lld n_tok=%lld n_ctx=%lld %s", (long long)hd,
                 (long long)nh, (long long)nkv, (long long)nt, (long long)n_ctx, acfg[i][4] ? "prefill" : "scattered");
        fill_f32(mk(&c, 0, PL_F32, 3, hd, nh, nt, (size_t)acfg[i][6]), r, 1.0f);
        pl_fill_rows(mk(&c, 1, key, 3, nkv * hd, n_ctx, n_seq, i == 4 ? 16 : 0), r, 1.0f);
        pl_fill_rows(mk(&c, 2, key, 3, nkv * hd, n_ctx, n_seq, i == 4 ? 16 : 0), r, 1.0f);
        pick_slots(r, mk(&c, 3, PL_I32, 1, nt, 1, 1, 0), mk(&c, 4, PL_I32, 1, nt, 1, 1, 0), nt, n_ctx, n_seq, acfg[i][4]);
        mk(&c, DST, PL_F32, 2, hd * nh, nt, 1, 0);
        run_xcase(&c, st);
        free_case(&c);
    }
}

static void test_ops_on_gpu(void) {
    const pl_backend *b = &pl_backend_cuda;
    for (size_t i = 0; i < b->n_kernels; i++) {
        const pl_kernel *k = &b->kernels[i];
        stats st = {0, 0, 0.0};
        pl_rng r = {0xC0DA0000u + (uint64_t)k->op * 977 + (uint64_t)k->key};
        switch (k->op) {
        case PL_OP_MATMUL: cases_matmul(k->key, &r, &st); break;
        case PL_OP_GET_ROWS: cases_get_rows(k->key, &r, &st); break;
        case PL_OP_KV_STORE: case PL_OP_ATTENTION:
            if (k->op == PL_OP_ATTENTION) break;   /* both cache ops run with KV_STORE's entry */
            cases_cache(k->key, &r, &st);
            break;
        case PL_OP_RMS_NORM: cases_small(&r, &st); break;
        default: continue;
        }
        if (st.cases)
            printf("  %-10s %-5s %3d cases, %d failed, worst NMSE %.2e\n", k->op == PL_OP_KV_STORE ? "kv+attn" :
                   k->op == PL_OP_RMS_NORM ? "elementwise" : pl_op_name(k->op), pl_dtype_name(k->key), st.cases,
                   st.failed, st.worst);
    }
}

/* ---- graphs: capture and replay with new inputs ------------------------------------------------------- */

static void *dev_alloc(size_t n) {
    void *p = NULL;
    CHECK(g_mod->device->buffer_alloc(g_cu, PL_BUF_SCRATCH, n, &p) == PL_OK, "alloc %zu: %s", n, pl_last_error());
    return p;
}

/* A decode step's attention as positions advance: kv_store K, kv_store V,
 * attention, run as one captured graph 6 times with new q/k/v/pos; the same
 * on the host with ref. */
static void test_graph_decode(void) {
    const int64_t D = 64, H = 4, G = 2, n_ctx = 16;
    const pl_backend *ref = pl_backend_find("ref");
    pl_rng r = {4242};
    pl_tensor hq, hk, hv, hpos, hseq, hkc, hvc, hout, dq, dk, dv, dpos, dseq, dkc, dvc, dout;
    float *q = malloc(D * H * 4), *k = malloc(D * G * 4), *v = malloc(D * G * 4), *out = malloc(D * H * 4);
    float *kc = calloc((size_t)(D * G * n_ctx), 2), *vc = calloc((size_t)(D * G * n_ctx), 2);
    int32_t pos = 0, seq = 0;
    float *gout = malloc(D * H * 4);
    pl_tensor_init(&hq, PL_F32, 3, (int64_t[]){D, H, 1}, q);
    pl_tensor_init(&hk, PL_F32, 2, (int64_t[]){D * G, 1}, k);
    pl_tensor_init(&hv, PL_F32, 2, (int64_t[]){D * G, 1}, v);
    pl_tensor_init(&hpos, PL_I32, 1, (int64_t[]){1}, &pos);
    pl_tensor_init(&hseq, PL_I32, 1, (int64_t[]){1}, &seq);
    pl_tensor_init(&hkc, PL_F16, 3, (int64_t[]){D * G, n_ctx, 1}, kc);
    pl_tensor_init(&hvc, PL_F16, 3, (int64_t[]){D * G, n_ctx, 1}, vc);
    pl_tensor_init(&hout, PL_F32, 2, (int64_t[]){D * H, 1}, out);
    dq = hq; dk = hk; dv = hv; dpos = hpos; dseq = hseq; dkc = hkc; dvc = hvc; dout = hout;
    dq.data = dev_alloc(D * H * 4);
    dk.data = dev_alloc(D * G * 4);
    dv.data = dev_alloc(D * G * 4);
    dpos.data = dev_alloc(4);
    dseq.data = dev_alloc(4);
    CHECK(g_mod->device->buffer_alloc(g_cu, PL_BUF_KV, (size_t)(D * G * n_ctx) * 2, &dkc.data) == PL_OK, "kv alloc");
    CHECK(g_mod->device->buffer_alloc(g_cu, PL_BUF_KV, (size_t)(D * G * n_ctx) * 2, &dvc.data) == PL_OK, "kv alloc");
    dout.data = dev_alloc(D * H * 4);
    pl_node nh[3], nd[3];
    memset(nh, 0, sizeof nh);
    nh[0].op = PL_OP_KV_STORE; nh[0].src[0] = &hk; nh[0].src[1] = &hpos; nh[0].src[2] = &hseq; nh[0].dst = &hkc;
    nh[1].op = PL_OP_KV_STORE; nh[1].src[0] = &hv; nh[1].src[1] = &hpos; nh[1].src[2] = &hseq; nh[1].dst = &hvc;
    nh[2].op = PL_OP_ATTENTION; nh[2].src[0] = &hq; nh[2].src[1] = &hkc; nh[2].src[2] = &hvc; nh[2].src[3] = &hpos;
    nh[2].src[4] = &hseq; nh[2].dst = &hout; nh[2].iparams[0] = (int32_t)G; nh[2].fparams[0] = 0.125f;
    memcpy(nd, nh, sizeof nh);
    nd[0].src[0] = &dk; nd[0].src[1] = &dpos; nd[0].src[2] = &dseq; nd[0].dst = &dkc;
    nd[1].src[0] = &dv; nd[1].src[1] = &dpos; nd[1].src[2] = &dseq; nd[1].dst = &dvc;
    nd[2].src[0] = &dq; nd[2].src[1] = &dkc; nd[2].src[2] = &dvc; nd[2].src[3] = &dpos; nd[2].src[4] = &dseq; nd[2].dst = &dout;
    for (int i = 0; i < 3; i++) CHECK(pl_node_validate(&nh[i]) == PL_OK, "graph node %d: %s", i, pl_last_error());
    const size_t ws = g_mod->work_size(&nd[2], 1);
    void *work = dev_alloc(ws + 256);
    g_cu->work = work;
    g_cu->work_size = ws + 256;
    pl_graph g;
    memset(&g, 0, sizeof g);
    g.nodes = nd;
    g.n_nodes = 3;
    double worst = 0;
    for (int step = 0; step < 6; step++) {
        pos = step;
        pl_fill_normal(&r, q, D * H, 1.0f);
        pl_fill_normal(&r, k, D * G, 1.0f);
        pl_fill_normal(&r, v, D * G, 1.0f);
        g_mod->device->upload(g_cu, dq.data, q, D * H * 4);
        g_mod->device->upload(g_cu, dk.data, k, D * G * 4);
        g_mod->device->upload(g_cu, dv.data, v, D * G * 4);
        g_mod->device->upload(g_cu, dpos.data, &pos, 4);
        g_mod->device->upload(g_cu, dseq.data, &seq, 4);
        pl_status st = g_mod->graph_execute(g_cu, &g);
        CHECK(st == PL_OK, "graph step %d: %s", step, pl_last_error());
        st = g_mod->device->download(g_cu, gout, dout.data, D * H * 4);
        CHECK(st == PL_OK, "graph download %d: %s", step, pl_last_error());
        void *rw = malloc(1 << 16);
        g_ref->work = rw;
        g_ref->work_size = 1 << 16;
        for (int i = 0; i < 3; i++) pl_backend_lookup(ref, nh[i].op, pl_node_key_dtype(&nh[i]))->run(g_ref, &nh[i]);
        g_ref->work = NULL;
        g_ref->work_size = 0;
        free(rw);
        const double e = pl_nmse(gout, out, D * H);
        CHECK(e <= 5e-4, "graph replay step %d (pos %d): NMSE %.3e", step, pos, e);
        if (e > worst) worst = e;
    }
    printf("  graph capture/replay, kv_store + attention over 6 positions: worst NMSE %.2e\n", worst);
    g_cu->work = NULL;
    g_cu->work_size = 0;
    void *bufs[] = {dq.data, dk.data, dv.data, dpos.data, dseq.data, dkc.data, dvc.data, dout.data, work};
    for (size_t i = 0; i < sizeof bufs / sizeof bufs[0]; i++) g_mod->device->buffer_free(g_cu, bufs[i]);
    free(q); free(k); free(v); free(out); free(kc); free(vc); free(gout);
}

/* rms_norm then four matmuls reading its output (q4_K, f16, q6_K, q8_0 with
 * M = 2): the quantized activations are made once and reused across the
 * float matmul in between; run as a captured graph twice with new inputs. */
static void test_graph_matmuls(void) {
    const int64_t K = 512, N = 96, M = 2;
    const pl_dtype wt[4] = {PL_Q4_K, PL_F16, PL_Q6_K, PL_Q8_0};
    const pl_backend *ref = pl_backend_find("ref");
    pl_rng r = {777};
    pl_tensor hx, hw, hh, dx, dw, dh, hW[4], dW[4], hy[4], dy[4];
    float *x = malloc(K * M * 4), *w = malloc(K * 4), *h = malloc(K * M * 4), *y[4], *gy = malloc(N * M * 4);
    pl_fill_normal(&r, x, K * M, 2.0f);
    pl_fill_unif(&r, w, K, 0.5f, 1.5f);
    pl_tensor_init(&hx, PL_F32, 2, (int64_t[]){K, M}, x);
    pl_tensor_init(&hw, PL_F32, 1, (int64_t[]){K}, w);
    pl_tensor_init(&hh, PL_F32, 2, (int64_t[]){K, M}, h);
    dx = hx; dw = hw; dh = hh;
    dx.data = dev_alloc(K * M * 4);
    dw.data = dev_alloc(K * 4);
    dh.data = dev_alloc(K * M * 4);
    g_mod->device->upload(g_cu, dw.data, w, K * 4);
    pl_node nh[5], nd[5];
    memset(nh, 0, sizeof nh);
    nh[0].op = PL_OP_RMS_NORM; nh[0].src[0] = &hx; nh[0].src[1] = &hw; nh[0].dst = &hh; nh[0].fparams[0] = 1e-6f;
    size_t ws = 0;
    for (int i = 0; i < 4; i++) {
        pl_tensor_init(&hW[i], wt[i], 2, (int64_t[]){K, N}, malloc(pl_dtype_row_size(wt[i], K) * N));
        pl_fill_rows(&hW[i], &r, 1.0f);
        y[i] = malloc(N * M * 4);
        pl_tensor_init(&hy[i], PL_F32, 2, (int64_t[]){N, M}, y[i]);
        dW[i] = hW[i];
        dW[i].data = dev_alloc(pl_tensor_nbytes(&hW[i]));
        g_mod->device->upload(g_cu, dW[i].data, hW[i].data, pl_tensor_nbytes(&hW[i]));
        dy[i] = hy[i];
        dy[i].data = dev_alloc(N * M * 4);
        nh[i + 1].op = PL_OP_MATMUL; nh[i + 1].src[0] = &hW[i]; nh[i + 1].src[1] = &hh; nh[i + 1].dst = &hy[i];
    }
    memcpy(nd, nh, sizeof nh);
    nd[0].src[0] = &dx; nd[0].src[1] = &dw; nd[0].dst = &dh;
    for (int i = 0; i < 4; i++) {
        nd[i + 1].src[0] = &dW[i]; nd[i + 1].src[1] = &dh; nd[i + 1].dst = &dy[i];
        const size_t s = g_mod->work_size(&nd[i + 1], 1);
        if (s > ws) ws = s;
    }
    void *work = dev_alloc(ws + 256);
    g_cu->work = work;
    g_cu->work_size = ws + 256;
    pl_graph g;
    memset(&g, 0, sizeof g);
    g.nodes = nd;
    g.n_nodes = 5;
    double worst = 0;
    for (int rep = 0; rep < 3; rep++) {
        if (rep) pl_fill_normal(&r, x, K * M, 2.0f);
        g_mod->device->upload(g_cu, dx.data, x, K * M * 4);
        CHECK(g_mod->graph_execute(g_cu, &g) == PL_OK, "matmul graph: %s", pl_last_error());
        void *rw = malloc(K * 4);
        g_ref->work = rw;
        g_ref->work_size = K * 4;
        for (int i = 0; i < 5; i++) pl_backend_lookup(ref, nh[i].op, pl_node_key_dtype(&nh[i]))->run(g_ref, &nh[i]);
        g_ref->work = NULL;
        g_ref->work_size = 0;
        free(rw);
        for (int i = 0; i < 4; i++) {
            CHECK(g_mod->device->download(g_cu, gy, dy[i].data, N * M * 4) == PL_OK, "download: %s", pl_last_error());
            const double e = pl_nmse(gy, y[i], N * M);
            CHECK(e <= 5e-4, "graph matmul %s, run %d: NMSE %.3e", pl_dtype_name(wt[i]), rep, e);
            if (e > worst) worst = e;
        }
    }
    printf("  graph capture/replay, rms_norm + 4 matmuls sharing activations: worst NMSE %.2e\n", worst);
    g_cu->work = NULL;
    g_cu->work_size = 0;
    g_mod->device->buffer_free(g_cu, work);
    g_mod->device->buffer_free(g_cu, dx.data);
    g_mod->device->buffer_free(g_cu, dw.data);
    g_mod->device->buffer_free(g_cu, dh.data);
    for (int i = 0; i < 4; i++) {
        g_mod->device->buffer_free(g_cu, dW[i].data);
        g_mod->device->buffer_free(g_cu, dy[i].data);
        free(hW[i].data);
        free(y[i]);
    }
    free(x); free(w); free(h); free(gy);
}

/* An id outside the table is caught on the device, reported by the next
 * download, and cleared after. */
static void test_device_status(void) {
    float table[4 * 32], out[32];
    for (int i = 0; i < 4 * 32; i++) table[i] = (float)i;
    int32_t id = 4;
    pl_tensor t, ids, dst;
    pl_tensor_init(&t, PL_F32, 2, (int64_t[]){32, 4}, dev_alloc(sizeof table));
    pl_tensor_init(&ids, PL_I32, 1, (int64_t[]){1}, dev_alloc(4));
    pl_tensor_init(&dst, PL_F32, 2, (int64_t[]){32, 1}, dev_alloc(sizeof out));
    g_mod->device->upload(g_cu, t.data, table, sizeof table);
    g_mod->device->upload(g_cu, ids.data, &id, 4);
    pl_node n;
    memset(&n, 0, sizeof n);
    n.op = PL_OP_GET_ROWS;
    n.src[0] = &t;
    n.src[1] = &ids;
    n.dst = &dst;
    CHECK(g_mod->run(g_cu, &n) == PL_OK, "launch");
    pl_status st = g_mod->device->download(g_cu, out, dst.data, sizeof out);
    CHECK(st == PL_ERR_INVALID_ARG && strstr(pl_last_error(), "get_rows"), "bad id reported: %d %s", (int)st,
          pl_last_error());
    CHECK(g_mod->device->synchronize(g_cu) == PL_OK, "status cleared: %s", pl_last_error());
    id = 2;
    g_mod->device->upload(g_cu, ids.data, &id, 4);
    CHECK(g_mod->run(g_cu, &n) == PL_OK, "launch");
    CHECK(g_mod->device->download(g_cu, out, dst.data, sizeof out) == PL_OK && out[5] == 69.0f, "good id after a bad one");
    g_mod->device->buffer_free(g_cu, t.data);
    g_mod->device->buffer_free(g_cu, ids.data);
    g_mod->device->buffer_free(g_cu, dst.data);
}

/* ---- the engine's path ------------------------------------------------------------------------------ */

static void test_model_on_cuda(bool have_gpu) {
    const char *path = pl_fixture("models/tiny-qwen3-q4_k_m.gguf");
    if (access(path, R_OK) != 0) {
        printf("  (no %s: model checks skipped)\n", path);
        return;
    }
    pl_model_params mp = pl_model_default_params();
    mp.device = "cuda";
    mp.n_ctx = 64;
    pl_model *m = NULL;
    pl_status st = pl_model_load(path, &mp, &m);
    if (st != PL_OK) {
        printf("  load on cuda: %s\n", pl_last_error());
        CHECK(!have_gpu, "a GPU is here, but loading failed: %s", pl_last_error());
        CHECK(st == PL_ERR_UNSUPPORTED && strstr(pl_last_error(), "cuda") && !strchr(pl_last_error(), '\n'),
              "clear one-line error for --device cuda: %d %s", (int)st, pl_last_error());
        CHECK(m == NULL, "no model on failure");
        return;
    }
    CHECK(have_gpu, "loaded on cuda without a GPU?");
    /* A plan larger than the device (a 2^24-token context x 64 slots: about
     * 2 TiB of KV cache for this model): refused before any allocation,
     * naming the device and the byte breakdown. */
    pl_model_params big = mp;
    big.n_ctx = 1 << 24;
    big.n_seq = 64;
    big.n_batch = 64;
    pl_model *mb = NULL;
    pl_status bst = pl_model_load(path, &big, &mb);
    CHECK(bst == PL_ERR_DOES_NOT_FIT && !mb && strstr(pl_last_error(), "'cuda'") &&
              strstr(pl_last_error(), "KV cache") && strstr(pl_last_error(), "MiB free"),
          "a model larger than the GPU: %d %s", (int)bst, pl_last_error());
    printf("  too large for the GPU: %s\n", pl_last_error());
    pl_model_free(mb);
    /* Integrated and on a GPU: a few decode steps against cpu. */
    pl_model_params cp = mp;
    cp.device = "cpu";
    pl_model *mc = NULL;
    CHECK(pl_model_load(path, &cp, &mc) == PL_OK, "cpu load: %s", pl_last_error());
    const int nv = pl_model_n_vocab(m);
    float *a = malloc((size_t)nv * 4), *b = malloc((size_t)nv * 4);
    pl_session *sa = NULL, *sb = NULL;
    pl_session_create(m, &sa);
    pl_session_create(mc, &sb);
    int32_t toks[16] = {9707, 11, 1879, 0, 220, 16, 17, 18, 5, 77, 300, 4000, 12, 13, 14, 15};
    double worst = 0;
    for (int i = 0; i < 16; i++) toks[i] %= nv;
    /* a 12-token prefill (the GEMM path), then single tokens (GEMV, captured graphs) */
    CHECK(sa && sb && pl_session_eval(sa, toks, 12, a) == PL_OK, "cuda prefill: %s", pl_last_error());
    CHECK(sa && sb && pl_session_eval(sb, toks, 12, b) == PL_OK, "cpu prefill: %s", pl_last_error());
    for (int j = 0; j < nv; j++)
        if (fabs((double)a[j] - b[j]) > worst) worst = fabs((double)a[j] - b[j]);
    for (int i = 12; i < 16 && sa && sb; i++) {
        CHECK(pl_session_eval(sa, &toks[i], 1, a) == PL_OK, "cuda eval: %s", pl_last_error());
        CHECK(pl_session_eval(sb, &toks[i], 1, b) == PL_OK, "cpu eval: %s", pl_last_error());
        for (int j = 0; j < nv; j++)
            if (fabs((double)a[j] - b[j]) > worst) worst = fabs((double)a[j] - b[j]);
    }
    CHECK(worst < 0.5, "tiny q4_K model: cuda vs cpu max |dlogit| %.4f", worst);
    printf("  tiny-qwen3-q4_k_m on cuda vs cpu, 12-token prefill + 4 decode steps: max |dlogit| %.4f\n", worst);
    pl_session_free(sa);
    pl_session_free(sb);
    free(a);
    free(b);
    pl_model_free(m);
    pl_model_free(mc);
}

/* `pocketllm run --device cuda`: exits cleanly (no signal); without a GPU
 * with a message naming cuda. */
static void test_cli(bool have_gpu) {
    char bin[PATH_MAX], cmd[3 * PATH_MAX], errf[] = "/tmp/pl_test_cuda_XXXXXX";
    snprintf(bin, sizeof bin, "%s/pocketllm", PL_TEST_BIN);
    const char *model = pl_fixture("models/tiny-qwen3-q4_k_m.gguf");
    if (access(bin, X_OK) != 0 || access(model, R_OK) != 0) {
        printf("  (no CLI or model: CLI check skipped)\n");
        return;
    }
    int fd = mkstemp(errf);
    if (fd < 0) return;
    close(fd);
    snprintf(cmd, sizeof cmd, "'%s' run --device cuda --model '%s' --prompt hi -n 2 >/dev/null 2>'%s'", bin, model, errf);
    int ws = system(cmd);
    size_t n = 0;
    char *err = pl_read_file(errf, &n);
    unlink(errf);
    CHECK(ws != -1 && WIFEXITED(ws), "pocketllm run --device cuda did not exit normally (status %d)", ws);
    if (!have_gpu)
        CHECK(WIFEXITED(ws) && WEXITSTATUS(ws) != 0 && err && strstr(err, "cuda"),
              "run --device cuda without a GPU: exit %d, stderr: %s", WIFEXITED(ws) ? WEXITSTATUS(ws) : -1, err ? err : "");
    if (err && *err) printf("  pocketllm run --device cuda: %s", err);
    free(err);
}

/* ---- --bandwidth / --perf ------------------------------------------------------------------------- */

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + ts.tv_nsec * 1e-9;
}

static int run_bandwidth(void) {
    pl_cuda_bandwidth bw;
    if (g_mod->bandwidth(g_cu, (size_t)1 << 30, &bw) != PL_OK) {
        fprintf(stderr, "bandwidth: %s\n", pl_last_error());
        return 1;
    }
    printf("copy bandwidth (GB/s, %zu MiB buffers):\n", bw.bytes >> 20);
    printf("  host->device pinned   %8.1f\n  device->host pinned   %8.1f\n  host->device pageable %8.1f\n",
           bw.h2d_pinned, bw.d2h_pinned, bw.h2d_pageable);
    printf("  device copy (r+w)     %8.1f\n  device read (kernel)  %8.1f\n", bw.d2d_copy, bw.d2d_read);
    return 0;
}

typedef struct perf_model {
    const char *name;
    int64_t E, H, G, D, F, L, V;
} perf_model;

/* Times one decode step's (M = 1) and one 512-token prefill's matmuls of a
 * whole model with distinct weights per layer (so nothing stays in L2), the
 * decode step captured as one graph. Weights are left uninitialised: the
 * kernels' speed does not depend on the values. */
static void perf_matmuls(const perf_model *pm, pl_dtype wt) {
    const int64_t E = pm->E, QD = pm->H * pm->D, KVD = pm->G * pm->D, F = pm->F;
    const int64_t shapes[7][2] = {{E, QD}, {E, KVD}, {E, KVD}, {QD, E}, {E, F}, {E, F}, {F, E}};
    const int n_mat = (int)(pm->L * 7 + 1);
    pl_tensor *w = calloc((size_t)n_mat, sizeof *w);
    pl_tensor xin[2], yout[2];
    pl_node *nodes = calloc((size_t)n_mat, sizeof *nodes);
    double bytes = 0, flops_tok = 0;
    bool ok = true;
    for (int i = 0; i < n_mat && ok; i++) {
        const int64_t K = i == n_mat - 1 ? E : shapes[i % 7][0], N = i == n_mat - 1 ? pm->V : shapes[i % 7][1];
        pl_tensor_init(&w[i], wt, 2, (int64_t[]){K, N}, NULL);
        const size_t nb = pl_tensor_nbytes(&w[i]);
        ok = g_mod->device->buffer_alloc(g_cu, PL_BUF_WEIGHTS, nb, &w[i].data) == PL_OK;
        bytes += (double)nb;
        flops_tok += 2.0 * (double)K * (double)N;
    }
    if (!ok) {
        printf("  %s %s: %s\n", pm->name, pl_dtype_name(wt), pl_last_error());
        for (int i = 0; i < n_mat; i++) g_mod->device->buffer_free(g_cu, w[i].data);
        free(w);
        free(nodes);
        return;
    }
    const int64_t maxd = F > pm->V ? F : pm->V;
    double t_dec = 0, t_pre = 0;
    for (int pass = 0; pass < 2; pass++) {
        const int64_t M = pass == 0 ? 1 : 512;
        pl_tensor_init(&xin[pass], PL_F32, 2, (int64_t[]){F > E ? F : E, M}, dev_alloc((size_t)((F > E ? F : E) * M * 4)));
        pl_tensor_init(&yout[pass], PL_F32, 2, (int64_t[]){maxd, M}, dev_alloc((size_t)(maxd * M * 4)));
        size_t work = 0;
        for (int i = 0; i < n_mat; i++) {
            pl_node *n = &nodes[i];
            memset(n, 0, sizeof *n);
            n->op = PL_OP_MATMUL;
            n->src[0] = &w[i];
            /* activations and outputs: views of the big buffers with this matmul's shape */
            static pl_tensor xs[2][8], ys[2][8];
            const int s = i == n_mat - 1 ? 7 : i % 7;
            pl_tensor_init(&xs[pass][s], PL_F32, 2, (int64_t[]){w[i].ne[0], M}, xin[pass].data);
            pl_tensor_init(&ys[pass][s], PL_F32, 2, (int64_t[]){w[i].ne[1], M}, yout[pass].data);
            n->src[1] = &xs[pass][s];
            n->dst = &ys[pass][s];
            const size_t ws = g_mod->work_size(n, 1);
            if (ws > work) work = ws;
        }
        void *wk = work ? dev_alloc(work) : NULL;
        g_cu->work = wk;
        g_cu->work_size = work;
        pl_graph g;
        memset(&g, 0, sizeof g);
        g.nodes = nodes;
        g.n_nodes = n_mat;
        const int reps = pass == 0 ? 20 : 3;
        double best = 1e30;
        for (int rep = -1; rep < reps; rep++) {
            double t0 = now_s();
            pl_status st = g_mod->graph_execute(g_cu, &g);
            if (st == PL_OK) st = g_mod->device->synchronize(g_cu);
            double dt = now_s() - t0;
            if (st != PL_OK) {
                printf("  %s %s: %s\n", pm->name, pl_dtype_name(wt), pl_last_error());
                break;
            }
            if (rep >= 0 && dt < best) best = dt;
        }
        if (pass == 0) t_dec = best;
        else t_pre = best;
        g_cu->work = NULL;
        g_cu->work_size = 0;
        if (wk) g_mod->device->buffer_free(g_cu, wk);
        g_mod->device->buffer_free(g_cu, xin[pass].data);
        g_mod->device->buffer_free(g_cu, yout[pass].data);
    }
    printf("  %-5s %-5s weights %7.1f MiB | decode matmuls %7.3f ms = %7.1f GB/s (%6.0f tok/s bound) | "
           "prefill-512 matmuls %8.2f ms = %6.1f TFLOP/s\n",
           pm->name, pl_dtype_name(wt), bytes / 1048576.0, t_dec * 1e3, bytes / t_dec / 1e9, 1.0 / t_dec, t_pre * 1e3,
           flops_tok * 512 / t_pre / 1e12);
    for (int i = 0; i < n_mat; i++) g_mod->device->buffer_free(g_cu, w[i].data);
    free(w);
    free(nodes);
}

/* Attention of all layers at one position (decode) and for a 512-token prefill. */
static void perf_attention(const perf_model *pm, int64_t n_ctx) {
    const int64_t D = pm->D, H = pm->H, G = pm->G;
    pl_tensor q, kc, vc, pos, seq, out;
    for (int pass = 0; pass < 2; pass++) {
        const int64_t T = pass == 0 ? 1 : 512;
        if (pass == 1 && n_ctx < 512) continue;
        pl_tensor_init(&q, PL_F32, 3, (int64_t[]){D, H, T}, dev_alloc((size_t)(D * H * T * 4)));
        pl_tensor_init(&kc, PL_F16, 3, (int64_t[]){D * G, n_ctx, 1}, NULL);
        pl_tensor_init(&vc, PL_F16, 3, (int64_t[]){D * G, n_ctx, 1}, NULL);
        g_mod->device->buffer_alloc(g_cu, PL_BUF_KV, pl_tensor_nbytes(&kc), &kc.data);
        g_mod->device->buffer_alloc(g_cu, PL_BUF_KV, pl_tensor_nbytes(&vc), &vc.data);
        pl_tensor_init(&pos, PL_I32, 1, (int64_t[]){T}, dev_alloc((size_t)T * 4));
        pl_tensor_init(&seq, PL_I32, 1, (int64_t[]){T}, dev_alloc((size_t)T * 4));
        pl_tensor_init(&out, PL_F32, 2, (int64_t[]){D * H, T}, dev_alloc((size_t)(D * H * T * 4)));
        int32_t *hp = malloc((size_t)T * 4), *hs = calloc((size_t)T, 4);
        for (int64_t t = 0; t < T; t++) hp[t] = (int32_t)(pass == 0 ? n_ctx - 1 : n_ctx - T + t);
        g_mod->device->upload(g_cu, pos.data, hp, (size_t)T * 4);
        g_mod->device->upload(g_cu, seq.data, hs, (size_t)T * 4);
        pl_node n;
        memset(&n, 0, sizeof n);
        n.op = PL_OP_ATTENTION;
        n.src[0] = &q; n.src[1] = &kc; n.src[2] = &vc; n.src[3] = &pos; n.src[4] = &seq; n.dst = &out;
        n.iparams[0] = (int32_t)G;
        n.fparams[0] = 1.0f / sqrtf((float)D);
        const size_t ws = g_mod->work_size(&n, 1);
        void *wk = ws ? dev_alloc(ws) : NULL;
        g_cu->work = wk;
        g_cu->work_size = ws;
        double best = 1e30;
        for (int rep = -1; rep < 10; rep++) {
            double t0 = now_s();
            for (int l = 0; l < pm->L; l++) g_mod->run(g_cu, &n);
            g_mod->device->synchronize(g_cu);
            double dt = now_s() - t0;
            if (rep >= 0 && dt < best) best = dt;
        }
        const double kv_bytes = 2.0 * (double)(n_ctx * D * G * 2) * (double)pm->L;
        if (pass == 0)
            printf("  %-5s attention decode at pos %5lld, %lld layers: %7.3f ms (%6.1f GB/s of KV, launches included)\n",
                   pm->name, (long long)n_ctx - 1, (long long)pm->L, best * 1e3, kv_bytes / best / 1e9);
        else
            printf("  %-5s attention prefill 512 tokens at ctx %5lld, %lld layers: %7.3f ms\n", pm->name,
                   (long long)n_ctx, (long long)pm->L, best * 1e3);
        g_cu->work = NULL;
        g_cu->work_size = 0;
        void *bufs[] = {q.data, kc.data, vc.data, pos.data, seq.data, out.data, wk};
        for (size_t i = 0; i < sizeof bufs / sizeof bufs[0]; i++)
            if (bufs[i]) g_mod->device->buffer_free(g_cu, bufs[i]);
        free(hp);
        free(hs);
    }
}

static int run_perf(void) {
    static const perf_model models[] = {
        {"0.6b", 1024, 16, 8, 128, 3072, 28, 151936},
        {"1.7b", 2048, 16, 8, 128, 6144, 28, 151936},
    };
    static const pl_dtype types[] = {PL_F16, PL_BF16, PL_Q8_0, PL_Q6_K, PL_Q4_K};
    printf("matmuls of Qwen3 shapes (28 layers + lm_head, distinct weights per layer):\n");
    for (size_t m = 0; m < 2; m++)
        for (size_t t = 0; t < sizeof types / sizeof types[0]; t++) perf_matmuls(&models[m], types[t]);
    for (size_t m = 0; m < 2; m++) {
        perf_attention(&models[m], 512);
        perf_attention(&models[m], 4096);
    }
    return pl_test_failed ? 1 : 0;
}

/* ---- main -------------------------------------------------------------------------------------------- */

int main(int argc, char **argv) {
    const bool bandwidth = argc > 1 && !strcmp(argv[1], "--bandwidth");
    const bool perf = argc > 1 && !strcmp(argv[1], "--perf");
    char path[PATH_MAX];
    const bool found = pl_cuda_module_path(path, sizeof path);
    if (!bandwidth && !perf) {
        test_table();
        char detail[PATH_MAX + 512];
        const bool avail = pl_backend_cuda.probe(detail, sizeof detail);
        printf("  probe: %s (%s)\n", avail ? "available" : "not available", detail);
        CHECK(!found || !module_loaded_now(path), "probing loaded the module");
        if (PL_TEST_CUDA_MODULE_BUILT) CHECK(found, "the module was built but the loader does not find it (%s)", path);
        test_loader_errors();
    }
    if (!found) {
        printf("  no CUDA module (%s): GPU checks skipped\n", path);
        if (!bandwidth && !perf) {
            test_model_on_cuda(false);
            test_cli(false);
        }
        return (bandwidth || perf) ? 1 : pl_test_summary("test_cuda");
    }
    pl_status st = pl_cuda_load(&g_mod);
    CHECK(st == PL_OK && g_mod, "load %s: %s", path, pl_last_error());
    if (st != PL_OK) return pl_test_summary("test_cuda");
    printf("  module %s: %s\n", path, g_mod->build);
    int n_dev = 0;
    char detail[512];
    CHECK(g_mod->device_query(&n_dev, detail, sizeof detail) == PL_OK, "device query");
    printf("  devices: %d (%s)\n", n_dev, detail);
    st = pl_backend_cuda.ctx_create(0, &g_cu);
    const bool have_gpu = st == PL_OK;
    if (!have_gpu) {
        printf("  no GPU: %s\n", pl_last_error());
        CHECK(st == PL_ERR_UNSUPPORTED && g_cu == NULL && strstr(pl_last_error(), "cuda: "),
              "ctx_create without a GPU must fail cleanly: %d %s", (int)st, pl_last_error());
        CHECK(n_dev == 0, "device_query saw %d devices but no context could be made", n_dev);
        if (bandwidth || perf) {
            fprintf(stderr, "no GPU: %s\n", pl_last_error());
            return 1;
        }
        test_model_on_cuda(false);
        test_cli(false);
        return pl_test_summary("test_cuda");
    }
    CHECK(g_cu->backend == &pl_backend_cuda, "context belongs to the cuda backend");
    uint64_t fr = 0, tot = 0;
    CHECK(g_mod->device->mem_info(g_cu, &fr, &tot, detail, sizeof detail) == PL_OK && tot > 0, "mem_info");
    printf("  device: %s, %.1f GiB free\n", detail, fr / 1073741824.0);
    int rc;
    if (bandwidth) {
        rc = run_bandwidth();
    } else if (perf) {
        rc = run_perf();
    } else {
        pl_backend_find("ref")->ctx_create(1, &g_ref);
        test_ops_on_gpu();
        test_graph_decode();
        test_graph_matmuls();
        test_device_status();
        pl_backend_find("ref")->ctx_free(g_ref);
        test_model_on_cuda(true);
        test_cli(true);
        rc = -1;
    }
    pl_backend_cuda.ctx_free(g_cu);
    return rc >= 0 ? rc : pl_test_summary("test_cuda");
}
