/*
 * The cpu backend's fast paths that test_ops (one kernel call on a bare
 * context) does not reach:
 *   - prepared (repacked) weights: matmul with a prepared q4_K / q6_K / f16
 *     (q4_0 / q5_0 / q2_K / q3_K) weight against ref and against the same
 *     context without preparation,
 *     for 1 (decode) and many (prefill) activation rows, batched == one row
 *     at a time bit for bit; get_rows from a prepared table == ref exactly;
 *     the "copied" callback covers every byte of every original;
 *   - the graph executor's fusions (q/k/v group; gate/up + SwiGLU) against
 *     the per-node loop, bit for bit;
 *   - the prefill attention kernel (>= 64 query tokens) against ref;
 *   - the decode attention's score rows: several query rows (the heads of
 *     a group, which share the K loads through the cache) == one row at a
 *     time, bit for bit, and near the exact dot products;
 *   - the thread pool's elastic jobs: every chunk done once, jobs sequential.
 * Parts that need the prepared kernels' CPU features report themselves
 * skipped elsewhere.
 */
#include <math.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "testutil.h"
#include "ophelpers.h"
#include "cpu_ctx.h"
#include "backends/cpu/cpu_internal.h"
#include "backends/cpu/cpu_matmul_iq.h"
#include "backends/cpu/cpu_matmul_legacy.h"
#include "core/cpu_features.h"
#include "core/fp16.h"
#include "core/threadpool.h"
#include "graph/graph.h"
#include "kernels/abi.h"
#include "quant/quant.h"

extern const pl_backend pl_backend_cpu;

/* the copied() callback: marks the bytes it is told about */
typedef struct copy_log { const char *base; size_t size; unsigned char *seen; } copy_log;
static void on_copied(void *user, const void *p, size_t bytes) {
    copy_log *l = user;
    const char *c = p;
    if (c >= l->base && c + bytes <= l->base + l->size) memset(l->seen + (c - l->base), 1, bytes);
}

/* One weight row: x quantized, or for a type without a reference quantizer
 * (tq1_0 / tq2_0) random blocks (pl_random_block). */
static void fill_row(pl_rng *r, pl_dtype dt, const float *x, char *row, int64_t K) {
    if (pl_quantize_row(dt, x, row, K)) return;
    const pl_dtype_traits *tr = pl_dtype_get(dt);
    for (int64_t b = 0; b < K / tr->block_size; b++) pl_random_block(r, dt, (unsigned char *)row + b * tr->type_size);
}

static void test_prepared_matmul(pl_dtype dt, int64_t K, int64_t N) {
    pl_rng r = {(uint64_t)dt * 7919 + (uint64_t)K};
    const size_t row = pl_dtype_row_size(dt, K), wbytes = row * (size_t)N;
    float *wf = malloc((size_t)(K * N) * sizeof(float));
    pl_fill_normal(&r, wf, K * N, 1.0f);
    char *wq = aligned_alloc(64, (wbytes + 63) & ~(size_t)63);
    for (int64_t n = 0; n < N; n++) fill_row(&r, dt, wf + n * K, wq + n * row, K);
    pl_tensor w;
    pl_tensor_init(&w, dt, 2, (int64_t[]){K, N}, wq);

    const int64_t M = 37;
    float *x = malloc((size_t)(K * M) * sizeof(float));
    pl_fill_normal(&r, x, K * M, 1.0f);
    float *y_ref = malloc((size_t)(N * M) * 4), *y_plain = malloc((size_t)(N * M) * 4), *y_prep = malloc((size_t)(N * M) * 4);
    /* one-row output with a canary after row N: a padded last panel
     * (N % 16 == 8) must not be stored past the end */
    float *y_one = malloc((size_t)(N + 16) * 4);
    for (int i = 0; i < 16; i++) y_one[N + i] = -77.0f;
    pl_tensor tx, ty;
    pl_tensor_init(&tx, PL_F32, 2, (int64_t[]){K, M}, x);
    pl_node nd = {.op = PL_OP_MATMUL, .src = {&w, &tx}, .dst = &ty};
    const pl_kernel *k = pl_backend_lookup(&pl_backend_cpu, PL_OP_MATMUL, dt);
    const size_t work = k->work_size(&nd, 2);

    pl_tensor_init(&ty, PL_F32, 2, (int64_t[]){N, M}, y_ref);
    CHECK(run_ref(&nd) == PL_OK, "ref matmul %s", pl_dtype_name(dt));
    pl_exec_ctx *plain = cpu_ctx(2, work), *prep = cpu_ctx(2, work);
    pl_tensor_init(&ty, PL_F32, 2, (int64_t[]){N, M}, y_plain);
    CHECK(run_on(&pl_backend_cpu, plain, &nd) == PL_OK, "plain cpu matmul");

    const size_t psz = pl_backend_cpu.weight_prepare_size(prep, &w);
    if (!psz) {
        printf("prepared %s [%lld, %lld]: no prepared layout here (skipped)\n", pl_dtype_name(dt), (long long)K, (long long)N);
    } else {
        copy_log log = {wq, wbytes, calloc(wbytes, 1)};
        const pl_tensor *ws[1] = {&w};
        CHECK(pl_backend_cpu.weight_prepare(prep, ws, 1, on_copied, &log) == PL_OK, "prepare %s", pl_dtype_name(dt));
        size_t missed = 0;
        for (size_t i = 0; i < wbytes; i++) missed += !log.seen[i];
        CHECK(missed == 0, "%s: copied() reported every byte of the original (%zu missed)", pl_dtype_name(dt), missed);
        free(log.seen);
        CHECK(pl_cpu_packed_find(prep, &w) != NULL, "the copy is found by the tensor");
        pl_tensor_init(&ty, PL_F32, 2, (int64_t[]){N, M}, y_prep);
        CHECK(run_on(&pl_backend_cpu, prep, &nd) == PL_OK, "prepared cpu matmul");
        const double e_ref = pl_nmse(y_prep, y_ref, N * M), e_plain = pl_nmse(y_prep, y_plain, N * M);
        CHECK(e_ref < 5e-4, "%s K=%lld N=%lld: prepared vs ref nmse %g", pl_dtype_name(dt), (long long)K, (long long)N, e_ref);
        CHECK(e_plain < 1e-9, "%s: prepared vs unprepared cpu nmse %g", pl_dtype_name(dt), e_plain);
        /* q4_1 / q5_1: the float steps of the unprepared tiles (llama.cpp's),
         * bit for bit (their perplexity is that sensitive; cpu_packed_legacy_avx2.c) */
        if (dt == PL_Q4_1 || dt == PL_Q5_1)
            CHECK(memcmp(y_prep, y_plain, (size_t)(N * M) * 4) == 0, "%s: prepared == unprepared, bit for bit",
                  pl_dtype_name(dt));
        /* batched == alone: each activation row through the decode path */
        bool same = true;
        for (int64_t m = 0; m < M && same; m++) {
            pl_tensor x1, y1;
            pl_tensor_init(&x1, PL_F32, 2, (int64_t[]){K, 1}, x + m * K);
            pl_tensor_init(&y1, PL_F32, 2, (int64_t[]){N, 1}, y_one);
            pl_node n1 = {.op = PL_OP_MATMUL, .src = {&w, &x1}, .dst = &y1};
            CHECK(run_on(&pl_backend_cpu, prep, &n1) == PL_OK, "prepared matmul, one row");
            same = memcmp(y_one, y_prep + m * N, (size_t)N * 4) == 0;
        }
        CHECK(same, "%s: one activation row gives bit for bit the batched result", pl_dtype_name(dt));
        bool canary = true;
        for (int i = 0; i < 16; i++) canary &= y_one[N + i] == -77.0f;
        CHECK(canary, "%s N=%lld: nothing stored past the last row", pl_dtype_name(dt), (long long)N);
        /* get_rows from the prepared table */
        const int64_t n_ids = 5;
        int32_t ids[5] = {0, (int32_t)(N - 1), (int32_t)(N / 2), 7, (int32_t)(N / 3)};
        pl_tensor tid, tg1, tg2;
        float *g1 = malloc((size_t)(K * n_ids) * 4), *g2 = malloc((size_t)(K * n_ids) * 4);
        pl_tensor_init(&tid, PL_I32, 1, (int64_t[]){n_ids}, ids);
        pl_tensor_init(&tg1, PL_F32, 2, (int64_t[]){K, n_ids}, g1);
        pl_tensor_init(&tg2, PL_F32, 2, (int64_t[]){K, n_ids}, g2);
        pl_node gr = {.op = PL_OP_GET_ROWS, .src = {&w, &tid}, .dst = &tg1};
        CHECK(run_ref(&gr) == PL_OK, "ref get_rows");
        gr.dst = &tg2;
        CHECK(run_on(&pl_backend_cpu, prep, &gr) == PL_OK, "cpu get_rows, prepared table");
        CHECK(memcmp(g1, g2, (size_t)(K * n_ids) * 4) == 0, "%s: get_rows from the copy == ref, bit for bit", pl_dtype_name(dt));
        free(g1);
        free(g2);
    }
    cpu_ctx_free(plain);
    cpu_ctx_free(prep);
    free(wf); free(wq); free(x); free(y_ref); free(y_plain); free(y_prep); free(y_one);
}

