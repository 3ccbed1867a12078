/*
 * The model quantizers against llama.cpp's own output, and their behaviour:
 *  - quantizing the f16 fixture's tensors (with tiny-imatrix.gguf for the IQ
 *    fixtures, as they were made) reproduces the fixture files' blocks
 *    exactly, for every ladder type and the types their mixes use;
 *  - round-trip RMSE against the f32 weights stays within per-type bounds;
 *  - an importance matrix lowers the error it weights (and no imatrix lowers
 *    the plain error);
 *  - the per-tensor mixes follow llama.cpp's rules on Qwen3 shapes;
 *  - imatrix files round-trip (byte counts: test_tools_api.c).
 */
#include "testutil.h"
#include "gguf/gguf.h"
#include "quant/imatrix.h"
#include "quant/quant.h"
#include "quant/quantize_mix.h"
#include "quant/quantize_rows.h"
#include <math.h>
#include <stdlib.h>
#include <string.h>

/* rows r0..r0+nr-1 of a tensor as f32 */
static float *rows_f32(const pl_gguf_tensor *t, int64_t r0, int64_t nr) {
    float *x = malloc((size_t)(nr * t->ne[0]) * sizeof *x);
    const size_t rs = pl_dtype_row_size(t->dtype, t->ne[0]);
    for (int64_t r = 0; r < nr; r++)
        pl_dequantize_row(t->dtype, (const char *)t->data + (size_t)(r0 + r) * rs, x + r * t->ne[0], t->ne[0]);
    return x;
}

static double rmse(const float *a, const float *b, int64_t n) {
    double s = 0;
    for (int64_t i = 0; i < n; i++) s += ((double)a[i] - b[i]) * ((double)a[i] - b[i]);
    return sqrt(s / (double)n);
}

typedef struct fixture_case {
    const char *file;
    bool imatrix;
    double max_rel_rmse;     /* RMSE / RMS(weights) over the checked tensors */
} fixture_case;

/* For each fixture: the tensors below (token_embd: its first 256 rows) are
 * quantized from the f16 file and compared block by block with the fixture. */
static void test_fixture_blocks(pl_gguf *f16, pl_gguf *f32, pl_imatrix *im) {
    static const fixture_case cases[] = {
        {"q8_0", false, 0.006},   {"q6_k", false, 0.02},   {"q4_k_m", false, 0.09}, {"q2_k", false, 0.35},
        {"iq2_xs", true, 0.40},   {"iq2_xxs", true, 0.45}, {"iq1_m", true, 0.60},   {"iq1_s", true, 0.65},
        {"tq2_0", false, 0.75},   {"tq1_0", false, 0.75},
    };
    static const char *const names[] = {"token_embd.weight", "blk.0.attn_q.weight", "blk.0.attn_v.weight",
                                        "blk.1.attn_v.weight", "blk.0.attn_output.weight", "blk.1.ffn_down.weight"};
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        char rel[128];
        snprintf(rel, sizeof rel, "models/tiny-qwen3-%s.gguf", cases[c].file);
        pl_gguf *q = NULL;
        if (pl_gguf_open(pl_fixture(rel), &q) != PL_OK) {
            CHECK(0, "cannot open %s: %s", rel, pl_last_error());
            continue;
        }
        int64_t blocks = 0, same = 0;
        double err2 = 0, ref2 = 0, n_el = 0;
        for (size_t k = 0; k < sizeof names / sizeof names[0]; k++) {
            const pl_gguf_tensor *src = pl_gguf_find_tensor(f16, names[k]), *exp = pl_gguf_find_tensor(q, names[k]),
                                 *ref = pl_gguf_find_tensor(f32, names[k]);
            if (!src || !exp || !ref) {
                CHECK(0, "%s: missing %s", rel, names[k]);
                continue;
            }
            const int64_t ne0 = src->ne[0];
            const int64_t nr = !strcmp(names[k], "token_embd.weight") ? 256 : src->ne[1];
            const float *w = cases[c].imatrix ? pl_imatrix_weights(im, names[k], NULL) : NULL;
            float *x = rows_f32(src, 0, nr), *xr = rows_f32(ref, 0, nr);
            const size_t rs = pl_dtype_row_size(exp->dtype, ne0);
            char *out = malloc(rs * (size_t)nr);
            CHECK(pl_quantize_rows(exp->dtype, x, out, nr, ne0, w) == PL_OK, "%s %s: %s", rel, names[k], pl_last_error());
            const size_t bs = pl_dtype_get(exp->dtype)->type_size;
            for (size_t b = 0; b < rs * (size_t)nr / bs; b++) {
                blocks++;
                same += !memcmp(out + b * bs, (const char *)exp->data + b * bs, bs);
            }
            float *y = malloc((size_t)(nr * ne0) * sizeof *y);
            for (int64_t r = 0; r < nr; r++) pl_dequantize_row(exp->dtype, out + (size_t)r * rs, y + r * ne0, ne0);
            const double e = rmse(y, xr, nr * ne0);
            err2 += e * e * (double)(nr * ne0);
            for (int64_t i = 0; i < nr * ne0; i++) ref2 += (double)xr[i] * xr[i];
            n_el += (double)(nr * ne0);
            free(x);
            free(xr);
            free(out);
            free(y);
        }
        const double rel_rmse = sqrt(err2 / ref2);
        printf("  %-8s %6lld/%-6lld blocks identical with llama.cpp's  rmse %.5f (%.4f of rms)\n", cases[c].file,
               (long long)same, (long long)blocks, sqrt(err2 / n_el), rel_rmse);
        CHECK(same == blocks && blocks > 0, "%s: %lld of %lld blocks differ", rel, (long long)(blocks - same),
              (long long)blocks);
        CHECK(rel_rmse < cases[c].max_rel_rmse, "%s: relative rmse %.4f >= %.4f", rel, rel_rmse, cases[c].max_rel_rmse);
        pl_gguf_close(q);
    }
}

