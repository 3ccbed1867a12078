/*
 * The kernel ABI: tensor descriptors, the op set with one schema per op, graph
 * nodes, and the per-backend kernel tables the executor dispatches through.
 *
 * Conventions (GGML's): ne[0] is the innermost (fastest-varying) dimension, so
 * a weight matrix W of shape [ne0 = K (inputs), ne1 = N (outputs)] stores one
 * output row of K elements contiguously; nb[i] are byte strides. A row of a
 * quantized type is a whole number of blocks.
 *
 * There is exactly one device per process: no rank, no collective, no second
 * device anywhere in this ABI.
 */
#ifndef PL_KERNELS_ABI_H
#define PL_KERNELS_ABI_H
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include "pocketllm.h"
#include "kernels/dtype.h"

#define PL_MAX_DIMS 4
#define PL_MAX_SRC 6
#define PL_MAX_PARAMS 8

typedef enum pl_buffer_kind {
    PL_BUF_HOST = 0,   /* ordinary host memory (inputs such as token ids) */
    PL_BUF_WEIGHTS,    /* model weights (for cpu/ref: the mmapped file) */
    PL_BUF_KV,         /* the KV cache */
    PL_BUF_SCRATCH,    /* activations, reused between forward calls */
} pl_buffer_kind;

typedef struct pl_tensor {
    pl_dtype dtype;
    int n_dims;
    int64_t ne[PL_MAX_DIMS];   /* elements per dimension; unused dims are 1 */
    size_t nb[PL_MAX_DIMS];    /* byte strides; nb[0] = block (or element) size */
    void *data;
    pl_buffer_kind buffer;
    char name[64];
} pl_tensor;

/*
 * The op set. Shapes below are written [ne0, ne1, ne2] (innermost first).
 * All activations are F32.
 */