/* q/k/v group and gate/up + SwiGLU through the graph executor (2 threads)
 * vs per node (1 thread): M = 1 takes the decode path, whose guided claims
 * cross from one matrix of the group into the next. */
/* dt2: the dtype of the second and third weight (a group of prepared kinds
 * whose activation formats differ, e.g. q4_K's q8_K and q4_1's q8_1, must
 * not share one conversion) */
static void test_fusion2(pl_dtype dt, pl_dtype dt2, int64_t M, int64_t N) {
    const int64_t K = 512;
    pl_rng r = {42 + (uint64_t)dt};
    char *wq[3];
    pl_tensor w[3];
    float *wf = malloc((size_t)(K * N) * 4);
    for (int i = 0; i < 3; i++) {
        const pl_dtype di = i ? dt2 : dt;
        const size_t row = pl_dtype_row_size(di, K);
        pl_fill_normal(&r, wf, K * N, 1.0f);
        wq[i] = aligned_alloc(64, (row * (size_t)N + 63) & ~(size_t)63);
        for (int64_t n = 0; n < N; n++) fill_row(&r, di, wf + n * K, wq[i] + n * row, K);
        pl_tensor_init(&w[i], di, 2, (int64_t[]){K, N}, wq[i]);
        w[i].buffer = PL_BUF_WEIGHTS;
    }
    float *x = malloc((size_t)(K * M) * 4);
    pl_fill_normal(&r, x, K * M, 1.0f);
    for (int pass = 0; pass < 2; pass++) {   /* 0: three matmuls; 1: gate, up, swiglu */
        float *out[2][3];
        for (int run = 0; run < 2; run++) {   /* 0: per node, 1: graph executor */
            pl_graph g;
            pl_graph_init(&g, 32, 8);
            pl_tensor tx;
            pl_tensor_init(&tx, PL_F32, 2, (int64_t[]){K, M}, x);
            pl_tensor *xi = pl_graph_external(&g, &tx);
            pl_tensor *a = pl_op_matmul(&g, pl_graph_external(&g, &w[0]), xi);
            pl_tensor *b = pl_op_matmul(&g, pl_graph_external(&g, &w[1]), xi);
            pl_tensor *c = pass ? pl_op_swiglu(&g, a, b) : pl_op_matmul(&g, pl_graph_external(&g, &w[2]), xi);
            pl_graph_keep(&g, a);
            pl_graph_keep(&g, b);
            pl_graph_keep(&g, c);
            const size_t scratch = pl_graph_plan(&g);
            void *mem = aligned_alloc(64, (scratch + 127) & ~(size_t)63);
            pl_graph_apply_plan(&g, &g, mem, scratch);
            size_t work = 0;
            pl_graph_work_size(&g, &pl_backend_cpu, 2, &work);
            pl_exec_ctx *ctx = cpu_ctx(run == 0 ? 1 : 2, work);
            if (pl_backend_cpu.weight_prepare_size(ctx, &w[0])) {
                const pl_tensor *ws[3] = {&w[0], &w[1], &w[2]};
                pl_backend_cpu.weight_prepare(ctx, ws, 3, NULL, NULL);
            }
            pl_status st = PL_OK;
            if (run == 0) {
                for (int i = 0; i < g.n_nodes && st == PL_OK; i++) st = run_on(&pl_backend_cpu, ctx, &g.nodes[i]);
            } else {
                st = pl_graph_execute(&g, ctx);
            }
            CHECK(st == PL_OK, "fusion pass %d run %d: %s", pass, run, pl_last_error());
            pl_tensor *res[3] = {a, b, c};
            for (int i = 0; i < 3; i++) {
                out[run][i] = malloc((size_t)(N * M) * 4);
                memcpy(out[run][i], res[i]->data, (size_t)(N * M) * 4);
            }
            cpu_ctx_free(ctx);
            free(mem);
            pl_graph_free(&g);
        }
        for (int i = 0; i < 3; i++) {
            CHECK(memcmp(out[0][i], out[1][i], (size_t)(N * M) * 4) == 0,
                  "%s %s M=%lld N=%lld: output %d of the fused run == per node", pl_dtype_name(dt),
                  pass ? "gate/up/swiglu" : "q/k/v", (long long)M, (long long)N, i);
            free(out[0][i]);
            free(out[1][i]);
        }
    }
    for (int i = 0; i < 3; i++) free(wq[i]);
    free(wf);
    free(x);
}

static void test_fusion(pl_dtype dt, int64_t M, int64_t N) { test_fusion2(dt, dt, M, N); }

/* Attention inputs: nt query rows of nh heads, K and V caches of n_ctx x
 * n_seq positions (K values of scale k_sd), in the cache's type. */
typedef struct att_inputs { float *q; char *kc, *vc; } att_inputs;
static att_inputs make_att_inputs(pl_rng *r, pl_dtype cache, int64_t hd, int64_t nh, int64_t nkv, int64_t nt,
                                  int64_t n_ctx, int64_t n_seq, float k_sd) {
    att_inputs in;
    in.q = malloc((size_t)(hd * nh * nt) * 4);
    pl_fill_normal(r, in.q, hd * nh * nt, 1.0f);
    const size_t esz = cache == PL_F16 ? 2 : 4;
    const int64_t kvd = nkv * hd;
    in.kc = malloc((size_t)(kvd * n_ctx * n_seq) * esz);
    in.vc = malloc((size_t)(kvd * n_ctx * n_seq) * esz);
    float *tmp = malloc((size_t)kvd * 4);
    for (int64_t i = 0; i < n_ctx * n_seq; i++) {
        pl_fill_normal(r, tmp, kvd, k_sd);
        pl_quantize_row(cache, tmp, in.kc + i * kvd * esz, kvd);
        pl_fill_normal(r, tmp, kvd, 1.0f);
        pl_quantize_row(cache, tmp, in.vc + i * kvd * esz, kvd);
    }
    free(tmp);
    return in;
}

static void free_att_inputs(att_inputs *in) { free(in->q); free(in->kc); free(in->vc); }

/* prefill attention (the tiled kernel on AVX-512 machines) vs ref */
static void test_attention_prefill(pl_dtype cache, int64_t hd, int64_t nh, int64_t nkv, int64_t nt, int64_t p0,
                                   int window) {
    pl_rng r = {(uint64_t)(hd * 1000 + nt + p0)};
    const int64_t n_ctx = p0 + nt + 7, n_seq = 2, kvd = nkv * hd;
    att_inputs in = make_att_inputs(&r, cache, hd, nh, nkv, nt, n_ctx, n_seq, 1.0f);
    float *q = in.q;
    char *kc = in.kc, *vc = in.vc;
    int32_t *pos = malloc((size_t)nt * 4), *seq = malloc((size_t)nt * 4);
    for (int64_t t = 0; t < nt; t++) {   /* two sequences: slot 1 for the last quarter */
        const bool s1 = t >= nt - nt / 4;
        pos[t] = (int32_t)(s1 ? t - (nt - nt / 4) : p0 + t);
        seq[t] = s1;
    }
    pl_tensor tq, tk, tv, tp, ts, td1, td2;
    pl_tensor_init(&tq, PL_F32, 3, (int64_t[]){hd, nh, nt}, q);
    pl_tensor_init(&tk, cache, 3, (int64_t[]){kvd, n_ctx, n_seq}, kc);
    pl_tensor_init(&tv, cache, 3, (int64_t[]){kvd, n_ctx, n_seq}, vc);
    pl_tensor_init(&tp, PL_I32, 1, (int64_t[]){nt}, pos);
    pl_tensor_init(&ts, PL_I32, 1, (int64_t[]){nt}, seq);
    float *d1 = malloc((size_t)(hd * nh * nt) * 4), *d2 = malloc((size_t)(hd * nh * nt) * 4);
    pl_tensor_init(&td1, PL_F32, 2, (int64_t[]){hd * nh, nt}, d1);
    pl_tensor_init(&td2, PL_F32, 2, (int64_t[]){hd * nh, nt}, d2);
    pl_node nd = {.op = PL_OP_ATTENTION, .src = {&tq, &tk, &tv, &tp, &ts}, .dst = &td1};
    nd.iparams[0] = (int32_t)nkv;
    nd.iparams[4] = window;
    nd.fparams[0] = 1.0f / sqrtf((float)hd);
    CHECK(run_ref(&nd) == PL_OK, "ref attention");
    nd.dst = &td2;
    const pl_kernel *k = pl_backend_lookup(&pl_backend_cpu, PL_OP_ATTENTION, cache);
    pl_exec_ctx *ctx = cpu_ctx(2, k->work_size(&nd, 2));
    CHECK(run_on(&pl_backend_cpu, ctx, &nd) == PL_OK, "cpu attention");
    const double e = pl_nmse(d2, d1, hd * nh * nt);
    CHECK(e < 1e-9, "attention %s hd=%lld heads %lld/%lld, %lld tokens from %lld, window %d: nmse %g",
          pl_dtype_name(cache), (long long)hd, (long long)nh, (long long)nkv, (long long)nt, (long long)p0, window, e);
    cpu_ctx_free(ctx);
    free_att_inputs(&in);
    free(pos); free(seq); free(d1); free(d2);
}

