/*
 * Reference quantizers, bit-identical with GGML's quantize_row_*_ref: the
 * same search algorithms (make_qx_quants, make_q3_quants, make_qkx2_quants)
 * with every float operation in the same order, so a weight quantized here
 * gives the same bytes llama-quantize writes (without an importance matrix).
 * They serve three purposes: activation quantization for the optimized dot
 * products (q8_0, q8_1, q8_K), random test weights, and `pocketllm quantize`.
 *
 * Bad input (NaN, Inf) gives garbage blocks but never undefined behaviour:
 * every float -> int8 conversion goes through pl_sat_i8.
 */
#include "quant/quant.h"
#include "quant/blocks.h"
#include "core/fp16.h"
#include <math.h>
#include <string.h>

#define GROUP_MAX_EPS 1e-15f

static inline int imin(int a, int b) { return a < b ? a : b; }
static inline int imax(int a, int b) { return a > b ? a : b; }

/* Round to nearest, ties to even, by the float trick GGML uses: adding
 * 1.5 * 2^23 leaves the integer in the low mantissa bits. Valid for
 * |x| <= 2^22; beyond that (only for broken input) it returns garbage but
 * stays defined. */
static inline int nearest_int(float x) {
    const float v = x + 12582912.f;
    int32_t i;
    memcpy(&i, &v, sizeof i);
    return (i & 0x007fffff) - 0x00400000;
}

/* float -> int8 as C's conversion would do for in-range values (truncation
 * toward zero after the caller's rounding), saturating instead of UB. */
static inline int8_t pl_sat_i8(float v) {
    if (v >= 127.f) return 127;
    if (v <= -128.f) return -128;
    if (v != v) return 0;
    return (int8_t)v;
}

/* ---- plain conversions ------------------------------------------------------*/

void pl_quantize_row_f32(const float *x, void *dst, int64_t n) {
    memcpy(dst, x, (size_t)n * sizeof(float));
}

void pl_quantize_row_f16(const float *x, void *dst, int64_t n) {
    pl_f16 *y = dst;
    for (int64_t i = 0; i < n; i++) y[i] = pl_f32_to_f16(x[i]);
}

void pl_quantize_row_bf16(const float *x, void *dst, int64_t n) {
    pl_bf16 *y = dst;
    for (int64_t i = 0; i < n; i++) y[i] = pl_f32_to_bf16(x[i]);
}

/* ---- 32-element blocks -------------------------------------------------------*/

void pl_quantize_row_q8_0(const float *x, void *dst, int64_t n) {
    block_q8_0 *y = dst;
    for (int64_t i = 0; i < n / QK8_0; i++, x += QK8_0) {
        float amax = 0.0f;
        for (int j = 0; j < QK8_0; j++) amax = fmaxf(amax, fabsf(x[j]));
        const float d = amax / 127;
        const float id = d != 0.0f ? 1.0f / d : 0.0f;
        y[i].d = pl_f32_to_f16(d);
        for (int j = 0; j < QK8_0; j++) y[i].qs[j] = pl_sat_i8(roundf(x[j] * id));
    }
}

void pl_quantize_row_q8_1(const float *x, void *dst, int64_t n) {
    block_q8_1 *y = dst;
    for (int64_t i = 0; i < n / QK8_1; i++, x += QK8_1) {
        float amax = 0.0f;
        for (int j = 0; j < QK8_1; j++) amax = fmaxf(amax, fabsf(x[j]));
        const float d = amax / 127;
        const float id = d != 0.0f ? 1.0f / d : 0.0f;
        y[i].d = pl_f32_to_f16(d);
        int sum = 0;
        /* GGML sums the two halves interleaved; integer sums are exact. */
        for (int j = 0; j < QK8_1; j++) {
            y[i].qs[j] = pl_sat_i8(roundf(x[j] * id));
            sum += y[i].qs[j];
        }
        y[i].s = pl_f32_to_f16(sum * d);
    }
}

