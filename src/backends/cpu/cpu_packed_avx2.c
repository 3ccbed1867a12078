/* Kernels for the prepared (interleaved) weight layouts of cpu_internal.h.
 * Compiled with -mavx2 -mfma -mf16c like every *_avx2.c; the functions here
 * additionally carry an AVX-512 target attribute (F/BW/VL/DQ/VNNI) and are
 * only called after pl_cpu_has_vnni512().
 *
 * k-quants (q4_K, q6_K x q8_K activations), 512-bit vectors: one 32-bit
 * lane per weight row, each lane a dot product of 4 consecutive k ("chunk"):
 *     acc[r] += sum_{e<4} w[r][4c + e] * y[4c + e]      (vpdpbusd)
 * with the 4 activation bytes of chunk c broadcast to every lane. A 64-byte
 * vector of the layout holds two chunks (low and high nibble) of 16 rows, so
 * one load, two ANDs and a shift feed two vpdpbusd. Per sub-block the lane
 * sums are scaled by the row's integer scale (vpmulld) into one int32 sum per
 * super-block, which is scaled to float once (d * dy), exactly as the q8_K
 * dot products of cpu_matmul*.c (integer parts are exact; the float steps
 * per super-block are the same operations in the same order, whatever the
 * number of activation rows of a call: batched == alone bit for bit).
 *
 * f16 (x f16-rounded activations, as F32): outer products, 16 rows per panel
 * (decode: in two 256-bit vectors; prefill: one 512-bit vector), the
 * activation broadcast: one FMA per 8 products and no
 * horizontal sums; a row's sum runs over k in order in one lane.
 */
#include <immintrin.h>
#include <string.h>
#include "backends/cpu/cpu_internal.h"
#include "backends/cpu/cpu_simd_avx2.h"

#define PL_VNNI __attribute__((target("avx512f,avx512vl,avx512bw,avx512dq,avx512vnni")))
#define PL_VNNI_AI static inline __attribute__((always_inline, target("avx512f,avx512vl,avx512bw,avx512dq,avx512vnni")))

/* ---- activations ------------------------------------------------------------*/

void pl_cpu_q8kx_quantize_avx2(const float *x, pl_q8kx *y, int64_t K) {
    for (int64_t i = 0; i < K / QK_K; i++) {
        pl_cpu_quantize_q8_K_avx2(x + QK_K * i, &y[i].b, QK_K);
        for (int g = 0; g < 8; g++) y[i].bsum32[g] = (int16_t)(y[i].b.bsums[2 * g] + y[i].b.bsums[2 * g + 1]);
        for (int j = 0; j < 16; j++) y[i].nb32[j] = -32 * (int32_t)y[i].b.bsums[j];
    }
}

typedef int32_t pl_i32u __attribute__((aligned(1), may_alias));
PL_VNNI_AI __m512i pl_bcast4z(const void *p) {
    return _mm512_set1_epi32(*(const pl_i32u *)p);   /* an embedded {1to16} broadcast */
}

PL_VNNI_AI __m512i pl_dpz(__m512i acc, __m512i w, const void *y) {
    return _mm512_dpbusd_epi32(acc, w, pl_bcast4z(y));
}

/* One 64-byte weight vector, loaded once. Each vector feeds two
 * instructions (AND and shift); left to itself the compiler folds the load
 * into both, and the load ports (one 512-bit load per cycle on Zen 4, shared
 * with the activation broadcasts) become the decode sweep's limit. The empty
 * asm makes the value opaque, so it stays one load. q4_K decode from L1/L2,
 * K x N = 1024 x 256: 144-161 cycles per block of 16 rows before, 126-145
 * after. */
PL_VNNI_AI __m512i pl_ld512(const void *p) {
    __m512i v = _mm512_loadu_si512(p);
    __asm__("" : "+v"(v));
    return v;
}

PL_VNNI_AI __m512i pl_sc16(const uint8_t *p) {   /* 16 u8 -> 16 x i32 */
    return _mm512_cvtepu8_epi32(_mm_loadu_si128((const __m128i *)p));
}

PL_VNNI_AI __m512i pl_sc16s(const int8_t *p) {   /* 16 i8 -> 16 x i32 */
    return _mm512_cvtepi8_epi32(_mm_loadu_si128((const __m128i *)p));
}

