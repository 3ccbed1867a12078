/*
 * The quantization-ladder formats (IQ1/IQ2/IQ3/IQ4 codebook types, TQ ternary
 * types, and the q2_K / q3_K / q5_K the low-bit files mix in):
 *  - the generated codebooks (src/quant/ggml_tables.c) equal the fixture JSON
 *    they were generated from, and have the structure the decoders rely on;
 *  - block sizes, and every type reachable through pl_dequantize_row;
 *  - hand-built blocks (fields set bit by bit from the layouts in
 *    quant/blocks.h, power-of-two scales) decode to the expected values;
 *  - the fixture files' tensors decode close to the f32 model's weights;
 *  - the cpu backend's integer dot products (portable and AVX2) equal the
 *    dot of the decoded weights with the dequantized q8 activations they
 *    were given (the integer arithmetic is exact, so only float rounding
 *    remains), and MATMUL on real fixture weights agrees with ref.
 * `test_quant_ladder iq2` runs only the parts about types whose name
 * contains "iq2".
 */
#include "testutil.h"
#include "ophelpers.h"
#include "backends/cpu/cpu_matmul_iq.h"
#include "core/cpu_features.h"
#include "core/fp16.h"
#include "gguf/gguf.h"
#include "kernels/abi.h"
#include "pocketllm.h"
#include "quant/blocks.h"
#include "quant/ggml_tables.h"
#include "quant/quant.h"
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char *g_only;

static bool want(pl_dtype t) { return !g_only || strstr(pl_dtype_name(t), g_only); }

static const pl_dtype ladder[] = {PL_Q2_K, PL_Q3_K, PL_Q5_K, PL_IQ2_XXS, PL_IQ2_XS, PL_IQ2_S, PL_IQ3_XXS,
                                  PL_IQ3_S, PL_IQ1_S, PL_IQ1_M, PL_IQ4_NL, PL_IQ4_XS, PL_TQ1_0, PL_TQ2_0};
#define N_LADDER (sizeof ladder / sizeof ladder[0])

/* ---- tables ------------------------------------------------------------------*/

static uint64_t json_u64(json_t *v) {
    if (json_is_string(v)) return strtoull(json_string_value(v), NULL, 10);
    return (uint64_t)json_integer_value(v);
}

/* Compares a C table with tables.<name>.values of the JSON. */
static void cmp_table(json_t *tabs, const char *name, const void *tab, int elem, bool is_signed, size_t n) {
    json_t *vals = json_object_get(json_object_get(tabs, name), "values");
    CHECK(json_array_size(vals) == n, "%s: JSON has %zu values, C table %zu", name, json_array_size(vals), n);
    size_t bad = 0;
    for (size_t i = 0; i < n && i < json_array_size(vals); i++) {
        uint64_t c = 0;
        switch (elem) {
            case 1: c = is_signed ? (uint64_t)(int64_t)((const int8_t *)tab)[i] : ((const uint8_t *)tab)[i]; break;
            case 4: c = ((const uint32_t *)tab)[i]; break;
            default: c = ((const uint64_t *)tab)[i]; break;
        }
        if (c != json_u64(json_array_get(vals, i))) bad++;
    }
    CHECK(bad == 0, "%s: %zu entries differ from the JSON (re-run scripts/gen_ggml_tables.py)", name, bad);
}

