/*
 * Cross-backend op tests (in the spirit of llama.cpp's test-backend-ops).
 *
 * For every backend other than `ref` and every kernel in its table, random
 * inputs of typical and edge shapes (strided views where the schema allows)
 * are run through that kernel and through ref's, and the outputs compared by
 * normalized mean squared error NMSE = sum((a-b)^2) / sum(b^2):
 *   1e-7 by default; 5e-4 for MATMUL / ATTENTION whose key dtype is not f32
 *   (backends may round or quantize activations as llama.cpp does).
 * A NaN/Inf output always fails. Every output and work buffer has guard bytes
 * on both sides, outputs start as NaN (so an element never written fails),
 * inputs must come back unmodified, and bytes of a strided output outside its
 * rows must be left alone.
 *
 * Also: table consistency (every listed kernel dispatches through
 * pl_backend_lookup, ref covers every (op, dtype) another backend covers and
 * every dtype the schemas allow), pl_node_validate rejections, and ref
 * against hand-computed values. If no other backend has kernels yet, ref is
 * run against itself as a smoke test (determinism, guards, sanitizers).
 *
 * Device backends (pl_backend.device, i.e. cuda): each case's buffers,
 * guards included, are mirrored to device buffers and the results copied
 * back, so the same checks apply; without the device (its probe says so)
 * the backend is skipped with "not available here". PL_OPS_BACKENDS=a,b
 * restricts the run to those backends (scripts/gpu-check.sh: cuda).
 *
 * `test_ops --perf` instead times every op on every host backend for
 * Qwen3-0.6B shapes (not run by ctest; test_cuda --perf times cuda).
 */
#include "testutil.h"
#include "ophelpers.h"
#include "kernels/abi.h"
#include "kernels/device.h"
#include "quant/quant.h"
#include "core/fp16.h"
#include "pocketllm.h"
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#define GUARD 64
#define GUARD_BYTE 0xA5
#define NAN_BYTE 0xFF   /* 0xFFFFFFFF is a NaN as f32, 0xFFFF as f16 */
#define DST PL_MAX_SRC  /* slot of the output in op_case arrays */

/* ---- test tensors ---------------------------------------------------------*/

typedef struct tbuf {
    unsigned char *base;      /* GUARD | size bytes | GUARD */
    size_t size;              /* bytes spanned by the tensor */
    unsigned char *pristine;  /* the initial content */
} tbuf;

typedef struct op_case {
    pl_op op;
    pl_dtype key;
    char desc[112];
    pl_node node;
    pl_tensor t[PL_MAX_SRC + 1];   /* srcs, then the output at DST */
    tbuf buf[PL_MAX_SRC + 1];
} op_case;

static size_t tensor_span(const pl_tensor *t) {
    size_t span = pl_dtype_row_size(t->dtype, t->ne[0]);
    for (int d = 1; d < PL_MAX_DIMS; d++) span += (size_t)(t->ne[d] - 1) * t->nb[d];
    return span;
}

/* A tensor in slot `slot` of the case. pad > 0 adds pad bytes after every
 * row, and again after every plane, so it is a strided view; the padding is
 * filled with NaN bytes, so a kernel that reads it produces NaNs. */
static pl_tensor *mk(op_case *c, int slot, pl_dtype dt, int n_dims, int64_t ne0, int64_t ne1, int64_t ne2,
                     size_t pad) {
    pl_tensor *t = &c->t[slot];
    const int64_t ne[4] = {ne0, ne1, ne2, 1};
    pl_tensor_init(t, dt, n_dims, ne, NULL);
    if (pad) {
        t->nb[1] = pl_dtype_row_size(dt, ne0) + pad;
        t->nb[2] = t->nb[1] * (size_t)ne1 + pad;
        t->nb[3] = t->nb[2] * (size_t)ne2 + pad;
    }
    snprintf(t->name, sizeof t->name, "%s%d", slot == DST ? "dst" : "src", slot == DST ? 0 : slot);
    tbuf *b = &c->buf[slot];
    b->size = tensor_span(t);
    b->base = malloc(b->size + 2 * GUARD);
    memset(b->base, GUARD_BYTE, GUARD);
    memset(b->base + GUARD, NAN_BYTE, b->size);
    memset(b->base + GUARD + b->size, GUARD_BYTE, GUARD);
    t->data = b->base + GUARD;
    if (slot == DST) c->node.dst = t;
    else c->node.src[slot] = t;
    return t;
}

static float *f32p(const pl_tensor *t, int64_t i0, int64_t i1, int64_t i2) {
    return (float *)((char *)pl_tensor_row(t, i1, i2, 0) + i0 * 4);
}

static void fill_f32(pl_tensor *t, pl_rng *r, float sigma) {
    for (int64_t i2 = 0; i2 < t->ne[2]; i2++)
        for (int64_t i1 = 0; i1 < t->ne[1]; i1++) pl_fill_normal(r, f32p(t, 0, i1, i2), t->ne[0], sigma);
}

static void set_i32(pl_tensor *t, int64_t i, int32_t v) {
    memcpy((char *)t->data + i * (int64_t)t->nb[0], &v, 4);
}

/* Snapshots every buffer once the case is filled. */
static void seal(op_case *c) {
    for (int s = 0; s <= DST; s++) {
        tbuf *b = &c->buf[s];
        if (!b->base) continue;
        b->pristine = malloc(b->size + 2 * GUARD);
        memcpy(b->pristine, b->base, b->size + 2 * GUARD);
    }
}

static void free_case(op_case *c) {
    for (int s = 0; s <= DST; s++) {
        free(c->buf[s].base);
        free(c->buf[s].pristine);
    }
    memset(c, 0, sizeof *c);
}

/* ---- case generators --------------------------------------------------------*/

#define MAX_CASES 64

static op_case *new_case(op_case *cs, int *n, pl_op op, pl_dtype key) {
    op_case *c = &cs[(*n)++];
    memset(c, 0, sizeof *c);
    c->op = op;
    c->key = key;
    c->node.op = op;
    return c;
}

static int gen_get_rows(op_case *cs, pl_dtype key, pl_rng *r) {
    int n = 0;
    const int64_t bs = pl_dtype_get(key)->block_size;
    const int64_t Cs[3] = {bs == 1 ? 33 : bs == 32 ? 96 : 768, 256, 512};
    const int64_t ns[3] = {1, 7, 33};
    for (int ci = 0; ci < 3; ci++)
        for (int ni = 0; ni < 3; ni++) {
            const int64_t C = Cs[ci], R = 13, nid = ns[ni];
            const size_t pad = (ci + ni) % 2 ? 8 : 0;
            op_case *c = new_case(cs, &n, PL_OP_GET_ROWS, key);
            snprintf(c->desc, sizeof c->desc, "C=%lld R=%lld n=%lld%s", (long long)C, (long long)R, (long long)nid,
                     pad ? " strided" : "");
            pl_fill_rows(mk(c, 0, key, 2, C, R, 1, pad), r, 1.0f);
            pl_tensor *ids = mk(c, 1, PL_I32, 1, nid, 1, 1, 0);
            for (int64_t i = 0; i < nid; i++) set_i32(ids, i, i == 0 ? (int32_t)(R - 1) : i == 1 ? 0 : (int32_t)pl_rng_int(r, 0, R - 1));
            mk(c, DST, PL_F32, 2, C, nid, 1, 0);
            seal(c);
        }
    return n;
}

static int gen_matmul(op_case *cs, pl_dtype key, pl_rng *r) {
    int n = 0;
    const int64_t bs = pl_dtype_get(key)->block_size;
    const int64_t Ks[3] = {bs == 1 ? 33 : bs == 32 ? 64 : 768, 256, 512};
    const int64_t Ns[3] = {1, 17, 64};
    const int64_t Ms[4] = {1, 2, 7, 33};
    for (int ki = 0; ki < 3; ki++)
        for (int ni = 0; ni < 3; ni++)
            for (int mi = 0; mi < 4; mi++) {
                /* the small-K edge only with a few shapes, to keep this quick */
                if (ki == 0 && (ni != 1 || mi == 1)) continue;
                const int64_t K = Ks[ki], N = Ns[ni], M = Ms[mi];
                const size_t xpad = (mi % 2) ? 16 : 0;           /* odd M: strided x */
                const size_t wpad = (ni == 1 && mi == 3) ? 8 : 0; /* one strided W */
                op_case *c = new_case(cs, &n, PL_OP_MATMUL, key);
                snprintf(c->desc, sizeof c->desc, "K=%lld N=%lld M=%lld%s%s", (long long)K, (long long)N,
                         (long long)M, xpad ? " x-strided" : "", wpad ? " W-strided" : "");
                pl_fill_rows(mk(c, 0, key, 2, K, N, 1, wpad), r, 1.0f);
                fill_f32(mk(c, 1, PL_F32, 2, K, M, 1, xpad), r, 1.0f);
                mk(c, DST, PL_F32, 2, N, M, 1, 0);
                seal(c);
            }
    return n;
}

static int gen_rms_norm(op_case *cs, pl_rng *r) {
    int n = 0;
    static const int64_t shapes[][3] = {{64, 1, 1}, {256, 7, 1}, {1000, 3, 1}, {128, 4, 3}, {1024, 33, 1}};
    for (int i = 0; i < 5; i++) {
        const size_t pad = i % 2 ? 12 : 0;
        op_case *c = new_case(cs, &n, PL_OP_RMS_NORM, PL_F32);
        const int nd = shapes[i][2] > 1 ? 3 : 2;
        snprintf(c->desc, sizeof c->desc, "[%lld, %lld, %lld]%s", (long long)shapes[i][0], (long long)shapes[i][1],
                 (long long)shapes[i][2], pad ? " strided" : "");
        fill_f32(mk(c, 0, PL_F32, nd, shapes[i][0], shapes[i][1], shapes[i][2], pad), r, 2.0f);
        pl_tensor *w = mk(c, 1, PL_F32, 1, shapes[i][0], 1, 1, 0);
        pl_fill_unif(r, w->data, shapes[i][0], 0.5f, 1.5f);
        mk(c, DST, PL_F32, nd, shapes[i][0], shapes[i][1], shapes[i][2], 0);
        c->node.fparams[0] = i % 2 ? 1e-5f : 1e-6f;
        seal(c);
    }
    return n;
}

static int gen_add(op_case *cs, pl_rng *r) {
    int n = 0;
    static const int64_t shapes[][2] = {{1, 1}, {17, 7}, {256, 33}, {1024, 2}};
    for (int i = 0; i < 4; i++)
        for (int bc = 0; bc < 2; bc++) {
            const int64_t ne0 = shapes[i][0], ne1 = shapes[i][1];
            const size_t apad = (i + bc) % 2 ? 8 : 0;
            op_case *c = new_case(cs, &n, PL_OP_ADD, PL_F32);
            snprintf(c->desc, sizeof c->desc, "[%lld, %lld]%s%s", (long long)ne0, (long long)ne1,
                     bc ? " broadcast" : "", apad ? " strided" : "");
            fill_f32(mk(c, 0, PL_F32, 2, ne0, ne1, 1, apad), r, 1.0f);
            fill_f32(mk(c, 1, PL_F32, bc ? 1 : 2, ne0, bc ? 1 : ne1, 1, bc ? 0 : 4), r, 1.0f);
            mk(c, DST, PL_F32, 2, ne0, ne1, 1, 0);
            seal(c);
        }
    return n;
}

static int gen_swiglu(op_case *cs, pl_rng *r) {
    int n = 0;
    static const int64_t shapes[][2] = {{1, 1}, {17, 7}, {768, 3}, {3072, 2}};
    for (int i = 0; i < 4; i++) {
        const size_t pad = i % 2 ? 8 : 0;
        op_case *c = new_case(cs, &n, PL_OP_SWIGLU, PL_F32);
        snprintf(c->desc, sizeof c->desc, "[%lld, %lld]%s", (long long)shapes[i][0], (long long)shapes[i][1],
                 pad ? " strided" : "");
        fill_f32(mk(c, 0, PL_F32, 2, shapes[i][0], shapes[i][1], 1, pad), r, 4.0f);
        fill_f32(mk(c, 1, PL_F32, 2, shapes[i][0], shapes[i][1], 1, pad ? 4 : 0), r, 1.0f);
        mk(c, DST, PL_F32, 2, shapes[i][0], shapes[i][1], 1, 0);
        seal(c);
    }
    return n;
}

/* geglu: gates spread over [-16, 16] so the clamps at +-10 and the f16 table
 * both get exercised; scale / softcap on values large enough to saturate. */
static int gen_geglu(op_case *cs, pl_rng *r) {
    int n = 0;
    static const int64_t shapes[][2] = {{1, 1}, {17, 7}, {640, 3}, {2048, 2}};
    for (int i = 0; i < 4; i++) {
        const size_t pad = i % 2 ? 8 : 0;
        op_case *c = new_case(cs, &n, PL_OP_GEGLU, PL_F32);
        snprintf(c->desc, sizeof c->desc, "[%lld, %lld]%s", (long long)shapes[i][0], (long long)shapes[i][1],
                 pad ? " strided" : "");
        fill_f32(mk(c, 0, PL_F32, 2, shapes[i][0], shapes[i][1], 1, pad), r, 6.0f);
        fill_f32(mk(c, 1, PL_F32, 2, shapes[i][0], shapes[i][1], 1, pad ? 4 : 0), r, 1.0f);
        mk(c, DST, PL_F32, 2, shapes[i][0], shapes[i][1], 1, 0);
        seal(c);
    }
    return n;
}