/* decode attention (fewer than 64 tokens: llama.cpp's flash-attention
 * numerics): the position-major blocked path == the per-head path bit for
 * bit, on 1 and 2 threads, and near ref. n_tok tokens, the last in slot 1;
 * positions from p0 (several pieces of 64, a tail that is not a multiple of
 * 8, fewer than 8); nh > 64 rows makes a task hold part of each cache row. */
static void test_attention_decode(pl_dtype cache, int64_t hd, int64_t nh, int64_t nkv, int64_t nt, int64_t p0,
                                  int window) {
    pl_rng r = {(uint64_t)(hd * 7 + nh * 131 + nt + p0)};
    const int64_t n_ctx = p0 + nt + 3, n_seq = 2, kvd = nkv * hd;
    att_inputs in = make_att_inputs(&r, cache, hd, nh, nkv, nt, n_ctx, n_seq, 2.0f);
    float *q = in.q;
    char *kc = in.kc, *vc = in.vc;
    int32_t *pos = malloc((size_t)nt * 4), *seq = malloc((size_t)nt * 4);
    for (int64_t t = 0; t < nt; t++) {
        seq[t] = t == nt - 1 && nt > 1;
        pos[t] = (int32_t)(seq[t] ? p0 / 3 : p0 + t);
    }
    pl_tensor tq, tk, tv, tp, ts, td[3];
    float *d[3];
    pl_tensor_init(&tq, PL_F32, 3, (int64_t[]){hd, nh, nt}, q);
    pl_tensor_init(&tk, cache, 3, (int64_t[]){kvd, n_ctx, n_seq}, kc);
    pl_tensor_init(&tv, cache, 3, (int64_t[]){kvd, n_ctx, n_seq}, vc);
    pl_tensor_init(&tp, PL_I32, 1, (int64_t[]){nt}, pos);
    pl_tensor_init(&ts, PL_I32, 1, (int64_t[]){nt}, seq);
    for (int i = 0; i < 3; i++) {
        d[i] = malloc((size_t)(hd * nh * nt) * 4);
        pl_tensor_init(&td[i], PL_F32, 2, (int64_t[]){hd * nh, nt}, d[i]);
    }
    pl_node nd = {.op = PL_OP_ATTENTION, .src = {&tq, &tk, &tv, &tp, &ts}, .dst = &td[0]};
    nd.iparams[0] = (int32_t)nkv;
    nd.iparams[4] = window;
    nd.fparams[0] = 1.0f / sqrtf((float)hd);
    CHECK(run_ref(&nd) == PL_OK, "ref attention");
    const pl_kernel *k = pl_backend_lookup(&pl_backend_cpu, PL_OP_ATTENTION, cache);
    for (int nth = 1; nth <= 2; nth++) {
        pl_exec_ctx *ctx = cpu_ctx(nth, k->work_size(&nd, nth));
        for (int mode = 0; mode < 2; mode++) {
            pl_cpu_att_blocked_mode = mode;
            nd.dst = &td[1 + mode];
            memset(d[1 + mode], 0xff, (size_t)(hd * nh * nt) * 4);
            CHECK(run_on(&pl_backend_cpu, ctx, &nd) == PL_OK, "cpu attention");
        }
        pl_cpu_att_blocked_mode = -1;
        CHECK(memcmp(d[1], d[2], (size_t)(hd * nh * nt) * 4) == 0,
              "decode attention %s hd=%lld heads %lld/%lld, %lld tokens from %lld, %d thread(s): blocked == per head",
              pl_dtype_name(cache), (long long)hd, (long long)nh, (long long)nkv, (long long)nt, (long long)p0, nth);
        const double e = pl_nmse(d[2], d[0], hd * nh * nt);
        CHECK(e < 1e-5, "decode attention %s hd=%lld heads %lld/%lld, %lld tokens from %lld, window %d: nmse %g vs ref",
              pl_dtype_name(cache), (long long)hd, (long long)nh, (long long)nkv, (long long)nt, (long long)p0, window, e);
        cpu_ctx_free(ctx);
    }
    free_att_inputs(&in);
    free(pos); free(seq);
    for (int i = 0; i < 3; i++) free(d[i]);
}

/* The engine plans work memory with the largest batch; a decode step of
 * the same attention node must fit in it (hd 160: no tiled prefill kernel,
 * whose scratch would hide a shortfall). */
static void test_attention_work_plan(pl_dtype cache, int64_t hd, int64_t nh, int64_t nkv, int64_t n_ctx) {
    pl_tensor tq[2], tk, tv;
    pl_tensor_init(&tk, cache, 3, (int64_t[]){nkv * hd, n_ctx, 1}, NULL);
    pl_tensor_init(&tv, cache, 3, (int64_t[]){nkv * hd, n_ctx, 1}, NULL);
    pl_tensor_init(&tq[0], PL_F32, 3, (int64_t[]){hd, nh, 512}, NULL);
    pl_tensor_init(&tq[1], PL_F32, 3, (int64_t[]){hd, nh, 1}, NULL);
    const pl_kernel *k = pl_backend_lookup(&pl_backend_cpu, PL_OP_ATTENTION, cache);
    for (int nth = 1; nth <= 4; nth *= 2) {
        pl_node big = {.op = PL_OP_ATTENTION, .src = {&tq[0], &tk, &tv}}, one = {.op = PL_OP_ATTENTION, .src = {&tq[1], &tk, &tv}};
        big.iparams[0] = one.iparams[0] = (int32_t)nkv;
        CHECK(k->work_size(&one, nth) <= k->work_size(&big, nth),
              "attention work hd=%lld heads %lld/%lld ctx %lld, %d threads: decode %zu within the plan's %zu", (long long)hd,
              (long long)nh, (long long)nkv, (long long)n_ctx, nth, k->work_size(&one, nth), k->work_size(&big, nth));
    }
}

/* decode attention scores in llama.cpp's order: R rows at once == each row
 * alone, bit for bit; and near the exact dot products */
static void test_att_dots(bool f16, int64_t hd, int64_t n, int R) {
#if PL_CPU_HAVE_AVX2_BUILD
    if (!pl_cpu_has_avx2()) return;
    pl_rng r = {(uint64_t)(hd * 31 + n)};
    const int64_t ldS = n + 5;
    const size_t el = f16 ? 2 : 4, ks = (size_t)(hd * 3) * el;   /* rows of a 3-head cache */
    float *qf = malloc((size_t)(R * hd) * 4), *kf = malloc((size_t)(n * hd) * 4);
    char *k = calloc((size_t)n, ks), *v = calloc((size_t)n, ks);
    pl_fill_normal(&r, qf, R * hd, 1.0f);
    pl_fill_normal(&r, kf, n * hd, 1.0f);
    for (int64_t j = 0; j < n; j++) pl_quantize_row(f16 ? PL_F16 : PL_F32, kf + j * hd, k + j * ks, hd);
    float *qr = malloc((size_t)(R * hd) * 4);
    const float *q[8];
    for (int i = 0; i < R; i++) {   /* queries in the cache's precision, as the driver passes them */
        for (int64_t d = 0; d < hd; d++) qr[i * hd + d] = f16 ? pl_f16_to_f32(pl_f32_to_f16(qf[i * hd + d])) : qf[i * hd + d];
        q[i] = qr + i * hd;
    }
    float *S = calloc((size_t)(R * ldS), 4), *S1 = calloc((size_t)ldS, 4);
    pl_cpu_att_dots_ggml_avx2(R, q, k, ks, f16, n, hd, 0.25f, S, ldS, v, ks);
    bool same = true, near = true;
    for (int i = 0; i < R; i++) {
        pl_cpu_att_dots_ggml_avx2(1, q + i, k, ks, f16, n, hd, 0.25f, S1, ldS, NULL, 0);
        same &= memcmp(S1, S + i * ldS, (size_t)n * 4) == 0;
        for (int64_t j = 0; j < n; j++) {
            double e = 0;
            for (int64_t d = 0; d < hd; d++) {
                const float kv = f16 ? pl_f16_to_f32(((const uint16_t *)(k + j * ks))[d]) : ((const float *)(k + j * ks))[d];
                e += (double)q[i][d] * kv;
            }
            near &= fabs(S[i * ldS + j] - 0.25 * e) <= 1e-4 * (1 + fabs(e));
        }
    }
    CHECK(same, "decode scores %s hd=%lld n=%lld R=%d: rows together == rows alone", f16 ? "f16" : "f32", (long long)hd,
          (long long)n, R);
    CHECK(near, "decode scores %s hd=%lld n=%lld R=%d: near the exact dot products", f16 ? "f16" : "f32", (long long)hd,
          (long long)n, R);
    free(qf); free(kf); free(k); free(v); free(qr); free(S); free(S1);
#else
    (void)f16; (void)hd; (void)n; (void)R;
#endif
}

typedef struct el_job {
    atomic_llong next;
    int64_t n;
    atomic_int *hits;
    long long round;
    int bad;
} el_job;

