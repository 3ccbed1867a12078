/* The quantized-cache attention's V step and prefill tiles on AVX-512 (see
 * cpu_attention_quant.h). Compiled with the AVX2 flags (an _avx2.c file);
 * the AVX-512 code is enabled per function and only called when the CPU
 * has it (pl_cpu_has_vnni512, checked by the caller).
 *
 * Why: the scalar path decoded each V row into memory, then per query row
 * loaded and stored the f32 accumulator (hd floats) for every position.
 * Here two query rows' accumulators (hd <= 128: 2 x 8 zmm) stay in
 * registers over a tile of positions and each V row slice is decoded
 * straight into registers once for both. */
#include <immintrin.h>
#include <math.h>
#include <string.h>
#include "backends/cpu/cpu_attention_quant.h"
#include "backends/cpu/cpu_simd_avx2.h"
#include "core/fp16.h"
#include "quant/blocks.h"

#define PL_Q512_AI static inline __attribute__((always_inline, target("avx512f,avx512vl,avx512bw,avx512dq,f16c")))
#define PL_Q512 __attribute__((target("avx512f,avx512vl,avx512bw,avx512dq,f16c")))
#define PL_Q512_UNROLL _Pragma("GCC unroll 16")
#define PL_VPF 8   /* V rows prefetched ahead */

/* V row slice -> DB vectors of 16 floats (d * q exactly, as the scalar decoders). */
PL_Q512_AI void pl_attq_vload(pl_dtype t, const char *src, const int DB, __m512 *x) {
    if (t == PL_Q8_0) {
        const block_q8_0 *b = (const block_q8_0 *)src;
        PL_Q512_UNROLL
        for (int k = 0; k < DB; k++) {
            const block_q8_0 *bb = b + k / 2;
            const __m512 d = _mm512_set1_ps(pl_f16_to_f32(bb->d));
            const __m128i q = _mm_loadu_si128((const __m128i *)(bb->qs + 16 * (k & 1)));
            x[k] = _mm512_mul_ps(d, _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(q)));
        }
    } else if (t == PL_Q4_0) {
        const block_q4_0 *b = (const block_q4_0 *)src;
        const __m128i lo = _mm_set1_epi8(0x0f), eight = _mm_set1_epi8(8);
        PL_Q512_UNROLL
        for (int k = 0; k < DB; k += 2) {
            const block_q4_0 *bb = b + k / 2;
            const __m512 d = _mm512_set1_ps(pl_f16_to_f32(bb->d));
            const __m128i q = _mm_loadu_si128((const __m128i *)bb->qs);
            /* elements 0..15: low nibbles, 16..31: high nibbles, each minus 8 */
            const __m128i q0 = _mm_sub_epi8(_mm_and_si128(q, lo), eight);
            const __m128i q1 = _mm_sub_epi8(_mm_and_si128(_mm_srli_epi16(q, 4), lo), eight);
            x[k] = _mm512_mul_ps(d, _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(q0)));
            x[k + 1] = _mm512_mul_ps(d, _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(q1)));
        }
    } else if (t == PL_F32) {   /* a tile already decoded (pl_attq_rows' V tile) */
        PL_Q512_UNROLL
        for (int k = 0; k < DB; k++) x[k] = _mm512_loadu_ps((const float *)src + 16 * k);
    } else {   /* f16 */
        PL_Q512_UNROLL
        for (int k = 0; k < DB; k++) x[k] = _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)(src + 32 * k)));
    }
}

/* acc = acc * ms + x (a new maximum, w's sign bit set, ms = -w) or
 * acc += w * x: pl_cpu_attq_axpy_avx2's roundings. */
PL_Q512_AI void pl_attq_vupd(__m512 *A, const __m512 *x, float w, const int DB) {
    if (signbit(w)) {
        const __m512 ms = _mm512_set1_ps(-w);
        PL_Q512_UNROLL
        for (int k = 0; k < DB; k++) A[k] = _mm512_add_ps(_mm512_mul_ps(A[k], ms), x[k]);
    } else {
        const __m512 vw = _mm512_set1_ps(w);
        PL_Q512_UNROLL
        for (int k = 0; k < DB; k++) A[k] = _mm512_fmadd_ps(x[k], vw, A[k]);
    }
}

