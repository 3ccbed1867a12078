/*
 * The public API the tools are built on (pocketllm.h, "quantization, fit
 * planning, per-node observer") and the tools-side helpers on top of it:
 *  - the mix / tensor-type listings;
 *  - pl_quantize_file: stats, progress text, per-tensor overrides (applied,
 *    validated), the importance-matrix requirement;
 *  - pl_fit: accessors, the chosen rung and the reason code against the
 *    rungs' own numbers;
 *  - pl_model_set_observer: what a matmul reports, clearing it;
 *  - the imatrix collector of tools/ (imatrix_collect.c) on that observer,
 *    written with pl_imatrix_write and read back by the quantizer's reader;
 *  - --memory byte counts (tools/pocketllm/cli_fit.c).
 */
#include "testutil.h"
#include "pocketllm.h"
#include "quant/imatrix.h"
#include "../tools/pocketllm/cli_fit.h"
#include "../tools/pocketllm/imatrix_collect.h"
#include "../tools/pocketllm/cli_buf.h"
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static void test_bytes(void) {
    uint64_t v = 0;
    CHECK(pl_cli_parse_bytes("4G", &v) && v == 4ull << 30, "4G");
    CHECK(pl_cli_parse_bytes("4GiB", &v) && v == 4ull << 30, "4GiB");
    CHECK(pl_cli_parse_bytes("4GB", &v) && v == 4000000000ull, "4GB");
    CHECK(pl_cli_parse_bytes("1.5M", &v) && v == 1572864, "1.5M");
    CHECK(pl_cli_parse_bytes("123", &v) && v == 123, "123");
    CHECK(!pl_cli_parse_bytes("4X", &v) && !pl_cli_parse_bytes("", &v) && !pl_cli_parse_bytes("-1G", &v) &&
              !pl_cli_parse_bytes("G", &v),
          "bad byte counts rejected");
    char msg[256];
    CHECK(pl_cli_parse_budget("0", "cpu", &v, msg, sizeof msg) == PL_ERR_INVALID_ARG && strstr(msg, "'0'"), "zero budget");
    CHECK(pl_cli_parse_budget("auto", "cpu", &v, msg, sizeof msg) == PL_OK && v > 0, "auto on cpu: %s", msg);
}

static void test_listing(void) {
    const int32_t n = pl_quant_n_mixes();
    CHECK(n >= 10, "%d mixes", (int)n);
    bool q4km = false, iq = false;
    for (int32_t i = 0; i < n; i++) {
        pl_quant_mix_info mi;
        CHECK(pl_quant_mix(i, &mi) == PL_OK && mi.name && mi.base_type && mi.summary, "mix %d", (int)i);
        if (!strcmp(mi.name, "Q4_K_M"))
            q4km = !strcmp(mi.base_type, "q4_K") && mi.base_bpw == 4.5 && mi.ftype == 15 && !mi.needs_imatrix;
        if (!strcmp(mi.name, "IQ2_XXS")) iq = mi.needs_imatrix && fabs(mi.base_bpw - 2.0625) < 1e-9;
    }
    CHECK(q4km && iq, "Q4_K_M / IQ2_XXS entries");
    pl_quant_mix_info mi;
    CHECK(pl_quant_mix(n, &mi) == PL_ERR_INVALID_ARG && pl_quant_mix(-1, &mi) == PL_ERR_INVALID_ARG, "range");
    CHECK(pl_quant_mix_find("q6_k", &mi) == PL_OK && !strcmp(mi.name, "Q6_K"), "find is case-insensitive");
    CHECK(pl_quant_mix_find("Q9_X", &mi) == PL_ERR_NOT_FOUND, "unknown mix");
    bool q8 = false, f16 = false, iq1 = false;
    for (int32_t i = 0; i < pl_quant_n_types(); i++) {
        pl_quant_type_info ti;
        CHECK(pl_quant_type(i, &ti) == PL_OK && ti.name && ti.block_size > 0, "type %d", (int)i);
        if (!strcmp(ti.name, "q8_0")) q8 = ti.bpw == 8.5 && ti.block_size == 32 && !ti.needs_imatrix;
        if (!strcmp(ti.name, "f16")) f16 = ti.bpw == 16;
        if (!strcmp(ti.name, "iq1_s")) iq1 = ti.needs_imatrix;
    }
    CHECK(q8 && f16 && iq1, "q8_0 / f16 / iq1_s types");
}

