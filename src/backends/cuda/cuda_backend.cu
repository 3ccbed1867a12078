/*
 * The CUDA module: its one exported entry point, the execution context,
 * device memory (pl_device_ops), dispatch of nodes to the kernels of
 * cuda_ops.cu / cuda_attention.cu / cuda_gemv.cu / cuda_gemm.cu, and the
 * whole-graph executor that captures decode steps as CUDA graphs.
 *
 * Context: one device (device 0 of what CUDA_VISIBLE_DEVICES shows), one
 * non-blocking stream, a 4-byte device status word kernels flag bad inputs
 * in, and two 8 MiB pinned staging buffers for copies through pageable host
 * memory (weights straight from the file mapping, logits into the caller's
 * array).
 *
 * CUDA graphs: launching ~600 small kernels per decoded token costs more host
 * time than the GPU needs to run them, so graph_execute captures a
 * decode-sized graph (every matmul has <= PL_CU_GEMV_MAX_M activation rows)
 * once and replays it. The key is the graph's exact signature (every node's
 * op and parameters, every operand's pointer, dtype, shape and strides, and
 * the work buffer), compared word for word, never hashed: the engine rebuilds an identical
 * graph for every decode step (same planned scratch offsets, same weights,
 * same KV cache, same input buffer), and since no kernel reads token ids or
 * positions on the host, replaying with new inputs is exact. Prefill-sized
 * graphs run node by node (their kernels are long; capture would not pay).
 * PL_CUDA_GRAPHS=0 turns capture off.
 */
#include "backends/cuda/cuda_common.cuh"
#include "backends/cuda/cuda_table.h"
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#ifndef PL_CUDA_ARCHS_STR
#define PL_CUDA_ARCHS_STR "unknown architectures"
#endif
#define PL_STR2_(x) #x
#define PL_STR_(x) PL_STR2_(x)

static const pl_cuda_host_api *g_host;
int pl_cu_n_sm = 132;   /* replaced by the device's count at ctx_create */