static void el_task(void *arg, int ith, int nth) {
    el_job *j = arg;
    (void)ith; (void)nth;
    for (int64_t i = atomic_fetch_add(&j->next, 1); i < j->n; i = atomic_fetch_add(&j->next, 1))
        if (atomic_fetch_add(&j->hits[i], 1) != j->round) j->bad = 1;
}

static void test_elastic_pool(void) {
    for (int nth = 1; nth <= 3; nth++) {
        pl_threadpool *p = NULL;
        CHECK(pl_threadpool_create(nth, &p) == PL_OK, "pool %d", nth);
        el_job j;
        j.n = 64;
        j.hits = calloc((size_t)j.n, sizeof *j.hits);
        j.bad = 0;
        const int rounds = 3000;
        for (int it = 0; it < rounds; it++) {
            atomic_init(&j.next, 0);
            j.round = it;
            if (it % 3 == 2) pl_threadpool_run(p, el_task, &j);   /* mixed with plain jobs */
            else pl_threadpool_run_elastic(p, el_task, &j);
        }
        bool ok = !j.bad;
        for (int64_t i = 0; i < j.n; i++) ok &= atomic_load(&j.hits[i]) == rounds;
        CHECK(ok, "elastic jobs, %d threads: every item done exactly once per job, jobs in order", nth);
        free(j.hits);
        pl_threadpool_free(p);
    }
}

/* The legacy-type tile kernels (q4_0, q4_1, q5_0, q5_1; cpu_matmul_legacy*.c),
 * portable and AVX2, on every tile width and on odd block counts (the AVX2
 * tiles run two blocks a step, then a last odd one; test_ops' shapes have
 * even counts): each must equal the exact dot product of the decoded weights
 * and the decoded activation blocks (plus, for the _1 types, m times the
 * block's rounded sum s, the term llama.cpp uses), and the two q8_1
 * converters must agree bit for bit. NaN always fails. */
static void test_legacy_kernels(void) {
    static const pl_dtype types[] = {PL_Q4_0, PL_Q4_1, PL_Q5_0, PL_Q5_1};
    static const int64_t Ks[] = {32, 96, 224, 1024};
    pl_rng r = {777};
    for (size_t ti = 0; ti < sizeof types / sizeof types[0]; ti++) {
        const pl_dtype t = types[ti];
        const pl_cpu_mm_type *impl[2] = {pl_cpu_mm_type_get_legacy_portable(t), pl_cpu_mm_type_get_legacy(t)};
        CHECK(impl[0] && impl[1] && impl[0]->vtype == (t == PL_Q4_0 || t == PL_Q5_0 ? PL_Q8_0 : PL_Q8_1),
              "%s: legacy kernels and llama.cpp's activation format", pl_dtype_name(t));
        if (!impl[0] || !impl[1]) continue;
        for (size_t ki = 0; ki < sizeof Ks / sizeof Ks[0]; ki++) {
            const int64_t K = Ks[ki], nb = K / 32;
            const int NR = 3, NC = 4;
            const size_t ws = pl_dtype_row_size(t, K), as = pl_dtype_row_size(impl[0]->vtype, K);
            char *w = malloc(ws * NR), *a = malloc(as * NC), *a2 = malloc(as * NC);
            float *x = malloc((size_t)K * sizeof(float)), *wd = malloc((size_t)K * NR * sizeof(float));
            float *ad = malloc((size_t)K * NC * sizeof(float));
            for (int i = 0; i < NR; i++) {
                pl_fill_normal(&r, x, K, 1.0f);
                x[i] += 0.5f;   /* a block with a non-zero mean (the _1 offsets) */
                pl_quantize_row(t, x, w + i * ws, K);
                pl_dequantize_row(t, w + i * ws, wd + i * K, K);
            }
            for (int c = 0; c < NC; c++) {
                pl_fill_normal(&r, x, K, 1.0f);
                impl[0]->from_float(x, a + c * as, K);
                impl[1]->from_float(x, a2 + c * as, K);
                /* q8_1 is an activation-only format: not in pl_dequantize_row */
                if (impl[0]->vtype == PL_Q8_1) pl_dequantize_row_q8_1(a + c * as, ad + c * K, K);
                else pl_dequantize_row(impl[0]->vtype, a + c * as, ad + c * K, K);
            }
            CHECK(memcmp(a, a2, as * NC) == 0, "%s K=%lld: portable and dispatched activation converters differ",
                  pl_dtype_name(t), (long long)K);
            /* exact: sum over blocks of the decoded products; the _1 types' m * sum(x) term uses
             * s (= d * sum of codes, rounded to f16) as llama.cpp does */
            double want[3][4], norm = 0;
            for (int i = 0; i < NR; i++)
                for (int c = 0; c < NC; c++) {
                    double s = 0;
                    for (int64_t b = 0; b < nb; b++) {
                        if (impl[0]->vtype == PL_Q8_1) {
                            const block_q8_1 *yb = (const block_q8_1 *)(a + c * as) + b;
                            const pl_f16 m = t == PL_Q4_1 ? ((const block_q4_1 *)(w + i * ws))[b].m
                                                           : ((const block_q5_1 *)(w + i * ws))[b].m;
                            const double mx = pl_f16_to_f32(m);
                            for (int k = 0; k < 32; k++)
                                s += ((double)wd[i * K + 32 * b + k] - mx) * ad[c * K + 32 * b + k];
                            s += mx * pl_f16_to_f32(yb->s);
                        } else {
                            for (int k = 0; k < 32; k++) s += (double)wd[i * K + 32 * b + k] * ad[c * K + 32 * b + k];
                        }
                    }
                    want[i][c] = s;
                    norm += s * s;
                }
            norm = sqrt(norm / (NR * NC)) + 1e-30;
            for (int p = 0; p < 2; p++)
                for (int nc = 1; nc <= NC; nc++) {
                    float got[4][3];
                    for (int i = 0; i < NR; i++) impl[p]->kernel(K, w + i * ws, ws, 1, a, as, nc, &got[0][i], NR);
                    double worst = 0;
                    for (int c = 0; c < nc; c++)
                        for (int i = 0; i < NR; i++) {
                            const double e = fabs(got[c][i] - want[i][c]) / norm;
                            if (!(e <= worst)) worst = e;   /* NaN sticks */
                        }
                    CHECK(worst <= 1e-5, "%s %s K=%lld nc=%d: relative error %.3e", pl_dtype_name(t),
                          p ? "dispatched" : "portable", (long long)K, nc, worst);
                }
            free(w); free(a); free(a2); free(x); free(wd); free(ad);
        }
    }
}

/* The IQ2 / IQ1 (and q5_K) tiles the ladder picks (AVX-512 where the CPU has it: up to
 * 8 activation rows a tile) against the AVX2 tiles (bit for bit: the same
 * integer sums per block, the same float reduction) and against the exact dot
 * of the decoded weights and decoded q8_K activations (relative to sum |w a|).
 * Random blocks (every code, sign and scale pattern), odd block counts, every
 * tile width 1..8, rows with a stride longer than the row. NaN always fails. */
static void test_ladder_iq_tiles(void) {
    static const pl_dtype types[] = {PL_IQ2_XXS, PL_IQ2_XS, PL_IQ2_S, PL_IQ1_S, PL_IQ1_M, PL_Q5_K};
    static const int64_t Ks[] = {256, 768, 1280};
    pl_rng r = {4242};
    for (size_t ti = 0; ti < sizeof types / sizeof types[0]; ti++) {
        const pl_dtype t = types[ti];
        const pl_cpu_mm_type *impl = pl_cpu_mm_type_get_ladder(t), *avx2 = pl_cpu_mm_type_get_ladder_avx2(t);
        CHECK(impl != NULL, "%s: no ladder kernel", pl_dtype_name(t));
        if (!impl) continue;
        for (size_t ki = 0; ki < sizeof Ks / sizeof Ks[0]; ki++) {
            const int64_t K = Ks[ki], nb = K / QK_K;
            enum { NR = 3, NC = 8 };
            const size_t ws = pl_dtype_row_size(t, K) + 6, as = pl_cpu_mm_act_row_size(impl, K);
            unsigned char *w = malloc(ws * NR), *a = malloc(as * NC);
            float *x = malloc((size_t)K * sizeof(float)), *wd = malloc((size_t)K * NR * sizeof(float));
            float *ad = malloc((size_t)K * NC * sizeof(float));
            for (int i = 0; i < NR; i++) {
                for (int64_t b = 0; b < nb; b++) pl_random_block(&r, t, w + i * ws + b * pl_dtype_get(t)->type_size);
                pl_dequantize_row(t, w + i * ws, wd + i * K, K);
            }
            for (int c = 0; c < NC; c++) {
                pl_fill_normal(&r, x, K, 1.0f);
                impl->from_float(x, a + c * as, K);
                pl_dequantize_row_q8_K(a + c * as, ad + c * K, K);
            }
            for (int nc = 1; nc <= NC; nc++) {
                float got[NC][NR], ref2[NC][NR];
                /* a tile takes at most max_nc activation rows (8 for the AVX-512 tiles, 4 for the
                 * AVX2 ones, which PL_CPU_IQ512=0 selects): run it in pieces */
                for (int c0 = 0; c0 < nc; c0 += impl->max_nc) {
                    const int cn = nc - c0 < impl->max_nc ? nc - c0 : impl->max_nc;
                    for (int i = 0; i < NR; i++) impl->kernel(K, w + i * ws, ws, 1, a + c0 * as, as, cn, &got[c0][i], NR);
                }
                double worst = 0;
                for (int c = 0; c < nc; c++)
                    for (int i = 0; i < NR; i++) {
                        double dot = 0, mag = 0;
                        for (int64_t k = 0; k < K; k++) {
                            dot += (double)wd[i * K + k] * ad[c * K + k];
                            mag += fabs((double)wd[i * K + k] * ad[c * K + k]);
                        }
                        const double e = fabs(got[c][i] - dot) / (mag + 1e-30);
                        if (!(e <= worst)) worst = e;   /* NaN sticks */
                    }
                CHECK(worst <= 2e-6, "%s K=%lld nc=%d: relative error %.3e", pl_dtype_name(t), (long long)K, nc, worst);
                if (avx2 && avx2 != impl) {
                    /* the AVX2 tile takes at most 4 rows: run it in pieces */
                    for (int c0 = 0; c0 < nc; c0 += avx2->max_nc) {
                        const int cn = nc - c0 < avx2->max_nc ? nc - c0 : avx2->max_nc;
                        avx2->kernel(K, w, ws, NR, a + c0 * as, as, cn, &ref2[c0][0], NR);
                    }
                    CHECK(memcmp(got, ref2, sizeof(float) * NR * (size_t)nc) == 0,
                          "%s K=%lld nc=%d: differs from the AVX2 tile", pl_dtype_name(t), (long long)K, nc);
                }
            }
            free(w); free(a); free(x); free(wd); free(ad);
        }
        printf("  %s: ladder tile (max %d activation rows)%s\n", pl_dtype_name(t), impl->max_nc,
               avx2 && avx2 != impl ? " == the AVX2 tile bit for bit" : "");
    }
}