PL_VNNI_AI __m512 pl_d16(const uint16_t *p) {    /* 16 f16 -> 16 x f32 */
    return _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)p));
}

/* The rows of panel p that exist (a last panel may be padded). */
PL_VNNI_AI __mmask16 pl_panel_mask(int64_t p, int64_t N) {
    const int64_t left = N - PL_KQX_ROWS * p;
    return left >= PL_KQX_ROWS ? (__mmask16)0xFFFF : (__mmask16)((1u << left) - 1);
}

/* ---- q4_K x16, q5_K x16 ---------------------------------------------------------*/

/* q5_K is q4_K plus a fifth bit per code: one body serves both, q5 a
 * compile-time constant (every caller passes a literal; the bodies are
 * always_inline, so each type gets its own code with the other's branches
 * folded away). The 5-bit code of chunk c of a group is nibble | (fifth bit
 * << 4), the fifth bit taken from bit c of the group's high-bit vector h:
 * moved to bit 4 by one 16-bit shift (bit 4 of a byte then comes from bit c
 * of the same byte; the other bits are don't-care) and or-ed in under the
 * mask 0x10 by one ternary op ((A & B) | C, imm 0xEA). The sums are the same
 * for both: sum_c code * y per group, times the group's scale, the mins
 * through the bsums, d * dy and dmin * dy once per super-block. */
PL_VNNI_AI __m512i pl_q5_code(__m512i nib, __m512i h, const int c) {
    const __m512i sh = c < 4 ? _mm512_slli_epi16(h, 4 - c) : c > 4 ? _mm512_srli_epi16(h, c - 4) : h;
    return _mm512_ternarylogic_epi32(sh, _mm512_set1_epi8(0x10), nib, 0xEA);
}

/* The code-extract step, the only place q4_K and q5_K differ: chunk c of a
 * group from its low-bit vector bits (chunk 2v in the low nibbles, 2v + 1 in
 * the high) and, for q5_K, its high-bit vector h (unused for q4_K). */
PL_VNNI_AI __m512i pl_k45_code(__m512i bits, __m512i h, const int c, const int q5) {
    const __m512i m4 = _mm512_set1_epi8(0x0F);
    const __m512i nib = c & 1 ? _mm512_and_si512(_mm512_srli_epi16(bits, 4), m4) : _mm512_and_si512(bits, m4);
    return q5 ? pl_q5_code(nib, h, c) : nib;
}

/* Block b of a q4_K (q5 == 0) or q5_K panel: the scales shared by the two
 * layouts, the fifth-bit vectors (q5_K only) and the low-bit vectors. */
typedef struct pl_k45_block {
    const pl_kx16_scales *s;
    const uint8_t (*qh)[64];        /* [group][4*row + e]; NULL for q4_K */
    const uint8_t (*qs)[8][64];     /* [vector][group][4*row + e] */
} pl_k45_block;

PL_VNNI_AI pl_k45_block pl_k45_at(const void *x, int64_t b, const int q5) {
    if (q5) {
        const pl_q5kx16 *xb = (const pl_q5kx16 *)x + b;
        return (pl_k45_block){&xb->s, xb->qh, xb->qs};
    }
    const pl_q4kx16 *xb = (const pl_q4kx16 *)x + b;
    return (pl_k45_block){&xb->s, NULL, xb->qs};
}

/* The group's high-bit vector (q5_K), or nothing (q4_K: a zero the code step ignores). */
PL_VNNI_AI __m512i pl_k45_high(pl_k45_block xb, int g, const int q5) {
    return q5 ? pl_ld512(xb.qh[g]) : _mm512_setzero_si512();
}

/* One panel, one activation row: all 8 groups of a super-block in flight
 * (8 independent vpdpbusd chains). */
