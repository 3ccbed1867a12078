/*
 * The chat prompt of a model (chat_prompt.h): one renderer, one BOS rule, one
 * fallback, shared by `run --chat` and `serve`.
 *
 * Tokenization scheme. llama.cpp tokenizes the whole rendered prompt with
 * special-token parsing on, which lets a user message containing
 * "<|im_end|>" forge turns. We want llama.cpp's exact tokens for ordinary
 * conversations and plain text for hostile ones, so:
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
 *      boundaries, and only for conversations that tried to inject.
 *
 * The renderer: the model's own template through src/chat's Jinja renderer,
 * read from the file once (pl_chat_prompt_create). When the file has no
 * template, or the renderer cannot parse it, a built-in renderer with the
 * ChatML / Qwen3 template's semantics is used (system, user, assistant with
 * <think> history handling, tools, tool results, enable_thinking), as
 * llama.cpp falls back to ChatML.
 *
 * The template is read from the file with pl_inspect and rendered through
 * the public chat-template handle (pocketllm.h): this module, like every
 * tool, sees only the public header.
 */
#include "chat_prompt.h"
#include "server_text.h"
#include "cli_buf.h"
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

struct pl_chat_prompt {
    const pl_model *model;
    pl_chat_template *tpl;     /* NULL: the built-in renderer */
    char *tpl_text;            /* the template's text when tpl is used */
    char *notice;              /* why the built-in renderer is used; NULL when it is not */
    char bos_text[256], eos_text[256];
    bool add_bos;              /* the tokenizer adds a BOS (bos_id) */
    int32_t bos_id;
};

/* Errors: this module's own messages, or the library's when a library call
 * failed (see pl_chat_prompt_error). Per thread, as pl_last_error. */
static _Thread_local char cp_msg[1024];
static _Thread_local bool cp_own;

static void cp_clear(void) { cp_own = false; }

static pl_status cp_fail(pl_status st, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(cp_msg, sizeof cp_msg, fmt, ap);
    va_end(ap);
    cp_own = true;
    return st;
}

/* "prefix: <the library's message>" */
const char *pl_chat_prompt_error(void) { return cp_own ? cp_msg : pl_last_error(); }

static pl_status cp_fail_prefix(pl_status st, const char *prefix) {
    char why[sizeof cp_msg];
    snprintf(why, sizeof why, "%s", pl_chat_prompt_error());
    return cp_fail(st, "%s: %s", prefix, why);
}


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

/* ---- the model's template ---------------------------------------------------*/

/* The text of the vocabulary's BOS or EOS token ("" when it has none), as
 * pl_chat_apply_template gives templates bos_token / eos_token by default. */
static void special_text(const pl_model *m, const char *var, char *out, size_t cap) {
    char tpl[32], *text = NULL;
    size_t len = 0;
    snprintf(tpl, sizeof tpl, "{{ %s }}", var);
    out[0] = 0;
    if (pl_chat_apply_template(m, tpl, "{}", &text, &len) == PL_OK && len < cap) memcpy(out, text, len + 1);
    pl_free(text);
}

static pl_status template_from_text(pl_chat_prompt *p, const char *text, size_t len);

/* The file's template, the way chat-template --model reads it: all of its
 * bytes, any length (a template with a NUL byte is refused). Returns its
 * status; PL_ERR_NOT_FOUND when the file has none. */
static pl_status template_from_file(pl_chat_prompt *p, const char *model_path) {
    pl_inspect *f = NULL;
    if (!model_path || pl_inspect_open(model_path, &f) != PL_OK) return PL_ERR_NOT_FOUND;
    const char *t = NULL;
    size_t tlen = 0;
    pl_status st = pl_inspect_meta_str(f, "tokenizer.chat_template", -1, &t, &tlen);
    if (st == PL_OK) st = template_from_text(p, t, tlen);
    pl_inspect_close(f);
    return st;
}

static pl_status template_from_text(pl_chat_prompt *p, const char *text, size_t len) {
    if (!text) return PL_ERR_NOT_FOUND;
    pl_status st = pl_chat_template_parse(text, len, &p->tpl);
    if (st == PL_OK && !(p->tpl_text = malloc(len + 1))) st = PL_ERR_NO_MEMORY;
    if (st == PL_OK) {
        memcpy(p->tpl_text, text, len);
        p->tpl_text[len] = 0;
    }
    return st;
}

/* ctx holds every variable (messages, bos_token, ...): it goes to the
 * template as the params' context, the other params left alone. The
 * renderer's limits (output size, recursion, steps) are its defaults: 64 MiB
 * of output, far beyond an 8 MiB request body. */
