/* A cpu backend execution context with its work memory, and running one
 * node on a backend: shared by the cpu kernel tests. */
#ifndef PL_TEST_CPU_CTX_H
#define PL_TEST_CPU_CTX_H
#include <stdlib.h>
#include "kernels/abi.h"

extern const pl_backend pl_backend_cpu;

static inline pl_status run_on(const pl_backend *b, pl_exec_ctx *ctx, const pl_node *n) {
    const pl_kernel *k = pl_backend_lookup(b, n->op, pl_node_key_dtype(n));
    if (!k) return PL_ERR_UNSUPPORTED;
    return k->run(ctx, n);
}

/* n on the ref backend, in a one-thread context of its own. */
static inline pl_status run_ref(const pl_node *n) {
    const pl_backend *ref = pl_backend_find("ref");
    pl_exec_ctx *ctx = NULL;
    pl_status st = ref->ctx_create(1, &ctx);
    if (st != PL_OK) return st;
    st = run_on(ref, ctx, n);
    ref->ctx_free(ctx);
    return st;
}

static inline pl_exec_ctx *cpu_ctx(int nth, size_t work) {
    pl_exec_ctx *ctx = NULL;
    if (pl_backend_cpu.ctx_create(nth, &ctx) != PL_OK) return NULL;
    ctx->work_size = work;
    ctx->work = work ? aligned_alloc(64, (work + 63) & ~(size_t)63) : NULL;
    return ctx;
}

static inline void cpu_ctx_free(pl_exec_ctx *ctx) {
    if (!ctx) return;
    free(ctx->work);
    ctx->work = NULL;
    pl_backend_cpu.ctx_free(ctx);
}

#endif
