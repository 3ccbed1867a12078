/* AVX2 MATMUL tile kernels for the ladder formats (see cpu_matmul_iq.h and,
 * for the integer form every format is brought to, cpu_matmul_iq.c). Compiled
 * with -mavx2 -mfma -mf16c; only reached after pl_cpu_has_avx2().
 *
 * A tile takes one weight row and up to 4 q8_K activation rows. Per 256-element
 * block, a type's "prep" decodes the block-level fields (float factors dw / dm,
 * the 16 sub-block scales S, k-quant mins), then per 32-element group g its
 * "group" decoder produces, once for all activation rows:
 *     w   32 int8: the codes' signs (only the sign of each byte is used; for
 *         the grid types it is a +-1 vector, the magnitudes are separate),
 *     aw  32 uint8: the codes' magnitudes |code|,
 *     sc  16 int16: S[2g] in lanes 0-7 (elements 0-15), S[2g+1] in lanes 8-15.
 * and each activation row adds  madd(maddubs(aw, sign(q8, w)), sc)  to its
 * 8 int32 lanes: maddubs forms |code| * (+-q8) pair sums in int16 (at most
 * 2 * 127 * 127, no saturation), madd applies the scale and widens to int32.
 * Types whose codes are unsigned (LAD_UNSIGNED_<type>) skip the sign step;
 * the ternary types and q3_K store code + offset and take the offset back out
 * exactly, in integers, from the activation's bsums (LAD_OFFSET_<type>: the
 * lanes start at -(off . bsums), off = offset * S per run of 16); where every
 * S is 1 (LAD_NOSCALE_<type>: tq1_0, tq2_0) the int16 pair sums of a block are
 * added up (at most 8 * 2 * 2 * 127) and widened once, with no madd per group.
 * Once per block: acc += (dw * dy) * float(sum lanes); k-quants with mins also
 * add -(dm * dy) * (mins . bsums). The row result is the sum of acc's lanes.
 *
 * Grid types gather 4 codebook entries of 8 bytes (or 8 of 4) per group with
 * _mm256_set_epi64x / _mm256_set_epi32, as llama.cpp's AVX2 kernels do; sign
 * indices go through pl_ksigns_pm1_iq2xs (bytes +1 / -1), explicit sign bits
 * are spread to bytes with a shuffle, a bit mask and a compare.
 */
#include <immintrin.h>
#include <pthread.h>
#include <stdatomic.h>
#include <string.h>
#include "backends/cpu/cpu_internal.h"
#include "backends/cpu/cpu_matmul_iq.h"
#include "backends/cpu/cpu_simd_avx2.h"
#include "core/cpu_features.h"
#include "quant/blocks.h"
#include "quant/ggml_tables.h"

PL_AI float lad_h2f(uint16_t h) { return _cvtsh_ss(h); }

PL_AI uint32_t lad_u32(const void *p) {
    uint32_t v;
    memcpy(&v, p, 4);
    return v;
}

/* Block-level state of one weight block. */
typedef struct lad_b {
    float dw, dm;
    __m256i S16;           /* 16 int16 sub-block scales, one per 16 elements */
    __m256i mins;          /* 16 int16 mins (k-quants with mins only) */
    __m256i off;           /* 16 int16 offset * scale (LAD_OFFSET types only) */
    __m256i wv[8];         /* whole-block codes (tq1_0 only) */
} lad_b;

typedef struct lad_g {
    __m256i w, aw, sc;
} lad_g;

/* The scale vector of group g: dword g of S16 holds (S[2g], S[2g+1]);
 * broadcast it, then S[2g] to the low 128-bit lane and S[2g+1] to the high. */
PL_AI __m256i lad_scales(const lad_b *st, int g) {
    const __m256i pair = _mm256_permutevar8x32_epi32(st->S16, _mm256_set1_epi32(g));
    const __m256i pick = _mm256_setr_epi8(0, 1, 0, 1, 0, 1, 0, 1, 0, 1, 0, 1, 0, 1, 0, 1,
                                          2, 3, 2, 3, 2, 3, 2, 3, 2, 3, 2, 3, 2, 3, 2, 3);
    return _mm256_shuffle_epi8(pair, pick);
}

/* S16 from 8 scales, one per 32-element group (each covers two runs of 16). */
PL_AI __m256i lad_S32(const int16_t s[8]) {
    const __m128i v = _mm_loadu_si128((const __m128i *)s);
    return _mm256_inserti128_si256(_mm256_castsi128_si256(_mm_unpacklo_epi16(v, v)), _mm_unpackhi_epi16(v, v), 1);
}

/* S16 = 2 * nibble + 1 from 8 bytes of two 4-bit scales (low nibble: first
 * 16 elements of the group, high nibble: the next 16). */
PL_AI __m256i lad_S_nibbles_odd(const uint8_t *sc8) {
    const __m128i v = _mm_loadl_epi64((const __m128i *)sc8), m4 = _mm_set1_epi8(0x0F);
    const __m128i nib = _mm_unpacklo_epi8(_mm_and_si128(v, m4), _mm_and_si128(_mm_srli_epi16(v, 4), m4));
    const __m256i s = _mm256_cvtepu8_epi16(nib);
    return _mm256_add_epi16(_mm256_slli_epi16(s, 1), _mm256_set1_epi16(1));
}

/* Signed codes w: sign vector w itself, magnitudes |w|. */
PL_AI lad_g lad_signed(__m256i w, const lad_b *st, int g) {
    lad_g q = {w, _mm256_abs_epi8(w), lad_scales(st, g)};
    return q;
}

/* 32 bytes of +1 / -1 from 32 explicit sign bits (bit j of byte r -> element
 * 8 r + j, set = negative). */
PL_AI __m256i lad_sign_bits(uint32_t bits) {
    const __m256i v = _mm256_set1_epi32((int)bits);
    const __m256i spread = _mm256_setr_epi64x(0, 0x0101010101010101LL, 0x0202020202020202LL, 0x0303030303030303LL);
    const __m256i mask = _mm256_set1_epi64x((long long)0x8040201008040201ULL);
    const __m256i set = _mm256_cmpeq_epi8(_mm256_and_si256(_mm256_shuffle_epi8(v, spread), mask), mask);
    return _mm256_or_si256(set, _mm256_set1_epi8(1));
}

/* ---- k-quants --------------------------------------------------------------------*/

/* q2_K: group g = bit pair j = g % 4 of the 32 bytes qs[32 (g / 4) ..]. */
PL_AI void lad_prep_q2_K(const block_q2_K *b, lad_b *st) {
    const __m128i sc8 = _mm_loadu_si128((const __m128i *)b->scales), m4 = _mm_set1_epi8(0x0F);
    st->mins = _mm256_cvtepu8_epi16(_mm_and_si128(_mm_srli_epi16(sc8, 4), m4));
    st->S16 = _mm256_cvtepu8_epi16(_mm_and_si128(sc8, m4));
    st->dw = lad_h2f(b->d);
    st->dm = lad_h2f(b->dmin);
}
PL_AI lad_g lad_group_q2_K(const block_q2_K *b, const lad_b *st, int g) {
    const __m256i bits = _mm256_loadu_si256((const __m256i *)(b->qs + 32 * (g / 4)));
    const __m256i w = _mm256_and_si256(_mm256_srli_epi16(bits, 2 * (g % 4)), _mm256_set1_epi8(3));
    lad_g q = {w, w, lad_scales(st, g)};
    return q;
}
#define LAD_HAS_MIN_q2_K 1
#define LAD_UNSIGNED_q2_K 1
#define LAD_NOSCALE_q2_K 0
#define LAD_OFFSET_q2_K 0

/* q3_K: code u = low 2 bits (as q2_K) | hmask bit << 2, value u - 4; the hmask
 * bit of group g is bit g of hmask[l]. The 16 6-bit scales (minus 32): low
 * nibbles of bytes 0-7 (scales 0-7) and their high nibbles (8-15), top two
 * bits of scale s at bits 2 (s / 4) of byte 8 + s % 4. */
