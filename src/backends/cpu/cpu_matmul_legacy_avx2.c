/* AVX2 MATMUL tile kernels for q4_0, q4_1, q5_0, q5_1 (see
 * cpu_matmul_legacy.h) and the AVX2 q8_1 activation converter. Compiled
 * with -mavx2 -mfma -mf16c; only called after pl_cpu_has_avx2().
 *
 * The recipe of llama.cpp's x86 ggml_vec_dot_<type>_q8_<0|1>: a block's 32
 * codes are unpacked into one 256-bit vector (nibbles: low half elements
 * 0..15, high half 16..31; q5: bit j of qh spread to byte j), then
 *   - _0 types, signed codes: |w| (unsigned) x sign(w) * q8 (signed) through
 *     _mm256_maddubs_epi16, pairs summed to int32 by _mm256_madd_epi16;
 *   - _1 types, unsigned codes: q x q8 through maddubs directly, and the
 *     offset term m * s added once per block.
 * The int32 sum is converted and multiplied by dx * dy into a float
 * accumulator per activation row. A tile decodes each weight block once and
 * feeds it to up to 4 activation rows.
 */
#include <immintrin.h>
#include <string.h>
#include "backends/cpu/cpu_internal.h"
#include "backends/cpu/cpu_matmul_legacy.h"
#include "backends/cpu/cpu_simd_avx2.h"
#include "core/fp16.h"

PL_AI float pl_h2f_l(uint16_t h) { return _cvtsh_ss(h); }

/* Same result as llama.cpp's x86 quantize_row_q8_1 (and as the portable
 * pl_cpu_quantize_q8_1): q8_0's codes and scale, s = f16(d * sum). */