/* One or two query rows (e1 / a1 NULL: one), DB = hd / 16. */
PL_Q512_AI void pl_attq_vstep2(const float *e0, const float *e1, int64_t n, pl_dtype t, const char *v, size_t vs,
                               const int DB, float *a0, float *a1) {
    __m512 A0[8], A1[8], x[8];
    /* the row slice's bytes */
    const size_t rb = t == PL_Q8_0 ? (size_t)DB / 2 * 34 : t == PL_Q4_0 ? (size_t)DB / 2 * 18 : (size_t)DB * 32;
    PL_Q512_UNROLL
    for (int k = 0; k < DB; k++) {
        A0[k] = _mm512_loadu_ps(a0 + 16 * k);
        A1[k] = a1 ? _mm512_loadu_ps(a1 + 16 * k) : _mm512_setzero_ps();
    }
    for (int64_t j = 0; j < n; j++) {
        if (j + PL_VPF < n) {   /* every line of the row slice (a q8_0 slice of 128 spans 3) */
            const char *pf = v + (j + PL_VPF) * vs;
            _mm_prefetch(pf, _MM_HINT_T0);
            _mm_prefetch(pf + rb - 1, _MM_HINT_T0);
            if (rb > 128) _mm_prefetch(pf + 64, _MM_HINT_T0);
            if (rb > 192) _mm_prefetch(pf + 128, _MM_HINT_T0);
        }
        pl_attq_vload(t, v + j * vs, DB, x);
        pl_attq_vupd(A0, x, e0[j], DB);
        if (a1) pl_attq_vupd(A1, x, e1[j], DB);
    }
    PL_Q512_UNROLL
    for (int k = 0; k < DB; k++) {
        _mm512_storeu_ps(a0 + 16 * k, A0[k]);
        if (a1) _mm512_storeu_ps(a1 + 16 * k, A1[k]);
    }
}

#define PL_VSTEP_DB(DB)                                                                                   \
    static PL_Q512 void pl_attq_vstep_db##DB(const float *e0, const float *e1, int64_t n, pl_dtype t,    \
                                             const char *v, size_t vs, float *a0, float *a1) {           \
        pl_attq_vstep2(e0, e1, n, t, v, vs, DB, a0, a1);                                                 \
    }
PL_VSTEP_DB(2)
PL_VSTEP_DB(4)
PL_VSTEP_DB(6)
PL_VSTEP_DB(8)

/* A decoded f32 tile (t == PL_F32: rows of hd floats, stride vs): RB query
 * rows' accumulators held in registers for the whole tile (fully unrolled;
 * the loops of pl_attq_vstep2 above are not, so its accumulators go through
 * memory), each V vector loaded once per position for the RB rows. The same
 * operations per element as pl_attq_vupd. */
PL_Q512_AI void pl_attq_vt(const int RB, const int NB, const float *E, int64_t er, int64_t ej, int64_t n,
                           const float *V, size_t vs, float *acc, int64_t hd) {
    __m512 A[4][8];
    PL_Q512_UNROLL
    for (int r = 0; r < RB; r++)
        PL_Q512_UNROLL
        for (int b = 0; b < NB; b++) A[r][b] = _mm512_loadu_ps(acc + r * hd + 16 * b);
    for (int64_t j = 0; j < n; j++) {
        const float *vr = (const float *)((const char *)V + j * vs);
        __m512 x[8];
        PL_Q512_UNROLL
        for (int b = 0; b < NB; b++) x[b] = _mm512_loadu_ps(vr + 16 * b);
        PL_Q512_UNROLL
        for (int r = 0; r < RB; r++) {
            const float w = E[r * er + j * ej];
            if (__builtin_expect(signbit(w), 0)) {
                const __m512 ms = _mm512_set1_ps(-w);
                PL_Q512_UNROLL
                for (int b = 0; b < NB; b++) A[r][b] = _mm512_add_ps(_mm512_mul_ps(A[r][b], ms), x[b]);
            } else {
                const __m512 vw = _mm512_set1_ps(w);
                PL_Q512_UNROLL
                for (int b = 0; b < NB; b++) A[r][b] = _mm512_fmadd_ps(x[b], vw, A[r][b]);
            }
        }
    }
    PL_Q512_UNROLL
    for (int r = 0; r < RB; r++)
        PL_Q512_UNROLL
        for (int b = 0; b < NB; b++) _mm512_storeu_ps(acc + r * hd + 16 * b, A[r][b]);
}

#define PL_VT_FN(RB, NB)                                                                                       \
    static PL_Q512 void pl_attq_vt_##RB##_##NB(const float *E, int64_t er, int64_t ej, int64_t n, const float *V, \
                                               size_t vs, float *acc) {                                        \
        pl_attq_vt(RB, NB, E, er, ej, n, V, vs, acc, 16 * NB);                                                 \
    }
