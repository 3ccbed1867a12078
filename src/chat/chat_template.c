/* The public chat-template API: parse once, render many times. */
#include "chat/chat_template.h"
#include "chat/jt.h"
#include "core/status.h"
#include "gguf/gguf.h"
#include <jansson.h>
#include <stdlib.h>
#include <string.h>

struct pl_chat_template {
    jt_arena arena;
    jt_node *body;
    /* bos_token / eos_token when the caller gives none (the model's, for a
     * template taken from a model; pl_chat_template_set_default_tokens) */
    char *bos, *eos;
    size_t bos_len, eos_len;
};

pl_status pl_chat_template_parse(const char *text, size_t len, pl_chat_template **out) {
    if (!out || (!text && len)) return pl_errorf(PL_ERR_INVALID_ARG, "chat template: invalid arguments");
    *out = NULL;
    /* A NUL byte is refused, whatever the template came from: text read as
     * a C string (pl_model_meta_str, argv, most callers) would end there
     * while a length-aware reader would not, so the same template would
     * render differently depending on the path it took. */
    const char *nul = len ? memchr(text, 0, len) : NULL;
    if (nul) {
        int line = 1, col = 1;
        for (const char *p = text; p < nul; p++) {
            if (*p == '\n') { line++; col = 1; }
            else col++;
        }
        return pl_errorf(PL_ERR_FORMAT, "chat template syntax error at line %d, column %d: the template contains a NUL byte",
                         line, col);
    }
    pl_chat_template *t = calloc(1, sizeof *t);
    if (!t) return pl_errorf(PL_ERR_NO_MEMORY, "chat template: out of memory");
    jt_syntax_error err = {1, 1, PL_ERR_FORMAT, ""};
    jt_token *toks = NULL;
    size_t ntoks = 0;
    if (jt_lex(text ? text : "", len, &t->arena, &toks, &ntoks, &err) == 0) {
        t->body = jt_parse(toks, ntoks, &t->arena, &err);
        free(toks);
    }
    if (!t->body) {
        pl_chat_template_free(t);
        if (err.st == PL_ERR_NO_MEMORY) return pl_errorf(err.st, "chat template: out of memory");
        return pl_errorf(err.st, "chat template syntax error at line %d, column %d: %s", err.line, err.col, err.msg);
    }
    *out = t;
    return PL_OK;
}

pl_status pl_chat_template_from_gguf(const pl_gguf *g, const char **text, size_t *len, pl_chat_template **out) {
    if (out) *out = NULL;
    if (!g || !out) return pl_errorf(PL_ERR_INVALID_ARG, "chat template: invalid arguments");
    pl_gguf_str s;
    pl_status st = pl_gguf_get_str(g, "tokenizer.chat_template", &s);
    if (st == PL_ERR_NOT_FOUND)
        return pl_errorf(st, "%s has no chat template (tokenizer.chat_template)", pl_gguf_name(g));
    if (st != PL_OK) return st;
    if (text) *text = s.ptr;
    if (len) *len = s.len;
    return pl_chat_template_parse(s.ptr, s.len, out);
}

void pl_chat_template_free(pl_chat_template *t) {
    if (!t) return;
    jt_arena_free(&t->arena);
    free(t->bos);
    free(t->eos);
    free(t);
}

static pl_status copy_token(const char *s, size_t len, char **dst, size_t *dst_len) {
    char *c = NULL;
    if (s && !(c = malloc(len + 1))) return pl_errorf(PL_ERR_NO_MEMORY, "chat template: out of memory");
    if (c) {
        memcpy(c, s, len);
        c[len] = 0;
    }
    free(*dst);
    *dst = c;
    *dst_len = s ? len : 0;
    return PL_OK;
}

pl_status pl_chat_template_set_default_tokens(pl_chat_template *t, const char *bos, size_t bos_len, const char *eos,
                                              size_t eos_len) {
    if (!t) return pl_errorf(PL_ERR_INVALID_ARG, "chat template: invalid arguments");
    PL_TRY(copy_token(bos, bos_len, &t->bos, &t->bos_len));
    return copy_token(eos, eos_len, &t->eos, &t->eos_len);
}

void pl_chat_template_default_tokens(const pl_chat_template *t, const char **bos, size_t *bos_len, const char **eos,
                                     size_t *eos_len) {
    *bos = t->bos;
    *bos_len = t->bos_len;
    *eos = t->eos;
    *eos_len = t->eos_len;
}

