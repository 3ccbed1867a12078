/*
 * chat_template.h — renders Hugging Face chat templates (a Jinja2 subset)
 * the way transformers' apply_chat_template does: jinja2 with
 * trim_blocks=True, lstrip_blocks=True, loop controls, an immutable sandbox,
 * tojson = json.dumps(ensure_ascii=False), raise_exception() and
 * strftime_now().
 *
 *     pl_chat_template *t;
 *     if (pl_chat_template_parse(text, len, &t) != PL_OK) ... pl_last_error()
 *     char *out; size_t n;
 *     if (pl_chat_template_render(t, context, NULL, &out, &n) != PL_OK) ...
 *     ... free(out); pl_chat_template_free(t);
 *
 * context is a JSON object; each of its keys is a template variable
 * (messages, tools, add_generation_prompt, bos_token, eos_token,
 * enable_thinking, ...). A parsed template is read-only while rendering, so
 * one template may be rendered from several threads at once.
 *
 * Errors (pl_last_error()):
 *   parse:  PL_ERR_FORMAT "chat template syntax error at line L, column C: ..."
 *           (PL_ERR_UNSUPPORTED for tags such as include/extends); a
 *           template containing a NUL byte is refused this way too
 *   render: PL_ERR_INVALID_ARG; a template's raise_exception("msg") gives
 *           exactly "msg"; anything else "chat template error at line L: ..."
 *           (undefined values used wrongly, type errors, exceeded limits).
 * Hostile templates and inputs cannot crash the process or run unbounded:
 * nesting, recursion, loop iterations, evaluation steps, allocation and
 * output size are all limited.
 */
#ifndef PL_CHAT_CHAT_TEMPLATE_H
#define PL_CHAT_CHAT_TEMPLATE_H
#include <stddef.h>
#include <stdint.h>
#include <time.h>
#include "pocketllm.h"

struct json_t;   /* jansson */

typedef struct pl_chat_template pl_chat_template;

typedef struct pl_chat_template_options {
    const struct tm *now;     /* time for strftime_now(); NULL = local time now */
    size_t max_output;        /* bytes of output (and of any string); 0 = 64 MiB */
    uint64_t max_iterations;  /* loop iterations in total; 0 = 1,000,000 */
    uint64_t max_steps;       /* evaluated statements/expressions; 0 = 10,000,000 */
    uint64_t max_alloc;       /* bytes allocated in total while rendering; 0 = 512 MiB */
    size_t max_stack;         /* bytes of C stack the renderer may use; 0 = 512 KiB
                                 (less when the thread's stack has less room left) */
} pl_chat_template_options;

pl_status pl_chat_template_parse(const char *text, size_t len, pl_chat_template **out);
void pl_chat_template_free(pl_chat_template *t);

/* The template of a GGUF file (tokenizer.chat_template), parsed: how every
 * path that takes the template from a model reads it (run --chat, serve,
 * chat-template --model, pl_chat_apply_template), so they all see the same
 * bytes, of any length the GGUF reader accepts. PL_ERR_NOT_FOUND when the
 * file has none; otherwise pl_chat_template_parse's errors. text/len (may
 * be NULL) receive the template's bytes, which point into g. */
struct pl_gguf;
pl_status pl_chat_template_from_gguf(const struct pl_gguf *g, const char **text, size_t *len,
                                     pl_chat_template **out);

/* The bos_token / eos_token the public pl_chat_template_apply supplies when
 * its caller gives none (copied; NULL = none). pl_chat_template_render does
 * not use them: its context is all there is. */
pl_status pl_chat_template_set_default_tokens(pl_chat_template *t, const char *bos, size_t bos_len, const char *eos,
                                              size_t eos_len);
void pl_chat_template_default_tokens(const pl_chat_template *t, const char **bos, size_t *bos_len, const char **eos,
                                     size_t *eos_len);

/* Renders into a malloc'd, NUL-terminated string (free with free()). opts
 * may be NULL. context must be a JSON object (or NULL for no variables). */
pl_status pl_chat_template_render(const pl_chat_template *t, const struct json_t *context,
                                  const pl_chat_template_options *opts, char **out, size_t *out_len);

/* The same with the context given as JSON text. */
pl_status pl_chat_template_render_json(const pl_chat_template *t, const char *json, size_t json_len,
                                       const pl_chat_template_options *opts, char **out, size_t *out_len);

#endif
