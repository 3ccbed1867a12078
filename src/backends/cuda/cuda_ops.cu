/*
 * The small ops: get_rows, rms_norm, add, swiglu, rope, kv_store.
 *
 * They are bandwidth-trivial next to the matmuls, so the kernels favour
 * matching the ref backend's arithmetic (src/backends/ref/ref_backend.c) over
 * speed: the same float operations in the same order, written with explicit
 * round-to-nearest intrinsics (__fmul_rn, __fsub_rn) where nvcc would
 * otherwise contract a multiply and an add into one FMA. rms_norm sums
 * squares in double as the ref does; rope iterates theta in float exactly as
 * GGML (theta_scale is computed on the host with the same powf the ref uses).
 * Every operand is addressed through its byte strides, so strided views work
 * as on the host backends.
 */
#include "backends/cuda/cuda_common.cuh"
#include <math.h>

#define PL_CU_EW_THREADS 256

/* Grid for a grid-stride loop over n items: enough blocks to fill the GPU,
 * no more than needed. */
static unsigned ew_grid(int64_t n) {
    const int64_t cap = (int64_t)pl_cu_n_sm * 16;
    int64_t b = (n + PL_CU_EW_THREADS - 1) / PL_CU_EW_THREADS;
    if (b > cap) b = cap;
    return (unsigned)(b < 1 ? 1 : b);
}

/* ---- get_rows --------------------------------------------------------------------------
 * table [C, R] (rows at stride nb1), ids I32 [n], dst F32 [C, n] contiguous.
 * One thread decodes one group: 32 weights of a quantized row (a q8_0 block,
 * a q4_K sub-block, a q6_K run of 32 with one r, 32 weights of a ladder
 * type's block), one element of a plain one. */

cudaError_t pl_cu_tables_upload_ops(void) { return pl_cu_tables_upload_here(); }

template <int T>
__global__ void k_get_rows(const unsigned char *__restrict__ table, size_t nb1, int64_t C, int64_t R,
                           const int32_t *__restrict__ ids, int64_t n, float *__restrict__ dst,
                           unsigned int *status) {
    constexpr int G = pl_cu_group<T>::G;
    const int64_t groups = C / G, total = n * groups;
    for (int64_t idx = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; idx < total;
         idx += (int64_t)gridDim.x * blockDim.x) {
        const int64_t i = idx / groups, g = idx % groups;
        const int32_t id = ids[i];
        float *out = dst + i * C + g * G;
        if (id < 0 || id >= R) {
            if (g == 0) atomicOr(status, PL_CU_ST_GET_ROWS_ID);
#pragma unroll
            for (int j = 0; j < G; j++) out[j] = 0.0f;
            continue;
        }
        float v[G];
        pl_cu_decode_group<T>(table + (size_t)id * nb1, g, v);
#pragma unroll
        for (int j = 0; j < G; j++) out[j] = v[j];
    }
}

pl_status pl_cu_get_rows(pl_cu_ctx *cu, const pl_node *node) {
    const pl_tensor *t = node->src[0], *ids = node->src[1], *dst = node->dst;
    const int64_t C = t->ne[0], R = t->ne[1], n = ids->ne[0];
    const unsigned char *tab = (const unsigned char *)t->data;
    const int32_t *id = (const int32_t *)ids->data;
    float *out = (float *)dst->data;
    int64_t G = pl_cu_block_size(t->dtype) == 1 ? 1 : 32;
    dim3 grid(ew_grid(n * (C / G))), block(PL_CU_EW_THREADS);
    switch (t->dtype) {
#define GR_(T) case T: k_get_rows<T><<<grid, block, 0, cu->stream>>>(tab, t->nb[1], C, R, id, n, out, cu->d_status); break;
        GR_(PL_F32) GR_(PL_F16) GR_(PL_BF16) GR_(PL_Q8_0) GR_(PL_Q4_K) GR_(PL_Q6_K)
        PL_CU_LADDER_TYPES(GR_)
#undef GR_
    default:
        return pl_cu_errorf(PL_ERR_UNSUPPORTED, "cuda: get_rows has no kernel for dtype %d", (int)t->dtype);
    }
    PL_CU_LAUNCHED("get_rows");
    return PL_OK;
}

/* ---- rms_norm ----------------------------------------------------------------------------
 * x [n, d1, d2, d3] strided, w [n], dst contiguous. y = (x * scale) * w with
 * scale = 1 / sqrtf(mean + eps), mean = (float)(sum in double of float x*x / n). */

