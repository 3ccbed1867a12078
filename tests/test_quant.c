/* Block formats: struct sizes, hand-built blocks with known decoded values,
 * quantize -> dequantize round trips, and the real fixture files (written by
 * llama.cpp's quantizer): our quantizers must reproduce their bytes and our
 * decoders must read them back close to the f32 weights. */
#include "testutil.h"
#include "ophelpers.h"
#include "quant/quant.h"
#include "quant/blocks.h"
#include "core/fp16.h"
#include "gguf/gguf.h"
#include "pocketllm.h"
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- sizes ---------------------------------------------------------------*/

static void test_sizes(void) {
    static const struct { pl_dtype t; size_t size; } blocks[] = {
        {PL_Q4_0, sizeof(block_q4_0)}, {PL_Q4_1, sizeof(block_q4_1)}, {PL_Q5_0, sizeof(block_q5_0)},
        {PL_Q5_1, sizeof(block_q5_1)}, {PL_Q8_0, sizeof(block_q8_0)}, {PL_Q8_1, sizeof(block_q8_1)},
        {PL_Q2_K, sizeof(block_q2_K)}, {PL_Q3_K, sizeof(block_q3_K)}, {PL_Q4_K, sizeof(block_q4_K)},
        {PL_Q5_K, sizeof(block_q5_K)}, {PL_Q6_K, sizeof(block_q6_K)}, {PL_Q8_K, sizeof(block_q8_K)},
    };
    for (size_t i = 0; i < sizeof blocks / sizeof blocks[0]; i++) {
        const pl_dtype_traits *tr = pl_dtype_get(blocks[i].t);
        CHECK(tr && tr->type_size == blocks[i].size, "%s: struct %zu bytes, dtype table %zu",
              pl_dtype_name(blocks[i].t), blocks[i].size, tr ? tr->type_size : 0);
    }
    /* every listed decoder / quantizer is reachable through the dispatchers */
#define CHK_DQ(t, fn) CHECK(pl_can_dequantize(t), "%s should be decodable", pl_dtype_name(t));
#define CHK_Q(t, fn) CHECK(pl_can_quantize(t), "%s should be encodable", pl_dtype_name(t));
    PL_DEQUANT_TYPES(CHK_DQ)
    PL_QUANTIZE_TYPES(CHK_Q)
#undef CHK_DQ
#undef CHK_Q
    CHECK(!pl_can_dequantize(PL_I32) && !pl_can_dequantize(PL_Q8_K) && !pl_can_dequantize((pl_dtype)99),
          "non-weight / unknown types are not decodable");
    CHECK(!pl_can_quantize(PL_I32), "i32 is not encodable");
    float x[QK_K] = {0};
    unsigned char buf[512];
    CHECK(!pl_quantize_row(PL_Q4_K, x, buf, 100), "n not a multiple of 256 is refused");
    CHECK(!pl_quantize_row(PL_I32, x, buf, 32), "i32 has no quantizer");
}

/* ---- known blocks ----------------------------------------------------------
 * Each block is built bit by bit from the layout description (not with our
 * quantizers), with small integer levels and power-of-two scales so every
 * expected value is exact in float. */

static int check_decode(pl_dtype t, const void *blk, const float *expect, int n, const char *what) {
    float out[QK_K];
    pl_dequantize_row(t, blk, out, n);
    int bad = 0;
    for (int i = 0; i < n; i++) {
        if (out[i] != expect[i]) {
            if (bad < 3) fprintf(stderr, "  %s[%d] = %g, expected %g\n", what, i, out[i], expect[i]);
            bad++;
        }
    }
    CHECK(bad == 0, "%s: %d of %d values differ", what, bad, n);
    return bad;
}

