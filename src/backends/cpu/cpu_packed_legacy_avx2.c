/* Prepared-weight kernels for q4_0 and q5_0 (the legacy types real files
 * use most) and, at the end of the file, q4_1 / q5_1, in the
 * manner of the k-quant ones of cpu_packed_avx2.c: 16 rows per panel, one
 * 32-bit lane per row, vpdpbusd of 4 unsigned codes (a "chunk") against the
 * 4 activation bytes broadcast. Layouts: cpu_internal.h (pl_q40x16,
 * pl_q50x16); activations: pl_q80x (llama.cpp's q8_0 block plus the sum of
 * its codes). Per block of 32 and row:
 *     sumi = sum(q * q8) - off * sum(q8)       (off = 8 / 16: the signed code
 *                                                is q - off; exact integers)
 *     acc += (float)sumi * (dx * dy)
 * the integer dot of ggml_vec_dot_q4_0_q8_0 / q5_0_q8_0 and its float step.
 * Compiled with -mavx2 -mfma -mf16c; the functions carry the AVX-512
 * target attribute and run only after pl_cpu_has_vnni512().
 */
#include <immintrin.h>
#include <string.h>
#include "backends/cpu/cpu_internal.h"
#include "backends/cpu/cpu_matmul_legacy.h"
#include "backends/cpu/cpu_simd_avx2.h"
#include "core/fp16.h"

#define PL_VNNI __attribute__((target("avx512f,avx512vl,avx512bw,avx512dq,avx512vnni")))
#define PL_VNNI_AI static inline __attribute__((always_inline, target("avx512f,avx512vl,avx512bw,avx512dq,avx512vnni")))

void pl_cpu_q80x_quantize_avx2(const float *x, pl_q80x *y, int64_t K) {
    for (int64_t i = 0; i < K / QK8_0; i++) {
        block_q8_0 b;
        pl_cpu_quantize_q8_0_avx2(x + QK8_0 * i, &b, QK8_0);
        y[i].d = pl_f16_to_f32(b.d);
        int s = 0;
        for (int j = 0; j < QK8_0; j++) s += b.qs[j];
        y[i].sum = s;
        memcpy(y[i].qs, b.qs, QK8_0);
    }
}

typedef int32_t pl_i32u_l __attribute__((aligned(1), may_alias));
PL_VNNI_AI __m512i pl_dpl(__m512i acc, __m512i w, const int8_t *y) {
    return _mm512_dpbusd_epi32(acc, w, _mm512_set1_epi32(*(const pl_i32u_l *)y));
}

/* One 64-byte weight vector, loaded once (see pl_ld512 in cpu_packed_avx2.c). */
PL_VNNI_AI __m512i pl_ld512_l(const void *p) {
    __m512i v = _mm512_loadu_si512(p);
    __asm__("" : "+v"(v));
    return v;
}

PL_VNNI_AI __mmask16 pl_panel_mask_l(int64_t p, int64_t N) {
    const int64_t left = N - PL_KQX_ROWS * p;
    return left >= PL_KQX_ROWS ? (__mmask16)0xFFFF : (__mmask16)((1u << left) - 1);
}

/* The unsigned codes of chunks 2v (lo) and 2v + 1 (hi) of a block. q5_0:
 * bit c of byte 4r + e of qh is bit 4 of chunk c's element e; moved to bit
 * 4 of its byte (16-bit shifts: what crosses into the next byte lands at
 * bit 5 or above, or 3 or below, and the 0x10 mask drops it) and or-ed in
 * (ternary logic 0xF8 = A | (B & C)). */
PL_VNNI_AI void pl_codes40(const pl_q40x16 *xb, int v, __m512i *lo, __m512i *hi) {
    const __m512i m4 = _mm512_set1_epi8(0x0F);
    const __m512i b = pl_ld512_l(xb->qs[v]);
    *lo = _mm512_and_si512(b, m4);
    *hi = _mm512_and_si512(_mm512_srli_epi16(b, 4), m4);
}

