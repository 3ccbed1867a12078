/* Unit tests of the request layer of `pocketllm serve` without HTTP: the
 * queue (a cancelled request gives its place back at once), request bodies
 * (client-facing JSON error messages) and the byte bound on prompt text
 * (refuses only texts that cannot fit). Runs on the tiny fixture model with
 * a small context; no scheduler thread, no generation. */
#include "testutil.h"
#include "../tools/pocketllm/server_text.c"
#include "../tools/pocketllm/server_tools.c"
#include "../tools/pocketllm/server_budget.c"
#include "../tools/pocketllm/server_sched.c"
#include "../tools/pocketllm/server_spill.c"
#include "../tools/pocketllm/server_openai.c"
#include "../tools/pocketllm/cli_buf.c"
#include "../tools/pocketllm/chat_prompt.c"
#include "../tools/pocketllm/server_chat.c"

static pl_srv S;

static pl_srv_request *parse(pl_srv_kind kind, const char *body, pl_srv_error *e) {
    memset(e, 0, sizeof *e);
    json_t *j = pl_srv_body_json(&S, body, strlen(body), e);
    if (!j) return NULL;
    pl_srv_request *r = pl_srv_parse_request(&S, kind, j, e);
    json_decref(j);
    return r;
}

/* A queued request that is cancelled leaves the queue at once, not when the
 * scheduler next runs (which is after the forward step in progress: seconds
 * for a long prefill). Here no scheduler runs at all. */
static void test_cancel_frees_queue_place(void) {
    S.cfg.queue = 2;
    S.slots_busy = S.n_seq; /* every slot taken: only the queue is left */
    pl_srv_error e;
    pl_srv_request *r[3];
    for (int i = 0; i < 3; i++) {
        r[i] = parse(PL_SRV_COMPLETION, "{\"prompt\": \"hello\", \"max_tokens\": 2}", &e);
        CHECK(r[i] != NULL, "parse: %s", e.message);
        if (!r[i]) return;
    }
    CHECK(pl_srv_submit(&S, r[0]) == 0 && pl_srv_submit(&S, r[1]) == 0, "two fit the queue of 2");
    CHECK(pl_srv_submit(&S, r[2]) == -1, "a third is refused while the queue is full");
    pl_srv_cancel(&S, r[0]);
    CHECK(S.q_len == 1, "the cancelled request left the queue at once (q_len %d)", S.q_len);
    CHECK(S.q_head == r[1] && S.q_tail == r[1] && !r[1]->next, "queue links after removing the head");
    CHECK(atomic_load(&r[0]->refs) == 1, "the queue's reference was dropped (refs %d)", atomic_load(&r[0]->refs));
    CHECK(pl_srv_submit(&S, r[2]) == 0, "its place is free for the next client");
    /* Cancelling the tail, twice, and one that is not queued. */
    pl_srv_cancel(&S, r[2]);
    pl_srv_cancel(&S, r[2]);
    CHECK(S.q_len == 1 && S.q_head == r[1] && S.q_tail == r[1], "tail removed once (q_len %d)", S.q_len);
    pl_srv_cancel(&S, r[0]);
    pl_srv_cancel(&S, r[1]);
    CHECK(S.q_len == 0 && !S.q_head && !S.q_tail, "queue empty (q_len %d)", S.q_len);
    CHECK(S.m_cancelled == 3, "3 cancelled, got %llu", (unsigned long long)S.m_cancelled);
    for (int i = 0; i < 3; i++) {
        CHECK(atomic_load(&r[i]->refs) == 1, "request %d: refs %d", i, atomic_load(&r[i]->refs));
        pl_srv_request_unref(r[i]);
    }
}

/* --queue counts requests that wait for a slot: queued requests that free
 * slots will take are not waiting. A slot freed in the middle of a step is
 * claimed only after it, and a client that got its answer and came straight
 * back was refused as busy meanwhile (and --queue 0 refused everything). */