static void test_tables(void) {
    json_error_t err;
    json_t *root = json_load_file(pl_fixture("quant/ggml-tables.json"), 0, &err);
    CHECK(root != NULL, "cannot parse ggml-tables.json: %s", err.text);
    if (!root) return;
    json_t *t = json_object_get(root, "tables");
    cmp_table(t, "kmask_iq2xs", pl_kmask_iq2xs, 1, false, 8);
    cmp_table(t, "ksigns_iq2xs", pl_ksigns_iq2xs, 1, false, 128);
    cmp_table(t, "ksigns64", pl_ksigns64, 8, false, 128);
    cmp_table(t, "iq2xxs_grid", pl_iq2xxs_grid, 8, false, 256);
    cmp_table(t, "iq2xs_grid", pl_iq2xs_grid, 8, false, 512);
    cmp_table(t, "iq2s_grid", pl_iq2s_grid, 8, false, 1024);
    cmp_table(t, "iq3xxs_grid", pl_iq3xxs_grid, 4, false, 256);
    cmp_table(t, "iq3s_grid", pl_iq3s_grid, 4, false, 512);
    cmp_table(t, "kvalues_iq4nl", pl_kvalues_iq4nl, 1, true, 16);
    cmp_table(t, "kvalues_fp4", pl_kvalues_fp4, 1, true, 16);
    cmp_table(t, "iq1s_grid", pl_iq1s_grid, 8, false, PL_NGRID_IQ1S);
    json_t *c = json_object_get(root, "constants");
    CHECK(atoi(json_string_value(json_object_get(c, "NGRID_IQ1S"))) == PL_NGRID_IQ1S, "NGRID_IQ1S");
    CHECK(strtof(json_string_value(json_object_get(c, "IQ1S_DELTA")), NULL) == PL_IQ1S_DELTA, "IQ1S_DELTA");
    CHECK(strtof(json_string_value(json_object_get(c, "IQ1M_DELTA")), NULL) == PL_IQ1M_DELTA, "IQ1M_DELTA");
    json_decref(root);

    /* structure the kernels rely on: sign bytes carry an even number of set
     * bits with the 7 stored ones low; the +-1 table spreads them. */
    int bad = 0;
    for (int i = 0; i < 128; i++) {
        const uint8_t s = pl_ksigns_iq2xs[i];
        if ((s & 127) != i || (__builtin_popcount(s) & 1)) bad++;
        for (int j = 0; j < 8; j++) {
            const uint8_t b = (uint8_t)(pl_ksigns_pm1_iq2xs[i] >> (8 * j));
            if (b != ((s >> j) & 1 ? 0xFF : 0x01)) bad++;
        }
    }
    CHECK(bad == 0, "ksigns structure / derived +-1 table (%d bad)", bad);
}

/* ---- sizes -------------------------------------------------------------------*/

static void test_sizes(void) {
    static const struct { pl_dtype t; size_t size; } blocks[] = {
        {PL_IQ2_XXS, sizeof(block_iq2_xxs)}, {PL_IQ2_XS, sizeof(block_iq2_xs)}, {PL_IQ2_S, sizeof(block_iq2_s)},
        {PL_IQ3_XXS, sizeof(block_iq3_xxs)}, {PL_IQ3_S, sizeof(block_iq3_s)}, {PL_IQ1_S, sizeof(block_iq1_s)},
        {PL_IQ1_M, sizeof(block_iq1_m)}, {PL_IQ4_NL, sizeof(block_iq4_nl)}, {PL_IQ4_XS, sizeof(block_iq4_xs)},
        {PL_TQ1_0, sizeof(block_tq1_0)}, {PL_TQ2_0, sizeof(block_tq2_0)},
    };
    for (size_t i = 0; i < sizeof blocks / sizeof blocks[0]; i++) {
        const pl_dtype_traits *tr = pl_dtype_get(blocks[i].t);
        CHECK(tr && tr->type_size == blocks[i].size, "%s: struct %zu bytes, dtype table %zu",
              pl_dtype_name(blocks[i].t), blocks[i].size, tr ? tr->type_size : 0);
    }
    for (size_t i = 0; i < N_LADDER; i++)
        CHECK(pl_can_dequantize(ladder[i]), "%s should be decodable", pl_dtype_name(ladder[i]));
    /* a bad n writes nothing */
    block_iq2_xxs b;
    memset(&b, 0, sizeof b);
    float out[QK_K + 1];
    out[0] = 42.0f;
    pl_dequantize_row(PL_IQ2_XXS, &b, out, 100);
    CHECK(out[0] == 42.0f, "n not a multiple of 256 is refused");
}

/* ---- hand-built blocks ----------------------------------------------------------*/

static int check_decode(pl_dtype t, const void *blk, const float *expect, int n) {
    float out[QK_K];
    pl_dequantize_row(t, blk, out, n);
    int bad = 0;
    for (int i = 0; i < n; i++)
        if (out[i] != expect[i]) {
            if (bad < 3) fprintf(stderr, "  %s[%d] = %g, expected %g\n", pl_dtype_name(t), i, out[i], expect[i]);
            bad++;
        }
    CHECK(bad == 0, "%s: %d of %d decoded values differ", pl_dtype_name(t), bad, n);
    return bad;
}

static uint8_t gbyte(uint64_t e, int j) { return (uint8_t)(e >> (8 * j)); }

static void put_u16(void *p, uint16_t v) { memcpy(p, &v, 2); }
static void put_u32(void *p, uint32_t v) { memcpy(p, &v, 4); }

/* d = 2^e as f16 (exact) */
static pl_f16 f16p2(int e) { return pl_f32_to_f16(ldexpf(1.0f, e)); }