typedef struct logbuf {
    char text[1 << 16];
    size_t n;
} logbuf;
static void log_cb(void *user, const char *t) {
    logbuf *b = user;
    size_t k = strlen(t);
    if (b->n + k < sizeof b->text) {
        memcpy(b->text + b->n, t, k + 1);
        b->n += k;
    }
}

/* The type name of tensor `name` in a file, or "" */
static const char *type_of(pl_inspect *f, const char *name) {
    for (int64_t i = 0; i < pl_inspect_n_tensors(f); i++) {
        pl_tensor_info ti;
        if (pl_inspect_tensor(f, i, &ti) == PL_OK && !strcmp(ti.name, name)) return ti.type_name;
    }
    return "";
}

static void test_quantize(const char *dir) {
    char out[512];
    snprintf(out, sizeof out, "%s/q8.gguf", dir);
    const char *f16 = strdup(pl_fixture("models/tiny-qwen3-f16.gguf"));
    logbuf *lb = calloc(1, sizeof *lb);
    pl_quantize_stats s = {0};
    pl_quantize_params p = pl_quantize_default_params();
    p.type = "Q8_0";
    p.n_threads = 2;
    p.log = log_cb;
    p.log_user = lb;
    p.stats = &s;
    CHECK(pl_quantize_file(f16, out, &p) == PL_OK, "Q8_0: %s", pl_last_error());
    CHECK(s.n_tensors == 24 && s.n_quantized > 0 && s.n_quantized < s.n_tensors && s.bytes_out < s.bytes_in &&
              s.file_size > s.bytes_out,
          "stats %d %d", (int)s.n_tensors, (int)s.n_quantized);
    CHECK(strstr(lb->text, "converting to q8_0") && strstr(lb->text, "quant size"), "progress text: %.200s", lb->text);
    /* identical to the llama-quantize fixture (tests/cli/ladder.sh checks every rung through the CLI) */
    size_t na = 0, nb = 0;
    char *a = pl_read_file(out, &na), *b = pl_read_file(pl_fixture("models/tiny-qwen3-q8_0.gguf"), &nb);
    CHECK(a && b && na == nb && !memcmp(a, b, na), "Q8_0 output differs from llama-quantize's");
    free(a);
    free(b);

    /* overrides: the last match wins; tensors the mix leaves alone (norms) stay */
    pl_quant_override ov[] = {{"ffn_(up|down)", "q4_K"}, {"blk\\.1\\.ffn_down", "f16"}, {"attn_q\\.weight$", "q6_K"},
                              {"norm", "q8_0"}};
    p.overrides = ov;
    p.n_overrides = 4;
    p.log = NULL;
    CHECK(pl_quantize_file(f16, out, &p) == PL_OK, "overrides: %s", pl_last_error());
    pl_inspect *f = NULL;
    CHECK(pl_inspect_open(out, &f) == PL_OK, "%s", pl_last_error());
    if (f) {
        CHECK(!strcmp(type_of(f, "blk.0.ffn_up.weight"), "q4_K") && !strcmp(type_of(f, "blk.0.ffn_down.weight"), "q4_K"),
              "regex alternation");
        CHECK(!strcmp(type_of(f, "blk.1.ffn_down.weight"), "f16"), "last match wins");
        CHECK(!strcmp(type_of(f, "blk.1.attn_q.weight"), "q6_K") && !strcmp(type_of(f, "blk.1.attn_k.weight"), "q8_0"),
              "anchored pattern");
        CHECK(!strcmp(type_of(f, "blk.0.attn_norm.weight"), "f32"), "norms are not quantized by an override");
        pl_inspect_close(f);
    }
    /* a float mix takes overrides too */
    pl_quant_override down8 = {"ffn_down", "q8_0"};
    p.type = "F16";
    p.overrides = &down8;
    p.n_overrides = 1;
    CHECK(pl_quantize_file(f16, out, &p) == PL_OK, "F16 + override: %s", pl_last_error());
    CHECK(pl_inspect_open(out, &f) == PL_OK, "%s", pl_last_error());
    if (f) {
        CHECK(!strcmp(type_of(f, "blk.0.ffn_down.weight"), "q8_0") && !strcmp(type_of(f, "blk.0.ffn_up.weight"), "f16"),
              "F16 mix with a q8_0 override");
        pl_inspect_close(f);
    }
    p.type = "Q8_0";
    pl_quant_override badre = {"(", "q8_0"}, badtype = {"ffn", "q9_9"};
    p.overrides = &badre;
    p.n_overrides = 1;
    CHECK(pl_quantize_file(f16, out, &p) == PL_ERR_INVALID_ARG, "bad regex");
    p.overrides = &badtype;
    CHECK(pl_quantize_file(f16, out, &p) == PL_ERR_INVALID_ARG && strstr(pl_last_error(), "q9_9"), "bad type");
    pl_quant_override q5 = {"ffn_down", "iq2_xxs"};
    p.overrides = &q5;
    CHECK(pl_quantize_file(f16, out, &p) == PL_ERR_INVALID_ARG && strstr(pl_last_error(), "importance matrix"),
          "an override to an IQ type needs the imatrix");
    p.overrides = NULL;
    p.n_overrides = 0;
    p.type = "IQ2_XXS";
    CHECK(pl_quantize_file(f16, out, &p) == PL_ERR_INVALID_ARG && !strstr(pl_last_error(), "pocketllm"),
          "IQ2_XXS without imatrix, and no CLI advice in the library: %s", pl_last_error());
    p.type = "nope";
    CHECK(pl_quantize_file(f16, out, &p) == PL_ERR_INVALID_ARG, "unknown type");
    CHECK(pl_quantize_file(f16, out, NULL) == PL_ERR_INVALID_ARG, "NULL params");
    remove(out);
    free((void *)f16);
    free(lb);
}

