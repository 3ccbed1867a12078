/* MATMUL for the cpu backend: activation conversion, the threading driver, and
 * the portable tile kernels (AVX2 ones are in cpu_matmul_avx2.c).
 *
 *   dst[m, n] = sum_k W[n, k] * X[m, k]
 *   W: src0 [K, N] in the weight dtype, X: src1 F32 [K, M], dst: F32 [N, M].
 *
 * Like llama.cpp, the activations are converted once per matmul into the
 * weight type's "vec dot" format (Q8_K for q4_K/q6_K, Q8_0 for q8_0, F16 /
 * BF16 rounding for f16 / bf16), in ctx->work, and every weight row is then
 * dotted against them with integer arithmetic. The work is cut into chunks of
 * (weight rows) x (activation rows) handed out dynamically, so a thread slowed
 * down by a busy machine does not hold up the others; inside a chunk a tile
 * kernel decodes a weight block once and uses it for up to 4 activation rows.
 */
#include <math.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include "backends/cpu/cpu_internal.h"
#include "backends/cpu/cpu_matmul_iq.h"
#include "backends/cpu/cpu_matmul_legacy.h"
#include "core/cpu_features.h"
#include "core/fp16.h"
#include "core/status.h"
#include "core/threadpool.h"
#include "quant/quant.h"

/* ---- activation converters (portable) -------------------------------------*/

/* llama.cpp on x86 quantizes q8_0 activations with its AVX routine, which
 * differs from quantize_row_q8_0_ref: the multiplier is 127/amax (not
 * 1/(amax/127)) and rounding is to nearest-even (not away from zero). We
 * follow the x86 routine so our integer dot products see the same codes. */
void pl_cpu_quantize_q8_0(const float *x, void *dst, int64_t K) {
    block_q8_0 *y = dst;
    for (int64_t i = 0; i < K / QK8_0; i++, x += QK8_0) {
        float amax = 0.0f;
        for (int j = 0; j < QK8_0; j++) {
            float a = fabsf(x[j]);
            amax = a > amax ? a : amax;
        }
        const float d = amax / 127.f;
        const float id = amax != 0.0f ? 127.f / amax : 0.0f;
        y[i].d = pl_f32_to_f16(d);
        for (int j = 0; j < QK8_0; j++) {
            long v = lrintf(x[j] * id);   /* default rounding: nearest-even */
            y[i].qs[j] = (int8_t)(v > 127 ? 127 : v < -128 ? -128 : v);
        }
    }
}

/* GGML's nearest_int: round-to-nearest-even through the float mantissa
 * (valid for |f| < 2^22, which the scale guarantees). */
static inline int pl_nearest_int(float f) {
    float v = f + 12582912.f;
    int32_t i;
    memcpy(&i, &v, 4);
    return (i & 0x007fffff) - 0x00400000;
}

/* quantize_row_q8_K_ref, which llama.cpp's x86 build uses as is. The scale is
 * taken from the element of largest magnitude (the first one on ties), with
 * its sign: iscale = -127 / max. */
void pl_cpu_quantize_q8_K(const float *x, void *dst, int64_t K) {
    block_q8_K *y = dst;
    for (int64_t i = 0; i < K / QK_K; i++, x += QK_K) {
        float max = 0.0f, amax = 0.0f;
        for (int j = 0; j < QK_K; j++) {
            float ax = fabsf(x[j]);
            if (ax > amax) { amax = ax; max = x[j]; }
        }
        if (amax == 0.0f) {
            memset(&y[i], 0, sizeof y[i]);
            continue;
        }
        const float iscale = -127.f / max;
        for (int j = 0; j < QK_K; j++) {
            int v = pl_nearest_int(iscale * x[j]);
            y[i].qs[j] = (int8_t)(v < 127 ? v : 127);
        }
        for (int j = 0; j < QK_K / 16; j++) {
            int s = 0;
            for (int l = 0; l < 16; l++) s += y[i].qs[16 * j + l];
            y[i].bsums[j] = (int16_t)s;
        }
        y[i].d = 1.0f / iscale;
    }
}

void pl_cpu_round_f16(const float *x, void *dst, int64_t K) {
    float *y = dst;
    for (int64_t i = 0; i < K; i++) y[i] = pl_f16_to_f32(pl_f32_to_f16(x[i]));
}

void pl_cpu_round_bf16(const float *x, void *dst, int64_t K) {
    float *y = dst;
    for (int64_t i = 0; i < K; i++) y[i] = pl_bf16_to_f32(pl_f32_to_bf16(x[i]));
}

