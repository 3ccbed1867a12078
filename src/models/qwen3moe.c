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

static const char *const qwen3moe_keys[] = {
    "{arch}.context_length", "{arch}.embedding_length", "{arch}.block_count",
    "{arch}.feed_forward_length", "{arch}.attention.head_count",
    "{arch}.attention.head_count_kv", "{arch}.attention.key_length",
    "{arch}.attention.value_length", "{arch}.attention.layer_norm_rms_epsilon",
    "{arch}.rope.freq_base", "{arch}.rope.dimension_count", "{arch}.rope.scaling.factor",
    "{arch}.expert_count", "{arch}.expert_used_count", "{arch}.expert_feed_forward_length",
    "{arch}.expert_weights_scale", NULL};

/* An expert op this backend must run; refused at load, not mid-forward. */
static pl_status need_kernel(pl_model *m, pl_op op, pl_dtype key, const char *tensor) {
    if (pl_backend_supports(m->backend, op, key)) return PL_OK;
    return pl_errorf(PL_ERR_UNSUPPORTED, "%s: backend '%s' has no %s kernel for %s (tensor '%s'), which qwen3moe needs",
                     m->file_name, m->backend->name, pl_op_name(op), pl_dtype_name(key), tensor);
}

static pl_status qwen3moe_load(pl_model *m) {
    PL_TRY(pl_dense_load_ex(m, true, PL_DENSE_BIAS_NONE, 2, false));
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
    const int64_t E = hp->n_embd, X = hp->n_expert, Fx = hp->n_ff_exp;
    if (pl_gguf_find_tensor(m->gguf, "blk.0.ffn_gate_shexp.weight"))
        return pl_errorf(PL_ERR_UNSUPPORTED, "%s: blk.0.ffn_gate_shexp.weight: a shared expert is not qwen3moe",
                         m->file_name);
    for (int64_t l = 0; l < hp->n_layer; l++) {
        pl_layer_weights *L = &m->layers[l];
        const int li = (int)l;
        /* the expert count first, with the key named (bind's message gives two dims) */
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
        PL_TRY(pl_model_bind(m, &L->ffn_gate_inp, true, 0, 2, (int64_t[]){E, X}, "blk.%d.ffn_gate_inp.weight", li));
        PL_TRY(pl_model_bind(m, &L->ffn_gate_exps, true, 0, 3, (int64_t[]){E, Fx, X}, "blk.%d.ffn_gate_exps.weight", li));
        PL_TRY(pl_model_bind(m, &L->ffn_up_exps, true, 0, 3, (int64_t[]){E, Fx, X}, "blk.%d.ffn_up_exps.weight", li));
        PL_TRY(pl_model_bind(m, &L->ffn_down_exps, true, 0, 3, (int64_t[]){Fx, E, X}, "blk.%d.ffn_down_exps.weight", li));
        pl_tensor *const exps[3] = {L->ffn_gate_exps, L->ffn_up_exps, L->ffn_down_exps};
        static const char *const names[3] = {"ffn_gate_exps", "ffn_up_exps", "ffn_down_exps"};
        for (int i = 0; i < 3; i++) {
            snprintf(key, sizeof key, "blk.%d.%s.weight", li, names[i]);
            PL_TRY(need_kernel(m, PL_OP_MATMUL_ID, exps[i]->dtype, key));
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
    pl_tensor *logits = pl_op_matmul(g, W(L->ffn_gate_inp), h);          /* [X, n] */
    pl_tensor *ids = pl_graph_new(g, PL_I32, 2, (int64_t[]){k, n}, "moe_ids");
    pl_node *nd = pl_graph_add_node(g, PL_OP_MOE_TOPK, ids, 1, (pl_tensor *[]){logits});
    if (nd) nd->iparams[0] = (int32_t)k;
    pl_tensor *hx = pl_graph_reshape(g, h, 3, (int64_t[]){E, 1, n});    /* one row shared by the k slots */
    pl_tensor *gate = pl_graph_new(g, PL_F32, 3, (int64_t[]){Fx, k, n}, "moe_gate");
    pl_graph_add_node(g, PL_OP_MATMUL_ID, gate, 3, (pl_tensor *[]){W(L->ffn_gate_exps), hx, ids});
    pl_tensor *up = pl_graph_new(g, PL_F32, 3, (int64_t[]){Fx, k, n}, "moe_up");
    pl_graph_add_node(g, PL_OP_MATMUL_ID, up, 3, (pl_tensor *[]){W(L->ffn_up_exps), hx, ids});
    pl_tensor *act = pl_op_swiglu(g, gate, up);                           /* [Fx, k, n] */
    pl_tensor *y = pl_graph_new(g, PL_F32, 3, (int64_t[]){E, k, n}, "moe_down");
    pl_graph_add_node(g, PL_OP_MATMUL_ID, y, 3, (pl_tensor *[]){W(L->ffn_down_exps), act, ids});
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

const pl_arch pl_arch_qwen3moe = {"qwen3moe",
                                  "Qwen3-MoE (qwen3 attention; top-k softmax router, norm_topk_prob, no shared expert)",
                                  qwen3moe_keys, qwen3moe_load, qwen3moe_build, qwen3moe_capacity};