static void test_known_32(void) {
    float e[32];
    { /* q8_0 */
        block_q8_0 b;
        b.d = pl_f32_to_f16(0.5f);
        for (int j = 0; j < 32; j++) { b.qs[j] = (int8_t)(j * 8 - 124); e[j] = (j * 8 - 124) * 0.5f; }
        check_decode(PL_Q8_0, &b, e, 32, "q8_0");
    }
    { /* q4_0: element j in the low nibble of qs[j], j + 16 in the high nibble */
        block_q4_0 b;
        b.d = pl_f32_to_f16(-1.5f);
        for (int j = 0; j < 16; j++) {
            const int lo = j % 16, hi = (j * 5) % 16;
            b.qs[j] = (uint8_t)(lo | hi << 4);
            e[j] = (lo - 8) * -1.5f;
            e[j + 16] = (hi - 8) * -1.5f;
        }
        check_decode(PL_Q4_0, &b, e, 32, "q4_0");
    }
    { /* q4_1 */
        block_q4_1 b;
        b.d = pl_f32_to_f16(0.5f);
        b.m = pl_f32_to_f16(-2.0f);
        for (int j = 0; j < 16; j++) {
            const int lo = (j * 3) % 16, hi = 15 - j;
            b.qs[j] = (uint8_t)(lo | hi << 4);
            e[j] = lo * 0.5f - 2.0f;
            e[j + 16] = hi * 0.5f - 2.0f;
        }
        check_decode(PL_Q4_1, &b, e, 32, "q4_1");
    }
    { /* q5_0 / q5_1: bit 4 of element e is bit e of the little-endian qh word */
        block_q5_0 b;
        block_q5_1 b1;
        b.d = b1.d = pl_f32_to_f16(0.25f);
        b1.m = pl_f32_to_f16(1.0f);
        int q[32];
        uint32_t qh = 0;
        for (int i = 0; i < 32; i++) {
            q[i] = (i * 9 + 1) % 32;
            qh |= (uint32_t)(q[i] >> 4) << i;
        }
        for (int j = 0; j < 16; j++) b.qs[j] = b1.qs[j] = (uint8_t)((q[j] & 15) | (q[j + 16] & 15) << 4);
        for (int k = 0; k < 4; k++) b.qh[k] = b1.qh[k] = (uint8_t)(qh >> (8 * k));
        for (int i = 0; i < 32; i++) e[i] = (q[i] - 16) * 0.25f;
        check_decode(PL_Q5_0, &b, e, 32, "q5_0");
        for (int i = 0; i < 32; i++) e[i] = q[i] * 0.25f + 1.0f;
        check_decode(PL_Q5_1, &b1, e, 32, "q5_1");
    }
    { /* f16 / bf16 */
        const float v[4] = {1.0f, -2.5f, 65504.0f, 0.000061035156f};
        pl_f16 h[4];
        pl_bf16 bh[4];
        for (int i = 0; i < 4; i++) { h[i] = pl_f32_to_f16(v[i]); bh[i] = pl_f32_to_bf16(v[i]); }
        CHECK(h[0] == 0x3C00 && h[1] == 0xC100 && h[2] == 0x7BFF && h[3] == 0x0400, "f16 encodings");
        check_decode(PL_F16, h, v, 4, "f16");
        const float vb[4] = {1.0f, -2.5f, 65536.0f, 6.1035156e-05f};
        check_decode(PL_BF16, bh, vb, 4, "bf16");
    }
}

/* 2-bit plane layout of q2_K / q3_K: element e -> byte 32*(e/128) + e%32,
 * bit pair 2*((e%128)/32). */
static void put2(uint8_t *qs, int e, int v) {
    const int byte = 32 * (e / 128) + e % 32, shift = 2 * ((e % 128) / 32);
    qs[byte] = (uint8_t)(qs[byte] | (v & 3) << shift);
}

/* q4_K / q5_K 6-bit (scale, min) layout, written from the format description. */
static void put_scales_k4(uint8_t s[12], const int sc[8], const int mn[8]) {
    memset(s, 0, 12);
    for (int j = 0; j < 4; j++) {
        s[j] = (uint8_t)(sc[j] | (sc[j + 4] >> 4) << 6);
        s[j + 4] = (uint8_t)(mn[j] | (mn[j + 4] >> 4) << 6);
        s[j + 8] = (uint8_t)((sc[j + 4] & 15) | (mn[j + 4] & 15) << 4);
    }
}

