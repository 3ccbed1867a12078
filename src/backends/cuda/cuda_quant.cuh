/*
 * The weight formats as the CUDA kernels read them: block layouts, and the
 * per-block decode and dot-product math of get_rows, the GEMV and the GEMM.
 *
 * Everything here is __host__ __device__ so that tests/cuda/test_cuda_units.cu
 * can run the exact same index and bit arithmetic on the CPU against the
 * reference decoders (quant/dequant.c), on machines without a GPU. The only
 * differences between the two compilations are the intrinsics wrapped below
 * (__dp4a, __vsub4, round-to-nearest multiplies), whose host versions compute
 * the same values.
 */
#ifndef PL_BACKENDS_CUDA_QUANT_CUH
#define PL_BACKENDS_CUDA_QUANT_CUH
#include <cuda_fp16.h>
#include <stdint.h>
#include "kernels/dtype.h"

#define PL_HD __host__ __device__ __forceinline__
/* #pragma unroll for the device pass only (the host compiler would warn). */
#ifdef __CUDA_ARCH__
#define PL_UNROLL _Pragma("unroll")
#else
#define PL_UNROLL
#endif

/* ---- intrinsics, with host equivalents ------------------------------------------------------- */

/* Products and differences rounded once each (nvcc would otherwise contract
 * a*b - c into an FMA, the host compiler does not: the ref's arithmetic). */
PL_HD float pl_mul(float a, float b) {
#ifdef __CUDA_ARCH__
    return __fmul_rn(a, b);
#else
    return a * b;
#endif
}
PL_HD float pl_sub(float a, float b) {
#ifdef __CUDA_ARCH__
    return __fsub_rn(a, b);
#else
    return a - b;
#endif
}
/* c + sum of the 4 signed byte products of a and b. */
PL_HD int pl_dp4a(int a, int b, int c) {
#ifdef __CUDA_ARCH__
    return __dp4a(a, b, c);
#else
    for (int i = 0; i < 4; i++) c += (int)(int8_t)(a >> (8 * i)) * (int)(int8_t)(b >> (8 * i));
    return c;
#endif
}
/* Per-byte a - b, modulo 256. */
PL_HD uint32_t pl_vsub4(uint32_t a, uint32_t b) {
#ifdef __CUDA_ARCH__
    return __vsub4(a, b);
#else
    uint32_t r = 0;
    for (int i = 0; i < 4; i++) r |= (((a >> (8 * i)) - (b >> (8 * i))) & 0xffu) << (8 * i);
    return r;
#endif
}

PL_HD float pl_cu_h2f(uint16_t h) { return __half2float(__ushort_as_half(h)); }
PL_HD float pl_cu_bf2f(uint16_t h) {
    union { uint32_t u; float f; } v;
    v.u = (uint32_t)h << 16;
    return v.f;
}
/* Two floats as an f16 pair, round to nearest even, low half first. */
PL_HD uint32_t pl_pack_h2(float a, float b) {
    return (uint32_t)__half_as_ushort(__float2half_rn(a)) | ((uint32_t)__half_as_ushort(__float2half_rn(b)) << 16);
}
/* 32-bit load from a 2-byte aligned address (q8_0 / q6_K blocks inside a row). */
PL_HD uint32_t pl_cu_ld_u32_a2(const void *p) {
    const uint16_t *h = (const uint16_t *)p;
    return (uint32_t)h[0] | ((uint32_t)h[1] << 16);
}
/* 32-bit load from any address. */
PL_HD uint32_t pl_cu_ld_u32_any(const uint8_t *p) {
    return (uint32_t)p[0] | ((uint32_t)p[1] << 8) | ((uint32_t)p[2] << 16) | ((uint32_t)p[3] << 24);
}

/* ---- GGML block layouts (quant/blocks.h, repeated for device code) -----------------------------
 * Byte for byte GGML's; d / dmin are IEEE half bit patterns.
 *
 * q8_0 (34 bytes, 32 weights): x_j = d * qs[j]. Only 2-byte aligned in a row.
 * q4_K (144 bytes, 256 weights): 8 sub-blocks of 32, x = d*sc_j*q - dmin*m_j,
 *   q in 0..15; 6-bit (sc_j, m_j) packed in scales[12] (pl_cu_q4k_scale_min);
 *   qs: per 64 weights 32 bytes, sub-block 2c in the low nibbles, 2c+1 in the
 *   high ones. 144 = 9*16, so blocks of a 16-byte aligned row are too.
 * q6_K (210 bytes, 256 weights): 16 sub-blocks of 16, x = d*scales[i]*(q-32),
 *   q in 0..63. Per 128 weights: 64 ql bytes, 32 qh bytes; weight l + 32r
 *   (l < 32, r < 4) has its low nibble in ql[l + 32(r&1)] (low nibble for
 *   r < 2, high for r >= 2) and its top 2 bits at bits 2r of qh[l]; its scale
 *   is scales[l/16 + 2r]. Only 2-byte aligned in a row.
 */
