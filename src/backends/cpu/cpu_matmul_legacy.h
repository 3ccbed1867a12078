/* MATMUL tile kernels of the cpu backend for the legacy 32-element weight
 * types q4_0, q4_1, q5_0, q5_1 (common in real GGUF files: the 0.5B model of
 * docs/models.md is mostly q5_0).
 *
 * Same contract as the kernels of cpu_internal.h (pl_cpu_mm_kernel). The
 * activations are converted once per matmul into the format llama.cpp's
 * vec_dot_type names for the weight type: q8_0 for q4_0 / q5_0, q8_1 for
 * q4_1 / q5_1 (q8_0 plus s = d * sum(q8), which carries the weight's
 * offset m). Per 32-element block, as ggml_vec_dot_<type>_q8_<0|1>:
 *
 *     q4_0, q5_0:  dx * dy * sum(w * q8)            w = q - 8 / q - 16
 *     q4_1, q5_1:  dx * dy * sum(q * q8) + m * s    q in 0..15 / 0..31
 *
 * the integer sums exact, so the results land on llama.cpp's up to the
 * order of the float additions.
 *
 * pl_cpu_mm_type_get() (cpu_matmul.c) consults its own table, then this one,
 * then the ladder's, then its generic decode-to-f32 fallback.
 */
#ifndef PL_BACKENDS_CPU_MATMUL_LEGACY_H
#define PL_BACKENDS_CPU_MATMUL_LEGACY_H
#include "backends/cpu/cpu_internal.h"

/* The legacy implementation for a weight dtype on this CPU (AVX2 when
 * available), or NULL if it is not one of q4_0, q4_1, q5_0, q5_1. */
const pl_cpu_mm_type *pl_cpu_mm_type_get_legacy(pl_dtype wtype);
/* The portable implementation, whatever the CPU (tests compare the two). */
const pl_cpu_mm_type *pl_cpu_mm_type_get_legacy_portable(pl_dtype wtype);

/* Activations for q4_1 / q5_1: bit-exact with llama.cpp's x86
 * quantize_row_q8_1 (q8_0's codes and d; s = f16(d * sum of the codes)). */
void pl_cpu_quantize_q8_1(const float *x, void *dst, int64_t K);

#define PL_LEGACY_MM_TYPES(X) X(q4_0) X(q4_1) X(q5_0) X(q5_1)

#define PL_LEGACY_DECL_(name)                                                                                 \
    void pl_cpu_mm_##name(int64_t K, const void *w, size_t ws, int nr, const void *a, size_t as, int nc, \
                          float *d, size_t ds);
PL_LEGACY_MM_TYPES(PL_LEGACY_DECL_)
#undef PL_LEGACY_DECL_

#if PL_CPU_HAVE_AVX2_BUILD
void pl_cpu_quantize_q8_1_avx2(const float *x, void *dst, int64_t K);
#define PL_LEGACY_DECL_AVX2_(name)                                                                                 \
    void pl_cpu_mm_##name##_avx2(int64_t K, const void *w, size_t ws, int nr, const void *a, size_t as, int nc, \
                                 float *d, size_t ds);
PL_LEGACY_MM_TYPES(PL_LEGACY_DECL_AVX2_)
#undef PL_LEGACY_DECL_AVX2_
#endif

#endif
