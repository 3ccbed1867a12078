/* The cpu backend's non-matmul ops: GET_ROWS, RMS_NORM, ADD, SWIGLU, ROPE,
 * KV_STORE (ATTENTION is in cpu_attention.c). Semantics are those of
 * kernels/abi.h and the ref backend; the arithmetic follows GGML's where it
 * decides rounding (rms_norm: float squares summed in double, y = (x*scale)*w;
 * rope: iterated float theta, cosf/sinf).
 *
 * Parallelism: every op here is a loop over independent rows. Rows are split
 * into equal contiguous ranges over the pool when there is enough work to pay
 * for waking it (decode-sized rows run inline on the caller).
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include "backends/cpu/cpu_internal.h"
#include "core/cpu_features.h"
#include "core/fp16.h"
#include "core/status.h"
#include "core/threadpool.h"
#include "quant/hadamard.h"
#include "quant/quant.h"

/* Below this many elements an op runs on the calling thread alone. */
#define PL_PAR_MIN_ELEMS 32768

/* ---- vector helpers (portable with AVX2 dispatch) ---------------------------*/

void pl_cpu_vec_f16_to_f32(const uint16_t *x, float *y, int64_t n) {
#if PL_CPU_HAVE_AVX2_BUILD
    if (pl_cpu_has_avx2()) { pl_cpu_vec_f16_to_f32_avx2(x, y, n); return; }
#endif
    for (int64_t i = 0; i < n; i++) y[i] = pl_f16_to_f32(x[i]);
}

void pl_cpu_vec_f32_to_f16(const float *x, uint16_t *y, int64_t n) {
#if PL_CPU_HAVE_AVX2_BUILD
    if (pl_cpu_has_avx2()) { pl_cpu_vec_f32_to_f16_avx2(x, y, n); return; }
#endif
    for (int64_t i = 0; i < n; i++) y[i] = pl_f32_to_f16(x[i]);
}

void pl_cpu_hadamard_rows(float *x, int64_t len, int n) {
#if PL_CPU_HAVE_AVX2_BUILD
    if (n >= 8 && n % 8 == 0 && pl_cpu_has_avx2()) { pl_cpu_hadamard_rows_avx2(x, len, n); return; }
#endif
    pl_hadamard_rows(x, len, n);
}

void pl_cpu_vec_bf16_to_f32(const uint16_t *x, float *y, int64_t n) {
#if PL_CPU_HAVE_AVX2_BUILD
    if (pl_cpu_has_avx2()) { pl_cpu_vec_bf16_to_f32_avx2(x, y, n); return; }
#endif
    for (int64_t i = 0; i < n; i++) y[i] = pl_bf16_to_f32(x[i]);
}

static double pl_sumsq(const float *x, int64_t n) {
#if PL_CPU_HAVE_AVX2_BUILD
    if (pl_cpu_has_avx2()) return pl_cpu_sumsq_avx2(x, n);
#endif
    double s = 0.0;
    for (int64_t i = 0; i < n; i++) s += (double)(x[i] * x[i]);
    return s;
}

static void pl_scale_mul(const float *x, float s, const float *w, float *y, int64_t n) {
#if PL_CPU_HAVE_AVX2_BUILD
    if (pl_cpu_has_avx2()) { pl_cpu_scale_mul_avx2(x, s, w, y, n); return; }
#endif
    for (int64_t i = 0; i < n; i++) y[i] = (x[i] * s) * w[i];
}

static void pl_vadd(const float *a, const float *b, float *y, int64_t n) {
#if PL_CPU_HAVE_AVX2_BUILD
    if (pl_cpu_has_avx2()) { pl_cpu_add_avx2(a, b, y, n); return; }
#endif
    for (int64_t i = 0; i < n; i++) y[i] = a[i] + b[i];
}

static void pl_vswiglu(const float *g, const float *u, float *y, int64_t n) {
#if PL_CPU_HAVE_AVX2_BUILD
    if (pl_cpu_has_avx2()) { pl_cpu_swiglu_avx2(g, u, y, n); return; }
#endif
    for (int64_t i = 0; i < n; i++) y[i] = g[i] / (1.0f + expf(-g[i])) * u[i];
}

/* ---- scratch ----------------------------------------------------------------*/