static void test_known_iq2(pl_rng *r) {
    float e[QK_K];
    /* iq2_xxs: per 32: u32 of 4 grid indices, u32 of 4 x 7 sign bits + scale */
    if (want(PL_IQ2_XXS)) {
        block_iq2_xxs b;
        b.d = f16p2(-1);
        for (int g = 0; g < 8; g++) {
            uint32_t a = 0, s = (uint32_t)g << 28;   /* scale s = g: db = 0.5 * (0.5 + g) / 4 */
            int idx[4], sg[4];
            for (int l = 0; l < 4; l++) {
                idx[l] = (int)pl_rng_int(r, 0, 255);
                sg[l] = (int)pl_rng_int(r, 0, 127);
                a |= (uint32_t)idx[l] << (8 * l);
                s |= (uint32_t)sg[l] << (7 * l);
            }
            put_u32(&b.qs[4 * g], a);
            put_u32(&b.qs[4 * g + 2], s);
            for (int l = 0; l < 4; l++)
                for (int j = 0; j < 8; j++) {
                    const float v = 0.5f * (0.5f + g) / 4 * gbyte(pl_iq2xxs_grid[idx[l]], j);
                    e[32 * g + 8 * l + j] = (pl_ksigns_iq2xs[sg[l]] >> j) & 1 ? -v : v;
                }
        }
        check_decode(PL_IQ2_XXS, &b, e, QK_K);
    }
    /* iq2_xs: u16 per 8: 9-bit index | 7-bit sign index; 4-bit scales per 16 */
    if (want(PL_IQ2_XS)) {
        block_iq2_xs b;
        b.d = f16p2(1);
        for (int g = 0; g < 8; g++) b.scales[g] = (uint8_t)(g | ((15 - g) << 4));
        for (int q = 0; q < 32; q++) {
            const int idx = (int)pl_rng_int(r, 0, 511), sg = (int)pl_rng_int(r, 0, 127);
            b.qs[q] = (uint16_t)(idx | (sg << 9));
            const int s = (q % 4) < 2 ? (q / 4) : 15 - (q / 4);
            for (int j = 0; j < 8; j++) {
                const float v = 2.0f * (0.5f + s) / 4 * gbyte(pl_iq2xs_grid[idx], j);
                e[8 * q + j] = (pl_ksigns_iq2xs[sg] >> j) & 1 ? -v : v;
            }
        }
        check_decode(PL_IQ2_XS, &b, e, QK_K);
    }
    /* iq2_s: 10-bit index (8 in qs, 2 in qh), explicit sign bytes */
    if (want(PL_IQ2_S)) {
        block_iq2_s b;
        b.d = f16p2(0);
        memset(b.qh, 0, sizeof b.qh);
        for (int g = 0; g < 8; g++) b.scales[g] = (uint8_t)((g + 3) % 16 | (g << 4));
        for (int q = 0; q < 32; q++) {
            const int idx = (int)pl_rng_int(r, 0, 1023), sg = (int)pl_rng_int(r, 0, 255);
            const int g = q / 4, l = q % 4;
            b.qs[q] = (uint8_t)idx;
            b.qh[g] |= (uint8_t)((idx >> 8) << (2 * l));
            b.qs[QK_K / 8 + q] = (uint8_t)sg;
            const int s = l < 2 ? (g + 3) % 16 : g;
            for (int j = 0; j < 8; j++) {
                const float v = (0.5f + s) / 4 * gbyte(pl_iq2s_grid[idx], j);
                e[8 * q + j] = (sg >> j) & 1 ? -v : v;
            }
        }
        check_decode(PL_IQ2_S, &b, e, QK_K);
    }
}