PL_AI void lad_prep_q3_K(const block_q3_K *b, lad_b *st) {
    const uint32_t a0 = lad_u32(b->scales), a1 = lad_u32(b->scales + 4), a2 = lad_u32(b->scales + 8);
    const uint32_t m2 = 0x03030303u, m4 = 0x0F0F0F0Fu;
    const __m128i s8 = _mm_setr_epi32((int)((a0 & m4) | ((a2 & m2) << 4)), (int)((a1 & m4) | (((a2 >> 2) & m2) << 4)),
                                      (int)(((a0 >> 4) & m4) | (((a2 >> 4) & m2) << 4)),
                                      (int)(((a1 >> 4) & m4) | (((a2 >> 6) & m2) << 4)));
    st->S16 = _mm256_sub_epi16(_mm256_cvtepu8_epi16(s8), _mm256_set1_epi16(32));
    st->off = _mm256_slli_epi16(st->S16, 2);
    st->dw = lad_h2f(b->d);
}
PL_AI lad_g lad_group_q3_K(const block_q3_K *b, const lad_b *st, int g) {
    const __m256i bits = _mm256_loadu_si256((const __m256i *)(b->qs + 32 * (g / 4)));
    const __m256i low = _mm256_and_si256(_mm256_srli_epi16(bits, 2 * (g % 4)), _mm256_set1_epi8(3));
    const __m256i hm = _mm256_loadu_si256((const __m256i *)b->hmask);
    const __m256i hb = _mm256_and_si256(_mm256_srli_epi16(hm, g), _mm256_set1_epi8(1));
    const __m256i u = _mm256_or_si256(low, _mm256_slli_epi16(hb, 2));
    lad_g q = {u, u, lad_scales(st, g)};
    return q;
}
#define LAD_HAS_MIN_q3_K 0
#define LAD_UNSIGNED_q3_K 1
#define LAD_NOSCALE_q3_K 0
#define LAD_OFFSET_q3_K 1

/* q5_K: group g = nibble g & 1 of qs[32 (g / 2) ..] plus bit g of qh[l] as
 * bit 4. Scales / mins: the 12-byte 6-bit packing of q4_K (see blocks.h). */
PL_AI void lad_prep_q5_K(const block_q5_K *b, lad_b *st) {
    const uint32_t u0 = lad_u32(b->scales), u1 = lad_u32(b->scales + 4), u2 = lad_u32(b->scales + 8);
    const uint32_t sc03 = u0 & 0x3F3F3F3Fu, m03 = u1 & 0x3F3F3F3Fu;
    const uint32_t sc47 = (u2 & 0x0F0F0F0Fu) | (((u0 >> 6) & 0x03030303u) << 4);
    const uint32_t m47 = ((u2 >> 4) & 0x0F0F0F0Fu) | (((u1 >> 6) & 0x03030303u) << 4);
    const __m128i sc = _mm_setr_epi32((int)sc03, (int)sc47, 0, 0), mn = _mm_setr_epi32((int)m03, (int)m47, 0, 0);
    st->S16 = _mm256_cvtepu8_epi16(_mm_unpacklo_epi8(sc, sc));   /* each group's scale for both runs */
    st->mins = _mm256_cvtepu8_epi16(_mm_unpacklo_epi8(mn, mn));
    st->dw = lad_h2f(b->d);
    st->dm = lad_h2f(b->dmin);
}
PL_AI lad_g lad_group_q5_K(const block_q5_K *b, const lad_b *st, int g) {
    const __m256i m4 = _mm256_set1_epi8(0x0F);
    const __m256i q = _mm256_loadu_si256((const __m256i *)(b->qs + 32 * (g / 2)));
    const __m256i lo = (g & 1) ? _mm256_and_si256(_mm256_srli_epi16(q, 4), m4) : _mm256_and_si256(q, m4);
    const __m256i qh = _mm256_loadu_si256((const __m256i *)b->qh);
    const __m256i hb = _mm256_and_si256(_mm256_srli_epi16(qh, g), _mm256_set1_epi8(1));
    const __m256i w = _mm256_or_si256(lo, _mm256_slli_epi16(hb, 4));
    lad_g r = {w, w, lad_scales(st, g)};
    return r;
}
#define LAD_HAS_MIN_q5_K 1
#define LAD_UNSIGNED_q5_K 1
#define LAD_NOSCALE_q5_K 0
#define LAD_OFFSET_q5_K 0

/* ---- IQ2 / IQ3 ----------------------------------------------------------------------*/

PL_AI __m256i lad_pm1(uint32_t s, int shift0) {
    /* 4 sign indices of 7 bits, starting at bit shift0 */
    return _mm256_set_epi64x((long long)pl_ksigns_pm1_iq2xs[(s >> (shift0 + 21)) & 127],
                             (long long)pl_ksigns_pm1_iq2xs[(s >> (shift0 + 14)) & 127],
                             (long long)pl_ksigns_pm1_iq2xs[(s >> (shift0 + 7)) & 127],
                             (long long)pl_ksigns_pm1_iq2xs[(s >> shift0) & 127]);
}

PL_AI void lad_prep_iq2_xxs(const block_iq2_xxs *b, lad_b *st) {
    int16_t s[8];
    for (int g = 0; g < 8; g++) s[g] = (int16_t)(2 * (int)(lad_u32(&b->qs[4 * g + 2]) >> 28) + 1);
    st->S16 = lad_S32(s);
    st->dw = lad_h2f(b->d) * 0.125f;
}
PL_AI lad_g lad_group_iq2_xxs(const block_iq2_xxs *b, const lad_b *st, int g) {
    const uint32_t a = lad_u32(&b->qs[4 * g]), s = lad_u32(&b->qs[4 * g + 2]);
    lad_g q;
    q.aw = _mm256_set_epi64x((long long)pl_iq2xxs_grid[a >> 24], (long long)pl_iq2xxs_grid[(a >> 16) & 0xFF],
                             (long long)pl_iq2xxs_grid[(a >> 8) & 0xFF], (long long)pl_iq2xxs_grid[a & 0xFF]);
    q.w = lad_pm1(s, 0);
    q.sc = lad_scales(st, g);
    return q;
}
#define LAD_HAS_MIN_iq2_xxs 0
#define LAD_UNSIGNED_iq2_xxs 0
#define LAD_NOSCALE_iq2_xxs 0
#define LAD_OFFSET_iq2_xxs 0

PL_AI void lad_prep_iq2_xs(const block_iq2_xs *b, lad_b *st) {
    st->S16 = lad_S_nibbles_odd(b->scales);
    st->dw = lad_h2f(b->d) * 0.125f;
}
PL_AI lad_g lad_group_iq2_xs(const block_iq2_xs *b, const lad_b *st, int g) {
    const uint16_t *q = b->qs + 4 * g;   /* 9-bit grid index | 7-bit sign index << 9 */
    lad_g r;
    r.aw = _mm256_set_epi64x((long long)pl_iq2xs_grid[q[3] & 511], (long long)pl_iq2xs_grid[q[2] & 511],
                             (long long)pl_iq2xs_grid[q[1] & 511], (long long)pl_iq2xs_grid[q[0] & 511]);
    r.w = _mm256_set_epi64x((long long)pl_ksigns_pm1_iq2xs[q[3] >> 9], (long long)pl_ksigns_pm1_iq2xs[q[2] >> 9],
                            (long long)pl_ksigns_pm1_iq2xs[q[1] >> 9], (long long)pl_ksigns_pm1_iq2xs[q[0] >> 9]);
    r.sc = lad_scales(st, g);
    return r;
}
#define LAD_HAS_MIN_iq2_xs 0
#define LAD_UNSIGNED_iq2_xs 0
#define LAD_NOSCALE_iq2_xs 0
#define LAD_OFFSET_iq2_xs 0

