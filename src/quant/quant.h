/* Block formats: decoding rows of every weight type to f32 (the reference
 * definition, bit-compatible with GGML), and quantizing activation rows to the
 * 8-bit formats the optimized dot products consume. Block structs live in
 * quant/blocks.h. */
#ifndef PL_QUANT_QUANT_H
#define PL_QUANT_QUANT_H
#include <stdbool.h>
#include <stdint.h>
#include "kernels/dtype.h"

/* True if pl_dequantize_row can decode this dtype. */
bool pl_can_dequantize(pl_dtype t);
/* Decodes n elements (a multiple of the block size) from src into dst. */
void pl_dequantize_row(pl_dtype t, const void *src, float *dst, int64_t n);

/* Activation quantizers, bit-identical with GGML's reference versions
 * (quantize_row_q8_0_ref / quantize_row_q8_K_ref). n is a multiple of 32 / 256. */
void pl_quantize_row_q8_0(const float *x, void *dst, int64_t n);
void pl_quantize_row_q8_K(const float *x, void *dst, int64_t n);

#endif
