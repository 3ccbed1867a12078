/*
 * Tool-call parsing for `pocketllm serve`; see server_tools.h for the forms
 * and the hold-back rules that make streaming a matter of diffing scans.
 */
#include "server_tools.h"
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
