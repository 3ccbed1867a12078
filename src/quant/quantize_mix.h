/*
 * File types ("Q4_K_M", "IQ2_XXS", ...) and the per-tensor type mixes that
 * make them, following llama.cpp's llama-quant.cpp (llama_tensor_get_type):
 * a file type is a default tensor type plus rules that keep sensitive
 * tensors at higher precision -- the output projection (and tied token
 * embeddings) at q6_K or q5_K, attn_v / ffn_down of the layers chosen by
 * use_more_bits at q6_K in Q4_K_M, q3_K attn_v / attn_output / ffn_down in
 * Q2_K, q2_K / q4_K attn_v in the IQ types, and so on -- then falls back to
 * a compatible type when a row length is not a multiple of the block size.
 *
 * The rules depend on the order tensors are visited (counters of attn_v and
 * ffn_down tensors seen so far), which is llama.cpp's: tensors outside the
 * repeating layers first, then layer by layer, names sorted within each
 * (pl_mix_compare). The same order is the tensor order of the output file.
 */
#ifndef PL_QUANT_QUANTIZE_MIX_H
#define PL_QUANT_QUANTIZE_MIX_H
#include <stdbool.h>
#include <stdint.h>
#include "pocketllm.h"
#include "kernels/dtype.h"

/* llama.cpp's LLAMA_FTYPE_* values (general.file_type). */
enum {
    PL_FTYPE_ALL_F32 = 0, PL_FTYPE_F16 = 1, PL_FTYPE_Q4_0 = 2, PL_FTYPE_Q4_1 = 3, PL_FTYPE_Q8_0 = 7,
    PL_FTYPE_Q5_0 = 8, PL_FTYPE_Q5_1 = 9, PL_FTYPE_Q2_K = 10, PL_FTYPE_Q3_K_S = 11, PL_FTYPE_Q3_K_M = 12,
    PL_FTYPE_Q3_K_L = 13, PL_FTYPE_Q4_K_S = 14, PL_FTYPE_Q4_K_M = 15, PL_FTYPE_Q5_K_S = 16, PL_FTYPE_Q5_K_M = 17,
    PL_FTYPE_Q6_K = 18, PL_FTYPE_IQ2_XXS = 19, PL_FTYPE_IQ2_XS = 20, PL_FTYPE_IQ1_S = 24, PL_FTYPE_IQ1_M = 31,
    PL_FTYPE_BF16 = 32, PL_FTYPE_TQ1_0 = 36, PL_FTYPE_TQ2_0 = 37,
};

typedef struct pl_ftype_info {
    const char *name;      /* "Q4_K_M" (matching is case-insensitive) */
    int ftype;             /* PL_FTYPE_* */
    pl_dtype base;         /* the default tensor type */
    bool needs_imatrix;    /* llama-quantize refuses to make it without one */
    const char *summary;
} pl_ftype_info;

/* The file types `pocketllm quantize` can make, highest precision first. */
const pl_ftype_info *pl_ftypes(int *n);
const pl_ftype_info *pl_ftype_find(const char *name);
const pl_ftype_info *pl_ftype_by_id(int ftype);

/* What the rules need to know about the model. */
typedef struct pl_mix_model {
    int64_t n_layer;
    int64_t n_head, n_head_kv;   /* n_gqa = n_head / n_head_kv */
    int64_t n_expert;            /* 0 for dense models */
} pl_mix_model;

struct pl_gguf;
/* Reads n_layer, heads and experts from a model file's metadata. */
pl_status pl_mix_model_of(const struct pl_gguf *g, pl_mix_model *mm);

/* One tensor: name, shape and current type in; target type out. */
typedef struct pl_mix_tensor {
    const char *name;
    int n_dims;
    int64_t ne[4];
    pl_dtype cur;
    pl_dtype target;
    bool fallback;           /* the rules' choice did not fit the row length */
} pl_mix_tensor;

/* qsort comparator of pl_mix_tensor by llama.cpp's visiting order. */
int pl_mix_compare(const void *a, const void *b);
/* Fills ts[i].target for tensors already in pl_mix_compare order. has_imatrix
 * changes a few rules (as in llama.cpp). */
pl_status pl_mix_plan(const pl_ftype_info *ft, const pl_mix_model *mm, bool has_imatrix, pl_mix_tensor *ts,
                      int64_t n);
/* True if llama.cpp would quantize this tensor at all (2-D+ weights, not
 * norms). */
bool pl_mix_allows_quantization(const char *name, int n_dims);
/* True if llama-quantize demands an importance matrix for this tensor at
 * this type (the IQ1/IQ2 types, except token_embd / output). */
bool pl_mix_requires_imatrix(const char *name, pl_dtype target);

#endif