static int gen_scale_softcap(op_case *cs, pl_op op, pl_rng *r) {
    int n = 0;
    static const int64_t shapes[][3] = {{1, 1, 1}, {17, 7, 1}, {256, 4, 3}, {4096, 9, 1}};
    static const float params[] = {16.0f, 0.125f, 30.0f, 2.5f};
    for (int i = 0; i < 4; i++) {
        const size_t pad = i % 2 ? 8 : 0;
        const int nd = shapes[i][2] > 1 ? 3 : 2;
        op_case *c = new_case(cs, &n, op, PL_F32);
        c->node.fparams[0] = op == PL_OP_SCALE && i == 3 ? -1.5f : params[i];
        snprintf(c->desc, sizeof c->desc, "[%lld, %lld, %lld] %g%s", (long long)shapes[i][0], (long long)shapes[i][1],
                 (long long)shapes[i][2], c->node.fparams[0], pad ? " strided" : "");
        fill_f32(mk(c, 0, PL_F32, nd, shapes[i][0], shapes[i][1], shapes[i][2], pad), r, 20.0f);
        mk(c, DST, PL_F32, nd, shapes[i][0], shapes[i][1], shapes[i][2], 0);
        seal(c);
    }
    return n;
}

static int gen_rope(op_case *cs, pl_rng *r) {
    int n = 0;
    static const int cfg[][6] = {
        /* head_dim, n_head, n_tok, n_rot, mode, freq_factors (llama3's rope_freqs) */
        {64, 1, 1, 64, 0, 0}, {128, 4, 7, 128, 2, 0}, {128, 4, 7, 64, 0, 0}, {64, 2, 33, 32, 2, 0},
        {128, 16, 3, 128, 2, 0}, {8, 3, 5, 8, 0, 0}, {96, 2, 4, 96, 0, 0}, {128, 8, 2, 128, 0, 0},
        {64, 4, 9, 64, 0, 1}, {128, 8, 5, 128, 0, 1}, {128, 4, 7, 64, 2, 1}, {64, 2, 33, 32, 0, 1},
    };
    for (int i = 0; i < (int)(sizeof cfg / sizeof cfg[0]); i++) {
        const int64_t hd = cfg[i][0], nh = cfg[i][1], nt = cfg[i][2];
        const size_t pad = i % 3 == 1 ? 16 : 0;
        op_case *c = new_case(cs, &n, PL_OP_ROPE, PL_F32);
        c->node.iparams[0] = cfg[i][3];
        c->node.iparams[1] = cfg[i][4];
        c->node.fparams[0] = i % 2 ? 1000000.0f : 10000.0f;
        c->node.fparams[1] = i == 3 ? 0.25f : 1.0f;
        snprintf(c->desc, sizeof c->desc, "[%lld, %lld, %lld] n_rot=%d %s base=%g scale=%g%s%s", (long long)hd,
                 (long long)nh, (long long)nt, cfg[i][3], cfg[i][4] ? "neox" : "normal", c->node.fparams[0],
                 c->node.fparams[1], pad ? " strided" : "", cfg[i][5] ? " ff" : "");
        fill_f32(mk(c, 0, PL_F32, 3, hd, nh, nt, pad), r, 1.0f);
        pl_tensor *pos = mk(c, 1, PL_I32, 1, nt, 1, 1, 0);
        for (int64_t t = 0; t < nt; t++) set_i32(pos, t, t == 0 ? 0 : t == 1 ? 1 : (int32_t)pl_rng_int(r, 0, 40000));
        if (cfg[i][5]) {
            /* llama3 factors run from 1 (high frequencies) to the scaling
             * factor (low ones, e.g. 8 or 32), smooth in between */
            pl_tensor *ff = mk(c, 2, PL_F32, 1, cfg[i][3] / 2, 1, 1, 0);
            for (int64_t k = 0; k < ff->ne[0]; k++)
                ((float *)ff->data)[k] = k % 4 == 0 ? 1.0f : 1.0f + 31.0f * (float)pl_rng_int(r, 0, 1000) / 1000.0f;
        }
        mk(c, DST, PL_F32, 3, hd, nh, nt, 0);
        seal(c);
    }
    return n;
}

/* Distinct (pos, seq) slots for n_tok tokens of a cache n_ctx x n_seq. */
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

static int gen_kv_store(op_case *cs, pl_dtype key, pl_rng *r) {
    int n = 0;
    static const int64_t cfg[][3] = {{64, 1, 0}, {256, 7, 1}, {128, 33, 0}, {512, 5, 1}};
    for (int i = 0; i < 4; i++) {
        const int64_t kv_dim = cfg[i][0], nt = cfg[i][1], n_ctx = 48, n_seq = 3;
        const size_t pad = i == 2 ? 32 : 0;
        op_case *c = new_case(cs, &n, PL_OP_KV_STORE, key);
        snprintf(c->desc, sizeof c->desc, "kv_dim=%lld n_tok=%lld cache [%lld, %lld, %lld] %s%s", (long long)kv_dim,
                 (long long)nt, (long long)kv_dim, (long long)n_ctx, (long long)n_seq, cfg[i][2] ? "prefill" : "scattered",
                 pad ? " cache-strided" : "");
        fill_f32(mk(c, 0, PL_F32, 2, kv_dim, nt, 1, i == 3 ? 8 : 0), r, 3.0f);
        pick_slots(r, mk(c, 1, PL_I32, 1, nt, 1, 1, 0), mk(c, 2, PL_I32, 1, nt, 1, 1, 0), nt, n_ctx, n_seq, cfg[i][2]);
        pl_fill_rows(mk(c, DST, key, 3, kv_dim, n_ctx, n_seq, pad), r, 1.0f);  /* old cache contents */
        seal(c);
    }
    /* The Walsh-Hadamard rotation of quantized caches (iparams rot, head_dim):
     * head_dim 128 turned by H_128 (llama.cpp's K) and by H_64 (its V). */
    if (key == PL_Q8_0 || key == PL_Q4_0 || key == PL_F16) {
        static const int rcfg[][2] = {{128, 128}, {64, 128}};
        for (int i = 0; i < 2; i++) {
            const int64_t kv_dim = 256, nt = 5, n_ctx = 48, n_seq = 2;
            op_case *c = new_case(cs, &n, PL_OP_KV_STORE, key);
            c->node.iparams[0] = rcfg[i][0];
            c->node.iparams[1] = rcfg[i][1];
            snprintf(c->desc, sizeof c->desc, "kv_dim=%lld n_tok=%lld rot=%d head_dim=%d", (long long)kv_dim,
                     (long long)nt, rcfg[i][0], rcfg[i][1]);
            fill_f32(mk(c, 0, PL_F32, 2, kv_dim, nt, 1, 0), r, 3.0f);
            pick_slots(r, mk(c, 1, PL_I32, 1, nt, 1, 1, 0), mk(c, 2, PL_I32, 1, nt, 1, 1, 0), nt, n_ctx, n_seq, i);
            pl_fill_rows(mk(c, DST, key, 3, kv_dim, n_ctx, n_seq, 0), r, 1.0f);
            seal(c);
        }
    }
    return n;
}

static int gen_attention(op_case *cs, pl_dtype key, pl_rng *r) {
    int n = 0;
    static const int cfg[][5] = {
        /* head_dim, n_head, n_kv_head, n_tok, prefill */
        {64, 4, 2, 1, 0}, {128, 4, 1, 7, 1}, {64, 8, 8, 7, 0}, {128, 16, 8, 33, 1},
        {64, 4, 2, 33, 0}, {32, 6, 3, 2, 1},
    };
    for (int i = 0; i < 6; i++) {
        const int64_t hd = cfg[i][0], nh = cfg[i][1], nkv = cfg[i][2], nt = cfg[i][3], n_ctx = 48, n_seq = 2;
        const size_t qpad = i % 2 ? 0 : 24;
        op_case *c = new_case(cs, &n, PL_OP_ATTENTION, key);
        c->node.iparams[0] = (int32_t)nkv;
        c->node.fparams[0] = 1.0f / sqrtf((float)hd);
        snprintf(c->desc, sizeof c->desc, "head_dim=%lld n_head=%lld n_kv_head=%lld n_tok=%lld %s%s", (long long)hd,
                 (long long)nh, (long long)nkv, (long long)nt, cfg[i][4] ? "prefill" : "scattered", qpad ? " q-strided" : "");
        fill_f32(mk(c, 0, PL_F32, 3, hd, nh, nt, qpad), r, 1.0f);
        pl_fill_rows(mk(c, 1, key, 3, nkv * hd, n_ctx, n_seq, i == 4 ? 16 : 0), r, 1.0f);
        pl_fill_rows(mk(c, 2, key, 3, nkv * hd, n_ctx, n_seq, i == 4 ? 16 : 0), r, 1.0f);
        pick_slots(r, mk(c, 3, PL_I32, 1, nt, 1, 1, 0), mk(c, 4, PL_I32, 1, nt, 1, 1, 0), nt, n_ctx, n_seq, cfg[i][4]);
        mk(c, DST, PL_F32, 2, hd * nh, nt, 1, 0);
        seal(c);
    }
    /* sliding windows (iparams[4], gemma3's local layers): shorter than most
     * positions, 1 (a token sees only itself), longer than the cache */
    static const int wcfg[][6] = {
        /* head_dim, n_head, n_kv_head, n_tok, prefill, window */
        {64, 4, 2, 7, 1, 5}, {128, 16, 8, 33, 1, 9}, {64, 8, 8, 7, 0, 1}, {32, 6, 3, 2, 0, 100},
    };
    for (int i = 0; i < 4; i++) {
        const int64_t hd = wcfg[i][0], nh = wcfg[i][1], nkv = wcfg[i][2], nt = wcfg[i][3], n_ctx = 48, n_seq = 2;
        op_case *c = new_case(cs, &n, PL_OP_ATTENTION, key);
        c->node.iparams[0] = (int32_t)nkv;
        c->node.iparams[4] = wcfg[i][5];
        c->node.fparams[0] = 1.0f / sqrtf((float)hd);
        snprintf(c->desc, sizeof c->desc, "head_dim=%lld n_head=%lld n_kv_head=%lld n_tok=%lld %s window=%d", (long long)hd,
                 (long long)nh, (long long)nkv, (long long)nt, wcfg[i][4] ? "prefill" : "scattered", wcfg[i][5]);
        fill_f32(mk(c, 0, PL_F32, 3, hd, nh, nt, 0), r, 1.0f);
        pl_fill_rows(mk(c, 1, key, 3, nkv * hd, n_ctx, n_seq, 0), r, 1.0f);
        pl_fill_rows(mk(c, 2, key, 3, nkv * hd, n_ctx, n_seq, 0), r, 1.0f);
        pick_slots(r, mk(c, 3, PL_I32, 1, nt, 1, 1, 0), mk(c, 4, PL_I32, 1, nt, 1, 1, 0), nt, n_ctx, n_seq, wcfg[i][4]);
        mk(c, DST, PL_F32, 2, hd * nh, nt, 1, 0);
        seal(c);
    }
    /* Quantized caches as the models use them: rotated (k_rot, v_rot =
     * iparams[2], [3]), and K and V of different dtypes (f16 with q8_0 /
     * q4_0, llama.cpp's -ctk / -ctv); a batch of 70 tokens covers prefill. */
    if (key == PL_Q8_0 || key == PL_Q4_0 || key == PL_F16) {
        const pl_dtype other = key == PL_F16 ? PL_Q4_0 : PL_F16;
        static const int qcfg[][7] = {
            /* head_dim, n_head, n_kv_head, n_tok, k_rot, v_rot, V = other dtype */
            {128, 4, 1, 7, 128, 64, 0}, {64, 8, 2, 70, 64, 64, 0}, {128, 8, 4, 3, 128, 64, 1},
            {64, 4, 2, 5, 0, 0, 1}, {64, 8, 2, 70, 64, 64, 0} /* with a window of 11 */,
        };
        for (int i = 0; i < 5; i++) {
            const int64_t hd = qcfg[i][0], nh = qcfg[i][1], nkv = qcfg[i][2], nt = qcfg[i][3], n_ctx = 96, n_seq = 2;
            const pl_dtype vt = qcfg[i][6] ? other : key;
            op_case *c = new_case(cs, &n, PL_OP_ATTENTION, key);
            c->node.iparams[0] = (int32_t)nkv;
            c->node.iparams[2] = qcfg[i][4];
            c->node.iparams[3] = qcfg[i][5];
            c->node.iparams[4] = i == 4 ? 11 : 0;
            c->node.fparams[0] = 1.0f / sqrtf((float)hd);
            snprintf(c->desc, sizeof c->desc, "head_dim=%lld n_head=%lld n_kv_head=%lld n_tok=%lld k_rot=%d v_rot=%d V %s window=%d",
                     (long long)hd, (long long)nh, (long long)nkv, (long long)nt, qcfg[i][4], qcfg[i][5],
                     pl_dtype_name(vt), c->node.iparams[4]);
            fill_f32(mk(c, 0, PL_F32, 3, hd, nh, nt, 0), r, 1.0f);
            pl_fill_rows(mk(c, 1, key, 3, nkv * hd, n_ctx, n_seq, 0), r, 1.0f);
            pl_fill_rows(mk(c, 2, vt, 3, nkv * hd, n_ctx, n_seq, 0), r, 1.0f);
            pick_slots(r, mk(c, 3, PL_I32, 1, nt, 1, 1, 0), mk(c, 4, PL_I32, 1, nt, 1, 1, 0), nt, n_ctx, n_seq, i % 2);
            mk(c, DST, PL_F32, 2, hd * nh, nt, 1, 0);
            seal(c);
        }
    }
    return n;
}