PL_AI void lad_prep_iq2_s(const block_iq2_s *b, lad_b *st) {
    st->S16 = lad_S_nibbles_odd(b->scales);
    st->dw = lad_h2f(b->d) * 0.125f;
}
PL_AI lad_g lad_group_iq2_s(const block_iq2_s *b, const lad_b *st, int g) {
    const uint8_t *q = b->qs + 4 * g;
    const int h = b->qh[g];   /* bits 8-9 of the index of run l at bits 2l..2l+1 */
    lad_g r;
    r.aw = _mm256_set_epi64x((long long)pl_iq2s_grid[q[3] | ((h << 2) & 0x300)],
                             (long long)pl_iq2s_grid[q[2] | ((h << 4) & 0x300)],
                             (long long)pl_iq2s_grid[q[1] | ((h << 6) & 0x300)],
                             (long long)pl_iq2s_grid[q[0] | ((h << 8) & 0x300)]);
    r.w = lad_sign_bits(lad_u32(b->qs + QK_K / 8 + 4 * g));
    r.sc = lad_scales(st, g);
    return r;
}
#define LAD_HAS_MIN_iq2_s 0
#define LAD_UNSIGNED_iq2_s 0
#define LAD_NOSCALE_iq2_s 0
#define LAD_OFFSET_iq2_s 0

PL_AI void lad_prep_iq3_xxs(const block_iq3_xxs *b, lad_b *st) {
    int16_t s[8];
    for (int g = 0; g < 8; g++) s[g] = (int16_t)(2 * (int)(lad_u32(b->qs + QK_K / 4 + 4 * g) >> 28) + 1);
    st->S16 = lad_S32(s);
    st->dw = lad_h2f(b->d) * 0.25f;
}
PL_AI lad_g lad_group_iq3_xxs(const block_iq3_xxs *b, const lad_b *st, int g) {
    const uint8_t *q = b->qs + 8 * g;
    lad_g r;
    r.aw = _mm256_set_epi32((int)pl_iq3xxs_grid[q[7]], (int)pl_iq3xxs_grid[q[6]], (int)pl_iq3xxs_grid[q[5]],
                            (int)pl_iq3xxs_grid[q[4]], (int)pl_iq3xxs_grid[q[3]], (int)pl_iq3xxs_grid[q[2]],
                            (int)pl_iq3xxs_grid[q[1]], (int)pl_iq3xxs_grid[q[0]]);
    r.w = lad_pm1(lad_u32(b->qs + QK_K / 4 + 4 * g), 0);
    r.sc = lad_scales(st, g);
    return r;
}
#define LAD_HAS_MIN_iq3_xxs 0
#define LAD_UNSIGNED_iq3_xxs 0
#define LAD_NOSCALE_iq3_xxs 0
#define LAD_OFFSET_iq3_xxs 0

PL_AI void lad_prep_iq3_s(const block_iq3_s *b, lad_b *st) {
    /* 4 bytes of two nibbles = the 8 group scales in order */
    const __m128i v = _mm_cvtsi32_si128((int)lad_u32(b->scales)), m4 = _mm_set1_epi8(0x0F);
    const __m128i nib = _mm_unpacklo_epi8(_mm_and_si128(v, m4), _mm_and_si128(_mm_srli_epi16(v, 4), m4));
    const __m128i s16 = _mm_add_epi16(_mm_slli_epi16(_mm_cvtepu8_epi16(nib), 1), _mm_set1_epi16(1));
    st->S16 = _mm256_inserti128_si256(_mm256_castsi128_si256(_mm_unpacklo_epi16(s16, s16)), _mm_unpackhi_epi16(s16, s16), 1);
    st->dw = lad_h2f(b->d);
}
PL_AI lad_g lad_group_iq3_s(const block_iq3_s *b, const lad_b *st, int g) {
    const uint8_t *q = b->qs + 8 * g;
    const int h = b->qh[g];   /* bit 8 of the index of run k (of 4) is bit k */
#define LAD_I3(k) ((int)pl_iq3s_grid[q[k] | (((h >> (k)) & 1) << 8)])
    lad_g r;
    r.aw = _mm256_set_epi32(LAD_I3(7), LAD_I3(6), LAD_I3(5), LAD_I3(4), LAD_I3(3), LAD_I3(2), LAD_I3(1), LAD_I3(0));
#undef LAD_I3
    r.w = lad_sign_bits(lad_u32(b->signs + 4 * g));
    r.sc = lad_scales(st, g);
    return r;
}
#define LAD_HAS_MIN_iq3_s 0
#define LAD_UNSIGNED_iq3_s 0
#define LAD_NOSCALE_iq3_s 0
#define LAD_OFFSET_iq3_s 0

/* ---- IQ1: codes 8 * grid + delta (see cpu_matmul_iq.c) ----------------------------------*/

PL_AI __m256i lad_iq1_codes(uint64_t g0, uint64_t g1, uint64_t g2, uint64_t g3, __m256i delta) {
    const __m256i grid = _mm256_set_epi64x((long long)g3, (long long)g2, (long long)g1, (long long)g0);
    return _mm256_add_epi8(_mm256_sign_epi8(_mm256_set1_epi8(8), grid), delta);
}

PL_AI void lad_prep_iq1_s(const block_iq1_s *b, lad_b *st) {
    int16_t s[8];
    for (int g = 0; g < 8; g++) s[g] = (int16_t)(2 * ((b->qh[g] >> 12) & 7) + 1);
    st->S16 = lad_S32(s);
    st->dw = lad_h2f(b->d) * 0.125f;
}
PL_AI lad_g lad_group_iq1_s(const block_iq1_s *b, const lad_b *st, int g) {
    const uint8_t *q = b->qs + 4 * g;
    const int h = b->qh[g];
    const __m256i delta = _mm256_set1_epi8((h & 0x8000) ? -1 : 1);
    const __m256i w = lad_iq1_codes(pl_iq1s_grid[q[0] | ((h << 8) & 0x700)], pl_iq1s_grid[q[1] | ((h << 5) & 0x700)],
                                    pl_iq1s_grid[q[2] | ((h << 2) & 0x700)], pl_iq1s_grid[q[3] | ((h >> 1) & 0x700)],
                                    delta);
    return lad_signed(w, st, g);
}
#define LAD_HAS_MIN_iq1_s 0
#define LAD_UNSIGNED_iq1_s 0
#define LAD_NOSCALE_iq1_s 0
#define LAD_OFFSET_iq1_s 0

PL_AI void lad_prep_iq1_m(const block_iq1_m *b, lad_b *st) {
    uint16_t sc[4];
    memcpy(sc, b->scales, sizeof sc);
    const uint16_t dh = (uint16_t)((sc[0] >> 12) | ((sc[1] >> 8) & 0x00F0) | ((sc[2] >> 4) & 0x0F00) | (sc[3] & 0xF000));
    /* dword j of S16 = the scales of runs 2j, 2j+1: bits 6 (j % 2) and
     * 6 (j % 2) + 3 of sc[j / 2] */
    const __m128i v = _mm_loadl_epi64((const __m128i *)b->scales);
    const __m256i sc32 = _mm256_cvtepu16_epi32(_mm_unpacklo_epi16(v, v));
    const __m256i seven = _mm256_set1_epi32(7), one = _mm256_set1_epi32(1);
    const __m256i lo = _mm256_and_si256(_mm256_srlv_epi32(sc32, _mm256_setr_epi32(0, 6, 0, 6, 0, 6, 0, 6)), seven);
    const __m256i hi = _mm256_and_si256(_mm256_srlv_epi32(sc32, _mm256_setr_epi32(3, 9, 3, 9, 3, 9, 3, 9)), seven);
    st->S16 = _mm256_or_si256(_mm256_add_epi32(_mm256_slli_epi32(lo, 1), one),
                              _mm256_slli_epi32(_mm256_add_epi32(_mm256_slli_epi32(hi, 1), one), 16));
    st->dw = lad_h2f(dh) * 0.125f;
}
PL_AI lad_g lad_group_iq1_m(const block_iq1_m *b, const lad_b *st, int g) {
    const uint8_t *q = b->qs + 4 * g, *qh = b->qh + 2 * g;
    /* run l: index bits 8-10 and delta sign in the low (even l) or high (odd
     * l) nibble of qh[l / 2] */
#define LAD_D(x) ((x) ? (long long)-1 : (long long)0x0101010101010101LL)
    const __m256i delta = _mm256_set_epi64x(LAD_D(qh[1] & 0x80), LAD_D(qh[1] & 0x08), LAD_D(qh[0] & 0x80),
                                            LAD_D(qh[0] & 0x08));
#undef LAD_D
    const __m256i w = lad_iq1_codes(pl_iq1s_grid[q[0] | ((qh[0] << 8) & 0x700)], pl_iq1s_grid[q[1] | ((qh[0] << 4) & 0x700)],
                                    pl_iq1s_grid[q[2] | ((qh[1] << 8) & 0x700)], pl_iq1s_grid[q[3] | ((qh[1] << 4) & 0x700)],
                                    delta);
    return lad_signed(w, st, g);
}
#define LAD_HAS_MIN_iq1_m 0
#define LAD_UNSIGNED_iq1_m 0
#define LAD_NOSCALE_iq1_m 0
#define LAD_OFFSET_iq1_m 0