typedef struct pl_cu_q8_0 { uint16_t d; int8_t qs[32]; } pl_cu_q8_0;
typedef struct pl_cu_q4_K { uint16_t d, dmin; uint8_t scales[12]; uint8_t qs[128]; } pl_cu_q4_K;
typedef struct pl_cu_q6_K { uint8_t ql[128]; uint8_t qh[64]; int8_t scales[16]; uint16_t d; } pl_cu_q6_K;
static_assert(sizeof(pl_cu_q8_0) == 34, "q8_0 block");
static_assert(sizeof(pl_cu_q4_K) == 144, "q4_K block");
static_assert(sizeof(pl_cu_q6_K) == 210, "q6_K block");

/* Sub-block j (0..7) of q4_K: the 6-bit scale and min. 0..3 keep theirs in
 * the low 6 bits of bytes j and j+4; 4..7 keep the low 4 bits in byte j+4
 * (scale low nibble, min high nibble) and the top 2 bits in the spare top
 * bits of bytes j-4 (scale) and j (min). */
PL_HD void pl_cu_q4k_scale_min(int j, const uint8_t *q, int *sc, int *m) {
    if (j < 4) {
        *sc = q[j] & 63;
        *m = q[j + 4] & 63;
    } else {
        *sc = (q[j + 4] & 0xF) | ((q[j - 4] >> 6) << 4);
        *m = (q[j + 4] >> 4) | ((q[j] >> 6) << 4);
    }
}

/* ---- get_rows: one group of a row to f32, exactly as the ref ---------------------------------------
 * A group is 32 weights of a quantized row (a q8_0 block, a q4_K sub-block,
 * a q6_K run l = 0..31 of one r in one 128-half) or 1 element of a plain one. */

template <int T> struct pl_cu_group { static constexpr int G = 1; };
template <> struct pl_cu_group<PL_Q8_0> { static constexpr int G = 32; };
template <> struct pl_cu_group<PL_Q4_K> { static constexpr int G = 32; };
template <> struct pl_cu_group<PL_Q6_K> { static constexpr int G = 32; };

template <int T>
PL_HD void pl_cu_decode_group(const unsigned char *row, int64_t g, float *out) {
    if (T == PL_F32) {
        out[0] = ((const float *)row)[g];
    } else if (T == PL_F16) {
        out[0] = pl_cu_h2f(((const uint16_t *)row)[g]);
    } else if (T == PL_BF16) {
        out[0] = pl_cu_bf2f(((const uint16_t *)row)[g]);
    } else if (T == PL_Q8_0) {
        const pl_cu_q8_0 *b = (const pl_cu_q8_0 *)row + g;
        const float d = pl_cu_h2f(b->d);
        for (int j = 0; j < 32; j++) out[j] = pl_mul((float)b->qs[j], d);
    } else if (T == PL_Q4_K) {
        const pl_cu_q4_K *b = (const pl_cu_q4_K *)row + g / 8;
        const int j = (int)(g % 8), c = j / 2, shift = 4 * (j & 1);
        int sc, m;
        pl_cu_q4k_scale_min(j, b->scales, &sc, &m);
        const float d1 = pl_mul(pl_cu_h2f(b->d), (float)sc), m1 = pl_mul(pl_cu_h2f(b->dmin), (float)m);
        const uint8_t *q = b->qs + 32 * c;
        for (int l = 0; l < 32; l++) out[l] = pl_sub(pl_mul(d1, (float)((q[l] >> shift) & 0xF)), m1);
    } else if (T == PL_Q6_K) {
        const pl_cu_q6_K *b = (const pl_cu_q6_K *)row + g / 8;
        const int gg = (int)(g % 8), hh = gg / 4, r = gg % 4;
        const uint8_t *ql = b->ql + 64 * hh + 32 * (r & 1), *qh = b->qh + 32 * hh;
        const int8_t *sc = b->scales + 8 * hh + 2 * r;
        const int lshift = 4 * (r >> 1), hshift = 2 * r;
        const float d = pl_cu_h2f(b->d);
        for (int l = 0; l < 32; l++) {
            const int q = (((ql[l] >> lshift) & 0xF) | (((qh[l] >> hshift) & 3) << 4)) - 32;
            out[l] = pl_mul(pl_mul(d, (float)sc[l / 16]), (float)q);
        }
    }
}

