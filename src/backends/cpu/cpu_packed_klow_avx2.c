/* Prepared-weight kernels for the low k-quants q2_K and q3_K (the bulk of a
 * llama-quantize Q2_K file: q2_K for most matrices, q3_K for attn_v /
 * attn_output / ffn_down), in the manner of cpu_packed_avx2.c: 16 weight rows
 * per panel, one 32-bit lane per row, vpdpbusd of 4 unsigned codes (a
 * "chunk" of 4 consecutive k of one row) against the 4 q8_K activation bytes
 * broadcast to every lane. Layouts: cpu_internal.h (pl_q2kx16, pl_q3kx16);
 * activations: pl_q8kx (quantize_row_q8_K plus its bsums).
 *
 * The 2-bit codes stay 2 bits (a decode sweep streams 2.6 / 3.6 bits per
 * weight, as the file). Bit pair j of a code byte is taken out with one AND
 * and no shift, i.e. multiplied by f_j = 4^j (j = 0..3: at most 3 * 64 = 192,
 * still an unsigned byte); every chunk of a sub-block of 16 sits at the same
 * j, so the sub-block's lane sum is f_j times the true one and one exact
 * shift per sub-block and activation row takes f_j back out (instead of a
 * shift per code vector). q3_K adds its high bit with a byte-masked add
 * (the hmask bits of a chunk are the 64-bit mask of its 64 bytes): code
 * u = low + 4 * hbit in 0..7, value u - 4; f_j = 1, 4, 16, 4 (j = 3 is
 * shifted down by 4 so that 7 * f fits a byte).
 *
 * Per super-block and row, exact integers as ggml_vec_dot_q2_K_q8_K /
 * q3_K_q8_K form them:
 *   q2_K: sumi = sum_s sc_s * dot_s,  summ = sum_s m_s * bsums_s
 *         acc += (d * dy) * sumi - (dmin * dy) * summ
 *   q3_K: sumi = sum_s sc_s * (dot_s - 4 * bsums_s)      (dot_s over u)
 *         acc += (d * dy) * sumi
 * The scales (and q2_K's mins) of sub-blocks 2p and 2p + 1 sit in one 32-bit
 * lane as two int16; the two sub-blocks' true lane sums (|dot_s| <= 16 * 7 *
 * 128 < 2^15) are packed the same way, so one vpdpwssd applies both scales.
 * The float steps per super-block are the same operations whatever the
 * number of activation rows of a call: batched == alone bit for bit.
 *
 * Compiled with -mavx2 -mfma -mf16c like every *_avx2.c; the functions carry
 * the AVX-512 target attribute and run only after pl_cpu_has_vnni512().
 */
#include <immintrin.h>
#include <string.h>
#include "backends/cpu/cpu_internal.h"
#include "backends/cpu/cpu_simd_avx2.h"

#define PL_VNNI_K __attribute__((target("avx512f,avx512vl,avx512bw,avx512dq,avx512vnni")))
#define PL_VNNI_KAI static inline __attribute__((always_inline, target("avx512f,avx512vl,avx512bw,avx512dq,avx512vnni")))

typedef int32_t pl_i32u_k __attribute__((aligned(1), may_alias));
PL_VNNI_KAI __m512i pl_bcast4k(const void *p) {
    return _mm512_set1_epi32(*(const pl_i32u_k *)p);   /* an embedded {1to16} broadcast */
}

/* One 64-byte weight vector, loaded once (see pl_ld512 in cpu_packed_avx2.c:
 * without the empty asm the compiler folds the load into each AND). */
PL_VNNI_KAI __m512i pl_ld512_k(const void *p) {
    __m512i v = _mm512_loadu_si512(p);
    __asm__("" : "+v"(v));
    return v;
}

PL_VNNI_KAI __mmask16 pl_panel_mask_k(int64_t p, int64_t N) {
    const int64_t left = N - PL_KQX_ROWS * p;
    return left >= PL_KQX_ROWS ? (__mmask16)0xFFFF : (__mmask16)((1u << left) - 1);
}

/* log2 of f_j, the factor bit pair j's codes carry in the kernels. */
PL_VNNI_KAI int pl_klow_shift(int j, int Q3) { return Q3 ? (j == 3 ? 2 : 2 * j) : 2 * j; }

/* Codes of bit pair j of code vector v, times f_j; q3_K: plus 4 * f_j where
 * the chunk's hmask bit is set. */
