/* Prepared-weight kernel for iq2_xxs (layout PL_PACK_IQ2XXS_X16 in
 * cpu_internal.h, packed by cpu_packed_iq.c): 16 rows per panel, decoded
 * once per panel block for all 16 rows and every activation row of a tile.
 *
 * A group g (8 weights) of 8 rows is one zmm of 8 grid entries (one gather
 * by the 8 index bytes: qword lane r = row r's 8 |weights|). Its signs are
 * one 64-bit mask (bit 8r + j = weight j of row r): the 8 sign bytes of
 * those rows, each the 7 stored bits and their parity as 8th bit (llama.cpp's
 * ksigns table). The sign goes onto the activation: the 8 q8 codes of the
 * group broadcast to every lane, negated under the mask, then vpdpbusd
 * (unsigned |w| x signed q8) -> lanes 2r, 2r + 1 of row r. The 4 groups of a
 * sub-block are summed in the lanes, times the sub-block's 2 ls + 1 (vpmulld),
 * and the sub-blocks summed: all exact integers. Per block and row then one
 * float step, the reference's (ggml_vec_dot_iq2_xxs_q8_K, generic):
 *     sumf += (d * dy) * (float)bsum,  result 0.125f * sumf
 * so batched == alone bit for bit, whatever the tile.
 *
 * Against the per-row AVX-512 tile (cpu_matmul_iq_avx2.c) on the same CPU:
 * the same gathers per weight, but the sign expansion, the scales and the
 * float step serve 16 rows at a time, the activation group is one broadcast
 * load, and one vpdpbusd replaces maddubs + madd.
 *
 * Compiled with -mavx2 -mfma -mf16c; the functions carry the AVX-512 target
 * attribute and run only after pl_cpu_has_vnni512() && pl_cpu_iqx_enabled() (BITALG, VBMI).
 */
#include <immintrin.h>
#include <string.h>
#include "backends/cpu/cpu_internal.h"
#include "backends/cpu/cpu_simd_avx2.h"
#include "quant/ggml_tables.h"

#define PL_IQX_T __attribute__((target("avx512f,avx512vl,avx512bw,avx512dq,avx512vnni,avx512bitalg,avx512vbmi")))
#define PL_IQX_AI static inline __attribute__((always_inline)) PL_IQX_T
#define PL_IQX_R 4   /* activation rows per tile */
#ifndef PL_IQX_PF
#define PL_IQX_PF 4  /* blocks of prefetch distance */
#endif

PL_IQX_AI __mmask16 pl_iqx_mask(int64_t p, int64_t N) {
    const int64_t left = N - PL_KQX_ROWS * p;
    return left >= PL_KQX_ROWS ? (__mmask16)0xFFFF : (__mmask16)((1u << left) - 1);
}

/* A kernel choice: a test's override (>= 0) or else the env switch name, read once into *sw. */
static bool pl_iqx_choice(int override, int *sw, const char *name) {
    if (override >= 0) return override > 0;
    if (*sw < 0) *sw = pl_cpu_switch(name);
    return *sw > 0;
}

static const uint16_t pl_iqx_lsh[32] = {7, 7, 7, 7, 7, 7, 7, 7, 6, 6, 6, 6, 6, 6, 6, 6,
                                         5, 5, 5, 5, 5, 5, 5, 5, 4, 4, 4, 4, 4, 4, 4, 4};

/* The group step of every kernel here, group g (8 weights) of the 16 rows, in two parts (one
 * function with the activation-row loop inside compiled to more register spills in the iq1
 * kernels, 3-4% slower; these two leave the code as it was written out in each kernel).
 * pl_iqx_gather: the grid entries of the group, one gather per 8 rows: ixlo, ixhi are the grid
 * indices of rows 0-7 and 8-15 (int32 lane r = row r; iq2_xxs widens its index bytes straight
 * into the two halves) -> glo, ghi (qword lane r = row r's 8 unsigned codes).
 * pl_iqx_dot, per activation row: its 8 q8 codes of the group q broadcast to every lane and,
 * with signs (the group's two 64-bit masks, rows 0-7 then 8-15, bit 8r + j = weight j of row
 * r), negated under them; vpdpbusd then adds row r's products into lanes 2r, 2r + 1 of *alo /
 * *ahi. The iq1 grids hold the codes shifted to unsigned and pass signs = NULL (a constant: the
 * masking folds away). */
PL_IQX_AI void pl_iqx_gather(__m256i ixlo, __m256i ixhi, const void *grid, __m512i *glo, __m512i *ghi) {
    *glo = _mm512_i32gather_epi64(ixlo, grid, 8);
    *ghi = _mm512_i32gather_epi64(ixhi, grid, 8);
}

PL_IQX_AI void pl_iqx_dot(__m512i glo, __m512i ghi, const uint64_t *signs, const int8_t *q, __m512i *alo, __m512i *ahi) {
    int64_t qa;
    memcpy(&qa, q, 8);
    const __m512i a = _mm512_set1_epi64(qa);
    __m512i alo_q = a, ahi_q = a;
    if (signs) {
        alo_q = _mm512_mask_sub_epi8(a, _load_mask64((__mmask64 *)&signs[0]), _mm512_setzero_si512(), a);
        ahi_q = _mm512_mask_sub_epi8(a, _load_mask64((__mmask64 *)&signs[1]), _mm512_setzero_si512(), a);
    }
    *alo = _mm512_dpbusd_epi32(*alo, glo, alo_q);
    *ahi = _mm512_dpbusd_epi32(*ahi, ghi, ahi_q);
}

/* The float step per block of every kernel here: row r's integer block sum is lanes 2r and 2r + 1
 * of blo (rows 0-7) / bhi (rows 8-15); accf[c] += (d16 * dy) * that sum, lane r = row r. */
PL_IQX_AI void pl_iqx_block_acc(const __m512i *blo, const __m512i *bhi, __m512 d16, const pl_q8kx *const *y, int64_t b,
                                __m512 *accf, const int R) {
    const __m512i even = _mm512_setr_epi32(0, 2, 4, 6, 8, 10, 12, 14, 16, 18, 20, 22, 24, 26, 28, 30);
    const __m512i odd = _mm512_add_epi32(even, _mm512_set1_epi32(1));
    PL_UNROLL
    for (int c = 0; c < R; c++) {
        const __m512i sum = _mm512_add_epi32(_mm512_permutex2var_epi32(blo[c], even, bhi[c]),
                                             _mm512_permutex2var_epi32(blo[c], odd, bhi[c]));
        const __m512 dd = _mm512_mul_ps(d16, _mm512_set1_ps(y[c][b].b.d));
        accf[c] = _mm512_add_ps(accf[c], _mm512_mul_ps(dd, _mm512_cvtepi32_ps(sum)));
    }
}

/* One panel, R activation rows: acc[c] += the 16 rows' block terms. */
PL_IQX_AI void pl_iq2xxsx_panel(int64_t nb, const uint8_t *codes, const uint16_t *dv, const pl_q8kx *const *y,
                                __m512 *accf, const int R) {
    const __m512i pair_lo = _mm512_setr_epi32(0, 0, 1, 1, 2, 2, 3, 3, 4, 4, 5, 5, 6, 6, 7, 7);
    const __m512i pair_hi = _mm512_add_epi32(pair_lo, _mm512_set1_epi32(8));
    /* the scale bit of group l of a sub-block sits in bit 7 of the bytes of 128-bit lane l:
     * shifting its words right by 7 - l brings it to bit l of the same byte */
    const __m512i lsh = _mm512_loadu_si512((const void *)pl_iqx_lsh);
    for (int64_t b = 0; b < nb; b++) {
        const uint8_t *idx = codes + b * PL_IQ2XXSX_CODES, *sg = idx + 512;
        __m512i blo[PL_IQX_R], bhi[PL_IQX_R];
        PL_UNROLL
        for (int c = 0; c < R; c++) blo[c] = bhi[c] = _mm512_setzero_si512();
        PL_UNROLL
        for (int s = 0; s < 8; s++) {
            /* decode streams the panel from memory: every line PL_IQX_PF blocks ahead */
            _mm_prefetch((const char *)(idx + PL_IQX_PF * PL_IQ2XXSX_CODES + 64 * s), _MM_HINT_T0);
            _mm_prefetch((const char *)(sg + PL_IQX_PF * PL_IQ2XXSX_CODES + 64 * s), _MM_HINT_T0);
            /* the 64 sign bytes of sub-block s (groups 4s .. 4s+3 x 16 rows) */
            const __m512i v = _mm512_loadu_si512((const void *)(sg + 64 * s));
            const __m512i s7 = _mm512_and_si512(v, _mm512_set1_epi8(0x7F));
            const __m512i par = _mm512_slli_epi16(_mm512_popcnt_epi8(s7), 7);
            const __m512i full = _mm512_ternarylogic_epi32(s7, par, _mm512_set1_epi8((char)0x80), 0xF8);
            uint64_t km[8];
            _mm512_storeu_si512((void *)km, full);
            /* ls of the 16 rows: OR of the 4 lanes after the shifts, byte r */
            const __m512i lb = _mm512_srlv_epi16(_mm512_and_si512(v, _mm512_set1_epi8((char)0x80)), lsh);
            const __m128i ls = _mm_or_si128(_mm_or_si128(_mm512_castsi512_si128(lb), _mm512_extracti32x4_epi32(lb, 1)),
                                            _mm_or_si128(_mm512_extracti32x4_epi32(lb, 2), _mm512_extracti32x4_epi32(lb, 3)));
            const __m512i ls32 = _mm512_cvtepu8_epi32(ls);
            const __m512i sc = _mm512_add_epi32(_mm512_add_epi32(ls32, ls32), _mm512_set1_epi32(1));
            const __m512i sclo = _mm512_permutexvar_epi32(pair_lo, sc), schi = _mm512_permutexvar_epi32(pair_hi, sc);
            __m512i alo[PL_IQX_R], ahi[PL_IQX_R];
            PL_UNROLL
            for (int c = 0; c < R; c++) alo[c] = ahi[c] = _mm512_setzero_si512();
            PL_UNROLL
            for (int l = 0; l < 4; l++) {
                const int g = 4 * s + l;
                const __m256i ixlo = _mm256_cvtepu8_epi32(_mm_loadl_epi64((const __m128i *)(idx + 16 * g)));
                const __m256i ixhi = _mm256_cvtepu8_epi32(_mm_loadl_epi64((const __m128i *)(idx + 16 * g + 8)));
                __m512i glo, ghi;
                pl_iqx_gather(ixlo, ixhi, pl_iq2xxs_grid, &glo, &ghi);
                PL_UNROLL
                for (int c = 0; c < R; c++) pl_iqx_dot(glo, ghi, &km[2 * l], y[c][b].b.qs + 8 * g, &alo[c], &ahi[c]);
            }
            PL_UNROLL
            for (int c = 0; c < R; c++) {
                blo[c] = _mm512_add_epi32(blo[c], _mm512_mullo_epi32(alo[c], sclo));
                bhi[c] = _mm512_add_epi32(bhi[c], _mm512_mullo_epi32(ahi[c], schi));
            }
        }
        const __m512 d16 = _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)(dv + PL_KQX_ROWS * b)));
        pl_iqx_block_acc(blo, bhi, d16, y, b, accf, R);
    }
}

PL_IQX_AI void pl_iq2xxsx_tile(int64_t nb, const uint8_t *codes, const uint16_t *dv, const pl_q8kx *const *y, float *d,
                               int64_t ldd, __mmask16 mk, const int R) {
    __m512 accf[PL_IQX_R];
    PL_UNROLL
    for (int c = 0; c < R; c++) accf[c] = _mm512_setzero_ps();
    pl_iq2xxsx_panel(nb, codes, dv, y, accf, R);
    PL_UNROLL
    for (int c = 0; c < R; c++) _mm512_mask_storeu_ps(d + c * ldd, mk, _mm512_mul_ps(_mm512_set1_ps(0.125f), accf[c]));
}

/* ---- iq2_xxs, one activation row (decode): in-register grid lookups instead of gathers ---------
 * At M = 1 nothing amortizes a gather (8 loads per 64 weights), so the grid is looked up in
 * registers. Every iq2 grid value is one of 3 levels (0x08, 0x19, 0x2b), so an entry is 8 two-bit
 * level codes: pl_iqx_iq2xxs_lv[256] holds weights 0-3 of entry i (byte i) and [256 + i] weights
 * 4-7, four zmm each; vpermi2b looks up 128 of them, the index's bit 7 picks the half.
 * Sub-block s (4 groups x 16 rows = 64 index bytes, byte 16 X + r) is first put in the order
 * pl_iqx_arr4: byte 4 r + X = (row r, group X), and looked up: lvlo / lvhi. Weight 4h + w of all
 * 64 (row, group) pairs is then one vgf2p8affineqb of lvh: level bits 2w, 2w + 1 -> value is the
 * GF(2) affine map 8 ^ 17 b0 ^ 35 b1 (0x08, 0x19, 0x2b). Its signs are bit 4h + w of the sign
 * bytes in the same order (vptestmb), negating the activations, and the activations are the q8
 * codes of the block transposed once (pl_iqx_qt_xxs: dword 4h + w of sub-block s = weight 4h + w
 * of groups 0-3), one broadcast dword: vpdpbusd adds row r's products into dword r. After the 8
 * weights dword r = row r's exact sum over the sub-block. The scale's 4 bits (bit 7 of the sign
 * bytes, same order) become 2 ls + 1 by one more vpdpbusd. Integer sums are exact, the float step
 * is the gather kernel's, so the result is the same bit for bit (test_cpu_backend: batched == one
 * row). Per 64 weights: one affine map, one mask, one masked negate, one vpdpbusd. */
uint8_t pl_iqx_iq2xxs_lv[512];   /* filled by the first pl_iq2xxsx_pack_panel */