/* ---- GEMV: one "unit" of a weight row dotted with up to NC activation columns ------------------
 *
 * Activations for the integer path are ours (SoA, every load aligned):
 *   q int8  [M][K]      q = round(x / d), d = amax / 127 per 32
 *   d float [M][K/32]   d
 *   s float [M][K/16]   d * sum of q over each 16
 * Units:
 *   f32 / f16 / bf16: 8 consecutive weights (one 16-byte load, two for f32);
 *   q8_0: half a block, 16 weights: 4 dp4a, scale d_w * d_x;
 *   q4_K: 16 bytes of qs = 16 weights of sub-block 2c (low nibbles) and 16 of
 *         2c+1 (high nibbles): 8 dp4a; the minimum enters as
 *         dmin * m_j * (d_x * sum of those 16 q_x), from s;
 *   q6_K: 8 positions l of one 128-half, all four r: 32 weights rebuilt as
 *         bytes (low nibble | 2 high bits << 4) - 32 with byte-wise ops, 8 dp4a.
 */
typedef struct pl_cu_xq {
    int8_t *q;
    float *d, *s;
} pl_cu_xq;

typedef struct pl_cu_gv_args {
    const char *W;
    size_t w_nb1;
    int64_t N, K;
    int M;                 /* valid columns, <= NC */
    const char *x;         /* f32 activations (float path) */
    size_t x_nb1;
    pl_cu_xq xq;           /* quantized activations (integer path) */
    float *dst;
    int wpr;               /* warps per row */
    bool vec;              /* 16-byte loads are aligned (weights, and x for the float path) */
} pl_cu_gv_args;

template <int T> PL_HD int64_t pl_cu_gv_units(int64_t K) {
    return T == PL_Q8_0 ? K / 16 : (T == PL_Q4_K || T == PL_Q6_K) ? K / 32 : (K + 7) / 8;
}

/* Float path: 8 weights at k0 as floats (0 past K). */
template <int T>
PL_HD void pl_cu_gv_w8(const char *row, int64_t k0, int64_t K, bool vec, float *w) {
    if (vec) {
        if (T == PL_F32) {
            const float4 a = *(const float4 *)((const float *)row + k0), b = *(const float4 *)((const float *)row + k0 + 4);
            w[0] = a.x; w[1] = a.y; w[2] = a.z; w[3] = a.w; w[4] = b.x; w[5] = b.y; w[6] = b.z; w[7] = b.w;
        } else {
            const uint4 u = *(const uint4 *)((const uint16_t *)row + k0);
            const uint32_t v[4] = {u.x, u.y, u.z, u.w};
            for (int i = 0; i < 4; i++) {
                if (T == PL_F16) {
                    w[2 * i] = pl_cu_h2f((uint16_t)(v[i] & 0xffff));
                    w[2 * i + 1] = pl_cu_h2f((uint16_t)(v[i] >> 16));
                } else {
                    w[2 * i] = pl_cu_bf2f((uint16_t)(v[i] & 0xffff));
                    w[2 * i + 1] = pl_cu_bf2f((uint16_t)(v[i] >> 16));
                }
            }
        }
        return;
    }
    for (int i = 0; i < 8; i++) {
        const int64_t k = k0 + i;
        if (k >= K) { w[i] = 0.0f; continue; }
        if (T == PL_F32) w[i] = ((const float *)row)[k];
        else if (T == PL_F16) w[i] = pl_cu_h2f(((const uint16_t *)row)[k]);
        else w[i] = pl_cu_bf2f(((const uint16_t *)row)[k]);
    }
}

PL_HD void pl_cu_gv_x8(const char *x, int64_t k0, int64_t K, bool vec, float *v) {
    const float *p = (const float *)x + k0;
    if (vec) {
        const float4 a = *(const float4 *)p, b = *(const float4 *)(p + 4);
        v[0] = a.x; v[1] = a.y; v[2] = a.z; v[3] = a.w; v[4] = b.x; v[5] = b.y; v[6] = b.z; v[7] = b.w;
        return;
    }
    for (int i = 0; i < 8; i++) v[i] = k0 + i < K ? p[i] : 0.0f;
}

