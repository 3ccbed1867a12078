/*
 * `pocketllm serve`: an OpenAI-compatible HTTP server over one loaded model.
 *
 * Threads:
 *   - libmicrohttpd runs one thread per connection. Handlers parse and
 *     validate the request, tokenize the prompt, hand a pl_srv_request to the
 *     scheduler and then block (with a timed wait that also watches the socket
 *     for a hang-up) until the result or the next streamed delta is there.
 *   - One scheduler thread owns the model. Each step it builds one pl_batch
 *     holding a decode token for every generating sequence plus the next
 *     prompt chunk of newly admitted ones, runs it, samples, and pushes text
 *     into the requests. Requests join and leave between steps.
 *
 * Files: cmd_serve.c (options, startup, shutdown), server_http.c (routes,
 * bodies, SSE), server_openai.c (request validation and response JSON;
 * structured output and forced tool calls are compiled there into a grammar
 * per request, cloned per choice), server_sched.c (queue, continuous
 * batching, metrics; a choice whose grammar is done stops), server_chat.c
 * (chat template and prompt tokenization), server_text.c (stop strings,
 * UTF-8, reasoning split), server_tools.c (tool-call parsing, incremental
 * streaming, the forced-call grammar).
 */
#ifndef PL_SERVER_H
#define PL_SERVER_H
#include "pocketllm.h"
#include "server_budget.h"
#include "server_text.h"
#include "server_tools.h"
#include <jansson.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>

#define PL_SRV_MAX_BODY (8u << 20)  /* request bodies above this get 413 */
#define PL_SRV_MAX_STOPS 16

typedef struct pl_srv_config {
    const char *model_path;
    const char *host;
    const char *device;
    const char *api_key;     /* NULL: no authentication */
    const char *alias;       /* model id reported by the API (default: file name) */
    int port;
    int ctx;                 /* context per slot; 0 = min(model, 4096) */
    int threads;
    int parallel;            /* KV-cache slots = sequences decoded together */
    int batch;               /* max tokens per forward step */
    int max_batched_tokens;  /* tokens per step while sequences decode (chunked prefill); 0 = default */
    /* Time budget of a step while sequences decode (server_budget.h):
     * max_step_ms > 0 a fixed target, < 0 (default) max_step_factor times
     * the measured decode step, 0 off (the fixed token budget). */
    double max_step_ms;
    double max_step_factor;
    int queue;               /* requests that may wait for a slot */
    int idle_timeout;        /* seconds an idle keep-alive connection is kept */
    bool metrics;
    /* Slow-client defences (server_http.c): a request's line, headers and
     * body must arrive within request_timeout seconds of the connection (or
     * of the request line, on a kept-alive one) however they trickle;
     * connections beyond max_conns in all or max_conns_per_ip from one
     * address (0 = no per-address limit) get a 503 with Retry-After. */
    int request_timeout;
    int max_conns;
    int max_conns_per_ip;
    /* Serving at scale (issue 17). prompt_cache: a finished request leaves
     * its KV cache in its slot and a new request whose prompt starts the
     * same way prefills only the rest; slot_similarity: the share of a
     * prompt a free slot's cache must cover for that slot to be chosen over
     * the least recently used one (llama-server's --slot-prompt-similarity).
     * drain_timeout: seconds SIGTERM waits for running requests.
     * health_queue_full_503: /health answers 503 while the queue is full. */
    bool prompt_cache;
    float slot_similarity;
    int drain_timeout;
    bool health_queue_full_503;
    /* --cache-ram MiB (llama-server's name and unit; 0 = off): evicted
     * prompt prefixes' KV rows kept in host memory (server_spill.c). */
    long long cache_ram_mib;
} pl_srv_config;

/* An API error in OpenAI's shape. */
typedef struct pl_srv_error {
    int http;
    const char *type;        /* "invalid_request_error", "server_error", ... */
    char param[64];          /* "" = null */
    char code[48];           /* "" = null */
    char message[512];
} pl_srv_error;

int pl_srv_fail(pl_srv_error *e, int http, const char *param, const char *code, const char *fmt, ...)
    __attribute__((format(printf, 5, 6)));
json_t *pl_srv_error_json(const pl_srv_error *e);

