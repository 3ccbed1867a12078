/* Prepared-weight kernels for the ternary types (tq2_0, tq1_0; layout
 * PL_PACK_TQ_X16 in cpu_internal.h, packed by cpu_packed_tq.c), in the
 * manner of the k-quant ones of cpu_packed_avx2.c: 16 rows per panel, one
 * 32-bit lane per row, vpdpbusd of 4 unsigned trits t = 0..2 (a "chunk")
 * against the 4 q8_K activation bytes broadcast. One 64-byte code vector
 * holds 4 chunks of every row (2 bits each): one load, 4 ANDs and 3 shifts
 * feed 4 vpdpbusd. Per block of 256 and row:
 *     sumi = sum(t * q8) - sum(q8)               (the weight is t - 1; exact
 *                                                 integers, |sumi| < 2^16)
 *     acc += (float)sumi * (d * dy)
 * which is ggml_vec_dot_tq2_0_q8_K's / tq1_0_q8_K's integer dot per block and
 * its float step (sumf += (float)sumi * d, the block order); sum(q8) is the
 * q8_K block's bsums added up (pl_q8kx.bsum32). The float steps are the same
 * operations whatever the number of activation rows of a call: batched ==
 * alone, bit for bit.
 *
 * tq1_0 is expanded to this 2-bit form at load rather than decoded from its
 * base-3 bytes here. Arithmetic extraction costs a multiply by 3^k (2 byte
 * adds) and a top-digit extraction (~5 ops) per 64 trits; a 256-entry
 * lookup (AVX-512 VBMI: two vpermt2b, each with a copy of its table
 * register, and a blend) ~5 uops. Against ~1.75 for the 2-bit unpacking,
 * either makes the sweep ALU-bound: the lookup version, keeping the file's
 * 1.69 bits per weight, measured 10-20% slower in decode and ~40% slower in
 * prefill than the expanded 2.06 bits (bench/RESULTS.md, git history).
 * Since then the compact layout re-encodes each byte at load (same 5 trits,
 * same size; cpu_packed_tq.c) so that 3 permutes give 5 trits instead of 10:
 * the default (PL_CPU_TQ1DEC=0: ggml's code and the 10-permute kernel), its
 * kernel ~27% fewer cycles than the 10-permute one in decode, a little under
 * tq2_0's per token.
 *
 * Compiled with -mavx2 -mfma -mf16c; the functions carry the AVX-512 target
 * attribute and run only after pl_cpu_has_vnni512().
 */
#include <immintrin.h>
#include "backends/cpu/cpu_internal.h"
#include "backends/cpu/cpu_simd_avx2.h"

#define PL_VNNI __attribute__((target("avx512f,avx512vl,avx512bw,avx512dq,avx512vnni")))
#define PL_VNNI_AI static inline __attribute__((always_inline, target("avx512f,avx512vl,avx512bw,avx512dq,avx512vnni")))

typedef int32_t pl_i32u_t __attribute__((aligned(1), may_alias));
PL_VNNI_AI __m512i pl_dpt(__m512i acc, __m512i w, const int8_t *y) {
    return _mm512_dpbusd_epi32(acc, w, _mm512_set1_epi32(*(const pl_i32u_t *)y));
}

/* One 64-byte code vector, loaded once (see pl_ld512 in cpu_packed_avx2.c:
 * otherwise the compiler folds the load into each of its 4 users). */
PL_VNNI_AI __m512i pl_ld512_t(const void *p) {
    __m512i v = _mm512_load_si512(p);
    __asm__("" : "+v"(v));
    return v;
}

PL_VNNI_AI __mmask16 pl_panel_mask_t(int64_t p, int64_t N) {
    const int64_t left = N - PL_KQX_ROWS * p;
    return left >= PL_KQX_ROWS ? (__mmask16)0xFFFF : (__mmask16)((1u << left) - 1);
}

