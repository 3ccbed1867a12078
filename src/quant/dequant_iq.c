/*
 * Row decoders of the IQ (codebook) and TQ (ternary) formats: the reference
 * definition, bit-exact with GGML's dequantize_row_iq2_xxs ... _tq2_0. Every
 * float operation is done in GGML's order (e.g. d * (0.5 + s) * 0.25, then
 * times the grid magnitude, then the sign), so the roundings are the same.
 * Block layouts are described in quant/blocks.h; the codebooks are in
 * quant/ggml_tables.h (generated from the fixture JSON).
 *
 * The cpu backend's fused dot products (backends/cpu/cpu_matmul_iq*.c) read
 * the same bits; tests/test_quant_ladder.c checks both against these.
 */
#include <string.h>
#include "core/fp16.h"
#include "quant/blocks.h"
#include "quant/ggml_tables.h"
#include "quant/quant.h"

/* Little-endian u32 at p (the formats pack indices and scales in u32 words). */
static inline uint32_t rd_u32(const void *p) {
    const uint8_t *b = p;
    return (uint32_t)b[0] | ((uint32_t)b[1] << 8) | ((uint32_t)b[2] << 16) | ((uint32_t)b[3] << 24);
}

static inline uint16_t rd_u16(const void *p) {
    const uint8_t *b = p;
    return (uint16_t)(b[0] | (b[1] << 8));
}

/* Byte j (0..7) of a packed codebook entry (little-endian, as GGML reads the
 * uint64 through a uint8 pointer on the little-endian machines it supports). */
static inline uint8_t grid_u8(uint64_t e, int j) { return (uint8_t)(e >> (8 * j)); }
static inline int8_t grid_i8(uint64_t e, int j) { return (int8_t)(uint8_t)(e >> (8 * j)); }

/* 8 elements: db * magnitude * (-1 where the sign byte has bit j set, else
 * +1), written as GGML writes it. The product by +-1 is exact, so the bits
 * equal GGML's for every finite or infinite scale; only the sign of a NaN
 * (from a NaN scale) may differ, depending on how the compiler folds it. */
static inline void put8_signed(float *y, float db, uint64_t grid, uint8_t signs) {
    for (int j = 0; j < 8; j++) y[j] = db * grid_u8(grid, j) * ((signs & pl_kmask_iq2xs[j]) ? -1.f : 1.f);
}

/* ---- IQ2 ---------------------------------------------------------------------*/

void pl_dequantize_row_iq2_xxs(const void *src, float *dst, int64_t n) {
    const block_iq2_xxs *b = src;
    for (int64_t i = 0; i < n / QK_K; i++) {
        const float d = pl_f16_to_f32(b[i].d);
        for (int g = 0; g < QK_K / 32; g++) {
            /* a: 4 grid indices; s: 4 x 7 sign-index bits + scale in 28-31 */
            const uint32_t a = rd_u32(&b[i].qs[4 * g]);
            const uint32_t s = rd_u32(&b[i].qs[4 * g + 2]);
            const float db = d * (0.5f + (float)(s >> 28)) * 0.25f;
            for (int l = 0; l < 4; l++, dst += 8)
                put8_signed(dst, db, pl_iq2xxs_grid[(a >> (8 * l)) & 0xFF], pl_ksigns_iq2xs[(s >> (7 * l)) & 127]);
        }
    }
}

void pl_dequantize_row_iq2_xs(const void *src, float *dst, int64_t n) {
    const block_iq2_xs *b = src;
    for (int64_t i = 0; i < n / QK_K; i++) {
        const float d = pl_f16_to_f32(b[i].d);
        for (int g = 0; g < QK_K / 32; g++) {
            const float db[2] = {d * (0.5f + (float)(b[i].scales[g] & 0xF)) * 0.25f,
                                 d * (0.5f + (float)(b[i].scales[g] >> 4)) * 0.25f};
            for (int l = 0; l < 4; l++, dst += 8) {
                const uint16_t q = b[i].qs[4 * g + l];   /* 9-bit index | 7-bit sign index << 9 */
                put8_signed(dst, db[l / 2], pl_iq2xs_grid[q & 511], pl_ksigns_iq2xs[q >> 9]);
            }
        }
    }
}

