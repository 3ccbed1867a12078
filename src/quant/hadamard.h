/* The orthonormal Walsh-Hadamard rotation llama.cpp applies to quantized K/V
 * caches (llama-kv-cache.cpp, "attn_rot_k" / "attn_rot_v").
 *
 * With a quantized cache, llama.cpp multiplies Q and K (before the K store)
 * by H_k, V (before the V store) by H_v, and the attention output by H_v
 * again (H is symmetric and H*H = I, so that undoes the rotation of V).
 * H_n is Sylvester's n x n Hadamard matrix scaled by 1/sqrt(n). It spreads
 * an outlier over the block, so the q8_0/q4_0 scales lose less.
 *
 * Sizes (llama.cpp d32676d): rotation applies only when the head size is a
 * multiple of 64; K uses the largest power of two dividing the head size,
 * V always 64. Each head vector is rotated in consecutive chunks of n. */
#ifndef PL_QUANT_HADAMARD_H
#define PL_QUANT_HADAMARD_H
#include <stdint.h>

/* x[0..len) := H_n applied to each chunk of n consecutive elements (n a
 * power of two dividing len). The arithmetic is that of ggml's CPU
 * ggml_compute_forward_fwht_f32 (scale by 1/sqrt(n) first, then the
 * butterflies with the span doubling from 1), which is exact in float in any
 * vector width, so the result is bit-identical with llama.cpp's. */
void pl_hadamard_rows(float *x, int64_t len, int n);

/* The rotation sizes llama.cpp picks for a head size, 0 = none. */
int pl_hadamard_k_size(int64_t head_dim);
int pl_hadamard_v_size(int64_t head_dim);
#endif
