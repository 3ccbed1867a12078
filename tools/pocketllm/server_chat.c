/*
 * Chat prompts for `pocketllm serve`: render the messages with the model's
 * chat template, then tokenize so that message text can never turn into
 * special tokens.
 *
 * Tokenization scheme. llama.cpp tokenizes the whole rendered prompt with
 * special-token parsing on, which lets a user message containing
 * "<|im_end|>" forge turns. We want llama.cpp's exact tokens for ordinary
 * requests and plain text for hostile ones, so:
 *   1. R = render(messages); W = tokenize(R, parse_special).
 *   2. T = render(messages with every text replaced by a unique sentinel).
 *      Splitting T at the sentinels gives template parts and message parts;
 *      S = template parts tokenized with parse_special, message parts
 *      without (the message parts are the original texts).
 *   3. W is used when no message text contains special-token text (its
 *      tokenization with and without parse_special agree) and W's control
 *      tokens are exactly the template's (S's) — so no special token came
 *      from a message, not even one straddling a template/message boundary.
 *      Otherwise S is used. S can differ from W only in how BPE merges at the
 *      boundaries, and only for requests that tried to inject.
 *
 * The renderer: the model's own template through src/chat's Jinja renderer.
 * When the file has no template, or the renderer cannot parse it, a built-in
 * renderer with the ChatML / Qwen3 template's semantics is used (system,
 * user, assistant with <think> history handling, tool results,
 * enable_thinking), as llama.cpp falls back to ChatML.
 */
#include "server.h"
#include "chat/chat_template.h"
#include "gguf/gguf.h"
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- the built-in ChatML / Qwen3 renderer -----------------------------------*/

static const char *str_of(json_t *o, const char *key, size_t *n) {
    json_t *v = json_object_get(o, key);
    if (!json_is_string(v)) { *n = 0; return ""; }
    *n = json_string_length(v);
    return json_string_value(v);
}

static bool starts(const char *s, size_t n, const char *p) { size_t k = strlen(p); return n >= k && !memcmp(s, p, k); }
static bool ends(const char *s, size_t n, const char *p) { size_t k = strlen(p); return n >= k && !memcmp(s + n - k, p, k); }

static const char *find_last(const char *s, size_t n, const char *p) {
    size_t k = strlen(p);
    if (k > n) return NULL;
    for (size_t i = n - k + 1; i-- > 0;)
        if (!memcmp(s + i, p, k)) return s + i;
    return NULL;
}

static int add_str(pl_srv_buf *o, const char *s) { return pl_srv_buf_add(o, s, strlen(s)); }