/* The value of largest magnitude, keeping its sign (first one on ties). */
static float signed_absmax(const float *x, int n, float *amax_out) {
    float amax = 0.0f, max = 0.0f;
    for (int j = 0; j < n; j++) {
        if (amax < fabsf(x[j])) {
            amax = fabsf(x[j]);
            max = x[j];
        }
    }
    *amax_out = amax;
    return max;
}

/* (x * id + bias) truncated, clamped above at qmax: GGML's
 * MIN(qmax, (int8_t)(v + bias)). */
static inline uint8_t q_trunc(float v, float bias, int qmax) {
    return (uint8_t)imin(qmax, pl_sat_i8(v + bias));
}

void pl_quantize_row_q4_0(const float *x, void *dst, int64_t n) {
    block_q4_0 *y = dst;
    for (int64_t i = 0; i < n / QK4_0; i++, x += QK4_0) {
        float amax;
        const float max = signed_absmax(x, QK4_0, &amax);
        /* the extreme value maps to -8, the one level without a mirror */
        const float d = max / -8;
        const float id = d != 0.0f ? 1.0f / d : 0.0f;
        y[i].d = pl_f32_to_f16(d);
        for (int j = 0; j < QK4_0 / 2; j++) {
            const uint8_t a = q_trunc(x[j] * id, 8.5f, 15);
            const uint8_t b = q_trunc(x[j + QK4_0 / 2] * id, 8.5f, 15);
            y[i].qs[j] = (uint8_t)(a | (b << 4));
        }
    }
}

void pl_quantize_row_q4_1(const float *x, void *dst, int64_t n) {
    block_q4_1 *y = dst;
    for (int64_t i = 0; i < n / QK4_1; i++, x += QK4_1) {
        float min = INFINITY, max = -INFINITY;
        for (int j = 0; j < QK4_1; j++) {
            if (x[j] < min) min = x[j];
            if (x[j] > max) max = x[j];
        }
        const float d = (max - min) / 15;
        const float id = d != 0.0f ? 1.0f / d : 0.0f;
        y[i].d = pl_f32_to_f16(d);
        y[i].m = pl_f32_to_f16(min);
        for (int j = 0; j < QK4_1 / 2; j++) {
            const uint8_t a = q_trunc((x[j] - min) * id, 0.5f, 15);
            const uint8_t b = q_trunc((x[j + QK4_1 / 2] - min) * id, 0.5f, 15);
            y[i].qs[j] = (uint8_t)(a | (b << 4));
        }
    }
}

static void put_u32le(uint8_t out[4], uint32_t v) {
    out[0] = (uint8_t)v;
    out[1] = (uint8_t)(v >> 8);
    out[2] = (uint8_t)(v >> 16);
    out[3] = (uint8_t)(v >> 24);
}

void pl_quantize_row_q5_0(const float *x, void *dst, int64_t n) {
    block_q5_0 *y = dst;
    for (int64_t i = 0; i < n / QK5_0; i++, x += QK5_0) {
        float amax;
        const float max = signed_absmax(x, QK5_0, &amax);
        const float d = max / -16;
        const float id = d != 0.0f ? 1.0f / d : 0.0f;
        y[i].d = pl_f32_to_f16(d);
        uint32_t qh = 0;
        for (int j = 0; j < QK5_0 / 2; j++) {
            const uint8_t a = q_trunc(x[j] * id, 16.5f, 31);
            const uint8_t b = q_trunc(x[j + QK5_0 / 2] * id, 16.5f, 31);
            y[i].qs[j] = (uint8_t)((a & 0x0F) | ((b & 0x0F) << 4));
            qh |= (uint32_t)((a >> 4) & 1) << j;
            qh |= (uint32_t)((b >> 4) & 1) << (j + QK5_0 / 2);
        }
        put_u32le(y[i].qh, qh);
    }
}