static void test_free_slots_count(void) {
    pl_srv_error e;
    pl_srv_request *r[4];
    for (int i = 0; i < 4; i++) {
        r[i] = parse(PL_SRV_COMPLETION, "{\"prompt\": \"hello\", \"max_tokens\": 2}", &e);
        CHECK(r[i] != NULL, "parse: %s", e.message);
        if (!r[i]) return;
    }
    S.cfg.queue = 2;
    S.slots_busy = S.n_seq - 1; /* one slot free (n_seq is 2) */
    for (int i = 0; i < 3; i++) CHECK(pl_srv_submit(&S, r[i]) == 0, "request %d: queue 2 + 1 free slot", i);
    CHECK(pl_srv_submit(&S, r[3]) == -1, "a fourth would wait beyond the queue");
    for (int i = 0; i < 3; i++) {
        pl_srv_cancel(&S, r[i]);
        pl_srv_request_unref(r[i]);
        r[i] = parse(PL_SRV_COMPLETION, "{\"prompt\": \"hello\", \"max_tokens\": 2}", &e);
        if (!r[i]) return;
    }
    S.cfg.queue = 0;
    S.slots_busy = 0;
    CHECK(pl_srv_submit(&S, r[0]) == 0 && pl_srv_submit(&S, r[1]) == 0, "--queue 0 with two free slots: two run");
    CHECK(pl_srv_submit(&S, r[3]) == -1, "--queue 0: a third would wait");
    pl_srv_cancel(&S, r[0]);
    pl_srv_cancel(&S, r[1]);
    CHECK(S.q_len == 0, "queue empty (%d)", S.q_len);
    for (int i = 0; i < 4; i++) pl_srv_request_unref(r[i]);
    S.m_cancelled = 0;
}

/* jansson's messages can name its flags ("\u0000 is not allowed without
 * JSON_ALLOW_NUL"); clients get messages in the API's terms. */
