/*
 * Qwen3-MoE (Qwen3-30B-A3B, Qwen3-235B-A22B): the qwen3 decoder (per-head
 * Q/K RMSNorm, GQA, NeoX RoPE; models/qwen.c) with each layer's FFN replaced
 * by a mixture of experts, as llama.cpp's LLM_ARCH_QWEN3MOE:
 *
 *   logits = ffn_gate_inp . h                       [X, n]
 *   ids    = top-k of softmax(logits)               [k, n]   (moe_topk)
 *   g, u   = ffn_{gate,up}_exps[ids] . h            [Fx, k, n] (matmul_id, h shared by the k slots)
 *   y      = ffn_down_exps[ids] . swiglu(g, u)      [E, k, n]
 *   out    = sum_j w_j y_j, w = the k probabilities renormalised to sum 1
 *            (norm_topk_prob; llama.cpp always renormalises for qwen3moe)
 *
 * No shared expert. Shapes (E = n_embd, X = expert_count, k =
 * expert_used_count, Fx = expert_feed_forward_length):
 *   ffn_gate_inp [E, X]   ffn_gate_exps, ffn_up_exps [E, Fx, X]   ffn_down_exps [Fx, E, X]
 * Load refuses, naming the key or tensor, counts that disagree with each
 * other (0, used > count) or with the tensors (any wrong expert shape).
 */
#include "engine/model.h"
#include "models/dense.h"
#include "core/status.h"
#include "gguf/gguf.h"
#include <stdio.h>

static const pl_hparam_decl qwen3moe_hparams[] = {
    PL_DENSE_HPARAMS,
    PL_HK_READ("{arch}.rope.scaling.factor"),
    PL_HK_INT("{arch}.expert_count", n_expert),
    PL_HK_INT("{arch}.expert_used_count", n_expert_used),
    PL_HK_INT("{arch}.expert_feed_forward_length", n_ff_exp),
    {"{arch}.expert_weights_scale", PL_HK_F32, PL_HK_NOT_WRITTEN, false},
    PL_HPARAMS_END};

/* Slots of the expert FFN, after the dense decoder's. */
enum { MOE_GATE_INP = PL_LW_DENSE_COUNT, MOE_GATE_EXPS, MOE_UP_EXPS, MOE_DOWN_EXPS };

/* The router stays F32 (the converter keeps ffn_gate_inp in f32 and
 * llama-quantize never quantizes it); experts [E, Fx, X] / [Fx, E, X]. */
static const pl_tensor_decl qwen3moe_tensors[] = {
    PL_DENSE_T_EMBD,
    PL_DENSE_T_ATTN,
    PL_DENSE_T_QK_NORM,
    PL_DENSE_T_FFN_NORM,
    {"blk.%d.ffn_gate_inp.weight", PL_TR_ROUTER, PL_TD_LAYER, MOE_GATE_INP, 2, {PL_DIM_E, PL_DIM_X}},
    {"blk.%d.ffn_gate_exps.weight", PL_TR_MATRIX, PL_TD_LAYER, MOE_GATE_EXPS, 3, {PL_DIM_E, PL_DIM_FX, PL_DIM_X}},
    {"blk.%d.ffn_up_exps.weight", PL_TR_MATRIX, PL_TD_LAYER, MOE_UP_EXPS, 3, {PL_DIM_E, PL_DIM_FX, PL_DIM_X}},
    {"blk.%d.ffn_down_exps.weight", PL_TR_MATRIX, PL_TD_LAYER, MOE_DOWN_EXPS, 3, {PL_DIM_FX, PL_DIM_E, PL_DIM_X}},
    PL_DENSE_T_OUTPUT,
    PL_TENSORS_END};

static const pl_arch_preset qwen3moe_presets[] = {
    {"30b-a3b", 2048, 48, 32, 4, 128, 6144, false, 128, 8, 768},   /* Qwen3-30B-A3B */
    {NULL, 0, 0, 0, 0, 0, 0, false, 0, 0, 0},
};

/* An expert op this backend must run; refused at load, not mid-forward. */
static pl_status need_kernel(pl_model *m, pl_op op, pl_dtype key, const char *tensor) {
    if (pl_backend_supports(m->backend, op, key)) return PL_OK;
    return pl_errorf(PL_ERR_UNSUPPORTED, "%s: backend '%s' has no %s kernel for %s (tensor '%s'), which qwen3moe needs",
                     m->file_name, m->backend->name, pl_op_name(op), pl_dtype_name(key), tensor);
}

