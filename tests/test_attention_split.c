/*
 * Decode attention split over the cache positions (cpu_attention_split.h):
 *   - a decode token at depth (several chunks of PL_ATT_CHUNK positions,
 *     with and without a sliding window) gives the same bits on 1, 2 and 4
 *     threads, and the same bits alone as in a batch with tokens of other
 *     sequences at other depths (the server's batch invariance);
 *   - the split is taken: at depth its result differs from the unsplit
 *     one (the combine rounds differently), both near ref;
 *   - at most PL_ATT_CHUNK positions the split changes nothing (one chunk:
 *     llama.cpp's decode steps, bit for bit, which the goldens check);
 *   - the same for the quantized (q8_0, q4_0) cache path, with and without
 *     the Hadamard rotation (the split tokens' V rotation after the combine),
 *     and its prefill (token blocks) against ref;
 *   - the prefill tiles (PL_CPU_ATTQ_TILE) on against off, and against ref;
 *   - the decode q8_0 scores with VNNI (PL_CPU_ATTQ_DEC) on against off, bit
 *     for bit, the kernel alone against the q8_0 matmul tile kernel;
 *   - the blocked path's zmm kernels (PL_CPU_ATT_ZMM: the scores, and the V
 *     recurrence in registers) against the AVX2 ones, bit for bit.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "testutil.h"
#include "ophelpers.h"
#include "cpu_ctx.h"
#include "backends/cpu/cpu_attention_split.h"
#include "backends/cpu/cpu_internal.h"
#include "core/fp16.h"
#include "graph/graph.h"
#include "kernels/abi.h"
#include "quant/hadamard.h"
#include "quant/quant.h"

extern const pl_backend pl_backend_cpu;

/* Qwen3-0.6B attention shapes: hd 128, 16 query heads, 8 KV heads. */
enum { HD = 128, NH = 16, NKV = 8, KVD = NKV * HD, NSEQ = 3 };

typedef struct att_case {
    pl_dtype cache;
    int64_t n_ctx;
    char *kc, *vc;
    float *q;            /* NH x HD x 3 tokens */
    size_t row;          /* bytes per cache row (all KV heads) */
} att_case;

static att_case make_case(pl_dtype cache, int64_t n_ctx, uint64_t seed) {
    att_case c = {.cache = cache, .n_ctx = n_ctx};
    pl_rng r = {seed};
    c.row = pl_dtype_row_size(cache, KVD);
    c.kc = malloc(c.row * (size_t)(n_ctx * NSEQ));
    c.vc = malloc(c.row * (size_t)(n_ctx * NSEQ));
    c.q = malloc(sizeof(float) * HD * NH * 3);
    pl_fill_normal(&r, c.q, HD * NH * 3, 1.0f);
    float tmp[KVD];
    for (int64_t i = 0; i < n_ctx * NSEQ; i++) {
        pl_fill_normal(&r, tmp, KVD, 2.0f);
        pl_quantize_row(cache, tmp, c.kc + (size_t)i * c.row, KVD);
        pl_fill_normal(&r, tmp, KVD, 1.0f);
        pl_quantize_row(cache, tmp, c.vc + (size_t)i * c.row, KVD);
    }
    return c;
}

static void free_case(att_case *c) { free(c->kc); free(c->vc); free(c->q); }

/* Runs nt tokens (query rows 0..nt-1 of c.q) at pos / seq on backend b
 * (NULL: cpu with nth threads) into out [nt][NH*HD]. */
static int g_rot;   /* the Hadamard rotation of K and V (quantized caches): iparams[2], [3] */