static const uint8_t pl_iqx_arr4[64] = {
    0, 16, 32, 48, 1, 17, 33, 49, 2, 18, 34, 50, 3, 19, 35, 51, 4, 20, 36, 52, 5, 21, 37, 53, 6, 22, 38,
    54, 7, 23, 39, 55, 8, 24, 40, 56, 9, 25, 41, 57, 10, 26, 42, 58, 11, 27, 43, 59, 12, 28, 44, 60, 13,
    29, 45, 61, 14, 30, 46, 62, 15, 31, 47, 63};
static const uint8_t pl_iqx_qt_xxs[64] = {
    0, 8, 16, 24, 1, 9, 17, 25, 2, 10, 18, 26, 3, 11, 19, 27, 4, 12, 20, 28, 5, 13, 21, 29, 6, 14, 22,
    30, 7, 15, 23, 31, 32, 40, 48, 56, 33, 41, 49, 57, 34, 42, 50, 58, 35, 43, 51, 59, 36, 44, 52, 60,
    37, 45, 53, 61, 38, 46, 54, 62, 39, 47, 55, 63};
static const uint8_t pl_iqx_qt_xs[64] = {
    0, 8, 4, 12, 1, 9, 5, 13, 2, 10, 6, 14, 3, 11, 7, 15, 16, 24, 20, 28, 17, 25, 21, 29, 18, 26, 22,
    30, 19, 27, 23, 31, 32, 40, 36, 44, 33, 41, 37, 45, 34, 42, 38, 46, 35, 43, 39, 47, 48, 56, 52, 60,
    49, 57, 53, 61, 50, 58, 54, 62, 51, 59, 55, 63};
static const uint8_t pl_iqx_xs_sel[2][64] = {{0, 1, 64, 65, 4, 5, 68, 69, 8, 9, 72, 73, 12, 13, 76, 77, 16, 17, 80, 81, 20, 21, 84, 85, 24, 25, 88, 89, 28, 29, 92, 93, 32, 33, 96, 97, 36, 37, 100, 101, 40, 41, 104, 105, 44, 45, 108, 109, 48, 49, 112, 113, 52, 53, 116, 117, 56, 57, 120, 121, 60, 61, 124, 125},
    {2, 3, 66, 67, 6, 7, 70, 71, 10, 11, 74, 75, 14, 15, 78, 79, 18, 19, 82, 83, 22, 23, 86, 87, 26, 27, 90, 91, 30, 31, 94, 95, 34, 35, 98, 99, 38, 39, 102, 103, 42, 43, 106, 107, 46, 47, 110, 111, 50, 51, 114, 115, 54, 55, 118, 119, 58, 59, 122, 123, 62, 63, 126, 127}};
static const uint8_t pl_iqx_xs_sgc[2][64] = {{0, 8, 4, 12, 32, 40, 36, 44, 0, 8, 4, 12, 32, 40, 36, 44, 0, 8, 4, 12, 32, 40, 36, 44, 0, 8, 4, 12, 32, 40, 36, 44, 0, 8, 4, 12, 32, 40, 36, 44, 0, 8, 4, 12, 32, 40, 36, 44, 0, 8, 4, 12, 32, 40, 36, 44, 0, 8, 4, 12, 32, 40, 36, 44},
    {16, 24, 20, 28, 48, 56, 52, 60, 16, 24, 20, 28, 48, 56, 52, 60, 16, 24, 20, 28, 48, 56, 52, 60, 16, 24, 20, 28, 48, 56, 52, 60, 16, 24, 20, 28, 48, 56, 52, 60, 16, 24, 20, 28, 48, 56, 52, 60, 16, 24, 20, 28, 48, 56, 52, 60, 16, 24, 20, 28, 48, 56, 52, 60}};

/* the GF(2) affine matrix taking level bits 2w, 2w + 1 of a byte to 17 b0 ^ 35 b1 (add 8 as the
 * constant): row i of the map is byte 7 - i */
PL_IQX_AI __m512i pl_iqx_lv_map(int w) {
    const uint64_t b0 = 1u << (2 * w), b1 = 2u << (2 * w);
    return _mm512_set1_epi64((int64_t)((b0 | b1) << 56 | b1 << 48 | b0 << 24 | b1 << 16));
}

PL_IQX_AI __m512i pl_iqx_lv_lookup(__m512i x, __m512i t0, __m512i t1, __m512i t2, __m512i t3) {
    return _mm512_mask_blend_epi8(_mm512_movepi8_mask(x), _mm512_permutex2var_epi8(t0, x, t1), _mm512_permutex2var_epi8(t2, x, t3));
}

/* The q8 codes of block b transposed by qt (4 x 2 sub-blocks) into buf[256]. */
PL_IQX_AI void pl_iqx_q8_transpose(const int8_t *q8, __m512i qt, int8_t *buf) {
    PL_UNROLL
    for (int t = 0; t < 4; t++)
        _mm512_store_si512((void *)(buf + 64 * t), _mm512_permutexvar_epi8(qt, _mm512_loadu_si512((const void *)(q8 + 64 * t))));
}

#define PL_IQX_DEC_T __attribute__((target("avx512f,avx512vl,avx512bw,avx512dq,avx512vnni,avx512bitalg,avx512vbmi,gfni")))
/* not inlined: the gemm entry points keep PL_IQX_T, so nothing GFNI runs on a CPU without it */
#define PL_IQX_DEC_F static __attribute__((noinline)) PL_IQX_DEC_T

/* Both iq2_xxs one-row kernels' sub-block: sc x the 16 rows' dot products over the sub-block's 32
 * weights, from lv[h] (the level codes of weights 4 h .. 4 h + 3 of each group, a byte a row and
 * group), full (the sign bits, bit 4 h + w for weight 4 h + w) and q (the sub-block's transposed q8
 * codes). */
static inline __attribute__((always_inline)) PL_IQX_DEC_T __m512i pl_iq2xxsx_sub_dot(const __m512i lv[2], __m512i full,
                                                                                   const int8_t *q, __m512i sc) {
    __m512i acc[2] = {_mm512_setzero_si512(), _mm512_setzero_si512()};
    PL_UNROLL
    for (int h = 0; h < 2; h++) {
        PL_UNROLL
        for (int w = 0; w < 4; w++) {
            const __m512i wv = _mm512_gf2p8affine_epi64_epi8(lv[h], pl_iqx_lv_map(w), 8);
            const __mmask64 neg = _mm512_test_epi8_mask(full, _mm512_set1_epi8((char)(1 << (4 * h + w))));
            int32_t qa;
            memcpy(&qa, q + 4 * (4 * h + w), 4);
            const __m512i a = _mm512_set1_epi32(qa);
            const __m512i aq = _mm512_mask_sub_epi8(a, neg, _mm512_setzero_si512(), a);
            acc[w & 1] = _mm512_dpbusd_epi32(acc[w & 1], wv, aq);
        }
    }
    return _mm512_mullo_epi32(_mm512_add_epi32(acc[0], acc[1]), sc);
}
PL_IQX_DEC_F void pl_iq2xxsx_panel1p(int64_t nb, const uint8_t *codes, const uint16_t *dv, const pl_q8kx *y, float *d,
                                      __mmask16 mk) {
    const __m512i arr = _mm512_loadu_si512((const void *)pl_iqx_arr4), qt = _mm512_loadu_si512((const void *)pl_iqx_qt_xxs);
    const __m512i lo0 = _mm512_loadu_si512((const void *)(pl_iqx_iq2xxs_lv + 0));
    const __m512i lo1 = _mm512_loadu_si512((const void *)(pl_iqx_iq2xxs_lv + 64));
    const __m512i lo2 = _mm512_loadu_si512((const void *)(pl_iqx_iq2xxs_lv + 128));
    const __m512i lo3 = _mm512_loadu_si512((const void *)(pl_iqx_iq2xxs_lv + 192));
    const __m512i hi0 = _mm512_loadu_si512((const void *)(pl_iqx_iq2xxs_lv + 256));
    const __m512i hi1 = _mm512_loadu_si512((const void *)(pl_iqx_iq2xxs_lv + 320));
    const __m512i hi2 = _mm512_loadu_si512((const void *)(pl_iqx_iq2xxs_lv + 384));
    const __m512i hi3 = _mm512_loadu_si512((const void *)(pl_iqx_iq2xxs_lv + 448));
    __attribute__((aligned(64))) int8_t qtb[256];
    __m512 accf = _mm512_setzero_ps();
    for (int64_t b = 0; b < nb; b++) {
        const uint8_t *idx = codes + b * PL_IQ2XXSX_CODES, *sg = idx + 512;
        pl_iqx_q8_transpose(y[b].b.qs, qt, qtb);
        __m512i bsum = _mm512_setzero_si512();
        PL_UNROLL
        for (int s = 0; s < 8; s++) {
            _mm_prefetch((const char *)(idx + PL_IQX_PF * PL_IQ2XXSX_CODES + 64 * s), _MM_HINT_T0);
            _mm_prefetch((const char *)(sg + PL_IQX_PF * PL_IQ2XXSX_CODES + 64 * s), _MM_HINT_T0);
            const __m512i v = _mm512_permutexvar_epi8(arr, _mm512_loadu_si512((const void *)(sg + 64 * s)));
            /* bits 0-6 kept, bit 7 = their parity (the scale bit dropped): one GF(2) affine map */
            const __m512i full = _mm512_gf2p8affine_epi64_epi8(v, _mm512_set1_epi64(0x010204081020407FLL), 0);
            /* scale bit l of row r (bit 7 of byte 4 r + l) -> 0/1, then 1 + sum 2^(l + 1) bit */
            const __m512i sbit = _mm512_gf2p8affine_epi64_epi8(v, _mm512_set1_epi64((int64_t)0x8000000000000000ULL), 0);
            const __m512i sc = _mm512_dpbusd_epi32(_mm512_set1_epi32(1), sbit, _mm512_set1_epi32(0x10080402));
            const __m512i x = _mm512_permutexvar_epi8(arr, _mm512_loadu_si512((const void *)(idx + 64 * s)));
            const __m512i lv[2] = {pl_iqx_lv_lookup(x, lo0, lo1, lo2, lo3), pl_iqx_lv_lookup(x, hi0, hi1, hi2, hi3)};
            bsum = _mm512_add_epi32(bsum, pl_iq2xxsx_sub_dot(lv, full, qtb + 32 * s, sc));
        }
        const __m512 d16 = _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)(dv + PL_KQX_ROWS * b)));
        const __m512 dd = _mm512_mul_ps(d16, _mm512_set1_ps(y[b].b.d));
        accf = _mm512_add_ps(accf, _mm512_mul_ps(dd, _mm512_cvtepi32_ps(bsum)));
    }
    _mm512_mask_storeu_ps(d, mk, _mm512_mul_ps(_mm512_set1_ps(0.125f), accf));
}

/* ---- iq2_xxs, one activation row: the default (PL_CPU_IQ2XXSDEC=0: pl_iq2xxsx_panel1p above) ------
 * The same integers in the same order as pl_iq2xxsx_panel1p, with fewer uops a sub-block:
 * - the 256-entry lookups without blends: vpermi2b with merge masking into its index register.
 *   y = lookup in (t0, t1) on the lanes whose index has bit 7 clear (the others keep the index),
 *   then lookup in (t2, t3) on the lanes with bit 7 set, whose y is still the index (vpermi2b reads
 *   bits 0-6): 4 vpermi2b and the two masks for both tables instead of 4 vpermi2b, 2 blends, a mask;
 * - the transposed q8 codes (pl_iqx_qt_xxs order) made once a gemm call for the one activation row
 *   (pl_iq2xxsx_qt_row, when it fits PL_IQ2XXSX_QT_MAX blocks) instead of once a panel and block;
 * - the sub-block loop not unrolled (a smaller loop body). */
int pl_iqx_iq2xxs_dec = -1;
#define PL_IQ2XXSX_QT_MAX 64   /* K <= 16384: 16 KB of stack */
/* prefetch distance of the one-row kernel, blocks: 8 measured 4-7% faster than PL_IQX_PF (4) from memory
 * on the 2048 x 6144 and 6144 x 2048 shapes, the same on 1024 x 3072 */
#define PL_IQ2XXSX_PF1 8

PL_IQX_DEC_F void pl_iq2xxsx_qt_row(int64_t nb, const pl_q8kx *y, int8_t *qt) {
    const __m512i ctl = _mm512_loadu_si512((const void *)pl_iqx_qt_xxs);
    for (int64_t b = 0; b < nb; b++) pl_iqx_q8_transpose(y[b].b.qs, ctl, qt + 256 * b);
}

/* 256-entry byte lookup of x in t0..t3 (entry i at byte i of t0 | t1 | t2 | t3); k = bit 7 of x */
PL_IQX_AI __m512i pl_iqx_lv_lookupm(__m512i x, __mmask64 k, __m512i t0, __m512i t1, __m512i t2, __m512i t3) {
    const __m512i y = _mm512_mask2_permutex2var_epi8(t0, x, (__mmask64)~k, t1);
    return _mm512_mask2_permutex2var_epi8(t2, y, k, t3);
}

