/* The optimized `cpu` backend: multithreaded kernels with AVX2 paths chosen at
 * run time (portable C fallbacks otherwise). This file holds the dispatch
 * table and the execution context; the kernels are in cpu_matmul*.c,
 * cpu_ops*.c and cpu_attention*.c.
 *
 * Table: GET_ROWS and MATMUL for every dtype pl_dequantize_row decodes
 * (generated from PL_DEQUANT_TYPES). MATMUL picks its implementation per
 * weight dtype in pl_cpu_mm_type_get(): the SIMD kernels of cpu_matmul*.c for
 * F32, F16, BF16, Q8_0, Q4_K, Q6_K; the integer kernels of cpu_matmul_iq*.c
 * for the IQ / TQ / q2_K / q3_K / q5_K types; decode-to-F32 for anything
 * else. RMS_NORM / ADD / SWIGLU / ROPE on F32, KV_STORE and ATTENTION for F16
 * and F32 caches.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "backends/cpu/cpu_internal.h"
#include "backends/cpu/cpu_moe.h"
#include "core/cpu_features.h"
#include "core/status.h"
#include "core/threadpool.h"
#include "quant/quant.h"

#define CPU_GET_ROWS_(t, fn) {PL_OP_GET_ROWS, t, pl_cpu_op_get_rows, NULL},
#define CPU_MATMUL_(t, fn) {PL_OP_MATMUL, t, pl_cpu_op_matmul, pl_cpu_work_matmul},
#define CPU_MATMUL_ID_(t, fn) {PL_OP_MATMUL_ID, t, pl_cpu_op_matmul_id, pl_cpu_work_matmul_id},

static const pl_kernel pl_cpu_kernels[] = {
    PL_DEQUANT_TYPES(CPU_GET_ROWS_)
    {PL_OP_RMS_NORM, PL_F32, pl_cpu_op_rms_norm, NULL},
    PL_DEQUANT_TYPES(CPU_MATMUL_)
    {PL_OP_ADD, PL_F32, pl_cpu_op_add, NULL},
    {PL_OP_SWIGLU, PL_F32, pl_cpu_op_swiglu, NULL},
    {PL_OP_ROPE, PL_F32, pl_cpu_op_rope, NULL},
    {PL_OP_KV_STORE, PL_F16, pl_cpu_op_kv_store, NULL},
    {PL_OP_KV_STORE, PL_F32, pl_cpu_op_kv_store, NULL},
    {PL_OP_KV_STORE, PL_Q8_0, pl_cpu_op_kv_store, NULL},
    {PL_OP_KV_STORE, PL_Q4_0, pl_cpu_op_kv_store, NULL},
    {PL_OP_ATTENTION, PL_F16, pl_cpu_op_attention, pl_cpu_work_attention},
    {PL_OP_ATTENTION, PL_F32, pl_cpu_op_attention, pl_cpu_work_attention},
    {PL_OP_ATTENTION, PL_Q8_0, pl_cpu_op_attention, pl_cpu_work_attention},
    {PL_OP_ATTENTION, PL_Q4_0, pl_cpu_op_attention, pl_cpu_work_attention},
    {PL_OP_MOE_TOPK, PL_F32, pl_cpu_op_moe_topk, pl_cpu_work_moe_topk},
    PL_DEQUANT_TYPES(CPU_MATMUL_ID_)
    {PL_OP_MOE_COMBINE, PL_F32, pl_cpu_op_moe_combine, pl_cpu_work_moe_combine},
    {PL_OP_GEGLU, PL_F32, pl_cpu_op_geglu, NULL},
    {PL_OP_SCALE, PL_F32, pl_cpu_op_scale, NULL},
    {PL_OP_SOFTCAP, PL_F32, pl_cpu_op_softcap, NULL},
};

extern const pl_backend pl_backend_cpu;

static pl_status pl_cpu_ctx_create(int n_threads, pl_exec_ctx **out) {
    if (!out) return pl_errorf(PL_ERR_INVALID_ARG, "cpu: out is NULL");
    *out = NULL;
    if (n_threads <= 0) n_threads = pl_cpu_count();
    pl_cpu_ctx *c = calloc(1, sizeof *c);
    if (!c) return pl_errorf(PL_ERR_NO_MEMORY, "cpu: cannot allocate a context");
    c->magic = PL_CPU_CTX_MAGIC;
    pl_exec_ctx *ctx = &c->base;
    pl_status st = pl_threadpool_create(n_threads, &ctx->pool);
    if (st != PL_OK) {
        free(c);
        return pl_error_prefix(st, "cpu");
    }
    ctx->backend = &pl_backend_cpu;
    ctx->n_threads = n_threads;
    (void)pl_cpu_features_get();   /* detect now, not inside the first kernel */
    *out = ctx;
    return PL_OK;
}

/* The work buffer belongs to whoever set it (the planner), not the context. */
static void pl_cpu_ctx_free(pl_exec_ctx *ctx) {
    if (!ctx) return;
    pl_threadpool_free(ctx->pool);
    pl_cpu_packed_free((pl_cpu_ctx *)ctx);
    free(ctx);
}

static bool pl_cpu_probe(char *detail, size_t cap) {
    if (detail && cap) {
        const pl_cpu_features *f = pl_cpu_features_get();
        snprintf(detail, cap, "%s%s", f->description, pl_cpu_has_avx2() ? "" : " (portable kernels)");
    }
    return true;
}

const pl_backend pl_backend_cpu = {
    .name = "cpu",
    .summary = "optimized multithreaded CPU kernels (AVX2 when available, portable C otherwise)",
    .kernels = pl_cpu_kernels,
    .n_kernels = sizeof pl_cpu_kernels / sizeof pl_cpu_kernels[0],
    .ctx_create = pl_cpu_ctx_create,
    .ctx_free = pl_cpu_ctx_free,
    .awaits = NULL,
    .probe = pl_cpu_probe,
    .weight_prepare_size = pl_cpu_weight_prepare_size,
    .weight_prepare = pl_cpu_weight_prepare,
    .graph_execute = pl_cpu_graph_execute,
};