static void run_att(const att_case *c, int nt, const int32_t *pos, const int32_t *seq, int window, const char *be,
                    int nth, float *out) {
    pl_tensor tq, tk, tv, tp, ts, td;
    pl_tensor_init(&tq, PL_F32, 3, (int64_t[]){HD, NH, nt}, c->q);
    pl_tensor_init(&tk, c->cache, 3, (int64_t[]){KVD, c->n_ctx, NSEQ}, c->kc);
    pl_tensor_init(&tv, c->cache, 3, (int64_t[]){KVD, c->n_ctx, NSEQ}, c->vc);
    pl_tensor_init(&tp, PL_I32, 1, (int64_t[]){nt}, (void *)pos);
    pl_tensor_init(&ts, PL_I32, 1, (int64_t[]){nt}, (void *)seq);
    pl_tensor_init(&td, PL_F32, 2, (int64_t[]){HD * NH, nt}, out);
    pl_node nd = {.op = PL_OP_ATTENTION, .src = {&tq, &tk, &tv, &tp, &ts}, .dst = &td};
    nd.iparams[0] = NKV;
    nd.iparams[4] = window;
    nd.iparams[2] = nd.iparams[3] = g_rot;
    nd.fparams[0] = 1.0f / sqrtf((float)HD);
    memset(out, 0xff, sizeof(float) * HD * NH * (size_t)nt);
    if (be) {
        const pl_backend *ref = pl_backend_find(be);
        pl_exec_ctx *ctx = NULL;
        CHECK(ref->ctx_create(1, &ctx) == PL_OK, "ref ctx");
        CHECK(run_on(ref, ctx, &nd) == PL_OK, "ref attention");
        ref->ctx_free(ctx);
        return;
    }
    const pl_kernel *k = pl_backend_lookup(&pl_backend_cpu, PL_OP_ATTENTION, pl_node_key_dtype(&nd));
    pl_exec_ctx *ctx = cpu_ctx(nth, k->work_size(&nd, nth));
    CHECK(run_on(&pl_backend_cpu, ctx, &nd) == PL_OK, "cpu attention %s, %d threads", pl_dtype_name(c->cache), nth);
    cpu_ctx_free(ctx);
}

/* Token 0 at position p of slot 0 (window w): alone on 1 / 2 / 4 threads,
 * and as token 1 of a batch with tokens of slots 1 and 2 at other depths. */
static void check_case(pl_dtype cache, int32_t p, int window, double nmse_max) {
    const int64_t n_ctx = p + 700;
    att_case c = make_case(cache, n_ctx, (uint64_t)(p * 31 + window + cache));
    const size_t tok = (size_t)HD * NH;
    float *ref = malloc(tok * 4), *one[3], *batch = malloc(3 * tok * 4), *unsplit = malloc(tok * 4);
    const int32_t pos1[1] = {p}, seq1[1] = {0};
    run_att(&c, 1, pos1, seq1, window, "ref", 1, ref);
    const int threads[3] = {1, 2, 4};
    for (int i = 0; i < 3; i++) {
        one[i] = malloc(tok * 4);
        run_att(&c, 1, pos1, seq1, window, NULL, threads[i], one[i]);
        CHECK(memcmp(one[i], one[0], tok * 4) == 0, "%s p=%d w=%d: %d threads == 1 thread bit for bit",
              pl_dtype_name(cache), p, window, threads[i]);
    }
    /* the same query row as token 1 of a batch: query rows are per token,
     * so put it there */
    float *q0 = c.q;
    float *qb = malloc(3 * tok * 4);
    memcpy(qb, q0 + tok, tok * 4);
    memcpy(qb + tok, q0, tok * 4);
    memcpy(qb + 2 * tok, q0 + 2 * tok, tok * 4);
    c.q = qb;
    const int32_t posb[3] = {p + 517, p, 37}, seqb[3] = {1, 0, 2};
    for (int nth = 1; nth <= 2; nth++) {
        run_att(&c, 3, posb, seqb, window, NULL, nth, batch);
        CHECK(memcmp(batch + tok, one[0], tok * 4) == 0, "%s p=%d w=%d: in a batch of 3 (%d threads) == alone",
              pl_dtype_name(cache), p, window, nth);
    }
    c.q = q0;
    free(qb);
    const double e = pl_nmse(one[0], ref, (int64_t)tok);
    CHECK(e < nmse_max, "%s p=%d w=%d: nmse %g vs ref", pl_dtype_name(cache), p, window, e);
    pl_cpu_att_split_mode = 0;
    run_att(&c, 1, pos1, seq1, window, NULL, 2, unsplit);
    pl_cpu_att_split_mode = -1;
    const int64_t n = (int64_t)p + 1 - (window > 0 && p - window + 1 > 0 ? p - window + 1 : 0);
    const bool same = memcmp(unsplit, one[0], tok * 4) == 0;
    if (n <= PL_ATT_CHUNK)
        CHECK(same, "%s p=%d w=%d: one chunk == unsplit bit for bit", pl_dtype_name(cache), p, window);
    else
        CHECK(!same, "%s p=%d w=%d: %lld positions are split (differs from the unsplit rounding)",
              pl_dtype_name(cache), p, window, (long long)n);
    /* the unsplit f16 accumulator rounds over all positions: a looser bound */
    const double eu = pl_nmse(unsplit, ref, (int64_t)tok);
    CHECK(eu < 4 * nmse_max, "%s p=%d w=%d: unsplit nmse %g vs ref", pl_dtype_name(cache), p, window, eu);
    for (int i = 0; i < 3; i++) free(one[i]);
    free(ref); free(batch); free(unsplit);
    free_case(&c);
}