/* ---- portable tile kernels ------------------------------------------------
 * Written so that a baseline (SSE2) compiler can still vectorize the inner
 * loops: 8 independent partial sums per dot product. */

static float pl_dot_f32(const float *w, const float *a, int64_t K) {
    float acc[8] = {0};
    int64_t k = 0;
    for (; k + 8 <= K; k += 8)
        for (int l = 0; l < 8; l++) acc[l] += w[k + l] * a[k + l];
    float s = ((acc[0] + acc[4]) + (acc[1] + acc[5])) + ((acc[2] + acc[6]) + (acc[3] + acc[7]));
    for (; k < K; k++) s += w[k] * a[k];
    return s;
}

void pl_cpu_mm_f32(int64_t K, const void *w, size_t ws, int nr, const void *a, size_t as, int nc,
                   float *d, size_t ds) {
    for (int c = 0; c < nc; c++)
        for (int r = 0; r < nr; r++)
            d[c * ds + r] = pl_dot_f32((const float *)((const char *)w + r * ws),
                                       (const float *)((const char *)a + c * as), K);
}

/* F16 / BF16 weights: widen a slice of the weight row to F32, then reuse it
 * for every activation row of the tile. */
#define PL_WIDE_SLICE 256
static void pl_mm_half(int64_t K, const void *w, size_t ws, int nr, const void *a, size_t as, int nc,
                       float *d, size_t ds, int bf16) {
    float buf[PL_WIDE_SLICE];
    for (int r = 0; r < nr; r++) {
        const uint16_t *wr = (const uint16_t *)((const char *)w + r * ws);
        float sums[4] = {0};
        /* nc <= 4 (max_nc of these types) */
        for (int64_t k0 = 0; k0 < K; k0 += PL_WIDE_SLICE) {
            int64_t n = K - k0 < PL_WIDE_SLICE ? K - k0 : PL_WIDE_SLICE;
            for (int64_t k = 0; k < n; k++)
                buf[k] = bf16 ? pl_bf16_to_f32(wr[k0 + k]) : pl_f16_to_f32(wr[k0 + k]);
            for (int c = 0; c < nc; c++)
                sums[c] += pl_dot_f32(buf, (const float *)((const char *)a + c * as) + k0, n);
        }
        for (int c = 0; c < nc; c++) d[c * ds + r] = sums[c];
    }
}

void pl_cpu_mm_f16(int64_t K, const void *w, size_t ws, int nr, const void *a, size_t as, int nc,
                   float *d, size_t ds) {
    pl_mm_half(K, w, ws, nr, a, as, nc, d, ds, 0);
}

void pl_cpu_mm_bf16(int64_t K, const void *w, size_t ws, int nr, const void *a, size_t as, int nc,
                    float *d, size_t ds) {
    pl_mm_half(K, w, ws, nr, a, as, nc, d, ds, 1);
}

void pl_cpu_mm_q8_0(int64_t K, const void *w, size_t ws, int nr, const void *a, size_t as, int nc,
                    float *d, size_t ds) {
    const int64_t nb = K / QK8_0;
    for (int r = 0; r < nr; r++) {
        const block_q8_0 *x = (const block_q8_0 *)((const char *)w + r * ws);
        for (int c = 0; c < nc; c++) {
            const block_q8_0 *y = (const block_q8_0 *)((const char *)a + c * as);
            float s = 0.0f;
            for (int64_t i = 0; i < nb; i++) {
                int sumi = 0;
                for (int j = 0; j < QK8_0; j++) sumi += x[i].qs[j] * y[i].qs[j];
                s += sumi * (pl_f16_to_f32(x[i].d) * pl_f16_to_f32(y[i].d));
            }
            d[c * ds + r] = s;
        }
    }
}

/* q4_K: w = d * sc_g * q - dmin * m_g over 8 groups of 32. With the q8_K
 * activation y = dy * q8 and bsums (sums of q8 per 16):
 *   dot = dy * (d * sum_g sc_g * sum(q * q8) - dmin * sum_g m_g * bsum_g). */
