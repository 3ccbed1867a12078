/* ATTENTION for the cpu backend: causal grouped-query attention over the KV
 * cache (semantics: kernels/abi.h, ref backend).
 *
 *   q [head_dim, n_head, n_tok] F32 (strided), k/v caches F16 or F32
 *   [n_kv_head*head_dim, n_ctx, n_seq], pos/seq I32 [n_tok],
 *   dst [head_dim*n_head, n_tok] F32.
 *
 * A task is one KV head g and a block of up to TB consecutive tokens: its
 * "query rows" are the n_head/n_kv_head query heads of g for each of those
 * tokens (about 8 rows). All of them are processed against each block of
 * PL_ATT_JBLK cache positions while that block of K (then V) rows sits in L1,
 * so a K/V row is fetched from memory once per task instead of once per
 * query head and token; inside, the SIMD helpers take up to 4 query rows at
 * a time. Per task, two passes: scores S = scale * Q K^T up to the largest
 * position of the block, a stable softmax per query row over its own causal
 * range 0..pos[t] (exp(s - max); positions past pos[t] get weight 0), then
 * O = P V / sum. Tasks are KV-head-major (a thread's consecutive tasks reuse
 * one head slice of the cache from its L2) and go from the last token block
 * backwards (longest first), handed out dynamically.
 *
 * Per-thread scratch (ctx->work): QR score rows of n_ctx floats and QR output
 * rows of head_dim floats, QR = the query rows of a task.
 */
#include <math.h>
#include <stdatomic.h>
#include <string.h>
#include "backends/cpu/cpu_internal.h"
#include "core/cpu_features.h"
#include "core/fp16.h"
#include "core/status.h"
#include "core/threadpool.h"

#define PL_ATT_MAX_R 4     /* query rows per SIMD helper call */
#define PL_ATT_ROWS 8      /* target query rows per task (heads x tokens) */
#define PL_ATT_JBLK 64     /* cache positions per L1 block */

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

/* O[r*hd + d] (+)= sum_j P[r*ldS + j] * v_j[d]; O is zeroed first unless
 * accumulate. */