struct pl_cu_rows4 {          /* row r of a strided 4-D tensor */
    size_t nb1, nb2, nb3;
    int64_t ne1, ne2;
};

__device__ __forceinline__ const float *row_ptr(const char *base, const pl_cu_rows4 &s, int64_t r) {
    const int64_t i1 = r % s.ne1, i2 = (r / s.ne1) % s.ne2, i3 = r / (s.ne1 * s.ne2);
    return (const float *)(base + i1 * s.nb1 + i2 * s.nb2 + i3 * s.nb3);
}

__device__ __forceinline__ double warp_sum_d(double v) {
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
    return v;
}

/* One warp per row (n up to a few thousand), 8 rows per block. */
__global__ void k_rms_norm_warp(const char *__restrict__ x, pl_cu_rows4 xs, int64_t n, int64_t rows,
                                const float *__restrict__ w, float *__restrict__ dst, float eps) {
    const int64_t r = (int64_t)blockIdx.x * 8 + threadIdx.x / 32;
    const int lane = threadIdx.x % 32;
    if (r >= rows) return;
    const float *xr = row_ptr(x, xs, r);
    double s = 0.0;
    for (int64_t i = lane; i < n; i += 32) {
        const float v = xr[i];
        s += (double)__fmul_rn(v, v);
    }
    s = warp_sum_d(s);
    const float mean = (float)(s / (double)n);
    const float scale = 1.0f / sqrtf(mean + eps);
    float *yr = dst + r * n;
    for (int64_t i = lane; i < n; i += 32) yr[i] = __fmul_rn(__fmul_rn(xr[i], scale), w[i]);
}

/* One block of 256 per row, for long rows. */
__global__ void k_rms_norm_block(const char *__restrict__ x, pl_cu_rows4 xs, int64_t n,
                                 const float *__restrict__ w, float *__restrict__ dst, float eps) {
    __shared__ double part[8];
    __shared__ float scale_s;
    const int64_t r = blockIdx.x;
    const float *xr = row_ptr(x, xs, r);
    double s = 0.0;
    for (int64_t i = threadIdx.x; i < n; i += blockDim.x) {
        const float v = xr[i];
        s += (double)__fmul_rn(v, v);
    }
    s = warp_sum_d(s);
    if (threadIdx.x % 32 == 0) part[threadIdx.x / 32] = s;
    __syncthreads();
    if (threadIdx.x == 0) {
        double t = 0.0;
        for (int i = 0; i < (int)(blockDim.x / 32); i++) t += part[i];
        const float mean = (float)(t / (double)n);
        scale_s = 1.0f / sqrtf(mean + eps);
    }
    __syncthreads();
    const float scale = scale_s;
    float *yr = dst + r * n;
    for (int64_t i = threadIdx.x; i < n; i += blockDim.x) yr[i] = __fmul_rn(__fmul_rn(xr[i], scale), w[i]);
}

static pl_cu_rows4 rows4(const pl_tensor *t) {
    pl_cu_rows4 s = {t->nb[1], t->nb[2], t->nb[3], t->ne[1], t->ne[2]};
    return s;
}

pl_status pl_cu_rms_norm(pl_cu_ctx *cu, const pl_node *node) {
    const pl_tensor *x = node->src[0], *w = node->src[1], *dst = node->dst;
    const int64_t n = x->ne[0], rows = pl_cu_nrows(x);
    if (n <= 2048) {
        k_rms_norm_warp<<<pl_cu_blocks(rows, 8), 256, 0, cu->stream>>>((const char *)x->data, rows4(x), n, rows,
                                                                       (const float *)w->data, (float *)dst->data,
                                                                       node->fparams[0]);
    } else {
        if (rows > 0x7fffffff) return pl_cu_errorf(PL_ERR_UNSUPPORTED, "cuda: rms_norm over %lld rows", (long long)rows);
        k_rms_norm_block<<<(unsigned)rows, 256, 0, cu->stream>>>((const char *)x->data, rows4(x), n,
                                                                  (const float *)w->data, (float *)dst->data,
                                                                  node->fparams[0]);
    }
    PL_CU_LAUNCHED("rms_norm");
    return PL_OK;
}

/* ---- add / swiglu ----------------------------------------------------------------------
 * Element idx of the contiguous dst is element (i0, row) of the strided operands. */

