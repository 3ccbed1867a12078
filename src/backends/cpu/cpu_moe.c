/*
 * Mixture-of-experts kernels of the cpu backend (kernels/abi.h:
 * PL_OP_MOE_TOPK, PL_OP_MATMUL_ID, PL_OP_MOE_COMBINE).
 *
 * matmul_id groups the (token, slot) pairs of a batch by expert and runs one
 * ordinary cpu matmul per expert used (pl_cpu_op_matmul) on the rows routed
 * to it, gathered into a contiguous [K, m_e] block: a prefill streams each
 * expert's weights once, whatever the number of tokens that chose it, and
 * every weight type and prepared (repacked) layout of the dense matmul works
 * here unchanged. The weight load prepares each expert of a 3-D tensor as
 * its own 2-D weight (cpu_repack.c), keyed by the expert's data pointer, so
 * the per-expert view below finds its packed copy.
 *
 * The router (softmax, top-k, weights) is kernels/moe_router.h, shared with
 * ref: both backends pick the same experts from the same logits. The
 * weighted sum is in float, slot by slot, as llama.cpp's mul + add chain.
 */
#include "backends/cpu/cpu_moe.h"
#include "backends/cpu/cpu_internal.h"
#include "kernels/moe_router.h"
#include "core/status.h"
#include <stdint.h>
#include <string.h>

#define ALIGN64(x) (((x) + 63) & ~(size_t)63)

/* ---- moe_topk ------------------------------------------------------------- */
size_t pl_cpu_work_moe_topk(const pl_node *node, int n_threads) {
    (void)n_threads;
    return (size_t)node->src[0]->ne[0] * sizeof(float) + 64;
}

pl_status pl_cpu_op_moe_topk(pl_exec_ctx *ctx, const pl_node *node) {
    const pl_tensor *lg = node->src[0], *dst = node->dst;
    const int64_t n_exp = lg->ne[0];
    pl_cpu_scratch s;
    PL_TRY(pl_cpu_scratch_get(ctx, (size_t)n_exp * sizeof(float), &s));
    float *p = s.ptr;
    for (int64_t t = 0; t < lg->ne[1]; t++) {
        pl_moe_softmax((const float *)pl_tensor_row(lg, t, 0, 0), n_exp, p);
        pl_moe_topk(p, n_exp, node->iparams[0], (int32_t *)pl_tensor_row(dst, t, 0, 0));
    }
    pl_cpu_scratch_release(&s);
    return PL_OK;
}

/* ---- matmul_id -------------------------------------------------------------
 * Work buffer: pair lists (P = k * n_tok int32 + n_expert + 1 offsets), the
 * gathered activations [K, P] and outputs [N, P] (room for every pair going
 * to one expert), then the inner matmul's own work at the end. */
typedef struct mmid_layout {
    size_t lists, xg, yg, inner, total;
} mmid_layout;

static mmid_layout mmid_plan(const pl_node *node, int n_threads) {
    const pl_tensor *W = node->src[0], *ids = node->src[2];
    const int64_t K = W->ne[0], N = W->ne[1], P = ids->ne[0] * ids->ne[1];
    mmid_layout L;
    L.lists = 0;
    L.xg = ALIGN64((size_t)P * sizeof(int32_t) + (size_t)(W->ne[2] + 1) * sizeof(int64_t));
    L.yg = L.xg + ALIGN64((size_t)K * (size_t)P * sizeof(float));
    L.inner = L.yg + ALIGN64((size_t)N * (size_t)P * sizeof(float));
    /* the inner matmul on the largest group: expert 0's view, P rows */
    pl_tensor wv, xt, yt;
    pl_cpu_expert_view(W, 0, &wv);
    pl_tensor_init(&xt, PL_F32, 2, (int64_t[]){K, P}, NULL);
    pl_tensor_init(&yt, PL_F32, 2, (int64_t[]){N, P}, NULL);
    pl_node inner = {.op = PL_OP_MATMUL, .src = {&wv, &xt}, .dst = &yt};
    L.total = L.inner + pl_cpu_work_matmul(&inner, n_threads) + 64;
    return L;
}