typedef enum pl_op {
    /* dst[i, :] = decode(src0[src1[i], :])
     * src0: table [C, R], any readable dtype (weights or F32); src1: I32 ids [n];
     * dst: F32 [C, n]. */
    PL_OP_GET_ROWS = 0,
    /* dst = src0 / sqrt(mean(src0^2) + eps) * src1, per row.
     * src0: F32 [n, rows] (rows may be strided by nb[1]); src1: F32 [n];
     * dst: F32 [n, rows] contiguous. fparams[0] = eps. */
    PL_OP_RMS_NORM,
    /* dst[m, n] = sum_k src0[n, k] * src1[m, k]
     * src0: weights [K, N] in any weight dtype; src1: F32 [K, M] (rows strided
     * by nb[1]); dst: F32 [N, M] contiguous. */
    PL_OP_MATMUL,
    /* dst = src0 + src1; src0: F32 [n, rows]; src1: F32 [n, rows] or [n, 1]
     * (broadcast over rows); dst: F32 [n, rows]. */
    PL_OP_ADD,
    /* dst = silu(src0) * src1, silu(x) = x / (1 + exp(-x)).
     * src0, src1, dst: F32 [n, rows]. */
    PL_OP_SWIGLU,
    /* Rotary position embedding, as GGML's ggml_rope_ext.
     * src0: F32 [head_dim, n_head, n_tok] (may be strided); src1: I32 pos [n_tok];
     * dst: F32 same shape, contiguous. iparams[0] = n_rot (dims rotated, even,
     * <= head_dim; the rest are copied), iparams[1] = mode (0 = normal:
     * pairs (2i, 2i+1); 2 = NeoX: pairs (i, i + n_rot/2)).
     * fparams[0] = freq_base, fparams[1] = freq_scale.
     * theta_i = freq_scale * pos * freq_base^(-2i/n_rot), computed as GGML does:
     * t_0 = pos, t_{i+1} = t_i * powf(freq_base, -2/n_rot) (in float), and
     * theta_i = freq_scale * t_i (the rounding differs when freq_scale != 1).
     * src2 (optional, NULL = none): F32 freq_factors [n_rot/2], ggml_rope_ext's
     * `c` tensor (llama3's rope_freqs.weight): pair i then uses
     * theta_i = freq_scale * (t_i / freq_factors[i]), divided in float first as
     * GGML does. */
    PL_OP_ROPE,
    /* Writes new K or V rows into the cache.
     * src0: F32 [kv_dim, n_tok]; src1: I32 pos [n_tok]; src2: I32 seq [n_tok];
     * dst: the cache, F16 or F32 [kv_dim, n_ctx, n_seq].
     * dst[:, src1[t], src2[t]] = convert(src0[:, t]). Callers guarantee
     * 0 <= pos < n_ctx and 0 <= seq < n_seq. */
    PL_OP_KV_STORE,
    /* Causal grouped-query attention over the KV cache.
     * src0: Q F32 [head_dim, n_head, n_tok] (may be strided);
     * src1: K cache, src2: V cache, F16 or F32 [n_kv_head*head_dim, n_ctx, n_seq];
     * src3: I32 pos [n_tok]; src4: I32 seq [n_tok];
     * dst: F32 [head_dim*n_head, n_tok].
     * iparams[0] = n_kv_head. fparams[0] = scale (usually 1/sqrt(head_dim)).
     * Query head h reads KV head h / (n_head / n_kv_head). Token t attends to
     * cache positions 0..src3[t] of slot src4[t] (those rows must be written),
     * or with iparams[4] = window > 0 (sliding-window layers, gemma3) only to
     * positions j with src3[t] - j < window, as llama.cpp's standard SWA mask. */
    PL_OP_ATTENTION,
    /* ---- mixture of experts (qwen3moe) ----
     * Router top-k: the k experts of largest softmax probability per token.
     * src0: logits F32 [n_expert, n_tok] (rows may be strided);
     * dst: I32 ids [k, n_tok], in descending probability; equal
     * probabilities keep the lower expert index first (llama.cpp's argsort,
     * a std::sort, does so for up to 16 experts, where it is an insertion
     * sort; beyond that its order of ties is unspecified). iparams[0] = k.
     * Probabilities as GGML's soft_max (float exp of x - max, sum, scale). */
    PL_OP_MOE_TOPK,
    /* Expert-indexed matmul (GGML's mul_mat_id):
     * dst[:, j, t] = W[:, :, ids[j, t]] . x[:, j % n_x, t]
     * src0: weights [K, N, n_expert] in any weight dtype (experts at nb[2]);
     * src1: F32 [K, n_x, n_tok], n_x = 1 (one row shared by the k slots) or
     * k; src2: I32 ids [k, n_tok] (each in 0..n_expert-1, checked at run
     * time); dst: F32 [N, k, n_tok] contiguous. */
    PL_OP_MATMUL_ID,
    /* Weighted sum of the k expert outputs of each token:
     * dst[:, t] = sum_j w[j, t] * y[:, j, t], w[j, t] = p[ids[j, t], t],
     * p = softmax(logits[:, t]); iparams[0] = 1 renormalises the k weights
     * to sum 1 (the sum clamped below at 6.103515625e-5, as llama.cpp).
     * src0: y F32 [E, k, n_tok]; src1: logits F32 [n_expert, n_tok];
     * src2: I32 ids [k, n_tok]; dst: F32 [E, n_tok] contiguous. */
    PL_OP_MOE_COMBINE,
    /* dst = gelu(src0) * src1, gelu as GGML's CPU backend computes it
     * (GGML_GELU_FP16): g <= -10 gives 0, g >= 10 gives g; otherwise g is
     * rounded to f16, gelu_tanh(g) = 0.5*g*(1 + tanhf(sqrt(2/pi)*g*(1 +
     * 0.044715*g*g))) is computed in float on that value and rounded to f16
     * again (GGML's 64K-entry table). src0 gate, src1 up, dst: F32 [n, rows]
     * (gemma3's GeGLU FFN). */
    PL_OP_GEGLU,
    /* dst = src0 * fparams[0] (GGML's ggml_scale). src0: F32 [n, rows...]
     * (rows may be strided); dst: F32 same shape, contiguous. */
    PL_OP_SCALE,
    /* Soft-capping: dst = tanhf(src0 * (1.0f / c)) * c, c = fparams[0] > 0,
     * as GGML's scale, tanh, scale sequence (gemma's logit soft-capping).
     * src0: F32 [n, rows...] (rows may be strided); dst: F32 same shape. */
    PL_OP_SOFTCAP,
    PL_OP_COUNT
} pl_op;

