/*
 * pocketllm.h — the public C API of libpocketllm.
 *
 * One process, one device: a model is loaded onto exactly one backend
 * ("ref", "cpu", ...). Everything the model needs on that device (weights,
 * KV cache, scratch) is planned before anything is allocated.
 *
 * Every fallible call returns a pl_status. On failure, pl_last_error() gives
 * a one-line, human-readable message naming the problem (thread-local, valid
 * until the next failing call on the same thread). No function here exits or
 * aborts the process on bad input.
 */
#ifndef POCKETLLM_H
#define POCKETLLM_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#if defined(__GNUC__)
#define PL_API __attribute__((visibility("default")))
#else
#define PL_API
#endif

/* Status codes. Values are stable (part of the ABI). */
typedef enum pl_status {
    PL_OK = 0,
    PL_ERR_INVALID_ARG = 1,   /* a caller passed something invalid */
    PL_ERR_IO = 2,            /* open/read/mmap failed */
    PL_ERR_FORMAT = 3,        /* a file is corrupt or not what it claims */
    PL_ERR_UNSUPPORTED = 4,   /* valid, but this build cannot do it */
    PL_ERR_NO_MEMORY = 5,     /* an allocation failed */
    PL_ERR_NOT_FOUND = 6,     /* a key, tensor or name does not exist */
    PL_ERR_CONTEXT_FULL = 7,  /* the sequence would exceed the context size */
    PL_ERR_DOES_NOT_FIT = 8,  /* the plan exceeds the device's memory budget */
    PL_ERR_INTERNAL = 9,      /* a bug: please report it */
} pl_status;

PL_API const char *pl_status_str(pl_status st);
PL_API const char *pl_last_error(void);
PL_API const char *pl_version(void);

/* ---- model ----------------------------------------------------------------*/

typedef struct pl_model pl_model;
typedef struct pl_session pl_session;

typedef struct pl_model_params {
    const char *device;      /* backend name: "cpu" (default) or "ref" */
    int n_threads;           /* 0 = all cores */
    int n_ctx;               /* context length per sequence; 0 = min(file's, 4096) */
    int n_seq;               /* KV-cache slots (sequences decoded together); 0 = 1 */
    int n_batch;             /* max tokens per forward call; 0 = 512 */
    uint64_t memory_budget;  /* bytes the device may use; 0 = no limit */
    bool vocab_only;         /* load only the tokenizer (no tensors needed) */
    int32_t n_outputs;       /* logits rows one forward call can return; 0 = n_seq (decoding).
                                Perplexity / imatrix want every token's: n_batch */
    bool batch_invariant;    /* every token's numerics independent of how tokens are batched:
                                attention always takes the decode path (llama.cpp's, for fewer
                                than 64 tokens), so a cached prefix or other sequences in the
                                batch never change a result. false (default) follows llama.cpp:
                                batches of 64+ tokens use f32 attention. The server sets it. */
    /* KV cache element types, llama.cpp's --cache-type-k / --cache-type-v:
     * "f16" (NULL or "" = f16, the default), "q8_0" or "q4_0". A quantized
     * cache is rotated by a Walsh-Hadamard matrix as llama.cpp does (head
     * size a multiple of 64; env PL_ATTN_ROT_DISABLE=1 turns that off, as
     * LLAMA_ATTN_ROT_DISABLE does there). An unknown name, or a type the
     * device's backend has no kernel for, fails the load before any weight
     * is read. */
    const char *cache_type_k;
    const char *cache_type_v;
} pl_model_params;

PL_API pl_model_params pl_model_default_params(void);
PL_API pl_status pl_model_load(const char *path, const pl_model_params *params, pl_model **out);
PL_API void pl_model_free(pl_model *model);

/* What the planner decided, all in bytes on the device. */
typedef struct pl_memory_plan {
    uint64_t weights;
    uint64_t kv_cache;
    uint64_t scratch;
    uint64_t total;
} pl_memory_plan;
PL_API pl_memory_plan pl_model_memory_plan(const pl_model *model);

PL_API int32_t pl_model_n_vocab(const pl_model *model);
/* Elements and bytes of the weights the forward pass reads. */
PL_API uint64_t pl_model_n_params(const pl_model *model);
PL_API uint64_t pl_model_weight_bytes(const pl_model *model);
/* The number of threads the backend runs with. */
PL_API int pl_model_n_threads(const pl_model *model);
PL_API int32_t pl_model_n_ctx(const pl_model *model);
PL_API const char *pl_model_arch(const pl_model *model);
PL_API const char *pl_model_device(const pl_model *model);
/* A string metadata value of the file, NUL-terminated, of any length; valid
 * until the model is freed. NULL if the key is absent or not a string, and
 * (with pl_last_error() saying so) if the value contains a NUL byte, which a
 * C string cannot hold. */