/* qtrow: pl_iq2xxsx_qt_row's 256 bytes a block, or NULL (made here per block) */
PL_IQX_DEC_F void pl_iq2xxsx_panel1(int64_t nb, const uint8_t *codes, const uint16_t *dv, const pl_q8kx *y,
                                     const int8_t *qtrow, float *d, __mmask16 mk) {
    const __m512i arr = _mm512_loadu_si512((const void *)pl_iqx_arr4), qt = _mm512_loadu_si512((const void *)pl_iqx_qt_xxs);
    const __m512i lo0 = _mm512_loadu_si512((const void *)(pl_iqx_iq2xxs_lv + 0));
    const __m512i lo1 = _mm512_loadu_si512((const void *)(pl_iqx_iq2xxs_lv + 64));
    const __m512i lo2 = _mm512_loadu_si512((const void *)(pl_iqx_iq2xxs_lv + 128));
    const __m512i lo3 = _mm512_loadu_si512((const void *)(pl_iqx_iq2xxs_lv + 192));
    const __m512i hi0 = _mm512_loadu_si512((const void *)(pl_iqx_iq2xxs_lv + 256));
    const __m512i hi1 = _mm512_loadu_si512((const void *)(pl_iqx_iq2xxs_lv + 320));
    const __m512i hi2 = _mm512_loadu_si512((const void *)(pl_iqx_iq2xxs_lv + 384));
    const __m512i hi3 = _mm512_loadu_si512((const void *)(pl_iqx_iq2xxs_lv + 448));
    __attribute__((aligned(64))) int8_t own[256];
    __m512 accf = _mm512_setzero_ps();
    for (int64_t b = 0; b < nb; b++) {
        const uint8_t *idx = codes + b * PL_IQ2XXSX_CODES, *sg = idx + 512;
        const int8_t *qtb = own;
        if (qtrow) qtb = qtrow + 256 * b;
        else pl_iqx_q8_transpose(y[b].b.qs, qt, own);
        __m512i bsum = _mm512_setzero_si512();
        /* not unrolled: the 8 sub-blocks written out measured ~20% slower from memory (cold), the
         * same from cache */
        _Pragma("GCC unroll 1")
        for (int s = 0; s < 8; s++) {
            _mm_prefetch((const char *)(idx + PL_IQ2XXSX_PF1 * PL_IQ2XXSX_CODES + 64 * s), _MM_HINT_T0);
            _mm_prefetch((const char *)(sg + PL_IQ2XXSX_PF1 * PL_IQ2XXSX_CODES + 64 * s), _MM_HINT_T0);
            const __m512i v = _mm512_permutexvar_epi8(arr, _mm512_loadu_si512((const void *)(sg + 64 * s)));
            const __m512i full = _mm512_gf2p8affine_epi64_epi8(v, _mm512_set1_epi64(0x010204081020407FLL), 0);
            const __m512i sbit = _mm512_gf2p8affine_epi64_epi8(v, _mm512_set1_epi64((int64_t)0x8000000000000000ULL), 0);
            const __m512i sc = _mm512_dpbusd_epi32(_mm512_set1_epi32(1), sbit, _mm512_set1_epi32(0x10080402));
            const __m512i x = _mm512_permutexvar_epi8(arr, _mm512_loadu_si512((const void *)(idx + 64 * s)));
            const __mmask64 k = _mm512_movepi8_mask(x);
            const __m512i lv[2] = {pl_iqx_lv_lookupm(x, k, lo0, lo1, lo2, lo3), pl_iqx_lv_lookupm(x, k, hi0, hi1, hi2, hi3)};
            bsum = _mm512_add_epi32(bsum, pl_iq2xxsx_sub_dot(lv, full, qtb + 32 * s, sc));
        }
        const __m512 d16 = _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)(dv + PL_KQX_ROWS * b)));
        const __m512 dd = _mm512_mul_ps(d16, _mm512_set1_ps(y[b].b.d));
        accf = _mm512_add_ps(accf, _mm512_mul_ps(dd, _mm512_cvtepi32_ps(bsum)));
    }
    _mm512_mask_storeu_ps(d, mk, _mm512_mul_ps(_mm512_set1_ps(0.125f), accf));
}

/* PL_CPU_IQDEC=0: one activation row takes the gather tile too (before/after runs); the one-row
 * kernels also need GFNI */
static bool pl_iqx_dec_enabled(void) {
    static int cached = -1;
    if (cached < 0) cached = __builtin_cpu_supports("gfni") && pl_cpu_switch("PL_CPU_IQDEC");
    return cached;
}

PL_IQX_T void pl_cpu_gemm_iq2xxsx16_vnni(int64_t K, const uint8_t *w, int64_t p0, int64_t p1, const pl_q8kx *a,
                                         size_t as, int64_t c0, int64_t c1, float *dst, int64_t N) {
    const int64_t nb = K / QK_K;
    const size_t pb = pl_iq2xxsx_panel_bytes(K);
    const bool dec = pl_iqx_dec_enabled();
    static int sw = -1;
    const bool fast = pl_iqx_choice(pl_iqx_iq2xxs_dec, &sw, "PL_CPU_IQ2XXSDEC");
    /* the one activation row (the last, when the rows leave one over a tile) transposed once */
    __attribute__((aligned(64))) int8_t qt[256 * PL_IQ2XXSX_QT_MAX];
    const bool have_qt = dec && fast && (c1 - c0) % PL_IQX_R == 1 && nb <= PL_IQ2XXSX_QT_MAX && p1 > p0;
    if (have_qt) pl_iq2xxsx_qt_row(nb, (const pl_q8kx *)((const char *)a + (c1 - 1) * as), qt);
    for (int64_t p = p0; p < p1; p++) {
        const uint8_t *codes = w + (size_t)p * pb;
        const uint16_t *dv = (const uint16_t *)(codes + nb * PL_IQ2XXSX_CODES);
        const __mmask16 mk = pl_iqx_mask(p, N);
        for (int64_t c = c0; c < c1; c += PL_IQX_R) {
            const pl_q8kx *y[PL_IQX_R];
            const int R = c1 - c < PL_IQX_R ? (int)(c1 - c) : PL_IQX_R;
            for (int i = 0; i < R; i++) y[i] = (const pl_q8kx *)((const char *)a + (c + i) * as);
            float *d = dst + c * N + PL_KQX_ROWS * p;
            if (R == 1 && dec) {
                if (fast) pl_iq2xxsx_panel1(nb, codes, dv, y[0], have_qt ? qt : NULL, d, mk);
                else pl_iq2xxsx_panel1p(nb, codes, dv, y[0], d, mk);
                continue;
            }
            switch (R) {
                case 4: pl_iq2xxsx_tile(nb, codes, dv, y, d, N, mk, 4); break;
                case 3: pl_iq2xxsx_tile(nb, codes, dv, y, d, N, mk, 3); break;
                case 2: pl_iq2xxsx_tile(nb, codes, dv, y, d, N, mk, 2); break;
                default: pl_iq2xxsx_tile(nb, codes, dv, y, d, N, mk, 1); break;
            }
        }
    }
}

/* ---- iq2_xs (PL_PACK_IQ2XSX_X16) --------------------------------------------------------------
 * The same scheme as iq2_xxs: a group of 8 rows is one gather (9-bit indices into the 512-entry
 * grid), the 7-bit sign indices of a sub-block's 64 (group, row) pairs are narrowed to bytes and
 * get their parity bit, the scales come per 16 weights (groups 4s, 4s+1: low nibble, 4s+2, 4s+3:
 * high nibble), so each half of a sub-block has its own sum and multiplier. Generic order:
 * bsum = sum of sumi * (2 s + 1), sumf += (d * dy) * bsum, result 0.125f * sumf. */
/* the high byte of u16 (row r, group l) of a sub-block's two zmm (PL_IQ2XSX_Q), at byte 16 l + r */
static const uint8_t pl_iqx_xs_hi8[64] = {
    1,  5,  9,  13, 17, 21, 25, 29, 33, 37, 41, 45, 49, 53, 57, 61, 3,  7,  11, 15, 19, 23,
    27, 31, 35, 39, 43, 47, 51, 55, 59, 63, 65, 69, 73, 77, 81, 85, 89, 93, 97, 101, 105, 109,
    113, 117, 121, 125, 67, 71, 75, 79, 83, 87, 91, 95, 99, 103, 107, 111, 115, 119, 123, 127};

PL_IQX_AI void pl_iq2xsx_panel(int64_t nb, const uint8_t *codes, const uint16_t *dv, const pl_q8kx *const *y,
                               __m512 *accf, const int R) {
    const __m512i pair_lo = _mm512_setr_epi32(0, 0, 1, 1, 2, 2, 3, 3, 4, 4, 5, 5, 6, 6, 7, 7);
    const __m512i pair_hi = _mm512_add_epi32(pair_lo, _mm512_set1_epi32(8));
    for (int64_t b = 0; b < nb; b++) {
        const uint16_t *q = (const uint16_t *)(codes + b * PL_IQ2XSX_CODES);
        const uint8_t *scb = codes + b * PL_IQ2XSX_CODES + 1024;
        __m512i blo[PL_IQX_R], bhi[PL_IQX_R];
        PL_UNROLL
        for (int c = 0; c < R; c++) blo[c] = bhi[c] = _mm512_setzero_si512();
        PL_UNROLL
        for (int s = 0; s < 8; s++) {
            _mm_prefetch((const char *)(q + 64 * s) + PL_IQX_PF * PL_IQ2XSX_CODES, _MM_HINT_T0);
            _mm_prefetch((const char *)(q + 64 * s + 32) + PL_IQX_PF * PL_IQ2XSX_CODES, _MM_HINT_T0);
            if (s < 2) _mm_prefetch((const char *)(scb + 64 * s) + PL_IQX_PF * PL_IQ2XSX_CODES, _MM_HINT_T0);
            const __m512i v01 = _mm512_loadu_si512((const void *)(q + 64 * s));
            const __m512i v23 = _mm512_loadu_si512((const void *)(q + 64 * s + 32));
            /* the high bytes of the 64 u16 by group (one vpermt2b), >> 1: the 7-bit sign indices */
            const __m512i hi8 = _mm512_permutex2var_epi8(v01, _mm512_loadu_si512((const void *)pl_iqx_xs_hi8), v23);
            const __m512i s7 = _mm512_and_si512(_mm512_srli_epi16(hi8, 1), _mm512_set1_epi8(0x7F));
            const __m512i par = _mm512_slli_epi16(_mm512_popcnt_epi8(s7), 7);
            const __m512i full = _mm512_ternarylogic_epi32(s7, par, _mm512_set1_epi8((char)0x80), 0xF8);
            uint64_t km[8];
            _mm512_storeu_si512((void *)km, full);
            const __m512i sb = _mm512_cvtepu8_epi32(_mm_loadu_si128((const __m128i *)(scb + 16 * s)));
            const __m512i s0 = _mm512_and_si512(sb, _mm512_set1_epi32(15)), s1 = _mm512_srli_epi32(sb, 4);
            const __m512i m0 = _mm512_add_epi32(_mm512_add_epi32(s0, s0), _mm512_set1_epi32(1));
            const __m512i m1 = _mm512_add_epi32(_mm512_add_epi32(s1, s1), _mm512_set1_epi32(1));
            const __m512i m0lo = _mm512_permutexvar_epi32(pair_lo, m0), m0hi = _mm512_permutexvar_epi32(pair_hi, m0);
            const __m512i m1lo = _mm512_permutexvar_epi32(pair_lo, m1), m1hi = _mm512_permutexvar_epi32(pair_hi, m1);
            __m512i alo[2][PL_IQX_R], ahi[2][PL_IQX_R];
            PL_UNROLL
            for (int c = 0; c < R; c++) alo[0][c] = ahi[0][c] = alo[1][c] = ahi[1][c] = _mm512_setzero_si512();
            PL_UNROLL
            for (int l = 0; l < 4; l++) {
                const int g = 4 * s + l;
                /* dword r of the pair's zmm: row r's groups 2p (low u16), 2p + 1 (high) */
                const __m512i vp = (l >> 1) ? v23 : v01;
                const __m512i ix = _mm512_and_si512((l & 1) ? _mm512_srli_epi32(vp, 16) : vp, _mm512_set1_epi32(511));
                __m512i glo, ghi;
                pl_iqx_gather(_mm512_castsi512_si256(ix), _mm512_extracti64x4_epi64(ix, 1), pl_iq2xs_grid, &glo, &ghi);
                PL_UNROLL
                for (int c = 0; c < R; c++) pl_iqx_dot(glo, ghi, &km[2 * l], y[c][b].b.qs + 8 * g, &alo[l >> 1][c], &ahi[l >> 1][c]);
            }
            PL_UNROLL
            for (int c = 0; c < R; c++) {
                blo[c] = _mm512_add_epi32(blo[c], _mm512_add_epi32(_mm512_mullo_epi32(alo[0][c], m0lo), _mm512_mullo_epi32(alo[1][c], m1lo)));
                bhi[c] = _mm512_add_epi32(bhi[c], _mm512_add_epi32(_mm512_mullo_epi32(ahi[0][c], m0hi), _mm512_mullo_epi32(ahi[1][c], m1hi)));
            }
        }
        const __m512 d16 = _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)(dv + PL_KQX_ROWS * b)));
        pl_iqx_block_acc(blo, bhi, d16, y, b, accf, R);
    }
}

PL_IQX_AI void pl_iq2xsx_tile(int64_t nb, const uint8_t *codes, const uint16_t *dv, const pl_q8kx *const *y, float *d,
                              int64_t ldd, __mmask16 mk, const int R) {
    __m512 accf[PL_IQX_R];
    PL_UNROLL
    for (int c = 0; c < R; c++) accf[c] = _mm512_setzero_ps();
    pl_iq2xsx_panel(nb, codes, dv, y, accf, R);
    PL_UNROLL
    for (int c = 0; c < R; c++) _mm512_mask_storeu_ps(d + c * ldd, mk, _mm512_mul_ps(_mm512_set1_ps(0.125f), accf[c]));
}

/* ---- iq2_xs, one activation row: the iq2_xxs one-row scheme with a 9-bit index --------------
 * pl_iqx_iq2xs_lv: the 512 entries' level codes (weights 0-3 at [i], 4-7 at [512 + i]), 8 zmm a
 * half: four vpermi2b, the index's bit 7 and bit 8 pick. The u16 codes of a sub-block (two zmm,
 * u16 16 X + r) give the low bytes (index bits 0-7) and high bytes (bit 0: index bit 8, bits 1-7:
 * the sign index) in the order 4 r + X by one vpermt2b each. The scales are per 16 weights
 * (groups 0, 1 and 2, 3 of a sub-block), so a dword must hold one pair's weights only: C_P
 * (pl_iqx_xs_sel) has byte 4 r + 2 h + X = lv_h of (row r, group 2P + X), and one affine map of
 * it gives weights w and 4 + w of both groups; pl_iqx_qt_xs transposes the q8 codes to match. */