/* matmul_id with prepared 3-D expert weights [K, N, X] (each expert packed
 * as its own weight, cpu_repack.c): against ref, against the same context
 * without preparation, one token at a time == the batch bit for bit (tokens
 * grouped by expert must not change a token's numbers), ids checked. */
/* The iq1 weights of test_prepared_iq_one_row reach every grid index (the one-row kernels gather
 * 16-bit entries at 2 i and 2 i - 2: the first and last entries and the padding matter), both delta
 * signs and every 3-bit scale, so a wrong table entry or bit position cannot hide. */
static void iq1_check_coverage(pl_dtype dt, const char *wq, int64_t K, int64_t N) {
    static unsigned char seen[2048];
    unsigned scales = 0, deltas = 0;
    memset(seen, 0, sizeof seen);
    for (int64_t n = 0; n < N * (K / QK_K); n++) {
        if (dt == PL_IQ1_S) {
            const block_iq1_s *x = (const block_iq1_s *)wq + n;
            for (int g = 0; g < 32; g++) seen[x->qs[g] | ((x->qh[g / 4] >> (3 * (g % 4))) & 7) << 8] = 1;
            for (int s = 0; s < 8; s++) scales |= 1u << ((x->qh[s] >> 12) & 7), deltas |= 1u << (x->qh[s] >> 15);
        } else {
            const block_iq1_m *x = (const block_iq1_m *)wq + n;
            for (int g = 0; g < 32; g++) {
                const int nib = (x->qh[g / 2] >> (4 * (g % 2))) & 15;
                seen[x->qs[g] | (nib & 7) << 8] = 1;
                deltas |= 1u << (nib >> 3);
            }
            for (int k = 0; k < 16; k++) {   /* scale k: bits 3 (k % 4) of the (k / 4)-th u16 */
                const unsigned sw = x->scales[2 * (k / 4)] | (unsigned)x->scales[2 * (k / 4) + 1] << 8;
                scales |= 1u << ((sw >> (3 * (k % 4))) & 7);
            }
        }
    }
    int n_seen = 0;
    for (int i = 0; i < 2048; i++) n_seen += seen[i];
    CHECK(n_seen == 2048 && scales == 0xFF && deltas == 3, "%s weights: %d of 2048 grid indices, scales %x, deltas %x",
          pl_dtype_name(dt), n_seen, scales, deltas);
}

/* The one-activation-row (decode) kernels of the prepared IQ2 weights (in-register grid lookups,
 * cpu_packed_iq_avx2.c) against the batched ones (gathers, 4 rows a tile) bit for bit, and both
 * against ref: random blocks, so every grid index (iq2_xxs bit 7, iq2_xs bits 7 and 8 pick the
 * table quarter), every sign pattern and scale is reached; a padded last panel (N % 16 == 8). */
/* iq1_m weights at the one-row kernel's integer limit: every weight +-9 / 8 (grid entry 2047 = all
 * +1 with delta +1, entry 0 = all -1 with delta -1, by row), so with the activations all +-1 (q8
 * codes +-127 or -128) a pair's S16 = sum (8 g + delta) q8 reaches 16 x 9 x 128, the kernel's bound
 * for one vpdpwssd word; scales 7, d = 1. */
static void iq1m_fill_extreme(char *wq, size_t row, int64_t K, int64_t N) {
    for (int64_t n = 0; n < N; n++)
        for (int64_t b = 0; b < K / QK_K; b++) {
            block_iq1_m *x = (block_iq1_m *)(wq + n * row) + b;
            const int neg = (int)(n % 2);
            memset(x->qs, neg ? 0x00 : 0xFF, sizeof x->qs);
            memset(x->qh, neg ? 0x88 : 0x77, sizeof x->qh);
            const uint16_t d = 0x3C00;   /* f16 1.0, nibble k in the top 4 bits of scale word k */
            for (int k = 0; k < 4; k++) {
                const uint16_t sw = (uint16_t)(0x0FFF | ((d >> (4 * k)) & 15) << 12);
                x->scales[2 * k] = (uint8_t)sw;
                x->scales[2 * k + 1] = (uint8_t)(sw >> 8);
            }
        }
}

/* iq1_s's: every weight +-9 / 8 (entry 2047 with delta +1, entry 0 with delta -1, by row), scales
 * 7, d = 1: with activations +-1 a pair's S_k = sum (8 g + delta) q8 over its 16 weights reaches
 * 16 x 9 x 128 = 18432, a sub-block's 36864 (past int16: the one-row kernel's vpdpwssd takes pairs) */
static void iq1s_fill_extreme(char *wq, size_t row, int64_t K, int64_t N) {
    for (int64_t n = 0; n < N; n++)
        for (int64_t b = 0; b < K / QK_K; b++) {
            block_iq1_s *x = (block_iq1_s *)(wq + n * row) + b;
            const int neg = (int)(n % 2);
            x->d = 0x3C00;
            memset(x->qs, neg ? 0x00 : 0xFF, sizeof x->qs);
            for (int s = 0; s < 8; s++) x->qh[s] = neg ? 0xF000 : 0x7FFF;
        }
}

/* extreme: iq1m_fill_extreme's (iq1s_fill_extreme's) weights and activations +-1 instead of random
 * ones. iq1_s: the one-row run takes each of its kernels (the pair kernel with the gemm's shared
 * activation data, the pair kernel making it per block, the group kernel), each == batched. */