static int render_builtin(json_t *ctx, pl_srv_buf *o) {
    json_t *msgs = json_object_get(ctx, "messages");
    size_t n = json_array_size(msgs), len;
    int rc = 0;
#define ROLE(i) json_string_value(json_object_get(json_array_get(msgs, (i)), "role"))
    json_t *tools = json_object_get(ctx, "tools");
    if (json_array_size(tools)) {
        /* Qwen3's tools preamble. */
        rc |= add_str(o, "<|im_start|>system\n");
        if (n && !strcmp(ROLE(0), "system")) {
            const char *c = str_of(json_array_get(msgs, 0), "content", &len);
            rc |= pl_srv_buf_add(o, c, len) | add_str(o, "\n\n");
        }
        rc |= add_str(o, "# Tools\n\nYou may call one or more functions to assist with the user query.\n\n"
                         "You are provided with function signatures within <tools></tools> XML tags:\n<tools>");
        size_t ti;
        json_t *tv;
        json_array_foreach(tools, ti, tv) {
            char *j = json_dumps(tv, JSON_COMPACT);
            rc |= add_str(o, "\n") | (j ? add_str(o, j) : -1);
            free(j);
        }
        rc |= add_str(o, "\n</tools>\n\nFor each function call, return a json object with function name and arguments "
                         "within <tool_call></tool_call> XML tags:\n<tool_call>\n{\"name\": <function-name>, "
                         "\"arguments\": <args-json-object>}\n</tool_call><|im_end|>\n");
    } else if (n && !strcmp(ROLE(0), "system")) {
        const char *c = str_of(json_array_get(msgs, 0), "content", &len);
        rc |= add_str(o, "<|im_start|>system\n") | pl_srv_buf_add(o, c, len) | add_str(o, "<|im_end|>\n");
    }
    /* The last real user query (tool results dressed as user turns do not count). */
    size_t last_query = n ? n - 1 : 0;
    for (size_t i = n; i-- > 0;) {
        const char *c = str_of(json_array_get(msgs, i), "content", &len);
        if (!strcmp(ROLE(i), "user") && !(starts(c, len, "<tool_response>") && ends(c, len, "</tool_response>"))) {
            last_query = i;
            break;
        }
    }
    for (size_t i = 0; i < n; i++) {
        json_t *m = json_array_get(msgs, i);
        const char *role = ROLE(i);
        const char *c = str_of(m, "content", &len);
        if (!strcmp(role, "user") || (!strcmp(role, "system") && i > 0)) {
            rc |= add_str(o, "<|im_start|>") | add_str(o, role) | add_str(o, "\n") | pl_srv_buf_add(o, c, len) |
                  add_str(o, "<|im_end|>\n");
        } else if (!strcmp(role, "assistant")) {
            const char *content = c, *reason = "";
            size_t clen = len, rlen = 0;
            json_t *rcv = json_object_get(m, "reasoning_content");
            if (json_is_string(rcv)) {
                reason = json_string_value(rcv);
                rlen = json_string_length(rcv);
            } else {
                const char *close_last = find_last(c, len, "</think>");
                if (close_last) {
                    content = close_last + 8;
                    clen = (size_t)(c + len - content);
                    while (clen && *content == '\n') { content++; clen--; }
                    const char *close_first = memmem(c, len, "</think>", 8);
                    size_t head = (size_t)(close_first - c);
                    while (head && c[head - 1] == '\n') head--;
                    const char *open = find_last(c, head, "<think>");
                    reason = open ? open + 7 : c;
                    rlen = (size_t)(c + head - reason);
                    while (rlen && *reason == '\n') { reason++; rlen--; }
                }
            }
            if (i > last_query && (i + 1 == n || rlen)) {
                while (rlen && *reason == '\n') { reason++; rlen--; }
                while (rlen && reason[rlen - 1] == '\n') rlen--;
                while (clen && *content == '\n') { content++; clen--; }
                rc |= add_str(o, "<|im_start|>assistant\n<think>\n") | pl_srv_buf_add(o, reason, rlen) |
                      add_str(o, "\n</think>\n\n") | pl_srv_buf_add(o, content, clen);
            } else {
                rc |= add_str(o, "<|im_start|>assistant\n") | pl_srv_buf_add(o, content, clen);
            }
            size_t ci;
            json_t *call;
            json_array_foreach(json_object_get(m, "tool_calls"), ci, call) {
                json_t *fn = json_object_get(call, "function");
                char *a = json_dumps(json_object_get(fn, "arguments"), JSON_COMPACT | JSON_ENCODE_ANY);
                char *nm = json_dumps(json_object_get(fn, "name"), JSON_ENCODE_ANY);
                rc |= add_str(o, (ci || clen) ? "\n<tool_call>\n{\"name\": " : "<tool_call>\n{\"name\": ") |
                      (nm ? add_str(o, nm) : -1) | add_str(o, ", \"arguments\": ") | (a ? add_str(o, a) : -1) |
                      add_str(o, "}\n</tool_call>");
                free(a);
                free(nm);
            }
            rc |= add_str(o, "<|im_end|>\n");
        } else if (!strcmp(role, "tool")) {
            if (i == 0 || strcmp(ROLE(i - 1), "tool")) rc |= add_str(o, "<|im_start|>user");
            rc |= add_str(o, "\n<tool_response>\n") | pl_srv_buf_add(o, c, len) | add_str(o, "\n</tool_response>");
            if (i + 1 == n || strcmp(ROLE(i + 1), "tool")) rc |= add_str(o, "<|im_end|>\n");
        }
    }
#undef ROLE
    if (json_is_true(json_object_get(ctx, "add_generation_prompt"))) {
        rc |= add_str(o, "<|im_start|>assistant\n");
        if (json_is_false(json_object_get(ctx, "enable_thinking"))) rc |= add_str(o, "<think>\n\n</think>\n\n");
    }
    return rc ? -1 : 0;
}

