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
#include <cuda_runtime.h>
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

/* ---- the ladder formats: q2_K, q3_K, q5_K, IQ2_XXS/XS/S, IQ1_S/M, TQ1_0/TQ2_0 ------------------
 * Block layouts (byte offsets in a block; every one a 256-weight super-block,
 * byte for byte quant/blocks.h):
 *   q2_K    84: scales[16] @0, qs[64] @16, d @80, dmin @82. Sub-blocks of 16,
 *               x = d*(sc&15)*q - dmin*(sc>>4), q 2 bits: per 128, byte l
 *               holds weights l, l+32, l+64, l+96 in bit pairs 0,2,4,6.
 *   q3_K   110: hmask[32] @0, qs[64] @32, scales[12] @96, d @108. As q2_K's
 *               2 low bits; the third bit of weight j is bit j/32 of
 *               hmask[j%32] (clear: subtract 4); 6-bit signed scales s-32.
 *   q5_K   176: d @0, dmin @2, scales[12] @4 (as q4_K), qh[32] @16, qs[128]
 *               @48 (as q4_K); bit 4 of sub-block j's weight l: bit j of qh[l].
 *   iq2_xxs 66: d @0, then per 32 weights two u32 (a: 4 grid indices of 8,
 *               b: 4 x 7 sign-index bits + 4-bit scale in bits 28-31).
 *   iq2_xs  74: d @0, 32 u16 @2 (9-bit grid index | 7-bit sign index << 9),
 *               scales[8] @66 (a nibble per 16 weights).
 *   iq2_s   82: d @0, qs[32] @2 (index low 8 bits), signs[32] @34 (8 explicit
 *               bits per 8), qh[8] @66 (index bits 8-9), scales[8] @74.
 *   iq1_s   50: d @0, qs[32] @2, qh[8] u16 @34 (3 index bits per 8, scale in
 *               bits 12-14, shift sign bit 15).
 *   iq1_m   56: qs[32] @0, qh[16] @32 (a nibble per 8: 3 index bits + shift
 *               sign), scales[8] @48 (3-bit scales per 16; the f16 d is split
 *               over the top nibbles of its 4 u16).
 *   tq1_0   54: qs[48] @0 (5 trits a byte), qh[4] @48 (4 trits), d @52.
 *   tq2_0   66: qs[64] @0 (2 bits a weight, as q2_K's planes), d @64.
 * All of them are decoded per group of 32 weights (a q2_K/q3_K group = two
 * sub-blocks of 16), with byte loads only: none of these blocks is more than
 * 2-byte aligned inside a row, and bytes keep the decoders free of alignment
 * conditions. Each value is computed with the float operations of
 * quant/dequant.c / dequant_iq.c in their order (pl_mul / pl_sub keep nvcc
 * from contracting them into FMAs), so get_rows is bit-identical with the ref.
 *
 * The IQ codebooks are GGML's tables (quant/ggml_tables.c, generated). On the
 * host pass they are the library's arrays (the unit test; the module compiles
 * its own copy in cuda_tables.cu); on the device they are __device__ copies in
 * global memory, uploaded by pl_cu_tables_upload_here() at context creation.
 * Without relocatable device code every translation unit that decodes has
 * its own (static) copy, ~30 KiB each; cuda_backend.cu uploads all of them.
 * Global rather than __constant__ memory: lanes index the grids divergently,
 * which the constant cache serializes. */
extern "C" {
#include "quant/ggml_tables.h"
}
static __device__ uint8_t pl_cu_d_ksigns_iq2xs[128];
static __device__ uint64_t pl_cu_d_iq2xxs_grid[256];
static __device__ uint64_t pl_cu_d_iq2xs_grid[512];
static __device__ uint64_t pl_cu_d_iq2s_grid[1024];
static __device__ uint64_t pl_cu_d_iq1s_grid[PL_NGRID_IQ1S];
#ifdef __CUDA_ARCH__
#define PL_CU_TAB(name) pl_cu_d_##name
#else
#define PL_CU_TAB(name) pl_##name
#endif

