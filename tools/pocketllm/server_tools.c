/*
 * Tool-call parsing for `pocketllm serve`; see server_tools.h for the forms,
 * the hold-back rules, the incremental streamer and the call grammar.
 */
#include "server_tools.h"
#include "pocketllm.h"
#include <stdint.h>
#include <stdlib.h>
#include <stdio.h>
#include <string.h>

#define OPEN_TAG "<tool_call>"
#define CLOSE_TAG "</tool_call>"
#define PY_TAG "<|python_tag|>"

bool pl_srv_tools_known(const char *names, const char *name, size_t n) {
    if (!names) return false;
    for (const char *p = names; *p; p += strlen(p) + 1)
        if (strlen(p) == n && !memcmp(p, name, n)) return true;
    return false;
}

static bool is_ws(char c) { return c == ' ' || c == '\n' || c == '\r' || c == '\t'; }

/* Is s[0..n) a proper prefix of tag? */
static bool tag_prefix(const char *s, size_t n, const char *tag) { return n < strlen(tag) && !memcmp(s, tag, n); }

/* The call in body (its JSON), or NULL when it is not a valid call. */
static json_t *parse_call(const char *body, size_t n, const char *names) {
    while (n && is_ws(*body)) { body++; n--; }
    while (n && is_ws(body[n - 1])) n--;
    json_t *o = json_loadb(body, n, 0, NULL), *out = NULL, *own = NULL;
    json_t *name = json_object_get(o, "name"), *args = json_object_get(o, "arguments");
    if (!json_is_object(o) || !json_is_string(name) ||
        !pl_srv_tools_known(names, json_string_value(name), json_string_length(name)))
        goto done;
    if (!args) args = json_object_get(o, "parameters");  /* the Llama 3 spelling */
    if (!args) args = own = json_object();
    else if (json_is_string(args)) args = own = json_loadb(json_string_value(args), json_string_length(args), 0, NULL);
    if (!json_is_object(args)) goto done;
    char *a = json_dumps(args, JSON_COMPACT | JSON_ENSURE_ASCII);
    if (a) out = json_pack("{s:O, s:s}", "name", name, "arguments", a);
    free(a);
done:
    json_decref(own);
    json_decref(o);
    return out;
}

static int add_call(json_t *calls, json_t *c) { return c ? json_array_append_new(calls, c) : 0; }

json_t *pl_srv_tools_scan(const char *text, size_t n, const char *names, bool final, pl_srv_buf *content) {
    json_t *calls = json_array();
    if (!calls) return NULL;
    int rc = 0;
    /* Llama 3: the output is one JSON object (maybe after <|python_tag|>).
     * Until generation ends, leading whitespace, a start of the tag and an
     * output that starts with '{' are all undecided. */
    size_t k = 0;
    while (k < n && is_ws(text[k])) k++;
    size_t j = k;
    if (n - j >= strlen(PY_TAG) && !memcmp(text + j, PY_TAG, strlen(PY_TAG))) j += strlen(PY_TAG);
    while (j < n && is_ws(text[j])) j++;
    if (!final && (j == n || (j == k && tag_prefix(text + k, n - k, PY_TAG)) || text[j] == '{')) return calls;
    if (final && j < n && text[j] == '{') {
        json_t *c = parse_call(text + j, n - j, names);
        if (c) {
            rc = add_call(calls, c);
            return rc ? (json_decref(calls), NULL) : calls;
        }
    }
    /* Qwen / Hermes tags, and (as llama.cpp's Hermes parser accepts) a call
     * in a Markdown code fence, which Qwen2.5-Coder writes instead. */
    static const char *const opens[] = {OPEN_TAG, "```"}, *const closes[] = {CLOSE_TAG, "```"};
    size_t pos = 0;
    for (;;) {
        const char *h = NULL;
        int w = 0;
        for (int i = 0; i < 2; i++) {
            const char *x = memmem(text + pos, n - pos, opens[i], strlen(opens[i]));
            if (x && (!h || x < h)) { h = x; w = i; }
        }
        if (!h) {
            size_t end = n;
            /* Hold a tail that may still grow into an opening. */
            if (!final)
                for (size_t t = n > pos + strlen(OPEN_TAG) ? n - strlen(OPEN_TAG) : pos; t < n && end == n; t++)
                    for (int i = 0; i < 2; i++)
                        if (tag_prefix(text + t, n - t, opens[i])) { end = t; break; }
            rc |= pl_srv_buf_add(content, text + pos, end - pos);
            break;
        }
        size_t hs = (size_t)(h - text), bs = hs + strlen(opens[w]);
        if (w == 1) while (bs < n && ((text[bs] >= 'a' && text[bs] <= 'z') || (text[bs] >= 'A' && text[bs] <= 'Z'))) bs++;
        rc |= pl_srv_buf_add(content, text + pos, hs - pos);
        const char *c = memmem(text + bs, n - bs, closes[w], strlen(closes[w]));
        if (!c) {
            /* Unclosed: undecided until the end; then a complete JSON call
             * still counts (the model may stop right before the close tag). */
            if (final) {
                json_t *call = parse_call(text + bs, n - bs, names);
                if (call) rc |= add_call(calls, call);
                else rc |= pl_srv_buf_add(content, text + hs, n - hs);
            }
            break;
        }
        size_t cs = (size_t)(c - text), ce = cs + strlen(closes[w]);
        json_t *call = parse_call(text + bs, cs - bs, names);
        if (call) rc |= add_call(calls, call);
        else rc |= pl_srv_buf_add(content, text + hs, ce - hs);  /* malformed: plain text */
        pos = ce;
    }
    if (rc) { json_decref(calls); return NULL; }
    return calls;
}