void pl_cpu_quantize_q8_1_avx2(const float *x, void *dst, int64_t K) {
    block_q8_1 *y = dst;
    const __m256 sign = _mm256_set1_ps(-0.0f);
    const __m256i perm = _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7);
    for (int64_t i = 0; i < K / QK8_1; i++, x += QK8_1) {
        __m256 v[4];
        PL_UNROLL
        for (int k = 0; k < 4; k++) v[k] = _mm256_loadu_ps(x + 8 * k);
        __m256 m = _mm256_max_ps(_mm256_max_ps(_mm256_andnot_ps(sign, v[0]), _mm256_andnot_ps(sign, v[1])),
                                 _mm256_max_ps(_mm256_andnot_ps(sign, v[2]), _mm256_andnot_ps(sign, v[3])));
        const float amax = pl_hmax8(m);
        const float d = amax / 127.f;
        y[i].d = pl_f32_to_f16(d);
        const __m256 id = _mm256_set1_ps(amax != 0.0f ? 127.f / amax : 0.0f);
        __m256i q[4];
        PL_UNROLL
        for (int k = 0; k < 4; k++)
            q[k] = _mm256_cvtps_epi32(_mm256_round_ps(_mm256_mul_ps(v[k], id),
                                                      _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
        /* the sum of the int32 codes (before packing: |code| <= 127, so
         * packing does not saturate and the sums agree) */
        __m256i s8 = _mm256_add_epi32(_mm256_add_epi32(q[0], q[1]), _mm256_add_epi32(q[2], q[3]));
        __m128i s4 = _mm_add_epi32(_mm256_castsi256_si128(s8), _mm256_extracti128_si256(s8, 1));
        s4 = _mm_add_epi32(s4, _mm_shuffle_epi32(s4, _MM_SHUFFLE(1, 0, 3, 2)));
        s4 = _mm_add_epi32(s4, _mm_shuffle_epi32(s4, _MM_SHUFFLE(2, 3, 0, 1)));
        y[i].s = pl_f32_to_f16(d * (float)_mm_cvtsi128_si32(s4));
        __m256i p = _mm256_packs_epi16(_mm256_packs_epi32(q[0], q[1]), _mm256_packs_epi32(q[2], q[3]));
        _mm256_storeu_si256((__m256i *)y[i].qs, _mm256_permutevar8x32_epi32(p, perm));
    }
}

/* The 32 nibbles of qs as bytes 0..31 (low nibbles first). */
PL_AI __m256i pl_nibbles32_avx2(const uint8_t *qs) {
    const __m128i t = _mm_loadu_si128((const __m128i *)qs);
    const __m256i b = _mm256_inserti128_si256(_mm256_castsi128_si256(t), _mm_srli_epi16(t, 4), 1);
    return _mm256_and_si256(b, _mm256_set1_epi8(0x0F));
}

/* Byte j = 0xFF where bit j of the little-endian word qh is set, else 0. */
PL_AI __m256i pl_bits32_avx2(const uint8_t *qh) {
    uint32_t h;
    memcpy(&h, qh, 4);
    const __m256i shuf = _mm256_set_epi64x(0x0303030303030303, 0x0202020202020202, 0x0101010101010101, 0);
    __m256i b = _mm256_shuffle_epi8(_mm256_set1_epi32((int)h), shuf);
    b = _mm256_or_si256(b, _mm256_set1_epi64x(0x7fbfdfeff7fbfdfe));
    return _mm256_cmpeq_epi8(b, _mm256_set1_epi64x(-1));
}

/* Codes of one block as a vector: signed (q - 8, q - 16) for the _0 types,
 * unsigned for the _1 types. */
PL_AI __m256i pl_codes_q4_0(const block_q4_0 *x) {
    return _mm256_sub_epi8(pl_nibbles32_avx2(x->qs), _mm256_set1_epi8(8));
}
PL_AI __m256i pl_codes_q4_1(const block_q4_1 *x) { return pl_nibbles32_avx2(x->qs); }
/* q5_0: with bit 4 clear the code is q - 16 = q | 0xF0 (as int8), with it
 * set q + 16 - 16 = q: or in 0xF0 where the bit is clear. */
PL_AI __m256i pl_codes_q5_0(const block_q5_0 *x) {
    const __m256i hi = _mm256_andnot_si256(pl_bits32_avx2(x->qh), _mm256_set1_epi8((char)0xF0));
    return _mm256_or_si256(pl_nibbles32_avx2(x->qs), hi);
}
PL_AI __m256i pl_codes_q5_1(const block_q5_1 *x) {
    const __m256i hi = _mm256_and_si256(pl_bits32_avx2(x->qh), _mm256_set1_epi8(0x10));
    return _mm256_or_si256(pl_nibbles32_avx2(x->qs), hi);
}

/* A tile of a _0 type: one weight row x NC q8_0 rows. Two accumulators per
 * activation row (even and odd blocks): with one, every block's fmadd waits
 * for the previous one's (4 cycles a block in decode). */
#define PL_STEP0(NAME, I, A)                                                                                        \
    do {                                                                                                      \
        const __m256i wq = pl_codes_##NAME(&x[I]);                                                            \
        const __m256i aw = _mm256_sign_epi8(wq, wq);                                                          \
        const float dx = pl_h2f_l(x[I].d);                                                                    \
        PL_UNROLL                                                                                             \
        for (int c = 0; c < NC; c++) {                                                                        \
            const __m256i sy = _mm256_sign_epi8(_mm256_loadu_si256((const __m256i *)y[c][I].qs), wq);         \
            const __m256i s = _mm256_madd_epi16(_mm256_maddubs_epi16(aw, sy), ones);                          \
            A[c] = _mm256_fmadd_ps(_mm256_set1_ps(dx * pl_h2f_l(y[c][I].d)), _mm256_cvtepi32_ps(s), A[c]);    \
        }                                                                                                     \
    } while (0)
#define PL_TILE0_AVX2(NAME, BLOCK)                                                                            \
    PL_AI void pl_tile_##NAME(int64_t nb, const BLOCK *x, const char *a, size_t as, float *d, size_t ds,      \
                              const int NC) {                                                                 \
        const __m256i ones = _mm256_set1_epi16(1);                                                            \
        __m256 acc0[4], acc1[4];                                                                              \
        const block_q8_0 *y[4];                                                                               \
        PL_UNROLL                                                                                             \
        for (int c = 0; c < NC; c++) {                                                                        \
            acc0[c] = acc1[c] = _mm256_setzero_ps();                                                          \
            y[c] = (const block_q8_0 *)(a + c * as);                                                          \
        }                                                                                                     \
        int64_t i = 0;                                                                                        \
        for (; i + 1 < nb; i += 2) {                                                                          \
            PL_STEP0(NAME, i, acc0);                                                                                \
            PL_STEP0(NAME, i + 1, acc1);                                                                            \
        }                                                                                                     \
        if (i < nb) PL_STEP0(NAME, i, acc0);                                                                        \
        PL_UNROLL                                                                                             \
        for (int c = 0; c < NC; c++) d[c * ds] = pl_hsum8(_mm256_add_ps(acc0[c], acc1[c]));                   \
    }

