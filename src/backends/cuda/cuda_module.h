/*
 * The boundary between the library and the CUDA module.
 *
 * libpocketllm never links a CUDA library. The CUDA backend lives in a
 * separately built shared module, libpocketllm-cuda.so (CUDA runtime linked
 * statically into it), which the loader in the library (cuda_loader.c)
 * dlopen()s the first time a `cuda` context is created, i.e. only when
 * `--device cuda` is asked for. `pocketllm devices`, `backends` and `ops`
 * never load it: the kernel list comes from cuda_table.h, compiled into both.
 *
 * The module exports exactly one symbol, PL_CUDA_MODULE_ENTRY:
 *
 *     pl_status pl_cuda_module_init(const pl_cuda_host_api *host,
 *                                   const pl_cuda_module **out);
 *
 * host gives the module the library's error reporting (the module cannot call
 * into the library: the library's symbols are hidden) and the layout of the
 * shared structs as the library was compiled; the module refuses a library
 * built from other headers, and the library refuses a module whose ABI
 * version, layout or kernel list differs. Initialising the module touches no
 * GPU: the CUDA runtime starts on the first ctx_create or device_query.
 */
#ifndef PL_BACKENDS_CUDA_MODULE_H
#define PL_BACKENDS_CUDA_MODULE_H
#include <stddef.h>
#include <stdint.h>
#include "kernels/abi.h"
#include "kernels/device.h"
#include "graph/graph.h"