/* ---- incremental streaming ---------------------------------------------------*/

#define N_OPENS 2
static const char *const OPENS[N_OPENS] = {OPEN_TAG, "```"}, *const CLOSES[N_OPENS] = {CLOSE_TAG, "```"};

/* A JSON string of text bytes (content is valid UTF-8; sanitize anyway). */
static json_t *str_json(const char *p, size_t n) {
    json_t *v = json_stringn(p ? p : "", p ? n : 0);
    if (v) return v;
    pl_srv_buf b = {0};
    if (!pl_srv_utf8_sanitize(&b, p, n)) v = json_stringn(b.p ? b.p : "", b.n);
    pl_srv_buf_free(&b);
    return v;
}

static int add_delta(json_t *deltas, size_t index, const char *name, size_t name_n, const char *args, size_t args_n) {
    json_t *d = json_pack("{s:I}", "index", (json_int_t)index);
    json_t *a = str_json(args, args_n);
    if (!d || !a || json_object_set_new(d, "arguments", a)) { json_decref(d); return -1; }
    if (name && json_object_set_new(d, "name", str_json(name, name_n))) { json_decref(d); return -1; }
    return json_array_append_new(deltas, d);
}

/* A whole validated call (from parse_call) as one event. */
static int add_whole(pl_srv_tool_stream *st, json_t *call, size_t max_calls, json_t *deltas) {
    int rc = 0;
    if (st->n_calls < max_calls) {
        json_t *nm = json_object_get(call, "name"), *ar = json_object_get(call, "arguments");
        rc = add_delta(deltas, st->n_calls, json_string_value(nm), json_string_length(nm), json_string_value(ar),
                       json_string_length(ar));
        st->n_calls++;
    }
    json_decref(call);
    return rc;
}

/* The scan's hold-back: where the released part of text[pos..n) ends when
 * its tail may still grow into an opening. */
static size_t release_end(const char *text, size_t pos, size_t n) {
    for (size_t t = n > pos + strlen(OPEN_TAG) ? n - strlen(OPEN_TAG) : pos; t < n; t++)
        for (int i = 0; i < N_OPENS; i++)
            if (tag_prefix(text + t, n - t, OPENS[i])) return t;
    return n;
}

/* The body start of the call opened at open_at (a fence skips its language tag). */
static size_t body_start(const pl_srv_tool_stream *st, const char *text, size_t n) {
    size_t bs = st->open_at + strlen(OPENS[st->fence]);
    if (st->fence)
        while (bs < n && ((text[bs] >= 'a' && text[bs] <= 'z') || (text[bs] >= 'A' && text[bs] <= 'Z'))) bs++;
    return bs;
}

/* Matches a call's head '{"name": "NAME", "arguments": ' from i, up to the
 * '{' that opens the arguments. 1: complete (*args at that '{', NAME at
 * name and name_n), 0: the text ends first, -1: not this shape. */
