/*
 * Qwen3 and Qwen2 (dense), and the dense decoders built the same way (llama.c,
 * gemma3.c, qwen3moe.c use pl_dense_read_hparams and the table rows of
 * models/dense.h; llama.c and qwen3moe.c this builder). One builder: Qwen3 has per-head
 * RMSNorm on Q and K and no projection biases; Qwen2/2.5 has Q/K/V biases and
 * no Q/K norms; Llama has neither (biases optional) and normal RoPE.
 *
 * Shapes (E = n_embd, H = n_head, G = n_head_kv, D = head_dim, F = n_ff,
 * V = n_vocab, n = tokens in the batch):
 *   token_embd [E, V]      attn_q [E, H*D]   attn_k, attn_v [E, G*D]
 *   attn_output [H*D, E]   attn_q_norm, attn_k_norm [D]
 *   ffn_gate, ffn_up [E, F]   ffn_down [F, E]   output [E, V] (or tied)
 */
#include "engine/model.h"
#include "models/dense.h"
#include "core/status.h"
#include <math.h>
#include <stdio.h>


static const pl_hparam_decl qwen_hparams[] = {PL_DENSE_HPARAMS, PL_HK_READ("{arch}.rope.scaling.factor"),
                                              PL_HPARAMS_END};

const pl_arch_preset pl_qwen3_presets[] = {
    {"0.6b", 1024, 28, 16, 8, 128, 3072, true, 0, 0, 0},
    {"1.7b", 2048, 28, 16, 8, 128, 6144, true, 0, 0, 0},
    {"4b", 2560, 36, 32, 8, 128, 9728, true, 0, 0, 0},
    {"8b", 4096, 36, 32, 8, 128, 12288, false, 0, 0, 0},
    {NULL, 0, 0, 0, 0, 0, 0, false, 0, 0, 0},
};

static const pl_tensor_decl qwen3_tensors[] = {PL_DENSE_T_EMBD,    PL_DENSE_T_ATTN, PL_DENSE_T_QK_NORM,
                                               PL_DENSE_T_FFN_NORM, PL_DENSE_T_FFN,  PL_DENSE_T_OUTPUT,
                                               PL_TENSORS_END};
static const pl_tensor_decl qwen2_tensors[] = {PL_DENSE_T_EMBD,     PL_DENSE_T_ATTN, PL_DENSE_T_QKV_BIAS(PL_TD_UNWRITTEN),
                                               PL_DENSE_T_FFN_NORM, PL_DENSE_T_FFN,  PL_DENSE_T_OUTPUT,
                                               PL_TENSORS_END};

pl_status pl_dense_read_hparams(pl_model *m, int rope_mode, bool dense_ffn) {
    pl_hparams *hp = &m->hp;
    hp->rope_mode = rope_mode;
    PL_TRY(pl_model_hp_int(m, "context_length", false, 4096, &hp->n_ctx_train));
    PL_TRY(pl_model_hp_int(m, "embedding_length", true, 0, &hp->n_embd));
    PL_TRY(pl_model_hp_int(m, "block_count", true, 0, &hp->n_layer));
    /* an expert model's feed_forward_length (if any) sizes no tensor here */
    PL_TRY(pl_model_hp_int(m, "feed_forward_length", dense_ffn, dense_ffn ? 0 : 1, &hp->n_ff));
    PL_TRY(pl_model_hp_int(m, "attention.head_count", true, 0, &hp->n_head));
    PL_TRY(pl_model_hp_int(m, "attention.head_count_kv", false, hp->n_head, &hp->n_head_kv));
    if (hp->n_embd <= 0 || hp->n_layer <= 0 || hp->n_ff <= 0 || hp->n_head <= 0 || hp->n_head_kv <= 0 ||
        hp->n_embd > (1 << 20) || hp->n_ff > (1 << 22) || hp->n_layer > 4096 || hp->n_head > 4096)
        return pl_errorf(PL_ERR_FORMAT, "%s: implausible hyperparameters (n_embd %lld, n_layer %lld, n_ff %lld, n_head %lld)",
                         m->file_name, (long long)hp->n_embd, (long long)hp->n_layer, (long long)hp->n_ff,
                         (long long)hp->n_head);
    if (hp->n_head % hp->n_head_kv)
        return pl_errorf(PL_ERR_FORMAT, "%s: head_count %lld is not a multiple of head_count_kv %lld",
                         m->file_name, (long long)hp->n_head, (long long)hp->n_head_kv);
    int64_t def_hd = hp->n_embd / hp->n_head;
    PL_TRY(pl_model_hp_int(m, "attention.key_length", false, def_hd, &hp->head_dim));
    int64_t vlen;
    PL_TRY(pl_model_hp_int(m, "attention.value_length", false, hp->head_dim, &vlen));
    if (hp->head_dim <= 0 || hp->head_dim > 1024 || hp->head_dim % 2 || vlen != hp->head_dim)
        return pl_errorf(PL_ERR_FORMAT, "%s: unsupported head size (key_length %lld, value_length %lld)",
                         m->file_name, (long long)hp->head_dim, (long long)vlen);
    PL_TRY(pl_model_hp_int(m, "rope.dimension_count", false, hp->head_dim, &hp->n_rot));
    if (hp->n_rot <= 0 || hp->n_rot > hp->head_dim || hp->n_rot % 2)
        return pl_errorf(PL_ERR_FORMAT, "%s: bad rope.dimension_count %lld", m->file_name, (long long)hp->n_rot);
    PL_TRY(pl_model_hp_float(m, "attention.layer_norm_rms_epsilon", false, 1e-6f, &hp->rms_eps));
    PL_TRY(pl_model_hp_float(m, "rope.freq_base", false, 10000.0f, &hp->rope_base));
    float scale_factor;
    PL_TRY(pl_model_hp_float(m, "rope.scaling.factor", false, 1.0f, &scale_factor));
    hp->rope_scale = scale_factor > 0 ? 1.0f / scale_factor : 1.0f;
    if (!(hp->rms_eps > 0 && hp->rms_eps < 1) || !(hp->rope_base > 0) || !isfinite(hp->rope_base))
        return pl_errorf(PL_ERR_FORMAT, "%s: bad rms epsilon or rope base", m->file_name);

    return PL_OK;
}

