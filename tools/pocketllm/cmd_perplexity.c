/*
 * pocketllm perplexity --model M --file TEXT [--ctx N] [--chunks N]
 *
 * llama-perplexity's semantics: the text is tokenized (the file's BOS rule,
 * special-token text kept as text) and cut into chunks of n_ctx tokens; each
 * chunk is evaluated from an empty cache (its first token replaced by BOS
 * where the vocabulary adds one) and only the second half is scored: token
 * i + 1 given tokens 0..i for i in [n_ctx/2, n_ctx - 2]. PPL = exp(mean
 * NLL); the error is ppl * sqrt(var(NLL) / (count - 1)), as llama.cpp prints
 * it ("Final estimate: PPL = 12.3456 +/- 0.12345").
 */
#include "cli.h"
#include "cli_buf.h"
#include "pocketllm.h"
#include <math.h>
#include <errno.h>
#include <stdlib.h>
#include <string.h>

/* log p(tok): llama.cpp's log_softmax (float max and differences, double
 * sum of expf, the result in double). */
static double log_prob(const float *logits, int n_vocab, int tok) {
    float max = logits[0];
    for (int i = 1; i < n_vocab; i++) max = logits[i] > max ? logits[i] : max;
    double sum = 0.0;
    for (int i = 0; i < n_vocab; i++) sum += expf(logits[i] - max);
    return logits[tok] - max - log(sum);
}