PL_VNNI_AI __m512i pl_q5_hbit(__m512i qh, const int c) {
    return c <= 4 ? _mm512_slli_epi16(qh, 4 - c) : _mm512_srli_epi16(qh, c - 4);
}

PL_VNNI_AI void pl_codes50(const pl_q50x16 *xb, __m512i qh, int v, __m512i *lo, __m512i *hi) {
    const __m512i m4 = _mm512_set1_epi8(0x0F), b4 = _mm512_set1_epi8(0x10);
    const __m512i b = pl_ld512_l(xb->qs[v]);
    *lo = _mm512_ternarylogic_epi32(_mm512_and_si512(b, m4), pl_q5_hbit(qh, 2 * v), b4, 0xF8);
    *hi = _mm512_ternarylogic_epi32(_mm512_and_si512(_mm512_srli_epi16(b, 4), m4), pl_q5_hbit(qh, 2 * v + 1), b4,
                                    0xF8);
}

/* One panel x R activation rows (R = 1..4); Q5 selects the type. Each row's
 * integer sum starts at -off * sum(q8) and takes the 8 chunks in two
 * chains (lo / hi). */
PL_VNNI_AI void pl_legacy_panel(int64_t nb, const void *xv, const pl_q80x *const *y, float *d, int64_t ldd,
                                __mmask16 mk, const int R, const int Q5) {
    __m512 accf[4];
    PL_UNROLL
    for (int c = 0; c < R; c++) accf[c] = _mm512_setzero_ps();
    const int off = Q5 ? 16 : 8;
    for (int64_t b = 0; b < nb; b++) {
        __m512i a0[4], a1[4];
        PL_UNROLL
        for (int c = 0; c < R; c++) {
            a0[c] = _mm512_set1_epi32(-off * y[c][b].sum);
            a1[c] = _mm512_setzero_si512();
        }
        const uint16_t *dx;
        __m512i qh = _mm512_setzero_si512();
        if (Q5) {
            const pl_q50x16 *xb = (const pl_q50x16 *)xv + b;
            dx = xb->d;
            qh = pl_ld512_l(xb->qh);
        } else {
            dx = ((const pl_q40x16 *)xv + b)->d;
        }
        PL_UNROLL
        for (int v = 0; v < 4; v++) {
            __m512i lo, hi;
            if (Q5) pl_codes50((const pl_q50x16 *)xv + b, qh, v, &lo, &hi);
            else pl_codes40((const pl_q40x16 *)xv + b, v, &lo, &hi);
            PL_UNROLL
            for (int c = 0; c < R; c++) {
                a0[c] = pl_dpl(a0[c], lo, y[c][b].qs + 8 * v);
                a1[c] = pl_dpl(a1[c], hi, y[c][b].qs + 8 * v + 4);
            }
        }
        const __m512 d16 = _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)dx));
        PL_UNROLL
        for (int c = 0; c < R; c++)
            accf[c] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(_mm512_add_epi32(a0[c], a1[c])),
                                      _mm512_mul_ps(d16, _mm512_set1_ps(y[c][b].d)), accf[c]);
    }
    PL_UNROLL
    for (int c = 0; c < R; c++) _mm512_mask_storeu_ps(d + c * ldd, mk, accf[c]);
}

#define PL_LEGACY_GEMM(NAME, T, Q5)                                                                            \
    PL_VNNI void NAME(int64_t K, const T *w, int64_t p0, int64_t p1, const pl_q80x *a, size_t as, int64_t c0,   \
                      int64_t c1, float *dst, int64_t N) {                                                     \
        const int64_t nb = K / QK8_0;                                                                          \
        for (int64_t p = p0; p < p1; p++) {                                                                    \
            const T *x = w + p * nb;                                                                           \
            const __mmask16 mk = pl_panel_mask_l(p, N);                                                        \
            for (int64_t c = c0; c < c1; c += 4) {                                                             \
                const pl_q80x *y[4];                                                                           \
                const int R = c1 - c < 4 ? (int)(c1 - c) : 4;                                                  \
                for (int i = 0; i < R; i++) y[i] = (const pl_q80x *)((const char *)a + (c + i) * as);          \
                float *d = dst + c * N + PL_KQX_ROWS * p;                                                      \
                switch (R) {                                                                                   \
                    case 4: pl_legacy_panel(nb, x, y, d, N, mk, 4, Q5); break;                                 \
                    case 3: pl_legacy_panel(nb, x, y, d, N, mk, 3, Q5); break;                                 \
                    case 2: pl_legacy_panel(nb, x, y, d, N, mk, 2, Q5); break;                                 \
                    default: pl_legacy_panel(nb, x, y, d, N, mk, 1, Q5); break;                                \
                }                                                                                              \
            }                                                                                                  \
        }                                                                                                      \
    }

