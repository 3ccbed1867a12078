/* AVX2 versions of the cpu backend's element-wise helpers (see cpu_ops.c for
 * the portable ones, which define the results these must reproduce). */
#include <math.h>
#include "backends/cpu/cpu_internal.h"
#include "backends/cpu/cpu_simd_avx2.h"
#include "core/fp16.h"

void pl_cpu_vec_f16_to_f32_avx2(const uint16_t *x, float *y, int64_t n) {
    int64_t i = 0;
    for (; i + 8 <= n; i += 8) _mm256_storeu_ps(y + i, _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(x + i))));
    for (; i < n; i++) y[i] = _cvtsh_ss(x[i]);
}

void pl_cpu_vec_f32_to_f16_avx2(const float *x, uint16_t *y, int64_t n) {
    int64_t i = 0;
    for (; i + 8 <= n; i += 8)
        _mm_storeu_si128((__m128i *)(y + i), _mm256_cvtps_ph(_mm256_loadu_ps(x + i), _MM_FROUND_TO_NEAREST_INT));
    for (; i < n; i++) y[i] = pl_f32_to_f16(x[i]);
}

void pl_cpu_vec_bf16_to_f32_avx2(const uint16_t *x, float *y, int64_t n) {
    int64_t i = 0;
    for (; i + 8 <= n; i += 8) {
        const __m256i w = _mm256_cvtepu16_epi32(_mm_loadu_si128((const __m128i *)(x + i)));
        _mm256_storeu_ps(y + i, _mm256_castsi256_ps(_mm256_slli_epi32(w, 16)));
    }
    for (; i < n; i++) y[i] = pl_bf16_to_f32(x[i]);
}

/* Sum of float squares (each square rounded to float, as GGML does), added
 * up in double. */
double pl_cpu_sumsq_avx2(const float *x, int64_t n) {
    __m256d a0 = _mm256_setzero_pd(), a1 = _mm256_setzero_pd();
    int64_t i = 0;
    for (; i + 8 <= n; i += 8) {
        const __m256 v = _mm256_loadu_ps(x + i);
        const __m256 sq = _mm256_mul_ps(v, v);
        a0 = _mm256_add_pd(a0, _mm256_cvtps_pd(_mm256_castps256_ps128(sq)));
        a1 = _mm256_add_pd(a1, _mm256_cvtps_pd(_mm256_extractf128_ps(sq, 1)));
    }
    a0 = _mm256_add_pd(a0, a1);
    __m128d s = _mm_add_pd(_mm256_castpd256_pd128(a0), _mm256_extractf128_pd(a0, 1));
    double sum = _mm_cvtsd_f64(_mm_add_sd(s, _mm_unpackhi_pd(s, s)));
    for (; i < n; i++) sum += (double)(x[i] * x[i]);
    return sum;
}

/* y = (x * s) * w, two roundings like the scalar definition. */
void pl_cpu_scale_mul_avx2(const float *x, float s, const float *w, float *y, int64_t n) {
    const __m256 vs = _mm256_set1_ps(s);
    int64_t i = 0;
    for (; i + 8 <= n; i += 8)
        _mm256_storeu_ps(y + i, _mm256_mul_ps(_mm256_mul_ps(_mm256_loadu_ps(x + i), vs), _mm256_loadu_ps(w + i)));
    for (; i < n; i++) y[i] = (x[i] * s) * w[i];
}

void pl_cpu_add_avx2(const float *a, const float *b, float *y, int64_t n) {
    int64_t i = 0;
    for (; i + 8 <= n; i += 8) _mm256_storeu_ps(y + i, _mm256_add_ps(_mm256_loadu_ps(a + i), _mm256_loadu_ps(b + i)));
    for (; i < n; i++) y[i] = a[i] + b[i];
}

/* y = g / (1 + exp(-g)) * u */
void pl_cpu_swiglu_avx2(const float *g, const float *u, float *y, int64_t n) {
    const __m256 one = _mm256_set1_ps(1.0f);
    const __m256 neg = _mm256_set1_ps(-0.0f);
    int64_t i = 0;
    for (; i + 8 <= n; i += 8) {
        const __m256 x = _mm256_loadu_ps(g + i);
        const __m256 e = pl_exp8(_mm256_xor_ps(x, neg));
        _mm256_storeu_ps(y + i, _mm256_mul_ps(_mm256_div_ps(x, _mm256_add_ps(one, e)), _mm256_loadu_ps(u + i)));
    }
    for (; i < n; i++) y[i] = g[i] / (1.0f + expf(-g[i])) * u[i];
}

/* pl_hadamard_rows (quant/hadamard.c) eight lanes at a time, bit-identical:
 * the same scale-first rounding and the same u + v / u - v per element (float
 * addition commutes exactly). Spans 1, 2 and 4 are in-register swaps within
 * one vector (lanes that take u - v read u from the swapped copy); spans of 8
 * and more are whole-vector butterflies. n is a multiple of 8. */
void pl_cpu_hadamard_rows_avx2(float *x, int64_t len, int n) {
    const __m256 scale = _mm256_set1_ps(1.0f / sqrtf((float)n));
    for (int64_t c = 0; c + n <= len; c += n) {
        float *r = x + c;
        for (int j = 0; j < n; j += 8) {
            __m256 v = _mm256_mul_ps(_mm256_loadu_ps(r + j), scale);
            __m256 s = _mm256_permute_ps(v, 0xB1);                     /* span 1: lanes 1 0 3 2 */
            v = _mm256_blend_ps(_mm256_add_ps(v, s), _mm256_sub_ps(s, v), 0xAA);
            s = _mm256_permute_ps(v, 0x4E);                            /* span 2: lanes 2 3 0 1 */
            v = _mm256_blend_ps(_mm256_add_ps(v, s), _mm256_sub_ps(s, v), 0xCC);
            s = _mm256_permute2f128_ps(v, v, 1);                       /* span 4: the halves swapped */
            v = _mm256_blend_ps(_mm256_add_ps(v, s), _mm256_sub_ps(s, v), 0xF0);
            _mm256_storeu_ps(r + j, v);
        }
        for (int span = 8; span < n; span <<= 1)
            for (int i = 0; i < n; i += 2 * span)
                for (int j = i; j < i + span; j += 8) {
                    const __m256 u = _mm256_loadu_ps(r + j), w = _mm256_loadu_ps(r + j + span);
                    _mm256_storeu_ps(r + j, _mm256_add_ps(u, w));
                    _mm256_storeu_ps(r + j + span, _mm256_sub_ps(u, w));
                }
    }
}