static int cmd_perplexity(int argc, char **argv) {
    const char *model_path = NULL, *text_path = NULL, *device = "cpu", *v;
    long long ctx = 512, chunks = -1, threads = 0, batch = 512;
    bool bad = false, json = false;
    for (int i = 1; i < argc && !bad; i++) {
        const char *a = argv[i];
        if (!strcmp(a, "--help") || !strcmp(a, "-h")) {
            puts("usage: pocketllm perplexity --model M --file TEXT [--ctx N] [--chunks N] [--batch N]\n"
                 "                            [--threads N] [--device D] [--json]\n"
                 "  --ctx N      tokens per chunk (default 512); the second half of each is scored\n"
                 "  --chunks N   chunks to score (default: all; the text needs at least 2)");
            return 0;
        } else if (!strcmp(a, "--json")) json = true;
        else if (pl_cli_opt(argc, argv, &i, "--model", &model_path, &bad) || pl_cli_opt(argc, argv, &i, "-m", &model_path, &bad)) {}
        else if (pl_cli_opt(argc, argv, &i, "--file", &text_path, &bad) || pl_cli_opt(argc, argv, &i, "-f", &text_path, &bad)) {}
        else if (pl_cli_opt(argc, argv, &i, "--device", &device, &bad)) {}
        else if (pl_cli_opt(argc, argv, &i, "--ctx", &v, &bad) || pl_cli_opt(argc, argv, &i, "-c", &v, &bad)) {
            if (!bad && !pl_cli_parse_int(v, 4, 1 << 20, &ctx)) return pl_cli_error("bad --ctx '%s'", v);
        } else if (pl_cli_opt(argc, argv, &i, "--chunks", &v, &bad)) {
            if (!bad && !pl_cli_parse_int(v, 1, 1 << 30, &chunks)) return pl_cli_error("bad --chunks '%s'", v);
        } else if (pl_cli_opt(argc, argv, &i, "--batch", &v, &bad) || pl_cli_opt(argc, argv, &i, "-b", &v, &bad)) {
            if (!bad && !pl_cli_parse_int(v, 1, 1 << 20, &batch)) return pl_cli_error("bad --batch '%s'", v);
        } else if (pl_cli_opt(argc, argv, &i, "--threads", &v, &bad) || pl_cli_opt(argc, argv, &i, "-t", &v, &bad)) {
            if (!bad && !pl_cli_parse_int(v, 0, 1024, &threads)) return pl_cli_error("bad --threads '%s'", v);
        } else return pl_cli_error("perplexity: unknown option '%s'", a);
    }
    if (bad) return 1;
    if (!model_path || !text_path) return pl_cli_error("perplexity: --model and --file are required");
    if (batch > ctx) batch = ctx;

    size_t text_len = 0;
    char *text = pl_cli_read_file(text_path, &text_len);
    if (!text) return pl_cli_error("perplexity: cannot read %s: %s", text_path, strerror(errno));
    pl_model_params mp = pl_model_default_params();
    mp.device = device;
    mp.n_threads = (int)threads;
    mp.n_ctx = (int)ctx;
    mp.n_batch = (int)batch;
    mp.n_outputs = (int)batch; /* one graph per batch, not one per scored token */
    pl_model *m = NULL;
    if (pl_model_load(model_path, &mp, &m) != PL_OK) {
        free(text);
        return pl_cli_error("%s", pl_last_error());
    }
    int rc = 0;
    int32_t *ids = NULL, *probe = NULL, *tok = NULL, *pos = NULL;
    bool *want = NULL;
    float *logits = NULL;
    size_t n_ids = 0, n_probe = 0;
    if (pl_tokenize(m, text, text_len, false, NULL, &ids, &n_ids) != PL_OK) {
        rc = pl_cli_error("%s", pl_last_error());
        goto done;
    }
    if (n_ids < 2 * (size_t)ctx) {
        rc = pl_cli_error("perplexity: you need at least %lld tokens for a context of %lld; %s has %zu", 2 * ctx,
                          ctx, text_path, n_ids);
        goto done;
    }
    int32_t bos = -1;
    if (pl_tokenize(m, "", 0, false, NULL, &probe, &n_probe) == PL_OK && n_probe == 1) bos = probe[0];
    const int32_t n_vocab = pl_model_n_vocab(m);
    int64_t n_chunk = (int64_t)n_ids / ctx;
    if (chunks > 0 && chunks < n_chunk) n_chunk = chunks;
    const int first = (int)(ctx / 2);
    logits = malloc((size_t)batch * (size_t)n_vocab * sizeof *logits);
    tok = malloc((size_t)batch * sizeof *tok);
    pos = malloc((size_t)batch * sizeof *pos);
    want = malloc((size_t)batch * sizeof *want);
    if (!logits || !tok || !pos || !want) {
        rc = pl_cli_error("out of memory");
        goto done;
    }
    if (!json)
        fprintf(stderr, "perplexity: %zu tokens, %lld chunks, n_ctx=%lld, batch=%lld\n", n_ids, (long long)n_chunk, ctx,
                batch);
    double nll = 0, nll2 = 0;
    long count = 0;
    for (int64_t c = 0; c < n_chunk && !rc; c++) {
        const int32_t *chunk = ids + c * ctx;
        for (int b0 = 0; b0 < ctx && !rc; b0 += (int)batch) {
            const int nb = (int)(ctx - b0 < batch ? ctx - b0 : batch);
            int n_out = 0;
            for (int k = 0; k < nb; k++) {
                tok[k] = chunk[b0 + k];
                pos[k] = b0 + k;
                want[k] = b0 + k >= first && b0 + k + 1 < ctx; /* the last token predicts nothing scored */
                n_out += want[k];
            }
            if (b0 == 0 && bos >= 0) tok[0] = bos;
            pl_batch pb = {nb, tok, pos, NULL, want};
            if (pl_model_forward(m, &pb, n_out ? logits : NULL) != PL_OK) {
                rc = pl_cli_error("%s", pl_last_error());
                break;
            }
            int r = 0;
            for (int k = 0; k < nb; k++) {
                if (!want[k]) continue;
                const double lp = log_prob(logits + (size_t)r++ * n_vocab, n_vocab, chunk[b0 + k + 1]);
                nll += -lp;
                nll2 += lp * lp;
                count++;
            }
        }
        if (!json) fprintf(stderr, "[%lld]%.4f,", (long long)(c + 1), exp(nll / (double)count));
    }
    if (rc) goto done;
    if (!json) fputc('\n', stderr);
    const double mean = nll / (double)count;
    const double ppl = exp(mean);
    double var = nll2 / (double)count - mean * mean;
    const double err = var > 0 ? sqrt(var / (double)(count - 1)) * ppl : 0;
    if (json)
        printf("{\"ppl\": %.6f, \"ppl_error\": %.6f, \"n_chunks\": %lld, \"n_ctx\": %lld, \"n_scored\": %ld}\n", ppl, err,
               (long long)n_chunk, ctx, count);
    else
        printf("Final estimate: PPL = %.4f +/- %.5f\n", ppl, err);
done:
    free(logits);
    free(tok);
    free(pos);
    free(want);
    pl_free(ids);
    pl_free(probe);
    pl_model_free(m);
    free(text);
    return rc;
}

PL_CLI_COMMAND(pl_cmd_perplexity, "perplexity", "perplexity of a text (llama-perplexity's method)", cmd_perplexity)
