/*
 * Issue 16: penalties, logit bias and log-probabilities of the sampler.
 * Every expectation is computed by hand here from small logits rows, never
 * by the code under test:
 *   - logit_bias: +bias changes the greedy pick, -100 bans, the caller's row
 *     is untouched;
 *   - repeat_penalty (llama.cpp's): positive logits divided, negative
 *     multiplied, only for tokens in the last repeat_last_n of prompt +
 *     generated, once per distinct token;
 *   - frequency/presence (OpenAI's): logit -= f*count + p*(count>0) over the
 *     generated tokens only (prompt tokens given as history do not count);
 *   - pl_logprobs: log-softmax of the raw row and the top-N in order;
 *   - a sampler with nothing set picks exactly as before (same draws).
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include "pocketllm.h"
#include "testutil.h"

enum { V = 8 };

static pl_sampler *greedy(void) {
    pl_sampler_params p = pl_sampler_default_params();
    p.temperature = 0;
    pl_sampler *s = NULL;
    CHECK(pl_sampler_create(&p, V, &s) == PL_OK, "create");
    return s;
}

/* The greedy pick shows which row the sampler saw: with two candidates set
 * up so that only the hand-computed modified values decide. */
static void test_bias(void) {
    float l[V] = {1, 5, 2, 4.5f, 0, -1, 3, 0.5f};
    float copy[V];
    memcpy(copy, l, sizeof l);
    pl_sampler *s = greedy();
    CHECK(pl_sampler_sample(s, l) == 1, "no bias: argmax 1");
    int32_t id[2] = {3, 1};
    float b[2] = {0.6f, 0};
    CHECK(pl_sampler_set_logit_bias(s, id, b, 2) == PL_OK, "bias");
    CHECK(pl_sampler_sample(s, l) == 3, "4.5+0.6 = 5.1 > 5: token 3");
    b[0] = 0.4f;
    CHECK(pl_sampler_set_logit_bias(s, id, b, 2) == PL_OK, "bias");
    CHECK(pl_sampler_sample(s, l) == 1, "4.5+0.4 = 4.9 < 5: token 1");
    id[0] = 1; b[0] = -100;
    CHECK(pl_sampler_set_logit_bias(s, id, b, 1) == PL_OK, "ban");
    CHECK(pl_sampler_sample(s, l) == 3, "token 1 banned: next best 3");
    id[0] = 5; b[0] = 100;
    CHECK(pl_sampler_set_logit_bias(s, id, b, 1) == PL_OK, "force");
    CHECK(pl_sampler_sample(s, l) == 5, "+100 forces token 5");
    CHECK(!memcmp(l, copy, sizeof l), "the caller's row is not modified");
    id[0] = V;
    CHECK(pl_sampler_set_logit_bias(s, id, b, 1) == PL_ERR_INVALID_ARG, "id out of range refused");
    pl_sampler_free(s);

    /* with sampling on, +100 still forces the token */
    pl_sampler_params p = pl_sampler_default_params();
    p.temperature = 1.0f;
    p.top_k = 0; p.top_p = 1; p.min_p = 0;
    CHECK(pl_sampler_create(&p, V, &s) == PL_OK, "create");
    id[0] = 7; b[0] = 100;
    pl_sampler_set_logit_bias(s, id, b, 1);
    int forced = 0;
    for (int i = 0; i < 50; i++) forced += pl_sampler_sample(s, l) == 7;
    CHECK(forced == 50, "+100 at temperature 1: %d/50 draws are token 7", forced);
    pl_sampler_free(s);
}

