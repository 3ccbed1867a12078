/* The public calls the tools use instead of internal headers (issue 19):
 * the chat-template handle (parse once, render many), session rewind and
 * the KV-cache slot lengths behind pl_model_kv_truncate, and read-only
 * introspection of backends, devices, architectures and ops.
 *
 * This file includes pocketllm.h only (and jansson, to read fixtures):
 * everything here is what an embedding program can do. */
#include "pocketllm.h"
#include "testutil.h"
#include <jansson.h>
#include <math.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* ---- chat templates ----------------------------------------------------------*/

static pl_chat_template *parse(const char *src) {
    pl_chat_template *t = NULL;
    pl_status st = pl_chat_template_parse(src, strlen(src), &t);
    CHECK(st == PL_OK && t, "parse '%s': %s", src, pl_last_error());
    return t;
}

/* Renders t with p; the text, or NULL with the status in *st. */
static char *apply(const pl_chat_template *t, const pl_chat_template_params *p, pl_status *st) {
    char *out = NULL;
    size_t len = 0;
    *st = pl_chat_template_apply(t, p, &out, &len);
    if (*st != PL_OK) return NULL;
    CHECK(out && strlen(out) == len, "length %zu of a NUL-free text", len);
    return out;
}

static void expect_text(const pl_chat_template *t, const pl_chat_template_params *p, const char *want,
                        const char *what) {
    pl_status st;
    char *out = apply(t, p, &st);
    CHECK(out && !strcmp(out, want), "%s: got '%s', want '%s'", what, out ? out : pl_last_error(), want);
    pl_free(out);
}

static void expect_error(const pl_chat_template *t, const pl_chat_template_params *p, pl_status want,
                         const char *msg, const char *what) {
    pl_status st;
    char *out = apply(t, p, &st);
    CHECK(!out && st == want && strstr(pl_last_error(), msg), "%s: status %d, '%s' (want %d, '%s')", what, (int)st,
          out ? out : pl_last_error(), (int)want, msg);
    pl_free(out);
}

static void test_template_params(void) {
    pl_chat_template *t = parse("{% for m in messages %}[{{ m.role }}:{{ m.content }}]{% endfor %}"
                                "{% if tools is defined %}T{{ tools|length }}{% endif %}"
                                "{% if add_generation_prompt is defined %}G{{ add_generation_prompt }}{% endif %}"
                                "|{{ bos_token is defined }}{{ bos_token }}|{{ eos_token }}|{{ extra }}");
    if (!t) return;
    pl_chat_template_params d = pl_chat_template_default_params();
    CHECK(d.add_generation_prompt == -1 && !d.messages && !d.context && !d.now, "default params");

    /* one parsed template, rendered many times with different inputs */
    pl_chat_template_params p = d;
    p.messages = "[{\"role\": \"user\", \"content\": \"hi\"}]";
    expect_text(t, &p, "[user:hi]|False||", "messages only");
    p.messages = "[{\"role\": \"user\", \"content\": \"a\"}, {\"role\": \"assistant\", \"content\": \"b\"}]";
    p.add_generation_prompt = 1;
    p.tools = "[{\"type\": \"function\"}, {\"type\": \"function\"}]";
    expect_text(t, &p, "[user:a][assistant:b]T2GTrue|False||", "messages, tools, generation prompt");
    p.add_generation_prompt = 0;
    p.tools = NULL;
    expect_text(t, &p, "[user:a][assistant:b]GFalse|False||", "add_generation_prompt = 0");

    /* context: extra variables; the fields override its keys; -1 leaves
     * context's add_generation_prompt alone */
    p = d;
    p.context = "{\"messages\": [{\"role\": \"system\", \"content\": \"s\"}], \"extra\": 7,"
                " \"add_generation_prompt\": true, \"bos_token\": \"<B>\", \"eos_token\": \"<E>\"}";
    expect_text(t, &p, "[system:s]GTrue|True<B>|<E>|7", "context only");
    p.messages = "[{\"role\": \"user\", \"content\": \"u\"}]";
    p.bos_token = "<bos>";
    p.add_generation_prompt = 0;
    expect_text(t, &p, "[user:u]GFalse|True<bos>|<E>|7", "fields override the context");

    /* strftime_now: the given time, as UTC */
    pl_chat_template *tn = parse("{{ strftime_now('%Y-%m-%d %H:%M:%S %A') }}");
    int64_t now = 1767323045;   /* 2026-01-02 03:04:05 UTC, a Friday */
    p = d;
    p.now = &now;
    if (tn) expect_text(tn, &p, "2026-01-02 03:04:05 Friday", "now");
    pl_chat_template_free(tn);

    /* NUL characters inside JSON strings are kept (lengths, not C strings) */
    pl_chat_template *tl = parse("{{ messages[0].content|length }}");
    p = d;
    p.messages = "[{\"role\": \"user\", \"content\": \"a\\u0000b\"}]";
    if (tl) expect_text(tl, &p, "3", "NUL in a message");
    pl_chat_template_free(tl);

    /* bad inputs: refused with a reason, nothing rendered */
    p = d;
    p.messages = "[{\"role\": ";
    expect_error(t, &p, PL_ERR_INVALID_ARG, "messages is not valid JSON", "broken messages");
    p.messages = "{\"role\": \"user\"}";
    expect_error(t, &p, PL_ERR_INVALID_ARG, "messages is not a JSON array", "messages not an array");
    p = d;
    p.tools = "{}";
    expect_error(t, &p, PL_ERR_INVALID_ARG, "tools is not a JSON array", "tools not an array");
    p = d;
    p.context = "[1]";
    expect_error(t, &p, PL_ERR_INVALID_ARG, "context is not a JSON object", "context not an object");
    p.context = "{\"a\": 1, \"a\": 2}";
    expect_error(t, &p, PL_ERR_INVALID_ARG, "duplicate", "duplicate key");
    char *out = (char *)1;
    size_t len = 1;
    CHECK(pl_chat_template_apply(NULL, &d, &out, &len) == PL_ERR_INVALID_ARG && !out && !len, "NULL template");

    pl_chat_template *tr = parse("{{ raise_exception('no system messages, please') }}");
    if (tr) expect_error(tr, &d, PL_ERR_INVALID_ARG, "no system messages, please", "raise_exception");
    pl_chat_template_free(tr);
    pl_chat_template *bad = (pl_chat_template *)1;
    CHECK(pl_chat_template_parse("{% if %}", 8, &bad) == PL_ERR_FORMAT && !bad &&
              strstr(pl_last_error(), "syntax error at line 1"), "syntax error: %s", pl_last_error());
    /* a template without defaults: NULL params render with no variables */
    expect_text(t, NULL, "|False||", "NULL params");
    pl_chat_template_free(t);
}