void pl_quantize_row_q5_1(const float *x, void *dst, int64_t n) {
    block_q5_1 *y = dst;
    for (int64_t i = 0; i < n / QK5_1; i++, x += QK5_1) {
        float min = INFINITY, max = -INFINITY;
        for (int j = 0; j < QK5_1; j++) {
            if (x[j] < min) min = x[j];
            if (x[j] > max) max = x[j];
        }
        const float d = (max - min) / 31;
        const float id = d != 0.0f ? 1.0f / d : 0.0f;
        y[i].d = pl_f32_to_f16(d);
        y[i].m = pl_f32_to_f16(min);
        uint32_t qh = 0;
        for (int j = 0; j < QK5_1 / 2; j++) {
            /* GGML: (uint8_t)(v + 0.5f), no clamp (v + 0.5 <= 31.5 anyway) */
            const uint8_t a = (uint8_t)pl_sat_i8((x[j] - min) * id + 0.5f);
            const uint8_t b = (uint8_t)pl_sat_i8((x[j + QK5_1 / 2] - min) * id + 0.5f);
            y[i].qs[j] = (uint8_t)((a & 0x0F) | ((b & 0x0F) << 4));
            qh |= (uint32_t)((a >> 4) & 1) << j;
            qh |= (uint32_t)((b >> 4) & 1) << (j + QK5_1 / 2);
        }
        put_u32le(y[i].qh, qh);
    }
}

/* ---- k-quant search helpers ---------------------------------------------------*/

/* Symmetric quantization of n values to L[i] in 0..2*nmax-1 (stored with +nmax
 * offset), x ~ scale * (L - nmax). rmse_type 1 weights the error by x^2 and
 * tries 18 scales around nmax/max, keeping the one with the best weighted
 * least-squares fit. Returns the scale. (GGML's make_qx_quants; only the
 * paths the reference quantizers use: rmse_type 1, no quant_weights.) */
static float make_qx_quants(int n, int nmax, const float *x, int8_t *L) {
    float max = 0, amax = 0;
    for (int i = 0; i < n; i++) {
        const float ax = fabsf(x[i]);
        if (ax > amax) {
            amax = ax;
            max = x[i];
        }
    }
    if (amax < GROUP_MAX_EPS) {
        for (int i = 0; i < n; i++) L[i] = 0;
        return 0.f;
    }
    float iscale = -nmax / max;
    float sumlx = 0, suml2 = 0;
    for (int i = 0; i < n; i++) {
        const int l = imax(-nmax, imin(nmax - 1, nearest_int(iscale * x[i])));
        L[i] = (int8_t)(l + nmax);
        const float w = x[i] * x[i];
        sumlx += w * x[i] * l;
        suml2 += w * l * l;
    }
    float scale = suml2 != 0 ? sumlx / suml2 : 0.0f;
    float best = scale * sumlx;
    for (int is = -9; is <= 9; is++) {
        if (is == 0) continue;
        iscale = -(nmax + 0.1f * is) / max;
        sumlx = suml2 = 0;
        for (int i = 0; i < n; i++) {
            const int l = imax(-nmax, imin(nmax - 1, nearest_int(iscale * x[i])));
            const float w = x[i] * x[i];
            sumlx += w * x[i] * l;
            suml2 += w * l * l;
        }
        if (suml2 > 0 && sumlx * sumlx > best * suml2) {
            for (int i = 0; i < n; i++) {
                const int l = nearest_int(iscale * x[i]);
                L[i] = (int8_t)(nmax + imax(-nmax, imin(nmax - 1, l)));
            }
            scale = sumlx / suml2;
            best = scale * sumlx;
        }
    }
    return scale;
}

/* Symmetric 3-bit-style quantization with coordinate-descent refinement
 * (GGML's make_q3_quants with do_rmse = true): L[i] in 0..2*nmax-1. */