/* ---- mixture of experts ---------------------------------------------------
 * Router logits have deliberate ties (a repeated column, so top-k's tie rule
 * is exercised) and some tokens route several slots to one expert only when
 * the ids are picked directly (matmul_id / combine take any valid ids). */
static void moe_fill_ids(pl_tensor *ids, pl_rng *r, int64_t n_exp) {
    const int64_t k = ids->ne[0];
    for (int64_t t = 0; t < ids->ne[1]; t++)
        for (int64_t j = 0; j < k; j++) {
            /* distinct per token as top-k gives; the first token uses the
             * last expert so the end of W is read */
            int32_t e = t == 0 && j == 0 ? (int32_t)(n_exp - 1) : (int32_t)pl_rng_int(r, 0, n_exp - 1);
            for (int64_t q = 0; q < j; q++)
                if (((int32_t *)ids->data)[t * k + q] == e) { e = (e + 1) % (int32_t)n_exp; q = -1; }
            ((int32_t *)ids->data)[t * k + j] = e;
        }
}

static int gen_moe_topk(op_case *cs, pl_rng *r) {
    int n = 0;
    static const int cfg[][3] = {{8, 2, 1}, {8, 2, 7}, {128, 8, 5}, {60, 4, 33}, {4, 4, 3}};
    for (int i = 0; i < 5; i++) {
        const int64_t ne = cfg[i][0], k = cfg[i][1], nt = cfg[i][2];
        const size_t pad = i % 2 ? 12 : 0;
        op_case *c = new_case(cs, &n, PL_OP_MOE_TOPK, PL_F32);
        snprintf(c->desc, sizeof c->desc, "n_expert=%lld k=%lld n_tok=%lld%s", (long long)ne, (long long)k,
                 (long long)nt, pad ? " strided" : "");
        pl_tensor *lg = mk(c, 0, PL_F32, 2, ne, nt, 1, pad);
        fill_f32(lg, r, 2.0f);
        for (int64_t t = 0; t < nt; t++) *f32p(lg, ne - 1, t, 0) = *f32p(lg, t % ne, t, 0); /* a tie */
        mk(c, DST, PL_I32, 2, k, nt, 1, 0);
        c->node.iparams[0] = (int32_t)k;
        seal(c);
    }
    return n;
}

static int gen_matmul_id(op_case *cs, pl_dtype key, pl_rng *r) {
    int n = 0;
    const int64_t bs = pl_dtype_get(key)->block_size;
    /* K, N, n_expert, k, n_tok, shared x (n_x = 1) */
    static const int cfg[][6] = {{0, 16, 4, 2, 1, 1}, {0, 17, 8, 2, 7, 0}, {1, 64, 8, 3, 9, 1}, {1, 32, 6, 2, 33, 0},
                                 {0, 48, 3, 3, 2, 1}};
    for (int i = 0; i < 5; i++) {
        const int64_t K = cfg[i][0] ? 512 : (bs == 1 ? 40 : bs == 32 ? 64 : 256), N = cfg[i][1], ne = cfg[i][2],
                      k = cfg[i][3], nt = cfg[i][4];
        const bool shared = cfg[i][5];
        const size_t xpad = i % 2 ? 16 : 0, wpad = i == 4 ? 8 : 0;
        op_case *c = new_case(cs, &n, PL_OP_MATMUL_ID, key);
        snprintf(c->desc, sizeof c->desc, "K=%lld N=%lld n_expert=%lld k=%lld n_tok=%lld%s%s%s", (long long)K,
                 (long long)N, (long long)ne, (long long)k, (long long)nt, shared ? " shared-x" : "",
                 xpad ? " x-strided" : "", wpad ? " W-strided" : "");
        pl_fill_rows(mk(c, 0, key, 3, K, N, ne, wpad), r, 1.0f);
        fill_f32(mk(c, 1, PL_F32, 3, K, shared ? 1 : k, nt, xpad), r, 1.0f);
        moe_fill_ids(mk(c, 2, PL_I32, 2, k, nt, 1, 0), r, ne);
        mk(c, DST, PL_F32, 3, N, k, nt, 0);
        seal(c);
    }
    return n;
}

static int gen_moe_combine(op_case *cs, pl_rng *r) {
    int n = 0;
    static const int cfg[][5] = {{64, 8, 2, 1, 1}, {256, 8, 2, 7, 0}, {100, 128, 8, 5, 1}, {32, 4, 4, 33, 1}};
    for (int i = 0; i < 4; i++) {
        const int64_t E = cfg[i][0], ne = cfg[i][1], k = cfg[i][2], nt = cfg[i][3];
        const size_t pad = i % 2 ? 8 : 0;
        op_case *c = new_case(cs, &n, PL_OP_MOE_COMBINE, PL_F32);
        snprintf(c->desc, sizeof c->desc, "E=%lld n_expert=%lld k=%lld n_tok=%lld norm=%d%s", (long long)E,
                 (long long)ne, (long long)k, (long long)nt, cfg[i][4], pad ? " strided" : "");
        fill_f32(mk(c, 0, PL_F32, 3, E, k, nt, pad), r, 1.0f);
        fill_f32(mk(c, 1, PL_F32, 2, ne, nt, 1, pad ? 4 : 0), r, 2.0f);
        moe_fill_ids(mk(c, 2, PL_I32, 2, k, nt, 1, 0), r, ne);
        mk(c, DST, PL_F32, 2, E, nt, 1, 0);
        c->node.iparams[0] = cfg[i][4];
        seal(c);
    }
    return n;
}

static int gen_cases(pl_op op, pl_dtype key, op_case *cs, pl_rng *r) {
    switch (op) {
    case PL_OP_GET_ROWS: return gen_get_rows(cs, key, r);
    case PL_OP_MATMUL: return gen_matmul(cs, key, r);
    case PL_OP_RMS_NORM: return gen_rms_norm(cs, r);
    case PL_OP_ADD: return gen_add(cs, r);
    case PL_OP_SWIGLU: return gen_swiglu(cs, r);
    case PL_OP_ROPE: return gen_rope(cs, r);
    case PL_OP_KV_STORE: return gen_kv_store(cs, key, r);
    case PL_OP_ATTENTION: return gen_attention(cs, key, r);
    case PL_OP_MOE_TOPK: return gen_moe_topk(cs, r);
    case PL_OP_MATMUL_ID: return gen_matmul_id(cs, key, r);
    case PL_OP_MOE_COMBINE: return gen_moe_combine(cs, r);
    case PL_OP_GEGLU: return gen_geglu(cs, r);
    case PL_OP_SCALE: return gen_scale_softcap(cs, PL_OP_SCALE, r);
    case PL_OP_SOFTCAP: return gen_scale_softcap(cs, PL_OP_SOFTCAP, r);
    default: return 0;
    }
}

/* ---- running and comparing ----------------------------------------------------*/

typedef struct run_out {
    unsigned char *dst;   /* the output buffer (with guards), caller frees */
    pl_status st;
    bool ok;              /* guards, inputs, padding all intact */
} run_out;

static bool guards_ok(const unsigned char *base, size_t size) {
    for (size_t i = 0; i < GUARD; i++)
        if (base[i] != GUARD_BYTE || base[GUARD + size + i] != GUARD_BYTE) return false;
    return true;
}

/* Device backends read device memory only: the case's buffers (guards
 * included) are mirrored to the device, the kernel runs there, and the
 * output, the work buffer and the inputs come back into their host buffers,
 * so run_case's checks apply unchanged (guard bytes the kernel overwrote on
 * the device show up in the host copy; an input the kernel modified on the
 * device shows up as a modified host input). */
static pl_status run_on_device(const op_case *c, const pl_kernel *k, pl_exec_ctx *ctx, const pl_node *hnode,
                               unsigned char *work, size_t ws, unsigned char *out) {
    const pl_device_ops *dv = ctx->backend->device;
    pl_tensor t[PL_MAX_SRC + 1];
    void *dbuf[PL_MAX_SRC + 2] = {0};   /* the case's slots (srcs, DST), then the work buffer */
    pl_node node = *hnode;
    pl_status st = PL_OK;
    for (int s = 0; s <= DST + 1 && st == PL_OK; s++) {
        const bool is_work = s == DST + 1;
        if (!is_work && !c->buf[s].base) continue;
        const size_t n = (is_work ? ws : c->buf[s].size) + 2 * GUARD;
        const unsigned char *src = is_work ? work : s == DST ? out : c->buf[s].base;
        st = dv->buffer_alloc(ctx, PL_BUF_SCRATCH, n, &dbuf[s]);
        if (st == PL_OK) st = dv->upload(ctx, dbuf[s], src, n);
        if (st != PL_OK || is_work) continue;
        t[s] = s == DST ? *hnode->dst : c->t[s];
        t[s].data = (unsigned char *)dbuf[s] + GUARD;
        if (s == DST) node.dst = &t[s];
        else node.src[s] = &t[s];
    }
    if (st == PL_OK) {
        ctx->work = ws ? (unsigned char *)dbuf[DST + 1] + GUARD : NULL;
        ctx->work_size = ws;
        st = k->run(ctx, &node);
        ctx->work = NULL;
        ctx->work_size = 0;
        /* download waits for the kernel and reports what it found on the device */
        pl_status d = dv->download(ctx, out, dbuf[DST], c->buf[DST].size + 2 * GUARD);
        if (st == PL_OK) st = d;
        if (st == PL_OK) st = dv->download(ctx, work, dbuf[DST + 1], ws + 2 * GUARD);
        for (int s = 0; s < DST && st == PL_OK; s++)
            if (dbuf[s]) st = dv->download(ctx, c->buf[s].base, dbuf[s], c->buf[s].size + 2 * GUARD);
    }
    for (int s = 0; s <= DST + 1; s++)
        if (dbuf[s]) dv->buffer_free(ctx, dbuf[s]);
    return st;
}

/* Runs kernel k of backend ctx on case c, on fresh copies of the output. */
static run_out run_case(const op_case *c, const pl_kernel *k, pl_exec_ctx *ctx, const char *who) {
    run_out o = {0};
    const tbuf *db = &c->buf[DST];
    o.dst = malloc(db->size + 2 * GUARD);
    memcpy(o.dst, db->pristine, db->size + 2 * GUARD);
    pl_tensor dst = c->t[DST];
    dst.data = o.dst + GUARD;
    pl_node node = c->node;
    node.dst = &dst;
    for (int s = 0; s < PL_MAX_SRC; s++)
        if (c->node.src[s]) node.src[s] = (pl_tensor *)&c->t[s];

    const size_t ws = k->work_size ? k->work_size(&node, ctx->n_threads) : 0;
    unsigned char *work = malloc(ws + 2 * GUARD);
    memset(work, GUARD_BYTE, ws + 2 * GUARD);
    if (ctx->backend && ctx->backend->device) {
        o.st = run_on_device(c, k, ctx, &node, work, ws, o.dst);
    } else {
        ctx->work = ws ? work + GUARD : NULL;
        ctx->work_size = ws;
        o.st = k->run(ctx, &node);
        ctx->work = NULL;
        ctx->work_size = 0;
    }

    o.ok = true;
    if (!guards_ok(work, ws)) {
        CHECK(0, "%s %s %s [%s]: wrote outside its %zu-byte work buffer", who, pl_op_name(c->op),
              pl_dtype_name(c->key), c->desc, ws);
        o.ok = false;
    }
    free(work);
    if (!guards_ok(o.dst, db->size)) {
        CHECK(0, "%s %s %s [%s]: wrote outside its output", who, pl_op_name(c->op), pl_dtype_name(c->key), c->desc);
        o.ok = false;
    }
    for (int s = 0; s < PL_MAX_SRC; s++) {
        const tbuf *b = &c->buf[s];
        if (b->base && memcmp(b->base, b->pristine, b->size + 2 * GUARD)) {
            CHECK(0, "%s %s %s [%s]: modified input src%d", who, pl_op_name(c->op), pl_dtype_name(c->key), c->desc, s);
            o.ok = false;
        }
    }
    /* Bytes of a strided output between its rows must be untouched: put the
     * rows back into a pristine copy and compare. */
    unsigned char *chk = malloc(db->size + 2 * GUARD);
    memcpy(chk, db->pristine, db->size + 2 * GUARD);
    const size_t rs = pl_dtype_row_size(dst.dtype, dst.ne[0]);
    for (int64_t i2 = 0; i2 < dst.ne[2]; i2++)
        for (int64_t i1 = 0; i1 < dst.ne[1]; i1++) {
            const size_t off = GUARD + (size_t)i1 * dst.nb[1] + (size_t)i2 * dst.nb[2];
            memcpy(chk + off, o.dst + off, rs);
        }
    if (memcmp(chk, o.dst, db->size + 2 * GUARD)) {
        CHECK(0, "%s %s %s [%s]: wrote between the rows of its output", who, pl_op_name(c->op), pl_dtype_name(c->key),
              c->desc);
        o.ok = false;
    }
    free(chk);
    return o;
}