static void test_known_k(void) {
    float e[QK_K];
    { /* q4_K */
        block_q4_K b;
        memset(&b, 0, sizeof b);
        const int sc[8] = {1, 2, 63, 17, 32, 5, 48, 60}, mn[8] = {0, 3, 7, 62, 33, 16, 1, 63};
        b.d = pl_f32_to_f16(1.0f);
        b.dmin = pl_f32_to_f16(0.5f);
        put_scales_k4(b.scales, sc, mn);
        for (int i = 0; i < QK_K; i++) {
            const int q = (i * 7 + 3) % 16, c = i / 64, r = i % 64;
            if (r < 32) b.qs[32 * c + r] |= (uint8_t)q;
            else b.qs[32 * c + r - 32] |= (uint8_t)(q << 4);
            e[i] = 1.0f * sc[i / 32] * q - 0.5f * mn[i / 32];
        }
        check_decode(PL_Q4_K, &b, e, QK_K, "q4_K");
    }
    { /* q5_K: q4_K plus bit 4 in qh[e % 32], bit 2*(e/64) + (e%64 >= 32) */
        block_q5_K b;
        memset(&b, 0, sizeof b);
        const int sc[8] = {9, 63, 1, 40, 16, 31, 2, 50}, mn[8] = {63, 0, 12, 5, 47, 32, 8, 19};
        b.d = pl_f32_to_f16(0.25f);
        b.dmin = pl_f32_to_f16(2.0f);
        put_scales_k4(b.scales, sc, mn);
        for (int i = 0; i < QK_K; i++) {
            const int q = (i * 13 + 7) % 32, c = i / 64, r = i % 64;
            if (r < 32) b.qs[32 * c + r] |= (uint8_t)(q & 15);
            else b.qs[32 * c + r - 32] |= (uint8_t)((q & 15) << 4);
            if (q >> 4) b.qh[i % 32] |= (uint8_t)(1u << (2 * c + (r >= 32)));
            e[i] = 0.25f * sc[i / 32] * q - 2.0f * mn[i / 32];
        }
        check_decode(PL_Q5_K, &b, e, QK_K, "q5_K");
    }
    { /* q6_K */
        block_q6_K b;
        memset(&b, 0, sizeof b);
        b.d = pl_f32_to_f16(0.125f);
        for (int i = 0; i < 16; i++) b.scales[i] = (int8_t)(i * 13 - 100);
        for (int i = 0; i < QK_K; i++) {
            const int q = (i * 11 + 5) % 64, h = i / 128, r = i % 128, l = r % 32, k = r / 32;
            uint8_t *ql = &b.ql[64 * h + l + 32 * (k & 1)];
            *ql |= (uint8_t)(k < 2 ? (q & 15) : (q & 15) << 4);
            b.qh[32 * h + l] |= (uint8_t)((q >> 4) << (2 * k));
            const int s = b.scales[8 * h + l / 16 + 2 * k];
            e[i] = 0.125f * s * (q - 32);
        }
        check_decode(PL_Q6_K, &b, e, QK_K, "q6_K");
    }
    { /* q3_K */
        block_q3_K b;
        memset(&b, 0, sizeof b);
        b.d = pl_f32_to_f16(0.5f);
        int s[16];
        for (int j = 0; j < 16; j++) {
            s[j] = (j * 23 + 5) % 64;
            if (j < 8) b.scales[j] |= (uint8_t)(s[j] & 15);
            else b.scales[j - 8] |= (uint8_t)((s[j] & 15) << 4);
            b.scales[8 + j % 4] |= (uint8_t)((s[j] >> 4) << (2 * (j / 4)));
        }
        for (int i = 0; i < QK_K; i++) {
            const int q = (i * 3 + 1) % 8;   /* stored level; value q - 4 */
            put2(b.qs, i, q & 3);
            if (q & 4) b.hmask[i % 32] |= (uint8_t)(1u << (i / 32));
            e[i] = 0.5f * (s[i / 16] - 32) * (q - 4);
        }
        check_decode(PL_Q3_K, &b, e, QK_K, "q3_K");
    }
    { /* q2_K */
        block_q2_K b;
        memset(&b, 0, sizeof b);
        b.d = pl_f32_to_f16(0.5f);
        b.dmin = pl_f32_to_f16(0.25f);
        for (int j = 0; j < 16; j++) b.scales[j] = (uint8_t)(((j * 5 + 1) % 16) | ((j * 7 + 3) % 16) << 4);
        for (int i = 0; i < QK_K; i++) {
            const int q = (i * 5 + 2) % 4, j = i / 16;
            put2(b.qs, i, q);
            e[i] = 0.5f * ((j * 5 + 1) % 16) * q - 0.25f * ((j * 7 + 3) % 16);
        }
        check_decode(PL_Q2_K, &b, e, QK_K, "q2_K");
    }
}

