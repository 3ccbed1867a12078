/*
 * pl_model_kv_read / pl_model_kv_write: a slot's KV rows copied to the host
 * and back (what `serve --cache-ram` keeps of an evicted prefix).
 *
 *   - rows written into another slot read back byte-identical, and decoding
 *     from them gives the same logits, bit for bit, as decoding in the slot
 *     they came from (the same rows, the same computation);
 *   - the buffer is position-major: restoring its first m positions and
 *     prefilling the rest gives the logits of a full prefill (up to the
 *     matmuls' summation order, as tests/test_batch.c allows), while a slot
 *     holding other rows at those positions does not (the check can fail);
 *   - bad arguments are refused with the slot unchanged.
 */
#include "testutil.h"
#include "pocketllm.h"
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#define N 40
#define STEPS 4

static int argmax(const float *x, int n) {
    int b = 0;
    for (int i = 1; i < n; i++)
        if (x[i] > x[b]) b = i;
    return b;
}

static pl_status prefill(pl_model *m, int seq, const int32_t *t, int from, int to, float *logits) {
    int32_t pos[N], sq[N];
    bool want[N];
    for (int i = from; i < to; i++) {
        pos[i - from] = i;
        sq[i - from] = seq;
        want[i - from] = i == to - 1;
    }
    pl_batch b = {to - from, t + from, pos, sq, want};
    return pl_model_forward(m, &b, logits);
}

/* Greedy decode of STEPS tokens in slot seq from position N, logits of each
 * step into out (STEPS x V), starting from the token first. */
static pl_status decode(pl_model *m, int seq, int32_t first, float *out) {
    const int V = pl_model_n_vocab(m);
    int32_t tok = first;
    for (int k = 0; k < STEPS; k++) {
        int32_t pos = N + k, sq = seq;
        bool want = true;
        pl_batch b = {1, &tok, &pos, &sq, &want};
        pl_status st = pl_model_forward(m, &b, out + (size_t)k * V);
        if (st != PL_OK) return st;
        tok = argmax(out + (size_t)k * V, V);
    }
    return PL_OK;
}

static double max_diff(const float *a, const float *b, size_t n) {
    double d = 0;
    for (size_t i = 0; i < n; i++) {
        double e = fabs((double)a[i] - b[i]);
        if (!(e <= d)) d = isnan(e) ? INFINITY : e;
    }
    return d;
}