pl_status pl_cpu_scratch_get(pl_exec_ctx *ctx, size_t bytes, pl_cpu_scratch *s) {
    s->owned = NULL;
    s->ptr = NULL;
    if (ctx && ctx->work && ctx->work_size >= bytes + 64) {
        uintptr_t p = ((uintptr_t)ctx->work + 63) & ~(uintptr_t)63;
        s->ptr = (void *)p;
        return PL_OK;
    }
    if (ctx && ctx->work && ((uintptr_t)ctx->work & 63) == 0 && ctx->work_size >= bytes) {
        s->ptr = ctx->work;
        return PL_OK;
    }
    size_t sz = (bytes + 63) & ~(size_t)63;
    s->owned = aligned_alloc(64, sz ? sz : 64);
    if (!s->owned) return pl_errorf(PL_ERR_NO_MEMORY, "cpu: cannot allocate %zu bytes of scratch", bytes);
    s->ptr = s->owned;
    return PL_OK;
}

void pl_cpu_scratch_release(pl_cpu_scratch *s) {
    free(s->owned);
    s->owned = NULL;
    s->ptr = NULL;
}

/* ---- row-parallel driver ------------------------------------------------------*/

typedef void (*pl_rows_fn)(const pl_node *node, int64_t r0, int64_t r1);

typedef struct pl_rows_job {
    const pl_node *node;
    int64_t n_rows;
    pl_rows_fn fn;
} pl_rows_job;

static void pl_rows_task(void *arg, int ith, int nth) {
    const pl_rows_job *j = arg;
    int64_t lo, hi;
    pl_cpu_split(j->n_rows, ith, nth, &lo, &hi);
    if (lo < hi) j->fn(j->node, lo, hi);
}

/* Runs fn over [0, n_rows) rows of row_elems elements each. */
static void pl_run_rows(pl_exec_ctx *ctx, const pl_node *node, int64_t n_rows, int64_t row_elems, pl_rows_fn fn) {
    if (n_rows <= 0) return;
    if (ctx && ctx->pool && pl_threadpool_size(ctx->pool) > 1 && n_rows > 1 &&
        n_rows * row_elems >= PL_PAR_MIN_ELEMS) {
        pl_rows_job j = {node, n_rows, fn};
        pl_threadpool_run(ctx->pool, pl_rows_task, &j);
    } else {
        fn(node, 0, n_rows);
    }
}

static inline int32_t pl_i32_at(const pl_tensor *t, int64_t i) {
    int32_t v;
    memcpy(&v, (const char *)t->data + i * (int64_t)t->nb[0], sizeof v);
    return v;
}

/* ---- GET_ROWS -------------------------------------------------------------------
 * table [C, R] (any dtype pl_dequantize_row decodes); ids I32 [n]; dst F32 [C, n]. */
static void pl_get_rows_range(const pl_node *node, int64_t r0, int64_t r1) {
    const pl_tensor *tab = node->src[0], *ids = node->src[1], *dst = node->dst;
    const int64_t C = tab->ne[0];
    for (int64_t i = r0; i < r1; i++) {
        const void *src = pl_tensor_row(tab, pl_i32_at(ids, i), 0, 0);
        float *out = (float *)pl_cpu_row(dst, i);
        switch (tab->dtype) {
            case PL_F32: memcpy(out, src, (size_t)C * sizeof(float)); break;
            case PL_F16: pl_cpu_vec_f16_to_f32(src, out, C); break;
            case PL_BF16: pl_cpu_vec_bf16_to_f32(src, out, C); break;
            default: pl_dequantize_row(tab->dtype, src, out, C); break;
        }
    }
}

pl_status pl_cpu_op_get_rows(pl_exec_ctx *ctx, const pl_node *node) {
    const pl_tensor *tab = node->src[0], *ids = node->src[1], *dst = node->dst;
    if (!pl_can_dequantize(tab->dtype))
        return pl_errorf(PL_ERR_UNSUPPORTED, "get_rows (cpu): cannot decode %s", pl_dtype_name(tab->dtype));
    if (ids->dtype != PL_I32 || dst->dtype != PL_F32 || dst->ne[0] != tab->ne[0] || pl_tensor_nrows(dst) != ids->ne[0])
        return pl_errorf(PL_ERR_INVALID_ARG, "get_rows: bad operands");
    const int64_t R = tab->ne[1], n = ids->ne[0];
    for (int64_t i = 0; i < n; i++) {
        const int32_t id = pl_i32_at(ids, i);
        if (id < 0 || id >= R)
            return pl_errorf(PL_ERR_INVALID_ARG, "get_rows: id %d at %lld is outside the table's %lld rows", id,
                             (long long)i, (long long)R);
    }
    /* a table with a prepared copy (a tied embedding) is read from the copy */
    const pl_cpu_packed *pk = pl_cpu_packed_find(ctx, tab);
    if (pk) {
        for (int64_t i = 0; i < n; i++) pl_cpu_packed_get_row(pk, pl_i32_at(ids, i), (float *)pl_cpu_row(dst, i));
        return PL_OK;
    }
    pl_run_rows(ctx, node, n, tab->ne[0], pl_get_rows_range);
    return PL_OK;
}

