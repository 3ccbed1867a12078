/*
 * Gemma 3 (text part), as llama.cpp's LLM_ARCH_GEMMA3 with its sliding
 * window declared (the interleaved-SWA graph):
 *  - embeddings scaled by sqrtf(n_embd) (a float multiply, as ggml_scale);
 *  - per layer: x -> attn_norm -> Q/K/V; per-head RMSNorm on Q and K; NeoX
 *    RoPE; Q scaled by attn_scale (llama.cpp scales Q, then attends with
 *    scale 1); attention over the KV cache, local layers restricted to the
 *    last n_swa positions; attn_output -> post_attention_norm -> + x;
 *    ffn_norm -> GeGLU FFN -> post_ffw_norm -> + residual;
 *  - output_norm, tied (or own) output matrix.
 * RMSNorm weights are used as stored: llama.cpp's converter already added the
 * 1 of Gemma's (1 + w) RMSNorm, and its graph multiplies by w.
 *
 * Layer kinds (llama.cpp's set_swa_pattern(6), dense_first false): layer il
 * is local (sliding window) iff il % 6 < 5, so layers 5, 11, 17, ... are
 * global. Local layers use RoPE base 10000 and scale 1 (llama.cpp's
 * rope_freq_base_train_swa); global ones the file's rope.freq_base and
 * rope.scaling.factor.
 *
 * Attention scale (llama.cpp's gemma3 hparams): 1/sqrt(head_dim), except the
 * 62-layer 27B model, 1/sqrt(n_embd / n_head).
 *
 * Final logit soft-capping: where the file declares
 * final_logit_softcapping = c, logits = tanhf(logits * (1/c)) * c (SOFTCAP),
 * as llama.cpp at the goldens' commit does in this graph too (measured: a
 * tiny model declaring c = 5 gets llama.cpp logits within +-4.4, the same
 * weights without the key up to 6.7). Gemma 3 releases do not declare it.
 *
 * Shapes (E = n_embd, H = n_head, G = n_head_kv, D = head_dim, F = n_ff,
 * V = n_vocab, n = tokens in the batch): as qwen.c's, plus
 *   post_attention_norm, post_ffw_norm [E].
 */
#include "engine/model.h"
#include "models/dense.h"
#include "core/status.h"
#include <math.h>
#include <stddef.h>
#include <stdio.h>

#define GEMMA3_SWA_PATTERN 6
#define GEMMA3_ROPE_BASE_SWA 10000.0f

static const pl_hparam_decl gemma3_hparams[] = {
    PL_DENSE_HPARAMS,
    PL_HK_READ("{arch}.rope.scaling.factor"),
    PL_HK_INT("{arch}.attention.sliding_window", n_swa),
    {"{arch}.final_logit_softcapping", PL_HK_F32, offsetof(pl_hparams, final_softcap), true},
    PL_HPARAMS_END};

/* Slots of the sandwich norms, after the dense decoder's. */
enum { G3_ATTN_POST_NORM = PL_LW_DENSE_COUNT, G3_FFN_POST_NORM };

/* The sandwich norms are stored with Gemma's + 1 already in, as the
 * converter writes them. */
static const pl_tensor_decl gemma3_tensors[] = {
    PL_DENSE_T_EMBD,
    PL_DENSE_T_ATTN,
    PL_DENSE_T_QK_NORM,
    PL_DENSE_T_FFN_NORM,
    PL_DENSE_T_FFN,
    {"blk.%d.post_attention_norm.weight", PL_TR_NORM, PL_TD_LAYER, G3_ATTN_POST_NORM, 1, {PL_DIM_E}},
    {"blk.%d.post_ffw_norm.weight", PL_TR_NORM, PL_TD_LAYER, G3_FFN_POST_NORM, 1, {PL_DIM_E}},
    PL_DENSE_T_OUTPUT,
    PL_TENSORS_END};

static bool gemma3_is_local(int64_t il) { return il % GEMMA3_SWA_PATTERN < GEMMA3_SWA_PATTERN - 1; }

