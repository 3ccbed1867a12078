/* ATTENTION for the cpu backend: causal grouped-query attention over the KV
 * cache (semantics: kernels/abi.h, ref backend).
 *
 *   q [head_dim, n_head, n_tok] F32 (strided), k/v caches F16 or F32
 *   [n_kv_head*head_dim, n_ctx, n_seq], pos/seq I32 [n_tok],
 *   dst [head_dim*n_head, n_tok] F32.
 *
 * A task is one (token t, KV head g): the n_head/n_kv_head query heads that
 * share g are processed together, up to 4 at a time, so every K and V row is
 * loaded (and converted from F16) once for all of them. Per task, two passes:
 * scores S = scale * Q K^T over positions 0..pos[t], a stable softmax
 * (exp(s - max)), then O = P V / sum. Tasks are handed out dynamically,
 * longest (latest position) first, because prefill tokens differ in cost.
 *
 * Per-thread scratch (ctx->work): 4 score rows of n_ctx floats + 4 output
 * rows of head_dim floats.
 */
#include <math.h>
#include <stdatomic.h>
#include <string.h>
#include "backends/cpu/cpu_internal.h"
#include "core/cpu_features.h"
#include "core/fp16.h"
#include "core/status.h"
#include "core/threadpool.h"

#define PL_ATT_MAX_R 4   /* query heads per pass */

/* ---- helpers: portable ------------------------------------------------------*/

static inline float pl_cache_at(const char *row, int64_t i, bool f16) {
    return f16 ? pl_f16_to_f32(((const uint16_t *)row)[i]) : ((const float *)row)[i];
}

/* S[r*ldS + j] = scale * dot(q_r, k_j) for r < R, j < n_kv. */
static void pl_att_scores_c(int R, const float *const *q, const char *k, size_t ks, bool f16, int64_t n_kv,
                            int64_t hd, float scale, float *S, int64_t ldS) {
    for (int64_t j = 0; j < n_kv; j++) {
        const char *kr = k + j * ks;
        for (int r = 0; r < R; r++) {
            float acc[8] = {0};
            int64_t d = 0;
            for (; d + 8 <= hd; d += 8)
                for (int l = 0; l < 8; l++) acc[l] += q[r][d + l] * pl_cache_at(kr, d + l, f16);
            float s = ((acc[0] + acc[4]) + (acc[1] + acc[5])) + ((acc[2] + acc[6]) + (acc[3] + acc[7]));
            for (; d < hd; d++) s += q[r][d] * pl_cache_at(kr, d, f16);
            S[r * ldS + j] = scale * s;
        }
    }
}

/* O[r*hd + d] = sum_j P[r*ldS + j] * v_j[d]. */
static void pl_att_values_c(int R, const float *P, int64_t ldS, const char *v, size_t vs, bool f16, int64_t n_kv,
                            int64_t hd, float *O) {
    for (int r = 0; r < R; r++)
        for (int64_t d = 0; d < hd; d++) O[r * hd + d] = 0.0f;
    for (int64_t j = 0; j < n_kv; j++) {
        const char *vr = v + j * vs;
        for (int r = 0; r < R; r++) {
            const float p = P[r * ldS + j];
            for (int64_t d = 0; d < hd; d++) O[r * hd + d] += p * pl_cache_at(vr, d, f16);
        }
    }
}

/* x = exp(x - max(x)); returns the sum. */
static float pl_att_softmax_c(float *x, int64_t n) {
    float mx = -INFINITY;
    for (int64_t i = 0; i < n; i++) mx = x[i] > mx ? x[i] : mx;
    double sum = 0.0;
    for (int64_t i = 0; i < n; i++) {
        x[i] = expf(x[i] - mx);
        sum += x[i];
    }
    return (float)sum;
}

/* ---- driver -------------------------------------------------------------------*/

typedef struct pl_att_job {
    const pl_node *node;
    int64_t head_dim, n_head, n_tok, n_kv_head, group, n_ctx;
    float scale;
    bool f16, avx2;
    char *scratch;
    size_t per_thread;
    int64_t n_tasks;
    atomic_llong next;
} pl_att_job;

static inline int32_t pl_att_i32(const pl_tensor *t, int64_t i) {
    int32_t v;
    memcpy(&v, (const char *)t->data + i * (int64_t)t->nb[0], sizeof v);
    return v;
}