static void test_known_iq3(pl_rng *r) {
    float e[QK_K];
    /* iq3_xxs: 64 index bytes, then per 32 a u32 of 4 x 7 sign bits + scale */
    if (want(PL_IQ3_XXS)) {
        block_iq3_xxs b;
        b.d = f16p2(-2);
        for (int g = 0; g < 8; g++) {
            uint32_t s = (uint32_t)(15 - 2 * g > 0 ? 15 - 2 * g : 0) << 28;
            const int sc = (int)(s >> 28);
            for (int l = 0; l < 4; l++) {
                const int sg = (int)pl_rng_int(r, 0, 127);
                s |= (uint32_t)sg << (7 * l);
                for (int h = 0; h < 2; h++) {
                    const int idx = (int)pl_rng_int(r, 0, 255);
                    b.qs[8 * g + 2 * l + h] = (uint8_t)idx;
                    for (int j = 0; j < 4; j++) {
                        const float v = 0.25f * (0.5f + sc) / 2 * gbyte(pl_iq3xxs_grid[idx], j);
                        e[32 * g + 8 * l + 4 * h + j] = (pl_ksigns_iq2xs[sg] >> (4 * h + j)) & 1 ? -v : v;
                    }
                }
            }
            put_u32(b.qs + QK_K / 4 + 4 * g, s);
        }
        check_decode(PL_IQ3_XXS, &b, e, QK_K);
    }
    /* iq3_s: 9-bit indices (bit 8 of run k of group g: bit k of qh[g]),
     * explicit signs, 4-bit scales x = d (1 + 2 s) */
    if (want(PL_IQ3_S)) {
        block_iq3_s b;
        b.d = f16p2(-3);
        memset(b.qh, 0, sizeof b.qh);
        memset(b.scales, 0, sizeof b.scales);
        for (int g = 0; g < 8; g++) {
            const int s = (5 * g + 1) % 16;
            b.scales[g / 2] |= (uint8_t)(s << (4 * (g & 1)));
            for (int k = 0; k < 8; k++) {
                const int idx = (int)pl_rng_int(r, 0, 511);
                b.qs[8 * g + k] = (uint8_t)idx;
                b.qh[g] |= (uint8_t)((idx >> 8) << k);
                for (int j = 0; j < 4; j++) e[32 * g + 4 * k + j] = 0.125f * (1 + 2 * s) * gbyte(pl_iq3s_grid[idx], j);
            }
            for (int l = 0; l < 4; l++) {
                const int sg = (int)pl_rng_int(r, 0, 255);
                b.signs[4 * g + l] = (uint8_t)sg;
                for (int j = 0; j < 8; j++)
                    if ((sg >> j) & 1) e[32 * g + 8 * l + j] = -e[32 * g + 8 * l + j];
            }
        }
        check_decode(PL_IQ3_S, &b, e, QK_K);
    }
}

static void test_known_iq1(pl_rng *r) {
    float e[QK_K];
    /* iq1_s: 11-bit indices (8 in qs, 3 per run in qh), scale in qh bits
     * 12-14, delta sign in bit 15: x = d (2 s + 1) (grid +- 1/8) */
    if (want(PL_IQ1_S)) {
        block_iq1_s b;
        b.d = f16p2(-4);
        for (int g = 0; g < 8; g++) {
            const int s = g % 8, neg = g & 1;
            uint16_t qh = (uint16_t)((s << 12) | (neg << 15));
            for (int l = 0; l < 4; l++) {
                const int idx = (int)pl_rng_int(r, 0, 2047);
                b.qs[4 * g + l] = (uint8_t)idx;
                qh |= (uint16_t)((idx >> 8) << (3 * l));
                for (int j = 0; j < 8; j++)
                    e[32 * g + 8 * l + j] =
                        0.0625f * (2 * s + 1) * ((int8_t)gbyte(pl_iq1s_grid[idx], j) + (neg ? -0.125f : 0.125f));
            }
            b.qh[g] = qh;
        }
        check_decode(PL_IQ1_S, &b, e, QK_K);
    }
    /* iq1_m: no d field: f16 scale in the top nibbles of the 4 u16 scales;
     * 3-bit scales per 16; qh nibble per run: 3 index bits + delta sign */
    if (want(PL_IQ1_M)) {
        block_iq1_m b;
        const uint16_t dh = f16p2(-2);
        uint16_t sc[4];
        for (int k = 0; k < 4; k++) sc[k] = (uint16_t)(((dh >> (4 * k)) & 0xF) << 12);
        int s16[16];
        for (int h = 0; h < 16; h++) {
            s16[h] = (3 * h + 2) % 8;
            sc[h / 4] |= (uint16_t)(s16[h] << (3 * (h % 4)));
        }
        for (int k = 0; k < 4; k++) put_u16(b.scales + 2 * k, sc[k]);
        memset(b.qh, 0, sizeof b.qh);
        for (int q = 0; q < 32; q++) {
            const int idx = (int)pl_rng_int(r, 0, 2047), neg = (int)pl_rng_int(r, 0, 1);
            b.qs[q] = (uint8_t)idx;
            b.qh[q / 2] |= (uint8_t)(((idx >> 8) | (neg << 3)) << (4 * (q & 1)));
            const int s = s16[q / 2];
            for (int j = 0; j < 8; j++)
                e[8 * q + j] = 0.25f * (2 * s + 1) * ((int8_t)gbyte(pl_iq1s_grid[idx], j) + (neg ? -0.125f : 0.125f));
        }
        check_decode(PL_IQ1_M, &b, e, QK_K);
    }
}

