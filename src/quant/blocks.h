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

/* ---- the IQ and TQ ("ladder") formats ----------------------------------------
 * All are 256-element super-blocks except iq4_nl (32). The IQ2/IQ3 types map
 * groups of 8 (or 4) elements to an entry of a codebook of unsigned magnitudes
 * (quant/ggml_tables.h) plus 8 sign bits; IQ1 types map groups of 8 to a
 * codebook of {-1, 0, +1} vectors plus a shared +-1/8 shift; IQ4 types use 16
 * non-linear levels; TQ types are ternary {-1, 0, +1} times one scale. Sub-block
 * scales s (3 or 4 bits) mostly enter as the odd number 2 s + 1. */

/* 8 groups of 32. qs[4 g .. 4 g + 3] (as two little-endian u32 a, b): the 4
 * bytes of a index iq2xxs_grid for the 4 runs of 8; b holds 4 x 7 sign-index
 * bits (run l: bits 7 l .. 7 l + 6, into ksigns_iq2xs) and in bits 28-31 the
 * group scale s: x = d * (0.5 + s) / 4 * grid * sign. */
typedef struct block_iq2_xxs {
    pl_f16 d;
    uint16_t qs[QK_K / 8];
} block_iq2_xxs;

/* 32 runs of 8: qs[r] = 9-bit iq2xs_grid index | 7-bit sign index << 9.
 * scales[g]: 4-bit scales of runs 4g, 4g+1 (low nibble) and 4g+2, 4g+3 (high):
 * x = d * (0.5 + s) / 4 * grid * sign. */
typedef struct block_iq2_xs {
    pl_f16 d;
    uint16_t qs[QK_K / 8];
    uint8_t scales[QK_K / 32];
} block_iq2_xs;

/* 32 runs of 8: qs[0..31] low 8 bits of a 10-bit iq2s_grid index, bits 8-9 of
 * run 4g+l in qh[g] bits 2l..2l+1; qs[32..63] are 8 explicit sign bits per run;
 * scales as iq2_xs. */
typedef struct block_iq2_s {
    pl_f16 d;
    uint8_t qs[QK_K / 4];
    uint8_t qh[QK_K / 32];
    uint8_t scales[QK_K / 32];
} block_iq2_s;

/* 8 groups of 32 = 64 runs of 4: qs[0..63] index iq3xxs_grid; qs[64 + 4g ..]
 * is a u32 with 4 x 7 sign-index bits (per 8 elements) and the scale s in bits
 * 28-31: x = d * (0.5 + s) / 2 * grid * sign. */
typedef struct block_iq3_xxs {
    pl_f16 d;
    uint8_t qs[3 * QK_K / 8];
} block_iq3_xxs;

/* 64 runs of 4: 9-bit iq3s_grid indices (low 8 bits in qs, bit 8 of run 8g+k
 * in bit k of qh[g]); signs: 8 explicit bits per 8 elements; 4-bit scales, two
 * per byte (groups 2j, 2j+1 of 32): x = d * (1 + 2 s) * grid * sign. */
typedef struct block_iq3_s {
    pl_f16 d;
    uint8_t qs[QK_K / 4];
    uint8_t qh[QK_K / 32];
    uint8_t signs[QK_K / 8];
    uint8_t scales[QK_K / 64];
} block_iq3_s;

/* 8 groups of 32 = 32 runs of 8. Run 4g+l: 11-bit iq1s_grid index = qs[4g+l] |
 * bits 3l..3l+2 of qh[g] << 8. qh[g] bits 12-14: scale s; bit 15: sign of the
 * shift. x = d * (2 s + 1) * (grid + (bit15 ? -1/8 : +1/8)). */
typedef struct block_iq1_s {
    pl_f16 d;
    uint8_t qs[QK_K / 8];
    uint16_t qh[QK_K / 32];
} block_iq1_s;

/* No d field: the f16 super-block scale is split in 4 nibbles stored in the
 * top 4 bits of the 4 little-endian u16 of scales. 32 runs of 8: index = qs[r]
 * | 3 bits of qh[r / 2] (bits 0-2 for even r, 4-6 for odd) << 8; qh bit 3 / 7:
 * sign of the run's 1/8 shift. Each u16 of scales holds four 3-bit scales
 * (bits 0-2, 3-5, 6-8, 9-11), one per 16 elements: x = d * (2 s + 1) * (grid +
 * shift). */
typedef struct block_iq1_m {
    uint8_t qs[QK_K / 8];
    uint8_t qh[QK_K / 16];
    uint8_t scales[QK_K / 32];
} block_iq1_m;

/* 32 elements: x = d * kvalues_iq4nl[code], codes as q4_0's nibbles. */
#define QK4_NL 32
typedef struct block_iq4_nl {
    pl_f16 d;
    uint8_t qs[QK4_NL / 2];
} block_iq4_nl;

/* 8 groups of 32, each laid out as an iq4_nl block; 6-bit group scales ls
 * (low 4 bits in the nibbles of scales_l, high 2 bits at bits 2g of scales_h):
 * x = d * (ls - 32) * kvalues_iq4nl[code]. */
typedef struct block_iq4_xs {
    pl_f16 d;
    uint16_t scales_h;
    uint8_t scales_l[QK_K / 64];
    uint8_t qs[QK_K / 2];
} block_iq4_xs;

/* Ternary, 5 trits per byte in qs (byte = ceil(256 * sum t_k 3^(4-k) / 243),
 * so trit k is the top "digit" of (byte * 3^k mod 256) * 3 / 256), 4 per byte
 * in qh. Element order: qs[0..31] trit k -> elements 32 k + m (160), qs[32..47]
 * trit k -> 160 + 16 k + m (80), qh[0..3] trit k -> 240 + 4 k + j (16).
 * x = d * (t - 1). */
typedef struct block_tq1_0 {
    uint8_t qs[(QK_K - 4 * QK_K / 64) / 5];
    uint8_t qh[QK_K / 64];
    pl_f16 d;
} block_tq1_0;

/* Ternary in 2 bits: per 128 elements, 32 bytes; element 32 l + m of the half
 * is bits 2l..2l+1 of byte m. x = d * (q - 1), q in 0..2. */
typedef struct block_tq2_0 {
    uint8_t qs[QK_K / 4];
    pl_f16 d;
} block_tq2_0;

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
_Static_assert(sizeof(block_iq2_xxs) == 66, "block_iq2_xxs size");
_Static_assert(sizeof(block_iq2_xs) == 74, "block_iq2_xs size");
_Static_assert(sizeof(block_iq2_s) == 82, "block_iq2_s size");
_Static_assert(sizeof(block_iq3_xxs) == 98, "block_iq3_xxs size");
_Static_assert(sizeof(block_iq3_s) == 110, "block_iq3_s size");
_Static_assert(sizeof(block_iq1_s) == 50, "block_iq1_s size");
_Static_assert(sizeof(block_iq1_m) == 56, "block_iq1_m size");
_Static_assert(sizeof(block_iq4_nl) == 18, "block_iq4_nl size");
_Static_assert(sizeof(block_iq4_xs) == 136, "block_iq4_xs size");
_Static_assert(sizeof(block_tq1_0) == 54, "block_tq1_0 size");
_Static_assert(sizeof(block_tq2_0) == 66, "block_tq2_0 size");

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
