/* The dense decoder shared by qwen3, qwen2 and llama (src/models/qwen.c):
 * RMSNorm, GQA attention with RoPE over the KV cache, SwiGLU FFN, tied or
 * untied output. An architecture file picks the variant at load and reuses
 * the builder. */
#ifndef PL_MODELS_DENSE_H
#define PL_MODELS_DENSE_H

#include "engine/model.h"

typedef enum pl_dense_bias {
    PL_DENSE_BIAS_NONE,      /* no attn_q/k/v.bias (qwen3) */
    PL_DENSE_BIAS_REQUIRED,  /* qwen2 */
    PL_DENSE_BIAS_OPTIONAL,  /* llama: some converted files carry them */
} pl_dense_bias;

/* Reads {arch}.* hyperparameters and binds the tensors. rope_mode: 0 normal
 * (pairs of adjacent dims), 2 NeoX (halves). */
pl_status pl_dense_load(pl_model *m, bool qk_norm, pl_dense_bias qkv_bias, int rope_mode);
pl_tensor *pl_dense_build(pl_model *m, pl_graph *g, const pl_graph_inputs *in);

/* The same decoder with the FFN left to the architecture (qwen3moe):
 * dense_ffn false binds no ffn_gate/up/down (ffn_norm still) and makes
 * feed_forward_length optional; the builder calls ffn for each layer with
 * h = rms_norm(x, ffn_norm) [E, n] and adds what it returns ([E, n]). */
typedef pl_tensor *(*pl_dense_ffn_fn)(pl_model *m, pl_graph *g, int64_t layer, pl_tensor *h);
pl_status pl_dense_load_ex(pl_model *m, bool qk_norm, pl_dense_bias qkv_bias, int rope_mode, bool dense_ffn);
pl_tensor *pl_dense_build_ffn(pl_model *m, pl_graph *g, const pl_graph_inputs *in, pl_dense_ffn_fn ffn);
void pl_arch_qwen_capacity(const pl_model *m, int *n_tensors, int *n_nodes);

#endif
