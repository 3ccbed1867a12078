/* Chat for `pocketllm run --chat`: prompts built by chat_prompt.c (the
 * model's own chat template, or ChatML when it has none; the module `serve`
 * uses too), optional tools (an OpenAI tools array) whose calls are parsed
 * with serve's parser, and `run`'s sampling options (penalties, logit bias,
 * a grammar or JSON schema), applied to every reply. */
#ifndef PL_CLI_CHAT_REPL_H
#define PL_CLI_CHAT_REPL_H
#include <stdbool.h>
#include <stddef.h>
#include "pocketllm.h"

typedef struct pl_chat_opts {
    const char *model_path;   /* the template is read from it */
    const char *system;       /* a system message; NULL = none (the template's default applies) */
    bool think;               /* enable_thinking (Qwen3); false by default */
    long long max_tokens;     /* per reply; <= 0 = until end of turn or context full */
    pl_sampler_params sampler;
    /* run's --repeat-penalty ... --logit-bias (pl_sampler_set_penalties /
     * _set_logit_bias); penalties false = none set. */
    bool penalties;
    float repeat_penalty, frequency_penalty, presence_penalty;
    int32_t repeat_last_n;
    const int32_t *bias_ids;
    const float *bias;
    size_t n_bias;
    /* --grammar (GBNF) or --json-schema text; NULL = none. grammar_name
     * names it in errors. Every reply starts from the grammar's start. */
    const char *grammar_text;
    size_t grammar_len;
    bool grammar_is_schema;
    const char *grammar_name;
    /* --tools: a JSON file holding an OpenAI tools array; NULL = none. */
    const char *tools_path;
} pl_chat_opts;

typedef struct pl_chat pl_chat;

/* The chat's prompt builder (template read once), tools and grammar.
 * Returns the exit status: 0, or 1 with the error printed. */
int pl_chat_open(pl_model *model, const pl_chat_opts *o, pl_chat **out);
void pl_chat_close(pl_chat *c);

/* The prompt tokens for one user turn (with o->system when set), exactly as
 * the interactive chat and serve build them; *ids is malloc'd (free()).
 * Returns the exit status (error printed). */
int pl_chat_turn_tokens(pl_chat *c, const char *user, int32_t **ids, size_t *n_ids);

/* The tool calls in a reply's text (when --tools is given), printed to
 * stdout: as lines "tool_call: {OpenAI tool call JSON}" or, with json, as
 * the fragment `, "tool_calls": [...]` of an enclosing object. Prints
 * nothing without --tools. */
void pl_chat_print_tool_calls(pl_chat *c, const char *text, size_t n, bool json);

/* The interactive chat on stdin/stdout: history kept across turns (the KV
 * cache is reused for the common prefix), /exit, /clear, /help, /tool, a
 * tok/s line on stderr after each reply. Ctrl-C stops a reply; at the prompt
 * it exits. Returns the process exit status. */
int pl_chat_repl(pl_model *model, const pl_chat_opts *o);

#endif
