/*
 * The op schemas (what `pocketllm ops` prints), node validation against them,
 * backend registry and dispatch, and tensor helpers. See kernels/abi.h.
 */
#include "kernels/abi.h"
#include "core/status.h"
#include "quant/quant.h"
#include <math.h>
#include <stdio.h>
#include <string.h>

/* The backends compiled in (each defined in src/backends/<name>/; cuda's
 * kernels live in libpocketllm-cuda.so, which backends/cuda/cuda_loader.c
 * dlopen()s on the first cuda context, so listing it loads nothing), and the
 * declared ones (src/backends/declared.c: no kernels yet, listed so that
 * `pocketllm backends` / `devices` show them). */
extern const pl_backend pl_backend_ref;
extern const pl_backend pl_backend_cpu;
extern const pl_backend pl_backend_cuda;
extern const pl_backend pl_backend_ascend;
extern const pl_backend pl_backend_horizon;
extern const pl_backend pl_backend_qnn;
extern const pl_backend pl_backend_mps;

/* Every dtype GET_ROWS / MATMUL accept as a table / weight: exactly the types
 * pl_dequantize_row decodes (quant/quant.h's PL_DEQUANT_TYPES). */
#define PL_DTMASK_OF_(t, fn) | PL_DTMASK(t)
#define PL_DTMASK_WEIGHTS (UINT64_C(0) PL_DEQUANT_TYPES(PL_DTMASK_OF_))

/* ---- schemas ---------------------------------------------------------------*/