static void pl_att_values_c(int R, const float *P, int64_t ldS, const char *v, size_t vs, bool f16, int64_t n_kv,
                            int64_t hd, float *O, bool accumulate) {
    if (!accumulate)
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

/* x = exp(x - max(x)); returns the sum (in double, then rounded). */
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
    int64_t tb;          /* tokens per task */
    int64_t n_blocks;    /* token blocks */
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

/* Tokens per task: enough that a task has about PL_ATT_ROWS query rows. */
static int64_t pl_att_tb(int64_t group) { return group >= PL_ATT_ROWS ? 1 : PL_ATT_ROWS / group; }

static void pl_att_scores(const pl_att_job *j, int R, const float *const *q, const char *k, size_t ks,
                          int64_t n, float *S, int64_t ldS) {
#if PL_CPU_HAVE_AVX2_BUILD
    if (j->avx2) { pl_cpu_att_scores_avx2(R, q, k, ks, j->f16, n, j->head_dim, j->scale, S, ldS); return; }
#endif
    pl_att_scores_c(R, q, k, ks, j->f16, n, j->head_dim, j->scale, S, ldS);
}

static float pl_att_softmax(const pl_att_job *j, float *x, int64_t n) {
#if PL_CPU_HAVE_AVX2_BUILD
    if (j->avx2) return pl_cpu_att_softmax_avx2(x, n);
#endif
    return pl_att_softmax_c(x, n);
}

static void pl_att_values(const pl_att_job *j, int R, const float *P, int64_t ldS, const char *v, size_t vs,
                          int64_t n, float *O, bool accumulate) {
#if PL_CPU_HAVE_AVX2_BUILD
    if (j->avx2) { pl_cpu_att_values_avx2(R, P, ldS, v, vs, j->f16, n, j->head_dim, O, accumulate); return; }
#endif
    pl_att_values_c(R, P, ldS, v, vs, j->f16, n, j->head_dim, O, accumulate);
}

/* Query rows at most per run (the stack arrays below). */
#define PL_ATT_RUN_ROWS (PL_ATT_ROWS * 2)

/* Tokens t0..t1-1 (same slot), query heads h0..h1-1 of KV head g's group;
 * (t1 - t0) * (h1 - h0) <= PL_ATT_RUN_ROWS. */
static void pl_att_run_tokens(const pl_att_job *j, int64_t g, int64_t t0, int64_t t1, int64_t h0, int64_t h1,
                              float *S, float *O) {
    const pl_node *node = j->node;
    const pl_tensor *q = node->src[0], *k = node->src[1], *v = node->src[2];
    const int64_t hd = j->head_dim, ldS = j->n_ctx;
    const int32_t sq = pl_att_i32(node->src[4], t0);
    const size_t el = j->f16 ? 2 : 4;
    const char *kbase = (const char *)pl_tensor_row(k, 0, sq, 0) + g * hd * (int64_t)el;
    const char *vbase = (const char *)pl_tensor_row(v, 0, sq, 0) + g * hd * (int64_t)el;
    const float *qr[PL_ATT_RUN_ROWS];
    int64_t n_kv[PL_ATT_RUN_ROWS];
    int n_rows = 0;
    int64_t max_kv = 0;
    for (int64_t t = t0; t < t1; t++) {
        const int64_t nk = (int64_t)pl_att_i32(node->src[3], t) + 1;
        for (int64_t h = h0; h < h1; h++) {
            qr[n_rows] = (const float *)pl_tensor_row(q, g * j->group + h, t, 0);
            n_kv[n_rows++] = nk;
        }
        if (nk > max_kv) max_kv = nk;
    }
    /* scores, one L1 block of K rows at a time */
    for (int64_t jb = 0; jb < max_kv; jb += PL_ATT_JBLK) {
        const int64_t n = max_kv - jb < PL_ATT_JBLK ? max_kv - jb : PL_ATT_JBLK;
        for (int r0 = 0; r0 < n_rows; r0 += PL_ATT_MAX_R) {
            const int R = n_rows - r0 < PL_ATT_MAX_R ? n_rows - r0 : PL_ATT_MAX_R;
            pl_att_scores(j, R, qr + r0, kbase + jb * (int64_t)k->nb[1], k->nb[1], n, S + r0 * ldS + jb, ldS);
        }
    }
    /* causal softmax per query row; weight 0 past its own position */
    float sums[PL_ATT_RUN_ROWS];
    for (int r = 0; r < n_rows; r++) {
        float *sr = S + r * ldS;
        sums[r] = pl_att_softmax(j, sr, n_kv[r]);
        for (int64_t i = n_kv[r]; i < max_kv; i++) sr[i] = 0.0f;
    }
    /* values, one L1 block of V rows at a time */
    for (int64_t jb = 0; jb < max_kv; jb += PL_ATT_JBLK) {
        const int64_t n = max_kv - jb < PL_ATT_JBLK ? max_kv - jb : PL_ATT_JBLK;
        for (int r0 = 0; r0 < n_rows; r0 += PL_ATT_MAX_R) {
            const int R = n_rows - r0 < PL_ATT_MAX_R ? n_rows - r0 : PL_ATT_MAX_R;
            pl_att_values(j, R, S + r0 * ldS + jb, ldS, vbase + jb * (int64_t)v->nb[1], v->nb[1], n, O + r0 * hd,
                          jb > 0);
        }
    }
    const int64_t nh = h1 - h0;
    for (int r = 0; r < n_rows; r++) {
        const int64_t t = t0 + r / nh, h = g * j->group + h0 + r % nh;
        float *o = (float *)pl_tensor_row(node->dst, t, 0, 0) + h * hd;
        const float inv = 1.0f / sums[r];
        for (int64_t d = 0; d < hd; d++) o[d] = O[r * hd + d] * inv;
    }
}

static void pl_att_task_run(const pl_att_job *j, int64_t task, float *S, float *O) {
    /* KV-head-major; token blocks from the last one backwards */
    const int64_t g = task / j->n_blocks, b = j->n_blocks - 1 - task % j->n_blocks;
    const int64_t t_lo = b * j->tb, t_hi = t_lo + j->tb < j->n_tok ? t_lo + j->tb : j->n_tok;
    /* a block may mix slots (batched sequences): one run per slot change */
    for (int64_t t0 = t_lo; t0 < t_hi;) {
        const int32_t sq = pl_att_i32(j->node->src[4], t0);
        int64_t t1 = t0 + 1;
        while (t1 < t_hi && pl_att_i32(j->node->src[4], t1) == sq) t1++;
        if (j->group > PL_ATT_RUN_ROWS) {
            /* very wide groups (then tb = 1): heads in slices of the run size */
            for (int64_t h = 0; h < j->group; h += PL_ATT_RUN_ROWS)
                pl_att_run_tokens(j, g, t0, t1, h, h + PL_ATT_RUN_ROWS < j->group ? h + PL_ATT_RUN_ROWS : j->group, S, O);
        } else {
            pl_att_run_tokens(j, g, t0, t1, 0, j->group, S, O);
        }
        t0 = t1;
    }
}

static void pl_att_task(void *arg, int ith, int nth) {
    pl_att_job *j = arg;
    const int64_t rows = j->tb * j->group;
    float *S = (float *)(j->scratch + (size_t)ith * j->per_thread);
    float *O = S + rows * j->n_ctx;
    for (int64_t id = atomic_fetch_add_explicit(&j->next, 1, memory_order_relaxed); id < j->n_tasks;
         id = atomic_fetch_add_explicit(&j->next, 1, memory_order_relaxed))
        pl_att_task_run(j, id, S, O);
    (void)nth;
}

static size_t pl_att_per_thread(const pl_node *node) {
    const size_t n_ctx = (size_t)node->src[1]->ne[1], hd = (size_t)node->src[0]->ne[0];
    const int n_kv_head = node->iparams[0] > 0 ? node->iparams[0] : 1;
    const int64_t group = node->src[0]->ne[1] / n_kv_head > 0 ? node->src[0]->ne[1] / n_kv_head : 1;
    const size_t rows = (size_t)(pl_att_tb(group) * group);
    return ((rows * (n_ctx + hd)) * sizeof(float) + 63) & ~(size_t)63;
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
    job.tb = pl_att_tb(job.group);
    job.n_blocks = (job.n_tok + job.tb - 1) / job.tb;
    job.n_tasks = job.n_blocks * n_kv_head;
    const int use = nth > 1 && job.n_tasks > 1 ? nth : 1;
    pl_cpu_scratch scratch;
    PL_TRY(pl_cpu_scratch_get(ctx, job.per_thread * (size_t)use, &scratch));
    job.scratch = scratch.ptr;
    atomic_init(&job.next, 0);
    if (use > 1) pl_threadpool_run_elastic(ctx->pool, pl_att_task, &job);
    else pl_att_task(&job, 0, 1);
    pl_cpu_scratch_release(&scratch);
    return PL_OK;
}