static pl_status template_render(const pl_chat_prompt *p, json_t *ctx, pl_srv_buf *out) {
    char *js = json_dumps(ctx, JSON_COMPACT);
    if (!js) return cp_fail(PL_ERR_NO_MEMORY, "out of memory while rendering the prompt");
    pl_chat_template_params params = pl_chat_template_default_params();
    params.context = js;
    char *text = NULL;
    size_t n = 0;
    pl_status st = pl_chat_template_apply(p->tpl, &params, &text, &n);
    free(js);
    if (st != PL_OK) return st == PL_ERR_NO_MEMORY ? st : PL_ERR_INVALID_ARG;
    int rc = pl_srv_buf_add(out, text, n);
    pl_free(text);
    return rc ? cp_fail(PL_ERR_NO_MEMORY, "out of memory while rendering the prompt") : PL_OK;
}

/* What both constructors share: tst is the template's status. */
static pl_status finish_create(pl_chat_prompt *p, pl_status tst, pl_chat_prompt **out) {
    if (tst != PL_OK) {
        pl_chat_template_free(p->tpl);
        p->tpl = NULL;
        free(p->tpl_text);
        p->tpl_text = NULL;
    }
    char msg[sizeof cp_msg + 128];
    if (tst == PL_ERR_NOT_FOUND)
        snprintf(msg, sizeof msg, "the model has no chat template; prompts are rendered as ChatML");
    else if (tst != PL_OK)
        snprintf(msg, sizeof msg, "cannot use the model's chat template (%s); prompts are rendered as ChatML",
                 tst == PL_ERR_NO_MEMORY ? "out of memory" : pl_chat_prompt_error());
    if (tst == PL_ERR_NO_MEMORY || (tst != PL_OK && !(p->notice = strdup(msg)))) {
        pl_chat_prompt_free(p);
        return cp_fail(PL_ERR_NO_MEMORY, "out of memory");
    }
    special_text(p->model, "bos_token", p->bos_text, sizeof p->bos_text);
    special_text(p->model, "eos_token", p->eos_text, sizeof p->eos_text);
    /* The one BOS rule: the tokenizer adds a BOS when tokenizing "" as the
     * file says gives exactly one token. */
    int32_t *ids = NULL;
    size_t n = 0;
    if (pl_tokenize(p->model, "", 0, false, NULL, &ids, &n) == PL_OK && n == 1) {
        p->add_bos = true;
        p->bos_id = ids[0];
    }
    pl_free(ids);
    *out = p;
    return PL_OK;
}

static pl_chat_prompt *new_prompt(const pl_model *model) {
    pl_chat_prompt *p = calloc(1, sizeof *p);
    if (p) {
        p->model = model;
        p->bos_id = -1;
    }
    return p;
}

pl_status pl_chat_prompt_create(const pl_model *model, const char *model_path, pl_chat_prompt **out) {
    cp_clear();
    *out = NULL;
    pl_chat_prompt *p = new_prompt(model);
    if (!p) return cp_fail(PL_ERR_NO_MEMORY, "out of memory");
    return finish_create(p, template_from_file(p, model_path), out);
}

pl_status pl_chat_prompt_create_from_text(const pl_model *model, const char *text, size_t len, pl_chat_prompt **out) {
    cp_clear();
    *out = NULL;
    pl_chat_prompt *p = new_prompt(model);
    if (!p) return cp_fail(PL_ERR_NO_MEMORY, "out of memory");
    return finish_create(p, template_from_text(p, text, len), out);
}

void pl_chat_prompt_free(pl_chat_prompt *p) {
    if (!p) return;
    pl_chat_template_free(p->tpl);
    free(p->tpl_text);
    free(p->notice);
    free(p);
}

const char *pl_chat_prompt_notice(const pl_chat_prompt *p) { return p->notice; }
const char *pl_chat_prompt_template(const pl_chat_prompt *p) { return p->tpl ? p->tpl_text : NULL; }

/* ---- rendering ---------------------------------------------------------------*/

static json_t *make_ctx(const pl_chat_prompt *p, json_t *messages, json_t *kwargs) {
    json_t *ctx = json_object();
    const char *k;
    json_t *v;
    if (!ctx) return NULL;
    if (kwargs) json_object_foreach(kwargs, k, v) if (strcmp(k, "messages")) json_object_set(ctx, k, v);
    json_object_set(ctx, "messages", messages);
    if (!json_object_get(ctx, "add_generation_prompt")) json_object_set_new(ctx, "add_generation_prompt", json_true());
    if (!json_object_get(ctx, "bos_token")) json_object_set_new(ctx, "bos_token", json_string(p->bos_text));
    if (!json_object_get(ctx, "eos_token")) json_object_set_new(ctx, "eos_token", json_string(p->eos_text));
    return ctx;
}

/* The one place that knows which renderer is used. */
static pl_status render_ctx(const pl_chat_prompt *p, json_t *ctx, pl_srv_buf *out) {
    if (p->tpl) return template_render(p, ctx, out);
    if (render_builtin(ctx, out)) return cp_fail(PL_ERR_NO_MEMORY, "out of memory while rendering the prompt");
    return PL_OK;
}