PL_API const char *pl_model_meta_str(const pl_model *model, const char *key);

/* ---- tokenizer ------------------------------------------------------------*/

/* Tokenizes text. *ids is malloc'd (free with pl_free). parse_special: text
 * of control/user-defined tokens becomes those tokens. add_bos: NULL means
 * "as the file says" (tokenizer.ggml.add_bos_token). */
PL_API pl_status pl_tokenize(const pl_model *model, const char *text, size_t len,
                             bool parse_special, const bool *add_bos,
                             int32_t **ids, size_t *n_ids);
/* The bytes of one token. special: render control tokens as their text. The
 * result may be a partial UTF-8 sequence. Returns PL_ERR_INVALID_ARG for an
 * id out of range. *len receives the needed size even if cap is too small
 * (then PL_ERR_INVALID_ARG). */
PL_API pl_status pl_token_to_piece(const pl_model *model, int32_t id, bool special,
                                   char *buf, size_t cap, size_t *len);
/* Detokenizes ids into a malloc'd, NUL-terminated byte string. */
PL_API pl_status pl_detokenize(const pl_model *model, const int32_t *ids, size_t n,
                               bool special, char **text, size_t *len);
PL_API bool pl_token_is_eog(const pl_model *model, int32_t id);
PL_API void pl_free(void *p);

/* ---- chat templates -------------------------------------------------------*/

/* Renders a chat template the way Hugging Face's apply_chat_template does.
 * context_json: a JSON object whose keys become template variables
 * ("messages", "tools", "add_generation_prompt", and extra keyword arguments
 * such as "enable_thinking"); "bos_token" / "eos_token" default to the
 * vocabulary's. template_text: NULL = the file's tokenizer.chat_template
 * (PL_ERR_NOT_FOUND if it has none). *text is malloc'd (free with pl_free).
 * A template's raise_exception("msg") fails with PL_ERR_INVALID_ARG and msg. */
PL_API pl_status pl_chat_apply_template(const pl_model *model, const char *template_text,
                                        const char *context_json, char **text, size_t *len);

/* ---- chat templates: parse once, render many times ------------------------
 * A parsed template is immutable: render it as often as you like, from
 * several threads at once. pl_chat_apply_template above is this API in one
 * call (it parses on every call). */
typedef struct pl_chat_template pl_chat_template;

/* Parses template text (len bytes; a NUL byte inside is refused). Syntax
 * errors are PL_ERR_FORMAT "chat template syntax error at line L, column C:
 * ..."; include/extends and the like are PL_ERR_UNSUPPORTED. */
PL_API pl_status pl_chat_template_parse(const char *text, size_t len, pl_chat_template **out);
/* The model file's tokenizer.chat_template, parsed, with the texts of the
 * model's BOS/EOS tokens as the template's default bos_token/eos_token.
 * PL_ERR_NOT_FOUND when the file has no template. */
PL_API pl_status pl_chat_template_from_model(const pl_model *model, pl_chat_template **out);
PL_API void pl_chat_template_free(pl_chat_template *t);

/* What one rendering gets. Every JSON text is parsed on each call; absent
 * (NULL) fields leave their template variable undefined unless context
 * holds it. Precedence: context's keys, then the fields below override. */
typedef struct pl_chat_template_params {
    const char *messages;        /* JSON array of {"role": ..., "content": ...}; NULL = none */
    const char *tools;           /* JSON array of tool definitions; NULL = none */
    int add_generation_prompt;   /* > 0 sets it true, 0 false; < 0 (default -1) leaves it alone */
    const char *context;         /* JSON object of further variables ("enable_thinking",
                                    "date_string", ... or all of them); NULL = none */
    const char *bos_token;       /* NULL = context's, else the template's default (the
                                    model's, for pl_chat_template_from_model), else undefined */
    const char *eos_token;       /* the same for eos_token */
    const int64_t *now;          /* the time strftime_now() formats, in seconds since the
                                    Unix epoch, rendered as UTC; NULL = the clock, local time */
} pl_chat_template_params;

PL_API pl_chat_template_params pl_chat_template_default_params(void);
/* Renders t into a malloc'd, NUL-terminated *text (free with pl_free; it may
 * hold NUL bytes: use *len). Bad JSON or a context that is not an object is
 * PL_ERR_INVALID_ARG; a template's raise_exception("msg") fails with
 * PL_ERR_INVALID_ARG and exactly msg; other render errors are
 * PL_ERR_INVALID_ARG "chat template error at line L: ...". */
PL_API pl_status pl_chat_template_apply(const pl_chat_template *t, const pl_chat_template_params *params,
                                        char **text, size_t *len);

/* ---- sessions and decoding ------------------------------------------------*/