/* The KV cache type in the plan (issue 21): left to the planner, a rung
 * whose f16 cache does not fit is planned with a q8_0 one before a lower
 * weight rung is taken, except the 16-bit file's own rung; each rung's
 * max_ctx is the longest context the budget holds, one token more does not. */
static void test_fit_cache_types(void) {
    const char *path = pl_fixture("models/tiny-qwen3-f16.gguf");
    pl_fit_params fp = pl_fit_default_params();
    fp.budget = 1ull << 30;
    fp.n_threads = 2;
    fp.n_ctx = 512;
    fp.cache_type_k = fp.cache_type_v = "f16";
    pl_fit_result *r = NULL;
    CHECK(pl_fit(path, &fp, &r) == PL_OK && r, "%s", pl_last_error());
    if (!r) return;
    pl_fit_rung_info f16q8, f16;
    CHECK(pl_fit_rung(r, 1, &f16) == PL_OK && !strcmp(f16.cache_type_k, "f16") && !strcmp(f16.cache_type_v, "f16"),
          "Q8_0 rung with f16 fixed");
    pl_fit_free(r);
    /* the budget of the Q8_0 rung with a q8_0 cache: Q8_0 + q8_0 is the plan */
    fp.cache_type_k = fp.cache_type_v = "q8_0";
    r = NULL;
    CHECK(pl_fit(path, &fp, &r) == PL_OK && r, "%s", pl_last_error());
    if (!r) return;
    CHECK(pl_fit_rung(r, 1, &f16q8) == PL_OK && !strcmp(f16q8.cache_type_k, "q8_0"), "Q8_0 rung with q8_0 fixed");
    CHECK(f16q8.plan.kv_cache * 64 == f16.plan.kv_cache * 34, "a q8_0 cache is 34/64 of f16's");
    pl_fit_free(r);
    fp.cache_type_k = fp.cache_type_v = NULL;
    fp.budget = f16q8.plan.total;
    r = NULL;
    CHECK(pl_fit(path, &fp, &r) == PL_OK && r, "%s", pl_last_error());
    if (!r) return;
    pl_fit_rung_info g0, c;
    CHECK(pl_fit_chosen(r) == 1 && pl_fit_rung(r, 1, &c) == PL_OK && c.fits && !strcmp(c.cache_type_k, "q8_0") &&
              !strcmp(c.cache_type_v, "q8_0") && c.plan.total == f16q8.plan.total,
          "chosen %d: Q8_0 with a q8_0 cache", (int)pl_fit_chosen(r));
    CHECK(pl_fit_rung(r, 0, &g0) == PL_OK && !g0.fits && !strcmp(g0.cache_type_k, "f16"),
          "the F16 file's own rung keeps the f16 cache");
    /* max_ctx: a model load with that context fits the budget, one more does not */
    pl_model_params mp = pl_model_default_params();
    mp.n_threads = 2;
    mp.memory_budget = fp.budget;
    mp.cache_type_k = c.cache_type_k;
    mp.cache_type_v = c.cache_type_v;
    pl_fit_free(r);
    const char *q8 = pl_fixture("models/tiny-qwen3-q8_0.gguf");
    fp.cache_type_k = fp.cache_type_v = "q8_0";
    r = NULL;
    CHECK(pl_fit(q8, &fp, &r) == PL_OK && r, "%s", pl_last_error());
    if (!r) return;
    CHECK(pl_fit_rung(r, 0, &c) == PL_OK && c.max_ctx >= 512, "max_ctx %d", (int)c.max_ctx);
    pl_fit_free(r);
    pl_model *m = NULL;
    mp.n_ctx = c.max_ctx;
    CHECK(pl_model_load(q8, &mp, &m) == PL_OK, "load at max_ctx %d: %s", (int)c.max_ctx, pl_last_error());
    pl_model_free(m);
    m = NULL;
    mp.n_ctx = c.max_ctx + 1;
    CHECK(pl_model_load(q8, &mp, &m) == PL_ERR_DOES_NOT_FIT, "load at max_ctx + 1 is refused");
    pl_model_free(m);
    /* an unknown type is refused */
    fp.cache_type_k = "q5_0";
    r = NULL;
    CHECK(pl_fit(q8, &fp, &r) == PL_OK && r && pl_fit_reason_of(r) == PL_FIT_CANNOT_RUN, "unknown type");
    pl_fit_free(r);
}

