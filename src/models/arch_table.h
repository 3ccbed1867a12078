/*
 * One declaration per architecture of its hyperparameter keys and its
 * tensors, from which the three readers of a tensor list are derived:
 *  - binding at load (pl_arch_bind_tensors: every tensor found, shape-checked
 *    against the hyperparameters, its dtype checked, refusals naming it);
 *  - fit's size estimate of a preset (engine/fit.c writes a header-only GGUF
 *    from pl_arch_each_tensor and plans it);
 *  - synth's writer (tools/pocketllm/cmd_synth.c, the same walk).
 * Adding an architecture is one file in src/models/ with its tables and its
 * graph builder, plus its line in src/models/registry.c:
 *  - its pl_hparam_decl list (the keys it reads, the ones a writer writes
 *    carrying their pl_hparams field) and a load that reads and validates
 *    them (the dense decoders share pl_dense_read_hparams, models/dense.h),
 *    then calls pl_arch_bind_tensors with its table;
 *  - its pl_tensor_decl table, slots from PL_LW_DENSE_COUNT / PL_GW_DENSE_COUNT
 *    on for tensors the dense decoder does not have;
 *  - .synth = true if synth and fit may write it, .presets for release shapes.
 * Still in the engine: pl_hparams (engine/model.h) is the shared set of
 * hyperparameter fields (experts, sliding window, soft-capping, ...); a kind
 * of value none of them holds needs a field there, and a table larger than
 * PL_LAYER_SLOTS / PL_GLOBAL_SLOTS needs them raised.
 */
#ifndef PL_MODELS_ARCH_TABLE_H
#define PL_MODELS_ARCH_TABLE_H

#include "engine/model.h"
#include <stddef.h>

/* A tensor dimension as a function of the hyperparameters (pl_dim_value). */
typedef enum pl_dim {
    PL_DIM_1,        /* 1 */
    PL_DIM_E,        /* n_embd */
    PL_DIM_V,        /* n_vocab */
    PL_DIM_F,        /* n_ff */
    PL_DIM_D,        /* head_dim */
    PL_DIM_HD,       /* n_head * head_dim */
    PL_DIM_GD,       /* n_head_kv * head_dim */
    PL_DIM_X,        /* n_expert */
    PL_DIM_FX,       /* n_ff_exp */
    PL_DIM_ROT_HALF, /* n_rot / 2 */
} pl_dim;

/* What a tensor is, which decides the dtypes it may have at load (vectors:
 * F32 only; matrices: any dtype the backend multiplies) and how synth and
 * fit write it (vectors and routers F32, the others in the file's type). */
typedef enum pl_tensor_role {
    PL_TR_NORM,     /* F32 vector multiplied in: synth fills 1 + noise */
    PL_TR_BIAS,     /* F32 vector added */
    PL_TR_EMBD,     /* the token embedding matrix (rows gathered) */
    PL_TR_MATRIX,   /* a matmul weight, 2-D, or 3-D with experts in ne[2] */
    PL_TR_ROUTER,   /* a matmul weight the converter keeps in F32 (MoE router) */
    PL_TR_FACTORS,  /* F32 constants computed, not trained (llama3 rope_freqs) */
} pl_tensor_role;

enum {
    PL_TD_LAYER = 1u << 0,     /* one per block: name has one %d, slot indexes pl_layer_weights.t */
    PL_TD_OPTIONAL = 1u << 1,  /* absent is fine (slot stays NULL) */
    PL_TD_TAIL = 1u << 2,      /* a global the converter writes after the blocks */
    PL_TD_TIED = 1u << 3,      /* optional; absent means token_embd (the slot gets it) */
    PL_TD_UNWRITTEN = 1u << 4, /* read if present, never written by synth or fit presets */
};

/* Every architecture keeps its token embedding in globals[PL_GW_TOK_EMBD]
 * (a PL_TD_TIED tensor falls back to it). */
