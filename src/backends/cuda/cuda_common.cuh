/*
 * Shared by the module's .cu files: the context, error reporting, device
 * status flags, dtype helpers and the GGML block layouts as the kernels read
 * them.
 *
 * Conventions of every kernel here:
 *  - tensors arrive as pl_tensor descriptors whose data are device pointers;
 *    shapes and byte strides are read on the host and passed by value, so a
 *    kernel never reads a descriptor on the device;
 *  - everything data-dependent (token ids, positions, slots) is read on the
 *    device, never on the host: a launch depends only on shapes and
 *    pointers, which is what lets a decode step be captured once as a CUDA
 *    graph and replayed with new inputs;
 *  - bad run-time data (an id outside a table, a position outside the cache)
 *    skips the write and sets a bit in the context's device status word,
 *    reported by the next download / synchronize (PL_CU_ST_* below);
 *  - launches go to the context's stream and are asynchronous; a kernel's
 *    host function returns PL_OK once the launch was accepted.
 */
#ifndef PL_BACKENDS_CUDA_COMMON_CUH
#define PL_BACKENDS_CUDA_COMMON_CUH
#include <cuda_runtime.h>
#include <cuda_fp16.h>
#include <cuda_bf16.h>
#include <stdint.h>
#include "backends/cuda/cuda_module.h"
#include "backends/cuda/cuda_quant.cuh"

/* ---- context ------------------------------------------------------------------ */

#define PL_CU_GRAPH_CACHE 8      /* captured graphs kept (decode shapes seen recently: batch sizes 1..8) */
#define PL_CU_STAGE_BYTES (8u << 20)   /* each of the 2 pinned staging buffers */

typedef struct pl_cu_graph_entry {
    uint64_t *sig;               /* the signature the graph was captured for */
    size_t sig_len;              /* in words */
    cudaGraphExec_t exec;
    uint64_t last_use;
} pl_cu_graph_entry;

typedef struct pl_cu_ctx {
    pl_exec_ctx base;            /* first: the library sees a pl_exec_ctx */
    int device;
    int cc;                      /* compute capability, major*10 + minor */
    int n_sm;
    size_t mem_total;
    char name[256];
    cudaStream_t stream;
    unsigned int *d_status;      /* PL_CU_ST_* bits, set by kernels */
    unsigned int *h_status;      /* pinned mirror, filled at download/synchronize */
    /* Pinned double buffer for uploads and downloads through pageable memory. */
    unsigned char *stage[2];
    cudaEvent_t stage_ev[2];
    int stage_next;
    /* CUDA graphs of decode-sized forward graphs. */
    bool graphs;                 /* PL_CUDA_GRAPHS=0 disables */
    pl_cu_graph_entry cache[PL_CU_GRAPH_CACHE];
    uint64_t use_clock;
    uint64_t *sig;               /* scratch for the current graph's signature */
    size_t sig_cap;
    unsigned long long n_captures, n_replays;
    /* The quantized activations in the work buffer, reusable by the next
     * matmul of a graph when it reads the same x (q, k, v share theirs; so do
     * gate and up). Valid only between consecutive matmul nodes of one
     * run_nodes call (cuda_backend.cu); any other node clears it. */
    bool xq_valid;
    const void *xq_src, *xq_work;
    int64_t xq_K, xq_M;
    size_t xq_nb1;
} pl_cu_ctx;

static inline pl_cu_ctx *pl_cu(pl_exec_ctx *ctx) { return (pl_cu_ctx *)ctx; }

/* Device properties of the one device this process uses, for launch shapes
 * (work sizes depend on them; they are set by ctx_create before any plan). */
extern int pl_cu_n_sm;

/* ---- errors ----------------------------------------------------------------------- */

