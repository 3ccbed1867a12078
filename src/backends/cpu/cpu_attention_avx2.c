/* AVX2 inner loops of ATTENTION (driver and portable versions: cpu_attention.c).
 *
 * Scores: a block of JB cache positions x R query heads is 8 dot products
 * accumulated in 8 independent registers (so FMA latency is hidden and each
 * K row is loaded/converted once for all R heads), reduced together with one
 * hadd tree. Values: for a slice of 8*DB output dims, every V row is loaded
 * once and FMA'd into R*DB register accumulators, then stored.
 */
#include <math.h>
#include <string.h>
#include "backends/cpu/cpu_internal.h"
#include "backends/cpu/cpu_simd_avx2.h"
#include "core/fp16.h"
#include "quant/blocks.h"

PL_AI __m256 pl_ld8(const char *row, int64_t d, const int f16) {
    if (f16) return _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)((const uint16_t *)row + d)));
    return _mm256_loadu_ps((const float *)row + d);
}

/* Cache rows j0..j0+n-1 of a K/V head slice (bytes each) are requested
 * ahead of use, into L1 (or L2 only). The slice of one head is a few hundred
 * bytes out of every (kilobytes long) cache row, a stride the hardware
 * prefetchers do not follow across pages, so without this every line is a
 * demand miss to L3 or memory. */
PL_AI void pl_prefetch_rows_to(const char *base, size_t stride, int64_t j0, int64_t n, int64_t n_kv, size_t bytes,
                               const bool l2) {
    if (j0 + n > n_kv) n = n_kv - j0;
    for (int64_t j = 0; j < n; j++)
        for (size_t off = 0; off < bytes; off += 64) {
            const char *p = base + (j0 + j) * stride + off;
            if (l2) _mm_prefetch(p, _MM_HINT_T1);
            else _mm_prefetch(p, _MM_HINT_T0);
        }
}

PL_AI void pl_prefetch_rows(const char *base, size_t stride, int64_t j0, int64_t n, int64_t n_kv, size_t bytes) {
    pl_prefetch_rows_to(base, stride, j0, n, n_kv, bytes, false);
}

#define PL_PF_ROWS 16   /* rows per prefetch batch, about one batch ahead */

/* R heads x JB positions starting at j0; R * JB <= 8. hd % 8 == 0. */
PL_AI void pl_scores_block(const int R, const int JB, const int f16, const float *const *q, const char *k, size_t ks,
                           int64_t j0, int64_t hd, float scale, float *S, int64_t ldS) {
    __m256 acc[8];
    PL_UNROLL
    for (int i = 0; i < 8; i++) acc[i] = _mm256_setzero_ps();
    for (int64_t d = 0; d < hd; d += 8) {
        __m256 qv[4];
        PL_UNROLL
        for (int r = 0; r < R; r++) qv[r] = _mm256_loadu_ps(q[r] + d);
        PL_UNROLL
        for (int jj = 0; jj < JB; jj++) {
            const __m256 kv = pl_ld8(k + (j0 + jj) * ks, d, f16);
            PL_UNROLL
            for (int r = 0; r < R; r++) acc[r * JB + jj] = _mm256_fmadd_ps(qv[r], kv, acc[r * JB + jj]);
        }
    }
    float tmp[8];
    _mm256_storeu_ps(tmp, _mm256_mul_ps(pl_hsum8x8(acc), _mm256_set1_ps(scale)));
    PL_UNROLL
    for (int r = 0; r < R; r++)
        PL_UNROLL
        for (int jj = 0; jj < JB; jj++) S[r * ldS + j0 + jj] = tmp[r * JB + jj];
}

PL_AI void pl_scores_r(const int R, const int f16, const float *const *q, const char *k, size_t ks, int64_t n_kv,
                       int64_t hd, float scale, float *S, int64_t ldS) {
    const int JB = R == 1 ? 8 : R == 2 ? 4 : 2;
    const size_t bytes = (size_t)hd * (f16 ? 2 : 4);
    pl_prefetch_rows(k, ks, 0, PL_PF_ROWS, n_kv, bytes);
    int64_t j = 0;
    for (; j + JB <= n_kv; j += JB) {
        if (j % PL_PF_ROWS == 0) pl_prefetch_rows(k, ks, j + PL_PF_ROWS, PL_PF_ROWS, n_kv, bytes);
        pl_scores_block(R, JB, f16, q, k, ks, j, hd, scale, S, ldS);
    }
    for (; j < n_kv; j++) pl_scores_block(R, 1, f16, q, k, ks, j, hd, scale, S, ldS);
}

/* Scalar reference path for head sizes that are not a multiple of 8. */
static void pl_scores_any(int R, const float *const *q, const char *k, size_t ks, bool f16, int64_t n_kv, int64_t hd,
                          float scale, float *S, int64_t ldS) {
    for (int64_t j = 0; j < n_kv; j++) {
        const char *kr = k + j * ks;
        for (int r = 0; r < R; r++) {
            float s = 0.0f;
            for (int64_t d = 0; d < hd; d++)
                s += q[r][d] * (f16 ? _cvtsh_ss(((const uint16_t *)kr)[d]) : ((const float *)kr)[d]);
            S[r * ldS + j] = scale * s;
        }
    }
}

void pl_cpu_att_scores_avx2(int R, const float *const *q, const char *k, size_t ks, bool f16, int64_t n_kv,
                            int64_t hd, float scale, float *S, int64_t ldS) {
    if (hd % 8) { pl_scores_any(R, q, k, ks, f16, n_kv, hd, scale, S, ldS); return; }
#define PL_SC(RR) \
    (f16 ? pl_scores_r(RR, 1, q, k, ks, n_kv, hd, scale, S, ldS) : pl_scores_r(RR, 0, q, k, ks, n_kv, hd, scale, S, ldS))
    switch (R) {
        case 1: PL_SC(1); break;
        case 2: PL_SC(2); break;
        case 3: PL_SC(3); break;
        default: PL_SC(4); break;
    }
#undef PL_SC
}

/* O[r*hd + d0 .. d0 + 8*DB) (+)= sum_{j in [j0, j1)} P[r*ldS + j] * v_j[...] */
PL_AI void pl_values_block(const int R, const int DB, const int f16, const float *P, int64_t ldS, const char *v,
                           size_t vs, int64_t j0, int64_t j1, int64_t d0, int64_t hd, float *O, bool first) {
    __m256 acc[4][8];
    PL_UNROLL
    for (int r = 0; r < R; r++)
        PL_UNROLL
        for (int b = 0; b < DB; b++)
            acc[r][b] = first ? _mm256_setzero_ps() : _mm256_loadu_ps(O + r * hd + d0 + 8 * b);
    for (int64_t j = j0; j < j1; j++) {
        const char *vr = v + j * vs;
        __m256 p[4];
        PL_UNROLL
        for (int r = 0; r < R; r++) p[r] = _mm256_broadcast_ss(P + r * ldS + j);
        PL_UNROLL
        for (int b = 0; b < DB; b++) {
            const __m256 vv = pl_ld8(vr, d0 + 8 * b, f16);
            PL_UNROLL
            for (int r = 0; r < R; r++) acc[r][b] = _mm256_fmadd_ps(p[r], vv, acc[r][b]);
        }
    }
    PL_UNROLL
    for (int r = 0; r < R; r++)
        PL_UNROLL
        for (int b = 0; b < DB; b++) _mm256_storeu_ps(O + r * hd + d0 + 8 * b, acc[r][b]);
}

/* Positions go in blocks of PL_VBLK: a block's V rows (a few KB) stay in L1
 * while the output dims are swept in register-sized slices, and the next
 * block is prefetched meanwhile. */
#define PL_VBLK 32

