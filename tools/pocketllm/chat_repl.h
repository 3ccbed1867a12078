/* Chat for `pocketllm run --chat`: prompts rendered with the model's own chat
 * template (tokenizer.chat_template, through src/chat's Jinja renderer; a
 * built-in ChatML renderer when the file has none or it cannot be parsed). */
#ifndef PL_CLI_CHAT_REPL_H
#define PL_CLI_CHAT_REPL_H
#include <stdbool.h>
#include "pocketllm.h"

typedef struct pl_chat_opts {
    const char *model_path;   /* for bos/eos ids (template variables) */
    const char *system;       /* a system message; NULL = none (the template's default applies) */
    bool think;               /* enable_thinking (Qwen3); false by default */
    long long max_tokens;     /* per reply; <= 0 = until end of turn or context full */
    pl_sampler_params sampler;
} pl_chat_opts;

/* The prompt for one user turn (with o->system when set), ready to tokenize
 * with special-token parsing, as a malloc'd string; NULL on error (message
 * printed). */
char *pl_chat_render_turn(const pl_model *model, const pl_chat_opts *o, const char *user);

/* The interactive chat on stdin/stdout: history kept across turns (the KV
 * cache is reused for the common prefix), /exit, /clear, /help, a tok/s line
 * on stderr after each reply. Ctrl-C stops a reply; at the prompt it exits.
 * Returns the process exit status. */
int pl_chat_repl(pl_model *model, const pl_chat_opts *o);

#endif