PL_VNNI_KAI __m512i pl_klow_codes(__m512i v, int j, const uint64_t *hm, int Q3) {
    if (!Q3) return _mm512_and_si512(v, _mm512_set1_epi8((char)(3 << (2 * j))));
    __m512i w;
    if (j < 3) w = _mm512_and_si512(v, _mm512_set1_epi8((char)(3 << (2 * j))));
    else w = _mm512_and_si512(_mm512_srli_epi16(v, 4), _mm512_set1_epi8(0x0C));
    uint64_t bits;
    memcpy(&bits, hm, 8);
    const int hb = 4 << pl_klow_shift(j, 1);
    return _mm512_mask_add_epi8(w, _cvtu64_mask64(bits), w, _mm512_set1_epi8((char)hb));
}

/* One panel x R activation rows (R = 1..4). The 16 code vectors of a block
 * are t = 4q + c (q = 0..3, c = 0..3): bit pair j of vector t holds chunk c
 * of sub-block s = 4j + q. Per q pair (q0, q0 + 1) and NJ bit pairs, 2 NJ
 * lane sums per row; a pair of sub-blocks (2p, 2p + 1) =
 * (4j + q0, 4j + q0 + 1) then goes through one vpdpwssd. */
PL_VNNI_KAI void pl_klow_panel(int64_t nb, const void *xv, const pl_q8kx *const *y, float *dst, int64_t ldd,
                               __mmask16 mk, const int R, const int Q3) {
    const __m512i lo16 = _mm512_set1_epi32(0xFFFF);
    /* bit pairs per pass over the code vectors: all 4 for one activation
     * row (8 accumulators, each vector loaded once), 2 for several (16
     * accumulators at R = 4, the vectors read twice from L1) */
    const int NJ = R == 1 ? 4 : 2;
    __m512 accf[4];
    PL_UNROLL
    for (int r = 0; r < R; r++) accf[r] = _mm512_setzero_ps();
    for (int64_t b = 0; b < nb; b++) {
        const uint8_t(*qs)[64];
        const uint8_t(*sp)[16][2];
        const uint64_t(*hm)[4] = NULL;
        const uint16_t *dx, *dmx = NULL;
        if (Q3) {
            const pl_q3kx16 *xb = (const pl_q3kx16 *)xv + b;
            qs = xb->qs;
            sp = (const uint8_t(*)[16][2])xb->sc;
            hm = xb->hm;
            dx = xb->d;
        } else {
            const pl_q2kx16 *xb = (const pl_q2kx16 *)xv + b;
            qs = xb->qs;
            sp = xb->sm;
            dx = xb->d;
            dmx = xb->dmin;
        }
        /* sumi: the scaled code sums; sum2: q2_K sum m_s * bsums_s, q3_K sum sc_s * bsums_s */
        __m512i sumi[4], sum2[4];
        PL_UNROLL
        for (int r = 0; r < R; r++) sumi[r] = sum2[r] = _mm512_setzero_si512();
        PL_UNROLL
        for (int qp = 0; qp < 2; qp++) {
            PL_UNROLL
            for (int j0 = 0; j0 < 4; j0 += NJ) {
                __m512i acc[2][4][4];
                PL_UNROLL
                for (int jj = 0; jj < NJ; jj++) {
                    PL_UNROLL
                    for (int r = 0; r < R; r++) acc[0][jj][r] = acc[1][jj][r] = _mm512_setzero_si512();
                }
                PL_UNROLL
                for (int qq = 0; qq < 2; qq++) {
                    const int q = 2 * qp + qq;
                    PL_UNROLL
                    for (int c = 0; c < 4; c++) {
                        const int t = 4 * q + c;
                        const __m512i v = pl_ld512_k(qs[t]);
                        PL_UNROLL
                        for (int jj = 0; jj < NJ; jj++) {
                            const int j = j0 + jj;
                            const __m512i w = pl_klow_codes(v, j, Q3 ? &hm[t][j] : NULL, Q3);
                            PL_UNROLL
                            for (int r = 0; r < R; r++)
                                acc[qq][jj][r] = _mm512_dpbusd_epi32(acc[qq][jj][r], w,
                                                                     pl_bcast4k(y[r][b].b.qs + 16 * (4 * j + q) + 4 * c));
                        }
                    }
                }
                PL_UNROLL
                for (int jj = 0; jj < NJ; jj++) {
                    const int j = j0 + jj, p = 2 * j + qp, sh = pl_klow_shift(j, Q3);
                    const __m256i raw = _mm256_loadu_si256((const __m256i *)sp[p]);
                    /* lane r: (scale of 2p, scale of 2p + 1) as int16 [q2_K: and the mins] */
                    __m512i sc, m;
                    if (Q3) {
                        sc = m = _mm512_cvtepi8_epi16(raw);
                    } else {
                        const __m512i x = _mm512_cvtepu8_epi16(raw);
                        sc = _mm512_and_si512(x, _mm512_set1_epi16(0x0F));
                        m = _mm512_srli_epi16(x, 4);
                    }
                    PL_UNROLL
                    for (int r = 0; r < R; r++) {
                        /* (dot of 2p, dot of 2p + 1) as int16 in one lane: the low one shifted
                         * down by sh (only its low 16 bits are kept), the high one shifted up
                         * by 16 - sh (exact: it is a multiple of 2^sh) */
                        const __m512i lo = _mm512_srli_epi32(acc[0][jj][r], sh);
                        const __m512i hi = _mm512_slli_epi32(acc[1][jj][r], 16 - sh);
                        const __m512i pair = _mm512_ternarylogic_epi32(lo16, lo, hi, 0xCA);   /* lo16 ? lo : hi */
                        sumi[r] = _mm512_dpwssd_epi32(sumi[r], pair, sc);
                        sum2[r] = _mm512_dpwssd_epi32(sum2[r], m, pl_bcast4k(&y[r][b].b.bsums[2 * p]));
                    }
                }
            }
        }
        const __m512 d0 = _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)dx));
        if (Q3) {
            PL_UNROLL
            for (int r = 0; r < R; r++) {
                const __m512i s = _mm512_sub_epi32(sumi[r], _mm512_slli_epi32(sum2[r], 2));
                accf[r] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(s), _mm512_mul_ps(d0, _mm512_set1_ps(y[r][b].b.d)), accf[r]);
            }
        } else {
            const __m512 m0 = _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)dmx));
            PL_UNROLL
            for (int r = 0; r < R; r++) {
                const __m512 dy = _mm512_set1_ps(y[r][b].b.d);
                accf[r] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(sumi[r]), _mm512_mul_ps(d0, dy), accf[r]);
                accf[r] = _mm512_fnmadd_ps(_mm512_cvtepi32_ps(sum2[r]), _mm512_mul_ps(m0, dy), accf[r]);
            }
        }
    }
    PL_UNROLL
    for (int r = 0; r < R; r++) _mm512_mask_storeu_ps(dst + r * ldd, mk, accf[r]);
}

