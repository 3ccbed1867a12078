/*
 * Matmul for few activation rows (decode): dst[m, n] = sum_k W[n, k] x[m, k]
 * for M <= PL_CU_GEMV_MAX_M. Memory-bound: every weight byte is read once,
 * so the kernels are about keeping loads wide and many in flight.
 *
 * Shape: W [K, N] (row n = K weights, packed, at stride nb1), x F32 [K, M]
 * (rows at stride nb1), dst F32 [N, M] contiguous.
 *
 * Work split: a block is 8 warps; a row of W belongs to wpr warps (1, 2, 4
 * or 8: split-K when N is too small to give every SM enough rows), each warp
 * walks "units" of its row with its 32 lanes, and the wpr partial sums meet
 * in shared memory. Every lane accumulates all M columns at once (NC = M
 * rounded up to 1, 2, 4, 8), so a weight is loaded once per M columns.
 *
 * Units (the per-unit math is pl_cu_gv_unit in cuda_quant.cuh, shared with
 * the CPU unit test): f32 / f16 / bf16 use 8 consecutive weights with one
 * 16-byte load and FMA in f32 against the f32 activations; q8_0, q4_K, q6_K
 * use integer dot products (__dp4a) of the packed weights with activations
 * quantized to 8 bits per 32 (q8_1-style, as llama.cpp does) by
 * k_quantize_x below, one small kernel per matmul, into the work buffer:
 *   xq int8  [M][K]      q = round(x / d), d = amax / 127 per 32
 *   xd float [M][K/32]   d
 *   xs float [M][K/16]   d * sum of q over each 16 (q4_K's minimum term)
 */
#include "backends/cuda/cuda_common.cuh"

#define GV_WARPS 8

/* ---- activation quantization ----------------------------------------------------------------- */

static size_t gv_align(size_t x) { return (x + 255) & ~(size_t)255; }

static pl_cu_xq gv_layout(void *work, int64_t M, int64_t K) {
    pl_cu_xq x;
    char *p = (char *)work;
    x.q = (int8_t *)p;
    p += gv_align((size_t)(M * K));
    x.d = (float *)p;
    p += gv_align((size_t)(M * K / 32) * sizeof(float));
    x.s = (float *)p;
    return x;
}

static size_t gv_xq_bytes(int64_t M, int64_t K) {
    return gv_align((size_t)(M * K)) + gv_align((size_t)(M * K / 32) * sizeof(float)) +
           gv_align((size_t)(M * K / 16) * sizeof(float));
}

/* One warp per 32 values. */
__global__ void k_quantize_x(const char *__restrict__ x, size_t nb1, int64_t K, int64_t M, pl_cu_xq out) {
    const int lane = threadIdx.x & 31;
    const int64_t nb = K / 32;
    const int64_t blk = (int64_t)blockIdx.x * (blockDim.x / 32) + threadIdx.x / 32;
    if (blk >= M * nb) return;
    const int64_t m = blk / nb, b = blk % nb;
    const float v = ((const float *)(x + (size_t)m * nb1))[32 * b + lane];
    const float amax = pl_cu_warp_max(fabsf(v));
    const float d = amax / 127.0f;
    const float id = d > 0.0f ? 1.0f / d : 0.0f;
    const int q = __float2int_rn(v * id);
    out.q[m * K + 32 * b + lane] = (int8_t)q;
    int s = q;
#pragma unroll
    for (int o = 8; o > 0; o >>= 1) s += __shfl_xor_sync(0xffffffffu, s, o);   /* within each 16 */
    if (lane == 0) out.d[m * nb + b] = d;
    if ((lane & 15) == 0) out.s[m * (K / 16) + 2 * b + lane / 16] = d * (float)s;
}