/* ---- IQ4_XS and TQ --------------------------------------------------------------------------*/

PL_AI __m256i lad_kvalues(void) {
    return _mm256_broadcastsi128_si256(_mm_loadu_si128((const __m128i *)pl_kvalues_iq4nl));
}

/* 16 bytes of nibbles -> 32 iq4_nl values: low nibbles, then high nibbles. */
PL_AI __m256i lad_iq4_values(const uint8_t *qs) {
    const __m128i q = _mm_loadu_si128((const __m128i *)qs), m4 = _mm_set1_epi8(0x0F);
    const __m128i lo = _mm_and_si128(q, m4), hi = _mm_and_si128(_mm_srli_epi16(q, 4), m4);
    return _mm256_shuffle_epi8(lad_kvalues(), _mm256_inserti128_si256(_mm256_castsi128_si256(lo), hi, 1));
}

PL_AI void lad_prep_iq4_xs(const block_iq4_xs *b, lad_b *st) {
    /* dword g: ls_g = nibble g of scales_l | bits 2g..2g+1 of scales_h << 4,
     * minus 32, as the int16 pair (ls_g, ls_g) */
    const __m256i sl = _mm256_set1_epi32((int)lad_u32(b->scales_l)), sh = _mm256_set1_epi32(b->scales_h);
    const __m256i lo = _mm256_and_si256(_mm256_srlv_epi32(sl, _mm256_setr_epi32(0, 4, 8, 12, 16, 20, 24, 28)),
                                        _mm256_set1_epi32(0xF));
    const __m256i hi = _mm256_and_si256(_mm256_srlv_epi32(sh, _mm256_setr_epi32(0, 2, 4, 6, 8, 10, 12, 14)),
                                        _mm256_set1_epi32(3));
    const __m256i ls = _mm256_sub_epi32(_mm256_or_si256(lo, _mm256_slli_epi32(hi, 4)), _mm256_set1_epi32(32));
    st->S16 = _mm256_or_si256(_mm256_and_si256(ls, _mm256_set1_epi32(0xFFFF)), _mm256_slli_epi32(ls, 16));
    st->dw = lad_h2f(b->d);
}
PL_AI lad_g lad_group_iq4_xs(const block_iq4_xs *b, const lad_b *st, int g) {
    return lad_signed(lad_iq4_values(b->qs + 16 * g), st, g);
}
#define LAD_HAS_MIN_iq4_xs 0
#define LAD_UNSIGNED_iq4_xs 0
#define LAD_NOSCALE_iq4_xs 0
#define LAD_OFFSET_iq4_xs 0

/* tq2_0: codes t = 0..2 used unsigned; the -1 comes out of the bsums. */
PL_AI void lad_prep_tq2_0(const block_tq2_0 *b, lad_b *st) {
    st->S16 = st->off = _mm256_set1_epi16(1);
    st->dw = lad_h2f(b->d);
}
PL_AI lad_g lad_group_tq2_0(const block_tq2_0 *b, const lad_b *st, int g) {
    const __m256i bits = _mm256_loadu_si256((const __m256i *)(b->qs + 32 * (g / 4)));
    const __m256i t = _mm256_and_si256(_mm256_srli_epi16(bits, 2 * (g % 4)), _mm256_set1_epi8(3));
    lad_g q = {t, t, st->S16};
    return q;
}
#define LAD_HAS_MIN_tq2_0 0
#define LAD_UNSIGNED_tq2_0 1
#define LAD_NOSCALE_tq2_0 1   /* every S = 1: sum the int16 pairs, widen once */
#define LAD_OFFSET_tq2_0 1

/* Top base-3 digit of each byte, (q * 3) >> 8, in bytes: with r = q - 1
 * (saturating; q = 0 gives 0 either way), avg(r, avg(r, 0)) = ceil((r +
 * ceil(r / 2)) / 2) = floor((3 q - 1) / 4) for q >= 1, whose bits 6-7 are
 * floor(3 q / 256) (3 q is never a multiple of 256 for 1 <= q <= 255). */
PL_AI __m256i lad_trit(__m256i q) {
    const __m256i r = _mm256_subs_epu8(q, _mm256_set1_epi8(1));
    const __m256i a = _mm256_avg_epu8(r, _mm256_avg_epu8(r, _mm256_setzero_si256()));
    return _mm256_and_si256(_mm256_srli_epi16(a, 6), _mm256_set1_epi8(3));
}

PL_AI __m256i lad_times3(__m256i q) { return _mm256_add_epi8(q, _mm256_add_epi8(q, q)); }   /* mod 256 */

/* tq1_0: the whole block's trits t = 0..2 are decoded here into 8 vectors of
 * 32 (element order: see quant/blocks.h), used unsigned; the -1 comes out of
 * the bsums. */
PL_AI void lad_prep_tq1_0(const block_tq1_0 *b, lad_b *st) {
    __m256i q = _mm256_loadu_si256((const __m256i *)b->qs);
    for (int k = 0; k < 5; k++, q = lad_times3(q)) st->wv[k] = lad_trit(q);
    /* qs[32..47] in both 128-bit lanes, times 1 (low) and 3 (high): trits
     * (0, 1); then times 9: trits (2, 3); then 9 again: trit 4 (low lane) */
    const __m256i q16 = _mm256_broadcastsi128_si256(_mm_loadu_si128((const __m128i *)(b->qs + 32)));
    __m256i p = _mm256_blend_epi32(q16, lad_times3(q16), 0xF0);
    st->wv[5] = lad_trit(p);
    p = lad_times3(lad_times3(p));
    st->wv[6] = lad_trit(p);
    p = lad_times3(lad_times3(p));
    /* qh[0..3] as dwords times 1, 3, 9, 27: trit k of qh[j] -> byte 4 k + j */
    const __m128i h1 = _mm_set1_epi32((int)lad_u32(b->qh)), h3 = _mm_add_epi8(h1, _mm_add_epi8(h1, h1));
    const __m128i h9 = _mm_add_epi8(h3, _mm_add_epi8(h3, h3)), h27 = _mm_add_epi8(h9, _mm_add_epi8(h9, h9));
    const __m128i hx = _mm_blend_epi32(_mm_blend_epi32(h1, h3, 0x2), _mm_blend_epi32(h9, h27, 0x8), 0xC);
    st->wv[7] = lad_trit(_mm256_inserti128_si256(p, hx, 1));
    st->S16 = st->off = _mm256_set1_epi16(1);
    st->dw = lad_h2f(b->d);
}
PL_AI lad_g lad_group_tq1_0(const block_tq1_0 *b, const lad_b *st, int g) {
    (void)b;
    lad_g q = {st->wv[g], st->wv[g], st->S16};
    return q;
}
#define LAD_HAS_MIN_tq1_0 0
#define LAD_UNSIGNED_tq1_0 1
#define LAD_NOSCALE_tq1_0 1   /* every S = 1: sum the int16 pairs, widen once */
#define LAD_OFFSET_tq1_0 1

