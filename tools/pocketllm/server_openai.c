/*
 * OpenAI protocol for `pocketllm serve`: request validation (types, ranges,
 * fields the engine cannot honour) and the JSON of responses and streamed
 * chunks. Every problem becomes an error in OpenAI's shape naming the field;
 * nothing here trusts the body.
 */
#include "server.h"
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

int pl_srv_fail(pl_srv_error *e, int http, const char *param, const char *code, const char *fmt, ...) {
    e->http = http;
    e->type = http >= 500 ? "server_error" : "invalid_request_error";
    snprintf(e->param, sizeof e->param, "%s", param ? param : "");
    snprintf(e->code, sizeof e->code, "%s", code ? code : "");
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(e->message, sizeof e->message, fmt, ap);
    va_end(ap);
    return -1;
}

/* A JSON string from bytes that may not be valid UTF-8 (jansson rejects
 * those): invalid bytes become U+FFFD. */
static json_t *jstr(const char *s, size_t n) {
    json_t *v = json_stringn(s ? s : "", s ? n : 0);
    if (v) return v;
    pl_srv_buf b = {0};
    if (pl_srv_utf8_sanitize(&b, s, n)) { pl_srv_buf_free(&b); return json_string(""); }
    v = json_stringn(b.p ? b.p : "", b.n);
    pl_srv_buf_free(&b);
    return v ? v : json_string("");
}

json_t *pl_srv_error_json(const pl_srv_error *e) {
    json_t *err = json_pack("{s:o, s:s, s:o, s:o}", "message", jstr(e->message, strlen(e->message)), "type",
                            e->type ? e->type : "invalid_request_error", "param",
                            e->param[0] ? json_string(e->param) : json_null(), "code",
                            e->code[0] ? json_string(e->code) : json_null());
    return json_pack("{s:o}", "error", err ? err : json_object());
}

/* The decoded length of the longest string literal in a JSON text, computed
 * without building anything. Lenient: malformed input gives some length and
 * is left for the parser to refuse. */
static size_t longest_json_string(const char *p, size_t n) {
    size_t longest = 0, i = 0;
    while (i < n) {
        if (p[i++] != '"') continue;
        size_t len = 0;
        while (i < n && p[i] != '"') {
            if (p[i] != '\\') { len++; i++; continue; }
            if (i + 1 < n && p[i + 1] == 'u' && i + 6 <= n) {
                unsigned cp = (unsigned)strtoul((char[5]){p[i + 2], p[i + 3], p[i + 4], p[i + 5], 0}, NULL, 16);
                /* UTF-8 length; a surrogate pair is 12 bytes of escapes for 4 of text */
                len += cp < 0x80 ? 1 : cp < 0x800 ? 2 : cp >= 0xD800 && cp <= 0xDFFF ? 2 : 3;
                i += 6;
            } else {
                len++;
                i += 2;
            }
        }
        i++;
        if (len > longest) longest = len;
    }
    return longest;
}

/* jansson's error texts are written for programmers: some name its flags
 * ("\u0000 is not allowed without JSON_ALLOW_NUL") or its limits. Those get
 * a message in the API's terms; the others ("'}' expected near ',') describe
 * the client's JSON well enough and are kept. */
json_t *pl_srv_body_json(pl_srv *s, const char *p, size_t n, pl_srv_error *e) {
    /* No text of a request may be longer than 4x what the context can hold
     * (the most check_message_bytes lets through; any one text that long
     * cannot fit the context either). Parsing a body costs about twice its
     * size on top of it (jansson's token buffer and the decoded strings), so
     * a body holding a string that is certainly too long is refused before
     * it is parsed. */
    if (s && s->model && n / 4 > pl_srv_prompt_byte_bound(s)) {
        size_t longest = longest_json_string(p, n), cap = 4 * pl_srv_prompt_byte_bound(s);
        if (longest > cap) {
            pl_srv_fail(e, 400, NULL, "context_length_exceeded",
                        "This model's maximum context length is %d tokens, but the request holds a text of %zu "
                        "bytes: more than %d tokens (no token is longer than %zu bytes)",
                        s->n_ctx, longest, s->n_ctx, cap / 4 / (size_t)s->n_ctx);
            return NULL;
        }
    }
    json_error_t je;
    json_t *j = json_loadb(p ? p : "", p ? n : 0, 0, &je);
    if (!j) {
        const char *why = NULL;
        switch (json_error_code(&je)) {
        case json_error_null_character: why = "strings must not contain NUL characters (\\u0000)"; break;
        case json_error_null_byte_in_key: why = "object keys must not contain NUL characters (\\u0000)"; break;
        case json_error_stack_overflow: why = "the JSON is nested too deeply"; break;
        case json_error_invalid_utf8: why = "the body is not valid UTF-8"; break;
        case json_error_out_of_memory:
            pl_srv_fail(e, 500, NULL, NULL, "out of memory while reading the request body");
            return NULL;
        case json_error_duplicate_key: why = "an object has the same key twice"; break;
        case json_error_numeric_overflow: why = "a number is too large"; break;
        default: break;
        }
        if (why)
            pl_srv_fail(e, 400, NULL, "invalid_json", "invalid JSON body: %s (line %d, column %d)", why, je.line,
                        je.column);
        else
            pl_srv_fail(e, 400, NULL, "invalid_json", "invalid JSON body: %s (line %d, column %d)", je.text, je.line,
                        je.column);
        return NULL;
    }
    if (!json_is_object(j)) {
        json_decref(j);
        pl_srv_fail(e, 400, NULL, "invalid_type", "the request body must be a JSON object");
        return NULL;
    }
    return j;
}

/* Each token stands for the bytes of its text (the gpt2 byte-level
 * tokenizer neither drops nor merges input bytes of valid UTF-8, which every
 * JSON string is, and special tokens match their own text), so a text of B
 * bytes has at least B / max_piece tokens. fuzz_request checks this.
 * Measured once per model: one pass over the vocabulary. */
size_t pl_srv_prompt_byte_bound(pl_srv *s) {
    size_t m = atomic_load(&s->max_piece);
    if (!m) {
        char buf[8];
        for (int32_t id = 0; id < s->n_vocab; id++) {
            size_t len = 0;
            pl_token_to_piece(s->model, id, true, buf, sizeof buf, &len); /* len: the size it needs */
            if (len > m) m = len;
        }
        if (m < 1) m = 1;
        atomic_store(&s->max_piece, m); /* racing threads store the same value */
    }
    return (size_t)(s->n_ctx > 0 ? s->n_ctx : 0) * m;
}

/* A text that cannot fit the context: refused before tokenizing it, which
 * for megabytes of text costs hundreds of megabytes (ids and the tokenizer's
 * work arrays) and seconds. Never refuses a text that could fit. */
static int check_text_bytes(pl_srv *s, size_t bytes, const char *param, pl_srv_error *e) {
    size_t bound = pl_srv_prompt_byte_bound(s);
    if (bytes <= bound) return 0;
    return pl_srv_fail(e, 400, param, "context_length_exceeded",
                       "This model's maximum context length is %d tokens, but the prompt is %zu bytes long: more "
                       "than %d tokens (no token is longer than %zu bytes)",
                       s->n_ctx, bytes, s->n_ctx, bound / (s->n_ctx > 0 ? (size_t)s->n_ctx : 1));
}