static const pl_op_schema pl_schemas[PL_OP_COUNT] = {
    [PL_OP_GET_ROWS] = {
        .name = "get_rows",
        .summary = "dst[:, i] = decode(table[:, ids[i]]): gather rows of a table (token embedding), decoded to f32",
        .n_src = 2,
        .src_names = {"table", "ids"},
        .src_dtypes = {PL_DTMASK_WEIGHTS, PL_DTMASK_I32},
        .dst_dtypes = PL_DTMASK_F32,
        .key_operand = 0,
        .shape_rule = "table [C, R] (C a multiple of the table's block size; rows at stride nb[1]); "
                      "ids [n] (each in 0..R-1, checked at run time); dst [C, n] contiguous",
        .params = "none",
    },
    [PL_OP_RMS_NORM] = {
        .name = "rms_norm",
        .summary = "dst = x / sqrt(mean(x^2) + eps) * w, per row of x",
        .n_src = 2,
        .src_names = {"x", "w"},
        .src_dtypes = {PL_DTMASK_F32, PL_DTMASK_F32},
        .dst_dtypes = PL_DTMASK_F32,
        .key_operand = 0,
        .shape_rule = "x [n, d1, d2, d3] (rows may be strided by nb[1..3]); w [n] contiguous; "
                      "dst same shape as x, contiguous",
        .params = "fparams[0] = eps (finite, >= 0)",
    },
    [PL_OP_MATMUL] = {
        .name = "matmul",
        .summary = "dst[m, n] = sum_k W[n, k] * x[m, k]: weight matrix times activation rows",
        .n_src = 2,
        .src_names = {"W", "x"},
        .src_dtypes = {PL_DTMASK_WEIGHTS, PL_DTMASK_F32},
        .dst_dtypes = PL_DTMASK_F32,
        .key_operand = 0,
        .shape_rule = "W [K, N] (K a multiple of W's block size; rows at stride nb[1]); "
                      "x [K, M] (rows may be strided by nb[1]); dst [N, M] contiguous",
        .params = "none",
    },
    [PL_OP_ADD] = {
        .name = "add",
        .summary = "dst = a + b, b broadcast over rows when it has one row",
        .n_src = 2,
        .src_names = {"a", "b"},
        .src_dtypes = {PL_DTMASK_F32, PL_DTMASK_F32},
        .dst_dtypes = PL_DTMASK_F32,
        .key_operand = 0,
        .shape_rule = "a [n, d1, d2, d3]; b the same shape or [n] (one row); rows of a and b may be "
                      "strided; dst same shape as a, contiguous",
        .params = "none",
    },
    [PL_OP_SWIGLU] = {
        .name = "swiglu",
        .summary = "dst = silu(gate) * up, silu(x) = x / (1 + exp(-x))",
        .n_src = 2,
        .src_names = {"gate", "up"},
        .src_dtypes = {PL_DTMASK_F32, PL_DTMASK_F32},
        .dst_dtypes = PL_DTMASK_F32,
        .key_operand = 0,
        .shape_rule = "gate, up [n, d1, d2, d3], equal shapes (rows may be strided); "
                      "dst same shape, contiguous",
        .params = "none",
    },
    [PL_OP_ROPE] = {
        .name = "rope",
        .summary = "rotary position embedding (GGML's ggml_rope_ext, no YaRN): rotates pairs of each "
                   "head by pos * freq_scale * freq_base^(-2i/n_rot) / freq_factors[i]",
        .n_src = 3,
        .optional_src = 1u << 2,
        .src_names = {"x", "pos", "freq_factors"},
        .src_dtypes = {PL_DTMASK_F32, PL_DTMASK_I32, PL_DTMASK_F32},
        .dst_dtypes = PL_DTMASK_F32,
        .key_operand = 0,
        .shape_rule = "x [head_dim, n_head, n_tok] (may be strided by nb[1], nb[2]); pos [n_tok]; "
                      "freq_factors (optional, absent = all 1) [n_rot/2], contiguous; "
                      "dst same shape as x, contiguous; dims n_rot..head_dim-1 are copied",
        .params = "iparams[0] = n_rot (even, 2..head_dim); iparams[1] = mode (0 = normal, pairs "
                  "(2i, 2i+1); 2 = NeoX, pairs (i, i + n_rot/2)); fparams[0] = freq_base (> 0); "
                  "fparams[1] = freq_scale (> 0). theta_i = freq_scale * t_i with t_0 = pos, "
                  "t_{i+1} = t_i * powf(freq_base, -2/n_rot) in float, then cosf/sinf; with freq_factors "
                  "(llama3's rope_freqs.weight) theta_i = freq_scale * (t_i / freq_factors[i])",
    },
    [PL_OP_KV_STORE] = {
        .name = "kv_store",
        .summary = "cache[:, pos[t], seq[t]] = convert(rows[:, t]): write new K or V rows into the cache",
        .n_src = 3,
        .src_names = {"rows", "pos", "seq"},
        .src_dtypes = {PL_DTMASK_F32, PL_DTMASK_I32, PL_DTMASK_I32},
        .dst_dtypes = PL_DTMASK_CACHE,
        .key_operand = -1,
        .shape_rule = "rows [kv_dim, n_tok]; pos, seq [n_tok]; dst (the cache) [kv_dim, n_ctx, n_seq] "
                      "(rows at stride nb[1], slots at nb[2]); 0 <= pos < n_ctx and 0 <= seq < n_seq, "
                      "checked at run time; f16 caches round to nearest even; q8_0 / q4_0 caches quantize each "
                      "row as llama.cpp's set_rows does (q8_0: its AVX quantize_row_q8_0, q4_0: quantize_row_q4_0_ref), "
                      "kv_dim a multiple of 32",
        .params = "iparams[0] = rot: 0, or a power of two n >= 2 dividing head_dim: the row is first rotated by "
                  "the orthonormal Walsh-Hadamard matrix H_n in chunks of n (llama.cpp's attn_rot for quantized "
                  "caches); iparams[1] = head_dim (needed with rot, 0 otherwise)",
    },
    [PL_OP_ATTENTION] = {
        .name = "attention",
        .summary = "causal grouped-query attention over the KV cache: softmax(scale * q.k) . v over "
                   "cache positions 0..pos[t] of slot seq[t]",
        .n_src = 5,
        .src_names = {"q", "k_cache", "v_cache", "pos", "seq"},
        .src_dtypes = {PL_DTMASK_F32, PL_DTMASK_CACHE, PL_DTMASK_CACHE, PL_DTMASK_I32, PL_DTMASK_I32},
        .dst_dtypes = PL_DTMASK_F32,
        .key_operand = 1,
        .shape_rule = "q [head_dim, n_head, n_tok] (may be strided); k_cache, v_cache "
                      "[n_kv_head*head_dim, n_ctx, n_seq], same shape (dtypes may differ: f16/f32 both, or "
                      "f16/q8_0/q4_0 each); pos, seq [n_tok]; "
                      "dst [head_dim*n_head, n_tok] contiguous; n_head a multiple of n_kv_head; "
                      "query head h reads KV head h / (n_head/n_kv_head); 0 <= pos < n_ctx and "
                      "0 <= seq < n_seq, checked at run time",
        .params = "iparams[0] = n_kv_head (>= 1); iparams[1] = 1: batch-invariant numerics (every token "
                  "as in a decode step), 0: the backend may pick by batch size; fparams[0] = scale (finite; "
                  "usually 1/sqrt(head_dim)); iparams[2] = k_rot, iparams[3] = v_rot (0 or powers of two dividing "
                  "head_dim): q is rotated by H_{k_rot} (in chunks, as kv_store rotated K), the output by "
                  "H_{v_rot} (undoing V's rotation). A quantized K cache dots q rounded to q8_0 (llama.cpp's "
                  "vec_dot_type) with the K row; a quantized V row is decoded to f32 and summed in f32; "
                  "iparams[4] = window: 0 = every position 0..pos[t], > 0 = a sliding window: only positions j "
                  "with pos[t] - j < window (llama.cpp's LLAMA_SWA_TYPE_STANDARD mask)",
    },
    [PL_OP_MOE_TOPK] = {
        .name = "moe_topk",
        .summary = "ids[:, t] = the k experts of largest softmax(logits[:, t]), descending (ties: lower index first)",
        .n_src = 1,
        .src_names = {"logits"},
        .src_dtypes = {PL_DTMASK_F32},
        .dst_dtypes = PL_DTMASK_I32,
        .key_operand = 0,
        .shape_rule = "logits [n_expert, n_tok] (rows may be strided); dst I32 [k, n_tok] contiguous; "
                      "1 <= k <= n_expert",
        .params = "iparams[0] = k. Probabilities as GGML's soft_max in float (exp(x - max) / sum), so two "
                  "logits that round to one probability tie, and the lower index wins the tie",
    },
    [PL_OP_MATMUL_ID] = {
        .name = "matmul_id",
        .summary = "dst[:, j, t] = W[:, :, ids[j, t]] . x[:, j % n_x, t]: per-token expert matmul (GGML's mul_mat_id)",
        .n_src = 3,
        .src_names = {"W", "x", "ids"},
        .src_dtypes = {PL_DTMASK_WEIGHTS, PL_DTMASK_F32, PL_DTMASK_I32},
        .dst_dtypes = PL_DTMASK_F32,
        .key_operand = 0,
        .shape_rule = "W [K, N, n_expert] (K a multiple of W's block size; experts at stride nb[2]); "
                      "x [K, n_x, n_tok] with n_x 1 (shared by the k slots) or k (rows may be strided); "
                      "ids [k, n_tok] contiguous, each in 0..n_expert-1 (checked at run time); "
                      "dst [N, k, n_tok] contiguous",
        .params = "none",
    },
    [PL_OP_MOE_COMBINE] = {
        .name = "moe_combine",
        .summary = "dst[:, t] = sum_j w[j, t] * y[:, j, t], w = softmax(logits[:, t])[ids[:, t]] (optionally renormalised)",
        .n_src = 3,
        .src_names = {"y", "logits", "ids"},
        .src_dtypes = {PL_DTMASK_F32, PL_DTMASK_F32, PL_DTMASK_I32},
        .dst_dtypes = PL_DTMASK_F32,
        .key_operand = 0,
        .shape_rule = "y [E, k, n_tok]; logits [n_expert, n_tok] (rows may be strided); ids [k, n_tok] "
                      "contiguous, each in 0..n_expert-1 (checked at run time); dst [E, n_tok] contiguous",
        .params = "iparams[0] = norm: 1 divides the k weights by their sum, clamped below at "
                  "6.103515625e-5 (llama.cpp's norm_w / norm_topk_prob); 0 uses the probabilities as they are",
    },
    [PL_OP_GEGLU] = {
        .name = "geglu",
        .summary = "dst = gelu(gate) * up, gelu as GGML's CPU backend (tanh form through f16: its 64K table)",
        .n_src = 2,
        .src_names = {"gate", "up"},
        .src_dtypes = {PL_DTMASK_F32, PL_DTMASK_F32},
        .dst_dtypes = PL_DTMASK_F32,
        .key_operand = 0,
        .shape_rule = "gate, up [n, d1, d2, d3], equal shapes (rows may be strided); "
                      "dst same shape, contiguous",
        .params = "none. gate <= -10: 0; gate >= 10: gate * up; otherwise "
                  "f16(gelu_tanh(f16(gate))) * up with gelu_tanh(g) = 0.5*g*(1 + tanhf(sqrt(2/pi)*g*(1 + 0.044715*g*g)))",
    },
    [PL_OP_SCALE] = {
        .name = "scale",
        .summary = "dst = x * s (GGML's ggml_scale)",
        .n_src = 1,
        .src_names = {"x"},
        .src_dtypes = {PL_DTMASK_F32},
        .dst_dtypes = PL_DTMASK_F32,
        .key_operand = 0,
        .shape_rule = "x [n, d1, d2, d3] (rows may be strided); dst same shape, contiguous",
        .params = "fparams[0] = s (finite)",
    },
    [PL_OP_SOFTCAP] = {
        .name = "softcap",
        .summary = "dst = tanhf(x * (1/c)) * c: soft-capping (gemma's final logits), as GGML's scale, tanh, scale",
        .n_src = 1,
        .src_names = {"x"},
        .src_dtypes = {PL_DTMASK_F32},
        .dst_dtypes = PL_DTMASK_F32,
        .key_operand = 0,
        .shape_rule = "x [n, d1, d2, d3] (rows may be strided); dst same shape, contiguous",
        .params = "fparams[0] = c (finite, > 0); 1/c is computed in float, as llama.cpp's graph does",
    },
};