PL_VT_FN(4, 2)
PL_VT_FN(1, 2)
PL_VT_FN(4, 4)
PL_VT_FN(1, 4)
PL_VT_FN(3, 6)
PL_VT_FN(1, 6)
PL_VT_FN(2, 8)
PL_VT_FN(1, 8)

/* Row r's weight of position j at E[r * er + j * ej]. */
static void pl_attq_vtile(int R, const float *E, int64_t er, int64_t ej, int64_t n, const float *V, size_t vs,
                          int64_t hd, float *acc) {
    typedef void (*vt_fn)(const float *, int64_t, int64_t, int64_t, const float *, size_t, float *);
    const int NB = (int)(hd / 16), RB = NB <= 2 ? 4 : NB <= 4 ? 4 : NB <= 6 ? 3 : 2;
    const vt_fn many = NB == 2 ? pl_attq_vt_4_2 : NB == 4 ? pl_attq_vt_4_4 : NB == 6 ? pl_attq_vt_3_6 : pl_attq_vt_2_8;
    const vt_fn one = NB == 2 ? pl_attq_vt_1_2 : NB == 4 ? pl_attq_vt_1_4 : NB == 6 ? pl_attq_vt_1_6 : pl_attq_vt_1_8;
    int r = 0;
    for (; r + RB <= R; r += RB) many(E + r * er, er, ej, n, V, vs, acc + r * hd);
    for (; r < R; r++) one(E + r * er, er, ej, n, V, vs, acc + r * hd);
}

bool pl_cpu_attq_vtile_t(int R, const float *ET, int64_t ldT, int64_t n, const float *V, int64_t hd, float *acc) {
    if (hd % 32 || hd > 128 || hd < 32) return false;
    pl_attq_vtile(R, ET, 1, ldT, n, V, (size_t)hd * sizeof(float), hd, acc);
    return true;
}

PL_Q512 bool pl_cpu_attq_vstep_avx512(int R, const float *E, int64_t ldE, int64_t n, pl_dtype t, const char *v,
                                      size_t vs, int64_t hd, float *acc) {
    if ((t != PL_Q8_0 && t != PL_Q4_0 && t != PL_F16 && t != PL_F32) || hd % 32 || hd > 128 || hd < 32) return false;
    void (*fn)(const float *, const float *, int64_t, pl_dtype, const char *, size_t, float *, float *) =
        hd == 32 ? pl_attq_vstep_db2 : hd == 64 ? pl_attq_vstep_db4 : hd == 96 ? pl_attq_vstep_db6 : pl_attq_vstep_db8;
    if (t == PL_F32) {
        pl_attq_vtile(R, E, ldE, 1, n, (const float *)v, vs, hd, acc);
        return true;
    }
    int r = 0;
    for (; r + 2 <= R; r += 2) fn(E + r * ldE, E + (r + 1) * ldE, n, t, v, vs, acc + r * hd, acc + (r + 1) * hd);
    if (r < R) fn(E + r * ldE, NULL, n, t, v, vs, acc + r * hd, NULL);
    return true;
}

/* ---- q8_0 K scores, a block of query rows x a tile of K rows (VNNI) ---------
 * The same float operations as pl_cpu_mm_q8_0_avx2 (the K dtype's tile
 * kernel, which the decode path uses): per 32-block an exact int32 dot in 8
 * lanes of 4 bytes, converted, times the f32 product d_k * d_q, accumulated
 * over the blocks in order by a fused multiply-add; then pl_hsum8's order.
 * Two query rows share a zmm (low 256 bits: row 2p, high: row 2p + 1), so
 * one vpdpbusd does 64 products; signed x signed through K + 128 (unsigned)
 * and a per-lane correction -128 * sum(q) computed once per query block. */
#define PL_QK512 __attribute__((target("avx512f,avx512vl,avx512bw,avx512dq,avx512vnni,f16c")))
#define PL_QK512_AI static inline __attribute__((always_inline, target("avx512f,avx512vl,avx512bw,avx512dq,avx512vnni,f16c")))
#define PL_QK_KR 4   /* K rows per register tile */
#define PL_QK_PP 2   /* query row pairs per register tile */
#define PL_QK_UNROLL _Pragma("GCC unroll 16")

/* Pack layout, per pair p and block i (nb = hd / 32): 64 bytes of q, 16
 * int32 corrections, 16 floats d (8 of each row). */