/* The trits of chunks 4v + j (j = 0..3) of a code vector. */
PL_VNNI_AI void pl_trits(const uint8_t *p, __m512i t[4]) {
    const __m512i m3 = _mm512_set1_epi8(3);
    const __m512i b = pl_ld512_t(p);
    t[0] = _mm512_and_si512(b, m3);
    t[1] = _mm512_and_si512(_mm512_srli_epi16(b, 2), m3);
    t[2] = _mm512_and_si512(_mm512_srli_epi16(b, 4), m3);
    t[3] = _mm512_and_si512(_mm512_srli_epi16(b, 6), m3);
}

/* -sum of the 256 codes of an activation block (the -1 of every weight). */
PL_VNNI_AI int32_t pl_neg_bsum(const pl_q8kx *y) {
    int32_t s = 0;
    for (int g = 0; g < 8; g++) s += y->bsum32[g];
    return -s;
}

/* One panel, one activation row (decode): 8 independent vpdpbusd chains
 * (chunk j of even / odd vectors). */
PL_VNNI_AI __m512 pl_tq_gemv_panel(int64_t nb, const uint8_t *codes, const uint16_t *scales, const pl_q8kx *y) {
    __m512 accf = _mm512_setzero_ps();
    for (int64_t b = 0; b < nb; b++) {
        const uint8_t *xb = codes + b * 1024;
        const int8_t *q = y[b].b.qs;
        __m512i acc[8];
        acc[0] = _mm512_set1_epi32(pl_neg_bsum(&y[b]));
        PL_UNROLL
        for (int i = 1; i < 8; i++) acc[i] = _mm512_setzero_si512();
        PL_UNROLL
        for (int v = 0; v < 16; v++) {
            __m512i t[4];
            pl_trits(xb + 64 * v, t);
            PL_UNROLL
            for (int j = 0; j < 4; j++) acc[4 * (v & 1) + j] = pl_dpt(acc[4 * (v & 1) + j], t[j], q + 16 * v + 4 * j);
        }
        const __m512i s = _mm512_add_epi32(_mm512_add_epi32(_mm512_add_epi32(acc[0], acc[1]), _mm512_add_epi32(acc[2], acc[3])),
                                           _mm512_add_epi32(_mm512_add_epi32(acc[4], acc[5]), _mm512_add_epi32(acc[6], acc[7])));
        const __m512 dd = _mm512_mul_ps(_mm512_cvtph_ps(_mm256_load_si256((const __m256i *)(scales + 16 * b))),
                                        _mm512_set1_ps(y[b].b.d));
        accf = _mm512_fmadd_ps(_mm512_cvtepi32_ps(s), dd, accf);
    }
    return accf;
}

/* One panel, R activation rows (prefill): two chains per row; the unpacked
 * trits serve every row. */
PL_VNNI_AI void pl_tq_gemm_panel(int64_t nb, const uint8_t *codes, const uint16_t *scales, const pl_q8kx *const *y,
                                 float *d, int64_t ldd, __mmask16 mk, const int R) {
    __m512 accf[4];
    PL_UNROLL
    for (int c = 0; c < R; c++) accf[c] = _mm512_setzero_ps();
    for (int64_t b = 0; b < nb; b++) {
        const uint8_t *xb = codes + b * 1024;
        __m512i a0[4], a1[4];
        PL_UNROLL
        for (int c = 0; c < R; c++) {
            a0[c] = _mm512_set1_epi32(pl_neg_bsum(&y[c][b]));
            a1[c] = _mm512_setzero_si512();
        }
        PL_UNROLL
        for (int v = 0; v < 16; v++) {
            __m512i t[4];
            pl_trits(xb + 64 * v, t);
            PL_UNROLL
            for (int c = 0; c < R; c++) {
                const int8_t *q = y[c][b].b.qs + 16 * v;
                a0[c] = pl_dpt(a0[c], t[0], q);
                a1[c] = pl_dpt(a1[c], t[1], q + 4);
                a0[c] = pl_dpt(a0[c], t[2], q + 8);
                a1[c] = pl_dpt(a1[c], t[3], q + 12);
            }
        }
        const __m512 d0 = _mm512_cvtph_ps(_mm256_load_si256((const __m256i *)(scales + 16 * b)));
        PL_UNROLL
        for (int c = 0; c < R; c++)
            accf[c] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(_mm512_add_epi32(a0[c], a1[c])),
                                      _mm512_mul_ps(d0, _mm512_set1_ps(y[c][b].b.d)), accf[c]);
    }
    PL_UNROLL
    for (int c = 0; c < R; c++) _mm512_mask_storeu_ps(d + c * ldd, mk, accf[c]);
}

