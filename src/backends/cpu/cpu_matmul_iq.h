/* MATMUL tile kernels of the cpu backend for the "ladder" formats: the IQ
 * codebook types (iq1_s, iq1_m, iq2_xxs, iq2_xs, iq2_s, iq3_xxs, iq3_s,
 * iq4_nl, iq4_xs), the ternary types (tq1_0, tq2_0), and the k-quants the
 * low-bit files mix in (q2_K, q3_K, q5_K).
 *
 * Same contract as the kernels of cpu_internal.h (pl_cpu_mm_kernel): the
 * activations are converted once per matmul by the driver in cpu_matmul.c
 * into the format llama.cpp's vec_dot_type names for the weight type (q8_K
 * for all of these but iq4_nl, which takes q8_0), then every weight row is
 * dotted with them in integer arithmetic, as llama.cpp's
 * ggml_vec_dot_<type>_q8_K does, so the results land close to llama.cpp's.
 *
 * pl_cpu_mm_type_get() (cpu_matmul.c) consults its own tables first, then
 * pl_cpu_mm_type_get_ladder(), then its generic decode-to-f32 fallback; so a
 * type given an optimized kernel there shadows the one here.
 */
#ifndef PL_BACKENDS_CPU_MATMUL_IQ_H
#define PL_BACKENDS_CPU_MATMUL_IQ_H
#include "backends/cpu/cpu_internal.h"

/* The ladder implementation for a weight dtype on this CPU (AVX2 when
 * available), or NULL if it is not one of the types above. */
const pl_cpu_mm_type *pl_cpu_mm_type_get_ladder(pl_dtype wtype);
/* The portable implementation, whatever the CPU (tests compare the two). */
const pl_cpu_mm_type *pl_cpu_mm_type_get_ladder_portable(pl_dtype wtype);

#define PL_LADDER_MM_TYPES(X) \
    X(q2_K) X(q3_K) X(q5_K) X(iq2_xxs) X(iq2_xs) X(iq2_s) X(iq3_xxs) X(iq3_s) \
    X(iq1_s) X(iq1_m) X(iq4_nl) X(iq4_xs) X(tq1_0) X(tq2_0)

#define PL_LADDER_DECL_(name)                                                                                 \
    void pl_cpu_mm_lad_##name(int64_t K, const void *w, size_t ws, int nr, const void *a, size_t as, int nc, \
                              float *d, size_t ds);
PL_LADDER_MM_TYPES(PL_LADDER_DECL_)
#undef PL_LADDER_DECL_

#if PL_CPU_HAVE_AVX2_BUILD
#define PL_LADDER_DECL_AVX2_(name)                                                                                 \
    void pl_cpu_mm_lad_##name##_avx2(int64_t K, const void *w, size_t ws, int nr, const void *a, size_t as, int nc, \
                                     float *d, size_t ds);
PL_LADDER_MM_TYPES(PL_LADDER_DECL_AVX2_)
#undef PL_LADDER_DECL_AVX2_

/* AVX-512 tiles (BW / VL / VBMI / BITALG + BMI2) for the IQ2 / IQ1 rungs and q5_K (their output matrix), up to 8 activation rows
 * a tile, bit-identical to the AVX2 ones (see cpu_matmul_iq_avx2.c). pl_cpu_mm_type_get_ladder
 * picks them where pl_cpu_lad5_supported() and the switch PL_CPU_IQ512 is not "0". */
#define PL_LADDER_MM_TYPES_512(X) X(iq2_xxs) X(iq2_xs) X(iq2_s) X(iq1_s) X(iq1_m) X(q5_K)
#define PL_LADDER_DECL_512_(name)                                                                                    \
    void pl_cpu_mm_lad_##name##_avx512(int64_t K, const void *w, size_t ws, int nr, const void *a, size_t as, int nc, \
                                       float *d, size_t ds);
PL_LADDER_MM_TYPES_512(PL_LADDER_DECL_512_)
#undef PL_LADDER_DECL_512_
bool pl_cpu_lad5_supported(void);
#endif
/* The AVX2 implementation even where AVX-512 tiles would be picked (NULL without AVX2; tests
 * compare the two bit for bit). */
const pl_cpu_mm_type *pl_cpu_mm_type_get_ladder_avx2(pl_dtype wtype);

#endif