PL_AI void pl_values_r(const int R, const int f16, const float *P, int64_t ldS, const char *v, size_t vs,
                       int64_t n_kv, int64_t hd, float *O, bool accumulate) {
    const int DB = R == 1 ? 8 : R == 2 ? 4 : R == 3 ? 3 : 2;
    const size_t bytes = (size_t)hd * (f16 ? 2 : 4);
    pl_prefetch_rows(v, vs, 0, PL_VBLK, n_kv, bytes);
    for (int64_t j0 = 0; j0 < n_kv; j0 += PL_VBLK) {
        const int64_t j1 = j0 + PL_VBLK < n_kv ? j0 + PL_VBLK : n_kv;
        pl_prefetch_rows(v, vs, j1, PL_VBLK, n_kv, bytes);
        int64_t d = 0;
        for (; d + 8 * DB <= hd; d += 8 * DB) pl_values_block(R, DB, f16, P, ldS, v, vs, j0, j1, d, hd, O, j0 == 0 && !accumulate);
        for (; d + 8 <= hd; d += 8) pl_values_block(R, 1, f16, P, ldS, v, vs, j0, j1, d, hd, O, j0 == 0 && !accumulate);
    }
}

void pl_cpu_att_values_avx2(int R, const float *P, int64_t ldS, const char *v, size_t vs, bool f16, int64_t n_kv,
                            int64_t hd, float *O, bool accumulate) {
    if (hd % 8) {
        for (int r = 0; r < R; r++)
            for (int64_t d = 0; d < hd; d++) {
                float s = accumulate ? O[r * hd + d] : 0.0f;
                for (int64_t j = 0; j < n_kv; j++) {
                    const char *vr = v + j * vs;
                    s += P[r * ldS + j] * (f16 ? _cvtsh_ss(((const uint16_t *)vr)[d]) : ((const float *)vr)[d]);
                }
                O[r * hd + d] = s;
            }
        return;
    }
#define PL_VA(RR) \
    (f16 ? pl_values_r(RR, 1, P, ldS, v, vs, n_kv, hd, O, accumulate) \
         : pl_values_r(RR, 0, P, ldS, v, vs, n_kv, hd, O, accumulate))
    switch (R) {
        case 1: PL_VA(1); break;
        case 2: PL_VA(2); break;
        case 3: PL_VA(3); break;
        default: PL_VA(4); break;
    }
#undef PL_VA
}

/* x = exp(x - max(x)); returns the sum (accumulated in float lanes). */
float pl_cpu_att_softmax_avx2(float *x, int64_t n) {
    __m256 m = _mm256_set1_ps(-INFINITY);
    int64_t i = 0;
    for (; i + 8 <= n; i += 8) m = _mm256_max_ps(m, _mm256_loadu_ps(x + i));
    float mx = pl_hmax8(m);
    for (; i < n; i++) mx = x[i] > mx ? x[i] : mx;
    const __m256 vm = _mm256_set1_ps(mx);
    __m256 s = _mm256_setzero_ps();
    for (i = 0; i + 8 <= n; i += 8) {
        const __m256 e = pl_exp8(_mm256_sub_ps(_mm256_loadu_ps(x + i), vm));
        _mm256_storeu_ps(x + i, e);
        s = _mm256_add_ps(s, e);
    }
    float sum = pl_hsum8(s);
    for (; i < n; i++) {
        x[i] = expf(x[i] - mx);
        sum += x[i];
    }
    return sum;
}

/* ---- llama.cpp's flash-attention numerics (small batches) -------------------
 * See cpu_attention.c. Dots in ggml_vec_dot_f16 / _f32's order: 4 vectors of
 * 8 partial sums over strides of 32, FMA'd in k order, then
 *   x = (s0 + s2) + (s1 + s3),  t = x[0:4] + x[4:8],  (t0 + t1) + (t2 + t3). */

PL_AI __m256 pl_dot_partials(const float *q, const char *k, const int f16, int64_t np) {
    __m256 s0 = _mm256_setzero_ps(), s1 = s0, s2 = s0, s3 = s0;
    for (int64_t i = 0; i < np; i += 32) {
        s0 = _mm256_fmadd_ps(pl_ld8(k, i, f16), _mm256_loadu_ps(q + i), s0);
        s1 = _mm256_fmadd_ps(pl_ld8(k, i + 8, f16), _mm256_loadu_ps(q + i + 8), s1);
        s2 = _mm256_fmadd_ps(pl_ld8(k, i + 16, f16), _mm256_loadu_ps(q + i + 16), s2);
        s3 = _mm256_fmadd_ps(pl_ld8(k, i + 24, f16), _mm256_loadu_ps(q + i + 24), s3);
    }
    return _mm256_add_ps(_mm256_add_ps(s0, s2), _mm256_add_ps(s1, s3));
}

/* The final reduction of 8 partial vectors at once: lane i of the result is
 * ggml's reduction of a[i]. */
PL_AI __m256 pl_reduce8_ggml(const __m256 a[8]) {
    __m256 u[4];
    PL_UNROLL
    for (int i = 0; i < 4; i++)   /* [lo(a_i) + hi(a_i) | lo(a_i+4) + hi(a_i+4)] */
        u[i] = _mm256_add_ps(_mm256_permute2f128_ps(a[i], a[i + 4], 0x20), _mm256_permute2f128_ps(a[i], a[i + 4], 0x31));
    const __m256 h01 = _mm256_hadd_ps(u[0], u[1]), h23 = _mm256_hadd_ps(u[2], u[3]);
    return _mm256_hadd_ps(h01, h23);   /* lanes 0-3: a0..a3, lanes 4-7: a4..a7 */
}

static float pl_dot_tail(const float *q, const char *k, bool f16, int64_t np, int64_t hd, float s) {
    double sum = s;
    for (int64_t i = np; i < hd; i++)
        sum += (double)(q[i] * (f16 ? _cvtsh_ss(((const uint16_t *)k)[i]) : ((const float *)k)[i]));
    return (float)sum;
}

/* Two query rows (q0, q1: heads of one GQA group) x two K rows (k0, k1):
 * each K vector is converted once for both heads. a[h][p] gets exactly
 * pl_dot_partials(q_h, k_p): the same four partial sums, FMA'd in the same k
 * order. Registers: 16 accumulators, 8 query vectors, the K vectors. */
PL_AI void pl_dot_partials_2x2(const float *q0, const float *q1, const char *k0, const char *k1, const int f16,
                               int64_t np, __m256 a[2][2]) {
    __m256 s[2][2][4];
    PL_UNROLL
    for (int c = 0; c < 4; c++) s[0][0][c] = s[0][1][c] = s[1][0][c] = s[1][1][c] = _mm256_setzero_ps();
    for (int64_t i = 0; i < np; i += 32) {
        __m256 qa[4], qb[4];
        PL_UNROLL
        for (int c = 0; c < 4; c++) {
            qa[c] = _mm256_loadu_ps(q0 + i + 8 * c);
            qb[c] = _mm256_loadu_ps(q1 + i + 8 * c);
        }
        PL_UNROLL
        for (int c = 0; c < 4; c++) {
            const __m256 x0 = pl_ld8(k0, i + 8 * c, f16), x1 = pl_ld8(k1, i + 8 * c, f16);
            s[0][0][c] = _mm256_fmadd_ps(x0, qa[c], s[0][0][c]);
            s[1][0][c] = _mm256_fmadd_ps(x0, qb[c], s[1][0][c]);
            s[0][1][c] = _mm256_fmadd_ps(x1, qa[c], s[0][1][c]);
            s[1][1][c] = _mm256_fmadd_ps(x1, qb[c], s[1][1][c]);
        }
    }
    PL_UNROLL
    for (int h = 0; h < 2; h++)
        PL_UNROLL
        for (int p = 0; p < 2; p++)
            a[h][p] = _mm256_add_ps(_mm256_add_ps(s[h][p][0], s[h][p][2]), _mm256_add_ps(s[h][p][1], s[h][p][3]));
}

