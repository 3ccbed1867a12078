/* Portable MATMUL tile kernels for the ladder formats (see cpu_matmul_iq.h),
 * and the type table the cpu matmul driver picks them from. The AVX2 versions
 * are in cpu_matmul_iq_avx2.c.
 *
 * Every weight format here is brought to one integer form per 256-element
 * block, which the portable kernels decode once and dot with up to 4
 * activation rows (q8_K: x = dy * q8):
 *
 *     dot(block) = dy * dw * sum_{s=0..15} S[s] * sum_{k in run s of 16} w[k] * q8[k]
 *                - dy * dm * sum_{s=0..15} M[s] * bsum[s]            (k-quants with mins)
 *
 * with w the signed integer codes, S / M integer sub-block scales / mins and
 * dw / dm float block factors. This is the integer arithmetic of llama.cpp's
 * ggml_vec_dot_<type>_q8_K, rearranged:
 *   - iq2_* carry a factor 1/8 and iq3_xxs 1/4 (their scales are (2s+1)/8 and
 *     (2s+1)/4 times the grid), folded into dw (exact: a power of two);
 *   - iq1_s / iq1_m decode to grid + delta with delta = +-1/8; we use the
 *     integer codes w = 8 * grid + (+-1) and dw = d / 8, which is the same
 *     integer sum llama.cpp forms as sumi + sumi1 / 8 (it reads the delta term
 *     from bsums), and needs no second accumulator;
 *   - tq1_0 / tq2_0 use w = t - 1 directly (llama.cpp subtracts bsums).
 */
#include <stdatomic.h>
#include <string.h>
#include "backends/cpu/cpu_internal.h"
#include "backends/cpu/cpu_matmul_iq.h"
#include "core/cpu_features.h"
#include "core/fp16.h"
#include "quant/blocks.h"
#include "quant/ggml_tables.h"

/* One decoded 256-element block. */
typedef struct lad_blk {
    int8_t w[QK_K];
    int32_t S[QK_K / 16];
    int32_t M[QK_K / 16];
    float dw, dm;
    int has_min;
} lad_blk;

typedef void (*lad_decode_fn)(const void *blk, lad_blk *o);

static inline uint32_t rd_u32(const uint8_t *b) {
    return (uint32_t)b[0] | ((uint32_t)b[1] << 8) | ((uint32_t)b[2] << 16) | ((uint32_t)b[3] << 24);
}

static inline uint16_t rd_u16(const uint8_t *b) { return (uint16_t)(b[0] | (b[1] << 8)); }

/* 8 signed codes from a grid entry of 8 magnitudes and a sign byte. */
static inline void put_signed8(int8_t *w, uint64_t grid, uint8_t signs) {
    for (int j = 0; j < 8; j++) {
        const int v = (int)((grid >> (8 * j)) & 0xFF);
        w[j] = (int8_t)((signs >> j) & 1 ? -v : v);
    }
}

/* Both runs of 16 of 32-element group g get scale s. */
static inline void set_S32(lad_blk *o, int g, int s) { o->S[2 * g] = o->S[2 * g + 1] = s; }

/* ---- k-quants ------------------------------------------------------------------*/

/* q2_K: codes 0..3, run s of 16 has scale sc[s] & 15 and min sc[s] >> 4.
 * Element 128 h + 32 j + 16 k + l is bits 2j of qs[32 h + 16 k + l]. */
static void dec_q2_K(const void *blk, lad_blk *o) {
    const block_q2_K *b = blk;
    for (int h = 0; h < 2; h++)
        for (int j = 0; j < 4; j++)
            for (int l = 0; l < 32; l++) o->w[128 * h + 32 * j + l] = (int8_t)((b->qs[32 * h + l] >> (2 * j)) & 3);
    for (int s = 0; s < 16; s++) {
        o->S[s] = b->scales[s] & 0xF;
        o->M[s] = b->scales[s] >> 4;
    }
    o->dw = pl_f16_to_f32(b->d);
    o->dm = pl_f16_to_f32(b->dmin);
    o->has_min = 1;
}

/* q3_K: codes (2 low bits as q2_K) - 4 unless the hmask bit is set; hmask bit
 * of 32-element group gi = 4 h + j is bit gi of hmask[l]. 6-bit scales - 32. */