/* A session owns one sequence: a KV-cache slot and its position. */
PL_API pl_status pl_session_create(pl_model *model, pl_session **out);
PL_API void pl_session_free(pl_session *s);
PL_API int32_t pl_session_pos(const pl_session *s);
PL_API void pl_session_reset(pl_session *s);
/* Drops the tokens of the sequence from position pos on (0 <= pos <=
 * pl_session_pos, else PL_ERR_INVALID_ARG): the next eval continues at pos
 * and the KV cache forgets what followed (pl_model_kv_truncate). An editor of
 * the history evaluates only what changed after the common prefix. */
PL_API pl_status pl_session_rewind(pl_session *s, int32_t pos);

/* Appends tokens to the sequence (prefill in batches of n_batch). If logits
 * is non-NULL it receives the n_vocab logits after the last token; if any of
 * them is NaN or +-Inf the call fails with PL_ERR_FORMAT (the tokens are
 * still appended). */
PL_API pl_status pl_session_eval(pl_session *s, const int32_t *ids, size_t n, float *logits);

/* A batch of tokens that may belong to different sequences. Each token has
 * its own position and KV-cache slot; logits are produced for the tokens
 * whose want_logits flag is set, in order, n_vocab floats each. */
typedef struct pl_batch {
    int32_t n;
    const int32_t *tokens;
    const int32_t *pos;
    const int32_t *seq;          /* KV-cache slot, 0 .. n_seq-1 */
    const bool *want_logits;
} pl_batch;
PL_API pl_status pl_model_forward(pl_model *model, const pl_batch *batch, float *logits);
/* Forgets slot seq's cache from position pos onwards (pos below 0 counts as
 * 0; a pos past the slot's end, or a bad seq, changes nothing).
 *
 * The model keeps each slot's length: the positions 0..len-1 its cache holds.
 * A token written at pos sets its slot's length to pos + 1 (so rewriting an
 * earlier position also forgets what followed it). pl_model_forward refuses,
 * with PL_ERR_INVALID_ARG, a token whose position is past its slot's length
 * (batch order counts): attention would read rows that hold nothing or
 * another sequence's stale data. pl_session_create starts its slot empty. */
PL_API void pl_model_kv_truncate(pl_model *model, int32_t seq, int32_t pos);
/* The length of slot seq's cache (see above); -1 for a bad model or seq. */
PL_API int32_t pl_model_kv_len(const pl_model *model, int32_t seq);
/* Copying a slot's KV rows to the host and back, e.g. to keep an evicted
 * prompt prefix in RAM and restore it instead of prefilling it again
 * (`serve --cache-ram`). The buffer is position-major: for each position,
 * every layer's K and V rows, pl_model_kv_pos_bytes bytes in all; so the
 * first m positions of a saved range are a saved range of m positions. Rows
 * are kept as cached (RoPE applied): write them back only at the positions
 * they were read from, into a model loaded with the same file and cache
 * types. For slots driven with pl_model_forward (a pl_session keeps its own
 * position). */
PL_API size_t pl_model_kv_pos_bytes(const pl_model *model);
/* Copies slot seq's rows of positions pos..pos+n-1 (within pl_model_kv_len)
 * into buf of size bytes (at least n x pl_model_kv_pos_bytes). */
PL_API pl_status pl_model_kv_read(pl_model *model, int32_t seq, int32_t pos, int32_t n, void *buf, size_t size);
/* Writes n positions' rows from buf into slot seq at pos..pos+n-1; pos may
 * be at most the slot's length (no gap). The slot's length becomes pos + n
 * (pos on failure). */
PL_API pl_status pl_model_kv_write(pl_model *model, int32_t seq, int32_t pos, int32_t n, const void *buf,
                                   size_t size);

/* ---- sampling -------------------------------------------------------------*/

typedef struct pl_sampler_params {
    float temperature;   /* <= 0: greedy */
    int32_t top_k;       /* <= 0: off */
    float top_p;         /* >= 1: off */
    float min_p;         /* <= 0: off */
    uint64_t seed;
} pl_sampler_params;

typedef struct pl_sampler pl_sampler;
PL_API pl_sampler_params pl_sampler_default_params(void);
PL_API pl_status pl_sampler_create(const pl_sampler_params *p, int32_t n_vocab, pl_sampler **out);
PL_API void pl_sampler_free(pl_sampler *s);
/* Picks a token from logits (n_vocab floats, not modified). Each call draws
 * exactly one uniform value from the sampler's seeded RNG (greedy draws none),
 * so one seed reproduces one text. Returns -1, with the reason in
 * pl_last_error(), when a logit is NaN or +Inf or all are -Inf (broken model
 * arithmetic: corrupt or badly quantized weights). */
PL_API int32_t pl_sampler_sample(pl_sampler *s, const float *logits);

/* ---- sampling: penalties, logit bias, log-probabilities ---------------------
 * Additive to the sampler above; all off unless set, and a sampler with none
 * set samples exactly as before (same speed, same draws).
 *
 * Order (llama.cpp's common sampler chain): logit bias -> repetition
 * penalty -> frequency/presence penalties -> top-k -> top-p -> min-p ->
 * temperature -> draw. Greedy is the argmax of the modified row. */

