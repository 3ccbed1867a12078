/*
 * Causal grouped-query attention over the KV cache (PL_OP_ATTENTION).
 *
 * q [D, H, T] (nb1 per head, nb2 per token), caches [G*D, n_ctx, n_seq] in
 * f16 or f32 (nb1 per position, nb2 per slot), pos/seq I32 [T], dst
 * [D*H, T]. Token t reads positions 0..pos[t] of slot seq[t]; query head h
 * reads KV head h / (H/G).
 *
 * One kernel for decode and prefill, flash-decoding style:
 *   grid  = (n_split, G * H/G / HPB, T), block = 4 warps;
 *   block = one token, HPB query heads sharing one KV head (each K/V row read
 *           once serves all HPB heads), keys [split*chunk, ...) of 0..pos;
 *   warp  = every 4th key of the block's range: the lanes hold DPL
 *           consecutive dims of q and of the accumulator each (D <= 32*DPL),
 *           a key's score is a warp-wide shuffle sum, and softmax is online
 *           (running max m, sum l, accumulator rescaled when m grows).
 * The 4 warps merge through shared memory; with n_split > 1 each block
 * writes an unnormalised partial (o, m, l) to the work buffer and a second
 * kernel merges the splits. chunk = ceil((pos+1) / n_split) is computed ON
 * THE DEVICE from pos, so the launch depends only on shapes (graph-capture
 * safe) while the splits stay balanced at every position. n_split depends on
 * T and the SM count: enough blocks to fill the GPU when T is small (decode),
 * 1 when T*G alone fills it (prefill).
 *
 * Precision: scores, softmax and the weighted sum in f32 with expf (the ref
 * uses double; f32 caches agree to ~1e-6 relative).
 */
#include "backends/cuda/cuda_common.cuh"
#include <math.h>

#define ATT_WARPS 4
#define ATT_MAX_SPLIT 64

struct pl_cu_attn_args {
    const char *q;
    size_t q_nb1, q_nb2;
    const char *k, *v;
    size_t k_nb1, k_nb2, v_nb1, v_nb2;
    const int32_t *pos, *seq;
    float *dst;
    float2 *part_ml;     /* [T][H][n_split]: (m, l) per split */
    float *part_o;       /* [T][H][n_split][D] */
    int D, H, group, n_split;
    int64_t n_ctx, n_seq;
    float scale;
    bool vec;            /* K/V slices can be read with DPL-wide vector loads */
    unsigned int *status;
};

/* The lane's DPL consecutive dims [lane*DPL, lane*DPL + DPL) of a cache row
 * slice, as floats (0 past D). */
template <int DPL, bool F16>
__device__ __forceinline__ void load_slice(const char *row, int lane, int D, bool vec, float *out) {
    if (vec) {
        if (F16) {
            const __half2 *p = (const __half2 *)(row + (size_t)lane * DPL * 2);
            if (DPL == 2) {
                const float2 f = __half22float2(p[0]);
                out[0] = f.x; out[1] = f.y;
            } else if (DPL == 4) {
                const uint2 u = *(const uint2 *)p;
                const float2 a = __half22float2(*(const __half2 *)&u.x), b = __half22float2(*(const __half2 *)&u.y);
                out[0] = a.x; out[1] = a.y; out[2] = b.x; out[3] = b.y;
            } else {
                const uint4 u = *(const uint4 *)p;
                const uint32_t w[4] = {u.x, u.y, u.z, u.w};
#pragma unroll
                for (int i = 0; i < 4; i++) {
                    const float2 f = __half22float2(*(const __half2 *)&w[i]);
                    out[2 * i] = f.x; out[2 * i + 1] = f.y;
                }
            }
        } else {
            const float *p = (const float *)row + (size_t)lane * DPL;
            if (DPL == 2) {
                const float2 f = *(const float2 *)p;
                out[0] = f.x; out[1] = f.y;
            } else {
#pragma unroll
                for (int i = 0; i < DPL; i += 4) {
                    const float4 f = *(const float4 *)(p + i);
                    out[i] = f.x; out[i + 1] = f.y; out[i + 2] = f.z; out[i + 3] = f.w;
                }
            }
        }
        return;
    }
#pragma unroll
    for (int i = 0; i < DPL; i++) {
        const int d = lane * DPL + i;
        out[i] = d >= D ? 0.0f : F16 ? __half2float(((const __half *)row)[d]) : ((const float *)row)[d];
    }
}