uint8_t pl_iqx_iq2xs_lv[1024];   /* filled by the first pl_iq2xsx_pack_panel */

PL_IQX_AI __m512i pl_iqx_lv_lookup9(__m512i x, __mmask64 k7, __mmask64 k8, const uint8_t *t) {
    const __m512i t0 = _mm512_loadu_si512((const void *)t), t1 = _mm512_loadu_si512((const void *)(t + 64));
    const __m512i t2 = _mm512_loadu_si512((const void *)(t + 128)), t3 = _mm512_loadu_si512((const void *)(t + 192));
    const __m512i t4 = _mm512_loadu_si512((const void *)(t + 256)), t5 = _mm512_loadu_si512((const void *)(t + 320));
    const __m512i t6 = _mm512_loadu_si512((const void *)(t + 384)), t7 = _mm512_loadu_si512((const void *)(t + 448));
    const __m512i a = _mm512_mask_blend_epi8(k7, _mm512_permutex2var_epi8(t0, x, t1), _mm512_permutex2var_epi8(t2, x, t3));
    const __m512i b = _mm512_mask_blend_epi8(k7, _mm512_permutex2var_epi8(t4, x, t5), _mm512_permutex2var_epi8(t6, x, t7));
    return _mm512_mask_blend_epi8(k8, a, b);
}

/* byte 4 r + l: the u16 of (row r, group l) in a sub-block's two zmm (PL_IQ2XSX_Q) */
static const uint8_t pl_iqx_xs_arr4[64] = {
    0, 1, 32, 33, 2, 3, 34, 35, 4, 5, 36, 37, 6, 7, 38, 39, 8, 9, 40, 41, 10, 11, 42, 43, 12, 13, 44,
    45, 14, 15, 46, 47, 16, 17, 48, 49, 18, 19, 50, 51, 20, 21, 52, 53, 22, 23, 54, 55, 24, 25, 56, 57, 26,
    27, 58, 59, 28, 29, 60, 61, 30, 31, 62, 63};

PL_IQX_DEC_F void pl_iq2xsx_panel1p(int64_t nb, const uint8_t *codes, const uint16_t *dv, const pl_q8kx *y, float *d,
                                     __mmask16 mk) {
    const __m512i arr = _mm512_loadu_si512((const void *)pl_iqx_xs_arr4), qt = _mm512_loadu_si512((const void *)pl_iqx_qt_xs);
    /* u16 p of the pair (v01, v23) is bytes 2p, 2p + 1 of their concatenation */
    const __m512i arr_lo = _mm512_add_epi8(arr, arr), arr_hi = _mm512_add_epi8(arr_lo, _mm512_set1_epi8(1));
    const __m512i sel0 = _mm512_loadu_si512((const void *)pl_iqx_xs_sel[0]), sel1 = _mm512_loadu_si512((const void *)pl_iqx_xs_sel[1]);
    const __m512i sgc0 = _mm512_loadu_si512((const void *)pl_iqx_xs_sgc[0]), sgc1 = _mm512_loadu_si512((const void *)pl_iqx_xs_sgc[1]);
    __attribute__((aligned(64))) int8_t qtb[256];
    __m512 accf = _mm512_setzero_ps();
    for (int64_t b = 0; b < nb; b++) {
        const uint16_t *q = (const uint16_t *)(codes + b * PL_IQ2XSX_CODES);
        const uint8_t *scb = codes + b * PL_IQ2XSX_CODES + 1024;
        pl_iqx_q8_transpose(y[b].b.qs, qt, qtb);
        __m512i bsum = _mm512_setzero_si512();
        _Pragma("GCC unroll 1")
        for (int s = 0; s < 8; s++) {
            _mm_prefetch((const char *)(q + 64 * s) + PL_IQX_PF * PL_IQ2XSX_CODES, _MM_HINT_T0);
            _mm_prefetch((const char *)(q + 64 * s + 32) + PL_IQX_PF * PL_IQ2XSX_CODES, _MM_HINT_T0);
            if (s < 2) _mm_prefetch((const char *)(scb + 64 * s) + PL_IQX_PF * PL_IQ2XSX_CODES, _MM_HINT_T0);
            const __m512i v01 = _mm512_loadu_si512((const void *)(q + 64 * s));
            const __m512i v23 = _mm512_loadu_si512((const void *)(q + 64 * s + 32));
            const __m512i xl = _mm512_permutex2var_epi8(v01, arr_lo, v23), xh = _mm512_permutex2var_epi8(v01, arr_hi, v23);
            /* bits 1-7 of xh to bits 0-6, bit 7 = their parity */
            const __m512i full = _mm512_gf2p8affine_epi64_epi8(xh, _mm512_set1_epi64(0x02040810204080FELL), 0);
            const __mmask64 k7 = _mm512_movepi8_mask(xl), k8 = _mm512_movepi8_mask(_mm512_slli_epi16(xh, 7));
            const __m512i lvlo = pl_iqx_lv_lookup9(xl, k7, k8, pl_iqx_iq2xs_lv);
            const __m512i lvhi = pl_iqx_lv_lookup9(xl, k7, k8, pl_iqx_iq2xs_lv + 512);
            const __m512i cp[2] = {_mm512_permutex2var_epi8(lvlo, sel0, lvhi), _mm512_permutex2var_epi8(lvlo, sel1, lvhi)};
            const __m512i sb = _mm512_cvtepu8_epi32(_mm_loadu_si128((const __m128i *)(scb + 16 * s)));
            const __m512i s0 = _mm512_and_si512(sb, _mm512_set1_epi32(15)), s1 = _mm512_srli_epi32(sb, 4);
            const __m512i m0 = _mm512_add_epi32(_mm512_add_epi32(s0, s0), _mm512_set1_epi32(1));
            const __m512i m1 = _mm512_add_epi32(_mm512_add_epi32(s1, s1), _mm512_set1_epi32(1));
            __m512i acc[2][2];
            acc[0][0] = acc[0][1] = acc[1][0] = acc[1][1] = _mm512_setzero_si512();
            PL_UNROLL
            for (int P = 0; P < 2; P++) {
                PL_UNROLL
                for (int w = 0; w < 4; w++) {
                    const __m512i wv = _mm512_gf2p8affine_epi64_epi8(cp[P], pl_iqx_lv_map(w), 8);
                    /* the sign of weight 4 h + w of (row r, group 2P + X): bit 4 h + w of its sign byte,
                     * byte 4 r + 2P + X of full, the same qword */
                    const __mmask64 neg = _mm512_bitshuffle_epi64_mask(full, _mm512_add_epi8(P ? sgc1 : sgc0, _mm512_set1_epi8((char)w)));
                    int32_t qa;
                    memcpy(&qa, qtb + 32 * s + 4 * (4 * P + w), 4);
                    const __m512i a = _mm512_set1_epi32(qa);
                    const __m512i aq = _mm512_mask_sub_epi8(a, neg, _mm512_setzero_si512(), a);
                    acc[P][w & 1] = _mm512_dpbusd_epi32(acc[P][w & 1], wv, aq);
                }
            }
            bsum = _mm512_add_epi32(bsum, _mm512_add_epi32(_mm512_mullo_epi32(_mm512_add_epi32(acc[0][0], acc[0][1]), m0),
                                                           _mm512_mullo_epi32(_mm512_add_epi32(acc[1][0], acc[1][1]), m1)));
        }
        const __m512 d16 = _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)(dv + PL_KQX_ROWS * b)));
        const __m512 dd = _mm512_mul_ps(d16, _mm512_set1_ps(y[b].b.d));
        accf = _mm512_add_ps(accf, _mm512_mul_ps(dd, _mm512_cvtepi32_ps(bsum)));
    }
    _mm512_mask_storeu_ps(d, mk, _mm512_mul_ps(_mm512_set1_ps(0.125f), accf));
}

/* ---- iq2_xs, one activation row by dword gathers (the default; PL_CPU_IQ2XSDEC=0: the above) ------
 * The permute lookups above keep port 5 busy (20 vpermi2b / vpermt2b, 8 vpshufbitqmb per
 * sub-block) while the load ports idle; a dword gather takes the 16 rows' lookups of one group
 * off port 5. pl_iqx_iq2xs_c16[1 + i] = entry i's level codes, weights 0-3 | 4-7 << 8.
 * A group pair p (groups 2p + X, X = 0, 1) is one zmm of the layout: dword r = row r's two u16
 * (index | sign index << 9). The gather of group 2p at c16 + 1 (scale 2) has entry i0 in the low
 * word of dword r, that of group 2p + 1 at c16 has entry i1 in the high word, and one word blend
 * makes C: byte 4 r + 2 X + h = lv_h of (row r, group 2p + X). The same GF(2) affine maps as the
 * permute kernel give weight 4 h + w of all 4 bytes (w = 0..3); the sign index sits in bits 1-7 of
 * bytes 4 r + 2 X + 1 of the loaded zmm itself, so one affine map (bits 1-7 -> 0-6, parity -> 7)
 * makes the sign bytes in place and a vpshufbitqmb with a constant control (pl_iqx_xs_ctl[w])
 * picks bit 4 h + w for each byte of C. pl_iqx_qt_xs2 puts the q8 codes in the same byte order.
 * The scale: vpmaddubsw sums the products of bytes 2 X, 2 X + 1 (|sum| <= 2 x 43 x 128, no
 * saturation) and vpdpwssd multiplies both words of row r by its 2 s + 1 of the pair and adds them
 * into dword r, which saves the dword sums and vpmulld of a vpdpbusd per (pair, weight).
 * Integer sums are exact and the float step is the same, so the result is bit for bit the
 * batched kernel's. */
uint16_t pl_iqx_iq2xs_c16[514];   /* filled by the first pl_iq2xsx_pack_panel */
int pl_iqx_iq2xs_dec = -1;

/* byte j of qword lane (row 2k + (j >> 2), X = (j >> 1) & 1, h = j & 1): bit 32 (j >> 2) + 16 X + 8 +
 * 4 h + w, the sign of weight 4 h + w of (that row, group 2p + X) */
#define PL_XS_CTL(w) 8 + w, 12 + w, 24 + w, 28 + w, 40 + w, 44 + w, 56 + w, 60 + w
#define PL_XS_CTL8(w) PL_XS_CTL(w), PL_XS_CTL(w), PL_XS_CTL(w), PL_XS_CTL(w), PL_XS_CTL(w), PL_XS_CTL(w), PL_XS_CTL(w), PL_XS_CTL(w)
static const uint8_t pl_iqx_xs_ctl[4][64] = {{PL_XS_CTL8(0)}, {PL_XS_CTL8(1)}, {PL_XS_CTL8(2)}, {PL_XS_CTL8(3)}};
#undef PL_XS_CTL8
#undef PL_XS_CTL
/* byte 32 s' + 16 P + 4 w + 2 X + h of the transposed q8 codes (s' = sub-block in the 64) = weight
 * 4 h + w of group 4 s' + 2 P + X: 32 s' + 8 (2 P + X) + 4 h + w */
static const uint8_t pl_iqx_qt_xs2[64] = {
    0, 4, 8, 12, 1, 5, 9, 13, 2, 6, 10, 14, 3, 7, 11, 15, 16, 20, 24, 28, 17, 21, 25, 29, 18, 22, 26,
    30, 19, 23, 27, 31, 32, 36, 40, 44, 33, 37, 41, 45, 34, 38, 42, 46, 35, 39, 43, 47, 48, 52, 56, 60,
    49, 53, 57, 61, 50, 54, 58, 62, 51, 55, 59, 63};