#ifdef __cplusplus
extern "C" {
#endif

#define PL_CUDA_MODULE_ABI 1u
#define PL_CUDA_MODULE_FILE "libpocketllm-cuda.so"
#define PL_CUDA_MODULE_ENTRY "pl_cuda_module_init"
/* Environment variable naming the module file explicitly. */
#define PL_CUDA_MODULE_ENV "PL_CUDA_MODULE"

/* Sizes and offsets of every struct both sides read. All uint32_t: no
 * padding, so two layouts compare field by field. */
typedef struct pl_cuda_layout {
    uint32_t abi;
    uint32_t tensor_size, tensor_off_data, tensor_off_nb, tensor_off_ne;
    uint32_t node_size, node_off_src, node_off_dst, node_off_fparams, node_off_iparams;
    uint32_t ctx_size, ctx_off_work, ctx_off_on_node;
    uint32_t graph_size, graph_off_nodes, graph_off_n_nodes;
    uint32_t devops_size;
} pl_cuda_layout;

#define PL_CUDA_LAYOUT_HERE                                                                              \
    {                                                                                                    \
        PL_CUDA_MODULE_ABI, (uint32_t)sizeof(pl_tensor), (uint32_t)offsetof(pl_tensor, data),            \
            (uint32_t)offsetof(pl_tensor, nb), (uint32_t)offsetof(pl_tensor, ne),                        \
            (uint32_t)sizeof(pl_node), (uint32_t)offsetof(pl_node, src), (uint32_t)offsetof(pl_node, dst), \
            (uint32_t)offsetof(pl_node, fparams), (uint32_t)offsetof(pl_node, iparams),                  \
            (uint32_t)sizeof(pl_exec_ctx), (uint32_t)offsetof(pl_exec_ctx, work),                        \
            (uint32_t)offsetof(pl_exec_ctx, on_node), (uint32_t)sizeof(pl_graph),                        \
            (uint32_t)offsetof(pl_graph, nodes), (uint32_t)offsetof(pl_graph, n_nodes),                  \
            (uint32_t)sizeof(pl_device_ops)                                                              \
    }

static inline int pl_cuda_layout_equal(const pl_cuda_layout *a, const pl_cuda_layout *b) {
    const uint32_t *x = (const uint32_t *)a, *y = (const uint32_t *)b;
    for (size_t i = 0; i < sizeof(pl_cuda_layout) / sizeof(uint32_t); i++)
        if (x[i] != y[i]) return 0;
    return 1;
}

/* What the library lends the module. */
typedef struct pl_cuda_host_api {
    uint32_t abi;                 /* PL_CUDA_MODULE_ABI */
    pl_cuda_layout layout;        /* PL_CUDA_LAYOUT_HERE, as the library was compiled */
    /* pl_errorf: records the thread-local message pl_last_error() returns. */
    pl_status (*errorf)(pl_status st, const char *fmt, ...);
} pl_cuda_host_api;

typedef struct pl_cuda_kernel_key {
    int32_t op;                   /* pl_op */
    int32_t key;                  /* pl_dtype */
} pl_cuda_kernel_key;

/* Copy bandwidths, GB/s (1e9 bytes/s), as `test_cuda --bandwidth` prints. */
typedef struct pl_cuda_bandwidth {
    double h2d_pinned, d2h_pinned;   /* PCIe / NVLink-C2C, pinned host memory */
    double h2d_pageable;             /* what loading weights from a mapping sees */
    double d2d_copy;                 /* cudaMemcpy device to device, bytes read + written */
    double d2d_read;                 /* a kernel streaming bytes in (the GEMV ceiling) */
    size_t bytes;                    /* buffer size used */
} pl_cuda_bandwidth;

typedef struct pl_cuda_module {
    uint32_t abi;                 /* PL_CUDA_MODULE_ABI */
    pl_cuda_layout layout;        /* as the module was compiled */
    const char *build;            /* "CUDA 13.0, sm_75 sm_80 ... + PTX" */
    const pl_cuda_kernel_key *kernels;   /* PL_CUDA_KERNELS, in that order */
    size_t n_kernels;

    /* Starts the CUDA runtime and describes device 0: n_devices = 0 and a
     * reason in detail when there is none (no driver, no GPU, driver too old). */
    pl_status (*device_query)(int *n_devices, char *detail, size_t cap);
    /* The context: a pl_exec_ctx at the start of a larger struct. n_threads
     * is ignored (reported as 1). Fails with PL_ERR_UNSUPPORTED and a message
     * when no usable device exists. */
    pl_status (*ctx_create)(int n_threads, pl_exec_ctx **out);
    void (*ctx_free)(pl_exec_ctx *ctx);
    /* Runs one node (any (op, key) of kernels): queued on the context's
     * stream; every tensor must be device memory. */
    pl_status (*run)(pl_exec_ctx *ctx, const pl_node *node);
    /* Work-buffer bytes run() needs for this node (0 = none). Monotone in the
     * number of tokens, so the planner's largest graph bounds later ones. */
    size_t (*work_size)(const pl_node *node, int n_threads);
    const pl_device_ops *device;
    /* Runs every node of g in order (pl_backend.graph_execute): decode-sized
     * graphs are captured once as CUDA graphs and replayed. Refuses a context
     * with a per-node observer (on_node), which would read device memory. */
    pl_status (*graph_execute)(pl_exec_ctx *ctx, const struct pl_graph *g);
    /* Measures copy bandwidths with buffers of about `bytes`. */
    pl_status (*bandwidth)(pl_exec_ctx *ctx, size_t bytes, pl_cuda_bandwidth *out);
} pl_cuda_module;

typedef pl_status (*pl_cuda_module_init_fn)(const pl_cuda_host_api *host, const pl_cuda_module **out);

/* ---- the library side (cuda_loader.c) -------------------------------------- */
#ifndef __CUDACC__
/* The `cuda` backend (listed by kernels/abi.c): the kernel table of
 * cuda_table.h, dispatching into the module, which ctx_create loads; its
 * .device forwards the module's device ops. */
extern const pl_backend pl_backend_cuda;
/* Loads the module once (thread-safe). On failure the same error is
 * returned, with the same message, on every later call. */
pl_status pl_cuda_load(const pl_cuda_module **out);
/* The module file the loader would open, found by looking at the filesystem
 * only: $PL_CUDA_MODULE, else next to the library / executable holding the
 * loader, or in ../lib from there. Returns false (and the first candidate
 * path tried, for messages) when none exists. */
bool pl_cuda_module_path(char *path, size_t cap);
/* The `cuda` backend's graph_execute (forwarding into the module). */
pl_status pl_cuda_graph_execute(pl_exec_ctx *ctx, const struct pl_graph *g);
#endif

#ifdef __cplusplus
}
#endif
#endif