size_t pl_cpu_work_matmul_id(const pl_node *node, int n_threads) { return mmid_plan(node, n_threads).total + 64; }

/* Decode (one token, x shared by its k slots): the experts' prepared
 * matmuls run in groups of up to PL_CPU_MM_GROUP_MAX on the one activation
 * row, converted once per group, one pool job per group instead of one per
 * expert. Returns false (nothing written) when this does not apply: some
 * expert without a prepared copy, or an expert chosen twice. The group
 * kernel computes each matrix as the single-matmul path does, so the result
 * is the per-expert path's bit for bit (test_cpu_backend checks). */
static bool mmid_decode_grouped(pl_exec_ctx *ctx, const pl_node *node, pl_status *st) {
    const pl_tensor *W = node->src[0], *x = node->src[1], *ids = node->src[2], *dst = node->dst;
    const int64_t K = W->ne[0], N = W->ne[1], k = ids->ne[0];
    const int32_t *id = ids->data;
    if (ids->ne[1] != 1 || x->ne[1] != 1 || k > 64) return false;
    pl_tensor wv[64], yv[64], xv;
    const pl_cpu_packed *pk[64];
    for (int64_t j = 0; j < k; j++) {
        for (int64_t q = 0; q < j; q++)
            if (id[q] == id[j]) return false;
        pl_cpu_expert_view(W, id[j], &wv[j]);
        pk[j] = pl_cpu_packed_find(ctx, &wv[j]);
        if (!pk[j]) return false;
    }
    pl_tensor_init(&xv, PL_F32, 2, (int64_t[]){K, 1}, pl_tensor_row(x, 0, 0, 0));
    pl_node nodes[64];
    const pl_node *np[PL_CPU_MM_GROUP_MAX];
    const pl_cpu_packed *pp[PL_CPU_MM_GROUP_MAX];
    *st = PL_OK;
    for (int64_t j0 = 0; j0 < k && *st == PL_OK; j0 += PL_CPU_MM_GROUP_MAX) {
        const int n = (int)(k - j0 < PL_CPU_MM_GROUP_MAX ? k - j0 : PL_CPU_MM_GROUP_MAX);
        for (int i = 0; i < n; i++) {
            const int64_t j = j0 + i;
            pl_tensor_init(&yv[j], PL_F32, 2, (int64_t[]){N, 1}, pl_tensor_row(dst, j, 0, 0));
            nodes[j] = (pl_node){.op = PL_OP_MATMUL, .src = {&wv[j], &xv}, .dst = &yv[j]};
            np[i] = &nodes[j];
            pp[i] = pk[j];
        }
        *st = pl_cpu_matmul_packed_group(ctx, np, pp, n, NULL);
    }
    return true;
}