/* One score alone (the positions after the last full batch of 8). */
PL_AI float pl_dot_one(const float *q, const char *k, bool f16, int64_t np, int64_t hd, float scale) {
    __m256 a[8];
    a[0] = f16 ? pl_dot_partials(q, k, 1, np) : pl_dot_partials(q, k, 0, np);
    for (int i = 1; i < 8; i++) a[i] = a[0];
    float t[8];
    _mm256_storeu_ps(t, pl_reduce8_ggml(a));
    return pl_dot_tail(q, k, f16, np, hd, t[0]) * scale;
}

/* Scores of 8 positions from a[8] (one head), with the dim tail, scaled. */
PL_AI void pl_dots_store8(const __m256 a[8], const float *q, const char *k, size_t ks, bool f16, int64_t j, int64_t np,
                          int64_t hd, float scale, float *out) {
    __m256 d = pl_reduce8_ggml(a);
    if (np < hd) {
        float t[8];
        _mm256_storeu_ps(t, d);
        for (int i = 0; i < 8; i++) t[i] = pl_dot_tail(q, k + (j + i) * ks, f16, np, hd, t[i]);
        d = _mm256_loadu_ps(t);
    }
    _mm256_storeu_ps(out + j, _mm256_mul_ps(d, _mm256_set1_ps(scale)));
}

void pl_cpu_att_dots_ggml_avx2(int R, const float *const *q, const char *k, size_t ks, bool f16, int64_t n, int64_t hd,
                               float scale, float *S, int64_t ldS, const char *v, size_t vs) {
    const int64_t np = hd & ~(int64_t)31;
    const size_t bytes = (size_t)hd * (f16 ? 2 : 4);
    pl_prefetch_rows(k, ks, 0, PL_PF_ROWS, n, bytes);
    int r = 0;
    if (R >= 2) {
        /* heads 0 and 1 together: one K load and conversion for both, the
         * positions in blocks of 8 (then the tail below, head by head) */
        int64_t j = 0;
        for (; j + 8 <= n; j += 8) {
            if (j % PL_PF_ROWS == 0) {
                pl_prefetch_rows(k, ks, j + PL_PF_ROWS, PL_PF_ROWS, n, bytes);
                if (v) pl_prefetch_rows_to(v, vs, j, PL_PF_ROWS, n, bytes, true);
            }
            __m256 a0[8], a1[8];
            PL_UNROLL
            for (int p = 0; p < 8; p += 2) {
                __m256 a[2][2];
                if (f16) pl_dot_partials_2x2(q[0], q[1], k + (j + p) * ks, k + (j + p + 1) * ks, 1, np, a);
                else pl_dot_partials_2x2(q[0], q[1], k + (j + p) * ks, k + (j + p + 1) * ks, 0, np, a);
                a0[p] = a[0][0], a0[p + 1] = a[0][1], a1[p] = a[1][0], a1[p + 1] = a[1][1];
            }
            pl_dots_store8(a0, q[0], k, ks, f16, j, np, hd, scale, S);
            pl_dots_store8(a1, q[1], k, ks, f16, j, np, hd, scale, S + ldS);
        }
        if (v && j % PL_PF_ROWS == 0) pl_prefetch_rows_to(v, vs, j, PL_PF_ROWS, n, bytes, true);
        for (int h = 0; h < 2; h++)
            for (int64_t t = j; t < n; t++) S[h * ldS + t] = pl_dot_one(q[h], k + t * ks, f16, np, hd, scale);
        r = 2;
    }
    for (; r < R; r++) {
        int64_t j = 0;
        for (; j + 8 <= n; j += 8) {
            /* the next batch of K rows (the other heads of the group find
             * them in cache), and V's rows of this batch into L2 */
            if (r == 0 && j % PL_PF_ROWS == 0) {
                pl_prefetch_rows(k, ks, j + PL_PF_ROWS, PL_PF_ROWS, n, bytes);
                if (v) pl_prefetch_rows_to(v, vs, j, PL_PF_ROWS, n, bytes, true);
            }
            __m256 a[8];
            PL_UNROLL
            for (int i = 0; i < 8; i++)
                a[i] = f16 ? pl_dot_partials(q[r], k + (j + i) * ks, 1, np) : pl_dot_partials(q[r], k + (j + i) * ks, 0, np);
            pl_dots_store8(a, q[r], k, ks, f16, j, np, hd, scale, S + r * ldS);
        }
        if (r == 0 && v && j % PL_PF_ROWS == 0) pl_prefetch_rows_to(v, vs, j, PL_PF_ROWS, n, bytes, true);
        for (; j < n; j++) S[r * ldS + j] = pl_dot_one(q[r], k + j * ks, f16, np, hd, scale);
    }
}

/* Rows ahead for the software prefetch of the block's slice of each cache
 * row. A slice narrower than the row (more query rows than a task holds) is
 * a stride the hardware prefetchers follow badly (4 rows ahead: 0.55x the
 * time of none in a stand-alone sweep at depth 2048). Whole rows are a
 * forward stream, but the prefetchers did not keep up with it either: decode
 * at depth 4096 (0.6B shapes, 1 thread) ran 1.07-1.08x as fast with whole
 * rows prefetched 4 ahead (8: 1.04-1.05x, 16: 1.02-1.04x). */
#define PL_ATT_ROWS_PF 4

/* Row j + pf's slice (bytes from base), when the slice is part of a row. */
PL_AI void pl_prefetch_slice(const char *base, size_t stride, size_t slice, int64_t j, int64_t n) {
    if (j + PL_ATT_ROWS_PF >= n) return;
    const char *p = base + (j + PL_ATT_ROWS_PF) * (int64_t)stride;
    for (size_t off = 0; off < slice; off += 64) _mm_prefetch(p + off, _MM_HINT_T0);
}

/* One K slice x two query rows: the K vectors converted once for both. a[h]
 * gets exactly pl_dot_partials(q_h, k). */
PL_AI void pl_dot_partials_1x2(const float *q0, const float *q1, const char *k, const int f16, int64_t np, __m256 a[2]) {
    __m256 s[2][4];
    PL_UNROLL
    for (int c = 0; c < 4; c++) s[0][c] = s[1][c] = _mm256_setzero_ps();
    for (int64_t i = 0; i < np; i += 32) {
        PL_UNROLL
        for (int c = 0; c < 4; c++) {
            const __m256 x = pl_ld8(k, i + 8 * c, f16);
            s[0][c] = _mm256_fmadd_ps(x, _mm256_loadu_ps(q0 + i + 8 * c), s[0][c]);
            s[1][c] = _mm256_fmadd_ps(x, _mm256_loadu_ps(q1 + i + 8 * c), s[1][c]);
        }
    }
    PL_UNROLL
    for (int h = 0; h < 2; h++) a[h] = _mm256_add_ps(_mm256_add_ps(s[h][0], s[h][2]), _mm256_add_ps(s[h][1], s[h][3]));
}

/* The scores of rows r0 .. r0 + na - 1 at position j from their partials a[0 .. na - 1] (na <= 8):
 * reduced together, scaled, stored. */
PL_AI void pl_dots_rows_store(__m256 a[8], int na, __m256 sc, float *S, int64_t ldS, int r0, int64_t j) {
    for (int i = na; i < 8; i++) a[i] = a[0];
    float t[8];
    _mm256_storeu_ps(t, _mm256_mul_ps(pl_reduce8_ggml(a), sc));
    for (int i = 0; i < na; i++) S[(r0 + i) * ldS + j] = t[i];
}

/* Position-major scores for a block of G KV heads: for each position j, the
 * block's G slices of cache row j (adjacent, G * hd elements) against the
 * rows' queries; row r = g * group + h (group even, hd % 32 == 0). The cache
 * is read forward, whole rows at a time (one KV head at a time over all
 * positions reads hd elements of every row: a stride the prefetchers follow
 * badly). Every score has pl_cpu_att_dots_ggml_avx2's bits (same partial
 * sums, same reduction, same scaling). */