template <int DPL, int HPB, bool F16>
__global__ void __launch_bounds__(ATT_WARPS * 32) k_attention(pl_cu_attn_args a) {
    __shared__ float sm_m[ATT_WARPS][HPB], sm_l[ATT_WARPS][HPB];
    __shared__ float sm_acc[ATT_WARPS][HPB][DPL * 32];

    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    const int split = blockIdx.x;
    const int per_kv = a.group / HPB;                 /* blocks per KV head */
    const int kvh = blockIdx.y / per_kv;
    const int h0 = kvh * a.group + (blockIdx.y % per_kv) * HPB;
    const int t = blockIdx.z;
    const int32_t p = a.pos[t], s = a.seq[t];
    const bool bad = p < 0 || p >= a.n_ctx || s < 0 || s >= a.n_seq;
    if (bad && split == 0 && threadIdx.x == 0) atomicOr(a.status, PL_CU_ST_ATTN_SLOT);
    const int64_t n_keys = bad ? 0 : (int64_t)p + 1;
    const int64_t chunk = (n_keys + a.n_split - 1) / a.n_split;
    const int64_t j0 = (int64_t)split * chunk;
    const int64_t j1 = j0 + chunk < n_keys ? j0 + chunk : n_keys;

    float q[HPB][DPL], acc[HPB][DPL], m[HPB], l[HPB];
#pragma unroll
    for (int hh = 0; hh < HPB; hh++) {
        const float *qr = (const float *)(a.q + (size_t)(h0 + hh) * a.q_nb1 + (size_t)t * a.q_nb2);
#pragma unroll
        for (int i = 0; i < DPL; i++) {
            const int d = lane * DPL + i;
            q[hh][i] = d < a.D ? qr[d] : 0.0f;
            acc[hh][i] = 0.0f;
        }
        m[hh] = -INFINITY;
        l[hh] = 0.0f;
    }

    const size_t el = F16 ? 2 : 4;
    const size_t off = (size_t)kvh * (size_t)a.D * el;     /* this KV head's slice of a row */
    const char *kb = a.k + (bad ? 0 : (size_t)s * a.k_nb2) + off;
    const char *vb = a.v + (bad ? 0 : (size_t)s * a.v_nb2) + off;
    for (int64_t j = j0 + warp; j < j1; j += ATT_WARPS) {
        float kv[DPL], vv[DPL];
        load_slice<DPL, F16>(kb + (size_t)j * a.k_nb1, lane, a.D, a.vec, kv);
        load_slice<DPL, F16>(vb + (size_t)j * a.v_nb1, lane, a.D, a.vec, vv);
#pragma unroll
        for (int hh = 0; hh < HPB; hh++) {
            float dot = 0.0f;
#pragma unroll
            for (int i = 0; i < DPL; i++) dot = fmaf(q[hh][i], kv[i], dot);
            const float sc = pl_cu_warp_sum(dot) * a.scale;
            const float m_new = fmaxf(m[hh], sc);
            const float corr = expf(m[hh] - m_new);       /* 0 on the first key (m = -inf) */
            const float e = expf(sc - m_new);
            l[hh] = l[hh] * corr + e;
#pragma unroll
            for (int i = 0; i < DPL; i++) acc[hh][i] = fmaf(acc[hh][i], corr, e * vv[i]);
            m[hh] = m_new;
        }
    }

    /* Merge the warps. */
#pragma unroll
    for (int hh = 0; hh < HPB; hh++) {
        if (lane == 0) {
            sm_m[warp][hh] = m[hh];
            sm_l[warp][hh] = l[hh];
        }
#pragma unroll
        for (int i = 0; i < DPL; i++) sm_acc[warp][hh][lane * DPL + i] = acc[hh][i];
    }
    __syncthreads();
    for (int idx = threadIdx.x; idx < HPB * a.D; idx += blockDim.x) {
        const int hh = idx / a.D, d = idx % a.D, h = h0 + hh;
        float M = -INFINITY;
#pragma unroll
        for (int w = 0; w < ATT_WARPS; w++) M = fmaxf(M, sm_m[w][hh]);
        float L = 0.0f, O = 0.0f;
        if (M != -INFINITY) {
#pragma unroll
            for (int w = 0; w < ATT_WARPS; w++) {
                const float f = expf(sm_m[w][hh] - M);
                L = fmaf(sm_l[w][hh], f, L);
                O = fmaf(sm_acc[w][hh][d], f, O);
            }
        }
        if (a.n_split == 1) {
            a.dst[(size_t)t * a.H * a.D + (size_t)h * a.D + d] = L > 0.0f ? O / L : 0.0f;
        } else {
            const size_t ps = ((size_t)t * a.H + h) * a.n_split + split;
            a.part_o[ps * a.D + d] = O;
            if (d == 0) a.part_ml[ps] = make_float2(M, L);
        }
    }
}