static void dec_q3_K(const void *blk, lad_blk *o) {
    const block_q3_K *b = blk;
    for (int h = 0; h < 2; h++)
        for (int j = 0; j < 4; j++)
            for (int l = 0; l < 32; l++) {
                const int low = (b->qs[32 * h + l] >> (2 * j)) & 3;
                const int hb = (b->hmask[l] >> (4 * h + j)) & 1;
                o->w[128 * h + 32 * j + l] = (int8_t)(low - (hb ? 0 : 4));
            }
    for (int s = 0; s < 16; s++) {
        const int lo = s < 8 ? (b->scales[s] & 0xF) : (b->scales[s - 8] >> 4);
        const int hi = (b->scales[8 + s % 4] >> (2 * (s / 4))) & 3;
        o->S[s] = (lo | (hi << 4)) - 32;
    }
    o->dw = pl_f16_to_f32(b->d);
    o->has_min = 0;
}

/* q5_K: 64-element chunk k: group 2k = low nibbles of qs[32k..] plus bit 2k of
 * qh[l] as bit 4, group 2k+1 = high nibbles plus bit 2k+1. */
static void dec_q5_K(const void *blk, lad_blk *o) {
    const block_q5_K *b = blk;
    for (int k = 0; k < 4; k++)
        for (int l = 0; l < 32; l++) {
            const uint8_t q = b->qs[32 * k + l], h = b->qh[l];
            o->w[64 * k + l] = (int8_t)((q & 0xF) | (((h >> (2 * k)) & 1) << 4));
            o->w[64 * k + 32 + l] = (int8_t)((q >> 4) | (((h >> (2 * k + 1)) & 1) << 4));
        }
    for (int g = 0; g < 8; g++) {
        uint8_t sc, m;
        pl_q4k_scale_min(g, b->scales, &sc, &m);
        set_S32(o, g, sc);
        o->M[2 * g] = o->M[2 * g + 1] = m;
    }
    o->dw = pl_f16_to_f32(b->d);
    o->dm = pl_f16_to_f32(b->dmin);
    o->has_min = 1;
}

/* ---- IQ2 / IQ3 ---------------------------------------------------------------------*/

static void dec_iq2_xxs(const void *blk, lad_blk *o) {
    const block_iq2_xxs *b = blk;
    const uint8_t *q = (const uint8_t *)b->qs;
    for (int g = 0; g < 8; g++) {
        const uint32_t a = rd_u32(q + 8 * g), s = rd_u32(q + 8 * g + 4);
        for (int l = 0; l < 4; l++)
            put_signed8(o->w + 32 * g + 8 * l, pl_iq2xxs_grid[(a >> (8 * l)) & 0xFF], pl_ksigns_iq2xs[(s >> (7 * l)) & 127]);
        set_S32(o, g, 2 * (int)(s >> 28) + 1);
    }
    o->dw = pl_f16_to_f32(b->d) * 0.125f;
    o->has_min = 0;
}

static void dec_iq2_xs(const void *blk, lad_blk *o) {
    const block_iq2_xs *b = blk;
    for (int r = 0; r < 32; r++) {
        const uint16_t q = b->qs[r];
        put_signed8(o->w + 8 * r, pl_iq2xs_grid[q & 511], pl_ksigns_iq2xs[q >> 9]);
    }
    for (int g = 0; g < 8; g++) {
        o->S[2 * g] = 2 * (b->scales[g] & 0xF) + 1;
        o->S[2 * g + 1] = 2 * (b->scales[g] >> 4) + 1;
    }
    o->dw = pl_f16_to_f32(b->d) * 0.125f;
    o->has_min = 0;
}

static void dec_iq2_s(const void *blk, lad_blk *o) {
    const block_iq2_s *b = blk;
    for (int g = 0; g < 8; g++) {
        for (int l = 0; l < 4; l++) {
            const int idx = b->qs[4 * g + l] | ((b->qh[g] << (8 - 2 * l)) & 0x300);
            put_signed8(o->w + 32 * g + 8 * l, pl_iq2s_grid[idx], b->qs[QK_K / 8 + 4 * g + l]);
        }
        o->S[2 * g] = 2 * (b->scales[g] & 0xF) + 1;
        o->S[2 * g + 1] = 2 * (b->scales[g] >> 4) + 1;
    }
    o->dw = pl_f16_to_f32(b->d) * 0.125f;
    o->has_min = 0;
}