static float make_q3_quants(int n, int nmax, const float *x, int8_t *L) {
    float max = 0, amax = 0;
    for (int i = 0; i < n; i++) {
        const float ax = fabsf(x[i]);
        if (ax > amax) {
            amax = ax;
            max = x[i];
        }
    }
    if (amax < GROUP_MAX_EPS) {
        for (int i = 0; i < n; i++) L[i] = 0;
        return 0.f;
    }
    const float iscale = -nmax / max;
    float sumlx = 0, suml2 = 0;
    for (int i = 0; i < n; i++) {
        const int l = imax(-nmax, imin(nmax - 1, nearest_int(iscale * x[i])));
        L[i] = (int8_t)l;
        const float w = x[i] * x[i];
        sumlx += w * x[i] * l;
        suml2 += w * l * l;
    }
    for (int itry = 0; itry < 5; itry++) {
        int n_changed = 0;
        for (int i = 0; i < n; i++) {
            const float w = x[i] * x[i];
            float slx = sumlx - w * x[i] * L[i];
            if (slx > 0) {
                float sl2 = suml2 - w * L[i] * L[i];
                int new_l = nearest_int(x[i] * sl2 / slx);
                new_l = imax(-nmax, imin(nmax - 1, new_l));
                if (new_l != L[i]) {
                    slx += w * x[i] * new_l;
                    sl2 += w * new_l * new_l;
                    if (sl2 > 0 && slx * slx * suml2 > sumlx * sumlx * sl2) {
                        L[i] = (int8_t)new_l;
                        sumlx = slx;
                        suml2 = sl2;
                        n_changed++;
                    }
                }
            }
        }
        if (!n_changed) break;
    }
    for (int i = 0; i < n; i++) L[i] = (int8_t)(L[i] + nmax);
    return suml2 > 0.0f ? sumlx / suml2 : 0.0f;
}

/* Asymmetric quantization x ~ scale * L - min, L in 0..nmax, minimizing the
 * weighted squared (or absolute, use_mad) error over nstep+1 candidate
 * scales, each refined by a weighted least-squares fit of (scale, min).
 * Returns the scale; *the_min receives min (>= 0). (GGML's make_qkx2_quants.) */
static float make_qkx2_quants(int n, int nmax, const float *x, const float *weights, uint8_t *L,
                              float *the_min, uint8_t *Laux, float rmin, float rdelta, int nstep,
                              bool use_mad) {
    float min = x[0], max = x[0];
    float sum_w = weights[0];
    float sum_x = sum_w * x[0];
    for (int i = 1; i < n; i++) {
        if (x[i] < min) min = x[i];
        if (x[i] > max) max = x[i];
        const float w = weights[i];
        sum_w += w;
        sum_x += w * x[i];
    }
    if (min > 0) min = 0;
    if (max == min) {
        for (int i = 0; i < n; i++) L[i] = 0;
        *the_min = -min;
        return 0.f;
    }
    float iscale = nmax / (max - min);
    float scale = 1 / iscale;
    float best_error = 0;
    for (int i = 0; i < n; i++) {
        const int l = nearest_int(iscale * (x[i] - min));
        L[i] = (uint8_t)imax(0, imin(nmax, l));
        float diff = scale * L[i] + min - x[i];
        diff = use_mad ? fabsf(diff) : diff * diff;
        best_error += weights[i] * diff;
    }
    if (nstep < 1) {
        *the_min = -min;
        return scale;
    }
    for (int is = 0; is <= nstep; is++) {
        iscale = (rmin + rdelta * is + nmax) / (max - min);
        float sum_l = 0, sum_l2 = 0, sum_xl = 0;
        for (int i = 0; i < n; i++) {
            const int l = imax(0, imin(nmax, nearest_int(iscale * (x[i] - min))));
            Laux[i] = (uint8_t)l;
            const float w = weights[i];
            sum_l += w * l;
            sum_l2 += w * l * l;
            sum_xl += w * l * x[i];
        }
        const float D = sum_w * sum_l2 - sum_l * sum_l;
        if (D > 0) {
            float this_scale = (sum_w * sum_xl - sum_x * sum_l) / D;
            float this_min = (sum_l2 * sum_x - sum_l * sum_xl) / D;
            if (this_min > 0) {
                this_min = 0;
                this_scale = sum_xl / sum_l2;
            }
            float cur_error = 0;
            for (int i = 0; i < n; i++) {
                float diff = this_scale * Laux[i] + this_min - x[i];
                diff = use_mad ? fabsf(diff) : diff * diff;
                cur_error += weights[i] * diff;
            }
            if (cur_error < best_error) {
                memcpy(L, Laux, (size_t)n);
                best_error = cur_error;
                scale = this_scale;
                min = this_min;
            }
        }
    }
    *the_min = -min;
    return scale;
}

