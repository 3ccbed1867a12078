/* AVX2 + FMA + F16C matmul tile kernels and activation converters. Compiled
 * with -mavx2 -mfma -mf16c; only called after pl_cpu_has_avx2(). See
 * cpu_internal.h for the tile contract and cpu_matmul.c for the driver.
 *
 * Integer kernels (q8_0, q4_K, q6_K against q8_0 / q8_K activations) use the
 * classic AVX2 recipe: _mm256_maddubs_epi16 multiplies unsigned weight codes
 * by signed activation codes into int16 pair sums, _mm256_madd_epi16 applies
 * the (int16) sub-block scale and widens to int32, and each super-block's
 * int32 sum is scaled into a float accumulator once. A tile decodes each
 * weight block once (nibble unpacking, scale unpacking) and feeds it to up to
 * four activation rows, which is what makes prefill compute-bound instead of
 * decode-bound.
 */
#include <immintrin.h>
#include <string.h>
#include "backends/cpu/cpu_internal.h"
#include "backends/cpu/cpu_simd_avx2.h"
#include "core/fp16.h"

PL_AI float pl_h2f(uint16_t h) { return _cvtsh_ss(h); }

/* ---- activation converters ------------------------------------------------*/

/* Same result as llama.cpp's x86 quantize_row_q8_0 (and as our portable
 * pl_cpu_quantize_q8_0): id = 127/amax, round to nearest-even. */
void pl_cpu_quantize_q8_0_avx2(const float *x, void *dst, int64_t K) {
    block_q8_0 *y = dst;
    const __m256 sign = _mm256_set1_ps(-0.0f);
    const __m256i perm = _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7);
    for (int64_t i = 0; i < K / QK8_0; i++, x += QK8_0) {
        __m256 v[4];
        PL_UNROLL
        for (int k = 0; k < 4; k++) v[k] = _mm256_loadu_ps(x + 8 * k);
        __m256 m = _mm256_max_ps(_mm256_max_ps(_mm256_andnot_ps(sign, v[0]), _mm256_andnot_ps(sign, v[1])),
                                 _mm256_max_ps(_mm256_andnot_ps(sign, v[2]), _mm256_andnot_ps(sign, v[3])));
        __m128 m4 = _mm_max_ps(_mm256_castps256_ps128(m), _mm256_extractf128_ps(m, 1));
        m4 = _mm_max_ps(m4, _mm_movehl_ps(m4, m4));
        m4 = _mm_max_ss(m4, _mm_movehdup_ps(m4));
        const float amax = _mm_cvtss_f32(m4);
        y[i].d = pl_f32_to_f16(amax / 127.f);
        const __m256 id = _mm256_set1_ps(amax != 0.0f ? 127.f / amax : 0.0f);
        __m256i q[4];
        PL_UNROLL
        for (int k = 0; k < 4; k++)
            q[k] = _mm256_cvtps_epi32(_mm256_round_ps(_mm256_mul_ps(v[k], id),
                                                      _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
        /* packs work per 128-bit lane; the permute restores element order */
        __m256i p = _mm256_packs_epi16(_mm256_packs_epi32(q[0], q[1]), _mm256_packs_epi32(q[2], q[3]));
        _mm256_storeu_si256((__m256i *)y[i].qs, _mm256_permutevar8x32_epi32(p, perm));
    }
}

/* Bit-exact with quantize_row_q8_K_ref: the scale comes from the first
 * element of largest magnitude, with its sign; nearest-even rounding; codes
 * clamped to <= 127; bsums = sums of 16 codes. */
void pl_cpu_quantize_q8_K_avx2(const float *x, void *dst, int64_t K) {
    block_q8_K *y = dst;
    const __m256 sign = _mm256_set1_ps(-0.0f);
    const __m256i perm = _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7);
    const __m256i c127 = _mm256_set1_epi32(127);
    const __m256i ones8 = _mm256_set1_epi8(1);
    const __m256i ones16 = _mm256_set1_epi16(1);
    for (int64_t i = 0; i < K / QK_K; i++, x += QK_K) {
        __m256 m = _mm256_setzero_ps();
        for (int k = 0; k < QK_K; k += 8) m = _mm256_max_ps(m, _mm256_andnot_ps(sign, _mm256_loadu_ps(x + k)));
        __m128 m4 = _mm_max_ps(_mm256_castps256_ps128(m), _mm256_extractf128_ps(m, 1));
        m4 = _mm_max_ps(m4, _mm_movehl_ps(m4, m4));
        m4 = _mm_max_ss(m4, _mm_movehdup_ps(m4));
        const float amax = _mm_cvtss_f32(m4);
        if (!(amax > 0.0f)) {
            memset(&y[i], 0, sizeof y[i]);
            continue;
        }
        /* first element whose magnitude is amax */
        const __m256 va = _mm256_set1_ps(amax);
        float max = amax;
        for (int k = 0; k < QK_K; k += 8) {
            int mask = _mm256_movemask_ps(_mm256_cmp_ps(_mm256_andnot_ps(sign, _mm256_loadu_ps(x + k)), va, _CMP_EQ_OQ));
            if (mask) { max = x[k + __builtin_ctz((unsigned)mask)]; break; }
        }
        const float iscale = -127.f / max;
        const __m256 vs = _mm256_set1_ps(iscale);
        int32_t sums[8][8];
        for (int k = 0; k < QK_K; k += 32) {
            __m256i q[4];
            PL_UNROLL
            for (int l = 0; l < 4; l++) {
                __m256 v = _mm256_mul_ps(_mm256_loadu_ps(x + k + 8 * l), vs);
                q[l] = _mm256_min_epi32(_mm256_cvtps_epi32(_mm256_round_ps(v, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC)), c127);
            }
            __m256i p = _mm256_packs_epi16(_mm256_packs_epi32(q[0], q[1]), _mm256_packs_epi32(q[2], q[3]));
            p = _mm256_permutevar8x32_epi32(p, perm);
            _mm256_storeu_si256((__m256i *)(y[i].qs + k), p);
            /* lanes 0-3: four partial sums of codes k..k+15, lanes 4-7: of k+16..k+31
             * (maddubs treats the first operand as unsigned: ones x codes) */
            __m256i s = _mm256_madd_epi16(_mm256_maddubs_epi16(ones8, p), ones16);
            _mm256_storeu_si256((__m256i *)sums[k / 32], s);
        }
        for (int g = 0; g < 8; g++) {
            y[i].bsums[2 * g] = (int16_t)(sums[g][0] + sums[g][1] + sums[g][2] + sums[g][3]);
            y[i].bsums[2 * g + 1] = (int16_t)(sums[g][4] + sums[g][5] + sums[g][6] + sums[g][7]);
        }
        y[i].d = 1.0f / iscale;
    }
}

