/*
 * The `ref` backend: scalar, single-threaded, obviously correct kernels. This
 * is the normative definition of every op in kernels/abi.h; the optimized
 * backends are tested against it (tests/test_ops.c).
 *
 * Precision choices (the ones that matter for matching llama.cpp):
 *  - matmul decodes each weight row to f32 exactly as GGML does and then
 *    accumulates products in double: the exact dot product of the stored
 *    weights and the f32 activations, rounded once;
 *  - rms_norm follows GGML's arithmetic: sum of float squares in double, mean
 *    and scale in float, y = (x * scale) * w;
 *  - rope follows GGML's float arithmetic step by step (iterated theta,
 *    cosf/sinf), so it is bit-identical with ggml_rope_ext (ext_factor 0,
 *    attn_factor 1);
 *  - attention computes scores, softmax and the weighted sum in double.
 *
 * Every kernel indexes every operand through its byte strides nb[], so it
 * accepts any layout pl_node_validate accepts, and checks the run-time data
 * it depends on (ids, positions, slots) instead of trusting it.
 */
#include "kernels/abi.h"
#include "backends/ref/ref_moe.h"
#include "backends/ref/ref_gemma.h"
#include "core/fp16.h"
#include "core/status.h"
#include "quant/hadamard.h"
#include "quant/quant.h"
#include <math.h>
#include <stdlib.h>
#include <string.h>

/* Element (i0) of row (i1, i2, i3) of an F32 / I32 tensor. */
static inline float *f32_at(const pl_tensor *t, int64_t i0, int64_t i1, int64_t i2, int64_t i3) {
    return (float *)((char *)pl_tensor_row(t, i1, i2, i3) + i0 * (int64_t)sizeof(float));
}
static inline int32_t i32_at(const pl_tensor *t, int64_t i0) {
    int32_t v;
    memcpy(&v, (const char *)t->data + i0 * (int64_t)t->nb[0], sizeof v);
    return v;
}

/* Scratch: the planner's work buffer when it is large enough, otherwise a
 * temporary allocation (the ref backend must also work without a planner). */
typedef struct ref_scratch {
    void *p;
    bool owned;
} ref_scratch;

static pl_status scratch_get(pl_exec_ctx *ctx, size_t size, ref_scratch *s) {
    if (ctx && ctx->work && ctx->work_size >= size) {
        s->p = ctx->work;
        s->owned = false;
        return PL_OK;
    }
    s->p = malloc(size ? size : 1);
    s->owned = true;
    return s->p ? PL_OK : pl_errorf(PL_ERR_NO_MEMORY, "ref: cannot allocate %zu bytes of scratch", size);
}

static void scratch_put(ref_scratch *s) {
    if (s->owned) free(s->p);
}

/* ---- get_rows -------------------------------------------------------------
 * table [C, R] any readable dtype; ids I32 [n]; dst F32 [C, n]. */
static pl_status ref_get_rows(pl_exec_ctx *ctx, const pl_node *node) {
    const pl_tensor *table = node->src[0], *ids = node->src[1], *dst = node->dst;
    const int64_t C = table->ne[0], R = table->ne[1], n = ids->ne[0];
    if (!pl_can_dequantize(table->dtype))
        return pl_errorf(PL_ERR_UNSUPPORTED, "get_rows: ref cannot decode %s", pl_dtype_name(table->dtype));
    for (int64_t i = 0; i < n; i++) {
        const int32_t id = i32_at(ids, i);
        if (id < 0 || id >= R)
            return pl_errorf(PL_ERR_INVALID_ARG, "get_rows: id %d at %lld is outside the table's %lld rows", id,
                             (long long)i, (long long)R);
        pl_dequantize_row(table->dtype, pl_tensor_row(table, id, 0, 0), f32_at(dst, 0, i, 0, 0), C);
    }
    return PL_OK;
}

/* ---- matmul ---------------------------------------------------------------
 * W [K, N] any readable dtype; x F32 [K, M]; dst F32 [N, M].
 * Scratch: one decoded weight row (K floats). */
static size_t ref_matmul_work(const pl_node *node, int n_threads) {
    return (size_t)node->src[0]->ne[0] * sizeof(float);
}