PL_VNNI void pl_cpu_gemm_tqx16_vnni(int64_t K, const uint8_t *w, int64_t p0, int64_t p1, const pl_q8kx *a, size_t as,
                                    int64_t c0, int64_t c1, float *dst, int64_t N) {
    const int64_t nb = K / QK_K;
    const size_t pb = pl_tqx_panel_bytes(K);
    for (int64_t p = p0; p < p1; p++) {
        const uint8_t *codes = w + (size_t)p * pb;
        const uint16_t *scales = (const uint16_t *)(codes + nb * 1024);
        const __mmask16 mk = pl_panel_mask_t(p, N);
        if (c1 - c0 == 1) {
            const __m512 r = pl_tq_gemv_panel(nb, codes, scales, (const pl_q8kx *)((const char *)a + c0 * as));
            _mm512_mask_storeu_ps(dst + c0 * N + PL_KQX_ROWS * p, mk, r);
            continue;
        }
        for (int64_t c = c0; c < c1; c += 4) {
            const pl_q8kx *y[4];
            const int R = c1 - c < 4 ? (int)(c1 - c) : 4;
            for (int i = 0; i < R; i++) y[i] = (const pl_q8kx *)((const char *)a + (c + i) * as);
            float *d = dst + c * N + PL_KQX_ROWS * p;
            switch (R) {
                case 4: pl_tq_gemm_panel(nb, codes, scales, y, d, N, mk, 4); break;
                case 3: pl_tq_gemm_panel(nb, codes, scales, y, d, N, mk, 3); break;
                case 2: pl_tq_gemm_panel(nb, codes, scales, y, d, N, mk, 2); break;
                default: pl_tq_gemm_panel(nb, codes, scales, y, d, N, mk, 1); break;
            }
        }
    }
}

/* ---- tq1_0, compact (PL_PACK_TQ1_X16) -------------------------------------------
 *
 * Trit k of every byte of a code vector by table lookup: lut[k][b] for the
 * 256 byte values, as 4 vectors of 64; vpermi2b looks up 128 entries by the
 * low 7 bits, so two lookups (bytes below / from 128) and a blend on the top
 * bit: 3 instructions per 64 trits, against 7 for the arithmetic extraction
 * (times 3, then the top base-3 digit), and no extra bytes from memory. */
#define PL_VBMI __attribute__((target("avx512f,avx512vl,avx512bw,avx512dq,avx512vnni,avx512vbmi")))
#define PL_VBMI_AI static inline __attribute__((always_inline, target("avx512f,avx512vl,avx512bw,avx512dq,avx512vnni,avx512vbmi")))

#define PL_TQ1T(b, p) (uint8_t)(((((b) * (p)) & 255) * 3) >> 8)
#define PL_TQ1T4(b, p) PL_TQ1T(b, p), PL_TQ1T((b) + 1, p), PL_TQ1T((b) + 2, p), PL_TQ1T((b) + 3, p)
#define PL_TQ1T16(b, p) PL_TQ1T4(b, p), PL_TQ1T4((b) + 4, p), PL_TQ1T4((b) + 8, p), PL_TQ1T4((b) + 12, p)
#define PL_TQ1T64(b, p) PL_TQ1T16(b, p), PL_TQ1T16((b) + 16, p), PL_TQ1T16((b) + 32, p), PL_TQ1T16((b) + 48, p)
#define PL_TQ1T256(p) {PL_TQ1T64(0, p), PL_TQ1T64(64, p), PL_TQ1T64(128, p), PL_TQ1T64(192, p)}
/* lut[k][b]: trit k (0 = most significant) of tq1_0 byte b */
static const uint8_t pl_tq1_lut[5][256] __attribute__((aligned(64))) = {
    PL_TQ1T256(1), PL_TQ1T256(3), PL_TQ1T256(9), PL_TQ1T256(27), PL_TQ1T256(81)};