pl_status pl_cpu_op_matmul_id(pl_exec_ctx *ctx, const pl_node *node) {
    const pl_tensor *W = node->src[0], *x = node->src[1], *ids = node->src[2], *dst = node->dst;
    const int64_t K = W->ne[0], N = W->ne[1], X = W->ne[2], k = ids->ne[0], nt = ids->ne[1], P = k * nt;
    const int64_t n_x = x->ne[1];
    if (x->nb[0] != sizeof(float) || !pl_tensor_is_contiguous(dst) || !pl_tensor_is_contiguous(ids))
        return pl_errorf(PL_ERR_UNSUPPORTED, "matmul_id (cpu): dst and ids must be contiguous and x rows dense");
    PL_TRY(pl_moe_check_ids("matmul_id", ids->data, ids->ne[0] * ids->ne[1], X));
    pl_status gst;
    if (mmid_decode_grouped(ctx, node, &gst)) return gst;
    const mmid_layout L = mmid_plan(node, ctx->n_threads);
    pl_cpu_scratch s;
    PL_TRY(pl_cpu_scratch_get(ctx, L.total, &s));
    char *base = s.ptr;
    /* the offsets first: an odd pair count would misalign them after the pairs */
    int64_t *off = (int64_t *)(base + L.lists);
    int32_t *pairs = (int32_t *)(off + X + 1);
    float *xg = (float *)(base + L.xg), *yg = (float *)(base + L.yg);

    /* counting sort of the pairs by expert, in token order within one */
    const int32_t *id = ids->data;
    memset(off, 0, (size_t)(X + 1) * sizeof *off);
    for (int64_t p = 0; p < P; p++) off[id[p] + 1]++;
    for (int64_t e = 0; e < X; e++) off[e + 1] += off[e];
    for (int64_t p = 0; p < P; p++) pairs[off[id[p]]++] = (int32_t)p;
    for (int64_t e = X; e > 0; e--) off[e] = off[e - 1];
    off[0] = 0;

    /* the inner matmul gets the rest of the work buffer */
    void *work0 = ctx->work;
    const size_t work_size0 = ctx->work_size;
    ctx->work = base + L.inner;
    ctx->work_size = L.total - L.inner;
    pl_status st = PL_OK;
    for (int64_t e = 0; e < X && st == PL_OK; e++) {
        const int64_t m = off[e + 1] - off[e];
        if (!m) continue;
        const int32_t *pe = pairs + off[e];
        for (int64_t r = 0; r < m; r++) {
            const int64_t t = pe[r] / k, j = pe[r] % k;
            memcpy(xg + r * K, pl_tensor_row(x, j % n_x, t, 0), (size_t)K * sizeof(float));
        }
        pl_tensor wv, xt, yt;
        pl_cpu_expert_view(W, e, &wv);
        pl_tensor_init(&xt, PL_F32, 2, (int64_t[]){K, m}, xg);
        pl_tensor_init(&yt, PL_F32, 2, (int64_t[]){N, m}, yg);
        const pl_node inner = {.op = PL_OP_MATMUL, .src = {&wv, &xt}, .dst = &yt};
        st = pl_cpu_op_matmul(ctx, &inner);
        if (st != PL_OK) break;
        for (int64_t r = 0; r < m; r++) {
            const int64_t t = pe[r] / k, j = pe[r] % k;
            memcpy(pl_tensor_row(dst, j, t, 0), yg + r * N, (size_t)N * sizeof(float));
        }
    }
    ctx->work = work0;
    ctx->work_size = work_size0;
    pl_cpu_scratch_release(&s);
    return st;
}

/* ---- moe_combine ---------------------------------------------------------- */
size_t pl_cpu_work_moe_combine(const pl_node *node, int n_threads) {
    (void)n_threads;
    return ((size_t)node->src[1]->ne[0] + (size_t)node->src[2]->ne[0]) * sizeof(float) + 64;
}

pl_status pl_cpu_op_moe_combine(pl_exec_ctx *ctx, const pl_node *node) {
    const pl_tensor *y = node->src[0], *lg = node->src[1], *ids = node->src[2], *dst = node->dst;
    const int64_t E = y->ne[0], n_exp = lg->ne[0], k = ids->ne[0], nt = ids->ne[1];
    PL_TRY(pl_moe_check_ids("moe_combine", ids->data, ids->ne[0] * ids->ne[1], n_exp));
    pl_cpu_scratch s;
    PL_TRY(pl_cpu_scratch_get(ctx, ((size_t)n_exp + (size_t)k) * sizeof(float), &s));
    float *p = s.ptr, *w = p + n_exp;
    for (int64_t t = 0; t < nt; t++) {
        pl_moe_softmax((const float *)pl_tensor_row(lg, t, 0, 0), n_exp, p);
        pl_moe_weights(p, (const int32_t *)ids->data + t * k, (int)k, node->iparams[0], w);
        float *out = (float *)pl_tensor_row(dst, t, 0, 0);
        const float *y0 = (const float *)pl_tensor_row(y, 0, t, 0);
        for (int64_t i = 0; i < E; i++) out[i] = y0[i] * w[0];
        for (int64_t j = 1; j < k; j++) {
            const float *yj = (const float *)pl_tensor_row(y, j, t, 0);
            const float wj = w[j];
            for (int64_t i = 0; i < E; i++) out[i] += yj[i] * wj;
        }
    }
    pl_cpu_scratch_release(&s);
    return PL_OK;
}
