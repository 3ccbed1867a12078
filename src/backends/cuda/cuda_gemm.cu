/*
 * Matmul for many activation rows (prefill): dst[m, n] = sum_k W[n, k] x[m, k]
 * with M > PL_CU_GEMV_MAX_M. Compute-bound, so tensor cores where the
 * precision allows:
 *
 * f16, q8_0, q4_K, q6_K and the ladder types (q2_K ... tq2_0) weights:
 *   tensor-core tiles (mma.sync m16n8k16, f16
 *   inputs, f32 accumulate). A block computes 128 weight rows x 64 tokens;
 *   per step of 64 along K it decodes its weight tile straight from the
 *   packed blocks into shared memory as f16 (so each weight is decoded once
 *   per 64 tokens, in-kernel, with the file's layout untouched), converts the
 *   f32 activation tile to f16, and its 8 warps (4 along rows x 2 along
 *   tokens, 32 x 32 each) run 2 x 4 MMAs per 16 of K from ldmatrix
 *   fragments. Activations rounded to f16 cost ~2^-12 relative per element,
 *   as llama.cpp's f16 cuBLAS path does; test_ops allows 5e-4 NMSE for
 *   non-f32 weights.
 * f32 and bf16 weights: a plain f32 SIMT tile (64 x 64, 4 x 4 per thread), so
 *   f32 models keep f32 arithmetic (test_ops allows 1e-7 NMSE for f32) and
 *   bf16, whose range f16 cannot hold, is never narrowed.
 *
 * Next steps (README.md): int8 MMA on q8_1-quantized activations for the
 * k-quants, cp.async double buffering, and Hopper wgmma.
 *
 * Shared-memory tiles are [row][k] with a row pitch of 72 halves (144 bytes):
 * ldmatrix row addresses stay 16-byte aligned and the 8 rows one ldmatrix
 * phase reads fall in 8 distinct 4-bank groups.
 */
#include "backends/cuda/cuda_common.cuh"

#define GM_BN 128      /* weight rows per block */
#define GM_BM 64       /* tokens per block */
#define GM_BK 64
#define GM_LD (GM_BK + 8)

/* ---- PTX wrappers ------------------------------------------------------------------------------ */

__device__ __forceinline__ void ldmatrix_x4(uint32_t *r, const __half *p) {
    const unsigned a = (unsigned)__cvta_generic_to_shared(p);
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];\n"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                 : "r"(a));
}

/* c += A (16 x 16, row-major fragment a[4]) * B (16 x 8, col-major fragment b0, b1). */
__device__ __forceinline__ void mma_16816(float *c, const uint32_t *a, uint32_t b0, uint32_t b1) {
#if __CUDA_ARCH__ >= 800
    asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, "
                 "{%8, %9}, {%0, %1, %2, %3};\n"
                 : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
#else
    /* sm_75: two m16n8k8, k 0..7 then 8..15. */
    asm volatile("mma.sync.aligned.m16n8k8.row.col.f32.f16.f16.f32 {%0, %1, %2, %3}, {%4, %5}, {%6}, "
                 "{%0, %1, %2, %3};\n"
                 : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
                 : "r"(a[0]), "r"(a[1]), "r"(b0));
    asm volatile("mma.sync.aligned.m16n8k8.row.col.f32.f16.f16.f32 {%0, %1, %2, %3}, {%4, %5}, {%6}, "
                 "{%0, %1, %2, %3};\n"
                 : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
                 : "r"(a[2]), "r"(a[3]), "r"(b1));
#endif
}

/* Writes the 32 halves as 4 x 16 bytes. */
__device__ __forceinline__ void st_32h(__half *dst, const uint32_t *w) {
    uint4 *d = (uint4 *)dst;
    d[0] = make_uint4(w[0], w[1], w[2], w[3]);
    d[1] = make_uint4(w[4], w[5], w[6], w[7]);
    d[2] = make_uint4(w[8], w[9], w[10], w[11]);
    d[3] = make_uint4(w[12], w[13], w[14], w[15]);
}

/* ---- the tensor-core kernel ------------------------------------------------------------------ */

struct pl_cu_gm_args {
    const char *W;
    size_t w_nb1;
    int64_t N, K;
    const char *x;
    size_t x_nb1;
    int64_t M;
    float *dst;
    bool wvec, xvec;   /* 16-byte loads are aligned for weights / activations */
};