/* pl_errorf of the library, lent at module init. */
pl_status pl_cu_errorf(pl_status st, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

#define PL_CU_CHECK(call)                                                                                  \
    do {                                                                                                   \
        cudaError_t pl_cu_e_ = (call);                                                                     \
        if (pl_cu_e_ != cudaSuccess)                                                                       \
            return pl_cu_errorf(pl_cu_e_ == cudaErrorMemoryAllocation ? PL_ERR_NO_MEMORY : PL_ERR_INTERNAL, \
                                "cuda: %s: %s", #call, cudaGetErrorString(pl_cu_e_));                      \
    } while (0)

/* After a launch: a bad configuration or a sticky device error. */
#define PL_CU_LAUNCHED(what)                                                                               \
    do {                                                                                                   \
        cudaError_t pl_cu_e_ = cudaGetLastError();                                                         \
        if (pl_cu_e_ != cudaSuccess)                                                                       \
            return pl_cu_errorf(PL_ERR_INTERNAL, "cuda: %s kernel launch failed: %s", (what),               \
                                cudaGetErrorString(pl_cu_e_));                                             \
    } while (0)

#define PL_CU_TRY(expr)                          \
    do {                                         \
        pl_status pl_cu_st_ = (expr);            \
        if (pl_cu_st_ != PL_OK) return pl_cu_st_; \
    } while (0)

/* Device status bits. */
enum {
    PL_CU_ST_GET_ROWS_ID = 1u << 0,    /* get_rows: id outside the table */
    PL_CU_ST_KV_SLOT = 1u << 1,        /* kv_store: pos/seq outside the cache */
    PL_CU_ST_ATTN_SLOT = 1u << 2,      /* attention: pos/seq outside the cache */
};

/* ---- dtypes ------------------------------------------------------------------------ */

/* Elements per block and bytes per block of the types the module reads. */
static inline int64_t pl_cu_block_size(pl_dtype t) {
    switch (t) {
    case PL_Q8_0: return 32;
    case PL_Q4_K: case PL_Q6_K: return 256;
#define PL_CU_LADDER_BS_(T) case T:
    PL_CU_LADDER_TYPES(PL_CU_LADDER_BS_) return 256;
#undef PL_CU_LADDER_BS_
    default: return 1;
    }
}
static inline size_t pl_cu_type_size(pl_dtype t) {
    switch (t) {
    case PL_F32: case PL_I32: return 4;
    case PL_F16: case PL_BF16: return 2;
    case PL_Q8_0: return 34;
    case PL_Q4_K: return 144;
    case PL_Q6_K: return 210;
#define PL_CU_LADDER_TS_(T) case T: return (size_t)pl_cu_ladder_bytes(T);
    PL_CU_LADDER_TYPES(PL_CU_LADDER_TS_)
#undef PL_CU_LADDER_TS_
    default: return 0;
    }
}
static inline size_t pl_cu_row_size(pl_dtype t, int64_t n) {
    return pl_cu_type_size(t) * (size_t)(n / pl_cu_block_size(t));
}
static inline int64_t pl_cu_nrows(const pl_tensor *t) { return t->ne[1] * t->ne[2] * t->ne[3]; }
static inline bool pl_cu_aligned(const void *p, size_t a) { return ((uintptr_t)p % a) == 0; }

__device__ __forceinline__ float pl_cu_warp_sum(float v) {
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
    return v;
}
__device__ __forceinline__ float pl_cu_warp_max(float v) {
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
    return v;
}

static inline unsigned pl_cu_blocks(int64_t n, int per) {
    int64_t b = (n + per - 1) / per;
    return (unsigned)(b < 1 ? 1 : b > 0x7fffffff ? 0x7fffffff : b);
}

/* ---- the ops (one host function per op; the node is already validated) ---------- */

pl_status pl_cu_get_rows(pl_cu_ctx *cu, const pl_node *node);
pl_status pl_cu_rms_norm(pl_cu_ctx *cu, const pl_node *node);
pl_status pl_cu_add(pl_cu_ctx *cu, const pl_node *node);
pl_status pl_cu_swiglu(pl_cu_ctx *cu, const pl_node *node);
pl_status pl_cu_geglu(pl_cu_ctx *cu, const pl_node *node);    /* cuda_gemma.cu */
pl_status pl_cu_scale(pl_cu_ctx *cu, const pl_node *node);    /* cuda_gemma.cu */
pl_status pl_cu_softcap(pl_cu_ctx *cu, const pl_node *node);  /* cuda_gemma.cu */
pl_status pl_cu_rope(pl_cu_ctx *cu, const pl_node *node);
pl_status pl_cu_kv_store(pl_cu_ctx *cu, const pl_node *node);
pl_status pl_cu_attention(pl_cu_ctx *cu, const pl_node *node);
size_t pl_cu_attention_work(const pl_node *node);
/* matmul: GEMV for up to PL_CU_GEMV_MAX_M activation rows, tiled GEMM above. */
#define PL_CU_GEMV_MAX_M 8
pl_status pl_cu_matmul(pl_cu_ctx *cu, const pl_node *node);
size_t pl_cu_matmul_work(const pl_node *node);
/* The halves of matmul (cuda_gemv.cu, cuda_gemm.cu). */
pl_status pl_cu_gemv(pl_cu_ctx *cu, const pl_node *node);
pl_status pl_cu_gemm(pl_cu_ctx *cu, const pl_node *node);
size_t pl_cu_gemv_work(const pl_node *node);
/* Each translation unit that decodes IQ weights uploads its own device copy
 * of the codebooks (cuda_quant.cuh); cuda_backend.cu calls all three. */
cudaError_t pl_cu_tables_upload_ops(void);
cudaError_t pl_cu_tables_upload_gemv(void);
cudaError_t pl_cu_tables_upload_gemm(void);

#endif