static void test_fit(void) {
    const char *path = pl_fixture("models/tiny-qwen3-f16.gguf");
    pl_fit_params fp = pl_fit_default_params();
    fp.budget = 1ull << 30;
    fp.n_threads = 2;
    pl_fit_result *r = NULL;
    CHECK(pl_fit(path, &fp, &r) == PL_OK && r, "%s", pl_last_error());
    if (!r) return;
    const int32_t n = pl_fit_n_rungs(r);
    CHECK(n == 11, "rungs: f16 + 10 ladder rungs, got %d", (int)n);
    CHECK(pl_fit_chosen(r) == 0 && pl_fit_reason_of(r) == PL_FIT_AS_IS, "1 GiB: as is");
    CHECK(!strcmp(pl_fit_model(r), "tiny-qwen3-f16.gguf") && !strcmp(pl_fit_device(r), "cpu") && pl_fit_n_ctx(r) == 4096 &&
              pl_fit_budget(r) == 1ull << 30 && !pl_fit_budget_is_free_memory(r),
          "header");
    pl_fit_rung_info g[16];
    for (int32_t i = 0; i < n && i < 16; i++) CHECK(pl_fit_rung(r, i, &g[i]) == PL_OK, "rung %d", (int)i);
    CHECK(pl_fit_rung(r, n, &g[0]) == PL_ERR_INVALID_ARG, "rung out of range");
    pl_fit_rung(r, 0, &g[0]);
    CHECK(g[0].as_is && !strcmp(g[0].name, "F16") && g[0].status == PL_OK && g[0].plan.total > g[1].plan.total, "rung 0");
    CHECK(!strcmp(g[1].name, "Q8_0") && g[1].plan.total == g[1].plan.weights + g[1].plan.kv_cache + g[1].plan.scratch,
          "rung 1");
    pl_fit_free(r);

    /* a budget of exactly the first imatrix rung's bytes: the plan is the
     * highest rung at or under it, and the reason says it needs an imatrix.
     * With the cache type fixed at f16, as the totals above were planned
     * (left to the planner, a rung above could fit with a q8_0 cache:
     * test_fit_cache_types). */
    fp.cache_type_k = fp.cache_type_v = "f16";
    int im = -1;
    for (int32_t i = 1; i < n && im < 0; i++)
        if (g[i].needs_imatrix) im = i;
    CHECK(im > 0, "an imatrix rung");
    if (im <= 0) return;
    fp.budget = g[im].plan.total;
    r = NULL;
    CHECK(pl_fit(path, &fp, &r) == PL_OK, "%s", pl_last_error());
    if (!r) return;
    int want = -1;
    for (int32_t i = 0; i < n && want < 0; i++)
        if (g[i].plan.total <= fp.budget) want = i;
    pl_fit_rung_info c;
    CHECK(pl_fit_chosen(r) == want && pl_fit_rung(r, want, &c) == PL_OK && c.fits, "chosen %d, want %d",
          (int)pl_fit_chosen(r), want);
    CHECK(pl_fit_reason_of(r) == (g[want].needs_imatrix ? PL_FIT_QUANTIZE_IMATRIX : PL_FIT_QUANTIZE), "reason %d",
          (int)pl_fit_reason_of(r));
    for (int32_t i = 0; i < n; i++) {
        pl_fit_rung(r, i, &c);
        CHECK(c.fits == (c.plan.total <= fp.budget), "rung %d fits iff total <= budget", (int)i);
    }
    pl_fit_free(r);

    fp.budget = 1000;
    CHECK(pl_fit(path, &fp, &r) == PL_OK && pl_fit_chosen(r) == -1 && pl_fit_reason_of(r) == PL_FIT_NONE_FITS,
          "nothing fits 1000 bytes");
    pl_fit_free(r);
    r = (pl_fit_result *)1;
    CHECK(pl_fit("/nonexistent.gguf", &fp, &r) == PL_ERR_IO && !r, "missing file");
    CHECK(pl_fit_preset("0.6b", NULL, &fp, &r) == PL_ERR_INVALID_ARG && !strstr(pl_last_error(), "--vocab"),
          "a preset needs a vocabulary; the message names no CLI flag: %s", pl_last_error());
    CHECK(pl_fit_preset("0.6b", pl_fixture("models/qwen3-vocab.gguf"), &fp, &r) == PL_OK &&
              !strcmp(pl_fit_model(r), "qwen3-0.6b (preset)") && pl_fit_n_rungs(r) == 11,
          "preset: %s", pl_last_error());
    pl_fit_free(r);
    /* qwen3moe preset (Qwen3-30B-A3B): the expert tensors are counted -- the
     * model card's 30.5B parameters, exactly the shape's count */
    CHECK(pl_fit_preset("30b-a3b", pl_fixture("models/qwen3-vocab.gguf"), &fp, &r) == PL_OK &&
              !strcmp(pl_fit_model(r), "qwen3moe-30b-a3b (preset)") && pl_fit_n_rungs(r) == 11,
          "moe preset: %s", pl_last_error());
    if (r && pl_fit_rung(r, 0, &c) == PL_OK) {
        const uint64_t E = 2048, L = 48, HD = 32 * 128, GD = 4 * 128, D = 128, X = 128, Fx = 768, V = 151936;
        const uint64_t per_layer = 2 * E + 2 * D + E * HD + 2 * E * GD + HD * E + E * X + 3 * E * Fx * X;
        const uint64_t want = 2 * E * V + E + L * per_layer;
        CHECK(c.n_params == want, "30b-a3b parameters %llu, expected %llu", (unsigned long long)c.n_params,
              (unsigned long long)want);
        CHECK(c.n_params > 30400000000ull && c.n_params < 30600000000ull, "30b-a3b is a 30.5B model: %llu",
              (unsigned long long)c.n_params);
    }
    pl_fit_free(r);
    pl_fit_free(NULL);
}