pl_status pl_cu_errorf(pl_status st, const char *fmt, ...) {
    char buf[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(buf, sizeof buf, fmt, ap);
    va_end(ap);
    if (g_host && g_host->errorf) return g_host->errorf(st, "%s", buf);
    return st;
}

/* ---- dispatch ---------------------------------------------------------------------------------- */

static const pl_cuda_kernel_key cu_kernels[] = {
#define PL_CUDA_KEY_(op, t) {(int32_t)(op), (int32_t)(t)},
    PL_CUDA_KERNELS(PL_CUDA_KEY_)
#undef PL_CUDA_KEY_
};

pl_status pl_cu_matmul(pl_cu_ctx *cu, const pl_node *node) {
    return node->src[1]->ne[1] <= PL_CU_GEMV_MAX_M ? pl_cu_gemv(cu, node) : pl_cu_gemm(cu, node);
}

/* GEMM needs no work memory, GEMV needs it for min(M, 8) rows: monotone in M. */
size_t pl_cu_matmul_work(const pl_node *node) { return pl_cu_gemv_work(node); }

static pl_status cu_dispatch(pl_cu_ctx *cu, const pl_node *node) {
    switch (node->op) {
    case PL_OP_GET_ROWS: return pl_cu_get_rows(cu, node);
    case PL_OP_RMS_NORM: return pl_cu_rms_norm(cu, node);
    case PL_OP_MATMUL: return pl_cu_matmul(cu, node);
    case PL_OP_ADD: return pl_cu_add(cu, node);
    case PL_OP_SWIGLU: return pl_cu_swiglu(cu, node);
    case PL_OP_ROPE: return pl_cu_rope(cu, node);
    case PL_OP_KV_STORE: return pl_cu_kv_store(cu, node);
    case PL_OP_ATTENTION: return pl_cu_attention(cu, node);
    case PL_OP_GEGLU: return pl_cu_geglu(cu, node);
    case PL_OP_SCALE: return pl_cu_scale(cu, node);
    case PL_OP_SOFTCAP: return pl_cu_softcap(cu, node);
    default: return pl_cu_errorf(PL_ERR_UNSUPPORTED, "cuda: no kernel for op %d", (int)node->op);
    }
}

/* One node on its own (the executor's per-node loop, tests). */
static pl_status cu_run(pl_exec_ctx *ctx, const pl_node *node) {
    pl_cu_ctx *cu = pl_cu(ctx);
    cu->xq_valid = false;
    return cu_dispatch(cu, node);
}

static size_t cu_work_size(const pl_node *node, int n_threads) {
    (void)n_threads;
    switch (node->op) {
    case PL_OP_MATMUL: return pl_cu_matmul_work(node);
    case PL_OP_ATTENTION: return pl_cu_attention_work(node);
    default: return 0;
    }
}

/* ---- device status ---------------------------------------------------------------------------- */

/* Waits for the stream (the status word was queued for copy before) and
 * turns device faults and flagged inputs into statuses. */
static pl_status cu_finish(pl_cu_ctx *cu) {
    cudaError_t e = cudaStreamSynchronize(cu->stream);
    if (e != cudaSuccess)
        return pl_cu_errorf(PL_ERR_INTERNAL, "cuda: the device reported an error: %s (the CUDA context cannot be "
                                             "used any more; restart the process)", cudaGetErrorString(e));
    const unsigned int st = *cu->h_status;
    if (!st) return PL_OK;
    *cu->h_status = 0;
    cudaMemsetAsync(cu->d_status, 0, sizeof(unsigned int), cu->stream);
    char msg[256] = "";
    if (st & PL_CU_ST_GET_ROWS_ID) strcat(msg, " get_rows: an id outside the table;");
    if (st & PL_CU_ST_KV_SLOT) strcat(msg, " kv_store: a position or slot outside the cache;");
    if (st & PL_CU_ST_ATTN_SLOT) strcat(msg, " attention: a position or slot outside the cache;");
    return pl_cu_errorf(PL_ERR_INVALID_ARG, "cuda: a kernel rejected its inputs (found on the device):%s", msg);
}

static pl_status cu_queue_status(pl_cu_ctx *cu) {
    PL_CU_CHECK(cudaMemcpyAsync(cu->h_status, cu->d_status, sizeof(unsigned int), cudaMemcpyDeviceToHost, cu->stream));
    return PL_OK;
}

/* ---- device memory ------------------------------------------------------------------------------ */

static const char *kind_name(pl_buffer_kind k) {
    switch (k) {
    case PL_BUF_WEIGHTS: return "the weights";
    case PL_BUF_KV: return "the KV cache";
    case PL_BUF_SCRATCH: return "scratch";
    default: return "inputs";
    }
}

static pl_status cu_mem_info(pl_exec_ctx *ctx, uint64_t *free_b, uint64_t *total_b, char *desc, size_t cap) {
    pl_cu_ctx *cu = pl_cu(ctx);
    size_t f = 0, t = 0;
    PL_CU_CHECK(cudaMemGetInfo(&f, &t));
    if (free_b) *free_b = f;
    if (total_b) *total_b = t;
    if (desc && cap)
        snprintf(desc, cap, "%s, sm_%d, %d SMs, %.1f GiB", cu->name, cu->cc, cu->n_sm, (double)t / 1073741824.0);
    return PL_OK;
}

static pl_status cu_buffer_alloc(pl_exec_ctx *ctx, pl_buffer_kind kind, size_t size, void **out) {
    pl_cu_ctx *cu = pl_cu(ctx);
    *out = NULL;
    void *p = NULL;
    cudaError_t e = cudaMalloc(&p, size ? size : 256);
    if (e != cudaSuccess) {
        (void)cudaGetLastError();
        size_t f = 0, t = 0;
        cudaMemGetInfo(&f, &t);
        return pl_cu_errorf(e == cudaErrorMemoryAllocation ? PL_ERR_DOES_NOT_FIT : PL_ERR_INTERNAL,
                            "cuda: cannot allocate %.1f MiB of device memory for %s (%.1f MiB free of %.1f MiB on %s): %s",
                            (double)size / 1048576.0, kind_name(kind), (double)f / 1048576.0, (double)t / 1048576.0,
                            cu->name, cudaGetErrorString(e));
    }
    if (kind == PL_BUF_KV) {
        e = cudaMemsetAsync(p, 0, size, cu->stream);
        if (e != cudaSuccess) {
            cudaFree(p);
            return pl_cu_errorf(PL_ERR_INTERNAL, "cuda: clearing the KV cache: %s", cudaGetErrorString(e));
        }
    }
    *out = p;
    return PL_OK;
}

static void cu_buffer_free(pl_exec_ctx *ctx, void *p) {
    if (!p) return;
    cudaStreamSynchronize(pl_cu(ctx)->stream);
    cudaFree(p);
}

/* Host -> device through the pinned double buffer: each 8 MiB chunk is copied
 * into a staging buffer (after that buffer's previous copy finished), then
 * sent asynchronously, so reading the source overlaps the transfer; the
 * source is free again when this returns. */
static pl_status cu_upload(pl_exec_ctx *ctx, void *dst, const void *src, size_t n) {
    pl_cu_ctx *cu = pl_cu(ctx);
    const unsigned char *s = (const unsigned char *)src;
    unsigned char *d = (unsigned char *)dst;
    while (n > 0) {
        const size_t c = n < PL_CU_STAGE_BYTES ? n : PL_CU_STAGE_BYTES;
        const int slot = cu->stage_next;
        cu->stage_next ^= 1;
        PL_CU_CHECK(cudaEventSynchronize(cu->stage_ev[slot]));
        memcpy(cu->stage[slot], s, c);
        PL_CU_CHECK(cudaMemcpyAsync(d, cu->stage[slot], c, cudaMemcpyHostToDevice, cu->stream));
        PL_CU_CHECK(cudaEventRecord(cu->stage_ev[slot], cu->stream));
        s += c;
        d += c;
        n -= c;
    }
    return PL_OK;
}

/* Device -> host: chunks come back into the staging buffers; a chunk is
 * copied out while the next one transfers. Ends with the status check. */
static pl_status cu_download(pl_exec_ctx *ctx, void *dst, const void *src, size_t n) {
    pl_cu_ctx *cu = pl_cu(ctx);
    const unsigned char *s = (const unsigned char *)src;
    unsigned char *d = (unsigned char *)dst;
    int pend_slot = -1;
    unsigned char *pend_dst = NULL;
    size_t pend_n = 0;
    while (n > 0) {
        const size_t c = n < PL_CU_STAGE_BYTES ? n : PL_CU_STAGE_BYTES;
        const int slot = cu->stage_next;
        cu->stage_next ^= 1;
        PL_CU_CHECK(cudaEventSynchronize(cu->stage_ev[slot]));
        PL_CU_CHECK(cudaMemcpyAsync(cu->stage[slot], s, c, cudaMemcpyDeviceToHost, cu->stream));
        PL_CU_CHECK(cudaEventRecord(cu->stage_ev[slot], cu->stream));
        if (pend_slot >= 0) {
            PL_CU_CHECK(cudaEventSynchronize(cu->stage_ev[pend_slot]));
            memcpy(pend_dst, cu->stage[pend_slot], pend_n);
        }
        pend_slot = slot;
        pend_dst = d;
        pend_n = c;
        s += c;
        d += c;
        n -= c;
    }
    PL_CU_TRY(cu_queue_status(cu));
    pl_status st = cu_finish(cu);
    if (pend_slot >= 0 && st == PL_OK) memcpy(pend_dst, cu->stage[pend_slot], pend_n);
    return st;
}

static pl_status cu_synchronize(pl_exec_ctx *ctx) {
    pl_cu_ctx *cu = pl_cu(ctx);
    PL_CU_TRY(cu_queue_status(cu));
    return cu_finish(cu);
}

/* ---- graphs ------------------------------------------------------------------------------------ */

/* Every node in order. Consecutive matmuls reading the same activations
 * quantize them once (see pl_cu_ctx.xq_valid): in a Qwen3 layer q, k and v
 * share one quantization, gate and up another. */
static pl_status run_nodes(pl_cu_ctx *cu, const pl_graph *g) {
    cu->xq_valid = false;
    for (int i = 0; i < g->n_nodes; i++) {
        const pl_node *nd = &g->nodes[i];
        if (nd->op != PL_OP_MATMUL) cu->xq_valid = false;
        pl_status st = cu_dispatch(cu, nd);
        if (st != PL_OK) {
            cu->xq_valid = false;
            return st;
        }
    }
    cu->xq_valid = false;
    return PL_OK;
}

static bool graph_is_decode(const pl_graph *g) {
    for (int i = 0; i < g->n_nodes; i++) {
        const pl_node *nd = &g->nodes[i];
        if (nd->op == PL_OP_MATMUL && nd->src[1]->ne[1] > PL_CU_GEMV_MAX_M) return false;
    }
    return g->n_nodes > 0;
}

static void sig_tensor(uint64_t **w, const pl_tensor *t) {
    uint64_t *p = *w;
    if (!t) {
        *p++ = 0;
    } else {
        *p++ = (uint64_t)(uintptr_t)t->data;
        *p++ = (uint64_t)t->dtype;
        for (int d = 0; d < PL_MAX_DIMS; d++) *p++ = (uint64_t)t->ne[d];
        for (int d = 0; d < PL_MAX_DIMS; d++) *p++ = (uint64_t)t->nb[d];
    }
    *w = p;
}

/* 64-bit words a node's parameter array takes in the signature */
#define PL_CU_PAR_WORDS(field) ((size_t)sizeof(((pl_node *)0)->field) / 8u)

/* The graph's signature into cu->sig; returns its length in words (0 = out of memory). */
static size_t sig_build(pl_cu_ctx *cu, const pl_graph *g) {
    /* op, the parameters as 64-bit words, each operand's signature */
    const size_t n_par = PL_CU_PAR_WORDS(fparams) + PL_CU_PAR_WORDS(iparams);
    const size_t per_node = 1 + n_par + (PL_MAX_SRC + 1) * (2 + 2 * PL_MAX_DIMS);
    const size_t need = 3 + (size_t)g->n_nodes * per_node;
    if (need > cu->sig_cap) {
        uint64_t *s = (uint64_t *)realloc(cu->sig, need * sizeof *s);
        if (!s) return 0;
        cu->sig = s;
        cu->sig_cap = need;
    }
    uint64_t *w = cu->sig;
    *w++ = (uint64_t)g->n_nodes;
    /* the work buffer is a kernel argument too */
    *w++ = (uint64_t)(uintptr_t)cu->base.work;
    *w++ = (uint64_t)cu->base.work_size;
    for (int i = 0; i < g->n_nodes; i++) {
        const pl_node *nd = &g->nodes[i];
        *w++ = (uint64_t)nd->op;
        memcpy(w, nd->fparams, sizeof nd->fparams);
        w += PL_CU_PAR_WORDS(fparams);
        memcpy(w, nd->iparams, sizeof nd->iparams);
        w += PL_CU_PAR_WORDS(iparams);
        for (int s = 0; s < PL_MAX_SRC; s++) sig_tensor(&w, nd->src[s]);
        sig_tensor(&w, nd->dst);
    }
    return (size_t)(w - cu->sig);
}
static_assert(sizeof(((pl_node *)0)->fparams) % 8 == 0 && sizeof(((pl_node *)0)->iparams) % 8 == 0, "node params");

static void graph_entry_clear(pl_cu_graph_entry *e) {
    if (e->exec) cudaGraphExecDestroy(e->exec);
    free(e->sig);
    memset(e, 0, sizeof *e);
}

static pl_status cu_graph_execute(pl_exec_ctx *ctx, const pl_graph *g) {
    pl_cu_ctx *cu = pl_cu(ctx);
    if (ctx->on_node)
        return pl_cu_errorf(PL_ERR_UNSUPPORTED,
                            "cuda: per-node observers (e.g. imatrix) read activations on the host; use a host backend");
    if (!cu->graphs || !graph_is_decode(g)) return run_nodes(cu, g);
    const size_t len = sig_build(cu, g);
    if (!len) return run_nodes(cu, g);
    cu->use_clock++;
    for (int i = 0; i < PL_CU_GRAPH_CACHE; i++) {
        pl_cu_graph_entry *e = &cu->cache[i];
        if (e->exec && e->sig_len == len && !memcmp(e->sig, cu->sig, len * sizeof(uint64_t))) {
            e->last_use = cu->use_clock;
            cu->n_replays++;
            PL_CU_CHECK(cudaGraphLaunch(e->exec, cu->stream));
            return PL_OK;
        }
    }
    /* Capture. A failure to capture falls back to running the nodes. */
    cudaGraph_t graph = NULL;
    if (cudaStreamBeginCapture(cu->stream, cudaStreamCaptureModeThreadLocal) != cudaSuccess) {
        (void)cudaGetLastError();
        cu->graphs = false;
        return run_nodes(cu, g);
    }
    pl_status st = run_nodes(cu, g);
    cudaError_t e = cudaStreamEndCapture(cu->stream, &graph);
    if (st != PL_OK) {
        if (graph) cudaGraphDestroy(graph);
        (void)cudaGetLastError();
        return st;
    }
    cudaGraphExec_t exec = NULL;
    if (e == cudaSuccess) e = cudaGraphInstantiate(&exec, graph, 0);
    if (graph) cudaGraphDestroy(graph);
    if (e != cudaSuccess) {
        (void)cudaGetLastError();
        cu->graphs = false;   /* this runtime cannot capture: stay with plain launches */
        return run_nodes(cu, g);
    }
    int victim = 0;
    for (int i = 1; i < PL_CU_GRAPH_CACHE; i++)
        if (!cu->cache[i].exec || (cu->cache[victim].exec && cu->cache[i].last_use < cu->cache[victim].last_use)) victim = i;
    pl_cu_graph_entry *ent = &cu->cache[victim];
    graph_entry_clear(ent);
    ent->sig = (uint64_t *)malloc(len * sizeof(uint64_t));
    if (ent->sig) {
        memcpy(ent->sig, cu->sig, len * sizeof(uint64_t));
        ent->sig_len = len;
        ent->exec = exec;
        ent->last_use = cu->use_clock;
    }
    cu->n_captures++;
    e = cudaGraphLaunch(exec, cu->stream);
    if (!ent->sig) cudaGraphExecDestroy(exec);   /* launched once, not kept */
    if (e != cudaSuccess)
        return pl_cu_errorf(PL_ERR_INTERNAL, "cuda: cudaGraphLaunch: %s", cudaGetErrorString(e));
    return PL_OK;
}

/* ---- context ----------------------------------------------------------------------------------- */

__global__ void k_noop(unsigned int *p) {
    if (p && threadIdx.x == 1000) *p = 1;   /* never true: only proves the module has code for this GPU */
}

static void cu_ctx_free(pl_exec_ctx *ctx) {
    if (!ctx) return;
    pl_cu_ctx *cu = pl_cu(ctx);
    if (cu->stream) cudaStreamSynchronize(cu->stream);
    for (int i = 0; i < PL_CU_GRAPH_CACHE; i++) graph_entry_clear(&cu->cache[i]);
    free(cu->sig);
    for (int i = 0; i < 2; i++) {
        if (cu->stage_ev[i]) cudaEventDestroy(cu->stage_ev[i]);
        if (cu->stage[i]) cudaFreeHost(cu->stage[i]);
    }
    if (cu->h_status) cudaFreeHost(cu->h_status);
    if (cu->d_status) cudaFree(cu->d_status);
    if (cu->stream) cudaStreamDestroy(cu->stream);
    free(cu);
}

#define CTX_CHECK(call)                                                                                   \
    do {                                                                                                  \
        cudaError_t e_ = (call);                                                                          \
        if (e_ != cudaSuccess) {                                                                          \
            pl_status st_ = pl_cu_errorf(PL_ERR_INTERNAL, "cuda: %s: %s", #call, cudaGetErrorString(e_)); \
            cu_ctx_free(&cu->base);                                                                       \
            return st_;                                                                                   \
        }                                                                                                 \
    } while (0)

static pl_status cu_ctx_create(int n_threads, pl_exec_ctx **out) {
    (void)n_threads;
    *out = NULL;
    int n = 0;
    cudaError_t e = cudaGetDeviceCount(&n);
    if (e != cudaSuccess || n == 0) {
        (void)cudaGetLastError();
        /* cudart reports a missing driver as "insufficient driver": say both. */
        const char *why = e == cudaSuccess || e == cudaErrorNoDevice
                              ? "the driver sees no GPU; check CUDA_VISIBLE_DEVICES"
                          : e == cudaErrorInsufficientDriver
                              ? "no NVIDIA driver is installed, or it is older than the CUDA " PL_STR_(
                                    __CUDACC_VER_MAJOR__) "." PL_STR_(__CUDACC_VER_MINOR__) " runtime of this module"
                              : cudaGetErrorString(e);
        return pl_cu_errorf(PL_ERR_UNSUPPORTED, "cuda: no usable CUDA device (%s); 'pocketllm devices' shows what "
                                                "this machine has", why);
    }
    cudaDeviceProp prop;
    if ((e = cudaGetDeviceProperties(&prop, 0)) != cudaSuccess)
        return pl_cu_errorf(PL_ERR_UNSUPPORTED, "cuda: cannot query device 0: %s", cudaGetErrorString(e));
    const int cc = prop.major * 10 + prop.minor;
    if (cc < 75)
        return pl_cu_errorf(PL_ERR_UNSUPPORTED, "cuda: %s is sm_%d; the CUDA backend needs sm_75 (Turing) or newer",
                            prop.name, cc);
    if ((e = cudaSetDevice(0)) != cudaSuccess)
        return pl_cu_errorf(PL_ERR_UNSUPPORTED, "cuda: cannot use device 0: %s", cudaGetErrorString(e));
    pl_cu_ctx *cu = (pl_cu_ctx *)calloc(1, sizeof *cu);
    if (!cu) return pl_cu_errorf(PL_ERR_NO_MEMORY, "cuda: cannot allocate a context");
    cu->device = 0;
    cu->cc = cc;
    cu->n_sm = prop.multiProcessorCount;
    cu->mem_total = prop.totalGlobalMem;
    snprintf(cu->name, sizeof cu->name, "%s", prop.name);
    CTX_CHECK(cudaStreamCreateWithFlags(&cu->stream, cudaStreamNonBlocking));
    CTX_CHECK(cudaMalloc((void **)&cu->d_status, sizeof(unsigned int)));
    CTX_CHECK(cudaMemsetAsync(cu->d_status, 0, sizeof(unsigned int), cu->stream));
    CTX_CHECK(cudaHostAlloc((void **)&cu->h_status, sizeof(unsigned int), cudaHostAllocDefault));
    *cu->h_status = 0;
    for (int i = 0; i < 2; i++) {
        CTX_CHECK(cudaHostAlloc((void **)&cu->stage[i], PL_CU_STAGE_BYTES, cudaHostAllocDefault));
        CTX_CHECK(cudaEventCreateWithFlags(&cu->stage_ev[i], cudaEventDisableTiming));
    }
    k_noop<<<1, 1, 0, cu->stream>>>(cu->d_status);
    e = cudaGetLastError();
    if (e == cudaSuccess) e = cudaStreamSynchronize(cu->stream);
    if (e != cudaSuccess) {
        pl_status st = pl_cu_errorf(PL_ERR_UNSUPPORTED,
                                    "cuda: the module cannot run on %s (sm_%d): %s; it was built for %s — rebuild with "
                                    "-DPL_CUDA_ARCHS=%d",
                                    cu->name, cc, cudaGetErrorString(e), PL_CUDA_ARCHS_STR, cc);
        (void)cudaGetLastError();
        cu_ctx_free(&cu->base);
        return st;
    }
    /* The IQ codebooks of the decoding kernels (one copy per translation unit). */
    CTX_CHECK(pl_cu_tables_upload_ops());
    CTX_CHECK(pl_cu_tables_upload_gemv());
    CTX_CHECK(pl_cu_tables_upload_gemm());
    /* Pageable copies may still be in flight when cudaMemcpyToSymbol returns,
     * on the legacy stream our non-blocking stream does not wait for. */
    CTX_CHECK(cudaDeviceSynchronize());
    const char *gr = getenv("PL_CUDA_GRAPHS");
    cu->graphs = !(gr && !strcmp(gr, "0"));
    pl_cu_n_sm = cu->n_sm;
    cu->base.backend = NULL;   /* the loader points it at the library's `cuda` backend */
    cu->base.n_threads = 1;
    cu->base.pool = NULL;
    *out = &cu->base;
    return PL_OK;
}

static pl_status cu_device_query(int *n_devices, char *detail, size_t cap) {
    int n = 0;
    cudaError_t e = cudaGetDeviceCount(&n);
    if (e != cudaSuccess) {
        (void)cudaGetLastError();
        *n_devices = 0;
        snprintf(detail, cap, "%s",
                 e == cudaErrorInsufficientDriver ? "no NVIDIA driver, or one older than this module's CUDA runtime"
                                                  : cudaGetErrorString(e));
        return PL_OK;
    }
    *n_devices = n;
    if (n == 0) {
        snprintf(detail, cap, "the driver reports no GPU");
        return PL_OK;
    }
    cudaDeviceProp prop;
    if (cudaGetDeviceProperties(&prop, 0) != cudaSuccess) {
        (void)cudaGetLastError();
        snprintf(detail, cap, "%d device(s); device 0 cannot be queried", n);
        return PL_OK;
    }
    int drv = 0, rt = 0;
    cudaDriverGetVersion(&drv);
    cudaRuntimeGetVersion(&rt);
    snprintf(detail, cap, "%s, sm_%d%d, %d SMs, %.1f GiB; driver %d.%d, runtime %d.%d", prop.name, prop.major,
             prop.minor, prop.multiProcessorCount, (double)prop.totalGlobalMem / 1073741824.0, drv / 1000,
             (drv % 1000) / 10, rt / 1000, (rt % 1000) / 10);
    return PL_OK;
}

/* ---- bandwidth ------------------------------------------------------------------------------------ */

__global__ void k_read(const uint4 *__restrict__ p, size_t n, unsigned int *sink) {
    uint32_t acc = 0;
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x) {
        const uint4 v = p[i];
        acc ^= v.x ^ v.y ^ v.z ^ v.w;
    }
    if (acc == 0x9e3779b9u) atomicAdd(sink, 1u);   /* keeps the loads alive */
}

#define BW_CHECK(call)                                                                         \
    do {                                                                                       \
        cudaError_t e_ = (call);                                                               \
        if (e_ != cudaSuccess) {                                                               \
            st = pl_cu_errorf(PL_ERR_INTERNAL, "cuda: %s: %s", #call, cudaGetErrorString(e_)); \
            goto done;                                                                         \
        }                                                                                      \
    } while (0)

static pl_status cu_bandwidth(pl_exec_ctx *ctx, size_t bytes, pl_cuda_bandwidth *out) {
    pl_cu_ctx *cu = pl_cu(ctx);
    pl_status st = PL_OK;
    memset(out, 0, sizeof *out);
    bytes &= ~(size_t)4095;
    if (bytes < (1u << 20)) bytes = 1u << 20;
    out->bytes = bytes;
    void *da = NULL, *db = NULL, *hp = NULL, *hq = NULL;
    cudaEvent_t e0 = NULL, e1 = NULL;
    float ms = 0;
    BW_CHECK(cudaMalloc(&da, bytes));
    BW_CHECK(cudaMalloc(&db, bytes));
    BW_CHECK(cudaHostAlloc(&hp, bytes, cudaHostAllocDefault));
    hq = malloc(bytes);
    if (!hq) {
        st = pl_cu_errorf(PL_ERR_NO_MEMORY, "cuda: bandwidth: no host memory");
        goto done;
    }
    memset(hq, 1, bytes);
    memset(hp, 2, bytes);
    BW_CHECK(cudaEventCreate(&e0));
    BW_CHECK(cudaEventCreate(&e1));
    BW_CHECK(cudaMemsetAsync(da, 3, bytes, cu->stream));
    {
        /* Best of 5 after one warm-up, for each copy kind. */
        for (int kind = 0; kind < 5; kind++) {
            float best = 1e30f;
            for (int rep = 0; rep < 6; rep++) {
                BW_CHECK(cudaEventRecord(e0, cu->stream));
                switch (kind) {
                case 0: BW_CHECK(cudaMemcpyAsync(da, hp, bytes, cudaMemcpyHostToDevice, cu->stream)); break;
                case 1: BW_CHECK(cudaMemcpyAsync(hp, da, bytes, cudaMemcpyDeviceToHost, cu->stream)); break;
                case 2: BW_CHECK(cudaMemcpyAsync(da, hq, bytes, cudaMemcpyHostToDevice, cu->stream)); break;
                case 3: BW_CHECK(cudaMemcpyAsync(db, da, bytes, cudaMemcpyDeviceToDevice, cu->stream)); break;
                default:
                    k_read<<<cu->n_sm * 8, 512, 0, cu->stream>>>((const uint4 *)da, bytes / 16, cu->d_status);
                    BW_CHECK(cudaGetLastError());
                }
                BW_CHECK(cudaEventRecord(e1, cu->stream));
                BW_CHECK(cudaEventSynchronize(e1));
                BW_CHECK(cudaEventElapsedTime(&ms, e0, e1));
                if (rep > 0 && ms < best) best = ms;
            }
            const double gbs = (double)bytes / (best * 1e-3) / 1e9;
            switch (kind) {
            case 0: out->h2d_pinned = gbs; break;
            case 1: out->d2h_pinned = gbs; break;
            case 2: out->h2d_pageable = gbs; break;
            case 3: out->d2d_copy = 2.0 * gbs; break;
            default: out->d2d_read = gbs;
            }
        }
        BW_CHECK(cudaMemsetAsync(cu->d_status, 0, sizeof(unsigned int), cu->stream));
        BW_CHECK(cudaStreamSynchronize(cu->stream));
    }
done:
    if (e0) cudaEventDestroy(e0);
    if (e1) cudaEventDestroy(e1);
    if (da) cudaFree(da);
    if (db) cudaFree(db);
    if (hp) cudaFreeHost(hp);
    free(hq);
    return st;
}

/* ---- the module ------------------------------------------------------------------------------------ */

static const pl_device_ops cu_device_ops = {
    cu_mem_info, cu_buffer_alloc, cu_buffer_free, cu_upload, cu_download, cu_synchronize,
};

static const pl_cuda_module cu_module = {
    PL_CUDA_MODULE_ABI,
    PL_CUDA_LAYOUT_HERE,
    "CUDA " PL_STR_(__CUDACC_VER_MAJOR__) "." PL_STR_(__CUDACC_VER_MINOR__) ", " PL_CUDA_ARCHS_STR,
    cu_kernels,
    sizeof cu_kernels / sizeof cu_kernels[0],
    cu_device_query,
    cu_ctx_create,
    cu_ctx_free,
    cu_run,
    cu_work_size,
    &cu_device_ops,
    cu_graph_execute,
    cu_bandwidth,
};

extern "C" __attribute__((visibility("default"))) pl_status pl_cuda_module_init(const pl_cuda_host_api *host,
                                                                                const pl_cuda_module **out) {
    if (!out) return PL_ERR_INVALID_ARG;
    *out = NULL;
    if (!host || host->abi != PL_CUDA_MODULE_ABI) return PL_ERR_UNSUPPORTED;   /* cannot even report: layouts differ */
    g_host = host;
    const pl_cuda_layout here = PL_CUDA_LAYOUT_HERE;
    if (!pl_cuda_layout_equal(&host->layout, &here))
        return pl_cu_errorf(PL_ERR_UNSUPPORTED, "the library's struct layouts differ from the module's");
    *out = &cu_module;
    return PL_OK;
}
