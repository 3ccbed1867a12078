/*
 * Row decoders: the reference definition of every weight format, bit-exact
 * with GGML's dequantize_row_* (same float operations in the same order, so
 * the same roundings). Speed is not a goal here; the cpu backend has its own
 * fused dot products and is checked against these through the ref backend.
 *
 * Dispatch is generated from PL_DEQUANT_TYPES (quant/quant.h): adding a type
 * is writing its decoder and adding one line to that list.
 */
#include "quant/quant.h"
#include "quant/blocks.h"
#include "core/fp16.h"
#include <string.h>

typedef void (*pl_dequant_fn)(const void *src, float *dst, int64_t n);

static pl_dequant_fn dequant_fn(pl_dtype t) {
    switch (t) {
#define PL_DEQUANT_CASE_(tt, fn) case tt: return fn;
        PL_DEQUANT_TYPES(PL_DEQUANT_CASE_)
#undef PL_DEQUANT_CASE_
    default: return NULL;
    }
}

bool pl_can_dequantize(pl_dtype t) { return dequant_fn(t) != NULL; }

void pl_dequantize_row(pl_dtype t, const void *src, float *dst, int64_t n) {
    pl_dequant_fn fn = dequant_fn(t);
    const pl_dtype_traits *tr = pl_dtype_get((uint32_t)t);
    if (!fn || !tr || n <= 0 || n % tr->block_size) return;
    fn(src, dst, n);
}

/* ---- plain types -----------------------------------------------------------*/

void pl_dequantize_row_f32(const void *src, float *dst, int64_t n) {
    memcpy(dst, src, (size_t)n * sizeof(float));
}

void pl_dequantize_row_f16(const void *src, float *dst, int64_t n) {
    const pl_f16 *x = src;
    for (int64_t i = 0; i < n; i++) dst[i] = pl_f16_to_f32(x[i]);
}

void pl_dequantize_row_bf16(const void *src, float *dst, int64_t n) {
    const pl_bf16 *x = src;
    for (int64_t i = 0; i < n; i++) dst[i] = pl_bf16_to_f32(x[i]);
}

/* ---- 32-element blocks -----------------------------------------------------*/

void pl_dequantize_row_q4_0(const void *src, float *dst, int64_t n) {
    const block_q4_0 *b = src;
    for (int64_t i = 0; i < n / QK4_0; i++, dst += QK4_0) {
        const float d = pl_f16_to_f32(b[i].d);
        for (int j = 0; j < QK4_0 / 2; j++) {
            /* low nibble -> element j, high nibble -> element j + 16 */
            dst[j] = ((b[i].qs[j] & 0x0F) - 8) * d;
            dst[j + QK4_0 / 2] = ((b[i].qs[j] >> 4) - 8) * d;
        }
    }
}

void pl_dequantize_row_q4_1(const void *src, float *dst, int64_t n) {
    const block_q4_1 *b = src;
    for (int64_t i = 0; i < n / QK4_1; i++, dst += QK4_1) {
        const float d = pl_f16_to_f32(b[i].d);
        const float m = pl_f16_to_f32(b[i].m);
        for (int j = 0; j < QK4_1 / 2; j++) {
            dst[j] = (b[i].qs[j] & 0x0F) * d + m;
            dst[j + QK4_1 / 2] = (b[i].qs[j] >> 4) * d + m;
        }
    }
}

/* Bit 4 of element j (0..31) is bit j of the little-endian word qh. */
static uint32_t q5_high_bits(const uint8_t qh[4]) {
    return (uint32_t)qh[0] | ((uint32_t)qh[1] << 8) | ((uint32_t)qh[2] << 16) | ((uint32_t)qh[3] << 24);
}

void pl_dequantize_row_q5_0(const void *src, float *dst, int64_t n) {
    const block_q5_0 *b = src;
    for (int64_t i = 0; i < n / QK5_0; i++, dst += QK5_0) {
        const float d = pl_f16_to_f32(b[i].d);
        const uint32_t qh = q5_high_bits(b[i].qh);
        for (int j = 0; j < QK5_0 / 2; j++) {
            const int h0 = (int)((qh >> j) & 1) << 4;
            const int h1 = (int)((qh >> (j + QK5_0 / 2)) & 1) << 4;
            dst[j] = (((b[i].qs[j] & 0x0F) | h0) - 16) * d;
            dst[j + QK5_0 / 2] = (((b[i].qs[j] >> 4) | h1) - 16) * d;
        }
    }
}