/* Every fixture case (real templates, outputs rendered by jinja2), through
 * the public handle with the input split into the params' fields. */
static void test_template_fixture_cases(void) {
    size_t len;
    char *text = pl_read_file(pl_fixture("chat-template-cases.json"), &len);
    CHECK(text != NULL, "cannot read chat-template-cases.json");
    if (!text) return;
    json_t *root = json_loadb(text, len, 0, NULL);
    free(text);
    json_t *cases = json_object_get(root, "cases");
    size_t n = json_array_size(cases), identical = 0, rendered = 0;
    int64_t now = 1767323045;   /* the time the fixtures were rendered at */
    for (size_t i = 0; i < n; i++) {
        json_t *cs = json_array_get(cases, i), *input = json_deep_copy(json_object_get(cs, "input"));
        const char *name = json_string_value(json_object_get(cs, "template"));
        if (!json_is_string(json_object_get(cs, "output"))) {
            json_decref(input);
            continue;   /* the template raises: test_chat_template covers those */
        }
        char rel[512];
        snprintf(rel, sizeof rel, "templates/%s", name);
        size_t tlen;
        char *tsrc = pl_read_file(pl_fixture(rel), &tlen);
        pl_chat_template *t = NULL;
        CHECK(tsrc && pl_chat_template_parse(tsrc, tlen, &t) == PL_OK, "%s: %s", rel, pl_last_error());
        free(tsrc);
        /* messages, tools and add_generation_prompt go in their own fields,
         * bos/eos too; whatever is left is the context */
        pl_chat_template_params p = pl_chat_template_default_params();
        p.now = &now;
        char *messages = json_dumps(json_object_get(input, "messages"), JSON_ENCODE_ANY);
        char *tools = json_object_get(input, "tools") ? json_dumps(json_object_get(input, "tools"), 0) : NULL;
        json_t *agp = json_object_get(input, "add_generation_prompt");
        if (json_is_boolean(agp)) p.add_generation_prompt = json_is_true(agp);
        char bos[64] = "", eos[64] = "";
        if (json_is_string(json_object_get(input, "bos_token")))
            snprintf(bos, sizeof bos, "%s", json_string_value(json_object_get(input, "bos_token")));
        if (json_is_string(json_object_get(input, "eos_token")))
            snprintf(eos, sizeof eos, "%s", json_string_value(json_object_get(input, "eos_token")));
        p.bos_token = *bos ? bos : NULL;
        p.eos_token = *eos ? eos : NULL;
        json_object_del(input, "messages");
        json_object_del(input, "tools");
        if (json_is_boolean(agp)) json_object_del(input, "add_generation_prompt");
        json_object_del(input, "bos_token");
        json_object_del(input, "eos_token");
        char *context = json_dumps(input, 0);
        p.messages = messages;
        p.tools = tools;
        p.context = context;
        /* twice from one parse: the second rendering must not differ */
        for (int rep = 0; rep < 2 && t; rep++) {
            char *out = NULL;
            size_t olen = 0;
            pl_status st = pl_chat_template_apply(t, &p, &out, &olen);
            json_t *want = json_object_get(cs, "output");
            bool ok = st == PL_OK && olen == json_string_length(want) && !memcmp(out, json_string_value(want), olen);
            CHECK(ok, "%s/%s (rendering %d): %s", name, json_string_value(json_object_get(cs, "conversation")), rep,
                  st == PL_OK ? "output differs" : pl_last_error());
            identical += ok;
            rendered++;
            pl_free(out);
        }
        free(messages);
        free(tools);
        free(context);
        json_decref(input);
        pl_chat_template_free(t);
    }
    json_decref(root);
    CHECK(rendered >= 100, "only %zu renderings", rendered);
    printf("fixture cases through pl_chat_template_apply: %zu/%zu identical\n", identical, rendered);
}