static pl_status ref_matmul(pl_exec_ctx *ctx, const pl_node *node) {
    const pl_tensor *W = node->src[0], *x = node->src[1], *dst = node->dst;
    const int64_t K = W->ne[0], N = W->ne[1], M = x->ne[1];
    if (!pl_can_dequantize(W->dtype))
        return pl_errorf(PL_ERR_UNSUPPORTED, "matmul: ref cannot decode %s", pl_dtype_name(W->dtype));
    ref_scratch s;
    PL_TRY(scratch_get(ctx, ref_matmul_work(node, 1), &s));
    float *w = s.p;
    for (int64_t n = 0; n < N; n++) {
        pl_dequantize_row(W->dtype, pl_tensor_row(W, n, 0, 0), w, K);
        for (int64_t m = 0; m < M; m++) {
            const float *xr = f32_at(x, 0, m, 0, 0);
            double acc = 0.0;
            for (int64_t k = 0; k < K; k++) acc += (double)w[k] * (double)xr[k];
            *f32_at(dst, n, m, 0, 0) = (float)acc;
        }
    }
    scratch_put(&s);
    return PL_OK;
}

/* ---- rms_norm -------------------------------------------------------------
 * x F32 [n, d1, d2, d3]; w F32 [n]; dst F32 like x. */
static pl_status ref_rms_norm(pl_exec_ctx *ctx, const pl_node *node) {
    const pl_tensor *x = node->src[0], *w = node->src[1], *dst = node->dst;
    const int64_t n = x->ne[0];
    const float eps = node->fparams[0];
    const float *wv = w->data;
    for (int64_t i3 = 0; i3 < x->ne[3]; i3++)
        for (int64_t i2 = 0; i2 < x->ne[2]; i2++)
            for (int64_t i1 = 0; i1 < x->ne[1]; i1++) {
                const float *xr = f32_at(x, 0, i1, i2, i3);
                float *yr = f32_at(dst, 0, i1, i2, i3);
                double sum = 0.0;
                for (int64_t i = 0; i < n; i++) sum += (double)(xr[i] * xr[i]);
                const float mean = (float)(sum / (double)n);
                const float scale = 1.0f / sqrtf(mean + eps);
                for (int64_t i = 0; i < n; i++) yr[i] = (xr[i] * scale) * wv[i];
            }
    return PL_OK;
}

/* ---- add / swiglu ---------------------------------------------------------*/
static pl_status ref_add(pl_exec_ctx *ctx, const pl_node *node) {
    const pl_tensor *a = node->src[0], *b = node->src[1], *dst = node->dst;
    const bool bcast = pl_tensor_nrows(b) == 1;
    for (int64_t i3 = 0; i3 < a->ne[3]; i3++)
        for (int64_t i2 = 0; i2 < a->ne[2]; i2++)
            for (int64_t i1 = 0; i1 < a->ne[1]; i1++) {
                const float *ar = f32_at(a, 0, i1, i2, i3);
                const float *br = bcast ? f32_at(b, 0, 0, 0, 0) : f32_at(b, 0, i1, i2, i3);
                float *yr = f32_at(dst, 0, i1, i2, i3);
                for (int64_t i = 0; i < a->ne[0]; i++) yr[i] = ar[i] + br[i];
            }
    return PL_OK;
}

static pl_status ref_swiglu(pl_exec_ctx *ctx, const pl_node *node) {
    const pl_tensor *g = node->src[0], *u = node->src[1], *dst = node->dst;
    for (int64_t i3 = 0; i3 < g->ne[3]; i3++)
        for (int64_t i2 = 0; i2 < g->ne[2]; i2++)
            for (int64_t i1 = 0; i1 < g->ne[1]; i1++) {
                const float *gr = f32_at(g, 0, i1, i2, i3);
                const float *ur = f32_at(u, 0, i1, i2, i3);
                float *yr = f32_at(dst, 0, i1, i2, i3);
                for (int64_t i = 0; i < g->ne[0]; i++) yr[i] = gr[i] / (1.0f + expf(-gr[i])) * ur[i];
            }
    return PL_OK;
}

/* ---- rope -----------------------------------------------------------------
 * x F32 [head_dim, n_head, n_tok]; pos I32 [n_tok]; dst like x.
 * GGML (ggml_rope_cache_init + rope_yarn with ext_factor 0, mscale 1):
 *   t = (float)pos; for each pair i: theta = freq_scale * t; c = cosf(theta),
 *   s = sinf(theta); t *= powf(freq_base, -2.0f / n_rot).
 * With freq_factors ff (src2, [n_rot/2]): theta = freq_scale * (t / ff[i]),
 * as ggml_rope_cache_init passes theta_extrap / ff to rope_yarn. */