#define PL_GW_TOK_EMBD 0

typedef struct pl_tensor_decl {
    const char *name;          /* "blk.%d.attn_q.weight" or "token_embd.weight" */
    pl_tensor_role role;
    unsigned flags;            /* PL_TD_* */
    int slot;                  /* index in pl_layer_weights.t (PL_TD_LAYER) or pl_model.globals */
    int n_dims;
    pl_dim ne[3];
} pl_tensor_decl;

/* A hyperparameter key. Read by the architecture's load; written by synth
 * and fit's presets (in this order) from the pl_hparams field at offset. */
enum { PL_HK_U32, PL_HK_F32 };
#define PL_HK_NOT_WRITTEN ((size_t)-1)
typedef struct pl_hparam_decl {
    const char *key;           /* "{arch}.embedding_length": {arch} is the architecture's name */
    int type;                  /* PL_HK_U32 (an int64_t field) or PL_HK_F32 (a float field) */
    size_t offset;             /* offsetof(pl_hparams, ...), or PL_HK_NOT_WRITTEN */
    bool write_nonzero;        /* written only when the value is not 0 (an optional feature) */
} pl_hparam_decl;
#define PL_HK_READ(key_) {key_, PL_HK_U32, PL_HK_NOT_WRITTEN, false}
#define PL_HK_INT(key_, field) {key_, PL_HK_U32, offsetof(pl_hparams, field), false}
#define PL_HK_FLOAT(key_, field) {key_, PL_HK_F32, offsetof(pl_hparams, field), false}

/* A release shape synth and fit offer by name. */
typedef struct pl_arch_preset {
    const char *name;
    int64_t n_embd, n_layer, n_head, n_head_kv, head_dim, n_ff;
    bool tied;
    int64_t n_expert, n_expert_used, n_ff_exp;   /* 0 for dense */
} pl_arch_preset;

int64_t pl_dim_value(const pl_hparams *hp, pl_dim d);

/* Binds every tensor of the table (globals first, in table order, then each
 * layer's), shape- and dtype-checked by pl_model_bind; a PL_TD_TIED slot left
 * empty gets the token embedding's tensor. Hyperparameters must be read. */
pl_status pl_arch_bind_tensors(pl_model *m, const pl_tensor_decl *table);

/* Walks the tensors a writer emits, in llama.cpp's converter order (head
 * globals, each layer's, tail globals), skipping PL_TD_UNWRITTEN ones and,
 * for optional ones, those keep() declines (keep NULL: required ones only).
 * name is the formatted name, ne[2] is 1 below three dims. */
typedef void (*pl_tensor_visit_fn)(void *user, const pl_tensor_decl *d, const char *name, const int64_t ne[3]);
void pl_arch_each_tensor(const pl_arch *a, const pl_hparams *hp, bool (*keep)(void *user, const pl_tensor_decl *d),
                         pl_tensor_visit_fn visit, void *user);

/* Visits the keys of a's declaration that carry a pl_hparams field, in its
 * order, with "{arch}" replaced (those marked write_nonzero only when not 0):
 * what synth and fit's presets write. is_float: f holds the value, else i. */
typedef void (*pl_hparam_visit_fn)(void *user, const char *key, bool is_float, int64_t i, float f);
void pl_arch_each_hparam(const pl_arch *a, const pl_hparams *hp, pl_hparam_visit_fn visit, void *user);

/* "a, b, c": every preset name, first offer only, registry order. */
void pl_arch_preset_names(char *buf, size_t cap);

/* The hyperparameters of a preset (plus synth's and fit's fixed ones:
 * context 40960, rms eps 1e-6, rope base 1e6, rope over the whole head). */
void pl_arch_preset_hparams(const pl_arch_preset *p, int64_t n_vocab, pl_hparams *hp);
/* The first architecture (registry order) offering preset name, or NULL. */
const pl_arch *pl_arch_find_preset(const char *name, const pl_arch_preset **out);

#endif