void pl_cpu_round_f16_avx2(const float *x, void *dst, int64_t K) {
    float *y = dst;
    int64_t k = 0;
    for (; k + 8 <= K; k += 8)
        _mm256_storeu_ps(y + k, _mm256_cvtph_ps(_mm256_cvtps_ph(_mm256_loadu_ps(x + k), _MM_FROUND_TO_NEAREST_INT)));
    for (; k < K; k++) y[k] = pl_f16_to_f32(pl_f32_to_f16(x[k]));
}

/* x rounded to bf16 (nearest-even, NaNs kept quiet: as pl_f32_to_bf16) and
 * widened back to f32. */
void pl_cpu_round_bf16_avx2(const float *x, void *dst, int64_t K) {
    float *y = dst;
    const __m256i one = _mm256_set1_epi32(1), bias = _mm256_set1_epi32(0x7fff);
    const __m256i hi = _mm256_set1_epi32((int)0xffff0000u), abs = _mm256_set1_epi32(0x7fffffff);
    const __m256i inf = _mm256_set1_epi32(0x7f800000), quiet = _mm256_set1_epi32(0x00400000);
    int64_t k = 0;
    for (; k + 8 <= K; k += 8) {
        const __m256i u = _mm256_castps_si256(_mm256_loadu_ps(x + k));
        const __m256i lsb = _mm256_and_si256(_mm256_srli_epi32(u, 16), one);
        const __m256i r = _mm256_and_si256(_mm256_add_epi32(u, _mm256_add_epi32(bias, lsb)), hi);
        const __m256i nan = _mm256_cmpgt_epi32(_mm256_and_si256(u, abs), inf);
        const __m256i qn = _mm256_and_si256(_mm256_or_si256(u, quiet), hi);
        _mm256_storeu_ps(y + k, _mm256_castsi256_ps(_mm256_blendv_epi8(r, qn, nan)));
    }
    for (; k < K; k++) y[k] = pl_bf16_to_f32(pl_f32_to_bf16(x[k]));
}