void pl_cpu_mm_q4_K(int64_t K, const void *w, size_t ws, int nr, const void *a, size_t as, int nc,
                    float *d, size_t ds) {
    const int64_t nb = K / QK_K;
    for (int r = 0; r < nr; r++) {
        const block_q4_K *x = (const block_q4_K *)((const char *)w + r * ws);
        for (int c = 0; c < nc; c++) {
            const block_q8_K *y = (const block_q8_K *)((const char *)a + c * as);
            float s = 0.0f;
            for (int64_t i = 0; i < nb; i++) {
                int32_t sumi = 0, summ = 0;
                for (int g = 0; g < 8; g++) {
                    uint8_t sc, m;
                    pl_q4k_scale_min(g, x[i].scales, &sc, &m);
                    const uint8_t *q = x[i].qs + 32 * (g / 2);
                    const int8_t *q8 = y[i].qs + 32 * g;
                    const int shift = (g & 1) * 4;
                    int32_t t = 0;
                    for (int l = 0; l < 32; l++) t += ((q[l] >> shift) & 0xF) * q8[l];
                    sumi += sc * t;
                    summ += m * (y[i].bsums[2 * g] + y[i].bsums[2 * g + 1]);
                }
                s += y[i].d * (pl_f16_to_f32(x[i].d) * (float)sumi) -
                     y[i].d * (pl_f16_to_f32(x[i].dmin) * (float)summ);
            }
            d[c * ds + r] = s;
        }
    }
}

/* q6_K: w = d * sc_16 * (q - 32) over 16 groups of 16, q = 4 low bits from ql
 * and 2 high bits from qh (interleave: see pl_q6k_code). */
static inline int pl_q6k_code(const block_q6_K *b, int e) {
    const int h = e / 128, l = e % 32, quarter = (e % 128) / 32;
    const uint8_t *ql = b->ql + 64 * h;
    const uint8_t *qh = b->qh + 32 * h;
    int lo = (quarter & 1) ? ql[l + 32] : ql[l];
    lo = (quarter & 2) ? lo >> 4 : lo & 0xF;
    return lo | (((qh[l] >> (2 * quarter)) & 3) << 4);
}

void pl_cpu_mm_q6_K(int64_t K, const void *w, size_t ws, int nr, const void *a, size_t as, int nc,
                    float *d, size_t ds) {
    const int64_t nb = K / QK_K;
    for (int r = 0; r < nr; r++) {
        const block_q6_K *x = (const block_q6_K *)((const char *)w + r * ws);
        for (int c = 0; c < nc; c++) {
            const block_q8_K *y = (const block_q8_K *)((const char *)a + c * as);
            float s = 0.0f;
            for (int64_t i = 0; i < nb; i++) {
                int32_t sumi = 0;
                for (int g = 0; g < 16; g++) {
                    int32_t t = 0;
                    for (int l = 0; l < 16; l++) t += (pl_q6k_code(&x[i], 16 * g + l) - 32) * y[i].qs[16 * g + l];
                    sumi += x[i].scales[g] * t;
                }
                s += pl_f16_to_f32(x[i].d) * y[i].d * (float)sumi;
            }
            d[c * ds + r] = s;
        }
    }
}

/* ---- type table -------------------------------------------------------------*/

static const pl_cpu_mm_type pl_mm_types_portable[] = {
    {PL_F32, PL_F32, NULL, pl_cpu_mm_f32, 4, 4},
    {PL_F16, PL_F32, pl_cpu_round_f16, pl_cpu_mm_f16, 4, 4},
    {PL_BF16, PL_F32, pl_cpu_round_bf16, pl_cpu_mm_bf16, 4, 4},
    {PL_Q8_0, PL_Q8_0, pl_cpu_quantize_q8_0, pl_cpu_mm_q8_0, 1, 4},
    {PL_Q4_K, PL_Q8_K, pl_cpu_quantize_q8_K, pl_cpu_mm_q4_K, 1, 4},
    {PL_Q6_K, PL_Q8_K, pl_cpu_quantize_q8_K, pl_cpu_mm_q6_K, 1, 4},
};
#if PL_CPU_HAVE_AVX2_BUILD
/* Float tiles: 4 weight rows x 3 activation rows = 12 accumulators. */
static const pl_cpu_mm_type pl_mm_types_avx2[] = {
    {PL_F32, PL_F32, NULL, pl_cpu_mm_f32_avx2, 4, 3},
    {PL_F16, PL_F32, pl_cpu_round_f16_avx2, pl_cpu_mm_f16_avx2, 4, 3},
    {PL_BF16, PL_F32, pl_cpu_round_bf16_avx2, pl_cpu_mm_bf16_avx2, 4, 3},
    {PL_Q8_0, PL_Q8_0, pl_cpu_quantize_q8_0_avx2, pl_cpu_mm_q8_0_avx2, 1, 4},
    {PL_Q4_K, PL_Q8_K, pl_cpu_quantize_q8_K_avx2, pl_cpu_mm_q4_K_avx2, 1, 4},
    {PL_Q6_K, PL_Q8_K, pl_cpu_quantize_q8_K_avx2, pl_cpu_mm_q6_K_avx2, 1, 4},
};
#endif

