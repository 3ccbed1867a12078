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
/* Decodes n elements (a multiple of the block size) from src into dst. An
 * unsupported dtype or a bad n writes nothing (check pl_can_dequantize). */
void pl_dequantize_row(pl_dtype t, const void *src, float *dst, int64_t n);

/* Activation quantizers, bit-identical with GGML's reference versions
 * (quantize_row_q8_0_ref / quantize_row_q8_K_ref). n is a multiple of 32 / 256. */
void pl_quantize_row_q8_0(const float *x, void *dst, int64_t n);
void pl_quantize_row_q8_K(const float *x, void *dst, int64_t n);

/* ---- the type lists (added by the ref/quant work) --------------------------
 *
 * Every dtype pl_dequantize_row decodes, with its row decoder
 *     void fn(const void *src, float *dst, int64_t n)   (n a multiple of the block size).
 * This list is the single source of truth: pl_can_dequantize, pl_dequantize_row,
 * the weight-dtype masks of the GET_ROWS / MATMUL schemas and the ref
 * backend's GET_ROWS / MATMUL kernel tables are all generated from it. To add a
 * type, write its decoder (in a .c file under src/quant) and add one X() line here.
 * Activation-only formats (q8_1, q8_K) are deliberately not in it: they are
 * never weights. */
#define PL_DEQUANT_TYPES(X)               \
    X(PL_F32, pl_dequantize_row_f32)       \
    X(PL_F16, pl_dequantize_row_f16)       \
    X(PL_BF16, pl_dequantize_row_bf16)     \
    X(PL_Q4_0, pl_dequantize_row_q4_0)     \
    X(PL_Q4_1, pl_dequantize_row_q4_1)     \
    X(PL_Q5_0, pl_dequantize_row_q5_0)     \
    X(PL_Q5_1, pl_dequantize_row_q5_1)     \
    X(PL_Q8_0, pl_dequantize_row_q8_0)     \
    X(PL_Q2_K, pl_dequantize_row_q2_K)     \
    X(PL_Q3_K, pl_dequantize_row_q3_K)     \
    X(PL_Q4_K, pl_dequantize_row_q4_K)     \
    X(PL_Q5_K, pl_dequantize_row_q5_K)     \
    X(PL_Q6_K, pl_dequantize_row_q6_K)     \
    X(PL_IQ2_XXS, pl_dequantize_row_iq2_xxs) \
    X(PL_IQ2_XS, pl_dequantize_row_iq2_xs) \
    X(PL_IQ2_S, pl_dequantize_row_iq2_s)   \
    X(PL_IQ3_XXS, pl_dequantize_row_iq3_xxs) \
    X(PL_IQ3_S, pl_dequantize_row_iq3_s)   \
    X(PL_IQ1_S, pl_dequantize_row_iq1_s)   \
    X(PL_IQ1_M, pl_dequantize_row_iq1_m)   \
    X(PL_IQ4_NL, pl_dequantize_row_iq4_nl) \
    X(PL_IQ4_XS, pl_dequantize_row_iq4_xs) \
    X(PL_TQ1_0, pl_dequantize_row_tq1_0)   \
    X(PL_TQ2_0, pl_dequantize_row_tq2_0)
/* (The IQ / TQ decoders above are in quant/dequant_iq.c.) */

/* Every dtype with a reference quantizer
 *     void fn(const float *x, void *dst, int64_t n)      (n a multiple of the block size),
 * bit-identical with GGML's quantize_row_<type>_ref (which is also what
 * llama-quantize runs when no importance matrix is given). f32/f16/bf16 are
 * plain conversions (round to nearest even). Same extension rule as above. */
#define PL_QUANTIZE_TYPES(X)               \
    X(PL_F32, pl_quantize_row_f32)          \
    X(PL_F16, pl_quantize_row_f16)          \
    X(PL_BF16, pl_quantize_row_bf16)        \
    X(PL_Q4_0, pl_quantize_row_q4_0)        \
    X(PL_Q4_1, pl_quantize_row_q4_1)        \
    X(PL_Q5_0, pl_quantize_row_q5_0)        \
    X(PL_Q5_1, pl_quantize_row_q5_1)        \
    X(PL_Q8_0, pl_quantize_row_q8_0)        \
    X(PL_Q8_1, pl_quantize_row_q8_1)        \
    X(PL_Q2_K, pl_quantize_row_q2_K)        \
    X(PL_Q3_K, pl_quantize_row_q3_K)        \
    X(PL_Q4_K, pl_quantize_row_q4_K)        \
    X(PL_Q5_K, pl_quantize_row_q5_K)        \
    X(PL_Q6_K, pl_quantize_row_q6_K)        \
    X(PL_Q8_K, pl_quantize_row_q8_K)

#define PL_DECLARE_DEQUANT_(t, fn) void fn(const void *src, float *dst, int64_t n);
#define PL_DECLARE_QUANT_(t, fn) void fn(const float *x, void *dst, int64_t n);
PL_DEQUANT_TYPES(PL_DECLARE_DEQUANT_)
PL_QUANTIZE_TYPES(PL_DECLARE_QUANT_)
#undef PL_DECLARE_DEQUANT_
#undef PL_DECLARE_QUANT_

/* Decoders of the activation formats (for tests and debugging). */
void pl_dequantize_row_q8_1(const void *src, float *dst, int64_t n);
void pl_dequantize_row_q8_K(const void *src, float *dst, int64_t n);

/* True if pl_quantize_row can encode this dtype. */
bool pl_can_quantize(pl_dtype t);
/* Encodes n floats (a multiple of the block size) as dtype t, GGML's
 * reference algorithm. Returns false (writing nothing) if t has no quantizer
 * or n is not a positive multiple of its block size. */
bool pl_quantize_row(pl_dtype t, const float *x, void *dst, int64_t n);

#endif