/* ---- float tiles: F32 / F16 / BF16 weights x F32 activations ----------------
 * NR weight rows x NC activation rows, 8 columns per step, NR*NC FMA chains. */

enum { PL_W_F32, PL_W_F16, PL_W_BF16 };

PL_AI __m256 pl_load_w8(const char *row, int64_t k, const int wt) {
    if (wt == PL_W_F32) return _mm256_loadu_ps((const float *)row + k);
    const __m128i h = _mm_loadu_si128((const __m128i *)((const uint16_t *)row + k));
    if (wt == PL_W_F16) return _mm256_cvtph_ps(h);
    return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(h), 16));
}

PL_AI float pl_load_w1(const char *row, int64_t k, const int wt) {
    if (wt == PL_W_F32) return ((const float *)row)[k];
    const uint16_t h = ((const uint16_t *)row)[k];
    return wt == PL_W_F16 ? pl_h2f(h) : pl_bf16_to_f32(h);
}

PL_AI void pl_tile_float(int64_t K, const char *w, size_t ws, const char *a, size_t as, float *d, size_t ds,
                         const int NR, const int NC, const int wt) {
    __m256 acc[4][3];
    PL_UNROLL
    for (int r = 0; r < NR; r++)
        PL_UNROLL
        for (int c = 0; c < NC; c++) acc[r][c] = _mm256_setzero_ps();
    int64_t k = 0;
    for (; k + 8 <= K; k += 8) {
        __m256 av[3];
        PL_UNROLL
        for (int c = 0; c < NC; c++) av[c] = _mm256_loadu_ps((const float *)(a + c * as) + k);
        PL_UNROLL
        for (int r = 0; r < NR; r++) {
            const __m256 wv = pl_load_w8(w + r * ws, k, wt);
            PL_UNROLL
            for (int c = 0; c < NC; c++) acc[r][c] = _mm256_fmadd_ps(wv, av[c], acc[r][c]);
        }
    }
    PL_UNROLL
    for (int r = 0; r < NR; r++)
        PL_UNROLL
        for (int c = 0; c < NC; c++) {
            float s = pl_hsum8(acc[r][c]);
            const float *ar = (const float *)(a + c * as);
            for (int64_t t = k; t < K; t++) s += pl_load_w1(w + r * ws, t, wt) * ar[t];
            d[c * ds + r] = s;
        }
}

#define PL_TILE_CASE(NR, NC, WT) \
    case (NR) * 4 + (NC): pl_tile_float(K, (const char *)w, ws, (const char *)a, as, d, ds, NR, NC, WT); break;
#define PL_TILE_SWITCH(WT)                                                                  \
    switch (nr * 4 + nc) {                                                                  \
        PL_TILE_CASE(1, 1, WT) PL_TILE_CASE(1, 2, WT) PL_TILE_CASE(1, 3, WT)                \
        PL_TILE_CASE(2, 1, WT) PL_TILE_CASE(2, 2, WT) PL_TILE_CASE(2, 3, WT)                \
        PL_TILE_CASE(3, 1, WT) PL_TILE_CASE(3, 2, WT) PL_TILE_CASE(3, 3, WT)                \
        PL_TILE_CASE(4, 1, WT) PL_TILE_CASE(4, 2, WT) PL_TILE_CASE(4, 3, WT)                \
        default: break;                                                                     \
    }

void pl_cpu_mm_f32_avx2(int64_t K, const void *w, size_t ws, int nr, const void *a, size_t as, int nc,
                        float *d, size_t ds) {
    PL_TILE_SWITCH(PL_W_F32)
}
void pl_cpu_mm_f16_avx2(int64_t K, const void *w, size_t ws, int nr, const void *a, size_t as, int nc,
                        float *d, size_t ds) {
    PL_TILE_SWITCH(PL_W_F16)
}
void pl_cpu_mm_bf16_avx2(int64_t K, const void *w, size_t ws, int nr, const void *a, size_t as, int nc,
                         float *d, size_t ds) {
    PL_TILE_SWITCH(PL_W_BF16)
}

/* ---- q8_0 x q8_0 --------------------------------------------------------------
 * Signed x signed through maddubs: |w| as the unsigned operand, the
 * activation with w's sign applied as the signed one. */