void pl_dequantize_row_iq2_s(const void *src, float *dst, int64_t n) {
    const block_iq2_s *b = src;
    for (int64_t i = 0; i < n / QK_K; i++) {
        const float d = pl_f16_to_f32(b[i].d);
        const uint8_t *qs = b[i].qs, *signs = b[i].qs + QK_K / 8;
        for (int g = 0; g < QK_K / 32; g++, qs += 4, signs += 4) {
            const float db[2] = {d * (0.5f + (float)(b[i].scales[g] & 0xF)) * 0.25f,
                                 d * (0.5f + (float)(b[i].scales[g] >> 4)) * 0.25f};
            for (int l = 0; l < 4; l++, dst += 8) {
                const int idx = qs[l] | ((b[i].qh[g] << (8 - 2 * l)) & 0x300);
                put8_signed(dst, db[l / 2], pl_iq2s_grid[idx], signs[l]);
            }
        }
    }
}

/* ---- IQ3 ---------------------------------------------------------------------*/

/* 8 elements from two 4-magnitude grid entries. */
static inline void put8_two4(float *y, float db, uint32_t g1, uint32_t g2, uint8_t signs) {
    const uint64_t grid = (uint64_t)g1 | ((uint64_t)g2 << 32);
    put8_signed(y, db, grid, signs);
}

void pl_dequantize_row_iq3_xxs(const void *src, float *dst, int64_t n) {
    const block_iq3_xxs *b = src;
    for (int64_t i = 0; i < n / QK_K; i++) {
        const float d = pl_f16_to_f32(b[i].d);
        const uint8_t *qs = b[i].qs;
        const uint8_t *sas = b[i].qs + QK_K / 4;   /* scales and signs */
        for (int g = 0; g < QK_K / 32; g++, qs += 8) {
            const uint32_t s = rd_u32(sas + 4 * g);
            const float db = d * (0.5f + (float)(s >> 28)) * 0.5f;
            for (int l = 0; l < 4; l++, dst += 8)
                put8_two4(dst, db, pl_iq3xxs_grid[qs[2 * l]], pl_iq3xxs_grid[qs[2 * l + 1]],
                          pl_ksigns_iq2xs[(s >> (7 * l)) & 127]);
        }
    }
}

void pl_dequantize_row_iq3_s(const void *src, float *dst, int64_t n) {
    const block_iq3_s *b = src;
    for (int64_t i = 0; i < n / QK_K; i++) {
        const float d = pl_f16_to_f32(b[i].d);
        const uint8_t *qs = b[i].qs, *signs = b[i].signs;
        for (int g = 0; g < QK_K / 32; g++, qs += 8, signs += 4) {
            const int s = (b[i].scales[g / 2] >> (4 * (g & 1))) & 0xF;
            const float db = d * (float)(1 + 2 * s);
            const int qh = b[i].qh[g];
            for (int l = 0; l < 4; l++, dst += 8) {
                const int i1 = qs[2 * l] | ((qh << (8 - 2 * l)) & 256);
                const int i2 = qs[2 * l + 1] | ((qh << (7 - 2 * l)) & 256);
                put8_two4(dst, db, pl_iq3s_grid[i1], pl_iq3s_grid[i2], signs[l]);
            }
        }
    }
}

/* ---- IQ1 ---------------------------------------------------------------------*/

void pl_dequantize_row_iq1_s(const void *src, float *dst, int64_t n) {
    const block_iq1_s *b = src;
    for (int64_t i = 0; i < n / QK_K; i++) {
        const float d = pl_f16_to_f32(b[i].d);
        for (int g = 0; g < QK_K / 32; g++) {
            const int qh = b[i].qh[g];
            const float dl = d * (float)(2 * ((qh >> 12) & 7) + 1);
            const float delta = (qh & 0x8000) ? -PL_IQ1S_DELTA : PL_IQ1S_DELTA;
            for (int l = 0; l < 4; l++, dst += 8) {
                const uint64_t grid = pl_iq1s_grid[b[i].qs[4 * g + l] | (((qh >> (3 * l)) & 7) << 8)];
                for (int j = 0; j < 8; j++) dst[j] = dl * ((float)grid_i8(grid, j) + delta);
            }
        }
    }
}

/* The f16 super-block scale of an iq1_m block: nibble k in the top 4 bits of
 * the k-th little-endian u16 of scales. */
static inline float iq1m_d(const block_iq1_m *b) {
    uint16_t sc[4];
    for (int k = 0; k < 4; k++) sc[k] = rd_u16(b->scales + 2 * k);
    const uint16_t h = (uint16_t)((sc[0] >> 12) | ((sc[1] >> 8) & 0x00F0) | ((sc[2] >> 4) & 0x0F00) | (sc[3] & 0xF000));
    return pl_f16_to_f32(h);
}