/* Quantizer outputs that can be worked out by hand. */
static void test_known_quantize(void) {
    float x[QK_K];
    { /* q8_0: d = amax/127, q = round(x / d) */
        for (int j = 0; j < 32; j++) x[j] = (float)(j - 16) * 0.125f;  /* amax 2.0 */
        block_q8_0 b;
        pl_quantize_row_q8_0(x, &b, 32);
        CHECK(b.d == pl_f32_to_f16(2.0f / 127), "q8_0 d");
        int bad = 0;
        for (int j = 0; j < 32; j++) bad += b.qs[j] != (int8_t)roundf(x[j] * (1.0f / (2.0f / 127)));
        CHECK(bad == 0 && b.qs[0] == -127, "q8_0 levels (%d bad, qs[0] = %d)", bad, b.qs[0]);
    }
    { /* q8_K: the extreme value maps to -127 * sign, bsums are sums of 16 */
        pl_rng r = {7};
        pl_fill_normal(&r, x, QK_K, 1.0f);
        x[100] = -5.0f;
        block_q8_K b;
        pl_quantize_row_q8_K(x, &b, QK_K);
        CHECK(b.qs[100] == -127 && fabsf(b.d - 5.0f / 127) < 1e-7f, "q8_K extreme: qs %d d %g", b.qs[100], b.d);
        int bad = 0;
        for (int j = 0; j < 16; j++) {
            int s = 0;
            for (int i = 0; i < 16; i++) s += b.qs[16 * j + i];
            bad += s != b.bsums[j];
        }
        CHECK(bad == 0, "q8_K bsums: %d wrong", bad);
        /* Ties round to even. With max = +127 the scale is -1 (GGML maps the
         * extreme value to -127), so q = round(-x). */
        for (int i = 0; i < QK_K; i++) x[i] = 0;
        x[0] = 127.0f; x[1] = 2.5f; x[2] = 3.5f; x[3] = -2.5f;
        pl_quantize_row_q8_K(x, &b, QK_K);
        CHECK(b.d == -1.0f && b.qs[0] == -127 && b.qs[1] == -2 && b.qs[2] == -4 && b.qs[3] == 2,
              "q8_K rounds ties to even: %g %d %d %d %d", b.d, b.qs[0], b.qs[1], b.qs[2], b.qs[3]);
        memset(x, 0, sizeof x);
        memset(&b, 0x55, sizeof b);
        pl_quantize_row_q8_K(x, &b, QK_K);
        CHECK(b.d == 0 && b.qs[5] == 0 && b.bsums[3] == 0, "q8_K of zeros");
    }
    { /* q8_0 rounds half away from zero (roundf), unlike q8_K */
        for (int j = 0; j < 32; j++) x[j] = 0;
        x[0] = 127.0f; x[1] = 2.5f; x[2] = -2.5f;
        block_q8_0 b;
        pl_quantize_row_q8_0(x, &b, 32);
        CHECK(b.qs[0] == 127 && b.qs[1] == 3 && b.qs[2] == -3, "q8_0 rounding: %d %d %d", b.qs[0], b.qs[1], b.qs[2]);
    }
}

/* ---- round trips -------------------------------------------------------------*/