typedef struct seen {
    int matmuls, with_input, attn_q0, bad_rows;
    int64_t q0_cols;
} seen;
static void observe(void *user, const pl_node_info *nd) {
    seen *s = user;
    if (strcmp(nd->op, "matmul")) {
        CHECK(!nd->weight && !nd->input && nd->name, "op %s reports no weight", nd->op);
        return;
    }
    s->matmuls++;
    if (nd->input && nd->weight) s->with_input++;
    if (nd->weight && !strcmp(nd->weight, "blk.0.attn_q.weight")) {
        s->attn_q0++;
        s->q0_cols = nd->ne[0];
        if (nd->ne[1] != 20 || nd->nb[1] < (size_t)nd->ne[0] * sizeof(float)) s->bad_rows++;
    }
}

static void test_observer(const char *dir) {
    pl_model_params mp = pl_model_default_params();
    mp.device = "cpu";
    mp.n_ctx = 64;
    mp.n_batch = 32;
    mp.n_outputs = 32;
    mp.n_threads = 1;
    pl_model *m = NULL;
    CHECK(pl_model_load(pl_fixture("models/tiny-qwen3-untied-f16.gguf"), &mp, &m) == PL_OK, "%s", pl_last_error());
    if (!m) return;
    int32_t tok[20], pos[20];
    bool want[20];
    for (int i = 0; i < 20; i++) {
        tok[i] = 100 + 7 * i;
        pos[i] = i;
        want[i] = true;
    }
    float *logits = malloc((size_t)20 * (size_t)pl_model_n_vocab(m) * sizeof *logits);
    pl_batch b = {20, tok, pos, NULL, want};
    seen s = {0};
    CHECK(pl_model_set_observer(m, observe, &s) == PL_OK, "set");
    CHECK(pl_model_forward(m, &b, logits) == PL_OK, "%s", pl_last_error());
    /* 2 layers x 7 projections + the output */
    CHECK(s.matmuls == 15 && s.with_input == 15, "matmuls %d, with input %d", s.matmuls, s.with_input);
    CHECK(s.attn_q0 == 1 && s.q0_cols == 256 && !s.bad_rows, "attn_q of layer 0: %d calls, %lld columns", s.attn_q0,
          (long long)s.q0_cols);
    CHECK(pl_model_set_observer(m, NULL, NULL) == PL_OK, "clear");
    pl_model_kv_truncate(m, 0, 0);
    CHECK(pl_model_forward(m, &b, logits) == PL_OK && s.matmuls == 15, "a cleared observer is not called");

    /* the tools' collector: attn_q/k/v share one input, as do ffn_gate/up */
    imx_collector *c = imx_create("calib.txt", 20, true);
    CHECK(c && imx_attach(c, m) == PL_OK, "collector");
    pl_model_kv_truncate(m, 0, 0);
    CHECK(pl_model_forward(m, &b, logits) == PL_OK, "%s", pl_last_error());
    imx_add_chunk(c);
    imx_detach(c, m);
    const char *msg = NULL;
    CHECK(imx_status(c, &msg) == PL_OK && imx_n_entries(c) == 15, "%d entries: %s", imx_n_entries(c), msg);
    char path[512];
    snprintf(path, sizeof path, "%s/im.gguf", dir);
    CHECK(imx_save(c, path) == PL_OK, "%s", pl_last_error());
    pl_imatrix *im = NULL;
    CHECK(pl_imatrix_load(path, &im) == PL_OK, "%s", pl_last_error());
    if (im) {
        int64_t nq = 0, nk = 0, nv = 0, ng = 0, nu = 0;
        const float *q = pl_imatrix_weights(im, "blk.1.attn_q.weight", &nq);
        const float *k = pl_imatrix_weights(im, "blk.1.attn_k.weight", &nk);
        const float *v = pl_imatrix_weights(im, "blk.1.attn_v.weight", &nv);
        const float *gt = pl_imatrix_weights(im, "blk.0.ffn_gate.weight", &ng);
        const float *up = pl_imatrix_weights(im, "blk.0.ffn_up.weight", &nu);
        CHECK(q && k && v && nq == 256 && nk == nq && nv == nq && !memcmp(q, k, (size_t)nq * 4) &&
                  !memcmp(q, v, (size_t)nq * 4),
              "q/k/v see the same input");
        CHECK(gt && up && ng == 256 && nu == ng && !memcmp(gt, up, (size_t)ng * 4), "gate/up see the same input");
        bool positive = q != NULL;
        for (int64_t j = 0; q && j < nq; j++) positive &= q[j] > 0 && isfinite(q[j]);
        CHECK(positive, "mean squares are positive");
        CHECK(pl_imatrix_weights(im, "output.weight", NULL) != NULL, "--process-output collects output.weight");
        CHECK(pl_imatrix_chunk_count(im) == 1 && pl_imatrix_chunk_size(im) == 20 && !strcmp(pl_imatrix_dataset(im), "calib.txt"),
              "metadata");
        pl_imatrix_free(im);
    }
    remove(path);
    imx_free(c);
    free(logits);
    pl_model_free(m);

    pl_model_params vp = pl_model_default_params();
    vp.vocab_only = true;
    CHECK(pl_model_load(pl_fixture("models/qwen3-vocab.gguf"), &vp, &m) == PL_OK, "%s", pl_last_error());
    CHECK(pl_model_set_observer(m, observe, &s) == PL_ERR_INVALID_ARG, "vocab-only model has no executor");
    pl_model_free(m);
    pl_imatrix_entry e = {"x", 0, 1, NULL, NULL};
    CHECK(pl_imatrix_write(path, "d", 0, 0, &e, 1) == PL_ERR_INVALID_ARG, "incomplete entry");
}