typedef struct pl_qk_qblk { int8_t qs[64]; int32_t nc[16]; float d[16]; } pl_qk_qblk;
/* The K tile, per K row and block: 64 bytes of k + 128 (twice), d_k. */
typedef struct pl_qk_kblk { uint8_t ku[64]; } pl_qk_kblk;

size_t pl_cpu_attq_qk_qpack_size(int R, int64_t hd) { return (size_t)((R + 1) / 2) * (size_t)(hd / 32) * sizeof(pl_qk_qblk); }

size_t pl_cpu_attq_qk_kpack_size(int64_t n, int64_t hd) {
    return (size_t)n * (size_t)(hd / 32) * (sizeof(pl_qk_kblk) + sizeof(float));
}

PL_QK512 void pl_cpu_attq_qk_prepare(int R, const char *qc, size_t qrow, int64_t hd, void *qpack) {
    const int64_t nb = hd / 32;
    pl_qk_qblk *out = qpack;
    const __m512i u128 = _mm512_set1_epi8((char)0x80);
    for (int p = 0; p < (R + 1) / 2; p++)
        for (int64_t i = 0; i < nb; i++) {
            pl_qk_qblk *o = out + p * nb + i;
            for (int h = 0; h < 2; h++) {
                const int r = 2 * p + h < R ? 2 * p + h : 2 * p;   /* an odd R: the last row twice */
                const block_q8_0 *b = (const block_q8_0 *)(qc + (size_t)r * qrow) + i;
                memcpy(o->qs + 32 * h, b->qs, 32);
                for (int l = 0; l < 8; l++) o->d[8 * h + l] = pl_f16_to_f32(b->d);
            }
            const __m512i s = _mm512_dpbusd_epi32(_mm512_setzero_si512(), u128, _mm512_loadu_si512(o->qs));
            _mm512_storeu_si512(o->nc, _mm512_sub_epi32(_mm512_setzero_si512(), s));
        }
}

/* KR K rows x PP query pairs, all blocks; sc[r * ldS + k]. */
PL_QK512_AI void pl_qk_tile(const int KR, const int PP, const pl_qk_kblk *kp, const float *kd, const pl_qk_qblk *qp,
                            int64_t nb, int R, int p0, int k0, float *sc, int64_t ldS) {
    __m512 acc[PL_QK_KR][PL_QK_PP];
    PL_QK_UNROLL
    for (int a = 0; a < KR; a++)
        PL_QK_UNROLL
        for (int b = 0; b < PP; b++) acc[a][b] = _mm512_setzero_ps();
    for (int64_t i = 0; i < nb; i++) {
        __m512i q[PL_QK_PP], nc[PL_QK_PP];
        __m512 dq[PL_QK_PP];
        PL_QK_UNROLL
        for (int b = 0; b < PP; b++) {
            const pl_qk_qblk *o = qp + (p0 + b) * nb + i;
            q[b] = _mm512_loadu_si512(o->qs);
            nc[b] = _mm512_loadu_si512(o->nc);
            dq[b] = _mm512_loadu_ps(o->d);
        }
        PL_QK_UNROLL
        for (int a = 0; a < KR; a++) {
            const __m512i ku = _mm512_loadu_si512(kp[(k0 + a) * nb + i].ku);
            const __m512 dk = _mm512_set1_ps(kd[(k0 + a) * nb + i]);
            PL_QK_UNROLL
            for (int b = 0; b < PP; b++) {
                const __m512i s = _mm512_dpbusd_epi32(nc[b], ku, q[b]);
                acc[a][b] = _mm512_fmadd_ps(_mm512_mul_ps(dk, dq[b]), _mm512_cvtepi32_ps(s), acc[a][b]);
            }
        }
    }
    if (KR == 4) {
        /* pl_hsum8 of 4 K rows at once, its additions in its order: lane l
         * of each 256-bit half gets v_l + v_l+4, then (l, l+2), then (0, 1);
         * lanes 0..3 end with the 4 rows of query row 2p, lanes 8..11 with
         * those of row 2p + 1 */
        PL_QK_UNROLL
        for (int b = 0; b < PP; b++) {
            __m512 t[4];
            PL_QK_UNROLL
            for (int a = 0; a < 4; a++) t[a] = _mm512_add_ps(acc[a][b], _mm512_shuffle_f32x4(acc[a][b], acc[a][b], 0xB1));
            const __m512 u01 = _mm512_add_ps(_mm512_shuffle_ps(t[0], t[1], 0x44), _mm512_shuffle_ps(t[0], t[1], 0xEE));
            const __m512 u23 = _mm512_add_ps(_mm512_shuffle_ps(t[2], t[3], 0x44), _mm512_shuffle_ps(t[2], t[3], 0xEE));
            const __m512 w = _mm512_add_ps(_mm512_shuffle_ps(u01, u23, 0x88), _mm512_shuffle_ps(u01, u23, 0xDD));
            const int r = 2 * (p0 + b);
            float o[16];
            _mm512_storeu_ps(o, w);
            PL_QK_UNROLL
            for (int a = 0; a < 4; a++) {   /* transposed: sc[k * ldS + r] */
                sc[(k0 + a) * ldS + r] = o[a];
                if (r + 1 < R) sc[(k0 + a) * ldS + r + 1] = o[8 + a];
            }
        }
        return;
    }
    PL_QK_UNROLL
    for (int a = 0; a < KR; a++)
        PL_QK_UNROLL
        for (int b = 0; b < PP; b++)
            for (int h = 0; h < 2; h++) {
                const int r = 2 * (p0 + b) + h;
                if (r >= R) continue;
                const __m256 v = h ? _mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(acc[a][b]), 1))
                                   : _mm512_castps512_ps256(acc[a][b]);
                /* pl_hsum8's order */
                __m128 t = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
                t = _mm_add_ps(t, _mm_movehl_ps(t, t));
                t = _mm_add_ss(t, _mm_movehdup_ps(t));
                sc[(k0 + a) * ldS + r] = _mm_cvtss_f32(t);
            }
}