/* Relative RMS error of a quantize -> dequantize round trip of N(0,1) data:
 * the measured values (seeded, deterministic) plus about 25%. The random
 * fixture weights are near-Gaussian too, so the same bounds apply to them. */
static double rt_bound(pl_dtype t) {
    switch (t) {
    case PL_F32: return 0.0;
    case PL_F16: return 2.6e-4;
    case PL_BF16: return 2.2e-3;
    case PL_Q8_0: case PL_Q8_1: return 7e-3;
    case PL_Q8_K: return 9e-3;
    case PL_Q6_K: return 2.3e-2;
    case PL_Q5_K: return 4.5e-2;
    case PL_Q5_0: return 5.4e-2;
    case PL_Q5_1: return 4.8e-2;
    case PL_Q4_K: return 9e-2;
    case PL_Q4_0: return 0.11;
    case PL_Q4_1: return 0.10;
    case PL_Q3_K: return 0.19;
    case PL_Q2_K: return 0.37;
    default: return 0.5;
    }
}

static void test_round_trips(void) {
    static const pl_dtype types[] = {PL_F32, PL_F16, PL_BF16, PL_Q8_0, PL_Q8_1, PL_Q8_K, PL_Q6_K, PL_Q5_K,
                                     PL_Q5_0, PL_Q5_1, PL_Q4_K, PL_Q4_0, PL_Q4_1, PL_Q3_K, PL_Q2_K};
    const int64_t n = 16 * QK_K;
    float *x = malloc(n * sizeof *x), *y = malloc(n * sizeof *y);
    unsigned char *q = malloc((size_t)n * 4 + 64);
    pl_rng r = {12345};
    for (size_t c = 0; c < sizeof types / sizeof types[0]; c++) {
        const pl_dtype t = types[c];
        const char *name = pl_dtype_name(t);
        const size_t rs = pl_dtype_row_size(t, n);
        pl_fill_normal(&r, x, n, 1.0f);
        memset(q, 0xA5, rs + 64);
        CHECK(pl_quantize_row(t, x, q, n), "%s: quantize", name);
        int guard = 0;
        for (int i = 0; i < 64; i++) guard += q[rs + i] != 0xA5;
        CHECK(guard == 0, "%s: quantizer wrote past its %zu bytes", name, rs);
        if (t == PL_Q8_1) pl_dequantize_row_q8_1(q, y, n);
        else if (t == PL_Q8_K) pl_dequantize_row_q8_K(q, y, n);
        else pl_dequantize_row(t, q, y, n);
        const double e = pl_rel_rmse(y, x, n);
        printf("  round trip %-5s rel. RMSE %.3e (bound %.1e)\n", name, e, rt_bound(t));
        CHECK(e <= rt_bound(t), "%s: round-trip rel. RMSE %.3e exceeds %.1e", name, e, rt_bound(t));

        /* Edge data: zeros decode to zeros; a constant, an outlier block,
         * tiny values and a large-offset block decode finitely and close. */
        for (int kind = 0; kind < 4; kind++) {
            for (int64_t i = 0; i < n; i++) {
                switch (kind) {
                case 0: x[i] = 0; break;
                case 1: x[i] = 0.75f; break;
                case 2: x[i] = (i % 97 == 3) ? 300.0f : (float)pl_rng_normal(&r) * 0.01f; break;
                default: x[i] = 1e-6f * (float)pl_rng_normal(&r) + (i / QK_K % 2 ? 5.0f : -5.0f); break;
                }
            }
            pl_quantize_row(t, x, q, n);
            if (t == PL_Q8_1) pl_dequantize_row_q8_1(q, y, n);
            else if (t == PL_Q8_K) pl_dequantize_row_q8_K(q, y, n);
            else pl_dequantize_row(t, q, y, n);
            int nonfinite = 0;
            double maxerr = 0, maxabs = 0;
            for (int64_t i = 0; i < n; i++) {
                nonfinite += !isfinite(y[i]);
                maxerr = fmax(maxerr, fabs((double)y[i] - x[i]));
                maxabs = fmax(maxabs, fabs((double)x[i]));
            }
            CHECK(nonfinite == 0, "%s edge %d: %d non-finite values", name, kind, nonfinite);
            if (kind == 0) CHECK(maxerr == 0, "%s: zeros decode to %g", name, maxerr);
            /* Coarse: every format keeps a constant within 1/4 of its value. */
            if (kind == 1 || kind == 3)
                CHECK(maxerr <= 0.25 * maxabs, "%s edge %d: max error %g of %g", name, kind, maxerr, maxabs);
        }
    }
    free(x);
    free(y);
    free(q);
}