/* Packs 2-bit values L[0..255]: per 128, byte l holds L[l], L[l+32], L[l+64],
 * L[l+96] in bit pairs 0-1, 2-3, 4-5, 6-7 (q2_K and q3_K low bits). */
static void pack_2bit(const uint8_t *L, uint8_t *qs) {
    for (int j = 0; j < QK_K; j += 128) {
        for (int l = 0; l < 32; l++) {
            qs[j / 4 + l] = (uint8_t)(L[j + l] | (L[j + l + 32] << 2) | (L[j + l + 64] << 4) | (L[j + l + 96] << 6));
        }
    }
}

/* ---- k-quants -------------------------------------------------------------------*/

void pl_quantize_row_q2_K(const float *x, void *dst, int64_t n) {
    block_q2_K *y = dst;
    uint8_t L[QK_K], Laux[16];
    float weights[16], mins[QK_K / 16], scales[QK_K / 16];
    const float q4scale = 15.f;
    for (int64_t i = 0; i < n / QK_K; i++, x += QK_K) {
        float max_scale = 0, max_min = 0;
        for (int j = 0; j < QK_K / 16; j++) {
            for (int l = 0; l < 16; l++) weights[l] = fabsf(x[16 * j + l]);
            scales[j] = make_qkx2_quants(16, 3, x + 16 * j, weights, L + 16 * j, &mins[j], Laux,
                                         -0.5f, 0.1f, 15, true);
            if (scales[j] > max_scale) max_scale = scales[j];
            if (mins[j] > max_min) max_min = mins[j];
        }
        if (max_scale > 0) {
            const float iscale = q4scale / max_scale;
            for (int j = 0; j < QK_K / 16; j++) y[i].scales[j] = (uint8_t)nearest_int(iscale * scales[j]);
            y[i].d = pl_f32_to_f16(max_scale / q4scale);
        } else {
            for (int j = 0; j < QK_K / 16; j++) y[i].scales[j] = 0;
            y[i].d = pl_f32_to_f16(0.f);
        }
        if (max_min > 0) {
            const float iscale = q4scale / max_min;
            for (int j = 0; j < QK_K / 16; j++) {
                const int l = nearest_int(iscale * mins[j]);
                y[i].scales[j] = (uint8_t)(y[i].scales[j] | (l << 4));
            }
            y[i].dmin = pl_f32_to_f16(max_min / q4scale);
        } else {
            y[i].dmin = pl_f32_to_f16(0.f);
        }
        /* requantize against the rounded scales actually stored */
        for (int j = 0; j < QK_K / 16; j++) {
            const float d = pl_f16_to_f32(y[i].d) * (y[i].scales[j] & 0xF);
            if (d == 0) continue;
            const float dm = pl_f16_to_f32(y[i].dmin) * (y[i].scales[j] >> 4);
            for (int ii = 0; ii < 16; ii++) {
                const int l = nearest_int((x[16 * j + ii] + dm) / d);
                L[16 * j + ii] = (uint8_t)imax(0, imin(3, l));
            }
        }
        pack_2bit(L, y[i].qs);
    }
}