/* The ladder types (q2_K ... tq2_0) take the float path: each unit is 32
 * weights decoded to f32 by pl_cu_decode32 (codebooks in this unit's device
 * copy, uploaded at context creation) and FMAs against the f32 activations.
 * At 1.6-3.4 bits per weight their blocks are small, so the decode (a few
 * integer ops and a table load per 8 weights) is what the GEMV spends. */
cudaError_t pl_cu_tables_upload_gemv(void) { return pl_cu_tables_upload_here(); }

/* ---- the kernels ------------------------------------------------------------------------------- */

template <int T, int NC>
__global__ void __launch_bounds__(GV_WARPS * 32) k_gemv(pl_cu_gv_args a) {
    __shared__ float part[GV_WARPS][NC];
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    const int rpb = GV_WARPS / a.wpr;
    const int64_t n = (int64_t)blockIdx.x * rpb + warp / a.wpr;
    const int slice = warp % a.wpr;
    float acc[NC];
#pragma unroll
    for (int c = 0; c < NC; c++) acc[c] = 0.0f;
    if (n < a.N) {
        const char *row = a.W + (size_t)n * a.w_nb1;
        const int64_t U = pl_cu_gv_units<T>(a.K);
        for (int64_t u = (int64_t)slice * 32 + lane; u < U; u += (int64_t)a.wpr * 32) pl_cu_gv_unit<T, NC>(a, row, u, acc);
    }
#pragma unroll
    for (int c = 0; c < NC; c++) acc[c] = pl_cu_warp_sum(acc[c]);
    if (a.wpr == 1) {
        if (n < a.N && lane == 0)
#pragma unroll
            for (int c = 0; c < NC; c++)
                if (c < a.M) a.dst[(size_t)c * a.N + n] = acc[c];
        return;
    }
    if (lane == 0)
#pragma unroll
        for (int c = 0; c < NC; c++) part[warp][c] = acc[c];
    __syncthreads();
    if (slice == 0 && lane < NC && lane < a.M && n < a.N) {
        float s = 0.0f;
        for (int w = 0; w < a.wpr; w++) s += part[warp + w][lane];
        a.dst[(size_t)lane * a.N + n] = s;
    }
}

/* ---- host side -------------------------------------------------------------------------------- */

static bool gv_quantized(pl_dtype t) { return t == PL_Q8_0 || t == PL_Q4_K || t == PL_Q6_K; }

size_t pl_cu_gemv_work(const pl_node *node) {
    const pl_tensor *W = node->src[0], *x = node->src[1];
    if (!gv_quantized(W->dtype)) return 0;
    int64_t M = x->ne[1] < PL_CU_GEMV_MAX_M ? x->ne[1] : PL_CU_GEMV_MAX_M;
    return gv_xq_bytes(M, W->ne[0]) + 256;
}

template <int T>
static void gv_launch(const pl_cu_gv_args &a, unsigned grid, cudaStream_t st) {
    if (a.M == 1) k_gemv<T, 1><<<grid, GV_WARPS * 32, 0, st>>>(a);
    else if (a.M == 2) k_gemv<T, 2><<<grid, GV_WARPS * 32, 0, st>>>(a);
    else if (a.M <= 4) k_gemv<T, 4><<<grid, GV_WARPS * 32, 0, st>>>(a);
    else k_gemv<T, 8><<<grid, GV_WARPS * 32, 0, st>>>(a);
}