pl_status pl_dense_check_bias(pl_model *m) {
    for (int64_t l = 0; l < m->hp.n_layer; l++) {
        pl_tensor *const *t = m->layers[l].t;
        if (!t[PL_LW_BQ] != !t[PL_LW_BK] || !t[PL_LW_BQ] != !t[PL_LW_BV])
            return pl_errorf(PL_ERR_FORMAT, "%s: layer %d has some of attn_q/k/v.bias but not all", m->file_name,
                             (int)l);
    }
    return PL_OK;
}

static pl_status qwen3_load(pl_model *m) {
    PL_TRY(pl_dense_read_hparams(m, 2, true));
    return pl_arch_bind_tensors(m, qwen3_tensors);
}
static pl_status qwen2_load(pl_model *m) {
    PL_TRY(pl_dense_read_hparams(m, 2, true));
    PL_TRY(pl_arch_bind_tensors(m, qwen2_tensors));
    return pl_dense_check_bias(m);
}

void pl_arch_qwen_capacity(const pl_model *m, int *n_tensors, int *n_nodes) {
    *n_tensors = (int)m->hp.n_layer * 64 + 64;
    *n_nodes = (int)m->hp.n_layer * 32 + 32;
}

#define W(t) pl_graph_external(g, (t))

/* The dense SwiGLU FFN of layer l: h [E, n] -> [E, n]. */
static pl_tensor *dense_ffn(pl_model *m, pl_graph *g, int64_t l, pl_tensor *h) {
    const pl_layer_weights *L = &m->layers[l];
    pl_tensor *gate = pl_op_matmul(g, W(L->t[PL_LW_FFN_GATE]), h);              /* [F, n] */
    pl_tensor *up = pl_op_matmul(g, W(L->t[PL_LW_FFN_UP]), h);                  /* [F, n] */
    return pl_op_matmul(g, W(L->t[PL_LW_FFN_DOWN]), pl_op_swiglu(g, gate, up)); /* [E, n] */
}

pl_tensor *pl_dense_build(pl_model *m, pl_graph *g, const pl_graph_inputs *in) {
    return pl_dense_build_ffn(m, g, in, dense_ffn);
}