PL_VNNI_AI __m512 pl_k45_gemv_panel(int64_t nb, const void *x, const pl_q8kx *y, const int q5) {
    __m512 accf = _mm512_setzero_ps();
    for (int64_t b = 0; b < nb; b++) {
        const pl_k45_block xb = pl_k45_at(x, b, q5);
        const int8_t *q = y[b].b.qs;
        __m512i acc[8], h[8];
        PL_UNROLL
        for (int g = 0; g < 8; g++) {
            acc[g] = _mm512_setzero_si512();
            h[g] = pl_k45_high(xb, g, q5);
        }
        PL_UNROLL
        for (int v = 0; v < 4; v++) {
            PL_UNROLL
            for (int g = 0; g < 8; g++) {
                const __m512i bits = pl_ld512(xb.qs[v][g]);
                const __m512i lo = pl_k45_code(bits, h[g], 2 * v, q5);
                const __m512i hi = pl_k45_code(bits, h[g], 2 * v + 1, q5);
                acc[g] = pl_dpz(acc[g], lo, q + 32 * g + 8 * v);
                acc[g] = pl_dpz(acc[g], hi, q + 32 * g + 8 * v + 4);
            }
        }
        __m512i sumi = _mm512_mullo_epi32(acc[0], pl_sc16(xb.s->sc[0]));
        PL_UNROLL
        for (int g = 1; g < 8; g++) sumi = _mm512_add_epi32(sumi, _mm512_mullo_epi32(acc[g], pl_sc16(xb.s->sc[g])));
        __m512i summ = _mm512_setzero_si512();
        PL_UNROLL
        for (int p = 0; p < 4; p++)
            summ = _mm512_dpwssd_epi32(summ, _mm512_cvtepu8_epi16(_mm256_loadu_si256((const __m256i *)xb.s->m[p])),
                                       pl_bcast4z(&y[b].bsum32[2 * p]));
        const __m512 dy = _mm512_set1_ps(y[b].b.d);
        const __m512 dd = _mm512_mul_ps(pl_d16(xb.s->d), dy);
        const __m512 dm = _mm512_mul_ps(pl_d16(xb.s->dmin), dy);
        accf = _mm512_fmadd_ps(_mm512_cvtepi32_ps(sumi), dd, accf);
        accf = _mm512_fnmadd_ps(_mm512_cvtepi32_ps(summ), dm, accf);
    }
    return accf;
}

/* One panel, R activation rows: two groups in flight per row (2R chains);
 * the codes are extracted once and reused by every row. The float steps per
 * super-block are those of pl_k45_gemv_panel (batched == alone). */
PL_VNNI_AI void pl_k45_gemm_panel(int64_t nb, const void *x, const pl_q8kx *const *y, float *d, int64_t ldd,
                                  __mmask16 mk, const int R, const int q5) {
    __m512 accf[4];
    PL_UNROLL
    for (int c = 0; c < R; c++) accf[c] = _mm512_setzero_ps();
    for (int64_t b = 0; b < nb; b++) {
        const pl_k45_block xb = pl_k45_at(x, b, q5);
        __m512i sumi[4], summ[4];
        PL_UNROLL
        for (int c = 0; c < R; c++) sumi[c] = _mm512_setzero_si512();
        PL_UNROLL
        for (int g = 0; g < 8; g += 2) {
            __m512i a0[4], a1[4];
            PL_UNROLL
            for (int c = 0; c < R; c++) a0[c] = a1[c] = _mm512_setzero_si512();
            const __m512i h0 = pl_k45_high(xb, g, q5), h1 = pl_k45_high(xb, g + 1, q5);
            PL_UNROLL
            for (int v = 0; v < 4; v++) {
                const __m512i b0 = pl_ld512(xb.qs[v][g]);
                const __m512i b1 = pl_ld512(xb.qs[v][g + 1]);
                const __m512i lo0 = pl_k45_code(b0, h0, 2 * v, q5), hi0 = pl_k45_code(b0, h0, 2 * v + 1, q5);
                const __m512i lo1 = pl_k45_code(b1, h1, 2 * v, q5), hi1 = pl_k45_code(b1, h1, 2 * v + 1, q5);
                PL_UNROLL
                for (int c = 0; c < R; c++) {
                    const int8_t *q = y[c][b].b.qs + 32 * g + 8 * v;
                    a0[c] = pl_dpz(a0[c], lo0, q);
                    a1[c] = pl_dpz(a1[c], lo1, q + 32);
                    a0[c] = pl_dpz(a0[c], hi0, q + 4);
                    a1[c] = pl_dpz(a1[c], hi1, q + 36);
                }
            }
            const __m512i s0 = pl_sc16(xb.s->sc[g]), s1 = pl_sc16(xb.s->sc[g + 1]);
            PL_UNROLL
            for (int c = 0; c < R; c++)
                sumi[c] = _mm512_add_epi32(sumi[c], _mm512_add_epi32(_mm512_mullo_epi32(a0[c], s0),
                                                                     _mm512_mullo_epi32(a1[c], s1)));
        }
        __m512i mv[4];
        PL_UNROLL
        for (int p = 0; p < 4; p++) mv[p] = _mm512_cvtepu8_epi16(_mm256_loadu_si256((const __m256i *)xb.s->m[p]));
        PL_UNROLL
        for (int c = 0; c < R; c++) {
            summ[c] = _mm512_setzero_si512();
            PL_UNROLL
            for (int p = 0; p < 4; p++) summ[c] = _mm512_dpwssd_epi32(summ[c], mv[p], pl_bcast4z(&y[c][b].bsum32[2 * p]));
        }
        const __m512 d0 = pl_d16(xb.s->d), m0 = pl_d16(xb.s->dmin);
        PL_UNROLL
        for (int c = 0; c < R; c++) {
            const __m512 dy = _mm512_set1_ps(y[c][b].b.d);
            accf[c] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(sumi[c]), _mm512_mul_ps(d0, dy), accf[c]);
            accf[c] = _mm512_fnmadd_ps(_mm512_cvtepi32_ps(summ[c]), _mm512_mul_ps(m0, dy), accf[c]);
        }
    }
    PL_UNROLL
    for (int c = 0; c < R; c++) _mm512_mask_storeu_ps(d + c * ldd, mk, accf[c]);
}