typedef enum { PL_SRV_CHAT, PL_SRV_COMPLETION } pl_srv_kind;
enum { PL_SEQ_QUEUED, PL_SEQ_PREFILL, PL_SEQ_DECODE, PL_SEQ_DONE };

struct pl_srv_request;

/* One generated choice: its own KV slot, sampler and text pipeline. */
typedef struct pl_srv_seq {
    struct pl_srv_request *req;
    int index;                   /* choice index in the response */
    const int32_t *prompt;       /* points into req->prompts */
    size_t n_prompt;
    /* scheduler thread only */
    int state;
    int slot;
    uint64_t admit_no;           /* admission order (prefill is served FIFO) */
    size_t n_fed;                /* prompt tokens already in the cache */
    size_t chunk;                /* prompt tokens in the step being run */
    int32_t pos;                 /* position of the next token fed */
    int32_t next_tok;            /* sampled, to be fed next step */
    pl_sampler *smp;
    size_t n_cached;             /* prompt tokens reused from the slot's cache */
    double t_last;               /* time of the last token (inter-token latency) */
    /* guarded by req->mu */
    pl_srv_text text;
    int32_t *tokens;             /* every sampled token (the EOG one included) */
    size_t n_tokens, cap_tokens;
    bool done;
    const char *finish;          /* "stop", "length", NULL while running */
    /* logprobs (issue 16), guarded by req->mu: one entry per generated token
     * that has text (EOG tokens are left out, as OpenAI does) */
    struct pl_srv_lp *lps;
    size_t n_lps, cap_lps;
    size_t n_lps_sent;           /* entries already streamed */
    /* structured output (issue 16): this choice's clone of req->grammar,
     * attached to smp (which does not own it); NULL = unconstrained */
    pl_grammar *grammar;
    /* streamed tool calls, guarded by req->mu: the prefill plus the content
     * fed to the incremental parser so far (server_tools.h) */
    pl_srv_tool_stream ts;
    pl_srv_buf tool_text;
    size_t tool_fed;             /* content bytes appended to tool_text */
    /* Whitespace-only content is held back while calls may come: with
     * calls and no other text, the response's content is null. */
    pl_srv_buf tool_ws;
    bool tool_said;              /* content other than whitespace was streamed */
} pl_srv_seq;

#define PL_SRV_MAX_TOP_LOGPROBS 20
/* One generated token's log-probability and its top alternatives. */
typedef struct pl_srv_lp {
    int32_t token;
    float logprob;
    pl_token_logprob top[PL_SRV_MAX_TOP_LOGPROBS];
} pl_srv_lp;

typedef struct pl_srv_request {
    atomic_int refs;
    atomic_bool cancelled;
    pthread_mutex_t mu;
    pthread_cond_t cv;

    pl_srv_kind kind;
    bool stream, include_usage, return_tokens;
    bool cache_prompt;           /* may reuse a slot's cached prefix (default true) */
    pl_sampler_params sp;
    long long max_tokens;        /* < 0: until the context is full */
    char *stops[PL_SRV_MAX_STOPS];
    size_t n_stops;
    bool parse_reasoning, think_open;

    int n_prompts;
    int32_t **prompts;
    size_t *n_prompt_tok;
    int n_seqs;
    pl_srv_seq *seqs;
    size_t usage_prompt;         /* prompt tokens counted once per distinct prompt */
    /* penalties, bias, logprobs (issue 16) */
    float repeat_penalty, frequency_penalty, presence_penalty;
    int32_t repeat_last_n;
    int32_t *bias_id;
    float *bias;
    size_t n_bias;
    int n_logprobs;              /* top alternatives per token; -1: logprobs not asked for */
    size_t usage_cached;         /* of those, reused from a slot's cache (set at admission, under mu) */
    /* tool calling (issue 16, server_tools.h): the request's function names
     * (tool_names[0] == 0: no tools, or tool_choice "none"), the forced start
     * of the assistant turn for "required" / a named function, and whether
     * more than one call may be returned */
    char tool_names[PL_SRV_TOOL_NAMES];
    char tool_prefill[96];
    bool parallel_tool_calls;
    /* The grammar that constrains every choice, compiled while the request
     * is parsed (on the HTTP thread): from "grammar" (GBNF), "json_schema",
     * response_format json_object / json_schema, or the tools' schemas for
     * tool_choice "required" / a named function (tool_grammar: then the
     * calls' arguments are streamed in fragments). NULL: unconstrained. */
    pl_grammar *grammar;
    bool tool_grammar;

    /* guarded by mu */
    int n_done;
    bool failed;
    int fail_http;
    char fail_msg[256];

    char id[48];
    long long created;
    char route[32];
    double t_submit, t_first, t_done;
    struct pl_srv_request *next; /* queue link (guarded by the server's mu) */
} pl_srv_request;

