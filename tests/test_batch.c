/*
 * The forward pass over a batch that mixes sequences: each token has its own
 * position and KV slot. Decoding three sequences together, with their
 * prefills and decode steps interleaved in one batch, must give each sequence
 * the logits it gets alone (this is what continuous batching relies on).
 */
#include "testutil.h"
#include "pocketllm.h"
#include <math.h>
#include <stdlib.h>
#include <string.h>

#define NSEQ 3
#define STEPS 6

static int argmax(const float *x, int n) {
    int b = 0;
    for (int i = 1; i < n; i++)
        if (x[i] > x[b]) b = i;
    return b;
}

static void run(const char *model_name, const char *device) {
    static const int32_t prompts[NSEQ][5] = {{785, 6722, 315, 2869, 681}, {39, 4791, 11, 1879, 0}, {750, 1801, 1445, 1648, 0}};
    static const int plen[NSEQ] = {5, 5, 4};
    pl_model_params p = pl_model_default_params();
    p.device = device;
    p.n_ctx = 64;
    p.n_seq = NSEQ;
    p.n_threads = 2;
    pl_model *m = NULL;
    pl_status st = pl_model_load(pl_fixture(model_name), &p, &m);
    CHECK(st == PL_OK, "load %s: %s", model_name, pl_last_error());
    if (st != PL_OK) return;
    const int V = pl_model_n_vocab(m);

    /* Alone: each sequence through its own session, greedy. */
    float *alone = malloc((size_t)NSEQ * STEPS * V * sizeof(float));
    int32_t toks[NSEQ][STEPS];
    for (int s = 0; s < NSEQ; s++) {
        pl_session *ss;
        pl_session_create(m, &ss);
        st = pl_session_eval(ss, prompts[s], (size_t)plen[s], alone + (size_t)(s * STEPS) * V);
        CHECK(st == PL_OK, "eval: %s", pl_last_error());
        for (int k = 0; k < STEPS; k++) {
            float *lg = alone + (size_t)(s * STEPS + k) * V;
            toks[s][k] = argmax(lg, V);
            if (k + 1 < STEPS) pl_session_eval(ss, &toks[s][k], 1, lg + V);
        }
        pl_session_free(ss);
    }

    /* Together: step 0 prefills seq 0 and 1; seq 2 joins one step later. */
    int32_t bt[32], bp[32], bs[32];
    bool bw[32];
    int pos[NSEQ] = {0}, step[NSEQ] = {0};
    bool started[NSEQ] = {false};
    float *lg = malloc((size_t)NSEQ * V * sizeof(float));
    double max_diff = 0;
    int mismatches = 0;
    for (int round = 0; round < STEPS + 1; round++) {
        int n = 0, outs[NSEQ], n_out = 0;
        for (int s = 0; s < NSEQ; s++) {
            if (s == 2 && round == 0) continue;          /* joins late */
            if (step[s] >= STEPS) continue;                /* finished: leaves */
            if (!started[s]) {
                for (int i = 0; i < plen[s]; i++) {
                    bt[n] = prompts[s][i]; bp[n] = pos[s]++; bs[n] = s; bw[n] = i == plen[s] - 1; n++;
                }
                started[s] = true;
            } else {
                bt[n] = toks[s][step[s] - 1]; bp[n] = pos[s]++; bs[n] = s; bw[n] = true; n++;
            }
            outs[n_out++] = s;
        }
        if (!n) break;
        pl_batch b = {n, bt, bp, bs, bw};
        st = pl_model_forward(m, &b, lg);
        CHECK(st == PL_OK, "forward: %s", pl_last_error());
        if (st != PL_OK) break;
        for (int o = 0; o < n_out; o++) {
            int s = outs[o];
            const float *ref = alone + (size_t)(s * STEPS + step[s]) * V;
            for (int i = 0; i < V; i++) {
                double d = fabs((double)lg[(size_t)o * V + i] - ref[i]);
                if (d > max_diff || isnan(d)) max_diff = isnan(d) ? INFINITY : d;
            }
            if (argmax(lg + (size_t)o * V, V) != toks[s][step[s]]) mismatches++;
            step[s]++;
        }
    }
    CHECK(mismatches == 0, "%s/%s: %d greedy tokens differ between batched and alone", model_name, device, mismatches);
    CHECK(max_diff < 1e-3, "%s/%s: batched logits differ from alone by %g", model_name, device, max_diff);
    printf("%-34s %-4s batched vs alone: max |dlogit| %.3g, token mismatches %d\n", model_name, device, max_diff,
           mismatches);
    free(lg);
    free(alone);
    pl_model_free(m);
}