static void test_prepared_iq_one_row_x(pl_dtype dt, int64_t K, int64_t N, bool extreme) {
    pl_rng r = {(uint64_t)dt * 31337 + (uint64_t)K};
    const size_t row = pl_dtype_row_size(dt, K), wbytes = row * (size_t)N;
    char *wq = aligned_alloc(64, (wbytes + 63) & ~(size_t)63);
    if (extreme) {
        if (dt == PL_IQ1_S) iq1s_fill_extreme(wq, row, K, N);
        else iq1m_fill_extreme(wq, row, K, N);
    } else {
        for (int64_t n = 0; n < N; n++)
            for (int64_t b = 0; b < K / QK_K; b++) pl_random_block(&r, dt, (unsigned char *)wq + n * row + b * pl_dtype_get(dt)->type_size);
    }
    pl_tensor w;
    pl_tensor_init(&w, dt, 2, (int64_t[]){K, N}, wq);
    if ((dt == PL_IQ1_S || dt == PL_IQ1_M) && !extreme) iq1_check_coverage(dt, wq, K, N);
    const int64_t M = 5;   /* one tile of 4, then one row alone */
    float *x = malloc((size_t)(K * M) * sizeof(float));
    pl_fill_normal(&r, x, K * M, 1.0f);
    if (extreme)   /* row m: all +1, all -1, then +-1 by pair of groups */
        for (int64_t m = 0; m < M; m++)
            for (int64_t i = 0; i < K; i++) x[m * K + i] = m == 0 ? 1.0f : m == 1 ? -1.0f : ((i / 16 + m) % 2 ? 1.0f : -1.0f);
    float *y_ref = malloc((size_t)(N * M) * 4), *y_prep = malloc((size_t)(N * M) * 4), *y_one = malloc((size_t)N * 4);
    pl_tensor tx, ty;
    pl_tensor_init(&tx, PL_F32, 2, (int64_t[]){K, M}, x);
    pl_tensor_init(&ty, PL_F32, 2, (int64_t[]){N, M}, y_ref);
    pl_node nd = {.op = PL_OP_MATMUL, .src = {&w, &tx}, .dst = &ty};
    const pl_kernel *k = pl_backend_lookup(&pl_backend_cpu, PL_OP_MATMUL, dt);
    CHECK(run_ref(&nd) == PL_OK, "ref matmul %s", pl_dtype_name(dt));
    pl_exec_ctx *prep = cpu_ctx(1, k->work_size(&nd, 1));
    if (!pl_backend_cpu.weight_prepare_size(prep, &w)) {
        printf("prepared %s one row: no prepared layout here (skipped)\n", pl_dtype_name(dt));
    } else {
        const pl_tensor *ws[1] = {&w};
        CHECK(pl_backend_cpu.weight_prepare(prep, ws, 1, NULL, NULL) == PL_OK, "prepare %s", pl_dtype_name(dt));
        pl_tensor_init(&ty, PL_F32, 2, (int64_t[]){N, M}, y_prep);
        CHECK(run_on(&pl_backend_cpu, prep, &nd) == PL_OK, "prepared cpu matmul");
        const double e = pl_nmse(y_prep, y_ref, N * M);
        CHECK(e < 5e-4, "%s K=%lld: prepared vs ref nmse %g", pl_dtype_name(dt), (long long)K, e);
        int variants = 1;
#if PL_CPU_HAVE_AVX2_BUILD
        const int saved_dec = pl_iqx_iq1s_dec, saved_act = pl_iqx_iq1s_act;
        if (dt == PL_IQ1_S) variants = 3;
#endif
        for (int v = 0; v < variants; v++) {
#if PL_CPU_HAVE_AVX2_BUILD
            if (dt == PL_IQ1_S) pl_iqx_iq1s_dec = v < 2, pl_iqx_iq1s_act = v == 0;
#endif
            int same = 0;
            double worst = 0;
            for (int64_t m = 0; m < M; m++) {
                pl_tensor x1, y1;
                pl_tensor_init(&x1, PL_F32, 2, (int64_t[]){K, 1}, x + m * K);
                pl_tensor_init(&y1, PL_F32, 2, (int64_t[]){N, 1}, y_one);
                pl_node n1 = {.op = PL_OP_MATMUL, .src = {&w, &x1}, .dst = &y1};
                CHECK(run_on(&pl_backend_cpu, prep, &n1) == PL_OK, "prepared matmul, one row");
                same += memcmp(y_one, y_prep + m * N, (size_t)N * 4) == 0;
                const double em = pl_nmse(y_one, y_ref + m * N, N);
                if (!(em <= worst)) worst = em;   /* NaN sticks */
            }
            CHECK(same == M, "%s K=%lld N=%lld kernel %d: one row == batched bit for bit (%d of %lld rows)", pl_dtype_name(dt),
                  (long long)K, (long long)N, v, same, (long long)M);
            CHECK(worst < 5e-4, "%s K=%lld kernel %d: one row vs ref nmse %g", pl_dtype_name(dt), (long long)K, v, worst);
        }
#if PL_CPU_HAVE_AVX2_BUILD
        pl_iqx_iq1s_dec = saved_dec, pl_iqx_iq1s_act = saved_act;
#endif
    }
    cpu_ctx_free(prep);
    free(wq); free(x); free(y_ref); free(y_prep); free(y_one);
}

static void test_prepared_iq_one_row(pl_dtype dt, int64_t K, int64_t N) { test_prepared_iq_one_row_x(dt, K, N, false); }

#if PL_CPU_HAVE_AVX2_BUILD
/* The one-row kernel choices of a prepared weight wq (K x N, dt) against each other and the batched
 * tile: 2 activation rows through the tile, then each alone with *choice = 1 (name1) and 0 (name0);
 * all three bit for bit and finite. *choice is restored. */
static void one_row_paths(pl_dtype dt, char *wq, int64_t K, int64_t N, pl_rng *r, int *choice, const char *name1,
                          const char *name0) {
    const int64_t M = 2;
    const char *tn = pl_dtype_name(dt);
    pl_tensor w;
    pl_tensor_init(&w, dt, 2, (int64_t[]){K, N}, wq);
    float *x = malloc((size_t)(K * M) * sizeof(float));
    pl_fill_normal(r, x, K * M, 1.0f);
    float *y_tile = malloc((size_t)(N * M) * 4), *y1v = malloc((size_t)N * 4), *y0v = malloc((size_t)N * 4);
    pl_tensor tx, ty;
    pl_tensor_init(&tx, PL_F32, 2, (int64_t[]){K, M}, x);
    pl_tensor_init(&ty, PL_F32, 2, (int64_t[]){N, M}, y_tile);
    pl_node nd = {.op = PL_OP_MATMUL, .src = {&w, &tx}, .dst = &ty};
    const pl_kernel *k = pl_backend_lookup(&pl_backend_cpu, PL_OP_MATMUL, dt);
    pl_exec_ctx *prep = cpu_ctx(1, k->work_size(&nd, 1));
    if (!pl_backend_cpu.weight_prepare_size(prep, &w)) {
        printf("%s one-row paths: no prepared layout here (skipped)\n", tn);
    } else {
        const pl_tensor *ws[1] = {&w};
        CHECK(pl_backend_cpu.weight_prepare(prep, ws, 1, NULL, NULL) == PL_OK, "prepare %s", tn);
        CHECK(run_on(&pl_backend_cpu, prep, &nd) == PL_OK, "prepared %s matmul, 2 rows", tn);
        const int saved = *choice;
        int same1 = 0, same0 = 0, finite = 1;
        for (int64_t m = 0; m < M; m++) {
            pl_tensor x1, y1;
            pl_tensor_init(&x1, PL_F32, 2, (int64_t[]){K, 1}, x + m * K);
            pl_node n1 = {.op = PL_OP_MATMUL, .src = {&w, &x1}, .dst = &y1};
            *choice = 1;
            pl_tensor_init(&y1, PL_F32, 2, (int64_t[]){N, 1}, y1v);
            CHECK(run_on(&pl_backend_cpu, prep, &n1) == PL_OK, "%s one row, %s", tn, name1);
            *choice = 0;
            pl_tensor_init(&y1, PL_F32, 2, (int64_t[]){N, 1}, y0v);
            CHECK(run_on(&pl_backend_cpu, prep, &n1) == PL_OK, "%s one row, %s", tn, name0);
            same1 += memcmp(y1v, y_tile + m * N, (size_t)N * 4) == 0;
            same0 += memcmp(y0v, y1v, (size_t)N * 4) == 0;
            for (int64_t i = 0; i < N; i++) finite &= isfinite(y1v[i]) && isfinite(y0v[i]) && isfinite(y_tile[m * N + i]);
        }
        *choice = saved;
        CHECK(finite, "%s one row: finite results", tn);
        CHECK(same1 == M, "%s K=%lld one row, %s == batched bit for bit (%d of %lld rows)", tn, (long long)K, name1, same1,
              (long long)M);
        CHECK(same0 == M, "%s K=%lld one row, %s == %s bit for bit (%d of %lld rows)", tn, (long long)K, name1, name0, same0,
              (long long)M);
    }
    cpu_ctx_free(prep);
    free(x); free(y_tile); free(y1v); free(y0v);
}
#endif

/* iq2_xs, one activation row: the gather kernel (pl_iqx_iq2xs_dec = 1, the default) == the permute
 * kernel (0, PL_CPU_IQ2XSDEC=0) == the batched tile, bit for bit, on weights that reach every grid
 * index (the gathers read the table's padding at both ends), all 128 sign indices and all 16
 * scales, with a padded last panel. */
static void test_prepared_iq2xs_one_row_paths(void) {
#if PL_CPU_HAVE_AVX2_BUILD
    const pl_dtype dt = PL_IQ2_XS;
    const int64_t K = 2048, N = 56;
    pl_rng r = {4242};
    const size_t row = pl_dtype_row_size(dt, K), wbytes = row * (size_t)N;
    char *wq = aligned_alloc(64, (wbytes + 63) & ~(size_t)63);
    for (int64_t n = 0; n < N * (K / QK_K); n++) pl_random_block(&r, dt, (unsigned char *)wq + n * sizeof(block_iq2_xs));
    static unsigned char seen[512];
    unsigned signs[4] = {0}, scales = 0;
    memset(seen, 0, sizeof seen);
    for (int64_t n = 0; n < N * (K / QK_K); n++) {
        const block_iq2_xs *x = (const block_iq2_xs *)wq + n;
        for (int g = 0; g < 32; g++) seen[x->qs[g] & 511] = 1, signs[x->qs[g] >> 14] |= 1u << ((x->qs[g] >> 9) & 31);
        for (int s = 0; s < 8; s++) scales |= 1u << (x->scales[s] & 15) | 1u << (x->scales[s] >> 4);
    }
    int n_seen = 0;
    for (int i = 0; i < 512; i++) n_seen += seen[i];
    CHECK(n_seen == 512 && scales == 0xFFFF && (signs[0] & signs[1] & signs[2] & signs[3]) == 0xFFFFFFFFu,
          "iq2_xs coverage: %d of 512 grid indices, scales %x", n_seen, scales);
    one_row_paths(dt, wq, K, N, &r, &pl_iqx_iq2xs_dec, "gathers", "permutes");
    free(wq);
#endif
}