static void test_repeat(void) {
    /* token 0: 4 (positive, divided by 2 -> 2), token 1: 3 (untouched, now
     * the best), token 2: -1 (negative, multiplied -> -2). */
    float l[V] = {4, 3, -1, -9, -0.5f, -9, -9, -9};
    pl_sampler *s = greedy();
    int32_t hist[3] = {0, 2, 0}; /* token 0 twice: penalized once */
    CHECK(pl_sampler_set_penalties(s, 2.0f, 64, 0, 0) == PL_OK, "set");
    CHECK(pl_sampler_add_history(s, hist, 3) == PL_OK, "history");
    CHECK(pl_sampler_sample(s, l) == 1, "4/2 = 2 < 3: token 1");
    pl_sampler_free(s);

    /* once per distinct token: with 0 in the window three times the logit is
     * 4/1.5 = 2.67 (not 4/1.5^3 = 1.19), above token 1's 2.5 */
    float l2[V] = {4, 2.5f, -9, -9, -9, -9, -9, -9};
    s = greedy();
    int32_t h2[3] = {0, 0, 0};
    pl_sampler_set_penalties(s, 1.5f, 64, 0, 0);
    pl_sampler_add_history(s, h2, 3);
    CHECK(pl_sampler_sample(s, l2) == 0, "distinct tokens are penalized once");
    pl_sampler_free(s);

    /* negative logits are multiplied: -0.5 * 3 = -1.5 < -1 */
    float l3[V] = {-1, -0.5f, -9, -9, -9, -9, -9, -9};
    s = greedy();
    int32_t h3 = 1;
    pl_sampler_set_penalties(s, 3.0f, 64, 0, 0);
    pl_sampler_add_history(s, &h3, 1);
    CHECK(pl_sampler_sample(s, l3) == 0, "negative logit multiplied: token 1 falls below token 0");
    pl_sampler_free(s);

    /* the window: token 0 is 3 positions back; last_n = 2 leaves it out */
    int32_t h4[3] = {0, 5, 6};
    s = greedy();
    pl_sampler_set_penalties(s, 2.0f, 2, 0, 0);
    pl_sampler_add_history(s, h4, 3);
    CHECK(pl_sampler_sample(s, l) == 0, "token 0 outside the last 2: not penalized");
    pl_sampler_free(s);
    s = greedy();
    pl_sampler_set_penalties(s, 2.0f, 3, 0, 0);
    pl_sampler_add_history(s, h4, 3);
    CHECK(pl_sampler_sample(s, l) == 1, "token 0 inside the last 3: penalized");
    pl_sampler_free(s);

    /* sampled tokens join the window: greedy on a flat-ish row alternates */
    float l5[V] = {3, 2.9f, -9, -9, -9, -9, -9, -9};
    s = greedy();
    pl_sampler_set_penalties(s, 1.5f, 1, 0, 0);
    int32_t a = pl_sampler_sample(s, l5), b = pl_sampler_sample(s, l5), c = pl_sampler_sample(s, l5);
    CHECK(a == 0 && b == 1 && c == 0, "window of 1 over sampled tokens: %d %d %d, want 0 1 0", a, b, c);
    pl_sampler_free(s);

    CHECK(pl_sampler_set_penalties(NULL, 1, 64, 0, 0) == PL_ERR_INVALID_ARG, "NULL sampler");
}

static void test_freq_presence(void) {
    /* token 0 at 10, token 1 at 9. Sampling token 0 n times under frequency
     * f lowers it to 10 - f*n: with f = 0.4 it stays on top for n = 0, 1, 2
     * (10, 9.6, 9.2 > 9) and loses at n = 3 (8.8). */
    float l[V] = {10, 9, -9, -9, -9, -9, -9, -9};
    pl_sampler *s = greedy();
    CHECK(pl_sampler_set_penalties(s, 1.0f, 64, 0.4f, 0) == PL_OK, "set");
    int32_t got[4];
    for (int i = 0; i < 4; i++) got[i] = pl_sampler_sample(s, l);
    CHECK(got[0] == 0 && got[1] == 0 && got[2] == 0 && got[3] == 1, "frequency: %d %d %d %d, want 0 0 0 1", got[0],
          got[1], got[2], got[3]);
    pl_sampler_free(s);

    /* presence 0.9: one occurrence is enough, more change nothing: 10 - 0.9
     * = 9.1 > 9 stays on top forever */
    s = greedy();
    pl_sampler_set_penalties(s, 1.0f, 64, 0, 0.9f);
    int all0 = 1;
    for (int i = 0; i < 5; i++) all0 &= pl_sampler_sample(s, l) == 0;
    CHECK(all0, "presence 0.9 does not grow with the count");
    pl_sampler_free(s);
    /* presence 1.1: 8.9 < 9 after the first */
    s = greedy();
    pl_sampler_set_penalties(s, 1.0f, 64, 0, 1.1f);
    {
        int32_t x = pl_sampler_sample(s, l), y = pl_sampler_sample(s, l);
        CHECK(x == 0 && y == 1, "presence 1.1: %d %d, want 0 1", x, y);
    }
    pl_sampler_free(s);

    /* prompt history does not count for frequency/presence */
    s = greedy();
    pl_sampler_set_penalties(s, 1.0f, 64, 2.0f, 2.0f);
    int32_t h[4] = {0, 0, 0, 0};
    pl_sampler_add_history(s, h, 4);
    CHECK(pl_sampler_sample(s, l) == 0, "prompt tokens are not penalized by frequency/presence");
    pl_sampler_free(s);

    /* negative values reward repeats: -0.5 * count */
    float l2[V] = {9, 10, -9, -9, -9, -9, -9, -9};
    s = greedy();
    pl_sampler_set_penalties(s, 1.0f, 64, -2.0f, 0);
    CHECK(pl_sampler_sample(s, l2) == 1 && pl_sampler_sample(s, l2) == 1, "negative frequency keeps the repeat");
    pl_sampler_free(s);

    s = greedy();
    CHECK(pl_sampler_set_penalties(s, 1.0f, 64, 2.5f, 0) == PL_ERR_INVALID_ARG, "frequency > 2 refused");
    CHECK(pl_sampler_set_penalties(s, 1.0f, 64, 0, -2.1f) == PL_ERR_INVALID_ARG, "presence < -2 refused");
    CHECK(pl_sampler_set_penalties(s, 0.0f, 64, 0, 0) == PL_ERR_INVALID_ARG, "repeat 0 refused");
    CHECK(pl_sampler_set_penalties(s, NAN, 64, 0, 0) == PL_ERR_INVALID_ARG, "repeat NaN refused");
    pl_sampler_free(s);
}