void pl_quantize_row_q3_K(const float *x, void *dst, int64_t n) {
    block_q3_K *y = dst;
    int8_t L[QK_K];
    float scales[QK_K / 16];
    for (int64_t i = 0; i < n / QK_K; i++, x += QK_K) {
        float max_scale = 0, amax = 0;
        for (int j = 0; j < QK_K / 16; j++) {
            scales[j] = make_q3_quants(16, 4, x + 16 * j, L + 16 * j);
            const float scale = fabsf(scales[j]);
            if (scale > amax) {
                amax = scale;
                max_scale = scales[j];
            }
        }
        memset(y[i].scales, 0, 12);
        if (max_scale != 0) {
            const float iscale = -32.f / max_scale;
            for (int j = 0; j < QK_K / 16; j++) {
                /* GGML stores nearest_int into an int8_t first (wrapping) */
                int l = (int8_t)nearest_int(iscale * scales[j]);
                l = imax(-32, imin(31, l)) + 32;
                if (j < 8) y[i].scales[j] = (uint8_t)(l & 0xF);
                else y[i].scales[j - 8] = (uint8_t)(y[i].scales[j - 8] | ((l & 0xF) << 4));
                l >>= 4;
                y[i].scales[j % 4 + 8] = (uint8_t)(y[i].scales[j % 4 + 8] | (l << (2 * (j / 4))));
            }
            y[i].d = pl_f32_to_f16(1 / iscale);
        } else {
            y[i].d = pl_f32_to_f16(0.f);
        }
        for (int j = 0; j < QK_K / 16; j++) {
            int sc = j < 8 ? y[i].scales[j] & 0xF : y[i].scales[j - 8] >> 4;
            sc = (sc | (((y[i].scales[8 + j % 4] >> (2 * (j / 4))) & 3) << 4)) - 32;
            const float d = pl_f16_to_f32(y[i].d) * sc;
            if (d == 0) continue;
            for (int ii = 0; ii < 16; ii++) {
                const int l = imax(-4, imin(3, nearest_int(x[16 * j + ii] / d)));
                L[16 * j + ii] = (int8_t)(l + 4);
            }
        }
        /* bit 2 of element j goes to bit j / 32 of hmask[j % 32] */
        memset(y[i].hmask, 0, QK_K / 8);
        uint8_t Lu[QK_K];
        for (int j = 0; j < QK_K; j++) {
            int l = L[j];
            if (l > 3) {
                y[i].hmask[j % 32] = (uint8_t)(y[i].hmask[j % 32] | (1u << (j / 32)));
                l -= 4;
            }
            Lu[j] = (uint8_t)l;
        }
        pack_2bit(Lu, y[i].qs);
    }
}

/* Packs (scale, min) pairs of 6 bits for the 8 sub-blocks of q4_K / q5_K; the
 * inverse of pl_q4k_scale_min. */
static void pack_scale_min_k4(const uint8_t *ls, const uint8_t *lm, uint8_t *s) {
    for (int j = 0; j < QK_K / 32; j++) {
        if (j < 4) {
            s[j] = ls[j];
            s[j + 4] = lm[j];
        } else {
            s[j + 4] = (uint8_t)((ls[j] & 0xF) | ((lm[j] & 0xF) << 4));
            s[j - 4] = (uint8_t)(s[j - 4] | ((ls[j] >> 4) << 6));
            s[j] = (uint8_t)(s[j] | ((lm[j] >> 4) << 6));
        }
    }
}

/* Shared by q4_K (nmax 15) and q5_K (nmax 31): per-sub-block asymmetric
 * search, 6-bit quantization of the scales and mins, requantization of the
 * values against the stored scales. Writes d, dmin, scales into the block
 * header fields and the levels into L. */