/* Prefill through the quantized-cache path (a batch of >= 64 tokens: tasks
 * of token blocks x KV head, each row with its own causal end): nt tokens of
 * slot 0 from position p0, then 9 of slot 1 at decreasing positions 24..0, against ref, on 1 and 2
 * threads (the same bits). */
static void check_prefill(pl_dtype cache, int nt, int32_t p0, double nmse_max) {
    att_case c = make_case(cache, p0 + nt + 16, (uint64_t)(nt * 7 + p0));
    const int ntot = nt + 9;
    float *q3 = c.q;
    c.q = malloc(sizeof(float) * HD * NH * (size_t)ntot);
    pl_rng r = {(uint64_t)p0};
    pl_fill_normal(&r, c.q, HD * NH * ntot, 1.0f);
    int32_t *pos = malloc(sizeof(int32_t) * (size_t)ntot), *seq = malloc(sizeof(int32_t) * (size_t)ntot);
    for (int t = 0; t < ntot; t++) {
        seq[t] = t >= nt;
        pos[t] = t >= nt ? (ntot - 1 - t) * 3 : p0 + t;   /* slot 1: decreasing positions */
    }
    const size_t sz = sizeof(float) * HD * NH * (size_t)ntot;
    float *ref = malloc(sz), *o1 = malloc(sz), *o2 = malloc(sz);
    run_att(&c, ntot, pos, seq, 0, "ref", 1, ref);
    run_att(&c, ntot, pos, seq, 0, NULL, 1, o1);
    run_att(&c, ntot, pos, seq, 0, NULL, 2, o2);
    CHECK(memcmp(o1, o2, sz) == 0, "%s prefill %d from %d: 2 threads == 1", pl_dtype_name(cache), nt, p0);
    const double e = pl_nmse(o1, ref, (int64_t)HD * NH * ntot);
    CHECK(e < nmse_max, "%s prefill %d from %d (rot %d): nmse %g vs ref", pl_dtype_name(cache), nt, p0, g_rot, e);
    free(ref); free(o1); free(o2); free(pos); free(seq);
    free(c.q);
    c.q = q3;
    free_case(&c);
}

/* The prefill tiles (PL_CPU_ATTQ_TILE: each V tile decoded once, q8_0 K
 * scores with VNNI, where the CPU has AVX-512) against the path without
 * them, on random inputs: the same bits (the same float operations in the
 * same order; NMSE and NaN checked first, so a broken kernel says how far
 * off it is), and both near ref. nt tokens of slot 0 from p0 (a last K tile
 * of (p0 + nt) % 64 positions), 9 of slot 1 at decreasing positions. */
static void check_tiles(pl_dtype cache, int nt, int32_t p0, double nmse_max) {
    att_case c = make_case(cache, p0 + nt + 16, (uint64_t)(nt * 13 + p0 + 5));
    const int ntot = nt + 9;
    float *q3 = c.q;
    c.q = malloc(sizeof(float) * HD * NH * (size_t)ntot);
    pl_rng r = {(uint64_t)p0 + 99};
    pl_fill_normal(&r, c.q, HD * NH * ntot, 1.0f);
    int32_t *pos = malloc(sizeof(int32_t) * (size_t)ntot), *seq = malloc(sizeof(int32_t) * (size_t)ntot);
    for (int t = 0; t < ntot; t++) {
        seq[t] = t >= nt;
        pos[t] = t >= nt ? (ntot - 1 - t) * 3 : p0 + t;
    }
    const int64_t n = (int64_t)HD * NH * ntot;
    const size_t sz = sizeof(float) * (size_t)n;
    float *ref = malloc(sz), *on = malloc(sz), *off = malloc(sz), *on2 = malloc(sz);
    run_att(&c, ntot, pos, seq, 0, "ref", 1, ref);
    pl_cpu_attq_tile_mode = 1;
    run_att(&c, ntot, pos, seq, 0, NULL, 1, on);
    run_att(&c, ntot, pos, seq, 0, NULL, 2, on2);
    pl_cpu_attq_tile_mode = 0;
    run_att(&c, ntot, pos, seq, 0, NULL, 1, off);
    pl_cpu_attq_tile_mode = -1;
    int nan = 0;
    for (int64_t i = 0; i < n; i++) nan += isnan(on[i]) || isnan(off[i]);
    CHECK(nan == 0, "%s tiles %d from %d (rot %d): %d NaN", pl_dtype_name(cache), nt, p0, g_rot, nan);
    const double e = pl_nmse(on, off, n);
    CHECK(e < 1e-12, "%s tiles %d from %d (rot %d): on vs off nmse %g", pl_dtype_name(cache), nt, p0, g_rot, e);
    CHECK(memcmp(on, off, sz) == 0, "%s tiles %d from %d (rot %d): on == off bit for bit", pl_dtype_name(cache), nt,
          p0, g_rot);
    CHECK(memcmp(on, on2, sz) == 0, "%s tiles %d from %d: 2 threads == 1", pl_dtype_name(cache), nt, p0);
    const double er = pl_nmse(on, ref, n);
    CHECK(er < nmse_max, "%s tiles %d from %d (rot %d): nmse %g vs ref", pl_dtype_name(cache), nt, p0, g_rot, er);
    free(ref); free(on); free(off); free(on2); free(pos); free(seq);
    free(c.q);
    c.q = q3;
    free_case(&c);
}