static void dec_iq3_xxs(const void *blk, lad_blk *o) {
    const block_iq3_xxs *b = blk;
    for (int g = 0; g < 8; g++) {
        const uint32_t s = rd_u32(b->qs + QK_K / 4 + 4 * g);
        const uint8_t *q = b->qs + 8 * g;
        for (int l = 0; l < 4; l++) {
            const uint64_t grid = (uint64_t)pl_iq3xxs_grid[q[2 * l]] | ((uint64_t)pl_iq3xxs_grid[q[2 * l + 1]] << 32);
            put_signed8(o->w + 32 * g + 8 * l, grid, pl_ksigns_iq2xs[(s >> (7 * l)) & 127]);
        }
        set_S32(o, g, 2 * (int)(s >> 28) + 1);
    }
    o->dw = pl_f16_to_f32(b->d) * 0.25f;
    o->has_min = 0;
}

static void dec_iq3_s(const void *blk, lad_blk *o) {
    const block_iq3_s *b = blk;
    for (int g = 0; g < 8; g++) {
        const uint8_t *q = b->qs + 8 * g;
        const int qh = b->qh[g];
        for (int l = 0; l < 4; l++) {
            const int i1 = q[2 * l] | ((qh << (8 - 2 * l)) & 256);
            const int i2 = q[2 * l + 1] | ((qh << (7 - 2 * l)) & 256);
            const uint64_t grid = (uint64_t)pl_iq3s_grid[i1] | ((uint64_t)pl_iq3s_grid[i2] << 32);
            put_signed8(o->w + 32 * g + 8 * l, grid, b->signs[4 * g + l]);
        }
        set_S32(o, g, 2 * ((b->scales[g / 2] >> (4 * (g & 1))) & 0xF) + 1);
    }
    o->dw = pl_f16_to_f32(b->d);
    o->has_min = 0;
}

/* ---- IQ1 ---------------------------------------------------------------------------*/

/* 8 codes 8 * grid + delta (grid in {-1, 0, 1}, delta = +-1). */
static inline void put_iq1(int8_t *w, uint64_t grid, int delta) {
    for (int j = 0; j < 8; j++) w[j] = (int8_t)(8 * (int8_t)(uint8_t)(grid >> (8 * j)) + delta);
}

static void dec_iq1_s(const void *blk, lad_blk *o) {
    const block_iq1_s *b = blk;
    for (int g = 0; g < 8; g++) {
        const int qh = b->qh[g];
        const int delta = (qh & 0x8000) ? -1 : 1;
        for (int l = 0; l < 4; l++)
            put_iq1(o->w + 32 * g + 8 * l, pl_iq1s_grid[b->qs[4 * g + l] | (((qh >> (3 * l)) & 7) << 8)], delta);
        set_S32(o, g, 2 * ((qh >> 12) & 7) + 1);
    }
    o->dw = pl_f16_to_f32(b->d) * 0.125f;
    o->has_min = 0;
}

static void dec_iq1_m(const void *blk, lad_blk *o) {
    const block_iq1_m *b = blk;
    uint16_t sc[4];
    for (int k = 0; k < 4; k++) sc[k] = rd_u16(b->scales + 2 * k);
    /* the f16 block scale: nibble k in the top 4 bits of sc[k] */
    const uint16_t dh = (uint16_t)((sc[0] >> 12) | ((sc[1] >> 8) & 0x00F0) | ((sc[2] >> 4) & 0x0F00) | (sc[3] & 0xF000));
    for (int g = 0; g < 8; g++) {
        for (int l = 0; l < 4; l++) {
            const int h = (b->qh[2 * g + l / 2] >> (4 * (l & 1))) & 0xF;
            put_iq1(o->w + 32 * g + 8 * l, pl_iq1s_grid[b->qs[4 * g + l] | ((h & 7) << 8)], (h & 8) ? -1 : 1);
        }
        const int sh = 6 * (g % 2);
        o->S[2 * g] = 2 * ((sc[g / 2] >> sh) & 7) + 1;
        o->S[2 * g + 1] = 2 * ((sc[g / 2] >> (sh + 3)) & 7) + 1;
    }
    o->dw = pl_f16_to_f32(dh) * 0.125f;
    o->has_min = 0;
}