typedef struct pl_node {
    pl_op op;
    pl_tensor *src[PL_MAX_SRC];
    pl_tensor *dst;
    float fparams[PL_MAX_PARAMS];
    int32_t iparams[PL_MAX_PARAMS];
} pl_node;

/* ---- op schemas ------------------------------------------------------------*/

#define PL_DTMASK(t) (UINT64_C(1) << (t))
#define PL_DTMASK_F32 PL_DTMASK(PL_F32)
#define PL_DTMASK_I32 PL_DTMASK(PL_I32)
/* KV cache dtypes: f32/f16, and q8_0 / q4_0 (--cache-type-k/-v, as llama.cpp's). */
#define PL_DTMASK_CACHE (PL_DTMASK(PL_F32) | PL_DTMASK(PL_F16) | PL_DTMASK(PL_Q8_0) | PL_DTMASK(PL_Q4_0))

typedef struct pl_op_schema {
    const char *name;              /* "matmul", "rms_norm", ... */
    const char *summary;           /* one line: what it computes */
    int n_src;
    /* Bit i set: input i may be NULL (absent); the kernels then use its
     * documented default. Inputs 0..n_src-1 are required otherwise. */
    uint32_t optional_src;
    const char *src_names[PL_MAX_SRC];
    uint64_t src_dtypes[PL_MAX_SRC];  /* allowed dtypes per input (bit mask) */
    uint64_t dst_dtypes;
    /* Which operand's dtype selects the kernel: 0..n_src-1, or -1 for dst. */
    int key_operand;
    const char *shape_rule;        /* human-readable shape contract */
    const char *params;            /* human-readable parameter list */
} pl_op_schema;

const pl_op_schema *pl_op_schema_get(pl_op op);
const char *pl_op_name(pl_op op);
bool pl_op_from_name(const char *name, pl_op *out);
/* The dtype that selects the kernel for this node (see key_operand). */
pl_dtype pl_node_key_dtype(const pl_node *node);
/* Checks the node against its schema (dtypes and shapes). */
pl_status pl_node_validate(const pl_node *node);

/* ---- backends and dispatch ------------------------------------------------*/

struct pl_threadpool;
struct pl_graph;
struct pl_device_ops;   /* kernels/device.h */

/* What a kernel runs with. One per loaded model. */
typedef struct pl_exec_ctx {
    const struct pl_backend *backend;
    int n_threads;
    struct pl_threadpool *pool;    /* NULL for single-threaded backends */
    void *work;                    /* per-op scratch, sized by the planner */
    size_t work_size;
    /* Optional observer called by pl_graph_execute after each node has run,
     * with the node (its inputs and output are valid then). NULL = none.
     * Used to collect activation statistics (quant/imatrix.c). */
    void (*on_node)(void *user, const pl_node *node);
    void *on_node_user;
} pl_exec_ctx;

typedef pl_status (*pl_kernel_fn)(pl_exec_ctx *ctx, const pl_node *node);
/* Scratch bytes a kernel needs for this node (e.g. quantized activations). */
typedef size_t (*pl_kernel_work_fn)(const pl_node *node, int n_threads);

typedef struct pl_kernel {
    pl_op op;
    pl_dtype key;                  /* dtype of the schema's key operand */
    pl_kernel_fn run;
    pl_kernel_work_fn work_size;   /* NULL = needs none */
} pl_kernel;