/* sum_j w_j (x_j - q_j)^2 over rows, w = NULL: plain */
static double werr(pl_dtype t, const float *x, int64_t nr, int64_t ne0, const float *qw, const float *w) {
    const size_t rs = pl_dtype_row_size(t, ne0);
    char *q = malloc(rs * (size_t)nr);
    float *y = malloc((size_t)ne0 * sizeof *y);
    pl_quantize_rows(t, x, q, nr, ne0, qw);
    double s = 0;
    for (int64_t r = 0; r < nr; r++) {
        pl_dequantize_row(t, q + (size_t)r * rs, y, ne0);
        for (int64_t j = 0; j < ne0; j++) {
            const double d = (double)x[r * ne0 + j] - y[j];
            s += (w ? w[j] : 1.0) * d * d;
        }
    }
    free(q);
    free(y);
    return s;
}

static void test_imatrix_effect(pl_gguf *f16, pl_imatrix *im) {
    const pl_gguf_tensor *t = pl_gguf_find_tensor(f16, "blk.0.ffn_up.weight");
    const float *w = pl_imatrix_weights(im, "blk.0.ffn_up.weight", NULL);
    CHECK(t && w, "tensor and imatrix entry");
    if (!t || !w) return;
    const int64_t ne0 = t->ne[0], nr = 128;
    float *x = rows_f32(t, 0, nr);
    float *ones = malloc((size_t)ne0 * sizeof *ones);
    for (int64_t j = 0; j < ne0; j++) ones[j] = 1.0f;
    const pl_dtype types[] = {PL_Q2_K, PL_Q3_K, PL_Q4_K, PL_Q5_K, PL_Q6_K, PL_IQ2_XXS, PL_IQ2_XS, PL_IQ1_S, PL_IQ1_M};
    for (size_t i = 0; i < sizeof types / sizeof types[0]; i++) {
        /* the importance-weighted error is what the imatrix search minimizes */
        const double with = werr(types[i], x, nr, ne0, w, w), flat = werr(types[i], x, nr, ne0, ones, w);
        CHECK(with < flat, "%s: weighted error with imatrix %.6g >= with flat weights %.6g", pl_dtype_name(types[i]),
              with, flat);
        printf("  %-8s imatrix-weighted error: %.4g with the imatrix, %.4g with flat weights\n",
               pl_dtype_name(types[i]), with, flat);
    }
    /* the imatrix changes the bytes of the k-quants (else it would be ignored) */
    const size_t rs = pl_dtype_row_size(PL_Q4_K, ne0);
    char *a = malloc(rs * (size_t)nr), *b = malloc(rs * (size_t)nr);
    pl_quantize_rows(PL_Q4_K, x, a, nr, ne0, NULL);
    pl_quantize_rows(PL_Q4_K, x, b, nr, ne0, w);
    CHECK(memcmp(a, b, rs * (size_t)nr) != 0, "q4_K ignores the imatrix");
    /* without one, q4_K is the reference quantizer */
    pl_quantize_row(PL_Q4_K, x, b, ne0 * nr);
    CHECK(!memcmp(a, b, rs * (size_t)nr), "q4_K without imatrix != reference");
    /* the IQ2/IQ1_S quantizers refuse to work without weights */
    CHECK(pl_quantize_rows(PL_IQ2_XXS, x, a, 1, ne0, NULL) == PL_ERR_INVALID_ARG, "iq2_xxs without imatrix");
    CHECK(pl_quantize_rows(PL_Q4_K, x, a, 1, 100, NULL) == PL_ERR_INVALID_ARG, "bad row length");
    free(a);
    free(b);
    free(x);
    free(ones);
}