/* iq2_xxs, one activation row: the one-row kernel == the batched tile (M = 2) bit for bit on
 * weights that reach every grid index, all 128 sign indices of each of the 4 group positions and
 * all 16 scales (checked, so the draw cannot silently lose coverage), with a padded last panel.
 * K > 64 blocks: the kernel transposes the activation per block (PL_IQ2XXSX_QT_MAX) instead of once. */
static void test_prepared_iq2xxs_one_row_paths(int64_t K, int64_t N) {
#if PL_CPU_HAVE_AVX2_BUILD
    const pl_dtype dt = PL_IQ2_XXS;
    pl_rng r = {4243 + (uint64_t)K};
    const size_t row = pl_dtype_row_size(dt, K), wbytes = row * (size_t)N;
    char *wq = aligned_alloc(64, (wbytes + 63) & ~(size_t)63);
    for (int64_t n = 0; n < N * (K / QK_K); n++) pl_random_block(&r, dt, (unsigned char *)wq + n * sizeof(block_iq2_xxs));
    static unsigned char seen[256];
    uint32_t signs[4][4] = {{0}}, scales = 0;
    memset(seen, 0, sizeof seen);
    for (int64_t n = 0; n < N * (K / QK_K); n++) {
        const uint8_t *qs = (const uint8_t *)((const block_iq2_xxs *)wq + n)->qs;
        for (int sb = 0; sb < 8; sb++) {
            const uint32_t sw = (uint32_t)qs[8 * sb + 4] | (uint32_t)qs[8 * sb + 5] << 8 | (uint32_t)qs[8 * sb + 6] << 16 |
                                (uint32_t)qs[8 * sb + 7] << 24;
            for (int l = 0; l < 4; l++) {
                const uint32_t si = (sw >> (7 * l)) & 127;
                seen[qs[8 * sb + l]] = 1;
                signs[l][si >> 5] |= 1u << (si & 31);
            }
            scales |= 1u << (sw >> 28);
        }
    }
    int n_seen = 0, all_signs = 1;
    for (int i = 0; i < 256; i++) n_seen += seen[i];
    for (int l = 0; l < 4; l++)
        for (int j = 0; j < 4; j++) all_signs &= signs[l][j] == 0xFFFFFFFFu;
    CHECK(n_seen == 256 && scales == 0xFFFF && all_signs, "iq2_xxs K=%lld coverage: %d of 256 grid indices, scales %x, signs %d",
          (long long)K, n_seen, scales, all_signs);
    one_row_paths(dt, wq, K, N, &r, &pl_iqx_iq2xxs_dec, "new kernel", "PL_CPU_IQ2XXSDEC=0 kernel");
    free(wq);
#endif
}

static void test_prepared_matmul_id(pl_dtype dt, int64_t K, int64_t N, int64_t X, int64_t k) {
    pl_rng r = {(uint64_t)dt * 104729 + (uint64_t)K + (uint64_t)X};
    const size_t row = pl_dtype_row_size(dt, K), wbytes = row * (size_t)(N * X);
    float *wf = malloc((size_t)K * sizeof(float));
    char *wq = aligned_alloc(64, (wbytes + 63) & ~(size_t)63);
    for (int64_t n = 0; n < N * X; n++) {
        pl_fill_normal(&r, wf, K, 1.0f);
        fill_row(&r, dt, wf, wq + (size_t)n * row, K);
    }
    pl_tensor w;
    pl_tensor_init(&w, dt, 3, (int64_t[]){K, N, X}, wq);
    const int64_t T = 29;   /* tokens */
    float *x = malloc((size_t)(K * T) * sizeof(float));
    pl_fill_normal(&r, x, K * T, 1.0f);
    int32_t *ids = malloc((size_t)(k * T) * sizeof *ids);
    for (int64_t t = 0; t < T; t++)   /* distinct experts per token, all experts used, one expert by most */
        for (int64_t j = 0; j < k; j++) ids[t * k + j] = (int32_t)(j == 0 ? (t % 3 ? 1 : t % X) : (t + 2 * j) % X);
    for (int64_t t = 0; t < T; t++)
        for (int64_t j = 1; j < k; j++)
            if (ids[t * k + j] == ids[t * k]) ids[t * k + j] = (ids[t * k + j] + 1 + (int32_t)k) % (int32_t)X;
    const size_t ny = (size_t)(N * k * T);
    float *y_ref = malloc(ny * 4), *y_plain = malloc(ny * 4), *y_prep = malloc(ny * 4), *y_one = malloc((size_t)(N * k) * 4);
    pl_tensor tx, tid, ty;
    pl_tensor_init(&tx, PL_F32, 3, (int64_t[]){K, 1, T}, x);
    pl_tensor_init(&tid, PL_I32, 2, (int64_t[]){k, T}, ids);
    pl_tensor_init(&ty, PL_F32, 3, (int64_t[]){N, k, T}, y_ref);
    pl_node nd = {.op = PL_OP_MATMUL_ID, .src = {&w, &tx, &tid}, .dst = &ty};
    CHECK(pl_node_validate(&nd) == PL_OK, "matmul_id node: %s", pl_last_error());
    const pl_kernel *kn = pl_backend_lookup(&pl_backend_cpu, PL_OP_MATMUL_ID, dt);
    CHECK(kn != NULL, "cpu matmul_id for %s", pl_dtype_name(dt));
    if (!kn) return;
    const size_t work = kn->work_size(&nd, 2);
    CHECK(run_ref(&nd) == PL_OK, "ref matmul_id %s", pl_dtype_name(dt));
    pl_exec_ctx *plain = cpu_ctx(2, work), *prep = cpu_ctx(2, work);
    ty.data = y_plain;
    CHECK(run_on(&pl_backend_cpu, plain, &nd) == PL_OK, "plain cpu matmul_id: %s", pl_last_error());
    const double e_plain_ref = pl_nmse(y_plain, y_ref, (int64_t)ny);
    CHECK(e_plain_ref < 5e-4 && e_plain_ref == e_plain_ref, "%s: unprepared matmul_id vs ref nmse %g", pl_dtype_name(dt),
          e_plain_ref);
    const size_t psz = pl_backend_cpu.weight_prepare_size(prep, &w);
    if (!psz) {
        printf("prepared matmul_id %s: no prepared layout here (skipped)\n", pl_dtype_name(dt));
    } else {
        copy_log log = {wq, wbytes, calloc(wbytes, 1)};
        const pl_tensor *ws[1] = {&w};
        CHECK(pl_backend_cpu.weight_prepare(prep, ws, 1, on_copied, &log) == PL_OK, "prepare experts %s", pl_dtype_name(dt));
        size_t missed = 0;
        for (size_t i = 0; i < wbytes; i++) missed += !log.seen[i];
        CHECK(missed == 0, "%s experts: copied() reported every byte (%zu missed)", pl_dtype_name(dt), missed);
        free(log.seen);
        bool all = true;
        for (int64_t e = 0; e < X; e++) {
            pl_tensor v;
            pl_cpu_expert_view(&w, e, &v);
            all &= pl_cpu_packed_find(prep, &v) != NULL;
        }
        CHECK(all, "%s: every expert's copy is found by its view", pl_dtype_name(dt));
        ty.data = y_prep;
        CHECK(run_on(&pl_backend_cpu, prep, &nd) == PL_OK, "prepared cpu matmul_id: %s", pl_last_error());
        const double e_ref = pl_nmse(y_prep, y_ref, (int64_t)ny), e_plain = pl_nmse(y_prep, y_plain, (int64_t)ny);
        CHECK(e_ref < 5e-4 && e_ref == e_ref, "%s K=%lld N=%lld X=%lld: prepared matmul_id vs ref nmse %g",
              pl_dtype_name(dt), (long long)K, (long long)N, (long long)X, e_ref);
        CHECK(e_plain < 1e-9, "%s: prepared vs unprepared matmul_id nmse %g", pl_dtype_name(dt), e_plain);
        bool same = true;
        for (int64_t t = 0; t < T && same; t++) {
            pl_tensor x1, i1, y1;
            pl_tensor_init(&x1, PL_F32, 3, (int64_t[]){K, 1, 1}, x + t * K);
            pl_tensor_init(&i1, PL_I32, 2, (int64_t[]){k, 1}, ids + t * k);
            pl_tensor_init(&y1, PL_F32, 3, (int64_t[]){N, k, 1}, y_one);
            pl_node n1 = {.op = PL_OP_MATMUL_ID, .src = {&w, &x1, &i1}, .dst = &y1};
            CHECK(run_on(&pl_backend_cpu, prep, &n1) == PL_OK, "prepared matmul_id, one token");
            same = memcmp(y_one, y_prep + t * N * k, (size_t)(N * k) * 4) == 0;
        }
        CHECK(same, "%s: one token alone gives bit for bit its result in the batch", pl_dtype_name(dt));
    }
    ids[5] = (int32_t)X;
    ty.data = y_prep;
    CHECK(run_on(&pl_backend_cpu, prep, &nd) == PL_ERR_INVALID_ARG, "cpu matmul_id refuses expert id %lld of %lld",
          (long long)X, (long long)X);
    cpu_ctx_free(plain);
    cpu_ctx_free(prep);
    free(wf); free(wq); free(x); free(ids); free(y_ref); free(y_plain); free(y_prep); free(y_one);
}