typedef struct pl_backend {
    const char *name;              /* "ref", "cpu", ... */
    const char *summary;
    const pl_kernel *kernels;      /* the dispatch table: the only source of truth */
    size_t n_kernels;
    pl_status (*ctx_create)(int n_threads, pl_exec_ctx **out);
    void (*ctx_free)(pl_exec_ctx *ctx);
    /* Introspection. awaits: NULL for an implemented backend; for a declared
     * one, the runtime it waits for. probe: is the device on this machine?
     * Writes a short detail ("avx2 fma f16c", "no /dev/nvidia0"). It may only
     * look at the filesystem or CPUID: it loads no library and starts no
     * driver. NULL = always available (host memory). */
    const char *awaits;
    bool (*probe)(char *detail, size_t cap);
    /* Optional load-time weight preparation (both NULL = none). A backend may
     * keep its own copy of a matmul weight in a layout its kernels prefer
     * (rows interleaved for SIMD, unpacked scales). weight_prepare_size: the
     * bytes the copy of w would take on this machine (0 = w is used as it
     * is). weight_prepare: makes the copies of ws[0..n) (the matmul weights
     * of a model, each with prepare_size > 0), owned by ctx and freed by
     * ctx_free. It calls copied(user, p, bytes) (if not NULL; possibly from
     * its worker threads, concurrently) as soon as the bytes [p, p + bytes)
     * of an original have been copied, so the caller can drop those pages
     * while the rest is still being copied (peak memory: the copies plus a
     * slice of the originals, not both sets). Kernels
     * find a copy by the tensor's data pointer; the tensors themselves are
     * unchanged and stay valid, so other ops (get_rows on tied embeddings)
     * keep reading them. Called by the model loader after the memory plan,
     * before the first forward pass. */
    size_t (*weight_prepare_size)(const pl_exec_ctx *ctx, const pl_tensor *w);
    pl_status (*weight_prepare)(pl_exec_ctx *ctx, const pl_tensor *const *ws, int n,
                                void (*copied)(void *user, const void *p, size_t bytes), void *user);
    /* Optional: runs every node of g in order in place of the executor's
     * per-node loop (NULL = use the loop), so a backend can fuse adjacent
     * nodes and save synchronizations. Only used when no per-node observer is
     * set (ctx->on_node == NULL). It must give the results the per-node loop
     * gives for every tensor that a later node reads or the graph keeps. */
    pl_status (*graph_execute)(pl_exec_ctx *ctx, const struct pl_graph *g);
    /* Device memory (kernels/device.h). NULL for backends that run on host
     * memory (ref, cpu). Non-NULL (cuda): every tensor its kernels touch
     * lives in memory from device->buffer_alloc; the engine checks the plan
     * against device->mem_info before allocating, uploads the weights once
     * and the inputs per forward call, and downloads the logits
     * (engine/model.c, engine/forward.c). */
    const struct pl_device_ops *device;
} pl_backend;

/* All compiled-in backends, in preference order (NULL-terminated). */
const pl_backend *const *pl_backends(void);
const pl_backend *pl_backend_find(const char *name);
const pl_kernel *pl_backend_lookup(const pl_backend *b, pl_op op, pl_dtype key);
bool pl_backend_supports(const pl_backend *b, pl_op op, pl_dtype key);

/* ---- tensor helpers --------------------------------------------------------*/

/* Fills ne/nb for a contiguous tensor of the given dims (ne[0] innermost). */
void pl_tensor_init(pl_tensor *t, pl_dtype dtype, int n_dims, const int64_t *ne, void *data);
int64_t pl_tensor_nelements(const pl_tensor *t);
int64_t pl_tensor_nrows(const pl_tensor *t);   /* ne1*ne2*ne3 */
size_t pl_tensor_nbytes(const pl_tensor *t);   /* of a contiguous tensor */
bool pl_tensor_is_contiguous(const pl_tensor *t);
/* Pointer to row (i1, i2, i3). */
static inline void *pl_tensor_row(const pl_tensor *t, int64_t i1, int64_t i2, int64_t i3) {
    return (char *)t->data + i1 * t->nb[1] + i2 * t->nb[2] + i3 * t->nb[3];
}

#endif
