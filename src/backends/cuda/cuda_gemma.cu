/*
 * The CUDA kernels of the ops gemma3 added: geglu, scale, softcap
 * (definitions in kernels/abi.h, normative code in backends/ref/ref_gemma.c
 * and kernels/gelu.h). Element-wise, grid-stride, operands addressed through
 * their byte strides; the float operations are written with explicit
 * round-to-nearest intrinsics (and GGML's one fused multiply-add in the GELU)
 * so nvcc contracts nothing the host does not.
 */
#include "backends/cuda/cuda_common.cuh"
#include <math.h>

#define PL_CU_GEMMA_THREADS 256

struct pl_cu_gemma_rows {     /* row r of a strided 4-D tensor */
    size_t nb1, nb2, nb3;
    int64_t ne1, ne2;
};

static pl_cu_gemma_rows gemma_rows(const pl_tensor *t) {
    pl_cu_gemma_rows s = {t->nb[1], t->nb[2], t->nb[3], t->ne[1], t->ne[2]};
    return s;
}

__device__ __forceinline__ const float *gemma_row(const char *base, const pl_cu_gemma_rows &s, int64_t r) {
    const int64_t i1 = r % s.ne1, i2 = (r / s.ne1) % s.ne2, i3 = r / (s.ne1 * s.ne2);
    return (const float *)(base + i1 * s.nb1 + i2 * s.nb2 + i3 * s.nb3);
}

static unsigned gemma_grid(int64_t n) {
    const int64_t cap = (int64_t)pl_cu_n_sm * 16;
    int64_t b = (n + PL_CU_GEMMA_THREADS - 1) / PL_CU_GEMMA_THREADS;
    if (b > cap) b = cap;
    return (unsigned)(b < 1 ? 1 : b);
}

/* kernels/gelu.h's pl_geglu_ggml. */
__device__ __forceinline__ float gemma_geglu(float g, float u) {
    if (g <= -10.0f) return 0.0f;
    if (g >= 10.0f) return __fmul_rn(g, u);
    const float x = __half2float(__float2half_rn(g));
    const float inner = fmaf(__fmul_rn(0.044715f, x), x, 1.0f);
    const float t = tanhf(__fmul_rn(__fmul_rn(0.79788456080286535587989211986876f, x), inner));
    const float y = __fmul_rn(__fmul_rn(0.5f, x), __fadd_rn(1.0f, t));
    return __fmul_rn(__half2float(__float2half_rn(y)), u);
}

__global__ void k_geglu(const char *__restrict__ g, pl_cu_gemma_rows gs, const char *__restrict__ u,
                        pl_cu_gemma_rows us, int64_t n, int64_t total, float *__restrict__ dst) {
    for (int64_t idx = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; idx < total;
         idx += (int64_t)gridDim.x * blockDim.x) {
        const int64_t i0 = idx % n, r = idx / n;
        dst[idx] = gemma_geglu(gemma_row(g, gs, r)[i0], gemma_row(u, us, r)[i0]);
    }
}

pl_status pl_cu_geglu(pl_cu_ctx *cu, const pl_node *node) {
    const pl_tensor *g = node->src[0], *u = node->src[1], *dst = node->dst;
    const int64_t n = g->ne[0], total = n * pl_cu_nrows(g);
    k_geglu<<<gemma_grid(total), PL_CU_GEMMA_THREADS, 0, cu->stream>>>(
        (const char *)g->data, gemma_rows(g), (const char *)u->data, gemma_rows(u), n, total, (float *)dst->data);
    PL_CU_LAUNCHED("geglu");
    return PL_OK;
}

/* mode 0: x * a (scale, a = s); 1: tanhf(x * a) * b (softcap, a = 1/c, b = c). */
__global__ void k_scale_cap(const char *__restrict__ x, pl_cu_gemma_rows xs, int mode, float a, float b, int64_t n,
                            int64_t total, float *__restrict__ dst) {
    for (int64_t idx = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; idx < total;
         idx += (int64_t)gridDim.x * blockDim.x) {
        const int64_t i0 = idx % n, r = idx / n;
        const float v = __fmul_rn(gemma_row(x, xs, r)[i0], a);
        dst[idx] = mode ? __fmul_rn(tanhf(v), b) : v;
    }
}

static pl_status scale_cap(pl_cu_ctx *cu, const pl_node *node, int mode) {
    const pl_tensor *x = node->src[0], *dst = node->dst;
    const int64_t n = x->ne[0], total = n * pl_cu_nrows(x);
    const float c = node->fparams[0];
    const float a = mode ? 1.0f / c : c;
    k_scale_cap<<<gemma_grid(total), PL_CU_GEMMA_THREADS, 0, cu->stream>>>((const char *)x->data, gemma_rows(x), mode,
                                                                            a, c, n, total, (float *)dst->data);
    PL_CU_LAUNCHED(mode ? "softcap" : "scale");
    return PL_OK;
}

pl_status pl_cu_scale(pl_cu_ctx *cu, const pl_node *node) { return scale_cap(cu, node, 0); }
pl_status pl_cu_softcap(pl_cu_ctx *cu, const pl_node *node) { return scale_cap(cu, node, 1); }