template <int T>
__global__ void __launch_bounds__(256) k_gemm_mma(pl_cu_gm_args a) {
    __shared__ __align__(16) __half sW[GM_BN * GM_LD];
    __shared__ __align__(16) __half sX[GM_BM * GM_LD];
    const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
    const int64_t n0 = (int64_t)blockIdx.x * GM_BN, m0 = (int64_t)blockIdx.y * GM_BM;
    const int wn = (warp % 4) * 32, wm = (warp / 4) * 32;

    float acc[2][4][4];
#pragma unroll
    for (int i = 0; i < 2; i++)
#pragma unroll
        for (int j = 0; j < 4; j++)
#pragma unroll
            for (int e = 0; e < 4; e++) acc[i][j][e] = 0.0f;

    /* This thread's share of the tiles: weight row tid/2, k half tid%2 (32
     * weights); token tid/4, k quarter tid%4 (16 activations). */
    const int wr = tid >> 1, wk = (tid & 1) * 32;
    const int xr = tid >> 2, xk = (tid & 3) * 16;
    const int64_t wn_g = n0 + wr, xm_g = m0 + xr;
    const char *wrow = a.W + (size_t)(wn_g < a.N ? wn_g : 0) * a.w_nb1;
    const float *xrow = (const float *)(a.x + (size_t)(xm_g < a.M ? xm_g : 0) * a.x_nb1);

    for (int64_t k0 = 0; k0 < a.K; k0 += GM_BK) {
        {
            uint32_t w[16];
            const int64_t k = k0 + wk;
            if (wn_g < a.N && k < a.K) pl_cu_dequant32_h<T>(wrow, k, a.K, a.wvec, w);
            else
#pragma unroll
                for (int i = 0; i < 16; i++) w[i] = 0;
            st_32h(&sW[wr * GM_LD + wk], w);
        }
        {
            float v[16];
            const int64_t k = k0 + xk;
            if (xm_g < a.M && a.xvec && k + 16 <= a.K) {
#pragma unroll
                for (int i = 0; i < 4; i++) {
                    const float4 f = ((const float4 *)(xrow + k))[i];
                    v[4 * i] = f.x; v[4 * i + 1] = f.y; v[4 * i + 2] = f.z; v[4 * i + 3] = f.w;
                }
            } else {
#pragma unroll
                for (int i = 0; i < 16; i++) v[i] = xm_g < a.M && k + i < a.K ? xrow[k + i] : 0.0f;
            }
            uint32_t h[8];
#pragma unroll
            for (int i = 0; i < 8; i++) h[i] = pl_pack_h2(v[2 * i], v[2 * i + 1]);
            uint4 *d = (uint4 *)&sX[xr * GM_LD + xk];
            d[0] = make_uint4(h[0], h[1], h[2], h[3]);
            d[1] = make_uint4(h[4], h[5], h[6], h[7]);
        }
        __syncthreads();
#pragma unroll
        for (int ks = 0; ks < GM_BK; ks += 16) {
            uint32_t af[2][4], bf[2][4];
#pragma unroll
            for (int i = 0; i < 2; i++) ldmatrix_x4(af[i], &sW[(wn + 16 * i + (lane & 15)) * GM_LD + ks + (lane >> 4) * 8]);
#pragma unroll
            for (int j = 0; j < 2; j++)
                ldmatrix_x4(bf[j], &sX[(wm + 16 * j + (lane & 7) + (lane >> 4) * 8) * GM_LD + ks + ((lane >> 3) & 1) * 8]);
#pragma unroll
            for (int i = 0; i < 2; i++)
#pragma unroll
                for (int j = 0; j < 4; j++) mma_16816(acc[i][j], af[i], bf[j / 2][2 * (j % 2)], bf[j / 2][2 * (j % 2) + 1]);
        }
        __syncthreads();
    }

    /* C fragment: c0, c1 at (row g, tokens 2t, 2t+1), c2, c3 at row g + 8. */
    const int g = lane >> 2, t2 = (lane & 3) * 2;
#pragma unroll
    for (int i = 0; i < 2; i++)
#pragma unroll
        for (int j = 0; j < 4; j++)
#pragma unroll
            for (int e = 0; e < 4; e++) {
                const int64_t n = n0 + wn + 16 * i + g + (e >= 2 ? 8 : 0);
                const int64_t m = m0 + wm + 8 * j + t2 + (e & 1);
                if (n < a.N && m < a.M) a.dst[(size_t)m * a.N + n] = acc[i][j][e];
            }
}

/* ---- the f32 SIMT kernel (f32, bf16 weights) ---------------------------------------------------- */

#define GF_T 64
#define GF_BK 16

template <int T>
__device__ __forceinline__ float w_at(const char *row, int64_t k) {
    if (T == PL_F32) return ((const float *)row)[k];
    return pl_cu_bf2f(((const uint16_t *)row)[k]);
}