static void teardown(jt_ctx *c) {
    /* empty the root scope first: top-level macros refer back to it */
    if (c->root) {
        jt_frame_clear(c->root);
        jt_frame_release(c->root);
    }
    c->root = c->frame = NULL;
    if (c->context) {
        jt_val d = {JT_DICT, 0, 0, {0}};
        d.u.d = c->context;
        jt_decref(d);
        c->context = NULL;
    }
    /* Namespaces may reference each other in cycles: empty them all first,
     * then free them. */
    for (jt_ns *ns = c->namespaces; ns; ns = ns->next) jt_dict_clear(ns->d);
    jt_ns *ns = c->namespaces;
    while (ns) {
        jt_ns *next = ns->next;
        jt_val d = {JT_DICT, 0, 0, {0}};
        d.u.d = ns->d;
        jt_decref(d);
        free(ns);
        ns = next;
    }
    c->namespaces = NULL;
}

pl_status pl_chat_template_render(const pl_chat_template *t, const json_t *context,
                                  const pl_chat_template_options *opts, char **out, size_t *out_len) {
    if (!t || !out) return pl_errorf(PL_ERR_INVALID_ARG, "chat template: invalid arguments");
    *out = NULL;
    if (out_len) *out_len = 0;
    if (context && !json_is_object(context))
        return pl_errorf(PL_ERR_INVALID_ARG, "chat template: the context must be a JSON object");

    jt_ctx c;
    memset(&c, 0, sizeof c);
    c.max_output = opts && opts->max_output ? opts->max_output : (size_t)64 << 20;
    c.max_iterations = opts && opts->max_iterations ? opts->max_iterations : 1000000;
    c.max_steps = opts && opts->max_steps ? opts->max_steps : 10000000;
    c.max_alloc = opts && opts->max_alloc ? opts->max_alloc : (uint64_t)512 << 20;
    if (opts && opts->now) {
        c.now = *opts->now;
    } else {
        time_t now = time(NULL);
        localtime_r(&now, &c.now);
    }
    /* Recursion is bounded by depth and by the C stack actually used, so
     * neither deep templates nor fat stack frames (sanitizer builds) can
     * overflow a thread's stack. */
    c.stack_base = JT_STACK_HERE();
    c.max_stack = jt_stack_budget(c.stack_base, opts && opts->max_stack ? opts->max_stack : (size_t)512 << 10);
    jt_buf buf = {0};
    c.out = &buf;
    int r = 0;
    c.root = calloc(1, sizeof *c.root);
    if (!c.root) r = jt_oom(&c);
    else c.root->rc = 1;
    c.frame = c.root;
    if (!r && context) {
        jt_val ctxv;
        r = jt_from_json(&c, context, &ctxv, 0);
        if (!r) c.context = ctxv.u.d;
    }
    if (!r) r = jt_render_body(&c, t->body);
    teardown(&c);
    if (r || c.failed) {
        jt_buf_free(&buf);
        if (c.raised) return pl_errorf(c.st ? c.st : PL_ERR_INVALID_ARG, "%s", c.err);
        return pl_errorf(c.st ? c.st : PL_ERR_INTERNAL, "chat template error at line %d: %s", c.err_line, c.err);
    }
    if (!buf.p) {
        buf.p = malloc(1);
        if (!buf.p) return pl_errorf(PL_ERR_NO_MEMORY, "chat template: out of memory");
        buf.p[0] = 0;
    }
    *out = buf.p;
    if (out_len) *out_len = buf.n;
    return PL_OK;
}

pl_status pl_chat_template_render_json(const pl_chat_template *t, const char *json, size_t json_len,
                                       const pl_chat_template_options *opts, char **out, size_t *out_len) {
    if (!json) return pl_errorf(PL_ERR_INVALID_ARG, "chat template: no context given");
    json_error_t jerr;
    json_t *ctx = json_loadb(json, json_len, JSON_ALLOW_NUL, &jerr);
    if (!ctx) return pl_errorf(PL_ERR_INVALID_ARG, "chat template context: %s (line %d, column %d)", jerr.text, jerr.line, jerr.column);
    pl_status st = pl_chat_template_render(t, ctx, opts, out, out_len);
    json_decref(ctx);
    return st;
}
