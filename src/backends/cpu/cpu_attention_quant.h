/* The quantized-cache attention's inner steps (cpu_attention_quant_avx2.c;
 * the driver is in cpu_attention.c, "quantized caches"). */
#ifndef PL_CPU_ATTENTION_QUANT_H
#define PL_CPU_ATTENTION_QUANT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include "kernels/dtype.h"

/* The V step of R query rows over n cache positions, AVX-512: each V row
 * (dtype t: q8_0, q4_0 or f16; row j at v + j * vs, hd elements) is decoded
 * once into registers and added to every row's accumulator acc[r*hd..]:
 * E[r*ldE + j] with the sign bit set marks a new maximum (acc = acc * -E + v),
 * else acc += E * v -- pl_cpu_attq_axpy_avx2's roundings, element for
 * element. hd % 16 == 0 and hd <= 128. Returns false (nothing done) for
 * other shapes and dtypes. */
bool pl_cpu_attq_vstep_avx512(int R, const float *E, int64_t ldE, int64_t n, pl_dtype t, const char *v, size_t vs,
                              int64_t hd, float *acc);

#endif