/* Merges the splits of one (head, token): weights exp(m_s - M). */
__global__ void k_attention_combine(const float2 *__restrict__ ml, const float *__restrict__ po,
                                    float *__restrict__ dst, int D, int H, int n_split) {
    const int h = blockIdx.x, t = blockIdx.y;
    const size_t base = ((size_t)t * H + h) * n_split;
    float M = -INFINITY;
    for (int s = 0; s < n_split; s++) M = fmaxf(M, ml[base + s].x);
    for (int d = threadIdx.x; d < D; d += blockDim.x) {
        float L = 0.0f, O = 0.0f;
        if (M != -INFINITY)
            for (int s = 0; s < n_split; s++) {
                const float2 v = ml[base + s];
                if (v.y == 0.0f) continue;          /* an empty split (m = -inf) */
                const float f = expf(v.x - M);
                L = fmaf(v.y, f, L);
                O = fmaf(po[(base + s) * D + d], f, O);
            }
        dst[(size_t)t * H * D + (size_t)h * D + d] = L > 0.0f ? O / L : 0.0f;
    }
}

/* ---- launch shapes -------------------------------------------------------------------------- */

typedef struct att_shape {
    int dpl, hpb, blocks_per_tok, n_split;
} att_shape;

static int att_hpb(int group) { return group % 4 == 0 ? 4 : group % 2 == 0 ? 2 : 1; }

/* n_split for T tokens: enough blocks for 2 waves of the GPU, at most one
 * split per 32 cache positions and ATT_MAX_SPLIT. T * n_split <= target/bpt + T,
 * which bounds the work buffer for every T' <= T (see att_work). */
static int att_split(int64_t T, int blocks_per_tok, int64_t n_ctx) {
    const int64_t target = 2 * (int64_t)pl_cu_n_sm;
    const int64_t base = T * blocks_per_tok;
    if (base >= target) return 1;
    int64_t s = (target + base - 1) / base;
    const int64_t by_ctx = (n_ctx + 31) / 32;
    if (s > by_ctx) s = by_ctx;
    if (s > ATT_MAX_SPLIT) s = ATT_MAX_SPLIT;
    return s < 1 ? 1 : (int)s;
}

static att_shape att_shape_of(const pl_node *node, int64_t T) {
    const pl_tensor *q = node->src[0], *k = node->src[1];
    const int D = (int)q->ne[0], H = (int)q->ne[1], G = node->iparams[0];
    att_shape sh;
    sh.dpl = D <= 64 ? 2 : D <= 128 ? 4 : 8;
    sh.hpb = att_hpb(H / G);
    sh.blocks_per_tok = G * (H / G / sh.hpb);
    sh.n_split = att_split(T, sh.blocks_per_tok, k->ne[1]);
    return sh;
}

size_t pl_cu_attention_work(const pl_node *node) {
    const pl_tensor *q = node->src[0];
    const int64_t D = q->ne[0], H = q->ne[1], T = q->ne[2];
    const att_shape sh = att_shape_of(node, 1);
    if (sh.n_split <= 1) return 0;      /* T = 1 needs the most splits */
    const int64_t target = 2 * (int64_t)pl_cu_n_sm;
    const int64_t rows = (target + sh.blocks_per_tok - 1) / sh.blocks_per_tok + T;   /* >= T' * n_split(T') */
    return (size_t)rows * (size_t)H * (size_t)(D + 2) * sizeof(float) + 256;
}

template <int DPL, int HPB>
static void att_launch(const pl_cu_attn_args &a, bool f16, dim3 grid, cudaStream_t st) {
    if (f16) k_attention<DPL, HPB, true><<<grid, ATT_WARPS * 32, 0, st>>>(a);
    else k_attention<DPL, HPB, false><<<grid, ATT_WARPS * 32, 0, st>>>(a);
}