#if PL_CPU_HAVE_AVX2_BUILD
#include "backends/cpu/cpu_attention_quant.h"
/* Random q8_0 K rows (n rows of kvd, stride ks) and R query rows of hd
 * converted as the driver converts them (qrow apart), from one seed. */
static void fill_q8_kq(uint64_t seed, char *k, size_t ks, int64_t kvd, int64_t n, char *qc, size_t qrow, int64_t hd,
                       int R) {
    float *x = malloc(sizeof(float) * (size_t)kvd);
    pl_rng r = {seed};
    for (int64_t j = 0; j < n; j++) {
        pl_fill_normal(&r, x, kvd, 2.0f);
        pl_quantize_row(PL_Q8_0, x, k + j * ks, kvd);
    }
    for (int i = 0; i < R; i++) {
        pl_fill_normal(&r, x, hd, 1.0f);
        pl_cpu_quantize_q8_0_avx2(x, qc + i * qrow, hd);
    }
    free(x);
}

/* The VNNI score kernel alone against the q8_0 matmul tile kernel it stands
 * in for, bit for bit: R query rows (odd R: the last pair half used) x n K
 * rows (n % 4: the one-row tiles), K rows of a wider cache row (stride). */
static void check_qk_kernel(int R, int64_t n, int64_t hd) {
    if (!pl_cpu_has_vnni512()) return;
    const int64_t nb = hd / 32, kvd = 3 * hd;   /* the head slice inside a row of 3 heads */
    const size_t ks = (size_t)(kvd / 32) * sizeof(block_q8_0), qrow = (size_t)nb * sizeof(block_q8_0);
    char *k = malloc(ks * (size_t)n), *qc = malloc(qrow * (size_t)R);
    fill_q8_kq((uint64_t)(R * 1000 + n), k, ks, kvd, n, qc, qrow, hd, R);
    const int64_t ldT = (R + 15) & ~15;
    void *qpack = malloc(pl_cpu_attq_qk_qpack_size(R, hd)), *kpack = malloc(pl_cpu_attq_qk_kpack_size(n, hd));
    float *sT = malloc(sizeof(float) * (size_t)(ldT * n)), *want = malloc(sizeof(float) * (size_t)(R * n));
    const char *kh = k + (size_t)nb * sizeof(block_q8_0);   /* head 1 of each row */
    pl_cpu_attq_qk_prepare(R, qc, qrow, hd, qpack);
    pl_cpu_attq_qk_scores(R, qpack, kh, ks, n, hd, kpack, sT, ldT);
    for (int64_t j = 0; j < n; j++)
        for (int c0 = 0; c0 < R; c0 += 4)   /* the kernel's tile: up to 4 activation rows */
            pl_cpu_mm_q8_0_avx2(hd, kh + j * ks, ks, 1, qc + c0 * qrow, qrow, R - c0 < 4 ? R - c0 : 4,
                                want + c0 * n + j, (size_t)n);
    int bad = 0;
    for (int i = 0; i < R; i++)
        for (int64_t j = 0; j < n; j++) bad += memcmp(&sT[j * ldT + i], &want[i * n + j], sizeof(float)) != 0;
    CHECK(bad == 0, "qk kernel R=%d n=%lld hd=%lld: %d of %lld scores differ from pl_cpu_mm_q8_0_avx2", R,
          (long long)n, (long long)hd, bad, (long long)(R * n));
    free(k); free(qc); free(qpack); free(kpack); free(sT); free(want);
}
#endif