static void test_known_iq4_tq(pl_rng *r) {
    float e[QK_K];
    if (want(PL_IQ4_NL)) {
        block_iq4_nl b[2];
        for (int i = 0; i < 2; i++) {
            b[i].d = f16p2(i - 3);
            for (int j = 0; j < 16; j++) {
                const int lo = (int)pl_rng_int(r, 0, 15), hi = (int)pl_rng_int(r, 0, 15);
                b[i].qs[j] = (uint8_t)(lo | (hi << 4));
                e[32 * i + j] = ldexpf(1.0f, i - 3) * pl_kvalues_iq4nl[lo];
                e[32 * i + j + 16] = ldexpf(1.0f, i - 3) * pl_kvalues_iq4nl[hi];
            }
        }
        check_decode(PL_IQ4_NL, b, e, 64);
    }
    /* iq4_xs: 6-bit scales ls (4 low bits in scales_l nibbles, 2 high in
     * scales_h), x = d (ls - 32) kvalues[code] */
    if (want(PL_IQ4_XS)) {
        block_iq4_xs b;
        b.d = f16p2(-6);
        b.scales_h = 0;
        memset(b.scales_l, 0, sizeof b.scales_l);
        for (int g = 0; g < 8; g++) {
            const int ls = (g * 9 + 5) % 64;
            b.scales_l[g / 2] |= (uint8_t)((ls & 0xF) << (4 * (g % 2)));
            b.scales_h |= (uint16_t)((ls >> 4) << (2 * g));
            for (int j = 0; j < 16; j++) {
                const int lo = (int)pl_rng_int(r, 0, 15), hi = (int)pl_rng_int(r, 0, 15);
                b.qs[16 * g + j] = (uint8_t)(lo | (hi << 4));
                e[32 * g + j] = 0.015625f * (ls - 32) * pl_kvalues_iq4nl[lo];
                e[32 * g + 16 + j] = 0.015625f * (ls - 32) * pl_kvalues_iq4nl[hi];
            }
        }
        check_decode(PL_IQ4_XS, &b, e, QK_K);
    }
    /* tq1_0: trits packed 5 per byte (first trit most significant, byte =
     * ceil(q * 256 / 243)), 4 per qh byte (shifted up one trit) */
    if (want(PL_TQ1_0)) {
        block_tq1_0 b;
        b.d = f16p2(-1);
        int t[QK_K];
        for (int k = 0; k < QK_K; k++) {
            t[k] = (int)pl_rng_int(r, 0, 2);
            e[k] = 0.5f * (t[k] - 1);
        }
        for (int m = 0; m < 32; m++) {
            int q = 0;
            for (int n = 0; n < 5; n++) q = 3 * q + t[32 * n + m];
            b.qs[m] = (uint8_t)((q * 256 + 242) / 243);
        }
        for (int m = 0; m < 16; m++) {
            int q = 0;
            for (int n = 0; n < 5; n++) q = 3 * q + t[160 + 16 * n + m];
            b.qs[32 + m] = (uint8_t)((q * 256 + 242) / 243);
        }
        for (int j = 0; j < 4; j++) {
            int q = 0;
            for (int n = 0; n < 4; n++) q = 3 * q + t[240 + 4 * n + j];
            b.qh[j] = (uint8_t)((3 * q * 256 + 242) / 243);
        }
        check_decode(PL_TQ1_0, &b, e, QK_K);
    }
    /* tq2_0: 2-bit codes q, x = d (q - 1); element 128 h + 32 l + m in bits
     * 2l of qs[32 h + m] */
    if (want(PL_TQ2_0)) {
        block_tq2_0 b;
        b.d = f16p2(2);
        memset(b.qs, 0, sizeof b.qs);
        for (int k = 0; k < QK_K; k++) {
            const int q = (int)pl_rng_int(r, 0, 2), h = k / 128, l = (k % 128) / 32, m = k % 32;
            b.qs[32 * h + m] |= (uint8_t)(q << (2 * l));
            e[k] = 4.0f * (q - 1);
        }
        check_decode(PL_TQ2_0, &b, e, QK_K);
    }
}

/* ---- fixtures: decoded vs the f32 weights ------------------------------------------*/

/* Relative RMSE of the decoded fixture weights vs the f32 originals: the
 * measured worst tensor per type (the fixture files, IQ types quantized with
 * the imatrix) plus 10-25%. Ternary formats keep only sign(x) * amax of each
 * block, hence their large error on Gaussian weights. */