typedef struct pl_tq1_tabs {
    __m512i t[5][4];
} pl_tq1_tabs;

PL_VBMI_AI void pl_tq1_tabs_load(pl_tq1_tabs *T) {
    for (int k = 0; k < 5; k++)
        for (int i = 0; i < 4; i++) T->t[k][i] = _mm512_load_si512(pl_tq1_lut[k] + 64 * i);
}

PL_VBMI_AI __m512i pl_tq1_trit(const pl_tq1_tabs *T, __m512i b, __mmask64 top, int k) {
    const __m512i lo = _mm512_permutex2var_epi8(T->t[k][0], b, T->t[k][1]);
    const __m512i hi = _mm512_permutex2var_epi8(T->t[k][2], b, T->t[k][3]);
    return _mm512_mask_blend_epi8(top, lo, hi);
}

/* One panel, one activation row: 10 chains (trit k of even / odd vectors). */
PL_VBMI_AI __m512 pl_tq1_gemv_panel(int64_t nb, const uint8_t *codes, const uint16_t *scales, const pl_q8kx *y,
                                    const pl_tq1_tabs *T) {
    __m512 accf = _mm512_setzero_ps();
    for (int64_t b = 0; b < nb; b++) {
        const uint8_t *xb = codes + b * PL_TQ1X_BLOCK;
        const int8_t *q = y[b].b.qs;
        __m512i acc[10];
        acc[0] = _mm512_set1_epi32(pl_neg_bsum(&y[b]));
        PL_UNROLL
        for (int i = 1; i < 10; i++) acc[i] = _mm512_setzero_si512();
        PL_UNROLL
        for (int u = 0; u < 13; u++) {
            const __m512i bv = pl_ld512_t(xb + 64 * u);
            const __mmask64 top = _mm512_movepi8_mask(bv);
            PL_UNROLL
            for (int k = 0; k < 5; k++) {
                if (u == 12 && k == 4) break;   /* the last vector holds chunks 60..63 */
                const int i = 5 * (u & 1) + k;
                acc[i] = pl_dpt(acc[i], pl_tq1_trit(T, bv, top, k), q + 20 * u + 4 * k);
            }
        }
        __m512i s = acc[0];
        PL_UNROLL
        for (int i = 1; i < 10; i++) s = _mm512_add_epi32(s, acc[i]);
        const __m512 dd = _mm512_mul_ps(_mm512_cvtph_ps(_mm256_load_si256((const __m256i *)(scales + 16 * b))),
                                        _mm512_set1_ps(y[b].b.d));
        accf = _mm512_fmadd_ps(_mm512_cvtepi32_ps(s), dd, accf);
    }
    return accf;
}

/* One panel, R activation rows: two chains per row, the trits of a vector
 * looked up once for all rows. */