/* ---- fixtures ------------------------------------------------------------------*/

typedef struct fx_stats {
    int64_t tensors, rows, blocks, bad_blocks;
    double worst_rmse;
} fx_stats;

/* Rows of a 2-D+ tensor of a GGUF file, as f32 (decoding as needed). */
static bool decode_rows(const pl_gguf_tensor *t, int64_t r0, int64_t nr, float *out) {
    if (!pl_can_dequantize(t->dtype)) return false;
    const size_t rs = pl_dtype_row_size(t->dtype, t->ne[0]);
    for (int64_t r = 0; r < nr; r++)
        pl_dequantize_row(t->dtype, (const char *)t->data + (r0 + r) * rs, out + r * t->ne[0], t->ne[0]);
    return true;
}

/* For every quantized tensor of `qpath`: re-quantize the f16 model's weights
 * with our reference quantizer and compare bytes with the file (llama-quantize
 * ran GGML's reference quantizers on the same f16 weights), and decode the
 * file's rows and compare with the f32 model's weights. */
static void test_fixture(const char *qname, pl_gguf *f16, pl_gguf *f32, int64_t max_rows) {
    /* f16: the model llama-quantize read; f32: the weights decoded values
     * are compared with. */
    pl_gguf *g = NULL;
    char rel[256];
    snprintf(rel, sizeof rel, "models/%s", qname);
    if (pl_gguf_open(pl_fixture(rel), &g) != PL_OK) {
        CHECK(0, "cannot open %s: %s", qname, pl_last_error());
        return;
    }
    fx_stats st[PL_DTYPE_COUNT];
    memset(st, 0, sizeof st);
    for (int64_t i = 0; i < pl_gguf_n_tensors(g); i++) {
        const pl_gguf_tensor *t = pl_gguf_tensor_at(g, i);
        if (t->dtype == PL_F32) continue;   /* norms: stored as-is */
        const pl_gguf_tensor *src = pl_gguf_find_tensor(f16, t->name);
        const pl_gguf_tensor *ref = pl_gguf_find_tensor(f32, t->name);
        CHECK(src && ref, "%s: tensor %s missing from the f16/f32 models", qname, t->name);
        if (!src || !ref) continue;
        CHECK(pl_can_dequantize(t->dtype), "%s: %s has dtype %s, which we cannot decode", qname, t->name,
              pl_dtype_name(t->dtype));
        if (!pl_can_dequantize(t->dtype)) continue;
        const int64_t K = t->ne[0], rows = t->ne[1] * t->ne[2] * t->ne[3];
        const int64_t nr = rows < max_rows ? rows : max_rows;
        const size_t rs = pl_dtype_row_size(t->dtype, K);
        float *w = malloc((size_t)(K * nr) * sizeof *w), *d = malloc((size_t)(K * nr) * sizeof *d);
        unsigned char *qb = malloc(rs);
        decode_rows(src, 0, nr, w);
        fx_stats *s = &st[t->dtype];
        s->tensors++;
        s->rows += nr;
        /* bytes */
        const pl_dtype_traits *tr = pl_dtype_get(t->dtype);
        for (int64_t r = 0; r < nr && pl_can_quantize(t->dtype); r++) {
            pl_quantize_row(t->dtype, w + r * K, qb, K);
            const unsigned char *fb = (const unsigned char *)t->data + r * rs;
            for (int64_t b = 0; b < K / tr->block_size; b++) {
                s->blocks++;
                if (memcmp(qb + b * tr->type_size, fb + b * tr->type_size, tr->type_size)) s->bad_blocks++;
            }
        }
        /* values */
        decode_rows(t, 0, nr, d);
        decode_rows(ref, 0, nr, w);
        const double e = pl_rel_rmse(d, w, K * nr);
        if (e > s->worst_rmse) s->worst_rmse = e;
        free(w);
        free(d);
        free(qb);
    }
    /* Decoded vs f32: the round-trip bounds (the f16 step is negligible). */
    for (int t = 0; t < PL_DTYPE_COUNT; t++) {
        if (!st[t].tensors) continue;
        const double bound = rt_bound((pl_dtype)t);
        printf("  %-28s %-5s %2lld tensors %5lld rows: %lld/%lld blocks differ from our quantizer, "
               "decoded rel. RMSE vs f32 %.3e\n",
               qname, pl_dtype_name((pl_dtype)t), (long long)st[t].tensors, (long long)st[t].rows,
               (long long)st[t].bad_blocks, (long long)st[t].blocks, st[t].worst_rmse);
        CHECK(st[t].blocks > 0 && st[t].bad_blocks == 0, "%s: %s: %lld of %lld blocks differ from llama.cpp's bytes",
              qname, pl_dtype_name((pl_dtype)t), (long long)st[t].bad_blocks, (long long)st[t].blocks);
        CHECK(st[t].worst_rmse <= bound, "%s: %s decodes with rel. RMSE %.3e > %.1e", qname,
              pl_dtype_name((pl_dtype)t), st[t].worst_rmse, bound);
    }
    pl_gguf_close(g);
}