/* Every other dtype pl_dequantize_row decodes: decode a slice of the weight
 * row to F32 and dot it with the F32 activations (exact weights, like ref;
 * slow, but it lets the cpu backend run any model the ref backend can). */
#define PL_GENERIC_SLICE 1024   /* a multiple of every block size (1, 32, 256) */
static void pl_mm_generic(pl_dtype t, int64_t K, const void *w, size_t ws, int nr, const void *a, size_t as,
                          int nc, float *d, size_t ds) {
    float buf[PL_GENERIC_SLICE];
    const pl_cpu_mm_type *f32 = pl_cpu_mm_type_get(PL_F32);
    for (int r = 0; r < nr; r++) {
        const char *wr = (const char *)w + r * ws;
        float sums[4] = {0}, part[4];
        for (int64_t k0 = 0; k0 < K; k0 += PL_GENERIC_SLICE) {
            const int64_t n = K - k0 < PL_GENERIC_SLICE ? K - k0 : PL_GENERIC_SLICE;
            pl_dequantize_row(t, wr + pl_dtype_row_size(t, k0), buf, n);
            for (int c0 = 0; c0 < nc; c0 += f32->max_nc) {
                const int cn = nc - c0 < f32->max_nc ? nc - c0 : f32->max_nc;
                f32->kernel(n, buf, 0, 1, (const char *)a + c0 * as + k0 * (int64_t)sizeof(float), as, cn, part, 1);
                for (int c = 0; c < cn; c++) sums[c0 + c] += part[c];
            }
        }
        for (int c = 0; c < nc; c++) d[c * ds + r] = sums[c];
    }
}

#define PL_GENERIC_FN_(t, fn)                                                                              \
    static void pl_mm_generic_##fn(int64_t K, const void *w, size_t ws, int nr, const void *a, size_t as, \
                                   int nc, float *d, size_t ds) {                                         \
        pl_mm_generic(t, K, w, ws, nr, a, as, nc, d, ds);                                                 \
    }
PL_DEQUANT_TYPES(PL_GENERIC_FN_)
#define PL_GENERIC_ENTRY_(t, fn) {t, PL_F32, NULL, pl_mm_generic_##fn, 1, 4},
static const pl_cpu_mm_type pl_mm_types_generic[] = {PL_DEQUANT_TYPES(PL_GENERIC_ENTRY_)};

const pl_cpu_mm_type *pl_cpu_mm_type_get(pl_dtype wtype) {
    const pl_cpu_mm_type *tab = pl_mm_types_portable;
    size_t n = sizeof pl_mm_types_portable / sizeof pl_mm_types_portable[0];
#if PL_CPU_HAVE_AVX2_BUILD
    if (pl_cpu_has_avx2()) {
        tab = pl_mm_types_avx2;
        n = sizeof pl_mm_types_avx2 / sizeof pl_mm_types_avx2[0];
    }
#endif
    for (size_t i = 0; i < n; i++)
        if (tab[i].wtype == wtype) return &tab[i];
    /* q4_0, q4_1, q5_0, q5_1 (cpu_matmul_legacy.c) */
    const pl_cpu_mm_type *leg = pl_cpu_mm_type_get_legacy(wtype);
    if (leg) return leg;
    /* the IQ / TQ / low-bit k-quant kernels (cpu_matmul_iq.c) */
    const pl_cpu_mm_type *lad = pl_cpu_mm_type_get_ladder(wtype);
    if (lad) return lad;
    for (size_t i = 0; i < sizeof pl_mm_types_generic / sizeof pl_mm_types_generic[0]; i++)
        if (pl_mm_types_generic[i].wtype == wtype) return &pl_mm_types_generic[i];
    return NULL;
}

size_t pl_cpu_mm_act_row_size(const pl_cpu_mm_type *t, int64_t K) {
    size_t sz = pl_dtype_row_size(t->vtype, K);
    return (sz + 63) & ~(size_t)63;   /* keep every row cache-line aligned */
}

/* ---- driver -----------------------------------------------------------------*/

/* Whether the F32 activation rows can be read in place: unit element stride
 * and one uniform row stride over all of ne1*ne2*ne3. */
