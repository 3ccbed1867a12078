/* The ref backend's mixture-of-experts kernels (ref_moe.c), listed in
 * ref_backend.c's dispatch table. */
#ifndef PL_BACKENDS_REF_MOE_H
#define PL_BACKENDS_REF_MOE_H
#include "kernels/abi.h"

pl_status pl_ref_moe_topk(pl_exec_ctx *ctx, const pl_node *node);
size_t pl_ref_moe_topk_work(const pl_node *node, int n_threads);
pl_status pl_ref_matmul_id(pl_exec_ctx *ctx, const pl_node *node);
size_t pl_ref_matmul_id_work(const pl_node *node, int n_threads);
pl_status pl_ref_moe_combine(pl_exec_ctx *ctx, const pl_node *node);
size_t pl_ref_moe_combine_work(const pl_node *node, int n_threads);

#endif