/* Ids and default seeds: a splitmix64 stream seeded once per process. */
static uint64_t srv_random(void) {
    static _Atomic uint64_t state;
    static atomic_bool seeded;
    if (!atomic_exchange(&seeded, true)) {
        struct timespec ts;
        clock_gettime(CLOCK_REALTIME, &ts);
        atomic_store(&state, (uint64_t)ts.tv_nsec * 0x9E3779B97F4A7C15ull ^ (uint64_t)ts.tv_sec ^
                                 ((uint64_t)getpid() << 32));
    }
    uint64_t z = atomic_fetch_add(&state, 0x9E3779B97F4A7C15ull) + 0x9E3779B97F4A7C15ull;
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

/* ---- typed field access -----------------------------------------------------*/

static bool absent(json_t *v) { return !v || json_is_null(v); }

static int get_number(json_t *v, const char *name, double lo, double hi, double *out, pl_srv_error *e) {
    if (!json_is_number(v)) return pl_srv_fail(e, 400, name, "invalid_type", "'%s' must be a number", name);
    double x = json_number_value(v);
    if (!isfinite(x) || x < lo || x > hi)
        return pl_srv_fail(e, 400, name, "invalid_value", "'%s' must be between %g and %g, got %g", name, lo, hi, x);
    *out = x;
    return 0;
}

static int get_int(json_t *v, const char *name, long long lo, long long hi, long long *out, pl_srv_error *e) {
    long long x;
    if (json_is_integer(v)) x = json_integer_value(v);
    else if (json_is_real(v) && json_real_value(v) == floor(json_real_value(v)) && fabs(json_real_value(v)) < 9e15)
        x = (long long)json_real_value(v); /* 10.0 from clients that only have doubles */
    else return pl_srv_fail(e, 400, name, "invalid_type", "'%s' must be an integer", name);
    if (x < lo || x > hi)
        return pl_srv_fail(e, 400, name, "invalid_value", "'%s' must be between %lld and %lld, got %lld", name, lo, hi, x);
    *out = x;
    return 0;
}

static int get_bool(json_t *v, const char *name, bool *out, pl_srv_error *e) {
    if (!json_is_boolean(v)) return pl_srv_fail(e, 400, name, "invalid_type", "'%s' must be a boolean", name);
    *out = json_is_true(v);
    return 0;
}

static int unsupported(pl_srv_error *e, const char *name, const char *why) {
    return pl_srv_fail(e, 400, name, "unsupported_parameter", "'%s' is not supported by this server%s%s", name,
                       why ? ": " : "", why ? why : "");
}

/* Fields the engine cannot back: 400 naming the field. Neutral values
 * (false, 0, empty, "text", "none") are accepted, as they ask for nothing. */
static int check_unsupported(json_t *body, pl_srv_error *e) {
    json_t *v;
    /* response_format, grammar, json_schema: parse_structured(). tools /
     * tool_choice: parse_tools() (chat only; completions have no tools). */
    if (!absent(v = json_object_get(body, "functions"))) return unsupported(e, "functions", NULL);
    if (!absent(v = json_object_get(body, "function_call"))) return unsupported(e, "function_call", NULL);
    if (!absent(v = json_object_get(body, "echo"))) {
        bool b = false;
        if (get_bool(v, "echo", &b, e)) return -1;
        if (b) return unsupported(e, "echo", NULL);
    }
    if (!absent(v = json_object_get(body, "suffix"))) {
        if (!json_is_string(v)) return pl_srv_fail(e, 400, "suffix", "invalid_type", "'suffix' must be a string");
        if (json_string_length(v) > 0) return unsupported(e, "suffix", "insertion is not implemented");
    }
    if (!absent(v = json_object_get(body, "best_of"))) {
        long long b;
        if (get_int(v, "best_of", 1, 1000, &b, e)) return -1;
        if (b != 1) return unsupported(e, "best_of", "only 1 is accepted");
    }
    return 0;
}

/* Logs fields this server does not know (they are ignored). */
static void log_unknown(json_t *body, pl_srv_kind kind) {
    static const char *common[] = {"model", "stream", "stream_options", "max_tokens", "max_completion_tokens",
                                   "temperature", "top_p", "top_k", "min_p", "seed", "stop", "n", "user",
                                   "logprobs", "top_logprobs", "presence_penalty", "frequency_penalty",
                                   "logit_bias", "repetition_penalty", "repeat_last_n", "response_format", "tools", "tool_choice", "functions",
                                   "function_call", "echo", "suffix", "best_of", "return_tokens", "store",
                                   "cache_prompt", "metadata", "service_tier", "parallel_tool_calls", "grammar",
                                   "json_schema", NULL};
    static const char *chat[] = {"messages", "chat_template_kwargs", "reasoning_effort", "reasoning_format", NULL};
    static const char *compl[] = {"prompt", NULL};
    const char *key;
    json_t *v;
    json_object_foreach(body, key, v) {
        bool known = false;
        for (int i = 0; common[i] && !known; i++) known = !strcmp(key, common[i]);
        const char **extra = kind == PL_SRV_CHAT ? chat : compl;
        for (int i = 0; extra[i] && !known; i++) known = !strcmp(key, extra[i]);
        if (!known) {
            char safe[64];
            size_t n = 0;
            for (const char *p = key; *p && n + 1 < sizeof safe; p++)
                safe[n++] = (*p >= 0x20 && *p < 0x7f) ? *p : '?';
            safe[n] = 0;
            pl_srv_log("ignoring unknown field '%s'", safe);
        }
    }
}

/* ---- tools (issue 16) --------------------------------------------------------*/

/* Validates tools, tool_choice and parallel_tool_calls; fills r->tool_names
 * and r->tool_prefill and hands the tools to the chat template (in kwargs).
 * tool_choice "none" leaves the tools out of the prompt altogether (the model
 * is not told about functions it may not call) and parses nothing. */
static int parse_tools(pl_srv *s, json_t *body, json_t *kwargs, pl_srv_request *r, pl_srv_error *e) {
    json_t *tools = json_object_get(body, "tools"), *choice = json_object_get(body, "tool_choice");
    json_t *v = json_object_get(body, "parallel_tool_calls");
    r->tool_names[0] = 0;
    r->tool_prefill[0] = 0;
    r->parallel_tool_calls = true;
    if (!absent(v) && get_bool(v, "parallel_tool_calls", &r->parallel_tool_calls, e)) return -1;
    if (!absent(tools) && !json_is_array(tools))
        return pl_srv_fail(e, 400, "tools", "invalid_type", "'tools' must be an array");
    size_t n_tools = absent(tools) ? 0 : json_array_size(tools), used = 0, i;
    json_t *t;
    json_array_foreach(absent(tools) ? NULL : tools, i, t) {
        json_t *type = json_object_get(t, "type"), *fn = json_object_get(t, "function");
        json_t *name = json_object_get(fn, "name"), *params = json_object_get(fn, "parameters");
        if (!json_is_object(t) || (!absent(type) && !(json_is_string(type) && !strcmp(json_string_value(type), "function"))))
            return pl_srv_fail(e, 400, "tools", "invalid_value", "tools[%zu] must be an object with type \"function\"", i);
        if (!json_is_object(fn))
            return pl_srv_fail(e, 400, "tools", "invalid_type", "tools[%zu].function must be an object", i);
        size_t len = json_is_string(name) ? json_string_length(name) : 0;
        if (!len) return pl_srv_fail(e, 400, "tools", "missing_required_parameter", "tools[%zu].function.name must be a non-empty string", i);
        /* OpenAI's rule; it also keeps names printable and the list bounded. */
        const char *nm = json_string_value(name);
        bool ok = len <= 64;
        for (size_t k = 0; ok && k < len; k++)
            ok = (nm[k] >= 'a' && nm[k] <= 'z') || (nm[k] >= 'A' && nm[k] <= 'Z') || (nm[k] >= '0' && nm[k] <= '9') ||
                 nm[k] == '_' || nm[k] == '-' || nm[k] == '.';
        if (!ok)
            return pl_srv_fail(e, 400, "tools", "invalid_value",
                               "tools[%zu].function.name must be 1 to 64 of a-z, A-Z, 0-9, _, - and .", i);
        if (!absent(params) && !json_is_object(params))
            return pl_srv_fail(e, 400, "tools", "invalid_type", "tools[%zu].function.parameters must be a JSON schema object", i);
        if (used + len + 2 > sizeof r->tool_names)
            return pl_srv_fail(e, 400, "tools", "invalid_value", "too many tools (%zu)", n_tools);
        memcpy(r->tool_names + used, nm, len + 1);
        used += len + 1;
        r->tool_names[used] = 0;
    }
    const char *mode = "auto", *named = NULL;
    if (!absent(choice)) {
        json_t *cf = json_object_get(json_object_get(choice, "function"), "name");
        if (json_is_string(choice)) {
            mode = json_string_value(choice);
            if (strcmp(mode, "auto") && strcmp(mode, "none") && strcmp(mode, "required"))
                return pl_srv_fail(e, 400, "tool_choice", "invalid_value",
                                   "'tool_choice' must be \"none\", \"auto\", \"required\" or a function object");
        } else if (json_is_object(choice) && json_is_string(cf)) {
            mode = "named";
            named = json_string_value(cf);
            if (!pl_srv_tools_known(r->tool_names, named, json_string_length(cf)))
                return pl_srv_fail(e, 400, "tool_choice", "invalid_value", "'tool_choice' names an unknown function");
        } else {
            return pl_srv_fail(e, 400, "tool_choice", "invalid_type",
                               "'tool_choice' must be a string or {\"type\": \"function\", \"function\": {\"name\": ...}}");
        }
        if (!n_tools && strcmp(mode, "none") && strcmp(mode, "auto"))
            return pl_srv_fail(e, 400, "tool_choice", "invalid_value", "'tool_choice' %s needs 'tools'", mode);
    }
    if (!n_tools || !strcmp(mode, "none")) {
        r->tool_names[0] = 0;
        return 0;
    }
    json_object_set(kwargs, "tools", tools);
    if (!named && strcmp(mode, "required")) return 0;
    /* "required" / named: a grammar built from the tools' parameter schemas
     * forces Hermes calls (server_tools.h), so the call is well-formed and
     * its arguments match the schema. With a template that teaches that form
     * (the Qwen ones print "<tool_call>") the assistant turn also starts with
     * the call's opening as prompt text: the model is not made to spell out
     * what is certain, and the grammar is advanced past it. */
    char *gbnf = NULL, why[400];
    if (pl_srv_tools_grammar(tools, named, r->parallel_tool_calls, &gbnf, why, sizeof why)) {
        if (!strcmp(why, "out of memory")) return pl_srv_fail(e, 500, NULL, NULL, "out of memory");
        return pl_srv_fail(e, 400, "tools", "invalid_value", "cannot constrain the tool call: %s", why);
    }
    pl_status st = pl_grammar_from_gbnf(s->model, gbnf, strlen(gbnf), &r->grammar);
    free(gbnf);
    if (st != PL_OK)
        return pl_srv_fail(e, st == PL_ERR_NO_MEMORY ? 500 : 400, "tools", NULL, "cannot constrain the tool call: %s",
                           pl_last_error());
    r->tool_grammar = true;
    bool hermes = !s->chat_template || strstr(s->chat_template, "<tool_call>");
    if (hermes && named) snprintf(r->tool_prefill, sizeof r->tool_prefill, "<tool_call>\n{\"name\": \"%s\"", named);
    else if (hermes) snprintf(r->tool_prefill, sizeof r->tool_prefill, "<tool_call>\n{\"name\": \"");
    return 0;
}

/* ---- structured output (issue 16) ------------------------------------------------*/

/* response_format json_object / json_schema, and llama-server's "grammar"
 * (GBNF text) and "json_schema" (a schema): at most one of them, compiled
 * into r->grammar now, on the HTTP thread, so a bad grammar or a schema
 * keyword the compiler cannot enforce is a 400 naming the field. The
 * compiler enforces every schema strictly, so "strict" changes nothing. */
static int parse_structured(pl_srv *s, json_t *body, pl_srv_request *r, pl_srv_error *e) {
    json_t *rf = json_object_get(body, "response_format"), *gr = json_object_get(body, "grammar");
    json_t *js = json_object_get(body, "json_schema"), *schema = NULL;
    const char *param = NULL, *gbnf = NULL;
    bool any_object = false;
    if (!absent(rf)) {
        json_t *t = json_is_object(rf) ? json_object_get(rf, "type") : NULL;
        if (!json_is_object(rf) || !json_is_string(t))
            return pl_srv_fail(e, 400, "response_format", "invalid_type",
                               "'response_format' must be an object with a string 'type'");
        const char *ty = json_string_value(t);
        if (!strcmp(ty, "json_object")) {
            param = "response_format";
            /* llama-server's extension: a schema next to json_object */
            schema = json_object_get(rf, "schema");
            if (!absent(schema) && !json_is_object(schema))
                return pl_srv_fail(e, 400, "response_format", "invalid_type",
                                   "'response_format.schema' must be a JSON schema object");
            any_object = absent(schema);
        } else if (!strcmp(ty, "json_schema")) {
            param = "response_format";
            json_t *j = json_object_get(rf, "json_schema");
            if (!json_is_object(j))
                return pl_srv_fail(e, 400, "response_format", "invalid_type",
                                   "'response_format.json_schema' must be an object {\"name\", \"schema\", \"strict\"}");
            json_t *nm = json_object_get(j, "name"), *strict = json_object_get(j, "strict");
            if (!absent(nm) && !json_is_string(nm))
                return pl_srv_fail(e, 400, "response_format", "invalid_type",
                                   "'response_format.json_schema.name' must be a string");
            if (!absent(strict) && !json_is_boolean(strict))
                return pl_srv_fail(e, 400, "response_format", "invalid_type",
                                   "'response_format.json_schema.strict' must be a boolean");
            schema = json_object_get(j, "schema");
            if (absent(schema)) schema = NULL;  /* no schema: any JSON value */
            else if (!json_is_object(schema) && !json_is_boolean(schema))
                return pl_srv_fail(e, 400, "response_format", "invalid_type",
                                   "'response_format.json_schema.schema' must be a JSON schema object");
        } else if (strcmp(ty, "text")) {
            return pl_srv_fail(e, 400, "response_format", "invalid_value",
                               "'response_format.type' must be \"text\", \"json_object\" or \"json_schema\"");
        }
    }
    if (!absent(gr)) {
        if (!json_is_string(gr)) return pl_srv_fail(e, 400, "grammar", "invalid_type", "'grammar' must be a string (GBNF)");
        if (json_string_length(gr)) {   /* "" asks for nothing, as in llama-server */
            if (param)
                return pl_srv_fail(e, 400, "grammar", "invalid_value",
                                   "'grammar' cannot be combined with a JSON 'response_format': give one of them");
            param = "grammar";
            gbnf = json_string_value(gr);
        }
    }
    if (!absent(js)) {
        if (!json_is_object(js) && !json_is_boolean(js))
            return pl_srv_fail(e, 400, "json_schema", "invalid_type", "'json_schema' must be a JSON schema object");
        if (param)
            return pl_srv_fail(e, 400, "json_schema", "invalid_value",
                               "'json_schema' cannot be combined with '%s': give one of them", param);
        param = "json_schema";
        schema = js;
    }
    if (!param) return 0;
    if (r->grammar)
        return pl_srv_fail(e, 400, param, "invalid_value",
                           "'%s' cannot be combined with tool_choice \"required\" or a named function (the tool "
                           "call's grammar already constrains the output)", param);
    pl_status st;
    if (gbnf) {
        st = pl_grammar_from_gbnf(s->model, gbnf, json_string_length(gr), &r->grammar);
    } else {
        char *text = any_object ? strdup("{\"type\":\"json_object\"}")
                                : schema ? json_dumps(schema, JSON_COMPACT | JSON_ENCODE_ANY) : strdup("true");
        if (!text) return pl_srv_fail(e, 500, NULL, NULL, "out of memory");
        st = pl_grammar_from_json_schema(s->model, text, strlen(text), &r->grammar);
        free(text);
    }
    if (st == PL_ERR_NO_MEMORY) return pl_srv_fail(e, 500, NULL, NULL, "out of memory");
    if (st != PL_OK)
        return pl_srv_fail(e, 400, param, st == PL_ERR_UNSUPPORTED ? "unsupported_parameter" : "invalid_value",
                           "invalid '%s': %s", param, pl_last_error());
    /* The output is the client's format: never reinterpreted as tool calls
     * (a JSON answer {"name": ..., "parameters": ...} is content). */
    r->tool_names[0] = 0;
    return 0;
}

/* The text the model produced for q as the tool parser must see it: the
 * forced prefill, then the generated content (first `upto` bytes). */
static json_t *scan_seq(pl_srv_request *r, pl_srv_seq *q, size_t upto, bool final, pl_srv_buf *content) {
    pl_srv_buf t = {0};
    if (pl_srv_buf_add(&t, r->tool_prefill, strlen(r->tool_prefill)) || pl_srv_buf_add(&t, q->text.content.p, upto)) {
        pl_srv_buf_free(&t);
        return NULL;
    }
    json_t *calls = pl_srv_tools_scan(t.p, t.n, r->tool_names, final, content);
    pl_srv_buf_free(&t);
    /* parallel_tool_calls: false -> at most one call. */
    if (calls && !r->parallel_tool_calls) while (json_array_size(calls) > 1) json_array_remove(calls, json_array_size(calls) - 1);
    return calls;
}

/* OpenAI's shape for calls [from, to) of a scan; with index when streaming. */
static json_t *calls_json(pl_srv_request *r, pl_srv_seq *q, json_t *calls, size_t from, bool stream) {
    json_t *a = json_array();
    for (size_t k = from; k < json_array_size(calls); k++) {
        json_t *c = json_array_get(calls, k);
        char id[32];
        pl_srv_tools_call_id(r->id, q->index, k, id);
        json_t *o = json_pack("{s:s, s:s, s:{s:O, s:O}}", "id", id, "type", "function", "function", "name",
                              json_object_get(c, "name"), "arguments", json_object_get(c, "arguments"));
        if (stream) json_object_set_new(o, "index", json_integer((json_int_t)k));
        json_array_append_new(a, o);
    }
    return a;
}

/* Streamed call events (pl_srv_tools_stream) in OpenAI's delta shape: a
 * call's first event carries its index, id, type and name (arguments ""
 * or whole), later ones argument fragments under the same index. */
static json_t *stream_calls_json(pl_srv_request *r, pl_srv_seq *q, json_t *deltas) {
    json_t *a = json_array();
    size_t i;
    json_t *d;
    json_array_foreach(deltas, i, d) {
        json_t *idx = json_object_get(d, "index"), *name = json_object_get(d, "name");
        json_t *fn = json_pack("{s:O}", "arguments", json_object_get(d, "arguments"));
        json_t *o = json_pack("{s:O}", "index", idx);
        if (name) {
            char id[32];
            pl_srv_tools_call_id(r->id, q->index, (size_t)json_integer_value(idx), id);
            json_object_set_new(o, "id", json_string(id));
            json_object_set_new(o, "type", json_string("function"));
            json_object_set(fn, "name", name);
        }
        json_object_set_new(o, "function", fn);
        json_array_append_new(a, o);
    }
    return a;
}

static bool all_space(const char *p, size_t n) {
    for (size_t i = 0; i < n; i++)
        if (p[i] != ' ' && p[i] != '\n' && p[i] != '\r' && p[i] != '\t') return false;
    return true;
}

/* ---- messages ---------------------------------------------------------------*/

/* Flattens a message content (string, null or array of text parts). */
static int content_text(json_t *c, const char *where, pl_srv_buf *out, pl_srv_error *e) {
    if (absent(c)) return 0;
    if (json_is_string(c)) return pl_srv_buf_add(out, json_string_value(c), json_string_length(c));
    if (!json_is_array(c))
        return pl_srv_fail(e, 400, "messages", "invalid_type", "%s.content must be a string or an array", where);
    size_t i;
    json_t *part;
    json_array_foreach(c, i, part) {
        json_t *type = json_object_get(part, "type"), *text = json_object_get(part, "text");
        if (!json_is_object(part) || !json_is_string(type))
            return pl_srv_fail(e, 400, "messages", "invalid_type", "%s.content[%zu] must be an object with a 'type'",
                               where, i);
        if (strcmp(json_string_value(type), "text") != 0)
            return pl_srv_fail(e, 400, "messages", "unsupported_parameter",
                               "%s.content[%zu]: only text parts are supported", where, i);
        if (!json_is_string(text))
            return pl_srv_fail(e, 400, "messages", "invalid_type", "%s.content[%zu].text must be a string", where, i);
        if ((out->n && pl_srv_buf_add(out, "\n", 1)) ||
            pl_srv_buf_add(out, json_string_value(text), json_string_length(text)))
            return pl_srv_fail(e, 500, NULL, NULL, "out of memory");
    }
    return 0;
}

/* An assistant message's tool_calls as the chat templates read them:
 * [{id, type, function: {name, arguments}}] with arguments parsed into an
 * object (as llama-server passes them; Qwen3's template prints a mapping with
 * tojson). Records id -> name in ids. */
static json_t *history_calls(json_t *tc, const char *where, json_t *ids, pl_srv_error *e) {
    json_t *out = json_array();
    size_t i;
    json_t *c;
    json_array_foreach(tc, i, c) {
        json_t *fn = json_object_get(c, "function"), *id = json_object_get(c, "id");
        json_t *name = json_object_get(fn, "name"), *args = json_object_get(fn, "arguments"), *a = NULL;
        if (!json_is_object(c) || !json_is_object(fn) || !json_is_string(name) || !json_string_length(name)) {
            pl_srv_fail(e, 400, "messages", "invalid_type", "%s.tool_calls[%zu].function.name must be a string", where, i);
            goto bad;
        }
        if (!absent(id) && !json_is_string(id)) {
            pl_srv_fail(e, 400, "messages", "invalid_type", "%s.tool_calls[%zu].id must be a string", where, i);
            goto bad;
        }
        if (json_is_string(args)) a = json_loadb(json_string_value(args), json_string_length(args), 0, NULL);
        else if (json_is_object(args)) a = json_incref(args);
        else if (absent(args)) a = json_object();
        if (!json_is_object(a)) {
            json_decref(a);
            pl_srv_fail(e, 400, "messages", "invalid_value",
                        "%s.tool_calls[%zu].function.arguments must be a JSON object (or a string holding one)", where, i);
            goto bad;
        }
        json_t *call = json_pack("{s:s, s:{s:O, s:o}}", "type", "function", "function", "name", name, "arguments", a);
        if (json_is_string(id)) {
            json_object_set(call, "id", id);
            json_object_set(ids, json_string_value(id), name);
        }
        json_array_append_new(out, call);
    }
    return out;
bad:
    json_decref(out);
    return NULL;
}

/* Validates messages; returns [{role, content[, reasoning_content][, tool_calls]
 * [, tool_call_id, name]}]. */
static json_t *normalize_messages(json_t *msgs, pl_srv_error *e) {
    if (absent(msgs)) { pl_srv_fail(e, 400, "messages", "missing_required_parameter", "'messages' is required"); return NULL; }
    if (!json_is_array(msgs)) { pl_srv_fail(e, 400, "messages", "invalid_type", "'messages' must be an array"); return NULL; }
    if (json_array_size(msgs) == 0) { pl_srv_fail(e, 400, "messages", "invalid_value", "'messages' must not be empty"); return NULL; }
    json_t *out = json_array();
    json_t *call_ids = json_object();  /* tool call id -> function name, for tool messages */
    size_t i;
    json_t *m;
    json_array_foreach(msgs, i, m) {
        char where[32];
        snprintf(where, sizeof where, "messages[%zu]", i);
        json_t *role = json_object_get(m, "role");
        if (!json_is_object(m) || !json_is_string(role)) {
            pl_srv_fail(e, 400, "messages", "invalid_type", "%s must be an object with a string 'role'", where);
            goto bad;
        }
        const char *r = json_string_value(role);
        if (!strcmp(r, "developer")) r = "system";
        if (strcmp(r, "system") && strcmp(r, "user") && strcmp(r, "assistant") && strcmp(r, "tool")) {
            pl_srv_fail(e, 400, "messages", "invalid_value", "%s has an unknown role", where);
            goto bad;
        }
        json_t *tc = json_object_get(m, "tool_calls"), *tcs = NULL;
        if (!absent(tc) && (strcmp(r, "assistant") || !json_is_array(tc))) {
            pl_srv_fail(e, 400, "messages", "invalid_type", "%s.tool_calls must be an array on an assistant message",
                        where);
            goto bad;
        }
        if (!absent(tc) && json_array_size(tc) && !(tcs = history_calls(tc, where, call_ids, e))) goto bad;
        json_t *tid = json_object_get(m, "tool_call_id");
        if (!strcmp(r, "tool")) {
            if (!json_is_string(tid)) {
                pl_srv_fail(e, 400, "messages", "missing_required_parameter", "%s.tool_call_id must be a string", where);
                goto bad;
            }
            if (!json_object_get(call_ids, json_string_value(tid))) {
                pl_srv_fail(e, 400, "messages", "invalid_value",
                            "%s.tool_call_id matches no earlier assistant tool call", where);
                goto bad;
            }
        }
        pl_srv_buf text = {0};
        if (content_text(json_object_get(m, "content"), where, &text, e)) { pl_srv_buf_free(&text); json_decref(tcs); goto bad; }
        json_t *nm = json_pack("{s:s, s:o}", "role", r, "content", json_stringn(text.p ? text.p : "", text.n));
        pl_srv_buf_free(&text);
        if (tcs) json_object_set_new(nm, "tool_calls", tcs);
        if (!strcmp(r, "tool")) {
            json_object_set(nm, "tool_call_id", tid);
            json_t *fn = json_object_get(call_ids, json_string_value(tid));
            /* Some templates print the function's name with its result. */
            if (json_is_string(fn)) json_object_set(nm, "name", fn);
        }
        json_t *rc = json_object_get(m, "reasoning_content");
        if (!absent(rc)) {
            if (!json_is_string(rc)) {
                json_decref(nm);
                pl_srv_fail(e, 400, "messages", "invalid_type", "%s.reasoning_content must be a string", where);
                goto bad;
            }
            json_object_set(nm, "reasoning_content", rc);
        }
        json_array_append_new(out, nm);
    }
    json_decref(call_ids);
    return out;
bad:
    json_decref(call_ids);
    json_decref(out);
    return NULL;
}

/* The size checks of check_text_bytes for a conversation, on the normalized
 * messages, before the template renders them and every text is tokenized.
 * Counted against the context: the texts every template renders. Not
 * counted: reasoning (reasoning_content, and an assistant content's part up
 * to its last "</think>"), which templates such as Qwen3's drop from earlier
 * turns, so counting it could refuse a conversation that fits. All text is
 * still tokenized once on its own (server_chat.c looks for special-token
 * text in every message), so the whole is capped too, at 4x what the
 * context can hold: a resource limit, answered as one (413). */
static int check_message_bytes(pl_srv *s, json_t *msgs, pl_srv_error *e) {
    size_t kept = 0, all = 0, i;
    json_t *m;
    json_array_foreach(msgs, i, m) {
        json_t *c = json_object_get(m, "content"), *rc = json_object_get(m, "reasoning_content");
        const char *text = json_string_value(c);
        size_t n = json_string_length(c);
        all += n + json_string_length(rc);
        if (text && !strcmp(json_string_value(json_object_get(m, "role")), "assistant")) {
            for (size_t k = n; k >= 8; k--)
                if (!memcmp(text + k - 8, "</think>", 8)) { n -= k; break; }
        }
        kept += n;
    }
    if (check_text_bytes(s, kept, "messages", e)) return -1;
    size_t bound = pl_srv_prompt_byte_bound(s), cap = bound > ((size_t)-1) / 4 ? (size_t)-1 : 4 * bound;
    if (all > cap)
        return pl_srv_fail(e, 413, "messages", "request_too_large",
                           "the messages hold %zu bytes of text; this server accepts at most %zu (4 times what "
                           "its context of %d tokens can hold)", all, cap, s->n_ctx);
    return 0;
}

/* ---- prompts ----------------------------------------------------------------*/

static int add_prompt(pl_srv_request *r, int32_t *ids, size_t n) {
    int32_t **p = realloc(r->prompts, (size_t)(r->n_prompts + 1) * sizeof *p);
    if (!p) { pl_free(ids); return -1; }
    r->prompts = p;
    size_t *np = realloc(r->n_prompt_tok, (size_t)(r->n_prompts + 1) * sizeof *np);
    if (!np) { pl_free(ids); return -1; }
    r->n_prompt_tok = np;
    r->prompts[r->n_prompts] = ids;
    r->n_prompt_tok[r->n_prompts] = n;
    r->n_prompts++;
    return 0;
}

static int token_array(pl_srv *s, json_t *arr, const char *where, int32_t **ids, size_t *n, pl_srv_error *e) {
    size_t len = json_array_size(arr);
    if (len > (size_t)s->n_ctx)
        return pl_srv_fail(e, 400, "prompt", "context_length_exceeded",
                           "This model's maximum context length is %d tokens, but the prompt has %zu tokens",
                           s->n_ctx, len);
    int32_t *t = malloc((len ? len : 1) * sizeof *t);
    if (!t) return pl_srv_fail(e, 500, NULL, NULL, "out of memory");
    for (size_t i = 0; i < len; i++) {
        json_t *v = json_array_get(arr, i);
        if (!json_is_integer(v) || json_integer_value(v) < 0 || json_integer_value(v) >= s->n_vocab) {
            free(t);
            return pl_srv_fail(e, 400, "prompt", "invalid_value", "%s[%zu] is not a token id (0..%d)", where, i,
                               s->n_vocab - 1);
        }
        t[i] = (int32_t)json_integer_value(v);
    }
    /* pl_free is free(): the same allocator as pl_tokenize's output. */
    *ids = t;
    *n = len;
    return 0;
}

static int completion_prompts(pl_srv *s, json_t *p, pl_srv_request *r, pl_srv_error *e) {
    if (absent(p)) return pl_srv_fail(e, 400, "prompt", "missing_required_parameter", "'prompt' is required");
    int32_t *ids;
    size_t n;
    if (json_is_string(p)) {
        if (check_text_bytes(s, json_string_length(p), "prompt", e)) return -1;
        if (pl_tokenize(s->model, json_string_value(p), json_string_length(p), true, NULL, &ids, &n) != PL_OK)
            return pl_srv_fail(e, 400, "prompt", NULL, "cannot tokenize the prompt: %s", pl_last_error());
        return add_prompt(r, ids, n) ? pl_srv_fail(e, 500, NULL, NULL, "out of memory") : 0;
    }
    if (!json_is_array(p) || json_array_size(p) == 0)
        return pl_srv_fail(e, 400, "prompt", "invalid_type",
                           "'prompt' must be a string, an array of strings, or an array of token ids");
    json_t *first = json_array_get(p, 0);
    if (json_is_integer(first)) {
        if (token_array(s, p, "prompt", &ids, &n, e)) return -1;
        return add_prompt(r, ids, n) ? pl_srv_fail(e, 500, NULL, NULL, "out of memory") : 0;
    }
    size_t i;
    json_t *v;
    json_array_foreach(p, i, v) {
        char where[32];
        snprintf(where, sizeof where, "prompt[%zu]", i);
        if (json_is_string(v)) {
            if (check_text_bytes(s, json_string_length(v), "prompt", e)) return -1;
            if (pl_tokenize(s->model, json_string_value(v), json_string_length(v), true, NULL, &ids, &n) != PL_OK)
                return pl_srv_fail(e, 400, "prompt", NULL, "cannot tokenize %s: %s", where, pl_last_error());
        } else if (json_is_array(v)) {
            if (token_array(s, v, where, &ids, &n, e)) return -1;
        } else {
            return pl_srv_fail(e, 400, "prompt", "invalid_type", "%s must be a string or an array of token ids", where);
        }
        if (add_prompt(r, ids, n)) return pl_srv_fail(e, 500, NULL, NULL, "out of memory");
    }
    return 0;
}

/* ---- the request ------------------------------------------------------------*/

static int parse_stop(json_t *v, pl_srv_request *r, pl_srv_error *e) {
    if (absent(v)) return 0;
    json_t *one = json_is_string(v) ? v : NULL;
    size_t n = one ? 1 : json_is_array(v) ? json_array_size(v) : 0;
    if (!one && !json_is_array(v))
        return pl_srv_fail(e, 400, "stop", "invalid_type", "'stop' must be a string or an array of strings");
    if (n > PL_SRV_MAX_STOPS)
        return pl_srv_fail(e, 400, "stop", "invalid_value", "at most %d stop strings are accepted", PL_SRV_MAX_STOPS);
    for (size_t i = 0; i < n; i++) {
        json_t *x = one ? one : json_array_get(v, i);
        if (!json_is_string(x)) return pl_srv_fail(e, 400, "stop", "invalid_type", "stop[%zu] must be a string", i);
        if (json_string_length(x) == 0) continue; /* matches nothing */
        char *c = malloc(json_string_length(x) + 1);
        if (!c) return pl_srv_fail(e, 500, NULL, NULL, "out of memory");
        memcpy(c, json_string_value(x), json_string_length(x) + 1);
        if (strlen(c) != json_string_length(x)) {
            free(c);
            return pl_srv_fail(e, 400, "stop", "invalid_value", "stop[%zu] contains a NUL character", i);
        }
        r->stops[r->n_stops++] = c;
    }
    return 0;
}

/* ---- penalties, logit_bias, logprobs (issue 16) ----------------------------*/

/* logit_bias: {"token id": bias}. Keys are decimal token ids of the
 * vocabulary, biases numbers in -100..100 (OpenAI's range). */
static int parse_logit_bias(pl_srv *s, json_t *v, pl_srv_request *r, pl_srv_error *e) {
    if (!json_is_object(v)) return pl_srv_fail(e, 400, "logit_bias", "invalid_type", "'logit_bias' must be an object");
    size_t n = json_object_size(v);
    if (!n) return 0;
    r->bias_id = malloc(n * sizeof *r->bias_id);
    r->bias = malloc(n * sizeof *r->bias);
    if (!r->bias_id || !r->bias) return pl_srv_fail(e, 500, NULL, NULL, "out of memory");
    const char *key;
    json_t *b;
    json_object_foreach(v, key, b) {
        char *end = NULL;
        long long id = strtoll(key, &end, 10);
        if (!*key || *end || key[0] == '+' || key[0] == ' ' || (key[0] == '-' && id == 0))
            return pl_srv_fail(e, 400, "logit_bias", "invalid_value",
                               "'logit_bias' keys must be token ids (decimal integers), got '%.40s'", key);
        if (id < 0 || id >= s->n_vocab)
            return pl_srv_fail(e, 400, "logit_bias", "invalid_value",
                               "'logit_bias': token id %lld is outside the vocabulary (0..%d)", id, s->n_vocab - 1);
        if (!json_is_number(b))
            return pl_srv_fail(e, 400, "logit_bias", "invalid_type", "'logit_bias' values must be numbers (token %lld)", id);
        double x = json_number_value(b);
        if (!(x >= -100 && x <= 100))
            return pl_srv_fail(e, 400, "logit_bias", "invalid_value",
                               "'logit_bias' values must be between -100 and 100, got %g for token %lld", x, id);
        r->bias_id[r->n_bias] = (int32_t)id;
        r->bias[r->n_bias++] = (float)x;
    }
    return 0;
}

static int parse_penalties(pl_srv *s, json_t *body, pl_srv_kind kind, pl_srv_request *r, pl_srv_error *e) {
    json_t *v;
    double d;
    long long k;
    r->repeat_penalty = 1.0f;
    r->repeat_last_n = 64;
    r->n_logprobs = -1;
    if (!absent(v = json_object_get(body, "presence_penalty"))) {
        if (get_number(v, "presence_penalty", -2, 2, &d, e)) return -1;
        r->presence_penalty = (float)d;
    }
    if (!absent(v = json_object_get(body, "frequency_penalty"))) {
        if (get_number(v, "frequency_penalty", -2, 2, &d, e)) return -1;
        r->frequency_penalty = (float)d;
    }
    if (!absent(v = json_object_get(body, "repetition_penalty"))) {
        if (get_number(v, "repetition_penalty", 0, 10, &d, e)) return -1;
        if (d == 0) return pl_srv_fail(e, 400, "repetition_penalty", "invalid_value", "'repetition_penalty' must be > 0");
        r->repeat_penalty = (float)d;
    }
    if (!absent(v = json_object_get(body, "repeat_last_n"))) {
        if (get_int(v, "repeat_last_n", -1, INT32_MAX, &k, e)) return -1;
        r->repeat_last_n = (int32_t)k;
    }
    if (!absent(v = json_object_get(body, "logit_bias")) && parse_logit_bias(s, v, r, e)) return -1;

    json_t *lp = json_object_get(body, "logprobs"), *top = json_object_get(body, "top_logprobs");
    if (kind == PL_SRV_CHAT) {
        /* chat: logprobs is a boolean, top_logprobs 0..20 needs it true */
        bool want = false;
        if (!absent(lp) && get_bool(lp, "logprobs", &want, e)) return -1;
        if (!absent(top)) {
            if (get_int(top, "top_logprobs", 0, PL_SRV_MAX_TOP_LOGPROBS, &k, e)) return -1;
            if (!want)
                return pl_srv_fail(e, 400, "top_logprobs", "invalid_value", "'top_logprobs' requires 'logprobs': true");
            r->n_logprobs = (int)k;
        } else if (want) r->n_logprobs = 0;
    } else {
        /* legacy completions: logprobs is the number of alternatives */
        if (!absent(top))
            return pl_srv_fail(e, 400, "top_logprobs", "invalid_value",
                               "'top_logprobs' is a chat parameter; completions take 'logprobs': N");
        if (!absent(lp) && !json_is_false(lp)) { /* false: off, as clients that send booleans mean */
            if (get_int(lp, "logprobs", 0, PL_SRV_MAX_TOP_LOGPROBS, &k, e)) return -1;
            r->n_logprobs = (int)k;
        }
    }
    return 0;
}

/* The token text for logprobs: special tokens as their text. */
static size_t lp_piece(pl_srv *s, int32_t tok, char *buf, size_t cap) {
    size_t len = 0;
    if (pl_token_to_piece(s->model, tok, true, buf, cap, &len) != PL_OK) len = 0;
    return len;
}

/* JSON cannot hold -inf (a masked token's logprob): OpenAI reports -9999. */
static json_t *lp_real(float x) { return json_real(x < -9999.0f || isnan(x) ? -9999.0 : (double)x); }

static json_t *lp_bytes(const char *p, size_t n) {
    json_t *a = json_array();
    for (size_t i = 0; i < n; i++) json_array_append_new(a, json_integer((unsigned char)p[i]));
    return a;
}

/* Chat shape: {"token", "logprob", "bytes", "top_logprobs": [{"token", "logprob", "bytes"}]}. */
static json_t *chat_lp_entry(pl_srv *s, const pl_srv_lp *x, int n_top) {
    char buf[256];
    size_t n = lp_piece(s, x->token, buf, sizeof buf);
    json_t *o = json_pack("{s:o, s:o, s:o}", "token", jstr(buf, n), "logprob", lp_real(x->logprob), "bytes",
                          lp_bytes(buf, n));
    json_t *tops = json_array();
    for (int k = 0; k < n_top; k++) {
        size_t m = lp_piece(s, x->top[k].token, buf, sizeof buf);
        json_array_append_new(tops, json_pack("{s:o, s:o, s:o}", "token", jstr(buf, m), "logprob",
                                              lp_real(x->top[k].logprob), "bytes", lp_bytes(buf, m)));
    }
    json_object_set_new(o, "top_logprobs", tops);
    return o;
}

/* Entries [from, to) of q in the shape of r's route. offset0: text offset
 * of entry `from` (completions). */
static json_t *logprobs_json(pl_srv *s, pl_srv_request *r, const pl_srv_seq *q, size_t from, size_t to) {
    if (r->kind == PL_SRV_CHAT) {
        json_t *a = json_array();
        for (size_t i = from; i < to; i++) json_array_append_new(a, chat_lp_entry(s, &q->lps[i], r->n_logprobs));
        return json_pack("{s:o}", "content", a);
    }
    char buf[256];
    size_t off = 0;
    for (size_t i = 0; i < from; i++) off += lp_piece(s, q->lps[i].token, buf, sizeof buf);
    json_t *toks = json_array(), *lps = json_array(), *tops = json_array(), *offs = json_array();
    for (size_t i = from; i < to; i++) {
        const pl_srv_lp *x = &q->lps[i];
        size_t n = lp_piece(s, x->token, buf, sizeof buf);
        json_array_append_new(toks, jstr(buf, n));
        json_array_append_new(lps, lp_real(x->logprob));
        json_array_append_new(offs, json_integer((json_int_t)off));
        off += n;
        json_t *t = json_object();
        for (int k = 0; k < r->n_logprobs; k++) {
            size_t m = lp_piece(s, x->top[k].token, buf, sizeof buf);
            json_t *key = jstr(buf, m); /* object keys must be valid UTF-8 too */
            json_object_set_new(t, json_string_value(key), lp_real(x->top[k].logprob));
            json_decref(key);
        }
        json_array_append_new(tops, t);
    }
    return json_pack("{s:o, s:o, s:o, s:o}", "tokens", toks, "token_logprobs", lps, "top_logprobs", tops,
                     "text_offset", offs);
}

int pl_srv_record_logprobs(pl_srv *s, pl_srv_seq *q, const float *row, int32_t tok) {
    pl_srv_request *r = q->req;
    if (r->n_logprobs < 0 || pl_token_is_eog(s->model, tok)) return 0;
    pl_srv_lp x = {.token = tok};
    /* The raw row: the model's distribution, before bias, penalties and
     * temperature (vLLM's and llama-server's default). */
    if (pl_logprobs(row, s->n_vocab, tok, &x.logprob, x.top, r->n_logprobs) != PL_OK) return -1;
    pthread_mutex_lock(&r->mu);
    if (q->n_lps == q->cap_lps) {
        size_t cap = q->cap_lps ? q->cap_lps * 2 : 32;
        pl_srv_lp *p = realloc(q->lps, cap * sizeof *p);
        if (p) { q->lps = p; q->cap_lps = cap; }
    }
    if (q->n_lps < q->cap_lps) q->lps[q->n_lps++] = x;
    pthread_mutex_unlock(&r->mu);
    return 0;
}

/* Penalties and bias on a new choice's sampler; its prompt starts the
 * repeat window. */
static int setup_sampler_mods(pl_srv_request *r, pl_srv_seq *q, pl_srv_error *e) {
    bool pen = r->repeat_penalty != 1.0f || r->frequency_penalty != 0 || r->presence_penalty != 0;
    if (pen && (pl_sampler_set_penalties(q->smp, r->repeat_penalty, r->repeat_last_n, r->frequency_penalty,
                                         r->presence_penalty) != PL_OK ||
                pl_sampler_add_history(q->smp, q->prompt, q->n_prompt) != PL_OK))
        return pl_srv_fail(e, 400, NULL, NULL, "bad sampling parameters: %s", pl_last_error());
    if (r->n_bias && pl_sampler_set_logit_bias(q->smp, r->bias_id, r->bias, r->n_bias) != PL_OK)
        return pl_srv_fail(e, 400, "logit_bias", NULL, "bad logit_bias: %s", pl_last_error());
    return 0;
}

/* A new choice's own grammar state (a clone: compiled rules and vocabulary
 * index are shared), past the prefilled start of a forced tool call, on its
 * sampler; and the tool parser's text starts with that prefill. */
static int setup_grammar(pl_srv_request *r, pl_srv_seq *q, pl_srv_error *e) {
    size_t np = strlen(r->tool_prefill);
    if (pl_srv_buf_add(&q->tool_text, r->tool_prefill, np)) return pl_srv_fail(e, 500, NULL, NULL, "out of memory");
    if (!r->grammar) return 0;
    pl_status st = pl_grammar_clone(r->grammar, &q->grammar);
    if (st == PL_OK && r->tool_grammar && np) st = pl_grammar_accept_text(q->grammar, r->tool_prefill, np);
    if (st != PL_OK)
        return pl_srv_fail(e, 500, NULL, NULL, "cannot set up the grammar: %s", pl_last_error());
    pl_sampler_set_grammar(q->smp, q->grammar);
    return 0;
}

static int parse_sampling(json_t *body, pl_srv_request *r, pl_srv_error *e, bool *seed_given, uint64_t *seed) {
    json_t *v;
    double d;
    long long k;
    /* Defaults are llama.cpp server's. */
    r->sp = pl_sampler_default_params();
    r->sp.temperature = 0.8f;
    r->sp.top_k = 40;
    r->sp.top_p = 0.95f;
    r->sp.min_p = 0.05f;
    if (!absent(v = json_object_get(body, "temperature"))) {
        if (get_number(v, "temperature", 0, 2, &d, e)) return -1;
        r->sp.temperature = (float)d;
    }
    if (!absent(v = json_object_get(body, "top_p"))) {
        if (get_number(v, "top_p", 0, 1, &d, e)) return -1;
        r->sp.top_p = (float)d;
    }
    if (!absent(v = json_object_get(body, "min_p"))) {
        if (get_number(v, "min_p", 0, 1, &d, e)) return -1;
        r->sp.min_p = (float)d;
    }
    if (!absent(v = json_object_get(body, "top_k"))) {
        if (get_int(v, "top_k", 0, 1 << 30, &k, e)) return -1;
        r->sp.top_k = (int32_t)k;
    }
    *seed_given = false;
    if (!absent(v = json_object_get(body, "seed"))) {
        if (get_int(v, "seed", INT64_MIN, INT64_MAX, &k, e)) return -1;
        *seed = (uint64_t)k;
        *seed_given = true;
    }
    return 0;
}

pl_srv_request *pl_srv_parse_request(pl_srv *s, pl_srv_kind kind, json_t *body, pl_srv_error *e) {
    if (!json_is_object(body)) {
        pl_srv_fail(e, 400, NULL, "invalid_type", "the request body must be a JSON object");
        return NULL;
    }
    pl_srv_request *r = pl_srv_request_new();
    if (!r) { pl_srv_fail(e, 500, NULL, NULL, "out of memory"); return NULL; }
    r->kind = kind;
    json_t *v, *msgs = NULL, *kwargs = NULL;
    long long k;
    if (check_unsupported(body, e)) goto bad;
    log_unknown(body, kind);

    if (!absent(v = json_object_get(body, "model")) && !json_is_string(v)) {
        pl_srv_fail(e, 400, "model", "invalid_type", "'model' must be a string");
        goto bad;
    }
    if (!absent(v = json_object_get(body, "user")) && !json_is_string(v)) {
        pl_srv_fail(e, 400, "user", "invalid_type", "'user' must be a string");
        goto bad;
    }
    if (!absent(v = json_object_get(body, "stream")) && get_bool(v, "stream", &r->stream, e)) goto bad;
    if (!absent(v = json_object_get(body, "stream_options"))) {
        if (!json_is_object(v)) { pl_srv_fail(e, 400, "stream_options", "invalid_type", "'stream_options' must be an object"); goto bad; }
        json_t *iu = json_object_get(v, "include_usage");
        if (!absent(iu) && get_bool(iu, "stream_options.include_usage", &r->include_usage, e)) goto bad;
    }
    if (!absent(v = json_object_get(body, "return_tokens")) && get_bool(v, "return_tokens", &r->return_tokens, e)) goto bad;
    /* llama-server's field: false keeps this request from reusing a slot's
     * cached prompt prefix (the output is the same either way). */
    r->cache_prompt = true;
    if (!absent(v = json_object_get(body, "cache_prompt")) && get_bool(v, "cache_prompt", &r->cache_prompt, e)) goto bad;
    /* max_completion_tokens is the newer name; it wins when both are set. */
    if (!absent(v = json_object_get(body, "max_tokens"))) {
        if (get_int(v, "max_tokens", 1, INT32_MAX, &k, e)) goto bad;
        r->max_tokens = k;
    }
    if (!absent(v = json_object_get(body, "max_completion_tokens"))) {
        if (get_int(v, "max_completion_tokens", 1, INT32_MAX, &k, e)) goto bad;
        r->max_tokens = k;
    }
    long long n_choices = 1;
    if (!absent(v = json_object_get(body, "n")) && get_int(v, "n", 1, 128, &n_choices, e)) goto bad;
    bool seed_given;
    uint64_t seed = 0;
    if (parse_sampling(body, r, e, &seed_given, &seed)) goto bad;
    if (parse_penalties(s, body, kind, r, e)) goto bad;
    if (parse_stop(json_object_get(body, "stop"), r, e)) goto bad;

    if (kind == PL_SRV_CHAT) {
        r->parse_reasoning = true;
        if (!absent(v = json_object_get(body, "chat_template_kwargs")) && !json_is_object(v)) {
            pl_srv_fail(e, 400, "chat_template_kwargs", "invalid_type", "'chat_template_kwargs' must be an object");
            goto bad;
        }
        kwargs = json_is_object(v) ? json_deep_copy(v) : json_object();
        if (!absent(v = json_object_get(body, "reasoning_effort"))) {
            const char *x = json_is_string(v) ? json_string_value(v) : NULL;
            if (!x || (strcmp(x, "none") && strcmp(x, "minimal") && strcmp(x, "low") && strcmp(x, "medium") &&
                       strcmp(x, "high"))) {
                pl_srv_fail(e, 400, "reasoning_effort", "invalid_value",
                            "'reasoning_effort' must be one of none, minimal, low, medium, high");
                goto bad;
            }
            /* Explicit chat_template_kwargs win over the effort. */
            if (!strcmp(x, "none") && !json_object_get(kwargs, "enable_thinking"))
                json_object_set_new(kwargs, "enable_thinking", json_false());
        }
        if (!absent(v = json_object_get(body, "reasoning_format"))) {
            const char *x = json_is_string(v) ? json_string_value(v) : NULL;
            if (!x || (strcmp(x, "none") && strcmp(x, "deepseek") && strcmp(x, "auto"))) {
                pl_srv_fail(e, 400, "reasoning_format", "invalid_value",
                            "'reasoning_format' must be one of none, deepseek, auto");
                goto bad;
            }
            r->parse_reasoning = strcmp(x, "none") != 0;
        }
        if (parse_tools(s, body, kwargs, r, e)) goto bad;
        if (parse_structured(s, body, r, e)) goto bad;
        /* A grammar leaves no room for a reasoning block: templates that
         * can skip it (Qwen3's enable_thinking) are asked to, unless the
         * client chose, and the whole output is content. */
        if (r->grammar && !json_object_get(kwargs, "enable_thinking"))
            json_object_set_new(kwargs, "enable_thinking", json_false());
        msgs = normalize_messages(json_object_get(body, "messages"), e);
        if (!msgs) goto bad;
        if (check_message_bytes(s, msgs, e)) goto bad;
        int32_t *ids = NULL;
        size_t n = 0;
        if (pl_srv_chat_prompt_ex(s, msgs, kwargs, &ids, &n, &r->think_open, r->tool_prefill[0] ? r->tool_prefill : NULL,
                                  e))
            goto bad;
        if (r->grammar) r->think_open = r->parse_reasoning = false;
        if (add_prompt(r, ids, n)) { pl_srv_fail(e, 500, NULL, NULL, "out of memory"); goto bad; }
    } else {
        /* A batch that needs more slots than there are is refused before any
         * of its prompts is tokenized (the same answer as below). */
        json_t *tl = json_object_get(body, "tools");
        if (!absent(tl) && !(json_is_array(tl) && json_array_size(tl) == 0)) {
            unsupported(e, "tools", "tools are for /v1/chat/completions");
            goto bad;
        }
        json_t *tch = json_object_get(body, "tool_choice");
        if (!absent(tch) && !(json_is_string(tch) && !strcmp(json_string_value(tch), "none"))) {
            unsupported(e, "tool_choice", "tools are for /v1/chat/completions");
            goto bad;
        }
        if (parse_structured(s, body, r, e)) goto bad;
        json_t *p = json_object_get(body, "prompt");
        size_t np = json_is_array(p) && !json_is_integer(json_array_get(p, 0)) ? json_array_size(p) : 1;
        if ((long long)np * n_choices > s->n_seq) {
            pl_srv_fail(e, 400, "n", "invalid_value",
                        "%lld choices x %zu prompts need more sequences than the server runs in parallel (%d)",
                        n_choices, np, s->n_seq);
            goto bad;
        }
        if (completion_prompts(s, p, r, e)) goto bad;
    }
    const char *pname = kind == PL_SRV_CHAT ? "messages" : "prompt";
    for (int i = 0; i < r->n_prompts; i++) {
        if (r->n_prompt_tok[i] == 0) {
            pl_srv_fail(e, 400, pname, "invalid_value", "the prompt is empty");
            goto bad;
        }
        if (r->n_prompt_tok[i] > (size_t)s->n_ctx) {
            pl_srv_fail(e, 400, pname, "context_length_exceeded",
                        "This model's maximum context length is %d tokens, but the prompt has %zu tokens",
                        s->n_ctx, r->n_prompt_tok[i]);
            goto bad;
        }
        r->usage_prompt += r->n_prompt_tok[i];
    }
    if ((long long)r->n_prompts * n_choices > s->n_seq) {
        pl_srv_fail(e, 400, "n", "invalid_value",
                    "%lld choices x %d prompts need more sequences than the server runs in parallel (%d)", n_choices,
                    r->n_prompts, s->n_seq);
        goto bad;
    }

    r->n_seqs = r->n_prompts * (int)n_choices;
    r->seqs = calloc((size_t)r->n_seqs, sizeof *r->seqs);
    if (!r->seqs) { pl_srv_fail(e, 500, NULL, NULL, "out of memory"); goto bad; }
    if (!seed_given) seed = srv_random();
    for (int i = 0; i < r->n_seqs; i++) {
        pl_srv_seq *q = &r->seqs[i];
        q->req = r;
        q->index = i;
        q->slot = -1;
        q->state = PL_SEQ_QUEUED;
        q->prompt = r->prompts[i / n_choices];
        q->n_prompt = r->n_prompt_tok[i / n_choices];
        pl_srv_text_init(&q->text, (const char *const *)r->stops, r->n_stops, r->parse_reasoning, r->think_open);
        /* Choice i draws from seed + i: one seed reproduces every choice,
         * and choices differ from each other. */
        pl_sampler_params sp = r->sp;
        sp.seed = seed + (uint64_t)i;
        if (pl_sampler_create(&sp, s->n_vocab, &q->smp) != PL_OK) {
            pl_srv_fail(e, 400, NULL, NULL, "bad sampling parameters: %s", pl_last_error());
            goto bad;
        }
        if (setup_sampler_mods(r, q, e)) goto bad;
        if (setup_grammar(r, q, e)) goto bad;
    }
    snprintf(r->id, sizeof r->id, "%s%016llx%08llx", kind == PL_SRV_CHAT ? "chatcmpl-" : "cmpl-",
             (unsigned long long)srv_random(), (unsigned long long)(srv_random() & 0xffffffffu));
    r->created = (long long)time(NULL);
    json_decref(msgs);
    json_decref(kwargs);
    return r;
bad:
    json_decref(msgs);
    json_decref(kwargs);
    pl_srv_request_unref(r);
    return NULL;
}

/* ---- responses ----------------------------------------------------------------*/

static const char *model_name(pl_srv *s) { return s->model_id; }

json_t *pl_srv_usage_json(pl_srv_request *r) {
    size_t gen = 0;
    for (int i = 0; i < r->n_seqs; i++) gen += r->seqs[i].n_tokens;
    /* Not locked: callers may hold r->mu (the streamed usage chunk). It is
     * written at admission, before the first token is published under
     * r->mu, and usage is built only after the last one. */
    size_t cached = r->usage_cached;
    /* OpenAI's shape: prompt_tokens counts the cached ones too. */
    return json_pack("{s:I, s:I, s:I, s:{s:I}}", "prompt_tokens", (json_int_t)r->usage_prompt, "completion_tokens",
                     (json_int_t)gen, "total_tokens", (json_int_t)(r->usage_prompt + gen), "prompt_tokens_details",
                     "cached_tokens", (json_int_t)cached);
}

static json_t *tokens_json(const pl_srv_seq *q) {
    json_t *a = json_array();
    for (size_t i = 0; i < q->n_tokens; i++) json_array_append_new(a, json_integer(q->tokens[i]));
    return a;
}

static json_t *envelope(pl_srv *s, pl_srv_request *r, const char *object) {
    char fp[64];
    snprintf(fp, sizeof fp, "pocketllm-%s", pl_version());
    return json_pack("{s:s, s:s, s:I, s:s, s:s}", "id", r->id, "object", object, "created", (json_int_t)r->created,
                     "model", model_name(s), "system_fingerprint", fp);
}

/* Called with r->mu held or after every sequence is done. */
json_t *pl_srv_response_json(pl_srv *s, pl_srv_request *r) {
    bool chat = r->kind == PL_SRV_CHAT;
    json_t *o = envelope(s, r, chat ? "chat.completion" : "text_completion");
    json_t *choices = json_array();
    for (int i = 0; i < r->n_seqs; i++) {
        pl_srv_seq *q = &r->seqs[i];
        json_t *c;
        if (chat) {
            json_t *msg = json_pack("{s:s, s:o}", "role", "assistant", "content", jstr(q->text.content.p, q->text.content.n));
            if (q->text.reasoning.n)
                json_object_set_new(msg, "reasoning_content", jstr(q->text.reasoning.p, q->text.reasoning.n));
            const char *finish = q->finish ? q->finish : "stop";
            if (r->tool_names[0]) {
                pl_srv_buf ct = {0};
                json_t *calls = scan_seq(r, q, q->text.content.n, true, &ct);
                if (calls && json_array_size(calls)) {
                    /* content: the text outside the calls, null when there is none */
                    json_object_set_new(msg, "content", all_space(ct.p, ct.n) ? json_null() : jstr(ct.p, ct.n));
                    json_object_set_new(msg, "tool_calls", calls_json(r, q, calls, 0, false));
                    if (!strcmp(finish, "stop")) finish = "tool_calls";
                } else if (calls) {
                    json_object_set_new(msg, "content", jstr(ct.p, ct.n));  /* with a failed prefill, if any */
                }
                json_decref(calls);
                pl_srv_buf_free(&ct);
            }
            c = json_pack("{s:i, s:o, s:n, s:s}", "index", q->index, "message", msg, "logprobs", "finish_reason",
                          finish);
        } else {
            c = json_pack("{s:i, s:o, s:n, s:s}", "index", q->index, "text", jstr(q->text.content.p, q->text.content.n),
                          "logprobs", "finish_reason", q->finish ? q->finish : "stop");
        }
        if (r->n_logprobs >= 0) json_object_set_new(c, "logprobs", logprobs_json(s, r, q, 0, q->n_lps));
        if (r->return_tokens) json_object_set_new(c, "tokens", tokens_json(q));
        json_array_append_new(choices, c);
    }
    json_object_set_new(o, "choices", choices);
    json_object_set_new(o, "usage", pl_srv_usage_json(r));
    if (r->return_tokens) {
        /* Extension (as vLLM's): the prompt as the model saw it. */
        json_t *pt = json_array();
        for (int p = 0; p < r->n_prompts; p++) {
            json_t *a = json_array();
            for (size_t i = 0; i < r->n_prompt_tok[p]; i++) json_array_append_new(a, json_integer(r->prompts[p][i]));
            json_array_append_new(pt, a);
        }
        json_object_set_new(o, "prompt_token_ids", r->n_prompts == 1 ? json_incref(json_array_get(pt, 0)) : json_incref(pt));
        json_decref(pt);
    }
    return o;
}

json_t *pl_srv_chunk_json(pl_srv *s, pl_srv_request *r, int index, bool role, const char *content, size_t n_content,
                          const char *reasoning, size_t n_reasoning, const char *finish) {
    bool chat = r->kind == PL_SRV_CHAT;
    json_t *o = envelope(s, r, chat ? "chat.completion.chunk" : "text_completion");
    json_t *c = json_pack("{s:i}", "index", index);
    pl_srv_seq *tq = NULL;
    for (int i = 0; chat && r->tool_names[0] && i < r->n_seqs; i++)
        if (r->seqs[i].index == index) tq = &r->seqs[i];
    json_t *tool_delta = NULL;
    pl_srv_buf tc = {0};
    if (tq && (content || finish)) {
        /* Tools: the new text goes through the incremental parser
         * (server_tools.h), which releases the content and call events it
         * has decided; with a tool grammar, arguments stream in fragments. */
        /* content is a slice of the choice's released text (the callers
         * pass one); anything else stands for all of it */
        size_t upto = tq->text.content.n;
        uintptr_t c0 = (uintptr_t)content, b0 = (uintptr_t)tq->text.content.p;
        if (content && b0 && c0 >= b0 && c0 - b0 + n_content <= upto) upto = (size_t)(c0 - b0) + n_content;
        content = NULL;
        n_content = 0;
        json_t *deltas = json_array();
        int rc = !deltas;
        if (!rc && upto > tq->tool_fed) {
            rc = pl_srv_buf_add(&tq->tool_text, tq->text.content.p + tq->tool_fed, upto - tq->tool_fed);
            tq->tool_fed = upto;
        }
        if (!rc)
            rc = pl_srv_tools_stream(&tq->ts, tq->tool_text.p ? tq->tool_text.p : "", tq->tool_text.n, r->tool_names,
                                     finish != NULL, r->tool_grammar, r->parallel_tool_calls ? SIZE_MAX : 1, &tc,
                                     deltas);
        if (!rc && !tq->tool_said && all_space(tc.p, tc.n)) {
            /* Only whitespace so far (the newline between two calls): held
             * until text follows, dropped at the end if calls came. */
            rc = pl_srv_buf_add(&tq->tool_ws, tc.p, tc.n);
            tc.n = 0;
            if (!rc && finish && !tq->ts.n_calls && tq->tool_ws.n) rc = pl_srv_buf_add(&tc, tq->tool_ws.p, tq->tool_ws.n);
        } else if (!rc && !tq->tool_said) {
            tq->tool_said = true;
            pl_srv_buf all = {0};
            rc = pl_srv_buf_add(&all, tq->tool_ws.p, tq->tool_ws.n) || pl_srv_buf_add(&all, tc.p, tc.n);
            pl_srv_buf_free(&tc);
            tc = all;
        }
        if (!rc) {
            if (tc.n) { content = tc.p; n_content = tc.n; }
            if (json_array_size(deltas)) tool_delta = stream_calls_json(r, tq, deltas);
            if (finish && tq->ts.n_calls && !strcmp(finish, "stop")) finish = "tool_calls";
        }
        json_decref(deltas);
    }
    if (chat) {
        json_t *delta = json_object();
        if (role) json_object_set_new(delta, "role", json_string("assistant"));
        if (role || content) json_object_set_new(delta, "content", jstr(content, content ? n_content : 0));
        if (tool_delta) json_object_set_new(delta, "tool_calls", tool_delta);
        if (reasoning) json_object_set_new(delta, "reasoning_content", jstr(reasoning, n_reasoning));
        json_object_set_new(c, "delta", delta);
    } else {
        json_object_set_new(c, "text", jstr(content, content ? n_content : 0));
    }
    json_t *lpj = json_null();
    /* Every chunk with text (or the last) carries the logprobs of the tokens
     * produced since the previous one; text held back (a possible stop
     * string, a partial UTF-8 character) comes later with its tokens. */
    if (r->n_logprobs >= 0 && (content || reasoning || finish))
        for (int i = 0; i < r->n_seqs; i++) {
            pl_srv_seq *q = &r->seqs[i];
            if (q->index != index || q->n_lps_sent >= q->n_lps) continue;
            json_decref(lpj);
            lpj = logprobs_json(s, r, q, q->n_lps_sent, q->n_lps);
            q->n_lps_sent = q->n_lps;
        }
    json_object_set_new(c, "logprobs", lpj);
    json_object_set_new(c, "finish_reason", finish ? json_string(finish) : json_null());
    if (finish && r->return_tokens) {
        for (int i = 0; i < r->n_seqs; i++)
            if (r->seqs[i].index == index) json_object_set_new(c, "tokens", tokens_json(&r->seqs[i]));
    }
    json_object_set_new(o, "choices", json_pack("[o]", c));
    if (r->include_usage) json_object_set_new(o, "usage", json_null());
    pl_srv_buf_free(&tc);
    return o;
}

json_t *pl_srv_usage_chunk_json(pl_srv *s, pl_srv_request *r) {
    json_t *o = envelope(s, r, r->kind == PL_SRV_CHAT ? "chat.completion.chunk" : "text_completion");
    json_object_set_new(o, "choices", json_array());
    json_object_set_new(o, "usage", pl_srv_usage_json(r));
    return o;
}

json_t *pl_srv_models_json(pl_srv *s) {
    json_t *m = json_pack("{s:s, s:s, s:I, s:s}", "id", model_name(s), "object", "model", "created",
                          (json_int_t)s->started, "owned_by", "pocketllm");
    if (atomic_load(&s->state) == PL_SRV_READY)
        json_object_set_new(m, "meta", json_pack("{s:i, s:i, s:i, s:s}", "n_ctx", s->n_ctx, "n_vocab", s->n_vocab,
                                                 "n_parallel", s->n_seq, "arch", pl_model_arch(s->model)));
    return json_pack("{s:s, s:[o]}", "object", "list", "data", m);
}