#if PL_CPU_HAVE_AVX2_BUILD
/* The decode score kernel alone (pl_cpu_attq_qk_dec: R = 1 or 2 query rows)
 * against pl_cpu_mm_q8_0_avx2, bit for bit: n K rows (n % 4: the one-row
 * tail) of a wider cache row (stride), every head size it takes; the scores
 * land in rows of ldS with a guard left untouched past n. */
static void check_qkd_kernel(int R, int64_t n, int64_t hd) {
    if (!pl_cpu_has_vnni512()) return;
    const int64_t nb = hd / 32, kvd = 3 * hd, ldS = n + 3;
    const size_t ks = (size_t)(kvd / 32) * sizeof(block_q8_0), qrow = (size_t)nb * sizeof(block_q8_0);
    char *k = malloc(ks * (size_t)n), *qc = malloc(qrow * (size_t)R);
    fill_q8_kq((uint64_t)(R * 7777 + n + hd), k, ks, kvd, n, qc, qrow, hd, R);
    void *qpack = malloc(pl_cpu_attq_qk_qpack_size(R, hd));
    float *got = malloc(sizeof(float) * (size_t)(R * ldS)), *want = malloc(sizeof(float) * (size_t)(R * n));
    for (int64_t i = 0; i < R * ldS; i++) got[i] = -7.0f;
    const char *kh = k + (size_t)(2 * nb) * sizeof(block_q8_0);   /* head 2 of each row */
    pl_cpu_attq_qk_prepare(R, qc, qrow, hd, qpack);
    CHECK(pl_cpu_attq_qk_dec(R, qpack, kh, ks, n, hd, got, ldS), "qkd kernel R=%d hd=%lld taken", R, (long long)hd);
    for (int64_t j = 0; j < n; j++)
        pl_cpu_mm_q8_0_avx2(hd, kh + j * ks, ks, 1, qc, qrow, R, want + j, (size_t)n);
    int bad = 0, guard = 0;
    for (int i = 0; i < R; i++) {
        for (int64_t j = 0; j < n; j++) bad += memcmp(&got[i * ldS + j], &want[i * n + j], sizeof(float)) != 0;
        for (int64_t j = n; j < ldS; j++) guard += got[i * ldS + j] != -7.0f;
    }
    CHECK(bad == 0, "qkd kernel R=%d n=%lld hd=%lld: %d of %lld scores differ from pl_cpu_mm_q8_0_avx2", R,
          (long long)n, (long long)hd, bad, (long long)(R * n));
    CHECK(guard == 0, "qkd kernel R=%d n=%lld hd=%lld: %d writes past n", R, (long long)n, (long long)hd, guard);
    CHECK(!pl_cpu_attq_qk_dec(3, qpack, kh, ks, n, hd, got, ldS), "qkd kernel refuses R=3");
    free(k); free(qc); free(qpack); free(got); free(want);
}
#endif

#if PL_CPU_HAVE_AVX2_BUILD
/* The scan's 16-lane exp (pl_exp8's operations on a zmm) against two
 * pl_exp8 calls, bit for bit: random arguments over the scan's range and
 * past the clamps, exact integers, halves, -0, +-inf, NaN. */
static void check_exp16(void) {
    if (!pl_cpu_has_vnni512()) return;
    enum { N = 4096 };
    float *x = malloc(sizeof(float) * N), *a = malloc(sizeof(float) * N), *b = malloc(sizeof(float) * N);
    pl_rng r = {4242};
    pl_fill_normal(&r, x, N, 30.0f);
    for (int i = 0; i < 200; i++) x[i] = -(float)i * 0.5f;   /* halves: n = x * log2(e) near ties */
    for (int i = 200; i < 300; i++) x[i] = ldexpf(1.0f, i - 250);
    x[300] = -0.0f; x[301] = INFINITY; x[302] = -INFINITY; x[303] = NAN; x[304] = -87.3f; x[305] = 88.0f;
    x[306] = -1e30f; x[307] = 1e30f; x[308] = 1e-40f;
    pl_cpu_attq_exp16(x, a, N, true);
    pl_cpu_attq_exp16(x, b, N, false);
    int bad = 0;
    for (int i = 0; i < N; i++) bad += memcmp(&a[i], &b[i], sizeof(float)) != 0;
    CHECK(bad == 0, "exp16: %d of %d differ from two pl_exp8 calls", bad, N);
    free(x); free(a); free(b);
}
#endif