/* A tile of a _1 type: one weight row x NC q8_1 rows; the m * s terms are
 * summed apart, as llama.cpp does (summs), and added at the end. One
 * accumulator, blocks in order: exactly llama.cpp's float steps. (Two, as
 * the _0 tiles have, were ~1.3x faster in decode but tripled the mean logit
 * distance to llama.cpp's goldens on the tiny model, 0.05 -> 0.15: the
 * random-weight model amplifies last-bit differences over 24 steps.) */
#define PL_STEP1(NAME, I, A)                                                                                        \
    do {                                                                                                      \
        const __m256i wq = pl_codes_##NAME(&x[I]);                                                            \
        const float dx = pl_h2f_l(x[I].d), mx = pl_h2f_l(x[I].m);                                             \
        PL_UNROLL                                                                                             \
        for (int c = 0; c < NC; c++) {                                                                        \
            const __m256i qy = _mm256_loadu_si256((const __m256i *)y[c][I].qs);                               \
            const __m256i s = _mm256_madd_epi16(_mm256_maddubs_epi16(wq, qy), ones);                          \
            A[c] = _mm256_fmadd_ps(_mm256_set1_ps(dx * pl_h2f_l(y[c][I].d)), _mm256_cvtepi32_ps(s), A[c]);    \
            summs[c] += mx * pl_h2f_l(y[c][I].s);                                                             \
        }                                                                                                     \
    } while (0)
#define PL_TILE1_AVX2(NAME, BLOCK)                                                                            \
    PL_AI void pl_tile_##NAME(int64_t nb, const BLOCK *x, const char *a, size_t as, float *d, size_t ds,      \
                              const int NC) {                                                                 \
        const __m256i ones = _mm256_set1_epi16(1);                                                            \
        __m256 acc0[4];                                                                                       \
        float summs[4];                                                                                       \
        const block_q8_1 *y[4];                                                                               \
        PL_UNROLL                                                                                             \
        for (int c = 0; c < NC; c++) {                                                                        \
            acc0[c] = _mm256_setzero_ps();                                                                    \
            summs[c] = 0.0f;                                                                                  \
            y[c] = (const block_q8_1 *)(a + c * as);                                                          \
        }                                                                                                     \
        int64_t i = 0;                                                                                        \
        for (; i < nb; i++) PL_STEP1(NAME, i, acc0);                                                          \
        PL_UNROLL                                                                                             \
        for (int c = 0; c < NC; c++) d[c * ds] = pl_hsum8(acc0[c]) + summs[c];                                \
    }

#define PL_MM_AVX2(NAME, BLOCK)                                                                               \
    void pl_cpu_mm_##NAME##_avx2(int64_t K, const void *w, size_t ws, int nr, const void *a, size_t as,       \
                                 int nc, float *d, size_t ds) {                                               \
        const int64_t nb = K / 32;                                                                            \
        for (int r = 0; r < nr; r++) {                                                                        \
            const BLOCK *x = (const BLOCK *)((const char *)w + r * ws);                                       \
            switch (nc) {                                                                                     \
                case 1: pl_tile_##NAME(nb, x, (const char *)a, as, d + r, ds, 1); break;                      \
                case 2: pl_tile_##NAME(nb, x, (const char *)a, as, d + r, ds, 2); break;                      \
                case 3: pl_tile_##NAME(nb, x, (const char *)a, as, d + r, ds, 3); break;                      \
                default: pl_tile_##NAME(nb, x, (const char *)a, as, d + r, ds, 4); break;                     \
            }                                                                                                 \
        }                                                                                                     \
    }

PL_TILE0_AVX2(q4_0, block_q4_0)
PL_TILE0_AVX2(q5_0, block_q5_0)
PL_TILE1_AVX2(q4_1, block_q4_1)
PL_TILE1_AVX2(q5_1, block_q5_1)
PL_MM_AVX2(q4_0, block_q4_0)
PL_MM_AVX2(q5_0, block_q5_0)
PL_MM_AVX2(q4_1, block_q4_1)
PL_MM_AVX2(q5_1, block_q5_1)
