/*
 * Device memory for backends whose kernels cannot read host memory (cuda).
 *
 * The kernel ABI (kernels/abi.h) passes tensors as plain pointers. For the
 * host backends (ref, cpu) those are host pointers and nothing here applies.
 * A device backend publishes a pl_device_ops table; then EVERY pointer a
 * kernel of that backend sees (weights, KV cache, scratch, inputs, the work
 * buffer) must come from its buffer_alloc, and the host moves data in and out
 * only through upload / download.
 *
 * Who calls what (engine/model.c, engine/forward.c, engine/fit.c):
 *   load:     mem_info -> fit check (before anything large is allocated)
 *             buffer_alloc(WEIGHTS) + upload of each weight, once
 *             buffer_alloc(KV), buffer_alloc(SCRATCH) for scratch, work, inputs
 *   forward:  upload(token ids, positions, slots, output rows)
 *             the graph (pl_graph_execute; cuda sets pl_backend.graph_execute)
 *             download(logits)            (waits, then reports device errors)
 *   free:     buffer_free of each buffer, then the backend's ctx_free
 *
 * Ordering: every call on one context is ordered after the previous ones
 * (one device stream per context). upload returns once the source may be
 * reused; download returns once the destination holds the data. Kernels run
 * asynchronously: an error a kernel detects on the device (an id outside a
 * table, a position outside the cache) is reported by the next download or
 * synchronize, as PL_ERR_INVALID_ARG with a message naming the op.
 *
 * A backend publishes its table in pl_backend.device (kernels/abi.h; NULL =
 * host memory).
 */
#ifndef PL_KERNELS_DEVICE_H
#define PL_KERNELS_DEVICE_H
#include <stddef.h>
#include <stdint.h>
#include "kernels/abi.h"

typedef struct pl_device_ops {
    /* Free and total bytes of device memory, and a one-line description of
     * the device ("NVIDIA H200, sm_90, 132 SMs, 139.8 GiB"). */
    pl_status (*mem_info)(pl_exec_ctx *ctx, uint64_t *free_bytes, uint64_t *total_bytes, char *desc, size_t cap);
    /* A device allocation of size bytes, aligned to at least 256 bytes.
     * kind says what it holds (allocators may treat the KV cache or weights
     * differently); KV buffers are zero-filled. Fails with
     * PL_ERR_DOES_NOT_FIT when the device is out of memory. */
    pl_status (*buffer_alloc)(pl_exec_ctx *ctx, pl_buffer_kind kind, size_t size, void **out);
    void (*buffer_free)(pl_exec_ctx *ctx, void *ptr);
    /* Host -> device (dst is device memory from buffer_alloc, or inside it). */
    pl_status (*upload)(pl_exec_ctx *ctx, void *dst, const void *src, size_t size);
    /* Device -> host. Waits for everything queued before it. */
    pl_status (*download)(pl_exec_ctx *ctx, void *dst, const void *src, size_t size);
    /* Waits for all queued work; reports device-side errors. */
    pl_status (*synchronize)(pl_exec_ctx *ctx);
} pl_device_ops;

#endif