#if PL_CPU_HAVE_AVX2_BUILD
/* The blocked path's zmm kernels against the AVX2 ones, bit for bit: the
 * scores (pl_cpu_att_dots_rows_avx512) and the V recurrence in registers
 * (pl_cpu_att_vkq_rows_avx512). f16 and f32 K / V, head sizes 32..256
 * (every tile width), GQA groups 2..8, blocks of 1..8 KV heads inside a
 * wider cache row, pieces of 1..64 positions, new maxima (E < 0: a rescale)
 * at the first position and scattered, accumulators carried in from an
 * earlier piece, and nothing written outside the block's rows and scores. */
static void check_rows512(int G, int group, int64_t hd, int64_t n, bool f16, uint64_t seed) {
    if (!pl_cpu_has_vnni512()) return;
    const int rows = G * group;
    const int64_t kvd = (G + 2) * hd, ldE = n + 3;
    const size_t el = f16 ? 2 : 4, vs = (size_t)kvd * el;
    char *v = malloc(vs * (size_t)n);
    float *E = malloc(sizeof(float) * (size_t)(rows * ldE)), *tmp = malloc(sizeof(float) * (size_t)kvd);
    float *A[2];
    for (int i = 0; i < 2; i++) A[i] = malloc(sizeof(float) * (size_t)((rows + 1) * hd));
    pl_rng r = {seed};
    for (int64_t j = 0; j < n; j++) {
        pl_fill_normal(&r, tmp, kvd, 1.5f);
        if (f16) pl_quantize_row(PL_F16, tmp, v + (size_t)j * vs, kvd);
        else memcpy(v + (size_t)j * vs, tmp, vs);
    }
    int rescales = 0;
    for (int i = 0; i < rows; i++)
        for (int64_t j = 0; j < n; j++) {
            const bool newmax = j == 0 || pl_rng_unif(&r) < 0.1;
            const float w = (float)pl_rng_unif(&r);
            E[i * ldE + j] = newmax ? -w : w;   /* -0.0f too: the sign bit marks it */
            rescales += newmax;
        }
    pl_fill_normal(&r, A[0], (rows + 1) * hd, 3.0f);
    if (f16)
        for (int64_t i = 0; i < rows * hd; i++) A[0][i] = pl_f16_to_f32(pl_f32_to_f16(A[0][i]));
    memcpy(A[1], A[0], sizeof(float) * (size_t)((rows + 1) * hd));
    const char *vb = v + (size_t)hd * el;   /* the block starts at KV head 1 of the row */
    pl_cpu_att_vkq_rows_avx2(G, group, E, ldE, n, vb, vs, f16, hd, A[0]);
    pl_cpu_att_vkq_rows_avx512(G, group, E, ldE, n, vb, vs, f16, hd, A[1]);
    int bad = 0, nan = 0;
    for (int64_t i = 0; i < (rows + 1) * hd; i++) {
        bad += memcmp(&A[0][i], &A[1][i], sizeof(float)) != 0;
        nan += A[1][i] != A[1][i];
    }
    CHECK(bad == 0 && nan == 0 && rescales > 0,
          "V rows in zmm (%s, %d KV heads x %d, hd %lld, %lld positions): %d of %lld differ from the AVX2 kernel, %d NaN",
          f16 ? "f16" : "f32", G, group, (long long)hd, (long long)n, bad, (long long)((rows + 1) * hd), nan);

    /* the scores: the V rows serve as K rows, A[0] as the query rows */
    const float *q[64];
    for (int i = 0; i < rows; i++) q[i] = A[0] + (int64_t)i * hd;
    float *S[2];
    for (int i = 0; i < 2; i++) {
        S[i] = malloc(sizeof(float) * (size_t)(rows * ldE));
        for (int64_t x = 0; x < rows * ldE; x++) S[i][x] = -7.0f;
    }
    const float scale = 1.0f / sqrtf((float)hd);
    pl_cpu_att_dots_rows_avx2(G, group, q, vb, vs, f16, n, hd, scale, S[0], ldE);
    pl_cpu_att_dots_rows_avx512(G, group, q, vb, vs, f16, n, hd, scale, S[1], ldE);
    int sbad = 0, snan = 0, guard = 0;
    for (int i = 0; i < rows; i++)
        for (int64_t j = 0; j < ldE; j++) {
            const float x = S[1][i * ldE + j];
            if (j >= n) { guard += x != -7.0f; continue; }
            sbad += memcmp(&S[0][i * ldE + j], &x, sizeof(float)) != 0;
            snan += x != x;
        }
    CHECK(sbad == 0 && snan == 0 && guard == 0,
          "scores on zmm (%s, %d KV heads x %d, hd %lld, %lld positions): %d differ from the AVX2 kernel, %d NaN, "
          "%d written past n", f16 ? "f16" : "f32", G, group, (long long)hd, (long long)n, sbad, snan, guard);
    free(S[0]); free(S[1]);
    free(v); free(E); free(tmp); free(A[0]); free(A[1]);
}
#endif