/* The mixes on Qwen3-4B's shape (36 layers, 32 heads, 8 KV heads, tied). */
static void test_mix_rules(void) {
    enum { L = 36 };
    pl_mix_tensor ts[3 + 7 * L];
    char names[3 + 7 * L][48];
    int n = 0;
    const char *per_layer[] = {"attn_q", "attn_k", "attn_v", "attn_output", "ffn_gate", "ffn_up", "ffn_down"};
#define ADD(nm, a, b, nd)                                                                       \
    do {                                                                                         \
        snprintf(names[n], sizeof names[n], "%s", nm);                                           \
        ts[n] = (pl_mix_tensor){names[n], nd, {a, b, 1, 1}, nd == 1 ? PL_F32 : PL_BF16, 0, false}; \
        n++;                                                                                     \
    } while (0)
    ADD("token_embd.weight", 2560, 151936, 2);
    ADD("output_norm.weight", 2560, 1, 1);
    for (int l = 0; l < L; l++)
        for (int k = 0; k < 7; k++) {
            char nm[48];
            snprintf(nm, sizeof nm, "blk.%d.%s.weight", l, per_layer[k]);
            ADD(nm, k == 6 ? 9728 : k == 3 ? 4096 : 2560, 2560, 2);
        }
    ADD("blk.0.attn_norm.weight", 2560, 1, 1);
#undef ADD
    qsort(ts, (size_t)n, sizeof ts[0], pl_mix_compare);
    CHECK(!strcmp(ts[0].name, "output_norm.weight") && !strcmp(ts[1].name, "token_embd.weight") &&
              !strcmp(ts[2].name, "blk.0.attn_k.weight"),
          "llama.cpp's order: %s %s %s", ts[0].name, ts[1].name, ts[2].name);
    const pl_mix_model mm = {L, 32, 8, 0};
    pl_mix_plan(pl_ftype_find("Q4_K_M"), &mm, false, ts, n);
    int q6_v = 0, q6_down = 0;
    for (int i = 0; i < n; i++) {
        int l = -1;
        sscanf(ts[i].name, "blk.%d.", &l);
        /* use_more_bits: first/last eighth and every third layer between */
        const bool more = l >= 0 && (l < L / 8 || l >= 7 * L / 8 || (l - L / 8) % 3 == 2);
        if (strstr(ts[i].name, "attn_v") || strstr(ts[i].name, "ffn_down")) {
            CHECK(ts[i].target == (more ? PL_Q6_K : PL_Q4_K), "Q4_K_M %s -> %s", ts[i].name, pl_dtype_name(ts[i].target));
            if (ts[i].target == PL_Q6_K) *(strstr(ts[i].name, "attn_v") ? &q6_v : &q6_down) += 1;
        } else if (!strcmp(ts[i].name, "token_embd.weight")) {
            CHECK(ts[i].target == PL_Q6_K, "tied token_embd -> %s", pl_dtype_name(ts[i].target));
        } else if (strstr(ts[i].name, "norm")) {
            CHECK(ts[i].target == PL_F32, "norm stays f32");
        } else {
            CHECK(ts[i].target == PL_Q4_K, "Q4_K_M %s -> %s", ts[i].name, pl_dtype_name(ts[i].target));
        }
    }
    /* 36 layers: 0-3, 31-35 and 6, 9, ..., 30 */
    CHECK(q6_v == 18 && q6_down == 18, "q6_K layers: %d attn_v, %d ffn_down", q6_v, q6_down);
    pl_mix_plan(pl_ftype_find("IQ2_XXS"), &mm, true, ts, n);
    for (int i = 0; i < n; i++) {
        pl_dtype want = PL_IQ2_XXS;
        int l = -1;
        sscanf(ts[i].name, "blk.%d.", &l);
        if (strstr(ts[i].name, "norm")) want = PL_F32;
        else if (!strcmp(ts[i].name, "token_embd.weight")) want = PL_Q5_K;
        else if (strstr(ts[i].name, "attn_v")) want = PL_Q4_K; /* n_gqa = 4 */
        else if (strstr(ts[i].name, "ffn_down") && l < L / 8) want = PL_Q2_K;
        CHECK(ts[i].target == want, "IQ2_XXS %s -> %s, want %s", ts[i].name, pl_dtype_name(ts[i].target), pl_dtype_name(want));
    }
    pl_mix_plan(pl_ftype_find("Q2_K"), &mm, false, ts, n);
    for (int i = 0; i < n; i++) {
        if (strstr(ts[i].name, "attn_v")) CHECK(ts[i].target == PL_Q4_K, "Q2_K attn_v (gqa 4)");
        if (strstr(ts[i].name, "attn_output") || strstr(ts[i].name, "ffn_down")) CHECK(ts[i].target == PL_Q3_K, "Q2_K %s", ts[i].name);
        if (strstr(ts[i].name, "attn_q.")) CHECK(ts[i].target == PL_Q2_K, "Q2_K attn_q");
    }
    /* a row length that is not a multiple of 256 falls back (llama.cpp's table) */
    pl_mix_tensor odd = {"blk.0.attn_q.weight", 2, {96, 96, 1, 1}, PL_F16, 0, false};
    pl_mix_plan(pl_ftype_find("Q4_K_M"), &mm, false, &odd, 1);
    CHECK(odd.target == PL_Q5_0 && odd.fallback, "fallback q4_K -> %s", pl_dtype_name(odd.target));
    CHECK(pl_ftype_find("q4_k_m") && pl_ftype_find("IQ1_S")->needs_imatrix && !pl_ftype_find("nope"), "ftype names");
}