PL_IQX_DEC_F void pl_iq2xsx_panel1(int64_t nb, const uint8_t *codes, const uint16_t *dv, const pl_q8kx *y, float *d,
                                    __mmask16 mk) {
    const __m512i qt = _mm512_loadu_si512((const void *)pl_iqx_qt_xs2);
    const __m512i m9 = _mm512_set1_epi32(511);
    const int *tlo = (const int *)(const void *)(pl_iqx_iq2xs_c16 + 1), *thi = (const int *)(const void *)pl_iqx_iq2xs_c16;
    __attribute__((aligned(64))) int8_t qtb[256];
    __attribute__((aligned(64))) uint8_t mb[256];
    const __m512i dup = _mm512_mullo_epi32(_mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15), _mm512_set1_epi32(0x10001));
    __m512 accf = _mm512_setzero_ps();
    for (int64_t b = 0; b < nb; b++) {
        const uint16_t *q = (const uint16_t *)(codes + b * PL_IQ2XSX_CODES);
        const uint8_t *scb = codes + b * PL_IQ2XSX_CODES + 1024;
        pl_iqx_q8_transpose(y[b].b.qs, qt, qtb);
        /* the block's multipliers 2 s + 1 as bytes once (mb[16 s + r]: groups 4 s, 4 s + 1, the low
         * nibble; mb[128 + 16 s + r]: 4 s + 2, 4 s + 3, the high), widened per sub-block */
        PL_UNROLL
        for (int t = 0; t < 2; t++) {
            const __m512i v = _mm512_loadu_si512((const void *)(scb + 64 * t));
            _mm512_store_si512((void *)(mb + 64 * t),
                               _mm512_ternarylogic_epi32(_mm512_slli_epi16(v, 1), _mm512_set1_epi8(0x1E), _mm512_set1_epi8(1), 0xEA));
            _mm512_store_si512((void *)(mb + 128 + 64 * t),
                               _mm512_ternarylogic_epi32(_mm512_srli_epi16(v, 3), _mm512_set1_epi8(0x1E), _mm512_set1_epi8(1), 0xEA));
        }
        /* one sum per weight w: one chain through the sub-block (a dword accumulator per pair
         * instead) measured 25% slower */
        __m512i bs4[4] = {_mm512_setzero_si512(), _mm512_setzero_si512(), _mm512_setzero_si512(), _mm512_setzero_si512()};
        _Pragma("GCC unroll 1")
        for (int s = 0; s < 8; s++) {
            /* 8 blocks ahead (the permute kernel's 4 measured 5-8% slower from memory here) */
            _mm_prefetch((const char *)(q + 64 * s) + 8 * PL_IQ2XSX_CODES, _MM_HINT_T0);
            _mm_prefetch((const char *)(q + 64 * s + 32) + 8 * PL_IQ2XSX_CODES, _MM_HINT_T0);
            if (s < 2) _mm_prefetch((const char *)(scb + 64 * s) + 8 * PL_IQ2XSX_CODES, _MM_HINT_T0);
            /* dword r = m_r | m_r << 16 (both words of row r: its two groups' scale) */
            const __m512i mq[2] = {
                _mm512_maskz_permutexvar_epi8(0x5555555555555555ULL, dup, _mm512_castsi128_si512(_mm_load_si128((const __m128i *)(mb + 16 * s)))),
                _mm512_maskz_permutexvar_epi8(0x5555555555555555ULL, dup, _mm512_castsi128_si512(_mm_load_si128((const __m128i *)(mb + 128 + 16 * s))))};
            PL_UNROLL
            for (int P = 0; P < 2; P++) {
                const __m512i v = _mm512_loadu_si512((const void *)(q + 64 * s + 32 * P));
                const __m512i g0 = _mm512_i32gather_epi32(_mm512_and_si512(v, m9), tlo, 2);
                const __m512i g1 = _mm512_i32gather_epi32(_mm512_and_si512(_mm512_srli_epi32(v, 16), m9), thi, 2);
                const __m512i cp = _mm512_mask_blend_epi16((__mmask32)0xAAAAAAAAu, g0, g1);
                const __m512i full = _mm512_gf2p8affine_epi64_epi8(v, _mm512_set1_epi64(0x02040810204080FELL), 0);
                PL_UNROLL
                for (int w = 0; w < 4; w++) {
                    const __m512i wv = _mm512_gf2p8affine_epi64_epi8(cp, pl_iqx_lv_map(w), 8);
                    const __mmask64 neg = _mm512_bitshuffle_epi64_mask(full, _mm512_loadu_si512((const void *)pl_iqx_xs_ctl[w]));
                    int32_t qa;
                    memcpy(&qa, qtb + 32 * s + 16 * P + 4 * w, 4);
                    const __m512i a = _mm512_set1_epi32(qa);
                    const __m512i aq = _mm512_mask_sub_epi8(a, neg, _mm512_setzero_si512(), a);
                    bs4[w] = _mm512_dpwssd_epi32(bs4[w], _mm512_maddubs_epi16(wv, aq), mq[P]);
                }
            }
        }
        const __m512i bsum = _mm512_add_epi32(_mm512_add_epi32(bs4[0], bs4[1]), _mm512_add_epi32(bs4[2], bs4[3]));
        const __m512 d16 = _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)(dv + PL_KQX_ROWS * b)));
        const __m512 dd = _mm512_mul_ps(d16, _mm512_set1_ps(y[b].b.d));
        accf = _mm512_add_ps(accf, _mm512_mul_ps(dd, _mm512_cvtepi32_ps(bsum)));
    }
    _mm512_mask_storeu_ps(d, mk, _mm512_mul_ps(_mm512_set1_ps(0.125f), accf));
}

PL_IQX_T void pl_cpu_gemm_iq2xsx16_vnni(int64_t K, const uint8_t *w, int64_t p0, int64_t p1, const pl_q8kx *a,
                                        size_t as, int64_t c0, int64_t c1, float *dst, int64_t N) {
    const int64_t nb = K / QK_K;
    const size_t pb = pl_iq2xsx_panel_bytes(K);
    const bool dec = pl_iqx_dec_enabled();
    static int sw = -1;
    const bool gat = pl_iqx_choice(pl_iqx_iq2xs_dec, &sw, "PL_CPU_IQ2XSDEC");
    for (int64_t p = p0; p < p1; p++) {
        const uint8_t *codes = w + (size_t)p * pb;
        const uint16_t *dv = (const uint16_t *)(codes + nb * PL_IQ2XSX_CODES);
        const __mmask16 mk = pl_iqx_mask(p, N);
        for (int64_t c = c0; c < c1; c += PL_IQX_R) {
            const pl_q8kx *y[PL_IQX_R];
            const int R = c1 - c < PL_IQX_R ? (int)(c1 - c) : PL_IQX_R;
            for (int i = 0; i < R; i++) y[i] = (const pl_q8kx *)((const char *)a + (c + i) * as);
            float *d = dst + c * N + PL_KQX_ROWS * p;
            if (R == 1 && dec) {
                if (gat) pl_iq2xsx_panel1(nb, codes, dv, y[0], d, mk);
                else pl_iq2xsx_panel1p(nb, codes, dv, y[0], d, mk);
                continue;
            }
            switch (R) {
                case 4: pl_iq2xsx_tile(nb, codes, dv, y, d, N, mk, 4); break;
                case 3: pl_iq2xsx_tile(nb, codes, dv, y, d, N, mk, 3); break;
                case 2: pl_iq2xsx_tile(nb, codes, dv, y, d, N, mk, 2); break;
                default: pl_iq2xsx_tile(nb, codes, dv, y, d, N, mk, 1); break;
            }
        }
    }
}

/* iq1_m's / iq1_s's pair k of the 16 rows (PL_PACK_IQ1MX_X16, PL_PACK_IQ1SX_X16): the 24-bit fields at q
 * (48 bytes) -> dword r = row r's da | db << 1 | ia << 2 | ib << 13 (iq1_s: lo | ia << 2 | ib << 13),
 * bits 24-31 zero. The 64-byte load reads past the 48
 * (at most into the block's scales; iq1_s: into the next block or the d16 after the last). */
PL_IQX_AI __m512i pl_iq1mx_pair_bits(const uint8_t *q) {
    const __m512i ctl = _mm512_setr_epi32(0x020100, 0x050403, 0x080706, 0x0B0A09, 0x0E0D0C, 0x11100F, 0x141312, 0x171615,
                                          0x1A1918, 0x1D1C1B, 0x201F1E, 0x232221, 0x262524, 0x292827, 0x2C2B2A, 0x2F2E2D);
    return _mm512_maskz_permutexvar_epi8((__mmask64)0x7777777777777777ULL, ctl, _mm512_loadu_si512((const void *)q));
}

/* ---- iq1_s (PL_PACK_IQ1SX_X16) ----------------------------------------------------------------
 * A weight is (g + delta / 8) with g = -1, 0, 1 from the 2048-entry grid (11-bit index: qs | 3 bits
 * of qh << 8) and delta = +-1 per sub-block. In integers, times 8 as the per-row tile does:
 *     S = sum (8 g + delta) q8 = 8 D + (delta - 8) B,   D = sum (g + 1) q8 (vpdpbusd, g + 1 =
 *     0..2 from pl_iqx_iq1s_u),  B = the q8 sum of the sub-block (pl_q8kx.bsum32)
 * bsum = sum over sub-blocks of (2 s + 1) S, acc += (d * dy) * bsum, result 0.125f * acc: the
 * per-row tile's (and the generic vec_dot's) integers per block. B enters the even lane of a
 * row's lane pair only. */
PL_IQX_AI void pl_iq1sx_panel(int64_t nb, const uint8_t *codes, const uint16_t *dv, const pl_q8kx *const *y,
                              __m512 *accf, const int R) {
    const __m512i pair_lo = _mm512_setr_epi32(0, 0, 1, 1, 2, 2, 3, 3, 4, 4, 5, 5, 6, 6, 7, 7);
    const __m512i pair_hi = _mm512_add_epi32(pair_lo, _mm512_set1_epi32(8));
    for (int64_t b = 0; b < nb; b++) {
        const uint8_t *q = codes + b * PL_IQ1SX_CODES;
        __m512i blo[PL_IQX_R], bhi[PL_IQX_R];
        PL_UNROLL
        for (int c = 0; c < R; c++) blo[c] = bhi[c] = _mm512_setzero_si512();
        PL_UNROLL
        for (int s = 0; s < 8; s++) {
            _mm_prefetch((const char *)(q + 64 * s) + PL_IQX_PF * PL_IQ1SX_CODES, _MM_HINT_T0);
            if (s < 4) _mm_prefetch((const char *)(q + 512 + 64 * s) + PL_IQX_PF * PL_IQ1SX_CODES, _MM_HINT_T0);
            /* x0, x1: pairs 2 s, 2 s + 1; x0 bit 0 = the delta sign, x0 bit 1 | x1 bits 0-1 << 1 = the scale */
            const __m512i x0 = pl_iq1mx_pair_bits(q + 96 * s), x1 = pl_iq1mx_pair_bits(q + 96 * s + 48);
            const __m512i s3 = _mm512_ternarylogic_epi32(_mm512_slli_epi32(x1, 1), _mm512_srli_epi32(x0, 1), _mm512_set1_epi32(6),
                                                         0xE4);   /* c ? a : b */
            const __m512i ls = _mm512_add_epi32(_mm512_slli_epi32(_mm512_and_si512(s3, _mm512_set1_epi32(7)), 1), _mm512_set1_epi32(1));
            /* delta - 8: -9 where the sign bit is set, else -7 */
            const __m512i dm8 = _mm512_mask_blend_epi32(_mm512_test_epi32_mask(x0, _mm512_set1_epi32(1)),
                                                        _mm512_set1_epi32(-7), _mm512_set1_epi32(-9));
            const __m512i ls8 = _mm512_slli_epi32(ls, 3), le = _mm512_mullo_epi32(ls, dm8);
            const __m512i ls8lo = _mm512_permutexvar_epi32(pair_lo, ls8), ls8hi = _mm512_permutexvar_epi32(pair_hi, ls8);
            const __m512i lelo = _mm512_maskz_permutexvar_epi32(0x5555, pair_lo, le);
            const __m512i lehi = _mm512_maskz_permutexvar_epi32(0x5555, pair_hi, le);
            __m512i alo[PL_IQX_R], ahi[PL_IQX_R];
            PL_UNROLL
            for (int c = 0; c < R; c++) alo[c] = ahi[c] = _mm512_setzero_si512();
            PL_UNROLL
            for (int l = 0; l < 4; l++) {
                const int g = 4 * s + l;
                const __m512i x = l < 2 ? x0 : x1;
                const __m512i ix = l % 2 ? _mm512_srli_epi32(x, 13) : _mm512_and_si512(_mm512_srli_epi32(x, 2), _mm512_set1_epi32(0x7FF));
                __m512i glo, ghi;
                pl_iqx_gather(_mm512_castsi512_si256(ix), _mm512_extracti64x4_epi64(ix, 1), pl_iqx_iq1s_u, &glo, &ghi);
                PL_UNROLL
                for (int c = 0; c < R; c++) pl_iqx_dot(glo, ghi, NULL, y[c][b].b.qs + 8 * g, &alo[c], &ahi[c]);
            }
            PL_UNROLL
            for (int c = 0; c < R; c++) {
                const __m512i B = _mm512_set1_epi32(y[c][b].bsum32[s]);
                blo[c] = _mm512_add_epi32(blo[c], _mm512_add_epi32(_mm512_mullo_epi32(alo[c], ls8lo), _mm512_mullo_epi32(B, lelo)));
                bhi[c] = _mm512_add_epi32(bhi[c], _mm512_add_epi32(_mm512_mullo_epi32(ahi[c], ls8hi), _mm512_mullo_epi32(B, lehi)));
            }
        }
        const __m512 d16 = _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)(dv + PL_KQX_ROWS * b)));
        pl_iqx_block_acc(blo, bhi, d16, y, b, accf, R);
    }
}

PL_IQX_AI void pl_iq1sx_tile(int64_t nb, const uint8_t *codes, const uint16_t *dv, const pl_q8kx *const *y, float *d,
                             int64_t ldd, __mmask16 mk, const int R) {
    __m512 accf[PL_IQX_R];
    PL_UNROLL
    for (int c = 0; c < R; c++) accf[c] = _mm512_setzero_ps();
    pl_iq1sx_panel(nb, codes, dv, y, accf, R);
    PL_UNROLL
    for (int c = 0; c < R; c++) _mm512_mask_storeu_ps(d + c * ldd, mk, _mm512_mul_ps(_mm512_set1_ps(0.125f), accf[c]));
}

/* ---- iq1_s / iq1_m, one activation row (decode): 16-bit grid entries, one dword gather a group --
 * The batched tiles gather 8-byte entries (g + 1 or iq1_m's u a byte) from 16 / 32 KB tables, two
 * qword gathers per group of 16 rows. Here an entry is its 8 codes g + 1 = 0..2 in 2 bits each
 * (pl_iqx_iq1_c2, 4 KB, L1-resident; bits 2 j, 2 j + 1 = weight j), and a group of the 16 rows is
 * one vpgatherdd (scale 2: dword lane r = row r's entry in its low half). Two groups a, b of a
 * pair (16 weights) share a zmm: b's gather reads from the table 2 bytes early, so its entry lands
 * in the high half, and one word blend gives dword r = [a 0-3, a 4-7, b 0-3, b 4-7] (2-bit codes).
 * One GF(2) affine map per w = 0..3 moves code bits 2 w, 2 w + 1 of every byte to bits 3, 4 (the
 * codes times 8: 8 (g + 1) = 0, 8, 16), so dword r = row r's weights [a w, a 4 + w, b w, b 4 + w];
 * the q8 codes of the block are transposed once to match (pl_iqx_qt_iq1: dword w of pair p = q8
 * of weights 16 p + w, + 4 + w, + 8 + w, + 12 + w) and broadcast: vpdpbusd adds row r's
 * 8 sum (g + 1) q8 over the pair into dword r. The rest is the batched tile's integer algebra per
 * row (delta, -8 offset, 2 s + 1 scale; exact) and its float step, so one row == batched bit for bit
 * (test_cpu_backend: test_prepared_iq_one_row). Per 256 weights: 2 gathers (16 dwords each), one
 * blend, 4 affine maps, 4 vpdpbusd; 4 KB of table instead of 16 / 32 KB. iq1_m gathers from
 * pl_iqx_iq1m_c4 (8 KB, the entry in both halves: its indices come out of the layout as 4 ia and
 * ib, see pl_iq1mx_panel1). */