/* Decode through the quantized-cache path with the VNNI decode scores
 * (PL_CPU_ATTQ_DEC) on against off: token 0 at p alone (1 and 2 threads;
 * split at depth) and in a batch of 3 at other depths (tokens 1, 2 of
 * slots 1, 2), the same bits, no NaN, near ref. */
static void check_dec(pl_dtype cache, int32_t p, int window, double nmse_max) {
    att_case c = make_case(cache, p + 600, (uint64_t)(p * 17 + window + 3));
    const size_t tok = (size_t)HD * NH, sz = 3 * tok * sizeof(float);
    float *ref = malloc(sz), *on = malloc(sz), *off = malloc(sz), *on2 = malloc(sz);
    const int32_t pos[3] = {p, p + 301, 5}, seq[3] = {0, 1, 2};
    for (int nt = 1; nt <= 3; nt += 2) {
        run_att(&c, nt, pos, seq, window, "ref", 1, ref);
        pl_cpu_attq_dec_mode = 1;
        run_att(&c, nt, pos, seq, window, NULL, 1, on);
        run_att(&c, nt, pos, seq, window, NULL, 2, on2);
        pl_cpu_attq_dec_mode = 0;
        run_att(&c, nt, pos, seq, window, NULL, 1, off);
        pl_cpu_attq_dec_mode = -1;
        const int64_t n = (int64_t)tok * nt;
        int nan = 0;
        for (int64_t i = 0; i < n; i++) nan += isnan(on[i]) || isnan(off[i]);
        CHECK(nan == 0, "%s dec p=%d nt=%d (rot %d): %d NaN", pl_dtype_name(cache), p, nt, g_rot, nan);
        const double e = pl_nmse(on, off, n);
        CHECK(e < 1e-12, "%s dec p=%d nt=%d (rot %d): on vs off nmse %g", pl_dtype_name(cache), p, nt, g_rot, e);
        CHECK(memcmp(on, off, (size_t)n * sizeof(float)) == 0, "%s dec p=%d nt=%d (rot %d): on == off bit for bit",
              pl_dtype_name(cache), p, nt, g_rot);
        CHECK(memcmp(on, on2, (size_t)n * sizeof(float)) == 0, "%s dec p=%d nt=%d: 2 threads == 1",
              pl_dtype_name(cache), p, nt);
        const double er = pl_nmse(on, ref, n);
        CHECK(er < nmse_max, "%s dec p=%d nt=%d (rot %d): nmse %g vs ref", pl_dtype_name(cache), p, nt, g_rot, er);
    }
    free(ref); free(on); free(off); free(on2);
    free_case(&c);
}

/* The cpu backend's Hadamard rotation (vectorized) against the portable
 * one: the same bits, for every size llama.cpp uses and the in-register
 * spans alone (n = 8, 16), over values of very different magnitudes. */
static void check_hadamard(int n) {
    const int64_t len = 3 * (int64_t)n;
    float *a = malloc((size_t)len * sizeof *a), *b = malloc((size_t)len * sizeof *b);
    uint32_t s = 0x9E3779B9u ^ (uint32_t)n;
    for (int64_t i = 0; i < len; i++) {
        s = s * 1664525u + 1013904223u;
        const float u = (float)(s >> 8) / 16777216.0f - 0.5f;
        a[i] = b[i] = u * ldexpf(1.0f, (int)(s % 23) - 11);
    }
    pl_hadamard_rows(a, len, n);
    pl_cpu_hadamard_rows(b, len, n);
    CHECK(memcmp(a, b, (size_t)len * sizeof *a) == 0, "hadamard n=%d: the cpu rotation differs from the portable one", n);
    free(a); free(b);
}