static void test_fixture_pair(const char *qname, const char *srcname, const char *refname) {
    pl_gguf *src = NULL, *ref = NULL;
    char rel[256];
    snprintf(rel, sizeof rel, "models/%s", srcname);
    if (pl_gguf_open(pl_fixture(rel), &src) != PL_OK) {
        CHECK(0, "cannot open %s: %s", srcname, pl_last_error());
        return;
    }
    snprintf(rel, sizeof rel, "models/%s", refname);
    if (pl_gguf_open(pl_fixture(rel), &ref) != PL_OK) {
        CHECK(0, "cannot open %s: %s", refname, pl_last_error());
        pl_gguf_close(src);
        return;
    }
    /* Enough rows to cover every tensor's layout; all of them would take
     * seconds under ASan for no extra coverage. */
    test_fixture(qname, src, ref, 48);
    pl_gguf_close(src);
    pl_gguf_close(ref);
}

static void test_fixtures(void) {
    /* The quantized files were made from the f16 ones; the f32 file holds the
     * original weights (the untied and qwen2 models have no f32 file: their
     * decoded values are compared with the f16 weights). */
    test_fixture_pair("tiny-qwen3-q8_0.gguf", "tiny-qwen3-f16.gguf", "tiny-qwen3-f32.gguf");
    test_fixture_pair("tiny-qwen3-q6_k.gguf", "tiny-qwen3-f16.gguf", "tiny-qwen3-f32.gguf");
    test_fixture_pair("tiny-qwen3-q4_k_m.gguf", "tiny-qwen3-f16.gguf", "tiny-qwen3-f32.gguf");
    test_fixture_pair("tiny-qwen3-q2_k.gguf", "tiny-qwen3-f16.gguf", "tiny-qwen3-f32.gguf");
    test_fixture_pair("tiny-qwen3-bf16.gguf", "tiny-qwen3-f16.gguf", "tiny-qwen3-f32.gguf");
    test_fixture_pair("tiny-qwen3-untied-q4_k_m.gguf", "tiny-qwen3-untied-f16.gguf", "tiny-qwen3-untied-f16.gguf");
    test_fixture_pair("tiny-qwen2-q4_k_m.gguf", "tiny-qwen2-f16.gguf", "tiny-qwen2-f16.gguf");
}

int main(void) {
    test_sizes();
    test_known_32();
    test_known_k();
    test_known_quantize();
    test_round_trips();
    test_fixtures();
    return pl_test_summary("test_quant");
}