static pl_status gemma3_load(pl_model *m) {
    pl_hparams *hp = &m->hp;
    /* Q/K norms, no biases, NeoX RoPE: the dense decoder's hyperparameters,
     * then gemma3's own, then every tensor of the table. */
    PL_TRY(pl_dense_read_hparams(m, 2, true));
    PL_TRY(pl_model_hp_int(m, "attention.sliding_window", true, 0, &hp->n_swa));
    if (hp->n_swa <= 0 || hp->n_swa > (1 << 24))
        return pl_errorf(PL_ERR_FORMAT, "%s: %s.attention.sliding_window = %lld must be in 1..%d", m->file_name,
                         m->arch_name, (long long)hp->n_swa, 1 << 24);
    PL_TRY(pl_model_hp_float(m, "final_logit_softcapping", false, 0.0f, &hp->final_softcap));
    if (!isfinite(hp->final_softcap) || hp->final_softcap < 0)
        return pl_errorf(PL_ERR_FORMAT, "%s: bad %s.final_logit_softcapping %g", m->file_name, m->arch_name,
                         (double)hp->final_softcap);
    hp->rope_base_swa = GEMMA3_ROPE_BASE_SWA;
    hp->attn_scale = hp->n_layer == 62 ? 1.0f / sqrtf((float)(hp->n_embd / hp->n_head))
                                       : 1.0f / sqrtf((float)hp->head_dim);
    return pl_arch_bind_tensors(m, gemma3_tensors);
}

static void gemma3_capacity(const pl_model *m, int *n_tensors, int *n_nodes) {
    *n_tensors = (int)m->hp.n_layer * 96 + 64;
    *n_nodes = (int)m->hp.n_layer * 48 + 32;
}

#define W(t) pl_graph_external(g, (t))

/* One-input element-wise node (SCALE: dst = x * p; SOFTCAP: tanh(x / p) * p). */
static pl_tensor *unary(pl_graph *g, pl_op op, pl_tensor *x, float p, const char *name) {
    pl_tensor *dst = pl_graph_new(g, PL_F32, x->n_dims, x->ne, name);
    pl_node *n = pl_graph_add_node(g, op, dst, 1, (pl_tensor *[]){x});
    if (n) n->fparams[0] = p;
    return dst;
}

static pl_tensor *geglu(pl_graph *g, pl_tensor *gate, pl_tensor *up) {
    pl_tensor *dst = pl_graph_new(g, PL_F32, gate->n_dims, gate->ne, "geglu");
    pl_graph_add_node(g, PL_OP_GEGLU, dst, 2, (pl_tensor *[]){gate, up});
    return dst;
}