PL_VBMI_AI void pl_tq1_gemm_panel(int64_t nb, const uint8_t *codes, const uint16_t *scales, const pl_q8kx *const *y,
                                  float *d, int64_t ldd, __mmask16 mk, const pl_tq1_tabs *T, const int R) {
    __m512 accf[4];
    PL_UNROLL
    for (int c = 0; c < R; c++) accf[c] = _mm512_setzero_ps();
    for (int64_t b = 0; b < nb; b++) {
        const uint8_t *xb = codes + b * PL_TQ1X_BLOCK;
        __m512i a[4][2];
        PL_UNROLL
        for (int c = 0; c < R; c++) {
            a[c][0] = _mm512_set1_epi32(pl_neg_bsum(&y[c][b]));
            a[c][1] = _mm512_setzero_si512();
        }
        PL_UNROLL
        for (int u = 0; u < 13; u++) {
            const __m512i bv = pl_ld512_t(xb + 64 * u);
            const __mmask64 top = _mm512_movepi8_mask(bv);
            PL_UNROLL
            for (int k = 0; k < 5; k++) {
                if (u == 12 && k == 4) break;
                const __m512i t = pl_tq1_trit(T, bv, top, k);
                PL_UNROLL
                for (int c = 0; c < R; c++) a[c][k & 1] = pl_dpt(a[c][k & 1], t, y[c][b].b.qs + 20 * u + 4 * k);
            }
        }
        const __m512 d0 = _mm512_cvtph_ps(_mm256_load_si256((const __m256i *)(scales + 16 * b)));
        PL_UNROLL
        for (int c = 0; c < R; c++)
            accf[c] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(_mm512_add_epi32(a[c][0], a[c][1])),
                                      _mm512_mul_ps(d0, _mm512_set1_ps(y[c][b].b.d)), accf[c]);
    }
    PL_UNROLL
    for (int c = 0; c < R; c++) _mm512_mask_storeu_ps(d + c * ldd, mk, accf[c]);
}

/* ---- tq1_0 in the lookup code (pl_cpu_tq1_lut4(), cpu_packed_tq.c) ----------------
 *
 * Per 64-byte vector (5 chunks of every row): two vpermi2b and a blend give
 * t0..t3 as 2-bit fields, one vpermb on the low 6 bits gives t4, and the
 * fields go to vpdpbusd unshifted: field j is 4^j t_j (at most 128, still an
 * unsigned byte), its chain adds 4^j sum(t_j q8) and is shifted back (exact:
 * a multiple of 4^j, |sum| < 2^21) once per block. 3 permutes (port 5), 5
 * ANDs / blend, 5 vpdpbusd and one mask move per 320 weights, where ggml's
 * code takes 10 permutes and 5 blends: sumi is the same integer, the float
 * steps are unchanged. */
typedef struct pl_tq1c_tabs {
    __m512i f[4], t4;
} pl_tq1c_tabs;

PL_VBMI_AI void pl_tq1c_tabs_load(pl_tq1c_tabs *T) {
    for (int i = 0; i < 4; i++) T->f[i] = _mm512_load_si512(pl_tq1c_fields + 64 * i);
    T->t4 = _mm512_load_si512(pl_tq1c_t4);
}

/* t0..t3 of every code byte of bv, as 2-bit fields */
PL_VBMI_AI __m512i pl_tq1c_fields4(const pl_tq1c_tabs *T, __m512i bv) {
    const __m512i lo = _mm512_permutex2var_epi8(T->f[0], bv, T->f[1]);
    const __m512i hi = _mm512_permutex2var_epi8(T->f[2], bv, T->f[3]);
    return _mm512_mask_blend_epi8(_mm512_movepi8_mask(bv), lo, hi);
}

/* One panel, one activation row: chains acc[j][u & 1] hold 4^j sum(t_j q8)
 * (j = 4: t4, scale 1). */