const pl_op_schema *pl_op_schema_get(pl_op op) {
    if ((unsigned)op >= PL_OP_COUNT) return NULL;
    return &pl_schemas[op];
}

const char *pl_op_name(pl_op op) {
    const pl_op_schema *s = pl_op_schema_get(op);
    return s ? s->name : "?";
}

bool pl_op_from_name(const char *name, pl_op *out) {
    if (!name) return false;
    for (int i = 0; i < PL_OP_COUNT; i++) {
        if (strcmp(pl_schemas[i].name, name) == 0) {
            if (out) *out = (pl_op)i;
            return true;
        }
    }
    return false;
}

pl_dtype pl_node_key_dtype(const pl_node *node) {
    const pl_op_schema *s = node ? pl_op_schema_get(node->op) : NULL;
    if (!s) return (pl_dtype)PL_DTYPE_COUNT;   /* matches no kernel */
    const pl_tensor *t = s->key_operand < 0 ? node->dst : node->src[s->key_operand];
    return t ? t->dtype : (pl_dtype)PL_DTYPE_COUNT;
}

/* ---- validation --------------------------------------------------------------*/

/* Names an operand in messages: "matmul: src1 'x' (attn_norm)". */
static const char *operand_label(const pl_op_schema *s, int i, char *buf, size_t cap) {
    if (i < 0) snprintf(buf, cap, "dst");
    else snprintf(buf, cap, "src%d '%s'", i, s->src_names[i]);
    return buf;
}

