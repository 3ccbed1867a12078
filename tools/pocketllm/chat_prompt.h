/*
 * The chat prompt of a model: the one module that turns a conversation into
 * prompt tokens, for `pocketllm run --chat` (chat_repl.c) and `pocketllm
 * serve` (server_chat.c) alike, so both build the same prompt for the same
 * messages.
 *
 *   messages (+ tools, + template kwargs)
 *     -> text:   the model's own chat template (tokenizer.chat_template), read
 *                and parsed once per model; the built-in ChatML / Qwen3
 *                renderer when the file has none or it cannot be parsed
 *     -> tokens: special tokens only from the template, never from message
 *                text (see chat_prompt.c), and the one BOS rule: when the
 *                tokenizer adds a BOS, the prompt starts with exactly one
 *                (a BOS the template rendered as text counts as that one).
 *
 * Messages are a JSON array of objects: role (system, user, assistant,
 * tool), content (a string), and optionally reasoning_content, tool_calls
 * ([{id, type, function: {name, arguments}}]) and tool_call_id. kwargs is a
 * JSON object of extra template variables (tools, enable_thinking, ...); may
 * be NULL. add_generation_prompt defaults to true, bos_token and eos_token to
 * the vocabulary's.
 *
 * A pl_chat_prompt is read-only after creation: one may be used from several
 * threads at once.
 */
#ifndef PL_CLI_CHAT_PROMPT_H
#define PL_CLI_CHAT_PROMPT_H
#include <jansson.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include "pocketllm.h"

typedef struct pl_chat_prompt pl_chat_prompt;

/* Reads the chat template of model from its file, model_path, once (and
 * the BOS/EOS texts from its vocabulary). A missing or unusable
 * template is not an error: the built-in ChatML renderer is used and
 * pl_chat_prompt_notice says so. Fails only when out of memory. */
pl_status pl_chat_prompt_create(const pl_model *model, const char *model_path, pl_chat_prompt **out);
/* The same with the template given as text instead of the file's (NULL:
 * none, the built-in ChatML): an override such as llama-server's
 * --chat-template-file, and the tests' hostile templates. */
pl_status pl_chat_prompt_create_from_text(const pl_model *model, const char *text, size_t len, pl_chat_prompt **out);
void pl_chat_prompt_free(pl_chat_prompt *p);

/* NULL when the model's own template is used; otherwise one line saying
 * that prompts are rendered as ChatML, and why. */
const char *pl_chat_prompt_notice(const pl_chat_prompt *p);
/* The text of the template in use; NULL when the built-in ChatML is. */
const char *pl_chat_prompt_template(const pl_chat_prompt *p);

/* Why the last failed pl_chat_prompt_* call on this thread failed: its own
 * message, or the library's (pl_last_error) when a library call failed. */
const char *pl_chat_prompt_error(void);

/* Renders the conversation to text (malloc'd, NUL-terminated; free()).
 * PL_ERR_INVALID_ARG when the template rejects it (pl_chat_prompt_error() has the
 * template's message: raise_exception text, limits exceeded, ...),
 * PL_ERR_NO_MEMORY. */
pl_status pl_chat_prompt_render(const pl_chat_prompt *p, json_t *messages, json_t *kwargs, char **text, size_t *len);

typedef struct pl_chat_prompt_tokens {
    int32_t *ids;        /* malloc'd (free()) */
    size_t n;
    bool think_open;     /* the prompt ends inside a <think> block the template opened */
    bool plain_text;     /* some message text held special-token text: tokenized as plain text */
} pl_chat_prompt_tokens;

/* Renders and tokenizes the conversation; prefill (may be NULL) is appended
 * to the rendered text as template text (the start of the assistant turn).
 * On failure *param names what to blame ("messages" or "tools"; NULL when
 * out of memory) and pl_chat_prompt_error() says what is wrong:
 * PL_ERR_INVALID_ARG (the template rejected the messages, tools or
 * tool-call arguments hold special-token text, tokenization failed),
 * PL_ERR_NO_MEMORY. */
pl_status pl_chat_prompt_tokenize(const pl_chat_prompt *p, json_t *messages, json_t *kwargs, const char *prefill,
                                  pl_chat_prompt_tokens *out, const char **param);

#endif
