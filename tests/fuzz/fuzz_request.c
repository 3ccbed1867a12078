/*
 * libFuzzer target for the request layer of `pocketllm serve`: a request body
 * through the same functions the server runs for /v1/chat/completions and
 * /v1/completions, without HTTP: pl_srv_body_json (bytes -> JSON object),
 * pl_srv_parse_request (validation, the byte bound on prompt text, the chat
 * template, tokenization, the context check), then the response JSON of the
 * request as parsed. The model's own chat template is the fixed template
 * (the Qwen3 one of the fixture), rendered by src/chat.
 *
 * The first input byte picks the route (even: chat, odd: completions); the
 * rest is the body. The model is tests/fixtures/models/tiny-qwen3-f16.gguf,
 * or $PL_FUZZ_MODEL, loaded once with a 256-token context and 4 slots, so
 * the context and slot limits are within reach of small inputs.
 *
 * Invariants (a violation traps, which libFuzzer reports as a crash):
 *   - a refused request has a 4xx/5xx status, a message, and an error JSON
 *     that serializes; no message names a jansson flag (JSON_...) unless the
 *     request itself holds that text (messages may quote it);
 *   - an accepted request has 1..n_seq choices, every prompt 1..n_ctx tokens
 *     of valid ids, and usage counting each prompt once;
 *   - the byte bound is sound: an accepted string prompt of B bytes has at
 *     least B / (longest token text) tokens, so refusing longer texts before
 *     tokenizing never refuses one that fits;
 *   - the response and stream-chunk JSON of the request serialize.
 *
 * Build and run: scripts/run-fuzzers.sh -t 600 fuzz_request (see README.md).
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../../tools/pocketllm/server_text.c"
#include "../../tools/pocketllm/server_tools.c"
#include "../../tools/pocketllm/server_budget.c"
#include "../../tools/pocketllm/server_sched.c"
#include "../../tools/pocketllm/server_spill.c"
#include "../../tools/pocketllm/server_openai.c"
#include "../../tools/pocketllm/cli_buf.c"
#include "../../tools/pocketllm/chat_prompt.c"
#include "../../tools/pocketllm/server_chat.c"

#define REQUIRE(c) do { if (!(c)) __builtin_trap(); } while (0)

static pl_srv g_srv;
static bool g_ready;

static void load_once(void) {
    if (g_ready) return;
    const char *path = getenv("PL_FUZZ_MODEL");
    static char beside[4096];
    if (!path || !*path) {
        path = "tests/fixtures/models/tiny-qwen3-f16.gguf";
        FILE *f = fopen(path, "rb");
        if (f) {
            fclose(f);
        } else {
            /* Not run from the repository root: the fixture next to this
             * source file, whose path the compiler recorded. */
            const char *slash = strrchr(__FILE__, '/');
            int n = slash ? (int)(slash - __FILE__) : 0;
            snprintf(beside, sizeof beside, "%.*s%s../fixtures/models/tiny-qwen3-f16.gguf", n, __FILE__,
                     slash ? "/" : "");
            path = beside;
        }
    }
    pl_srv *s = &g_srv;
    memset(s, 0, sizeof *s);
    s->cfg.model_path = path;
    s->cfg.parallel = 4;
    s->cfg.queue = 4;
    pthread_mutex_init(&s->mu, NULL);
    pthread_cond_init(&s->cv, NULL);
    pl_model_params mp = pl_model_default_params();
    mp.n_threads = 1;
    mp.n_ctx = 256;
    mp.n_seq = 4;
    if (pl_model_load(path, &mp, &s->model) != PL_OK) {
        fprintf(stderr, "fuzz_request: cannot load '%s': %s\n(run from the repository root or set PL_FUZZ_MODEL)\n",
                path, pl_last_error());
        exit(2);
    }
    s->n_vocab = pl_model_n_vocab(s->model);
    s->n_ctx = pl_model_n_ctx(s->model);
    s->n_seq = 4;
    s->n_batch = 64;
    snprintf(s->model_id, sizeof s->model_id, "fuzz");
    if (pl_srv_chat_init(s) != PL_OK || !s->chat_impl) {
        fprintf(stderr, "fuzz_request: the fixture's chat template did not load\n");
        exit(2);
    }
    atomic_store(&s->state, PL_SRV_READY);
    g_ready = true;
}

/* Serializes j (taking it); traps if that fails. Returns the text's length. */
static size_t dump_ok(json_t *j) {
    REQUIRE(j);
    char *txt = json_dumps(j, JSON_COMPACT);
    json_decref(j);
    REQUIRE(txt);
    size_t n = strlen(txt);
    free(txt);
    return n;
}

/* A refusal names the problem in words, never by a jansson constant ("JSON_...").
 * Messages may quote the request (a grammar's undefined rule, a schema's type),
 * so the check holds only when the request itself does not contain "JSON_". */
static void check_refused(const pl_srv_error *e, const uint8_t *data, size_t size) {
    REQUIRE(e->http >= 400 && e->http <= 599);
    REQUIRE(e->message[0] != 0);
    if (!memmem(data, size, "JSON_", 5)) REQUIRE(!strstr(e->message, "JSON_"));
    dump_ok(pl_srv_error_json(e));
}

static void check_accepted(pl_srv *s, pl_srv_request *r, json_t *body) {
    REQUIRE(r->n_prompts >= 1 && r->n_seqs >= r->n_prompts && r->n_seqs <= s->n_seq);
    size_t usage = 0;
    for (int i = 0; i < r->n_prompts; i++) {
        REQUIRE(r->n_prompt_tok[i] >= 1 && r->n_prompt_tok[i] <= (size_t)s->n_ctx);
        for (size_t k = 0; k < r->n_prompt_tok[i]; k++)
            REQUIRE(r->prompts[i][k] >= 0 && r->prompts[i][k] < s->n_vocab);
        usage += r->n_prompt_tok[i];
    }
    REQUIRE(usage == r->usage_prompt);
    json_t *p = json_object_get(body, "prompt");
    if (r->kind == PL_SRV_COMPLETION && json_is_string(p)) {
        size_t per = pl_srv_prompt_byte_bound(s) / (size_t)s->n_ctx;
        REQUIRE(r->n_prompt_tok[0] * per >= json_string_length(p));
    }
    for (int i = 0; i < r->n_seqs; i++) {
        REQUIRE(r->seqs[i].req == r && r->seqs[i].smp && r->seqs[i].n_prompt >= 1);
        dump_ok(pl_srv_chunk_json(s, r, r->seqs[i].index, true, "x", 1, "y", 1, NULL));
    }
    dump_ok(pl_srv_response_json(s, r));
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    load_once();
    if (size < 1) return 0;
    pl_srv *s = &g_srv;
    pl_srv_kind kind = (data[0] & 1) ? PL_SRV_COMPLETION : PL_SRV_CHAT;
    pl_srv_error e;
    memset(&e, 0, sizeof e);
    json_t *body = pl_srv_body_json(s, (const char *)data + 1, size - 1, &e);
    if (!body) {
        check_refused(&e, data, size);
        return 0;
    }
    pl_srv_request *r = pl_srv_parse_request(s, kind, body, &e);
    if (!r) check_refused(&e, data, size);
    else check_accepted(s, r, body);
    pl_srv_request_unref(r);
    json_decref(body);
    return 0;
}