static pl_status ref_rope(pl_exec_ctx *ctx, const pl_node *node) {
    const pl_tensor *x = node->src[0], *pos = node->src[1], *ff = node->src[2], *dst = node->dst;
    const int64_t head_dim = x->ne[0];
    const int n_rot = node->iparams[0];
    const bool neox = node->iparams[1] == 2;
    const float freq_base = node->fparams[0], freq_scale = node->fparams[1];
    const float theta_scale = powf(freq_base, -2.0f / (float)n_rot);
    const int half = n_rot / 2;
    for (int64_t t = 0; t < x->ne[2]; t++) {
        const float p = (float)i32_at(pos, t);
        for (int64_t h = 0; h < x->ne[1]; h++) {
            const float *xr = f32_at(x, 0, h, t, 0);
            float *yr = f32_at(dst, 0, h, t, 0);
            float theta_ext = p;
            for (int i = 0; i < half; i++) {
                const float theta = freq_scale * (ff ? theta_ext / f32_at(ff, i, 0, 0, 0)[0] : theta_ext);
                const float c = cosf(theta), s = sinf(theta);
                theta_ext *= theta_scale;
                /* normal: pair (2i, 2i+1); NeoX: pair (i, i + n_rot/2) */
                const int64_t i0 = neox ? i : 2 * i, i1 = neox ? i + half : 2 * i + 1;
                const float x0 = xr[i0], x1 = xr[i1];
                yr[i0] = x0 * c - x1 * s;
                yr[i1] = x0 * s + x1 * c;
            }
            for (int64_t i = n_rot; i < head_dim; i++) yr[i] = xr[i];
        }
    }
    return PL_OK;
}

/* ---- kv_store -------------------------------------------------------------
 * rows F32 [kv_dim, n_tok]; pos, seq I32 [n_tok]; cache F16/F32 [kv_dim, n_ctx, n_seq]. */
static pl_status check_slot(const char *op, const pl_tensor *cache, int64_t t, int32_t p, int32_t sq) {
    if (p < 0 || p >= cache->ne[1] || sq < 0 || sq >= cache->ne[2])
        return pl_errorf(PL_ERR_INVALID_ARG, "%s: token %lld has pos %d / seq %d outside the cache's %lld x %lld", op,
                         (long long)t, p, sq, (long long)cache->ne[1], (long long)cache->ne[2]);
    return PL_OK;
}

/* Quantized caches (q8_0, q4_0): the row, rotated by H_rot when iparams[0]
 * asks (quant/hadamard.h), then quantized by the reference quantizer. */
static size_t ref_kv_store_work(const pl_node *node, int n_threads) {
    (void)n_threads;
    return (size_t)node->src[0]->ne[0] * sizeof(float);
}

static pl_status ref_kv_store(pl_exec_ctx *ctx, const pl_node *node) {
    const pl_tensor *rows = node->src[0], *pos = node->src[1], *seq = node->src[2], *cache = node->dst;
    const int64_t kv_dim = rows->ne[0];
    const int rot = node->iparams[0];
    for (int64_t t = 0; t < rows->ne[1]; t++) {
        const int32_t p = i32_at(pos, t), sq = i32_at(seq, t);
        PL_TRY(check_slot("kv_store", cache, t, p, sq));
        const float *src = f32_at(rows, 0, t, 0, 0);
        void *out = pl_tensor_row(cache, p, sq, 0);
        if (cache->dtype == PL_Q8_0 || cache->dtype == PL_Q4_0 || rot) {
            ref_scratch s;
            PL_TRY(scratch_get(ctx, ref_kv_store_work(node, 1), &s));
            float *x = s.p;
            memcpy(x, src, (size_t)kv_dim * sizeof(float));
            if (rot) pl_hadamard_rows(x, kv_dim, rot);
            if (cache->dtype == PL_Q8_0) pl_quantize_row_q8_0(x, out, kv_dim);
            else if (cache->dtype == PL_Q4_0) pl_quantize_row_q4_0(x, out, kv_dim);
            else if (cache->dtype == PL_F16) pl_quantize_row_f16(x, out, kv_dim);
            else memcpy(out, x, (size_t)kv_dim * sizeof(float));
            scratch_put(&s);
        } else if (cache->dtype == PL_F16) {
            pl_f16 *o = out;
            for (int64_t i = 0; i < kv_dim; i++) o[i] = pl_f32_to_f16(src[i]);
        } else if (cache->dtype == PL_F32) {
            memcpy(out, src, (size_t)kv_dim * sizeof(float));
        } else {
            return pl_errorf(PL_ERR_UNSUPPORTED, "kv_store: ref has no %s cache", pl_dtype_name(cache->dtype));
        }
    }
    return PL_OK;
}