static pl_status qwen3moe_load(pl_model *m) {
    PL_TRY(pl_dense_read_hparams(m, 2, false));
    pl_hparams *hp = &m->hp;
    char key[160];
    PL_TRY(pl_model_hp_int(m, "expert_count", true, 0, &hp->n_expert));
    PL_TRY(pl_model_hp_int(m, "expert_used_count", true, 0, &hp->n_expert_used));
    /* as llama.cpp: without expert_feed_forward_length an expert is
     * feed_forward_length / expert_used_count wide */
    PL_TRY(pl_model_hp_int(m, "expert_feed_forward_length", false, 0, &hp->n_ff_exp));
    if (!hp->n_ff_exp && hp->n_expert_used > 0) {
        int64_t n_ff = 0;
        PL_TRY(pl_model_hp_int(m, "feed_forward_length", false, 0, &n_ff));
        hp->n_ff_exp = n_ff / hp->n_expert_used;
        if (!hp->n_ff_exp)
            return pl_errorf(PL_ERR_FORMAT, "%s: missing hyperparameter '%s.expert_feed_forward_length' (and no "
                             "feed_forward_length to derive it from)", m->file_name, m->arch_name);
    }
    /* llama.cpp multiplies the expert weights by this when it is not 0 or 1;
     * no qwen3moe release sets it */
    float w_scale = 0.0f;
    PL_TRY(pl_model_hp_float(m, "expert_weights_scale", false, 0.0f, &w_scale));
    if (w_scale != 0.0f && w_scale != 1.0f)
        return pl_errorf(PL_ERR_UNSUPPORTED, "%s: %s.expert_weights_scale = %g is not supported (0 or 1 are)",
                         m->file_name, m->arch_name, (double)w_scale);
    if (hp->n_expert < 1 || hp->n_expert > 4096) {
        snprintf(key, sizeof key, "%s.expert_count", m->arch_name);
        return pl_errorf(PL_ERR_FORMAT, "%s: %s = %lld (must be 1..4096)", m->file_name, key, (long long)hp->n_expert);
    }
    if (hp->n_expert_used < 1 || hp->n_expert_used > hp->n_expert) {
        snprintf(key, sizeof key, "%s.expert_used_count", m->arch_name);
        return pl_errorf(PL_ERR_FORMAT, "%s: %s = %lld, but it must be 1..expert_count (%lld)", m->file_name, key,
                         (long long)hp->n_expert_used, (long long)hp->n_expert);
    }
    if (hp->n_ff_exp < 1 || hp->n_ff_exp > (1 << 22)) {
        snprintf(key, sizeof key, "%s.expert_feed_forward_length", m->arch_name);
        return pl_errorf(PL_ERR_FORMAT, "%s: %s = %lld", m->file_name, key, (long long)hp->n_ff_exp);
    }
    const int64_t X = hp->n_expert;
    if (pl_gguf_find_tensor(m->gguf, "blk.0.ffn_gate_shexp.weight"))
        return pl_errorf(PL_ERR_UNSUPPORTED, "%s: blk.0.ffn_gate_shexp.weight: a shared expert is not qwen3moe",
                         m->file_name);
    /* the expert count first, with the key named (bind's message gives two dims) */
    for (int64_t l = 0; l < hp->n_layer; l++) {
        const int li = (int)l;
        static const char *const all[4] = {"ffn_gate_inp", "ffn_gate_exps", "ffn_up_exps", "ffn_down_exps"};
        for (int i = 0; i < 4; i++) {
            char tn[96];
            snprintf(tn, sizeof tn, "blk.%d.%s.weight", li, all[i]);
            const pl_gguf_tensor *gt = pl_gguf_find_tensor(m->gguf, tn);
            const int64_t have = !gt ? X : i == 0 ? gt->ne[1] : gt->ne[2];
            if (have != X) {
                snprintf(key, sizeof key, "%s.expert_count", m->arch_name);
                return pl_errorf(PL_ERR_FORMAT, "%s: tensor '%s' holds %lld experts, but %s = %lld", m->file_name, tn,
                                 (long long)have, key, (long long)X);
            }
        }
    }
    PL_TRY(pl_arch_bind_tensors(m, qwen3moe_tensors));
    for (int64_t l = 0; l < hp->n_layer; l++) {
        static const char *const names[3] = {"ffn_gate_exps", "ffn_up_exps", "ffn_down_exps"};
        for (int i = 0; i < 3; i++) {
            snprintf(key, sizeof key, "blk.%d.%s.weight", (int)l, names[i]);
            PL_TRY(need_kernel(m, PL_OP_MATMUL_ID, m->layers[l].t[MOE_GATE_EXPS + i]->dtype, key));
        }
    }
    PL_TRY(need_kernel(m, PL_OP_MOE_TOPK, PL_F32, "blk.0.ffn_gate_inp.weight"));
    PL_TRY(need_kernel(m, PL_OP_MOE_COMBINE, PL_F32, "blk.0.ffn_down_exps.weight"));
    return PL_OK;
}

