/*
 * The public chat-template API over the renderer in src/chat/: a template
 * is parsed once (pl_chat_template_parse / _from_model) and rendered many
 * times (pl_chat_template_apply) with the conversation given as JSON texts.
 * pl_chat_apply_template is the one-call form, kept for its callers.
 */
#include "engine/model.h"
#include "chat/chat_template.h"
#include "core/status.h"
#include <jansson.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

/* The text of token id (control tokens as their text) into buf; 0 if none. */
static size_t token_text(const pl_vocab *v, int32_t id, char *buf, size_t cap) {
    size_t len = 0;
    if (id < 0 || pl_vocab_piece(v, id, true, buf, cap, &len) != PL_OK) return 0;
    return len;
}

/* Gives t the model's BOS/EOS texts as its default bos_token/eos_token. */
static pl_status set_model_tokens(pl_chat_template *t, const pl_model *m) {
    char bos[256], eos[256];
    int32_t bos_id = pl_vocab_bos(m->vocab), eos_id = pl_vocab_eos(m->vocab);
    size_t bos_len = token_text(m->vocab, bos_id, bos, sizeof bos);
    size_t eos_len = token_text(m->vocab, eos_id, eos, sizeof eos);
    /* a token without text (absent, or longer than a template could want)
     * leaves the variable to the caller, as before */
    return pl_chat_template_set_default_tokens(t, bos_len ? bos : NULL, bos_len, eos_len ? eos : NULL, eos_len);
}

PL_API pl_status pl_chat_template_from_model(const pl_model *m, pl_chat_template **out) {
    if (out) *out = NULL;
    if (!m || !out) return pl_errorf(PL_ERR_INVALID_ARG, "pl_chat_template_from_model: invalid arguments");
    /* the file's template is read the way run --chat and serve read it */
    pl_status st = pl_chat_template_from_gguf(m->gguf, NULL, NULL, out);
    if (st == PL_ERR_NOT_FOUND)
        return pl_errorf(PL_ERR_NOT_FOUND, "%s has no chat template (tokenizer.chat_template)", m->file_name);
    if (st == PL_OK && (st = set_model_tokens(*out, m)) != PL_OK) {
        pl_chat_template_free(*out);
        *out = NULL;
    }
    return st;
}

PL_API pl_chat_template_params pl_chat_template_default_params(void) {
    pl_chat_template_params p;
    memset(&p, 0, sizeof p);
    p.add_generation_prompt = -1;
    return p;
}

/* Parses one JSON field of the params; want_array: a JSON array, else an
 * object. NUL characters (\u0000) are allowed inside strings: the renderer
 * keeps lengths. */
static pl_status parse_field(const char *what, const char *text, bool want_array, json_t **out) {
    json_error_t jerr;
    *out = json_loads(text, JSON_REJECT_DUPLICATES | JSON_ALLOW_NUL, &jerr);
    if (!*out)
        return pl_errorf(PL_ERR_INVALID_ARG, "chat %s is not valid JSON: %s (line %d, column %d)", what, jerr.text,
                         jerr.line, jerr.column);
    if (want_array ? !json_is_array(*out) : !json_is_object(*out)) {
        json_decref(*out);
        *out = NULL;
        return pl_errorf(PL_ERR_INVALID_ARG, "chat %s is not a JSON %s", what, want_array ? "array" : "object");
    }
    return PL_OK;
}

/* Sets ctx[key] to a string of len bytes unless given is NULL. */
static void set_string(json_t *ctx, const char *key, const char *s, size_t len) {
    if (s) json_object_set_new(ctx, key, json_stringn(s, len));
}

/* The template variables params describe, as one JSON object. */
static pl_status build_context(const pl_chat_template *t, const pl_chat_template_params *p, json_t **out) {
    json_t *ctx = NULL, *v = NULL;
    *out = NULL;
    if (p->context) PL_TRY(parse_field("context", p->context, false, &ctx));
    else if (!(ctx = json_object())) return pl_errorf(PL_ERR_NO_MEMORY, "out of memory");
    pl_status st = PL_OK;
    if (p->messages && (st = parse_field("messages", p->messages, true, &v)) == PL_OK) json_object_set_new(ctx, "messages", v);
    if (st == PL_OK && p->tools && (st = parse_field("tools", p->tools, true, &v)) == PL_OK) json_object_set_new(ctx, "tools", v);
    if (st != PL_OK) {
        json_decref(ctx);
        return st;
    }
    if (p->add_generation_prompt >= 0)
        json_object_set_new(ctx, "add_generation_prompt", json_boolean(p->add_generation_prompt > 0));
    const char *bos, *eos;
    size_t bos_len, eos_len;
    pl_chat_template_default_tokens(t, &bos, &bos_len, &eos, &eos_len);
    if (p->bos_token) set_string(ctx, "bos_token", p->bos_token, strlen(p->bos_token));
    else if (!json_object_get(ctx, "bos_token")) set_string(ctx, "bos_token", bos, bos_len);
    if (p->eos_token) set_string(ctx, "eos_token", p->eos_token, strlen(p->eos_token));
    else if (!json_object_get(ctx, "eos_token")) set_string(ctx, "eos_token", eos, eos_len);
    *out = ctx;
    return PL_OK;
}

PL_API pl_status pl_chat_template_apply(const pl_chat_template *t, const pl_chat_template_params *params,
                                        char **text, size_t *len) {
    if (text) *text = NULL;
    if (len) *len = 0;
    if (!t || !text) return pl_errorf(PL_ERR_INVALID_ARG, "pl_chat_template_apply: invalid arguments");
    pl_chat_template_params defaults = pl_chat_template_default_params();
    const pl_chat_template_params *p = params ? params : &defaults;
    json_t *ctx;
    PL_TRY(build_context(t, p, &ctx));
    pl_chat_template_options opts;
    memset(&opts, 0, sizeof opts);
    struct tm now;
    if (p->now) {
        time_t secs = (time_t)*p->now;
        if (!gmtime_r(&secs, &now)) {
            json_decref(ctx);
            return pl_errorf(PL_ERR_INVALID_ARG, "chat template: the time %lld is out of range", (long long)*p->now);
        }
        opts.now = &now;
    }
    pl_status st = pl_chat_template_render(t, ctx, &opts, text, len);
    json_decref(ctx);
    return st;
}

PL_API pl_status pl_chat_apply_template(const pl_model *m, const char *template_text, const char *context_json,
                                        char **text, size_t *len) {
    if (text) *text = NULL;
    if (len) *len = 0;
    if (!m || !context_json || !text || !len) return pl_errorf(PL_ERR_INVALID_ARG, "bad arguments");
    /* the context is checked before the template, as this call always has */
    json_error_t jerr;
    json_t *ctx = json_loads(context_json, JSON_REJECT_DUPLICATES | JSON_ALLOW_NUL, &jerr);
    if (!ctx || !json_is_object(ctx)) {
        json_decref(ctx);
        return pl_errorf(PL_ERR_INVALID_ARG, "chat context is not a JSON object: %s", ctx ? "wrong type" : jerr.text);
    }
    json_decref(ctx);
    pl_chat_template *t = NULL;
    pl_status st;
    if (template_text) {
        st = pl_chat_template_parse(template_text, strlen(template_text), &t);
        if (st == PL_OK) st = set_model_tokens(t, m);
    } else {
        st = pl_chat_template_from_model(m, &t);
    }
    pl_chat_template_params p = pl_chat_template_default_params();
    p.context = context_json;
    if (st == PL_OK) st = pl_chat_template_apply(t, &p, text, len);
    pl_chat_template_free(t);
    return st;
}