/* ---- attention ------------------------------------------------------------
 * q F32 [head_dim, n_head, n_tok]; k, v F16/F32 [n_kv_head*head_dim, n_ctx, n_seq];
 * pos, seq I32 [n_tok]; dst F32 [head_dim*n_head, n_tok].
 * Scratch: n_ctx scores and head_dim accumulators, in double. */
static size_t ref_attention_work(const pl_node *node, int n_threads) {
    (void)n_threads;
    /* scores and accumulators (double), then q, the decoded K/V slice and
     * the rounded q, head_dim floats each, and q's q8_0 blocks */
    const size_t hd = (size_t)node->src[0]->ne[0];
    return ((size_t)node->src[1]->ne[1] + hd) * sizeof(double) + 3 * hd * sizeof(float) + hd / 32 * 34 + 64;
}

static bool ref_quantized(pl_dtype t) { return t == PL_Q8_0 || t == PL_Q4_0; }

static inline double cache_at(const pl_tensor *c, const void *row, int64_t i) {
    return c->dtype == PL_F16 ? (double)pl_f16_to_f32(((const pl_f16 *)row)[i]) : (double)((const float *)row)[i];
}

/* Quantized (or mixed, or rotated) caches, with llama.cpp's semantics
 * (ggml's CPU flash attention, which a quantized cache requires there):
 *   - q is rotated by H_{k_rot} in chunks (k_rot = iparams[2]);
 *   - a quantized K row is dotted with q rounded to q8_0 (K's vec_dot_type),
 *     an f16 K row with q rounded to f16; the dot itself is exact here;
 *   - V rows are decoded to f32 and weighted by the softmax (in double);
 *   - the output row is rotated by H_{v_rot} (v_rot = iparams[3]), undoing
 *     V's rotation at store time (H*H = I).
 * Shapes as the plain path; scratch: ref_attention_work. */
static pl_status ref_attention_quant(pl_exec_ctx *ctx, const pl_node *node) {
    const pl_tensor *q = node->src[0], *k = node->src[1], *v = node->src[2];
    const pl_tensor *pos = node->src[3], *seq = node->src[4], *dst = node->dst;
    const int64_t head_dim = q->ne[0], n_head = q->ne[1], n_tok = q->ne[2];
    const int n_kv_head = node->iparams[0];
    const int64_t group = n_head / n_kv_head;
    const double scale = node->fparams[0];
    const int k_rot = node->iparams[2], v_rot = node->iparams[3], window = node->iparams[4];
    for (int i = 1; i <= 2; i++) {
        const pl_dtype t = node->src[i]->dtype;
        if (t != PL_F16 && t != PL_F32 && !ref_quantized(t))
            return pl_errorf(PL_ERR_UNSUPPORTED, "attention: ref has no %s cache", pl_dtype_name(t));
    }
    for (int64_t t = 0; t < n_tok; t++) PL_TRY(check_slot("attention", k, t, i32_at(pos, t), i32_at(seq, t)));
    ref_scratch s;
    PL_TRY(scratch_get(ctx, ref_attention_work(node, 1), &s));
    double *score = s.p, *acc = score + k->ne[1];
    float *qf = (float *)(acc + head_dim), *row = qf + head_dim, *qr = row + head_dim;
    void *qq = qr + head_dim;
    const size_t k_off = pl_dtype_row_size(k->dtype, head_dim), v_off = pl_dtype_row_size(v->dtype, head_dim);
    for (int64_t t = 0; t < n_tok; t++) {
        const int32_t p = i32_at(pos, t), sq = i32_at(seq, t);
        const int64_t lo = window > 0 && p - window + 1 > 0 ? p - window + 1 : 0;   /* sliding window */
        for (int64_t h = 0; h < n_head; h++) {
            const int64_t g = h / group;   /* this head's slice of a cache row */
            memcpy(qf, f32_at(q, 0, h, t, 0), (size_t)head_dim * sizeof(float));
            if (k_rot) pl_hadamard_rows(qf, head_dim, k_rot);
            /* q as K's dot product sees it */
            if (ref_quantized(k->dtype)) {
                pl_quantize_row_q8_0(qf, qq, head_dim);
                pl_dequantize_row(PL_Q8_0, qq, qr, head_dim);
            } else if (k->dtype == PL_F16) {
                for (int64_t d = 0; d < head_dim; d++) qr[d] = pl_f16_to_f32(pl_f32_to_f16(qf[d]));
            } else {
                memcpy(qr, qf, (size_t)head_dim * sizeof(float));
            }
            double mx = -INFINITY;
            for (int64_t j = lo; j <= p; j++) {
                pl_dequantize_row(k->dtype, (const char *)pl_tensor_row(k, j, sq, 0) + g * k_off, row, head_dim);
                double dot = 0.0;
                for (int64_t d = 0; d < head_dim; d++) dot += (double)qr[d] * row[d];
                score[j] = scale * dot;
                if (score[j] > mx) mx = score[j];
            }
            double sum = 0.0;
            for (int64_t j = lo; j <= p; j++) {
                score[j] = exp(score[j] - mx);
                sum += score[j];
            }
            for (int64_t d = 0; d < head_dim; d++) acc[d] = 0.0;
            for (int64_t j = lo; j <= p; j++) {
                pl_dequantize_row(v->dtype, (const char *)pl_tensor_row(v, j, sq, 0) + g * v_off, row, head_dim);
                for (int64_t d = 0; d < head_dim; d++) acc[d] += score[j] * row[d];
            }
            float *out = f32_at(dst, h * head_dim, t, 0, 0);
            for (int64_t d = 0; d < head_dim; d++) out[d] = (float)(acc[d] / sum);
            if (v_rot) pl_hadamard_rows(out, head_dim, v_rot);
        }
    }
    scratch_put(&s);
    return PL_OK;
}