/* acc[c] += unit u of row `row` dotted with column c (c < a.M). */
template <int T, int NC>
PL_HD void pl_cu_gv_unit(const pl_cu_gv_args &a, const char *row, int64_t u, float *acc) {
    const int64_t K = a.K;
    if (T == PL_F32 || T == PL_F16 || T == PL_BF16) {
        float w[8];
        pl_cu_gv_w8<T>(row, 8 * u, K, a.vec, w);
PL_UNROLL
        for (int c = 0; c < NC; c++) {
            if (c >= a.M) break;
            float x[8];
            pl_cu_gv_x8(a.x + (size_t)c * a.x_nb1, 8 * u, K, a.vec, x);
PL_UNROLL
            for (int i = 0; i < 8; i++) acc[c] = fmaf(w[i], x[i], acc[c]);
        }
    } else if (T == PL_Q8_0) {
        const int64_t blk = u / 2;
        const int h = (int)(u % 2);
        const pl_cu_q8_0 *b = (const pl_cu_q8_0 *)row + blk;
        const float d = pl_cu_h2f(b->d);
        const uint8_t *qs = (const uint8_t *)b->qs + 16 * h;
        int w[4];
        for (int i = 0; i < 4; i++) w[i] = (int)pl_cu_ld_u32_a2(qs + 4 * i);
PL_UNROLL
        for (int c = 0; c < NC; c++) {
            if (c >= a.M) break;
            const int4 xv = *(const int4 *)(a.xq.q + c * K + 32 * blk + 16 * h);
            int s = pl_dp4a(w[0], xv.x, 0);
            s = pl_dp4a(w[1], xv.y, s);
            s = pl_dp4a(w[2], xv.z, s);
            s = pl_dp4a(w[3], xv.w, s);
            acc[c] = fmaf(d * a.xq.d[c * (K / 32) + blk], (float)s, acc[c]);
        }
    } else if (T == PL_Q4_K) {
        const int64_t sb = u / 8;
        const int uu = (int)(u % 8), cc = uu / 2, h = uu % 2;
        const pl_cu_q4_K *b = (const pl_cu_q4_K *)row + sb;
        const uint8_t *qs = b->qs + 32 * cc + 16 * h;
        uint32_t w[4];
        if (a.vec) {
            const uint4 v = *(const uint4 *)qs;
            w[0] = v.x; w[1] = v.y; w[2] = v.z; w[3] = v.w;
        } else {
            for (int i = 0; i < 4; i++) w[i] = pl_cu_ld_u32_any(qs + 4 * i);
        }
        const float d = pl_cu_h2f(b->d), dmin = pl_cu_h2f(b->dmin);
        int sc0, m0, sc1, m1;
        pl_cu_q4k_scale_min(2 * cc, b->scales, &sc0, &m0);
        pl_cu_q4k_scale_min(2 * cc + 1, b->scales, &sc1, &m1);
        const float d0 = d * (float)sc0, d1 = d * (float)sc1, dm0 = dmin * (float)m0, dm1 = dmin * (float)m1;
        const int64_t j0 = sb * 8 + 2 * cc;          /* sub-block 2c among the row's 32-blocks */
PL_UNROLL
        for (int c = 0; c < NC; c++) {
            if (c >= a.M) break;
            const int8_t *xq = a.xq.q + c * K + 32 * j0 + 16 * h;
            const int4 xl = *(const int4 *)xq, xh = *(const int4 *)(xq + 32);
            int sl = pl_dp4a((int)(w[0] & 0x0F0F0F0Fu), xl.x, 0);
            sl = pl_dp4a((int)(w[1] & 0x0F0F0F0Fu), xl.y, sl);
            sl = pl_dp4a((int)(w[2] & 0x0F0F0F0Fu), xl.z, sl);
            sl = pl_dp4a((int)(w[3] & 0x0F0F0F0Fu), xl.w, sl);
            int sh = pl_dp4a((int)((w[0] >> 4) & 0x0F0F0F0Fu), xh.x, 0);
            sh = pl_dp4a((int)((w[1] >> 4) & 0x0F0F0F0Fu), xh.y, sh);
            sh = pl_dp4a((int)((w[2] >> 4) & 0x0F0F0F0Fu), xh.z, sh);
            sh = pl_dp4a((int)((w[3] >> 4) & 0x0F0F0F0Fu), xh.w, sh);
            const float *xd = a.xq.d + c * (K / 32), *xs = a.xq.s + c * (K / 16);
            float r = d0 * xd[j0] * (float)sl + d1 * xd[j0 + 1] * (float)sh;
            r -= dm0 * xs[2 * j0 + h] + dm1 * xs[2 * (j0 + 1) + h];
            acc[c] += r;
        }
    } else if (T == PL_Q6_K) {
        const int64_t sb = u / 8;
        const int uu = (int)(u % 8), hh = uu / 4, l0 = 8 * (uu % 4);
        const pl_cu_q6_K *b = (const pl_cu_q6_K *)row + sb;
        const uint8_t *ql = b->ql + 64 * hh + l0, *qh = b->qh + 32 * hh + l0;
        const uint32_t A0 = pl_cu_ld_u32_a2(ql), A1 = pl_cu_ld_u32_a2(ql + 4);
        const uint32_t B0 = pl_cu_ld_u32_a2(ql + 32), B1 = pl_cu_ld_u32_a2(ql + 36);
        const uint32_t H0 = pl_cu_ld_u32_a2(qh), H1 = pl_cu_ld_u32_a2(qh + 4);
        const int8_t *scp = b->scales + 8 * hh + l0 / 16;
        const float d = pl_cu_h2f(b->d);
        /* weights l0..l0+7 of r = 0..3, as signed bytes q - 32 */
        int q[4][2];
        q[0][0] = (int)pl_vsub4((A0 & 0x0F0F0F0Fu) | ((H0 << 4) & 0x30303030u), 0x20202020u);
        q[0][1] = (int)pl_vsub4((A1 & 0x0F0F0F0Fu) | ((H1 << 4) & 0x30303030u), 0x20202020u);
        q[1][0] = (int)pl_vsub4((B0 & 0x0F0F0F0Fu) | ((H0 << 2) & 0x30303030u), 0x20202020u);
        q[1][1] = (int)pl_vsub4((B1 & 0x0F0F0F0Fu) | ((H1 << 2) & 0x30303030u), 0x20202020u);
        q[2][0] = (int)pl_vsub4(((A0 >> 4) & 0x0F0F0F0Fu) | (H0 & 0x30303030u), 0x20202020u);
        q[2][1] = (int)pl_vsub4(((A1 >> 4) & 0x0F0F0F0Fu) | (H1 & 0x30303030u), 0x20202020u);
        q[3][0] = (int)pl_vsub4(((B0 >> 4) & 0x0F0F0F0Fu) | ((H0 >> 2) & 0x30303030u), 0x20202020u);
        q[3][1] = (int)pl_vsub4(((B1 >> 4) & 0x0F0F0F0Fu) | ((H1 >> 2) & 0x30303030u), 0x20202020u);
        float ds[4];
        for (int r = 0; r < 4; r++) ds[r] = d * (float)scp[2 * r];
        const int64_t j0 = sb * 8 + 4 * hh;          /* 32-block of r = 0 */
PL_UNROLL
        for (int c = 0; c < NC; c++) {
            if (c >= a.M) break;
            const int8_t *xq = a.xq.q + c * K + 32 * j0 + l0;
            const float *xd = a.xq.d + c * (K / 32) + j0;
            float r_acc = 0.0f;
            for (int r = 0; r < 4; r++) {
                const int2 xv = *(const int2 *)(xq + 32 * r);
                const int s = pl_dp4a(q[r][1], xv.y, pl_dp4a(q[r][0], xv.x, 0));
                r_acc = fmaf(ds[r] * xd[r], (float)s, r_acc);
            }
            acc[c] += r_acc;
        }
    }
}