pl_tensor *pl_dense_build_ffn(pl_model *m, pl_graph *g, const pl_graph_inputs *in, pl_dense_ffn_fn ffn) {
    const pl_hparams *hp = &m->hp;
    const int64_t E = hp->n_embd, H = hp->n_head, G = hp->n_head_kv, D = hp->head_dim;
    const int64_t n = in->ids->ne[0];
    const float eps = hp->rms_eps;
    const float kq_scale = 1.0f / sqrtf((float)D);
    const int rope_mode = hp->rope_mode;
    pl_tensor *rope_ff = m->globals[PL_GW_ROPE_FREQS] ? W(m->globals[PL_GW_ROPE_FREQS]) : NULL;      /* llama3 factors [n_rot/2] or none */

    pl_tensor *x = pl_op_get_rows(g, W(m->globals[PL_GW_TOK_EMBD]), in->ids);           /* [E, n] */
    for (int64_t l = 0; l < hp->n_layer; l++) {
        const pl_layer_weights *L = &m->layers[l];
        pl_tensor *h = pl_op_rms_norm(g, x, W(L->t[PL_LW_ATTN_NORM]), eps);        /* [E, n] */
        pl_tensor *q = pl_op_matmul(g, W(L->t[PL_LW_Q]), h);                       /* [H*D, n] */
        pl_tensor *k = pl_op_matmul(g, W(L->t[PL_LW_K]), h);                       /* [G*D, n] */
        pl_tensor *v = pl_op_matmul(g, W(L->t[PL_LW_V]), h);                       /* [G*D, n] */
        if (L->t[PL_LW_BQ]) {
            q = pl_op_add(g, q, W(L->t[PL_LW_BQ]));
            k = pl_op_add(g, k, W(L->t[PL_LW_BK]));
            v = pl_op_add(g, v, W(L->t[PL_LW_BV]));
        }
        if (L->t[PL_LW_Q_NORM]) {
            /* Per-head RMSNorm: rows of D elements. */
            q = pl_op_rms_norm(g, pl_graph_reshape(g, q, 2, (int64_t[]){D, H * n}), W(L->t[PL_LW_Q_NORM]), eps);
            k = pl_op_rms_norm(g, pl_graph_reshape(g, k, 2, (int64_t[]){D, G * n}), W(L->t[PL_LW_K_NORM]), eps);
        }
        q = pl_op_rope_ext(g, pl_graph_reshape(g, q, 3, (int64_t[]){D, H, n}), in->pos, rope_ff, (int)hp->n_rot,
                           rope_mode, hp->rope_base, hp->rope_scale);       /* [D, H, n] */
        k = pl_op_rope_ext(g, pl_graph_reshape(g, k, 3, (int64_t[]){D, G, n}), in->pos, rope_ff, (int)hp->n_rot,
                           rope_mode, hp->rope_base, hp->rope_scale);       /* [D, G, n] */
        pl_tensor *kc = W(&m->k_cache[l]), *vc = W(&m->v_cache[l]);
        /* Quantized caches: K (and Q, inside attention) rotated by H_{k_rot},
         * V by H_{v_rot} and the output back (m->k_rot / v_rot, 0 = none;
         * quant/hadamard.h), as llama.cpp does. */
        pl_op_kv_store_rot(g, pl_graph_reshape(g, k, 2, (int64_t[]){G * D, n}), in->pos, in->seq, kc, m->k_rot,
                           (int)D);
        pl_op_kv_store_rot(g, v, in->pos, in->seq, vc, m->v_rot, (int)D);
        pl_tensor *a = pl_op_attention_rot(g, q, kc, vc, in->pos, in->seq, (int)G, kq_scale, m->k_rot,
                                           m->v_rot); /* [H*D, n] */
        pl_tensor *o = pl_op_matmul(g, W(L->t[PL_LW_O]), a);                       /* [E, n] */
        if (l == hp->n_layer - 1) {
            /* Only the rows whose logits are wanted go on past attention. */
            o = pl_op_get_rows(g, o, in->out_idx);                         /* [E, n_out] */
            x = pl_op_get_rows(g, x, in->out_idx);
        }
        x = pl_op_add(g, x, o);
        h = pl_op_rms_norm(g, x, W(L->t[PL_LW_FFN_NORM]), eps);
        x = pl_op_add(g, x, ffn(m, g, l, h));                              /* [E, n] */
    }
    (void)E;
    x = pl_op_rms_norm(g, x, W(m->globals[PL_GW_OUTPUT_NORM]), eps);
    pl_tensor *logits = pl_op_matmul(g, W(m->globals[PL_GW_OUTPUT]), x);                 /* [V, n_out] */
    pl_graph_keep(g, logits);
    return logits;
}

const pl_arch pl_arch_qwen3 = {.name = "qwen3",
                               .summary = "Qwen3 dense (per-head Q/K RMSNorm, GQA, SwiGLU, NeoX RoPE)",
                               .hparams = qwen_hparams, .tensors = qwen3_tensors, .presets = pl_qwen3_presets,
                               .synth = true, .load = qwen3_load, .build = pl_dense_build,
                               .capacity = pl_arch_qwen_capacity};
const pl_arch pl_arch_qwen2 = {.name = "qwen2",
                               .summary = "Qwen2 / Qwen2.5 dense (Q/K/V biases, GQA, SwiGLU, NeoX RoPE)",
                               .hparams = qwen_hparams, .tensors = qwen2_tensors, .load = qwen2_load,
                               .build = pl_dense_build, .capacity = pl_arch_qwen_capacity};