/* Structural checks every operand gets: dims, strides of a row, block size. */
static pl_status check_operand(const pl_op_schema *s, int i, const pl_tensor *t, uint64_t mask) {
    char lab[64];
    operand_label(s, i, lab, sizeof lab);
    if (!t) return pl_errorf(PL_ERR_INVALID_ARG, "%s: %s is missing", s->name, lab);
    const pl_dtype_traits *tr = pl_dtype_get((uint32_t)t->dtype);
    if (!tr || (unsigned)t->dtype >= 64 || !(mask & PL_DTMASK(t->dtype)))
        return pl_errorf(PL_ERR_INVALID_ARG, "%s: %s ('%s') has dtype %s, which this op does not accept",
                         s->name, lab, t->name, pl_dtype_name(t->dtype));
    if (t->n_dims < 1 || t->n_dims > PL_MAX_DIMS)
        return pl_errorf(PL_ERR_INVALID_ARG, "%s: %s ('%s') has %d dims", s->name, lab, t->name, t->n_dims);
    for (int d = 0; d < PL_MAX_DIMS; d++) {
        if (t->ne[d] < 1)
            return pl_errorf(PL_ERR_INVALID_ARG, "%s: %s ('%s') has ne[%d] = %lld", s->name, lab, t->name, d,
                             (long long)t->ne[d]);
        if (d >= t->n_dims && t->ne[d] != 1)
            return pl_errorf(PL_ERR_INVALID_ARG, "%s: %s ('%s') has n_dims %d but ne[%d] = %lld", s->name, lab,
                             t->name, t->n_dims, d, (long long)t->ne[d]);
    }
    if (t->ne[0] % tr->block_size)
        return pl_errorf(PL_ERR_INVALID_ARG, "%s: %s ('%s') row length %lld is not a multiple of %s's block size %lld",
                         s->name, lab, t->name, (long long)t->ne[0], tr->name, (long long)tr->block_size);
    if (t->nb[0] != tr->type_size)
        return pl_errorf(PL_ERR_INVALID_ARG, "%s: %s ('%s') has nb[0] = %zu, expected %zu (rows must be dense)",
                         s->name, lab, t->name, t->nb[0], tr->type_size);
    /* Rows must not overlap: each stride covers the extent of the dim below. */
    size_t extent = pl_dtype_row_size(t->dtype, t->ne[0]);
    for (int d = 1; d < PL_MAX_DIMS; d++) {
        if (t->ne[d] > 1 && t->nb[d] < extent)
            return pl_errorf(PL_ERR_INVALID_ARG, "%s: %s ('%s') has nb[%d] = %zu, less than the %zu bytes below it",
                             s->name, lab, t->name, d, t->nb[d], extent);
        if (t->ne[d] > 1) extent = t->nb[d] * (size_t)t->ne[d];
    }
    return PL_OK;
}

static bool same_shape(const pl_tensor *a, const pl_tensor *b) {
    for (int d = 0; d < PL_MAX_DIMS; d++)
        if (a->ne[d] != b->ne[d]) return false;
    return true;
}

static pl_status need_contiguous(const pl_op_schema *s, int i, const pl_tensor *t) {
    char lab[64];
    if (pl_tensor_is_contiguous(t)) return PL_OK;
    return pl_errorf(PL_ERR_INVALID_ARG, "%s: %s ('%s') must be contiguous", s->name,
                     operand_label(s, i, lab, sizeof lab), t->name);
}