PL_QK512 void pl_cpu_attq_qk_scores(int R, const void *qpack, const char *k, size_t ks, int64_t n, int64_t hd,
                                    void *kpack, float *sc, int64_t ldS) {
    const int64_t nb = hd / 32;
    pl_qk_kblk *kp = kpack;
    float *kd = (float *)(kp + n * nb);
    const __m256i x80 = _mm256_set1_epi8((char)0x80);
    for (int64_t j = 0; j < n; j++) {
        const block_q8_0 *b = (const block_q8_0 *)(k + j * ks);
        /* the next tile's row j (the driver's next call): from L2 or memory
         * while this tile computes */
        for (size_t o = 0; o < (size_t)nb * sizeof(block_q8_0); o += 64) _mm_prefetch(k + (j + n) * ks + o, _MM_HINT_T0);
        for (int64_t i = 0; i < nb; i++) {
            const __m256i u = _mm256_xor_si256(_mm256_loadu_si256((const __m256i *)b[i].qs), x80);
            _mm512_storeu_si512(kp[j * nb + i].ku, _mm512_inserti64x4(_mm512_castsi256_si512(u), u, 1));
            kd[j * nb + i] = _cvtsh_ss(b[i].d);
        }
    }
    const int np = (R + 1) / 2;
    int64_t k0 = 0;
    for (; k0 + PL_QK_KR <= n; k0 += PL_QK_KR) {
        int p0 = 0;
        for (; p0 + PL_QK_PP <= np; p0 += PL_QK_PP) pl_qk_tile(PL_QK_KR, PL_QK_PP, kp, kd, qpack, nb, R, p0, (int)k0, sc, ldS);
        for (; p0 < np; p0++) pl_qk_tile(PL_QK_KR, 1, kp, kd, qpack, nb, R, p0, (int)k0, sc, ldS);
    }
    for (; k0 < n; k0++) {
        int p0 = 0;
        for (; p0 + PL_QK_PP <= np; p0 += PL_QK_PP) pl_qk_tile(1, PL_QK_PP, kp, kd, qpack, nb, R, p0, (int)k0, sc, ldS);
        for (; p0 < np; p0++) pl_qk_tile(1, 1, kp, kd, qpack, nb, R, p0, (int)k0, sc, ldS);
    }
}

/* ---- the running-maximum scan, 16 query rows per vector ---------------------
 * (see cpu_attention_quant.h). The scalar scan's per-row chain of compares
 * and additions (a 4-cycle add per position and row) ran at a fraction of
 * the tile's arithmetic; across rows the lanes are independent. */
PL_Q512_AI __m512 pl_attq_exp16_2x8(__m512 x) {
    const __m256 lo = pl_exp8(_mm512_castps512_ps256(x));
    const __m256 hi = pl_exp8(_mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(x), 1)));
    return _mm512_insertf32x8(_mm512_castps256_ps512(lo), hi, 1);
}

