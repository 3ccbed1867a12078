/* The cpu backend's graph executor (pl_backend.graph_execute): the nodes in
 * order, as the generic per-node loop runs them, except for two fusions of
 * adjacent nodes that save activation conversions and pool synchronizations
 * without changing any result:
 *   - consecutive MATMULs that read the same activations with prepared
 *     weights of one activation format (q/k/v; gate/up) run as one group:
 *     the activations are converted once and all matrices' chunks go to the
 *     pool as one job;
 *   - a gate/up pair followed by the SWIGLU of their outputs also computes
 *     the SwiGLU in the same job, chunk by chunk, while the chunk's gate and
 *     up values are in cache (the gate and up outputs are still written).
 * Every node's output is written as the per-node loop writes it, bit for
 * bit (the fused kernels are the same kernels).
 */
#include <string.h>
#include "backends/cpu/cpu_internal.h"
#include "core/cpu_features.h"
#include "core/status.h"
#include "graph/graph.h"

static bool pl_same_view(const pl_tensor *a, const pl_tensor *b) {
    if (a->data != b->data || a->dtype != b->dtype) return false;
    for (int i = 0; i < PL_MAX_DIMS; i++)
        if (a->ne[i] != b->ne[i] || a->nb[i] != b->nb[i]) return false;
    return true;
}

static bool pl_overlap(const pl_tensor *a, const pl_tensor *b) {
    const char *a0 = a->data, *b0 = b->data;
    const char *a1 = a0 + pl_tensor_nbytes(a), *b1 = b0 + pl_tensor_nbytes(b);
    return a0 < b1 && b0 < a1;
}

/* The activation format a prepared kind needs (k-quants share one). */
static int pl_act_format(pl_cpu_pack_kind k) {
    return k == PL_PACK_F16_X16 ? 2 : k == PL_PACK_Q40_X16 || k == PL_PACK_Q50_X16 ? 3
         : k == PL_PACK_Q41_X16 || k == PL_PACK_Q51_X16 ? 4 : 1;
}

/* Tries the fusions at node i; returns the number of nodes it ran (0: none). */
static int pl_try_group(pl_exec_ctx *ctx, const pl_graph *g, int i, pl_status *st) {
    const pl_node *nd = &g->nodes[i];
    if (nd->op != PL_OP_MATMUL || !nd->src[0] || !nd->src[1] || !nd->dst) return 0;
    const pl_cpu_packed *pk0 = pl_cpu_packed_find(ctx, nd->src[0]);
    if (!pk0 || !pl_tensor_is_contiguous(nd->dst)) return 0;
    const pl_node *nodes[PL_CPU_MM_GROUP_MAX] = {nd};
    const pl_cpu_packed *pks[PL_CPU_MM_GROUP_MAX] = {pk0};
    int n = 1;
    while (n < PL_CPU_MM_GROUP_MAX && i + n < g->n_nodes) {
        const pl_node *m = &g->nodes[i + n];
        if (m->op != PL_OP_MATMUL || !m->src[0] || !m->src[1] || !m->dst) break;
        if (!pl_same_view(m->src[1], nd->src[1]) || !pl_tensor_is_contiguous(m->dst)) break;
        const pl_cpu_packed *pk = pl_cpu_packed_find(ctx, m->src[0]);
        if (!pk || pl_act_format(pk->kind) != pl_act_format(pk0->kind) || pk->K != pk0->K) break;
        /* none of the group's outputs may be read (or overwritten) by the group */
        bool clash = pl_overlap(m->dst, nd->src[1]);
        for (int k = 0; k < n && !clash; k++) clash = pl_overlap(m->dst, nodes[k]->dst);
        if (clash) break;
        nodes[n] = m;
        pks[n++] = pk;
    }
    if (pl_overlap(nd->dst, nd->src[1])) return 0;
    const pl_node *sw = NULL;
    if (n == 2 && i + 2 < g->n_nodes) {
        const pl_node *s = &g->nodes[i + 2];
        if (s->op == PL_OP_SWIGLU && s->src[0] && s->src[1] && s->dst && pl_same_view(s->src[0], nodes[0]->dst) &&
            pl_same_view(s->src[1], nodes[1]->dst) && pl_tensor_is_contiguous(s->dst) &&
            s->dst->dtype == PL_F32 && s->dst->ne[0] == nodes[0]->dst->ne[0] &&
            pl_tensor_nrows(s->dst) == pl_tensor_nrows(nodes[0]->dst) && pks[0]->kind == pks[1]->kind &&
            pks[0]->N == pks[1]->N && !pl_overlap(s->dst, nodes[0]->dst) && !pl_overlap(s->dst, nodes[1]->dst) &&
            !pl_overlap(s->dst, nd->src[1]) && pl_cpu_has_avx2())
            sw = s;
    }
    if (n == 1) return 0;   /* the plain kernel does exactly this */
    *st = pl_cpu_matmul_packed_group(ctx, nodes, pks, n, sw);
    return n + (sw ? 1 : 0);
}

pl_status pl_cpu_graph_execute(pl_exec_ctx *ctx, const pl_graph *g) {
    const pl_backend *b = ctx->backend;
    static int fuse = -1;
    if (fuse < 0) fuse = pl_cpu_switch("PL_CPU_FUSE");
    for (int i = 0; i < g->n_nodes;) {
        pl_status st = PL_OK;
        const int used = fuse ? pl_try_group(ctx, g, i, &st) : 0;
        if (st != PL_OK) return st;
        if (used > 0) {
            i += used;
            continue;
        }
        const pl_node *nd = &g->nodes[i];
        const pl_kernel *k = pl_backend_lookup(b, nd->op, pl_node_key_dtype(nd));
        if (!k)
            return pl_errorf(PL_ERR_UNSUPPORTED, "backend '%s' has no %s kernel for %s", b->name, pl_op_name(nd->op),
                             pl_dtype_name(pl_node_key_dtype(nd)));
        if (k->work_size && k->work_size(nd, ctx->n_threads) > ctx->work_size)
            return pl_errorf(PL_ERR_INTERNAL, "%s needs more work memory than planned", pl_op_name(nd->op));
        st = k->run(ctx, nd);
        if (st != PL_OK) return st;
        i++;
    }
    return PL_OK;
}