void pl_cpu_att_dots_rows_avx2(int G, int group, const float *const *q, const char *k, size_t ks, bool f16,
                               int64_t n, int64_t hd, float scale, float *S, int64_t ldS) {
    const int rows = G * group;
    const size_t el = f16 ? 2 : 4;
    const __m256 sc = _mm256_set1_ps(scale);
    const size_t slice = (size_t)G * (size_t)hd * el;
    for (int64_t j = 0; j < n; j++) {
        const char *kr = k + j * ks;
        pl_prefetch_slice(k, ks, slice, j, n);
        __m256 a[8];
        int na = 0, r0 = 0;
        for (int r = 0; r < rows; r += 2) {
            const char *kg = kr + (size_t)(r / group) * (size_t)hd * el;
            if (f16) pl_dot_partials_1x2(q[r], q[r + 1], kg, 1, hd, a + na);
            else pl_dot_partials_1x2(q[r], q[r + 1], kg, 0, hd, a + na);
            na += 2;
            if (na == 8 || r + 2 == rows) {
                pl_dots_rows_store(a, na, sc, S, ldS, r0, j);
                r0 += na;
                na = 0;
            }
        }
    }
}

/* exp over n floats (pl_exp8; scalar expf for the tail). */
void pl_cpu_vexp_avx2(float *x, int64_t n) {
    int64_t i = 0;
    for (; i + 8 <= n; i += 8) _mm256_storeu_ps(x + i, pl_exp8(_mm256_loadu_ps(x + i)));
    for (; i < n; i++) x[i] = expf(x[i]);
}

/* The V recurrence of one query row over positions 0..n-1 (V rows prefetched
 * a batch ahead: the chain of f16 roundings keeps the out-of-order window
 * from reaching the next rows' misses; without it 56% of this kernel's
 * samples sat on the V load): e[j] >= 0 is vs
 * (VKQ += v_j * vs), e[j] < 0 (sign bit) marks a new maximum with ms = -e[j]
 * (VKQ *= ms, then VKQ += v_j). With an f16 cache VKQ is rounded to f16 after
 * every step, as ggml's VKQ16. O = VKQ * inv. hd % 8 == 0. */
PL_AI void pl_vkq_slice(const float *e, int64_t n, const char *v, size_t vs, const int f16, int64_t d0, const int DB,
                        float inv, float *O) {
    __m256 acc[8];
    PL_UNROLL
    for (int b = 0; b < DB; b++) acc[b] = _mm256_setzero_ps();
    pl_prefetch_rows(v + d0 * (f16 ? 2 : 4), vs, 0, PL_PF_ROWS, n, DB * 8 * (f16 ? 2 : 4));
    for (int64_t j = 0; j < n; j++) {
        const char *vr = v + j * vs;
        if (j % PL_PF_ROWS == 0) pl_prefetch_rows(v + d0 * (f16 ? 2 : 4), vs, j + PL_PF_ROWS, PL_PF_ROWS, n, DB * 8 * (f16 ? 2 : 4));
        float w = e[j];
        if (signbit(w)) {
            const __m256 ms = _mm256_set1_ps(-w);
            PL_UNROLL
            for (int b = 0; b < DB; b++) {
                acc[b] = _mm256_mul_ps(acc[b], ms);
                if (f16) acc[b] = _mm256_cvtph_ps(_mm256_cvtps_ph(acc[b], _MM_FROUND_TO_NEAREST_INT));
            }
            w = 1.0f;
        }
        const __m256 wv = _mm256_set1_ps(w);
        PL_UNROLL
        for (int b = 0; b < DB; b++) {
            acc[b] = _mm256_fmadd_ps(pl_ld8(vr, d0 + 8 * b, f16), wv, acc[b]);
            if (f16) acc[b] = _mm256_cvtph_ps(_mm256_cvtps_ph(acc[b], _MM_FROUND_TO_NEAREST_INT));
        }
    }
    const __m256 iv = _mm256_set1_ps(inv);
    PL_UNROLL
    for (int b = 0; b < DB; b++) _mm256_storeu_ps(O + d0 + 8 * b, _mm256_mul_ps(acc[b], iv));
}

/* Two rows of one token at once: each V vector is loaded and converted once
 * for both (the heads of a GQA group share the V rows). */
PL_AI void pl_vkq_slice2(const float *e0, const float *e1, int64_t n, const char *v, size_t vs, const int f16,
                         int64_t d0, float inv0, float inv1, float *O0, float *O1, const int DB) {
    __m256 a0[8], a1[8];
    PL_UNROLL
    for (int b = 0; b < DB; b++) a0[b] = a1[b] = _mm256_setzero_ps();
    pl_prefetch_rows(v + d0 * (f16 ? 2 : 4), vs, 0, PL_PF_ROWS, n, DB * 8 * (f16 ? 2 : 4));
    for (int64_t j = 0; j < n; j++) {
        const char *vr = v + j * vs;
        if (j % PL_PF_ROWS == 0) pl_prefetch_rows(v + d0 * (f16 ? 2 : 4), vs, j + PL_PF_ROWS, PL_PF_ROWS, n, DB * 8 * (f16 ? 2 : 4));
        float w0 = e0[j], w1 = e1[j];
        if (signbit(w0)) {
            const __m256 ms = _mm256_set1_ps(-w0);
            PL_UNROLL
            for (int b = 0; b < DB; b++) {
                a0[b] = _mm256_mul_ps(a0[b], ms);
                if (f16) a0[b] = _mm256_cvtph_ps(_mm256_cvtps_ph(a0[b], _MM_FROUND_TO_NEAREST_INT));
            }
            w0 = 1.0f;
        }
        if (signbit(w1)) {
            const __m256 ms = _mm256_set1_ps(-w1);
            PL_UNROLL
            for (int b = 0; b < DB; b++) {
                a1[b] = _mm256_mul_ps(a1[b], ms);
                if (f16) a1[b] = _mm256_cvtph_ps(_mm256_cvtps_ph(a1[b], _MM_FROUND_TO_NEAREST_INT));
            }
            w1 = 1.0f;
        }
        const __m256 wv0 = _mm256_set1_ps(w0), wv1 = _mm256_set1_ps(w1);
        PL_UNROLL
        for (int b = 0; b < DB; b++) {
            const __m256 vv = pl_ld8(vr, d0 + 8 * b, f16);
            a0[b] = _mm256_fmadd_ps(vv, wv0, a0[b]);
            a1[b] = _mm256_fmadd_ps(vv, wv1, a1[b]);
            if (f16) {
                a0[b] = _mm256_cvtph_ps(_mm256_cvtps_ph(a0[b], _MM_FROUND_TO_NEAREST_INT));
                a1[b] = _mm256_cvtph_ps(_mm256_cvtps_ph(a1[b], _MM_FROUND_TO_NEAREST_INT));
            }
        }
    }
    const __m256 i0 = _mm256_set1_ps(inv0), i1 = _mm256_set1_ps(inv1);
    PL_UNROLL
    for (int b = 0; b < DB; b++) {
        _mm256_storeu_ps(O0 + d0 + 8 * b, _mm256_mul_ps(a0[b], i0));
        _mm256_storeu_ps(O1 + d0 + 8 * b, _mm256_mul_ps(a1[b], i1));
    }
}

void pl_cpu_att_vkq2_avx2(const float *e0, const float *e1, int64_t n, const char *v, size_t vs, bool f16, int64_t hd,
                          float inv0, float inv1, float *O0, float *O1) {
    for (int64_t d = 0; d < hd; d += 32) {
        if (f16) pl_vkq_slice2(e0, e1, n, v, vs, 1, d, inv0, inv1, O0, O1, 4);
        else pl_vkq_slice2(e0, e1, n, v, vs, 0, d, inv0, inv1, O0, O1, 4);
    }
}

