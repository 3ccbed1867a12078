/*
 * The k-quants (q2_K .. q6_K) with an importance matrix, bit-identical with
 * GGML's quantize_row_<type>_impl (what llama-quantize runs when it is given
 * --imatrix), and the dispatch of pl_quantize_rows.
 *
 * Why a second set of k-quant searches: the reference quantizers
 * (quant/quantize.c) weight the error of each element by its own magnitude;
 * with an importance matrix GGML weights it by imatrix[col] * sqrt(sigma^2 +
 * x^2) and also chooses the super-block scales of the sub-block scales by a
 * weighted search (make_qp_quants) instead of max / 63. Every float
 * expression below keeps GGML's operand order, and the library is built as
 * ISO C without -ffp-contract, so the roundings (and the bytes) match.
 */
#include "quant/quantize_rows.h"
#include "quant/quant.h"
#include "quant/blocks.h"
#include "core/fp16.h"
#include "core/status.h"
#include <math.h>
#include <string.h>

#define GROUP_MAX_EPS 1e-15f

static inline int imin(int a, int b) { return a < b ? a : b; }
static inline int imax(int a, int b) { return a > b ? a : b; }

/* GGML's round-to-nearest via the 1.5 * 2^23 trick (exact for |x| < 2^22). */
static inline int nearest_int(float x) {
    const float v = x + 12582912.f;
    int32_t i;
    memcpy(&i, &v, sizeof i);
    return (i & 0x007fffff) - 0x00400000;
}

/* Symmetric levels L in 0..2 nmax-1 (offset nmax) with per-element weights
 * qw: GGML's make_qx_quants with rmse_type 1 and quant weights. */