/* ---- the tile --------------------------------------------------------------------------------*/

#define LAD_TILE_(name)                                                                                          \
    PL_AI void lad_tile_##name(int64_t nb, const block_##name *x, const char *a, size_t as, float *d, size_t ds,  \
                               const int NC) {                                                                   \
        __m256 acc[4];                                                                                           \
        const block_q8_K *y[4];                                                                                  \
        PL_UNROLL                                                                                                \
        for (int c = 0; c < NC; c++) {                                                                           \
            acc[c] = _mm256_setzero_ps();                                                                        \
            y[c] = (const block_q8_K *)(a + c * as);                                                             \
        }                                                                                                        \
        for (int64_t i = 0; i < nb; i++) {                                                                       \
            lad_b st;                                                                                            \
            lad_prep_##name(&x[i], &st);                                                                         \
            __m256i sumi[4], sum16[4];                                                                           \
            PL_UNROLL                                                                                            \
            for (int c = 0; c < NC; c++) {                                                                       \
                sumi[c] = sum16[c] = _mm256_setzero_si256();                                                     \
                if (LAD_HAS_MIN_##name || LAD_OFFSET_##name) {                                                   \
                    const __m256i bs = _mm256_loadu_si256((const __m256i *)y[c][i].bsums);                       \
                    if (LAD_HAS_MIN_##name)                                                                      \
                        acc[c] = _mm256_fmadd_ps(_mm256_set1_ps(-st.dm * y[c][i].d),                             \
                                                 _mm256_cvtepi32_ps(_mm256_madd_epi16(bs, st.mins)), acc[c]);    \
                    if (LAD_OFFSET_##name) sumi[c] = _mm256_sub_epi32(sumi[c], _mm256_madd_epi16(bs, st.off));  \
                }                                                                                                \
            }                                                                                                    \
            PL_UNROLL                                                                                            \
            for (int g = 0; g < QK_K / 32; g++) {                                                                \
                const lad_g q = lad_group_##name(&x[i], &st, g);                                                 \
                PL_UNROLL                                                                                        \
                for (int c = 0; c < NC; c++) {                                                                   \
                    const __m256i q8 = _mm256_loadu_si256((const __m256i *)(y[c][i].qs + 32 * g));               \
                    const __m256i p = _mm256_maddubs_epi16(q.aw, LAD_UNSIGNED_##name ? q8 : _mm256_sign_epi8(q8, q.w)); \
                    if (LAD_NOSCALE_##name) sum16[c] = _mm256_add_epi16(sum16[c], p);                            \
                    else sumi[c] = _mm256_add_epi32(sumi[c], _mm256_madd_epi16(p, q.sc));                        \
                }                                                                                                \
            }                                                                                                    \
            PL_UNROLL                                                                                            \
            for (int c = 0; c < NC; c++) {                                                                       \
                if (LAD_NOSCALE_##name)                                                                          \
                    sumi[c] = _mm256_add_epi32(sumi[c], _mm256_madd_epi16(sum16[c], _mm256_set1_epi16(1)));     \
                acc[c] = _mm256_fmadd_ps(_mm256_set1_ps(st.dw * y[c][i].d), _mm256_cvtepi32_ps(sumi[c]), acc[c]); \
            }                                                                                                    \
        }                                                                                                        \
        PL_UNROLL                                                                                                \
        for (int c = 0; c < NC; c++) d[c * ds] = pl_hsum8(acc[c]);                                               \
    }                                                                                                            \
    void pl_cpu_mm_lad_##name##_avx2(int64_t K, const void *w, size_t ws, int nr, const void *a, size_t as,      \
                                     int nc, float *d, size_t ds) {                                              \
        const int64_t nb = K / QK_K;                                                                             \
        for (int r = 0; r < nr; r++) {                                                                           \
            const block_##name *x = (const block_##name *)((const char *)w + r * ws);                            \
            switch (nc) {                                                                                        \
                case 1: lad_tile_##name(nb, x, (const char *)a, as, d + r, ds, 1); break;                        \
                case 2: lad_tile_##name(nb, x, (const char *)a, as, d + r, ds, 2); break;                        \
                case 3: lad_tile_##name(nb, x, (const char *)a, as, d + r, ds, 3); break;                        \
                default: lad_tile_##name(nb, x, (const char *)a, as, d + r, ds, 4); break;                       \
            }                                                                                                    \
        }                                                                                                        \
    }

LAD_TILE_(q2_K)
LAD_TILE_(q3_K)
LAD_TILE_(q5_K)
LAD_TILE_(iq2_xxs)
LAD_TILE_(iq2_xs)
LAD_TILE_(iq2_s)
LAD_TILE_(iq3_xxs)
LAD_TILE_(iq3_s)
LAD_TILE_(iq1_s)
LAD_TILE_(iq1_m)
LAD_TILE_(iq4_xs)
LAD_TILE_(tq1_0)
LAD_TILE_(tq2_0)

/* ---- iq4_nl x q8_0 (32-element blocks, a scale each) -------------------------------------------*/

PL_AI void lad_tile_iq4_nl(int64_t nb, const block_iq4_nl *x, const char *a, size_t as, float *d, size_t ds,
                           const int NC) {
    const __m256i ones = _mm256_set1_epi16(1);
    __m256 acc[4];
    const block_q8_0 *y[4];
    PL_UNROLL
    for (int c = 0; c < NC; c++) {
        acc[c] = _mm256_setzero_ps();
        y[c] = (const block_q8_0 *)(a + c * as);
    }
    for (int64_t i = 0; i < nb; i++) {
        const __m256i w = lad_iq4_values(x[i].qs), aw = _mm256_abs_epi8(w);
        const float dx = lad_h2f(x[i].d);
        PL_UNROLL
        for (int c = 0; c < NC; c++) {
            const __m256i q8 = _mm256_loadu_si256((const __m256i *)y[c][i].qs);
            const __m256i s = _mm256_madd_epi16(_mm256_maddubs_epi16(aw, _mm256_sign_epi8(q8, w)), ones);
            acc[c] = _mm256_fmadd_ps(_mm256_set1_ps(lad_h2f(y[c][i].d) * dx), _mm256_cvtepi32_ps(s), acc[c]);
        }
    }
    PL_UNROLL
    for (int c = 0; c < NC; c++) d[c * ds] = pl_hsum8(acc[c]);
}

void pl_cpu_mm_lad_iq4_nl_avx2(int64_t K, const void *w, size_t ws, int nr, const void *a, size_t as, int nc,
                               float *d, size_t ds) {
    const int64_t nb = K / QK4_NL;
    for (int r = 0; r < nr; r++) {
        const block_iq4_nl *x = (const block_iq4_nl *)((const char *)w + r * ws);
        switch (nc) {
            case 1: lad_tile_iq4_nl(nb, x, (const char *)a, as, d + r, ds, 1); break;
            case 2: lad_tile_iq4_nl(nb, x, (const char *)a, as, d + r, ds, 2); break;
            case 3: lad_tile_iq4_nl(nb, x, (const char *)a, as, d + r, ds, 3); break;
            default: lad_tile_iq4_nl(nb, x, (const char *)a, as, d + r, ds, 4); break;
        }
    }
}

/* ---- AVX-512 tiles for the IQ2 / IQ1 rungs -------------------------------------------------------
 * iq2_xxs, iq2_xs, iq2_s, iq1_s, iq1_m (and q5_K, the output matrix of those files) on CPUs with
 * AVX-512 BW / VL / VBMI / BITALG and BMI2 (pl_cpu_lad5_supported); compiled here with a target
 * attribute, so they reuse the prep functions above.
 *
 * The AVX2 tiles spend most of their time decoding: 4 scalar grid loads, 4 sign-table loads and
 * the inserts that assemble them, per 32 weights. Here a whole block (256 weights) is decoded at
 * once, as 4 "pairs" of two 32-element groups (64 bytes each):
 *   aw[h]  64 uint8  |code| of elements 64h .. 64h+63 (grid entries: 8 at a time by one gather;
 *          iq1: from a table of the signed codes 8 grid + delta, see lad5_iq1_w),
 *   km[h]  64-bit mask, bit e set = element 64h+e negative (for iq2_xxs / iq2_xs: the 7-bit sign
 *          indices of the whole block expanded in one go, the 8th bit being their parity, which is
 *          what llama.cpp's ksigns table holds; iq2_s stores the bits; iq1: the codes' own signs),
 *   sc[h]  32 int16  the scale of each int16 pair lane (one per 16 elements),
 * and every activation row of the tile (up to LAD5_NC) then costs, per pair, one masked negate of
 * its q8 (the sign folded into the activation), maddubs, madd and an add. The weight block is
 * decoded once per tile, so prefill tiles take LAD5_NC = 8 activation rows.
 *
 * Bit-identical to the AVX2 tiles: the int32 lanes of madd cover the same 4 elements (lane j of a
 * group = elements 4j .. 4j+3), the two halves of a pair are added in integers (exact), so each
 * block ends with the same 8 int32 sums, converted and accumulated exactly as the AVX2 tile does
 * (acc += (dw * dy) * float(sums); the row result is pl_hsum8(acc)). */
#define LAD5_TARGET __attribute__((target("avx512f,avx512bw,avx512vl,avx512vbmi,avx512bitalg,bmi2,avx2,fma,f16c")))
#define LAD5_AI static inline __attribute__((always_inline)) LAD5_TARGET
#define LAD5_NC 8
#ifndef LAD5_PREFETCH
#define LAD5_PREFETCH 32
#endif

typedef struct lad5_blk {
    __m512i aw[4], sc[4];
    __mmask64 km[4];
} lad5_blk;

/* sc[h] from the 16 int16 scales S16 (one per 16 elements): pair h covers S16[4h .. 4h+3],
 * each for 8 int16 lanes. */
static const int16_t lad5_sc_idx[4][32] = {
#define LAD5_R(h) {4 * h, 4 * h, 4 * h, 4 * h, 4 * h, 4 * h, 4 * h, 4 * h,                 \
                   4 * h + 1, 4 * h + 1, 4 * h + 1, 4 * h + 1, 4 * h + 1, 4 * h + 1, 4 * h + 1, 4 * h + 1, \
                   4 * h + 2, 4 * h + 2, 4 * h + 2, 4 * h + 2, 4 * h + 2, 4 * h + 2, 4 * h + 2, 4 * h + 2, \
                   4 * h + 3, 4 * h + 3, 4 * h + 3, 4 * h + 3, 4 * h + 3, 4 * h + 3, 4 * h + 3, 4 * h + 3}
    LAD5_R(0), LAD5_R(1), LAD5_R(2), LAD5_R(3)
#undef LAD5_R
};
/* The same from 8 int16 scales S8 (one per 32 elements): pair h = S8[2h], S8[2h + 1], 16 lanes each. */
static const int16_t lad5_sc32_idx[4][32] = {
#define LAD5_R(h) {2 * h, 2 * h, 2 * h, 2 * h, 2 * h, 2 * h, 2 * h, 2 * h, 2 * h, 2 * h, 2 * h, 2 * h,       \
                   2 * h, 2 * h, 2 * h, 2 * h, 2 * h + 1, 2 * h + 1, 2 * h + 1, 2 * h + 1, 2 * h + 1, 2 * h + 1, \
                   2 * h + 1, 2 * h + 1, 2 * h + 1, 2 * h + 1, 2 * h + 1, 2 * h + 1, 2 * h + 1, 2 * h + 1,     \
                   2 * h + 1, 2 * h + 1}
    LAD5_R(0), LAD5_R(1), LAD5_R(2), LAD5_R(3)
#undef LAD5_R
};
LAD5_AI void lad5_scales32(__m128i S8, lad5_blk *o) {
    const __m512i s = _mm512_castsi128_si512(S8);
    PL_UNROLL
    for (int h = 0; h < 4; h++)
        o->sc[h] = _mm512_permutexvar_epi16(_mm512_loadu_si512((const void *)lad5_sc32_idx[h]), s);
}
LAD5_AI void lad5_scales(__m256i S16, lad5_blk *o) {
    const __m512i s = _mm512_castsi256_si512(S16);
    PL_UNROLL
    for (int h = 0; h < 4; h++)
        o->sc[h] = _mm512_permutexvar_epi16(_mm512_loadu_si512((const void *)lad5_sc_idx[h]), s);
}

/* 32 bytes of 7-bit sign indices (run r at byte r) -> the 4 pair masks: the 8th sign of a run
 * is the parity of the other 7 (an even number of negatives per run). */
LAD5_AI void lad5_signs7(__m256i s7, lad5_blk *o) {
    s7 = _mm256_and_si256(s7, _mm256_set1_epi8(0x7F));
    const __m256i par = _mm256_slli_epi16(_mm256_popcnt_epi8(s7), 7);
    /* s7 | (par & 0x80): the shift moves bit 0 of each byte to bit 7 (and junk elsewhere) */
    const __m256i sb = _mm256_ternarylogic_epi32(s7, par, _mm256_set1_epi8((char)0x80), 0xF8);
    uint64_t m[4];
    _mm256_storeu_si256((__m256i *)m, sb);
    PL_UNROLL
    for (int h = 0; h < 4; h++) o->km[h] = _load_mask64((__mmask64 *)&m[h]);   /* kmovq from memory: no port-5 moves */
}

/* Grid entries of 8 indices (dwords) at once. (Tried instead for iq2_xxs / iq2_xs: the entries
 * as 2-bit codes looked up 32 at a time with vpermi2w, then spread to bytes with vpermw,
 * vpmultishiftqb and vpermb: slower, those all compete for port 5 with the rest of the decode.) */
LAD5_AI __m512i lad5_grid(__m256i idx, const uint64_t *grid) { return _mm512_i32gather_epi64(idx, (const void *)grid, 8); }

/* iq1 codes 8 * grid + delta, ready to use: entry i | delta_negative << 11 of the 2048-entry
 * grid (32 KiB), so a gather gives the signed codes and two instructions |code| and the signs. */
static uint64_t lad5_iq1_w[4096];

static void lad5_init(void) {
    for (int i = 0; i < 4096; i++) {
        uint64_t e = 0;
        for (int j = 0; j < 8; j++) {
            const int g = (int8_t)(pl_iq1s_grid[i & 2047] >> 8 * j);
            e |= (uint64_t)(uint8_t)(int8_t)(8 * g + (i & 2048 ? -1 : 1)) << 8 * j;
        }
        lad5_iq1_w[i] = e;
    }
}

LAD5_AI void lad5_dec_iq2_xxs(const block_iq2_xxs *b, const lad_b *st, lad5_blk *o) {
    /* qs as 8 qwords, one per group: bytes 0-3 grid indices, then a u32 of 4 x 7 sign bits
     * (bits 0-27) and the scale (28-31) */
    const __m512i q = _mm512_loadu_si512((const void *)b->qs);
    const __m512i sel = _mm512_set1_epi64(0x352E2720LL);   /* bytes 0-3: bits 32, 39, 46, 53 */
    lad5_signs7(_mm512_cvtepi64_epi32(_mm512_multishift_epi64_epi8(sel, q)), o);
    /* scale of group g: the top nibble of qword g, as 2 s + 1 */
    const __m128i s8 = _mm512_cvtepi64_epi16(_mm512_srli_epi64(q, 60));
    lad5_scales32(_mm_add_epi16(_mm_slli_epi16(s8, 1), _mm_set1_epi16(1)), o);
    (void)st;
    PL_UNROLL
    for (int h = 0; h < 4; h++) {
        /* pair h: index bytes 16h + 0..3 and 16h + 8..11 */
        const uint8_t *qs = (const uint8_t *)b->qs + 16 * h;
        const uint64_t ix = (uint64_t)lad_u32(qs) | ((uint64_t)lad_u32(qs + 8) << 32);
        o->aw[h] = lad5_grid(_mm256_cvtepu8_epi32(_mm_cvtsi64_si128((long long)ix)), pl_iq2xxs_grid);
    }
}

LAD5_AI void lad5_dec_iq2_xs(const block_iq2_xs *b, const lad_b *st, lad5_blk *o) {
    /* qs: 32 u16, 9-bit grid index | 7-bit sign index << 9, run r at qs[r] */
    const __m512i q = _mm512_loadu_si512((const void *)b->qs);
    lad5_signs7(_mm512_cvtepi16_epi8(_mm512_srli_epi16(q, 9)), o);
    PL_UNROLL
    for (int h = 0; h < 4; h++) {
        const __m256i idx = _mm256_and_si256(_mm256_cvtepu16_epi32(_mm_loadu_si128((const __m128i *)(b->qs + 8 * h))),
                                             _mm256_set1_epi32(511));
        o->aw[h] = lad5_grid(idx, pl_iq2xs_grid);
    }
    lad5_scales(st->S16, o);
}

LAD5_AI void lad5_dec_iq2_s(const block_iq2_s *b, const lad_b *st, lad5_blk *o) {
    /* pair h: index low bytes qs[8h + e], bits 8-9 = bits 2e.. of the u16 qh[2h], qh[2h + 1];
     * the sign bits of the pair are the 8 bytes qs[32 + 8h ..] */
    const __m256i sh = _mm256_setr_epi32(0, 2, 4, 6, 8, 10, 12, 14);
    PL_UNROLL
    for (int h = 0; h < 4; h++) {
        const int v = b->qh[2 * h] | (b->qh[2 * h + 1] << 8);
        const __m256i hi = _mm256_and_si256(_mm256_srlv_epi32(_mm256_set1_epi32(v), sh), _mm256_set1_epi32(3));
        const __m256i lo = _mm256_cvtepu8_epi32(_mm_loadl_epi64((const __m128i *)(b->qs + 8 * h)));
        o->aw[h] = lad5_grid(_mm256_or_si256(lo, _mm256_slli_epi32(hi, 8)), pl_iq2s_grid);
        uint64_t m;
        memcpy(&m, b->qs + QK_K / 8 + 8 * h, 8);
        o->km[h] = _cvtu64_mask64(m);
    }
    lad5_scales(st->S16, o);
}

LAD5_AI void lad5_iq1_set(__m256i idx, int h, lad5_blk *o) {
    const __m512i w = lad5_grid(idx, lad5_iq1_w);
    o->aw[h] = _mm512_abs_epi8(w);
    o->km[h] = _mm512_movepi8_mask(w);
}

/* The 8 indices of pair h from a zmm of 16 (pairs 2k, 2k+1: lanes 0-7, 8-15). */
LAD5_AI __m256i lad5_half(__m512i v, int hi) {
    return hi ? _mm512_extracti64x4_epi64(v, 1) : _mm512_castsi512_si256(v);
}

LAD5_AI void lad5_dec_iq1_s(const block_iq1_s *b, const lad_b *st, lad5_blk *o) {
    /* run r (of 32): index qs[r] | 3 bits of qh[r / 4] at 3 (r % 4) << 8 | the group's delta sign
     * (bit 15 of qh[r / 4]) << 11; 16 runs (two pairs) per zmm of dwords */
    const __m128i qh = _mm_loadu_si128((const __m128i *)b->qh);
    const __m512i sh = _mm512_setr_epi32(0, 3, 6, 9, 0, 3, 6, 9, 0, 3, 6, 9, 0, 3, 6, 9);
    const __m512i rep = _mm512_setr_epi32(0, 0, 0, 0, 1, 1, 1, 1, 2, 2, 2, 2, 3, 3, 3, 3);
    PL_UNROLL
    for (int k = 0; k < 2; k++) {
        /* dword r = qh[4k + r / 4] (words 2r <- 4k + r / 4, odd words zero) */
        const __m512i v = _mm512_maskz_permutexvar_epi16(0x55555555u, _mm512_add_epi32(rep, _mm512_set1_epi32(4 * k)),
                                                         _mm512_castsi128_si512(qh));
        /* bits 0-2 from the index shift, bit 3 the delta sign (bit 15 >> 12), junk above */
        const __m512i h3 = _mm512_ternarylogic_epi32(_mm512_srlv_epi32(v, sh), _mm512_srli_epi32(v, 12),
                                                     _mm512_set1_epi32(7), 0xE4);
        const __m512i lo = _mm512_cvtepu8_epi32(_mm_loadu_si128((const __m128i *)(b->qs + 16 * k)));
        const __m512i idx = _mm512_ternarylogic_epi32(lo, _mm512_slli_epi32(h3, 8), _mm512_set1_epi32(0xFFF), 0xA8);
        lad5_iq1_set(lad5_half(idx, 0), 2 * k, o);
        lad5_iq1_set(lad5_half(idx, 1), 2 * k + 1, o);
    }
    /* scale of group g: bits 12-14 of qh[g], as 2 s + 1 */
    const __m128i s8 = _mm_and_si128(_mm_srli_epi16(qh, 12), _mm_set1_epi16(7));
    lad5_scales32(_mm_add_epi16(_mm_slli_epi16(s8, 1), _mm_set1_epi16(1)), o);
    (void)st;
}

LAD5_AI void lad5_dec_iq1_m(const block_iq1_m *b, const lad_b *st, lad5_blk *o) {
    /* run r (of 32): index qs[r] | nibble r of qh (byte r / 2, low nibble for even r) << 8: its
     * bits 0-2 are index bits 8-10, bit 3 the run's delta sign; 16 runs per zmm of dwords */
    const __m128i qh = _mm_loadu_si128((const __m128i *)b->qh);
    const __m512i sh = _mm512_setr_epi32(0, 4, 0, 4, 0, 4, 0, 4, 0, 4, 0, 4, 0, 4, 0, 4);
    PL_UNROLL
    for (int k = 0; k < 2; k++) {
        /* dword r = qh byte 8k + r / 2 */
        const __m128i dup = _mm_shuffle_epi8(qh, _mm_setr_epi8(8 * k, 8 * k, 8 * k + 1, 8 * k + 1, 8 * k + 2, 8 * k + 2,
                                                               8 * k + 3, 8 * k + 3, 8 * k + 4, 8 * k + 4, 8 * k + 5,
                                                               8 * k + 5, 8 * k + 6, 8 * k + 6, 8 * k + 7, 8 * k + 7));
        const __m512i nib = _mm512_srlv_epi32(_mm512_cvtepu8_epi32(dup), sh);
        const __m512i lo = _mm512_cvtepu8_epi32(_mm_loadu_si128((const __m128i *)(b->qs + 16 * k)));
        const __m512i idx = _mm512_ternarylogic_epi32(lo, _mm512_slli_epi32(nib, 8), _mm512_set1_epi32(0xFFF), 0xA8);
        lad5_iq1_set(lad5_half(idx, 0), 2 * k, o);
        lad5_iq1_set(lad5_half(idx, 1), 2 * k + 1, o);
    }
    lad5_scales(st->S16, o);
}

/* q5_K (the output matrix of the IQ files): pair h = the 32 bytes qs[32h ..], low nibbles (group
 * 2h) in the low half, high nibbles (group 2h+1) in the high half; bit 4 is bit g of qh[l], brought
 * there by a 32-bit rotate (bit g of every byte lands on bit 4 of the same byte). Codes unsigned,
 * the mins come out of the bsums as in the AVX2 tile. */
LAD5_AI void lad5_dec_q5_K(const block_q5_K *b, const lad_b *st, lad5_blk *o) {
    const __m512i qh = _mm512_broadcast_i64x4(_mm256_loadu_si256((const __m256i *)b->qh));
    const __m512i nsh = _mm512_setr_epi64(0, 0, 0, 0, 0x0004000400040004LL, 0x0004000400040004LL,
                                          0x0004000400040004LL, 0x0004000400040004LL);
    PL_UNROLL
    for (int h = 0; h < 4; h++) {
        const __m512i v = _mm512_broadcast_i64x4(_mm256_loadu_si256((const __m256i *)(b->qs + 32 * h)));
        const __m512i nib = _mm512_and_si512(_mm512_srlv_epi16(v, nsh), _mm512_set1_epi8(0x0F));
        const int r0 = (4 - 2 * h) & 31, r1 = (3 - 2 * h) & 31;
        const __m512i rot = _mm512_setr_epi32(r0, r0, r0, r0, r0, r0, r0, r0, r1, r1, r1, r1, r1, r1, r1, r1);
        o->aw[h] = _mm512_ternarylogic_epi32(nib, _mm512_rolv_epi32(qh, rot), _mm512_set1_epi8(0x10), 0xF8);
        o->km[h] = 0;
    }
    lad5_scales(st->S16, o);
}

/* Block-level fields: iq2_xxs and iq1_s take only dw here (their scales are decoded above, from
 * the registers); the others use the AVX2 tiles' prep (dw and S16). */
LAD5_AI void lad5_prep_iq2_xxs(const block_iq2_xxs *b, lad_b *st) { st->dw = lad_h2f(b->d) * 0.125f; }
LAD5_AI void lad5_prep_iq1_s(const block_iq1_s *b, lad_b *st) { st->dw = lad_h2f(b->d) * 0.125f; }
#define lad5_prep_iq2_xs lad_prep_iq2_xs
#define lad5_prep_iq2_s lad_prep_iq2_s
#define lad5_prep_iq1_m lad_prep_iq1_m
#define lad5_prep_q5_K lad_prep_q5_K

/* The tile: one weight row, NC (<= LAD5_NC) activation rows. */
#define LAD5_TILE_(name)                                                                                        \
    LAD5_AI void lad5_tile_##name(int64_t nb, const block_##name *x, const char *a, size_t as, float *d,        \
                                  size_t ds, const int NC) {                                                    \
        __m256 acc[LAD5_NC];                                                                                    \
        const block_q8_K *y[LAD5_NC];                                                                           \
        PL_UNROLL                                                                                               \
        for (int c = 0; c < NC; c++) {                                                                          \
            acc[c] = _mm256_setzero_ps();                                                                       \
            y[c] = (const block_q8_K *)(a + c * as);                                                            \
        }                                                                                                       \
        for (int64_t i = 0; i < nb; i++) {                                                                      \
            /* decode streams the weights from memory: keep LAD5_PREFETCH blocks in flight ahead    \
             * (rows are contiguous in a weight matrix; past its end a prefetch is harmless) */     \
            for (size_t l = 0; l < sizeof x[i]; l += 64)                                                        \
                _mm_prefetch((const char *)&x[i + LAD5_PREFETCH] + l, _MM_HINT_T0);                             \
            lad_b st;                                                                                           \
            lad5_prep_##name(&x[i], &st);                                                                       \
            lad5_blk o;                                                                                         \
            lad5_dec_##name(&x[i], &st, &o);                                                                    \
            PL_UNROLL                                                                                           \
            for (int c = 0; c < NC; c++) {                                                                      \
                if (LAD_HAS_MIN_##name) {                                                                       \
                    const __m256i bs = _mm256_loadu_si256((const __m256i *)y[c][i].bsums);                      \
                    acc[c] = _mm256_fmadd_ps(_mm256_set1_ps(-st.dm * y[c][i].d),                                \
                                             _mm256_cvtepi32_ps(_mm256_madd_epi16(bs, st.mins)), acc[c]);       \
                }                                                                                               \
                __m512i s = _mm512_setzero_si512();                                                             \
                PL_UNROLL                                                                                       \
                for (int h = 0; h < 4; h++) {                                                                 \
                    __m512i q8 = _mm512_loadu_si512((const void *)(y[c][i].qs + 64 * h));                       \
                    if (!LAD_UNSIGNED_##name) q8 = _mm512_mask_sub_epi8(q8, o.km[h], _mm512_setzero_si512(), q8); \
                    s = _mm512_add_epi32(s, _mm512_madd_epi16(_mm512_maddubs_epi16(o.aw[h], q8), o.sc[h]));     \
                }                                                                                               \
                const __m256i s8 = _mm256_add_epi32(_mm512_castsi512_si256(s), _mm512_extracti64x4_epi64(s, 1)); \
                acc[c] = _mm256_fmadd_ps(_mm256_set1_ps(st.dw * y[c][i].d), _mm256_cvtepi32_ps(s8), acc[c]);    \
            }                                                                                                   \
        }                                                                                                       \
        PL_UNROLL                                                                                               \
        for (int c = 0; c < NC; c++) d[c * ds] = pl_hsum8(acc[c]);                                              \
    }                                                                                                           \
    LAD5_TARGET void pl_cpu_mm_lad_##name##_avx512(int64_t K, const void *w, size_t ws, int nr, const void *a, \
                                                   size_t as, int nc, float *d, size_t ds) {                    \
        const int64_t nb = K / QK_K;                                                                            \
        for (int r = 0; r < nr; r++) {                                                                          \
            const block_##name *x = (const block_##name *)((const char *)w + r * ws);                           \
            const char *ac = (const char *)a;                                                                   \
            switch (nc) {                                                                                       \
                case 1: lad5_tile_##name(nb, x, ac, as, d + r, ds, 1); break;                                   \
                case 2: lad5_tile_##name(nb, x, ac, as, d + r, ds, 2); break;                                   \
                case 3: lad5_tile_##name(nb, x, ac, as, d + r, ds, 3); break;                                   \
                case 4: lad5_tile_##name(nb, x, ac, as, d + r, ds, 4); break;                                   \
                case 5: lad5_tile_##name(nb, x, ac, as, d + r, ds, 5); break;                                   \
                case 6: lad5_tile_##name(nb, x, ac, as, d + r, ds, 6); break;                                   \
                case 7: lad5_tile_##name(nb, x, ac, as, d + r, ds, 7); break;                                   \
                default: lad5_tile_##name(nb, x, ac, as, d + r, ds, 8); break;                                  \
            }                                                                                                   \
        }                                                                                                       \
    }

LAD5_TILE_(iq2_xxs)
LAD5_TILE_(iq2_xs)
LAD5_TILE_(iq2_s)
LAD5_TILE_(iq1_s)
LAD5_TILE_(iq1_m)
LAD5_TILE_(q5_K)

bool pl_cpu_lad5_supported(void) {
    static atomic_int ok = -1;   /* every thread computes the same value */
    int v = atomic_load_explicit(&ok, memory_order_relaxed);
    if (v < 0) {
        /* pl_cpu_features_get says whether the OS saves the zmm state (and honours
         * PL_CPU_FEATURES=none); the extensions it does not list come from cpuid */
        const pl_cpu_features *f = pl_cpu_features_get();
        __builtin_cpu_init();
        static pthread_once_t once = PTHREAD_ONCE_INIT;
        pthread_once(&once, lad5_init);
        v = pl_cpu_has_avx2() && f->avx512f && f->avx512bw && f->avx512vl && __builtin_cpu_supports("avx512vbmi") &&
            __builtin_cpu_supports("avx512bitalg") && __builtin_cpu_supports("bmi2");
        atomic_store_explicit(&ok, v, memory_order_relaxed);
    }
    return v;
}