/* With AVX-512VL's 32 registers: 64-dim slices, 16 independent rounding
 * chains (the f32 -> f16 -> f32 round trip is latency-bound with fewer). */
__attribute__((target("avx512f,avx512vl"))) void pl_cpu_att_vkq2_avx512(const float *e0, const float *e1, int64_t n,
                                                                       const char *v, size_t vs, bool f16, int64_t hd,
                                                                       float inv0, float inv1, float *O0, float *O1) {
    int64_t d = 0;
    for (; d + 64 <= hd; d += 64) {
        if (f16) pl_vkq_slice2(e0, e1, n, v, vs, 1, d, inv0, inv1, O0, O1, 8);
        else pl_vkq_slice2(e0, e1, n, v, vs, 0, d, inv0, inv1, O0, O1, 8);
    }
    for (; d < hd; d += 32) {
        if (f16) pl_vkq_slice2(e0, e1, n, v, vs, 1, d, inv0, inv1, O0, O1, 4);
        else pl_vkq_slice2(e0, e1, n, v, vs, 0, d, inv0, inv1, O0, O1, 4);
    }
}

/* f32 -> f16 -> f32: the rounding of ggml's VKQ16 accumulator. */
PL_AI __m256 pl_round16(__m256 x) { return _mm256_cvtph_ps(_mm256_cvtps_ph(x, _MM_FROUND_TO_NEAREST_INT)); }

/* Position-major V recurrence for a block of G KV heads: for each position
 * j, the block's slices of V row j (adjacent) update every row's
 * accumulators, two rows (heads of one KV head) per V load; row r = g *
 * group + h reads E[r * ldE + j] (tagged as for pl_vkq_slice2) and keeps its
 * raw accumulators in A[r * hd ...] (f32, rounded to f16 after every step
 * with an f16 cache) before and after. Each accumulator sees
 * pl_vkq_slice2's operations in its order, so the bits are the same; the
 * cache is read forward, and the rounding chains of different rows and
 * dims interleave instead of waiting on each other. group even, hd % 8 == 0. */
void pl_cpu_att_vkq_rows_avx2(int G, int group, const float *E, int64_t ldE, int64_t n, const char *v, size_t vs,
                              bool f16, int64_t hd, float *A) {
    const int rows = G * group;
    const size_t el = f16 ? 2 : 4;
    const size_t slice = (size_t)G * (size_t)hd * el;
    for (int64_t j = 0; j < n; j++) {
        const char *vr = v + j * vs;
        pl_prefetch_slice(v, vs, slice, j, n);
        for (int r = 0; r < rows; r += 2) {
            const char *vg = vr + (size_t)(r / group) * (size_t)hd * el;
            float *A0 = A + (int64_t)r * hd, *A1 = A0 + hd;
            float w[2] = {E[r * ldE + j], E[(r + 1) * ldE + j]};
            for (int i = 0; i < 2; i++) {
                if (!signbit(w[i])) continue;
                const __m256 ms = _mm256_set1_ps(-w[i]);
                float *Ai = i ? A1 : A0;
                for (int64_t d = 0; d < hd; d += 8) {
                    const __m256 x = _mm256_mul_ps(_mm256_loadu_ps(Ai + d), ms);
                    _mm256_storeu_ps(Ai + d, f16 ? pl_round16(x) : x);
                }
                w[i] = 1.0f;
            }
            const __m256 w0 = _mm256_set1_ps(w[0]), w1 = _mm256_set1_ps(w[1]);
            if (f16) {
                for (int64_t d = 0; d < hd; d += 8) {
                    const __m256 x = pl_ld8(vg, d, 1);
                    _mm256_storeu_ps(A0 + d, pl_round16(_mm256_fmadd_ps(x, w0, _mm256_loadu_ps(A0 + d))));
                    _mm256_storeu_ps(A1 + d, pl_round16(_mm256_fmadd_ps(x, w1, _mm256_loadu_ps(A1 + d))));
                }
            } else {
                for (int64_t d = 0; d < hd; d += 8) {
                    const __m256 x = pl_ld8(vg, d, 0);
                    _mm256_storeu_ps(A0 + d, _mm256_fmadd_ps(x, w0, _mm256_loadu_ps(A0 + d)));
                    _mm256_storeu_ps(A1 + d, _mm256_fmadd_ps(x, w1, _mm256_loadu_ps(A1 + d)));
                }
            }
        }
    }
}

void pl_cpu_att_vkq_avx2(const float *e, int64_t n, const char *v, size_t vs, bool f16, int64_t hd, float inv,
                         float *O) {
    int64_t d = 0;
    for (; d + 64 <= hd; d += 64) {
        if (f16) pl_vkq_slice(e, n, v, vs, 1, d, 8, inv, O);
        else pl_vkq_slice(e, n, v, vs, 0, d, 8, inv, O);
    }
    for (; d + 8 <= hd; d += 8) {
        if (f16) pl_vkq_slice(e, n, v, vs, 1, d, 1, inv, O);
        else pl_vkq_slice(e, n, v, vs, 0, d, 1, inv, O);
    }
}

/* ---- prefill: tiled ("flash") attention, AVX-512 ----------------------------
 * For a block of R query rows sharing one KV head (the heads of a group for
 * consecutive tokens), KV positions go in tiles of 64: the K tile is
 * converted to f32 and transposed once ([d][64], so 64 scores of a row are 4
 * vectors), scores for 6 rows at a time (24 accumulators), an online softmax
 * per row (running max M and sum L; the row's output is rescaled when M
 * grows), and O += P V with the V tile converted once (3 rows x 128 dims at a
 * time for head_dim 128). Each K/V element is loaded and converted once per
 * block of R rows. f32 throughout (as ggml's tiled path). */

#define PL_FA_TILE 64
#define PL_AVX512 __attribute__((target("avx512f,avx512vl,avx512bw,avx512dq")))
#define PL_AVX512_AI static inline __attribute__((always_inline, target("avx512f,avx512vl,avx512bw,avx512dq")))

/* 8x8 transpose of floats: rows r0..r7 (8 each) -> columns. */
PL_AVX512_AI void pl_tr8(__m256 r[8]) {
    const __m256 t0 = _mm256_unpacklo_ps(r[0], r[1]), t1 = _mm256_unpackhi_ps(r[0], r[1]);
    const __m256 t2 = _mm256_unpacklo_ps(r[2], r[3]), t3 = _mm256_unpackhi_ps(r[2], r[3]);
    const __m256 t4 = _mm256_unpacklo_ps(r[4], r[5]), t5 = _mm256_unpackhi_ps(r[4], r[5]);
    const __m256 t6 = _mm256_unpacklo_ps(r[6], r[7]), t7 = _mm256_unpackhi_ps(r[6], r[7]);
    const __m256 u0 = _mm256_shuffle_ps(t0, t2, 0x44), u1 = _mm256_shuffle_ps(t0, t2, 0xEE);
    const __m256 u2 = _mm256_shuffle_ps(t1, t3, 0x44), u3 = _mm256_shuffle_ps(t1, t3, 0xEE);
    const __m256 u4 = _mm256_shuffle_ps(t4, t6, 0x44), u5 = _mm256_shuffle_ps(t4, t6, 0xEE);
    const __m256 u6 = _mm256_shuffle_ps(t5, t7, 0x44), u7 = _mm256_shuffle_ps(t5, t7, 0xEE);
    r[0] = _mm256_permute2f128_ps(u0, u4, 0x20); r[1] = _mm256_permute2f128_ps(u1, u5, 0x20);
    r[2] = _mm256_permute2f128_ps(u2, u6, 0x20); r[3] = _mm256_permute2f128_ps(u3, u7, 0x20);
    r[4] = _mm256_permute2f128_ps(u0, u4, 0x31); r[5] = _mm256_permute2f128_ps(u1, u5, 0x31);
    r[6] = _mm256_permute2f128_ps(u2, u6, 0x31); r[7] = _mm256_permute2f128_ps(u3, u7, 0x31);
}