static float make_qx_quants_w(int n, int nmax, const float *x, int8_t *L, const float *qw) {
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
        int l = nearest_int(iscale * x[i]);
        l = imax(-nmax, imin(nmax - 1, l));
        L[i] = (int8_t)(l + nmax);
        const float w = qw ? qw[i] : x[i] * x[i];
        sumlx += w * x[i] * l;
        suml2 += w * l * l;
    }
    float scale = suml2 ? sumlx / suml2 : 0.0f;
    float best = scale * sumlx;
    for (int is = -9; is <= 9; is++) {
        if (is == 0) continue;
        iscale = -(nmax + 0.1f * is) / max;
        sumlx = suml2 = 0;
        for (int i = 0; i < n; i++) {
            int l = nearest_int(iscale * x[i]);
            l = imax(-nmax, imin(nmax - 1, l));
            const float w = qw ? qw[i] : x[i] * x[i];
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

/* Asymmetric levels x ~ scale * L - min, L in 0..nmax, weighted squared
 * error, nstep+1 candidate scales each refined by weighted least squares
 * (GGML's make_qkx3_quants). */
static float make_qkx3_quants(int n, int nmax, const float *x, const float *weights, uint8_t *L, float *the_min,
                              uint8_t *Laux, float rmin, float rdelta, int nstep, bool use_mad) {
    float min = x[0], max = x[0];
    float sum_w = weights ? weights[0] : x[0] * x[0];
    float sum_x = sum_w * x[0];
    for (int i = 1; i < n; i++) {
        if (x[i] < min) min = x[i];
        if (x[i] > max) max = x[i];
        const float w = weights ? weights[i] : x[i] * x[i];
        sum_w += w;
        sum_x += w * x[i];
    }
    if (min > 0) min = 0;
    if (max <= min) {
        memset(L, 0, (size_t)n);
        *the_min = -min;
        return 0.f;
    }
    float iscale = nmax / (max - min);
    float scale = 1 / iscale;
    float best_mad = 0;
    for (int i = 0; i < n; i++) {
        const int l = nearest_int(iscale * (x[i] - min));
        L[i] = (uint8_t)imax(0, imin(nmax, l));
        float diff = scale * L[i] + min - x[i];
        diff = use_mad ? fabsf(diff) : diff * diff;
        const float w = weights ? weights[i] : x[i] * x[i];
        best_mad += w * diff;
    }
    if (nstep < 1) {
        *the_min = -min;
        return scale;
    }
    for (int is = 0; is <= nstep; is++) {
        iscale = (rmin + rdelta * is + nmax) / (max - min);
        float sum_l = 0, sum_l2 = 0, sum_xl = 0;
        for (int i = 0; i < n; i++) {
            int l = nearest_int(iscale * (x[i] - min));
            l = imax(0, imin(nmax, l));
            Laux[i] = (uint8_t)l;
            const float w = weights ? weights[i] : x[i] * x[i];
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
            float mad = 0;
            for (int i = 0; i < n; i++) {
                float diff = this_scale * Laux[i] + this_min - x[i];
                diff = use_mad ? fabsf(diff) : diff * diff;
                const float w = weights ? weights[i] : x[i] * x[i];
                mad += w * diff;
            }
            if (mad < best_mad) {
                memcpy(L, Laux, (size_t)n);
                best_mad = mad;
                scale = this_scale;
                min = this_min;
            }
        }
    }
    *the_min = -min;
    return scale;
}

/* Non-negative values x ~ scale * L, L in 0..nmax, weighted: a scan of 9
 * scales then coordinate descent on single levels (GGML's make_qp_quants).
 * Quantizes the sub-block scales and mins of the k-quants. GGML stores
 * unclamped nearest_int results into uint8_t; the conversions below wrap the
 * same way (well defined for unsigned targets). */
static float make_qp_quants(int n, int nmax, const float *x, uint8_t *L, const float *quant_weights) {
    float max = 0;
    for (int i = 0; i < n; i++) max = max > x[i] ? max : x[i];
    if (max < GROUP_MAX_EPS) {
        for (int i = 0; i < n; i++) L[i] = 0;
        return 0.f;
    }
    float iscale = nmax / max;
    for (int i = 0; i < n; i++) L[i] = (uint8_t)nearest_int(iscale * x[i]);
    float scale = 1 / iscale;
    float best_mse = 0;
    for (int i = 0; i < n; i++) {
        const float diff = x[i] - scale * L[i];
        const float w = quant_weights[i];
        best_mse += w * diff * diff;
    }
    for (int is = -4; is <= 4; is++) {
        if (is == 0) continue;
        const float iscale_is = (0.1f * is + nmax) / max;
        const float scale_is = 1 / iscale_is;
        float mse = 0;
        for (int i = 0; i < n; i++) {
            int l = nearest_int(iscale_is * x[i]);
            l = imin(nmax, l);
            const float diff = x[i] - scale_is * l;
            const float w = quant_weights[i];
            mse += w * diff * diff;
        }
        if (mse < best_mse) {
            best_mse = mse;
            iscale = iscale_is;
        }
    }
    float sumlx = 0, suml2 = 0;
    for (int i = 0; i < n; i++) {
        int l = nearest_int(iscale * x[i]);
        l = imin(nmax, l);
        L[i] = (uint8_t)l;
        const float w = quant_weights[i];
        sumlx += w * x[i] * l;
        suml2 += w * l * l;
    }
    for (int itry = 0; itry < 5; itry++) {
        int n_changed = 0;
        for (int i = 0; i < n; i++) {
            const float w = quant_weights[i];
            float slx = sumlx - w * x[i] * L[i];
            float sl2 = suml2 - w * L[i] * L[i];
            if (slx > 0 && sl2 > 0) {
                int new_l = nearest_int(x[i] * sl2 / slx);
                new_l = imin(nmax, new_l);
                if (new_l != L[i]) {
                    slx += w * x[i] * new_l;
                    sl2 += w * new_l * new_l;
                    if (slx * slx * suml2 > sumlx * sumlx * sl2) {
                        L[i] = (uint8_t)new_l;
                        sumlx = slx;
                        suml2 = sl2;
                        n_changed++;
                    }
                }
            }
        }
        if (!n_changed) break;
    }
    return suml2 > 0.0f ? sumlx / suml2 : 0.0f;
}

/* Packs 2-bit values: per 128 elements, byte l holds L[l], L[l+32], L[l+64],
 * L[l+96] in bit pairs 0-1 .. 6-7. */
static void pack_2bit(const uint8_t *L, uint8_t *qs) {
    for (int j = 0; j < QK_K; j += 128)
        for (int l = 0; l < 32; l++)
            qs[j / 4 + l] = (uint8_t)(L[j + l] | (L[j + l + 32] << 2) | (L[j + l + 64] << 4) | (L[j + l + 96] << 6));
}

void pl_quantize_row_q2_K_w(const float *x, void *dst, int64_t n_per_row, const float *quant_weights) {
    block_q2_K *y = dst;
    const int64_t nb = n_per_row / QK_K;
    uint8_t L[QK_K], Laux[16], Ls[QK_K / 16], Lm[QK_K / 16];
    float mins[QK_K / 16], scales[QK_K / 16], sw[QK_K / 16], weight[16];
    for (int64_t i = 0; i < nb; i++) {
        memset(sw, 0, sizeof sw);
        float sumx2 = 0;
        for (int j = 0; j < QK_K; j++) sumx2 += x[j] * x[j];
        const float sigma2 = sumx2 / QK_K;
        for (int j = 0; j < QK_K / 16; j++) {
            const float *qw = quant_weights + QK_K * i + 16 * j;
            for (int l = 0; l < 16; l++) weight[l] = qw[l] * sqrtf(sigma2 + x[16 * j + l] * x[16 * j + l]);
            for (int l = 0; l < QK_K / 16; l++) sw[j] += weight[l];
            scales[j] = make_qkx3_quants(16, 3, x + 16 * j, weight, L + 16 * j, &mins[j], Laux, -0.9f, 0.05f, 36, false);
        }
        float dm = make_qp_quants(QK_K / 16, 15, scales, Ls, sw);
        float mm = make_qp_quants(QK_K / 16, 15, mins, Lm, sw);
        y[i].d = pl_f32_to_f16(dm);
        y[i].dmin = pl_f32_to_f16(mm);
        dm = pl_f16_to_f32(y[i].d);
        mm = pl_f16_to_f32(y[i].dmin);
        for (int j = 0; j < QK_K / 16; j++) y[i].scales[j] = (uint8_t)(Ls[j] | (Lm[j] << 4));
        /* requantize against the stored (rounded) scales */
        for (int j = 0; j < QK_K / 16; j++) {
            const float d = dm * (y[i].scales[j] & 0xF);
            if (!d) continue;
            const float m = mm * (y[i].scales[j] >> 4);
            for (int ii = 0; ii < 16; ii++) {
                const int l = nearest_int((x[16 * j + ii] + m) / d);
                L[16 * j + ii] = (uint8_t)imax(0, imin(3, l));
            }
        }
        pack_2bit(L, y[i].qs);
        x += QK_K;
    }
}

void pl_quantize_row_q3_K_w(const float *x, void *dst, int64_t n_per_row, const float *quant_weights) {
    block_q3_K *y = dst;
    const int64_t nb = n_per_row / QK_K;
    int8_t L[QK_K], Ls[QK_K / 16];
    float scales[QK_K / 16], weight[16], sw[QK_K / 16];
    for (int64_t i = 0; i < nb; i++) {
        float sumx2 = 0;
        for (int j = 0; j < QK_K; j++) sumx2 += x[j] * x[j];
        const float sigma2 = 2 * sumx2 / QK_K;
        for (int j = 0; j < QK_K / 16; j++) {
            if (quant_weights) {
                const float *qw = quant_weights + QK_K * i + 16 * j;
                for (int l = 0; l < 16; l++) weight[l] = qw[l] * sqrtf(sigma2 + x[16 * j + l] * x[16 * j + l]);
            } else {
                for (int l = 0; l < 16; l++) weight[l] = x[16 * j + l] * x[16 * j + l];
            }
            float sumw = 0;
            for (int l = 0; l < 16; l++) sumw += weight[l];
            sw[j] = sumw;
            scales[j] = make_qx_quants_w(16, 4, x + 16 * j, L + 16 * j, weight);
        }
        memset(y[i].scales, 0, 12);
        const float d_block = make_qx_quants_w(QK_K / 16, 32, scales, Ls, sw);
        for (int j = 0; j < QK_K / 16; j++) {
            int l = Ls[j];
            if (j < 8) y[i].scales[j] = (uint8_t)(l & 0xF);
            else y[i].scales[j - 8] = (uint8_t)(y[i].scales[j - 8] | ((l & 0xF) << 4));
            l >>= 4;
            y[i].scales[j % 4 + 8] = (uint8_t)(y[i].scales[j % 4 + 8] | (l << (2 * (j / 4))));
        }
        y[i].d = pl_f32_to_f16(d_block);
        for (int j = 0; j < QK_K / 16; j++) {
            int sc = j < 8 ? y[i].scales[j] & 0xF : y[i].scales[j - 8] >> 4;
            sc = (sc | (((y[i].scales[8 + j % 4] >> (2 * (j / 4))) & 3) << 4)) - 32;
            const float d = pl_f16_to_f32(y[i].d) * (int8_t)sc;
            if (!d) continue;
            for (int ii = 0; ii < 16; ii++) {
                int l = nearest_int(x[16 * j + ii] / d);
                l = imax(-4, imin(3, l));
                L[16 * j + ii] = (int8_t)(l + 4);
            }
        }
        /* the third bit of element j goes to bit j / 32 of hmask[j % 32] */
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
        x += QK_K;
    }
}

/* Packs the 6-bit sub-block scales and mins of q4_K / q5_K. */
static void pack_scale_min(const uint8_t *Ls, const uint8_t *Lm, uint8_t *s) {
    for (int j = 0; j < QK_K / 32; j++) {
        const uint8_t ls = Ls[j], lm = Lm[j];
        if (j < 4) {
            s[j] = ls;
            s[j + 4] = lm;
        } else {
            s[j + 4] = (uint8_t)((ls & 0xF) | ((lm & 0xF) << 4));
            s[j - 4] = (uint8_t)(s[j - 4] | ((ls >> 4) << 6));
            s[j] = (uint8_t)(s[j] | ((lm >> 4) << 6));
        }
    }
}

/* q4_K (nmax 15) and q5_K (nmax 31) share everything but the packing of L. */
static void quantize_k45_w(const float *x, int nmax, const float *quant_weights, pl_f16 *d_out, pl_f16 *dmin_out,
                           uint8_t *scales_out, uint8_t *L, int64_t i) {
    uint8_t Laux[32], Ls[QK_K / 32], Lm[QK_K / 32];
    float weights[32], sw[QK_K / 32], mins[QK_K / 32], scales[QK_K / 32];
    float sum_x2 = 0;
    for (int l = 0; l < QK_K; l++) sum_x2 += x[l] * x[l];
    const float sigma2 = 2 * sum_x2 / QK_K;
    const float av_x = sqrtf(sigma2);
    for (int j = 0; j < QK_K / 32; j++) {
        if (quant_weights) {
            const float *qw = quant_weights + QK_K * i + 32 * j;
            for (int l = 0; l < 32; l++) weights[l] = qw[l] * sqrtf(sigma2 + x[32 * j + l] * x[32 * j + l]);
        } else {
            for (int l = 0; l < 32; l++) weights[l] = av_x + fabsf(x[32 * j + l]);
        }
        float sumw = 0;
        for (int l = 0; l < 32; l++) sumw += weights[l];
        sw[j] = sumw;
        scales[j] = make_qkx3_quants(32, nmax, x + 32 * j, weights, L + 32 * j, &mins[j], Laux, -0.9f, 0.05f, 36, false);
    }
    const float d_block = make_qp_quants(QK_K / 32, 63, scales, Ls, sw);
    const float m_block = make_qp_quants(QK_K / 32, 63, mins, Lm, sw);
    if (nmax == 31) {
        /* only GGML's q5_K clamps here (q4_K relies on make_qp_quants' MIN) */
        for (int j = 0; j < QK_K / 32; j++) {
            Ls[j] = (uint8_t)imin(63, Ls[j]);
            Lm[j] = (uint8_t)imin(63, Lm[j]);
        }
    }
    memset(scales_out, 0, K_SCALE_SIZE);
    pack_scale_min(Ls, Lm, scales_out);
    *d_out = pl_f32_to_f16(d_block);
    *dmin_out = pl_f32_to_f16(m_block);
    for (int j = 0; j < QK_K / 32; j++) {
        uint8_t sc, m;
        pl_q4k_scale_min(j, scales_out, &sc, &m);
        const float d = pl_f16_to_f32(*d_out) * sc;
        if (!d) continue;
        const float dm = pl_f16_to_f32(*dmin_out) * m;
        for (int ii = 0; ii < 32; ii++) {
            int l = nearest_int((x[32 * j + ii] + dm) / d);
            L[32 * j + ii] = (uint8_t)imax(0, imin(nmax, l));
        }
    }
}

void pl_quantize_row_q4_K_w(const float *x, void *dst, int64_t n_per_row, const float *quant_weights) {
    block_q4_K *y = dst;
    uint8_t L[QK_K];
    for (int64_t i = 0; i < n_per_row / QK_K; i++, x += QK_K) {
        quantize_k45_w(x, 15, quant_weights, &y[i].d, &y[i].dmin, y[i].scales, L, i);
        uint8_t *q = y[i].qs;
        for (int j = 0; j < QK_K; j += 64, q += 32)
            for (int l = 0; l < 32; l++) q[l] = (uint8_t)(L[j + l] | (L[j + l + 32] << 4));
    }
}

void pl_quantize_row_q5_K_w(const float *x, void *dst, int64_t n_per_row, const float *quant_weights) {
    block_q5_K *y = dst;
    uint8_t L[QK_K];
    for (int64_t i = 0; i < n_per_row / QK_K; i++, x += QK_K) {
        quantize_k45_w(x, 31, quant_weights, &y[i].d, &y[i].dmin, y[i].scales, L, i);
        uint8_t *qh = y[i].qh, *ql = y[i].qs;
        memset(qh, 0, QK_K / 8);
        uint8_t m1 = 1, m2 = 2;
        for (int k = 0; k < QK_K; k += 64, ql += 32) {
            for (int j = 0; j < 32; j++) {
                int l1 = L[k + j], l2 = L[k + j + 32];
                if (l1 > 15) { l1 -= 16; qh[j] |= m1; }
                if (l2 > 15) { l2 -= 16; qh[j] |= m2; }
                ql[j] = (uint8_t)(l1 | (l2 << 4));
            }
            m1 = (uint8_t)(m1 << 2);
            m2 = (uint8_t)(m2 << 2);
        }
    }
}

void pl_quantize_row_q6_K_w(const float *x, void *dst, int64_t n_per_row, const float *quant_weights) {
    block_q6_K *y = dst;
    int8_t L[QK_K];
    float scales[QK_K / 16];
    for (int64_t i = 0; i < n_per_row / QK_K; i++, x += QK_K) {
        float max_scale = 0, max_abs_scale = 0;
        for (int ib = 0; ib < QK_K / 16; ib++) {
            /* GGML passes the raw imatrix here (no sigma weighting) */
            const float *qw = quant_weights ? quant_weights + QK_K * i + 16 * ib : NULL;
            const float scale = make_qx_quants_w(16, 32, x + 16 * ib, L + 16 * ib, qw);
            scales[ib] = scale;
            if (fabsf(scale) > max_abs_scale) {
                max_abs_scale = fabsf(scale);
                max_scale = scale;
            }
        }
        if (max_abs_scale < GROUP_MAX_EPS) {
            memset(&y[i], 0, sizeof y[i]);
            continue;
        }
        const float iscale = -128.f / max_scale;
        y[i].d = pl_f32_to_f16(1 / iscale);
        for (int ib = 0; ib < QK_K / 16; ib++) y[i].scales[ib] = (int8_t)imin(127, nearest_int(iscale * scales[ib]));
        for (int j = 0; j < QK_K / 16; j++) {
            const float d = pl_f16_to_f32(y[i].d) * y[i].scales[j];
            if (!d) continue;
            for (int ii = 0; ii < 16; ii++) {
                int l = nearest_int(x[16 * j + ii] / d);
                l = imax(-32, imin(31, l));
                L[16 * j + ii] = (int8_t)(l + 32);
            }
        }
        uint8_t *ql = y[i].ql, *qh = y[i].qh;
        for (int j = 0; j < QK_K; j += 128, ql += 64, qh += 32) {
            for (int l = 0; l < 32; l++) {
                const uint8_t q1 = L[j + l + 0] & 0xF, q2 = L[j + l + 32] & 0xF;
                const uint8_t q3 = L[j + l + 64] & 0xF, q4 = L[j + l + 96] & 0xF;
                ql[l] = (uint8_t)(q1 | (q3 << 4));
                ql[l + 32] = (uint8_t)(q2 | (q4 << 4));
                qh[l] = (uint8_t)((L[j + l] >> 4) | ((L[j + l + 32] >> 4) << 2) | ((L[j + l + 64] >> 4) << 4) |
                                  ((L[j + l + 96] >> 4) << 6));
            }
        }
    }
}

/* ---- dispatch ------------------------------------------------------------------*/

typedef void (*row_w_fn)(const float *x, void *dst, int64_t n_per_row, const float *qw);

static row_w_fn weighted_fn(pl_dtype t) {
    switch (t) {
    case PL_Q2_K: return pl_quantize_row_q2_K_w;
    case PL_Q3_K: return pl_quantize_row_q3_K_w;
    case PL_Q4_K: return pl_quantize_row_q4_K_w;
    case PL_Q5_K: return pl_quantize_row_q5_K_w;
    case PL_Q6_K: return pl_quantize_row_q6_K_w;
    case PL_IQ2_XXS: return pl_quantize_row_iq2_xxs_w;
    case PL_IQ2_XS: return pl_quantize_row_iq2_xs_w;
    case PL_IQ1_S: return pl_quantize_row_iq1_s_w;
    case PL_IQ1_M: return pl_quantize_row_iq1_m_w;
    default: return NULL;
    }
}

bool pl_quantize_needs_imatrix(pl_dtype t) { return t == PL_IQ2_XXS || t == PL_IQ2_XS || t == PL_IQ1_S; }

bool pl_quantize_uses_imatrix(pl_dtype t) { return weighted_fn(t) != NULL; }

bool pl_quantize_rows_supported(pl_dtype t) {
    if (t == PL_Q8_K || t == PL_Q8_1) return false; /* activation formats */
    return weighted_fn(t) || t == PL_TQ1_0 || t == PL_TQ2_0 || pl_can_quantize(t);
}

pl_status pl_quantize_rows(pl_dtype t, const float *src, void *dst, int64_t nrows, int64_t n_per_row,
                           const float *imatrix) {
    const pl_dtype_traits *tr = pl_dtype_get((uint32_t)t);
    if (!tr || !pl_quantize_rows_supported(t))
        return pl_errorf(PL_ERR_UNSUPPORTED, "no quantizer for type %s", tr && tr->name ? tr->name : "?");
    if (nrows < 0 || n_per_row <= 0 || n_per_row % tr->block_size)
        return pl_errorf(PL_ERR_INVALID_ARG, "rows of %lld elements cannot be quantized to %s (block size %lld)",
                         (long long)n_per_row, tr->name, (long long)tr->block_size);
    if (!imatrix && pl_quantize_needs_imatrix(t))
        return pl_errorf(PL_ERR_INVALID_ARG, "type %s needs an importance matrix", tr->name);
    const size_t row_size = pl_dtype_row_size(t, n_per_row);
    char *out = dst;
    row_w_fn wf = weighted_fn(t);
    /* GGML's quantize_<k-quant> take the reference path without weights;
     * IQ1_M runs its own search with x^2 weights instead. */
    if (wf && (imatrix || t == PL_IQ1_M)) {
        for (int64_t r = 0; r < nrows; r++) wf(src + r * n_per_row, out + (size_t)r * row_size, n_per_row, imatrix);
        return PL_OK;
    }
    for (int64_t r = 0; r < nrows; r++) {
        const float *x = src + r * n_per_row;
        void *y = out + (size_t)r * row_size;
        if (t == PL_TQ1_0) pl_quantize_row_tq1_0(x, y, n_per_row);
        else if (t == PL_TQ2_0) pl_quantize_row_tq2_0(x, y, n_per_row);
        else pl_quantize_row(t, x, y, n_per_row);
    }
    return PL_OK;
}
