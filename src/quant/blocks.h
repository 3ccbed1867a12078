/*
 * GGML's block layouts, byte for byte. A row of a quantized tensor is an
 * array of these blocks; each block decodes to QK elements. The struct names
 * are GGML's so the bit-level code reads like the format it implements.
 *
 * Conventions shared by every block:
 *   - d / dmin are IEEE half (pl_f16), little-endian, decoded with pl_f16_to_f32,
 *     except block_q8_K whose d is a float (it is an activation format);
 *   - the "_0" types are symmetric (x = d * q), the "_1" types and the
 *     k-quants q2_K/q4_K/q5_K carry a minimum (x = d * q - m);
 *   - k-quants are 256-element super-blocks split into 16 or 8 sub-blocks whose
 *     scales are themselves quantized to 4, 6 or 8 bits.
 * Every struct is made only of uint8_t / int8_t / uint16_t / int16_t / float
 * members in an order with no padding; the size asserts below pin that.
 */
#ifndef PL_QUANT_BLOCKS_H
#define PL_QUANT_BLOCKS_H
#include <stdint.h>
#include "core/fp16.h"

#define QK4_0 32
#define QK4_1 32
#define QK5_0 32
#define QK5_1 32
#define QK8_0 32
#define QK8_1 32
#define QK_K 256
#define K_SCALE_SIZE 12   /* bytes of packed 6-bit scales+mins in q4_K / q5_K */

/* x = d * (q - 8), q in 0..15; element j in the low nibble of qs[j], element
 * j + 16 in the high nibble. */
typedef struct block_q4_0 {
    pl_f16 d;
    uint8_t qs[QK4_0 / 2];
} block_q4_0;

/* x = d * q + m, q in 0..15, nibble layout as q4_0. */
typedef struct block_q4_1 {
    pl_f16 d;
    pl_f16 m;
    uint8_t qs[QK4_1 / 2];
} block_q4_1;

/* x = d * (q - 16), q in 0..31: low 4 bits as q4_0, bit 4 of element j in
 * bit j of the little-endian 32-bit word qh. */
typedef struct block_q5_0 {
    pl_f16 d;
    uint8_t qh[4];
    uint8_t qs[QK5_0 / 2];
} block_q5_0;

/* x = d * q + m, q in 0..31, bit layout as q5_0. */
typedef struct block_q5_1 {
    pl_f16 d;
    pl_f16 m;
    uint8_t qh[4];
    uint8_t qs[QK5_1 / 2];
} block_q5_1;

/* x = d * q, q in -127..127. */
typedef struct block_q8_0 {
    pl_f16 d;
    int8_t qs[QK8_0];
} block_q8_0;

/* q8_0 plus s = d * sum(qs) (an activation format for the _1 dot products). */
typedef struct block_q8_1 {
    pl_f16 d;
    pl_f16 s;
    int8_t qs[QK8_1];
} block_q8_1;

/* 16 sub-blocks of 16: x = d * (scales[i] & 15) * q - dmin * (scales[i] >> 4),
 * q in 0..3 (2 bits). qs: for each half (128 elements), byte l holds elements
 * l, l+32, l+64, l+96 in bit pairs 0-1, 2-3, 4-5, 6-7. */
typedef struct block_q2_K {
    uint8_t scales[QK_K / 16];
    uint8_t qs[QK_K / 4];
    pl_f16 d;
    pl_f16 dmin;
} block_q2_K;

/* 16 sub-blocks of 16: x = d * (s_i - 32) * (q - 4 * !hbit), 2 low bits in qs
 * (layout as q2_K), the third bit in hmask (element j: bit j / 32 of byte
 * j % 32), 6-bit scales s_i packed into 12 bytes (low nibbles in bytes 0..7,
 * high 2 bits in bytes 8..11). */
typedef struct block_q3_K {
    uint8_t hmask[QK_K / 8];
    uint8_t qs[QK_K / 4];
    uint8_t scales[12];
    pl_f16 d;
} block_q3_K;

/* 8 sub-blocks of 32: x = d * sc_i * q - dmin * m_i, q in 0..15; 6-bit
 * (sc_i, m_i) packed into K_SCALE_SIZE bytes. qs: per 64 elements, 32 bytes,
 * the first 32 elements in the low nibbles, the next 32 in the high ones. */
typedef struct block_q4_K {
    pl_f16 d;
    pl_f16 dmin;
    uint8_t scales[K_SCALE_SIZE];
    uint8_t qs[QK_K / 2];
} block_q4_K;

/* q4_K plus a fifth bit per element: bit (2 * (j / 64) + (j % 64) / 32) of
 * qh[j % 32]. */
typedef struct block_q5_K {
    pl_f16 d;
    pl_f16 dmin;
    uint8_t scales[K_SCALE_SIZE];
    uint8_t qh[QK_K / 8];
    uint8_t qs[QK_K / 2];
} block_q5_K;

/* 16 sub-blocks of 16: x = d * scales[i] * (q - 32), q in 0..63: low 4 bits in
 * ql, high 2 bits in qh (see dequant.c for the interleave). */
typedef struct block_q6_K {
    uint8_t ql[QK_K / 2];
    uint8_t qh[QK_K / 4];
    int8_t scales[QK_K / 16];
    pl_f16 d;
} block_q6_K;

/* Activation format for the k-quant dot products: x = d * q, and bsums[i] =
 * sum of qs[16 i .. 16 i + 15] (lets q2_K..q5_K fold their minimums in). */
typedef struct block_q8_K {
    float d;
    int8_t qs[QK_K];
    int16_t bsums[QK_K / 16];
} block_q8_K;

/* These must equal pl_dtype_get(t)->type_size (kernels/dtype.c), which are
 * GGML's sizes; tests/test_quant.c checks the two tables agree. */
_Static_assert(sizeof(block_q4_0) == 18, "block_q4_0 size");
_Static_assert(sizeof(block_q4_1) == 20, "block_q4_1 size");
_Static_assert(sizeof(block_q5_0) == 22, "block_q5_0 size");
_Static_assert(sizeof(block_q5_1) == 24, "block_q5_1 size");
_Static_assert(sizeof(block_q8_0) == 34, "block_q8_0 size");
_Static_assert(sizeof(block_q8_1) == 36, "block_q8_1 size");
_Static_assert(sizeof(block_q2_K) == 84, "block_q2_K size");
_Static_assert(sizeof(block_q3_K) == 110, "block_q3_K size");
_Static_assert(sizeof(block_q4_K) == 144, "block_q4_K size");
_Static_assert(sizeof(block_q5_K) == 176, "block_q5_K size");
_Static_assert(sizeof(block_q6_K) == 210, "block_q6_K size");
_Static_assert(sizeof(block_q8_K) == 292, "block_q8_K size");

/* The 6-bit scale and min of sub-block j (0..7) of a q4_K / q5_K block:
 * sub-blocks 0..3 keep theirs in the low 6 bits of bytes j and j+4; 4..7 keep
 * the low 4 bits in byte j+4 (scale low nibble, min high nibble) and the top 2
 * bits in the spare top bits of bytes j-4 (scale) and j (min). */
static inline void pl_q4k_scale_min(int j, const uint8_t *q, uint8_t *sc, uint8_t *m) {
    if (j < 4) {
        *sc = q[j] & 63;
        *m = q[j + 4] & 63;
    } else {
        *sc = (uint8_t)((q[j + 4] & 0xF) | ((q[j - 4] >> 6) << 4));
        *m = (uint8_t)((q[j + 4] >> 4) | ((q[j] >> 6) << 4));
    }
}

#endif
