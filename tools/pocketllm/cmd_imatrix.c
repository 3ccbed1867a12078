/*
 * pocketllm imatrix --model M --file TEXT [-o OUT.gguf] [--chunks N] [--ctx N]
 *
 * Computes an importance matrix as llama-imatrix does: the text is tokenized
 * (the file's BOS rule, special-token text kept as text), cut into chunks of
 * n_ctx tokens (the first token of a chunk becomes BOS where the vocabulary
 * adds one), each chunk is evaluated from an empty cache with every token's
 * logits requested -- so the last layer's FFN sees every token, as in
 * llama.cpp -- and after each matmul of a "blk.*" weight the squared inputs
 * are summed per column, after each expert-indexed matmul (qwen3moe's
 * ffn_*_exps) per expert over the rows routed to it (imatrix_collect.h, on
 * the public per-node observer). The perplexity of the second half
 * of each chunk is printed along the way, as llama-imatrix does.
 */
#include "cli.h"
#include "cli_buf.h"
#include "imatrix_collect.h"
#include "pocketllm.h"
#include <math.h>
#include <errno.h>
#include <stdlib.h>
#include <string.h>

/* -log p(tok) from one row of logits (llama.cpp's log_softmax: float max and
 * differences, double sum of expf). */
static double nll_of(const float *logits, int n_vocab, int tok) {
    float max = logits[0];
    for (int i = 1; i < n_vocab; i++) max = logits[i] > max ? logits[i] : max;
    double sum = 0.0;
    for (int i = 0; i < n_vocab; i++) sum += expf(logits[i] - max);
    return -(logits[tok] - max - log(sum));
}

