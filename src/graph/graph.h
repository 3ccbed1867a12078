/*
 * The graph IR: an ordered list of nodes over tensor descriptors, emitted by
 * an architecture builder and run by the executor on one backend.
 *
 * Intermediate tensors live in one scratch buffer. Their placement is planned
 * once, at load, on the largest graph the model will ever run (n_batch tokens,
 * n_logits_max outputs): pl_graph_plan() assigns each tensor an offset by
 * liveness (first fit), and later, smaller graphs of the same structure reuse
 * those offsets. So the scratch size is known before loading and a forward
 * pass never allocates.
 */
#ifndef PL_GRAPH_GRAPH_H
#define PL_GRAPH_GRAPH_H
#include <stddef.h>
#include <stdint.h>
#include "kernels/abi.h"

typedef struct pl_graph_tensor {
    pl_tensor t;
    int view_of;        /* index of the tensor whose storage this views, or -1 */
    bool external;      /* storage owned elsewhere (weights, KV cache, inputs) */
    size_t offset;      /* planned offset in scratch (intermediates only) */
    bool keep;          /* a graph output: its storage is never reused */
} pl_graph_tensor;

typedef struct pl_graph {
    pl_graph_tensor *tensors;
    int n_tensors, cap_tensors;
    pl_node *nodes;
    int n_nodes, cap_nodes;
    pl_status error;      /* first builder error (sticky), PL_OK if none */
    bool attn_batch_invariant; /* attention nodes get iparams[1] = 1 (pl_op_attention) */
} pl_graph;

pl_status pl_graph_init(pl_graph *g, int cap_tensors, int cap_nodes);
void pl_graph_free(pl_graph *g);
void pl_graph_reset(pl_graph *g);

/* Builder helpers. They never fail loudly: on overflow they record g->error
 * and return a dummy tensor, so a builder checks g->error once at the end. */
pl_tensor *pl_graph_external(pl_graph *g, const pl_tensor *src);  /* weights, cache, inputs */
pl_tensor *pl_graph_new(pl_graph *g, pl_dtype dtype, int n_dims, const int64_t *ne, const char *name);
/* A reshape of a contiguous tensor (same bytes, new dims). */
pl_tensor *pl_graph_reshape(pl_graph *g, pl_tensor *src, int n_dims, const int64_t *ne);
pl_node *pl_graph_add_node(pl_graph *g, pl_op op, pl_tensor *dst, int n_src, pl_tensor *const *src);

/* Op helpers that create the output tensor and the node. */
pl_tensor *pl_op_get_rows(pl_graph *g, pl_tensor *table, pl_tensor *ids);
pl_tensor *pl_op_rms_norm(pl_graph *g, pl_tensor *x, pl_tensor *w, float eps);
pl_tensor *pl_op_matmul(pl_graph *g, pl_tensor *w, pl_tensor *x);
pl_tensor *pl_op_add(pl_graph *g, pl_tensor *a, pl_tensor *b);
pl_tensor *pl_op_swiglu(pl_graph *g, pl_tensor *gate, pl_tensor *up);
pl_tensor *pl_op_rope(pl_graph *g, pl_tensor *x, pl_tensor *pos, int n_rot, int mode,
                      float freq_base, float freq_scale);
void pl_op_kv_store(pl_graph *g, pl_tensor *rows, pl_tensor *pos, pl_tensor *seq, pl_tensor *cache);
pl_tensor *pl_op_attention(pl_graph *g, pl_tensor *q, pl_tensor *kc, pl_tensor *vc,
                           pl_tensor *pos, pl_tensor *seq, int n_kv_head, float scale);
/* The same with the Walsh-Hadamard rotation of quantized caches (abi.c:
 * kv_store iparams rot/head_dim, attention iparams k_rot/v_rot; 0 = none). */
void pl_op_kv_store_rot(pl_graph *g, pl_tensor *rows, pl_tensor *pos, pl_tensor *seq, pl_tensor *cache, int rot,
                        int head_dim);
pl_tensor *pl_op_attention_rot(pl_graph *g, pl_tensor *q, pl_tensor *kc, pl_tensor *vc, pl_tensor *pos,
                               pl_tensor *seq, int n_kv_head, float scale, int k_rot, int v_rot);
/* Makes the attention node that produced attn a sliding-window one (abi.h:
 * iparams[4]; 0 = full causal). */
void pl_op_attention_window(pl_graph *g, pl_tensor *attn, int window);

/* Marks a graph output (read after execution). */
void pl_graph_keep(pl_graph *g, pl_tensor *t);
/* Plans scratch offsets by liveness. Returns the bytes needed. */
size_t pl_graph_plan(pl_graph *g);
/* Copies the plan of `planned` (same structure, tensors no larger) onto g
 * and points g's intermediates into scratch. */
pl_status pl_graph_apply_plan(pl_graph *g, const pl_graph *planned, void *scratch, size_t scratch_size);

/* Runs every node on the context's backend, in order. */
pl_status pl_graph_execute(const pl_graph *g, pl_exec_ctx *ctx);
/* The largest kernel work buffer any node needs on this backend. */
pl_status pl_graph_work_size(const pl_graph *g, const pl_backend *b, int n_threads, size_t *out);

#endif
