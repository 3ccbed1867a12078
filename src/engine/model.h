/* The loaded model: file, tokenizer, hyperparameters, weights, the device's
 * planned memory (KV cache, scratch), and the backend context. */
#ifndef PL_ENGINE_MODEL_H
#define PL_ENGINE_MODEL_H
#include "pocketllm.h"
#include "gguf/gguf.h"
#include "tokenizer/tokenizer.h"
#include "graph/graph.h"
#include "models/arch.h"
#include "kernels/device.h"

/* Device memory a load leaves free beyond its plan: the runtime's own
 * allocations (kernel images, CUDA graphs, staging buffers) and the 256-byte
 * alignment of each weight slice. */
#define PL_DEVICE_HEADROOM ((uint64_t)256 << 20)

/* The hyperparameters the architectures read (src/models/: each declares
 * its keys and which field each fills, models/arch_table.h). */
typedef struct pl_hparams {
    int64_t n_vocab, n_ctx_train, n_embd, n_layer, n_ff;
    int64_t n_head, n_head_kv, head_dim, n_rot;
    float rms_eps, rope_base, rope_scale;
    int rope_mode;                    /* pl_op_rope mode: 0 normal (adjacent pairs, llama), 2 NeoX (qwen) */
    /* qwen3moe: experts per layer, experts each token uses, an expert's FFN width */
    int64_t n_expert, n_expert_used, n_ff_exp;
    /* gemma3 (src/models/gemma3.c) */
    int64_t n_swa;                    /* attention.sliding_window: window of the local layers */
    float rope_base_swa;              /* RoPE base of the local layers (10000, as llama.cpp sets it) */
    float attn_scale;                 /* query scale (1/sqrt(head_dim); 27B: 1/sqrt(n_embd/n_head)) */
    float final_softcap;              /* final_logit_softcapping as the file declares it, 0 = none */
} pl_hparams;

/* Room for an architecture's tensors: per layer and global. What each slot
 * holds is the architecture's own declaration (src/models/arch_table.h; the
 * dense decoders' slots are in src/models/dense.h). */
#define PL_LAYER_SLOTS 24
#define PL_GLOBAL_SLOTS 8

typedef struct pl_layer_weights {
    pl_tensor *t[PL_LAYER_SLOTS];     /* NULL: absent (an optional tensor) */
} pl_layer_weights;

struct pl_model {
    char *path;
    const char *file_name;           /* basename of path, for messages */
    pl_gguf *gguf;
    pl_vocab *vocab;
    const pl_arch *arch;
    char arch_name[64];
    pl_hparams hp;

    pl_tensor *weights;              /* one descriptor per GGUF tensor */
    int64_t n_weights;
    bool *weight_used;               /* [n_weights]: bound by the architecture (pl_model_bind) */
    uint64_t weight_bytes;           /* of the tensors the graph uses */
    uint64_t n_params;               /* their elements */
    pl_tensor *globals[PL_GLOBAL_SLOTS];   /* tensors outside the blocks (token embedding in slot 0) */
    pl_layer_weights *layers;

    const pl_backend *backend;
    pl_exec_ctx *ctx;
    int n_ctx, n_seq, n_batch, n_logits_max;
    bool batch_invariant;  /* pl_model_params.batch_invariant: attention nodes take the decode path */
    /* The grammar engine's vocabulary trie (sampling/grammar_api.c), built on
     * the first grammar compiled against this model and shared by every later
     * one: building it walks the whole vocabulary (~70 ms for 151k tokens).
     * The model holds one reference, dropped by grammar_vocab_release. */
    _Atomic(void *) grammar_vocab;
    void (*grammar_vocab_release)(void *);
    pl_dtype kv_dtype;               /* K cache dtype (kept for existing readers) */
    pl_dtype kv_dtype_v;             /* V cache dtype */
    int k_rot, v_rot;                /* Walsh-Hadamard rotation sizes, 0 = none (quant/hadamard.h) */
    void *kv_mem;
    pl_tensor *k_cache, *v_cache;    /* [n_layer], each [kv_dim, n_ctx, n_seq] */

    pl_graph planned;                /* the largest graph, with the scratch plan */
    pl_graph graph;                  /* rebuilt for every forward call */
    void *scratch;
    size_t scratch_size;
    int32_t *in_ids, *in_pos, *in_seq, *in_out;   /* host inputs, n_batch each, one allocation (in_ids) */
    /* Device backends (backend->device != NULL): the weights, KV cache,
     * scratch and work buffer live in device buffers; the inputs are staged
     * in in_ids..in_out and uploaded, all 4 x n_batch at once, to inputs_dev
     * before each graph (the graph's input tensors point there). */
    const pl_device_ops *dev;
    void *weights_dev;               /* every used weight, packed as in the file */
    void *inputs_dev;                /* 4 x n_batch int32: ids, pos, seq, out */
    bool *slot_used;
    /* Per slot: the positions 0..kv_len-1 its cache holds (n_seq entries).
     * A forward call may write at most one position past it (forward.c). */
    int32_t *kv_len;
    pl_memory_plan plan;
    /* NUL-terminated copies of string metadata handed out by
     * pl_model_meta_str (a list, prepended to atomically; freed with the
     * model). */
    struct pl_meta_copy *_Atomic meta_copies;
    /* pl_model_set_observer's callback (engine/observer_api.c), run through
     * ctx->on_node. */
    pl_node_observer observer;
    void *observer_user;
};

/* Plans g's model for params exactly as pl_model_load does (the same weight,
 * KV-cache, scratch and work-memory arithmetic) but allocates neither KV
 * cache nor scratch and reads no tensor data. retype (NULL = none) gives the
 * dtype each tensor would have, to plan a requantized model from the
 * original's tensor table. g stays the caller's. Like pl_model_load it
 * returns PL_ERR_DOES_NOT_FIT past params->memory_budget; *out is filled
 * whenever the plan was computed. (Used by engine/fit.c.) */
typedef pl_dtype (*pl_plan_retype_fn)(void *user, const pl_gguf_tensor *t);
pl_status pl_model_plan_gguf(pl_gguf *g, const pl_model_params *params, pl_plan_retype_fn retype, void *user,
                             pl_memory_plan *out);

/* Looks up a weight by name; NULL if absent. */
pl_tensor *pl_model_weight(struct pl_model *m, const char *name);
/* Binds a required/optional weight and checks its shape (n_dims, ne) and
 * that its dtype is one of allowed (bit mask; 0 = any matmul-able dtype). */
pl_status pl_model_bind(struct pl_model *m, pl_tensor **dst, bool required, uint64_t allowed,
                        int n_dims, const int64_t *ne, const char *fmt, ...)
    __attribute__((format(printf, 7, 8)));
/* Reads a "{arch}.<suffix>" integer / float hyperparameter. */
pl_status pl_model_hp_int(struct pl_model *m, const char *suffix, bool required, int64_t def, int64_t *out);
pl_status pl_model_hp_float(struct pl_model *m, const char *suffix, bool required, float def, float *out);

/* A KV cache type name of pl_model_params.cache_type_k / _v: NULL, "" or
 * "f16" -> PL_F16, "q8_0", "q4_0"; anything else is PL_ERR_INVALID_ARG with
 * the list. what names the parameter in the message. */
pl_status pl_cache_type_parse(const char *name, const char *what, pl_dtype *out);

#endif
