/* Public chat-template entry point over the renderer in src/chat/. */
#include "engine/model.h"
#include "chat/chat_template.h"
#include "core/status.h"
#include <jansson.h>
#include <stdlib.h>
#include <string.h>

/* Sets key to the text of token id unless the context already has it. */
static void default_token(json_t *ctx, const char *key, const pl_vocab *v, int32_t id) {
    if (json_object_get(ctx, key) || id < 0) return;
    char buf[256];
    size_t len = 0;
    if (pl_vocab_piece(v, id, true, buf, sizeof buf, &len) == PL_OK)
        json_object_set_new(ctx, key, json_stringn(buf, len));
}

PL_API pl_status pl_chat_apply_template(const pl_model *m, const char *template_text, const char *context_json,
                                        char **text, size_t *len) {
    *text = NULL;
    *len = 0;
    if (!m || !context_json) return pl_errorf(PL_ERR_INVALID_ARG, "bad arguments");
    json_error_t jerr;
    json_t *ctx = json_loads(context_json, JSON_REJECT_DUPLICATES, &jerr);
    if (!ctx || !json_is_object(ctx)) {
        json_decref(ctx);
        return pl_errorf(PL_ERR_INVALID_ARG, "chat context is not a JSON object: %s", ctx ? "wrong type" : jerr.text);
    }
    default_token(ctx, "bos_token", m->vocab, pl_vocab_bos(m->vocab));
    default_token(ctx, "eos_token", m->vocab, pl_vocab_eos(m->vocab));
    pl_chat_template *t = NULL;
    /* the file's template is read the way run --chat and serve read it */
    pl_status st = template_text ? pl_chat_template_parse(template_text, strlen(template_text), &t)
                                 : pl_chat_template_from_gguf(m->gguf, NULL, NULL, &t);
    if (st == PL_ERR_NOT_FOUND && !template_text)
        st = pl_errorf(PL_ERR_NOT_FOUND, "%s has no chat template (tokenizer.chat_template)", m->file_name);
    if (st == PL_OK) st = pl_chat_template_render(t, ctx, NULL, text, len);
    pl_chat_template_free(t);
    json_decref(ctx);
    return st;
}