/* pl_exp8 (cpu_simd_avx2.h) on 16 lanes: its operations lane for lane, so
 * its bits (the round to nearest of x * log2(e) as _mm256_round_ps; the
 * conversion of the integral n exact), at half the instructions of two
 * 8-lane calls. PL_CPU_ATTQ_EXP16=0: the two calls (test_attention_split
 * compares the two on random and edge inputs). */
PL_Q512_AI __m512 pl_attq_exp16_native(__m512 x) {
    x = _mm512_min_ps(_mm512_max_ps(x, _mm512_set1_ps(-87.3f)), _mm512_set1_ps(88.0f));
    const __m512 n = _mm512_roundscale_ps(_mm512_mul_ps(x, _mm512_set1_ps(1.44269504088896341f)),
                                          _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    __m512 r = _mm512_fnmadd_ps(n, _mm512_set1_ps(0.693359375f), x);
    r = _mm512_fnmadd_ps(n, _mm512_set1_ps(-2.12194440e-4f), r);
    __m512 p = _mm512_set1_ps(1.0f / 5040.0f);
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f / 720.0f));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f / 120.0f));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f / 24.0f));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f / 6.0f));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(0.5f));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f));
    const __m512i e = _mm512_slli_epi32(_mm512_add_epi32(_mm512_cvtps_epi32(n), _mm512_set1_epi32(127)), 23);
    return _mm512_mul_ps(p, _mm512_castsi512_ps(e));
}

PL_Q512 void pl_cpu_attq_exp16(const float *x, float *y, int64_t n, bool native) {
    for (int64_t i = 0; i + 16 <= n; i += 16) {
        const __m512 v = _mm512_loadu_ps(x + i);
        _mm512_storeu_ps(y + i, native ? pl_attq_exp16_native(v) : pl_attq_exp16_2x8(v));
    }
}

PL_Q512 void pl_cpu_attq_scan_t(int R, float *ET, int64_t ldT, int64_t n, const int32_t *lim, float scale, float *M,
                                float *S, bool native) {
    const __m512 sc = _mm512_set1_ps(scale), one = _mm512_set1_ps(1.0f);
    const __m512 sign = _mm512_castsi512_ps(_mm512_set1_epi32((int)0x80000000u));
    __mmask16 nmk[64];
    for (int r0 = 0; r0 < R; r0 += 16) {
        const __mmask16 rm = R - r0 >= 16 ? (__mmask16)0xFFFF : (__mmask16)((1u << (R - r0)) - 1);
        const __m512i lv = _mm512_maskz_loadu_epi32(rm, lim + r0);
        const __m512i tl = _mm512_and_si512(lv, _mm512_set1_epi32(~7));   /* the expf tail's start */
        __m512 Mv = _mm512_mask_loadu_ps(_mm512_set1_ps(-INFINITY), rm, M + r0);
        __m512 Sv = _mm512_maskz_loadu_ps(rm, S + r0);
        for (int64_t j0 = 0; j0 < n; j0 += 64) {   /* n <= 64 in use; in pieces of nmk's size otherwise */
            const int64_t j1 = n - j0 < 64 ? n : j0 + 64;
            for (int64_t j = j0; j < j1; j++) {
                float *e = ET + j * ldT + r0;
                const __mmask16 valid = _mm512_cmpgt_epi32_mask(lv, _mm512_set1_epi32((int)j));
                const __m512 s = _mm512_mul_ps(_mm512_maskz_loadu_ps(valid, e), sc);
                const __mmask16 nm = _mm512_mask_cmp_ps_mask(valid, s, Mv, _CMP_GT_OQ);
                const __m512 arg = _mm512_mask_sub_ps(_mm512_sub_ps(s, Mv), nm, Mv, s);
                Mv = _mm512_mask_mov_ps(Mv, nm, s);
                _mm512_storeu_ps(e, arg);
                nmk[j - j0] = nm;
            }
            for (int64_t j = j0; j < j1; j++) {
                float *e = ET + j * ldT + r0;
                const __mmask16 valid = _mm512_cmpgt_epi32_mask(lv, _mm512_set1_epi32((int)j));
                const __m512 arg = _mm512_loadu_ps(e);
                __m512 x = native ? pl_attq_exp16_native(arg) : pl_attq_exp16_2x8(arg);
                const __mmask16 tail = valid & _mm512_cmple_epi32_mask(tl, _mm512_set1_epi32((int)j));
                if (tail) {   /* the row's last lim % 8 positions: expf, as pl_cpu_vexp_avx2 */
                    float xs[16], as[16];
                    _mm512_storeu_ps(xs, x);
                    _mm512_storeu_ps(as, arg);
                    for (int l = 0; l < 16; l++)
                        if (tail >> l & 1) xs[l] = expf(as[l]);
                    x = _mm512_loadu_ps(xs);
                }
                const __mmask16 nm = nmk[j - j0];
                Sv = _mm512_mask_add_ps(Sv, (__mmask16)(valid & ~nm), Sv, x);       /* S * 1 + e */
                Sv = _mm512_mask_add_ps(Sv, nm, _mm512_mul_ps(Sv, x), one);         /* S * e + 1 */
                x = _mm512_maskz_mov_ps(valid, x);
                x = _mm512_mask_xor_ps(x, nm, x, sign);                              /* the tag: -e */
                _mm512_storeu_ps(e, x);
            }
        }
        _mm512_mask_storeu_ps(M + r0, rm, Mv);
        _mm512_mask_storeu_ps(S + r0, rm, Sv);
    }
}