/* Panels p0..p1-1 x activation rows c0..c1-1 of a q4_K / q5_K weight w
 * (block bs bytes: sizeof(pl_q4kx16) or sizeof(pl_q5kx16)). */
PL_VNNI_AI void pl_k45_gemm(int64_t K, const void *w, int64_t p0, int64_t p1, const pl_q8kx *a, size_t as, int64_t c0,
                            int64_t c1, float *dst, int64_t N, const int q5) {
    const int64_t nb = K / QK_K;
    const size_t bs = q5 ? sizeof(pl_q5kx16) : sizeof(pl_q4kx16);
    for (int64_t p = p0; p < p1; p++) {
        const void *x = (const char *)w + (size_t)(p * nb) * bs;
        const __mmask16 mk = pl_panel_mask(p, N);
        if (c1 - c0 == 1) {
            const __m512 r = pl_k45_gemv_panel(nb, x, (const pl_q8kx *)((const char *)a + c0 * as), q5);
            _mm512_mask_storeu_ps(dst + c0 * N + PL_KQX_ROWS * p, mk, r);
            continue;
        }
        for (int64_t c = c0; c < c1; c += 4) {
            const pl_q8kx *y[4];
            const int R = c1 - c < 4 ? (int)(c1 - c) : 4;
            for (int i = 0; i < R; i++) y[i] = (const pl_q8kx *)((const char *)a + (c + i) * as);
            float *d = dst + c * N + PL_KQX_ROWS * p;
            switch (R) {
                case 4: pl_k45_gemm_panel(nb, x, y, d, N, mk, 4, q5); break;
                case 3: pl_k45_gemm_panel(nb, x, y, d, N, mk, 3, q5); break;
                case 2: pl_k45_gemm_panel(nb, x, y, d, N, mk, 2, q5); break;
                default: pl_k45_gemm_panel(nb, x, y, d, N, mk, 1, q5); break;
            }
        }
    }
}

PL_VNNI void pl_cpu_gemm_q4kx16_vnni(int64_t K, const pl_q4kx16 *w, int64_t p0, int64_t p1, const pl_q8kx *a,
                                     size_t as, int64_t c0, int64_t c1, float *dst, int64_t N) {
    pl_k45_gemm(K, w, p0, p1, a, as, c0, c1, dst, N, 0);
}