pl_status pl_chat_prompt_render(const pl_chat_prompt *p, json_t *messages, json_t *kwargs, char **text, size_t *len) {
    cp_clear();
    *text = NULL;
    *len = 0;
    if (!json_is_array(messages)) return cp_fail(PL_ERR_INVALID_ARG, "messages must be an array");
    json_t *ctx = make_ctx(p, messages, kwargs);
    pl_srv_buf b = {0};
    pl_status st = ctx ? render_ctx(p, ctx, &b) : cp_fail(PL_ERR_NO_MEMORY, "out of memory");
    json_decref(ctx);
    if (st == PL_OK && !b.p && pl_srv_buf_add(&b, "", 0)) st = cp_fail(PL_ERR_NO_MEMORY, "out of memory");
    if (st != PL_OK) {
        pl_srv_buf_free(&b);
        return st;
    }
    *text = b.p;
    *len = b.n;
    return PL_OK;
}

/* ---- tokenization -----------------------------------------------------------*/

static int tokenize_into(const pl_chat_prompt *p, pl_cli_tokens *v, const char *text, size_t len, bool special) {
    static const bool no_bos = false;
    int32_t *ids = NULL;
    size_t n = 0;
    if (pl_tokenize(p->model, text, len, special, &no_bos, &ids, &n) != PL_OK) return -1;
    int rc = pl_cli_tokens_add(v, ids, n);
    pl_free(ids);
    return rc;
}

/* A control token renders as nothing unless special pieces are asked for. */
static bool is_control(const pl_chat_prompt *p, int32_t id) {
    char a[8], b[8];
    size_t la = 0, lb = 0;
    pl_token_to_piece(p->model, id, false, a, sizeof a, &la);
    pl_token_to_piece(p->model, id, true, b, sizeof b, &lb);
    return la == 0 && lb > 0;
}

static bool same_controls(const pl_chat_prompt *p, const pl_cli_tokens *x, const pl_cli_tokens *y) {
    size_t i = 0, j = 0;
    for (;;) {
        while (i < x->n && !is_control(p, x->p[i])) i++;
        while (j < y->n && !is_control(p, y->p[j])) j++;
        if (i == x->n || j == y->n) return i == x->n && j == y->n;
        if (x->p[i++] != y->p[j++]) return false;
    }
}

/* Does text contain special-token text (control or user-defined)? */
static bool has_special_text(const pl_chat_prompt *p, const char *text, size_t len) {
    pl_cli_tokens a = {0}, b = {0};
    bool diff = true;
    if (!tokenize_into(p, &a, text, len, true) && !tokenize_into(p, &b, text, len, false))
        diff = a.n != b.n || (a.n && memcmp(a.p, b.p, a.n * sizeof *a.p));
    free(a.p);
    free(b.p);
    return diff;
}

/* Tool definitions and tool-call arguments reach the template as structured
 * data, not as sentinel-masked texts, so they are tokenized with the template
 * text: refuse them when they hold special-token text (it would forge turns). */
static pl_status check_tool_json(const pl_chat_prompt *p, json_t *messages, json_t *kwargs, const char **param) {
    json_t *tools = kwargs ? json_object_get(kwargs, "tools") : NULL;
    char *t = tools ? json_dumps(tools, JSON_COMPACT) : NULL;
    bool bad = t && has_special_text(p, t, strlen(t));
    free(t);
    if (bad) {
        *param = "tools";
        return cp_fail(PL_ERR_INVALID_ARG, "'tools' contains special-token text");
    }
    size_t i;
    json_t *m;
    json_array_foreach(messages, i, m) {
        json_t *tc = json_object_get(m, "tool_calls");
        if (!tc) continue;
        t = json_dumps(tc, JSON_COMPACT);
        bad = t && has_special_text(p, t, strlen(t));
        free(t);
        if (bad) {
            *param = "messages";
            return cp_fail(PL_ERR_INVALID_ARG, "messages[%zu].tool_calls contains special-token text", i);
        }
    }
    return PL_OK;
}

#define SENT_OPEN "\xEE\x80\x80"   /* U+E000, private use */
#define SENT_CLOSE "\xEE\x80\x81"  /* U+E001 */