PL_VBMI_AI __m512 pl_tq1c_gemv_panel(int64_t nb, const uint8_t *codes, const uint16_t *scales, const pl_q8kx *y,
                                     const pl_tq1c_tabs *T) {
    const __m512i m[4] = {_mm512_set1_epi8(0x03), _mm512_set1_epi8(0x0C), _mm512_set1_epi8(0x30),
                          _mm512_set1_epi8((char)0xC0)};
    __m512 accf = _mm512_setzero_ps();
    for (int64_t b = 0; b < nb; b++) {
        const uint8_t *xb = codes + b * PL_TQ1X_BLOCK;
        const int8_t *q = y[b].b.qs;
        __m512i acc[5][2];
        PL_UNROLL
        for (int j = 0; j < 5; j++) acc[j][0] = acc[j][1] = _mm512_setzero_si512();
        acc[0][0] = _mm512_set1_epi32(pl_neg_bsum(&y[b]));
        PL_UNROLL
        for (int u = 0; u < 12; u++) {
            const __m512i bv = pl_ld512_t(xb + 64 * u);
            const __m512i f = pl_tq1c_fields4(T, bv);
            const __m512i t4 = _mm512_permutexvar_epi8(bv, T->t4);
            PL_UNROLL
            for (int j = 0; j < 4; j++) acc[j][u & 1] = pl_dpt(acc[j][u & 1], _mm512_and_si512(f, m[j]), q + 20 * u + 4 * j);
            acc[4][u & 1] = pl_dpt(acc[4][u & 1], t4, q + 20 * u + 16);
        }
        {   /* chunks 60..63: the fields themselves */
            const __m512i f = pl_ld512_t(xb + 64 * 12);
            PL_UNROLL
            for (int j = 0; j < 4; j++) acc[j][0] = pl_dpt(acc[j][0], _mm512_and_si512(f, m[j]), q + 240 + 4 * j);
        }
        __m512i s = _mm512_add_epi32(_mm512_add_epi32(acc[0][0], acc[0][1]), _mm512_add_epi32(acc[4][0], acc[4][1]));
        s = _mm512_add_epi32(s, _mm512_srai_epi32(_mm512_add_epi32(acc[1][0], acc[1][1]), 2));
        s = _mm512_add_epi32(s, _mm512_srai_epi32(_mm512_add_epi32(acc[2][0], acc[2][1]), 4));
        s = _mm512_add_epi32(s, _mm512_srai_epi32(_mm512_add_epi32(acc[3][0], acc[3][1]), 6));
        const __m512 dd = _mm512_mul_ps(_mm512_cvtph_ps(_mm256_load_si256((const __m256i *)(scales + 16 * b))),
                                        _mm512_set1_ps(y[b].b.d));
        accf = _mm512_fmadd_ps(_mm512_cvtepi32_ps(s), dd, accf);
    }
    return accf;
}

/* One panel, R activation rows: the trits of a vector unpacked once (shifted
 * down to 0..2) for all rows, two chains per row. */
PL_VBMI_AI void pl_tq1c_gemm_panel(int64_t nb, const uint8_t *codes, const uint16_t *scales, const pl_q8kx *const *y,
                                   float *d, int64_t ldd, __mmask16 mk, const pl_tq1c_tabs *T, const int R) {
    const __m512i m3 = _mm512_set1_epi8(3);
    __m512 accf[4];
    PL_UNROLL
    for (int c = 0; c < R; c++) accf[c] = _mm512_setzero_ps();
    for (int64_t b = 0; b < nb; b++) {
        const uint8_t *xb = codes + b * PL_TQ1X_BLOCK;
        __m512i a[4][2];
        PL_UNROLL
        for (int c = 0; c < R; c++) {
            a[c][0] = _mm512_set1_epi32(pl_neg_bsum(&y[c][b]));
            a[c][1] = _mm512_setzero_si512();
        }
        PL_UNROLL
        for (int u = 0; u < 13; u++) {
            const __m512i bv = pl_ld512_t(xb + 64 * u);
            const __m512i f = u < 12 ? pl_tq1c_fields4(T, bv) : bv;
            __m512i t[5];
            t[0] = _mm512_and_si512(f, m3);
            t[1] = _mm512_and_si512(_mm512_srli_epi16(f, 2), m3);
            t[2] = _mm512_and_si512(_mm512_srli_epi16(f, 4), m3);
            t[3] = _mm512_and_si512(_mm512_srli_epi16(f, 6), m3);
            t[4] = _mm512_permutexvar_epi8(bv, T->t4);
            PL_UNROLL
            for (int k = 0; k < 5; k++) {
                if (u == 12 && k == 4) break;
                PL_UNROLL
                for (int c = 0; c < R; c++) a[c][k & 1] = pl_dpt(a[c][k & 1], t[k], y[c][b].b.qs + 20 * u + 4 * k);
            }
        }
        const __m512 d0 = _mm512_cvtph_ps(_mm256_load_si256((const __m256i *)(scales + 16 * b)));
        PL_UNROLL
        for (int c = 0; c < R; c++)
            accf[c] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(_mm512_add_epi32(a[c][0], a[c][1])),
                                      _mm512_mul_ps(d0, _mm512_set1_ps(y[c][b].b.d)), accf[c]);
    }
    PL_UNROLL
    for (int c = 0; c < R; c++) _mm512_mask_storeu_ps(d + c * ldd, mk, accf[c]);
}