PL_VNNI void pl_cpu_gemm_q5kx16_vnni(int64_t K, const pl_q5kx16 *w, int64_t p0, int64_t p1, const pl_q8kx *a,
                                     size_t as, int64_t c0, int64_t c1, float *dst, int64_t N) {
    pl_k45_gemm(K, w, p0, p1, a, as, c0, c1, dst, N, 1);
}

/* ---- q6_K x16 -----------------------------------------------------------------*/

/* The 6-bit codes of chunks 2v (lo) and 2v+1 (hi) of a group: low 4 bits
 * from low-bit vector v, high 2 bits from the group's high-bit vector
 * h = v/2 at bit pair 2*(v%2) (lo) and 2*(v%2)+1 (hi). (GF(2) affine byte
 * transforms do each field move in one instruction but were slower here.)
 *
 * The four high-bit fields of one qh vector, each at bits 4-5 of its byte
 * with bits 6-7 clear (bits 0-3 are don't-care: the select below takes them
 * from the low nibbles): x = qh & 0x33 holds fields 0 (bits 0-1) and 2
 * (bits 4-5), y = (qh >> 2) & 0x33 fields 1 and 3; fields 0 and 1 move up
 * by 4 (the 16-bit shift's carry lands in bits 0-3 of the next byte, which
 * the select discards). 5 ops for the 4 fields instead of 7. */
PL_VNNI_AI void pl_q6_fields(__m512i qh, __m512i f[4]) {
    const __m512i m33 = _mm512_set1_epi8(0x33);
    const __m512i x = _mm512_and_si512(qh, m33), y = _mm512_and_si512(_mm512_srli_epi16(qh, 2), m33);
    f[0] = _mm512_slli_epi16(x, 4);
    f[1] = _mm512_slli_epi16(y, 4);
    f[2] = x;
    f[3] = y;
}

/* Codes of chunks 2v (lo) and 2v+1 (hi) of group g from the fields of its
 * high-bit vector: select(0x0F, nibble, field): imm 0xCA = A ? B : C, A the
 * mask. */
PL_VNNI_AI void pl_q6_codes_f(const pl_q6kx16 *xb, int g, int v, const __m512i f[4], __m512i *lo, __m512i *hi) {
    const __m512i m4 = _mm512_set1_epi8(0x0F);
    const __m512i l4 = pl_ld512(xb->q[v / 2][g][1 + (v & 1)]);
    const int b = 2 * (v & 1);
    *lo = _mm512_ternarylogic_epi32(m4, l4, f[b], 0xCA);
    *hi = _mm512_ternarylogic_epi32(m4, _mm512_srli_epi16(l4, 4), f[b + 1], 0xCA);
}

/* No software prefetch: the 8-row layout's decode sweep needed one into L2
 * 8 KiB ahead, because it jumped between three streams of a block; this
 * layout reads forward, and the same prefetch made it slower (0.6B Q4_K_M
 * tg64, medians of 16 / 12 interleaved runs, 1 / 2 threads: 45.2 / 70.3
 * tok/s with it, 47.2 / 76.5 without). */
PL_VNNI_AI __m512 pl_q6k_gemv_panel(int64_t nb, const pl_q6kx16 *x, const pl_q8kx *y) {
    __m512 accf = _mm512_setzero_ps();
    for (int64_t b = 0; b < nb; b++) {
        const pl_q6kx16 *xb = x + b;
        const int8_t *q = y[b].b.qs;
        /* acc[i]: sub-block of 16 i, started at -32 * bsum (the code offset) */
        __m512i acc[16];
        PL_UNROLL
        for (int i = 0; i < 16; i++) acc[i] = _mm512_set1_epi32(y[b].nb32[i]);
        PL_UNROLL
        for (int h = 0; h < 2; h++) {
            PL_UNROLL
            for (int g = 0; g < 8; g++) {
                /* one high-bit vector serves the low-bit vectors v = 2h, 2h + 1 */
                const int i = 2 * g + h;
                __m512i f[4];
                pl_q6_fields(pl_ld512(xb->q[h][g][0]), f);
                PL_UNROLL
                for (int v = 2 * h; v < 2 * h + 2; v++) {
                    __m512i lo, hi;
                    pl_q6_codes_f(xb, g, v, f, &lo, &hi);
                    acc[i] = pl_dpz(acc[i], lo, q + 32 * g + 8 * v);
                    acc[i] = pl_dpz(acc[i], hi, q + 32 * g + 8 * v + 4);
                }
            }
        }
        __m512i sumi = _mm512_mullo_epi32(acc[0], pl_sc16s(xb->sc[0]));
        PL_UNROLL
        for (int i = 1; i < 16; i++) sumi = _mm512_add_epi32(sumi, _mm512_mullo_epi32(acc[i], pl_sc16s(xb->sc[i])));
        const __m512 dd = _mm512_mul_ps(pl_d16(xb->d), _mm512_set1_ps(y[b].b.d));
        accf = _mm512_fmadd_ps(_mm512_cvtepi32_ps(sumi), dd, accf);
    }
    return accf;
}