PL_AI void pl_tile_q8_0(int64_t nb, const block_q8_0 *x, const char *a, size_t as, float *d, size_t ds,
                        const int NC) {
    const __m256i ones = _mm256_set1_epi16(1);
    __m256 acc[4];
    const block_q8_0 *y[4];
    PL_UNROLL
    for (int c = 0; c < NC; c++) {
        acc[c] = _mm256_setzero_ps();
        y[c] = (const block_q8_0 *)(a + c * as);
    }
    for (int64_t i = 0; i < nb; i++) {
        const __m256i wq = _mm256_loadu_si256((const __m256i *)x[i].qs);
        const __m256i aw = _mm256_sign_epi8(wq, wq);
        const float dx = pl_h2f(x[i].d);
        PL_UNROLL
        for (int c = 0; c < NC; c++) {
            const __m256i sy = _mm256_sign_epi8(_mm256_loadu_si256((const __m256i *)y[c][i].qs), wq);
            const __m256i s = _mm256_madd_epi16(_mm256_maddubs_epi16(aw, sy), ones);
            acc[c] = _mm256_fmadd_ps(_mm256_set1_ps(dx * pl_h2f(y[c][i].d)), _mm256_cvtepi32_ps(s), acc[c]);
        }
    }
    PL_UNROLL
    for (int c = 0; c < NC; c++) d[c * ds] = pl_hsum8(acc[c]);
}

void pl_cpu_mm_q8_0_avx2(int64_t K, const void *w, size_t ws, int nr, const void *a, size_t as, int nc,
                         float *d, size_t ds) {
    const int64_t nb = K / QK8_0;
    for (int r = 0; r < nr; r++) {
        const block_q8_0 *x = (const block_q8_0 *)((const char *)w + r * ws);
        switch (nc) {
            case 1: pl_tile_q8_0(nb, x, (const char *)a, as, d + r, ds, 1); break;
            case 2: pl_tile_q8_0(nb, x, (const char *)a, as, d + r, ds, 2); break;
            case 3: pl_tile_q8_0(nb, x, (const char *)a, as, d + r, ds, 3); break;
            default: pl_tile_q8_0(nb, x, (const char *)a, as, d + r, ds, 4); break;
        }
    }
}

/* ---- q4_K x q8_K --------------------------------------------------------------
 * Per super-block: 8 groups of 32, each with a 6-bit scale sc_g and min m_g.
 *   dot = dy * d * sum_g sc_g * sum(q * q8)  -  dy * dmin * sum_g m_g * bsum32_g
 * Byte layout of qs: 32 bytes per 64 elements, low nibbles first. */

/* Unpacks the 12 scale bytes into 16 u8: scales 0..7 then mins 0..7.
 * Bytes 0-3 / 4-7 hold sc / m of groups 0-3 in their low 6 bits; bytes 8-11
 * hold the low 4 bits of groups 4-7 (sc low nibble, m high nibble) whose top
 * two bits sit in bits 6-7 of bytes 0-3 (sc) and 4-7 (m). */
PL_AI __m128i pl_q4k_scales(const uint8_t *s) {
    uint32_t u0, u1, u2;
    memcpy(&u0, s, 4);
    memcpy(&u1, s + 4, 4);
    memcpy(&u2, s + 8, 4);
    const uint32_t sc03 = u0 & 0x3f3f3f3fu;
    const uint32_t m03 = u1 & 0x3f3f3f3fu;
    const uint32_t sc47 = (u2 & 0x0f0f0f0fu) | (((u0 >> 6) & 0x03030303u) << 4);
    const uint32_t m47 = ((u2 >> 4) & 0x0f0f0f0fu) | (((u1 >> 6) & 0x03030303u) << 4);
    return _mm_set_epi32((int)m47, (int)m03, (int)sc47, (int)sc03);
}

