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

PL_AI __m256 pl_ld8(const char *row, int64_t d, const int f16) {
    if (f16) return _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)((const uint16_t *)row + d)));
    return _mm256_loadu_ps((const float *)row + d);
}

/* Cache rows j0..j0+n-1 of a K/V head slice (bytes each) are requested
 * ahead of use. The slice of one head is a few hundred bytes out of every
 * (kilobytes long) cache row, a stride the hardware prefetchers do not follow
 * across pages, so without this every line is a demand miss to L3. */
PL_AI void pl_prefetch_rows(const char *base, size_t stride, int64_t j0, int64_t n, int64_t n_kv, size_t bytes) {
    if (j0 + n > n_kv) n = n_kv - j0;
    for (int64_t j = 0; j < n; j++)
        for (size_t off = 0; off < bytes; off += 64) _mm_prefetch(base + (j0 + j) * stride + off, _MM_HINT_T0);
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