/* RB rows x 64 positions: S[r][0..64) = scale * q_r . KT[:, 0..64) */
PL_AVX512_AI void pl_fa_scores(const int RB, const float *const *q, const float *KT, int64_t hd, float scale, float *S) {
    __m512 acc[6][4];
    PL_UNROLL
    for (int r = 0; r < RB; r++)
        PL_UNROLL
        for (int b = 0; b < 4; b++) acc[r][b] = _mm512_setzero_ps();
    for (int64_t d = 0; d < hd; d++) {
        const float *kt = KT + d * PL_FA_TILE;
        const __m512 k0 = _mm512_loadu_ps(kt), k1 = _mm512_loadu_ps(kt + 16);
        const __m512 k2 = _mm512_loadu_ps(kt + 32), k3 = _mm512_loadu_ps(kt + 48);
        PL_UNROLL
        for (int r = 0; r < RB; r++) {
            const __m512 qv = _mm512_set1_ps(q[r][d]);
            acc[r][0] = _mm512_fmadd_ps(qv, k0, acc[r][0]);
            acc[r][1] = _mm512_fmadd_ps(qv, k1, acc[r][1]);
            acc[r][2] = _mm512_fmadd_ps(qv, k2, acc[r][2]);
            acc[r][3] = _mm512_fmadd_ps(qv, k3, acc[r][3]);
        }
    }
    const __m512 sc = _mm512_set1_ps(scale);
    PL_UNROLL
    for (int r = 0; r < RB; r++)
        PL_UNROLL
        for (int b = 0; b < 4; b++) _mm512_storeu_ps(S + r * PL_FA_TILE + 16 * b, _mm512_mul_ps(acc[r][b], sc));
}

/* RB rows: O[r][0..hd) += sum_j P[r][j] V[j][0..hd), hd = 16 * NB */
PL_AVX512_AI void pl_fa_pv(const int RB, const int NB, const float *P, int64_t nj, const float *V, int64_t hd, float *O) {
    __m512 acc[6][8];
    PL_UNROLL
    for (int r = 0; r < RB; r++)
        PL_UNROLL
        for (int b = 0; b < NB; b++) acc[r][b] = _mm512_loadu_ps(O + r * hd + 16 * b);
    for (int64_t j = 0; j < nj; j++) {
        __m512 vv[8];
        PL_UNROLL
        for (int b = 0; b < NB; b++) vv[b] = _mm512_loadu_ps(V + j * hd + 16 * b);
        PL_UNROLL
        for (int r = 0; r < RB; r++) {
            const __m512 p = _mm512_set1_ps(P[r * PL_FA_TILE + j]);
            PL_UNROLL
            for (int b = 0; b < NB; b++) acc[r][b] = _mm512_fmadd_ps(p, vv[b], acc[r][b]);
        }
    }
    PL_UNROLL
    for (int r = 0; r < RB; r++)
        PL_UNROLL
        for (int b = 0; b < NB; b++) _mm512_storeu_ps(O + r * hd + 16 * b, acc[r][b]);
}

PL_AVX512_AI __m512 pl_exp16(__m512 x) {
    const __m256 lo = pl_exp8(_mm512_castps512_ps256(x));
    const __m256 hi = pl_exp8(_mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(x), 1)));
    return _mm512_insertf32x8(_mm512_castps256_ps512(lo), hi, 1);
}

size_t pl_cpu_att_flash_scratch(int R, int64_t hd) {
    return ((size_t)hd * PL_FA_TILE * 2 + (size_t)R * (PL_FA_TILE + hd + 2)) * sizeof(float) + 256;
}

/* R (<= 256) query rows (q[r], row r sees positions 0..n_kv[r]-1) against the
 * K/V head slices k, v (row strides ks, vs); out[r] gets the attention
 * output. hd % 16 == 0, hd <= 128 * ... (NB <= 8: hd <= 128). */