__global__ void k_add(const char *__restrict__ a, pl_cu_rows4 as, const char *__restrict__ b, pl_cu_rows4 bs,
                      bool bcast, int64_t n, int64_t total, float *__restrict__ dst) {
    for (int64_t idx = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; idx < total;
         idx += (int64_t)gridDim.x * blockDim.x) {
        const int64_t i0 = idx % n, r = idx / n;
        const float av = row_ptr(a, as, r)[i0];
        const float bv = bcast ? ((const float *)b)[i0] : row_ptr(b, bs, r)[i0];
        dst[idx] = __fadd_rn(av, bv);
    }
}

pl_status pl_cu_add(pl_cu_ctx *cu, const pl_node *node) {
    const pl_tensor *a = node->src[0], *b = node->src[1], *dst = node->dst;
    const int64_t n = a->ne[0], total = n * pl_cu_nrows(a);
    const bool bcast = pl_cu_nrows(b) == 1;
    k_add<<<ew_grid(total), PL_CU_EW_THREADS, 0, cu->stream>>>((const char *)a->data, rows4(a), (const char *)b->data,
                                                                rows4(b), bcast, n, total, (float *)dst->data);
    PL_CU_LAUNCHED("add");
    return PL_OK;
}

/* silu(g) * u = g / (1 + expf(-g)) * u, as the ref writes it. */
__global__ void k_swiglu(const char *__restrict__ g, pl_cu_rows4 gs, const char *__restrict__ u, pl_cu_rows4 us,
                         int64_t n, int64_t total, float *__restrict__ dst) {
    for (int64_t idx = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; idx < total;
         idx += (int64_t)gridDim.x * blockDim.x) {
        const int64_t i0 = idx % n, r = idx / n;
        const float gv = row_ptr(g, gs, r)[i0], uv = row_ptr(u, us, r)[i0];
        dst[idx] = __fmul_rn(__fdiv_rn(gv, __fadd_rn(1.0f, expf(-gv))), uv);
    }
}

pl_status pl_cu_swiglu(pl_cu_ctx *cu, const pl_node *node) {
    const pl_tensor *g = node->src[0], *u = node->src[1], *dst = node->dst;
    const int64_t n = g->ne[0], total = n * pl_cu_nrows(g);
    k_swiglu<<<ew_grid(total), PL_CU_EW_THREADS, 0, cu->stream>>>((const char *)g->data, rows4(g),
                                                                   (const char *)u->data, rows4(u), n, total,
                                                                   (float *)dst->data);
    PL_CU_LAUNCHED("swiglu");
    return PL_OK;
}

/* ---- rope ----------------------------------------------------------------------------------
 * x [D, H, T] strided (nb1 per head, nb2 per token); pos I32 [T]; dst contiguous.
 * Work item e of (t, h): e < n_rot/2 rotates pair e; the rest copy dims
 * n_rot.. D-1. theta of pair i = freq_scale * (pos * ts * ts ... i times), the
 * product iterated in float as GGML does, ts = powf(freq_base, -2/n_rot)
 * computed on the host (glibc powf, like the ref). ff: llama3 frequency
 * factors [n_rot/2] or NULL; pair i then uses freq_scale * (th / ff[i]). */
__global__ void k_rope(const char *__restrict__ x, size_t nb1, size_t nb2, const int32_t *__restrict__ pos,
                       const float *__restrict__ ff, float *__restrict__ dst, int64_t D, int64_t H, int64_t T,
                       int n_rot, bool neox,
                       float freq_scale, float theta_scale) {
    const int64_t half = n_rot / 2, per = half + (D - n_rot), total = T * H * per;
    for (int64_t idx = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; idx < total;
         idx += (int64_t)gridDim.x * blockDim.x) {
        const int64_t e = idx % per, r = idx / per, h = r % H, t = r / H;
        const float *xr = (const float *)(x + h * nb1 + t * nb2);
        float *yr = dst + (t * H + h) * D;
        if (e >= half) {
            const int64_t k = n_rot + (e - half);
            yr[k] = xr[k];
            continue;
        }
        float th = (float)pos[t];
        for (int64_t i = 0; i < e; i++) th = __fmul_rn(th, theta_scale);
        if (ff) th = __fdiv_rn(th, ff[e]);
        const float theta = __fmul_rn(freq_scale, th);
        const float c = cosf(theta), s = sinf(theta);
        const int64_t i0 = neox ? e : 2 * e, i1 = neox ? e + half : 2 * e + 1;
        const float x0 = xr[i0], x1 = xr[i1];
        yr[i0] = __fsub_rn(__fmul_rn(x0, c), __fmul_rn(x1, s));
        yr[i1] = __fadd_rn(__fmul_rn(x0, s), __fmul_rn(x1, c));
    }
}