PL_LEGACY_GEMM(pl_cpu_gemm_q40x16_vnni, pl_q40x16, 0)
PL_LEGACY_GEMM(pl_cpu_gemm_q50x16_vnni, pl_q50x16, 1)

/* ---- q4_1 / q5_1 (pl_q41x16, pl_q51x16) ---------------------------------------
 * Unsigned codes against q8_1 activations, with the float steps of
 * ggml_vec_dot_q4_1_q8_1 (x86) and of the tiles of cpu_matmul_legacy_avx2.c,
 * which equal it bit for bit: its 8 lanes are the 8 chunks of 4 elements of
 * a block (chunk j: elements 4j..4j+3, one vpdpbusd here), so per row
 *     acc[j] += (float)sum_chunk_j(q * q8) * (dx * dy)   (fused, block order)
 *     summs  += mx * sy                                    (rounded twice)
 *     out     = ((acc0 + acc4) + (acc2 + acc6)) + ((acc1 + acc5) + (acc3 + acc7)) + summs
 * Exactly the same numbers, not merely close: SmolLM2-135M Q4_1's
 * perplexity moved by 0.13% when only the order of these additions changed
 * (the activation requantization turns last-bit differences into code
 * flips; bench/RESULTS.md), so prepared and unprepared must agree. */

void pl_cpu_q81x_quantize_avx2(const float *x, pl_q81x *y, int64_t K) {
    for (int64_t i = 0; i < K / QK8_1; i++) {
        block_q8_1 b;
        pl_cpu_quantize_q8_1_avx2(x + QK8_1 * i, &b, QK8_1);
        y[i].d = pl_f16_to_f32(b.d);
        y[i].s = pl_f16_to_f32(b.s);
        memcpy(y[i].qs, b.qs, QK8_1);
    }
}

/* The q5_1 codes of chunks 2v, 2v + 1: as q5_0's (the fifth bit or-ed in). */
PL_VNNI_AI void pl_codes51(const pl_q51x16 *xb, __m512i qh, int v, __m512i *lo, __m512i *hi) {
    const __m512i m4 = _mm512_set1_epi8(0x0F), b4 = _mm512_set1_epi8(0x10);
    const __m512i b = pl_ld512_l(xb->qs[v]);
    *lo = _mm512_ternarylogic_epi32(_mm512_and_si512(b, m4), pl_q5_hbit(qh, 2 * v), b4, 0xF8);
    *hi = _mm512_ternarylogic_epi32(_mm512_and_si512(_mm512_srli_epi16(b, 4), m4), pl_q5_hbit(qh, 2 * v + 1), b4,
                                    0xF8);
}