/* The one place that knows which renderer is used. */
static int render(pl_srv *s, json_t *ctx, pl_srv_buf *out, pl_srv_error *e) {
    const pl_chat_template *t = s->chat_impl;
    if (!t) {
        if (render_builtin(ctx, out)) return pl_srv_fail(e, 500, NULL, NULL, "out of memory while rendering the prompt");
        return 0;
    }
    /* Bodies are at most 8 MiB; a render far beyond that is a runaway. */
    pl_chat_template_options opts = {0};
    opts.max_output = 64u << 20;
    char *text = NULL;
    size_t n = 0;
    if (pl_chat_template_render(t, ctx, &opts, &text, &n) != PL_OK)
        /* Templates reject conversations they do not support (for example
         * roles that do not alternate): the client's problem, hence 400. */
        return pl_srv_fail(e, 400, "messages", "invalid_value", "the chat template rejected the messages: %s",
                           pl_last_error());
    int rc = pl_srv_buf_add(out, text, n);
    free(text);
    if (rc) return pl_srv_fail(e, 500, NULL, NULL, "out of memory while rendering the prompt");
    return 0;
}

/* ---- setup ------------------------------------------------------------------*/

static void token_text(pl_srv *s, const pl_gguf *g, const char *key, char *out, size_t cap) {
    int64_t id;
    size_t len = 0;
    out[0] = 0;
    if (!g || pl_gguf_get_i64(g, key, &id) != PL_OK || id < 0 || id >= s->n_vocab) return;
    if (pl_token_to_piece(s->model, (int32_t)id, true, out, cap - 1, &len) == PL_OK && len < cap) out[len] = 0;
    else out[0] = 0;
}

pl_status pl_srv_chat_init(pl_srv *s) {
    /* bos_token / eos_token for the template context: read the ids from the
     * file's metadata (the public API has no accessor for them). */
    pl_gguf *g = NULL;
    if (pl_gguf_open(s->cfg.model_path, &g) != PL_OK) g = NULL;
    token_text(s, g, "tokenizer.ggml.bos_token_id", s->bos_text, sizeof s->bos_text);
    token_text(s, g, "tokenizer.ggml.eos_token_id", s->eos_text, sizeof s->eos_text);
    /* The template as chat-template --model and run --chat read it: all of
     * its bytes, any length (a template with a NUL byte is refused). */
    const char *t = NULL;
    size_t tlen = 0;
    pl_chat_template *ct = NULL;
    pl_status tst = g ? pl_chat_template_from_gguf(g, &t, &tlen, &ct) : PL_ERR_NOT_FOUND;
    if (t && !(s->chat_template = malloc(tlen + 1))) {
        pl_chat_template_free(ct);
        pl_gguf_close(g);
        return PL_ERR_NO_MEMORY;
    }
    if (t) {
        memcpy(s->chat_template, t, tlen);
        s->chat_template[tlen] = 0;
    }
    pl_gguf_close(g);
    s->chat_impl = ct;
    if (tst != PL_OK && tst != PL_ERR_NOT_FOUND) {
        pl_srv_log("warning: cannot use the model's chat template (%s); prompts are rendered as ChatML",
                   pl_last_error());
    } else if (tst == PL_ERR_NOT_FOUND) {
        pl_srv_log("the model has no chat template; prompts are rendered as ChatML");
    }
    return PL_OK;
}

void pl_srv_chat_free(pl_srv *s) {
    pl_chat_template_free(s->chat_impl);
    s->chat_impl = NULL;
    free(s->chat_template);
    s->chat_template = NULL;
}

/* ---- tokenization -----------------------------------------------------------*/

typedef struct tok_vec { int32_t *p; size_t n, cap; } tok_vec;

static int tv_add(tok_vec *v, const int32_t *t, size_t n) {
    if (v->n + n > v->cap) {
        size_t cap = v->cap ? v->cap : 256;
        while (cap < v->n + n) cap *= 2;
        int32_t *q = realloc(v->p, cap * sizeof *q);
        if (!q) return -1;
        v->p = q;
        v->cap = cap;
    }
    if (n) memcpy(v->p + v->n, t, n * sizeof *t);
    v->n += n;
    return 0;
}

static int tokenize_into(pl_srv *s, tok_vec *v, const char *text, size_t len, bool special) {
    static const bool no_bos = false;
    int32_t *ids = NULL;
    size_t n = 0;
    if (pl_tokenize(s->model, text, len, special, &no_bos, &ids, &n) != PL_OK) return -1;
    int rc = tv_add(v, ids, n);
    pl_free(ids);
    return rc;
}