/* ---- RMS_NORM --------------------------------------------------------------------
 * x F32 [n, rows...] (strided rows); w F32 [n]; dst F32 like x, contiguous.
 * GGML: sum of float squares in double, mean and scale in float,
 * y = (x * scale) * w. */
static void pl_rms_norm_range(const pl_node *node, int64_t r0, int64_t r1) {
    const pl_tensor *x = node->src[0], *w = node->src[1], *dst = node->dst;
    const int64_t n = x->ne[0];
    const float eps = node->fparams[0];
    for (int64_t r = r0; r < r1; r++) {
        const float *xr = (const float *)pl_cpu_row(x, r);
        const float mean = (float)(pl_sumsq(xr, n) / (double)n);
        const float scale = 1.0f / sqrtf(mean + eps);
        pl_scale_mul(xr, scale, w->data, (float *)pl_cpu_row(dst, r), n);
    }
}

pl_status pl_cpu_op_rms_norm(pl_exec_ctx *ctx, const pl_node *node) {
    const pl_tensor *x = node->src[0];
    pl_run_rows(ctx, node, pl_tensor_nrows(x), x->ne[0], pl_rms_norm_range);
    return PL_OK;
}

/* ---- ADD / SWIGLU -------------------------------------------------------------*/
static void pl_add_range(const pl_node *node, int64_t r0, int64_t r1) {
    const pl_tensor *a = node->src[0], *b = node->src[1], *dst = node->dst;
    const bool bcast = pl_tensor_nrows(b) == 1;
    for (int64_t r = r0; r < r1; r++)
        pl_vadd((const float *)pl_cpu_row(a, r), (const float *)(bcast ? b->data : pl_cpu_row(b, r)),
                (float *)pl_cpu_row(dst, r), a->ne[0]);
}

pl_status pl_cpu_op_add(pl_exec_ctx *ctx, const pl_node *node) {
    const pl_tensor *a = node->src[0];
    pl_run_rows(ctx, node, pl_tensor_nrows(a), a->ne[0], pl_add_range);
    return PL_OK;
}

static void pl_swiglu_range(const pl_node *node, int64_t r0, int64_t r1) {
    const pl_tensor *g = node->src[0], *u = node->src[1], *dst = node->dst;
    for (int64_t r = r0; r < r1; r++)
        pl_vswiglu((const float *)pl_cpu_row(g, r), (const float *)pl_cpu_row(u, r), (float *)pl_cpu_row(dst, r),
                   g->ne[0]);
}

pl_status pl_cpu_op_swiglu(pl_exec_ctx *ctx, const pl_node *node) {
    const pl_tensor *g = node->src[0];
    /* swiglu is exp-heavy: worth splitting at a quarter of the usual size */
    pl_run_rows(ctx, node, pl_tensor_nrows(g), g->ne[0] * 4, pl_swiglu_range);
    return PL_OK;
}

/* ---- ROPE -----------------------------------------------------------------------
 * x F32 [head_dim, n_head, n_tok]; pos I32 [n_tok]; dst like x, contiguous.
 * Row r = (head h, token t) with r = t * n_head + h. The cos/sin table depends
 * on the token only, so a thread rebuilds it when its rows move to a new token
 * (rows are split in contiguous ranges: about one rebuild per token). */
#define PL_ROPE_MAX_ROT 4096