#define PL_IQX_DEC_AI static inline __attribute__((always_inline)) PL_IQX_DEC_T

static const uint8_t pl_iqx_qt_iq1[64] = {
    0, 4, 8, 12, 1, 5, 9, 13, 2, 6, 10, 14, 3, 7, 11, 15, 0, 4, 8, 12, 1, 5, 9, 13, 2, 6, 10, 14, 3, 7, 11, 15,
    0, 4, 8, 12, 1, 5, 9, 13, 2, 6, 10, 14, 3, 7, 11, 15, 0, 4, 8, 12, 1, 5, 9, 13, 2, 6, 10, 14, 3, 7, 11, 15};

/* the GF(2) affine matrix taking bits 2 w, 2 w + 1 of a byte to bits 3, 4 (row i = byte 7 - i) */
PL_IQX_AI __m512i pl_iqx_c2_map8(int w) {
    const uint64_t b0 = 1u << (2 * w), b1 = 2u << (2 * w);
    return _mm512_set1_epi64((int64_t)(b0 << 32 | b1 << 24));
}

/* init + 8 sum (g + 1) q8 of row r over the pair (ixa, ixb: the grid indices of its groups a, b,
 * dword lane r = row r), q: the pair's 16 transposed q8 codes */
PL_IQX_DEC_AI __m512i pl_iqx_iq1_pair(__m512i ixa, __m512i ixb, const int8_t *q, __m512i init) {
    const __m512i ga = _mm512_i32gather_epi32(ixa, (const void *)(pl_iqx_iq1_c2 + 1), 2);
    const __m512i gb = _mm512_i32gather_epi32(ixb, (const void *)pl_iqx_iq1_c2, 2);
    const __m512i c = _mm512_mask_blend_epi16((__mmask32)0xAAAAAAAAu, ga, gb);
    __m512i acc[2] = {init, _mm512_setzero_si512()};
    PL_UNROLL
    for (int w = 0; w < 4; w++) {
        int32_t qa;
        memcpy(&qa, q + 4 * w, 4);
        acc[w & 1] = _mm512_dpbusd_epi32(acc[w & 1], _mm512_gf2p8affine_epi64_epi8(c, pl_iqx_c2_map8(w), 0), _mm512_set1_epi32(qa));
    }
    return _mm512_add_epi32(acc[0], acc[1]);
}

/* iq1_m's one-row kernel: pl_iqx_iq1_pair's dot products for the blended entries c (dword r = row
 * r's [a 0-3, a 4-7, b 0-3, b 4-7]), in one chain (its pairs are independent, no second to add) */
PL_IQX_DEC_AI __m512i pl_iq1mx_dot(__m512i c, const int8_t *q, __m512i init) {
    __m512i acc = init;
    PL_UNROLL
    for (int w = 0; w < 4; w++) {
        int32_t qa;
        memcpy(&qa, q + 4 * w, 4);
        acc = _mm512_dpbusd_epi32(acc, _mm512_gf2p8affine_epi64_epi8(c, pl_iqx_c2_map8(w), 0), _mm512_set1_epi32(qa));
    }
    return acc;
}

/* The q8 codes of block b transposed by pl_iqx_qt_iq1 into buf[256]. */
PL_IQX_AI void pl_iqx_q8_transpose_iq1(const int8_t *q8, int8_t *buf) {
    const __m512i qt = _mm512_loadu_si512((const void *)pl_iqx_qt_iq1);
    PL_UNROLL
    for (int t = 0; t < 4; t++)
        _mm512_store_si512((void *)(buf + 64 * t), _mm512_shuffle_epi8(_mm512_loadu_si512((const void *)(q8 + 64 * t)), qt));
    /* read back from memory: each dword is then one broadcast load (vpdpbusd {1to16}); forwarded
     * from the registers it compiled to a shift and a vpbroadcastd a dword, 2 more port-5 uops */
    __asm__ volatile("" ::: "memory");
}

/* iq1_s, one row, the group kernel (PL_CPU_IQ1SDEC=0; the pair kernel below is the default):
 * sub-block s = pairs 2 s, 2 s + 1; S = 8 D + (delta - 8) B as in the tile, with delta - 8 = -7, or
 * -9 where the sign bit (x0 bit 0) is set: S = 8 D - 7 B, minus 2 B under that mask. */
PL_IQX_DEC_F void pl_iq1sx_panel1g(int64_t nb, const uint8_t *codes, const uint16_t *dv, const pl_q8kx *y, float *d,
                                    __mmask16 mk) {
    __attribute__((aligned(64))) int8_t qtb[256];
    __attribute__((aligned(64))) int32_t cb[16];
    __m512 accf = _mm512_setzero_ps();
    for (int64_t b = 0; b < nb; b++) {
        const uint8_t *q = codes + b * PL_IQ1SX_CODES;
        /* cb[s] = -7 B, cb[8 + s] = 2 B of sub-block s: broadcast loads below */
        const __m256i B32 = _mm256_cvtepi16_epi32(_mm_loadu_si128((const __m128i *)y[b].bsum32));
        _mm256_store_si256((__m256i *)cb, _mm256_sub_epi32(_mm256_setzero_si256(), _mm256_mullo_epi32(B32, _mm256_set1_epi32(7))));
        _mm256_store_si256((__m256i *)(cb + 8), _mm256_add_epi32(B32, B32));
        pl_iqx_q8_transpose_iq1(y[b].b.qs, qtb);
        __m512i bsum = _mm512_setzero_si512();
        PL_UNROLL
        for (int s = 0; s < 8; s++) {
            _mm_prefetch((const char *)(q + 64 * s) + PL_IQX_PF * PL_IQ1SX_CODES, _MM_HINT_T0);
            if (s < 4) _mm_prefetch((const char *)(q + 512 + 64 * s) + PL_IQX_PF * PL_IQ1SX_CODES, _MM_HINT_T0);
            const __m512i x0 = pl_iq1mx_pair_bits(q + 96 * s), x1 = pl_iq1mx_pair_bits(q + 96 * s + 48);
            const __m512i m11 = _mm512_set1_epi32(0x7FF);
            __m512i S = _mm512_add_epi32(
                pl_iqx_iq1_pair(_mm512_and_si512(_mm512_srli_epi32(x0, 2), m11), _mm512_srli_epi32(x0, 13), qtb + 32 * s,
                                _mm512_set1_epi32(cb[s])),
                pl_iqx_iq1_pair(_mm512_and_si512(_mm512_srli_epi32(x1, 2), m11), _mm512_srli_epi32(x1, 13), qtb + 32 * s + 16,
                                _mm512_setzero_si512()));
            S = _mm512_mask_sub_epi32(S, _mm512_test_epi32_mask(x0, _mm512_set1_epi32(1)), S, _mm512_set1_epi32(cb[8 + s]));
            /* 2 s + 1 = 1 | x0 bit 1 << 1 | x1 bits 0-1 << 2 */
            const __m512i ls = _mm512_ternarylogic_epi32(_mm512_slli_epi32(x1, 2), x0, _mm512_set1_epi32(12), 0xE4);   /* c ? a : b */
            bsum = _mm512_add_epi32(bsum, _mm512_mullo_epi32(S, _mm512_ternarylogic_epi32(ls, _mm512_set1_epi32(14), _mm512_set1_epi32(1), 0xEA)));
        }
        const __m512 d16 = _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)(dv + PL_KQX_ROWS * b)));
        const __m512 dd = _mm512_mul_ps(d16, _mm512_set1_ps(y[b].b.d));
        accf = _mm512_add_ps(accf, _mm512_mul_ps(dd, _mm512_cvtepi32_ps(bsum)));
    }
    _mm512_mask_storeu_ps(d, mk, _mm512_mul_ps(_mm512_set1_ps(0.125f), accf));
}

/* iq1_m's 16 f16 block scales of a panel, from its 64 scale words (sc: 4 words a row): nibble k
 * of the f16 in the top 4 bits of word k. Shared by the one-row kernel and the batched panel. */
PL_IQX_AI __m512 pl_iq1mx_d16(const uint16_t *sc) {
    const __m256i s0 = _mm256_loadu_si256((const __m256i *)sc), s1 = _mm256_loadu_si256((const __m256i *)(sc + 16));
    const __m256i s2 = _mm256_loadu_si256((const __m256i *)(sc + 32)), s3 = _mm256_loadu_si256((const __m256i *)(sc + 48));
    const __m256i dh = _mm256_or_si256(
        _mm256_or_si256(_mm256_srli_epi16(s0, 12), _mm256_and_si256(_mm256_srli_epi16(s1, 8), _mm256_set1_epi16(0x00F0))),
        _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(s2, 4), _mm256_set1_epi16(0x0F00)),
                        _mm256_and_si256(s3, _mm256_set1_epi16((short)0xF000))));
    return _mm512_cvtph_ps(dh);
}

/* Bits 0-15 of v >> o (o = -1: v << 1) in each dword, bits 16-31 from bit 24 on: one vpmultishiftqb
 * (port 5) where a shift would take port 0, the one the affine maps and dot products load. For dwords
 * whose bits 24-31 are zero (then the result is v >> o for o >= 8 and bits 1 .. of v << 1 for o = -1;
 * the callers mask the rest). */
PL_IQX_AI __m512i pl_iq1mx_bits(__m512i v, int o) {
    const int64_t lo = (int64_t)((o & 63) | ((o + 8) & 63) << 8 | 24 << 16 | 24 << 24);
    const int64_t hi = (int64_t)(((o + 32) & 63) | ((o + 40) & 63) << 8 | 56 << 16 | 56 << 24);
    return _mm512_multishift_epi64_epi8(_mm512_set1_epi64(lo | hi << 32), v);
}

/* iq1_s, one row, the pair kernel (the default): pair k = groups 2 k, 2 k + 1 of sub-block s = k / 2,
 * as iq1_m's (gathers from pl_iqx_iq1m_c4 indexed by x & 0x1FFC and x >> 13, one blend, 4 affine
 * maps + vpdpbusd). With B_k the q8 sum of pair k (the q8_K bsums[k]) and the sub-block's delta
 * sign (x0 bit 0, x0 = pair 2 s's dword),
 *     S_k = sum (8 g + delta) q8 = 8 D_k + T_k[sign],   T_k = {-7 B_k, -9 B_k},
 * T_k a qword broadcast to all 8 qwords, looked up per row by one vpermd indexed by x0 (bit 0 = the
 * sign; bits 1-3 pick among equal copies). |S_k| <= 16 x 9 x 128 = 18432 < 2^15 (a whole sub-block
 * could reach 36864: hence per pair), and 2 s + 1 <= 15 in a dword whose high word is zero, so
 * (2 s + 1) S_k is one vpdpwssd; both pairs of a sub-block share its 2 s + 1 (1 | x0 bit 1 << 1 |
 * x1 bits 0-1 << 2, x1 bits moved by a vpmultishiftqb). bsum is the same integer as the tile's
 * sum of (2 s + 1) (S_2s + S_2s+1), so the float steps match bit for bit. */
typedef struct {
    int8_t qt[256];
    int32_t tab[32];   /* T_k at 2 k: -7 B_k, -9 B_k */
} pl_iq1sx_act;
#define PL_IQ1SX_ACT_MAX 64   /* K <= 16384: 24 KB of stack */

PL_IQX_DEC_AI void pl_iq1sx_act_block(const pl_q8kx *yb, pl_iq1sx_act *a) {
    const __m512i B = _mm512_cvtepi16_epi32(_mm256_loadu_si256((const __m256i *)yb->b.bsums));
    const __m512i t7 = _mm512_mullo_epi32(B, _mm512_set1_epi32(-7)), t9 = _mm512_mullo_epi32(B, _mm512_set1_epi32(-9));
    const __m512i lo = _mm512_setr_epi32(0, 16, 1, 17, 2, 18, 3, 19, 4, 20, 5, 21, 6, 22, 7, 23);
    _mm512_store_si512((void *)a->tab, _mm512_permutex2var_epi32(t7, lo, t9));
    _mm512_store_si512((void *)(a->tab + 16), _mm512_permutex2var_epi32(t7, _mm512_add_epi32(lo, _mm512_set1_epi32(8)), t9));
    pl_iqx_q8_transpose_iq1(yb->b.qs, a->qt);
}

PL_IQX_DEC_F void pl_iq1sx_act_row(int64_t nb, const pl_q8kx *y, pl_iq1sx_act *act) {
    for (int64_t b = 0; b < nb; b++) pl_iq1sx_act_block(&y[b], &act[b]);
}