/* DRAINING: SIGTERM came; running requests finish, new ones get 503. */
enum { PL_SRV_LOADING, PL_SRV_READY, PL_SRV_STOPPING, PL_SRV_DRAINING };

/* A Prometheus histogram with fixed bucket bounds (seconds). */
#define PL_SRV_HIST_BUCKETS 14
typedef struct pl_srv_hist {
    uint64_t count[PL_SRV_HIST_BUCKETS + 1]; /* the last one is +Inf */
    double sum;
    uint64_t n;
} pl_srv_hist;

typedef struct pl_srv {
    pl_srv_config cfg;
    atomic_int state;
    pl_model *model;
    char model_id[256];
    int32_t n_vocab, n_ctx;
    int n_seq, n_batch;
    int step_budget;             /* tokens per step while any sequence decodes (<= n_batch) */
    pl_srv_budget_cfg budget;    /* how prompt tokens per step are chosen (server_budget.h) */
    long long started;

    /* chat template (server_chat.c) */
    char *chat_template;
    char bos_text[64], eos_text[64];
    void *chat_impl;

    /* queue and metrics, guarded by mu */
    pthread_mutex_t mu;
    pthread_cond_t cv;
    pl_srv_request *q_head, *q_tail;
    int q_len;
    bool stop_sched;
    int slots_busy;
    uint64_t m_requests, m_rejected, m_cancelled, m_failed, m_prompt_tok, m_gen_tok, m_steps;
    double m_busy_s;             /* time spent in forward steps */
    double win_t0;               /* throughput window */
    uint64_t win_tok;
    double rate;
    /* prompt cache and latency metrics (issue 17), guarded by mu */
    uint64_t m_prompt_all, m_cache_hits, m_cache_queries, m_cache_tok, m_success;
    uint64_t m_share_hits, m_share_tok; /* prefixes copied from another slot (share_prefix) */
    uint64_t m_status[6];        /* HTTP answers by class: [4] 4xx, [5] 5xx */
    uint64_t m_err_code[8];      /* error answers by code, see pl_srv_count_status */
    pl_srv_hist h_ttft, h_itl;
    int32_t *slot_pos;           /* KV positions held per slot (busy or cached) */
    int32_t *slot_cached;        /* tokens the slot's cache holds for reuse */
    atomic_int inflight;         /* generation requests not yet answered in full */
    /* --cache-ram store (server_spill.c), guarded by mu */
    struct pl_srv_spill *spill;  /* NULL: off */
    uint64_t spill_capacity, spill_bytes, spill_entries;
    uint64_t m_spill_saved, m_spill_hits, m_spill_tok, m_spill_evicted;
    pl_srv_step_est est_pub;     /* the scheduler's step cost estimates, for /metrics */

    /* scheduler thread only */
    pthread_t sched;
    bool sched_running;
    pl_srv_seq **slot_seq;
    uint64_t admit_counter;
    int32_t **slot_tok;          /* the tokens in each slot's KV cache, positions 0.. */
    size_t *slot_cap;
    uint64_t *slot_used_at;      /* admission number of the slot's last user (LRU) */
    pl_srv_step_est est;         /* step costs learned from the steps run */

    struct MHD_Daemon *daemon;
    int bound_port;
    void *http_impl;             /* connection registry and watchdog (server_http.c) */

    /* request limits (server_openai.c) */
    _Atomic size_t max_piece;    /* bytes of the longest token text; 0 = not measured yet */
} pl_srv;