/* batch_invariant: a prompt of 80 tokens evaluated in one call, as a cached
 * prefix of 70 plus 10 more (what the server's prompt cache does), and one
 * token at a time must give the last token the same logits. Without the flag
 * the cpu backend computes batches of 64+ tokens with f32 attention and
 * smaller ones with llama.cpp's decode numerics (f16 Q and V sums), which
 * moves logits by ~1e-3 and flips near-tied greedy tokens on the server. The
 * bound allows only the matmuls' summation order. */
static double last_logits_diff(pl_model *m, const int32_t *toks, int n, const int *splits, int n_splits, float *out,
                               const float *ref) {
    const int V = pl_model_n_vocab(m);
    pl_session *ss = NULL;
    if (pl_session_create(m, &ss) != PL_OK) return INFINITY;
    int at = 0;
    for (int i = 0; i <= n_splits; i++) {
        const int end = i < n_splits ? splits[i] : n;
        if (pl_session_eval(ss, toks + at, (size_t)(end - at), out) != PL_OK) { pl_session_free(ss); return INFINITY; }
        at = end;
    }
    pl_session_free(ss);
    double d = 0;
    for (int i = 0; ref && i < V; i++) {
        const double e = fabs((double)out[i] - ref[i]);
        if (!(e <= d)) d = isnan(e) ? INFINITY : e;
    }
    return d;
}

static void run_invariant(const char *model_name, const char *device) {
    pl_model_params p = pl_model_default_params();
    p.device = device;
    p.n_ctx = 128;
    p.n_threads = 2;
    p.batch_invariant = true;
    pl_model *m = NULL;
    pl_status st = pl_model_load(pl_fixture(model_name), &p, &m);
    CHECK(st == PL_OK, "load %s: %s", model_name, pl_last_error());
    if (st != PL_OK) return;
    const int V = pl_model_n_vocab(m), N = 80;
    int32_t toks[80];
    for (int i = 0; i < N; i++) toks[i] = (int32_t)((i * 7919 + 13) % (V < 5000 ? V : 5000));
    float *whole = malloc((size_t)V * sizeof(float)), *part = malloc((size_t)V * sizeof(float));
    int one_by_one[79];
    for (int i = 0; i < N - 1; i++) one_by_one[i] = i + 1;
    last_logits_diff(m, toks, N, NULL, 0, whole, NULL);
    const double d_cached = last_logits_diff(m, toks, N, (int[]){70}, 1, part, whole);
    const double d_single = last_logits_diff(m, toks, N, one_by_one, N - 1, part, whole);
    CHECK(d_cached < 1e-4 && d_single < 1e-4,
          "%s/%s batch_invariant: 80 tokens at once vs 70+10 differ by %g, vs one at a time by %g", model_name,
          device, d_cached, d_single);
    printf("%-34s %-4s batch_invariant: 80 vs 70+10 max |dlogit| %.3g, vs 1x80 %.3g\n", model_name, device,
           d_cached, d_single);
    free(whole);
    free(part);
    pl_model_free(m);
}

int main(void) {
    /* qwen3moe: tokens of a batch are grouped by expert (cpu matmul_id), which
     * must not change any sequence's logits */
    const char *models[] = {"models/tiny-qwen3-f32.gguf", "models/tiny-qwen3-q4_k_m.gguf", "models/tiny-qwen3-untied-f16.gguf",
                            "models/tiny-qwen3moe-q4_k_m.gguf"};
    for (int i = 0; i < 4; i++) {
        run(models[i], "ref");
        run(models[i], "cpu");
        run_invariant(models[i], "ref");
        run_invariant(models[i], "cpu");
    }
    return pl_test_summary("test_batch");
}