/* repeat_penalty: llama.cpp's --repeat-penalty (1 = off, > 0): every token
 * that occurs among the last repeat_last_n tokens of the sequence (prompt
 * given with pl_sampler_add_history, then every sampled token) has a positive
 * logit divided by it and a negative one multiplied. repeat_last_n: 0 = off,
 * -1 = the whole sequence (llama.cpp's default is 64).
 * frequency_penalty / presence_penalty: OpenAI's (-2..2, 0 = off), over the
 * GENERATED tokens only: logit[t] -= frequency * count[t] + presence *
 * (count[t] > 0). PL_ERR_INVALID_ARG for values out of range. */
PL_API pl_status pl_sampler_set_penalties(pl_sampler *s, float repeat_penalty, int32_t repeat_last_n,
                                          float frequency_penalty, float presence_penalty);
/* Adds bias[i] to the logit of ids[i] before anything else (OpenAI's
 * logit_bias, -100..100: -100 effectively bans a token, 100 forces it).
 * Replaces any earlier bias; n = 0 clears it. PL_ERR_INVALID_ARG for an id out
 * of the vocabulary or a bias that is not finite. */
PL_API pl_status pl_sampler_set_logit_bias(pl_sampler *s, const int32_t *ids, const float *bias, size_t n);
/* Tokens already in the sequence before generation (the prompt): they count
 * for repeat_penalty's window, not for frequency/presence. Sampled tokens are
 * recorded by pl_sampler_sample itself. */
PL_API pl_status pl_sampler_add_history(pl_sampler *s, const int32_t *ids, size_t n);

typedef struct pl_token_logprob {
    int32_t token;
    float logprob;
} pl_token_logprob;
/* Log-softmax of a RAW logits row (n_vocab floats, what the model produced,
 * before bias, penalties and temperature -- the model's own distribution, as
 * vLLM and llama-server report by default). *logprob receives token's (token
 * may be -1: none); top receives the n_top most likely tokens, most likely
 * first (lowest id on ties), found with a heap of n_top, not a sort.
 * PL_ERR_INVALID_ARG for a bad token or n_top < 0 or > n_vocab; PL_ERR_FORMAT
 * for a row holding NaN/+Inf. */
PL_API pl_status pl_logprobs(const float *logits, int32_t n_vocab, int32_t token, float *logprob,
                             pl_token_logprob *top, int32_t n_top);

/* ---- grammar-constrained decoding (llama.cpp GBNF, JSON schema) -----------*/

/* A grammar plus its matching state. Built from llama.cpp's GBNF syntax
 * (start rule "root") or from a JSON schema; with a vocab_source model it
 * can mask logits rows and accept tokens of that model's vocabulary (a token
 * may end inside a UTF-8 character: the partial character is kept). With
 * vocab_source NULL only pl_grammar_accept_text works. Parse errors are
 * PL_ERR_INVALID_ARG with "grammar LINE:COL: message"; left recursion is
 * refused. A grammar is not thread-safe; clones are independent (they share
 * the immutable compiled rules and vocabulary index), so a server compiles
 * once and clones per request. */
typedef struct pl_grammar pl_grammar;
PL_API pl_status pl_grammar_from_gbnf(const pl_model *vocab_source, const char *text, size_t len,
                                      pl_grammar **out);
/* schema: JSON text. {"type":"json_object"} means any JSON object. A keyword
 * the compiler cannot enforce fails with PL_ERR_UNSUPPORTED naming it. */
PL_API pl_status pl_grammar_from_json_schema(const pl_model *vocab_source, const char *schema, size_t len,
                                             pl_grammar **out);
/* The GBNF a schema compiles to; *gbnf is malloc'd (free with pl_free). */
PL_API pl_status pl_json_schema_to_gbnf(const char *schema, size_t len, char **gbnf, size_t *gbnf_len);
PL_API pl_status pl_grammar_clone(const pl_grammar *g, pl_grammar **out);
PL_API void pl_grammar_free(pl_grammar *g);
/* Back to the start state (nothing generated yet). */
PL_API pl_status pl_grammar_reset(pl_grammar *g);
/* Sets every logit (n_vocab floats) of a token the grammar does not allow
 * next to -INFINITY. End-of-generation tokens are allowed exactly when the
 * output so far is a complete match. */
PL_API pl_status pl_grammar_apply(pl_grammar *g, float *logits);
/* Would the grammar accept this token next? (Cheap: one token's bytes.) */
PL_API bool pl_grammar_allows(pl_grammar *g, int32_t token);
/* Advances the state by a token; PL_ERR_INVALID_ARG (state unchanged) if the
 * grammar does not allow it. */