static void quantize_k4_common(const float *x, int nmax, float rmin, float rdelta, int nstep,
                               pl_f16 *d_out, pl_f16 *dmin_out, uint8_t *scales_out, uint8_t *L) {
    uint8_t Laux[32], ls[QK_K / 32], lm[QK_K / 32];
    float weights[32], mins[QK_K / 32], scales[QK_K / 32];
    float max_scale = 0, max_min = 0;
    for (int j = 0; j < QK_K / 32; j++) {
        float sum_x2 = 0;
        for (int l = 0; l < 32; l++) sum_x2 += x[32 * j + l] * x[32 * j + l];
        const float av_x = sqrtf(sum_x2 / 32);
        for (int l = 0; l < 32; l++) weights[l] = av_x + fabsf(x[32 * j + l]);
        scales[j] = make_qkx2_quants(32, nmax, x + 32 * j, weights, L + 32 * j, &mins[j], Laux,
                                     rmin, rdelta, nstep, false);
        if (scales[j] > max_scale) max_scale = scales[j];
        if (mins[j] > max_min) max_min = mins[j];
    }
    const float inv_scale = max_scale > 0 ? 63.f / max_scale : 0.f;
    const float inv_min = max_min > 0 ? 63.f / max_min : 0.f;
    for (int j = 0; j < QK_K / 32; j++) {
        /* GGML converts nearest_int to uint8_t, then clamps at 63 */
        ls[j] = (uint8_t)imin(63, (uint8_t)nearest_int(inv_scale * scales[j]));
        lm[j] = (uint8_t)imin(63, (uint8_t)nearest_int(inv_min * mins[j]));
    }
    memset(scales_out, 0, K_SCALE_SIZE);
    pack_scale_min_k4(ls, lm, scales_out);
    *d_out = pl_f32_to_f16(max_scale / 63.f);
    *dmin_out = pl_f32_to_f16(max_min / 63.f);
    for (int j = 0; j < QK_K / 32; j++) {
        uint8_t sc, m;
        pl_q4k_scale_min(j, scales_out, &sc, &m);
        const float d = pl_f16_to_f32(*d_out) * sc;
        if (d == 0) continue;
        const float dm = pl_f16_to_f32(*dmin_out) * m;
        for (int ii = 0; ii < 32; ii++) {
            const int l = nearest_int((x[32 * j + ii] + dm) / d);
            L[32 * j + ii] = (uint8_t)imax(0, imin(nmax, l));
        }
    }
}

void pl_quantize_row_q4_K(const float *x, void *dst, int64_t n) {
    block_q4_K *y = dst;
    uint8_t L[QK_K];
    for (int64_t i = 0; i < n / QK_K; i++, x += QK_K) {
        quantize_k4_common(x, 15, -1.f, 0.1f, 20, &y[i].d, &y[i].dmin, y[i].scales, L);
        uint8_t *q = y[i].qs;
        for (int j = 0; j < QK_K; j += 64, q += 32) {
            for (int l = 0; l < 32; l++) q[l] = (uint8_t)(L[j + l] | (L[j + l + 32] << 4));
        }
    }
}

void pl_quantize_row_q5_K(const float *x, void *dst, int64_t n) {
    block_q5_K *y = dst;
    uint8_t L[QK_K];
    for (int64_t i = 0; i < n / QK_K; i++, x += QK_K) {
        quantize_k4_common(x, 31, -0.5f, 0.1f, 15, &y[i].d, &y[i].dmin, y[i].scales, L);
        uint8_t *qh = y[i].qh, *ql = y[i].qs;
        memset(qh, 0, QK_K / 8);
        uint8_t m1 = 1, m2 = 2;
        for (int k = 0; k < QK_K; k += 64, m1 <<= 2, m2 <<= 2, ql += 32) {
            for (int j = 0; j < 32; j++) {
                int l1 = L[k + j], l2 = L[k + j + 32];
                if (l1 > 15) { l1 -= 16; qh[j] |= m1; }
                if (l2 > 15) { l2 -= 16; qh[j] |= m2; }
                ql[j] = (uint8_t)(l1 | (l2 << 4));
            }
        }
    }
}