/* The logical elements of an output buffer, as floats. */
static float *output_values(const op_case *c, const unsigned char *buf, int64_t *n_out) {
    pl_tensor t = c->t[DST];
    t.data = (void *)(buf + GUARD);
    const int64_t n = pl_tensor_nelements(&t);
    float *v = malloc((size_t)n * sizeof *v);
    int64_t k = 0;
    for (int64_t i2 = 0; i2 < t.ne[2]; i2++)
        for (int64_t i1 = 0; i1 < t.ne[1]; i1++, k += t.ne[0]) {
            if (t.dtype == PL_I32) {   /* ids (moe_topk): exact, as floats (+1 so id 0 counts) */
                const int32_t *row = pl_tensor_row(&t, i1, i2, 0);
                for (int64_t i = 0; i < t.ne[0]; i++) v[k + i] = (float)row[i] + 1.0f;
                continue;
            }
            pl_dequantize_row(t.dtype, pl_tensor_row(&t, i1, i2, 0), v + k, t.ne[0]);
        }
    *n_out = n;
    return v;
}

static double threshold(pl_op op, pl_dtype key) {
    if ((op == PL_OP_MATMUL || op == PL_OP_MATMUL_ID || op == PL_OP_ATTENTION) && key != PL_F32) return 5e-4;
    if (op == PL_OP_MOE_TOPK) return 0.0;   /* the same experts, exactly */
    return 1e-7;
}

typedef struct cmp_stats {
    int cases, failed;
    double worst;
} cmp_stats;

/* The activation format llama.cpp pairs with a weight type (vec_dot_type). */
static pl_dtype activation_format(pl_dtype w) {
    switch (w) {
    case PL_Q4_0: case PL_Q4_1: case PL_Q5_0: case PL_Q5_1: case PL_Q8_0: case PL_IQ4_NL: return PL_Q8_0;
    default: return PL_Q8_K;
    }
}

/* NMSE of out (n values) against ref run with src1's rows rounded through
 * the weight type's activation format. */
static double nmse_vs_rounded_ref(op_case *c, const pl_kernel *rk, pl_exec_ctx *ref_ctx, const float *out, int64_t n) {
    tbuf *b = &c->buf[1];
    const pl_tensor *x = &c->t[1];
    const pl_dtype af = activation_format(c->key);
    const size_t qrow = pl_dtype_row_size(af, x->ne[0]);
    if (!qrow || !b->base) return INFINITY;
    const size_t total = b->size + 2 * GUARD;
    unsigned char *saved = malloc(total);
    void *q = malloc(qrow);
    memcpy(saved, b->base, total);
    for (int64_t i2 = 0; i2 < x->ne[2]; i2++)   /* ne[2] > 1: matmul_id's tokens */
        for (int64_t i1 = 0; i1 < x->ne[1]; i1++) {
            float *row = pl_tensor_row(x, i1, i2, 0);
            pl_quantize_row(af, row, q, x->ne[0]);
            if (af == PL_Q8_K) pl_dequantize_row_q8_K(q, row, x->ne[0]);
            else pl_dequantize_row(af, q, row, x->ne[0]);
        }
    memcpy(b->pristine, b->base, total);
    run_out ro = run_case(c, rk, ref_ctx, "ref(q8 activations)");
    int64_t nr;
    float *vr = output_values(c, ro.dst, &nr);
    double e = nr == n ? pl_nmse(out, vr, n) : INFINITY;
    memcpy(b->base, saved, total);
    memcpy(b->pristine, saved, total);
    free(vr);
    free(ro.dst);
    free(q);
    free(saved);
    return e;
}

/* Runs backend kernel k (context ctx) and ref on every case of (op, key). */
static void compare_kernel(const pl_backend *b, const pl_kernel *k, pl_exec_ctx *ctx, pl_op op, pl_dtype key,
                           pl_exec_ctx *ref_ctx, cmp_stats *st) {
    const pl_kernel *rk = pl_backend_lookup(ref_ctx->backend, op, key);
    if (!rk) {
        CHECK(0, "ref has no kernel for %s %s", pl_op_name(op), pl_dtype_name(key));
        return;
    }
    static op_case cs[MAX_CASES];
    pl_rng r = {0x5EED0000u + (uint64_t)op * 977 + (uint64_t)key};
    const int n = gen_cases(op, key, cs, &r);
    const double thr = threshold(op, key);
    char who[64];
    snprintf(who, sizeof who, "%s(%d threads)", b->name, ctx->n_threads);
    for (int i = 0; i < n; i++) {
        op_case *c = &cs[i];
        pl_status vs = pl_node_validate(&c->node);
        CHECK(vs == PL_OK, "harness built an invalid %s node [%s]: %s", pl_op_name(op), c->desc, pl_last_error());
        run_out ro = run_case(c, rk, ref_ctx, "ref");
        run_out bo = run_case(c, k, ctx, who);
        CHECK(ro.st == PL_OK, "ref %s %s [%s] failed: %s", pl_op_name(op), pl_dtype_name(key), c->desc, pl_last_error());
        CHECK(bo.st == PL_OK, "%s %s %s [%s] failed: %s", who, pl_op_name(op), pl_dtype_name(key), c->desc,
              pl_last_error());
        int64_t na, nb;
        float *va = output_values(c, bo.dst, &na), *vb = output_values(c, ro.dst, &nb);
        double e = pl_nmse(va, vb, na);
        /* A quantized matmul may round its activations to 8-bit blocks first,
         * as llama.cpp does. The NMSE of one dot product after that rounding
         * is heavy-tailed when the exact value is near zero (cases with one
         * or two outputs), so such a kernel also passes when it matches ref
         * run on the rounded activations to 1e-6. */
        if (e > thr && (op == PL_OP_MATMUL || op == PL_OP_MATMUL_ID) && pl_dtype_get(key)->quantized) {
            double e8 = nmse_vs_rounded_ref(c, rk, ref_ctx, va, na);
            if (getenv("PL_TEST_VERBOSE"))
                printf("    %s %s [%s]: NMSE %.3e vs exact, %.3e vs ref on q8-rounded activations\n", who,
                       pl_dtype_name(key), c->desc, e, e8);
            if (e8 <= 1e-6) e = e8;
        }
        const bool pass = e <= thr && ro.ok && bo.ok && ro.st == PL_OK && bo.st == PL_OK;
        CHECK(e <= thr, "%s %s %s [%s]: NMSE %.3e > %.1e", who, pl_op_name(op), pl_dtype_name(key), c->desc, e, thr);
        if (getenv("PL_TEST_VERBOSE"))
            printf("    %s %s %s [%s]: NMSE %.3e\n", who, pl_op_name(op), pl_dtype_name(key), c->desc, e);
        st->cases++;
        st->failed += !pass;
        if (e > st->worst || e != e) st->worst = e;
        free(va);
        free(vb);
        free(ro.dst);
        free(bo.dst);
        free_case(c);
    }
}

/* ---- table checks ---------------------------------------------------------------*/

static void test_tables(void) {
    const pl_backend *const *bs = pl_backends();
    const pl_backend *ref = pl_backend_find("ref");
    CHECK(ref != NULL && bs[0] != NULL, "ref backend registered");
    CHECK(pl_backend_find("cpu") != NULL, "cpu backend registered");
    CHECK(pl_backend_find("nope") == NULL && pl_backend_find(NULL) == NULL, "unknown backend names");
    if (!ref) return;

    /* Schemas are complete, and ref covers every key dtype every schema allows. */
    for (int op = 0; op < PL_OP_COUNT; op++) {
        const pl_op_schema *s = pl_op_schema_get((pl_op)op);
        CHECK(s && s->name && s->summary && s->shape_rule && s->params, "schema %d complete", op);
        if (!s) continue;
        pl_op back;
        CHECK(pl_op_from_name(s->name, &back) && back == (pl_op)op && !strcmp(pl_op_name((pl_op)op), s->name),
              "op name round trip %s", s->name);
        CHECK(s->n_src >= 1 && s->n_src <= PL_MAX_SRC && s->key_operand >= -1 && s->key_operand < s->n_src,
              "%s: n_src / key_operand", s->name);
        for (int i = 0; i < s->n_src; i++)
            CHECK(s->src_names[i] && s->src_dtypes[i], "%s: src%d named and typed", s->name, i);
        const uint64_t km = s->key_operand < 0 ? s->dst_dtypes : s->src_dtypes[s->key_operand];
        for (int t = 0; t < 64; t++) {
            if (!(km & PL_DTMASK(t))) continue;
            CHECK(pl_backend_supports(ref, (pl_op)op, (pl_dtype)t), "ref lacks %s for %s", s->name,
                  pl_dtype_name((pl_dtype)t));
        }
    }
    CHECK(pl_op_schema_get(PL_OP_COUNT) == NULL && !pl_op_from_name("conv2d", NULL), "unknown ops");
    /* The key operands the ABI names. */
    CHECK(pl_op_schema_get(PL_OP_GET_ROWS)->key_operand == 0 && pl_op_schema_get(PL_OP_MATMUL)->key_operand == 0 &&
              pl_op_schema_get(PL_OP_KV_STORE)->key_operand == -1 && pl_op_schema_get(PL_OP_ATTENTION)->key_operand == 1,
          "key operands");
    /* ref's weight kernels are exactly the decodable types. */
    for (int t = 0; t < PL_DTYPE_COUNT; t++) {
        const bool dq = pl_can_dequantize((pl_dtype)t);
        CHECK(pl_backend_supports(ref, PL_OP_MATMUL, (pl_dtype)t) == dq &&
                  pl_backend_supports(ref, PL_OP_GET_ROWS, (pl_dtype)t) == dq,
              "ref weight kernels vs decoders for %s", pl_dtype_name((pl_dtype)t));
    }
    CHECK(!pl_backend_supports(ref, PL_OP_MATMUL, PL_I32) && !pl_backend_supports(ref, PL_OP_KV_STORE, PL_Q4_K),
          "ref refuses what no schema allows");

    /* Every backend: each listed kernel dispatches (to itself or, for a
     * duplicate, an earlier entry with the same op and key), ref covers it,
     * and its ops/keys are allowed by the schema. */
    for (const pl_backend *const *bp = bs; *bp; bp++) {
        const pl_backend *b = *bp;
        CHECK(b->name && b->summary, "backend has a name and summary");
        for (size_t i = 0; i < b->n_kernels; i++) {
            const pl_kernel *k = &b->kernels[i];
            const pl_op_schema *s = pl_op_schema_get(k->op);
            CHECK(s != NULL && k->run != NULL, "%s kernel %zu: op %d valid, run set", b->name, i, (int)k->op);
            if (!s) continue;
            const pl_kernel *l = pl_backend_lookup(b, k->op, k->key);
            CHECK(l && l->op == k->op && l->key == k->key, "%s: %s %s does not dispatch to itself", b->name, s->name,
                  pl_dtype_name(k->key));
            if (k->key == PL_DTYPE_ANY) continue;
            const uint64_t km = s->key_operand < 0 ? s->dst_dtypes : s->src_dtypes[s->key_operand];
            CHECK((unsigned)k->key < 64 && (km & PL_DTMASK(k->key)), "%s: %s lists key %s, which its schema forbids",
                  b->name, s->name, pl_dtype_name(k->key));
            CHECK(pl_backend_supports(ref, k->op, k->key), "%s covers %s %s but ref does not", b->name, s->name,
                  pl_dtype_name(k->key));
        }
    }

    /* Lookup: exact key beats a wildcard listed earlier; wildcard catches the
     * rest; invalid keys match nothing. */
    static const pl_kernel fake_k[] = {
        {PL_OP_MATMUL, PL_DTYPE_ANY, (pl_kernel_fn)1, NULL},
        {PL_OP_MATMUL, PL_Q4_K, (pl_kernel_fn)2, NULL},
        {PL_OP_ADD, PL_F32, (pl_kernel_fn)3, NULL},
    };
    const pl_backend fake = {.name = "fake", .summary = "test", .kernels = fake_k, .n_kernels = 3};
    CHECK(pl_backend_lookup(&fake, PL_OP_MATMUL, PL_Q4_K) == &fake_k[1], "exact beats ANY");
    CHECK(pl_backend_lookup(&fake, PL_OP_MATMUL, PL_Q8_0) == &fake_k[0], "ANY fallback");
    CHECK(pl_backend_lookup(&fake, PL_OP_ADD, PL_F16) == NULL, "no ANY for add");
    CHECK(pl_backend_lookup(&fake, PL_OP_MATMUL, (pl_dtype)PL_DTYPE_COUNT) == NULL, "invalid key matches nothing");
    CHECK(!pl_backend_supports(NULL, PL_OP_ADD, PL_F32), "NULL backend");
}

/* ---- validation ---------------------------------------------------------------------*/

static void expect_invalid(pl_node *n, const char *what) {
    pl_status st = pl_node_validate(n);
    CHECK(st == PL_ERR_INVALID_ARG, "validate should reject %s (got %d)", what, (int)st);
    if (st == PL_ERR_INVALID_ARG) CHECK(pl_last_error()[0] != 0, "a message for %s", what);
}