/* cli_buf.c: whole files of every size around the reader's doubling steps
 * (64 KiB), a missing file, and the token array across its growth. */
static void test_cli_buf(const char *dir) {
    char path[256];
    snprintf(path, sizeof path, "%s/file.bin", dir);
    static const size_t sizes[] = {0, 1, 65535, 65536, 65537, 3 * 65536 + 7};
    for (size_t k = 0; k < sizeof sizes / sizeof *sizes; k++) {
        size_t n = sizes[k];
        unsigned char *want = malloc(n + 1);
        for (size_t i = 0; i < n; i++) want[i] = (unsigned char)(i * 131 + k);
        FILE *f = fopen(path, "wb");
        CHECK(f && fwrite(want, 1, n, f) == n && fclose(f) == 0, "write %zu bytes", n);
        size_t len = 12345;
        char *got = pl_cli_read_file(path, &len);
        CHECK(got && len == n && !memcmp(got, want, n) && got[n] == 0, "read %zu bytes: got %zu", n, got ? len : 0);
        free(got);
        free(want);
    }
    unlink(path);
    size_t len = 0;
    errno = 0;
    CHECK(pl_cli_read_file(path, &len) == NULL && errno == ENOENT, "missing file: errno %d", errno);

    pl_cli_tokens v = {0};
    int32_t ids[1000];
    for (int i = 0; i < 1000; i++) ids[i] = i;
    for (int r = 0; r < 5; r++) CHECK(pl_cli_tokens_add(&v, ids, 1000) == 0, "add");
    CHECK(pl_cli_tokens_add(&v, ids, 0) == 0, "add nothing");
    bool ok = v.n == 5000 && v.cap >= v.n;
    for (size_t i = 0; ok && i < v.n; i++) ok = v.p[i] == (int32_t)(i % 1000);
    CHECK(ok, "token array: %zu ids", v.n);
    CHECK(pl_cli_tokens_add(&v, ids, SIZE_MAX / 2) == -1 && v.n == 5000, "an impossible size is refused");
    free(v.p);
}

int main(void) {
    char dir[] = "/tmp/pl-tools-api-XXXXXX";
    if (!mkdtemp(dir)) return 1;
    test_bytes();
    test_listing();
    test_quantize(dir);
    test_fit();
    test_fit_cache_types();
    test_observer(dir);
    test_cli_buf(dir);
    rmdir(dir);
    return pl_test_summary("test_tools_api");
}