static void test_template_from_model(void) {
    pl_model_params mp = pl_model_default_params();
    mp.vocab_only = true;
    pl_model *m = NULL;
    pl_status st = pl_model_load(pl_fixture("models/tiny-qwen3-f32.gguf"), &mp, &m);
    CHECK(st == PL_OK, "load: %s", pl_last_error());
    if (st != PL_OK) return;
    pl_chat_template *t = NULL;
    st = pl_chat_template_from_model(m, &t);
    CHECK(st == PL_OK && t, "from_model: %s", pl_last_error());
    /* the same text as the one-call form (which now sits on top of it) and as
     * the file's template parsed by hand with the model's EOS given */
    const char *ctx = "{\"messages\": [{\"role\": \"user\", \"content\": \"hi\"}], \"add_generation_prompt\": true}";
    char *one = NULL;
    size_t one_len = 0;
    CHECK(pl_chat_apply_template(m, NULL, ctx, &one, &one_len) == PL_OK, "apply_template: %s", pl_last_error());
    pl_chat_template_params p = pl_chat_template_default_params();
    p.context = ctx;
    char *two = t ? apply(t, &p, &st) : NULL;
    CHECK(one && two && !strcmp(one, two), "handle '%s' vs one call '%s'", two ? two : pl_last_error(), one ? one : "");
    pl_free(two);

    /* the model's EOS text (tokenizer.ggml.eos_token_id, read here with the
     * file inspector) is a from_model handle's default eos_token; the
     * context's or the params' wins over it */
    char want[300] = "[";
    pl_inspect *f = NULL;
    int64_t eos_id = -1;
    size_t eos_len = 0;
    CHECK(pl_inspect_open(pl_fixture("models/tiny-qwen3-f32.gguf"), &f) == PL_OK &&
              pl_inspect_meta_i64(f, "tokenizer.ggml.eos_token_id", -1, &eos_id) == PL_OK,
          "eos id: %s", pl_last_error());
    pl_inspect_close(f);
    CHECK(pl_token_to_piece(m, (int32_t)eos_id, true, want + 1, 256, &eos_len) == PL_OK && eos_len > 0, "eos text");
    memcpy(want + 1 + eos_len, "]", 2);
    pl_chat_template *te = parse("[{{ eos_token }}]");
    char *tail = NULL;
    size_t tail_len;
    CHECK(pl_chat_apply_template(m, "[{{ eos_token }}]", "{}", &tail, &tail_len) == PL_OK && !strcmp(tail, want),
          "apply_template fills eos_token: '%s', want '%s'", tail ? tail : pl_last_error(), want);
    pl_free(tail);
    CHECK(pl_chat_apply_template(m, "[{{ eos_token }}]", "{\"eos_token\": \"ctx\"}", &tail, &tail_len) == PL_OK &&
              !strcmp(tail, "[ctx]"), "the context's eos_token wins: %s", tail ? tail : pl_last_error());
    pl_free(tail);
    /* from a template text the handle has no defaults: the variable is undefined */
    if (te) expect_text(te, NULL, "[]", "no default eos_token without a model");
    p = pl_chat_template_default_params();
    p.eos_token = "<mine>";
    if (te) expect_text(te, &p, "[<mine>]", "eos_token given");
    pl_chat_template_free(te);
    pl_free(one);
    pl_chat_template_free(t);

    /* a file without a template: the fixture with its key renamed (same
     * length, so the file stays valid) */
    pl_model_free(m);
    m = NULL;
    size_t flen = 0;
    char *bytes = pl_read_file(pl_fixture("models/tiny-qwen3-f32.gguf"), &flen);
    const char key[] = "tokenizer.chat_template";
    char *at = bytes ? memmem(bytes, flen, key, sizeof key - 1) : NULL;
    char path[] = "/tmp/pl_test_public_api_XXXXXX";
    int fd = at ? mkstemp(path) : -1;
    FILE *out = fd >= 0 ? fdopen(fd, "wb") : NULL;
    if (at) at[sizeof key - 2] = 'X';
    CHECK(out && fwrite(bytes, 1, flen, out) == flen, "cannot write %s", path);
    if (out) fclose(out);
    free(bytes);
    CHECK(pl_model_load(path, &mp, &m) == PL_OK, "load: %s", pl_last_error());
    if (fd >= 0) unlink(path);
    t = (pl_chat_template *)1;
    if (m)
        CHECK(pl_chat_template_from_model(m, &t) == PL_ERR_NOT_FOUND && !t &&
                  strstr(pl_last_error(), "no chat template"), "a file without a template: %s", pl_last_error());
    pl_model_free(m);
    CHECK(pl_chat_template_from_model(NULL, &t) == PL_ERR_INVALID_ARG, "NULL model");
}

