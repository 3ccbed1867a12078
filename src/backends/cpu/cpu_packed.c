/* MATMUL with prepared weights (see cpu_repack.c for the layouts and
 * cpu_packed_avx2.c for the kernels), one matmul or a group of matmuls that
 * read the same activations (q/k/v, gate/up: cpu_graph.c), optionally with
 * the SwiGLU of a gate/up pair folded in.
 *
 * The activation rows are converted once (q8_K plus its sums for the
 * k-quants, f16-rounded floats for f16), then the work is cut into chunks of
 * (panels x activation rows) of one of the matrices:
 *   - decode (one activation row): contiguous runs of panels, about 4 per
 *     thread and matrix, so each thread streams long sequential stretches;
 *   - prefill: activation blocks small enough to stay in L2 while the panels
 *     of a chunk are swept over them; chunks go activation-block-major.
 * All chunks of all matrices of a group are handed out from one shared
 * counter in one elastic pool job (a thread that starts late finds the work
 * done and is not waited for): one synchronization per group.
 */
#include <stdatomic.h>
#include <string.h>
#include "backends/cpu/cpu_internal.h"
#include "core/cpu_features.h"
#include "core/status.h"
#include "core/threadpool.h"

_Static_assert(PL_KQX_ROWS == PL_F16X_ROWS, "16-row panels for every prepared kind (the SwiGLU segments)");

static size_t pl_packed_act_row(pl_cpu_pack_kind kind, int64_t K) {
    size_t sz = kind == PL_PACK_F16_X16 ? (size_t)K * sizeof(float)
                : kind == PL_PACK_Q40_X16 || kind == PL_PACK_Q50_X16 ? (size_t)(K / QK8_0) * sizeof(pl_q80x)
                : kind == PL_PACK_Q41_X16 || kind == PL_PACK_Q51_X16 ? (size_t)(K / QK8_1) * sizeof(pl_q81x)
                : (size_t)(K / QK_K) * sizeof(pl_q8kx);
    return (sz + 63) & ~(size_t)63;
}

size_t pl_cpu_work_matmul_packed(const pl_node *node, pl_cpu_pack_kind kind) {
    const pl_tensor *x = node->src[1];
    return pl_packed_act_row(kind, x->ne[0]) * (size_t)pl_tensor_nrows(x) + 64;
}

typedef struct pl_pk_mat {
    const pl_cpu_packed *pk;
    float *dst;
    int64_t N, n_panels, panels_per_chunk, n_panel_chunks, first_chunk;
} pl_pk_mat;

typedef struct pl_pk_job {
    pl_pk_mat mat[PL_CPU_MM_GROUP_MAX];
    int n_mat;
    float *swiglu;          /* non-NULL: mat[0] = gate, mat[1] = up, chunks of mat[0] only */
    const pl_tensor *x;
    pl_cpu_pack_kind act_kind;
    int64_t K, M;
    char *abuf;
    size_t as;
    int64_t acts_per_chunk, n_chunks;
    /* decode with several threads: guided self-scheduling over the panels of
     * all matrices in a row (see pl_pk_task_guided); 0 otherwise */
    int64_t total_panels, min_grab, grab_align;
    atomic_llong next;
} pl_pk_job;

static void pl_pk_convert(void *arg, int ith, int nth) {
    pl_pk_job *j = arg;
    int64_t lo, hi;
    pl_cpu_split(j->M, ith, nth, &lo, &hi);
#if PL_CPU_HAVE_AVX2_BUILD
    for (int64_t m = lo; m < hi; m++) {
        const float *xr = (const float *)pl_cpu_row(j->x, m);
        char *out = j->abuf + m * j->as;
        if (j->act_kind == PL_PACK_F16_X16) pl_cpu_round_f16_avx2(xr, out, j->K);
        else if (j->act_kind == PL_PACK_Q40_X16 || j->act_kind == PL_PACK_Q50_X16)
            pl_cpu_q80x_quantize_avx2(xr, (pl_q80x *)out, j->K);
        else if (j->act_kind == PL_PACK_Q41_X16 || j->act_kind == PL_PACK_Q51_X16)
            pl_cpu_q81x_quantize_avx2(xr, (pl_q81x *)out, j->K);
        else pl_cpu_q8kx_quantize_avx2(xr, (pl_q8kx *)out, j->K);
    }
#else
    (void)lo; (void)hi;
#endif
}