#define W(t) pl_graph_external(g, (t))

/* The expert FFN of layer l: h [E, n] -> [E, n] (see the top of the file). */
static pl_tensor *moe_ffn(pl_model *m, pl_graph *g, int64_t l, pl_tensor *h) {
    const pl_layer_weights *L = &m->layers[l];
    const pl_hparams *hp = &m->hp;
    const int64_t E = hp->n_embd, Fx = hp->n_ff_exp, k = hp->n_expert_used, n = h->ne[1];
    pl_tensor *logits = pl_op_matmul(g, W(L->t[MOE_GATE_INP]), h);          /* [X, n] */
    pl_tensor *ids = pl_graph_new(g, PL_I32, 2, (int64_t[]){k, n}, "moe_ids");
    pl_node *nd = pl_graph_add_node(g, PL_OP_MOE_TOPK, ids, 1, (pl_tensor *[]){logits});
    if (nd) nd->iparams[0] = (int32_t)k;
    pl_tensor *hx = pl_graph_reshape(g, h, 3, (int64_t[]){E, 1, n});    /* one row shared by the k slots */
    pl_tensor *gate = pl_graph_new(g, PL_F32, 3, (int64_t[]){Fx, k, n}, "moe_gate");
    pl_graph_add_node(g, PL_OP_MATMUL_ID, gate, 3, (pl_tensor *[]){W(L->t[MOE_GATE_EXPS]), hx, ids});
    pl_tensor *up = pl_graph_new(g, PL_F32, 3, (int64_t[]){Fx, k, n}, "moe_up");
    pl_graph_add_node(g, PL_OP_MATMUL_ID, up, 3, (pl_tensor *[]){W(L->t[MOE_UP_EXPS]), hx, ids});
    pl_tensor *act = pl_op_swiglu(g, gate, up);                           /* [Fx, k, n] */
    pl_tensor *y = pl_graph_new(g, PL_F32, 3, (int64_t[]){E, k, n}, "moe_down");
    pl_graph_add_node(g, PL_OP_MATMUL_ID, y, 3, (pl_tensor *[]){W(L->t[MOE_DOWN_EXPS]), act, ids});
    pl_tensor *out = pl_graph_new(g, PL_F32, 2, (int64_t[]){E, n}, "moe_out");
    nd = pl_graph_add_node(g, PL_OP_MOE_COMBINE, out, 3, (pl_tensor *[]){y, logits, ids});
    if (nd) nd->iparams[0] = 1;   /* norm_topk_prob */
    return out;
}

static pl_tensor *qwen3moe_build(pl_model *m, pl_graph *g, const pl_graph_inputs *in) {
    return pl_dense_build_ffn(m, g, in, moe_ffn);
}

static void qwen3moe_capacity(const pl_model *m, int *n_tensors, int *n_nodes) {
    pl_arch_qwen_capacity(m, n_tensors, n_nodes);
    *n_tensors += (int)m->hp.n_layer * 16;
    *n_nodes += (int)m->hp.n_layer * 8;
}

const pl_arch pl_arch_qwen3moe = {
    .name = "qwen3moe",
    .summary = "Qwen3-MoE (qwen3 attention; top-k softmax router, norm_topk_prob, no shared expert)",
    .hparams = qwen3moe_hparams, .tensors = qwen3moe_tensors, .presets = qwen3moe_presets, .synth = true,
    .load = qwen3moe_load, .build = qwen3moe_build, .capacity = qwen3moe_capacity};