static void test_validate(void) {
    pl_rng r = {99};
    op_case c;
    memset(&c, 0, sizeof c);
    /* matmul q4_K [512, 17] x [512, 3] */
    c.node.op = PL_OP_MATMUL;
    mk(&c, 0, PL_Q4_K, 2, 512, 17, 1, 0);
    mk(&c, 1, PL_F32, 2, 512, 3, 1, 0);
    mk(&c, DST, PL_F32, 2, 17, 3, 1, 0);
    CHECK(pl_node_validate(&c.node) == PL_OK, "valid matmul: %s", pl_last_error());
    CHECK(pl_node_key_dtype(&c.node) == PL_Q4_K, "matmul key is the weight dtype");
    pl_node n = c.node;
    pl_tensor w = c.t[0], x = c.t[1], d = c.t[DST], bad;
    n.src[0] = &bad;
    bad = w; bad.dtype = PL_I32; expect_invalid(&n, "i32 weights");
    bad = w; bad.dtype = PL_IQ2_XXS; bad.nb[0] = 66;
    if (!pl_can_dequantize(PL_IQ2_XXS)) expect_invalid(&n, "undecodable weights");
    bad = w; bad.ne[0] = 500; expect_invalid(&n, "K not a multiple of 256");
    bad = w; bad.nb[1] = 100; expect_invalid(&n, "overlapping weight rows");
    bad = w; bad.nb[0] = 4; expect_invalid(&n, "wrong nb[0]");
    bad = w; bad.ne[2] = 2; expect_invalid(&n, "ne[2] beyond n_dims");
    bad = w; bad.ne[1] = 0; expect_invalid(&n, "empty dim");
    n.src[0] = &w;
    n.src[1] = &bad;
    bad = x; bad.ne[0] = 256; expect_invalid(&n, "K mismatch");
    bad = x; bad.dtype = PL_F16; bad.nb[0] = 2; expect_invalid(&n, "f16 activations");
    n.src[1] = &x;
    n.dst = &bad;
    bad = d; bad.ne[0] = 16; expect_invalid(&n, "wrong dst shape");
    bad = d; bad.nb[1] = 17 * 4 + 8; expect_invalid(&n, "strided dst");
    bad = d; bad.dtype = PL_F16; bad.nb[0] = 2; expect_invalid(&n, "f16 dst");
    n.dst = NULL; expect_invalid(&n, "missing dst");
    n.dst = &d;
    n.src[1] = NULL; expect_invalid(&n, "missing src1");
    n.src[1] = &x;
    n.src[2] = &x; expect_invalid(&n, "extra src2");
    n.src[2] = NULL;
    n.op = (pl_op)77; expect_invalid(&n, "unknown op");
    CHECK(pl_node_validate(NULL) == PL_ERR_INVALID_ARG, "NULL node");
    free_case(&c);

    /* rope */
    memset(&c, 0, sizeof c);
    c.node.op = PL_OP_ROPE;
    mk(&c, 0, PL_F32, 3, 64, 4, 3, 8);
    mk(&c, 1, PL_I32, 1, 3, 1, 1, 0);
    mk(&c, DST, PL_F32, 3, 64, 4, 3, 0);
    c.node.iparams[0] = 64;
    c.node.iparams[1] = 2;
    c.node.fparams[0] = 10000.0f;
    c.node.fparams[1] = 1.0f;
    CHECK(pl_node_validate(&c.node) == PL_OK, "valid rope: %s", pl_last_error());
    n = c.node;
    n.iparams[0] = 63; expect_invalid(&n, "odd n_rot");
    n.iparams[0] = 128; expect_invalid(&n, "n_rot > head_dim");
    n.iparams[0] = 64; n.iparams[1] = 1; expect_invalid(&n, "rope mode 1");
    n.iparams[1] = 2; n.fparams[0] = -1; expect_invalid(&n, "negative freq_base");
    n.fparams[0] = 10000.0f; n.fparams[1] = NAN; expect_invalid(&n, "NaN freq_scale");
    n = c.node;
    pl_tensor pos = c.t[1];
    pos.ne[0] = 2; n.src[1] = &pos; expect_invalid(&n, "pos of the wrong length");
    /* freq_factors: optional, F32 [n_rot/2] */
    mk(&c, 2, PL_F32, 1, 32, 1, 1, 0);
    CHECK(pl_node_validate(&c.node) == PL_OK, "valid rope with freq_factors: %s", pl_last_error());
    n = c.node;
    pl_tensor ffw = c.t[2];
    ffw.ne[0] = 64; ffw.nb[1] = ffw.nb[2] = ffw.nb[3] = 64 * 4; n.src[2] = &ffw;
    expect_invalid(&n, "freq_factors of n_rot, not n_rot/2");
    n.iparams[0] = 32; ffw.ne[0] = 16; ffw.nb[1] = ffw.nb[2] = ffw.nb[3] = 16 * 4;
    CHECK(pl_node_validate(&n) == PL_OK, "freq_factors follow n_rot: %s", pl_last_error());
    ffw = c.t[2]; ffw.dtype = PL_F16; ffw.nb[0] = 2; ffw.nb[1] = ffw.nb[2] = ffw.nb[3] = 64; n = c.node; n.src[2] = &ffw;
    expect_invalid(&n, "f16 freq_factors");
    free_case(&c);

    /* attention */
    memset(&c, 0, sizeof c);
    c.node.op = PL_OP_ATTENTION;
    mk(&c, 0, PL_F32, 3, 64, 4, 2, 0);
    mk(&c, 1, PL_F16, 3, 128, 16, 2, 0);
    mk(&c, 2, PL_F16, 3, 128, 16, 2, 0);
    mk(&c, 3, PL_I32, 1, 2, 1, 1, 0);
    mk(&c, 4, PL_I32, 1, 2, 1, 1, 0);
    mk(&c, DST, PL_F32, 2, 256, 2, 1, 0);
    c.node.iparams[0] = 2;
    c.node.fparams[0] = 0.125f;
    CHECK(pl_node_validate(&c.node) == PL_OK, "valid attention: %s", pl_last_error());
    CHECK(pl_node_key_dtype(&c.node) == PL_F16, "attention key is the K cache dtype");
    n = c.node;
    n.iparams[0] = 3; expect_invalid(&n, "n_head not a multiple of n_kv_head");
    n.iparams[0] = 0; expect_invalid(&n, "n_kv_head 0");
    n.iparams[0] = 1; expect_invalid(&n, "cache width != n_kv_head * head_dim");
    n = c.node;
    pl_tensor v32;
    memset(&v32, 0, sizeof v32);
    {
        const int64_t ne[3] = {128, 16, 2};
        pl_tensor_init(&v32, PL_F32, 3, ne, c.t[2].data);
    }
    n.src[2] = &v32; expect_invalid(&n, "V dtype differs from K");
    n = c.node;
    pl_tensor q8 = c.t[1];
    q8.dtype = PL_Q4_K; q8.nb[0] = 144; n.src[1] = &q8; expect_invalid(&n, "q4_K K cache");
    /* quantized caches: q8_0 / q4_0 with f16 (either way round) are valid;
     * the rotation sizes must be powers of two dividing head_dim */
    pl_tensor kq, vq;
    {
        const int64_t ne[3] = {128, 16, 2};
        pl_tensor_init(&kq, PL_Q8_0, 3, ne, c.t[1].data);
        pl_tensor_init(&vq, PL_Q4_0, 3, ne, c.t[2].data);
    }
    n = c.node;
    n.src[1] = &kq;
    CHECK(pl_node_validate(&n) == PL_OK, "q8_0 K with f16 V: %s", pl_last_error());
    n.src[2] = &vq;
    n.iparams[2] = 64; n.iparams[3] = 64;
    CHECK(pl_node_validate(&n) == PL_OK, "q8_0 K, q4_0 V, rotated: %s", pl_last_error());
    n.iparams[2] = 48; expect_invalid(&n, "k_rot not a power of two");
    n.iparams[2] = 64; n.iparams[3] = 128; expect_invalid(&n, "v_rot larger than head_dim");
    n = c.node;
    n.src[2] = &v32; n.src[1] = &kq; expect_invalid(&n, "q8_0 K with an f32 V");
    free_case(&c);

    /* kv_store, rms_norm, add, swiglu, get_rows */
    memset(&c, 0, sizeof c);
    c.node.op = PL_OP_KV_STORE;
    mk(&c, 0, PL_F32, 2, 128, 3, 1, 0);
    mk(&c, 1, PL_I32, 1, 3, 1, 1, 0);
    mk(&c, 2, PL_I32, 1, 3, 1, 1, 0);
    mk(&c, DST, PL_F16, 3, 128, 16, 2, 0);
    CHECK(pl_node_validate(&c.node) == PL_OK, "valid kv_store: %s", pl_last_error());
    CHECK(pl_node_key_dtype(&c.node) == PL_F16, "kv_store key is the cache dtype");
    n = c.node;
    pl_tensor cq = c.t[DST];
    cq.dtype = PL_BF16; n.dst = &cq; expect_invalid(&n, "bf16 cache");
    {
        const int64_t ne[3] = {128, 16, 2};
        pl_tensor_init(&cq, PL_Q4_0, 3, ne, c.t[DST].data);
    }
    n.dst = &cq;
    CHECK(pl_node_validate(&n) == PL_OK, "q4_0 cache: %s", pl_last_error());
    n.iparams[0] = 64; n.iparams[1] = 64;
    CHECK(pl_node_validate(&n) == PL_OK, "rotated q4_0 cache: %s", pl_last_error());
    n.iparams[1] = 96; expect_invalid(&n, "rot not dividing head_dim");
    n.iparams[0] = 3; n.iparams[1] = 64; expect_invalid(&n, "rot not a power of two");
    n = c.node;
    cq = c.t[DST]; cq.ne[0] = 64; cq.nb[1] = 128; cq.nb[2] = 128 * 16; n.dst = &cq; expect_invalid(&n, "cache width");
    free_case(&c);

    memset(&c, 0, sizeof c);
    c.node.op = PL_OP_RMS_NORM;
    mk(&c, 0, PL_F32, 2, 64, 3, 1, 4);
    mk(&c, 1, PL_F32, 1, 64, 1, 1, 0);
    mk(&c, DST, PL_F32, 2, 64, 3, 1, 0);
    c.node.fparams[0] = 1e-6f;
    CHECK(pl_node_validate(&c.node) == PL_OK, "valid rms_norm: %s", pl_last_error());
    n = c.node;
    n.fparams[0] = -1.0f; expect_invalid(&n, "negative eps");
    n.fparams[0] = NAN; expect_invalid(&n, "NaN eps");
    n = c.node;
    pl_tensor wv = c.t[1];
    wv.ne[0] = 32; n.src[1] = &wv; expect_invalid(&n, "norm weight of the wrong length");
    n = c.node;
    n.op = PL_OP_ADD;
    CHECK(pl_node_validate(&n) == PL_OK, "add with a one-row b (broadcast): %s", pl_last_error());
    n.src[1] = &wv; expect_invalid(&n, "add with a b of another width");
    n.src[1] = &c.t[0];
    CHECK(pl_node_validate(&n) == PL_OK, "add of equal shapes: %s", pl_last_error());
    n.op = PL_OP_SWIGLU;
    CHECK(pl_node_validate(&n) == PL_OK, "swiglu of equal shapes: %s", pl_last_error());
    n.src[1] = &c.t[1]; expect_invalid(&n, "swiglu with a broadcast");
    n.src[1] = &c.t[0];
    n.op = PL_OP_GEGLU;
    CHECK(pl_node_validate(&n) == PL_OK, "geglu of equal shapes: %s", pl_last_error());
    n.src[1] = &c.t[1]; expect_invalid(&n, "geglu with a broadcast");
    n = c.node;
    n.src[1] = NULL;
    n.op = PL_OP_SCALE;
    n.fparams[0] = 0.5f;
    CHECK(pl_node_validate(&n) == PL_OK, "scale of a strided x: %s", pl_last_error());
    n.fparams[0] = INFINITY; expect_invalid(&n, "scale by inf");
    n.op = PL_OP_SOFTCAP;
    n.fparams[0] = 30.0f;
    CHECK(pl_node_validate(&n) == PL_OK, "softcap 30: %s", pl_last_error());
    n.fparams[0] = 0.0f; expect_invalid(&n, "softcap 0");
    n.fparams[0] = -3.0f; expect_invalid(&n, "negative softcap");
    n.fparams[0] = 30.0f;
    n.src[1] = &c.t[1]; expect_invalid(&n, "softcap with a second input");
    n.src[1] = NULL;
    pl_tensor sd = c.t[DST];
    sd.ne[1] = 2; n.dst = &sd; expect_invalid(&n, "softcap dst of another shape");
    free_case(&c);

    memset(&c, 0, sizeof c);
    c.node.op = PL_OP_GET_ROWS;
    mk(&c, 0, PL_Q8_0, 2, 64, 10, 1, 0);
    mk(&c, 1, PL_I32, 1, 4, 1, 1, 0);
    mk(&c, DST, PL_F32, 2, 64, 4, 1, 0);
    CHECK(pl_node_validate(&c.node) == PL_OK, "valid get_rows: %s", pl_last_error());
    n = c.node;
    pl_tensor ids = c.t[1];
    ids.dtype = PL_F32; n.src[1] = &ids; expect_invalid(&n, "f32 ids");
    free_case(&c);
    (void)r;

    /* tensor helpers */
    pl_tensor t;
    const int64_t ne[2] = {512, 3};
    pl_tensor_init(&t, PL_Q4_K, 2, ne, NULL);
    CHECK(t.nb[0] == 144 && t.nb[1] == 288 && t.nb[2] == 864 && t.ne[2] == 1 && t.ne[3] == 1, "q4_K strides");
    CHECK(pl_tensor_nbytes(&t) == 864 && pl_tensor_nelements(&t) == 1536 && pl_tensor_nrows(&t) == 3, "sizes");
    CHECK(pl_tensor_is_contiguous(&t), "contiguous");
    t.nb[1] += 8;
    CHECK(!pl_tensor_is_contiguous(&t), "padded rows are not contiguous");
}