static int match_head(const char *t, size_t i, size_t n, size_t *name, size_t *name_n, size_t *args) {
    static const char *const parts[] = {"{", "\"name\"", ":", "\"", NULL, ",", "\"arguments\"", ":", "{"};
    for (size_t k = 0; k < sizeof parts / sizeof *parts; k++) {
        if (parts[k]) while (i < n && is_ws(t[i])) i++;
        if (!parts[k]) {   /* the name, up to its closing quote (names have no escapes) */
            *name = i;
            while (i < n && t[i] != '"' && t[i] != '\\' && (unsigned char)t[i] >= 0x20) i++;
            if (i == n) return 0;
            if (t[i] != '"' || i == *name) return -1;
            *name_n = i - *name;
            i++;
            continue;
        }
        size_t len = strlen(parts[k]);
        size_t avail = n - i < len ? n - i : len;
        if (memcmp(t + i, parts[k], avail)) return -1;
        if (avail < len) return 0;
        if (k == sizeof parts / sizeof *parts - 1) { *args = i; return 1; }
        i += len;
    }
    return -1;
}

/* e, less a tail of t[from..e) that may grow into the closing tag. */
static size_t strip_partial_close(const char *t, size_t from, size_t e) {
    for (size_t k = e > from + strlen(CLOSE_TAG) ? e - strlen(CLOSE_TAG) : from; k < e; k++)
        if (tag_prefix(t + k, e - k, CLOSE_TAG)) return k;
    return e;
}

/* End of the arguments when the text is cut at e: without a partial closing
 * tag, trailing whitespace and the '}'s (the last one closes the call's
 * object; until the text goes on, any of them may be it). */
static size_t held_args_end(const char *t, size_t from, size_t e) {
    e = strip_partial_close(t, from, e);
    while (e > from && (is_ws(t[e - 1]) || t[e - 1] == '}')) e--;
    return e;
}

/* End of the arguments of a closed call: before the object's '}'. */
static size_t closed_args_end(const char *t, size_t from, size_t e) {
    while (e > from && is_ws(t[e - 1])) e--;
    if (e > from && t[e - 1] == '}') e--;
    while (e > from && is_ws(t[e - 1])) e--;
    return e;
}