static pl_status ref_attention(pl_exec_ctx *ctx, const pl_node *node) {
    const pl_tensor *q = node->src[0], *k = node->src[1], *v = node->src[2];
    const pl_tensor *pos = node->src[3], *seq = node->src[4], *dst = node->dst;
    const int64_t head_dim = q->ne[0], n_head = q->ne[1], n_tok = q->ne[2];
    const int n_kv_head = node->iparams[0];
    const int64_t group = n_head / n_kv_head;
    const double scale = node->fparams[0];
    const int window = node->iparams[4];
    if (ref_quantized(k->dtype) || ref_quantized(v->dtype) || node->iparams[2] || node->iparams[3])
        return ref_attention_quant(ctx, node);
    if ((k->dtype != PL_F16 && k->dtype != PL_F32) || v->dtype != k->dtype)
        return pl_errorf(PL_ERR_UNSUPPORTED, "attention: ref has no %s/%s cache", pl_dtype_name(k->dtype),
                         pl_dtype_name(v->dtype));
    for (int64_t t = 0; t < n_tok; t++) PL_TRY(check_slot("attention", k, t, i32_at(pos, t), i32_at(seq, t)));
    ref_scratch s;
    PL_TRY(scratch_get(ctx, ref_attention_work(node, 1), &s));
    double *score = s.p, *acc = score + k->ne[1];
    const size_t el = pl_dtype_get(k->dtype)->type_size;
    for (int64_t t = 0; t < n_tok; t++) {
        const int32_t p = i32_at(pos, t), sq = i32_at(seq, t);
        const int64_t lo = window > 0 && p - window + 1 > 0 ? p - window + 1 : 0;   /* sliding window */
        for (int64_t h = 0; h < n_head; h++) {
            const int64_t off = (h / group) * head_dim;   /* this head's slice of a cache row */
            const float *qr = f32_at(q, 0, h, t, 0);
            double mx = -INFINITY;
            for (int64_t j = lo; j <= p; j++) {
                const char *kr = (const char *)pl_tensor_row(k, j, sq, 0) + off * (int64_t)el;
                double dot = 0.0;
                for (int64_t d = 0; d < head_dim; d++) dot += (double)qr[d] * cache_at(k, kr, d);
                score[j] = scale * dot;
                if (score[j] > mx) mx = score[j];
            }
            double sum = 0.0;
            for (int64_t j = lo; j <= p; j++) {
                score[j] = exp(score[j] - mx);
                sum += score[j];
            }
            for (int64_t d = 0; d < head_dim; d++) acc[d] = 0.0;
            for (int64_t j = lo; j <= p; j++) {
                const char *vr = (const char *)pl_tensor_row(v, j, sq, 0) + off * (int64_t)el;
                for (int64_t d = 0; d < head_dim; d++) acc[d] += score[j] * cache_at(v, vr, d);
            }
            float *out = f32_at(dst, h * head_dim, t, 0, 0);
            for (int64_t d = 0; d < head_dim; d++) out[d] = (float)(acc[d] / sum);
        }
    }
    scratch_put(&s);
    return PL_OK;
}