static double fx_bound(pl_dtype t) {
    switch (t) {
        case PL_Q6_K: return 0.022;    /* measured 0.0177 */
        case PL_Q5_K: return 0.045;    /* 0.0361 */
        case PL_Q3_K: return 0.18;     /* 0.1514 */
        case PL_Q2_K: return 0.34;     /* 0.2974 */
        case PL_IQ2_XS: return 0.36;   /* 0.3071 */
        case PL_IQ2_XXS: return 0.42;  /* 0.3513 */
        case PL_IQ1_M: return 0.56;    /* 0.4696 */
        case PL_IQ1_S: return 0.60;    /* 0.5007 */
        case PL_TQ2_0: case PL_TQ1_0: return 0.90;   /* 0.8191 */
        default: return 0.5;
    }
}

static void test_fixture(const char *name, pl_gguf *f32) {
    pl_gguf *g = NULL;
    char rel[256];
    snprintf(rel, sizeof rel, "models/%s.gguf", name);
    if (pl_gguf_open(pl_fixture(rel), &g) != PL_OK) {
        CHECK(0, "cannot open %s: %s", name, pl_last_error());
        return;
    }
    double worst[PL_DTYPE_COUNT] = {0};
    int n_tensors[PL_DTYPE_COUNT] = {0};
    for (int64_t i = 0; i < pl_gguf_n_tensors(g); i++) {
        const pl_gguf_tensor *t = pl_gguf_tensor_at(g, i);
        if (t->dtype == PL_F32 || !want(t->dtype)) continue;
        const pl_gguf_tensor *ref = pl_gguf_find_tensor(f32, t->name);
        CHECK(ref && ref->dtype == PL_F32 && ref->ne[0] == t->ne[0] && ref->ne[1] == t->ne[1], "%s: %s in the f32 model",
              name, t->name);
        CHECK(pl_can_dequantize(t->dtype), "%s: cannot decode %s", name, pl_dtype_name(t->dtype));
        if (!ref || !pl_can_dequantize(t->dtype)) continue;
        const int64_t K = t->ne[0], rows = t->ne[1] * t->ne[2] * t->ne[3];
        float *d = malloc((size_t)(K * rows) * sizeof *d);
        const size_t rs = pl_dtype_row_size(t->dtype, K);
        for (int64_t r = 0; r < rows; r++) pl_dequantize_row(t->dtype, (const char *)t->data + r * rs, d + r * K, K);
        const double e = pl_rel_rmse(d, (const float *)ref->data, K * rows);
        if (e > worst[t->dtype]) worst[t->dtype] = e;
        n_tensors[t->dtype]++;
        free(d);
    }
    for (int t = 0; t < PL_DTYPE_COUNT; t++) {
        if (!n_tensors[t]) continue;
        printf("  %-20s %-8s %2d tensors: decoded rel. RMSE vs f32 %.4f (bound %.2f)\n", name, pl_dtype_name((pl_dtype)t),
               n_tensors[t], worst[t], fx_bound((pl_dtype)t));
        CHECK(worst[t] <= fx_bound((pl_dtype)t), "%s: %s decodes with rel. RMSE %.4f > %.2f", name,
              pl_dtype_name((pl_dtype)t), worst[t], fx_bound((pl_dtype)t));
    }
    pl_gguf_close(g);
}

static void test_fixtures(void) {
    pl_gguf *f32 = NULL;
    if (pl_gguf_open(pl_fixture("models/tiny-qwen3-f32.gguf"), &f32) != PL_OK) {
        CHECK(0, "cannot open the f32 model: %s", pl_last_error());
        return;
    }
    static const char *names[] = {"tiny-qwen3-q2_k", "tiny-qwen3-iq2_xxs", "tiny-qwen3-iq2_xs", "tiny-qwen3-iq1_s",
                                  "tiny-qwen3-iq1_m", "tiny-qwen3-tq2_0", "tiny-qwen3-tq1_0"};
    for (size_t i = 0; i < sizeof names / sizeof names[0]; i++) test_fixture(names[i], f32);
    pl_gguf_close(f32);
}

/* ---- cpu dot products ----------------------------------------------------------------*/

/* Weight rows of random blocks that decode to finite, moderate values. */
static void random_rows(pl_rng *r, pl_dtype t, unsigned char *w, int64_t K, int rows) {
    const pl_dtype_traits *tr = pl_dtype_get(t);
    for (int64_t b = 0; b < (int64_t)rows * (K / tr->block_size); b++) {
        unsigned char *blk = w + b * tr->type_size;
        pl_random_block(r, t, blk);
    }
}

/* Runs kernel type mt on `rows` weight rows x nc activation rows and returns
 * the worst |result - exact| / sum_k |w_k a_k|, where exact is the dot of the
 * decoded weights with the dequantized activations the kernel was given:
 * the integer arithmetic is exact, so only float rounding (~1e-7) remains. */