PL_AI void pl_tile_q4_K(int64_t nb, const block_q4_K *x, const char *a, size_t as, float *d, size_t ds,
                        const int NC) {
    const __m256i m4 = _mm256_set1_epi8(0x0F);
    __m256 acc[4];
    const block_q8_K *y[4];
    PL_UNROLL
    for (int c = 0; c < NC; c++) {
        acc[c] = _mm256_setzero_ps();
        y[c] = (const block_q8_K *)(a + c * as);
    }
    for (int64_t i = 0; i < nb; i++) {
        const float dx = pl_h2f(x[i].d), dmx = pl_h2f(x[i].dmin);
        /* 16 x int16: lanes 0-7 scales, 8-15 mins */
        const __m256i sm = _mm256_cvtepu8_epi16(pl_q4k_scales(x[i].scales));
        const __m128i mins = _mm256_extracti128_si256(sm, 1);
        const __m256i scales = _mm256_permute2x128_si256(sm, sm, 0x00);  /* scales in both lanes */
        __m256i sumi[4];
        PL_UNROLL
        for (int c = 0; c < NC; c++) {
            /* min term: bsums pairwise -> 8 sums of 32, dotted with the mins */
            const __m256i bs = _mm256_loadu_si256((const __m256i *)y[c][i].bsums);
            const __m128i s32 = _mm_hadd_epi16(_mm256_castsi256_si128(bs), _mm256_extracti128_si256(bs, 1));
            const __m128i pm = _mm_madd_epi16(mins, s32);
            acc[c] = _mm256_fmadd_ps(_mm256_set1_ps(-dmx * y[c][i].d),
                                     _mm256_cvtepi32_ps(_mm256_zextsi128_si256(pm)), acc[c]);
            sumi[c] = _mm256_setzero_si256();
        }
        PL_UNROLL
        for (int j = 0; j < 4; j++) {
            /* scale of group 2j (low nibbles) and 2j+1 (high nibbles) in all lanes */
            const __m256i sc0 = _mm256_shuffle_epi8(scales, _mm256_set1_epi16((short)(((4 * j + 1) << 8) | (4 * j))));
            const __m256i sc1 = _mm256_shuffle_epi8(scales, _mm256_set1_epi16((short)(((4 * j + 3) << 8) | (4 * j + 2))));
            const __m256i bits = _mm256_loadu_si256((const __m256i *)(x[i].qs + 32 * j));
            const __m256i lo = _mm256_and_si256(bits, m4);
            const __m256i hi = _mm256_and_si256(_mm256_srli_epi16(bits, 4), m4);
            PL_UNROLL
            for (int c = 0; c < NC; c++) {
                const __m256i q0 = _mm256_loadu_si256((const __m256i *)(y[c][i].qs + 64 * j));
                const __m256i q1 = _mm256_loadu_si256((const __m256i *)(y[c][i].qs + 64 * j + 32));
                const __m256i p0 = _mm256_madd_epi16(sc0, _mm256_maddubs_epi16(lo, q0));
                const __m256i p1 = _mm256_madd_epi16(sc1, _mm256_maddubs_epi16(hi, q1));
                sumi[c] = _mm256_add_epi32(sumi[c], _mm256_add_epi32(p0, p1));
            }
        }
        PL_UNROLL
        for (int c = 0; c < NC; c++)
            acc[c] = _mm256_fmadd_ps(_mm256_set1_ps(dx * y[c][i].d), _mm256_cvtepi32_ps(sumi[c]), acc[c]);
    }
    PL_UNROLL
    for (int c = 0; c < NC; c++) d[c * ds] = pl_hsum8(acc[c]);
}

void pl_cpu_mm_q4_K_avx2(int64_t K, const void *w, size_t ws, int nr, const void *a, size_t as, int nc,
                         float *d, size_t ds) {
    const int64_t nb = K / QK_K;
    for (int r = 0; r < nr; r++) {
        const block_q4_K *x = (const block_q4_K *)((const char *)w + r * ws);
        switch (nc) {
            case 1: pl_tile_q4_K(nb, x, (const char *)a, as, d + r, ds, 1); break;
            case 2: pl_tile_q4_K(nb, x, (const char *)a, as, d + r, ds, 2); break;
            case 3: pl_tile_q4_K(nb, x, (const char *)a, as, d + r, ds, 3); break;
            default: pl_tile_q4_K(nb, x, (const char *)a, as, d + r, ds, 4); break;
        }
    }
}

/* ---- q6_K x q8_K --------------------------------------------------------------
 * Codes q in 0..63 (w = d * sc16 * (q - 32)); the -32 is folded in once per
 * super-block as 32 * sum_g sc_g * bsum_g, from the activation's bsums.
 * Layout per 128-element half: ql[0..63], qh[0..31]; element l (0..31) of
 * quarter t has low bits in ql[l + 32 * (t & 1)] (nibble t >> 1) and high
 * bits in qh[l] bits 2t..2t+1. */
