/* Model architectures. Each one reads its hyperparameters, binds and
 * shape-checks its weights, and emits the forward graph for a batch. */
#ifndef PL_MODELS_ARCH_H
#define PL_MODELS_ARCH_H
#include "pocketllm.h"
#include "graph/graph.h"

struct pl_model;

/* Host-side inputs of one forward graph. */
typedef struct pl_graph_inputs {
    pl_tensor *ids;      /* I32 [n_tok] */
    pl_tensor *pos;      /* I32 [n_tok] */
    pl_tensor *seq;      /* I32 [n_tok] */
    pl_tensor *out_idx;  /* I32 [n_out]: batch rows whose logits are wanted */
} pl_graph_inputs;

typedef struct pl_arch {
    const char *name;              /* general.architecture value */
    const char *summary;
    /* GGUF keys read, with "{arch}" standing for the architecture name
     * (NULL key ends it); synth and fit's presets write those with a field. */
    const struct pl_hparam_decl *hparams;
    /* Its tensors (NULL name ends it): bound at load by
     * pl_arch_bind_tensors, walked by synth and fit (models/arch_table.h). */
    const struct pl_tensor_decl *tensors;
    /* Release shapes synth and fit offer by name (NULL name ends it), or NULL. */
    const struct pl_arch_preset *presets;
    /* synth can write it (its tables hold everything a file of it needs). */
    bool synth;
    /* Reads hyperparameters and binds weights, checking every shape. */
    pl_status (*load)(struct pl_model *m);
    /* Emits the graph; returns the logits tensor F32 [n_vocab, n_out]. */
    pl_tensor *(*build)(struct pl_model *m, pl_graph *g, const pl_graph_inputs *in);
    /* Graph capacities for this model. */
    void (*capacity)(const struct pl_model *m, int *n_tensors, int *n_nodes);
} pl_arch;

/* NULL-terminated list of the architectures this build can construct. */
const pl_arch *const *pl_archs(void);
const pl_arch *pl_arch_find(const char *name);

#endif
