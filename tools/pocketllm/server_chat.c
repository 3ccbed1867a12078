/*
 * Chat prompts for `pocketllm serve`: the model's chat prompt (chat_prompt.c,
 * the module `run --chat` uses too), read once when the server starts, and
 * its failures mapped to OpenAI errors.
 */
#include "server.h"
#include "chat_prompt.h"
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

pl_status pl_srv_chat_init(pl_srv *s) {
    pl_chat_prompt *cp = NULL;
    pl_status st = pl_chat_prompt_create(s->model, s->cfg.model_path, &cp);
    if (st != PL_OK) return st;
    /* server_openai.c looks at the template's text (which tool-call syntax
     * it teaches); NULL when the built-in ChatML renderer is used. */
    const char *t = pl_chat_prompt_template(cp);
    if (t && !(s->chat_template = strdup(t))) {
        pl_chat_prompt_free(cp);
        return PL_ERR_NO_MEMORY;
    }
    s->chat_impl = cp;
    if (pl_chat_prompt_notice(cp)) pl_srv_log("%s", pl_chat_prompt_notice(cp));
    return PL_OK;
}

void pl_srv_chat_free(pl_srv *s) {
    pl_chat_prompt_free(s->chat_impl);
    s->chat_impl = NULL;
    free(s->chat_template);
    s->chat_template = NULL;
}

int pl_srv_chat_prompt(pl_srv *s, json_t *messages, json_t *kwargs, int32_t **ids, size_t *n_ids, bool *think_open,
                       pl_srv_error *e) {
    return pl_srv_chat_prompt_ex(s, messages, kwargs, ids, n_ids, think_open, NULL, e);
}

int pl_srv_chat_prompt_ex(pl_srv *s, json_t *messages, json_t *kwargs, int32_t **ids, size_t *n_ids, bool *think_open,
                          const char *prefill, pl_srv_error *e) {
    pl_chat_prompt_tokens t;
    const char *param = NULL;
    pl_status st = pl_chat_prompt_tokenize(s->chat_impl, messages, kwargs, prefill, &t, &param);
    if (st == PL_ERR_NO_MEMORY) return pl_srv_fail(e, 500, NULL, NULL, "out of memory");
    /* Templates reject conversations they do not support (for example roles
     * that do not alternate): the client's problem, hence 400. */
    if (st != PL_OK)
        return pl_srv_fail(e, 400, param ? param : "messages", st == PL_ERR_INVALID_ARG ? "invalid_value" : NULL, "%s",
                           pl_chat_prompt_error());
    if (t.plain_text) pl_srv_log("message text contains special-token text: tokenized as plain text");
    *ids = t.ids;
    *n_ids = t.n;
    *think_open = t.think_open;
    return 0;
}
