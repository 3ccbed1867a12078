/*
 * gemma3 at load (src/models/gemma3.c): a file that does not make a Gemma 3
 * model is refused with the key or tensor named -- no sliding window, a
 * window of 0, a post-norm of the wrong shape or missing, a bad soft-capping
 * value -- and the fixture itself loads, lists its hyperparameters and runs
 * (the numbers against llama.cpp are test_golden's tiny-gemma3-* fixtures).
 * Each case is a rewritten copy of tests/fixtures/models/tiny-gemma3-f16.gguf.
 */
#include "testutil.h"
#include "pocketllm.h"
#include "gguf/gguf.h"
#include "gguf/gguf_write.h"
#include "gguf_rewrite.h"
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static const char *SRC = "models/tiny-gemma3-f16.gguf";
static char tmp_path[256];
static float g_norm[512];

/* A norm with half its row (zeros). */
static void write_short(pl_gguf_writer *w, const pl_gguf_tensor *t) {
    int64_t ne[4] = {t->ne[0] / 2, 1, 1, 1};
    pl_gguf_writer_add_tensor(w, t->name, t->dtype, 1, ne, g_norm, (size_t)ne[0] * sizeof(float));
}

/* Copies SRC into tmp_path without KV drop_key and tensor drop_tensor; edit
 * may add keys; a tensor named short_tensor is written with half its row. */
static void rewrite(const char *drop_key, const char *drop_tensor, pl_rewrite_edit_fn edit, const char *short_tensor) {
    pl_rewrite_fixture(SRC, tmp_path, drop_key, drop_tensor, edit, short_tensor, write_short);
}

static void set_window_0(pl_gguf_writer *w, const pl_gguf *g) {
    (void)g;
    pl_gguf_writer_remove_key(w, "gemma3.attention.sliding_window");
    pl_gguf_writer_add_u32(w, "gemma3.attention.sliding_window", 0);
}
static void set_softcap_negative(pl_gguf_writer *w, const pl_gguf *g) {
    (void)g;
    pl_gguf_writer_remove_key(w, "gemma3.final_logit_softcapping");
    pl_gguf_writer_add_f32(w, "gemma3.final_logit_softcapping", -30.0f);
}

static void expect_load_error(const char *what, pl_status want, const char *phrase) {
    pl_expect_load_error(tmp_path, what, want, phrase);
}

/* The fixture loads on both host backends and gives the same finite logits
 * (ref's exact arithmetic vs cpu's kernels) for a prompt longer than the
 * window of 8, so local layers see it slide. */
static void loads_and_runs(void) {
    float *lg[2] = {NULL, NULL};
    int n_vocab = 0;
    const char *devs[2] = {"ref", "cpu"};
    for (int d = 0; d < 2; d++) {
        pl_model *m = NULL;
        pl_model_params p = pl_model_default_params();
        p.device = devs[d];
        p.n_ctx = 64;
        pl_status st = pl_model_load(pl_fixture(SRC), &p, &m);
        CHECK(st == PL_OK, "%s: load: %s", devs[d], pl_last_error());
        if (st != PL_OK) break;
        n_vocab = pl_model_n_vocab(m);
        pl_session *s = NULL;
        CHECK(pl_session_create(m, &s) == PL_OK, "session");
        int32_t ids[20];
        for (int i = 0; i < 20; i++) ids[i] = 100 + 37 * i;
        lg[d] = malloc((size_t)n_vocab * sizeof(float));
        CHECK(pl_session_eval(s, ids, 20, lg[d]) == PL_OK, "%s: eval: %s", devs[d], pl_last_error());
        pl_session_free(s);
        pl_model_free(m);
    }
    if (lg[0] && lg[1]) {
        double num = 0, den = 0, amax = 0;
        bool finite = true;
        for (int i = 0; i < n_vocab; i++) {
            finite = finite && isfinite(lg[0][i]) && isfinite(lg[1][i]);
            num += (double)(lg[0][i] - lg[1][i]) * (lg[0][i] - lg[1][i]);
            den += (double)lg[0][i] * lg[0][i];
            if (fabs(lg[0][i]) > amax) amax = fabs(lg[0][i]);
        }
        CHECK(finite, "logits finite");
        /* f16 weights: cpu rounds activations to f16 as llama.cpp does, ref does not */
        CHECK(num / den < 1e-4, "cpu vs ref logits NMSE %g", num / den);
        /* final_logit_softcapping = 8 in the fixture: |logit| < 8 */
        CHECK(amax < 8.0 && amax > 0.5, "soft-capped logits (max |logit| %g)", amax);
    }
    free(lg[0]);
    free(lg[1]);
}

int main(void) {
    snprintf(tmp_path, sizeof tmp_path, "/tmp/pl_test_gemma3_%d.gguf", (int)getpid());
    loads_and_runs();
    rewrite("gemma3.attention.sliding_window", NULL, NULL, NULL);
    expect_load_error("no sliding window", PL_ERR_FORMAT, "missing hyperparameter 'gemma3.attention.sliding_window'");
    rewrite(NULL, NULL, set_window_0, NULL);
    expect_load_error("sliding window 0", PL_ERR_FORMAT, "gemma3.attention.sliding_window = 0");
    rewrite(NULL, NULL, set_softcap_negative, NULL);
    expect_load_error("negative soft-capping", PL_ERR_FORMAT, "gemma3.final_logit_softcapping");
    rewrite(NULL, "blk.6.post_ffw_norm.weight", NULL, NULL);
    expect_load_error("no post_ffw_norm", PL_ERR_FORMAT, "missing tensor 'blk.6.post_ffw_norm.weight'");
    rewrite(NULL, NULL, NULL, "blk.3.post_attention_norm.weight");
    expect_load_error("short post_attention_norm", PL_ERR_FORMAT, "blk.3.post_attention_norm.weight");
    rewrite(NULL, "blk.0.attn_k_norm.weight", NULL, NULL);
    expect_load_error("no attn_k_norm", PL_ERR_FORMAT, "missing tensor 'blk.0.attn_k_norm.weight'");
    unlink(tmp_path);
    return pl_test_summary("test_gemma3");
}