static double kernel_error(const pl_cpu_mm_type *mt, pl_dtype t, const unsigned char *w, size_t ws, int rows,
                           int64_t K, const float *x, int nc) {
    const size_t as = pl_dtype_row_size(mt->vtype, K);
    unsigned char *a = malloc(as * (size_t)nc);
    float *adq = malloc((size_t)(K * nc) * sizeof *adq), *wdq = malloc((size_t)K * sizeof *wdq);
    float *out = malloc((size_t)(rows * nc) * sizeof *out);
    for (int c = 0; c < nc; c++) {
        mt->from_float(x + c * K, a + c * as, K);
        if (mt->vtype == PL_Q8_K) pl_dequantize_row_q8_K(a + c * as, adq + c * K, K);
        else pl_dequantize_row(mt->vtype, a + c * as, adq + c * K, K);
    }
    for (int r = 0; r < rows; r++) mt->kernel(K, w + r * ws, ws, 1, a, as, nc, out + r, (size_t)rows);
    double worst = 0;
    for (int r = 0; r < rows; r++) {
        pl_dequantize_row(t, w + r * ws, wdq, K);
        for (int c = 0; c < nc; c++) {
            double dot = 0, mag = 0;
            for (int64_t k = 0; k < K; k++) {
                dot += (double)wdq[k] * adq[c * K + k];
                mag += fabs((double)wdq[k] * adq[c * K + k]);
            }
            const double e = mag > 0 ? fabs(out[c * rows + r] - dot) / mag : fabs(out[c * rows + r]);
            if (!(e <= worst)) worst = isnan(e) ? INFINITY : e;
        }
    }
    free(a);
    free(adq);
    free(wdq);
    free(out);
    return worst;
}

static void test_kernels(pl_rng *r) {
    const bool avx2 = pl_cpu_has_avx2();
    for (size_t ti = 0; ti < N_LADDER; ti++) {
        const pl_dtype t = ladder[ti];
        if (!want(t)) continue;
        const pl_cpu_mm_type *impl[2] = {pl_cpu_mm_type_get_ladder_portable(t), pl_cpu_mm_type_get_ladder(t)};
        CHECK(impl[0] && impl[1], "%s: no ladder kernel", pl_dtype_name(t));
        if (!impl[0] || !impl[1]) continue;
        CHECK(impl[0]->vtype == (t == PL_IQ4_NL ? PL_Q8_0 : PL_Q8_K), "%s: activation format", pl_dtype_name(t));
        const int64_t bs = pl_dtype_get(t)->block_size;
        const int64_t Ks[3] = {bs, 2 * QK_K, 4 * QK_K};
        double worst[2] = {0, 0};
        for (int ki = 0; ki < 3; ki++) {
            const int64_t K = Ks[ki];
            const int rows = 9;
            const size_t ws = pl_dtype_row_size(t, K) + 4;   /* strided rows */
            unsigned char *w = malloc(ws * rows);
            random_rows(r, t, w, K, 1);
            for (int rr = 1; rr < rows; rr++) random_rows(r, t, w + rr * ws, K, 1);
            float *x = malloc((size_t)(4 * K) * sizeof *x);
            pl_fill_normal(r, x, 4 * K, 1.0f);
            for (int nc = 1; nc <= 4; nc++)
                for (int im = 0; im < 2; im++) {
                    if (im == 1 && !avx2) continue;
                    const double e = kernel_error(impl[im], t, w, ws, rows, K, x, nc);
                    if (!(e <= worst[im])) worst[im] = e;
                }
            free(w);
            free(x);
        }
        printf("  %-8s dot vs exact on its q8 input: portable %.2e, %s %.2e\n", pl_dtype_name(t), worst[0],
               avx2 ? "avx2" : "(no avx2)", worst[1]);
        CHECK(worst[0] <= 2e-6, "%s portable kernel: relative error %.3e", pl_dtype_name(t), worst[0]);
        CHECK(worst[1] <= 2e-6, "%s avx2 kernel: relative error %.3e", pl_dtype_name(t), worst[1]);
    }
}

/* MATMUL through the backends' kernel tables on real fixture weights
 * (blk.0.ffn_up, [256, 768] / blk.0.attn_v), with ref as the reference: the
 * remaining difference is the q8 rounding of the activations. */