/* ---- the dispatch table ---------------------------------------------------
 * GET_ROWS and MATMUL get one entry per readable dtype, generated from
 * PL_DEQUANT_TYPES, so a type added there is listed (and introspectable)
 * here without touching this file. */
#define REF_GET_ROWS_(t, fn) {PL_OP_GET_ROWS, t, ref_get_rows, NULL},
#define REF_MATMUL_(t, fn) {PL_OP_MATMUL, t, ref_matmul, ref_matmul_work},
#define REF_MATMUL_ID_(t, fn) {PL_OP_MATMUL_ID, t, pl_ref_matmul_id, pl_ref_matmul_id_work},

static const pl_kernel ref_kernels[] = {
    PL_DEQUANT_TYPES(REF_GET_ROWS_)
    {PL_OP_RMS_NORM, PL_F32, ref_rms_norm, NULL},
    PL_DEQUANT_TYPES(REF_MATMUL_)
    {PL_OP_ADD, PL_F32, ref_add, NULL},
    {PL_OP_SWIGLU, PL_F32, ref_swiglu, NULL},
    {PL_OP_ROPE, PL_F32, ref_rope, NULL},
    {PL_OP_KV_STORE, PL_F16, ref_kv_store, ref_kv_store_work},
    {PL_OP_KV_STORE, PL_F32, ref_kv_store, ref_kv_store_work},
    {PL_OP_KV_STORE, PL_Q8_0, ref_kv_store, ref_kv_store_work},
    {PL_OP_KV_STORE, PL_Q4_0, ref_kv_store, ref_kv_store_work},
    {PL_OP_ATTENTION, PL_F16, ref_attention, ref_attention_work},
    {PL_OP_ATTENTION, PL_F32, ref_attention, ref_attention_work},
    {PL_OP_ATTENTION, PL_Q8_0, ref_attention, ref_attention_work},
    {PL_OP_ATTENTION, PL_Q4_0, ref_attention, ref_attention_work},
    {PL_OP_MOE_TOPK, PL_F32, pl_ref_moe_topk, pl_ref_moe_topk_work},
    PL_DEQUANT_TYPES(REF_MATMUL_ID_)
    {PL_OP_MOE_COMBINE, PL_F32, pl_ref_moe_combine, pl_ref_moe_combine_work},
    {PL_OP_GEGLU, PL_F32, pl_ref_geglu, NULL},
    {PL_OP_SCALE, PL_F32, pl_ref_scale, NULL},
    {PL_OP_SOFTCAP, PL_F32, pl_ref_softcap, NULL},
};

extern const pl_backend pl_backend_ref;

static pl_status ref_ctx_create(int n_threads, pl_exec_ctx **out) {
    pl_exec_ctx *ctx = calloc(1, sizeof *ctx);
    if (!ctx) return pl_errorf(PL_ERR_NO_MEMORY, "ref: cannot allocate a context");
    ctx->backend = &pl_backend_ref;
    ctx->n_threads = 1;   /* the ref backend is single-threaded by definition */
    ctx->pool = NULL;
    *out = ctx;
    return PL_OK;
}

/* The work buffer belongs to whoever set it (the planner), not the context. */
static void ref_ctx_free(pl_exec_ctx *ctx) { free(ctx); }

const pl_backend pl_backend_ref = {
    .name = "ref",
    .summary = "scalar reference kernels (the normative definition of every op)",
    .kernels = ref_kernels,
    .n_kernels = sizeof ref_kernels / sizeof ref_kernels[0],
    .ctx_create = ref_ctx_create,
    .ctx_free = ref_ctx_free,
    /* .awaits = NULL (implemented), .probe = NULL (always available: host memory) */
};