static void pl_rope_range(const pl_node *node, int64_t r0, int64_t r1) {
    const pl_tensor *x = node->src[0], *pos = node->src[1], *dst = node->dst;
    /* llama3 frequency factors [half] (contiguous, checked by the schema) or NULL */
    const float *ff = node->src[2] ? (const float *)node->src[2]->data : NULL;
    const int64_t head_dim = x->ne[0], n_head = x->ne[1];
    const int n_rot = node->iparams[0], half = n_rot / 2;
    const bool neox = node->iparams[1] == 2;
    const float freq_scale = node->fparams[1];
    const float theta_scale = powf(node->fparams[0], -2.0f / (float)n_rot);
    float cs[PL_ROPE_MAX_ROT];   /* cos, sin interleaved per pair */
    int64_t cached_t = -1;
    for (int64_t r = r0; r < r1; r++) {
        const int64_t t = r / n_head, h = r % n_head;
        if (t != cached_t) {
            float th = (float)pl_i32_at(pos, t);
            for (int i = 0; i < half; i++) {
                const float theta = freq_scale * (ff ? th / ff[i] : th);
                cs[2 * i] = cosf(theta);
                cs[2 * i + 1] = sinf(theta);
                th *= theta_scale;
            }
            cached_t = t;
        }
        const float *xr = (const float *)pl_tensor_row(x, h, t, 0);
        float *yr = (float *)pl_tensor_row(dst, h, t, 0);
        if (neox) {
            for (int i = 0; i < half; i++) {
                const float c = cs[2 * i], s = cs[2 * i + 1];
                const float x0 = xr[i], x1 = xr[i + half];
                yr[i] = x0 * c - x1 * s;
                yr[i + half] = x0 * s + x1 * c;
            }
        } else {
            for (int i = 0; i < half; i++) {
                const float c = cs[2 * i], s = cs[2 * i + 1];
                const float x0 = xr[2 * i], x1 = xr[2 * i + 1];
                yr[2 * i] = x0 * c - x1 * s;
                yr[2 * i + 1] = x0 * s + x1 * c;
            }
        }
        if (n_rot < head_dim) memcpy(yr + n_rot, xr + n_rot, (size_t)(head_dim - n_rot) * sizeof(float));
    }
}

pl_status pl_cpu_op_rope(pl_exec_ctx *ctx, const pl_node *node) {
    const pl_tensor *x = node->src[0];
    const int n_rot = node->iparams[0], mode = node->iparams[1];
    if (n_rot < 2 || (n_rot & 1) || n_rot > x->ne[0] || (mode != 0 && mode != 2))
        return pl_errorf(PL_ERR_INVALID_ARG, "rope: n_rot = %d / mode = %d invalid for head_dim %lld", n_rot, mode,
                         (long long)x->ne[0]);
    if (n_rot > PL_ROPE_MAX_ROT)
        return pl_errorf(PL_ERR_UNSUPPORTED, "rope (cpu): n_rot = %d exceeds %d", n_rot, PL_ROPE_MAX_ROT);
    /* cosf/sinf per pair make each row cost more than its size suggests */
    pl_run_rows(ctx, node, x->ne[1] * x->ne[2], x->ne[0] * 4, pl_rope_range);
    return PL_OK;
}

/* ---- KV_STORE ------------------------------------------------------------------
 * rows F32 [kv_dim, n_tok]; pos, seq I32 [n_tok]; dst cache F16/F32
 * [kv_dim, n_ctx, n_seq]. F16 rounds to nearest even (F16C does the same).
 * Threads split the columns, not the tokens: every thread then visits the
 * tokens in order, so two tokens aimed at the same cache row leave the last
 * one's values, exactly as the sequential definition does. */
#define PL_KV_COLS 64

static void pl_kv_store_range(const pl_node *node, int64_t c0, int64_t c1) {
    const pl_tensor *rows = node->src[0], *pos = node->src[1], *seq = node->src[2], *cache = node->dst;
    const int64_t kv_dim = rows->ne[0];
    const int64_t lo = c0 * PL_KV_COLS, hi = c1 * PL_KV_COLS < kv_dim ? c1 * PL_KV_COLS : kv_dim;
    for (int64_t t = 0; t < rows->ne[1]; t++) {
        const float *src = (const float *)pl_tensor_row(rows, t, 0, 0) + lo;
        char *out = pl_tensor_row(cache, pl_i32_at(pos, t), pl_i32_at(seq, t), 0);
        if (cache->dtype == PL_F16) pl_cpu_vec_f32_to_f16(src, (uint16_t *)out + lo, hi - lo);
        else memcpy((float *)out + lo, src, (size_t)(hi - lo) * sizeof(float));
    }
}