void pl_dequantize_row_q5_1(const void *src, float *dst, int64_t n) {
    const block_q5_1 *b = src;
    for (int64_t i = 0; i < n / QK5_1; i++, dst += QK5_1) {
        const float d = pl_f16_to_f32(b[i].d);
        const float m = pl_f16_to_f32(b[i].m);
        const uint32_t qh = q5_high_bits(b[i].qh);
        for (int j = 0; j < QK5_1 / 2; j++) {
            const int h0 = (int)((qh >> j) & 1) << 4;
            const int h1 = (int)((qh >> (j + QK5_1 / 2)) & 1) << 4;
            dst[j] = ((b[i].qs[j] & 0x0F) | h0) * d + m;
            dst[j + QK5_1 / 2] = ((b[i].qs[j] >> 4) | h1) * d + m;
        }
    }
}

void pl_dequantize_row_q8_0(const void *src, float *dst, int64_t n) {
    const block_q8_0 *b = src;
    for (int64_t i = 0; i < n / QK8_0; i++, dst += QK8_0) {
        const float d = pl_f16_to_f32(b[i].d);
        for (int j = 0; j < QK8_0; j++) dst[j] = b[i].qs[j] * d;
    }
}

void pl_dequantize_row_q8_1(const void *src, float *dst, int64_t n) {
    const block_q8_1 *b = src;
    for (int64_t i = 0; i < n / QK8_1; i++, dst += QK8_1) {
        const float d = pl_f16_to_f32(b[i].d);
        for (int j = 0; j < QK8_1; j++) dst[j] = b[i].qs[j] * d;
    }
}

/* ---- k-quants (256-element super-blocks) ------------------------------------*/

void pl_dequantize_row_q2_K(const void *src, float *dst, int64_t n) {
    const block_q2_K *b = src;
    for (int64_t i = 0; i < n / QK_K; i++) {
        const float d = pl_f16_to_f32(b[i].d);
        const float dmin = pl_f16_to_f32(b[i].dmin);
        const uint8_t *q = b[i].qs;
        int is = 0;
        /* Two halves of 128; in each, 4 bit-planes (shift 0,2,4,6) of 32
         * bytes, each plane two sub-blocks of 16 with their own scale/min. */
        for (int half = 0; half < QK_K / 128; half++, q += 32) {
            for (int shift = 0; shift < 8; shift += 2) {
                for (int k = 0; k < 2; k++) {
                    const uint8_t sc = b[i].scales[is++];
                    const float dl = d * (sc & 0xF);
                    const float ml = dmin * (sc >> 4);
                    for (int l = 0; l < 16; l++) *dst++ = dl * ((q[16 * k + l] >> shift) & 3) - ml;
                }
            }
        }
    }
}

/* Scale s_j (0..15) of a q3_K block, as a signed value -32..31. */
static int q3k_scale(const uint8_t s[12], int j) {
    const int lo = j < 8 ? (s[j] & 0xF) : (s[j - 8] >> 4);
    const int hi = (s[8 + j % 4] >> (2 * (j / 4))) & 3;
    return (lo | (hi << 4)) - 32;
}

void pl_dequantize_row_q3_K(const void *src, float *dst, int64_t n) {
    const block_q3_K *b = src;
    for (int64_t i = 0; i < n / QK_K; i++) {
        const float d_all = pl_f16_to_f32(b[i].d);
        const uint8_t *q = b[i].qs;
        const uint8_t *hm = b[i].hmask;
        uint8_t m = 1;   /* hmask bit for the current 32-element group */
        int is = 0;
        for (int half = 0; half < QK_K / 128; half++, q += 32) {
            for (int shift = 0; shift < 8; shift += 2, m <<= 1) {
                for (int k = 0; k < 2; k++) {
                    const float dl = d_all * q3k_scale(b[i].scales, is++);
                    for (int l = 0; l < 16; l++) {
                        /* stored value is q + 4 with its bit 2 in hmask */
                        const int low = (q[16 * k + l] >> shift) & 3;
                        *dst++ = dl * (low - ((hm[16 * k + l] & m) ? 0 : 4));
                    }
                }
            }
        }
    }
}