PL_API pl_status pl_grammar_accept(pl_grammar *g, int32_t token);
/* Advances the state by raw bytes (text-level matching, e.g. a prefix the
 * caller forces); PL_ERR_INVALID_ARG (state unchanged) if not allowed. */
PL_API pl_status pl_grammar_accept_text(pl_grammar *g, const char *text, size_t len);
/* The output so far is a complete match (end of generation allowed). */
PL_API bool pl_grammar_is_accepting(const pl_grammar *g);
/* Nothing more can follow (complete, and no longer match possible), or an
 * end-of-generation token was accepted. */
PL_API bool pl_grammar_is_done(const pl_grammar *g);
/* Makes pl_sampler_sample constrained by g (NULL: unconstrained again): it
 * samples only among allowed tokens and advances g by the chosen token. The
 * sampler does not own g. Greedy checks the argmax first and masks only when
 * it is not allowed (same result as masking first). When no token is allowed
 * pl_sampler_sample returns -1 with the reason in pl_last_error(). */
PL_API void pl_sampler_set_grammar(pl_sampler *s, pl_grammar *g);

/* ---- introspection: backends, devices, architectures, ops ------------------
 * Read-only facts about this build, read from the kernel dispatch tables and
 * the architecture registry themselves (what `pocketllm backends`, `devices`,
 * `architectures` and `ops` print). Each list is indexed 0 .. count-1 in a
 * fixed order (backends: preference order). Every string returned is static:
 * valid for the life of the process. Nothing here loads a model, opens a
 * library or starts a driver. An index out of range is PL_ERR_INVALID_ARG.
 *
 * Lists of names (dtypes) are returned by filling names[0 .. cap-1] and
 * setting *n to the full count, so a caller may ask with cap = 0 first. */

typedef struct pl_backend_info {
    const char *name;        /* "ref", "cpu", "cuda", ...: what pl_model_params.device takes */
    const char *summary;     /* one line; "" when there is none */
    const char *awaits;      /* NULL when implemented; else the runtime it waits for */
    bool implemented;        /* it has kernels and can run a model */
} pl_backend_info;
PL_API int32_t pl_backend_count(void);
PL_API pl_status pl_backend_get(int32_t i, pl_backend_info *out);
/* The index of the backend called name; -1 if there is none. */
PL_API int32_t pl_backend_index(const char *name);
/* The dtypes backend i has kernels for on op (an index of the op list below),
 * in dispatch-table order; "any" names a kernel that takes every dtype. */
PL_API pl_status pl_backend_op_dtypes(int32_t i, int32_t op, const char **names, size_t cap, size_t *n);

/* The device probe of backend i: is its device on this machine? It looks at
 * the filesystem and CPUID only. *available receives the answer; detail
 * (may be NULL) a short line ("avx fma f16c", "no /dev/nvidia0", "host
 * memory" for a backend without a device), truncated to cap - 1 bytes. A
 * backend that is available but not implemented still cannot run a model. */
PL_API pl_status pl_device_probe(int32_t i, bool *available, char *detail, size_t cap);

typedef struct pl_arch_info {
    const char *name;        /* general.architecture value ("qwen3") */
    const char *summary;
    int32_t n_keys;          /* GGUF keys it reads (pl_arch_key) */
} pl_arch_info;
PL_API int32_t pl_arch_count(void);
PL_API pl_status pl_arch_get(int32_t i, pl_arch_info *out);
/* GGUF key k (0 .. n_keys-1) of architecture i, with "{arch}" replaced by the
 * architecture's name ("qwen3.block_count"), NUL-terminated into buf. *len
 * (may be NULL) receives its length even when cap is too small (then
 * PL_ERR_INVALID_ARG). */
PL_API pl_status pl_arch_key(int32_t i, int32_t k, char *buf, size_t cap, size_t *len);

typedef struct pl_op_info {
    const char *name;        /* "matmul", "rms_norm", ... */
    const char *summary;     /* one line; "" when there is none */
    const char *shape_rule;  /* the shape contract, in words; "" when none */
    const char *params;      /* its parameters, in words; "" when none */
    int32_t n_inputs;
    int32_t key_input;       /* the input whose dtype selects the kernel; -1 = the output's */
} pl_op_info;
PL_API int32_t pl_op_count(void);
PL_API pl_status pl_op_get(int32_t op, pl_op_info *out);
/* The index of the op called name; -1 if there is none. */
PL_API int32_t pl_op_index(const char *name);
/* Input k of op (0 .. n_inputs-1, or -1 for the output): its name ("" when
 * unnamed; "output" for -1) and the dtypes the schema allows for it. name may
 * be NULL. */
PL_API pl_status pl_op_operand(int32_t op, int32_t k, const char **name, const char **dtypes, size_t cap,
                               size_t *n);

/* ---- inspecting a GGUF file (no model needed) -----------------------------*/