static bool pl_rows_uniform(const pl_tensor *t) {
    if (t->nb[0] != sizeof(float)) return false;
    if (t->ne[2] > 1 && t->nb[2] != t->nb[1] * (size_t)t->ne[1]) return false;
    if (t->ne[3] > 1 && t->nb[3] != t->nb[2] * (size_t)t->ne[2]) return false;
    return true;
}

/* Bytes of converted activations this node needs (0 if read in place). */
static size_t pl_mm_act_bytes(const pl_cpu_mm_type *t, const pl_node *node) {
    const pl_tensor *x = node->src[1];
    const int64_t K = x->ne[0], M = pl_tensor_nrows(x);
    if (!t->from_float && pl_rows_uniform(x)) return 0;
    size_t row = t->from_float ? pl_cpu_mm_act_row_size(t, K) : (((size_t)K * 4 + 63) & ~(size_t)63);
    return row * (size_t)M;
}

size_t pl_cpu_work_matmul(const pl_node *node, int n_threads) {
    (void)n_threads;
    if (!node->src[0] || !node->src[1]) return 0;
    const pl_cpu_mm_type *t = pl_cpu_mm_type_get(node->src[0]->dtype);
    if (!t) return 0;
    size_t b = pl_mm_act_bytes(t, node);
    b = b ? b + 64 : 0;
    /* the weight may have a prepared copy (decided at load, after planning) */
    const pl_cpu_pack_kind kind = pl_cpu_pack_kind_for(node->src[0]);
    if (kind) {
        const size_t bp = pl_cpu_work_matmul_packed(node, kind);
        if (bp > b) b = bp;
    }
    return b;
}

typedef struct pl_mm_job {
    const pl_cpu_mm_type *t;
    int64_t K, N, M;
    const char *w;
    size_t ws;
    /* converted (or in-place) activations */
    const char *a;
    size_t as;
    float *dst;
    /* conversion phase */
    const pl_tensor *x;
    char *abuf;
    /* compute phase: chunks of rows_per_chunk weight rows x acts_per_chunk
     * activation rows, numbered activation-block-major */
    int64_t rows_per_chunk, acts_per_chunk, n_row_chunks, n_chunks;
    atomic_llong next;
} pl_mm_job;

static void pl_mm_convert_task(void *arg, int ith, int nth) {
    pl_mm_job *j = arg;
    int64_t lo, hi;
    pl_cpu_split(j->M, ith, nth, &lo, &hi);
    for (int64_t m = lo; m < hi; m++) {
        const float *xr = (const float *)pl_cpu_row(j->x, m);
        char *out = j->abuf + m * j->as;
        if (j->t->from_float) j->t->from_float(xr, out, j->K);
        else memcpy(out, xr, (size_t)j->K * sizeof(float));
    }
}

static void pl_mm_chunk(const pl_mm_job *j, int64_t id) {
    const int64_t rc = id % j->n_row_chunks, ac = id / j->n_row_chunks;
    const int64_t r0 = rc * j->rows_per_chunk;
    const int64_t r1 = r0 + j->rows_per_chunk < j->N ? r0 + j->rows_per_chunk : j->N;
    const int64_t c0 = ac * j->acts_per_chunk;
    const int64_t c1 = c0 + j->acts_per_chunk < j->M ? c0 + j->acts_per_chunk : j->M;
    const int max_nr = j->t->max_nr, max_nc = j->t->max_nc;
    for (int64_t r = r0; r < r1; r += max_nr) {
        const int nr = (int)(r1 - r < max_nr ? r1 - r : max_nr);
        const char *wr = j->w + r * j->ws;
        for (int64_t c = c0; c < c1; c += max_nc) {
            const int nc = (int)(c1 - c < max_nc ? c1 - c : max_nc);
            j->t->kernel(j->K, wr, j->ws, nr, j->a + c * j->as, j->as, nc,
                         j->dst + c * j->N + r, (size_t)j->N);
        }
    }
}

static void pl_mm_compute_task(void *arg, int ith, int nth) {
    pl_mm_job *j = arg;
    /* Chunks come from a shared counter (an elastic job: a thread that
     * starts late finds the work done and is not waited for). */
    for (int64_t id = atomic_fetch_add_explicit(&j->next, 1, memory_order_relaxed); id < j->n_chunks;
         id = atomic_fetch_add_explicit(&j->next, 1, memory_order_relaxed))
        pl_mm_chunk(j, id);
    (void)ith;
    (void)nth;
}