/* ---- a V tile decoded to f32 (AVX-512) ---------------------------------------
 * n rows of hd elements (row j at v + j * vs) -> out [n][hd]: d * q exactly,
 * as pl_cpu_attq_decode_avx2 and the scalar decoders. The next tile's rows
 * are prefetched. */
PL_Q512 bool pl_cpu_attq_vdecode_avx512(pl_dtype t, const char *v, size_t vs, int64_t n, int64_t hd, float *out) {
    if ((t != PL_Q8_0 && t != PL_Q4_0) || hd % 32) return false;
    const int64_t nb = hd / 32;
    const __m128i lo = _mm_set1_epi8(0x0f), eight = _mm_set1_epi8(8);
    for (int64_t j = 0; j < n; j++, out += hd) {
        const char *row = v + j * vs;
        for (size_t o = 0; o < (size_t)nb * (t == PL_Q8_0 ? 34 : 18); o += 64) _mm_prefetch(row + n * vs + o, _MM_HINT_T0);
        if (t == PL_Q8_0) {
            const block_q8_0 *b = (const block_q8_0 *)row;
            for (int64_t i = 0; i < nb; i++) {
                const __m512 d = _mm512_set1_ps(_cvtsh_ss(b[i].d));
                const __m128i q0 = _mm_loadu_si128((const __m128i *)b[i].qs);
                const __m128i q1 = _mm_loadu_si128((const __m128i *)(b[i].qs + 16));
                _mm512_storeu_ps(out + 32 * i, _mm512_mul_ps(d, _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(q0))));
                _mm512_storeu_ps(out + 32 * i + 16, _mm512_mul_ps(d, _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(q1))));
            }
        } else {
            const block_q4_0 *b = (const block_q4_0 *)row;
            for (int64_t i = 0; i < nb; i++) {
                const __m512 d = _mm512_set1_ps(_cvtsh_ss(b[i].d));
                const __m128i q = _mm_loadu_si128((const __m128i *)b[i].qs);
                const __m128i q0 = _mm_sub_epi8(_mm_and_si128(q, lo), eight);
                const __m128i q1 = _mm_sub_epi8(_mm_and_si128(_mm_srli_epi16(q, 4), lo), eight);
                _mm512_storeu_ps(out + 32 * i, _mm512_mul_ps(d, _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(q0))));
                _mm512_storeu_ps(out + 32 * i + 16, _mm512_mul_ps(d, _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(q1))));
            }
        }
    }
    return true;
}

/* ---- q8_0 K scores for one pair of query rows (decode; VNNI) ----------------
 * The decode task's R <= 2 query rows (one token, a KV group of 2 or 1) were
 * scored by pl_cpu_mm_q8_0_avx2 (AVX2 maddubs, a row at a time): about half
 * the q8_0 decode attention's time at depth. Here the pair shares one zmm
 * (pl_cpu_attq_qk_prepare's pack), each K block is broadcast to both halves
 * straight from the cache (no K pack: with one pair it would be read once),
 * and four K rows are summed at once in pl_hsum8's order, as pl_qk_tile. */
#define PL_QKD_PF 8   /* K rows prefetched ahead */

