/*
 * The cpu backend's kernels for the ops gemma3 needs: GEGLU, SCALE, SOFTCAP
 * (definitions in kernels/abi.h; tested against ref in tests/test_ops.c).
 *
 * GEGLU reads GELU from a 64K-entry f16 table, built once per process from
 * kernels/gelu.h exactly as GGML builds its ggml_table_gelu_f16, so it gives
 * ref's values bit for bit at a table lookup per element. Rows are split
 * over the pool's threads when the op is large enough.
 */
#include "backends/cpu/cpu_internal.h"
#include "core/threadpool.h"
#include "kernels/gelu.h"
#include <math.h>
#include <pthread.h>

#define PL_GEMMA_PAR_MIN_ELEMS 32768

static pl_f16 pl_gelu_table[1 << 16];
static pthread_once_t pl_gelu_table_once = PTHREAD_ONCE_INIT;

static void pl_gelu_table_init(void) {
    for (uint32_t i = 0; i < (1u << 16); i++) pl_gelu_table[i] = pl_gelu_f16_entry((pl_f16)i);
}

typedef void (*pl_gemma_rows_fn)(const pl_node *node, int64_t r0, int64_t r1);

typedef struct pl_gemma_job {
    const pl_node *node;
    int64_t n_rows;
    pl_gemma_rows_fn fn;
} pl_gemma_job;

static void pl_gemma_task(void *arg, int ith, int nth) {
    const pl_gemma_job *j = arg;
    int64_t lo, hi;
    pl_cpu_split(j->n_rows, ith, nth, &lo, &hi);
    if (lo < hi) j->fn(j->node, lo, hi);
}

static void pl_gemma_run(pl_exec_ctx *ctx, const pl_node *node, pl_gemma_rows_fn fn) {
    const pl_tensor *x = node->src[0];
    const int64_t n_rows = pl_tensor_nrows(x);
    if (ctx && ctx->pool && pl_threadpool_size(ctx->pool) > 1 && n_rows > 1 &&
        n_rows * x->ne[0] >= PL_GEMMA_PAR_MIN_ELEMS) {
        pl_gemma_job j = {node, n_rows, fn};
        pl_threadpool_run(ctx->pool, pl_gemma_task, &j);
    } else {
        fn(node, 0, n_rows);
    }
}

static void pl_geglu_rows(const pl_node *node, int64_t r0, int64_t r1) {
    const pl_tensor *g = node->src[0], *u = node->src[1], *dst = node->dst;
    const int64_t n = g->ne[0];
    for (int64_t r = r0; r < r1; r++) {
        const float *gr = (const float *)pl_cpu_row(g, r), *ur = (const float *)pl_cpu_row(u, r);
        float *yr = (float *)pl_cpu_row(dst, r);
        for (int64_t i = 0; i < n; i++) {
            const float x = gr[i];
            if (x <= -10.0f) yr[i] = 0.0f;
            else if (x >= 10.0f) yr[i] = x * ur[i];
            else yr[i] = pl_f16_to_f32(pl_gelu_table[pl_f32_to_f16(x)]) * ur[i];
        }
    }
}

pl_status pl_cpu_op_geglu(pl_exec_ctx *ctx, const pl_node *node) {
    pthread_once(&pl_gelu_table_once, pl_gelu_table_init);
    pl_gemma_run(ctx, node, pl_geglu_rows);
    return PL_OK;
}

static void pl_scale_rows(const pl_node *node, int64_t r0, int64_t r1) {
    const pl_tensor *x = node->src[0], *dst = node->dst;
    const int64_t n = x->ne[0];
    const float s = node->fparams[0];
    for (int64_t r = r0; r < r1; r++) {
        const float *xr = (const float *)pl_cpu_row(x, r);
        float *yr = (float *)pl_cpu_row(dst, r);
        for (int64_t i = 0; i < n; i++) yr[i] = xr[i] * s;
    }
}

pl_status pl_cpu_op_scale(pl_exec_ctx *ctx, const pl_node *node) {
    pl_gemma_run(ctx, node, pl_scale_rows);
    return PL_OK;
}

static void pl_softcap_rows(const pl_node *node, int64_t r0, int64_t r1) {
    const pl_tensor *x = node->src[0], *dst = node->dst;
    const int64_t n = x->ne[0];
    const float c = node->fparams[0], inv = 1.0f / c;
    for (int64_t r = r0; r < r1; r++) {
        const float *xr = (const float *)pl_cpu_row(x, r);
        float *yr = (float *)pl_cpu_row(dst, r);
        for (int64_t i = 0; i < n; i++) yr[i] = tanhf(xr[i] * inv) * c;
    }
}

pl_status pl_cpu_op_softcap(pl_exec_ctx *ctx, const pl_node *node) {
    pl_gemma_run(ctx, node, pl_softcap_rows);
    return PL_OK;
}