int main(void) {
    for (int n = 8; n <= 256; n *= 2) check_hadamard(n);
    check_case(PL_F16, 300, 0, 1e-5);    /* one chunk */
    check_case(PL_F16, 511, 0, 1e-5);    /* exactly one chunk (512 positions) */
    check_case(PL_F16, 512, 0, 1e-5);    /* two chunks, the second of one position */
    check_case(PL_F16, 1300, 0, 1e-5);   /* three chunks, a tail of 277 */
    check_case(PL_F16, 2100, 700, 1e-5); /* a window: 700 positions from 1401, two chunks */
    check_case(PL_F32, 1100, 0, 1e-9);
    /* the quantized-cache path: the query rounded to q8_0, f32 V sums */
    check_case(PL_Q8_0, 300, 0, 1e-5);
    check_case(PL_Q8_0, 1300, 0, 1e-5);
    check_case(PL_Q4_0, 1100, 0, 1e-5);
    check_case(PL_Q8_0, 2100, 700, 1e-5);
    g_rot = HD;   /* llama.cpp's default rotation of quantized caches */
    check_case(PL_Q8_0, 1300, 0, 1e-5);
    check_case(PL_Q4_0, 400, 0, 1e-5);
    check_prefill(PL_Q8_0, 100, 250, 1e-5);
    check_prefill(PL_Q4_0, 70, 0, 1e-5);
    g_rot = 0;
    check_prefill(PL_Q8_0, 64, 40, 1e-5);
#if PL_CPU_HAVE_AVX2_BUILD
    check_qk_kernel(64, 64, 128);
    check_qk_kernel(7, 23, 128);
    check_qk_kernel(3, 5, 64);
    check_qk_kernel(33, 64, 96);
    check_qk_kernel(18, 1, 32);
    check_exp16();
    for (int f16 = 0; f16 < 2; f16++) {
        check_rows512(8, 2, 128, 64, f16, 11);   /* Qwen3-0.6B / 1.7B: a whole piece */
        check_rows512(8, 2, 128, 23, f16, 12);   /* the last piece of a token */
        check_rows512(2, 4, 128, 64, f16, 13);   /* group 4: two row pairs per KV head */
        check_rows512(1, 8, 64, 7, f16, 14);     /* tiles of 64 dims */
        check_rows512(3, 2, 96, 40, f16, 15);    /* tiles of 32 dims */
        check_rows512(2, 2, 256, 64, f16, 16);   /* two tiles of 128 dims */
        check_rows512(4, 2, 32, 1, f16, 17);     /* one position */
    }
    for (int R = 1; R <= 2; R++) {
        check_qkd_kernel(R, 64, 128);
        check_qkd_kernel(R, 23, 128);
        check_qkd_kernel(R, 3, 64);
        check_qkd_kernel(R, 45, 96);
        check_qkd_kernel(R, 1, 32);
    }
#endif
    check_dec(PL_Q8_0, 0, 0, 1e-5);        /* one position */
    check_dec(PL_Q8_0, 70, 0, 1e-5);       /* a K tile of 64 and a tail of 7 (not a multiple of 4) */
    check_dec(PL_Q8_0, 1300, 0, 1e-5);     /* split: three chunks */
    check_dec(PL_Q8_0, 2100, 701, 1e-5);   /* a window */
    check_dec(PL_Q4_0, 300, 0, 1e-5);      /* not taken (q4_0 K): unchanged */
    g_rot = HD;
    check_dec(PL_Q8_0, 1031, 0, 1e-5);
    g_rot = 0;
    pl_cpu_attq_exp16_mode = 0;   /* the scan's exp as two 8-lane calls: the same bits as below */
    check_tiles(PL_Q8_0, 97, 630, 1e-5);
    pl_cpu_attq_exp16_mode = -1;
    check_tiles(PL_Q8_0, 64, 0, 1e-5);     /* one block, K tiles of 64 and a tail of 0 */
    check_tiles(PL_Q8_0, 97, 630, 1e-5);   /* two blocks, a K tail of 23 (not a multiple of 4) */
    check_tiles(PL_Q4_0, 70, 301, 1e-5);   /* q4_0: the V tile only */
    g_rot = HD;
    check_tiles(PL_Q8_0, 130, 1000, 1e-5);
    g_rot = 0;
    return pl_test_summary("test_attention_split");
}