/* Copies the host tables into this translation unit's device copies. */
static inline cudaError_t pl_cu_tables_upload_here(void) {
    cudaError_t e = cudaMemcpyToSymbol(pl_cu_d_ksigns_iq2xs, pl_ksigns_iq2xs, sizeof pl_cu_d_ksigns_iq2xs);
    if (e == cudaSuccess) e = cudaMemcpyToSymbol(pl_cu_d_iq2xxs_grid, pl_iq2xxs_grid, sizeof pl_cu_d_iq2xxs_grid);
    if (e == cudaSuccess) e = cudaMemcpyToSymbol(pl_cu_d_iq2xs_grid, pl_iq2xs_grid, sizeof pl_cu_d_iq2xs_grid);
    if (e == cudaSuccess) e = cudaMemcpyToSymbol(pl_cu_d_iq2s_grid, pl_iq2s_grid, sizeof pl_cu_d_iq2s_grid);
    if (e == cudaSuccess) e = cudaMemcpyToSymbol(pl_cu_d_iq1s_grid, pl_iq1s_grid, sizeof pl_cu_d_iq1s_grid);
    return e;
}

/* The ladder types (keep in step with cuda_table.h). */
#define PL_CU_LADDER_TYPES(X) \
    X(PL_Q2_K) X(PL_Q3_K) X(PL_Q5_K) X(PL_IQ2_XXS) X(PL_IQ2_XS) X(PL_IQ2_S) X(PL_IQ1_S) X(PL_IQ1_M) X(PL_TQ1_0) X(PL_TQ2_0)

/* Bytes per 256-weight block of a ladder type; 0 for any other type. */
PL_HD constexpr int pl_cu_ladder_bytes(int T) {
    return T == PL_Q2_K ? 84 : T == PL_Q3_K ? 110 : T == PL_Q5_K ? 176 : T == PL_IQ2_XXS ? 66 : T == PL_IQ2_XS ? 74
         : T == PL_IQ2_S ? 82 : T == PL_IQ1_S ? 50 : T == PL_IQ1_M ? 56 : T == PL_TQ1_0 ? 54 : T == PL_TQ2_0 ? 66 : 0;
}
/* True for the types decoded by pl_cu_decode32 (and multiplied through it). */
PL_HD constexpr bool pl_cu_is_ladder(int T) { return pl_cu_ladder_bytes(T) != 0; }

PL_HD uint32_t pl_cu_ld_u16_any(const uint8_t *p) { return (uint32_t)p[0] | ((uint32_t)p[1] << 8); }
PL_HD float pl_cu_h2f_any(const uint8_t *p) { return pl_cu_h2f((uint16_t)pl_cu_ld_u16_any(p)); }

/* 8 weights db * magnitude * (+-1): the IQ2 grids (dequant_iq.c put8_signed). */
PL_HD void pl_cu_put8_signed(float *y, float db, uint64_t grid, uint32_t signs) {
PL_UNROLL
    for (int j = 0; j < 8; j++)
        y[j] = pl_mul(pl_mul(db, (float)(uint8_t)(grid >> (8 * j))), (signs >> j) & 1 ? -1.f : 1.f);
}
/* 8 weights dl * (grid + delta): the IQ1 grids of {-1, 0, 1}. */
PL_HD void pl_cu_put8_iq1(float *y, float dl, uint64_t grid, float delta) {
PL_UNROLL
    for (int j = 0; j < 8; j++) y[j] = pl_mul(dl, (float)(int8_t)(uint8_t)(grid >> (8 * j)) + delta);
}
/* Trit k (0 = most significant) of a tq1_0 byte (dequant_iq.c tq1_trit). */
PL_HD int pl_cu_tq1_trit(uint32_t byte, int k) {
    const uint32_t pow3 = k == 0 ? 1 : k == 1 ? 3 : k == 2 ? 9 : k == 3 ? 27 : 81;
    return (int)((((byte * pow3) & 0xffu) * 3) >> 8);
}