/* pl_model_meta_str hands out values of any length (it once had a 64 KiB
 * buffer, and a long chat template silently became ChatML): the fixture's
 * template grown past 64 KiB by a leading comment. The file is rewritten by
 * hand: the value grows by a multiple of the alignment, so the data section
 * moves by exactly that and every tensor offset stays valid. */
static void test_meta_str_long(void) {
    size_t flen = 0;
    char *in = pl_read_file(pl_fixture("models/tiny-qwen3-f32.gguf"), &flen);
    pl_inspect *f = NULL;
    CHECK(in && pl_inspect_open(pl_fixture("models/tiny-qwen3-f32.gguf"), &f) == PL_OK, "fixture");
    uint64_t align = f ? pl_inspect_alignment(f) : 32;
    pl_inspect_close(f);
    const char key[] = "tokenizer.chat_template";
    char *at = in ? memmem(in, flen, key, sizeof key - 1) : NULL;
    CHECK(at != NULL, "no template key");
    if (!at) {
        free(in);
        return;
    }
    /* key bytes, then u32 type (8 = string), u64 length, the bytes */
    char *lenp = at + sizeof key - 1 + 4;
    uint64_t old_len;
    memcpy(&old_len, lenp, 8);
    const char *old_val = lenp + 8;
    size_t pad = 70000;
    while ((pad + 8) % align) pad++;     /* "{#- " + pad + " -#}" grows the value by pad + 8 */
    uint64_t new_len = old_len + pad + 8;
    size_t out_len = flen + pad + 8;
    char *out = malloc(out_len), *w = out;
    size_t head = (size_t)(lenp - in);
    memcpy(w, in, head);
    w += head;
    memcpy(w, &new_len, 8);
    w += 8;
    memcpy(w, "{#- ", 4);
    memset(w + 4, 'p', pad);
    memcpy(w + 4 + pad, " -#}", 4);
    w += pad + 8;
    memcpy(w, old_val, flen - head - 8);
    char path[] = "/tmp/pl_test_meta_str_XXXXXX";
    int fd = mkstemp(path);
    FILE *fp = fd >= 0 ? fdopen(fd, "wb") : NULL;
    CHECK(fp && fwrite(out, 1, out_len, fp) == out_len, "write %s", path);
    if (fp) fclose(fp);

    pl_model_params mp = pl_model_default_params();
    mp.vocab_only = true;
    pl_model *m = NULL, *orig = NULL;
    CHECK(pl_model_load(path, &mp, &m) == PL_OK, "load the long-template file: %s", pl_last_error());
    CHECK(pl_model_load(pl_fixture("models/tiny-qwen3-f32.gguf"), &mp, &orig) == PL_OK, "load");
    if (fd >= 0) unlink(path);
    const char *v = m ? pl_model_meta_str(m, key) : NULL;
    CHECK(v && strlen(v) == new_len && new_len >= 65536 && !memcmp(v + pad + 8, old_val, old_len),
          "meta_str of a %llu-byte value: %s", (unsigned long long)new_len, v ? "wrong bytes" : pl_last_error());
    /* and the long template renders what the original does */
    pl_chat_template *tl = NULL, *to = NULL;
    const char *ctx = "{\"messages\": [{\"role\": \"user\", \"content\": \"hi\"}], \"add_generation_prompt\": true}";
    pl_chat_template_params p = pl_chat_template_default_params();
    p.context = ctx;
    pl_status st;
    if (m && orig && pl_chat_template_from_model(m, &tl) == PL_OK && pl_chat_template_from_model(orig, &to) == PL_OK) {
        char *a = apply(tl, &p, &st), *b = apply(to, &p, &st);
        CHECK(a && b && !strcmp(a, b), "the long template renders differently");
        pl_free(a);
        pl_free(b);
    } else {
        CHECK(false, "from_model: %s", pl_last_error());
    }
    pl_chat_template_free(tl);
    pl_chat_template_free(to);
    pl_model_free(m);
    pl_model_free(orig);
    free(out);
    free(in);
}