void pl_dequantize_row_iq1_m(const void *src, float *dst, int64_t n) {
    const block_iq1_m *b = src;
    for (int64_t i = 0; i < n / QK_K; i++) {
        const float d = iq1m_d(&b[i]);
        const uint8_t *qs = b[i].qs, *qh = b[i].qh;
        for (int g = 0; g < QK_K / 32; g++, qs += 4, qh += 2) {
            const uint16_t sc = rd_u16(b[i].scales + 2 * (g / 2));
            const int sh = 6 * (g % 2);
            const float dl[2] = {d * (float)(2 * ((sc >> sh) & 7) + 1), d * (float)(2 * ((sc >> (sh + 3)) & 7) + 1)};
            for (int l = 0; l < 4; l++, dst += 8) {
                /* run l: index bits 8-10 and shift sign in qh[l / 2], low
                 * nibble for even l, high nibble for odd l */
                const int h = (qh[l / 2] >> (4 * (l & 1))) & 0xF;
                const uint64_t grid = pl_iq1s_grid[qs[l] | ((h & 7) << 8)];
                const float delta = (h & 8) ? -PL_IQ1M_DELTA : PL_IQ1M_DELTA;
                for (int j = 0; j < 8; j++) dst[j] = dl[l / 2] * ((float)grid_i8(grid, j) + delta);
            }
        }
    }
}

/* ---- IQ4 ---------------------------------------------------------------------*/

void pl_dequantize_row_iq4_nl(const void *src, float *dst, int64_t n) {
    const block_iq4_nl *b = src;
    for (int64_t i = 0; i < n / QK4_NL; i++, dst += QK4_NL) {
        const float d = pl_f16_to_f32(b[i].d);
        for (int j = 0; j < QK4_NL / 2; j++) {
            dst[j] = d * (float)pl_kvalues_iq4nl[b[i].qs[j] & 0xF];
            dst[j + QK4_NL / 2] = d * (float)pl_kvalues_iq4nl[b[i].qs[j] >> 4];
        }
    }
}

void pl_dequantize_row_iq4_xs(const void *src, float *dst, int64_t n) {
    const block_iq4_xs *b = src;
    for (int64_t i = 0; i < n / QK_K; i++) {
        const float d = pl_f16_to_f32(b[i].d);
        const uint8_t *qs = b[i].qs;
        for (int g = 0; g < QK_K / 32; g++, qs += 16, dst += 32) {
            const int ls = ((b[i].scales_l[g / 2] >> (4 * (g % 2))) & 0xF) | (((b[i].scales_h >> (2 * g)) & 3) << 4);
            const float dl = d * (float)(ls - 32);
            for (int j = 0; j < 16; j++) {
                dst[j] = dl * (float)pl_kvalues_iq4nl[qs[j] & 0xF];
                dst[j + 16] = dl * (float)pl_kvalues_iq4nl[qs[j] >> 4];
            }
        }
    }
}

/* ---- TQ ----------------------------------------------------------------------*/

/* Trit k (0 = most significant) of a tq1_0 byte: multiplying by 3^k (mod 256)
 * shifts the wanted digit to the top, and * 3 >> 8 reads it out. */
static inline int tq1_trit(uint8_t byte, int k) {
    static const uint8_t pow3[5] = {1, 3, 9, 27, 81};
    const uint8_t q = (uint8_t)(byte * pow3[k]);
    return ((uint16_t)q * 3) >> 8;
}

void pl_dequantize_row_tq1_0(const void *src, float *dst, int64_t n) {
    const block_tq1_0 *b = src;
    for (int64_t i = 0; i < n / QK_K; i++) {
        const float d = pl_f16_to_f32(b[i].d);
        /* qs[0..31]: 5 x 32 elements; qs[32..47]: 5 x 16; qh[0..3]: 4 x 4 */
        for (int k = 0; k < 5; k++)
            for (int m = 0; m < 32; m++) *dst++ = (float)(tq1_trit(b[i].qs[m], k) - 1) * d;
        for (int k = 0; k < 5; k++)
            for (int m = 0; m < 16; m++) *dst++ = (float)(tq1_trit(b[i].qs[32 + m], k) - 1) * d;
        for (int k = 0; k < 4; k++)
            for (int j = 0; j < 4; j++) *dst++ = (float)(tq1_trit(b[i].qh[j], k) - 1) * d;
    }
}

void pl_dequantize_row_tq2_0(const void *src, float *dst, int64_t n) {
    const block_tq2_0 *b = src;
    for (int64_t i = 0; i < n / QK_K; i++) {
        const float d = pl_f16_to_f32(b[i].d);
        for (int h = 0; h < 2; h++)
            for (int l = 0; l < 4; l++)
                for (int m = 0; m < 32; m++) *dst++ = (float)(((b[i].qs[32 * h + m] >> (2 * l)) & 3) - 1) * d;
    }
}