static void run(const char *model_name, const char *device, const char *cache_type, bool optional) {
    pl_model_params p = pl_model_default_params();
    p.device = device;
    p.n_ctx = 64;
    p.n_seq = 3;
    p.n_threads = 2;
    p.batch_invariant = true;
    p.cache_type_k = cache_type;
    p.cache_type_v = cache_type;
    pl_model *m = NULL;
    pl_status st = pl_model_load(pl_fixture(model_name), &p, &m);
    if (st != PL_OK && optional) {
        /* A device this machine lacks: the host path was checked above. */
        printf("%s: skipped (%s)\n", device, pl_last_error());
        return;
    }
    CHECK(st == PL_OK, "load %s: %s", model_name, pl_last_error());
    if (st != PL_OK) return;
    const int V = pl_model_n_vocab(m);
    const size_t pb = pl_model_kv_pos_bytes(m);
    CHECK(pb > 0, "%s: pl_model_kv_pos_bytes is 0", model_name);
    int32_t t[N], other[N];
    for (int i = 0; i < N; i++) {
        t[i] = (int32_t)((i * 7919 + 13) % (V < 5000 ? V : 5000));
        other[i] = (int32_t)((i * 104729 + 7) % (V < 5000 ? V : 5000));
    }
    float *lg = malloc((size_t)V * sizeof *lg);
    float *ref = malloc((size_t)STEPS * V * sizeof *ref), *got = malloc((size_t)STEPS * V * sizeof *got);
    char *buf = malloc(N * pb), *back = malloc(N * pb);
    if (!lg || !ref || !got || !buf || !back) { CHECK(0, "out of memory"); goto out; }

    /* Slot 0: the prompt; save its rows before decoding past them. */
    CHECK(prefill(m, 0, t, 0, N, lg) == PL_OK, "prefill: %s", pl_last_error());
    const int32_t first = argmax(lg, V);
    CHECK(pl_model_kv_read(m, 0, 0, N, buf, N * pb) == PL_OK, "kv_read: %s", pl_last_error());
    CHECK(decode(m, 0, first, ref) == PL_OK, "decode: %s", pl_last_error());

    /* Slot 1 holds another sequence; the saved rows replace it whole. */
    CHECK(prefill(m, 1, other, 0, N, lg) == PL_OK, "prefill other: %s", pl_last_error());
    CHECK(pl_model_kv_write(m, 1, 0, N, buf, N * pb) == PL_OK, "kv_write: %s", pl_last_error());
    CHECK(pl_model_kv_len(m, 1) == N, "%s: slot length %d after the write", model_name, pl_model_kv_len(m, 1));
    CHECK(pl_model_kv_read(m, 1, 0, N, back, N * pb) == PL_OK, "kv_read back: %s", pl_last_error());
    CHECK(memcmp(buf, back, N * pb) == 0, "%s/%s: rows read back differ from those written", model_name, device);
    CHECK(decode(m, 1, first, got) == PL_OK, "decode restored: %s", pl_last_error());
    double d_whole = max_diff(ref, got, (size_t)STEPS * V);
    CHECK(d_whole == 0, "%s/%s/%s: decoding from restored rows differs by %g", model_name, device, cache_type, d_whole);

    /* Slot 2: only the first 25 positions restored, the rest prefilled. */
    const int M = 25;
    CHECK(prefill(m, 2, other, 0, N, lg) == PL_OK, "prefill other: %s", pl_last_error());
    pl_model_kv_truncate(m, 2, 0);
    CHECK(pl_model_kv_write(m, 2, 0, M, buf, M * pb) == PL_OK, "kv_write prefix: %s", pl_last_error());
    CHECK(prefill(m, 2, t, M, N, lg) == PL_OK, "prefill rest: %s", pl_last_error());
    CHECK(argmax(lg, V) == first, "%s/%s: restored prefix + prefill picks another token", model_name, device);
    CHECK(decode(m, 2, first, got) == PL_OK, "decode prefix-restored: %s", pl_last_error());
    double d_prefix = max_diff(ref, got, (size_t)STEPS * V);
    CHECK(d_prefix < 1e-3, "%s/%s/%s: prefix restore differs by %g", model_name, device, cache_type, d_prefix);
    /* Control: the same 15 positions prefilled over the other sequence's
     * first 25 rows (not restored) must not match, or the check above is
     * blind. */
    CHECK(prefill(m, 1, other, 0, N, lg) == PL_OK, "prefill other: %s", pl_last_error());
    pl_model_kv_truncate(m, 1, M);
    CHECK(prefill(m, 1, t, M, N, lg) == PL_OK, "prefill rest: %s", pl_last_error());
    CHECK(decode(m, 1, first, got) == PL_OK, "decode control: %s", pl_last_error());
    double d_ctl = max_diff(ref, got, (size_t)STEPS * V);
    CHECK(d_ctl > 1e-2, "%s/%s: stale rows give the same logits (%g): the test cannot tell", model_name, device, d_ctl);

    /* Refusals leave the slot as it was. */
    int32_t len2 = pl_model_kv_len(m, 2);
    CHECK(pl_model_kv_read(m, 2, 0, len2 + 1, back, N * pb) == PL_ERR_INVALID_ARG, "read past the slot's length");
    CHECK(pl_model_kv_read(m, 3, 0, 1, back, pb) == PL_ERR_INVALID_ARG, "bad slot");
    CHECK(pl_model_kv_read(m, 0, 0, 2, back, pb) == PL_ERR_INVALID_ARG, "small buffer");
    CHECK(strstr(pl_last_error(), "buffer") != NULL, "error names the buffer: %s", pl_last_error());
    CHECK(pl_model_kv_write(m, 2, len2 + 1, 1, buf, pb) == PL_ERR_INVALID_ARG, "write leaving a gap");
    CHECK(strstr(pl_last_error(), "gap") != NULL, "error says gap: %s", pl_last_error());
    CHECK(pl_model_kv_write(m, 2, 60, 10, buf, N * pb) == PL_ERR_INVALID_ARG, "write past the context");
    CHECK(pl_model_kv_len(m, 2) == len2, "a refused call changed the slot's length");
    printf("%-26s %-4s %-5s restore whole: %g, prefix: %.3g, stale control: %.3g (%zu bytes/position)\n", model_name,
           device, cache_type, d_whole, d_prefix, d_ctl, pb);
out:
    free(lg); free(ref); free(got); free(buf); free(back);
    pl_model_free(m);
}

int main(void) {
    run("models/tiny-qwen3-f16.gguf", "cpu", "f16", false);
    run("models/tiny-qwen3-f16.gguf", "cpu", "q8_0", false);
    run("models/tiny-llama-q4_k_m.gguf", "ref", "f16", false);
    /* The device path (staged transfers) where a GPU is present. */
    run("models/tiny-qwen3-f16.gguf", "cuda", "f16", true);
    return pl_test_summary("test_kv_save");
}
