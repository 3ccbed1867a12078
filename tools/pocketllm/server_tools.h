/*
 * Tool calling for `pocketllm serve` (issue 16): turns the text a model
 * produced into OpenAI's content + tool_calls. Pure code (jansson and
 * server_text's buffers only, no model, no HTTP) so it is unit-tested on its
 * own (tests/test_server_tools.c).
 *
 * Recognised forms:
 *   - Qwen / Hermes: <tool_call>\n{"name": ..., "arguments": {...}}\n</tool_call>,
 *     any number of them, with text around them;
 *   - Llama 3: the whole output is one JSON object {"name": ..., "parameters": {...}}
 *     (optionally after "<|python_tag|>").
 * A call counts only when its JSON parses, "name" is one of the request's
 * functions and the arguments are an object (or a string holding one);
 * anything else stays plain content, so a malformed call can never become an
 * error.
 *
 * Streaming uses the same function on growing prefixes of the text: text that
 * is not decided yet (a possible start of "<tool_call>", an unclosed call, a
 * possible Llama-3 JSON call) is held back, and the result for a prefix is
 * always a prefix of the result for the longer text (content is a byte prefix,
 * calls a list prefix), so the difference of two scans is the delta to send.
 */
#ifndef PL_SERVER_TOOLS_H
#define PL_SERVER_TOOLS_H
#include "server_text.h"
#include <jansson.h>
#include <stdbool.h>
#include <stddef.h>

/* Function names of a request, NUL-separated, ending with an empty name. */
#define PL_SRV_TOOL_NAMES 8448

/* Does the NUL-separated list hold name? */
bool pl_srv_tools_known(const char *names, const char *name, size_t n);

/* Scans text. final: generation ended, so nothing is held back any more.
 * Appends the content bytes decided so far to *content and returns the calls
 * decided so far as [{"name": str, "arguments": str (compact JSON)}], or NULL
 * when out of memory. */
json_t *pl_srv_tools_scan(const char *text, size_t n, const char *names, bool final, pl_srv_buf *content);

/* A call id, "call_" + 24 hex digits, derived from the request id, the
 * choice and the call's position (stable between stream chunks). */
void pl_srv_tools_call_id(const char *req_id, int choice, size_t k, char out[32]);

#endif