/* ---- sessions: rewind; the model's KV-cache slot lengths --------------------*/

static float max_diff(const float *a, const float *b, int32_t n) {
    float d = 0;
    for (int32_t i = 0; i < n; i++) {
        float e = fabsf(a[i] - b[i]);
        if (!(e <= d)) d = e;   /* NaN counts */
    }
    return d;
}

/* pl_model_forward of n tokens of slot seq at positions pos0.. ; no logits */
static pl_status forward_at(pl_model *m, int32_t seq, const int32_t *pos, const int32_t *ids, int n) {
    int32_t seqs[8];
    bool want[8] = {false};
    for (int i = 0; i < n; i++) seqs[i] = seq;
    pl_batch b = {n, ids, pos, seqs, want};
    return pl_model_forward(m, &b, NULL);
}

static void test_rewind_and_kv(void) {
    pl_model_params mp = pl_model_default_params();
    mp.n_ctx = 64;
    mp.n_threads = 1;
    mp.n_seq = 2;
    pl_model *m = NULL;
    pl_status st = pl_model_load(pl_fixture("models/tiny-qwen3-f32.gguf"), &mp, &m);
    CHECK(st == PL_OK, "load: %s", pl_last_error());
    if (st != PL_OK) return;
    const int32_t V = pl_model_n_vocab(m);
    float *full = malloc((size_t)V * sizeof(float)), *again = malloc((size_t)V * sizeof(float)),
          *edit = malloc((size_t)V * sizeof(float)), *fresh = malloc((size_t)V * sizeof(float));
    const int32_t a[6] = {11, 22, 33, 44, 55, 66}, b[3] = {77, 88, 99};
    pl_session *s = NULL;
    CHECK(pl_session_create(m, &s) == PL_OK, "session: %s", pl_last_error());
    CHECK(pl_model_kv_len(m, 0) == 0 && pl_model_kv_len(m, 1) == 0, "fresh slots are empty");
    CHECK(pl_session_eval(s, a, 6, full) == PL_OK, "eval: %s", pl_last_error());
    CHECK(pl_model_kv_len(m, 0) == 6 && pl_model_kv_len(m, 1) == 0, "slot lengths after 6 tokens: %d %d",
          pl_model_kv_len(m, 0), pl_model_kv_len(m, 1));

    /* rewind to 3 and evaluate the same tail: the same logits */
    CHECK(pl_session_rewind(s, 3) == PL_OK && pl_session_pos(s) == 3, "rewind: %s", pl_last_error());
    CHECK(pl_model_kv_len(m, 0) == 3, "rewind truncates the slot: %d", pl_model_kv_len(m, 0));
    CHECK(pl_session_eval(s, a + 3, 3, again) == PL_OK && pl_session_pos(s) == 6, "eval after rewind");
    CHECK(max_diff(full, again, V) < 1e-4f, "same tail after a rewind: logits differ by %g", max_diff(full, again, V));

    /* edit the history after the common prefix: as if evaluated fresh */
    CHECK(pl_session_rewind(s, 3) == PL_OK, "rewind");
    CHECK(pl_session_eval(s, b, 3, edit) == PL_OK, "eval edit");
    pl_session *s2 = NULL;
    CHECK(pl_session_create(m, &s2) == PL_OK, "second session: %s", pl_last_error());
    int32_t ab[6] = {a[0], a[1], a[2], b[0], b[1], b[2]};
    CHECK(pl_session_eval(s2, ab, 6, fresh) == PL_OK, "fresh eval");
    CHECK(max_diff(edit, fresh, V) < 1e-4f, "edited history vs fresh: %g", max_diff(edit, fresh, V));
    CHECK(max_diff(edit, full, V) > 1e-3f, "a different history gives different logits");
    pl_session_free(s2);

    /* bad rewinds change nothing */
    CHECK(pl_session_rewind(s, 7) == PL_ERR_INVALID_ARG && pl_session_pos(s) == 6, "rewind past the end");
    CHECK(pl_session_rewind(s, -1) == PL_ERR_INVALID_ARG && pl_session_pos(s) == 6, "negative rewind");
    CHECK(pl_session_rewind(NULL, 0) == PL_ERR_INVALID_ARG, "NULL session");
    CHECK(pl_session_rewind(s, 6) == PL_OK && pl_model_kv_len(m, 0) == 6, "rewind to the end is a no-op");

    /* pl_model_kv_truncate forgets: a token past the slot's end leaves a gap
     * and is refused (it used to read the forgotten rows) */
    pl_model_kv_truncate(m, 0, 2);
    CHECK(pl_model_kv_len(m, 0) == 2, "truncate to 2: %d", pl_model_kv_len(m, 0));
    int32_t p3 = 3, p2 = 2, tok = 5;
    st = forward_at(m, 0, &p3, &tok, 1);
    CHECK(st == PL_ERR_INVALID_ARG && strstr(pl_last_error(), "gap"), "a write past the end: %d %s", (int)st,
          pl_last_error());
    CHECK(pl_model_kv_len(m, 0) == 2, "a refused batch changes nothing");
    CHECK(forward_at(m, 0, &p2, &tok, 1) == PL_OK && pl_model_kv_len(m, 0) == 3, "write at the end: %s",
          pl_last_error());
    /* batch order counts: 3 then 4 is fine, 5 before 4 is not */
    int32_t ok_pos[2] = {3, 4}, bad_pos[2] = {6, 5}, toks[2] = {5, 6};
    CHECK(forward_at(m, 0, ok_pos, toks, 2) == PL_OK && pl_model_kv_len(m, 0) == 5, "in-order batch");
    CHECK(forward_at(m, 0, bad_pos, toks, 2) == PL_ERR_INVALID_ARG && pl_model_kv_len(m, 0) == 5,
          "out-of-order batch with a gap");
    /* rewriting an earlier position ends the sequence there */
    CHECK(forward_at(m, 0, &p2, &tok, 1) == PL_OK && pl_model_kv_len(m, 0) == 3, "rewrite at 2: %d",
          pl_model_kv_len(m, 0));
    /* truncate never extends; bad arguments change nothing */
    pl_model_kv_truncate(m, 0, 50);
    pl_model_kv_truncate(m, 7, 0);
    pl_model_kv_truncate(m, -1, 0);
    pl_model_kv_truncate(NULL, 0, 0);
    CHECK(pl_model_kv_len(m, 0) == 3, "truncate past the end: %d", pl_model_kv_len(m, 0));
    CHECK(pl_model_kv_len(m, 2) == -1 && pl_model_kv_len(m, -1) == -1 && pl_model_kv_len(NULL, 0) == -1, "bad kv_len");
    pl_model_kv_truncate(m, 0, -5);
    CHECK(pl_model_kv_len(m, 0) == 0, "negative truncates to 0");

    /* a new session starts its slot empty, whatever was there (slot 1
     * still holds the second session's 6 tokens) */
    CHECK(pl_model_kv_len(m, 1) == 6, "slot 1: %d", pl_model_kv_len(m, 1));
    CHECK(pl_session_create(m, &s2) == PL_OK && pl_model_kv_len(m, 1) == 0, "a new session on slot 1: %d",
          pl_model_kv_len(m, 1));
    CHECK(forward_at(m, 1, &p2, &tok, 1) == PL_ERR_INVALID_ARG, "a gap in the new session's slot");
    pl_session_free(s2);
    pl_session_free(s);
    CHECK(pl_session_create(m, &s) == PL_OK, "session again");
    CHECK(pl_model_kv_len(m, 0) == 0, "a new session's slot is empty");
    CHECK(pl_session_eval(s, a, 2, NULL) == PL_OK && pl_model_kv_len(m, 0) == 2, "eval");
    pl_session_reset(s);
    CHECK(pl_model_kv_len(m, 0) == 0 && pl_session_pos(s) == 0, "reset empties the slot");
    pl_session_free(s);
    free(full);
    free(again);
    free(edit);
    free(fresh);
    pl_model_free(m);
}

