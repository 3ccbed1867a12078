/* The quantized-cache attention's V step on AVX-512 (see
 * cpu_attention_quant.h). Compiled with the AVX2 flags (an _avx2.c file);
 * the AVX-512 code is enabled per function and only called when the CPU
 * has it (pl_cpu_has_vnni512, checked by the caller).
 *
 * Why: the scalar path decoded each V row into memory, then per query row
 * loaded and stored the f32 accumulator (hd floats) for every position.
 * Here two query rows' accumulators (hd <= 128: 2 x 8 zmm) stay in
 * registers over a tile of positions and each V row slice is decoded
 * straight into registers once for both. */
#include <immintrin.h>
#include <math.h>
#include "backends/cpu/cpu_attention_quant.h"
#include "core/fp16.h"
#include "quant/blocks.h"

#define PL_Q512_AI static inline __attribute__((always_inline, target("avx512f,avx512vl,avx512bw,avx512dq,f16c")))
#define PL_Q512 __attribute__((target("avx512f,avx512vl,avx512bw,avx512dq,f16c")))
#define PL_VPF 8   /* V rows prefetched ahead */

/* V row slice -> DB vectors of 16 floats (d * q exactly, as the scalar decoders). */
PL_Q512_AI void pl_attq_vload(pl_dtype t, const char *src, const int DB, __m512 *x) {
    if (t == PL_Q8_0) {
        const block_q8_0 *b = (const block_q8_0 *)src;
        for (int k = 0; k < DB; k++) {
            const block_q8_0 *bb = b + k / 2;
            const __m512 d = _mm512_set1_ps(pl_f16_to_f32(bb->d));
            const __m128i q = _mm_loadu_si128((const __m128i *)(bb->qs + 16 * (k & 1)));
            x[k] = _mm512_mul_ps(d, _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(q)));
        }
    } else if (t == PL_Q4_0) {
        const block_q4_0 *b = (const block_q4_0 *)src;
        const __m128i lo = _mm_set1_epi8(0x0f), eight = _mm_set1_epi8(8);
        for (int k = 0; k < DB; k += 2) {
            const block_q4_0 *bb = b + k / 2;
            const __m512 d = _mm512_set1_ps(pl_f16_to_f32(bb->d));
            const __m128i q = _mm_loadu_si128((const __m128i *)bb->qs);
            /* elements 0..15: low nibbles, 16..31: high nibbles, each minus 8 */
            const __m128i q0 = _mm_sub_epi8(_mm_and_si128(q, lo), eight);
            const __m128i q1 = _mm_sub_epi8(_mm_and_si128(_mm_srli_epi16(q, 4), lo), eight);
            x[k] = _mm512_mul_ps(d, _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(q0)));
            x[k + 1] = _mm512_mul_ps(d, _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(q1)));
        }
    } else {   /* f16 */
        for (int k = 0; k < DB; k++) x[k] = _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)(src + 32 * k)));
    }
}

/* acc = acc * ms + x (a new maximum, w's sign bit set, ms = -w) or
 * acc += w * x: pl_cpu_attq_axpy_avx2's roundings. */
PL_Q512_AI void pl_attq_vupd(__m512 *A, const __m512 *x, float w, const int DB) {
    if (signbit(w)) {
        const __m512 ms = _mm512_set1_ps(-w);
        for (int k = 0; k < DB; k++) A[k] = _mm512_add_ps(_mm512_mul_ps(A[k], ms), x[k]);
    } else {
        const __m512 vw = _mm512_set1_ps(w);
        for (int k = 0; k < DB; k++) A[k] = _mm512_fmadd_ps(x[k], vw, A[k]);
    }
}

/* One or two query rows (e1 / a1 NULL: one), DB = hd / 16. */
PL_Q512_AI void pl_attq_vstep2(const float *e0, const float *e1, int64_t n, pl_dtype t, const char *v, size_t vs,
                               const int DB, float *a0, float *a1) {
    __m512 A0[8], A1[8], x[8];
    for (int k = 0; k < DB; k++) {
        A0[k] = _mm512_loadu_ps(a0 + 16 * k);
        A1[k] = a1 ? _mm512_loadu_ps(a1 + 16 * k) : _mm512_setzero_ps();
    }
    for (int64_t j = 0; j < n; j++) {
        if (j + PL_VPF < n) _mm_prefetch(v + (j + PL_VPF) * vs, _MM_HINT_T0);
        pl_attq_vload(t, v + j * vs, DB, x);
        pl_attq_vupd(A0, x, e0[j], DB);
        if (a1) pl_attq_vupd(A1, x, e1[j], DB);
    }
    for (int k = 0; k < DB; k++) {
        _mm512_storeu_ps(a0 + 16 * k, A0[k]);
        if (a1) _mm512_storeu_ps(a1 + 16 * k, A1[k]);
    }
}

#define PL_VSTEP_DB(DB)                                                                                   \
    static PL_Q512 void pl_attq_vstep_db##DB(const float *e0, const float *e1, int64_t n, pl_dtype t,    \
                                             const char *v, size_t vs, float *a0, float *a1) {           \
        pl_attq_vstep2(e0, e1, n, t, v, vs, DB, a0, a1);                                                 \
    }
PL_VSTEP_DB(2)
PL_VSTEP_DB(4)
PL_VSTEP_DB(6)
PL_VSTEP_DB(8)

PL_Q512 bool pl_cpu_attq_vstep_avx512(int R, const float *E, int64_t ldE, int64_t n, pl_dtype t, const char *v,
                                      size_t vs, int64_t hd, float *acc) {
    if ((t != PL_Q8_0 && t != PL_Q4_0 && t != PL_F16) || hd % 32 || hd > 128 || hd < 32) return false;
    void (*fn)(const float *, const float *, int64_t, pl_dtype, const char *, size_t, float *, float *) =
        hd == 32 ? pl_attq_vstep_db2 : hd == 64 ? pl_attq_vstep_db4 : hd == 96 ? pl_attq_vstep_db6 : pl_attq_vstep_db8;
    int r = 0;
    for (; r + 2 <= R; r += 2) fn(E + r * ldE, E + (r + 1) * ldE, n, t, v, vs, acc + r * hd, acc + (r + 1) * hd);
    if (r < R) fn(E + r * ldE, NULL, n, t, v, vs, acc + r * hd, NULL);
    return true;
}