/* A sampler with penalties set to neutral values draws the same tokens as
 * one with none set (the copy path and the fast path agree). */
static void test_neutral_same(void) {
    enum { N = 300 };
    float *l = malloc(N * sizeof *l);
    for (int i = 0; i < N; i++) l[i] = (float)((i * 7919) % 113) * 0.05f;
    pl_sampler_params p = pl_sampler_default_params();
    p.temperature = 0.9f; p.top_k = 0; p.top_p = 0.98f; p.min_p = 0.01f; p.seed = 42;
    pl_sampler *a = NULL, *b = NULL;
    pl_sampler_create(&p, N, &a);
    pl_sampler_create(&p, N, &b);
    pl_sampler_set_penalties(b, 1.0f, 64, 0, 0);
    int same = 1;
    for (int i = 0; i < 200; i++) same &= pl_sampler_sample(a, l) == pl_sampler_sample(b, l);
    CHECK(same, "neutral penalties draw the same tokens");
    pl_sampler_free(a);
    pl_sampler_free(b);
    free(l);
}

static void test_logprobs(void) {
    float l[V] = {1, 5, 2, 4.5f, 0, -INFINITY, 3, 5};
    double z = 0;
    for (int i = 0; i < V; i++) z += exp((double)l[i]);
    float lp = 0;
    pl_token_logprob top[V];
    CHECK(pl_logprobs(l, V, 3, &lp, top, 4) == PL_OK, "logprobs");
    CHECK(fabs(lp - (4.5 - log(z))) < 1e-5, "chosen: %g want %g", lp, 4.5 - log(z));
    /* order: 5 (id 1), 5 (id 7), 4.5 (id 3), 3 (id 6): ties by lowest id */
    int want[4] = {1, 7, 3, 6};
    float wl[4] = {5, 5, 4.5f, 3};
    for (int i = 0; i < 4; i++)
        CHECK(top[i].token == want[i] && fabs(top[i].logprob - (wl[i] - log(z))) < 1e-5, "top[%d] = %d %g", i,
              top[i].token, top[i].logprob);
    CHECK(pl_logprobs(l, V, 5, &lp, top, V) == PL_OK && isinf(lp) && lp < 0, "a -inf logit has logprob -inf");
    CHECK(top[V - 1].token == 5 && top[0].token == 1, "top over the whole vocabulary is sorted");
    double sum = 0;
    for (int i = 0; i < V; i++) sum += exp(top[i].logprob);
    CHECK(fabs(sum - 1) < 1e-5, "probabilities sum to 1: %g", sum);
    CHECK(pl_logprobs(l, V, 0, &lp, top, 0) == PL_OK, "n_top 0");
    CHECK(pl_logprobs(l, V, V, &lp, top, 1) == PL_ERR_INVALID_ARG, "token out of range");
    float bad[V] = {0, 0, NAN, 0, 0, 0, 0, 0};
    CHECK(pl_logprobs(bad, V, 0, &lp, top, 1) == PL_ERR_FORMAT, "NaN row refused");
    /* large rows: no overflow */
    float big[V] = {1000, 999, 998, -1000, 0, 0, 0, 0};
    CHECK(pl_logprobs(big, V, 0, &lp, top, 1) == PL_OK && isfinite(lp) && lp < 0 && lp > -1, "stable: %g", lp);
}

int main(void) {
    test_bias();
    test_repeat();
    test_freq_presence();
    test_neutral_same();
    test_logprobs();
    return pl_test_summary("test_sampling");
}