/* ---- introspection -------------------------------------------------------------*/

static bool in_list(const char **names, size_t n, const char *want) {
    for (size_t i = 0; i < n; i++)
        if (!strcmp(names[i], want)) return true;
    return false;
}

static void test_backends_and_devices(void) {
    int32_t n = pl_backend_count();
    CHECK(n >= 3, "%d backends", n);
    int32_t ref = pl_backend_index("ref"), cpu = pl_backend_index("cpu");
    CHECK(ref >= 0 && cpu >= 0 && pl_backend_index("nosuch") < 0 && pl_backend_index(NULL) < 0, "backend index");
    pl_backend_info info;
    CHECK(pl_backend_get(n, &info) == PL_ERR_INVALID_ARG && pl_backend_get(-1, &info) == PL_ERR_INVALID_ARG,
          "backend index out of range");
    int32_t matmul = pl_op_index("matmul");
    for (int32_t b = 0; b < n; b++) {
        CHECK(pl_backend_get(b, &info) == PL_OK && info.name && info.summary, "backend %d", b);
        CHECK(pl_backend_index(info.name) == b, "%s: index round trip", info.name);
        /* declared backends name what they await and have no kernels */
        size_t total = 0;
        for (int32_t op = 0; op < pl_op_count(); op++) {
            size_t k = 0;
            CHECK(pl_backend_op_dtypes(b, op, NULL, 0, &k) == PL_OK, "count");
            total += k;
        }
        CHECK(info.implemented == (info.awaits == NULL), "%s: implemented xor awaits", info.name);
        CHECK(info.implemented == (total > 0), "%s: %zu kernels", info.name, total);
        char detail[128] = "x";
        bool avail = false;
        CHECK(pl_device_probe(b, &avail, detail, sizeof detail) == PL_OK && detail[0] && strcmp(detail, "x"),
              "%s: probe detail '%s'", info.name, detail);
        bool avail2 = !avail;
        CHECK(pl_device_probe(b, &avail2, NULL, 0) == PL_OK && avail2 == avail, "%s: probe without detail",
              info.name);
        char tiny[4];
        CHECK(pl_device_probe(b, &avail2, tiny, sizeof tiny) == PL_OK && strlen(tiny) < sizeof tiny,
              "%s: detail truncated", info.name);
    }
    bool avail = false;
    char detail[64];
    CHECK(pl_device_probe(ref, &avail, detail, sizeof detail) == PL_OK && avail && !strcmp(detail, "host memory"),
          "ref: %s", detail);
    CHECK(pl_device_probe(cpu, &avail, detail, sizeof detail) == PL_OK && avail, "cpu is always there");
    CHECK(pl_device_probe(n, &avail, detail, sizeof detail) == PL_ERR_INVALID_ARG, "probe out of range");

    /* kernels: the reference backend does an f32 and a q4_K matmul; asking
     * with a short list reports the full count */
    const char *names[64];
    size_t k = 0;
    CHECK(pl_backend_op_dtypes(ref, matmul, names, 64, &k) == PL_OK && k > 2 && k <= 64, "ref matmul: %zu", k);
    CHECK(in_list(names, k, "f32") && in_list(names, k, "q4_K"), "ref matmul dtypes");
    size_t k1 = 0;
    const char *one[1] = {NULL};
    CHECK(pl_backend_op_dtypes(ref, matmul, one, 1, &k1) == PL_OK && k1 == k && one[0] && !strcmp(one[0], names[0]),
          "short list: %zu", k1);
    CHECK(pl_backend_op_dtypes(ref, pl_op_count(), names, 64, &k) == PL_ERR_INVALID_ARG, "op out of range");
    CHECK(pl_backend_op_dtypes(n, matmul, names, 64, &k) == PL_ERR_INVALID_ARG, "backend out of range");
}