static pl_status need_vector(const pl_op_schema *s, int i, const pl_tensor *t, int64_t n) {
    char lab[64];
    if (t->ne[0] == n && pl_tensor_nrows(t) == 1) return PL_OK;
    return pl_errorf(PL_ERR_INVALID_ARG, "%s: %s ('%s') must be a vector of %lld, got [%lld, %lld, %lld, %lld]",
                     s->name, operand_label(s, i, lab, sizeof lab), t->name, (long long)n, (long long)t->ne[0],
                     (long long)t->ne[1], (long long)t->ne[2], (long long)t->ne[3]);
}

#define SHAPE_ERR(...) pl_errorf(PL_ERR_INVALID_ARG, __VA_ARGS__)

static pl_status validate_shapes(const pl_op_schema *s, const pl_node *n) {
    pl_tensor *const *src = n->src;
    const pl_tensor *dst = n->dst;
    switch (n->op) {
    case PL_OP_GET_ROWS:
        if (src[0]->ne[2] != 1 || src[0]->ne[3] != 1)
            return SHAPE_ERR("%s: table must be 2-D [C, R]", s->name);
        PL_TRY(need_vector(s, 1, src[1], src[1]->ne[0]));
        if (dst->ne[0] != src[0]->ne[0] || dst->ne[1] != src[1]->ne[0] || dst->ne[2] != 1 || dst->ne[3] != 1)
            return SHAPE_ERR("%s: dst must be [%lld, %lld]", s->name, (long long)src[0]->ne[0], (long long)src[1]->ne[0]);
        return need_contiguous(s, -1, dst);
    case PL_OP_RMS_NORM:
        PL_TRY(need_vector(s, 1, src[1], src[0]->ne[0]));
        PL_TRY(need_contiguous(s, 1, src[1]));
        if (!same_shape(dst, src[0])) return SHAPE_ERR("%s: dst shape differs from x", s->name);
        if (!(n->fparams[0] >= 0.0f) || !isfinite(n->fparams[0]))
            return SHAPE_ERR("%s: eps = %g must be finite and >= 0", s->name, (double)n->fparams[0]);
        return need_contiguous(s, -1, dst);
    case PL_OP_MATMUL:
        if (src[0]->ne[2] != 1 || src[0]->ne[3] != 1 || src[1]->ne[2] != 1 || src[1]->ne[3] != 1)
            return SHAPE_ERR("%s: W and x must be 2-D", s->name);
        if (src[1]->ne[0] != src[0]->ne[0])
            return SHAPE_ERR("%s: x rows have %lld elements, W rows %lld", s->name, (long long)src[1]->ne[0],
                             (long long)src[0]->ne[0]);
        if (dst->ne[0] != src[0]->ne[1] || dst->ne[1] != src[1]->ne[1] || dst->ne[2] != 1 || dst->ne[3] != 1)
            return SHAPE_ERR("%s: dst must be [%lld, %lld]", s->name, (long long)src[0]->ne[1], (long long)src[1]->ne[1]);
        return need_contiguous(s, -1, dst);
    case PL_OP_ADD:
        if (!same_shape(src[1], src[0]) && !(src[1]->ne[0] == src[0]->ne[0] && pl_tensor_nrows(src[1]) == 1))
            return SHAPE_ERR("%s: b must have a's shape or be one row of %lld", s->name, (long long)src[0]->ne[0]);
        if (!same_shape(dst, src[0])) return SHAPE_ERR("%s: dst shape differs from a", s->name);
        return need_contiguous(s, -1, dst);
    case PL_OP_SWIGLU:
        if (!same_shape(src[1], src[0])) return SHAPE_ERR("%s: gate and up shapes differ", s->name);
        if (!same_shape(dst, src[0])) return SHAPE_ERR("%s: dst shape differs from gate", s->name);
        return need_contiguous(s, -1, dst);
    case PL_OP_ROPE: {
        if (src[0]->ne[3] != 1) return SHAPE_ERR("%s: x must be [head_dim, n_head, n_tok]", s->name);
        PL_TRY(need_vector(s, 1, src[1], src[0]->ne[2]));
        if (!same_shape(dst, src[0])) return SHAPE_ERR("%s: dst shape differs from x", s->name);
        const int n_rot = n->iparams[0], mode = n->iparams[1];
        if (n_rot < 2 || n_rot % 2 || n_rot > src[0]->ne[0])
            return SHAPE_ERR("%s: n_rot = %d must be even and in 2..%lld", s->name, n_rot, (long long)src[0]->ne[0]);
        if (mode != 0 && mode != 2) return SHAPE_ERR("%s: mode = %d (0 = normal, 2 = NeoX)", s->name, mode);
        if (src[2]) {
            PL_TRY(need_vector(s, 2, src[2], n_rot / 2));
            if (!pl_tensor_is_contiguous(src[2])) return SHAPE_ERR("%s: freq_factors must be contiguous", s->name);
        }
        if (!(n->fparams[0] > 0.0f) || !isfinite(n->fparams[0]) || !(n->fparams[1] > 0.0f) || !isfinite(n->fparams[1]))
            return SHAPE_ERR("%s: freq_base = %g and freq_scale = %g must be finite and > 0", s->name,
                             (double)n->fparams[0], (double)n->fparams[1]);
        return need_contiguous(s, -1, dst);
    }
    case PL_OP_KV_STORE:
        if (src[0]->ne[2] != 1 || src[0]->ne[3] != 1) return SHAPE_ERR("%s: rows must be [kv_dim, n_tok]", s->name);
        PL_TRY(need_vector(s, 1, src[1], src[0]->ne[1]));
        PL_TRY(need_vector(s, 2, src[2], src[0]->ne[1]));
        if (dst->ne[0] != src[0]->ne[0] || dst->ne[3] != 1)
            return SHAPE_ERR("%s: cache must be [%lld, n_ctx, n_seq]", s->name, (long long)src[0]->ne[0]);
        if ((dst->dtype == PL_Q8_0 || dst->dtype == PL_Q4_0) && dst->ne[0] % 32)
            return SHAPE_ERR("%s: a %s cache needs rows of a multiple of 32 elements, not %lld", s->name,
                             pl_dtype_name(dst->dtype), (long long)dst->ne[0]);
        if (n->iparams[0]) {
            const int rot = n->iparams[0], hd = n->iparams[1];
            if (rot < 2 || (rot & (rot - 1)) || hd < rot || hd % rot || dst->ne[0] % hd)
                return SHAPE_ERR("%s: rot = %d must be a power of two dividing head_dim = %d, which divides %lld",
                                 s->name, rot, hd, (long long)dst->ne[0]);
        }
        return PL_OK;
    case PL_OP_ATTENTION: {
        const pl_tensor *q = src[0], *k = src[1], *v = src[2];
        if (q->ne[3] != 1) return SHAPE_ERR("%s: q must be [head_dim, n_head, n_tok]", s->name);
        /* f32 caches go together; f16, q8_0 and q4_0 mix (llama.cpp's -ctk / -ctv) */
        if (v->dtype != k->dtype && (k->dtype == PL_F32 || v->dtype == PL_F32))
            return SHAPE_ERR("%s: k_cache is %s but v_cache is %s", s->name, pl_dtype_name(k->dtype),
                             pl_dtype_name(v->dtype));
        if (!same_shape(k, v) || k->ne[3] != 1) return SHAPE_ERR("%s: k_cache and v_cache must both be [kv_dim, n_ctx, n_seq]", s->name);
        const int n_kv_head = n->iparams[0];
        const int64_t head_dim = q->ne[0], n_head = q->ne[1];
        if (n_kv_head < 1 || n_head % n_kv_head)
            return SHAPE_ERR("%s: n_head %lld is not a multiple of n_kv_head %d", s->name, (long long)n_head, n_kv_head);
        if (k->ne[0] != head_dim * n_kv_head)
            return SHAPE_ERR("%s: cache rows have %lld elements, expected n_kv_head*head_dim = %lld", s->name,
                             (long long)k->ne[0], (long long)(head_dim * n_kv_head));
        PL_TRY(need_vector(s, 3, src[3], q->ne[2]));
        PL_TRY(need_vector(s, 4, src[4], q->ne[2]));
        if (dst->ne[0] != head_dim * n_head || dst->ne[1] != q->ne[2] || dst->ne[2] != 1 || dst->ne[3] != 1)
            return SHAPE_ERR("%s: dst must be [%lld, %lld]", s->name, (long long)(head_dim * n_head), (long long)q->ne[2]);
        if (!isfinite(n->fparams[0])) return SHAPE_ERR("%s: scale must be finite", s->name);
        if (n->iparams[4] < 0) return SHAPE_ERR("%s: window %d is negative (0 = none)", s->name, n->iparams[4]);
        if ((k->dtype == PL_Q8_0 || k->dtype == PL_Q4_0) && head_dim % 32)
            return SHAPE_ERR("%s: a %s K cache needs head_dim a multiple of 32, not %lld", s->name,
                             pl_dtype_name(k->dtype), (long long)head_dim);
        if ((v->dtype == PL_Q8_0 || v->dtype == PL_Q4_0) && head_dim % 32)
            return SHAPE_ERR("%s: a %s V cache needs head_dim a multiple of 32, not %lld", s->name,
                             pl_dtype_name(v->dtype), (long long)head_dim);
        for (int i = 2; i <= 3; i++) {
            const int rot = n->iparams[i];
            if (rot && (rot < 2 || (rot & (rot - 1)) || head_dim % rot))
                return SHAPE_ERR("%s: %s_rot = %d must be 0 or a power of two dividing head_dim = %lld", s->name,
                                 i == 2 ? "k" : "v", rot, (long long)head_dim);
        }
        return need_contiguous(s, -1, dst);
    }
    case PL_OP_MOE_TOPK: {
        const int k = n->iparams[0];
        if (src[0]->ne[2] != 1 || src[0]->ne[3] != 1) return SHAPE_ERR("%s: logits must be [n_expert, n_tok]", s->name);
        if (k < 1 || k > src[0]->ne[0])
            return SHAPE_ERR("%s: k = %d must be in 1..n_expert = %lld", s->name, k, (long long)src[0]->ne[0]);
        if (dst->ne[0] != k || dst->ne[1] != src[0]->ne[1] || dst->ne[2] != 1 || dst->ne[3] != 1)
            return SHAPE_ERR("%s: dst must be [%d, %lld]", s->name, k, (long long)src[0]->ne[1]);
        return need_contiguous(s, -1, dst);
    }
    case PL_OP_MATMUL_ID: {
        const pl_tensor *W = src[0], *x = src[1], *ids = src[2];
        const int64_t k = ids->ne[0], nt = ids->ne[1];
        if (W->ne[3] != 1 || x->ne[3] != 1 || ids->ne[2] != 1 || ids->ne[3] != 1)
            return SHAPE_ERR("%s: W, x and ids must be [K, N, n_expert], [K, n_x, n_tok], [k, n_tok]", s->name);
        PL_TRY(need_contiguous(s, 2, ids));
        if (x->ne[0] != W->ne[0])
            return SHAPE_ERR("%s: x rows have %lld elements, W rows %lld", s->name, (long long)x->ne[0],
                             (long long)W->ne[0]);
        if ((x->ne[1] != 1 && x->ne[1] != k) || x->ne[2] != nt)
            return SHAPE_ERR("%s: x must be [%lld, 1 or %lld, %lld]", s->name, (long long)W->ne[0], (long long)k,
                             (long long)nt);
        if (k > W->ne[2])
            return SHAPE_ERR("%s: %lld experts per token, but W holds %lld", s->name, (long long)k, (long long)W->ne[2]);
        if (dst->ne[0] != W->ne[1] || dst->ne[1] != k || dst->ne[2] != nt || dst->ne[3] != 1)
            return SHAPE_ERR("%s: dst must be [%lld, %lld, %lld]", s->name, (long long)W->ne[1], (long long)k,
                             (long long)nt);
        return need_contiguous(s, -1, dst);
    }
    case PL_OP_MOE_COMBINE: {
        const pl_tensor *y = src[0], *lg = src[1], *ids = src[2];
        const int64_t k = ids->ne[0], nt = ids->ne[1];
        if (y->ne[3] != 1 || lg->ne[2] != 1 || lg->ne[3] != 1 || ids->ne[2] != 1 || ids->ne[3] != 1)
            return SHAPE_ERR("%s: y, logits and ids must be [E, k, n_tok], [n_expert, n_tok], [k, n_tok]", s->name);
        PL_TRY(need_contiguous(s, 2, ids));
        if (y->ne[1] != k || y->ne[2] != nt || lg->ne[1] != nt || k > lg->ne[0])
            return SHAPE_ERR("%s: y [%lld, %lld, %lld], logits [%lld, %lld] and ids [%lld, %lld] disagree", s->name,
                             (long long)y->ne[0], (long long)y->ne[1], (long long)y->ne[2], (long long)lg->ne[0],
                             (long long)lg->ne[1], (long long)k, (long long)nt);
        if (n->iparams[0] != 0 && n->iparams[0] != 1) return SHAPE_ERR("%s: norm = %d (0 or 1)", s->name, n->iparams[0]);
        if (dst->ne[0] != y->ne[0] || dst->ne[1] != nt || dst->ne[2] != 1 || dst->ne[3] != 1)
            return SHAPE_ERR("%s: dst must be [%lld, %lld]", s->name, (long long)y->ne[0], (long long)nt);
        return need_contiguous(s, -1, dst);
    }
    case PL_OP_GEGLU:
        if (!same_shape(src[1], src[0])) return SHAPE_ERR("%s: gate and up shapes differ", s->name);
        if (!same_shape(dst, src[0])) return SHAPE_ERR("%s: dst shape differs from gate", s->name);
        return need_contiguous(s, -1, dst);
    case PL_OP_SCALE:
    case PL_OP_SOFTCAP:
        if (!same_shape(dst, src[0])) return SHAPE_ERR("%s: dst shape differs from x", s->name);
        if (!isfinite(n->fparams[0]) || (n->op == PL_OP_SOFTCAP && !(n->fparams[0] > 0.0f)))
            return SHAPE_ERR("%s: %s = %g must be finite%s", s->name, n->op == PL_OP_SCALE ? "s" : "c",
                             (double)n->fparams[0], n->op == PL_OP_SOFTCAP ? " and > 0" : "");
        return need_contiguous(s, -1, dst);
    default:
        return SHAPE_ERR("unknown op %d", (int)n->op);
    }
}