static double matmul_nmse(const pl_gguf_tensor *gt, int M, int n_threads, pl_rng *r) {
    const pl_backend *bk[2] = {pl_backend_find("ref"), pl_backend_find("cpu")};
    pl_tensor W, X, Y[2];
    pl_tensor_init(&W, gt->dtype, 2, gt->ne, (void *)gt->data);
    const int64_t K = gt->ne[0], N = gt->ne[1];
    const int64_t xne[2] = {K, M}, yne[2] = {N, M};
    float *x = malloc((size_t)(K * M) * sizeof *x), *y[2];
    pl_fill_normal(r, x, K * M, 1.0f);
    pl_tensor_init(&X, PL_F32, 2, xne, x);
    double e = INFINITY;
    for (int b = 0; b < 2; b++) {
        y[b] = malloc((size_t)(N * M) * sizeof *y[b]);
        pl_tensor_init(&Y[b], PL_F32, 2, yne, y[b]);
    }
    pl_exec_ctx *ctx[2] = {NULL, NULL};
    bool ok = true;
    for (int b = 0; b < 2; b++) {
        pl_node n;
        memset(&n, 0, sizeof n);
        n.op = PL_OP_MATMUL;
        n.src[0] = &W;
        n.src[1] = &X;
        n.dst = &Y[b];
        const pl_kernel *k = bk[b] ? pl_backend_lookup(bk[b], PL_OP_MATMUL, gt->dtype) : NULL;
        ok = ok && k && bk[b]->ctx_create(b ? n_threads : 1, &ctx[b]) == PL_OK;
        if (!ok) break;
        void *work = NULL;
        if (k->work_size) {
            ctx[b]->work_size = k->work_size(&n, ctx[b]->n_threads);
            work = ctx[b]->work = malloc(ctx[b]->work_size + 1);
        }
        ok = k->run(ctx[b], &n) == PL_OK;
        ctx[b]->work = NULL;
        free(work);
    }
    CHECK(ok, "matmul %s: cannot run: %s", pl_dtype_name(gt->dtype), pl_last_error());
    if (ok) e = pl_nmse(y[1], y[0], N * M);
    for (int b = 0; b < 2; b++) {
        if (ctx[b]) bk[b]->ctx_free(ctx[b]);
        free(y[b]);
    }
    free(x);
    return e;
}

static void test_matmul_fixtures(pl_rng *r) {
    static const char *names[] = {"tiny-qwen3-q2_k", "tiny-qwen3-iq2_xxs", "tiny-qwen3-iq2_xs", "tiny-qwen3-iq1_s",
                                  "tiny-qwen3-iq1_m", "tiny-qwen3-tq2_0", "tiny-qwen3-tq1_0"};
    static const char *tensors[] = {"blk.0.ffn_up.weight", "blk.0.attn_output.weight", "blk.1.ffn_down.weight",
                                    "token_embd.weight"};
    bool seen[PL_DTYPE_COUNT] = {false};
    for (size_t i = 0; i < sizeof names / sizeof names[0]; i++) {
        pl_gguf *g = NULL;
        char rel[256];
        snprintf(rel, sizeof rel, "models/%s.gguf", names[i]);
        if (pl_gguf_open(pl_fixture(rel), &g) != PL_OK) {
            CHECK(0, "cannot open %s", names[i]);
            continue;
        }
        for (size_t ti = 0; ti < sizeof tensors / sizeof tensors[0]; ti++) {
            const pl_gguf_tensor *gt = pl_gguf_find_tensor(g, tensors[ti]);
            if (!gt || seen[gt->dtype] || !want(gt->dtype)) continue;
            seen[gt->dtype] = true;
            double worst = 0;
            static const int Ms[3] = {1, 5, 33};
            for (int mi = 0; mi < 3; mi++) {
                const double e = matmul_nmse(gt, Ms[mi], mi == 1 ? 1 : 3, r);
                if (!(e <= worst)) worst = e;
            }
            printf("  %-8s matmul cpu vs ref on %s:%s [%lld x %lld], M = 1, 5, 33: max NMSE %.2e\n",
                   pl_dtype_name(gt->dtype), names[i], tensors[ti], (long long)gt->ne[0], (long long)gt->ne[1], worst);
            CHECK(worst <= 5e-4, "%s matmul NMSE %.3e > 5e-4", pl_dtype_name(gt->dtype), worst);
        }
        pl_gguf_close(g);
    }
}

int main(int argc, char **argv) {
    g_only = argc > 1 ? argv[1] : NULL;
    pl_rng r = {0x1ADD3Eull};
    test_tables();
    test_sizes();
    test_known_iq2(&r);
    test_known_iq3(&r);
    test_known_iq1(&r);
    test_known_iq4_tq(&r);
    test_fixtures();
    test_kernels(&r);
    test_matmul_fixtures(&r);
    return pl_test_summary("test_quant_ladder");
}