/* Weights [32 g, 32 g + 32) of a row of ladder type T, as the ref decodes them.
 * Every loop is unrolled so that out[] (a caller's register array) is indexed
 * with constants and stays in registers. */
template <int T>
PL_HD void pl_cu_decode32(const unsigned char *row, int64_t g, float *out) {
    const uint8_t *b = (const uint8_t *)row + (size_t)(g / 8) * pl_cu_ladder_bytes(T);
    const int j = (int)(g % 8);
    if (T == PL_Q2_K) {
        const float d = pl_cu_h2f_any(b + 80), dmin = pl_cu_h2f_any(b + 82);
        const uint8_t *q = b + 16 + 32 * (j / 4);
        const int shift = 2 * (j % 4);
PL_UNROLL
        for (int k = 0; k < 2; k++) {
            const int sc = b[2 * j + k];
            const float dl = pl_mul(d, (float)(sc & 0xF)), ml = pl_mul(dmin, (float)(sc >> 4));
PL_UNROLL
            for (int l = 0; l < 16; l++) out[16 * k + l] = pl_sub(pl_mul(dl, (float)((q[16 * k + l] >> shift) & 3)), ml);
        }
    } else if (T == PL_Q3_K) {
        const float d = pl_cu_h2f_any(b + 108);
        const uint8_t *hm = b, *q = b + 32 + 32 * (j / 4), *s = b + 96;
        const int shift = 2 * (j % 4), m = 1 << j;
PL_UNROLL
        for (int k = 0; k < 2; k++) {
            const int is = 2 * j + k;
            const int lo = is < 8 ? (s[is] & 0xF) : (s[is - 8] >> 4);
            const int hi = (s[8 + is % 4] >> (2 * (is / 4))) & 3;
            const float dl = pl_mul(d, (float)((lo | (hi << 4)) - 32));
PL_UNROLL
            for (int l = 0; l < 16; l++) {
                const int low = (q[16 * k + l] >> shift) & 3;
                out[16 * k + l] = pl_mul(dl, (float)(low - ((hm[16 * k + l] & m) ? 0 : 4)));
            }
        }
    } else if (T == PL_Q5_K) {
        int sc, mn;
        pl_cu_q4k_scale_min(j, b + 4, &sc, &mn);
        const float d1 = pl_mul(pl_cu_h2f_any(b), (float)sc), m1 = pl_mul(pl_cu_h2f_any(b + 2), (float)mn);
        const uint8_t *qh = b + 16, *ql = b + 48 + 32 * (j / 2);
        const int shift = 4 * (j & 1), hb = 1 << j;
PL_UNROLL
        for (int l = 0; l < 32; l++)
            out[l] = pl_sub(pl_mul(d1, (float)(((ql[l] >> shift) & 0xF) + ((qh[l] & hb) ? 16 : 0))), m1);
    } else if (T == PL_IQ2_XXS) {
        const float d = pl_cu_h2f_any(b);
        const uint8_t *p = b + 2 + 8 * j;
        const uint32_t a = pl_cu_ld_u32_any(p), s = pl_cu_ld_u32_any(p + 4);
        const float db = pl_mul(pl_mul(d, 0.5f + (float)(s >> 28)), 0.25f);
PL_UNROLL
        for (int l = 0; l < 4; l++)
            pl_cu_put8_signed(out + 8 * l, db, PL_CU_TAB(iq2xxs_grid)[(a >> (8 * l)) & 0xFF],
                              PL_CU_TAB(ksigns_iq2xs)[(s >> (7 * l)) & 127]);
    } else if (T == PL_IQ2_XS) {
        const float d = pl_cu_h2f_any(b);
        const int sc = b[66 + j];
        const float db[2] = {pl_mul(pl_mul(d, 0.5f + (float)(sc & 0xF)), 0.25f),
                             pl_mul(pl_mul(d, 0.5f + (float)(sc >> 4)), 0.25f)};
PL_UNROLL
        for (int l = 0; l < 4; l++) {
            const uint32_t q = pl_cu_ld_u16_any(b + 2 + 2 * (4 * j + l));
            pl_cu_put8_signed(out + 8 * l, db[l / 2], PL_CU_TAB(iq2xs_grid)[q & 511], PL_CU_TAB(ksigns_iq2xs)[q >> 9]);
        }
    } else if (T == PL_IQ2_S) {
        const float d = pl_cu_h2f_any(b);
        const int sc = b[74 + j], qh = b[66 + j];
        const float db[2] = {pl_mul(pl_mul(d, 0.5f + (float)(sc & 0xF)), 0.25f),
                             pl_mul(pl_mul(d, 0.5f + (float)(sc >> 4)), 0.25f)};
PL_UNROLL
        for (int l = 0; l < 4; l++) {
            const int idx = b[2 + 4 * j + l] | ((qh << (8 - 2 * l)) & 0x300);
            pl_cu_put8_signed(out + 8 * l, db[l / 2], PL_CU_TAB(iq2s_grid)[idx], b[34 + 4 * j + l]);
        }
    } else if (T == PL_IQ1_S) {
        const float d = pl_cu_h2f_any(b);
        const int qh = (int)pl_cu_ld_u16_any(b + 34 + 2 * j);
        const float dl = pl_mul(d, (float)(2 * ((qh >> 12) & 7) + 1));
        const float delta = (qh & 0x8000) ? -PL_IQ1S_DELTA : PL_IQ1S_DELTA;
PL_UNROLL
        for (int l = 0; l < 4; l++)
            pl_cu_put8_iq1(out + 8 * l, dl, PL_CU_TAB(iq1s_grid)[b[2 + 4 * j + l] | (((qh >> (3 * l)) & 7) << 8)], delta);
    } else if (T == PL_IQ1_M) {
        const uint8_t *s = b + 48;
        const uint32_t s0 = pl_cu_ld_u16_any(s), s1 = pl_cu_ld_u16_any(s + 2), s2 = pl_cu_ld_u16_any(s + 4),
                       s3 = pl_cu_ld_u16_any(s + 6);
        const float d = pl_cu_h2f((uint16_t)((s0 >> 12) | ((s1 >> 8) & 0x00F0) | ((s2 >> 4) & 0x0F00) | (s3 & 0xF000)));
        const uint32_t sc = pl_cu_ld_u16_any(s + 2 * (j / 2));
        const int sh = 6 * (j % 2);
        const float dl[2] = {pl_mul(d, (float)(2 * ((sc >> sh) & 7) + 1)), pl_mul(d, (float)(2 * ((sc >> (sh + 3)) & 7) + 1))};
PL_UNROLL
        for (int l = 0; l < 4; l++) {
            const int h = (b[32 + 2 * j + l / 2] >> (4 * (l & 1))) & 0xF;
            const float delta = (h & 8) ? -PL_IQ1M_DELTA : PL_IQ1M_DELTA;
            pl_cu_put8_iq1(out + 8 * l, dl[l / 2], PL_CU_TAB(iq1s_grid)[b[4 * j + l] | ((h & 7) << 8)], delta);
        }
    } else if (T == PL_TQ1_0) {
        /* Weight order: qs[0..31] trit k -> 32k + m (groups 0..4); qs[32..47]
         * trit k -> 160 + 16k + m; qh[0..3] trit k -> 240 + 4k + i. */
        const float d = pl_cu_h2f_any(b + 52);
PL_UNROLL
        for (int i = 0; i < 32; i++) {
            const int e = 32 * j + i;
            int t;
            if (e < 160) t = pl_cu_tq1_trit(b[e % 32], e / 32);
            else if (e < 240) t = pl_cu_tq1_trit(b[32 + (e - 160) % 16], (e - 160) / 16);
            else t = pl_cu_tq1_trit(b[48 + (e - 240) % 4], (e - 240) / 4);
            out[i] = pl_mul((float)(t - 1), d);
        }
    } else if (T == PL_TQ2_0) {
        const float d = pl_cu_h2f_any(b + 64);
        const uint8_t *q = b + 32 * (j / 4);
        const int shift = 2 * (j % 4);
PL_UNROLL
        for (int m = 0; m < 32; m++) out[m] = pl_mul((float)(((q[m] >> shift) & 3) - 1), d);
    }
}