#define PL_KLOW_GEMM(NAME, T, Q3)                                                                              \
    PL_VNNI_K void NAME(int64_t K, const T *w, int64_t p0, int64_t p1, const pl_q8kx *a, size_t as, int64_t c0, \
                        int64_t c1, float *dst, int64_t N) {                                                   \
        const int64_t nb = K / QK_K;                                                                           \
        for (int64_t p = p0; p < p1; p++) {                                                                    \
            const T *x = w + p * nb;                                                                           \
            const __mmask16 mk = pl_panel_mask_k(p, N);                                                        \
            for (int64_t c = c0; c < c1; c += 4) {                                                             \
                const pl_q8kx *y[4];                                                                           \
                const int R = c1 - c < 4 ? (int)(c1 - c) : 4;                                                  \
                for (int i = 0; i < R; i++) y[i] = (const pl_q8kx *)((const char *)a + (c + i) * as);          \
                float *d = dst + c * N + PL_KQX_ROWS * p;                                                      \
                switch (R) {                                                                                   \
                    case 4: pl_klow_panel(nb, x, y, d, N, mk, 4, Q3); break;                                   \
                    case 3: pl_klow_panel(nb, x, y, d, N, mk, 3, Q3); break;                                   \
                    case 2: pl_klow_panel(nb, x, y, d, N, mk, 2, Q3); break;                                   \
                    default: pl_klow_panel(nb, x, y, d, N, mk, 1, Q3); break;                                  \
                }                                                                                              \
            }                                                                                                  \
        }                                                                                                      \
    }

PL_KLOW_GEMM(pl_cpu_gemm_q2kx16_vnni, pl_q2kx16, 0)
PL_KLOW_GEMM(pl_cpu_gemm_q3kx16_vnni, pl_q3kx16, 1)