/* A GGUF file opened and validated on its own: its metadata, its tensor
 * table and the reference decoder of its tensors' blocks. Strings returned
 * point into the file's mapping (valid until pl_inspect_close) and are NOT
 * NUL-terminated: use the length. */
typedef struct pl_inspect pl_inspect;
PL_API pl_status pl_inspect_open(const char *path, pl_inspect **out);
PL_API void pl_inspect_close(pl_inspect *f);
PL_API uint32_t pl_inspect_version(const pl_inspect *f);
PL_API uint64_t pl_inspect_alignment(const pl_inspect *f);
/* File offset of the data section (tensor offsets are relative to it). */
PL_API uint64_t pl_inspect_data_offset(const pl_inspect *f);

PL_API int64_t pl_inspect_n_meta(const pl_inspect *f);
PL_API pl_status pl_inspect_meta_key(const pl_inspect *f, int64_t i, const char **key, size_t *len);
/* The GGUF value type of a key (0..12 as in the GGUF spec; 9 = array); for an
 * array also its element type and count (else -1 and 1). PL_ERR_NOT_FOUND if
 * the key is absent. */
PL_API pl_status pl_inspect_meta_type(const pl_inspect *f, const char *key, int *type, int *elem_type,
                                      uint64_t *n);
/* A numeric value: the scalar (i < 0) or element i of a numeric array. bool
 * reads as 0/1; _i64 rejects floats and values that do not fit. */
PL_API pl_status pl_inspect_meta_i64(const pl_inspect *f, const char *key, int64_t i, int64_t *out);
PL_API pl_status pl_inspect_meta_f64(const pl_inspect *f, const char *key, int64_t i, double *out);
/* A string: the scalar (i < 0) or element i of a string array. */
PL_API pl_status pl_inspect_meta_str(const pl_inspect *f, const char *key, int64_t i, const char **ptr,
                                     size_t *len);

typedef struct pl_tensor_info {
    const char *name;       /* NUL-terminated, valid until pl_inspect_close */
    int32_t type;           /* GGML type id */
    const char *type_name;  /* GGML's name: "f16", "q4_K", ... */
    int32_t n_dims;         /* 1..4 */
    int64_t ne[4];          /* elements per dimension, ne[0] innermost; unused dims are 1 */
    uint64_t offset;        /* bytes from the start of the data section */
    uint64_t size;          /* bytes */
} pl_tensor_info;
PL_API int64_t pl_inspect_n_tensors(const pl_inspect *f);
PL_API pl_status pl_inspect_tensor(const pl_inspect *f, int64_t i, pl_tensor_info *out);
/* Decodes rows row0 .. row0+n_rows-1 of tensor i (a row is ne[0] elements)
 * into dst (n_rows * ne[0] floats) with the reference decoder.
 * PL_ERR_UNSUPPORTED for a type without one. */
PL_API pl_status pl_inspect_dequantize(const pl_inspect *f, int64_t i, int64_t row0, int64_t n_rows, float *dst);

/* ---- quantization, fit planning, per-node observer ------------------------
 * What `pocketllm quantize`, `fit` and `imatrix` do, for any program: the
 * CLI reaches the engine through these calls only. */

/* A quantization mix (llama.cpp's file type, "Q4_K_M"): a default tensor type
 * plus llama.cpp's rules that keep sensitive tensors at higher precision. */
typedef struct pl_quant_mix_info {
    const char *name;          /* "Q4_K_M" (names are matched case-insensitively) */
    int32_t ftype;             /* llama.cpp's LLAMA_FTYPE_* (general.file_type) */
    const char *base_type;     /* GGML name of the default tensor type: "q4_K" */
    double base_bpw;           /* bits per weight of base_type (the mix's average is higher) */
    bool needs_imatrix;        /* llama-quantize refuses to make it without one */
    const char *summary;
} pl_quant_mix_info;
/* The mixes pl_quantize_file can make, highest precision first: i in
 * 0 .. pl_quant_n_mixes()-1 (PL_ERR_INVALID_ARG outside). */
PL_API int32_t pl_quant_n_mixes(void);
PL_API pl_status pl_quant_mix(int32_t i, pl_quant_mix_info *out);
PL_API pl_status pl_quant_mix_find(const char *name, pl_quant_mix_info *out);

/* A tensor type a per-tensor override may name ("q8_0", "q4_K", "f16"...). */
typedef struct pl_quant_type_info {
    const char *name;          /* GGML's name */
    int32_t type;              /* GGML type id */
    int64_t block_size;        /* elements per block; a row must be a multiple */
    double bpw;                /* bits per weight */
    bool needs_imatrix;        /* the IQ1/IQ2 codebooks */
} pl_quant_type_info;
PL_API int32_t pl_quant_n_types(void);
PL_API pl_status pl_quant_type(int32_t i, pl_quant_type_info *out);