template <int T>
__global__ void __launch_bounds__(256) k_gemm_f32(pl_cu_gm_args a) {
    __shared__ float sW[GF_BK][GF_T + 4], sX[GF_BK][GF_T + 4];
    const int tid = threadIdx.x, ty = tid / 16, tx = tid % 16;
    const int64_t n0 = (int64_t)blockIdx.x * GF_T, m0 = (int64_t)blockIdx.y * GF_T;
    float acc[4][4];
#pragma unroll
    for (int i = 0; i < 4; i++)
#pragma unroll
        for (int j = 0; j < 4; j++) acc[i][j] = 0.0f;
    for (int64_t k0 = 0; k0 < a.K; k0 += GF_BK) {
#pragma unroll
        for (int i = 0; i < 4; i++) {
            const int idx = tid + 256 * i, r = idx / GF_BK, kk = idx % GF_BK;
            const int64_t n = n0 + r, m = m0 + r, k = k0 + kk;
            sW[kk][r] = n < a.N && k < a.K ? w_at<T>(a.W + (size_t)n * a.w_nb1, k) : 0.0f;
            sX[kk][r] = m < a.M && k < a.K ? ((const float *)(a.x + (size_t)m * a.x_nb1))[k] : 0.0f;
        }
        __syncthreads();
#pragma unroll
        for (int kk = 0; kk < GF_BK; kk++) {
            float w[4], x[4];
#pragma unroll
            for (int i = 0; i < 4; i++) {
                w[i] = sW[kk][ty * 4 + i];
                x[i] = sX[kk][tx * 4 + i];
            }
#pragma unroll
            for (int i = 0; i < 4; i++)
#pragma unroll
                for (int j = 0; j < 4; j++) acc[i][j] = fmaf(w[i], x[j], acc[i][j]);
        }
        __syncthreads();
    }
#pragma unroll
    for (int j = 0; j < 4; j++)
#pragma unroll
        for (int i = 0; i < 4; i++) {
            const int64_t n = n0 + ty * 4 + i, m = m0 + tx * 4 + j;
            if (n < a.N && m < a.M) a.dst[(size_t)m * a.N + n] = acc[i][j];
        }
}

/* The ladder types' tiles are decoded by pl_cu_decode32 (cuda_quant.cuh),
 * reading this unit's device copy of the IQ codebooks. */
cudaError_t pl_cu_tables_upload_gemm(void) { return pl_cu_tables_upload_here(); }

/* ---- host side ---------------------------------------------------------------------------------- */

pl_status pl_cu_gemm(pl_cu_ctx *cu, const pl_node *node) {
    const pl_tensor *W = node->src[0], *x = node->src[1], *dst = node->dst;
    pl_cu_gm_args a;
    a.W = (const char *)W->data;
    a.w_nb1 = W->nb[1];
    a.K = W->ne[0];
    a.N = W->ne[1];
    a.x = (const char *)x->data;
    a.x_nb1 = x->nb[1];
    a.M = x->ne[1];
    a.dst = (float *)dst->data;
    a.wvec = pl_cu_aligned(a.W, 16) && a.w_nb1 % 16 == 0;
    a.xvec = pl_cu_aligned(a.x, 16) && a.x_nb1 % 16 == 0;
    if ((W->dtype == PL_Q8_0 || W->dtype == PL_Q6_K) && (!pl_cu_aligned(a.W, 2) || a.w_nb1 % 2))
        return pl_cu_errorf(PL_ERR_UNSUPPORTED, "cuda: matmul needs 2-byte aligned rows of %s weights",
                            W->dtype == PL_Q8_0 ? "q8_0" : "q6_K");
    if (W->dtype == PL_F16 && (!pl_cu_aligned(a.W, 2) || a.w_nb1 % 2))
        return pl_cu_errorf(PL_ERR_UNSUPPORTED, "cuda: matmul needs 2-byte aligned rows of f16 weights");
    const bool simt = W->dtype == PL_F32 || W->dtype == PL_BF16;
    const int64_t bn = simt ? GF_T : GM_BN, bm = simt ? GF_T : GM_BM;
    const int64_t gy = (a.M + bm - 1) / bm;
    if (gy > 65535) return pl_cu_errorf(PL_ERR_UNSUPPORTED, "cuda: matmul over %lld rows in one call", (long long)a.M);
    dim3 grid(pl_cu_blocks(a.N, (int)bn), (unsigned)gy);
    switch (W->dtype) {
    case PL_F32: k_gemm_f32<PL_F32><<<grid, 256, 0, cu->stream>>>(a); break;
    case PL_BF16: k_gemm_f32<PL_BF16><<<grid, 256, 0, cu->stream>>>(a); break;
    case PL_F16: k_gemm_mma<PL_F16><<<grid, 256, 0, cu->stream>>>(a); break;
    case PL_Q8_0: k_gemm_mma<PL_Q8_0><<<grid, 256, 0, cu->stream>>>(a); break;
    case PL_Q4_K: k_gemm_mma<PL_Q4_K><<<grid, 256, 0, cu->stream>>>(a); break;
    case PL_Q6_K: k_gemm_mma<PL_Q6_K><<<grid, 256, 0, cu->stream>>>(a); break;
#define GM_LADDER_(T) case T: k_gemm_mma<T><<<grid, 256, 0, cu->stream>>>(a); break;
    PL_CU_LADDER_TYPES(GM_LADDER_)
#undef GM_LADDER_
    default: return pl_cu_errorf(PL_ERR_UNSUPPORTED, "cuda: matmul has no kernel for dtype %d", (int)W->dtype);
    }
    PL_CU_LAUNCHED("matmul (gemm)");
    return PL_OK;
}