PL_AI void pl_tile_q6_K(int64_t nb, const block_q6_K *x, const char *a, size_t as, float *d, size_t ds,
                        const int NC) {
    const __m256i m4 = _mm256_set1_epi8(0x0F);
    const __m256i m3 = _mm256_set1_epi8(0x03);
    __m256 acc[4];
    const block_q8_K *y[4];
    PL_UNROLL
    for (int c = 0; c < NC; c++) {
        acc[c] = _mm256_setzero_ps();
        y[c] = (const block_q8_K *)(a + c * as);
    }
    for (int64_t i = 0; i < nb; i++) {
        const float dx = pl_h2f(x[i].d);
        const __m128i sc8 = _mm_loadu_si128((const __m128i *)x[i].scales);
        const __m256i sc16 = _mm256_cvtepi8_epi16(sc8);
        __m256i sumi[4];
        PL_UNROLL
        for (int c = 0; c < NC; c++) {
            const __m256i bs = _mm256_loadu_si256((const __m256i *)y[c][i].bsums);
            sumi[c] = _mm256_sub_epi32(_mm256_setzero_si256(), _mm256_slli_epi32(_mm256_madd_epi16(bs, sc16), 5));
        }
        PL_UNROLL
        for (int h = 0; h < 2; h++) {
            const __m256i ql0 = _mm256_loadu_si256((const __m256i *)(x[i].ql + 64 * h));
            const __m256i ql1 = _mm256_loadu_si256((const __m256i *)(x[i].ql + 64 * h + 32));
            const __m256i qh = _mm256_loadu_si256((const __m256i *)(x[i].qh + 32 * h));
            PL_UNROLL
            for (int t = 0; t < 4; t++) {
                const __m256i l4 = (t & 1) ? ql1 : ql0;
                const __m256i lo = (t & 2) ? _mm256_and_si256(_mm256_srli_epi16(l4, 4), m4) : _mm256_and_si256(l4, m4);
                const __m256i hb = _mm256_slli_epi16(_mm256_and_si256(t ? _mm256_srli_epi16(qh, 2 * t) : qh, m3), 4);
                const __m256i q6 = _mm256_or_si256(lo, hb);
                /* sub-blocks 2g, 2g+1 of 16 (g = 4h + t): bytes 2g x8, 2g+1 x8 */
                const int g = 4 * h + t;
                const __m128i pick = _mm_set_epi64x(0x0101010101010101LL * (2 * g + 1), 0x0101010101010101LL * (2 * g));
                const __m256i sc = _mm256_cvtepi8_epi16(_mm_shuffle_epi8(sc8, pick));
                PL_UNROLL
                for (int c = 0; c < NC; c++) {
                    const __m256i q8 = _mm256_loadu_si256((const __m256i *)(y[c][i].qs + 32 * g));
                    sumi[c] = _mm256_add_epi32(sumi[c], _mm256_madd_epi16(sc, _mm256_maddubs_epi16(q6, q8)));
                }
            }
        }
        PL_UNROLL
        for (int c = 0; c < NC; c++)
            acc[c] = _mm256_fmadd_ps(_mm256_set1_ps(dx * y[c][i].d), _mm256_cvtepi32_ps(sumi[c]), acc[c]);
    }
    PL_UNROLL
    for (int c = 0; c < NC; c++) d[c * ds] = pl_hsum8(acc[c]);
}

void pl_cpu_mm_q6_K_avx2(int64_t K, const void *w, size_t ws, int nr, const void *a, size_t as, int nc,
                         float *d, size_t ds) {
    const int64_t nb = K / QK_K;
    for (int r = 0; r < nr; r++) {
        const block_q6_K *x = (const block_q6_K *)((const char *)w + r * ws);
        switch (nc) {
            case 1: pl_tile_q6_K(nb, x, (const char *)a, as, d + r, ds, 1); break;
            case 2: pl_tile_q6_K(nb, x, (const char *)a, as, d + r, ds, 2); break;
            case 3: pl_tile_q6_K(nb, x, (const char *)a, as, d + r, ds, 3); break;
            default: pl_tile_q6_K(nb, x, (const char *)a, as, d + r, ds, 4); break;
        }
    }
}