PL_AVX512 void pl_cpu_att_flash_avx512(int R, const float *const *q, const int64_t *n_kv, const char *k, size_t ks,
                                       const char *v, size_t vs, bool f16, int64_t hd, float scale,
                                       float *const *out, float *scratch) {
    float *KT = scratch, *VT = KT + hd * PL_FA_TILE, *P = VT + hd * PL_FA_TILE;
    float *O = P + (size_t)R * PL_FA_TILE, *M = O + (size_t)R * hd, *L = M + R;
    int64_t max_kv = 0;
    for (int r = 0; r < R; r++) {
        M[r] = -INFINITY;
        L[r] = 0.0f;
        if (n_kv[r] > max_kv) max_kv = n_kv[r];
    }
    memset(O, 0, (size_t)R * hd * sizeof(float));
    const int NB = (int)(hd / 16);
    for (int64_t j0 = 0; j0 < max_kv; j0 += PL_FA_TILE) {
        const int64_t nj = max_kv - j0 < PL_FA_TILE ? max_kv - j0 : PL_FA_TILE;
        /* K tile -> KT[d][j] (f32), 8x8 blocks; positions past nj are 0 */
        for (int64_t jb = 0; jb < PL_FA_TILE; jb += 8)
            for (int64_t d = 0; d < hd; d += 8) {
                __m256 t[8];
                for (int i = 0; i < 8; i++)
                    t[i] = jb + i < nj ? pl_ld8(k + (j0 + jb + i) * ks, d, f16 ? 1 : 0) : _mm256_setzero_ps();
                pl_tr8(t);
                for (int i = 0; i < 8; i++) _mm256_storeu_ps(KT + (d + i) * PL_FA_TILE + jb, t[i]);
            }
        /* V tile -> VT[j][d] (f32) */
        for (int64_t j = 0; j < nj; j++)
            for (int64_t d = 0; d < hd; d += 8)
                _mm256_storeu_ps(VT + j * hd + d, pl_ld8(v + (j0 + j) * vs, d, f16 ? 1 : 0));
        /* rows that see any position of this tile (a suffix-free set: rows
         * are in token order within each head, so just test each) */
        for (int r0 = 0; r0 < R; r0 += 6) {
            const int RB = R - r0 < 6 ? R - r0 : 6;
            bool any = false;
            for (int r = r0; r < r0 + RB; r++) any |= n_kv[r] > j0;
            if (!any) continue;
            switch (RB) {
                case 6: pl_fa_scores(6, q + r0, KT, hd, scale, P + r0 * PL_FA_TILE); break;
                case 5: pl_fa_scores(5, q + r0, KT, hd, scale, P + r0 * PL_FA_TILE); break;
                case 4: pl_fa_scores(4, q + r0, KT, hd, scale, P + r0 * PL_FA_TILE); break;
                case 3: pl_fa_scores(3, q + r0, KT, hd, scale, P + r0 * PL_FA_TILE); break;
                case 2: pl_fa_scores(2, q + r0, KT, hd, scale, P + r0 * PL_FA_TILE); break;
                default: pl_fa_scores(1, q + r0, KT, hd, scale, P + r0 * PL_FA_TILE); break;
            }
        }
        /* online softmax per row */
        for (int r = 0; r < R; r++) {
            float *p = P + r * PL_FA_TILE;
            const int64_t vis = n_kv[r] - j0 < nj ? n_kv[r] - j0 : nj;   /* visible positions of this tile */
            if (vis <= 0) {
                memset(p, 0, PL_FA_TILE * sizeof(float));
                continue;
            }
            const __mmask16 m0 = (__mmask16)(vis >= 16 ? 0xFFFF : (1u << vis) - 1);
            const __mmask16 m1 = (__mmask16)(vis >= 32 ? 0xFFFF : vis <= 16 ? 0 : (1u << (vis - 16)) - 1);
            const __mmask16 m2 = (__mmask16)(vis >= 48 ? 0xFFFF : vis <= 32 ? 0 : (1u << (vis - 32)) - 1);
            const __mmask16 m3 = (__mmask16)(vis >= 64 ? 0xFFFF : vis <= 48 ? 0 : (1u << (vis - 48)) - 1);
            const __m512 ninf = _mm512_set1_ps(-INFINITY);
            __m512 s0 = _mm512_mask_loadu_ps(ninf, m0, p), s1 = _mm512_mask_loadu_ps(ninf, m1, p + 16);
            __m512 s2 = _mm512_mask_loadu_ps(ninf, m2, p + 32), s3 = _mm512_mask_loadu_ps(ninf, m3, p + 48);
            const float mx = _mm512_reduce_max_ps(_mm512_max_ps(_mm512_max_ps(s0, s1), _mm512_max_ps(s2, s3)));
            const float Mnew = mx > M[r] ? mx : M[r];
            const __m512 mv = _mm512_set1_ps(Mnew);
            s0 = _mm512_maskz_mov_ps(m0, pl_exp16(_mm512_sub_ps(s0, mv)));
            s1 = _mm512_maskz_mov_ps(m1, pl_exp16(_mm512_sub_ps(s1, mv)));
            s2 = _mm512_maskz_mov_ps(m2, pl_exp16(_mm512_sub_ps(s2, mv)));
            s3 = _mm512_maskz_mov_ps(m3, pl_exp16(_mm512_sub_ps(s3, mv)));
            _mm512_storeu_ps(p, s0);
            _mm512_storeu_ps(p + 16, s1);
            _mm512_storeu_ps(p + 32, s2);
            _mm512_storeu_ps(p + 48, s3);
            const float psum = _mm512_reduce_add_ps(_mm512_add_ps(_mm512_add_ps(s0, s1), _mm512_add_ps(s2, s3)));
            if (Mnew > M[r]) {
                const float ms = M[r] == -INFINITY ? 0.0f : expf(M[r] - Mnew);
                if (ms != 1.0f) {
                    float *o = O + r * hd;
                    const __m512 msv = _mm512_set1_ps(ms);
                    for (int64_t d = 0; d < hd; d += 16) _mm512_storeu_ps(o + d, _mm512_mul_ps(_mm512_loadu_ps(o + d), msv));
                }
                L[r] *= ms;
                M[r] = Mnew;
            }
            L[r] += psum;
        }
        /* O += P V */
        const int RBV = NB <= 4 ? 6 : NB <= 6 ? 4 : 3;
        for (int r0 = 0; r0 < R; r0 += RBV) {
            const int RB = R - r0 < RBV ? R - r0 : RBV;
            bool any = false;
            for (int r = r0; r < r0 + RB; r++) any |= n_kv[r] > j0;
            if (!any) continue;
            const float *Pp = P + r0 * PL_FA_TILE;
            float *Op = O + r0 * hd;
#define PL_PV(rb, nb) pl_fa_pv(rb, nb, Pp, nj, VT, hd, Op)
#define PL_PV_NB(rb)                                              \
    switch (NB) {                                                 \
        case 8: PL_PV(rb, 8); break;                              \
        case 7: PL_PV(rb, 7); break;                              \
        case 6: PL_PV(rb, 6); break;                              \
        case 5: PL_PV(rb, 5); break;                              \
        case 4: PL_PV(rb, 4); break;                              \
        case 3: PL_PV(rb, 3); break;                              \
        case 2: PL_PV(rb, 2); break;                              \
        default: PL_PV(rb, 1); break;                             \
    }
            switch (RB) {
                case 6: PL_PV_NB(6) break;
                case 5: PL_PV_NB(5) break;
                case 4: PL_PV_NB(4) break;
                case 3: PL_PV_NB(3) break;
                case 2: PL_PV_NB(2) break;
                default: PL_PV_NB(1) break;
            }
#undef PL_PV_NB
#undef PL_PV
        }
    }
    for (int r = 0; r < R; r++) {
        const float inv = L[r] == 0.0f ? 0.0f : 1.0f / L[r];
        for (int64_t d = 0; d < hd; d++) out[r][d] = O[r * hd + d] * inv;
    }
}

/* a = a * ms + vs * v (n a multiple of 8): the online-softmax update of the
 * quantized-cache path, one rounding for the scale, one fused multiply-add
 * for the weighted V row (as ggml_vec_scale_f32 + ggml_vec_mad_f32). */
void pl_cpu_attq_axpy_avx2(float *a, const float *v, float ms, float vs, int64_t n) {
    const __m256 vm = _mm256_set1_ps(ms), vv = _mm256_set1_ps(vs);
    if (ms == 1.0f) {
        for (int64_t i = 0; i < n; i += 8)
            _mm256_storeu_ps(a + i, _mm256_fmadd_ps(_mm256_loadu_ps(v + i), vv, _mm256_loadu_ps(a + i)));
    } else {
        for (int64_t i = 0; i < n; i += 8)
            _mm256_storeu_ps(a + i, _mm256_fmadd_ps(_mm256_loadu_ps(v + i), vv,
                                                    _mm256_mul_ps(_mm256_loadu_ps(a + i), vm)));
    }
}

/* One q8_0 / q4_0 cache row slice of n elements (n a multiple of 32) decoded
 * to f32: d * q (q8_0), d * (q - 8) (q4_0), exact products as the scalar
 * decoders give. Returns false for other dtypes. */
bool pl_cpu_attq_decode_avx2(pl_dtype t, const void *src, float *dst, int64_t n) {
    if (t == PL_Q8_0) {
        const block_q8_0 *b = src;
        for (int64_t i = 0; i < n / 32; i++, dst += 32) {
            const __m256 d = _mm256_set1_ps(pl_f16_to_f32(b[i].d));
            for (int k = 0; k < 32; k += 8) {
                const __m128i q = _mm_loadl_epi64((const __m128i *)(b[i].qs + k));
                _mm256_storeu_ps(dst + k, _mm256_mul_ps(d, _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(q))));
            }
        }
        return true;
    }
    if (t == PL_Q4_0) {
        const block_q4_0 *b = src;
        const __m128i lo = _mm_set1_epi8(0x0f), eight = _mm_set1_epi8(8);
        for (int64_t i = 0; i < n / 32; i++, dst += 32) {
            const __m256 d = _mm256_set1_ps(pl_f16_to_f32(b[i].d));
            const __m128i q = _mm_loadu_si128((const __m128i *)b[i].qs);
            /* elements 0..15: low nibbles, 16..31: high nibbles, each minus 8 */
            const __m128i q0 = _mm_sub_epi8(_mm_and_si128(q, lo), eight);
            const __m128i q1 = _mm_sub_epi8(_mm_and_si128(_mm_srli_epi16(q, 4), lo), eight);
            const __m128i h[2] = {q0, q1};
            for (int k = 0; k < 2; k++) {
                _mm256_storeu_ps(dst + 16 * k, _mm256_mul_ps(d, _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(h[k]))));
                _mm256_storeu_ps(dst + 16 * k + 8,
                                 _mm256_mul_ps(d, _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(_mm_srli_si128(h[k], 8)))));
            }
        }
        return true;
    }
    return false;
}

/* pl_cpu_att_vkq_rows_avx2's recurrence with the accumulators in zmm
 * registers for a whole piece: for each KV head of the block, each pair of
 * its rows and each tile of 16 NZ dims, the positions 0..n-1 in turn. The
 * position-major kernel loads and stores every accumulator at every
 * position and its 8-lane f16 round trips (cvtps2ph + cvtph2ps after each
 * step) take twice the uops of 16-lane ones. Here a tile's 2 x NZ
 * accumulators (NZ <= 8: 16 registers) stay in registers and every V vector
 * is converted once for both rows. Each accumulator element sees the same
 * operations in the same order as there (rescale by -E when E's sign bit
 * marks a new maximum, then fma and, with an f16 cache, the f16 rounding),
 * so the bits are the same (test_attention_split: check_rows512). The
 * piece's V rows are read once per KV head, pair and tile: the first read
 * from memory (the rows are prefetched ahead as in the position-major
 * kernel, whole rows), the rest from L1 / L2 (64 positions x 2 KB). */
