/*
 * Tool calling for `pocketllm serve` (issue 16): turns the text a model
 * produced into OpenAI's content + tool_calls, and builds the grammar that
 * forces well-formed calls. Pure code (jansson, server_text's buffers and
 * the library's JSON-schema compiler; no model, no HTTP) so it is
 * unit-tested on its own (tests/test_server_tools.c).
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
 * Text that is not decided yet (a possible start of "<tool_call>", an
 * unclosed call, a possible Llama-3 JSON call) is held back, so the result
 * for a prefix is always a prefix of the result for the longer text (content
 * is a byte prefix, calls a list prefix). pl_srv_tools_stream makes the same
 * decisions incrementally for streaming.
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

/* Streaming without re-scanning (issue 16): the scan above run once over a
 * text that grows, looking only at what is new. The state machine makes the
 * same decisions as pl_srv_tools_scan on the final text (tests check it on
 * every chunking), so the streamed content and calls reassemble to the
 * non-streamed response.
 *
 * stream_args (set when a grammar guarantees the calls' shape, i.e.
 * tool_choice "required" or a named function): a Hermes call is announced as
 * soon as its '{"name": "...", "arguments": ' head is complete, and its
 * arguments then follow in fragments as they are generated (OpenAI's
 * streaming). Without it a call is sent whole once it closed and validated,
 * because an unconstrained model may still break it (then it is text). */
enum { PL_SRV_TS_OUT, PL_SRV_TS_BODY, PL_SRV_TS_HEAD, PL_SRV_TS_ARGS };
typedef struct pl_srv_tool_stream {
    int state;
    size_t pos;            /* text before pos is decided and reported */
    size_t open_at, body;  /* the current call's opening tag and body start */
    size_t search;         /* where the search for the closing tag resumes */
    size_t args_sent;      /* PL_SRV_TS_ARGS: arguments reported up to here */
    int fence;             /* the current call opened with ``` (else <tool_call>) */
    bool start_decided;    /* the Llama 3 whole-output form is ruled out */
    size_t n_calls;        /* calls reported (or announced) */
} pl_srv_tool_stream;

/* Feeds text[0..n): the whole text so far (it only grows). Appends newly
 * decided content to *content and one entry per call event to deltas:
 * {"index": k, "name": str (first event of a call only), "arguments": str}.
 * At most max_calls calls are reported (later ones are dropped, as
 * parallel_tool_calls false does). 0 ok, -1 out of memory. */
int pl_srv_tools_stream(pl_srv_tool_stream *st, const char *text, size_t n, const char *names, bool final,
                        bool stream_args, size_t max_calls, pl_srv_buf *content, json_t *deltas);

/* The GBNF that forces Hermes tool calls ('<tool_call>\n{"name": NAME,
 * "arguments": ARGS}\n</tool_call>', one or, with parallel, several
 * separated by a newline) whose ARGS match each function's parameters
 * schema (an object schema with "properties" and no "additionalProperties"
 * admits no other keys there, as in llama.cpp's tool grammars and OpenAI's
 * strict mode). tools: the request's validated tools array; only: a function name
 * (tool_choice by name) or NULL (any of them). *gbnf is malloc'd. 0 ok;
 * -1 with the compiler's message in why (a schema keyword it cannot enforce,
 * a bad $ref). */
int pl_srv_tools_grammar(json_t *tools, const char *only, bool parallel, char **gbnf, char *why, size_t why_n);

/* A call id, "call_" + 24 hex digits, derived from the request id, the
 * choice and the call's position (stable between stream chunks). */
void pl_srv_tools_call_id(const char *req_id, int choice, size_t k, char out[32]);

#endif