pl_status pl_chat_prompt_tokenize(const pl_chat_prompt *p, json_t *messages, json_t *kwargs, const char *prefill,
                                  pl_chat_prompt_tokens *out, const char **param) {
    cp_clear();
    static const char *fields[] = {"content", "reasoning_content"};
    pl_status st = PL_ERR_NO_MEMORY;
    const char *blame = NULL;
    memset(out, 0, sizeof *out);
    if (!json_is_array(messages)) {
        *param = "messages";
        return cp_fail(PL_ERR_INVALID_ARG, "messages must be an array");
    }
    pl_srv_buf R = {0}, T = {0};
    pl_cli_tokens W = {0}, S = {0};
    json_t *texts = json_array();          /* the original message texts, by sentinel index */
    json_t *masked = json_deep_copy(messages);
    json_t *ctx = make_ctx(p, messages, kwargs), *mctx = NULL;
    /* Sentinels only have to be unlikely in template text (which kwargs can
     * reach); message texts never appear in T at all. */
    static atomic_uint counter;
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    char nonce[40];
    snprintf(nonce, sizeof nonce, "%08x%08x", (unsigned)ts.tv_nsec ^ (unsigned)ts.tv_sec, atomic_fetch_add(&counter, 1u));
    bool safe = true;

    if (!texts || !masked || !ctx) goto oom;
    size_t i;
    json_t *m;
    json_array_foreach(masked, i, m) {
        for (int f = 0; f < 2; f++) {
            json_t *v = json_object_get(m, fields[f]);
            if (!json_is_string(v)) continue;
            if (json_string_length(v) && has_special_text(p, json_string_value(v), json_string_length(v))) safe = false;
            char sent[96];
            snprintf(sent, sizeof sent, SENT_OPEN "%s-%zu" SENT_CLOSE, nonce, json_array_size(texts));
            json_array_append(texts, v);
            json_object_set_new(m, fields[f], json_string(sent));
        }
    }
    if ((st = check_tool_json(p, messages, kwargs, &blame)) != PL_OK) goto out;
    if (!(mctx = make_ctx(p, masked, kwargs))) goto oom;
    if ((st = render_ctx(p, ctx, &R)) != PL_OK || (st = render_ctx(p, mctx, &T)) != PL_OK) {
        if (st == PL_ERR_INVALID_ARG) {
            blame = "messages";
            cp_fail_prefix(st, "the chat template rejected the messages");
        }
        goto out;
    }
    if (prefill && (pl_srv_buf_add(&R, prefill, strlen(prefill)) || pl_srv_buf_add(&T, prefill, strlen(prefill))))
        goto oom;

    /* S: split T at the sentinels. */
    char open[48];
    int olen = snprintf(open, sizeof open, SENT_OPEN "%s-", nonce);
    const char *s = T.p ? T.p : "", *end = s + T.n;
    while (s < end) {
        const char *hit = memmem(s, (size_t)(end - s), open, (size_t)olen);
        const char *close = hit ? memmem(hit, (size_t)(end - hit), SENT_CLOSE, 3) : NULL;
        size_t upto = hit && close ? (size_t)(hit - s) : (size_t)(end - s);
        if (upto && tokenize_into(p, &S, s, upto, true)) goto tok_fail;
        if (!hit || !close) break;
        size_t idx = strtoul(hit + olen, NULL, 10);
        json_t *txt = json_array_get(texts, idx);
        if (txt && tokenize_into(p, &S, json_string_value(txt), json_string_length(txt), false)) goto tok_fail;
        s = close + 3;
    }
    if (tokenize_into(p, &W, R.p ? R.p : "", R.n, true)) goto tok_fail;
    if (safe && !same_controls(p, &W, &S)) safe = false;

    pl_cli_tokens *use = safe ? &W : &S;
    /* The BOS rule: one BOS first when the tokenizer adds one (a BOS the
     * template rendered counts). */
    if (p->add_bos && !(use->n && use->p[0] == p->bos_id)) {
        pl_cli_tokens t = {0};
        if (pl_cli_tokens_add(&t, &p->bos_id, 1) || pl_cli_tokens_add(&t, use->p, use->n)) { free(t.p); goto oom; }
        free(use->p);
        *use = t;
    }
    /* The template opened a reasoning block for the model to continue. */
    size_t k = R.n;
    while (k && (R.p[k - 1] == '\n' || R.p[k - 1] == ' ')) k--;
    out->think_open = k >= 7 && !memcmp(R.p + k - 7, "<think>", 7);
    out->plain_text = !safe;
    out->ids = use->p ? use->p : malloc(sizeof(int32_t));
    if (!out->ids) goto oom;
    out->n = use->n;
    use->p = NULL;
    st = PL_OK;
    goto out;
tok_fail:
    blame = "messages";
    st = cp_fail_prefix(PL_ERR_FORMAT, "cannot tokenize the prompt");
    goto out;
oom:
    blame = NULL;
    st = cp_fail(PL_ERR_NO_MEMORY, "out of memory");
out:
    *param = blame;
    pl_srv_buf_free(&R);
    pl_srv_buf_free(&T);
    free(W.p);
    free(S.p);
    json_decref(texts);
    json_decref(masked);
    json_decref(ctx);
    json_decref(mctx);
    return st;
}