/* A control token renders as nothing unless special pieces are asked for. */
static bool is_control(pl_srv *s, int32_t id) {
    char a[8], b[8];
    size_t la = 0, lb = 0;
    pl_token_to_piece(s->model, id, false, a, sizeof a, &la);
    pl_token_to_piece(s->model, id, true, b, sizeof b, &lb);
    return la == 0 && lb > 0;
}

static bool same_controls(pl_srv *s, const tok_vec *x, const tok_vec *y) {
    size_t i = 0, j = 0;
    for (;;) {
        while (i < x->n && !is_control(s, x->p[i])) i++;
        while (j < y->n && !is_control(s, y->p[j])) j++;
        if (i == x->n || j == y->n) return i == x->n && j == y->n;
        if (x->p[i++] != y->p[j++]) return false;
    }
}

/* Does text contain special-token text (control or user-defined)? */
static bool has_special_text(pl_srv *s, const char *text, size_t len) {
    tok_vec a = {0}, b = {0};
    bool diff = true;
    if (!tokenize_into(s, &a, text, len, true) && !tokenize_into(s, &b, text, len, false))
        diff = a.n != b.n || (a.n && memcmp(a.p, b.p, a.n * sizeof *a.p));
    free(a.p);
    free(b.p);
    return diff;
}

#define SENT_OPEN "\xEE\x80\x80"   /* U+E000, private use */
#define SENT_CLOSE "\xEE\x80\x81"  /* U+E001 */

static json_t *make_ctx(pl_srv *s, json_t *messages, json_t *kwargs) {
    json_t *ctx = json_object();
    const char *k;
    json_t *v;
    if (kwargs) json_object_foreach(kwargs, k, v) if (strcmp(k, "messages")) json_object_set(ctx, k, v);
    json_object_set(ctx, "messages", messages);
    if (!json_object_get(ctx, "add_generation_prompt")) json_object_set_new(ctx, "add_generation_prompt", json_true());
    if (!json_object_get(ctx, "bos_token")) json_object_set_new(ctx, "bos_token", json_string(s->bos_text));
    if (!json_object_get(ctx, "eos_token")) json_object_set_new(ctx, "eos_token", json_string(s->eos_text));
    return ctx;
}

int pl_srv_chat_prompt(pl_srv *s, json_t *messages, json_t *kwargs, int32_t **ids, size_t *n_ids, bool *think_open,
                       pl_srv_error *e) {
    return pl_srv_chat_prompt_ex(s, messages, kwargs, ids, n_ids, think_open, NULL, e);
}

/* Tool definitions and tool-call arguments reach the template as structured
 * data, not as sentinel-masked texts, so they are tokenized with the template
 * text: refuse them when they hold special-token text (it would forge turns). */
static int check_tool_json(pl_srv *s, json_t *messages, json_t *kwargs, pl_srv_error *e) {
    json_t *tools = json_object_get(kwargs, "tools");
    char *t = tools ? json_dumps(tools, JSON_COMPACT) : NULL;
    bool bad = t && has_special_text(s, t, strlen(t));
    free(t);
    if (bad) return pl_srv_fail(e, 400, "tools", "invalid_value", "'tools' contains special-token text");
    size_t i;
    json_t *m;
    json_array_foreach(messages, i, m) {
        json_t *tc = json_object_get(m, "tool_calls");
        if (!tc) continue;
        t = json_dumps(tc, JSON_COMPACT);
        bad = t && has_special_text(s, t, strlen(t));
        free(t);
        if (bad)
            return pl_srv_fail(e, 400, "messages", "invalid_value", "messages[%zu].tool_calls contains special-token text",
                               i);
    }
    return 0;
}