/* ---- get_rows: one group of a row to f32, exactly as the ref ---------------------------------------
 * A group is 32 weights of a quantized row (a q8_0 block, a q4_K sub-block,
 * a q6_K run l = 0..31 of one r in one 128-half, 32 weights of a ladder
 * type's block: pl_cu_decode32) or 1 element of a plain one. */

template <int T> struct pl_cu_group { static constexpr int G = 1; };
template <> struct pl_cu_group<PL_Q8_0> { static constexpr int G = 32; };
template <> struct pl_cu_group<PL_Q4_K> { static constexpr int G = 32; };
template <> struct pl_cu_group<PL_Q6_K> { static constexpr int G = 32; };
#define PL_CU_LADDER_GROUP_(T) \
    template <> struct pl_cu_group<T> { static constexpr int G = 32; };
PL_CU_LADDER_TYPES(PL_CU_LADDER_GROUP_)
#undef PL_CU_LADDER_GROUP_

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
    } else if (pl_cu_is_ladder(T)) {
        pl_cu_decode32<T>(row, g, out);
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
 *         bytes (low nibble | 2 high bits << 4) - 32 with byte-wise ops, 8 dp4a;
 *   ladder types (q2_K ... tq2_0): 32 weights decoded to f32 by
 *         pl_cu_decode32, FMA'd against the f32 activations (16-byte loads
 *         when vec: here vec is about x only, weights are read bytewise).
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
    return T == PL_Q8_0 ? K / 16 : (T == PL_Q4_K || T == PL_Q6_K || pl_cu_is_ladder(T)) ? K / 32 : (K + 7) / 8;
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
    } else if (pl_cu_is_ladder(T)) {
        /* Ladder types: decode 32 weights to f32 (pl_cu_decode32) and FMA them
         * against the f32 activations; no activation quantization. */
        float w[32];
        pl_cu_decode32<T>((const unsigned char *)row, u, w);
PL_UNROLL
        for (int c = 0; c < NC; c++) {
            if (c >= a.M) break;
            const float *xp = (const float *)(a.x + (size_t)c * a.x_nb1) + 32 * u;
            float s = 0.0f;
            if (a.vec) {
PL_UNROLL
                for (int i = 0; i < 8; i++) {
                    const float4 xv = ((const float4 *)xp)[i];
                    s = fmaf(w[4 * i], xv.x, s);
                    s = fmaf(w[4 * i + 1], xv.y, s);
                    s = fmaf(w[4 * i + 2], xv.z, s);
                    s = fmaf(w[4 * i + 3], xv.w, s);
                }
            } else {
                for (int i = 0; i < 32; i++) s = fmaf(w[i], xp[i], s);
            }
            acc[c] += s;
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
    } else if (pl_cu_is_ladder(T)) {
        /* k is a multiple of 32 and K of 256: always a whole group. */
        float v[32];
        pl_cu_decode32<T>((const unsigned char *)row, k / 32, v);
        for (int i = 0; i < 16; i++) out[i] = pl_pack_h2(v[2 * i], v[2 * i + 1]);
    }
}

#endif
