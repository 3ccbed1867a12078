/*
 * Issue 22: NaN weights produced "!!!!!!" with exit status 0. Argmax over
 * NaN logits picked token 0 ("!" in Qwen vocabularies); a single NaN logit
 * was simply never picked. Checked here:
 *   - pl_sampler_sample, greedy and sampling, refuses rows holding a NaN or
 *     +Inf (first, middle, last id) or only -Inf with -1 and a message, and
 *     still accepts -Inf alone (a masked token);
 *   - pl_session_eval fails with PL_ERR_FORMAT and a message naming the
 *     position when the model's logits are not finite: the tiny f32 model
 *     with one NaN in output_norm.weight (every logit NaN) and with one NaN
 *     in one row of the tied token_embd.weight (that token's logit only).
 */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include "gguf/gguf.h"
#include "pocketllm.h"
#include "testutil.h"

enum { V = 1000 };

static void fill(float *l) {
    for (int i = 0; i < V; i++) l[i] = (float)((i * 37) % 101) * 0.1f - 5.0f;
    l[123] = 20.0f;  /* the clear winner */
}

static void expect_refused(pl_sampler *s, const float *l, const char *needle, const char *what) {
    int32_t t = pl_sampler_sample(s, l);
    CHECK(t == -1, "%s: sampled %d", what, t);
    CHECK(strstr(pl_last_error(), "NaN/Inf logits") && strstr(pl_last_error(), needle), "%s: message '%s' lacks '%s'",
          what, pl_last_error(), needle);
}

static void test_sampler(float temperature) {
    pl_sampler_params p = pl_sampler_default_params();
    p.temperature = temperature;
    pl_sampler *s = NULL;
    CHECK(pl_sampler_create(&p, V, &s) == PL_OK, "sampler: %s", pl_last_error());
    if (!s) return;
    float l[V];
    fill(l);
    CHECK(pl_sampler_sample(s, l) == 123, "finite row (t=%g)", temperature);
    const int at[3] = {0, 500, V - 1};
    for (int k = 0; k < 3; k++) {
        char need[64];
        fill(l);
        l[at[k]] = NAN;
        snprintf(need, sizeof need, "token id %d has logit nan", at[k]);
        expect_refused(s, l, need, "one NaN");
        fill(l);
        l[at[k]] = INFINITY;
        snprintf(need, sizeof need, "token id %d has logit inf", at[k]);
        expect_refused(s, l, need, "one +Inf");
    }
    for (int i = 0; i < V; i++) l[i] = NAN;
    expect_refused(s, l, "token id 0 has logit nan", "all NaN");
    for (int i = 0; i < V; i++) l[i] = -INFINITY;
    expect_refused(s, l, "every logit is -inf", "all -Inf");
    /* the message counts the calls: this is the 10th */
    fill(l);
    l[7] = NAN;
    expect_refused(s, l, "generated token 10 ", "call count");
    /* -Inf marks a token that must not be picked: still fine */
    fill(l);
    l[0] = -INFINITY;
    l[V - 1] = -INFINITY;
    CHECK(pl_sampler_sample(s, l) == 123, "masked tokens (t=%g)", temperature);
    pl_sampler_free(s);
}

/* Copies the tiny f32 model with one f32 of `tensor` (element `elem`) set to
 * NaN; returns the path (static) or NULL. */
static const char *nan_model(const char *tensor, uint64_t elem, const char *name) {
    const char *src = pl_fixture("models/tiny-qwen3-f32.gguf");
    pl_gguf *g = NULL;
    if (pl_gguf_open(src, &g) != PL_OK) {
        CHECK(0, "open %s: %s", src, pl_last_error());
        return NULL;
    }
    const pl_gguf_tensor *t = pl_gguf_find_tensor(g, tensor);
    CHECK(t && t->dtype == PL_F32 && elem * 4 < t->size, "tensor %s", tensor);
    uint64_t off = t ? pl_gguf_data_offset(g) + t->offset + elem * 4 : 0;
    pl_gguf_close(g);
    if (!t) return NULL;
    size_t len = 0;
    char *img = pl_read_file(src, &len);
    if (!img || off + 4 > len) { free(img); CHECK(0, "read %s", src); return NULL; }
    float nan = NAN;
    memcpy(img + off, &nan, 4);
    static char path[4][256];
    static int k;
    char *out = path[k++ & 3];
    snprintf(out, 256, "%s/pl-nonfinite-%ld-%s.gguf", getenv("TMPDIR") ? getenv("TMPDIR") : "/tmp", (long)getpid(),
             name);
    FILE *f = fopen(out, "wb");
    bool ok = f && fwrite(img, 1, len, f) == len;
    if (f) ok = fclose(f) == 0 && ok;
    free(img);
    CHECK(ok, "write %s", out);
    return ok ? out : NULL;
}