/* The panel loop of a tq1_0 code: one activation row takes the gemv panel,
 * more go 4 at a time through the gemm panel (R a constant per call, so each
 * is compiled unrolled); TABS is the code's lookup tables. */
#define PL_TQ1_GEMM_DRIVER(NAME, TABS, LOAD, GEMV, GEMM)                                                          \
    PL_VBMI static void NAME(int64_t K, const uint8_t *w, int64_t p0, int64_t p1, const pl_q8kx *a, size_t as,      \
                             int64_t c0, int64_t c1, float *dst, int64_t N) {                                      \
        const int64_t nb = K / QK_K;                                                                               \
        const size_t pb = pl_tq1x_panel_bytes(K);                                                                  \
        TABS T;                                                                                                    \
        LOAD(&T);                                                                                                  \
        for (int64_t p = p0; p < p1; p++) {                                                                        \
            const uint8_t *codes = w + (size_t)p * pb;                                                             \
            const uint16_t *scales = (const uint16_t *)(codes + nb * PL_TQ1X_BLOCK);                               \
            const __mmask16 mk = pl_panel_mask_t(p, N);                                                            \
            if (c1 - c0 == 1) {                                                                                    \
                const __m512 r = GEMV(nb, codes, scales, (const pl_q8kx *)((const char *)a + c0 * as), &T);        \
                _mm512_mask_storeu_ps(dst + c0 * N + PL_KQX_ROWS * p, mk, r);                                      \
                continue;                                                                                          \
            }                                                                                                      \
            for (int64_t c = c0; c < c1; c += 4) {                                                                 \
                const pl_q8kx *y[4];                                                                               \
                const int R = c1 - c < 4 ? (int)(c1 - c) : 4;                                                      \
                for (int i = 0; i < R; i++) y[i] = (const pl_q8kx *)((const char *)a + (c + i) * as);             \
                float *d = dst + c * N + PL_KQX_ROWS * p;                                                          \
                switch (R) {                                                                                       \
                    case 4: GEMM(nb, codes, scales, y, d, N, mk, &T, 4); break;                                    \
                    case 3: GEMM(nb, codes, scales, y, d, N, mk, &T, 3); break;                                    \
                    case 2: GEMM(nb, codes, scales, y, d, N, mk, &T, 2); break;                                    \
                    default: GEMM(nb, codes, scales, y, d, N, mk, &T, 1); break;                                   \
                }                                                                                                  \
            }                                                                                                      \
        }                                                                                                          \
    }
PL_TQ1_GEMM_DRIVER(pl_gemm_tq1c, pl_tq1c_tabs, pl_tq1c_tabs_load, pl_tq1c_gemv_panel, pl_tq1c_gemm_panel)
PL_TQ1_GEMM_DRIVER(pl_gemm_tq1g, pl_tq1_tabs, pl_tq1_tabs_load, pl_tq1_gemv_panel, pl_tq1_gemm_panel)

/* tq1_0's code at load decides the kernel (pl_cpu_tq1_lut4: the lookup code,
 * or ggml's with PL_CPU_TQ1DEC=0). */
PL_VBMI void pl_cpu_gemm_tq1x16_vnni(int64_t K, const uint8_t *w, int64_t p0, int64_t p1, const pl_q8kx *a,
                                     size_t as, int64_t c0, int64_t c1, float *dst, int64_t N) {
    if (pl_cpu_tq1_lut4()) pl_gemm_tq1c(K, w, p0, p1, a, as, c0, c1, dst, N);
    else pl_gemm_tq1g(K, w, p0, p1, a, as, c0, c1, dst, N);
}
