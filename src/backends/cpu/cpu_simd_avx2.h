/* Inline AVX2 helpers shared by the cpu backend's *_avx2.c files. Include
 * only from files compiled with -mavx2 -mfma -mf16c. */
#ifndef PL_BACKENDS_CPU_SIMD_AVX2_H
#define PL_BACKENDS_CPU_SIMD_AVX2_H
#include <immintrin.h>

#define PL_AI static inline __attribute__((always_inline))
/* Full unrolling of the short compile-time loops of a tile (over its rows,
 * columns, sub-blocks), so that its accumulator arrays live in registers;
 * -O2 alone leaves them as loops over memory. */
#define PL_UNROLL _Pragma("GCC unroll 16")

PL_AI float pl_hsum8(__m256 v) {
    __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    s = _mm_add_ps(s, _mm_movehl_ps(s, s));
    s = _mm_add_ss(s, _mm_movehdup_ps(s));
    return _mm_cvtss_f32(s);
}

PL_AI float pl_hmax8(__m256 v) {
    __m128 s = _mm_max_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    s = _mm_max_ps(s, _mm_movehl_ps(s, s));
    s = _mm_max_ss(s, _mm_movehdup_ps(s));
    return _mm_cvtss_f32(s);
}

/* The 8 horizontal sums of a[0..7], as one vector (lane i = sum of a[i]). */
PL_AI __m256 pl_hsum8x8(const __m256 a[8]) {
    const __m256 h01 = _mm256_hadd_ps(a[0], a[1]), h23 = _mm256_hadd_ps(a[2], a[3]);
    const __m256 h45 = _mm256_hadd_ps(a[4], a[5]), h67 = _mm256_hadd_ps(a[6], a[7]);
    const __m256 lo4 = _mm256_hadd_ps(h01, h23), hi4 = _mm256_hadd_ps(h45, h67);
    /* lo4 = [a0..a3 low-half sums | a0..a3 high-half sums], likewise hi4 */
    return _mm256_add_ps(_mm256_permute2f128_ps(lo4, hi4, 0x20), _mm256_permute2f128_ps(lo4, hi4, 0x31));
}

/* exp(x) for 8 floats, relative error a few 1e-7 over the float range.
 * x is clamped to [-87.3, 88]: below, the result is ~1e-38 instead of
 * denormal or 0 (harmless in softmax and silu); above, it stays finite.
 * exp(x) = 2^n * exp(r), n = round(x / ln2), |r| <= ln2/2, exp(r) by its
 * degree-7 Taylor polynomial (truncation < 6e-9). */
PL_AI __m256 pl_exp8(__m256 x) {
    x = _mm256_min_ps(_mm256_max_ps(x, _mm256_set1_ps(-87.3f)), _mm256_set1_ps(88.0f));
    const __m256 n = _mm256_round_ps(_mm256_mul_ps(x, _mm256_set1_ps(1.44269504088896341f)),
                                     _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    /* r = x - n*ln2 with ln2 split in a short exact head and a tail */
    __m256 r = _mm256_fnmadd_ps(n, _mm256_set1_ps(0.693359375f), x);
    r = _mm256_fnmadd_ps(n, _mm256_set1_ps(-2.12194440e-4f), r);
    __m256 p = _mm256_set1_ps(1.0f / 5040.0f);
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f / 720.0f));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f / 120.0f));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f / 24.0f));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f / 6.0f));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(0.5f));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f));
    const __m256i e = _mm256_slli_epi32(_mm256_add_epi32(_mm256_cvtps_epi32(n), _mm256_set1_epi32(127)), 23);
    return _mm256_mul_ps(p, _mm256_castsi256_ps(e));
}

#endif