/* ---- GEMM: 32 weights [k, k+32) of one row as 16 f16 pairs --------------------------------------
 * Each value is computed in f32 exactly as the ref decodes it, then rounded
 * to f16 (round to nearest even). */
template <int T>
PL_HD void pl_cu_dequant32_h(const char *row, int64_t k, int64_t K, bool vec, uint32_t *out) {
    if (T == PL_F16) {
        const uint16_t *p = (const uint16_t *)row + k;
        if (vec && k + 32 <= K) {
            for (int i = 0; i < 4; i++) {
                const uint4 v = ((const uint4 *)p)[i];
                out[4 * i] = v.x; out[4 * i + 1] = v.y; out[4 * i + 2] = v.z; out[4 * i + 3] = v.w;
            }
        } else {
            for (int i = 0; i < 16; i++) {
                const uint32_t lo = k + 2 * i < K ? p[2 * i] : 0, hi = k + 2 * i + 1 < K ? p[2 * i + 1] : 0;
                out[i] = lo | (hi << 16);
            }
        }
    } else if (T == PL_Q8_0) {
        const pl_cu_q8_0 *b = (const pl_cu_q8_0 *)row + k / 32;
        const float d = pl_cu_h2f(b->d);
        for (int i = 0; i < 8; i++) {
            const uint32_t q = pl_cu_ld_u32_a2(b->qs + 4 * i);
            out[2 * i] = pl_pack_h2(pl_mul((float)(int8_t)(q & 0xff), d), pl_mul((float)(int8_t)((q >> 8) & 0xff), d));
            out[2 * i + 1] = pl_pack_h2(pl_mul((float)(int8_t)((q >> 16) & 0xff), d), pl_mul((float)(int8_t)(q >> 24), d));
        }
    } else if (T == PL_Q4_K) {
        const pl_cu_q4_K *b = (const pl_cu_q4_K *)row + k / 256;
        const int j = (int)((k % 256) / 32), c = j / 2, shift = 4 * (j & 1);
        int sc, m;
        pl_cu_q4k_scale_min(j, b->scales, &sc, &m);
        const float d1 = pl_mul(pl_cu_h2f(b->d), (float)sc), m1 = pl_mul(pl_cu_h2f(b->dmin), (float)m);
        const uint8_t *qs = b->qs + 32 * c;
        uint32_t w[8];
        if (vec) {
            const uint4 v0 = ((const uint4 *)qs)[0], v1 = ((const uint4 *)qs)[1];
            w[0] = v0.x; w[1] = v0.y; w[2] = v0.z; w[3] = v0.w; w[4] = v1.x; w[5] = v1.y; w[6] = v1.z; w[7] = v1.w;
        } else {
            for (int i = 0; i < 8; i++) w[i] = pl_cu_ld_u32_any(qs + 4 * i);
        }
        for (int i = 0; i < 8; i++) {
            const uint32_t q = (w[i] >> shift) & 0x0F0F0F0Fu;
            out[2 * i] = pl_pack_h2(pl_sub(pl_mul(d1, (float)(q & 0xff)), m1), pl_sub(pl_mul(d1, (float)((q >> 8) & 0xff)), m1));
            out[2 * i + 1] =
                pl_pack_h2(pl_sub(pl_mul(d1, (float)((q >> 16) & 0xff)), m1), pl_sub(pl_mul(d1, (float)(q >> 24)), m1));
        }
    } else if (T == PL_Q6_K) {
        const pl_cu_q6_K *b = (const pl_cu_q6_K *)row + k / 256;
        const int g = (int)((k % 256) / 32), hh = g / 4, r = g % 4;
        const uint8_t *ql = b->ql + 64 * hh + 32 * (r & 1), *qh = b->qh + 32 * hh;
        const int lshift = 4 * (r >> 1), hshift = 2 * r;
        const float d = pl_cu_h2f(b->d);
        const float s0 = pl_mul(d, (float)b->scales[8 * hh + 2 * r]), s1 = pl_mul(d, (float)b->scales[8 * hh + 2 * r + 1]);
        for (int i = 0; i < 8; i++) {
            const uint32_t lo = (pl_cu_ld_u32_a2(ql + 4 * i) >> lshift) & 0x0F0F0F0Fu;
            const uint32_t hi = ((pl_cu_ld_u32_a2(qh + 4 * i) >> hshift) & 0x03030303u) << 4;
            const uint32_t q = lo | hi;            /* 4 values 0..63 */
            const float s = i < 4 ? s0 : s1;       /* l = 4i..4i+3: scale l/16 */
            out[2 * i] = pl_pack_h2(pl_mul(s, (float)((int)(q & 0xff) - 32)), pl_mul(s, (float)((int)((q >> 8) & 0xff) - 32)));
            out[2 * i + 1] =
                pl_pack_h2(pl_mul(s, (float)((int)((q >> 16) & 0xff) - 32)), pl_mul(s, (float)((int)(q >> 24) - 32)));
        }
    }
}

#endif