pl_status pl_cu_rope(pl_cu_ctx *cu, const pl_node *node) {
    const pl_tensor *x = node->src[0], *pos = node->src[1], *dst = node->dst;
    const int n_rot = node->iparams[0];
    const float theta_scale = powf(node->fparams[0], -2.0f / (float)n_rot);
    const int64_t D = x->ne[0], H = x->ne[1], T = x->ne[2];
    const int64_t total = T * H * (n_rot / 2 + (D - n_rot));
    k_rope<<<ew_grid(total), PL_CU_EW_THREADS, 0, cu->stream>>>((const char *)x->data, x->nb[1], x->nb[2],
                                                                 (const int32_t *)pos->data,
                                                                 node->src[2] ? (const float *)node->src[2]->data : NULL,
                                                                 (float *)dst->data, D, H,
                                                                 T, n_rot, node->iparams[1] == 2, node->fparams[1],
                                                                 theta_scale);
    PL_CU_LAUNCHED("rope");
    return PL_OK;
}

/* ---- kv_store ------------------------------------------------------------------------------
 * rows F32 [kv_dim, T] (nb1 per token); pos, seq I32 [T]; cache F16/F32
 * [kv_dim, n_ctx, n_seq] with strides nb1 (position) and nb2 (slot).
 * f16 rounds to nearest even (__float2half_rn), as pl_f32_to_f16. */
template <bool F16>
__global__ void k_kv_store(const char *__restrict__ rows, size_t r_nb1, const int32_t *__restrict__ pos,
                           const int32_t *__restrict__ seq, char *__restrict__ cache, size_t c_nb1, size_t c_nb2,
                           int64_t kv_dim, int64_t T, int64_t n_ctx, int64_t n_seq, unsigned int *status) {
    const int64_t total = T * kv_dim;
    for (int64_t idx = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; idx < total;
         idx += (int64_t)gridDim.x * blockDim.x) {
        const int64_t i = idx % kv_dim, t = idx / kv_dim;
        const int32_t p = pos[t], s = seq[t];
        if (p < 0 || p >= n_ctx || s < 0 || s >= n_seq) {
            if (i == 0) atomicOr(status, PL_CU_ST_KV_SLOT);
            continue;
        }
        const float v = ((const float *)(rows + t * r_nb1))[i];
        char *out = cache + (size_t)p * c_nb1 + (size_t)s * c_nb2;
        if (F16) ((__half *)out)[i] = __float2half_rn(v);
        else ((float *)out)[i] = v;
    }
}

pl_status pl_cu_kv_store(pl_cu_ctx *cu, const pl_node *node) {
    const pl_tensor *rows = node->src[0], *pos = node->src[1], *seq = node->src[2], *c = node->dst;
    const int64_t kv_dim = rows->ne[0], T = rows->ne[1], total = kv_dim * T;
    if (c->dtype != PL_F16 && c->dtype != PL_F32)
        return pl_cu_errorf(PL_ERR_UNSUPPORTED, "cuda: kv_store has no kernel for dtype %d", (int)c->dtype);
    if (c->dtype == PL_F16)
        k_kv_store<true><<<ew_grid(total), PL_CU_EW_THREADS, 0, cu->stream>>>(
            (const char *)rows->data, rows->nb[1], (const int32_t *)pos->data, (const int32_t *)seq->data,
            (char *)c->data, c->nb[1], c->nb[2], kv_dim, T, c->ne[1], c->ne[2], cu->d_status);
    else
        k_kv_store<false><<<ew_grid(total), PL_CU_EW_THREADS, 0, cu->stream>>>(
            (const char *)rows->data, rows->nb[1], (const int32_t *)pos->data, (const int32_t *)seq->data,
            (char *)c->data, c->nb[1], c->nb[2], kv_dim, T, c->ne[1], c->ne[2], cu->d_status);
    PL_CU_LAUNCHED("kv_store");
    return PL_OK;
}
