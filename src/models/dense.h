/* The dense decoder shared by qwen3, qwen2 and llama (src/models/qwen.c):
 * RMSNorm, GQA attention with RoPE over the KV cache, SwiGLU FFN, tied or
 * untied output. An architecture file picks the variant at load and reuses
 * the builder. */
#ifndef PL_MODELS_DENSE_H
#define PL_MODELS_DENSE_H

#include "engine/model.h"
#include "models/arch_table.h"

/* Slots of the dense decoders' tensors (pl_model.globals, pl_layer_weights.t);
 * an architecture's own tensors take the slots from PL_LW_DENSE_COUNT /
 * PL_GW_DENSE_COUNT on. */
enum { PL_GW_OUTPUT_NORM = PL_GW_TOK_EMBD + 1, PL_GW_OUTPUT, PL_GW_ROPE_FREQS, PL_GW_DENSE_COUNT };
enum {
    PL_LW_ATTN_NORM, PL_LW_Q, PL_LW_K, PL_LW_V, PL_LW_O,
    PL_LW_BQ, PL_LW_BK, PL_LW_BV,           /* optional (qwen2; llama files may carry them) */
    PL_LW_Q_NORM, PL_LW_K_NORM,             /* per-head RMSNorm (qwen3) */
    PL_LW_FFN_NORM, PL_LW_FFN_GATE, PL_LW_FFN_UP, PL_LW_FFN_DOWN,
    PL_LW_DENSE_COUNT
};

/* Rows of the dense tables, in the converter's order (E = n_embd, V =
 * n_vocab, H*D / G*D query / key-value widths, F = n_ff). */
#define PL_DENSE_T_EMBD {"token_embd.weight", PL_TR_EMBD, 0, PL_GW_TOK_EMBD, 2, {PL_DIM_E, PL_DIM_V}}
#define PL_DENSE_T_OUTPUT                                                                                    \
    {"output_norm.weight", PL_TR_NORM, PL_TD_TAIL, PL_GW_OUTPUT_NORM, 1, {PL_DIM_E}},                       \
    {"output.weight", PL_TR_MATRIX, PL_TD_TAIL | PL_TD_TIED, PL_GW_OUTPUT, 2, {PL_DIM_E, PL_DIM_V}}
#define PL_DENSE_T_ATTN                                                                                      \
    {"blk.%d.attn_norm.weight", PL_TR_NORM, PL_TD_LAYER, PL_LW_ATTN_NORM, 1, {PL_DIM_E}},                   \
    {"blk.%d.attn_q.weight", PL_TR_MATRIX, PL_TD_LAYER, PL_LW_Q, 2, {PL_DIM_E, PL_DIM_HD}},                 \
    {"blk.%d.attn_k.weight", PL_TR_MATRIX, PL_TD_LAYER, PL_LW_K, 2, {PL_DIM_E, PL_DIM_GD}},                 \
    {"blk.%d.attn_v.weight", PL_TR_MATRIX, PL_TD_LAYER, PL_LW_V, 2, {PL_DIM_E, PL_DIM_GD}},                 \
    {"blk.%d.attn_output.weight", PL_TR_MATRIX, PL_TD_LAYER, PL_LW_O, 2, {PL_DIM_HD, PL_DIM_E}}
/* flags: PL_TD_UNWRITTEN (required, qwen2) or PL_TD_UNWRITTEN | PL_TD_OPTIONAL (llama) */
#define PL_DENSE_T_QKV_BIAS(flags)                                                                           \
    {"blk.%d.attn_q.bias", PL_TR_BIAS, PL_TD_LAYER | (flags), PL_LW_BQ, 1, {PL_DIM_HD}},                   \
    {"blk.%d.attn_k.bias", PL_TR_BIAS, PL_TD_LAYER | (flags), PL_LW_BK, 1, {PL_DIM_GD}},                   \
    {"blk.%d.attn_v.bias", PL_TR_BIAS, PL_TD_LAYER | (flags), PL_LW_BV, 1, {PL_DIM_GD}}