pl_status pl_cpu_op_matmul(pl_exec_ctx *ctx, const pl_node *node) {
    const pl_tensor *w = node->src[0], *x = node->src[1], *y = node->dst;
    if (!w || !x || !y) return pl_errorf(PL_ERR_INVALID_ARG, "matmul: missing operand");
    const pl_cpu_mm_type *t = pl_cpu_mm_type_get(w->dtype);
    if (!t) return pl_errorf(PL_ERR_UNSUPPORTED, "matmul (cpu): weight dtype %s not supported", pl_dtype_name(w->dtype));
    const int64_t K = w->ne[0], N = w->ne[1], M = pl_tensor_nrows(x);
    if (x->dtype != PL_F32 || y->dtype != PL_F32)
        return pl_errorf(PL_ERR_INVALID_ARG, "matmul: activations and output must be f32");
    if (x->ne[0] != K || y->ne[0] != N || pl_tensor_nrows(y) != M || w->ne[2] * w->ne[3] != 1)
        return pl_errorf(PL_ERR_INVALID_ARG,
                         "matmul: shape mismatch (W [%lld, %lld], X [%lld, %lld], dst [%lld, %lld])",
                         (long long)K, (long long)N, (long long)x->ne[0], (long long)M,
                         (long long)y->ne[0], (long long)pl_tensor_nrows(y));
    if (!pl_tensor_is_contiguous(y) || x->nb[0] != sizeof(float))
        return pl_errorf(PL_ERR_UNSUPPORTED, "matmul (cpu): dst must be contiguous and X rows dense");
    if (pl_dtype_row_size(w->dtype, K) == 0 || w->nb[1] < pl_dtype_row_size(w->dtype, K))
        return pl_errorf(PL_ERR_INVALID_ARG, "matmul: K = %lld is not a whole number of %s blocks",
                         (long long)K, pl_dtype_name(w->dtype));
    if (M == 0 || N == 0) return PL_OK;
    const pl_cpu_packed *pk = pl_cpu_packed_find(ctx, w);
    if (pk) return pl_cpu_matmul_packed(ctx, node, pk);

    pl_mm_job job;
    memset(&job, 0, sizeof job);
    pl_mm_job *j = &job;
    j->t = t;
    j->K = K; j->N = N; j->M = M;
    j->w = w->data; j->ws = w->nb[1];
    j->dst = y->data;
    j->x = x;

    pl_cpu_scratch scratch = {0};
    const size_t abytes = pl_mm_act_bytes(t, node);
    const int nth = ctx->pool ? pl_threadpool_size(ctx->pool) : 1;
    if (abytes) {
        PL_TRY(pl_cpu_scratch_get(ctx, abytes, &scratch));
        j->abuf = scratch.ptr;
        j->as = abytes / (size_t)M;
        j->a = j->abuf;
        /* Converting a few rows is faster than waking the pool for it. */
        if (nth > 1 && M * K >= 32768) pl_threadpool_run(ctx->pool, pl_mm_convert_task, j);
        else pl_mm_convert_task(j, 0, 1);
    } else {
        j->a = x->data;
        j->as = x->nb[1];
    }

    /* Chunking: activation blocks of ~64 rows (they stay in L2 while every
     * weight row of a chunk streams past), and about 8 chunks per thread so
     * the dynamic hand-out can even out uneven progress. */
    const int max_nc = t->max_nc, max_nr = t->max_nr;
    int64_t apc = M <= 64 ? M : ((64 + max_nc - 1) / max_nc) * max_nc;
    int64_t n_act_chunks = (M + apc - 1) / apc;
    int64_t want_row_chunks = (nth * 8 + n_act_chunks - 1) / n_act_chunks;
    if (nth == 1) want_row_chunks = 1;
    int64_t rpc = (N + want_row_chunks - 1) / want_row_chunks;
    const int64_t min_rows = M == 1 ? 16 : max_nr;
    if (rpc < min_rows) rpc = min_rows;
    rpc = ((rpc + max_nr - 1) / max_nr) * max_nr;
    j->acts_per_chunk = apc;
    j->rows_per_chunk = rpc;
    j->n_row_chunks = (N + rpc - 1) / rpc;
    j->n_chunks = j->n_row_chunks * n_act_chunks;
    atomic_init(&j->next, 0);
    if (nth > 1 && j->n_chunks > 1) pl_threadpool_run_elastic(ctx->pool, pl_mm_compute_task, j);
    else {
        for (int64_t id = 0; id < j->n_chunks; id++) pl_mm_chunk(j, id);
    }
    pl_cpu_scratch_release(&scratch);
    return PL_OK;
}
