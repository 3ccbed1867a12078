/*
 * The ref backend's kernels for the ops gemma3 needs (normative, scalar; see
 * kernels/abi.h for each definition):
 *  - GEGLU: per element pl_geglu_ggml (kernels/gelu.h), GGML's f16-table GELU
 *    computed directly instead of through a table;
 *  - SCALE: x * s in float, as ggml_scale;
 *  - SOFTCAP: tanhf(x * (1.0f / c)) * c, as llama.cpp's scale, tanh, scale.
 * All operands are indexed through their byte strides.
 */
#include "backends/ref/ref_gemma.h"
#include "kernels/gelu.h"
#include <math.h>

static inline float *row_at(const pl_tensor *t, int64_t i1, int64_t i2, int64_t i3) {
    return (float *)pl_tensor_row(t, i1, i2, i3);
}

pl_status pl_ref_geglu(pl_exec_ctx *ctx, const pl_node *node) {
    (void)ctx;
    const pl_tensor *g = node->src[0], *u = node->src[1], *dst = node->dst;
    for (int64_t i3 = 0; i3 < g->ne[3]; i3++)
        for (int64_t i2 = 0; i2 < g->ne[2]; i2++)
            for (int64_t i1 = 0; i1 < g->ne[1]; i1++) {
                const float *gr = row_at(g, i1, i2, i3), *ur = row_at(u, i1, i2, i3);
                float *yr = row_at(dst, i1, i2, i3);
                for (int64_t i = 0; i < g->ne[0]; i++) yr[i] = pl_geglu_ggml(gr[i], ur[i]);
            }
    return PL_OK;
}

pl_status pl_ref_scale(pl_exec_ctx *ctx, const pl_node *node) {
    (void)ctx;
    const pl_tensor *x = node->src[0], *dst = node->dst;
    const float s = node->fparams[0];
    for (int64_t i3 = 0; i3 < x->ne[3]; i3++)
        for (int64_t i2 = 0; i2 < x->ne[2]; i2++)
            for (int64_t i1 = 0; i1 < x->ne[1]; i1++) {
                const float *xr = row_at(x, i1, i2, i3);
                float *yr = row_at(dst, i1, i2, i3);
                for (int64_t i = 0; i < x->ne[0]; i++) yr[i] = xr[i] * s;
            }
    return PL_OK;
}

pl_status pl_ref_softcap(pl_exec_ctx *ctx, const pl_node *node) {
    (void)ctx;
    const pl_tensor *x = node->src[0], *dst = node->dst;
    const float c = node->fparams[0], inv = 1.0f / c;
    for (int64_t i3 = 0; i3 < x->ne[3]; i3++)
        for (int64_t i2 = 0; i2 < x->ne[2]; i2++)
            for (int64_t i1 = 0; i1 < x->ne[1]; i1++) {
                const float *xr = row_at(x, i1, i2, i3);
                float *yr = row_at(dst, i1, i2, i3);
                for (int64_t i = 0; i < x->ne[0]; i++) yr[i] = tanhf(xr[i] * inv) * c;
            }
    return PL_OK;
}
