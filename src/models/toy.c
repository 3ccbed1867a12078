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
#include "core/status.h"

extern const pl_arch pl_arch_qwen3;
void pl_arch_qwen_capacity(const pl_model *m, int *n_tensors, int *n_nodes);

static const char *const toy_keys[] = {"{arch}.embedding_length", "{arch}.block_count",
                                       "{arch}.feed_forward_length", "{arch}.attention.head_count", NULL};

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
    const int64_t E = hp->n_embd, F = hp->n_ff, V = hp->n_vocab;
    const uint64_t norm = PL_DTMASK(PL_F32);
    PL_TRY(pl_model_bind(m, &m->tok_embd, true, 0, 2, (int64_t[]){E, V}, "token_embd.weight"));
    PL_TRY(pl_model_bind(m, &m->output_norm, true, norm, 1, (int64_t[]){E}, "output_norm.weight"));
    PL_TRY(pl_model_bind(m, &m->output, false, 0, 2, (int64_t[]){E, V}, "output.weight"));
    if (!m->output) m->output = m->tok_embd;
    for (int64_t l = 0; l < hp->n_layer; l++) {
        pl_layer_weights *L = &m->layers[l];
        int li = (int)l;
        PL_TRY(pl_model_bind(m, &L->attn_norm, true, norm, 1, (int64_t[]){E}, "blk.%d.attn_norm.weight", li));
        PL_TRY(pl_model_bind(m, &L->wq, true, 0, 2, (int64_t[]){E, E}, "blk.%d.attn_q.weight", li));
        PL_TRY(pl_model_bind(m, &L->wk, true, 0, 2, (int64_t[]){E, E}, "blk.%d.attn_k.weight", li));
        PL_TRY(pl_model_bind(m, &L->wv, true, 0, 2, (int64_t[]){E, E}, "blk.%d.attn_v.weight", li));
        PL_TRY(pl_model_bind(m, &L->wo, true, 0, 2, (int64_t[]){E, E}, "blk.%d.attn_output.weight", li));
        PL_TRY(pl_model_bind(m, &L->ffn_norm, true, norm, 1, (int64_t[]){E}, "blk.%d.ffn_norm.weight", li));
        PL_TRY(pl_model_bind(m, &L->ffn_gate, true, 0, 2, (int64_t[]){E, F}, "blk.%d.ffn_gate.weight", li));
        PL_TRY(pl_model_bind(m, &L->ffn_up, true, 0, 2, (int64_t[]){E, F}, "blk.%d.ffn_up.weight", li));
        PL_TRY(pl_model_bind(m, &L->ffn_down, true, 0, 2, (int64_t[]){F, E}, "blk.%d.ffn_down.weight", li));
    }
    return PL_OK;
}

/* Without Q/K norms and biases the Qwen builder emits exactly this graph. */
static pl_tensor *toy_build(pl_model *m, pl_graph *g, const pl_graph_inputs *in) {
    return pl_arch_qwen3.build(m, g, in);
}

const pl_arch pl_arch_toy = {"toy", "test architecture: a Qwen3 block without Q/K norms, head size E/H",
                             toy_keys, toy_load, toy_build, pl_arch_qwen_capacity};