PL_AVX512_AI void pl_vkq_tile512(const int NZ, const int f16, const float *E0, const float *E1, int64_t n,
                                 const char *vg, size_t vs, const char *pfrow, size_t span, float *A0, float *A1) {
    __m512 a0[8], a1[8];
    PL_UNROLL
    for (int z = 0; z < NZ; z++) a0[z] = _mm512_loadu_ps(A0 + 16 * z), a1[z] = _mm512_loadu_ps(A1 + 16 * z);
    for (int64_t j = 0; j < n; j++) {
        const char *vr = vg + j * vs;
        if (pfrow) pl_prefetch_slice(pfrow, vs, span, j, n);
        float w0 = E0[j], w1 = E1[j];
        if (signbit(w0)) {
            const __m512 ms = _mm512_set1_ps(-w0);
            PL_UNROLL
            for (int z = 0; z < NZ; z++) {
                a0[z] = _mm512_mul_ps(a0[z], ms);
                if (f16) a0[z] = _mm512_cvtph_ps(_mm512_cvtps_ph(a0[z], _MM_FROUND_TO_NEAREST_INT));
            }
            w0 = 1.0f;
        }
        if (signbit(w1)) {
            const __m512 ms = _mm512_set1_ps(-w1);
            PL_UNROLL
            for (int z = 0; z < NZ; z++) {
                a1[z] = _mm512_mul_ps(a1[z], ms);
                if (f16) a1[z] = _mm512_cvtph_ps(_mm512_cvtps_ph(a1[z], _MM_FROUND_TO_NEAREST_INT));
            }
            w1 = 1.0f;
        }
        const __m512 wv0 = _mm512_set1_ps(w0), wv1 = _mm512_set1_ps(w1);
        PL_UNROLL
        for (int z = 0; z < NZ; z++) {
            const __m512 x = f16 ? _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)(vr + 32 * z)))
                                 : _mm512_loadu_ps((const float *)vr + 16 * z);
            a0[z] = _mm512_fmadd_ps(x, wv0, a0[z]);
            a1[z] = _mm512_fmadd_ps(x, wv1, a1[z]);
            if (f16) {
                a0[z] = _mm512_cvtph_ps(_mm512_cvtps_ph(a0[z], _MM_FROUND_TO_NEAREST_INT));
                a1[z] = _mm512_cvtph_ps(_mm512_cvtps_ph(a1[z], _MM_FROUND_TO_NEAREST_INT));
            }
        }
    }
    PL_UNROLL
    for (int z = 0; z < NZ; z++) _mm512_storeu_ps(A0 + 16 * z, a0[z]), _mm512_storeu_ps(A1 + 16 * z, a1[z]);
}

/* As pl_cpu_att_vkq_rows_avx2 (same arguments, same bits); group even,
 * hd % 32 == 0. */
PL_AVX512 void pl_cpu_att_vkq_rows_avx512(int G, int group, const float *E, int64_t ldE, int64_t n, const char *v,
                                          size_t vs, bool f16, int64_t hd, float *A) {
    const size_t el = f16 ? 2 : 4;
    const size_t span = (size_t)G * (size_t)hd * el;   /* the block's slices of a row: prefetched whole */
    const int NZ = hd % 128 == 0 ? 8 : hd % 64 == 0 ? 4 : 2;
    bool first = true;
    for (int g = 0; g < G; g++)
        for (int h = 0; h < group; h += 2) {
            const int r = g * group + h;
            for (int64_t d = 0; d < hd; d += 16 * NZ) {
                const char *vg = v + ((size_t)g * (size_t)hd + (size_t)d) * el;
                const float *E0 = E + r * ldE, *E1 = E0 + ldE;
                float *A0 = A + (int64_t)r * hd + d, *A1 = A0 + hd;
                /* the first pass reads the piece from memory: it prefetches the block's whole rows ahead */
                const char *pf = first ? v : NULL;
                if (f16) {
                    if (NZ == 8) pl_vkq_tile512(8, 1, E0, E1, n, vg, vs, pf, span, A0, A1);
                    else if (NZ == 4) pl_vkq_tile512(4, 1, E0, E1, n, vg, vs, pf, span, A0, A1);
                    else pl_vkq_tile512(2, 1, E0, E1, n, vg, vs, pf, span, A0, A1);
                } else {
                    if (NZ == 8) pl_vkq_tile512(8, 0, E0, E1, n, vg, vs, pf, span, A0, A1);
                    else if (NZ == 4) pl_vkq_tile512(4, 0, E0, E1, n, vg, vs, pf, span, A0, A1);
                    else pl_vkq_tile512(2, 0, E0, E1, n, vg, vs, pf, span, A0, A1);
                }
                first = false;
            }
        }
}

/* pl_dot_partials_1x2 on zmm: lanes 0-7 / 8-15 of z[h][0] are its s[h][0] /
 * s[h][1], those of z[h][1] its s[h][2] / s[h][3] (the same products added
 * in the same order, lane for lane), and a[h] = (s0 + s2) + (s1 + s3) as
 * there: the same bits with half the fma and conversion uops. np % 32 == 0. */
PL_AVX512_AI void pl_dot_partials_1x2_512(const float *q0, const float *q1, const char *k, const int f16, int64_t np,
                                          __m256 a[2]) {
    __m512 z[2][2];
    z[0][0] = z[0][1] = z[1][0] = z[1][1] = _mm512_setzero_ps();
    for (int64_t i = 0; i < np; i += 32) {
        PL_UNROLL
        for (int c = 0; c < 2; c++) {
            const __m512 x = f16 ? _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)((const uint16_t *)k + i + 16 * c)))
                                 : _mm512_loadu_ps((const float *)k + i + 16 * c);
            z[0][c] = _mm512_fmadd_ps(x, _mm512_loadu_ps(q0 + i + 16 * c), z[0][c]);
            z[1][c] = _mm512_fmadd_ps(x, _mm512_loadu_ps(q1 + i + 16 * c), z[1][c]);
        }
    }
    PL_UNROLL
    for (int h = 0; h < 2; h++) {
        const __m512 t = _mm512_add_ps(z[h][0], z[h][1]);
        a[h] = _mm256_add_ps(_mm512_castps512_ps256(t), _mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(t), 1)));
    }
}

/* As pl_cpu_att_dots_rows_avx2 (same arguments, same bits), the partial sums
 * on zmm (pl_dot_partials_1x2_512). */
PL_AVX512 void pl_cpu_att_dots_rows_avx512(int G, int group, const float *const *q, const char *k, size_t ks, bool f16,
                                           int64_t n, int64_t hd, float scale, float *S, int64_t ldS) {
    const int rows = G * group;
    const size_t el = f16 ? 2 : 4;
    const __m256 sc = _mm256_set1_ps(scale);
    const size_t slice = (size_t)G * (size_t)hd * el;
    for (int64_t j = 0; j < n; j++) {
        const char *kr = k + j * ks;
        pl_prefetch_slice(k, ks, slice, j, n);
        __m256 a[8];
        int na = 0, r0 = 0;
        for (int r = 0; r < rows; r += 2) {
            const char *kg = kr + (size_t)(r / group) * (size_t)hd * el;
            if (f16) pl_dot_partials_1x2_512(q[r], q[r + 1], kg, 1, hd, a + na);
            else pl_dot_partials_1x2_512(q[r], q[r + 1], kg, 0, hd, a + na);
            na += 2;
            if (na == 8 || r + 2 == rows) {
                pl_dots_rows_store(a, na, sc, S, ldS, r0, j);
                r0 += na;
                na = 0;
            }
        }
    }
}