/* Loads path, evaluates "Hello" and two greedy steps; wants the first logits
 * of the prompt refused when bad_prompt, else those after feeding bad_tok. */
static void test_model(const char *path, bool bad_prompt, int32_t bad_id) {
    pl_model_params mp = pl_model_default_params();
    mp.n_ctx = 64;
    mp.n_threads = 2;
    pl_model *m = NULL;
    CHECK(pl_model_load(path, &mp, &m) == PL_OK, "load %s: %s", path, pl_last_error());
    if (!m) return;
    int32_t *ids = NULL;
    size_t n = 0;
    bool no_bos = false;
    CHECK(pl_tokenize(m, "Hello world", 11, true, &no_bos, &ids, &n) == PL_OK && n > 0, "tokenize");
    pl_session *s = NULL;
    CHECK(pl_session_create(m, &s) == PL_OK, "session");
    float *logits = malloc((size_t)pl_model_n_vocab(m) * sizeof *logits);
    if (s && logits && ids) {
        pl_status st = pl_session_eval(s, ids, n, logits);
        if (bad_prompt) {
            char need[64];
            snprintf(need, sizeof need, "NaN/Inf logits at token %zu of the sequence", n - 1);
            CHECK(st == PL_ERR_FORMAT && strstr(pl_last_error(), need) && strstr(pl_last_error(), "token id 0 has logit nan"),
                  "NaN norm: status %s, message '%s'", pl_status_str(st), pl_last_error());
            CHECK(pl_session_pos(s) == (int32_t)n, "the tokens are still in the cache");
        } else {
            /* one row of the tied embedding: only that token's logit is NaN */
            char need[64];
            snprintf(need, sizeof need, "token id %d has logit nan", bad_id);
            CHECK(st == PL_ERR_FORMAT && strstr(pl_last_error(), need), "NaN row: status %s, message '%s'",
                  pl_status_str(st), pl_last_error());
            bool others_finite = true;
            for (int32_t i = 0; i < pl_model_n_vocab(m); i++)
                if (i != bad_id && !isfinite(logits[i])) others_finite = false;
            CHECK(isnan(logits[bad_id]) && others_finite, "only token %d's logit is NaN", bad_id);
            /* and the sampler refuses the same row */
            pl_sampler_params p = pl_sampler_default_params();
            pl_sampler *smp = NULL;
            CHECK(pl_sampler_create(&p, pl_model_n_vocab(m), &smp) == PL_OK, "sampler");
            if (smp) CHECK(pl_sampler_sample(smp, logits) == -1, "sampler refuses the model's NaN row");
            pl_sampler_free(smp);
        }
    }
    free(logits);
    pl_free(ids);
    pl_session_free(s);
    pl_model_free(m);
}

int main(void) {
    test_sampler(0.0f);
    test_sampler(0.8f);

    const char *norm = nan_model("output_norm.weight", 17, "norm");
    if (norm) {
        test_model(norm, true, 0);
        unlink(norm);
    }
    /* token_embd.weight is [n_embd = 256, n_vocab]: row 4000 starts at 4000*256 */
    const char *row = nan_model("token_embd.weight", 4000ull * 256 + 5, "row");
    if (row) {
        test_model(row, false, 4000);
        unlink(row);
    }
    /* the unmodified model still evaluates */
    const char *plain = pl_fixture("models/tiny-qwen3-f32.gguf");
    pl_model_params mp = pl_model_default_params();
    mp.n_ctx = 64;
    pl_model *m = NULL;
    if (pl_model_load(plain, &mp, &m) == PL_OK) {
        pl_session *s = NULL;
        float *lg = malloc((size_t)pl_model_n_vocab(m) * sizeof *lg);
        int32_t id = 100;
        CHECK(pl_session_create(m, &s) == PL_OK && pl_session_eval(s, &id, 1, lg) == PL_OK, "clean model: %s",
              pl_last_error());
        free(lg);
        pl_session_free(s);
        pl_model_free(m);
    }
    return pl_test_summary("test_nonfinite");
}