/* llama-quantize's --tensor-type PATTERN=TYPE: every tensor the mix would
 * quantize whose name contains a match of pattern (POSIX extended regex) gets
 * type instead; the last matching override wins. Unlike llama-quantize they
 * apply to the float mixes (F16, BF16, F32) too. A type whose blocks do not
 * divide a matched tensor's rows is PL_ERR_INVALID_ARG (no silent fallback). */
typedef struct pl_quant_override {
    const char *pattern;
    const char *type;          /* a pl_quant_type name */
} pl_quant_override;

typedef struct pl_quantize_stats {
    uint64_t n_elements;            /* of all tensors */
    uint64_t bytes_in, bytes_out;   /* tensor data, input and output */
    uint64_t file_size;             /* of the output file */
    int32_t n_tensors, n_quantized, n_fallback;
} pl_quantize_stats;

typedef struct pl_quantize_params {
    const char *type;               /* a mix name: "Q4_K_M", "IQ2_XXS", ... */
    const char *imatrix_path;       /* NULL: none (the IQ1/IQ2 mixes then fail) */
    const pl_quant_override *overrides;
    int32_t n_overrides;
    int n_threads;                  /* 0: all cores */
    /* Progress text as llama-quantize prints it (pieces of lines); NULL: silent. */
    void (*log)(void *user, const char *text);
    void *log_user;
    pl_quantize_stats *stats;       /* receives the totals on success; may be NULL */
} pl_quantize_params;
PL_API pl_quantize_params pl_quantize_default_params(void);
/* Writes in_path requantized with llama-quantize's mixes and quantizers:
 * byte-identical to llama-quantize's output where our quantizers are. The
 * input (f32/f16/bf16, or quantized: dequantized first) stays mapped: out_path
 * must be another file. A mix that needs an importance matrix without one is
 * PL_ERR_INVALID_ARG; a bad override pattern or type too. */
PL_API pl_status pl_quantize_file(const char *in_path, const char *out_path, const pl_quantize_params *p);

/* Fit planning: where a model stands on the quantization ladder
 *     (as is) > Q8_0 > Q6_K > Q4_K_M > Q2_K > IQ2_XS > IQ2_XXS > IQ1_M > IQ1_S
 *             > TQ2_0 > TQ1_0
 * for one device and budget. Each rung is planned with pl_model_load's own
 * planner (weights at the rung's mix + KV cache + scratch), without
 * quantizing anything; the chosen rung is the highest that fits. */
typedef struct pl_fit_params {
    const char *device;        /* NULL = "cpu" */
    int n_ctx;                 /* 0 = as pl_model_load: min(trained, 4096) */
    int n_threads;             /* 0 = all cores (the work memory depends on it) */
    uint64_t budget;           /* bytes; 0 = the device's free memory */
    /* KV cache types, as pl_model_params.cache_type_k / _v. Both NULL: the
     * planner chooses per rung -- f16, else q8_0 when that makes the rung fit
     * (the cache is lowered before the weights: a rotated q8_0 cache costs
     * less quality than the next weight rung). Either set: every rung is
     * planned with exactly these (NULL then means f16). */
    const char *cache_type_k;
    const char *cache_type_v;
} pl_fit_params;

/* Why the plan is what it is (stable values). */
typedef enum pl_fit_reason {
    PL_FIT_AS_IS = 0,              /* the model fits unchanged */
    PL_FIT_QUANTIZE = 1,           /* a lower rung fits: quantize to it */
    PL_FIT_QUANTIZE_IMATRIX = 2,   /* likewise, and that rung needs an importance matrix */
    PL_FIT_NONE_FITS = 3,          /* not even the lowest rung fits the budget */
    PL_FIT_CANNOT_RUN = 4,         /* this device cannot run the model at all (rung 0's error) */
} pl_fit_reason;

typedef struct pl_fit_result pl_fit_result;
typedef struct pl_fit_rung_info {
    const char *name;          /* "Q4_K_M", or the file's own type for rung 0 */
    int32_t ftype;             /* llama.cpp file type; -1 if unknown */
    bool as_is;                /* rung 0: the model unchanged */
    bool needs_imatrix;
    bool fits;
    pl_status status;          /* PL_OK, or why this rung cannot be planned here */
    const char *error;         /* the message for status ("" when PL_OK) */
    pl_memory_plan plan;       /* bytes on the device */
    uint64_t n_params;         /* elements of the weights */
    double bpw;                /* weight bits per element */
    const char *cache_type_k;  /* the KV cache types of this rung's plan ("f16", "q8_0", "q4_0") */
    const char *cache_type_v;
    int32_t max_ctx;           /* the longest context (tokens per sequence) the budget holds at this
                                  rung with those cache types, up to the model's trained context;
                                  0 when not even a 1-token context fits or the rung cannot run */
} pl_fit_rung_info;