template <int DPL>
static void att_launch_h(const pl_cu_attn_args &a, int hpb, bool f16, dim3 grid, cudaStream_t st) {
    if (hpb == 4) att_launch<DPL, 4>(a, f16, grid, st);
    else if (hpb == 2) att_launch<DPL, 2>(a, f16, grid, st);
    else att_launch<DPL, 1>(a, f16, grid, st);
}

pl_status pl_cu_attention(pl_cu_ctx *cu, const pl_node *node) {
    const pl_tensor *q = node->src[0], *k = node->src[1], *v = node->src[2];
    const pl_tensor *pos = node->src[3], *seq = node->src[4], *dst = node->dst;
    const int64_t D = q->ne[0], H = q->ne[1], T = q->ne[2];
    if (k->dtype != PL_F16 && k->dtype != PL_F32)
        return pl_cu_errorf(PL_ERR_UNSUPPORTED, "cuda: attention has no kernel for a dtype %d cache", (int)k->dtype);
    if (D > 256)
        return pl_cu_errorf(PL_ERR_UNSUPPORTED, "cuda: attention supports head_dim up to 256, not %lld", (long long)D);
    if (node->iparams[4] > 0)
        return pl_cu_errorf(PL_ERR_UNSUPPORTED, "cuda: attention with a sliding window (%d) is not implemented",
                            node->iparams[4]);
    if (T > 65535)
        return pl_cu_errorf(PL_ERR_UNSUPPORTED, "cuda: attention over %lld tokens in one call", (long long)T);
    const bool f16 = k->dtype == PL_F16;
    const att_shape sh = att_shape_of(node, T);

    pl_cu_attn_args a;
    a.q = (const char *)q->data;
    a.q_nb1 = q->nb[1];
    a.q_nb2 = q->nb[2];
    a.k = (const char *)k->data;
    a.v = (const char *)v->data;
    a.k_nb1 = k->nb[1];
    a.k_nb2 = k->nb[2];
    a.v_nb1 = v->nb[1];
    a.v_nb2 = v->nb[2];
    a.pos = (const int32_t *)pos->data;
    a.seq = (const int32_t *)seq->data;
    a.dst = (float *)dst->data;
    a.D = (int)D;
    a.H = (int)H;
    a.group = (int)(H / node->iparams[0]);
    a.n_split = sh.n_split;
    a.n_ctx = k->ne[1];
    a.n_seq = k->ne[2];
    a.scale = node->fparams[0];
    a.status = cu->d_status;
    const size_t vbytes = (size_t)sh.dpl * (f16 ? 2 : 4);
    a.vec = D == 32 * sh.dpl && pl_cu_aligned(a.k, vbytes) && pl_cu_aligned(a.v, vbytes) && a.k_nb1 % vbytes == 0 &&
            a.k_nb2 % vbytes == 0 && a.v_nb1 % vbytes == 0 && a.v_nb2 % vbytes == 0;
    a.part_ml = NULL;
    a.part_o = NULL;
    if (sh.n_split > 1) {
        const size_t need = (size_t)T * H * sh.n_split * (D + 2) * sizeof(float);
        if (!cu->base.work || cu->base.work_size < need)
            return pl_cu_errorf(PL_ERR_INTERNAL, "cuda: attention needs %zu bytes of work memory, has %zu", need,
                                cu->base.work_size);
        a.part_ml = (float2 *)cu->base.work;
        a.part_o = (float *)((char *)cu->base.work + (size_t)T * H * sh.n_split * sizeof(float2));
    }
    dim3 grid((unsigned)sh.n_split, (unsigned)sh.blocks_per_tok, (unsigned)T);
    if (sh.dpl == 2) att_launch_h<2>(a, sh.hpb, f16, grid, cu->stream);
    else if (sh.dpl == 4) att_launch_h<4>(a, sh.hpb, f16, grid, cu->stream);
    else att_launch_h<8>(a, sh.hpb, f16, grid, cu->stream);
    PL_CU_LAUNCHED("attention");
    if (sh.n_split > 1) {
        k_attention_combine<<<dim3((unsigned)H, (unsigned)T), 128, 0, cu->stream>>>(a.part_ml, a.part_o, a.dst, a.D,
                                                                                    a.H, sh.n_split);
        PL_CU_LAUNCHED("attention combine");
    }
    return PL_OK;
}