/* ---- ref against hand-computed values ------------------------------------------*/

static pl_status run_ref(pl_node *n) {
    const pl_backend *ref = pl_backend_find("ref");
    pl_exec_ctx *ctx = NULL;
    pl_status st = ref->ctx_create(1, &ctx);
    if (st != PL_OK) return st;
    CHECK(ctx->n_threads == 1 && ctx->pool == NULL && ctx->backend == ref, "ref context");
    const pl_kernel *k = pl_backend_lookup(ref, n->op, pl_node_key_dtype(n));
    st = k ? k->run(ctx, n) : PL_ERR_UNSUPPORTED;   /* no work buffer: ref allocates */
    ref->ctx_free(ctx);
    return st;
}

static bool close_rel(double a, double b, double tol) { return fabs(a - b) <= tol * fmax(1e-30, fabs(b)); }

static void test_ref_known(void) {
    op_case c;
    /* rms_norm of [1, 2, 3, 4] with weights [1, .5, 2, 1]: mean square 7.5 */
    memset(&c, 0, sizeof c);
    c.node.op = PL_OP_RMS_NORM;
    pl_tensor *x = mk(&c, 0, PL_F32, 2, 4, 1, 1, 0), *w = mk(&c, 1, PL_F32, 1, 4, 1, 1, 0);
    pl_tensor *y = mk(&c, DST, PL_F32, 2, 4, 1, 1, 0);
    const float xv[4] = {1, 2, 3, 4}, wv[4] = {1, 0.5f, 2, 1};
    memcpy(x->data, xv, 16);
    memcpy(w->data, wv, 16);
    c.node.fparams[0] = 1e-6f;
    CHECK(run_ref(&c.node) == PL_OK, "rms_norm runs");
    for (int i = 0; i < 4; i++) {
        const double e = xv[i] / sqrt(7.5 + 1e-6) * wv[i];
        CHECK(close_rel(((float *)y->data)[i], e, 1e-6), "rms_norm[%d] = %g, expected %g", i, ((float *)y->data)[i], e);
    }
    free_case(&c);

    /* rope of a known vector: pos 0 is the identity, pos 1 rotates pair i by
     * base^(-2i/n_rot) radians; n_rot 6 of head_dim 8 leaves 2 dims alone. */
    for (int mode = 0; mode <= 2; mode += 2)
        for (int p = 0; p <= 1; p++) {
            memset(&c, 0, sizeof c);
            c.node.op = PL_OP_ROPE;
            x = mk(&c, 0, PL_F32, 3, 8, 1, 1, 0);
            pl_tensor *pos = mk(&c, 1, PL_I32, 1, 1, 1, 1, 0);
            y = mk(&c, DST, PL_F32, 3, 8, 1, 1, 0);
            const float v[8] = {1, 2, 3, 4, 5, 6, 7, 8};
            memcpy(x->data, v, sizeof v);
            set_i32(pos, 0, p);
            c.node.iparams[0] = 6;
            c.node.iparams[1] = mode;
            c.node.fparams[0] = 100.0f;
            c.node.fparams[1] = 1.0f;
            CHECK(run_ref(&c.node) == PL_OK, "rope runs");
            double e[8];
            for (int i = 0; i < 8; i++) e[i] = v[i];
            for (int i = 0; i < 3; i++) {
                const double th = p * pow(100.0, -2.0 * i / 6);
                const int a = mode ? i : 2 * i, b = mode ? i + 3 : 2 * i + 1;
                e[a] = v[a] * cos(th) - v[b] * sin(th);
                e[b] = v[a] * sin(th) + v[b] * cos(th);
            }
            for (int i = 0; i < 8; i++)
                CHECK(fabs(((float *)y->data)[i] - e[i]) <= 2e-6 * 8, "rope mode %d pos %d [%d] = %g, expected %g", mode,
                      p, i, ((float *)y->data)[i], e[i]);
            free_case(&c);
        }

    /* the same with llama3 frequency factors {1, 2, 4}: pair i at pos 3
     * rotates by 3 * 100^(-2i/6) / ff[i] radians */
    for (int mode = 0; mode <= 2; mode += 2) {
        memset(&c, 0, sizeof c);
        c.node.op = PL_OP_ROPE;
        x = mk(&c, 0, PL_F32, 3, 8, 1, 1, 0);
        pl_tensor *pos = mk(&c, 1, PL_I32, 1, 1, 1, 1, 0);
        pl_tensor *ff = mk(&c, 2, PL_F32, 1, 3, 1, 1, 0);
        y = mk(&c, DST, PL_F32, 3, 8, 1, 1, 0);
        const float v[8] = {1, 2, 3, 4, 5, 6, 7, 8}, f[3] = {1, 2, 4};
        memcpy(x->data, v, sizeof v);
        memcpy(ff->data, f, sizeof f);
        set_i32(pos, 0, 3);
        c.node.iparams[0] = 6;
        c.node.iparams[1] = mode;
        c.node.fparams[0] = 100.0f;
        c.node.fparams[1] = 1.0f;
        CHECK(run_ref(&c.node) == PL_OK, "rope with freq_factors runs: %s", pl_last_error());
        double e[8];
        for (int i = 0; i < 8; i++) e[i] = v[i];
        for (int i = 0; i < 3; i++) {
            const double th = 3 * pow(100.0, -2.0 * i / 6) / f[i];
            const int a = mode ? i : 2 * i, b = mode ? i + 3 : 2 * i + 1;
            e[a] = v[a] * cos(th) - v[b] * sin(th);
            e[b] = v[a] * sin(th) + v[b] * cos(th);
        }
        for (int i = 0; i < 8; i++)
            CHECK(fabs(((float *)y->data)[i] - e[i]) <= 2e-6 * 8, "rope ff mode %d [%d] = %g, expected %g", mode, i,
                  ((float *)y->data)[i], e[i]);
        free_case(&c);
    }

    /* attention, 2 positions, 2 query heads sharing 1 KV head (f32 cache):
     * token 0 at pos 0 sees only v0; token 1 at pos 1 mixes v0, v1. */
    memset(&c, 0, sizeof c);
    c.node.op = PL_OP_ATTENTION;
    pl_tensor *q = mk(&c, 0, PL_F32, 3, 4, 2, 2, 0);
    pl_tensor *kc = mk(&c, 1, PL_F32, 3, 4, 2, 1, 0), *vc = mk(&c, 2, PL_F32, 3, 4, 2, 1, 0);
    pl_tensor *pos = mk(&c, 3, PL_I32, 1, 2, 1, 1, 0), *seq = mk(&c, 4, PL_I32, 1, 2, 1, 1, 0);
    y = mk(&c, DST, PL_F32, 2, 8, 2, 1, 0);
    const float qv[16] = {1, 0, 0, 0, 0, 1, 0, 0, /* token 0 heads 0,1 */ 1, 1, 0, 0, 0, 0, 2, 0 /* token 1 */};
    const float kv[8] = {1, 0, 1, 0, /* pos 0 */ 0, 2, 0, 1 /* pos 1 */};
    const float vv[8] = {1, 2, 3, 4, -1, 0, 5, 2};
    memcpy(q->data, qv, sizeof qv);
    memcpy(kc->data, kv, sizeof kv);
    memcpy(vc->data, vv, sizeof vv);
    set_i32(pos, 0, 0); set_i32(pos, 1, 1);
    set_i32(seq, 0, 0); set_i32(seq, 1, 0);
    c.node.iparams[0] = 1;
    c.node.fparams[0] = 0.5f;
    CHECK(pl_node_validate(&c.node) == PL_OK, "attention node: %s", pl_last_error());
    CHECK(run_ref(&c.node) == PL_OK, "attention runs");
    const float *o = y->data;
    for (int h = 0; h < 2; h++)
        for (int d = 0; d < 4; d++) CHECK(o[h * 4 + d] == vv[d], "token 0 head %d = v0", h);
    for (int h = 0; h < 2; h++) {
        const float *qq = qv + 8 + 4 * h;
        double s0 = 0, s1 = 0;
        for (int d = 0; d < 4; d++) { s0 += qq[d] * kv[d]; s1 += qq[d] * kv[4 + d]; }
        s0 *= 0.5; s1 *= 0.5;
        const double w0 = 1 / (1 + exp(s1 - s0)), w1 = 1 - w0;
        for (int d = 0; d < 4; d++) {
            const double e = w0 * vv[d] + w1 * vv[4 + d];
            CHECK(fabs(o[8 + h * 4 + d] - e) < 1e-6, "token 1 head %d [%d] = %g, expected %g", h, d, o[8 + h * 4 + d], e);
        }
    }
    /* a sliding window of 1: token 1 sees only v1, token 0 still v0; of 2:
     * as without a window; negative: refused */
    c.node.iparams[4] = 1;
    CHECK(pl_node_validate(&c.node) == PL_OK, "attention node with a window: %s", pl_last_error());
    CHECK(run_ref(&c.node) == PL_OK, "windowed attention runs");
    for (int h = 0; h < 2; h++)
        for (int d = 0; d < 4; d++) {
            CHECK(o[h * 4 + d] == vv[d], "window 1: token 0 head %d = v0", h);
            CHECK(o[8 + h * 4 + d] == vv[4 + d], "window 1: token 1 head %d [%d] = %g, expected v1 = %g", h, d,
                  o[8 + h * 4 + d], vv[4 + d]);
        }
    float full[16];
    c.node.iparams[4] = 0;
    CHECK(run_ref(&c.node) == PL_OK, "attention runs");
    memcpy(full, o, sizeof full);
    c.node.iparams[4] = 2;
    CHECK(run_ref(&c.node) == PL_OK && !memcmp(full, o, sizeof full), "window 2 == no window at positions 0, 1");
    c.node.iparams[4] = -1;
    CHECK(pl_node_validate(&c.node) == PL_ERR_INVALID_ARG, "negative window refused");
    c.node.iparams[4] = 0;
    /* out-of-range positions are errors, not crashes */
    set_i32(pos, 1, 2);
    CHECK(run_ref(&c.node) == PL_ERR_INVALID_ARG, "attention pos beyond n_ctx");
    set_i32(pos, 1, 1); set_i32(seq, 1, 1);
    CHECK(run_ref(&c.node) == PL_ERR_INVALID_ARG, "attention seq beyond n_seq");
    free_case(&c);

    /* matmul of a small known f32 matrix (K = 3, exact integers) */
    memset(&c, 0, sizeof c);
    c.node.op = PL_OP_MATMUL;
    pl_tensor *W = mk(&c, 0, PL_F32, 2, 3, 2, 1, 0), *X = mk(&c, 1, PL_F32, 2, 3, 2, 1, 4);
    y = mk(&c, DST, PL_F32, 2, 2, 2, 1, 0);
    const float Wv[6] = {1, 2, 3, -1, 0, 4};
    memcpy(W->data, Wv, sizeof Wv);
    const float Xv[2][3] = {{1, 1, 1}, {2, -1, 0.5f}};
    for (int m = 0; m < 2; m++) memcpy(f32p(X, 0, m, 0), Xv[m], 12);
    CHECK(run_ref(&c.node) == PL_OK, "matmul runs");
    const float ey[4] = {6, 3, 1.5f, 0};   /* [n=0,m=0], [n=1,m=0], [n=0,m=1], [n=1,m=1] */
    for (int i = 0; i < 4; i++) CHECK(((float *)y->data)[i] == ey[i], "matmul[%d] = %g, expected %g", i, ((float *)y->data)[i], ey[i]);
    free_case(&c);

    /* get_rows from q8_0 (exact decode), and an out-of-range id */
    memset(&c, 0, sizeof c);
    c.node.op = PL_OP_GET_ROWS;
    pl_tensor *tab = mk(&c, 0, PL_Q8_0, 2, 32, 3, 1, 0), *ids = mk(&c, 1, PL_I32, 1, 2, 1, 1, 0);
    y = mk(&c, DST, PL_F32, 2, 32, 2, 1, 0);
    float rowv[32];
    for (int rr = 0; rr < 3; rr++) {
        for (int i = 0; i < 32; i++) rowv[i] = (float)(rr * 32 + i - 40) * 0.5f;
        pl_quantize_row(PL_Q8_0, rowv, pl_tensor_row(tab, rr, 0, 0), 32);
    }
    set_i32(ids, 0, 2); set_i32(ids, 1, 0);
    CHECK(run_ref(&c.node) == PL_OK, "get_rows runs");
    float dec[32];
    pl_dequantize_row(PL_Q8_0, pl_tensor_row(tab, 2, 0, 0), dec, 32);
    CHECK(!memcmp(dec, y->data, sizeof dec), "get_rows row 0 = table row 2");
    set_i32(ids, 1, 3);
    CHECK(run_ref(&c.node) == PL_ERR_INVALID_ARG, "get_rows id beyond the table");
    set_i32(ids, 1, -1);
    CHECK(run_ref(&c.node) == PL_ERR_INVALID_ARG, "negative get_rows id");
    free_case(&c);

    /* add with broadcast, swiglu */
    memset(&c, 0, sizeof c);
    c.node.op = PL_OP_ADD;
    pl_tensor *a = mk(&c, 0, PL_F32, 2, 2, 2, 1, 0), *b = mk(&c, 1, PL_F32, 1, 2, 1, 1, 0);
    y = mk(&c, DST, PL_F32, 2, 2, 2, 1, 0);
    const float av[4] = {1, 2, 3, 4}, bv[2] = {10, 20};
    memcpy(a->data, av, 16);
    memcpy(b->data, bv, 8);
    CHECK(run_ref(&c.node) == PL_OK, "add runs");
    const float ea[4] = {11, 22, 13, 24};
    CHECK(!memcmp(y->data, ea, 16), "add broadcast");
    free_case(&c);
    memset(&c, 0, sizeof c);
    c.node.op = PL_OP_SWIGLU;
    a = mk(&c, 0, PL_F32, 1, 3, 1, 1, 0);
    b = mk(&c, 1, PL_F32, 1, 3, 1, 1, 0);
    y = mk(&c, DST, PL_F32, 1, 3, 1, 1, 0);
    const float gv[3] = {1, 0, -2}, uv[3] = {2, 5, 1};
    memcpy(a->data, gv, 12);
    memcpy(b->data, uv, 12);
    CHECK(run_ref(&c.node) == PL_OK, "swiglu runs");
    for (int i = 0; i < 3; i++) {
        const double e = gv[i] / (1 + exp(-gv[i])) * uv[i];
        CHECK(close_rel(((float *)y->data)[i], e, 1e-6) || (e == 0 && ((float *)y->data)[i] == 0), "swiglu[%d]", i);
    }
    free_case(&c);

    /* geglu: GGML's f16-table GELU. The expected values are computed here
     * from the definition in double (tanh form), then rounded as GGML does:
     * gate and GELU to f16 (round to nearest even), clamps at +-10. */
    memset(&c, 0, sizeof c);
    c.node.op = PL_OP_GEGLU;
    a = mk(&c, 0, PL_F32, 1, 8, 1, 1, 0);
    b = mk(&c, 1, PL_F32, 1, 8, 1, 1, 0);
    y = mk(&c, DST, PL_F32, 1, 8, 1, 1, 0);
    const float gg[8] = {1.0f, 0.0f, -2.0f, 0.3333333f, -10.0f, 10.0f, 12.5f, -9.99f};
    const float gu[8] = {2.0f, 5.0f, 1.0f, -3.0f, 7.0f, 0.5f, 2.0f, 1.0f};
    memcpy(a->data, gg, sizeof gg);
    memcpy(b->data, gu, sizeof gu);
    CHECK(run_ref(&c.node) == PL_OK, "geglu runs");
    for (int i = 0; i < 8; i++) {
        double e;
        if (gg[i] <= -10.0f) e = 0.0;
        else if (gg[i] >= 10.0f) e = (double)gg[i] * gu[i];
        else {
            const double x = pl_f16_to_f32(pl_f32_to_f16(gg[i]));
            const double gl = 0.5 * x * (1.0 + tanh(sqrt(2.0 / M_PI) * x * (1.0 + 0.044715 * x * x)));
            e = (double)pl_f16_to_f32(pl_f32_to_f16((float)gl)) * gu[i];
        }
        /* the f16 rounding of gelu may land one f16 ulp apart from double's */
        CHECK(fabs(((float *)y->data)[i] - e) <= fabs(e) * 1.0e-3 + 1e-7, "geglu[%d] = %g, expected %g", i,
              ((float *)y->data)[i], e);
    }
    /* gelu(1) = 0.8412 (f16 0.8413), gelu(-2) = -0.04550 */
    CHECK(fabs(((float *)y->data)[0] - 2 * 0.8412) < 2e-3 && fabs(((float *)y->data)[2] + 0.0455) < 1e-4,
          "geglu known values");
    free_case(&c);

    /* scale and softcap */
    memset(&c, 0, sizeof c);
    c.node.op = PL_OP_SCALE;
    c.node.fparams[0] = 16.0f;
    a = mk(&c, 0, PL_F32, 1, 3, 1, 1, 0);
    y = mk(&c, DST, PL_F32, 1, 3, 1, 1, 0);
    const float sv[3] = {1.5f, -0.25f, 3.0f};
    memcpy(a->data, sv, sizeof sv);
    CHECK(run_ref(&c.node) == PL_OK, "scale runs");
    const float es[3] = {24.0f, -4.0f, 48.0f};
    CHECK(!memcmp(y->data, es, sizeof es), "scale by 16");
    c.node.op = PL_OP_SOFTCAP;
    c.node.fparams[0] = 2.0f;
    CHECK(run_ref(&c.node) == PL_OK, "softcap runs");
    for (int i = 0; i < 3; i++)
        CHECK(close_rel(((float *)y->data)[i], 2.0 * tanh(sv[i] / 2.0), 1e-6), "softcap[%d]", i);
    CHECK(fabsf(((float *)y->data)[2]) < 2.0f, "softcap bounds |x| by c");
    free_case(&c);

    /* kv_store into an f16 cache rounds to nearest even */
    memset(&c, 0, sizeof c);
    c.node.op = PL_OP_KV_STORE;
    pl_tensor *rows = mk(&c, 0, PL_F32, 2, 2, 1, 1, 0);
    pos = mk(&c, 1, PL_I32, 1, 1, 1, 1, 0);
    seq = mk(&c, 2, PL_I32, 1, 1, 1, 1, 0);
    pl_tensor *cache = mk(&c, DST, PL_F16, 3, 2, 4, 2, 0);
    const float rv[2] = {1.0f / 3.0f, 1.0f + 1.0f / 2048.0f};   /* the second is a tie */
    memcpy(rows->data, rv, 8);
    set_i32(pos, 0, 3);
    set_i32(seq, 0, 1);
    CHECK(run_ref(&c.node) == PL_OK, "kv_store runs");
    const pl_f16 *h = pl_tensor_row(cache, 3, 1, 0);
    CHECK(h[0] == 0x3555 && h[1] == 0x3C00, "f16 cache values %04x %04x", h[0], h[1]);
    set_i32(pos, 0, 4);
    CHECK(run_ref(&c.node) == PL_ERR_INVALID_ARG, "kv_store pos beyond n_ctx");
    free_case(&c);
}