PL_API pl_fit_params pl_fit_default_params(void);
/* Plans every rung of a model file. */
PL_API pl_status pl_fit(const char *model_path, const pl_fit_params *p, pl_fit_result **out);
/* Plans a Qwen3 release shape ("0.6b", "1.7b", "4b", "8b", bf16) without
 * weights; the tokenizer comes from vocab_path (a vocab-only GGUF). */
PL_API pl_status pl_fit_preset(const char *preset, const char *vocab_path, const pl_fit_params *p,
                               pl_fit_result **out);
PL_API void pl_fit_free(pl_fit_result *r);
/* Strings are valid until pl_fit_free. */
PL_API const char *pl_fit_model(const pl_fit_result *r);      /* file name or preset label */
PL_API const char *pl_fit_device(const pl_fit_result *r);
PL_API int32_t pl_fit_n_ctx(const pl_fit_result *r);
PL_API uint64_t pl_fit_budget(const pl_fit_result *r);
PL_API bool pl_fit_budget_is_free_memory(const pl_fit_result *r);  /* taken from the device */
PL_API int32_t pl_fit_n_rungs(const pl_fit_result *r);
PL_API pl_status pl_fit_rung(const pl_fit_result *r, int32_t i, pl_fit_rung_info *out);
PL_API int32_t pl_fit_chosen(const pl_fit_result *r);          /* -1: none fits */
PL_API pl_fit_reason pl_fit_reason_of(const pl_fit_result *r);
/* Free memory of a device: cpu/ref: MemAvailable; a GPU: its free memory
 * less the loader's headroom. PL_ERR_UNSUPPORTED where it cannot be known. */
PL_API pl_status pl_device_free_memory(const char *device, uint64_t *out);

/* A per-node observer (llama.cpp's eval callback, read-only): called on the
 * forward pass's thread after each graph node has run. For a matrix
 * multiplication, weight names the weight tensor and input points at its
 * input activations: f32, ne[0] columns (the weight's row length) by ne[1]
 * rows (tokens) by ne[2] by ne[3], row (i1,i2,i3) at byte offset
 * i1*nb[1] + i2*nb[2] + i3*nb[3]. The pointers are valid during the call
 * only. Host backends only: a forward pass on a device backend with an
 * observer set fails with PL_ERR_UNSUPPORTED.
 * An expert-indexed matmul (op "matmul_id", GGML's mul_mat_id: qwen3moe's
 * ffn_{gate,up,down}_exps) reports weight and input the same way, input
 * being ne[0] columns by ne[1] = 1 or k slots by ne[2] tokens, and also
 * ids: the expert of slot j of token t is ids[j*ids_nb[0]/4 + t*ids_nb[1]/4]
 * (0..n_expert-1), slot j reading input row (j % ne[1], t). */
typedef struct pl_node_info {
    const char *op;            /* "matmul", "matmul_id", "rms_norm", ... */
    const char *name;          /* the node's output tensor */
    const char *weight;        /* matmul, matmul_id: the weight's name; else NULL */
    const float *input;        /* matmul, matmul_id: its f32 input; else NULL */
    int64_t ne[4];             /* matmul, matmul_id: the input's shape; else the output's */
    size_t nb[4];              /* byte strides of the same */
    /* matmul_id only (else NULL / 0): */
    const int32_t *ids;        /* the routed experts, I32 [ids_ne[0] = k, ids_ne[1] = tokens] */
    int64_t ids_ne[2];
    size_t ids_nb[2];          /* byte strides of ids */
    int64_t n_expert;          /* the weight's matrices (its ne[2]) */
} pl_node_info;
typedef void (*pl_node_observer)(void *user, const pl_node_info *node);
/* Sets (fn NULL: clears) the model's observer. PL_ERR_INVALID_ARG for a
 * vocab-only model. */
PL_API pl_status pl_model_set_observer(pl_model *model, pl_node_observer fn, void *user);

/* Writes an importance matrix in llama.cpp's GGUF imatrix format (what
 * llama-imatrix writes, pl_quantize_params.imatrix_path reads). Entries are
 * written sorted by name; sums: n_cols * n_mat floats (sum of x^2 per input
 * column), counts: n_mat floats (tokens summed). n_mat: 1 for a dense
 * weight, n_expert for an expert tensor (matrix e's sums at sums + e*n_cols). */
typedef struct pl_imatrix_entry {
    const char *name;          /* the weight: "blk.0.attn_q.weight" */
    int64_t n_cols, n_mat;
    const float *sums;
    const float *counts;
} pl_imatrix_entry;
PL_API pl_status pl_imatrix_write(const char *path, const char *dataset, uint32_t chunk_count,
                                  uint32_t chunk_size, const pl_imatrix_entry *entries, size_t n);

#ifdef __cplusplus
}
#endif
#endif /* POCKETLLM_H */