static pl_tensor *gemma3_build(pl_model *m, pl_graph *g, const pl_graph_inputs *in) {
    const pl_hparams *hp = &m->hp;
    const int64_t E = hp->n_embd, H = hp->n_head, G = hp->n_head_kv, D = hp->head_dim;
    const int64_t n = in->ids->ne[0];
    const float eps = hp->rms_eps;

    pl_tensor *x = pl_op_get_rows(g, W(m->globals[PL_GW_TOK_EMBD]), in->ids);             /* [E, n] */
    x = unary(g, PL_OP_SCALE, x, sqrtf((float)E), "inp_scaled");
    for (int64_t l = 0; l < hp->n_layer; l++) {
        const pl_layer_weights *L = &m->layers[l];
        const bool local = gemma3_is_local(l);
        const float base = local ? hp->rope_base_swa : hp->rope_base;
        const float fscale = local ? 1.0f : hp->rope_scale;
        pl_tensor *h = pl_op_rms_norm(g, x, W(L->t[PL_LW_ATTN_NORM]), eps);
        pl_tensor *q = pl_op_matmul(g, W(L->t[PL_LW_Q]), h);                         /* [H*D, n] */
        pl_tensor *k = pl_op_matmul(g, W(L->t[PL_LW_K]), h);                         /* [G*D, n] */
        pl_tensor *v = pl_op_matmul(g, W(L->t[PL_LW_V]), h);                         /* [G*D, n] */
        q = pl_op_rms_norm(g, pl_graph_reshape(g, q, 2, (int64_t[]){D, H * n}), W(L->t[PL_LW_Q_NORM]), eps);
        k = pl_op_rms_norm(g, pl_graph_reshape(g, k, 2, (int64_t[]){D, G * n}), W(L->t[PL_LW_K_NORM]), eps);
        q = pl_op_rope(g, pl_graph_reshape(g, q, 3, (int64_t[]){D, H, n}), in->pos, (int)hp->n_rot, hp->rope_mode,
                       base, fscale);                                        /* [D, H, n] */
        k = pl_op_rope(g, pl_graph_reshape(g, k, 3, (int64_t[]){D, G, n}), in->pos, (int)hp->n_rot, hp->rope_mode,
                       base, fscale);                                        /* [D, G, n] */
        q = unary(g, PL_OP_SCALE, q, hp->attn_scale, "q_scaled");
        pl_tensor *kc = W(&m->k_cache[l]), *vc = W(&m->v_cache[l]);
        pl_op_kv_store_rot(g, pl_graph_reshape(g, k, 2, (int64_t[]){G * D, n}), in->pos, in->seq, kc, m->k_rot,
                           (int)D);
        pl_op_kv_store_rot(g, v, in->pos, in->seq, vc, m->v_rot, (int)D);
        pl_tensor *a = pl_op_attention_rot(g, q, kc, vc, in->pos, in->seq, (int)G, 1.0f, m->k_rot,
                                           m->v_rot);                         /* [H*D, n] */
        if (local) pl_op_attention_window(g, a, (int)hp->n_swa);          /* p - j < n_swa */
        pl_tensor *o = pl_op_matmul(g, W(L->t[PL_LW_O]), a);                         /* [E, n] */
        if (l == hp->n_layer - 1) {
            o = pl_op_get_rows(g, o, in->out_idx);                           /* [E, n_out] */
            x = pl_op_get_rows(g, x, in->out_idx);
        }
        o = pl_op_rms_norm(g, o, W(L->t[G3_ATTN_POST_NORM]), eps);
        x = pl_op_add(g, o, x);
        h = pl_op_rms_norm(g, x, W(L->t[PL_LW_FFN_NORM]), eps);
        pl_tensor *gate = pl_op_matmul(g, W(L->t[PL_LW_FFN_GATE]), h);                /* [F, n] */
        pl_tensor *up = pl_op_matmul(g, W(L->t[PL_LW_FFN_UP]), h);                    /* [F, n] */
        pl_tensor *d = pl_op_matmul(g, W(L->t[PL_LW_FFN_DOWN]), geglu(g, gate, up));  /* [E, n] */
        d = pl_op_rms_norm(g, d, W(L->t[G3_FFN_POST_NORM]), eps);
        x = pl_op_add(g, d, x);
    }
    x = pl_op_rms_norm(g, x, W(m->globals[PL_GW_OUTPUT_NORM]), eps);
    pl_tensor *logits = pl_op_matmul(g, W(m->globals[PL_GW_OUTPUT]), x);                   /* [V, n_out] */
    if (hp->final_softcap > 0) logits = unary(g, PL_OP_SOFTCAP, logits, hp->final_softcap, "logits_capped");
    pl_graph_keep(g, logits);
    return logits;
}

const pl_arch pl_arch_gemma3 = {.name = "gemma3",
                                .summary = "Gemma 3 text (GeGLU, sandwich norms, Q/K RMSNorm, 5 local : 1 global "
                                           "sliding-window layers, two RoPE bases)",
                                .hparams = gemma3_hparams, .tensors = gemma3_tensors, .presets = pl_qwen3_presets,
                                .synth = true, .load = gemma3_load, .build = gemma3_build,
                                .capacity = gemma3_capacity};