void pl_quantize_row_q6_K(const float *x, void *dst, int64_t n) {
    block_q6_K *y = dst;
    int8_t L[QK_K];
    float scales[QK_K / 16];
    for (int64_t i = 0; i < n / QK_K; i++, x += QK_K) {
        float max_scale = 0, max_abs_scale = 0;
        for (int ib = 0; ib < QK_K / 16; ib++) {
            const float scale = make_qx_quants(16, 32, x + 16 * ib, L + 16 * ib);
            scales[ib] = scale;
            if (fabsf(scale) > max_abs_scale) {
                max_abs_scale = fabsf(scale);
                max_scale = scale;
            }
        }
        if (max_abs_scale < GROUP_MAX_EPS) {
            memset(&y[i], 0, sizeof y[i]);
            y[i].d = pl_f32_to_f16(0.f);
            continue;
        }
        const float iscale = -128.f / max_scale;
        y[i].d = pl_f32_to_f16(1 / iscale);
        for (int ib = 0; ib < QK_K / 16; ib++) {
            y[i].scales[ib] = (int8_t)imin(127, nearest_int(iscale * scales[ib]));
        }
        for (int j = 0; j < QK_K / 16; j++) {
            const float d = pl_f16_to_f32(y[i].d) * y[i].scales[j];
            if (d == 0) continue;
            for (int ii = 0; ii < 16; ii++) {
                const int l = imax(-32, imin(31, nearest_int(x[16 * j + ii] / d)));
                L[16 * j + ii] = (int8_t)(l + 32);
            }
        }
        uint8_t *ql = y[i].ql, *qh = y[i].qh;
        for (int j = 0; j < QK_K; j += 128, ql += 64, qh += 32) {
            for (int l = 0; l < 32; l++) {
                const uint8_t q1 = L[j + l + 0] & 0xF;
                const uint8_t q2 = L[j + l + 32] & 0xF;
                const uint8_t q3 = L[j + l + 64] & 0xF;
                const uint8_t q4 = L[j + l + 96] & 0xF;
                ql[l] = (uint8_t)(q1 | (q3 << 4));
                ql[l + 32] = (uint8_t)(q2 | (q4 << 4));
                qh[l] = (uint8_t)((L[j + l] >> 4) | ((L[j + l + 32] >> 4) << 2) | ((L[j + l + 64] >> 4) << 4) |
                                  ((L[j + l + 96] >> 4) << 6));
            }
        }
    }
}

void pl_quantize_row_q8_K(const float *x, void *dst, int64_t n) {
    block_q8_K *y = dst;
    for (int64_t i = 0; i < n / QK_K; i++, x += QK_K) {
        float amax;
        const float max = signed_absmax(x, QK_K, &amax);
        if (amax == 0) {
            /* GGML leaves bsums stale here; zero is their true value */
            memset(&y[i], 0, sizeof y[i]);
            continue;
        }
        /* -127, not -128: the extreme value maps to -127 (GGML's choice, so
         * |q| <= 127 for the AVX2 dot products) */
        const float iscale = -127.f / max;
        for (int j = 0; j < QK_K; j++) y[i].qs[j] = (int8_t)imin(127, nearest_int(iscale * x[j]));
        for (int j = 0; j < QK_K / 16; j++) {
            int sum = 0;
            for (int ii = 0; ii < 16; ii++) sum += y[i].qs[16 * j + ii];
            y[i].bsums[j] = (int16_t)sum;
        }
        y[i].d = 1 / iscale;
    }
}

/* ---- dispatch --------------------------------------------------------------------*/

typedef void (*pl_quant_fn)(const float *x, void *dst, int64_t n);

static pl_quant_fn quant_fn(pl_dtype t) {
    switch (t) {
#define PL_QUANT_CASE_(tt, fn) case tt: return fn;
        PL_QUANTIZE_TYPES(PL_QUANT_CASE_)
#undef PL_QUANT_CASE_
    default: return NULL;
    }
}

bool pl_can_quantize(pl_dtype t) { return quant_fn(t) != NULL; }

bool pl_quantize_row(pl_dtype t, const float *x, void *dst, int64_t n) {
    pl_quant_fn fn = quant_fn(t);
    const pl_dtype_traits *tr = pl_dtype_get((uint32_t)t);
    if (!fn || !tr || n <= 0 || n % tr->block_size) return false;
    fn(x, dst, n);
    return true;
}