int pl_srv_chat_prompt_ex(pl_srv *s, json_t *messages, json_t *kwargs, int32_t **ids, size_t *n_ids, bool *think_open,
                          const char *prefill, pl_srv_error *e) {
    static const char *fields[] = {"content", "reasoning_content"};
    int rc = -1;
    pl_srv_buf R = {0}, T = {0};
    tok_vec W = {0}, S = {0};
    json_t *texts = json_array();          /* the original message texts, by sentinel index */
    json_t *masked = json_deep_copy(messages);
    json_t *ctx = make_ctx(s, messages, kwargs), *mctx = NULL;
    /* Sentinels only have to be unlikely in template text (which kwargs can
     * reach); message texts never appear in T at all. */
    static atomic_uint counter;
    char nonce[40];
    snprintf(nonce, sizeof nonce, "%08x%08x", (unsigned)(uint64_t)(pl_srv_now() * 1e9), atomic_fetch_add(&counter, 1u));
    bool safe = true;

    if (!texts || !masked || !ctx) { pl_srv_fail(e, 500, NULL, NULL, "out of memory"); goto out; }
    size_t i;
    json_t *m;
    json_array_foreach(masked, i, m) {
        for (int f = 0; f < 2; f++) {
            json_t *v = json_object_get(m, fields[f]);
            if (!json_is_string(v)) continue;
            if (json_string_length(v) && has_special_text(s, json_string_value(v), json_string_length(v))) safe = false;
            char sent[96];
            snprintf(sent, sizeof sent, SENT_OPEN "%s-%zu" SENT_CLOSE, nonce, json_array_size(texts));
            json_array_append(texts, v);
            json_object_set_new(m, fields[f], json_string(sent));
        }
    }
    if (check_tool_json(s, messages, kwargs, e)) goto out;
    mctx = make_ctx(s, masked, kwargs);
    if (!mctx || render(s, ctx, &R, e) || render(s, mctx, &T, e)) goto out;
    /* tool_choice "required" / named: the assistant turn starts with the
     * call's opening (server_openai.c), so the model is steered into it. */
    if (prefill && (add_str(&R, prefill) || add_str(&T, prefill))) goto oom;

    /* S: split T at the sentinels. */
    char open[48];
    int olen = snprintf(open, sizeof open, SENT_OPEN "%s-", nonce);
    const char *p = T.p ? T.p : "", *end = p + T.n;
    while (p < end) {
        const char *hit = memmem(p, (size_t)(end - p), open, (size_t)olen);
        const char *close = hit ? memmem(hit, (size_t)(end - hit), SENT_CLOSE, 3) : NULL;
        size_t upto = hit && close ? (size_t)(hit - p) : (size_t)(end - p);
        if (upto && tokenize_into(s, &S, p, upto, true)) goto tok_fail;
        if (!hit || !close) break;
        size_t idx = strtoul(hit + olen, NULL, 10);
        json_t *txt = json_array_get(texts, idx);
        if (txt && tokenize_into(s, &S, json_string_value(txt), json_string_length(txt), false)) goto tok_fail;
        p = close + 3;
    }
    if (tokenize_into(s, &W, R.p ? R.p : "", R.n, true)) goto tok_fail;
    if (safe && !same_controls(s, &W, &S)) safe = false;
    if (!safe) pl_srv_log("message text contains special-token text: tokenized as plain text");

    tok_vec *use = safe ? &W : &S;
    /* BOS as the file asks (tokenizing "" with the default gives just it). */
    int32_t *bos = NULL;
    size_t nb = 0;
    if (pl_tokenize(s->model, "", 0, false, NULL, &bos, &nb) == PL_OK && nb == 1 && !(use->n && use->p[0] == bos[0])) {
        tok_vec t = {0};
        if (tv_add(&t, bos, 1) || tv_add(&t, use->p, use->n)) { free(t.p); pl_free(bos); goto oom; }
        free(use->p);
        *use = t;
    }
    pl_free(bos);
    /* The template opened a reasoning block for the model to continue. */
    size_t k = R.n;
    while (k && (R.p[k - 1] == '\n' || R.p[k - 1] == ' ')) k--;
    *think_open = k >= 7 && !memcmp(R.p + k - 7, "<think>", 7);
    *ids = use->p ? use->p : malloc(sizeof(int32_t));
    if (!*ids) goto oom;
    *n_ids = use->n;
    use->p = NULL;
    rc = 0;
    goto out;
tok_fail:
    pl_srv_fail(e, 400, "messages", NULL, "cannot tokenize the prompt: %s", pl_last_error());
    goto out;
oom:
    pl_srv_fail(e, 500, NULL, NULL, "out of memory");
out:
    pl_srv_buf_free(&R);
    pl_srv_buf_free(&T);
    free(W.p);
    free(S.p);
    json_decref(texts);
    json_decref(masked);
    json_decref(ctx);
    json_decref(mctx);
    return rc;
}