/* server_sched.c */
pl_status pl_srv_sched_start(pl_srv *s);
void pl_srv_sched_stop(pl_srv *s);
/* Frees the slots' prompt caches (after pl_srv_sched_stop). */
void pl_srv_sched_free(pl_srv *s);
pl_srv_request *pl_srv_request_new(void);
void pl_srv_request_unref(pl_srv_request *r);
/* Queues r (takes a reference). 0 ok, -1 queue full. */
int pl_srv_submit(pl_srv *s, pl_srv_request *r);
/* The client went away: stop generating and free the slots at the next step. */
void pl_srv_cancel(pl_srv *s, pl_srv_request *r);
void pl_srv_metrics_text(pl_srv *s, pl_srv_buf *out);
/* GET /slots: per slot id, state, cached tokens; queue depth. */
json_t *pl_srv_slots_json(pl_srv *s);
/* Counts one HTTP answer for /metrics (errors by status). */
void pl_srv_count_status(pl_srv *s, unsigned status);
/* Requests queued or running (drain waits for 0). */
int pl_srv_load(pl_srv *s);
double pl_srv_now(void);
void pl_srv_log(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

/* server_spill.c (--cache-ram): under s->mu, on the scheduler thread. */
pl_status pl_srv_spill_init(pl_srv *s);
void pl_srv_spill_free(pl_srv *s);
/* Before a new request prefills over slot's cache past its first reuse
 * tokens: keeps the slot's cached prefix in the store. */
void pl_srv_spill_save(pl_srv *s, int slot, size_t reuse);
/* After the slot is cut to reuse tokens: copies back the rest of the longest
 * stored prefix of q's prompt, if longer; returns the tokens now cached. */
size_t pl_srv_spill_restore(pl_srv *s, const pl_srv_seq *q, int slot, size_t reuse);
/* The host's MemAvailable in MiB; -1 when unknown (not Linux). */
long long pl_srv_mem_available_mib(void);

/* server_openai.c */
/* Parses a request body (the bytes as received) into a JSON object. The
 * error messages are for clients: jansson's own texts can name its flags.
 * With s (may be NULL), a body holding a text that certainly cannot fit s's
 * context is refused before it is parsed. */
json_t *pl_srv_body_json(pl_srv *s, const char *p, size_t n, pl_srv_error *e);
/* Text of more bytes than this cannot fit the context (every token stands for
 * at most the longest token text's bytes), so it is refused before it is
 * tokenized. */
size_t pl_srv_prompt_byte_bound(pl_srv *s);
/* Validates an OpenAI request body and builds the request (prompt tokenized).
 * Returns NULL and fills e on error. */
pl_srv_request *pl_srv_parse_request(pl_srv *s, pl_srv_kind kind, json_t *body, pl_srv_error *e);
/* The whole (non-streaming) response. */
json_t *pl_srv_response_json(pl_srv *s, pl_srv_request *r);
/* One streaming chunk for choice `index`. content/reasoning may be NULL. */
json_t *pl_srv_chunk_json(pl_srv *s, pl_srv_request *r, int index, bool role, const char *content, size_t n_content,
                          const char *reasoning, size_t n_reasoning, const char *finish);
json_t *pl_srv_usage_chunk_json(pl_srv *s, pl_srv_request *r);
json_t *pl_srv_usage_json(pl_srv_request *r);
json_t *pl_srv_models_json(pl_srv *s);
/* Scheduler thread: records the log-probabilities of q's token tok from its
 * raw logits row, when the request asked for them. 0 ok, -1 (pl_last_error
 * set) on failure. */
int pl_srv_record_logprobs(pl_srv *s, pl_srv_seq *q, const float *row, int32_t tok);

/* server_chat.c */
pl_status pl_srv_chat_init(pl_srv *s);
void pl_srv_chat_free(pl_srv *s);
/* Renders messages (already validated and normalized: role + string
 * content) with the template and tokenizes the result so that message text
 * can never become special tokens. */
int pl_srv_chat_prompt(pl_srv *s, json_t *messages, json_t *kwargs, int32_t **ids, size_t *n_ids, bool *think_open,
                       pl_srv_error *e);
/* The same, with prefill appended to the rendered prompt (as template text). */
int pl_srv_chat_prompt_ex(pl_srv *s, json_t *messages, json_t *kwargs, int32_t **ids, size_t *n_ids, bool *think_open,
                          const char *prefill,
                       pl_srv_error *e);

/* server_http.c */
int pl_srv_http_start(pl_srv *s);
void pl_srv_http_stop(pl_srv *s);

#endif