static void pl_att_task_run(const pl_att_job *j, int64_t task, float *S, float *O) {
    const pl_node *node = j->node;
    const pl_tensor *q = node->src[0], *k = node->src[1], *v = node->src[2];
    /* tasks are numbered from the last token backwards (longest first) */
    const int64_t t = j->n_tok - 1 - task / j->n_kv_head, g = task % j->n_kv_head;
    const int32_t p = pl_att_i32(node->src[3], t), sq = pl_att_i32(node->src[4], t);
    const int64_t n_kv = (int64_t)p + 1, hd = j->head_dim;
    const size_t el = j->f16 ? 2 : 4;
    const char *kbase = (const char *)pl_tensor_row(k, 0, sq, 0) + g * hd * (int64_t)el;
    const char *vbase = (const char *)pl_tensor_row(v, 0, sq, 0) + g * hd * (int64_t)el;
    float *out_row = (float *)pl_tensor_row(node->dst, t, 0, 0);
    for (int64_t h0 = 0; h0 < j->group; h0 += PL_ATT_MAX_R) {
        const int R = (int)(j->group - h0 < PL_ATT_MAX_R ? j->group - h0 : PL_ATT_MAX_R);
        const float *qr[PL_ATT_MAX_R];
        for (int r = 0; r < R; r++) qr[r] = (const float *)pl_tensor_row(q, g * j->group + h0 + r, t, 0);
        float sums[PL_ATT_MAX_R];
#if PL_CPU_HAVE_AVX2_BUILD
        if (j->avx2) {
            pl_cpu_att_scores_avx2(R, qr, kbase, k->nb[1], j->f16, n_kv, hd, j->scale, S, j->n_ctx);
            for (int r = 0; r < R; r++) sums[r] = pl_cpu_att_softmax_avx2(S + r * j->n_ctx, n_kv);
            pl_cpu_att_values_avx2(R, S, j->n_ctx, vbase, v->nb[1], j->f16, n_kv, hd, O);
        } else
#endif
        {
            pl_att_scores_c(R, qr, kbase, k->nb[1], j->f16, n_kv, hd, j->scale, S, j->n_ctx);
            for (int r = 0; r < R; r++) sums[r] = pl_att_softmax_c(S + r * j->n_ctx, n_kv);
            pl_att_values_c(R, S, j->n_ctx, vbase, v->nb[1], j->f16, n_kv, hd, O);
        }
        for (int r = 0; r < R; r++) {
            float *o = out_row + (g * j->group + h0 + r) * hd;
            const float inv = 1.0f / sums[r];
            for (int64_t d = 0; d < hd; d++) o[d] = O[r * hd + d] * inv;
        }
    }
}

static void pl_att_task(void *arg, int ith, int nth) {
    pl_att_job *j = arg;
    float *S = (float *)(j->scratch + (size_t)ith * j->per_thread);
    float *O = S + PL_ATT_MAX_R * j->n_ctx;
    for (int64_t id = ith; id < j->n_tasks; id = atomic_fetch_add_explicit(&j->next, 1, memory_order_relaxed))
        pl_att_task_run(j, id, S, O);
    (void)nth;
}

static size_t pl_att_per_thread(const pl_node *node) {
    const size_t n_ctx = (size_t)node->src[1]->ne[1], hd = (size_t)node->src[0]->ne[0];
    return ((PL_ATT_MAX_R * (n_ctx + hd)) * sizeof(float) + 63) & ~(size_t)63;
}

size_t pl_cpu_work_attention(const pl_node *node, int n_threads) {
    if (!node->src[0] || !node->src[1]) return 0;
    return pl_att_per_thread(node) * (size_t)(n_threads < 1 ? 1 : n_threads) + 64;
}

pl_status pl_cpu_op_attention(pl_exec_ctx *ctx, const pl_node *node) {
    const pl_tensor *q = node->src[0], *k = node->src[1], *v = node->src[2];
    const pl_tensor *pos = node->src[3], *seq = node->src[4];
    if ((k->dtype != PL_F16 && k->dtype != PL_F32) || v->dtype != k->dtype)
        return pl_errorf(PL_ERR_UNSUPPORTED, "attention (cpu): no %s/%s cache", pl_dtype_name(k->dtype),
                         pl_dtype_name(v->dtype));
    const int n_kv_head = node->iparams[0];
    if (n_kv_head < 1 || q->ne[1] % n_kv_head || k->ne[0] != q->ne[0] * n_kv_head)
        return pl_errorf(PL_ERR_INVALID_ARG, "attention: n_kv_head = %d does not fit the shapes", n_kv_head);
    for (int64_t t = 0; t < q->ne[2]; t++) {
        const int32_t p = pl_att_i32(pos, t), sq = pl_att_i32(seq, t);
        if (p < 0 || p >= k->ne[1] || sq < 0 || sq >= k->ne[2])
            return pl_errorf(PL_ERR_INVALID_ARG, "attention: token %lld has pos %d / seq %d outside the cache's %lld x %lld",
                             (long long)t, p, sq, (long long)k->ne[1], (long long)k->ne[2]);
    }
    const int nth = ctx && ctx->pool ? pl_threadpool_size(ctx->pool) : 1;
    pl_att_job job;
    memset(&job, 0, sizeof job);
    job.node = node;
    job.head_dim = q->ne[0];
    job.n_head = q->ne[1];
    job.n_tok = q->ne[2];
    job.n_kv_head = n_kv_head;
    job.group = q->ne[1] / n_kv_head;
    job.n_ctx = k->ne[1];
    job.scale = node->fparams[0];
    job.f16 = k->dtype == PL_F16;
    job.avx2 = PL_CPU_HAVE_AVX2_BUILD && pl_cpu_has_avx2();
    job.per_thread = pl_att_per_thread(node);
    job.n_tasks = job.n_tok * n_kv_head;
    const int use = nth > 1 && job.n_tasks > 1 ? nth : 1;
    pl_cpu_scratch scratch;
    PL_TRY(pl_cpu_scratch_get(ctx, job.per_thread * (size_t)use, &scratch));
    job.scratch = scratch.ptr;
    atomic_init(&job.next, use);
    if (use > 1) pl_threadpool_run(ctx->pool, pl_att_task, &job);
    else pl_att_task(&job, 0, 1);
    pl_cpu_scratch_release(&scratch);
    return PL_OK;
}