static void test_architectures(void) {
    int32_t n = pl_arch_count();
    CHECK(n >= 2, "%d architectures", n);
    bool qwen3 = false;
    for (int32_t a = 0; a < n; a++) {
        pl_arch_info info;
        CHECK(pl_arch_get(a, &info) == PL_OK && info.name && info.summary, "arch %d", a);
        if (strcmp(info.name, "qwen3")) continue;
        qwen3 = true;
        bool block_count = false;
        for (int32_t k = 0; k < info.n_keys; k++) {
            char key[256];
            size_t len = 0;
            CHECK(pl_arch_key(a, k, key, sizeof key, &len) == PL_OK && strlen(key) == len, "key %d", k);
            CHECK(!strstr(key, "{arch}"), "unexpanded key %s", key);
            block_count |= !strcmp(key, "qwen3.block_count");
            /* too small a buffer: refused, with the size it needs */
            size_t need = 0;
            CHECK(pl_arch_key(a, k, key, len, &need) == PL_ERR_INVALID_ARG && need == len, "short buffer");
        }
        CHECK(block_count, "qwen3 reads qwen3.block_count");
        CHECK(pl_arch_key(a, info.n_keys, NULL, 0, NULL) == PL_ERR_INVALID_ARG, "key out of range");
    }
    CHECK(qwen3, "qwen3 is registered");
    pl_arch_info info;
    CHECK(pl_arch_get(n, &info) == PL_ERR_INVALID_ARG, "arch out of range");
}