pl_status pl_node_validate(const pl_node *node) {
    if (!node) return pl_errorf(PL_ERR_INVALID_ARG, "node is NULL");
    const pl_op_schema *s = pl_op_schema_get(node->op);
    if (!s) return pl_errorf(PL_ERR_INVALID_ARG, "unknown op %d", (int)node->op);
    for (int i = 0; i < s->n_src; i++)
        if (node->src[i] || !(s->optional_src & (1u << i)))
            PL_TRY(check_operand(s, i, node->src[i], s->src_dtypes[i]));
    for (int i = s->n_src; i < PL_MAX_SRC; i++)
        if (node->src[i]) return pl_errorf(PL_ERR_INVALID_ARG, "%s: takes %d inputs, src%d is set", s->name, s->n_src, i);
    PL_TRY(check_operand(s, -1, node->dst, s->dst_dtypes));
    return validate_shapes(s, node);
}

/* ---- backends ----------------------------------------------------------------*/

/* Implemented backends first (ref, cpu, cuda), declared ones after. */
static const pl_backend *const pl_backend_list[] = {
    &pl_backend_ref, &pl_backend_cpu, &pl_backend_cuda, &pl_backend_ascend,
    &pl_backend_horizon, &pl_backend_qnn, &pl_backend_mps, NULL,
};