static void pl_pk_run(const pl_pk_job *j, const pl_pk_mat *mt, int64_t p0, int64_t p1, int64_t c0, int64_t c1) {
#if PL_CPU_HAVE_AVX2_BUILD
    const pl_cpu_packed *pk = mt->pk;
    switch (pk->kind) {
        case PL_PACK_Q4K_X16:
            pl_cpu_gemm_q4kx16_vnni(j->K, pk->data, p0, p1, (const pl_q8kx *)j->abuf, j->as, c0, c1, mt->dst, mt->N);
            break;
        case PL_PACK_Q5K_X16:
            pl_cpu_gemm_q5kx16_vnni(j->K, pk->data, p0, p1, (const pl_q8kx *)j->abuf, j->as, c0, c1, mt->dst, mt->N);
            break;
        case PL_PACK_Q6K_X16:
            pl_cpu_gemm_q6kx16_vnni(j->K, pk->data, p0, p1, (const pl_q8kx *)j->abuf, j->as, c0, c1, mt->dst, mt->N);
            break;
        case PL_PACK_Q40_X16:
            pl_cpu_gemm_q40x16_vnni(j->K, pk->data, p0, p1, (const pl_q80x *)j->abuf, j->as, c0, c1, mt->dst, mt->N);
            break;
        case PL_PACK_Q50_X16:
            pl_cpu_gemm_q50x16_vnni(j->K, pk->data, p0, p1, (const pl_q80x *)j->abuf, j->as, c0, c1, mt->dst, mt->N);
            break;
        case PL_PACK_Q41_X16:
            pl_cpu_gemm_q41x16_vnni(j->K, pk->data, p0, p1, (const pl_q81x *)j->abuf, j->as, c0, c1, mt->dst, mt->N);
            break;
        case PL_PACK_Q51_X16:
            pl_cpu_gemm_q51x16_vnni(j->K, pk->data, p0, p1, (const pl_q81x *)j->abuf, j->as, c0, c1, mt->dst, mt->N);
            break;
        case PL_PACK_Q2K_X16:
            pl_cpu_gemm_q2kx16_vnni(j->K, pk->data, p0, p1, (const pl_q8kx *)j->abuf, j->as, c0, c1, mt->dst, mt->N);
            break;
        case PL_PACK_Q3K_X16:
            pl_cpu_gemm_q3kx16_vnni(j->K, pk->data, p0, p1, (const pl_q8kx *)j->abuf, j->as, c0, c1, mt->dst, mt->N);
            break;
        case PL_PACK_TQ_X16:
            pl_cpu_gemm_tqx16_vnni(j->K, pk->data, p0, p1, (const pl_q8kx *)j->abuf, j->as, c0, c1, mt->dst, mt->N);
            break;
        case PL_PACK_TQ1_X16:
            pl_cpu_gemm_tq1x16_vnni(j->K, pk->data, p0, p1, (const pl_q8kx *)j->abuf, j->as, c0, c1, mt->dst, mt->N);
            break;
        case PL_PACK_IQ2XXS_X16:
            pl_cpu_gemm_iq2xxsx16_vnni(j->K, pk->data, p0, p1, (const pl_q8kx *)j->abuf, j->as, c0, c1, mt->dst, mt->N);
            break;
        case PL_PACK_IQ2XSX_X16:
            pl_cpu_gemm_iq2xsx16_vnni(j->K, pk->data, p0, p1, (const pl_q8kx *)j->abuf, j->as, c0, c1, mt->dst, mt->N);
            break;
        case PL_PACK_IQ1SX_X16:
            pl_cpu_gemm_iq1sx16_vnni(j->K, pk->data, p0, p1, (const pl_q8kx *)j->abuf, j->as, c0, c1, mt->dst, mt->N);
            break;
        case PL_PACK_IQ1MX_X16:
            pl_cpu_gemm_iq1mx16_vnni(j->K, pk->data, p0, p1, (const pl_q8kx *)j->abuf, j->as, c0, c1, mt->dst, mt->N);
            break;
        case PL_PACK_IQ2SX_X16:
            pl_cpu_gemm_iq2sx16_vnni(j->K, pk->data, p0, p1, (const pl_q8kx *)j->abuf, j->as, c0, c1, mt->dst, mt->N);
            break;
        case PL_PACK_F16_X16:
            pl_cpu_gemm_f16x16_vnni(j->K, pk->data, p0, p1, (const float *)j->abuf, j->as, c0, c1, mt->dst, mt->N);
            break;
        default: break;
    }
#else
    (void)j; (void)mt; (void)p0; (void)p1; (void)c0; (void)c1;
#endif
}