static void test_ops(void) {
    int32_t n = pl_op_count(), matmul = pl_op_index("matmul");
    CHECK(n >= 8 && matmul >= 0 && pl_op_index("nosuch") < 0 && pl_op_index(NULL) < 0, "ops");
    pl_op_info info;
    CHECK(pl_op_get(matmul, &info) == PL_OK && !strcmp(info.name, "matmul") && info.n_inputs == 2 && *info.shape_rule,
          "matmul schema");
    const char *names[64], *name = NULL;
    size_t k = 0;
    /* the weight operand takes quantized types; the output is f32 */
    CHECK(pl_op_operand(matmul, info.key_input, &name, names, 64, &k) == PL_OK && in_list(names, k, "q4_K") && *name,
          "matmul key input");
    CHECK(pl_op_operand(matmul, -1, &name, names, 64, &k) == PL_OK && !strcmp(name, "output") && k == 1 &&
              !strcmp(names[0], "f32"), "matmul output");
    CHECK(pl_op_operand(matmul, info.n_inputs, &name, names, 64, &k) == PL_ERR_INVALID_ARG, "input out of range");
    CHECK(pl_op_operand(matmul, -2, &name, names, 64, &k) == PL_ERR_INVALID_ARG, "input -2");
    CHECK(pl_op_get(n, &info) == PL_ERR_INVALID_ARG, "op out of range");
    /* every kernel of every backend takes a dtype its op's schema allows */
    for (int32_t op = 0; op < n; op++) {
        CHECK(pl_op_get(op, &info) == PL_OK && pl_op_index(info.name) == op, "op %d round trip", op);
        const char *allowed[256];
        size_t na = 0;
        for (int32_t in = -1; in < info.n_inputs; in++) {
            size_t m = 0;
            CHECK(pl_op_operand(op, in, NULL, allowed + na, 256 - na, &m) == PL_OK && na + m <= 256, "operand");
            na += m;
        }
        for (int32_t b = 0; b < pl_backend_count(); b++) {
            const char *d[64];
            size_t nd = 0;
            pl_backend_op_dtypes(b, op, d, 64, &nd);
            for (size_t j = 0; j < nd && j < 64; j++)
                CHECK(!strcmp(d[j], "any") || in_list(allowed, na, d[j]), "backend %d op %s: %s not in its schema",
                      b, info.name, d[j]);
        }
    }
}

int main(void) {
    test_template_params();
    test_template_fixture_cases();
    test_template_from_model();
    test_meta_str_long();
    test_rewind_and_kv();
    test_backends_and_devices();
    test_architectures();
    test_ops();
    return pl_test_summary("test_public_api");
}