const pl_backend *const *pl_backends(void) { return pl_backend_list; }

const pl_backend *pl_backend_find(const char *name) {
    if (!name) return NULL;
    for (const pl_backend *const *b = pl_backend_list; *b; b++)
        if (strcmp((*b)->name, name) == 0) return *b;
    return NULL;
}

const pl_kernel *pl_backend_lookup(const pl_backend *b, pl_op op, pl_dtype key) {
    if (!b || !b->kernels) return NULL;
    /* Exact key first, so a type-specific kernel beats a generic one listed
     * earlier; an invalid key (e.g. from a malformed node) matches nothing. */
    for (size_t i = 0; i < b->n_kernels; i++)
        if (b->kernels[i].op == op && b->kernels[i].key == key) return &b->kernels[i];
    if (key != PL_DTYPE_ANY && (unsigned)key >= PL_DTYPE_COUNT) return NULL;
    for (size_t i = 0; i < b->n_kernels; i++)
        if (b->kernels[i].op == op && b->kernels[i].key == PL_DTYPE_ANY) return &b->kernels[i];
    return NULL;
}

bool pl_backend_supports(const pl_backend *b, pl_op op, pl_dtype key) {
    return pl_backend_lookup(b, op, key) != NULL;
}

/* ---- tensor helpers ----------------------------------------------------------*/