PL_VNNI_AI void pl_q6k_gemm_panel(int64_t nb, const pl_q6kx16 *x, const pl_q8kx *const *y, float *d, int64_t ldd,
                                  __mmask16 mk, const int R) {
    __m512 accf[4];
    PL_UNROLL
    for (int c = 0; c < R; c++) accf[c] = _mm512_setzero_ps();
    for (int64_t b = 0; b < nb; b++) {
        const pl_q6kx16 *xb = x + b;
        __m512i sumi[4];
        PL_UNROLL
        for (int c = 0; c < R; c++) sumi[c] = _mm512_setzero_si512();
        for (int g = 0; g < 8; g++) {
            /* sub-blocks 2g (chunks 0-3: v = 0, 1) and 2g+1 (v = 2, 3), interleaved */
            __m512i a0[4], a1[4];
            PL_UNROLL
            for (int c = 0; c < R; c++) {
                a0[c] = _mm512_set1_epi32(y[c][b].nb32[2 * g]);
                a1[c] = _mm512_set1_epi32(y[c][b].nb32[2 * g + 1]);
            }
            __m512i f0[4], f1[4];
            pl_q6_fields(pl_ld512(xb->q[0][g][0]), f0);
            pl_q6_fields(pl_ld512(xb->q[1][g][0]), f1);
            PL_UNROLL
            for (int v = 0; v < 2; v++) {
                __m512i lo0, hi0, lo1, hi1;
                pl_q6_codes_f(xb, g, v, f0, &lo0, &hi0);
                pl_q6_codes_f(xb, g, v + 2, f1, &lo1, &hi1);
                PL_UNROLL
                for (int c = 0; c < R; c++) {
                    const int8_t *q = y[c][b].b.qs + 32 * g + 8 * v;
                    a0[c] = pl_dpz(a0[c], lo0, q);
                    a1[c] = pl_dpz(a1[c], lo1, q + 16);
                    a0[c] = pl_dpz(a0[c], hi0, q + 4);
                    a1[c] = pl_dpz(a1[c], hi1, q + 20);
                }
            }
            const __m512i s0 = pl_sc16s(xb->sc[2 * g]), s1 = pl_sc16s(xb->sc[2 * g + 1]);
            PL_UNROLL
            for (int c = 0; c < R; c++)
                sumi[c] = _mm512_add_epi32(sumi[c], _mm512_add_epi32(_mm512_mullo_epi32(a0[c], s0),
                                                                     _mm512_mullo_epi32(a1[c], s1)));
        }
        const __m512 d0 = pl_d16(xb->d);
        PL_UNROLL
        for (int c = 0; c < R; c++)
            accf[c] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(sumi[c]), _mm512_mul_ps(d0, _mm512_set1_ps(y[c][b].b.d)), accf[c]);
    }
    PL_UNROLL
    for (int c = 0; c < R; c++) _mm512_mask_storeu_ps(d + c * ldd, mk, accf[c]);
}