void pl_dequantize_row_q4_K(const void *src, float *dst, int64_t n) {
    const block_q4_K *b = src;
    for (int64_t i = 0; i < n / QK_K; i++) {
        const float d = pl_f16_to_f32(b[i].d);
        const float dmin = pl_f16_to_f32(b[i].dmin);
        const uint8_t *q = b[i].qs;
        /* per 64 elements: sub-block 2k in the low nibbles, 2k+1 in the high */
        for (int k = 0; k < QK_K / 64; k++, q += 32) {
            uint8_t sc, m;
            pl_q4k_scale_min(2 * k, b[i].scales, &sc, &m);
            const float d1 = d * sc, m1 = dmin * m;
            pl_q4k_scale_min(2 * k + 1, b[i].scales, &sc, &m);
            const float d2 = d * sc, m2 = dmin * m;
            for (int l = 0; l < 32; l++) *dst++ = d1 * (q[l] & 0xF) - m1;
            for (int l = 0; l < 32; l++) *dst++ = d2 * (q[l] >> 4) - m2;
        }
    }
}

void pl_dequantize_row_q5_K(const void *src, float *dst, int64_t n) {
    const block_q5_K *b = src;
    for (int64_t i = 0; i < n / QK_K; i++) {
        const float d = pl_f16_to_f32(b[i].d);
        const float dmin = pl_f16_to_f32(b[i].dmin);
        const uint8_t *ql = b[i].qs;
        const uint8_t *qh = b[i].qh;
        uint8_t u1 = 1, u2 = 2;   /* qh bits of the two sub-blocks of this 64 */
        for (int k = 0; k < QK_K / 64; k++, ql += 32, u1 <<= 2, u2 <<= 2) {
            uint8_t sc, m;
            pl_q4k_scale_min(2 * k, b[i].scales, &sc, &m);
            const float d1 = d * sc, m1 = dmin * m;
            pl_q4k_scale_min(2 * k + 1, b[i].scales, &sc, &m);
            const float d2 = d * sc, m2 = dmin * m;
            for (int l = 0; l < 32; l++) *dst++ = d1 * ((ql[l] & 0xF) + ((qh[l] & u1) ? 16 : 0)) - m1;
            for (int l = 0; l < 32; l++) *dst++ = d2 * ((ql[l] >> 4) + ((qh[l] & u2) ? 16 : 0)) - m2;
        }
    }
}

void pl_dequantize_row_q6_K(const void *src, float *dst, int64_t n) {
    const block_q6_K *b = src;
    for (int64_t i = 0; i < n / QK_K; i++) {
        const float d = pl_f16_to_f32(b[i].d);
        const uint8_t *ql = b[i].ql;
        const uint8_t *qh = b[i].qh;
        const int8_t *sc = b[i].scales;
        /* Per 128 elements: 64 ql bytes and 32 qh bytes. Element l + 32 r
         * (r = 0..3) takes its low nibble from ql[l + 32 (r & 1)] (low nibble
         * for r < 2, high for r >= 2) and its top 2 bits from bits 2r..2r+1
         * of qh[l]. */
        for (int h = 0; h < QK_K / 128; h++, dst += 128, ql += 64, qh += 32, sc += 8) {
            for (int l = 0; l < 32; l++) {
                const int is = l / 16;
                const int q1 = ((ql[l] & 0xF) | (((qh[l] >> 0) & 3) << 4)) - 32;
                const int q2 = ((ql[l + 32] & 0xF) | (((qh[l] >> 2) & 3) << 4)) - 32;
                const int q3 = ((ql[l] >> 4) | (((qh[l] >> 4) & 3) << 4)) - 32;
                const int q4 = ((ql[l + 32] >> 4) | (((qh[l] >> 6) & 3) << 4)) - 32;
                dst[l] = d * sc[is + 0] * q1;
                dst[l + 32] = d * sc[is + 2] * q2;
                dst[l + 64] = d * sc[is + 4] * q3;
                dst[l + 96] = d * sc[is + 6] * q4;
            }
        }
    }
}

void pl_dequantize_row_q8_K(const void *src, float *dst, int64_t n) {
    const block_q8_K *b = src;
    for (int64_t i = 0; i < n / QK_K; i++, dst += QK_K) {
        for (int j = 0; j < QK_K; j++) dst[j] = b[i].d * b[i].qs[j];
    }
}