pl_status pl_cu_gemv(pl_cu_ctx *cu, const pl_node *node) {
    const pl_tensor *W = node->src[0], *x = node->src[1], *dst = node->dst;
    const int64_t K = W->ne[0], N = W->ne[1], M = x->ne[1];
    if (M < 1 || M > PL_CU_GEMV_MAX_M) return pl_cu_errorf(PL_ERR_INTERNAL, "cuda: gemv with M = %lld", (long long)M);
    pl_cu_gv_args a;
    a.W = (const char *)W->data;
    a.w_nb1 = W->nb[1];
    a.N = N;
    a.K = K;
    a.M = (int)M;
    a.x = (const char *)x->data;
    a.x_nb1 = x->nb[1];
    a.dst = (float *)dst->data;
    const bool q = gv_quantized(W->dtype);
    const bool w16 = pl_cu_aligned(a.W, 16) && a.w_nb1 % 16 == 0;
    if (q) {
        a.vec = w16;
        if ((W->dtype == PL_Q8_0 || W->dtype == PL_Q6_K) && (!pl_cu_aligned(a.W, 2) || a.w_nb1 % 2))
            return pl_cu_errorf(PL_ERR_UNSUPPORTED, "cuda: matmul needs 2-byte aligned rows of %s weights",
                                W->dtype == PL_Q8_0 ? "q8_0" : "q6_K");
        const size_t need = gv_xq_bytes(M, K);
        if (!cu->base.work || cu->base.work_size < need)
            return pl_cu_errorf(PL_ERR_INTERNAL, "cuda: matmul needs %zu bytes of work memory, has %zu", need,
                                cu->base.work_size);
        a.xq = gv_layout(cu->base.work, M, K);
        const bool reuse = cu->xq_valid && cu->xq_src == x->data && cu->xq_work == cu->base.work && cu->xq_K == K &&
                           cu->xq_M == M && cu->xq_nb1 == x->nb[1];
        if (!reuse) {
            const int64_t blocks32 = M * (K / 32);
            k_quantize_x<<<pl_cu_blocks(blocks32, 8), 256, 0, cu->stream>>>(a.x, a.x_nb1, K, M, a.xq);
            PL_CU_LAUNCHED("matmul (activation quantization)");
            cu->xq_valid = true;
            cu->xq_src = x->data;
            cu->xq_work = cu->base.work;
            cu->xq_K = K;
            cu->xq_M = M;
            cu->xq_nb1 = x->nb[1];
        }
    } else {
        a.xq.q = NULL;
        a.xq.d = a.xq.s = NULL;
        /* Ladder types read their weights bytewise: vec is about x only. */
        const bool ladder = pl_cu_block_size(W->dtype) == 256;
        a.vec = (w16 || ladder) && K % 8 == 0 && pl_cu_aligned(a.x, 16) && a.x_nb1 % 16 == 0;
    }
    /* Warps per row: split K until there are about 32 warps per SM, keeping
     * at least two units per lane. */
    int64_t U = W->dtype == PL_Q8_0 ? K / 16 : q || pl_cu_block_size(W->dtype) == 256 ? K / 32 : (K + 7) / 8;
    int wpr = 1;
    const int64_t want = (int64_t)pl_cu_n_sm * 32;
    while (wpr < GV_WARPS && N * wpr < want && U >= (int64_t)wpr * 2 * 64) wpr *= 2;
    a.wpr = wpr;
    const unsigned grid = pl_cu_blocks(N, GV_WARPS / wpr);
    switch (W->dtype) {
    case PL_F32: gv_launch<PL_F32>(a, grid, cu->stream); break;
    case PL_F16: gv_launch<PL_F16>(a, grid, cu->stream); break;
    case PL_BF16: gv_launch<PL_BF16>(a, grid, cu->stream); break;
    case PL_Q8_0: gv_launch<PL_Q8_0>(a, grid, cu->stream); break;
    case PL_Q4_K: gv_launch<PL_Q4_K>(a, grid, cu->stream); break;
    case PL_Q6_K: gv_launch<PL_Q6_K>(a, grid, cu->stream); break;
#define GV_LADDER_(T) case T: gv_launch<T>(a, grid, cu->stream); break;
    PL_CU_LADDER_TYPES(GV_LADDER_)
#undef GV_LADDER_
    default: return pl_cu_errorf(PL_ERR_UNSUPPORTED, "cuda: matmul has no kernel for dtype %d", (int)W->dtype);
    }
    PL_CU_LAUNCHED("matmul (gemv)");
    return PL_OK;
}
