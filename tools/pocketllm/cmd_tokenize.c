/* pocketllm tokenize / detokenize: work on a vocab-only GGUF too. */
#include "cli.h"
#include "pocketllm.h"
#include <stdlib.h>
#include <string.h>

static pl_model *load_vocab(const char *path) {
    pl_model_params mp = pl_model_default_params();
    mp.vocab_only = true;
    pl_model *m = NULL;
    if (pl_model_load(path, &mp, &m) != PL_OK) {
        pl_cli_error("%s", pl_last_error());
        return NULL;
    }
    return m;
}

static int cmd_tokenize(int argc, char **argv) {
    const char *model_path = NULL, *prompt = NULL;
    bool parse_special = true, bad = false;
    for (int i = 1; i < argc && !bad; i++) {
        if (!strcmp(argv[i], "--help")) {
            puts("usage: pocketllm tokenize --model M --prompt P [--no-parse-special] [--json]");
            return 0;
        } else if (!strcmp(argv[i], "--json")) {
        } else if (!strcmp(argv[i], "--no-parse-special")) parse_special = false;
        else if (pl_cli_opt(argc, argv, &i, "--model", &model_path, &bad)) {}
        else if (pl_cli_opt(argc, argv, &i, "--prompt", &prompt, &bad)) {}
        else return pl_cli_error("tokenize: unknown option '%s'", argv[i]);
    }
    if (bad) return 1;
    if (!model_path || !prompt) return pl_cli_error("tokenize: --model and --prompt are required");
    pl_model *m = load_vocab(model_path);
    if (!m) return 1;
    int32_t *ids;
    size_t n;
    bool no_bos = false;
    if (pl_tokenize(m, prompt, strlen(prompt), parse_special, &no_bos, &ids, &n) != PL_OK) {
        pl_cli_error("%s", pl_last_error());
        pl_model_free(m);
        return 1;
    }
    putchar('[');
    for (size_t i = 0; i < n; i++) printf("%s%d", i ? ", " : "", ids[i]);
    puts("]");
    pl_free(ids);
    pl_model_free(m);
    return 0;
}

static int cmd_detokenize(int argc, char **argv) {
    const char *model_path = NULL, *list = NULL;
    bool bad = false;
    for (int i = 1; i < argc && !bad; i++) {
        if (!strcmp(argv[i], "--help")) {
            puts("usage: pocketllm detokenize --model M --ids 1,2,3");
            return 0;
        } else if (pl_cli_opt(argc, argv, &i, "--model", &model_path, &bad)) {}
        else if (pl_cli_opt(argc, argv, &i, "--ids", &list, &bad)) {}
        else return pl_cli_error("detokenize: unknown option '%s'", argv[i]);
    }
    if (bad) return 1;
    if (!model_path || !list) return pl_cli_error("detokenize: --model and --ids are required");
    size_t cap = strlen(list) / 2 + 2, n = 0;
    int32_t *ids = malloc(cap * sizeof *ids);
    if (!ids) return pl_cli_error("out of memory");
    char *copy = strdup(list);
    char *save = NULL;
    for (char *tok = strtok_r(copy, ", ", &save); tok; tok = strtok_r(NULL, ", ", &save)) {
        long long v;
        if (!pl_cli_parse_int(tok, 0, INT32_MAX, &v) || n >= cap) {
            int rc = pl_cli_error("detokenize: bad token id '%s'", tok);
            free(copy);
            free(ids);
            return rc;
        }
        ids[n++] = (int32_t)v;
    }
    free(copy);
    pl_model *m = load_vocab(model_path);
    if (!m) { free(ids); return 1; }
    char *text;
    size_t len;
    int rc = 0;
    if (pl_detokenize(m, ids, n, true, &text, &len) != PL_OK) rc = pl_cli_error("%s", pl_last_error());
    else {
        fwrite(text, 1, len, stdout);
        putchar('\n');
        pl_free(text);
    }
    free(ids);
    pl_model_free(m);
    return rc;
}

PL_CLI_COMMAND(pl_cmd_tokenize, "tokenize", "print the token ids of a text (JSON array)", cmd_tokenize)
PL_CLI_COMMAND(pl_cmd_detokenize, "detokenize", "print the text of token ids", cmd_detokenize)