/* act: pl_iq1sx_act_row's, or NULL (made here per block) */
PL_IQX_DEC_F void pl_iq1sx_panel1(int64_t nb, const uint8_t *codes, const uint16_t *dv, const pl_q8kx *y,
                                   const pl_iq1sx_act *act, float *d, __mmask16 mk) {
    __attribute__((aligned(64))) pl_iq1sx_act own;
    __m512 accf = _mm512_setzero_ps();
    /* the f16 d of the blocks lie after the panel's codes, a stream the code prefetches below do
     * not reach before the block needs them */
    _mm_prefetch((const char *)dv, _MM_HINT_T0);
    _mm_prefetch((const char *)dv + 64, _MM_HINT_T0);
    for (int64_t b = 0; b < nb; b++) {
        const uint8_t *q = codes + b * PL_IQ1SX_CODES;
        _mm_prefetch((const char *)(dv + PL_KQX_ROWS * (b + PL_IQX_PF)), _MM_HINT_T0);
        const pl_iq1sx_act *a = act ? &act[b] : &own;
        if (!act) pl_iq1sx_act_block(&y[b], &own);
        const int8_t *qtb = a->qt;
        const int32_t *tab = a->tab;
        __m512i bsum = _mm512_setzero_si512();
        PL_UNROLL
        for (int s = 0; s < 8; s++) {
            _mm_prefetch((const char *)(q + 64 * s) + PL_IQX_PF * PL_IQ1SX_CODES, _MM_HINT_T0);
            if (s < 4) _mm_prefetch((const char *)(q + 512 + 64 * s) + PL_IQX_PF * PL_IQ1SX_CODES, _MM_HINT_T0);
            const __m512i x0 = pl_iq1mx_pair_bits(q + 96 * s), x1 = pl_iq1mx_pair_bits(q + 96 * s + 48);
            __m512i S[2];
            PL_UNROLL
            for (int h = 0; h < 2; h++) {
                const __m512i x = h ? x1 : x0;
                int64_t t;
                memcpy(&t, tab + 4 * s + 2 * h, 8);
                const __m512i ga = _mm512_i32gather_epi32(_mm512_and_si512(x, _mm512_set1_epi32(0x1FFC)), (const void *)pl_iqx_iq1m_c4, 1);
                const __m512i gb = _mm512_i32gather_epi32(pl_iq1mx_bits(x, 13), (const void *)pl_iqx_iq1m_c4, 4);
                S[h] = pl_iq1mx_dot(_mm512_mask_blend_epi16((__mmask32)0xAAAAAAAAu, ga, gb), qtb + 32 * s + 16 * h,
                                    _mm512_permutexvar_epi32(x0, _mm512_set1_epi64(t)));
            }
            /* pl_iq1mx_bits(x1, -2): bits 0-15 of x1 << 2 (x1 < 2^24), x1 bits 0-1 at 2-3 */
            const __m512i u = _mm512_ternarylogic_epi32(pl_iq1mx_bits(x1, -2), x0, _mm512_set1_epi32(12), 0xE4);   /* c ? a : b */
            const __m512i ls = _mm512_ternarylogic_epi32(u, _mm512_set1_epi32(14), _mm512_set1_epi32(1), 0xEA);   /* a & b | c */
            bsum = _mm512_dpwssd_epi32(_mm512_dpwssd_epi32(bsum, S[0], ls), S[1], ls);
        }
        const __m512 d16 = _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)(dv + PL_KQX_ROWS * b)));
        const __m512 dd = _mm512_mul_ps(d16, _mm512_set1_ps(y[b].b.d));
        accf = _mm512_add_ps(accf, _mm512_mul_ps(dd, _mm512_cvtepi32_ps(bsum)));
    }
    _mm512_mask_storeu_ps(d, mk, _mm512_mul_ps(_mm512_set1_ps(0.125f), accf));
}

/* iq1_m, one row: pair k = the 16 weights of scale k (groups a = 2 k, b = 2 k + 1). With B_g the
 * q8 sum of group g (8 weights) and da, db the delta signs,
 *     S16 = sum (8 g + delta) q8 = 8 D + T_k[da + 2 db],
 *     T_k[j] = -7 (B_a + B_b) - 2 B_a (j & 1) - 2 B_b (j >> 1),
 * the 4 values of pair k made once a block (tab) and looked up per row by one vpermd: its index
 * is x itself (bits 0, 1 = da, db; bits 2, 3 = ia's, hence the table 4 times in the zmm). |S16| <=
 * 16 x 9 x 128 < 2^15, so S16 times its 2 s + 1 (a dword with a zero high word) is one vpdpwssd. */
/* What the one-row kernel needs of the activation row, per block: its q8 codes transposed and the
 * T_k. It depends on the row alone, so the gemm makes it once for all the panels when the row's
 * blocks fit PL_IQ1MX_ACT_MAX (the panel kernel makes it per block otherwise: the same integers). */
typedef struct {
    int8_t qt[256];
    int32_t tab[64];   /* T_k at 16 (k % 4) + 4 (k / 4) */
} pl_iq1mx_act;
#define PL_IQ1MX_ACT_MAX 64   /* K <= 16384: 32 KB of stack */

PL_IQX_DEC_AI void pl_iq1mx_act_block(const pl_q8kx *yb, pl_iq1mx_act *a) {
    const __m512i even = _mm512_setr_epi32(0, 2, 4, 6, 8, 10, 12, 14, 16, 18, 20, 22, 24, 26, 28, 30);
    const __m512i odd = _mm512_add_epi32(even, _mm512_set1_epi32(1));
    __m512i q4[4];   /* dword i: the sum of q8 codes 4 i .. 4 i + 3 of the 64 in zmm t */
    PL_UNROLL
    for (int t = 0; t < 4; t++)
        q4[t] = _mm512_dpbusd_epi32(_mm512_setzero_si512(), _mm512_set1_epi8(1), _mm512_loadu_si512((const void *)(yb->b.qs + 64 * t)));
    __m512i G[2];    /* dword j of G[t]: B of group 16 t + j */
    PL_UNROLL
    for (int t = 0; t < 2; t++)
        G[t] = _mm512_add_epi32(_mm512_permutex2var_epi32(q4[2 * t], even, q4[2 * t + 1]),
                                _mm512_permutex2var_epi32(q4[2 * t], odd, q4[2 * t + 1]));
    const __m512i Ba = _mm512_permutex2var_epi32(G[0], even, G[1]), Bb = _mm512_permutex2var_epi32(G[0], odd, G[1]);
    const __m512i c0 = _mm512_mullo_epi32(_mm512_add_epi32(Ba, Bb), _mm512_set1_epi32(-7));
    const __m512i c1 = _mm512_sub_epi32(c0, _mm512_add_epi32(Ba, Ba));
    const __m512i c2 = _mm512_sub_epi32(c0, _mm512_add_epi32(Bb, Bb));
    const __m512i c3 = _mm512_sub_epi32(c1, _mm512_add_epi32(Bb, Bb));
    /* 4 x 4 transposes in the 128-bit lanes: lane l of row m = T_{4 l + m} */
    const __m512i u0 = _mm512_unpacklo_epi32(c0, c1), u1 = _mm512_unpacklo_epi32(c2, c3);
    const __m512i u2 = _mm512_unpackhi_epi32(c0, c1), u3 = _mm512_unpackhi_epi32(c2, c3);
    _mm512_store_si512((void *)(a->tab + 0), _mm512_unpacklo_epi64(u0, u1));
    _mm512_store_si512((void *)(a->tab + 16), _mm512_unpackhi_epi64(u0, u1));
    _mm512_store_si512((void *)(a->tab + 32), _mm512_unpacklo_epi64(u2, u3));
    _mm512_store_si512((void *)(a->tab + 48), _mm512_unpackhi_epi64(u2, u3));
    pl_iqx_q8_transpose_iq1(yb->b.qs, a->qt);
}

PL_IQX_DEC_F void pl_iq1mx_act_row(int64_t nb, const pl_q8kx *y, pl_iq1mx_act *act) {
    for (int64_t b = 0; b < nb; b++) pl_iq1mx_act_block(&y[b], &act[b]);
}

/* act: pl_iq1mx_act_row's, or NULL (made here per block) */
PL_IQX_DEC_F void pl_iq1mx_panel1(int64_t nb, const uint8_t *codes, const pl_q8kx *y, const pl_iq1mx_act *act,
                                   float *d, __mmask16 mk) {
    __attribute__((aligned(64))) pl_iq1mx_act own;
    __m512 accf = _mm512_setzero_ps();
    for (int64_t b = 0; b < nb; b++) {
        const uint8_t *q = codes + b * PL_IQ1MX_BLOCK;
        const uint16_t *sc = (const uint16_t *)(q + PL_IQ1MX_SC);
        const pl_iq1mx_act *a = act ? &act[b] : &own;
        if (!act) pl_iq1mx_act_block(&y[b], &own);
        const int8_t *qtb = a->qt;
        const int32_t *tab = a->tab;
        __m512i bsum = _mm512_setzero_si512();
        /* the loop over the 4 scale words, unrolled by hand in each (GCC's unroll pragma left the
         * loop over k rolled, with k % 4 and k / 4 computed and the shift count in a register) */
        for (int kq = 0; kq < 4; kq++) {
            const __m512i sw = _mm512_cvtepu16_epi32(_mm256_loadu_si256((const __m256i *)(sc + 16 * kq)));
            PL_UNROLL
            for (int m = 0; m < 4; m++) {
                const int k = 4 * kq + m;
                if (k < 14) _mm_prefetch((const char *)(q + 64 * k) + PL_IQX_PF * PL_IQ1MX_BLOCK, _MM_HINT_T0);
                const __m512i x = pl_iq1mx_pair_bits(q + 48 * k);
                const __m512i T = _mm512_broadcast_i32x4(_mm_load_si128((const __m128i *)(tab + 16 * m + 4 * kq)));
                const __m512i ga = _mm512_i32gather_epi32(_mm512_and_si512(x, _mm512_set1_epi32(0x1FFC)), (const void *)pl_iqx_iq1m_c4, 1);
                const __m512i gb = _mm512_i32gather_epi32(pl_iq1mx_bits(x, 13), (const void *)pl_iqx_iq1m_c4, 4);
                const __m512i S = pl_iq1mx_dot(_mm512_mask_blend_epi16((__mmask32)0xAAAAAAAAu, ga, gb), qtb + 16 * k,
                                                 _mm512_permutexvar_epi32(x, T));
                /* 2 s + 1: the 3 bits at 3 m moved to bits 1-3, | 1 */
                const __m512i s2 = pl_iq1mx_bits(sw, 3 * m - 1);
                const __m512i ls = _mm512_ternarylogic_epi32(s2, _mm512_set1_epi32(14), _mm512_set1_epi32(1), 0xEA);   /* a & b | c */
                bsum = _mm512_dpwssd_epi32(bsum, S, ls);
            }
        }
        const __m512 dd = _mm512_mul_ps(pl_iq1mx_d16(sc), _mm512_set1_ps(y[b].b.d));
        accf = _mm512_add_ps(accf, _mm512_mul_ps(dd, _mm512_cvtepi32_ps(bsum)));
    }
    _mm512_mask_storeu_ps(d, mk, _mm512_mul_ps(_mm512_set1_ps(0.125f), accf));
}

/* PL_CPU_IQ1MACT=0: the iq1_m one-row kernel makes its activation data per block and panel (the
 * path for K > 16384), to test it against the shared one */
static bool pl_iq1mx_act_on(void) {
    static int cached = -1;
    if (cached < 0) cached = pl_cpu_switch("PL_CPU_IQ1MACT");
    return cached;
}

int pl_iqx_iq1s_dec = -1, pl_iqx_iq1s_act = -1;

/* PL_CPU_IQ1DEC=0 (or PL_CPU_IQDEC=0): one activation row of iq1_s / iq1_m takes the gather tile */
static bool pl_iqx_iq1dec_enabled(void) {
    static int cached = -1;
    if (cached < 0) cached = pl_iqx_dec_enabled() && pl_cpu_switch("PL_CPU_IQ1DEC");
    return cached;
}

PL_IQX_T void pl_cpu_gemm_iq1sx16_vnni(int64_t K, const uint8_t *w, int64_t p0, int64_t p1, const pl_q8kx *a,
                                       size_t as, int64_t c0, int64_t c1, float *dst, int64_t N) {
    const int64_t nb = K / QK_K;
    const size_t pb = pl_iq1sx_panel_bytes(K);
    const bool dec = pl_iqx_iq1dec_enabled();
    static int sw_dec = -1, sw_act = -1;
    const bool pair = pl_iqx_choice(pl_iqx_iq1s_dec, &sw_dec, "PL_CPU_IQ1SDEC");
    const bool act_on = pl_iqx_choice(pl_iqx_iq1s_act, &sw_act, "PL_CPU_IQ1SACT");
    /* a lone last activation row (R == 1 below) is the same row in every panel */
    __attribute__((aligned(64))) pl_iq1sx_act act[PL_IQ1SX_ACT_MAX];
    const bool have_act = dec && pair && (c1 - c0) % PL_IQX_R == 1 && nb <= PL_IQ1SX_ACT_MAX && p1 > p0 && act_on;
    if (have_act) pl_iq1sx_act_row(nb, (const pl_q8kx *)((const char *)a + (c1 - 1) * as), act);
    for (int64_t p = p0; p < p1; p++) {
        const uint8_t *codes = w + (size_t)p * pb;
        const uint16_t *dv = (const uint16_t *)(codes + nb * PL_IQ1SX_CODES);
        const __mmask16 mk = pl_iqx_mask(p, N);
        for (int64_t c = c0; c < c1; c += PL_IQX_R) {
            const pl_q8kx *y[PL_IQX_R];
            const int R = c1 - c < PL_IQX_R ? (int)(c1 - c) : PL_IQX_R;
            for (int i = 0; i < R; i++) y[i] = (const pl_q8kx *)((const char *)a + (c + i) * as);
            float *d = dst + c * N + PL_KQX_ROWS * p;
            if (R == 1 && dec) {
                if (pair) pl_iq1sx_panel1(nb, codes, dv, y[0], have_act ? act : NULL, d, mk);
                else pl_iq1sx_panel1g(nb, codes, dv, y[0], d, mk);
                continue;
            }
            switch (R) {
                case 4: pl_iq1sx_tile(nb, codes, dv, y, d, N, mk, 4); break;
                case 3: pl_iq1sx_tile(nb, codes, dv, y, d, N, mk, 3); break;
                case 2: pl_iq1sx_tile(nb, codes, dv, y, d, N, mk, 2); break;
                default: pl_iq1sx_tile(nb, codes, dv, y, d, N, mk, 1); break;
            }
        }
    }
}

/* ---- iq1_m (PL_PACK_IQ1MX_X16) ----------------------------------------------------------------
 * A weight is (g + delta / 8), delta = +-1 per group of 8, a 3-bit scale per 16 weights. In
 * integers times 8, shifted to unsigned codes u = 8 (g + 1) + delta + 1 = 0..18 (pl_iqx_iq1m_u,
 * looked up by the 12-bit index qs | qh nibble << 8, the nibble's bit 3 being the delta sign):
 *     S16 = sum (8 g + delta) q8 = sum u q8 - 9 B16,  B16 = the q8_K block's bsums[k]
 * bsum = sum over the 16 units of (2 s + 1) S16, acc += (d * dy) * bsum, result 0.125f * acc;
 * d is the f16 made of the top nibbles of the 4 scale words. */
