/*
 * pl_model_set_observer (pocketllm.h): the executor's per-node hook
 * (pl_exec_ctx.on_node, kernels/abi.h) translated into the public
 * pl_node_info, so that tools (imatrix collection) see activations without
 * the engine's internal types.
 */
#include "pocketllm.h"
#include "core/status.h"
#include "engine/model.h"
#include <string.h>

static void trampoline(void *user, const pl_node *nd) {
    const pl_model *m = user;
    pl_node_info info;
    memset(&info, 0, sizeof info);
    info.op = pl_op_name(nd->op);
    info.name = nd->dst ? nd->dst->name : "";
    const pl_tensor *shape = nd->dst;
    if (nd->op == PL_OP_MATMUL && nd->src[0] && nd->src[1]) {
        /* src0: weight [K, N]; src1: f32 input [K, M] (rows strided by nb[1]) */
        info.weight = nd->src[0]->name;
        shape = nd->src[1];
        if (shape->dtype == PL_F32) info.input = shape->data;
    } else if (nd->op == PL_OP_MATMUL_ID && nd->src[0] && nd->src[1] && nd->src[2]) {
        /* src0: weights [K, N, n_expert]; src1: f32 input [K, n_x, n_tok];
         * src2: I32 ids [k, n_tok] (kernels/abi.h) */
        const pl_tensor *ids = nd->src[2];
        info.weight = nd->src[0]->name;
        info.n_expert = nd->src[0]->ne[2];
        shape = nd->src[1];
        if (shape->dtype == PL_F32 && ids->dtype == PL_I32) {
            info.input = shape->data;
            info.ids = ids->data;
            info.ids_ne[0] = ids->ne[0];
            info.ids_ne[1] = ids->ne[1];
            info.ids_nb[0] = ids->nb[0];
            info.ids_nb[1] = ids->nb[1];
        }
    }
    if (shape)
        for (int d = 0; d < 4; d++) {
            info.ne[d] = shape->ne[d];
            info.nb[d] = shape->nb[d];
        }
    m->observer(m->observer_user, &info);
}

pl_status pl_model_set_observer(pl_model *m, pl_node_observer fn, void *user) {
    if (!m || !m->ctx) return pl_errorf(PL_ERR_INVALID_ARG, "pl_model_set_observer: the model has no executor (vocab-only?)");
    m->observer = fn;
    m->observer_user = user;
    m->ctx->on_node = fn ? trampoline : NULL;
    m->ctx->on_node_user = fn ? m : NULL;
    return PL_OK;
}