static void test_body_messages(void) {
    static const struct { const char *body; size_t len; const char *want; } cases[] = {
        {"{\"prompt\": \"a\\u0000b\"}", 0, "NUL"},
        {"{\"a\\u0000\": 1}", 0, "NUL"},
        {"{\"prompt\": \"a\0b\"}", 17, "control character"},
        {"{\"prompt\": \"\xff\"}", 0, "UTF-8"},
        {"{\"prompt\": 1e999}", 0, "too large"},
        {"[1, 2]", 0, "must be a JSON object"},
        {"{\"prompt\": ", 0, "invalid JSON body"},
        {"", 0, "invalid JSON body"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        pl_srv_error e;
        memset(&e, 0, sizeof e);
        size_t len = cases[i].len ? cases[i].len : strlen(cases[i].body);
        json_t *j = pl_srv_body_json(&S, cases[i].body, len, &e);
        CHECK(!j && e.http == 400, "case %zu: refused with 400 (got %d)", i, e.http);
        json_decref(j);
        CHECK(strstr(e.message, cases[i].want) != NULL, "case %zu: message [%s] should say [%s]", i, e.message,
              cases[i].want);
        CHECK(!strstr(e.message, "JSON_"), "case %zu: message names a jansson flag: [%s]", i, e.message);
    }
    /* Deep nesting. */
    char deep[4200];
    memset(deep, '[', 4100);
    deep[4100] = 0;
    pl_srv_error e;
    json_t *j = pl_srv_body_json(&S, deep, strlen(deep), &e);
    CHECK(!j && strstr(e.message, "nested too deeply"), "deep nesting: [%s]", e.message);
    json_decref(j);
}

/* Bodies holding a text longer than 4x the bound are refused before jansson
 * parses them (that costs about twice the body again); the length is the
 * decoded one, so escapes never make a text that fits look too long. */
static void test_body_text_scan(void) {
    size_t cap = 4 * pl_srv_prompt_byte_bound(&S);
    static const struct { const char *esc; size_t bytes; } units[] = {{"a", 1}, {"\\u00e9", 2}, {"\\u4e2d", 3},
                                                                        {"\\ud83d\\ude00", 4}, {"\\n", 1}};
    for (size_t u = 0; u < sizeof units / sizeof units[0]; u++) {
        for (int over = 0; over <= 1; over++) {
            size_t reps = cap / units[u].bytes + (size_t)over, el = strlen(units[u].esc);
            pl_srv_buf b = {0};
            pl_srv_buf_add(&b, "{\"stop\": \"", 10);
            for (size_t i = 0; i < reps; i++) pl_srv_buf_add(&b, units[u].esc, el);
            pl_srv_buf_add(&b, "\"}", 2);
            pl_srv_error e;
            memset(&e, 0, sizeof e);
            json_t *j = pl_srv_body_json(&S, b.p, b.n, &e);
            size_t decoded = reps * units[u].bytes;
            if (decoded > cap)
                CHECK(!j && e.http == 400 && !strcmp(e.code, "context_length_exceeded"),
                      "unit %zu: text of %zu bytes (cap %zu) refused before parsing: %s", u, decoded, cap, e.message);
            else
                CHECK(j && json_string_length(json_object_get(j, "stop")) == decoded,
                      "unit %zu: text of %zu bytes (cap %zu), body of %zu, is parsed: %s", u, decoded, cap, b.n,
                      e.message);
            json_decref(j);
            pl_srv_buf_free(&b);
        }
    }
}

static size_t n_tokens(const char *text, size_t len) {
    int32_t *ids = NULL;
    size_t n = 0;
    if (pl_tokenize(S.model, text, len, true, NULL, &ids, &n) != PL_OK) return (size_t)-1;
    pl_free(ids);
    return n;
}

/* Refused before tokenizing when certainly too long; otherwise the answer is
 * the token count's, as before. */
static void test_prompt_byte_bound(void) {
    size_t bound = pl_srv_prompt_byte_bound(&S), per = bound / (size_t)S.n_ctx;
    CHECK(per >= 1 && bound == per * (size_t)S.n_ctx, "bound %zu, per token %zu", bound, per);
    /* The longest token text, found independently of the function. */
    int32_t longest = 0;
    size_t lmax = 0;
    for (int32_t id = 0; id < S.n_vocab; id++) {
        char buf[1024];
        size_t len = 0;
        if (pl_token_to_piece(S.model, id, true, buf, sizeof buf, &len) == PL_OK && len > lmax) {
            lmax = len;
            longest = id;
        }
    }
    CHECK(per == lmax, "per-token bytes %zu, longest token text %zu", per, lmax);
    char piece[1024];
    size_t plen = 0;
    pl_token_to_piece(S.model, longest, true, piece, sizeof piece, &plen);

    /* Texts right at the bound: the longest token's text n_ctx times (and
     * once more, which is over it). The precheck may refuse only the second;
     * otherwise accepted iff the tokens fit. */
    for (int extra = 0; extra <= 1; extra++) {
        size_t reps = (size_t)S.n_ctx + (size_t)extra;
        size_t tlen = reps * plen;
        char *text = malloc(tlen + 1);
        for (size_t i = 0; i < reps; i++) memcpy(text + i * plen, piece, plen);
        text[tlen] = 0;
        json_t *body = json_pack("{s:s%, s:i}", "prompt", text, tlen, "max_tokens", 1);
        pl_srv_error e;
        memset(&e, 0, sizeof e);
        pl_srv_request *r = pl_srv_parse_request(&S, PL_SRV_COMPLETION, body, &e);
        size_t nt = n_tokens(text, tlen);
        bool fits = nt <= (size_t)S.n_ctx;
        CHECK((r != NULL) == fits, "%zu x longest token: %zu tokens, n_ctx %d, accepted %d (%s)", reps, nt, S.n_ctx,
              r != NULL, e.message);
        if (!r) CHECK(!strcmp(e.code, "context_length_exceeded"), "code [%s]", e.code);
        pl_srv_request_unref(r);
        json_decref(body);
        free(text);
    }

    /* Far over: refused with the byte form of the message (before
     * tokenizing; the token form would need the count). */
    size_t big = 8u << 20;
    char *text = malloc(big);
    memset(text, 'a', big);
    static const char *const routes[] = {"prompt", "messages"};
    for (int k = 0; k < 2; k++) {
        json_t *body = k == 0 ? json_pack("{s:s%}", "prompt", text, big)
                              : json_pack("{s:[{s:s, s:s%}]}", "messages", "role", "user", "content", text, big);
        pl_srv_error e;
        memset(&e, 0, sizeof e);
        pl_srv_request *r = pl_srv_parse_request(&S, k == 0 ? PL_SRV_COMPLETION : PL_SRV_CHAT, body, &e);
        CHECK(!r && e.http == 400 && !strcmp(e.code, "context_length_exceeded") && !strcmp(e.param, routes[k]),
              "8 MiB %s: %d %s %s", routes[k], e.http, e.code, e.message);
        CHECK(strstr(e.message, "bytes long") != NULL, "refused before tokenizing: [%s]", e.message);
        pl_srv_request_unref(r);
        json_decref(body);
    }
    /* Reasoning of earlier turns does not count against the context (the
     * template drops it), but the total text is capped. */
    size_t some = bound / 2 + 1;
    json_t *body = json_pack("{s:[{s:s,s:s},{s:s,s:s,s:s%},{s:s,s:s}]}", "messages", "role", "user", "content", "hi",
                             "role", "assistant", "content", "ok", "reasoning_content", text, some, "role", "user",
                             "content", "again");
    pl_srv_error e;
    memset(&e, 0, sizeof e);
    pl_srv_request *r = pl_srv_parse_request(&S, PL_SRV_CHAT, body, &e);
    CHECK(r != NULL, "dropped reasoning of %zu bytes (bound %zu) is not refused: %s", some, bound, e.message);
    pl_srv_request_unref(r);
    json_decref(body);
    body = json_pack("{s:[{s:s,s:s},{s:s,s:s,s:s%},{s:s,s:s}]}", "messages", "role", "user", "content", "hi", "role",
                     "assistant", "content", "ok", "reasoning_content", text, 4 * bound + 1, "role", "user",
                     "content", "again");
    memset(&e, 0, sizeof e);
    r = pl_srv_parse_request(&S, PL_SRV_CHAT, body, &e);
    CHECK(!r && e.http == 413 && !strcmp(e.code, "request_too_large"), "total text cap: %d %s", e.http, e.message);
    pl_srv_request_unref(r);
    json_decref(body);
    free(text);

    /* Token-id prompts: refused by length before they are copied. */
    json_t *ids = json_array();
    for (int i = 0; i <= S.n_ctx; i++) json_array_append_new(ids, json_integer(1));
    body = json_pack("{s:o}", "prompt", ids);
    memset(&e, 0, sizeof e);
    r = pl_srv_parse_request(&S, PL_SRV_COMPLETION, body, &e);
    CHECK(!r && !strcmp(e.code, "context_length_exceeded"), "n_ctx + 1 ids: %s", e.message);
    pl_srv_request_unref(r);
    json_decref(body);
}

int main(void) {
    const char *path = PL_TEST_FIXTURES "/models/tiny-qwen3-f16.gguf";
    pl_model_params mp = pl_model_default_params();
    mp.n_threads = 1;
    mp.n_ctx = 128;
    mp.n_seq = 2;
    if (pl_model_load(path, &mp, &S.model) != PL_OK) {
        fprintf(stderr, "cannot load %s: %s\n", path, pl_last_error());
        return 1;
    }
    S.cfg.model_path = path;
    S.cfg.parallel = 2;
    pthread_mutex_init(&S.mu, NULL);
    pthread_cond_init(&S.cv, NULL);
    S.n_vocab = pl_model_n_vocab(S.model);
    S.n_ctx = pl_model_n_ctx(S.model);
    S.n_seq = 2;
    S.n_batch = 64;
    if (pl_srv_chat_init(&S) != PL_OK) {
        fprintf(stderr, "chat init failed\n");
        return 1;
    }
    test_cancel_frees_queue_place();
    test_free_slots_count();
    test_body_messages();
    test_body_text_scan();
    test_prompt_byte_bound();
    pl_srv_chat_free(&S);
    pl_model_free(S.model);
    return pl_test_summary("server_request");
}