/* ---- IQ4_XS and TQ -------------------------------------------------------------------*/

static void dec_iq4_xs(const void *blk, lad_blk *o) {
    const block_iq4_xs *b = blk;
    for (int g = 0; g < 8; g++) {
        const uint8_t *q = b->qs + 16 * g;
        for (int j = 0; j < 16; j++) {
            o->w[32 * g + j] = pl_kvalues_iq4nl[q[j] & 0xF];
            o->w[32 * g + 16 + j] = pl_kvalues_iq4nl[q[j] >> 4];
        }
        const int ls = ((b->scales_l[g / 2] >> (4 * (g % 2))) & 0xF) | (((b->scales_h >> (2 * g)) & 3) << 4);
        set_S32(o, g, ls - 32);
    }
    o->dw = pl_f16_to_f32(b->d);
    o->has_min = 0;
}

static inline int tq1_trit(uint8_t byte, int k) {
    static const uint8_t pow3[5] = {1, 3, 9, 27, 81};
    return ((uint16_t)(uint8_t)(byte * pow3[k]) * 3) >> 8;
}

static void dec_tq1_0(const void *blk, lad_blk *o) {
    const block_tq1_0 *b = blk;
    int8_t *w = o->w;
    for (int k = 0; k < 5; k++)
        for (int m = 0; m < 32; m++) *w++ = (int8_t)(tq1_trit(b->qs[m], k) - 1);
    for (int k = 0; k < 5; k++)
        for (int m = 0; m < 16; m++) *w++ = (int8_t)(tq1_trit(b->qs[32 + m], k) - 1);
    for (int k = 0; k < 4; k++)
        for (int j = 0; j < 4; j++) *w++ = (int8_t)(tq1_trit(b->qh[j], k) - 1);
    for (int s = 0; s < 16; s++) o->S[s] = 1;
    o->dw = pl_f16_to_f32(b->d);
    o->has_min = 0;
}

static void dec_tq2_0(const void *blk, lad_blk *o) {
    const block_tq2_0 *b = blk;
    for (int h = 0; h < 2; h++)
        for (int l = 0; l < 4; l++)
            for (int m = 0; m < 32; m++) o->w[128 * h + 32 * l + m] = (int8_t)(((b->qs[32 * h + m] >> (2 * l)) & 3) - 1);
    for (int s = 0; s < 16; s++) o->S[s] = 1;
    o->dw = pl_f16_to_f32(b->d);
    o->has_min = 0;
}

/* ---- the portable tile ------------------------------------------------------------------*/

static void lad_tile(lad_decode_fn dec, size_t bsize, int64_t K, const void *w, size_t ws, int nr, const void *a,
                     size_t as, int nc, float *d, size_t ds) {
    const int64_t nb = K / QK_K;
    lad_blk blk;
    for (int r = 0; r < nr; r++) {
        const uint8_t *x = (const uint8_t *)w + r * ws;
        float sum[4] = {0, 0, 0, 0};
        for (int64_t i = 0; i < nb; i++) {
            dec(x + i * bsize, &blk);
            for (int c = 0; c < nc; c++) {
                const block_q8_K *y = (const block_q8_K *)((const char *)a + c * as) + i;
                int32_t isum = 0;
                for (int s = 0; s < 16; s++) {
                    int32_t t = 0;
                    for (int k = 16 * s; k < 16 * s + 16; k++) t += blk.w[k] * y->qs[k];
                    isum += blk.S[s] * t;
                }
                sum[c] += (y->d * blk.dw) * (float)isum;
                if (blk.has_min) {
                    int32_t m = 0;
                    for (int s = 0; s < 16; s++) m += blk.M[s] * y->bsums[s];
                    sum[c] -= (y->d * blk.dm) * (float)m;
                }
            }
        }
        for (int c = 0; c < nc; c++) d[c * ds + r] = sum[c];
    }
}