/* Quantized caches (q8_0, q4_0) and rotated rows: columns in units of a head
 * (the rotation stays inside a head; head_dim is a multiple of 32, so whole
 * blocks) or, without rotation, of 64 elements. Each unit is copied, rotated
 * by H_rot (quant/hadamard.h), then rounded as llama.cpp's set_rows does:
 * q8_0 with the from_float of its x86 build (the AVX quantize_row_q8_0,
 * which the q8_0 activation converter reproduces bit for bit), q4_0 with
 * quantize_row_q4_0_ref, f16 to nearest even. */
#define PL_KV_MAX_UNIT 1024

static int64_t pl_kv_unit(const pl_node *node) { return node->iparams[0] ? node->iparams[1] : PL_KV_COLS; }

static void pl_kv_store_q_range(const pl_node *node, int64_t c0, int64_t c1) {
    const pl_tensor *rows = node->src[0], *pos = node->src[1], *seq = node->src[2], *cache = node->dst;
    const int64_t kv_dim = rows->ne[0], unit = pl_kv_unit(node);
    const int rot = node->iparams[0];
    const pl_cpu_mm_type *q8 = cache->dtype == PL_Q8_0 ? pl_cpu_mm_type_get(PL_Q8_0) : NULL;
    float buf[PL_KV_MAX_UNIT];
    for (int64_t t = 0; t < rows->ne[1]; t++) {
        const float *src = (const float *)pl_tensor_row(rows, t, 0, 0);
        char *out = pl_tensor_row(cache, pl_i32_at(pos, t), pl_i32_at(seq, t), 0);
        for (int64_t c = c0; c < c1; c++) {
            const int64_t lo = c * unit, n = kv_dim - lo < unit ? kv_dim - lo : unit;
            memcpy(buf, src + lo, (size_t)n * sizeof(float));
            if (rot) pl_cpu_hadamard_rows(buf, n, rot);
            char *o = out + pl_dtype_row_size(cache->dtype, lo);
            switch (cache->dtype) {
            case PL_Q8_0: q8->from_float(buf, o, n); break;
            case PL_Q4_0: pl_quantize_row_q4_0(buf, o, n); break;
            case PL_F16: pl_cpu_vec_f32_to_f16(buf, (uint16_t *)o, n); break;
            default: memcpy(o, buf, (size_t)n * sizeof(float)); break;
            }
        }
    }
}

pl_status pl_cpu_op_kv_store(pl_exec_ctx *ctx, const pl_node *node) {
    const pl_tensor *rows = node->src[0], *pos = node->src[1], *seq = node->src[2], *cache = node->dst;
    const bool quant = cache->dtype == PL_Q8_0 || cache->dtype == PL_Q4_0;
    if (cache->dtype != PL_F16 && cache->dtype != PL_F32 && !quant)
        return pl_errorf(PL_ERR_UNSUPPORTED, "kv_store (cpu): no %s cache", pl_dtype_name(cache->dtype));
    if ((quant || node->iparams[0]) && (pl_kv_unit(node) > PL_KV_MAX_UNIT || pl_kv_unit(node) < 1 ||
                                        (quant && rows->ne[0] % 32)))
        return pl_errorf(PL_ERR_UNSUPPORTED, "kv_store (cpu): rows of %lld in units of %lld", (long long)rows->ne[0],
                         (long long)pl_kv_unit(node));
    for (int64_t t = 0; t < rows->ne[1]; t++) {
        const int32_t p = pl_i32_at(pos, t), sq = pl_i32_at(seq, t);
        if (p < 0 || p >= cache->ne[1] || sq < 0 || sq >= cache->ne[2])
            return pl_errorf(PL_ERR_INVALID_ARG, "kv_store: token %lld has pos %d / seq %d outside the cache's %lld x %lld",
                             (long long)t, p, sq, (long long)cache->ne[1], (long long)cache->ne[2]);
    }
    if (quant || node->iparams[0]) {
        const int64_t unit = pl_kv_unit(node), n_units = (rows->ne[0] + unit - 1) / unit;
        pl_run_rows(ctx, node, n_units, unit * rows->ne[1] * 4, pl_kv_store_q_range);
        return PL_OK;
    }
    const int64_t n_chunks = (rows->ne[0] + PL_KV_COLS - 1) / PL_KV_COLS;
    pl_run_rows(ctx, node, n_chunks, PL_KV_COLS * rows->ne[1], pl_kv_store_range);
    return PL_OK;
}
