/*
 * Reference kernels of the mixture-of-experts ops (kernels/abi.h:
 * PL_OP_MOE_TOPK, PL_OP_MATMUL_ID, PL_OP_MOE_COMBINE), with ref's precision
 * choices: weight rows decoded to f32 as GGML does and dot products in
 * double; the weighted sum of the experts in double. The router's softmax,
 * top-k and weights are kernels/moe_router.h, shared with the cpu backend so
 * both choose the same experts.
 */
#include "backends/ref/ref_moe.h"
#include "kernels/moe_router.h"
#include "core/status.h"
#include "quant/quant.h"
#include <stdlib.h>
#include <string.h>

static inline const float *row_f32(const pl_tensor *t, int64_t i1, int64_t i2) {
    return (const float *)pl_tensor_row(t, i1, i2, 0);
}

/* ---- moe_topk: logits F32 [n_expert, n_tok] -> ids I32 [k, n_tok].
 * Scratch: n_expert probabilities. */
size_t pl_ref_moe_topk_work(const pl_node *node, int n_threads) {
    (void)n_threads;
    return (size_t)node->src[0]->ne[0] * sizeof(float);
}

pl_status pl_ref_moe_topk(pl_exec_ctx *ctx, const pl_node *node) {
    const pl_tensor *lg = node->src[0], *dst = node->dst;
    const int64_t n_exp = lg->ne[0];
    const int k = node->iparams[0];
    float *p = ctx && ctx->work && ctx->work_size >= pl_ref_moe_topk_work(node, 1) ? ctx->work : NULL;
    float *own = p ? NULL : malloc((size_t)n_exp * sizeof(float));
    if (!p && !own) return pl_errorf(PL_ERR_NO_MEMORY, "moe_topk: out of memory");
    if (!p) p = own;
    for (int64_t t = 0; t < lg->ne[1]; t++) {
        pl_moe_softmax(row_f32(lg, t, 0), n_exp, p);
        pl_moe_topk(p, n_exp, k, (int32_t *)pl_tensor_row(dst, t, 0, 0));
    }
    free(own);
    return PL_OK;
}

/* ---- matmul_id: W [K, N, n_expert]; x F32 [K, n_x, n_tok]; ids [k, n_tok];
 * dst F32 [N, k, n_tok]. Expert by expert, so each weight row is decoded
 * once per call. Scratch: one decoded row (K floats). */
size_t pl_ref_matmul_id_work(const pl_node *node, int n_threads) {
    (void)n_threads;
    return (size_t)node->src[0]->ne[0] * sizeof(float);
}

pl_status pl_ref_matmul_id(pl_exec_ctx *ctx, const pl_node *node) {
    const pl_tensor *W = node->src[0], *x = node->src[1], *ids = node->src[2], *dst = node->dst;
    const int64_t K = W->ne[0], N = W->ne[1], n_exp = W->ne[2], k = ids->ne[0], nt = ids->ne[1];
    const int64_t n_x = x->ne[1];
    if (!pl_can_dequantize(W->dtype))
        return pl_errorf(PL_ERR_UNSUPPORTED, "matmul_id: ref cannot decode %s", pl_dtype_name(W->dtype));
    PL_TRY(pl_moe_check_ids("matmul_id", ids->data, ids->ne[0] * ids->ne[1], n_exp));
    const int32_t *id = ids->data;
    float *w = ctx && ctx->work && ctx->work_size >= pl_ref_matmul_id_work(node, 1) ? ctx->work : NULL;
    float *own = w ? NULL : malloc((size_t)K * sizeof(float));
    if (!w && !own) return pl_errorf(PL_ERR_NO_MEMORY, "matmul_id: out of memory");
    if (!w) w = own;
    for (int64_t e = 0; e < n_exp; e++) {
        bool used = false;
        for (int64_t i = 0; i < k * nt && !used; i++) used = id[i] == e;
        if (!used) continue;
        for (int64_t n = 0; n < N; n++) {
            pl_dequantize_row(W->dtype, pl_tensor_row(W, n, e, 0), w, K);
            for (int64_t t = 0; t < nt; t++)
                for (int64_t j = 0; j < k; j++) {
                    if (id[t * k + j] != e) continue;
                    const float *xr = row_f32(x, j % n_x, t);
                    double acc = 0.0;
                    for (int64_t i = 0; i < K; i++) acc += (double)w[i] * (double)xr[i];
                    ((float *)pl_tensor_row(dst, j, t, 0))[n] = (float)acc;
                }
        }
    }
    free(own);
    return PL_OK;
}

/* ---- moe_combine: y F32 [E, k, n_tok]; logits [n_expert, n_tok];
 * ids [k, n_tok]; dst F32 [E, n_tok]. Scratch: n_expert probabilities, then
 * k weights. */
size_t pl_ref_moe_combine_work(const pl_node *node, int n_threads) {
    (void)n_threads;
    return ((size_t)node->src[1]->ne[0] + (size_t)node->src[2]->ne[0]) * sizeof(float);
}

pl_status pl_ref_moe_combine(pl_exec_ctx *ctx, const pl_node *node) {
    const pl_tensor *y = node->src[0], *lg = node->src[1], *ids = node->src[2], *dst = node->dst;
    const int64_t E = y->ne[0], n_exp = lg->ne[0], k = ids->ne[0], nt = ids->ne[1];
    PL_TRY(pl_moe_check_ids("moe_combine", ids->data, ids->ne[0] * ids->ne[1], n_exp));
    const size_t ws = pl_ref_moe_combine_work(node, 1);
    float *p = ctx && ctx->work && ctx->work_size >= ws ? ctx->work : NULL;
    float *own = p ? NULL : malloc(ws);
    if (!p && !own) return pl_errorf(PL_ERR_NO_MEMORY, "moe_combine: out of memory");
    if (!p) p = own;
    float *w = p + n_exp;
    for (int64_t t = 0; t < nt; t++) {
        const int32_t *id = (const int32_t *)ids->data + t * k;
        pl_moe_softmax(row_f32(lg, t, 0), n_exp, p);
        pl_moe_weights(p, id, (int)k, node->iparams[0], w);
        float *out = (float *)pl_tensor_row(dst, t, 0, 0);
        for (int64_t i = 0; i < E; i++) {
            double acc = 0.0;
            for (int64_t j = 0; j < k; j++) acc += (double)w[j] * (double)row_f32(y, j, t)[i];
            out[i] = (float)acc;
        }
    }
    free(own);
    return PL_OK;
}