/* ---- the cross-backend run -----------------------------------------------------*/

/* Is name one of the comma-separated list? */
static bool name_in_list(const char *name, const char *list) {
    const size_t n = strlen(name);
    for (const char *p = list; *p;) {
        const char *e = strchr(p, ',');
        const size_t len = e ? (size_t)(e - p) : strlen(p);
        if (len == n && !strncmp(p, name, n)) return true;
        if (!e) break;
        p = e + 1;
    }
    return false;
}

static void test_backends(void) {
    const pl_backend *ref = pl_backend_find("ref");
    pl_exec_ctx *ref_ctx = NULL;
    if (!ref || ref->ctx_create(1, &ref_ctx) != PL_OK) {
        CHECK(0, "cannot create a ref context");
        return;
    }
    /* PL_OPS_BACKENDS=cuda,cpu: only those backends (scripts/gpu-check.sh
     * runs cuda alone; the cpu backend is covered by the ordinary run). */
    const char *only = getenv("PL_OPS_BACKENDS");
    int n_tested = 0;
    for (int pass = 0; pass < 2; pass++) {
        for (const pl_backend *const *bp = pl_backends(); *bp; bp++) {
            const pl_backend *b = *bp;
            /* pass 0: every backend but ref; pass 1 (only if pass 0 found
             * none with kernels): ref against itself, as a smoke test */
            if ((pass == 0) == (b == ref)) continue;
            if (only && *only && pass == 0 && !name_in_list(b->name, only)) {
                printf("  backend %s: not in PL_OPS_BACKENDS=%s, skipped\n", b->name, only);
                continue;
            }
            if (pass == 0 && (!b->n_kernels || !b->ctx_create)) {
                printf("  backend %s: no kernels yet, skipped\n", b->name);
                continue;
            }
            if (pass == 1) printf("  no other backend has kernels: running ref against itself (smoke test)\n");
            static const int thread_counts[2] = {1, 3};
            /* a device backend ignores the thread count: one run */
            for (int ti = 0; ti < (b == ref || b->device ? 1 : 2); ti++) {
                pl_exec_ctx *ctx = NULL;
                if (b->ctx_create(thread_counts[ti], &ctx) != PL_OK) {
                    char detail[512] = "";
                    if (b->probe && !b->probe(detail, sizeof detail)) { /* no such device on this machine */
                        printf("  backend %s: not available here (%s), skipped\n", b->name, detail);
                        break;
                    }
                    CHECK(0, "%s: ctx_create(%d) failed: %s", b->name, thread_counts[ti], pl_last_error());
                    continue;
                }
                for (size_t i = 0; i < b->n_kernels; i++) {
                    const pl_kernel *k = &b->kernels[i];
                    if (pl_backend_lookup(b, k->op, k->key) != k) continue;   /* shadowed duplicate */
                    const pl_op_schema *s = pl_op_schema_get(k->op);
                    if (!s) continue;
                    const uint64_t km = s->key_operand < 0 ? s->dst_dtypes : s->src_dtypes[s->key_operand];
                    for (int t = 0; t < PL_DTYPE_COUNT; t++) {
                        /* a wildcard entry is tested with every key it serves */
                        if (k->key != PL_DTYPE_ANY ? t != (int)k->key
                                                   : (!(km & PL_DTMASK(t)) || pl_backend_lookup(b, k->op, (pl_dtype)t) != k))
                            continue;
                        cmp_stats st = {0};
                        compare_kernel(b, k, ctx, k->op, (pl_dtype)t, ref_ctx, &st);
                        printf("  %-4s x%d %-9s %-5s %3d cases  max NMSE %.2e  (limit %.0e)  %s\n", b->name,
                               ctx->n_threads, s->name, pl_dtype_name((pl_dtype)t), st.cases, st.worst,
                               threshold(k->op, (pl_dtype)t), st.failed ? "FAIL" : "ok");
                        n_tested++;
                    }
                }
                b->ctx_free(ctx);
            }
        }
        if (n_tested) break;
    }
    ref->ctx_free(ref_ctx);
}

/* ---- perf mode ---------------------------------------------------------------------*/

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* Times one case on every backend that has its kernel. */
static void perf_case(op_case *c, double flops) {
    for (const pl_backend *const *bp = pl_backends(); *bp; bp++) {
        const pl_backend *b = *bp;
        const pl_kernel *k = pl_backend_lookup(b, c->op, pl_node_key_dtype(&c->node));
        if (!k || !b->ctx_create || b->device) continue;   /* device backends: test_cuda --perf */
        long nproc = sysconf(_SC_NPROCESSORS_ONLN);
        pl_exec_ctx *ctx = NULL;
        if (b->ctx_create(nproc > 0 ? (int)nproc : 1, &ctx) != PL_OK) continue;
        const size_t ws = k->work_size ? k->work_size(&c->node, ctx->n_threads) : 0;
        void *work = malloc(ws ? ws : 1);
        ctx->work = work;
        ctx->work_size = ws;
        int reps = 0;
        const double t0 = now_s();
        double t = t0;
        do {
            if (c->op == PL_OP_KV_STORE) memcpy(c->buf[DST].base, c->buf[DST].pristine, c->buf[DST].size + 2 * GUARD);
            k->run(ctx, &c->node);
            reps++;
            t = now_s();
        } while ((t - t0 < 0.5 && reps < 1000) || reps < 2);
        const double per = (t - t0) / reps;
        if (flops > 0)
            printf("  %-4s x%-2d %-9s %-5s %-44s %9.3f ms  %7.1f GFLOP/s\n", b->name, ctx->n_threads, pl_op_name(c->op),
                   pl_dtype_name(c->key), c->desc, per * 1e3, flops / per * 1e-9);
        else
            printf("  %-4s x%-2d %-9s %-5s %-44s %9.3f ms\n", b->name, ctx->n_threads, pl_op_name(c->op),
                   pl_dtype_name(c->key), c->desc, per * 1e3);
        free(work);
        b->ctx_free(ctx);
    }
}