int pl_srv_tools_stream(pl_srv_tool_stream *st, const char *text, size_t n, const char *names, bool final,
                        bool stream_args, size_t max_calls, pl_srv_buf *content, json_t *deltas) {
    if (!st->start_decided) {
        /* The Llama 3 form, decided as pl_srv_tools_scan decides it. */
        size_t k = 0;
        while (k < n && is_ws(text[k])) k++;
        size_t j = k;
        if (n - j >= strlen(PY_TAG) && !memcmp(text + j, PY_TAG, strlen(PY_TAG))) j += strlen(PY_TAG);
        while (j < n && is_ws(text[j])) j++;
        if (!final && (j == n || (j == k && tag_prefix(text + k, n - k, PY_TAG)) || text[j] == '{')) return 0;
        st->start_decided = true;
        if (final && j < n && text[j] == '{') {
            json_t *c = parse_call(text + j, n - j, names);
            if (c) {
                st->pos = n;
                return add_whole(st, c, max_calls, deltas);
            }
        }
    }
    for (;;) {
        if (st->state == PL_SRV_TS_OUT) {
            const char *h = NULL;
            for (int i = 0; i < N_OPENS; i++) {
                const char *x = memmem(text + st->pos, n - st->pos, OPENS[i], strlen(OPENS[i]));
                if (x && (!h || x < h)) { h = x; st->fence = i; }
            }
            if (!h) {
                size_t end = final ? n : release_end(text, st->pos, n);
                if (pl_srv_buf_add(content, text + st->pos, end - st->pos)) return -1;
                st->pos = end;
                return 0;
            }
            size_t hs = (size_t)(h - text);
            if (pl_srv_buf_add(content, text + st->pos, hs - st->pos)) return -1;
            st->pos = st->open_at = hs;
            st->body = st->search = hs + strlen(OPENS[st->fence]);
            st->state = stream_args && !st->fence ? PL_SRV_TS_HEAD : PL_SRV_TS_BODY;
            continue;
        }
        if (st->state == PL_SRV_TS_HEAD) {
            size_t nm = 0, nm_n = 0, args = 0;
            int m = match_head(text, st->body, n, &nm, &nm_n, &args);
            if (m == 0 && !final) return 0;
            if (m == 1 && st->n_calls < max_calls && pl_srv_tools_known(names, text + nm, nm_n)) {
                if (add_delta(deltas, st->n_calls, text + nm, nm_n, "", 0)) return -1;
                st->state = PL_SRV_TS_ARGS;
                st->args_sent = st->search = args;
                continue;
            }
            st->state = PL_SRV_TS_BODY;  /* not the shape a grammar makes: decide it whole */
            continue;
        }
        const char *close = CLOSES[st->fence];
        size_t cl = strlen(close);
        if (st->state == PL_SRV_TS_ARGS) {
            const char *c = memmem(text + st->search, n - st->search, close, cl);
            size_t end;
            if (c) end = closed_args_end(text, st->args_sent, (size_t)(c - text));
            else if (!final) end = held_args_end(text, st->args_sent, n);
            /* cut short (max_tokens): as if it closed where the text ends */
            else end = closed_args_end(text, st->args_sent, strip_partial_close(text, st->args_sent, n));
            if (end > st->args_sent &&
                add_delta(deltas, st->n_calls, NULL, 0, text + st->args_sent, end - st->args_sent))
                return -1;
            if (end > st->args_sent) st->args_sent = end;
            if (!c && !final) {
                if (n > st->search + cl - 1) st->search = n - (cl - 1);
                return 0;
            }
            st->n_calls++;
            st->pos = c ? (size_t)(c - text) + cl : n;
            st->state = PL_SRV_TS_OUT;
            if (!c) return 0;
            continue;
        }
        /* PL_SRV_TS_BODY: decided when the call closes (or the text ends). */
        size_t bs = body_start(st, text, n), from = st->search > bs ? st->search : bs;
        const char *c = memmem(text + from, n - from, close, cl);
        if (!c) {
            if (!final) {
                if (n > from + cl - 1) st->search = n - (cl - 1);
                return 0;
            }
            json_t *call = parse_call(text + bs, n - bs, names);
            if (call) { if (add_whole(st, call, max_calls, deltas)) return -1; }
            else if (pl_srv_buf_add(content, text + st->open_at, n - st->open_at)) return -1;
            st->pos = n;
            st->state = PL_SRV_TS_OUT;
            return 0;
        }
        size_t cs = (size_t)(c - text), ce = cs + cl;
        json_t *call = parse_call(text + bs, cs - bs, names);
        if (call) { if (add_whole(st, call, max_calls, deltas)) return -1; }
        else if (pl_srv_buf_add(content, text + st->open_at, ce - st->open_at)) return -1;
        st->pos = ce;
        st->state = PL_SRV_TS_OUT;
    }
}

/* ---- the call grammar ------------------------------------------------------------*/

/* Prepares a tool's parameters schema (a copy) for the combined schema,
 * walking schema positions only (not constant data, not property names):
 *   - every local $ref points where the schema now lives (base):
 *     "#/$defs/X" -> base + "/$defs/X", "#" -> base;
 *   - an object schema with "properties" but no "additionalProperties"
 *     admits no other keys, as llama.cpp's tool grammars and OpenAI's strict
 *     function calling have it: a model is not to invent arguments (and a
 *     random one would babble extra keys until max_tokens). */
static void prepare_params(json_t *sch, const char *base) {
    if (!json_is_object(sch)) return;
    json_t *ref = json_object_get(sch, "$ref");
    if (json_is_string(ref) && json_string_value(ref)[0] == '#') {
        char *r = malloc(strlen(base) + json_string_length(ref) + 1);
        if (r) {
            sprintf(r, "%s%s", base, json_string_value(ref) + 1);
            json_object_set_new(sch, "$ref", json_string(r));
            free(r);
        }
    }
    if (json_is_object(json_object_get(sch, "properties")) && !json_object_get(sch, "additionalProperties"))
        json_object_set_new(sch, "additionalProperties", json_false());
    static const char *const maps[] = {"properties", "$defs", "definitions"};
    static const char *const lists[] = {"anyOf", "oneOf", "allOf", "prefixItems", "items"};
    static const char *const one[] = {"items", "additionalProperties", "not"};
    const char *k;
    json_t *x;
    size_t i;
    for (size_t m = 0; m < 3; m++) json_object_foreach(json_object_get(sch, maps[m]), k, x) prepare_params(x, base);
    for (size_t m = 0; m < 5; m++) json_array_foreach(json_object_get(sch, lists[m]), i, x) prepare_params(x, base);
    for (size_t m = 0; m < 3; m++) prepare_params(json_object_get(sch, one[m]), base);
}