#define LAD_PORTABLE_(name)                                                                              \
    void pl_cpu_mm_lad_##name(int64_t K, const void *w, size_t ws, int nr, const void *a, size_t as,     \
                              int nc, float *d, size_t ds) {                                            \
        lad_tile(dec_##name, sizeof(block_##name), K, w, ws, nr, a, as, nc, d, ds);                      \
    }
LAD_PORTABLE_(q2_K)
LAD_PORTABLE_(q3_K)
LAD_PORTABLE_(q5_K)
LAD_PORTABLE_(iq2_xxs)
LAD_PORTABLE_(iq2_xs)
LAD_PORTABLE_(iq2_s)
LAD_PORTABLE_(iq3_xxs)
LAD_PORTABLE_(iq3_s)
LAD_PORTABLE_(iq1_s)
LAD_PORTABLE_(iq1_m)
LAD_PORTABLE_(iq4_xs)
LAD_PORTABLE_(tq1_0)
LAD_PORTABLE_(tq2_0)
#undef LAD_PORTABLE_

/* iq4_nl against q8_0 (32-element blocks): as ggml_vec_dot_iq4_nl_q8_0. */
void pl_cpu_mm_lad_iq4_nl(int64_t K, const void *w, size_t ws, int nr, const void *a, size_t as, int nc,
                          float *d, size_t ds) {
    const int64_t nb = K / QK4_NL;
    for (int r = 0; r < nr; r++) {
        const block_iq4_nl *x = (const block_iq4_nl *)((const char *)w + r * ws);
        float sum[4] = {0, 0, 0, 0};
        for (int64_t i = 0; i < nb; i++) {
            int8_t v[QK4_NL];
            for (int j = 0; j < QK4_NL / 2; j++) {
                v[j] = pl_kvalues_iq4nl[x[i].qs[j] & 0xF];
                v[j + QK4_NL / 2] = pl_kvalues_iq4nl[x[i].qs[j] >> 4];
            }
            const float dx = pl_f16_to_f32(x[i].d);
            for (int c = 0; c < nc; c++) {
                const block_q8_0 *y = (const block_q8_0 *)((const char *)a + c * as) + i;
                int32_t t = 0;
                for (int j = 0; j < QK4_NL; j++) t += v[j] * y->qs[j];
                sum[c] += (pl_f16_to_f32(y->d) * dx) * (float)t;
            }
        }
        for (int c = 0; c < nc; c++) d[c * ds + r] = sum[c];
    }
}

/* ---- type tables ---------------------------------------------------------------------*/

#define LAD_ENTRY_K_(T, name) {T, PL_Q8_K, pl_cpu_quantize_q8_K, pl_cpu_mm_lad_##name, 1, 4},
static const pl_cpu_mm_type lad_types_portable[] = {
    LAD_ENTRY_K_(PL_Q2_K, q2_K) LAD_ENTRY_K_(PL_Q3_K, q3_K) LAD_ENTRY_K_(PL_Q5_K, q5_K)
    LAD_ENTRY_K_(PL_IQ2_XXS, iq2_xxs) LAD_ENTRY_K_(PL_IQ2_XS, iq2_xs) LAD_ENTRY_K_(PL_IQ2_S, iq2_s)
    LAD_ENTRY_K_(PL_IQ3_XXS, iq3_xxs) LAD_ENTRY_K_(PL_IQ3_S, iq3_s) LAD_ENTRY_K_(PL_IQ1_S, iq1_s)
    LAD_ENTRY_K_(PL_IQ1_M, iq1_m) LAD_ENTRY_K_(PL_IQ4_XS, iq4_xs) LAD_ENTRY_K_(PL_TQ1_0, tq1_0)
    LAD_ENTRY_K_(PL_TQ2_0, tq2_0)
    {PL_IQ4_NL, PL_Q8_0, pl_cpu_quantize_q8_0, pl_cpu_mm_lad_iq4_nl, 1, 4},
};
#undef LAD_ENTRY_K_

#if PL_CPU_HAVE_AVX2_BUILD
#define LAD_ENTRY_K_(T, name) {T, PL_Q8_K, pl_cpu_quantize_q8_K_avx2, pl_cpu_mm_lad_##name##_avx2, 1, 4},
static const pl_cpu_mm_type lad_types_avx2[] = {
    LAD_ENTRY_K_(PL_Q2_K, q2_K) LAD_ENTRY_K_(PL_Q3_K, q3_K) LAD_ENTRY_K_(PL_Q5_K, q5_K)
    LAD_ENTRY_K_(PL_IQ2_XXS, iq2_xxs) LAD_ENTRY_K_(PL_IQ2_XS, iq2_xs) LAD_ENTRY_K_(PL_IQ2_S, iq2_s)
    LAD_ENTRY_K_(PL_IQ3_XXS, iq3_xxs) LAD_ENTRY_K_(PL_IQ3_S, iq3_s) LAD_ENTRY_K_(PL_IQ1_S, iq1_s)
    LAD_ENTRY_K_(PL_IQ1_M, iq1_m) LAD_ENTRY_K_(PL_IQ4_XS, iq4_xs) LAD_ENTRY_K_(PL_TQ1_0, tq1_0)
    LAD_ENTRY_K_(PL_TQ2_0, tq2_0)
    {PL_IQ4_NL, PL_Q8_0, pl_cpu_quantize_q8_0_avx2, pl_cpu_mm_lad_iq4_nl_avx2, 1, 4},
};
#undef LAD_ENTRY_K_
#endif

static const pl_cpu_mm_type *lad_find(const pl_cpu_mm_type *tab, size_t n, pl_dtype wtype) {
    for (size_t i = 0; i < n; i++)
        if (tab[i].wtype == wtype) return &tab[i];
    return NULL;
}

const pl_cpu_mm_type *pl_cpu_mm_type_get_ladder_portable(pl_dtype wtype) {
    return lad_find(lad_types_portable, sizeof lad_types_portable / sizeof lad_types_portable[0], wtype);
}

#if PL_CPU_HAVE_AVX2_BUILD
/* 8 activation rows a tile: the block is decoded once for all of them. */
#define LAD_ENTRY_512_(T, name) {T, PL_Q8_K, pl_cpu_quantize_q8_K_avx2, pl_cpu_mm_lad_##name##_avx512, 1, 8},
static const pl_cpu_mm_type lad_types_avx512[] = {
    LAD_ENTRY_512_(PL_IQ2_XXS, iq2_xxs) LAD_ENTRY_512_(PL_IQ2_XS, iq2_xs) LAD_ENTRY_512_(PL_IQ2_S, iq2_s)
    LAD_ENTRY_512_(PL_IQ1_S, iq1_s) LAD_ENTRY_512_(PL_IQ1_M, iq1_m) LAD_ENTRY_512_(PL_Q5_K, q5_K)
};
#undef LAD_ENTRY_512_
#endif

const pl_cpu_mm_type *pl_cpu_mm_type_get_ladder_avx2(pl_dtype wtype) {
#if PL_CPU_HAVE_AVX2_BUILD
    if (pl_cpu_has_avx2()) return lad_find(lad_types_avx2, sizeof lad_types_avx2 / sizeof lad_types_avx2[0], wtype);
#endif
    (void)wtype;
    return NULL;
}

const pl_cpu_mm_type *pl_cpu_mm_type_get_ladder(pl_dtype wtype) {
#if PL_CPU_HAVE_AVX2_BUILD
    static atomic_int on = -1;   /* PL_CPU_IQ512=0: the AVX2 tiles (before/after runs) */
    int v = atomic_load_explicit(&on, memory_order_relaxed);
    if (v < 0) {
        v = pl_cpu_lad5_supported() && pl_cpu_switch("PL_CPU_IQ512");
        atomic_store_explicit(&on, v, memory_order_relaxed);
    }
    if (v) {
        const pl_cpu_mm_type *t = lad_find(lad_types_avx512, sizeof lad_types_avx512 / sizeof lad_types_avx512[0], wtype);
        if (t) return t;
    }
    if (pl_cpu_has_avx2()) return pl_cpu_mm_type_get_ladder_avx2(wtype);
#endif
    return pl_cpu_mm_type_get_ladder_portable(wtype);
}
