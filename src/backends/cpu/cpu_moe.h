/* The cpu backend's mixture-of-experts kernels (cpu_moe.c), listed in
 * cpu_backend.c's dispatch table. */
#ifndef PL_BACKENDS_CPU_MOE_H
#define PL_BACKENDS_CPU_MOE_H
#include "kernels/abi.h"

pl_status pl_cpu_op_moe_topk(pl_exec_ctx *ctx, const pl_node *node);
size_t pl_cpu_work_moe_topk(const pl_node *node, int n_threads);
pl_status pl_cpu_op_matmul_id(pl_exec_ctx *ctx, const pl_node *node);
size_t pl_cpu_work_matmul_id(const pl_node *node, int n_threads);
pl_status pl_cpu_op_moe_combine(pl_exec_ctx *ctx, const pl_node *node);
size_t pl_cpu_work_moe_combine(const pl_node *node, int n_threads);

#endif
