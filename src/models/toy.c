/*
 * "toy": the smallest architecture that exercises every part of the engine
 * (embedding, norms, projections, RoPE, KV cache, attention, SwiGLU, head).
 * It is a Qwen3 block without the per-head Q/K norms and with a fixed head
 * size, used by the tests with checkpoints they write themselves.
 *
 * Keys: toy.embedding_length (E), toy.block_count, toy.feed_forward_length,
 * toy.attention.head_count (H, head size E/H, one KV head per query head).
 */
#include "engine/model.h"
#include "models/dense.h"
#include "core/status.h"

extern const pl_arch pl_arch_qwen3;
void pl_arch_qwen_capacity(const pl_model *m, int *n_tensors, int *n_nodes);

static const pl_hparam_decl toy_hparams[] = {
    PL_HK_INT("{arch}.embedding_length", n_embd), PL_HK_INT("{arch}.block_count", n_layer),
    PL_HK_INT("{arch}.feed_forward_length", n_ff), PL_HK_INT("{arch}.attention.head_count", n_head),
    PL_HPARAMS_END};

/* The qwen3 table without the Q/K norms (head size E/H, as many KV heads as
 * query heads, so every attention matrix is [E, E]). */
static const pl_tensor_decl toy_tensors[] = {PL_DENSE_T_EMBD, PL_DENSE_T_ATTN, PL_DENSE_T_FFN_NORM,
                                             PL_DENSE_T_FFN,  PL_DENSE_T_OUTPUT, PL_TENSORS_END};

static pl_status toy_load(pl_model *m) {
    pl_hparams *hp = &m->hp;
    PL_TRY(pl_model_hp_int(m, "embedding_length", true, 0, &hp->n_embd));
    PL_TRY(pl_model_hp_int(m, "block_count", true, 0, &hp->n_layer));
    PL_TRY(pl_model_hp_int(m, "feed_forward_length", true, 0, &hp->n_ff));
    PL_TRY(pl_model_hp_int(m, "attention.head_count", true, 0, &hp->n_head));
    if (hp->n_embd <= 0 || hp->n_head <= 0 || hp->n_embd % hp->n_head || (hp->n_embd / hp->n_head) % 2 ||
        hp->n_ff <= 0 || hp->n_embd > 65536 || hp->n_ff > 1 << 20)
        return pl_errorf(PL_ERR_FORMAT, "%s: bad toy hyperparameters", m->file_name);
    hp->n_head_kv = hp->n_head;
    hp->head_dim = hp->n_embd / hp->n_head;
    hp->n_rot = hp->head_dim;
    hp->n_ctx_train = 2048;
    hp->rms_eps = 1e-6f;
    hp->rope_base = 10000.0f;
    hp->rope_scale = 1.0f;
    hp->rope_mode = 2;  /* NeoX, as qwen3 whose builder it borrows */
    return pl_arch_bind_tensors(m, toy_tensors);
}

/* Without Q/K norms and biases the Qwen builder emits exactly this graph. */
static pl_tensor *toy_build(pl_model *m, pl_graph *g, const pl_graph_inputs *in) {
    return pl_arch_qwen3.build(m, g, in);
}

const pl_arch pl_arch_toy = {.name = "toy", .summary = "test architecture: a Qwen3 block without Q/K norms, head size E/H",
                             .hparams = toy_hparams, .tensors = toy_tensors, .load = toy_load, .build = toy_build,
                             .capacity = pl_arch_qwen_capacity};