static int cmd_imatrix(int argc, char **argv) {
    const char *model_path = NULL, *text_path = NULL, *out_path = "imatrix.gguf", *device = "cpu", *v;
    long long ctx = 512, chunks = -1, threads = 0, batch = 512;
    bool bad = false, process_output = false;
    for (int i = 1; i < argc && !bad; i++) {
        const char *a = argv[i];
        if (!strcmp(a, "--help") || !strcmp(a, "-h")) {
            puts("usage: pocketllm imatrix --model M --file TEXT [-o OUT.gguf] [--chunks N] [--ctx N]\n"
                 "                         [--batch N] [--threads N] [--device D] [--process-output]\n"
                 "  --ctx N      tokens per chunk (default 512); the text needs at least 2 chunks\n"
                 "  --chunks N   chunks to process (default: all)\n"
                 "  -o FILE      output, llama.cpp's GGUF imatrix format (default imatrix.gguf)");
            return 0;
        } else if (!strcmp(a, "--process-output")) process_output = true;
        else if (pl_cli_opt(argc, argv, &i, "--model", &model_path, &bad) || pl_cli_opt(argc, argv, &i, "-m", &model_path, &bad)) {}
        else if (pl_cli_opt(argc, argv, &i, "--file", &text_path, &bad) || pl_cli_opt(argc, argv, &i, "-f", &text_path, &bad)) {}
        else if (pl_cli_opt(argc, argv, &i, "-o", &out_path, &bad) || pl_cli_opt(argc, argv, &i, "--output", &out_path, &bad)) {}
        else if (pl_cli_opt(argc, argv, &i, "--device", &device, &bad)) {}
        else if (pl_cli_opt(argc, argv, &i, "--ctx", &v, &bad) || pl_cli_opt(argc, argv, &i, "-c", &v, &bad)) {
            if (!bad && !pl_cli_parse_int(v, 16, 1 << 20, &ctx)) return pl_cli_error("bad --ctx '%s' (at least 16)", v);
        } else if (pl_cli_opt(argc, argv, &i, "--chunks", &v, &bad)) {
            if (!bad && !pl_cli_parse_int(v, 1, 1 << 30, &chunks)) return pl_cli_error("bad --chunks '%s'", v);
        } else if (pl_cli_opt(argc, argv, &i, "--batch", &v, &bad) || pl_cli_opt(argc, argv, &i, "-b", &v, &bad)) {
            if (!bad && !pl_cli_parse_int(v, 16, 1 << 20, &batch)) return pl_cli_error("bad --batch '%s'", v);
        } else if (pl_cli_opt(argc, argv, &i, "--threads", &v, &bad) || pl_cli_opt(argc, argv, &i, "-t", &v, &bad)) {
            if (!bad && !pl_cli_parse_int(v, 0, 1024, &threads)) return pl_cli_error("bad --threads '%s'", v);
        } else return pl_cli_error("imatrix: unknown option '%s'", a);
    }
    if (bad) return 1;
    if (!model_path || !text_path) return pl_cli_error("imatrix: --model and --file are required");
    if (batch > ctx) batch = ctx;

    size_t text_len = 0;
    char *text = pl_cli_read_file(text_path, &text_len);
    if (!text) return pl_cli_error("imatrix: cannot read %s: %s", text_path, strerror(errno));
    pl_model_params mp = pl_model_default_params();
    mp.device = device;
    mp.n_threads = (int)threads;
    mp.n_ctx = (int)ctx;
    mp.n_batch = (int)batch;
    mp.n_outputs = (int)batch; /* every token's logits: the last layer then runs on all rows */
    pl_model *m = NULL;
    int rc = 0;
    int32_t *ids = NULL;
    size_t n_ids = 0;
    float *logits = NULL;
    imx_collector *im = NULL;
    if (pl_model_load(model_path, &mp, &m) != PL_OK) {
        free(text);
        return pl_cli_error("%s", pl_last_error());
    }
    if (pl_tokenize(m, text, text_len, false, NULL, &ids, &n_ids) != PL_OK) {
        rc = pl_cli_error("%s", pl_last_error());
        goto done;
    }
    if (n_ids < 2 * (size_t)ctx) {
        rc = pl_cli_error("imatrix: you need at least %lld tokens for a context of %lld; %s has %zu", 2 * ctx, ctx,
                          text_path, n_ids);
        goto done;
    }
    const int32_t n_vocab = pl_model_n_vocab(m);
    int64_t n_chunk = (int64_t)n_ids / ctx;
    if (chunks > 0 && chunks < n_chunk) n_chunk = chunks;
    /* BOS at the start of each chunk when the vocabulary adds one */
    int32_t *probe = NULL;
    size_t n_probe = 0;
    int32_t bos = -1;
    if (pl_tokenize(m, "", 0, false, NULL, &probe, &n_probe) == PL_OK && n_probe == 1) bos = probe[0];
    pl_free(probe);

    logits = malloc((size_t)batch * (size_t)n_vocab * sizeof *logits);
    int32_t *tok = malloc((size_t)batch * sizeof *tok), *pos = malloc((size_t)batch * sizeof *pos);
    bool *want = malloc((size_t)batch * sizeof *want);
    if (!logits || !tok || !pos || !want || !(im = imx_create(text_path, (int)ctx, process_output)) ||
        imx_attach(im, m) != PL_OK) {
        free(tok); free(pos); free(want);
        rc = pl_cli_error("%s", *pl_last_error() ? pl_last_error() : "out of memory");
        goto done;
    }
    fprintf(stderr, "imatrix: %zu tokens, %lld chunks of %lld\n", n_ids, (long long)n_chunk, ctx);
    double nll = 0;
    long count = 0;
    const int first = (int)ctx / 2;
    for (int64_t c = 0; c < n_chunk && !rc; c++) {
        const int32_t *chunk = ids + c * ctx;
        for (int b0 = 0; b0 < ctx && !rc; b0 += (int)batch) {
            const int nb = (int)(ctx - b0 < batch ? ctx - b0 : batch);
            for (int k = 0; k < nb; k++) {
                tok[k] = chunk[b0 + k];
                pos[k] = b0 + k;
                want[k] = true;
            }
            if (b0 == 0 && bos >= 0) tok[0] = bos;
            pl_batch pb = {nb, tok, pos, NULL, want};
            const char *imx_msg;
            if (pl_model_forward(m, &pb, logits) != PL_OK) {
                rc = pl_cli_error("%s", pl_last_error());
                break;
            }
            if (imx_status(im, &imx_msg) != PL_OK) {
                rc = pl_cli_error("%s", imx_msg);
                break;
            }
            for (int k = 0; k < nb; k++) {
                const int p = b0 + k;
                if (p < first || p + 1 >= ctx) continue;
                nll += nll_of(logits + (size_t)k * n_vocab, n_vocab, chunk[p + 1]);
                count++;
            }
        }
        imx_add_chunk(im);
        fprintf(stderr, "[%lld]%.4f,", (long long)(c + 1), exp(nll / (double)count));
    }
    fputc('\n', stderr);
    free(tok); free(pos); free(want);
    imx_detach(im, m);
    if (!rc && imx_save(im, out_path) != PL_OK) rc = pl_cli_error("%s", pl_last_error());
    if (!rc)
        fprintf(stderr, "wrote %s: %d entries, %u chunks of %u tokens\n", out_path, imx_n_entries(im),
                imx_chunk_count(im), imx_chunk_size(im));
done:
    imx_free(im);
    free(logits);
    pl_free(ids);
    pl_model_free(m);
    free(text);
    return rc;
}

PL_CLI_COMMAND(pl_cmd_imatrix, "imatrix", "compute an importance matrix (llama-imatrix's GGUF format)", cmd_imatrix)