static void test_imatrix_roundtrip(pl_imatrix *im) {
    const char *path = "/tmp/pl_test_quantize_imatrix.gguf";
    CHECK(pl_imatrix_save(im, path) == PL_OK, "save: %s", pl_last_error());
    pl_imatrix *b = NULL;
    CHECK(pl_imatrix_load(path, &b) == PL_OK, "load: %s", pl_last_error());
    if (b) {
        CHECK(pl_imatrix_n_entries(b) == pl_imatrix_n_entries(im) && pl_imatrix_chunk_count(b) == pl_imatrix_chunk_count(im) &&
                  pl_imatrix_chunk_size(b) == pl_imatrix_chunk_size(im) && !strcmp(pl_imatrix_dataset(b), pl_imatrix_dataset(im)),
              "metadata survives");
        int64_t na, nb;
        const float *wa = pl_imatrix_weights(im, "blk.1.ffn_down.weight", &na);
        const float *wb = pl_imatrix_weights(b, "blk.1.ffn_down.weight", &nb);
        CHECK(wa && wb && na == nb && na == 768 && !memcmp(wa, wb, (size_t)na * sizeof *wa), "weights survive");
        pl_imatrix_free(b);
    }
    /* the saved file is byte-identical with llama.cpp's (same layout and order) */
    size_t la = 0, lb = 0;
    char *fa = pl_read_file(path, &la), *fb = pl_read_file(pl_fixture("models/tiny-imatrix.gguf"), &lb);
    CHECK(fa && fb && la == lb && !memcmp(fa, fb, la), "imatrix re-save differs from the fixture (%zu vs %zu bytes)", la, lb);
    free(fa);
    free(fb);
    remove(path);
    pl_imatrix *bad = NULL;
    CHECK(pl_imatrix_load(pl_fixture("models/tiny-qwen3-f16.gguf"), &bad) == PL_ERR_FORMAT && !bad, "a model is no imatrix");
}

int main(void) {
    pl_gguf *f16 = NULL, *f32 = NULL;
    pl_imatrix *im = NULL;
    CHECK(pl_gguf_open(pl_fixture("models/tiny-qwen3-f16.gguf"), &f16) == PL_OK, "%s", pl_last_error());
    CHECK(pl_gguf_open(pl_fixture("models/tiny-qwen3-f32.gguf"), &f32) == PL_OK, "%s", pl_last_error());
    CHECK(pl_imatrix_load(pl_fixture("models/tiny-imatrix.gguf"), &im) == PL_OK, "%s", pl_last_error());
    if (f16 && f32 && im) {
        test_fixture_blocks(f16, f32, im);
        test_imatrix_effect(f16, im);
        test_imatrix_roundtrip(im);
    }
    test_mix_rules();
    pl_imatrix_free(im);
    pl_gguf_close(f16);
    pl_gguf_close(f32);
    return pl_test_summary("test_quantize");
}