PL_QK512_AI void pl_qkd_rows(const int NB, const int KR, const pl_qk_qblk *qp, const char *k, size_t ks, int R,
                             float *sc, int64_t ldS) {
    const __m256i x80 = _mm256_set1_epi8((char)0x80);
    __m512 acc[4];
    PL_QK_UNROLL
    for (int a = 0; a < KR; a++) acc[a] = _mm512_setzero_ps();
    PL_QK_UNROLL
    for (int i = 0; i < NB; i++) {
        const __m512i q = _mm512_loadu_si512(qp[i].qs), nc = _mm512_loadu_si512(qp[i].nc);
        const __m512 dq = _mm512_loadu_ps(qp[i].d);
        PL_QK_UNROLL
        for (int a = 0; a < KR; a++) {
            const block_q8_0 *b = (const block_q8_0 *)(k + (size_t)a * ks) + i;
            const __m256i u = _mm256_xor_si256(_mm256_loadu_si256((const __m256i *)b->qs), x80);
            const __m512i ku = _mm512_inserti64x4(_mm512_castsi256_si512(u), u, 1);
            const __m512 dk = _mm512_set1_ps(_cvtsh_ss(b->d));
            const __m512i s = _mm512_dpbusd_epi32(nc, ku, q);
            acc[a] = _mm512_fmadd_ps(_mm512_mul_ps(dk, dq), _mm512_cvtepi32_ps(s), acc[a]);
        }
    }
    if (KR == 4) {   /* pl_qk_tile's transposed pl_hsum8 */
        __m512 t[4];
        PL_QK_UNROLL
        for (int a = 0; a < 4; a++) t[a] = _mm512_add_ps(acc[a], _mm512_shuffle_f32x4(acc[a], acc[a], 0xB1));
        const __m512 u01 = _mm512_add_ps(_mm512_shuffle_ps(t[0], t[1], 0x44), _mm512_shuffle_ps(t[0], t[1], 0xEE));
        const __m512 u23 = _mm512_add_ps(_mm512_shuffle_ps(t[2], t[3], 0x44), _mm512_shuffle_ps(t[2], t[3], 0xEE));
        const __m512 w = _mm512_add_ps(_mm512_shuffle_ps(u01, u23, 0x88), _mm512_shuffle_ps(u01, u23, 0xDD));
        _mm_storeu_ps(sc, _mm512_castps512_ps128(w));
        if (R > 1) _mm_storeu_ps(sc + ldS, _mm512_extractf32x4_ps(w, 2));
        return;
    }
    for (int h = 0; h < R; h++) {
        const __m256 v = h ? _mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(acc[0]), 1))
                           : _mm512_castps512_ps256(acc[0]);
        __m128 t = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
        t = _mm_add_ps(t, _mm_movehl_ps(t, t));
        t = _mm_add_ss(t, _mm_movehdup_ps(t));
        sc[h * ldS] = _mm_cvtss_f32(t);
    }
}

PL_QK512_AI void pl_qkd(const int NB, int R, const pl_qk_qblk *qp, const char *k, size_t ks, int64_t n, float *sc,
                        int64_t ldS) {
    const size_t rb = (size_t)NB * sizeof(block_q8_0);
    int64_t j = 0;
    for (; j + 4 <= n; j += 4) {
        for (int a = 0; a < 4; a++) {
            const char *pf = k + (size_t)(j + a + PL_QKD_PF) * ks;
            for (size_t o = 0; o < rb; o += 64) _mm_prefetch(pf + o, _MM_HINT_T0);
            _mm_prefetch(pf + rb - 1, _MM_HINT_T0);
        }
        pl_qkd_rows(NB, 4, qp, k + (size_t)j * ks, ks, R, sc + j, ldS);
    }
    for (; j < n; j++) pl_qkd_rows(NB, 1, qp, k + (size_t)j * ks, ks, R, sc + j, ldS);
}

#define PL_QKD_FN(NB)                                                                                          \
    static PL_QK512 void pl_qkd_nb##NB(int R, const pl_qk_qblk *qp, const char *k, size_t ks, int64_t n,     \
                                       float *sc, int64_t ldS) {                                             \
        pl_qkd(NB, R, qp, k, ks, n, sc, ldS);                                                                \
    }
PL_QKD_FN(1)
PL_QKD_FN(2)
PL_QKD_FN(3)
PL_QKD_FN(4)

bool pl_cpu_attq_qk_dec(int R, const void *qpack, const char *k, size_t ks, int64_t n, int64_t hd, float *sc,
                        int64_t ldS) {
    if (R < 1 || R > 2 || hd % 32 || hd < 32 || hd > 128) return false;
    void (*fn)(int, const pl_qk_qblk *, const char *, size_t, int64_t, float *, int64_t) =
        hd == 32 ? pl_qkd_nb1 : hd == 64 ? pl_qkd_nb2 : hd == 96 ? pl_qkd_nb3 : pl_qkd_nb4;
    fn(R, qpack, k, ks, n, sc, ldS);
    return true;
}