/* Panels [p0, p1) of matrix mi x activation rows [c0, c1) (with up and the
 * SwiGLU over the same rows for a gate/up job). */
static void pl_pk_chunk_panels(const pl_pk_job *j, int mi, int64_t p0, int64_t p1, int64_t c0, int64_t c1) {
    const pl_pk_mat *mt = &j->mat[mi];
    pl_pk_run(j, mt, p0, p1, c0, c1);
    if (j->swiglu) {
        /* the same rows of up, then silu(gate) * up over them: the segments
         * start on multiples of 16 and end on one or at N (N % 8 == 0), so
         * each element goes through the same code path as in the SWIGLU
         * kernel over whole rows */
        pl_pk_run(j, &j->mat[1], p0, p1, c0, c1);
        const int64_t r0 = p0 * PL_KQX_ROWS, r1 = p1 * PL_KQX_ROWS < mt->N ? p1 * PL_KQX_ROWS : mt->N, nr = r1 - r0;
        for (int64_t c = c0; c < c1; c++) {
            const int64_t off = c * mt->N + r0;
#if PL_CPU_HAVE_AVX2_BUILD
            pl_cpu_swiglu_avx2(mt->dst + off, j->mat[1].dst + off, j->swiglu + off, nr);
#else
            (void)off, (void)nr;   /* fused groups with SwiGLU need AVX2 (pl_try_group) */
#endif
        }
    }
}

static void pl_pk_chunk(const pl_pk_job *j, int64_t id) {
    int mi = 0;
    while (mi + 1 < j->n_mat && !j->swiglu && id >= j->mat[mi + 1].first_chunk) mi++;
    const pl_pk_mat *mt = &j->mat[mi];
    id -= mt->first_chunk;
    const int64_t pc = id % mt->n_panel_chunks, ac = id / mt->n_panel_chunks;
    const int64_t p0 = pc * mt->panels_per_chunk;
    const int64_t p1 = p0 + mt->panels_per_chunk < mt->n_panels ? p0 + mt->panels_per_chunk : mt->n_panels;
    const int64_t c0 = ac * j->acts_per_chunk;
    const int64_t c1 = c0 + j->acts_per_chunk < j->M ? c0 + j->acts_per_chunk : j->M;
    pl_pk_chunk_panels(j, mi, p0, p1, c0, c1);
}

/* Decode (one activation row), several threads: the panels of all matrices
 * of the job, in order, form one range; a thread claims the next
 * remaining / (2 nth) panels (at least min_grab), so the claims shrink as
 * the job drains. The first claims are long contiguous streams; the last
 * are short, so the threads finish within a short claim of each other
 * instead of within one fixed chunk (1/8 of a matrix at 2 threads, which
 * left one thread idle for ~1/16 of every matmul). A claim that crosses
 * from one matrix into the next runs as two sweeps. Each output row is
 * still computed by one panel call: results do not depend on the claims. */