#define PL_DENSE_T_QK_NORM                                                                                   \
    {"blk.%d.attn_q_norm.weight", PL_TR_NORM, PL_TD_LAYER, PL_LW_Q_NORM, 1, {PL_DIM_D}},                    \
    {"blk.%d.attn_k_norm.weight", PL_TR_NORM, PL_TD_LAYER, PL_LW_K_NORM, 1, {PL_DIM_D}}
#define PL_DENSE_T_FFN_NORM {"blk.%d.ffn_norm.weight", PL_TR_NORM, PL_TD_LAYER, PL_LW_FFN_NORM, 1, {PL_DIM_E}}
#define PL_DENSE_T_FFN                                                                                       \
    {"blk.%d.ffn_gate.weight", PL_TR_MATRIX, PL_TD_LAYER, PL_LW_FFN_GATE, 2, {PL_DIM_E, PL_DIM_F}},         \
    {"blk.%d.ffn_up.weight", PL_TR_MATRIX, PL_TD_LAYER, PL_LW_FFN_UP, 2, {PL_DIM_E, PL_DIM_F}},             \
    {"blk.%d.ffn_down.weight", PL_TR_MATRIX, PL_TD_LAYER, PL_LW_FFN_DOWN, 2, {PL_DIM_F, PL_DIM_E}}
#define PL_TENSORS_END {NULL, 0, 0, 0, 0, {0}}

/* The hyperparameter keys every dense decoder reads, in the order synth and
 * fit's presets write them (those with a field). */
#define PL_DENSE_HPARAMS                                                                                      \
    PL_HK_INT("{arch}.context_length", n_ctx_train), PL_HK_INT("{arch}.embedding_length", n_embd),           \
    PL_HK_INT("{arch}.block_count", n_layer), PL_HK_INT("{arch}.feed_forward_length", n_ff),                  \
    PL_HK_INT("{arch}.attention.head_count", n_head), PL_HK_INT("{arch}.attention.head_count_kv", n_head_kv),\
    PL_HK_INT("{arch}.attention.key_length", head_dim), PL_HK_INT("{arch}.attention.value_length", head_dim), \
    PL_HK_FLOAT("{arch}.attention.layer_norm_rms_epsilon", rms_eps), PL_HK_FLOAT("{arch}.rope.freq_base", rope_base), \
    PL_HK_READ("{arch}.rope.dimension_count")
#define PL_HPARAMS_END {NULL, 0, 0, false}

/* The Qwen3 release shapes (qwen.c), which synth also offers for llama and gemma3. */
extern const pl_arch_preset pl_qwen3_presets[];

/* Reads {arch}.* hyperparameters of the dense decoder. rope_mode: 0 normal
 * (pairs of adjacent dims), 2 NeoX (halves). dense_ffn false (an expert
 * model) makes feed_forward_length optional. The tensors are then bound from
 * the architecture's table (pl_arch_bind_tensors). */
pl_status pl_dense_read_hparams(pl_model *m, int rope_mode, bool dense_ffn);
/* Refuses a layer with some of attn_q/k/v.bias but not all. */
pl_status pl_dense_check_bias(pl_model *m);
pl_tensor *pl_dense_build(pl_model *m, pl_graph *g, const pl_graph_inputs *in);

/* The same decoder with the FFN left to the architecture (qwen3moe): the
 * builder calls ffn for each layer with h = rms_norm(x, ffn_norm) [E, n] and
 * adds what it returns ([E, n]). */
typedef pl_tensor *(*pl_dense_ffn_fn)(pl_model *m, pl_graph *g, int64_t layer, pl_tensor *h);
pl_tensor *pl_dense_build_ffn(pl_model *m, pl_graph *g, const pl_graph_inputs *in, pl_dense_ffn_fn ffn);
void pl_arch_qwen_capacity(const pl_model *m, int *n_tensors, int *n_nodes);

#endif