PL_IQX_AI void pl_iq1mx_panel(int64_t nb, const uint8_t *codes, const pl_q8kx *const *y, __m512 *accf, const int R) {
    const __m512i pair_lo = _mm512_setr_epi32(0, 0, 1, 1, 2, 2, 3, 3, 4, 4, 5, 5, 6, 6, 7, 7);
    const __m512i pair_hi = _mm512_add_epi32(pair_lo, _mm512_set1_epi32(8));
    for (int64_t b = 0; b < nb; b++) {
        const uint8_t *q = codes + b * PL_IQ1MX_BLOCK;
        const uint16_t *sc = (const uint16_t *)(q + PL_IQ1MX_SC);
        __m512i blo[PL_IQX_R], bhi[PL_IQX_R];
        PL_UNROLL
        for (int c = 0; c < R; c++) blo[c] = bhi[c] = _mm512_setzero_si512();
        PL_UNROLL
        for (int k = 0; k < 16; k++) {
            if (k < 14) _mm_prefetch((const char *)(q + 64 * k) + PL_IQX_PF * PL_IQ1MX_BLOCK, _MM_HINT_T0);
            const __m512i x = pl_iq1mx_pair_bits(q + 48 * k);
            const __m512i sw = _mm512_cvtepu16_epi32(_mm256_loadu_si256((const __m256i *)(sc + 16 * (k / 4))));
            const __m512i s3 = _mm512_and_si512(_mm512_srli_epi32(sw, 3 * (k % 4)), _mm512_set1_epi32(7));
            const __m512i ls = _mm512_add_epi32(_mm512_add_epi32(s3, s3), _mm512_set1_epi32(1));
            const __m512i lslo = _mm512_permutexvar_epi32(pair_lo, ls), lshi = _mm512_permutexvar_epi32(pair_hi, ls);
            const __m512i le = _mm512_mullo_epi32(ls, _mm512_set1_epi32(-9));
            const __m512i lelo = _mm512_maskz_permutexvar_epi32(0x5555, pair_lo, le);
            const __m512i lehi = _mm512_maskz_permutexvar_epi32(0x5555, pair_hi, le);
            __m512i alo[PL_IQX_R], ahi[PL_IQX_R];
            PL_UNROLL
            for (int c = 0; c < R; c++) alo[c] = ahi[c] = _mm512_setzero_si512();
            PL_UNROLL
            for (int h = 0; h < 2; h++) {
                const int g = 2 * k + h;
                /* index | delta sign << 11: a's index at bit 2, its sign at 0; b's at 13 and 1 */
                const __m512i ix =
                    h ? _mm512_ternarylogic_epi32(_mm512_srli_epi32(x, 13), _mm512_slli_epi32(x, 10), _mm512_set1_epi32(0x800), 0xF8)
                      : _mm512_ternarylogic_epi32(_mm512_and_si512(_mm512_srli_epi32(x, 2), _mm512_set1_epi32(0x7FF)),
                                                  _mm512_slli_epi32(x, 11), _mm512_set1_epi32(0x800), 0xF8);   /* a | (b & c) */
                __m512i glo, ghi;
                pl_iqx_gather(_mm512_castsi512_si256(ix), _mm512_extracti64x4_epi64(ix, 1), pl_iqx_iq1m_u, &glo, &ghi);
                PL_UNROLL
                for (int c = 0; c < R; c++) pl_iqx_dot(glo, ghi, NULL, y[c][b].b.qs + 8 * g, &alo[c], &ahi[c]);
            }
            PL_UNROLL
            for (int c = 0; c < R; c++) {
                const __m512i B = _mm512_set1_epi32(y[c][b].b.bsums[k]);
                blo[c] = _mm512_add_epi32(blo[c], _mm512_add_epi32(_mm512_mullo_epi32(alo[c], lslo), _mm512_mullo_epi32(B, lelo)));
                bhi[c] = _mm512_add_epi32(bhi[c], _mm512_add_epi32(_mm512_mullo_epi32(ahi[c], lshi), _mm512_mullo_epi32(B, lehi)));
            }
        }
        const __m512 d16 = pl_iq1mx_d16(sc);
        pl_iqx_block_acc(blo, bhi, d16, y, b, accf, R);
    }
}

PL_IQX_AI void pl_iq1mx_tile(int64_t nb, const uint8_t *codes, const pl_q8kx *const *y, float *d, int64_t ldd,
                             __mmask16 mk, const int R) {
    __m512 accf[PL_IQX_R];
    PL_UNROLL
    for (int c = 0; c < R; c++) accf[c] = _mm512_setzero_ps();
    pl_iq1mx_panel(nb, codes, y, accf, R);
    PL_UNROLL
    for (int c = 0; c < R; c++) _mm512_mask_storeu_ps(d + c * ldd, mk, _mm512_mul_ps(_mm512_set1_ps(0.125f), accf[c]));
}

PL_IQX_T void pl_cpu_gemm_iq1mx16_vnni(int64_t K, const uint8_t *w, int64_t p0, int64_t p1, const pl_q8kx *a,
                                       size_t as, int64_t c0, int64_t c1, float *dst, int64_t N) {
    const int64_t nb = K / QK_K;
    const size_t pb = pl_iq1mx_panel_bytes(K);
    const bool dec = pl_iqx_iq1dec_enabled();
    /* a lone last activation row (R == 1 below) is the same row in every panel */
    __attribute__((aligned(64))) pl_iq1mx_act act[PL_IQ1MX_ACT_MAX];
    const bool have_act = dec && (c1 - c0) % PL_IQX_R == 1 && nb <= PL_IQ1MX_ACT_MAX && p1 > p0 && pl_iq1mx_act_on();
    if (have_act) pl_iq1mx_act_row(nb, (const pl_q8kx *)((const char *)a + (c1 - 1) * as), act);
    for (int64_t p = p0; p < p1; p++) {
        const uint8_t *codes = w + (size_t)p * pb;
        const __mmask16 mk = pl_iqx_mask(p, N);
        for (int64_t c = c0; c < c1; c += PL_IQX_R) {
            const pl_q8kx *y[PL_IQX_R];
            const int R = c1 - c < PL_IQX_R ? (int)(c1 - c) : PL_IQX_R;
            for (int i = 0; i < R; i++) y[i] = (const pl_q8kx *)((const char *)a + (c + i) * as);
            float *d = dst + c * N + PL_KQX_ROWS * p;
            if (R == 1 && dec) {
                pl_iq1mx_panel1(nb, codes, y[0], have_act ? act : NULL, d, mk);
                continue;
            }
            switch (R) {
                case 4: pl_iq1mx_tile(nb, codes, y, d, N, mk, 4); break;
                case 3: pl_iq1mx_tile(nb, codes, y, d, N, mk, 3); break;
                case 2: pl_iq1mx_tile(nb, codes, y, d, N, mk, 2); break;
                default: pl_iq1mx_tile(nb, codes, y, d, N, mk, 1); break;
            }
        }
    }
}

/* ---- iq2_s (PL_PACK_IQ2SX_X16): as iq2_xs, with a 10-bit index (qh bits) and stored sign bytes */
PL_IQX_AI void pl_iq2sx_panel(int64_t nb, const uint8_t *codes, const uint16_t *dv, const pl_q8kx *const *y,
                               __m512 *accf, const int R) {
    const __m512i pair_lo = _mm512_setr_epi32(0, 0, 1, 1, 2, 2, 3, 3, 4, 4, 5, 5, 6, 6, 7, 7);
    const __m512i pair_hi = _mm512_add_epi32(pair_lo, _mm512_set1_epi32(8));
    for (int64_t b = 0; b < nb; b++) {
        const uint8_t *q = codes + b * PL_IQ2SX_CODES, *sgb = q + 512, *qhb = q + 1024, *scb = q + 1152;
        __m512i blo[PL_IQX_R], bhi[PL_IQX_R];
        PL_UNROLL
        for (int c = 0; c < R; c++) blo[c] = bhi[c] = _mm512_setzero_si512();
        PL_UNROLL
        for (int s = 0; s < 8; s++) {
            _mm_prefetch((const char *)(q + 64 * s) + PL_IQX_PF * PL_IQ2SX_CODES, _MM_HINT_T0);
            _mm_prefetch((const char *)(sgb + 64 * s) + PL_IQX_PF * PL_IQ2SX_CODES, _MM_HINT_T0);
            if (s < 4) _mm_prefetch((const char *)(qhb + 64 * s) + PL_IQX_PF * PL_IQ2SX_CODES, _MM_HINT_T0);
            /* the sign bytes of a group's 8 rows are its mask as they stand */
            const uint64_t *km = (const uint64_t *)(sgb + 64 * s);
            const __m512i hb = _mm512_cvtepu8_epi32(_mm_loadu_si128((const __m128i *)(qhb + 16 * s)));
            const __m512i sb = _mm512_cvtepu8_epi32(_mm_loadu_si128((const __m128i *)(scb + 16 * s)));
            const __m512i s0 = _mm512_and_si512(sb, _mm512_set1_epi32(15)), s1 = _mm512_srli_epi32(sb, 4);
            const __m512i m0 = _mm512_add_epi32(_mm512_add_epi32(s0, s0), _mm512_set1_epi32(1));
            const __m512i m1 = _mm512_add_epi32(_mm512_add_epi32(s1, s1), _mm512_set1_epi32(1));
            const __m512i m0lo = _mm512_permutexvar_epi32(pair_lo, m0), m0hi = _mm512_permutexvar_epi32(pair_hi, m0);
            const __m512i m1lo = _mm512_permutexvar_epi32(pair_lo, m1), m1hi = _mm512_permutexvar_epi32(pair_hi, m1);
            __m512i alo[2][PL_IQX_R], ahi[2][PL_IQX_R];
            PL_UNROLL
            for (int c = 0; c < R; c++) alo[0][c] = ahi[0][c] = alo[1][c] = ahi[1][c] = _mm512_setzero_si512();
            PL_UNROLL
            for (int l = 0; l < 4; l++) {
                const int g = 4 * s + l;
                const __m512i ix = _mm512_or_si512(_mm512_cvtepu8_epi32(_mm_loadu_si128((const __m128i *)(q + 16 * g))),
                                                   _mm512_slli_epi32(_mm512_and_si512(_mm512_srli_epi32(hb, 2 * l), _mm512_set1_epi32(3)), 8));
                __m512i glo, ghi;
                pl_iqx_gather(_mm512_castsi512_si256(ix), _mm512_extracti64x4_epi64(ix, 1), pl_iq2s_grid, &glo, &ghi);
                PL_UNROLL
                for (int c = 0; c < R; c++) pl_iqx_dot(glo, ghi, &km[2 * l], y[c][b].b.qs + 8 * g, &alo[l >> 1][c], &ahi[l >> 1][c]);
            }
            PL_UNROLL
            for (int c = 0; c < R; c++) {
                blo[c] = _mm512_add_epi32(blo[c], _mm512_add_epi32(_mm512_mullo_epi32(alo[0][c], m0lo), _mm512_mullo_epi32(alo[1][c], m1lo)));
                bhi[c] = _mm512_add_epi32(bhi[c], _mm512_add_epi32(_mm512_mullo_epi32(ahi[0][c], m0hi), _mm512_mullo_epi32(ahi[1][c], m1hi)));
            }
        }
        const __m512 d16 = _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)(dv + PL_KQX_ROWS * b)));
        pl_iqx_block_acc(blo, bhi, d16, y, b, accf, R);
    }
}

PL_IQX_AI void pl_iq2sx_tile(int64_t nb, const uint8_t *codes, const uint16_t *dv, const pl_q8kx *const *y, float *d,
                              int64_t ldd, __mmask16 mk, const int R) {
    __m512 accf[PL_IQX_R];
    PL_UNROLL
    for (int c = 0; c < R; c++) accf[c] = _mm512_setzero_ps();
    pl_iq2sx_panel(nb, codes, dv, y, accf, R);
    PL_UNROLL
    for (int c = 0; c < R; c++) _mm512_mask_storeu_ps(d + c * ldd, mk, _mm512_mul_ps(_mm512_set1_ps(0.125f), accf[c]));
}

PL_IQX_T void pl_cpu_gemm_iq2sx16_vnni(int64_t K, const uint8_t *w, int64_t p0, int64_t p1, const pl_q8kx *a,
                                        size_t as, int64_t c0, int64_t c1, float *dst, int64_t N) {
    const int64_t nb = K / QK_K;
    const size_t pb = pl_iq2sx_panel_bytes(K);
    for (int64_t p = p0; p < p1; p++) {
        const uint8_t *codes = w + (size_t)p * pb;
        const uint16_t *dv = (const uint16_t *)(codes + nb * PL_IQ2SX_CODES);
        const __mmask16 mk = pl_iqx_mask(p, N);
        for (int64_t c = c0; c < c1; c += PL_IQX_R) {
            const pl_q8kx *y[PL_IQX_R];
            const int R = c1 - c < PL_IQX_R ? (int)(c1 - c) : PL_IQX_R;
            for (int i = 0; i < R; i++) y[i] = (const pl_q8kx *)((const char *)a + (c + i) * as);
            float *d = dst + c * N + PL_KQX_ROWS * p;
            switch (R) {
                case 4: pl_iq2sx_tile(nb, codes, dv, y, d, N, mk, 4); break;
                case 3: pl_iq2sx_tile(nb, codes, dv, y, d, N, mk, 3); break;
                case 2: pl_iq2sx_tile(nb, codes, dv, y, d, N, mk, 2); break;
                default: pl_iq2sx_tile(nb, codes, dv, y, d, N, mk, 1); break;
            }
        }
    }
}