PL_VNNI void pl_cpu_gemm_q6kx16_vnni(int64_t K, const pl_q6kx16 *w, int64_t p0, int64_t p1, const pl_q8kx *a,
                                     size_t as, int64_t c0, int64_t c1, float *dst, int64_t N) {
    const int64_t nb = K / QK_K;
    for (int64_t p = p0; p < p1; p++) {
        const pl_q6kx16 *x = w + p * nb;
        const __mmask16 mk = pl_panel_mask(p, N);
        if (c1 - c0 == 1) {
            const __m512 r = pl_q6k_gemv_panel(nb, x, (const pl_q8kx *)((const char *)a + c0 * as));
            _mm512_mask_storeu_ps(dst + c0 * N + PL_KQX_ROWS * p, mk, r);
            continue;
        }
        for (int64_t c = c0; c < c1; c += 4) {
            const pl_q8kx *y[4];
            const int R = c1 - c < 4 ? (int)(c1 - c) : 4;
            for (int i = 0; i < R; i++) y[i] = (const pl_q8kx *)((const char *)a + (c + i) * as);
            float *d = dst + c * N + PL_KQX_ROWS * p;
            switch (R) {
                case 4: pl_q6k_gemm_panel(nb, x, y, d, N, mk, 4); break;
                case 3: pl_q6k_gemm_panel(nb, x, y, d, N, mk, 3); break;
                case 2: pl_q6k_gemm_panel(nb, x, y, d, N, mk, 2); break;
                default: pl_q6k_gemm_panel(nb, x, y, d, N, mk, 1); break;
            }
        }
    }
}

/* ---- f16 x16 ------------------------------------------------------------------*/

/* P consecutive panels of one 64-row group (16 rows each, P*2 accumulator
 * chains) x 1 activation row: w points at the first panel's first element,
 * so the P panels of a k are P*32 contiguous bytes: one stream. */
PL_VNNI_AI void pl_f16_gemv_panels(int64_t K, const uint16_t *w, const float *a, float *d, const int P) {
    __m256 acc[4][2];
    PL_UNROLL
    for (int p = 0; p < P; p++) acc[p][0] = acc[p][1] = _mm256_setzero_ps();
    for (int64_t k = 0; k < K; k++, w += PL_F16X_GROUP) {
        const __m256 av = _mm256_set1_ps(a[k]);
        PL_UNROLL
        for (int p = 0; p < P; p++) {
            const uint16_t *wk = w + p * PL_F16X_ROWS;
            acc[p][0] = _mm256_fmadd_ps(_mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)wk)), av, acc[p][0]);
            acc[p][1] = _mm256_fmadd_ps(_mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(wk + 8))), av, acc[p][1]);
        }
    }
    PL_UNROLL
    for (int p = 0; p < P; p++) {
        _mm256_storeu_ps(d + 16 * p, acc[p][0]);
        _mm256_storeu_ps(d + 16 * p + 8, acc[p][1]);
    }
}

/* The weight k-rows of a panel are 32 of every 128 bytes (its 16 rows of a
 * 64-row group): a stride the L1 prefetcher follows late, so the panel's
 * k-row PL_F16_PF ahead is requested explicitly (bench_packed M=512, GOP/s
 * K x N = 1024 x 3072 / 2048 x 6144 / 6144 x 2048: none 98/98/86, 8 ahead
 * 103/96, 16 ahead 108/104/98, 32 ahead 109/105/103, 64 ahead 105/101/99). */
#define PL_F16_PF 32

/* One panel x R activation rows (R chains of 16-lane vectors) over KB k: ap
 * is the activation tile k-major ([k][R], so the R broadcasts of a k come
 * from one or two lines); the partial sums go to / come from d when
 * accumulate (k blocking keeps every lane's sum in k order). 512-bit vectors:
 * one conversion per k for the 16 rows, and room for R = 24 accumulators. */
PL_VNNI_AI void pl_f16_gemm_panel(int64_t KB, const uint16_t *w, const float *ap, float *d, int64_t ldd,
                                  bool accumulate, const int R) {
    __m512 acc[24];
    _Pragma("GCC unroll 32")
    for (int c = 0; c < R; c++) acc[c] = accumulate ? _mm512_loadu_ps(d + c * ldd) : _mm512_setzero_ps();
    for (int64_t k = 0; k < KB; k++, w += PL_F16X_GROUP, ap += R) {
        _mm_prefetch((const char *)(w + PL_F16_PF * PL_F16X_GROUP), _MM_HINT_T0);
        const __m512 wv = _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)w));
        _Pragma("GCC unroll 32")
        for (int c = 0; c < R; c++) acc[c] = _mm512_fmadd_ps(wv, _mm512_set1_ps(ap[c]), acc[c]);
    }
    _Pragma("GCC unroll 32")
    for (int c = 0; c < R; c++) _mm512_storeu_ps(d + c * ldd, acc[c]);
}