static int run_perf(void) {
    pl_rng r = {2024};
    static op_case c;
    printf("per-op time, Qwen3-0.6B shapes (n_embd 1024, n_ff 3072, 16 heads, 8 KV heads, head_dim 128)\n");
    static const pl_dtype wts[] = {PL_F32, PL_F16, PL_BF16, PL_Q8_0, PL_Q6_K, PL_Q4_K, PL_Q4_0, PL_Q4_1, PL_Q5_0, PL_Q5_1};
    for (int mi = 0; mi < 2; mi++) {
        const int64_t M = mi ? 64 : 1, K = 1024, N = 3072;
        for (size_t wi = 0; wi < sizeof wts / sizeof wts[0]; wi++) {
            memset(&c, 0, sizeof c);
            c.op = c.node.op = PL_OP_MATMUL;
            c.key = wts[wi];
            snprintf(c.desc, sizeof c.desc, "K=%lld N=%lld M=%lld", (long long)K, (long long)N, (long long)M);
            pl_fill_rows(mk(&c, 0, wts[wi], 2, K, N, 1, 0), &r, 1.0f);
            fill_f32(mk(&c, 1, PL_F32, 2, K, M, 1, 0), &r, 1.0f);
            mk(&c, DST, PL_F32, 2, N, M, 1, 0);
            seal(&c);
            perf_case(&c, 2.0 * (double)K * (double)N * (double)M);
            free_case(&c);
        }
    }
    for (int mi = 0; mi < 2; mi++) {
        const int64_t T = mi ? 64 : 1;
        /* rms_norm [1024, T] */
        memset(&c, 0, sizeof c);
        c.op = c.node.op = PL_OP_RMS_NORM;
        c.key = PL_F32;
        snprintf(c.desc, sizeof c.desc, "[1024, %lld]", (long long)T);
        fill_f32(mk(&c, 0, PL_F32, 2, 1024, T, 1, 0), &r, 1.0f);
        fill_f32(mk(&c, 1, PL_F32, 1, 1024, 1, 1, 0), &r, 1.0f);
        mk(&c, DST, PL_F32, 2, 1024, T, 1, 0);
        c.node.fparams[0] = 1e-6f;
        seal(&c);
        perf_case(&c, 0);
        free_case(&c);
        /* add [1024, T], swiglu [3072, T] */
        memset(&c, 0, sizeof c);
        c.op = c.node.op = PL_OP_ADD;
        c.key = PL_F32;
        snprintf(c.desc, sizeof c.desc, "[1024, %lld]", (long long)T);
        fill_f32(mk(&c, 0, PL_F32, 2, 1024, T, 1, 0), &r, 1.0f);
        fill_f32(mk(&c, 1, PL_F32, 2, 1024, T, 1, 0), &r, 1.0f);
        mk(&c, DST, PL_F32, 2, 1024, T, 1, 0);
        seal(&c);
        perf_case(&c, 0);
        free_case(&c);
        memset(&c, 0, sizeof c);
        c.op = c.node.op = PL_OP_SWIGLU;
        c.key = PL_F32;
        snprintf(c.desc, sizeof c.desc, "[3072, %lld]", (long long)T);
        fill_f32(mk(&c, 0, PL_F32, 2, 3072, T, 1, 0), &r, 1.0f);
        fill_f32(mk(&c, 1, PL_F32, 2, 3072, T, 1, 0), &r, 1.0f);
        mk(&c, DST, PL_F32, 2, 3072, T, 1, 0);
        seal(&c);
        perf_case(&c, 0);
        free_case(&c);
        /* rope [128, 16, T] NeoX */
        memset(&c, 0, sizeof c);
        c.op = c.node.op = PL_OP_ROPE;
        c.key = PL_F32;
        snprintf(c.desc, sizeof c.desc, "[128, 16, %lld] neox", (long long)T);
        fill_f32(mk(&c, 0, PL_F32, 3, 128, 16, T, 0), &r, 1.0f);
        pl_tensor *pos = mk(&c, 1, PL_I32, 1, T, 1, 1, 0);
        for (int64_t t = 0; t < T; t++) set_i32(pos, t, (int32_t)(100 + t));
        mk(&c, DST, PL_F32, 3, 128, 16, T, 0);
        c.node.iparams[0] = 128;
        c.node.iparams[1] = 2;
        c.node.fparams[0] = 1000000.0f;
        c.node.fparams[1] = 1.0f;
        seal(&c);
        perf_case(&c, 0);
        free_case(&c);
        for (int ci = 0; ci < 2; ci++) {
            const pl_dtype cdt = ci ? PL_F32 : PL_F16;
            const int64_t n_ctx = 1024;
            /* kv_store [1024, T] */
            memset(&c, 0, sizeof c);
            c.op = c.node.op = PL_OP_KV_STORE;
            c.key = cdt;
            snprintf(c.desc, sizeof c.desc, "[1024, %lld] into [1024, %lld, 1]", (long long)T, (long long)n_ctx);
            fill_f32(mk(&c, 0, PL_F32, 2, 1024, T, 1, 0), &r, 1.0f);
            pl_tensor *p = mk(&c, 1, PL_I32, 1, T, 1, 1, 0), *s = mk(&c, 2, PL_I32, 1, T, 1, 1, 0);
            for (int64_t t = 0; t < T; t++) { set_i32(p, t, (int32_t)(500 + t)); set_i32(s, t, 0); }
            pl_fill_rows(mk(&c, DST, cdt, 3, 1024, n_ctx, 1, 0), &r, 1.0f);
            seal(&c);
            perf_case(&c, 0);
            free_case(&c);
            /* attention: T queries at positions 959..1022 (or 1023 alone) over a 1024 cache */
            memset(&c, 0, sizeof c);
            c.op = c.node.op = PL_OP_ATTENTION;
            c.key = cdt;
            snprintf(c.desc, sizeof c.desc, "16/8 heads, %lld tok, ~1k ctx", (long long)T);
            fill_f32(mk(&c, 0, PL_F32, 3, 128, 16, T, 0), &r, 1.0f);
            pl_fill_rows(mk(&c, 1, cdt, 3, 1024, n_ctx, 1, 0), &r, 1.0f);
            pl_fill_rows(mk(&c, 2, cdt, 3, 1024, n_ctx, 1, 0), &r, 1.0f);
            p = mk(&c, 3, PL_I32, 1, T, 1, 1, 0);
            s = mk(&c, 4, PL_I32, 1, T, 1, 1, 0);
            for (int64_t t = 0; t < T; t++) { set_i32(p, t, (int32_t)(n_ctx - T + t)); set_i32(s, t, 0); }
            mk(&c, DST, PL_F32, 2, 2048, T, 1, 0);
            c.node.iparams[0] = 8;
            c.node.fparams[0] = 1.0f / sqrtf(128.0f);
            seal(&c);
            perf_case(&c, 0);
            free_case(&c);
        }
        /* get_rows: T ids from a [1024, 4096] table */
        for (size_t wi = 0; wi < sizeof wts / sizeof wts[0]; wi++) {
            memset(&c, 0, sizeof c);
            c.op = c.node.op = PL_OP_GET_ROWS;
            c.key = wts[wi];
            snprintf(c.desc, sizeof c.desc, "%lld of [1024, 4096]", (long long)T);
            pl_fill_rows(mk(&c, 0, wts[wi], 2, 1024, 4096, 1, 0), &r, 1.0f);
            pl_tensor *ids = mk(&c, 1, PL_I32, 1, T, 1, 1, 0);
            for (int64_t t = 0; t < T; t++) set_i32(ids, t, (int32_t)pl_rng_int(&r, 0, 4095));
            mk(&c, DST, PL_F32, 2, 1024, T, 1, 0);
            seal(&c);
            perf_case(&c, 0);
            free_case(&c);
        }
    }
    return 0;
}

/* MoE ops on hand-made values: top-k order and its tie rule, matmul_id's
 * expert selection, the weighted sum with and without renormalisation, and
 * the node checks. */
static void test_moe_known(void) {
    op_case c;
    memset(&c, 0, sizeof c);
    c.node.op = PL_OP_MOE_TOPK;
    pl_tensor *lg = mk(&c, 0, PL_F32, 2, 5, 2, 1, 0);
    pl_tensor *ids = mk(&c, DST, PL_I32, 2, 3, 2, 1, 0);
    /* token 0: 3 > (1 = 1, tie: index 1 before 4) > ...; token 1: all equal */
    const float lv[10] = {0.5f, 1.0f, -2.0f, 3.0f, 1.0f, 7, 7, 7, 7, 7};
    memcpy(lg->data, lv, sizeof lv);
    c.node.iparams[0] = 3;
    CHECK(pl_node_validate(&c.node) == PL_OK, "moe_topk node: %s", pl_last_error());
    CHECK(run_ref(&c.node) == PL_OK, "moe_topk runs");
    const int32_t *iv = ids->data;
    CHECK(iv[0] == 3 && iv[1] == 1 && iv[2] == 4, "top-3 of token 0 = 3 1 4, got %d %d %d", iv[0], iv[1], iv[2]);
    CHECK(iv[3] == 0 && iv[4] == 1 && iv[5] == 2, "ties keep the lower index: %d %d %d", iv[3], iv[4], iv[5]);
    pl_node n = c.node;
    n.iparams[0] = 6; expect_invalid(&n, "k > n_expert");
    n.iparams[0] = 0; expect_invalid(&n, "k = 0");
    free_case(&c);

    /* matmul_id: 3 experts of [2 -> 2], expert e = (e+1) * identity;
     * x shared by the 2 slots of 1 token, ids (2, 0) */
    memset(&c, 0, sizeof c);
    c.node.op = PL_OP_MATMUL_ID;
    pl_tensor *W = mk(&c, 0, PL_F32, 3, 2, 2, 3, 0), *x = mk(&c, 1, PL_F32, 3, 2, 1, 1, 0);
    pl_tensor *id2 = mk(&c, 2, PL_I32, 2, 2, 1, 1, 0), *y = mk(&c, DST, PL_F32, 3, 2, 2, 1, 0);
    float wv[12] = {0};
    for (int e = 0; e < 3; e++) wv[4 * e] = wv[4 * e + 3] = (float)(e + 1);
    memcpy(W->data, wv, sizeof wv);
    const float xv[2] = {1.5f, -2.0f};
    memcpy(x->data, xv, sizeof xv);
    set_i32(id2, 0, 2);
    set_i32(id2, 1, 0);
    CHECK(pl_node_validate(&c.node) == PL_OK, "matmul_id node: %s", pl_last_error());
    CHECK(run_ref(&c.node) == PL_OK, "matmul_id runs");
    const float *yv = y->data;
    CHECK(yv[0] == 4.5f && yv[1] == -6.0f && yv[2] == 1.5f && yv[3] == -2.0f, "matmul_id = %g %g %g %g", yv[0], yv[1],
          yv[2], yv[3]);
    set_i32(id2, 1, 3);
    CHECK(run_ref(&c.node) == PL_ERR_INVALID_ARG, "matmul_id refuses expert id 3 of 3");
    n = c.node;
    pl_tensor xb = c.t[1];
    xb.ne[1] = 3; xb.n_dims = 3; n.src[1] = &xb; expect_invalid(&n, "x with 3 slots for k = 2");
    n = c.node;
    pl_tensor wb = c.t[0];
    wb.ne[2] = 1; wb.n_dims = 2; n.src[0] = &wb; expect_invalid(&n, "k = 2 experts of a 1-expert W");
    free_case(&c);

    /* moe_combine: 2 slots, logits (0, ln 3) -> p = (.25, .75); ids (1, 0):
     * weights (.75, .25); renormalised they sum to 1 already, so the
     * unnormalised case uses 3 experts with the third unused. */
    for (int norm = 0; norm <= 1; norm++) {
        memset(&c, 0, sizeof c);
        c.node.op = PL_OP_MOE_COMBINE;
        pl_tensor *yy = mk(&c, 0, PL_F32, 3, 2, 2, 1, 0), *lo = mk(&c, 1, PL_F32, 2, 3, 1, 1, 0);
        pl_tensor *ii = mk(&c, 2, PL_I32, 2, 2, 1, 1, 0), *out = mk(&c, DST, PL_F32, 2, 2, 1, 1, 0);
        const float yvals[4] = {1, 2, 10, 20}, lvals[3] = {0, logf(3.0f), logf(4.0f)};
        memcpy(yy->data, yvals, sizeof yvals);
        memcpy(lo->data, lvals, sizeof lvals);
        set_i32(ii, 0, 1);
        set_i32(ii, 1, 0);
        c.node.iparams[0] = norm;
        CHECK(pl_node_validate(&c.node) == PL_OK, "moe_combine node: %s", pl_last_error());
        CHECK(run_ref(&c.node) == PL_OK, "moe_combine runs");
        /* p = (1, 3, 4) / 8; w = (3/8, 1/8), normalised (3/4, 1/4) */
        const double w0 = norm ? 0.75 : 0.375, w1 = norm ? 0.25 : 0.125;
        const float *o = out->data;
        CHECK(close_rel(o[0], w0 * 1 + w1 * 10, 1e-6) && close_rel(o[1], w0 * 2 + w1 * 20, 1e-6),
              "moe_combine norm=%d = %g %g", norm, o[0], o[1]);
        n = c.node;
        n.iparams[0] = 2; expect_invalid(&n, "norm = 2");
        free_case(&c);
    }
}

int main(int argc, char **argv) {
    if (argc > 1 && !strcmp(argv[1], "--perf")) return run_perf();
    test_tables();
    test_validate();
    test_ref_known();
    test_moe_known();
    test_backends();
    return pl_test_summary("test_ops");
}
