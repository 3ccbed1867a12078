/*
 * The router arithmetic the MoE ops share (kernels/abi.h: PL_OP_MOE_TOPK,
 * PL_OP_MOE_COMBINE), written once so ref and cpu agree bit for bit on which
 * experts are chosen: a different choice would not be a rounding difference.
 *
 * Probabilities follow GGML's soft_max in float: m = max(x),
 * e_i = expf(x_i - m), sum of the e_i accumulated in double,
 * p_i = e_i * (float)(1 / sum).
 */
#ifndef PL_KERNELS_MOE_ROUTER_H
#define PL_KERNELS_MOE_ROUTER_H
#include <math.h>
#include <stdbool.h>
#include <stdint.h>
#include "core/status.h"

/* Every expert id of an I32 [k, n_tok] list (n = k * n_tok, contiguous) in
 * 0..n_expert-1, or PL_ERR_INVALID_ARG naming op, the id and its place. */
static inline pl_status pl_moe_check_ids(const char *op, const int32_t *id, int64_t n, int64_t n_expert) {
    for (int64_t i = 0; i < n; i++)
        if (id[i] < 0 || id[i] >= n_expert)
            return pl_errorf(PL_ERR_INVALID_ARG, "%s: expert id %d at %lld is outside 0..%lld", op, id[i], (long long)i,
                             (long long)n_expert - 1);
    return PL_OK;
}

/* llama.cpp clamps the sum of the k weights below at this before dividing. */
#define PL_MOE_NORM_MIN 6.103515625e-5f

/* p[0..n) = softmax(x[0..n)) as GGML computes it. */
static inline void pl_moe_softmax(const float *x, int64_t n, float *p) {
    float m = -INFINITY;
    for (int64_t i = 0; i < n; i++) m = x[i] > m ? x[i] : m;
    double sum = 0.0;
    for (int64_t i = 0; i < n; i++) {
        p[i] = expf(x[i] - m);
        sum += (double)p[i];
    }
    const float scale = (float)(1.0 / sum);
    for (int64_t i = 0; i < n; i++) p[i] *= scale;
}

/* ids[0..k) = indices of the k largest p, descending, as llama.cpp's
 * ggml_argsort_top_k (argsort descending, first k); on equal values the
 * lower index comes first (what its std::sort gives for n <= 16; for more
 * experts its tie order is unspecified). A NaN never wins over a number.
 * O(n k), k small. */
static inline void pl_moe_topk(const float *p, int64_t n, int k, int32_t *ids) {
    for (int j = 0; j < k; j++) {
        int64_t best = -1;
        for (int64_t i = 0; i < n; i++) {
            bool taken = false;
            for (int q = 0; q < j && !taken; q++) taken = ids[q] == i;
            if (taken) continue;
            if (best < 0 || p[i] > p[best] || (p[best] != p[best] && p[i] == p[i])) best = i;
        }
        ids[j] = (int32_t)best;
    }
}

/* w[0..k) = the weights of the chosen experts: p[ids[j]], divided by their
 * sum (clamped below at PL_MOE_NORM_MIN) when norm is set, in float as
 * llama.cpp's get_rows / sum_rows / clamp / div. */
static inline void pl_moe_weights(const float *p, const int32_t *ids, int k, int norm, float *w) {
    double s = 0.0;
    for (int j = 0; j < k; j++) {
        w[j] = p[ids[j]];
        s += (double)w[j];
    }
    if (!norm) return;
    float sf = (float)s;
    if (!(sf >= PL_MOE_NORM_MIN)) sf = PL_MOE_NORM_MIN;
    for (int j = 0; j < k; j++) w[j] /= sf;
}

#endif