PL_VNNI_AI void pl_legacy1_panel(int64_t nb, const void *xv, const pl_q81x *const *y, float *d, int64_t ldd,
                                 __mmask16 mk, const int R, const int Q5) {
    __m512 acc[2][8], summs[2];
    PL_UNROLL
    for (int c = 0; c < R; c++) {
        summs[c] = _mm512_setzero_ps();
        PL_UNROLL
        for (int j = 0; j < 8; j++) acc[c][j] = _mm512_setzero_ps();
    }
    const __m512i m4 = _mm512_set1_epi8(0x0F);
    for (int64_t b = 0; b < nb; b++) {
        const uint16_t *dx, *mx;
        __m512i qh = _mm512_setzero_si512();
        if (Q5) {
            const pl_q51x16 *xb = (const pl_q51x16 *)xv + b;
            dx = xb->d, mx = xb->m;
            qh = pl_ld512_l(xb->qh);
        } else {
            const pl_q41x16 *xb = (const pl_q41x16 *)xv + b;
            dx = xb->d, mx = xb->m;
        }
        const __m512 d16 = _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)dx));
        const __m512 m16 = _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)mx));
        __m512 dd[2];
        PL_UNROLL
        for (int c = 0; c < R; c++) {
            dd[c] = _mm512_mul_ps(d16, _mm512_set1_ps(y[c][b].d));
            summs[c] = _mm512_add_ps(summs[c], _mm512_mul_ps(m16, _mm512_set1_ps(y[c][b].s)));
        }
        PL_UNROLL
        for (int v = 0; v < 4; v++) {
            __m512i lo, hi;
            if (Q5) {
                pl_codes51((const pl_q51x16 *)xv + b, qh, v, &lo, &hi);
            } else {
                const __m512i q = pl_ld512_l(((const pl_q41x16 *)xv + b)->qs[v]);
                lo = _mm512_and_si512(q, m4);
                hi = _mm512_and_si512(_mm512_srli_epi16(q, 4), m4);
            }
            PL_UNROLL
            for (int c = 0; c < R; c++) {
                const __m512i plo = pl_dpl(_mm512_setzero_si512(), lo, y[c][b].qs + 8 * v);
                const __m512i phi = pl_dpl(_mm512_setzero_si512(), hi, y[c][b].qs + 8 * v + 4);
                acc[c][2 * v] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(plo), dd[c], acc[c][2 * v]);
                acc[c][2 * v + 1] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(phi), dd[c], acc[c][2 * v + 1]);
            }
        }
    }
    PL_UNROLL
    for (int c = 0; c < R; c++) {
        const __m512 *a = acc[c];
        const __m512 t = _mm512_add_ps(_mm512_add_ps(_mm512_add_ps(a[0], a[4]), _mm512_add_ps(a[2], a[6])),
                                       _mm512_add_ps(_mm512_add_ps(a[1], a[5]), _mm512_add_ps(a[3], a[7])));
        _mm512_mask_storeu_ps(d + c * ldd, mk, _mm512_add_ps(t, summs[c]));
    }
}

/* Two activation rows per pass (8 accumulators each: 16 of the 32 vector
 * registers). */
#define PL_LEGACY1_GEMM(NAME, T, Q5)                                                                           \
    PL_VNNI void NAME(int64_t K, const T *w, int64_t p0, int64_t p1, const pl_q81x *a, size_t as, int64_t c0,   \
                      int64_t c1, float *dst, int64_t N) {                                                     \
        const int64_t nb = K / QK8_1;                                                                          \
        for (int64_t p = p0; p < p1; p++) {                                                                    \
            const T *x = w + p * nb;                                                                           \
            const __mmask16 mk = pl_panel_mask_l(p, N);                                                        \
            for (int64_t c = c0; c < c1; c += 2) {                                                             \
                const pl_q81x *y[2];                                                                           \
                const int R = c1 - c < 2 ? 1 : 2;                                                              \
                for (int i = 0; i < R; i++) y[i] = (const pl_q81x *)((const char *)a + (c + i) * as);          \
                float *d = dst + c * N + PL_KQX_ROWS * p;                                                      \
                if (R == 2) pl_legacy1_panel(nb, x, y, d, N, mk, 2, Q5);                                       \
                else pl_legacy1_panel(nb, x, y, d, N, mk, 1, Q5);                                              \
            }                                                                                                  \
        }                                                                                                      \
    }

PL_LEGACY1_GEMM(pl_cpu_gemm_q41x16_vnni, pl_q41x16, 0)
PL_LEGACY1_GEMM(pl_cpu_gemm_q51x16_vnni, pl_q51x16, 1)