int main(void) {
    printf("cpu: %s; prepared kernels %s\n", pl_cpu_features_get()->description,
           pl_cpu_has_vnni512() ? "on" : "off (this cpu lacks AVX-512 VNNI)");
    test_legacy_kernels();
    test_ladder_iq_tiles();
    test_prepared_matmul(PL_Q4_K, 512, 64);
    test_prepared_matmul(PL_Q4_K, 1024, 136);
    test_prepared_matmul(PL_Q6_K, 768, 48);
    test_prepared_matmul(PL_Q6_K, 512, 40);
    test_prepared_matmul(PL_F16, 200, 192);
    test_prepared_matmul(PL_F16, 1024, 128);
    test_prepared_matmul(PL_Q4_0, 512, 64);
    test_prepared_matmul(PL_Q4_0, 96, 136);    /* an odd block count, a padded last panel */
    test_prepared_matmul(PL_Q5_0, 768, 48);
    test_prepared_matmul(PL_Q5_0, 224, 40);
    test_prepared_matmul(PL_Q4_1, 512, 64);
    test_prepared_matmul(PL_Q4_1, 96, 136);    /* an odd block count, a padded last panel */
    test_prepared_matmul(PL_Q5_1, 768, 48);
    test_prepared_matmul(PL_Q5_1, 224, 40);
    test_prepared_matmul(PL_Q2_K, 512, 64);
    test_prepared_matmul(PL_Q2_K, 768, 136);   /* an odd block count, a padded last panel */
    test_prepared_matmul(PL_Q3_K, 1024, 48);
    test_prepared_matmul(PL_Q3_K, 256, 40);    /* one block, a padded last panel */
    test_prepared_matmul(PL_TQ2_0, 1024, 64);
    test_prepared_matmul(PL_TQ2_0, 768, 40);   /* an odd block count, a padded last panel */
    test_prepared_matmul(PL_TQ1_0, 512, 48);
    test_prepared_matmul(PL_TQ1_0, 1280, 136); /* an odd block count, a padded last panel */
    test_prepared_matmul(PL_IQ2_XXS, 1024, 64);
    test_prepared_matmul(PL_IQ2_XXS, 768, 40);  /* an odd block count, a padded last panel */
    test_prepared_matmul(PL_IQ2_XS, 1024, 64);
    test_prepared_matmul(PL_IQ2_XS, 1280, 136);  /* an odd block count, a padded last panel */
    test_prepared_iq_one_row(PL_IQ2_XXS, 1280, 40);
    test_prepared_iq_one_row(PL_IQ2_XS, 768, 40);
    test_prepared_iq2xs_one_row_paths();
    test_prepared_iq2xxs_one_row_paths(2048, 56);
    test_prepared_iq2xxs_one_row_paths(65 * 256, 24);
    test_prepared_matmul(PL_IQ1_S, 1024, 64);
    test_prepared_matmul(PL_IQ1_S, 768, 40);    /* an odd block count, a padded last panel */
    test_prepared_matmul(PL_IQ1_M, 1024, 64);
    test_prepared_matmul(PL_IQ1_M, 1280, 136);  /* an odd block count, a padded last panel */
    test_prepared_iq_one_row(PL_IQ1_S, 2304, 136);  /* 9 blocks x 136 rows x 32 groups: every grid index */
    test_prepared_iq_one_row(PL_IQ1_M, 2304, 136);
    /* 65 blocks: more than the gemm's shared activation data holds (PL_IQ1MX_ACT_MAX), the one-row
     * kernel makes its own per block */
    test_prepared_iq_one_row(PL_IQ1_M, 65 * 256, 24);
    test_prepared_iq_one_row_x(PL_IQ1_M, 512, 40, true);   /* S16 at its bound */
    /* iq1_s: 65 blocks (past PL_IQ1SX_ACT_MAX: the pair kernel's per-block path alone), a pair's S_k
     * at its int16 bound */
    test_prepared_iq_one_row(PL_IQ1_S, 65 * 256, 24);
    test_prepared_iq_one_row_x(PL_IQ1_S, 512, 40, true);
    test_prepared_matmul(PL_IQ2_S, 1024, 64);
    test_prepared_matmul(PL_IQ2_S, 768, 40);    /* an odd block count, a padded last panel */
    test_prepared_matmul(PL_Q5_K, 1024, 64);
    test_prepared_matmul(PL_Q5_K, 768, 136);    /* an odd block count, a padded last panel */
    /* qwen3moe experts: the types Q4_K_M gives them (q4_K gate/up, q6_K down
     * or its q5_0 / q8_0 fallbacks for 128-wide rows) and f16 */
    test_prepared_matmul_id(PL_Q4_K, 256, 128, 8, 2);
    test_prepared_matmul_id(PL_Q6_K, 512, 72, 6, 3);   /* a padded last panel */
    test_prepared_matmul_id(PL_F16, 128, 256, 8, 2);
    test_prepared_matmul_id(PL_Q5_0, 128, 256, 8, 2);
    test_prepared_matmul_id(PL_Q4_1, 128, 256, 8, 2);
    test_prepared_matmul_id(PL_Q8_0, 128, 256, 8, 2);  /* no prepared layout: the plain kernels */
    test_prepared_matmul_id(PL_Q5_K, 256, 72, 6, 2);   /* a padded last panel */
    for (int64_t M = 1; M <= 9; M += 8) {
        test_fusion(PL_Q4_K, M, 256);
        test_fusion(PL_Q6_K, M, 256);
        test_fusion(PL_F16, M, 256);
        test_fusion(PL_Q4_K, M, 136);   /* a padded last panel */
        test_fusion(PL_Q6_K, M, 136);
        test_fusion(PL_Q4_0, M, 256);
        test_fusion(PL_Q5_0, M, 136);
        test_fusion(PL_Q4_1, M, 256);
        test_fusion(PL_Q5_1, M, 136);
        test_fusion2(PL_Q4_K, PL_Q4_1, M, 256);   /* q8_K and q8_1 activations in one group */
        test_fusion2(PL_Q5_1, PL_Q6_K, M, 136);
        test_fusion2(PL_Q4_0, PL_Q4_1, M, 256);   /* q8_0 and q8_1 */
        test_fusion(PL_Q2_K, M, 256);
        test_fusion(PL_Q3_K, M, 136);
        test_fusion(PL_TQ2_0, M, 256);
        test_fusion(PL_TQ1_0, M, 136);
        test_fusion(PL_IQ2_XXS, M, 136);
        test_fusion(PL_IQ2_XS, M, 256);
        test_fusion(PL_IQ1_S, M, 136);
        test_fusion(PL_IQ1_M, M, 256);
        test_fusion(PL_IQ2_S, M, 136);
        test_fusion(PL_Q5_K, M, 256);
        test_fusion2(PL_Q5_K, PL_Q6_K, M, 136);   /* Q5_K_M's mix, one q8_K conversion */
    }
    test_attention_prefill(PL_F16, 128, 16, 8, 100, 0, 0);
    test_attention_prefill(PL_F16, 128, 4, 2, 160, 37, 0);
    test_attention_prefill(PL_F32, 64, 6, 3, 70, 5, 0);
    test_attention_prefill(PL_F16, 96, 4, 4, 64, 130, 0);
    /* sliding windows (gemma3's local layers): rows of one run start at
     * different positions; the blocked decode path and the per-head one */
    test_attention_prefill(PL_F16, 128, 16, 8, 100, 37, 30);
    test_attention_prefill(PL_F32, 64, 6, 3, 70, 5, 1);
    test_attention_decode(PL_F16, 128, 16, 8, 1, 300, 100);
    test_attention_decode(PL_F16, 64, 8, 2, 3, 130, 50);
    test_attention_work_plan(PL_F16, 160, 16, 8, 64);
    test_attention_work_plan(PL_F16, 128, 32, 8, 4096);
    test_attention_work_plan(PL_F32, 64, 8, 2, 100);
    test_attention_decode(PL_F16, 128, 16, 8, 1, 300, 0);   /* Qwen3 0.6B/1.7B shapes, pieces + a tail of 5 */
    test_attention_decode(PL_F16, 64, 8, 2, 3, 130, 0);     /* group 4, three tokens, two slots */
    test_attention_decode(PL_F32, 32, 4, 2, 2, 70, 0);
    test_attention_decode(PL_F16, 128, 16, 8, 1, 4, 0);     /* fewer positions than 8 */
    test_attention_decode(PL_F16, 32, 128, 32, 2, 90, 0);   /* 128 rows: tasks of 16 KV heads, part of each row */
    test_att_dots(true, 128, 37, 3);
    test_att_dots(true, 80, 21, 2);    /* a tail past the last 32 dims */
    test_att_dots(false, 64, 64, 4);
    test_att_dots(true, 128, 5, 2);    /* fewer positions than one batch */
    test_elastic_pool();
    return pl_test_summary("test_cpu_backend");
}