static void pl_pk_task_guided(void *arg, int ith, int nth) {
    pl_pk_job *j = arg;
    const int64_t total = j->total_panels;
    long long cur = atomic_load_explicit(&j->next, memory_order_relaxed);
    for (;;) {
        int64_t take;
        do {
            if (cur >= total) return;
            const int64_t rem = total - cur;
            take = rem / (2 * nth);
            take = (take + j->grab_align - 1) / j->grab_align * j->grab_align;
            if (take < j->min_grab) take = j->min_grab;
            if (take > rem) take = rem;
        } while (!atomic_compare_exchange_weak_explicit(&j->next, &cur, cur + take, memory_order_relaxed,
                                                        memory_order_relaxed));
        /* [cur, cur + take) over the matrices (first_chunk holds each
         * matrix's first panel in the combined range) */
        int64_t lo = cur, hi = cur + take;
        for (int mi = 0; mi < j->n_mat && lo < hi; mi++) {
            const pl_pk_mat *mt = &j->mat[mi];
            const int64_t m0 = mt->first_chunk, m1 = m0 + mt->n_panels;
            if (lo >= m1) continue;
            const int64_t e = hi < m1 ? hi : m1;
            pl_pk_chunk_panels(j, mi, lo - m0, e - m0, 0, 1);
            lo = e;
            if (j->swiglu) break;   /* gate's panels only: the range ends there */
        }
        cur = atomic_load_explicit(&j->next, memory_order_relaxed);
    }
    (void)ith;
}

static void pl_pk_task(void *arg, int ith, int nth) {
    pl_pk_job *j = arg;
    for (int64_t id = atomic_fetch_add_explicit(&j->next, 1, memory_order_relaxed); id < j->n_chunks;
         id = atomic_fetch_add_explicit(&j->next, 1, memory_order_relaxed))
        pl_pk_chunk(j, id);
    (void)ith;
    (void)nth;
}

static pl_status pl_pk_check(const pl_node *node, const pl_cpu_packed *pk) {
    const pl_tensor *x = node->src[1], *y = node->dst;
    const int64_t K = pk->K, N = pk->N, M = pl_tensor_nrows(x);
    if (x->dtype != PL_F32 || y->dtype != PL_F32)
        return pl_errorf(PL_ERR_INVALID_ARG, "matmul: activations and output must be f32");
    if (x->ne[0] != K || y->ne[0] != N || pl_tensor_nrows(y) != M)
        return pl_errorf(PL_ERR_INVALID_ARG, "matmul: shape mismatch (W [%lld, %lld], X [%lld, %lld], dst [%lld, %lld])",
                         (long long)K, (long long)N, (long long)x->ne[0], (long long)M, (long long)y->ne[0],
                         (long long)pl_tensor_nrows(y));
    if (!pl_tensor_is_contiguous(y) || x->nb[0] != sizeof(float))
        return pl_errorf(PL_ERR_UNSUPPORTED, "matmul (cpu): dst must be contiguous and X rows dense");
    return PL_OK;
}