#define PL_F16_RMAX 24
#define PL_F16_KB 1024
#define PL_F16_CMAX 48     /* activation rows per packed block: 48 x 1024 x 4 = 192 KiB (a multiple of RMAX) */

PL_VNNI void pl_cpu_gemm_f16x16_vnni(int64_t K, const uint16_t *w, int64_t p0, int64_t p1, const float *a,
                                     size_t as, int64_t c0, int64_t c1, float *dst, int64_t N) {
    if (c1 - c0 == 1) {
        const float *ar = (const float *)((const char *)a + c0 * as);
        for (int64_t p = p0; p < p1;) {
            /* the rest of p's 64-row group, at most */
            const int P = (int)(4 - p % 4 < p1 - p ? 4 - p % 4 : p1 - p);
            const uint16_t *wp = w + PL_F16X_PANEL(K, p);
            float *dp = dst + c0 * N + 16 * p;
            switch (P) {
                case 4: pl_f16_gemv_panels(K, wp, ar, dp, 4); break;
                case 3: pl_f16_gemv_panels(K, wp, ar, dp, 3); break;
                case 2: pl_f16_gemv_panels(K, wp, ar, dp, 2); break;
                default: pl_f16_gemv_panels(K, wp, ar, dp, 1); break;
            }
            p += P;
        }
        return;
    }
    static _Thread_local float ap[PL_F16_CMAX * PL_F16_KB] __attribute__((aligned(64)));
    for (int64_t cb = c0; cb < c1; cb += PL_F16_CMAX) {
        const int64_t ce = cb + PL_F16_CMAX < c1 ? cb + PL_F16_CMAX : c1;
        for (int64_t k0 = 0; k0 < K; k0 += PL_F16_KB) {
            const int64_t KB = K - k0 < PL_F16_KB ? K - k0 : PL_F16_KB;
            /* pack: tile t (R_t rows from cb + 24 t) at ap + 24 t * KB, [k][R_t] */
            for (int64_t c = cb; c < ce; c += PL_F16_RMAX) {
                const int R = ce - c < PL_F16_RMAX ? (int)(ce - c) : PL_F16_RMAX;
                float *t = ap + (c - cb) * KB;
                for (int i = 0; i < R; i++) {
                    const float *src = (const float *)((const char *)a + (c + i) * as) + k0;
                    for (int64_t k = 0; k < KB; k++) t[k * R + i] = src[k];
                }
            }
            for (int64_t p = p0; p < p1; p++) {
                const uint16_t *wp = w + PL_F16X_PANEL(K, p) + k0 * PL_F16X_GROUP;
                for (int64_t c = cb; c < ce; c += PL_F16_RMAX) {
                    const int R = ce - c < PL_F16_RMAX ? (int)(ce - c) : PL_F16_RMAX;
                    const float *t = ap + (c - cb) * KB;
                    float *d = dst + c * N + 16 * p;
                    const bool accu = k0 > 0;
#define PL_F16_CASE(RR) case RR: pl_f16_gemm_panel(KB, wp, t, d, N, accu, RR); break;
                    switch (R) {
                        PL_F16_CASE(24) PL_F16_CASE(23) PL_F16_CASE(22) PL_F16_CASE(21) PL_F16_CASE(20)
                        PL_F16_CASE(19) PL_F16_CASE(18) PL_F16_CASE(17) PL_F16_CASE(16) PL_F16_CASE(15)
                        PL_F16_CASE(14) PL_F16_CASE(13) PL_F16_CASE(12) PL_F16_CASE(11) PL_F16_CASE(10)
                        PL_F16_CASE(9) PL_F16_CASE(8) PL_F16_CASE(7) PL_F16_CASE(6) PL_F16_CASE(5)
                        PL_F16_CASE(4) PL_F16_CASE(3) PL_F16_CASE(2)
                        default: pl_f16_gemm_panel(KB, wp, t, d, N, accu, 1); break;
                    }
#undef PL_F16_CASE
                }
            }
        }
    }
}
