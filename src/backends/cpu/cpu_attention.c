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
 *
 * Numerics. llama.cpp (ggml's CPU flash attention, which it uses by default)
 * computes a batch of fewer than 64 query tokens (decode, short prompts) one
 * query row at a time: Q rounded to the cache type (f16), K.Q in
 * ggml_vec_dot_f16's order, an online softmax over the positions in order
 * (a new maximum rescales the running sums by expf(M_old - M_new)), and the
 * V sum kept in an f16 vector (VKQ16) rounded after every position. Batches
 * of fewer than PL_ATT_ONLINE_TOK tokens here follow those steps (the
 * "online" path), so the logits stay close to llama.cpp's for longer; only
 * exp differs in its last bits (a vector exp). Larger batches (prefill) use
 * f32 throughout, as ggml's tiled path does; an f32 cache uses f32 in both.
 *
 * Three implementations, by batch size and CPU:
 *   - online (fewer than PL_ATT_ONLINE_TOK tokens): per token and KV head,
 *     the heads of the group together (one K/V load for both), as above;
 *   - tiled (prefill, AVX-512, head_dim % 16 == 0 and <= 128): tasks of
 *     PL_ATT_FLASH_ROWS query rows; KV positions in tiles of 64, each K tile
 *     converted and transposed once, scores 6 rows x 64 positions in
 *     registers, an online softmax per row, then O += P V (cpu_attention_avx2.c);
 *   - two-pass (prefill otherwise), described above.
 * PL_CPU_FA=0 / PL_CPU_FLASH=0 switch the first two off (measurements).
 *
 * At depth the online path's position-major form (pl_att_online_block) and
 * the quantized-cache path cut a token's positions into chunks of
 * PL_ATT_CHUNK, one task each, combined in chunk order
 * (cpu_attention_split.h): a decode token's attention runs on every thread,
 * with the same bits for any thread count and batch. PL_CPU_ATT_SPLIT=0
 * turns it off (measurements).
 */
#include <math.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include "backends/cpu/cpu_internal.h"
#include "backends/cpu/cpu_attention_quant.h"
#include "backends/cpu/cpu_attention_split.h"
#include "core/cpu_features.h"
#include "core/fp16.h"
#include "core/status.h"
#include "core/threadpool.h"
#include "quant/hadamard.h"
#include "quant/quant.h"

#define PL_ATT_MAX_R 4     /* query rows per SIMD helper call */
#define PL_ATT_ONLINE_TOK 64   /* batches below this many tokens: llama.cpp's FA numerics (ggml's Q tile) */
#define PL_ATT_FLASH_ROWS 128  /* query rows per task of the tiled (AVX-512) prefill kernel */
#define PL_ATT_ROWS 8      /* target query rows per task (heads x tokens) */
#define PL_ATT_JBLK 64     /* cache positions per L1 block */
#define PL_ATT_PIECE 64    /* positions per piece of the blocked path; a multiple of 8: pl_cpu_vexp_avx2's tail
                            * positions stay those of a whole row */
#define PL_ATT_BLOCK_ROWS 64 /* query rows per task of the blocked path, at most */

/* n rounded up to whole cache lines (the split's memory follows the threads' scratch) */
static inline size_t pl_att_round64(size_t n) { return (n + 63) & ~(size_t)63; }

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

/* The online path's helpers (see the top of the file; AVX2 versions in
 * cpu_attention_avx2.c). S[r*ldS + j] = scale * dot(k_j, q_r) in
 * ggml_vec_dot_f16 / _f32's summation order. */
static void pl_att_dots_ggml_c(int R, const float *const *q, const char *k, size_t ks, bool f16, int64_t n,
                               int64_t hd, float scale, float *S, int64_t ldS) {
    const int64_t np = hd & ~(int64_t)31;
    for (int r = 0; r < R; r++)
        for (int64_t j = 0; j < n; j++) {
            const char *kr = k + j * ks;
            float acc[4][8] = {{0}};
            for (int64_t i = 0; i < np; i += 32)
                for (int a = 0; a < 4; a++)
                    for (int l = 0; l < 8; l++)
                        acc[a][l] = fmaf(pl_cache_at(kr, i + 8 * a + l, f16), q[r][i + 8 * a + l], acc[a][l]);
            float x[8], t[4];
            for (int l = 0; l < 8; l++) x[l] = (acc[0][l] + acc[2][l]) + (acc[1][l] + acc[3][l]);
            for (int l = 0; l < 4; l++) t[l] = x[l] + x[l + 4];
            double sum = (t[0] + t[1]) + (t[2] + t[3]);
            for (int64_t i = np; i < hd; i++) sum += (double)(q[r][i] * pl_cache_at(kr, i, f16));
            S[r * ldS + j] = (float)sum * scale;
        }
}

static inline float pl_round_f16(float x) { return pl_f16_to_f32(pl_f32_to_f16(x)); }

/* The V recurrence of one query row (see pl_cpu_att_vkq_avx2). */
static void pl_att_vkq_c(const float *e, int64_t n, const char *v, size_t vs, bool f16, int64_t hd, float inv,
                         float *O) {
    for (int64_t d = 0; d < hd; d++) O[d] = 0.0f;
    for (int64_t j = 0; j < n; j++) {
        const char *vr = v + j * vs;
        float w = e[j];
        if (signbit(w)) {
            for (int64_t d = 0; d < hd; d++) O[d] = f16 ? pl_round_f16(O[d] * -w) : O[d] * -w;
            w = 1.0f;
        }
        for (int64_t d = 0; d < hd; d++) {
            const float y = fmaf(pl_cache_at(vr, d, f16), w, O[d]);
            O[d] = f16 ? pl_round_f16(y) : y;
        }
    }
    for (int64_t d = 0; d < hd; d++) O[d] *= inv;
}

/* ---- driver -------------------------------------------------------------------*/

typedef struct pl_att_job {
    const pl_node *node;
    int64_t head_dim, n_head, n_tok, n_kv_head, group, n_ctx;
    int64_t tb;          /* tokens per task */
    int64_t n_blocks;    /* token blocks */
    float scale;
    bool f16, avx2, avx512, online, flash;
    bool blocked;        /* online, KV heads in blocks of kvb, positions in pieces (pl_att_online_block) */
    bool zmm;            /* the blocked path's scores and V recurrence on zmm (PL_CPU_ATT_ZMM=0: the AVX2 kernels) */
    int64_t kvb;         /* KV heads per task of the blocked path */
    pl_att_split *split; /* the blocked path's tasks: tokens x position chunks x KV-head blocks */
    char *scratch;
    size_t per_thread;
    int64_t n_tasks;
    atomic_llong next;
} pl_att_job;


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
    /* positions from the run's first window start (0 without a window);
     * S columns and n_kv / lo below count from there */
    int64_t base = INT64_MAX;
    for (int64_t t = t0; t < t1; t++) {
        const int64_t lo = pl_att_lo(node, pl_att_i32(node->src[3], t));
        if (lo < base) base = lo;
    }
    const char *kbase = (const char *)pl_tensor_row(k, base, sq, 0) + g * hd * (int64_t)el;
    const char *vbase = (const char *)pl_tensor_row(v, base, sq, 0) + g * hd * (int64_t)el;
    const float *qr[PL_ATT_RUN_ROWS];
    int64_t n_kv[PL_ATT_RUN_ROWS], lo_kv[PL_ATT_RUN_ROWS];
    int n_rows = 0;
    int64_t max_kv = 0;
    for (int64_t t = t0; t < t1; t++) {
        const int32_t p = pl_att_i32(node->src[3], t);
        const int64_t nk = (int64_t)p + 1 - base, lo = pl_att_lo(node, p) - base;
        for (int64_t h = h0; h < h1; h++) {
            qr[n_rows] = (const float *)pl_tensor_row(q, g * j->group + h, t, 0);
            lo_kv[n_rows] = lo;
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
    /* causal softmax per query row; weight 0 past its own position and
     * before its window */
    float sums[PL_ATT_RUN_ROWS];
    for (int r = 0; r < n_rows; r++) {
        float *sr = S + r * ldS;
        sums[r] = pl_att_softmax(j, sr + lo_kv[r], n_kv[r] - lo_kv[r]);
        for (int64_t i = 0; i < lo_kv[r]; i++) sr[i] = 0.0f;
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

/* A query row in the cache's type, as ggml's q_to_vec_dot. */
static void pl_att_query_row(const pl_att_job *j, const float *src, float *dq) {
    const int64_t hd = j->head_dim;
    if (!j->f16) memcpy(dq, src, (size_t)hd * sizeof(float));
#if PL_CPU_HAVE_AVX2_BUILD
    else if (j->avx2) pl_cpu_round_f16_avx2(src, dq, hd);
#endif
    else for (int64_t d = 0; d < hd; d++) dq[d] = pl_round_f16(src[d]);
}

/* The running-maximum scan of n scores e of one row, continuing from the
 * row's maximum *M and sum *sum over earlier positions (-inf and 0 at the
 * start): at a new maximum ms = exp(M_old - M), vs = 1, and e gets the sign
 * tag (-ms); otherwise ms = 1, vs = exp(s - M). newmax: n bytes of scratch. */
static void pl_att_scan(bool avx2, float *e, uint8_t *newmax, int64_t n, float *M, float *sum) {
    float Mr = *M;
    for (int64_t i = 0; i < n; i++) {
        const float s = e[i];
        newmax[i] = s > Mr;
        if (s > Mr) { e[i] = Mr - s; Mr = s; }
        else e[i] = s - Mr;
    }
    *M = Mr;
#if PL_CPU_HAVE_AVX2_BUILD
    if (avx2) pl_cpu_vexp_avx2(e, n);
    else
#else
    (void)avx2;
#endif
        for (int64_t i = 0; i < n; i++) e[i] = expf(e[i]);
    float sm = *sum;
    for (int64_t i = 0; i < n; i++) {
        if (newmax[i]) { sm = sm * e[i] + 1.0f; e[i] = -e[i]; }   /* sign tag: a new maximum */
        else sm = sm * 1.0f + e[i];
    }
    *sum = sm;
}

/* The online path for token t and query heads h0..h1-1 of KV head g: one
 * score row per head, then per head the running-maximum scan (scalar), the
 * exps (vector) and the V recurrence. Scratch: S (R rows of n_ctx), Q (R rows
 * of head_dim), flags (n_ctx bytes). */
static void pl_att_online_token(const pl_att_job *j, int64_t g, int64_t t, int64_t h0, int64_t h1, float *S,
                                float *Q, uint8_t *newmax) {
    const pl_node *node = j->node;
    const pl_tensor *q = node->src[0], *k = node->src[1], *v = node->src[2];
    const int64_t hd = j->head_dim, ldS = j->n_ctx;
    const int32_t sq = pl_att_i32(node->src[4], t), p = pl_att_i32(node->src[3], t);
    const int64_t lo = pl_att_lo(node, p), n = (int64_t)p + 1 - lo;
    const size_t el = j->f16 ? 2 : 4;
    const char *kbase = (const char *)pl_tensor_row(k, lo, sq, 0) + g * hd * (int64_t)el;
    const char *vbase = (const char *)pl_tensor_row(v, lo, sq, 0) + g * hd * (int64_t)el;
    const float *qr[PL_ATT_RUN_ROWS];
    const int R = (int)(h1 - h0);
    for (int r = 0; r < R; r++) {
        qr[r] = Q + r * hd;
        pl_att_query_row(j, (const float *)pl_tensor_row(q, g * j->group + h0 + r, t, 0), Q + r * hd);
    }
#if PL_CPU_HAVE_AVX2_BUILD
    if (j->avx2)
        pl_cpu_att_dots_ggml_avx2(R, qr, kbase, k->nb[1], j->f16, n, hd, j->scale, S, ldS, vbase, v->nb[1]);
    else
#endif
        pl_att_dots_ggml_c(R, qr, kbase, k->nb[1], j->f16, n, hd, j->scale, S, ldS);
    float inv[PL_ATT_RUN_ROWS];
    for (int r = 0; r < R; r++) {
        float M = -INFINITY, sum = 0.0f;
        pl_att_scan(j->avx2, S + r * ldS, newmax, n, &M, &sum);
        inv[r] = sum == 0.0f ? 0.0f : 1.0f / sum;
    }
    float *o0 = (float *)pl_tensor_row(node->dst, t, 0, 0) + (g * j->group + h0) * hd;
    int r = 0;
#if PL_CPU_HAVE_AVX2_BUILD
    if (j->avx2 && hd % 32 == 0)   /* two heads at a time: one V load for both */
        for (; r + 2 <= R; r += 2)
            (j->avx512 ? pl_cpu_att_vkq2_avx512 : pl_cpu_att_vkq2_avx2)(S + r * ldS, S + (r + 1) * ldS, n, vbase, v->nb[1],
                                                                          j->f16, hd, inv[r], inv[r + 1], o0 + r * hd,
                                                                          o0 + (r + 1) * hd);
#endif
    for (; r < R; r++) {
#if PL_CPU_HAVE_AVX2_BUILD
        if (j->avx2 && hd % 8 == 0) pl_cpu_att_vkq_avx2(S + r * ldS, n, vbase, v->nb[1], j->f16, hd, inv[r], o0 + r * hd);
        else
#endif
            pl_att_vkq_c(S + r * ldS, n, vbase, v->nb[1], j->f16, hd, inv[r], o0 + r * hd);
    }
}

#if PL_CPU_HAVE_AVX2_BUILD
/* The online path for token t and the query heads of KV heads g0..g1-1,
 * position-major: the cache positions in pieces of PL_ATT_PIECE; per piece
 * the scores of every row (pl_cpu_att_dots_rows_avx2), the running-maximum
 * scan and exps of each row (its maximum and sum carried over), and the V
 * recurrence of every row (pl_cpu_att_vkq_rows_avx2, its accumulators
 * carried over). With AVX-512 both run on zmm (pl_cpu_att_dots_rows_avx512;
 * pl_cpu_att_vkq_rows_avx512 keeps a row pair's accumulators in registers
 * over the piece; PL_CPU_ATT_ZMM=0: the AVX2 kernels). Each row sees the
 * operations of pl_att_online_token in the same order, so the results are
 * the same bits.
 * Why: a cache row holds all KV heads; one KV head at a time over all
 * positions reads hd elements of every row, a stride the prefetchers follow
 * badly (software prefetch did not help), and its V recurrence waits on one
 * chain of f16 roundings. Here the cache is read forward, the block's slices
 * of a row at once, and the roundings of all rows interleave. Decode at
 * depth 2048 (0.6B shapes, 28 layers, 1 thread): 1.31-1.43 ms per layer
 * before, 0.76-0.82 after (bench/RESULTS.md).
 * Scratch (pl_att_block_scratch): S (rows x piece), Q and the accumulators
 * (rows x hd), M and the sums (rows), the scan's flags (piece). Needs group % 2 == 0 and
 * hd % 32 == 0, AVX2. */

static size_t pl_att_block_scratch(int64_t rows, int64_t hd) {
    return (size_t)rows * ((size_t)PL_ATT_PIECE * 4 + (size_t)hd * 8 + 8) + PL_ATT_PIECE + 64;
}

/* Positions c0..c1-1 of the token's range (from lo; a chunk, or all of
 * them); slot: NULL to write the normalised output, else the chunk's
 * partial slot (cpu_attention_split.h) for the combine. */
static void pl_att_online_block(const pl_att_job *j, int64_t t, int64_t g0, int64_t g1, int64_t c0, int64_t c1,
                                char *scratch, float *slot) {
    const pl_node *node = j->node;
    const pl_tensor *q = node->src[0], *k = node->src[1], *v = node->src[2];
    const int64_t hd = j->head_dim, G = j->group, rows = (g1 - g0) * G;
    const int32_t sq = pl_att_i32(node->src[4], t), p = pl_att_i32(node->src[3], t);
    const int64_t lo0 = pl_att_lo(node, p), n_all = (int64_t)p + 1 - lo0;
    const int64_t lo = lo0 + c0, n = (c1 < n_all ? c1 : n_all) - c0;
    const size_t el = j->f16 ? 2 : 4, ks = k->nb[1], vs = v->nb[1];
    const char *kbase = (const char *)pl_tensor_row(k, lo, sq, 0) + g0 * hd * (int64_t)el;
    const char *vbase = (const char *)pl_tensor_row(v, lo, sq, 0) + g0 * hd * (int64_t)el;
    float *S = (float *)scratch, *Q = S + rows * PL_ATT_PIECE, *A = Q + rows * hd, *M = A + rows * hd,
          *sum = M + rows;
    uint8_t *newmax = (uint8_t *)(sum + rows);
    const float *qr[PL_ATT_BLOCK_ROWS];
    for (int64_t r = 0; r < rows; r++) {
        qr[r] = Q + r * hd;
        pl_att_query_row(j, (const float *)pl_tensor_row(q, g0 * G + r, t, 0), Q + r * hd);
        memset(A + r * hd, 0, (size_t)hd * sizeof(float));
        M[r] = -INFINITY;
        sum[r] = 0.0f;
    }
    for (int64_t p0 = 0; p0 < n; p0 += PL_ATT_PIECE) {
        const int64_t m = n - p0 < PL_ATT_PIECE ? n - p0 : PL_ATT_PIECE;
        if (j->zmm)
            pl_cpu_att_dots_rows_avx512((int)(g1 - g0), (int)G, qr, kbase + p0 * (int64_t)ks, ks, j->f16, m, hd, j->scale,
                                        S, PL_ATT_PIECE);
        else
            pl_cpu_att_dots_rows_avx2((int)(g1 - g0), (int)G, qr, kbase + p0 * (int64_t)ks, ks, j->f16, m, hd, j->scale, S,
                                      PL_ATT_PIECE);
        for (int64_t r = 0; r < rows; r++) pl_att_scan(j->avx2, S + r * PL_ATT_PIECE, newmax, m, &M[r], &sum[r]);
        if (j->zmm)
            pl_cpu_att_vkq_rows_avx512((int)(g1 - g0), (int)G, S, PL_ATT_PIECE, m, vbase + p0 * (int64_t)vs, vs, j->f16,
                                       hd, A);
        else
            pl_cpu_att_vkq_rows_avx2((int)(g1 - g0), (int)G, S, PL_ATT_PIECE, m, vbase + p0 * (int64_t)vs, vs, j->f16,
                                     hd, A);
    }
    if (slot) {   /* the chunk's partial: A, M and the sum of each row (head g0 * G + r) */
        const int64_t H = j->n_head;
        memcpy(slot + g0 * G * hd, A, (size_t)(rows * hd) * sizeof(float));
        memcpy(slot + H * hd + g0 * G, M, (size_t)rows * sizeof(float));
        memcpy(slot + H * hd + H + g0 * G, sum, (size_t)rows * sizeof(float));
        return;
    }
    for (int64_t r = 0; r < rows; r++) {
        float *o = (float *)pl_tensor_row(node->dst, t, 0, 0) + (g0 * G + r) * hd;
        const float inv = sum[r] == 0.0f ? 0.0f : 1.0f / sum[r];
        for (int64_t d = 0; d < hd; d++) o[d] = A[r * hd + d] * inv;
    }
}
#endif

static void pl_att_task_run(const pl_att_job *j, int64_t task, float *S, float *O, uint8_t *flags) {
#if PL_CPU_HAVE_AVX2_BUILD
    if (j->blocked) {   /* token-major, then chunks of positions, then blocks of kvb KV heads */
        int64_t t, u, c, nch;
        float *slot;
        pl_att_split_task(j->split, task, &t, &u, &c, &nch, &slot);
        const int64_t g0 = u * j->kvb;
        pl_att_online_block(j, t, g0, g0 + j->kvb < j->n_kv_head ? g0 + j->kvb : j->n_kv_head,
                            nch > 1 ? c * PL_ATT_CHUNK : 0, nch > 1 ? (c + 1) * PL_ATT_CHUNK : INT64_MAX, (char *)S,
                            slot);
        return;
    }
#endif
    /* KV-head-major; token blocks from the last one backwards */
    const int64_t g = task / j->n_blocks, b = j->n_blocks - 1 - task % j->n_blocks;
    const int64_t t_lo = b * j->tb, t_hi = t_lo + j->tb < j->n_tok ? t_lo + j->tb : j->n_tok;
    if (j->online) {
        for (int64_t t = t_lo; t < t_hi; t++)
            for (int64_t h = 0; h < j->group; h += PL_ATT_RUN_ROWS)
                pl_att_online_token(j, g, t, h, h + PL_ATT_RUN_ROWS < j->group ? h + PL_ATT_RUN_ROWS : j->group, S, O,
                                    flags);
        return;
    }
#if PL_CPU_HAVE_AVX2_BUILD
    if (j->flash) {
        /* runs of one slot; rows = (token, head) in token order */
        const pl_node *node = j->node;
        const pl_tensor *q = node->src[0], *k = node->src[1], *v = node->src[2];
        const int64_t hd = j->head_dim;
        const size_t el = j->f16 ? 2 : 4;
        for (int64_t t0 = t_lo; t0 < t_hi;) {
            const int32_t sq = pl_att_i32(node->src[4], t0);
            int64_t t1 = t0 + 1;
            while (t1 < t_hi && pl_att_i32(node->src[4], t1) == sq) t1++;
            const float *qr[PL_ATT_FLASH_ROWS];
            float *outr[PL_ATT_FLASH_ROWS];
            int64_t nkv[PL_ATT_FLASH_ROWS];
            int R = 0;
            for (int64_t t = t0; t < t1; t++)
                for (int64_t h = 0; h < j->group; h++, R++) {
                    qr[R] = (const float *)pl_tensor_row(q, g * j->group + h, t, 0);
                    outr[R] = (float *)pl_tensor_row(node->dst, t, 0, 0) + (g * j->group + h) * hd;
                    nkv[R] = (int64_t)pl_att_i32(node->src[3], t) + 1;
                }
            const char *kb = (const char *)pl_tensor_row(k, 0, sq, 0) + g * hd * (int64_t)el;
            const char *vb = (const char *)pl_tensor_row(v, 0, sq, 0) + g * hd * (int64_t)el;
            pl_cpu_att_flash_avx512(R, qr, nkv, kb, k->nb[1], vb, v->nb[1], j->f16, hd, j->scale, outr, S);
            t0 = t1;
        }
        return;
    }
#endif
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
    uint8_t *flags = (uint8_t *)(O + rows * j->head_dim);
    for (int64_t id = atomic_fetch_add_explicit(&j->next, 1, memory_order_relaxed); id < j->n_tasks;
         id = atomic_fetch_add_explicit(&j->next, 1, memory_order_relaxed))
        pl_att_task_run(j, id, S, O, flags);
    (void)nth;
}

/* The tiled kernel: AVX-512, head_dim a multiple of 16 up to 128, groups
 * that fit a task. */
static bool pl_att_use_flash(const pl_node *node) {
#if PL_CPU_HAVE_AVX2_BUILD
    const int64_t hd = node->src[0]->ne[0], n_tok = node->src[0]->ne[2];
    const int n_kv_head = node->iparams[0] > 0 ? node->iparams[0] : 1;
    const int64_t group = node->src[0]->ne[1] / n_kv_head;
    return n_tok >= PL_ATT_ONLINE_TOK && hd % 16 == 0 && hd <= 128 && group >= 1 && group <= PL_ATT_FLASH_ROWS &&
           pl_cpu_has_vnni512();
#else
    (void)node;
    return false;
#endif
}

static int64_t pl_att_flash_tb(int64_t group) { return PL_ATT_FLASH_ROWS / group; }

int pl_cpu_att_blocked_mode = -1;
int pl_cpu_att_split_mode = -1;
int pl_cpu_att_zmm_mode = -1;
int pl_cpu_attq_tile_mode = -1;
int pl_cpu_attq_dec_mode = -1;
int pl_cpu_attq_exp16_mode = -1;

/* Shapes the blocked online path (pl_att_online_block) takes, on AVX2: two
 * query rows per V load, a group that fits a task. Not a function of the
 * batch: the work memory planned for a large batch must cover a decode step
 * of the same node. */
static bool pl_att_blocked_shape(const pl_node *node) {
#if PL_CPU_HAVE_AVX2_BUILD
    const int64_t hd = node->src[0]->ne[0];
    const int n_kv_head = node->iparams[0] > 0 ? node->iparams[0] : 1;
    const int64_t group = node->src[0]->ne[1] / n_kv_head;
    return hd % 32 == 0 && group >= 2 && group % 2 == 0 && group <= PL_ATT_BLOCK_ROWS && pl_cpu_has_avx2();
#else
    (void)node;
    return false;
#endif
}

/* ---- quantized caches ---------------------------------------------------------
 *
 * A q8_0 / q4_0 K or V cache (and the rotation that comes with it) takes this
 * path, for every batch size, with the steps of ggml's CPU flash attention
 * (ggml_compute_forward_flash_attn_ext_f16_one_chunk), which llama.cpp
 * requires for a quantized V cache and uses for any quantized cache:
 *   - the query row is rotated by H_{k_rot} (iparams[2]; quant/hadamard.h)
 *     and converted to K's vec_dot_type: q8_0 for a q8_0 / q4_0 K cache
 *     (the integer dot products of the q8_0 / q4_0 matmul kernels),
 *     f16 for an f16 K cache;
 *   - positions in order, an online softmax: a new maximum M rescales the
 *     running sum and the output by expf(M_old - M_new);
 *   - the V row decoded to f32 and added in f32 (acc += expf(s - M) * v);
 *   - the output divided by the sum, then rotated by H_{v_rot} (iparams[3]).
 * A task is one token, one KV head and one chunk of positions (the depth
 * split), or in prefill a block of tokens and one KV head: the task's query
 * rows share each K tile and each decoded V row. Per tile of PL_ATTQ_JB
 * positions: the scores from the K dtype's matmul tile kernel (cache rows as
 * weight rows, the converted query rows as activations), each row's
 * running-maximum scan with a vector exp (pl_att_scan), then the V step
 * (AVX-512: pl_cpu_attq_vstep_avx512, accumulators in registers; else
 * pl_cpu_attq_axpy_avx2). The expf of the scan is the vector exp's, so the
 * last bits differ from ggml's; the kv goldens hold.
 *
 * Prefill tiles (a block of more than 2 query rows, AVX-512; PL_CPU_ATTQ_TILE=0
 * turns them off): each V tile is decoded to f32 once per block and read by
 * the rows from L1, and with a q8_0 K cache the scores come from a VNNI
 * kernel (two query rows per vector, K + 128 unsigned) into a transposed
 * tile, scanned 16 rows per vector (cpu_attention_quant.h). The same float
 * operations in the same order per row, so the same bits as without them
 * (test_attention_split); pp512 @ d4096 at 1 thread, Qwen3-0.6B shapes, the
 * attention's time went from 4.7x the f16 cache's to about 1.0x
 * (bench/bench_attention.c). The scan's exp runs pl_exp8's operations on
 * 16 lanes (PL_CPU_ATTQ_EXP16=0: two 8-lane calls; the same bits).
 *
 * Decode (R <= 2 query rows: one token's KV group of 2) with a q8_0 K
 * cache, AVX-512 VNNI (PL_CPU_ATTQ_DEC=0 turns it off): the scores come
 * from pl_cpu_attq_qk_dec (the pair in one zmm, each K block broadcast to
 * both halves from the cache), bit for bit as the q8_0 tile kernel it
 * replaces, which took half the decode attention's time at depth 4096
 * (bench_attention P=1 D=4096: q8_0 attention from 0.96-0.99x the f16
 * cache's speed to 1.67-1.81x).
 *
 * Per-thread scratch (pl_attq_per_thread), for R query rows (the group, or
 * a prefill block's): the converted query rows, then f32 accumulators
 * [R][head_dim], scores [R][PL_ATTQ_JB], the f32 query row and the decoded V
 * row (head_dim each), M and S per query row, the scan's flags; then the
 * prefill tiles' buffers (the decoded V tile, the packed query rows and K
 * tile, the transposed scores, each row's visible positions). */
#define PL_ATTQ_JB 64

static bool pl_att_quant_dtype(pl_dtype t) { return t == PL_Q8_0 || t == PL_Q4_0; }

static bool pl_att_is_quant(const pl_node *node) {
    return pl_att_quant_dtype(node->src[1]->dtype) || pl_att_quant_dtype(node->src[2]->dtype) || node->iparams[2] ||
           node->iparams[3];
}

static size_t pl_attq_qrow(const pl_cpu_mm_type *kt, int64_t hd) {
    size_t b = kt ? pl_cpu_mm_act_row_size(kt, hd) : 0;
    if (b < (size_t)hd * sizeof(float)) b = (size_t)hd * sizeof(float);
    return (b + 63) & ~(size_t)63;
}

/* Prefill (a batch of at least PL_ATT_ONLINE_TOK tokens, not batch-
 * invariant, no window): a task takes a block of tokens of one KV head, so
 * each K tile's score call has tb * group query rows as columns and each V
 * row is decoded once for all of them. 128 rows (64 tokens at a group of
 * 2): the K pack and the V decode of a tile spread over twice the rows of
 * 64 (bench_attention pp512 @ d4096: q8_0 about 5% faster); a row's steps
 * do not depend on its block, so the same bits. */
#define PL_ATTQ_BLOCK_ROWS 128
static int64_t pl_attq_tb(int64_t group) { return group >= PL_ATTQ_BLOCK_ROWS ? 1 : PL_ATTQ_BLOCK_ROWS / group; }

static int64_t pl_attq_rows_max(const pl_node *node) {
    const int n_kv_head = node->iparams[0] > 0 ? node->iparams[0] : 1;
    const int64_t group = node->src[0]->ne[1] / n_kv_head > 0 ? node->src[0]->ne[1] / n_kv_head : 1;
    return group > pl_attq_tb(group) * group ? group : pl_attq_tb(group) * group;
}

/* The scratch before the prefill tiles' buffers (see below). */
static size_t pl_attq_base(const pl_node *node) {
    const int64_t hd = node->src[0]->ne[0], rows = pl_attq_rows_max(node);
    const pl_cpu_mm_type *kt = pl_cpu_mm_type_get(node->src[1]->dtype);
    size_t b = (size_t)rows * pl_attq_qrow(kt, hd);
    b += ((size_t)rows * (size_t)(hd + PL_ATTQ_JB + 2) + 2 * (size_t)hd) * sizeof(float) + PL_ATTQ_JB;
    return (b + 127) & ~(size_t)63;
}

/* Then the prefill tiles' buffers: the decoded V tile [PL_ATTQ_JB][hd]
 * floats, the packed query rows and the packed K tile of the q8_0 score
 * kernel (pl_cpu_attq_qk_*; sizes without AVX2 too, for simplicity). */
static size_t pl_attq_qpack_size(const pl_node *node) {
    const int64_t hd = node->src[0]->ne[0];
    return (((size_t)((pl_attq_rows_max(node) + 1) / 2) * (size_t)(hd / 32) * 192) + 63) & ~(size_t)63;
}

static size_t pl_attq_ldt(const pl_node *node) { return (size_t)((pl_attq_rows_max(node) + 15) & ~(int64_t)15); }

static size_t pl_attq_per_thread(const pl_node *node) {
    const size_t hd = (size_t)node->src[0]->ne[0];
    return pl_attq_base(node) + PL_ATTQ_JB * hd * sizeof(float) + pl_attq_qpack_size(node) +
           PL_ATTQ_JB * (hd / 32) * 68 + (PL_ATTQ_JB + 1) * pl_attq_ldt(node) * sizeof(float) + 64;
}

typedef struct pl_attq_job {
    const pl_node *node;
    const pl_cpu_mm_type *kt;
    int64_t hd, n_tok, n_kv_head, group;
    size_t qrow, per_thread;
    float scale;
    bool avx2, v512;
    bool vtile;            /* prefill blocks decode each V tile once (PL_CPU_ATTQ_TILE=0: off) */
    bool qk;               /* and take q8_0 K scores from pl_cpu_attq_qk_scores (VNNI) */
    bool qkd;              /* decode (R <= 2 rows): q8_0 K scores from pl_cpu_attq_qk_dec (PL_CPU_ATTQ_DEC=0: off) */
    bool exp16;            /* the prefill scan's exp on 16 lanes (PL_CPU_ATTQ_EXP16=0: two 8-lane calls) */
    size_t vtile_off;      /* their buffers in the scratch (pl_attq_per_thread) */
    bool block;            /* prefill: tasks of tb tokens x one KV head (pl_attq_tb) */
    int64_t tb, n_blocks;
    pl_att_split *split;   /* otherwise tasks: tokens x position chunks x KV heads */
    char *scratch;
    int64_t n_tasks;
    atomic_llong next;
} pl_attq_job;

/* One V row slice (hd elements) as f32: decoded into buf, or the row itself. */
static const float *pl_attq_vrow(pl_dtype t, const char *src, float *buf, int64_t hd, bool avx2) {
    if (t == PL_F32) return (const float *)src;
#if PL_CPU_HAVE_AVX2_BUILD
    if (avx2 && pl_cpu_attq_decode_avx2(t, src, buf, hd)) return buf;
#else
    (void)avx2;
#endif
    pl_dequantize_row(t, src, buf, hd);
    return buf;
}

/* The V step without the AVX-512 kernel: per position the V row decoded
 * once, then each query row's update (e: the scan's tagged weights). */
static void pl_attq_vstep(const pl_attq_job *j, int64_t R, const float *E, int64_t n, const char *v, size_t vs,
                          float *vf, float *acc) {
    const int64_t hd = j->hd;
    for (int64_t i = 0; i < n; i++) {
        const float *vr = pl_attq_vrow(j->node->src[2]->dtype, v + i * vs, vf, hd, j->avx2);
        for (int64_t r = 0; r < R; r++) {
            const float w = E[r * PL_ATTQ_JB + i];
            const float ms = signbit(w) ? -w : 1.0f, vw = signbit(w) ? 1.0f : w;
            float *a = acc + r * hd;
#if PL_CPU_HAVE_AVX2_BUILD
            if (j->avx2) {
                pl_cpu_attq_axpy_avx2(a, vr, ms, vw, hd);   /* hd % 32 == 0 here */
                continue;
            }
#endif
            if (ms != 1.0f)
                for (int64_t d = 0; d < hd; d++) a[d] *= ms;
            for (int64_t d = 0; d < hd; d++) a[d] += vw * vr[d];
        }
    }
}

/* Token t, KV head g, one chunk of its positions (or all of them). Per tile
 * of PL_ATTQ_JB positions: the scores of the group's query rows, each row's
 * running-maximum scan with a vector exp (pl_att_scan: its maximum and sum
 * carried over), then the V step (each V row decoded once for the group). */
static void pl_attq_rows(const pl_attq_job *j, int64_t t0, int64_t t1, int64_t g, int64_t c, int64_t nch,
                         float *slot, char *scr) {
    const pl_node *node = j->node;
    const pl_tensor *q = node->src[0], *k = node->src[1], *v = node->src[2], *dst = node->dst;
    const int64_t hd = j->hd, G = j->group, R = (t1 - t0) * G;
    const int k_rot = node->iparams[2], v_rot = node->iparams[3];
    /* rows r = (t - t0) * G + h, the tokens of one slot; p: their largest
     * position (a block's positions need not increase) */
    int32_t p = pl_att_i32(node->src[3], t0);
    const int32_t sq = pl_att_i32(node->src[4], t0);
    for (int64_t t = t0 + 1; t < t1; t++)
        if (pl_att_i32(node->src[3], t) > p) p = pl_att_i32(node->src[3], t);
    char *qc = scr;
    float *acc = (float *)(scr + (size_t)R * j->qrow);   /* [R][hd] */
    float *sc = acc + R * hd;                             /* [R][PL_ATTQ_JB] */
    float *qf = sc + R * PL_ATTQ_JB, *vf = qf + hd;
    float *M = vf + hd, *S = M + R;
    uint8_t *flags = (uint8_t *)(S + R);
#if PL_CPU_HAVE_AVX2_BUILD   /* the AVX-512 tiles' scratch */
    float *vtile = (float *)(scr + j->vtile_off);   /* [PL_ATTQ_JB][hd], prefill blocks (j->vtile) */
    char *qpack = (char *)(vtile + PL_ATTQ_JB * hd), *kpack = qpack + pl_attq_qpack_size(node);
    /* the q8_0 tiles' transposed scores scT [PL_ATTQ_JB][ldT] and each row's
     * visible positions of the tile */
    const int64_t ldT = (int64_t)pl_attq_ldt(node);
    float *scT = (float *)(kpack + ((PL_ATTQ_JB * (hd / 32) * 68 + 63) & ~(size_t)63));
    int32_t *lim = (int32_t *)(scT + PL_ATTQ_JB * ldT);
    const bool qk = j->qk && R > 2, qkd = j->qkd && R <= 2;
#endif
    for (int64_t r = 0; r < R; r++) {
        const int64_t t = t0 + r / G;
        const float *src = (const float *)((const char *)q->data + (g * G + r % G) * q->nb[1] + t * q->nb[2]);
        memcpy(qf, src, (size_t)hd * sizeof(float));
        if (k_rot) pl_cpu_hadamard_rows(qf, hd, k_rot);
        if (j->kt->from_float) j->kt->from_float(qf, qc + r * j->qrow, hd);
        else memcpy(qc + r * j->qrow, qf, (size_t)hd * sizeof(float));
        M[r] = -INFINITY;
        S[r] = 0.0f;
        memset(acc + r * hd, 0, (size_t)hd * sizeof(float));
    }
#if PL_CPU_HAVE_AVX2_BUILD
    if (qk || qkd) pl_cpu_attq_qk_prepare((int)R, qc, j->qrow, hd, qpack);
#endif
    const size_t k_off = pl_dtype_row_size(k->dtype, g * hd), v_off = pl_dtype_row_size(v->dtype, g * hd);
    const char *kb = (const char *)k->data + sq * k->nb[2] + k_off;
    const char *vb = (const char *)v->data + sq * v->nb[2] + v_off;
    const int max_nr = j->kt->max_nr, max_nc = j->kt->max_nc;
    const int64_t lo = pl_att_lo(node, pl_att_i32(node->src[3], t0));
    const int64_t b0 = lo + (nch > 1 ? c * PL_ATT_CHUNK : 0);
    const int64_t b1 = nch > 1 && lo + (c + 1) * PL_ATT_CHUNK <= p ? lo + (c + 1) * PL_ATT_CHUNK - 1 : p;
    for (int64_t j0 = b0; j0 <= b1; j0 += PL_ATTQ_JB) {
        const int64_t n = b1 + 1 - j0 < PL_ATTQ_JB ? b1 + 1 - j0 : PL_ATTQ_JB;
        /* sc[r * JB + i] = dot(K row j0 + i, query row r) */
#if PL_CPU_HAVE_AVX2_BUILD
        if (qk) {   /* the same steps, 16 rows per vector, transposed scores (cpu_attention_quant.h) */
            pl_cpu_attq_qk_scores((int)R, qpack, kb + j0 * k->nb[1], k->nb[1], n, hd, kpack, scT, ldT);
            for (int64_t r = 0; r < R; r++) {
                const int64_t pr = pl_att_i32(node->src[3], t0 + r / G);
                lim[r] = (int32_t)(pr + 1 - j0 < 0 ? 0 : pr + 1 - j0 < n ? pr + 1 - j0 : n);
            }
            pl_cpu_attq_scan_t((int)R, scT, ldT, n, lim, j->scale, M, S, j->exp16);
            const char *vt = vb + j0 * v->nb[1];
            if (!pl_cpu_attq_vdecode_avx512(v->dtype, vt, v->nb[1], n, hd, vtile))
                for (int64_t i = 0; i < n; i++) {
                    const float *vr = pl_attq_vrow(v->dtype, vt + i * v->nb[1], vtile + i * hd, hd, true);
                    if (vr != vtile + i * hd) memcpy(vtile + i * hd, vr, (size_t)hd * sizeof(float));
                }
            if (pl_cpu_attq_vtile_t((int)R, scT, ldT, n, vtile, hd, acc)) continue;
            return;   /* not reached: qk implies head_dim 32..128 (pl_att_quant) */
        }
        if (qkd) {   /* sc[r * JB + i], the bits of the tile kernel below */
            pl_cpu_attq_qk_dec((int)R, qpack, kb + j0 * k->nb[1], k->nb[1], n, hd, sc, PL_ATTQ_JB);
        } else
#endif
        for (int64_t i0 = 0; i0 < n; i0 += max_nr) {
            const int nr = (int)(n - i0 < max_nr ? n - i0 : max_nr);
            for (int64_t c0 = 0; c0 < R; c0 += max_nc) {
                const int nc = (int)(R - c0 < max_nc ? R - c0 : max_nc);
                j->kt->kernel(hd, kb + (j0 + i0) * k->nb[1], k->nb[1], nr, qc + c0 * j->qrow, j->qrow, nc,
                              sc + c0 * PL_ATTQ_JB + i0, PL_ATTQ_JB);
            }
        }
        for (int64_t r = 0; r < R; r++) {
            float *e = sc + r * PL_ATTQ_JB;
            /* the row's own causal end: weight +0 past it (a block's earlier tokens) */
            const int64_t pr = pl_att_i32(node->src[3], t0 + r / G);
            const int64_t nr_ = pr + 1 - j0 < 0 ? 0 : pr + 1 - j0 < n ? pr + 1 - j0 : n;
            for (int64_t i = 0; i < nr_; i++) e[i] *= j->scale;
            if (nr_ > 0) pl_att_scan(j->avx2, e, flags, nr_, &M[r], &S[r]);
            for (int64_t i = nr_; i < n; i++) e[i] = 0.0f;
        }
        const char *vt = vb + j0 * v->nb[1];
#if PL_CPU_HAVE_AVX2_BUILD
        if (j->v512 && R > 2 && j->vtile && hd <= 128) {   /* the tile kernel's head sizes */
            /* a prefill block: the V tile decoded once to f32 (the same
             * values as decoding in registers), then read by every pair of
             * rows from L1 -- decoding it per pair of rows was 2/3 of the
             * q8_0 prefill's time (pp512 @ d4096) */
            if (!pl_cpu_attq_vdecode_avx512(v->dtype, vt, v->nb[1], n, hd, vtile))
                for (int64_t i = 0; i < n; i++) {
                    const float *vr = pl_attq_vrow(v->dtype, vt + i * v->nb[1], vtile + i * hd, hd, true);
                    if (vr != vtile + i * hd) memcpy(vtile + i * hd, vr, (size_t)hd * sizeof(float));
                }
            if (pl_cpu_attq_vstep_avx512((int)R, sc, PL_ATTQ_JB, n, PL_F32, (const char *)vtile, (size_t)hd * 4, hd,
                                         acc))
                continue;
        }
        if (j->v512 && pl_cpu_attq_vstep_avx512((int)R, sc, PL_ATTQ_JB, n, v->dtype, vt, v->nb[1], hd, acc)) continue;
#endif
        pl_attq_vstep(j, R, sc, n, vt, v->nb[1], vf, acc);
    }
    if (slot) {   /* the chunk's partial (cpu_attention_split.h; one token); the combine normalises and rotates */
        const int64_t H = j->n_kv_head * G;
        memcpy(slot + g * G * hd, acc, (size_t)(G * hd) * sizeof(float));
        memcpy(slot + H * hd + g * G, M, (size_t)G * sizeof(float));
        memcpy(slot + H * hd + H + g * G, S, (size_t)G * sizeof(float));
        return;
    }
    for (int64_t r = 0; r < R; r++) {
        const int64_t t = t0 + r / G;
        float *out = (float *)((char *)dst->data + t * dst->nb[1]) + (g * G + r % G) * hd;
        const float inv = S[r] == 0.0f ? 0.0f : 1.0f / S[r];
        for (int64_t d = 0; d < hd; d++) out[d] = acc[r * hd + d] * inv;
        if (v_rot) pl_cpu_hadamard_rows(out, hd, v_rot);
    }
}

static void pl_attq_run(const pl_attq_job *j, int64_t task, char *scr) {
    if (j->block) {   /* KV-head-major; a block of tokens split into runs of one slot */
        const int64_t g = task / j->n_blocks, b = task % j->n_blocks;
        const int64_t t_lo = b * j->tb, t_hi = t_lo + j->tb < j->n_tok ? t_lo + j->tb : j->n_tok;
        for (int64_t t0 = t_lo; t0 < t_hi;) {
            const int32_t sq = pl_att_i32(j->node->src[4], t0);
            int64_t t1 = t0 + 1;
            while (t1 < t_hi && pl_att_i32(j->node->src[4], t1) == sq) t1++;
            pl_attq_rows(j, t0, t1, g, 0, 1, NULL, scr);
            t0 = t1;
        }
        return;
    }
    int64_t t, g, c, nch;
    float *slot;
    pl_att_split_task(j->split, task, &t, &g, &c, &nch, &slot);
    pl_attq_rows(j, t, t + 1, g, c, nch, slot, scr);
}

static void pl_attq_task(void *arg, int ith, int nth) {
    pl_attq_job *j = arg;
    char *scr = j->scratch + (size_t)ith * j->per_thread;
    /* from the last task backwards: the longest tokens first */
    for (int64_t id = atomic_fetch_add_explicit(&j->next, 1, memory_order_relaxed); id < j->n_tasks;
         id = atomic_fetch_add_explicit(&j->next, 1, memory_order_relaxed))
        pl_attq_run(j, j->n_tasks - 1 - id, scr);
    (void)nth;
}

static pl_status pl_att_quant(pl_exec_ctx *ctx, const pl_node *node) {
    const pl_tensor *q = node->src[0], *k = node->src[1], *v = node->src[2];
    for (int i = 1; i <= 2; i++) {
        const pl_dtype t = node->src[i]->dtype;
        if (t != PL_F16 && t != PL_F32 && !pl_att_quant_dtype(t))
            return pl_errorf(PL_ERR_UNSUPPORTED, "attention (cpu): no %s cache", pl_dtype_name(t));
    }
    pl_attq_job job;
    memset(&job, 0, sizeof job);
    job.node = node;
    job.kt = pl_cpu_mm_type_get(k->dtype);
    if (!job.kt || !job.kt->kernel || q->ne[0] % 32 || (v->dtype != PL_F32 && !pl_can_dequantize(v->dtype)))
        return pl_errorf(PL_ERR_UNSUPPORTED, "attention (cpu): no kernel for a %s/%s cache at head_dim %lld",
                         pl_dtype_name(k->dtype), pl_dtype_name(v->dtype), (long long)q->ne[0]);
    job.hd = q->ne[0];
    job.n_tok = q->ne[2];
    job.n_kv_head = node->iparams[0];
    job.group = q->ne[1] / job.n_kv_head;
    job.qrow = pl_attq_qrow(job.kt, job.hd);
    job.per_thread = pl_attq_per_thread(node);
    job.scale = node->fparams[0];
    job.avx2 = PL_CPU_HAVE_AVX2_BUILD && pl_cpu_has_avx2();
    static int sw_v512 = -1, sw_split = -1;
    if (sw_v512 < 0) sw_v512 = pl_cpu_switch("PL_CPU_ATTQ_V512"), sw_split = pl_cpu_switch("PL_CPU_ATT_SPLIT");
    job.v512 = job.avx2 && sw_v512 && pl_cpu_has_vnni512();
    static int sw_block = -1, sw_tile = -1;
    if (sw_block < 0) sw_block = pl_cpu_switch("PL_CPU_ATTQ_BLOCK"), sw_tile = pl_cpu_switch("PL_CPU_ATTQ_TILE");
    job.vtile = pl_cpu_attq_tile_mode >= 0 ? pl_cpu_attq_tile_mode > 0 : sw_tile;
    job.vtile_off = pl_attq_base(node);
#if PL_CPU_HAVE_AVX2_BUILD
    /* the VNNI kernel gives pl_cpu_mm_q8_0_avx2's bits: only in its place */
    job.qk = job.vtile && job.v512 && k->dtype == PL_Q8_0 && job.kt->kernel == pl_cpu_mm_q8_0_avx2 && job.hd <= 128;
    static int sw_dec = -1, sw_exp16 = -1;
    if (sw_dec < 0) sw_dec = pl_cpu_switch("PL_CPU_ATTQ_DEC"), sw_exp16 = pl_cpu_switch("PL_CPU_ATTQ_EXP16");
    job.exp16 = pl_cpu_attq_exp16_mode >= 0 ? pl_cpu_attq_exp16_mode > 0 : sw_exp16;
    job.qkd = (pl_cpu_attq_dec_mode >= 0 ? pl_cpu_attq_dec_mode > 0 : sw_dec) && job.v512 && k->dtype == PL_Q8_0 &&
              job.kt->kernel == pl_cpu_mm_q8_0_avx2 && job.hd <= 128;
#endif
    const int nth = ctx && ctx->pool ? pl_threadpool_size(ctx->pool) : 1;
    const int use = nth > 1 ? nth : 1;
    pl_cpu_scratch scratch;
    job.block = sw_block && job.n_tok >= PL_ATT_ONLINE_TOK && !node->iparams[1] && node->iparams[4] <= 0;
    if (job.block) {
        job.tb = pl_attq_tb(job.group);
        job.n_blocks = (job.n_tok + job.tb - 1) / job.tb;
        job.n_tasks = job.n_blocks * job.n_kv_head;
        PL_TRY(pl_cpu_scratch_get(ctx, job.per_thread * (size_t)use, &scratch));
        job.scratch = scratch.ptr;
        atomic_init(&job.next, 0);
        if (use > 1) pl_threadpool_run_elastic(ctx->pool, pl_attq_task, &job);
        else pl_attq_task(&job, 0, 1);
        pl_cpu_scratch_release(&scratch);
        return PL_OK;
    }
    /* the threads' scratch, then the split's prefixes and partial slots (planned: pl_cpu_work_attention) */
    const bool split_on = pl_cpu_att_split_mode >= 0 ? pl_cpu_att_split_mode > 0 : sw_split;
    const size_t thr_bytes = pl_att_round64(job.per_thread * (size_t)use);
    PL_TRY(pl_cpu_scratch_get(ctx, thr_bytes + pl_att_split_bytes(node, split_on), &scratch));
    job.scratch = scratch.ptr;
    pl_att_split split;
    pl_att_split_init(&split, node, job.n_kv_head, split_on, (char *)scratch.ptr + thr_bytes);
    job.split = &split;
    const pl_tensor *dst = node->dst;
    for (int64_t t0 = 0; t0 < job.n_tok; t0 = split.t1) {
        pl_att_split_round(&split, t0);
        job.n_tasks = split.n_tasks;
        atomic_init(&job.next, 0);
        if (use > 1 && job.n_tasks > 1) pl_threadpool_run_elastic(ctx->pool, pl_attq_task, &job);
        else pl_attq_task(&job, 0, 1);
        pl_att_split_combine(&split);
        if (node->iparams[3])   /* the split tokens' V rotation, after their combine */
            for (int64_t t = split.t0; t < split.t1; t++) {
                if (split.slot_pref[t - split.t0 + 1] - split.slot_pref[t - split.t0] < 2) continue;
                float *out = (float *)((char *)dst->data + t * dst->nb[1]);
                for (int64_t h = 0; h < q->ne[1]; h++) pl_cpu_hadamard_rows(out + h * job.hd, job.hd, node->iparams[3]);
            }
    }
    pl_cpu_scratch_release(&scratch);
    return PL_OK;
}

static size_t pl_att_per_thread(const pl_node *node) {
    const size_t n_ctx = (size_t)node->src[1]->ne[1], hd = (size_t)node->src[0]->ne[0];
    const int n_kv_head = node->iparams[0] > 0 ? node->iparams[0] : 1;
    const int64_t group = node->src[0]->ne[1] / n_kv_head > 0 ? node->src[0]->ne[1] / n_kv_head : 1;
    const size_t rows = (size_t)(pl_att_tb(group) * group);
    size_t sz = (rows * (n_ctx + hd)) * sizeof(float) + n_ctx;
#if PL_CPU_HAVE_AVX2_BUILD
    if (pl_att_use_flash(node)) {
        const size_t f = pl_cpu_att_flash_scratch((int)(pl_att_flash_tb(group) * group), (int64_t)hd);
        if (f > sz) sz = f;
    }
    if (pl_att_blocked_shape(node)) {
        const int64_t most = PL_ATT_BLOCK_ROWS / group * group, nh = node->src[0]->ne[1];
        const size_t b = pl_att_block_scratch(nh < most ? nh : most, (int64_t)hd);
        if (b > sz) sz = b;
    }
#endif
    return (sz + 63) & ~(size_t)63;
}

size_t pl_cpu_work_attention(const pl_node *node, int n_threads) {
    if (!node->src[0] || !node->src[1] || !node->src[2]) return 0;
    const size_t per = pl_att_is_quant(node) ? pl_attq_per_thread(node) : pl_att_per_thread(node);
    /* the threads' scratch, then the decode split's memory (its most: split on) */
    return pl_att_round64(per * (size_t)(n_threads < 1 ? 1 : n_threads)) + pl_att_split_bytes(node, true) + 64;
}

/* The blocked path's driver: rounds of tokens (their chunk partials fit
 * the split's slots), each a parallel run of its tasks then the combine in
 * chunk order. */
static pl_status pl_att_blocked_run(pl_exec_ctx *ctx, pl_att_job *job, int nth, bool split_on) {
    /* the threads' scratch, then the split's prefixes and partial slots (planned: pl_cpu_work_attention) */
    const int use = nth > 1 ? nth : 1;
    const size_t thr_bytes = pl_att_round64(job->per_thread * (size_t)use);
    pl_cpu_scratch scratch;
    PL_TRY(pl_cpu_scratch_get(ctx, thr_bytes + pl_att_split_bytes(job->node, split_on), &scratch));
    job->scratch = scratch.ptr;
    pl_att_split split;
    pl_att_split_init(&split, job->node, (job->n_kv_head + job->kvb - 1) / job->kvb, split_on, (char *)scratch.ptr + thr_bytes);
    job->split = &split;
    for (int64_t t0 = 0; t0 < job->n_tok; t0 = split.t1) {
        pl_att_split_round(&split, t0);
        job->n_tasks = split.n_tasks;
        atomic_init(&job->next, 0);
        if (use > 1 && job->n_tasks > 1) pl_threadpool_run_elastic(ctx->pool, pl_att_task, job);
        else pl_att_task(job, 0, 1);
        pl_att_split_combine(&split);
    }
    pl_cpu_scratch_release(&scratch);
    return PL_OK;
}

pl_status pl_cpu_op_attention(pl_exec_ctx *ctx, const pl_node *node) {
    const pl_tensor *q = node->src[0], *k = node->src[1], *v = node->src[2];
    const pl_tensor *pos = node->src[3], *seq = node->src[4];
    const bool quant = pl_att_is_quant(node);
    if (!quant && ((k->dtype != PL_F16 && k->dtype != PL_F32) || v->dtype != k->dtype))
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
    if (quant) return pl_att_quant(ctx, node);
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
    job.avx512 = job.avx2 && pl_cpu_has_vnni512();
    static int sw_fa = -1, sw_flash = -1, sw_block = -1;
    if (sw_fa < 0)
        sw_fa = pl_cpu_switch("PL_CPU_FA"), sw_flash = pl_cpu_switch("PL_CPU_FLASH"),
        sw_block = pl_cpu_switch("PL_CPU_ATT_BLOCK");
    /* iparams[1]: batch-invariant (the server): every batch takes the decode
     * path, so a token's result never depends on what it was batched with. */
    job.online = sw_fa && (job.n_tok < PL_ATT_ONLINE_TOK || node->iparams[1]);
    /* the tiled kernel has no window: sliding-window layers take the blocked path */
    job.flash = sw_flash && !job.online && node->iparams[4] <= 0 && pl_att_use_flash(node);
    job.per_thread = pl_att_per_thread(node);
    job.tb = job.flash ? pl_att_flash_tb(job.group) : pl_att_tb(job.group);
    job.n_blocks = (job.n_tok + job.tb - 1) / job.tb;
    job.n_tasks = job.n_blocks * n_kv_head;
    const bool blocked_on = pl_cpu_att_blocked_mode >= 0 ? pl_cpu_att_blocked_mode > 0 : sw_block;
    if (job.online && blocked_on && job.avx2 && pl_att_blocked_shape(node)) {
        /* all KV heads of a token in one task (as many as a task holds):
         * whole cache rows. Splitting a token's heads between threads makes
         * each read part of every row, which the prefetchers follow badly
         * (0.6B shapes, depth 2048, 2 threads, per layer against the
         * per-head tasks: one task 0.70x the time, two tasks of four heads
         * 0.91x with software prefetch and 1.38x without). Threads take
         * different tokens. */
        const int64_t most = PL_ATT_BLOCK_ROWS / job.group;
        job.kvb = n_kv_head < most ? n_kv_head : most;
        job.blocked = true;
        static int sw_zmm = -1;
        if (sw_zmm < 0) sw_zmm = pl_cpu_switch("PL_CPU_ATT_ZMM");
        job.zmm = job.avx512 && (pl_cpu_att_zmm_mode >= 0 ? pl_cpu_att_zmm_mode > 0 : sw_zmm);
        /* at depth, each token's positions in chunks (cpu_attention_split.h):
         * a decode token's attention spreads over the threads */
        static int sw_split = -1;
        if (sw_split < 0) sw_split = pl_cpu_switch("PL_CPU_ATT_SPLIT");
        return pl_att_blocked_run(ctx, &job, nth, pl_cpu_att_split_mode >= 0 ? pl_cpu_att_split_mode > 0 : sw_split);
    }
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