pl_status pl_cpu_matmul_packed_group(pl_exec_ctx *ctx, const pl_node *const *nodes, const pl_cpu_packed *const *pks,
                                     int n, const pl_node *swiglu) {
    if (n < 1 || n > PL_CPU_MM_GROUP_MAX) return pl_errorf(PL_ERR_INTERNAL, "cpu: bad matmul group of %d", n);
    const pl_tensor *x = nodes[0]->src[1];
    const int64_t K = pks[0]->K, M = pl_tensor_nrows(x);
    for (int i = 0; i < n; i++) PL_TRY(pl_pk_check(nodes[i], pks[i]));
    if (M == 0) return PL_OK;

    pl_pk_job job;
    memset(&job, 0, sizeof job);
    pl_pk_job *j = &job;
    j->n_mat = n;
    j->x = x;
    j->K = K;
    j->M = M;
    j->act_kind = pks[0]->kind;
    j->as = pl_packed_act_row(j->act_kind, K);
    j->swiglu = swiglu ? (float *)swiglu->dst->data : NULL;
    pl_cpu_scratch scratch = {0};
    PL_TRY(pl_cpu_scratch_get(ctx, j->as * (size_t)M, &scratch));
    j->abuf = scratch.ptr;
    const int nth = ctx && ctx->pool ? pl_threadpool_size(ctx->pool) : 1;
    if (nth > 1 && M * K >= 32768) pl_threadpool_run(ctx->pool, pl_pk_convert, j);
    else pl_pk_convert(j, 0, 1);

    /* activation blocks (prefill: ~256 KiB of converted rows, so they stay
     * in L2 while the panels of a chunk sweep over them) */
    if (M == 1) {
        j->acts_per_chunk = 1;
    } else {
        int64_t apc = (int64_t)((256 << 10) / j->as);
        if (apc < 4) apc = 4;
        if (apc > 64) apc = 64;
        if (j->act_kind == PL_PACK_F16_X16) apc = (apc + 23) / 24 * 24;
        else apc = (apc + 3) / 4 * 4;
        if (apc > M) apc = M;
        j->acts_per_chunk = apc;
    }
    const int64_t n_act = (M + j->acts_per_chunk - 1) / j->acts_per_chunk;
    int64_t total = 0;
    for (int i = 0; i < n; i++) {
        pl_pk_mat *mt = &j->mat[i];
        mt->pk = pks[i];
        mt->dst = nodes[i]->dst->data;
        mt->N = pks[i]->N;
        mt->n_panels = pks[i]->kind == PL_PACK_F16_X16 ? mt->N / PL_F16X_ROWS : pl_kqx_panels(mt->N);
        /* decode: ~4 contiguous runs of panels per thread; prefill: ~8
         * chunks per thread over all activation blocks */
        int64_t want = nth == 1 ? 1 : M == 1 ? 4 * nth : (8 * nth + n_act - 1) / n_act;
        mt->panels_per_chunk = (mt->n_panels + want - 1) / want;
        if (mt->panels_per_chunk < 1) mt->panels_per_chunk = 1;
        /* f16: whole 64-row groups (4 panels), one contiguous stream each */
        if (pks[i]->kind == PL_PACK_F16_X16) mt->panels_per_chunk = (mt->panels_per_chunk + 3) / 4 * 4;
        mt->n_panel_chunks = (mt->n_panels + mt->panels_per_chunk - 1) / mt->panels_per_chunk;
        mt->first_chunk = total;
        if (!swiglu || i == 0) total += mt->n_panel_chunks * n_act;
    }
    if (swiglu) j->mat[1].panels_per_chunk = j->mat[0].panels_per_chunk;
    j->n_chunks = total;
    atomic_init(&j->next, 0);
    static int guided = -1;
    if (guided < 0) guided = pl_cpu_switch("PL_CPU_GUIDED");
    if (guided && nth > 1 && M == 1) {
        /* first_chunk becomes each matrix's first panel in the combined range */
        int64_t tp = 0;
        for (int i = 0; i < n; i++) {
            j->mat[i].first_chunk = tp;
            if (!swiglu || i == 0) tp += j->mat[i].n_panels;
        }
        const bool f16 = pks[0]->kind == PL_PACK_F16_X16;
        j->total_panels = tp;
        /* f16: whole 64-row groups; k-quants: 16-row panels. The shortest
         * claim is ~32 KiB of weights or more. */
        j->grab_align = f16 ? 4 : 1;
        const size_t panel_bytes = pl_cpu_packed_bytes(pks[0]->kind, K, f16 ? PL_F16X_ROWS : PL_KQX_ROWS);
        int64_t mg = (int64_t)((32 << 10) / (panel_bytes ? panel_bytes : 1));
        mg = (mg + j->grab_align - 1) / j->grab_align * j->grab_align;
        j->min_grab = mg < j->grab_align ? j->grab_align : mg;
        pl_threadpool_run_elastic(ctx->pool, pl_pk_task_guided, j);
    } else if (nth > 1 && j->n_chunks > 1) pl_threadpool_run_elastic(ctx->pool, pl_pk_task, j);
    else
        for (int64_t id = 0; id < j->n_chunks; id++) pl_pk_chunk(j, id);
    pl_cpu_scratch_release(&scratch);
    return PL_OK;
}

pl_status pl_cpu_matmul_packed(pl_exec_ctx *ctx, const pl_node *node, const pl_cpu_packed *pk) {
    return pl_cpu_matmul_packed_group(ctx, &node, &pk, 1, NULL);
}