void pl_tensor_init(pl_tensor *t, pl_dtype dtype, int n_dims, const int64_t *ne, void *data) {
    memset(t, 0, sizeof *t);
    t->dtype = dtype;
    t->n_dims = n_dims < 1 ? 1 : n_dims > PL_MAX_DIMS ? PL_MAX_DIMS : n_dims;
    for (int d = 0; d < PL_MAX_DIMS; d++) t->ne[d] = d < t->n_dims ? ne[d] : 1;
    const pl_dtype_traits *tr = pl_dtype_get((uint32_t)dtype);
    t->nb[0] = tr ? tr->type_size : 0;
    t->nb[1] = pl_dtype_row_size(dtype, t->ne[0]);
    for (int d = 2; d < PL_MAX_DIMS; d++) t->nb[d] = t->nb[d - 1] * (size_t)t->ne[d - 1];
    t->data = data;
    t->buffer = PL_BUF_HOST;
}

int64_t pl_tensor_nelements(const pl_tensor *t) {
    return t->ne[0] * t->ne[1] * t->ne[2] * t->ne[3];
}

int64_t pl_tensor_nrows(const pl_tensor *t) { return t->ne[1] * t->ne[2] * t->ne[3]; }

size_t pl_tensor_nbytes(const pl_tensor *t) {
    return pl_dtype_row_size(t->dtype, t->ne[0]) * (size_t)pl_tensor_nrows(t);
}

bool pl_tensor_is_contiguous(const pl_tensor *t) {
    const pl_dtype_traits *tr = pl_dtype_get((uint32_t)t->dtype);
    if (!tr || t->nb[0] != tr->type_size) return false;
    size_t expect = pl_dtype_row_size(t->dtype, t->ne[0]);
    if (expect == 0) return false;
    /* A stride of a dimension of extent 1 never matters. */
    for (int d = 1; d < PL_MAX_DIMS; d++) {
        if (t->ne[d] != 1 && t->nb[d] != expect) return false;
        expect *= (size_t)t->ne[d];
    }
    return true;
}