int pl_srv_tools_grammar(json_t *tools, const char *only, bool parallel, char **gbnf, char *why, size_t why_n) {
    *gbnf = NULL;
    json_t *defs = json_object(), *alts = json_array(), *schema = NULL;
    char *text = NULL, *g = NULL;
    size_t g_n = 0;
    int rc = -1;
    size_t i;
    json_t *t;
    snprintf(why, why_n, "out of memory");
    if (!defs || !alts) goto done;
    json_array_foreach(tools, i, t) {
        json_t *fn = json_object_get(t, "function"), *params = json_object_get(fn, "parameters");
        const char *name = json_string_value(json_object_get(fn, "name"));
        if (!name || (only && strcmp(name, only))) continue;
        /* Each schema compiled alone first, so an error names its tool. */
        json_t *p = json_is_object(params) ? json_deep_copy(params)
                                           : json_pack("{s:s, s:{}, s:b}", "type", "object", "properties",
                                                       "additionalProperties", false);
        char *pt = p ? json_dumps(p, JSON_COMPACT) : NULL, *pg = NULL;
        size_t pg_n;
        if (!pt) { json_decref(p); goto done; }
        pl_status st = pl_json_schema_to_gbnf(pt, strlen(pt), &pg, &pg_n);
        free(pt);
        pl_free(pg);
        if (st != PL_OK) {
            snprintf(why, why_n, "tools[%zu].function.parameters: %s", i, pl_last_error());
            json_decref(p);
            goto done;
        }
        char key[32], base[48];
        snprintf(key, sizeof key, "t%zu-params", i);
        snprintf(base, sizeof base, "#/$defs/%s", key);
        prepare_params(p, base);
        json_object_set_new(defs, key, p);
        /* "name" first: that is the order the Hermes form and the prefill use */
        json_t *alt = json_pack("{s:s, s:{s:{s:s}, s:{s:s}}, s:[s, s], s:b}", "type", "object", "properties", "name",
                                "const", name, "arguments", "$ref", base, "required", "name", "arguments",
                                "additionalProperties", false);
        if (!alt || json_array_append_new(alts, alt)) goto done;
    }
    if (!json_array_size(alts)) { snprintf(why, why_n, "no function to call"); goto done; }
    schema = json_pack("{s:O, s:O}", "$defs", defs, "anyOf", alts);
    if (!schema || !(text = json_dumps(schema, JSON_COMPACT))) goto done;
    if (pl_json_schema_to_gbnf(text, strlen(text), &g, &g_n) != PL_OK) {
        snprintf(why, why_n, "tools: %s", pl_last_error());
        goto done;
    }
    /* The combined schema's start rule becomes one call's JSON (nothing
     * refers to "root": every $ref was rebased above). */
    static const char head[] = "root ::= tool-call%s\n"
                               "tool-call ::= \"<tool_call>\\n\" tool-call-json \"\\n</tool_call>\"\n";
    pl_srv_buf out = {0};
    int bad = pl_srv_buf_addf(&out, head, parallel ? " (\"\\n\" tool-call)*" : "");
    for (const char *line = g; *line && !bad;) {
        const char *nl = strchr(line, '\n');
        size_t len = nl ? (size_t)(nl - line) + 1 : strlen(line);
        if (!strncmp(line, "root ::= ", 9)) bad |= pl_srv_buf_add(&out, "tool-call-json ::= ", 19), line += 9, len -= 9;
        bad |= pl_srv_buf_add(&out, line, len);
        line += len;
    }
    if (bad) { pl_srv_buf_free(&out); goto done; }
    *gbnf = out.p;
    rc = 0;
done:
    pl_free(g);
    free(text);
    json_decref(schema);
    json_decref(defs);
    json_decref(alts);
    return rc;
}

static uint64_t fnv(const char *s, uint64_t h) {
    for (; *s; s++) h = (h ^ (unsigned char)*s) * 1099511628211ull;
    return h;
}

void pl_srv_tools_call_id(const char *req_id, int choice, size_t k, char out[32]) {
    char salt[48];
    snprintf(salt, sizeof salt, "/%d/%zu", choice, k);
    uint64_t a = fnv(salt, fnv(req_id, 14695981039346656037ull));
    uint64_t b = fnv("#", a);
    snprintf(out, 32, "call_%016llx%08llx", (unsigned long long)a, (unsigned long long)(b & 0xffffffffu));
}
