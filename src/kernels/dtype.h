/* Element types. The numeric values are GGML's type ids, so a GGUF tensor's
 * type field maps directly onto pl_dtype. Block layouts are in quant/blocks.h. */
#ifndef PL_KERNELS_DTYPE_H
#define PL_KERNELS_DTYPE_H
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

typedef enum pl_dtype {
    PL_F32 = 0, PL_F16 = 1, PL_Q4_0 = 2, PL_Q4_1 = 3,
    PL_Q5_0 = 6, PL_Q5_1 = 7, PL_Q8_0 = 8, PL_Q8_1 = 9,
    PL_Q2_K = 10, PL_Q3_K = 11, PL_Q4_K = 12, PL_Q5_K = 13, PL_Q6_K = 14, PL_Q8_K = 15,
    PL_IQ2_XXS = 16, PL_IQ2_XS = 17, PL_IQ3_XXS = 18, PL_IQ1_S = 19, PL_IQ4_NL = 20,
    PL_IQ3_S = 21, PL_IQ2_S = 22, PL_IQ4_XS = 23,
    PL_I8 = 24, PL_I16 = 25, PL_I32 = 26, PL_I64 = 27, PL_F64 = 28,
    PL_IQ1_M = 29, PL_BF16 = 30, PL_TQ1_0 = 34, PL_TQ2_0 = 35,
    PL_DTYPE_COUNT = 40,
    PL_DTYPE_ANY = 255 /* wildcard in kernel tables */
} pl_dtype;

typedef struct pl_dtype_traits {
    const char *name;     /* GGML's name: "f32", "q4_K", ... ; NULL = unknown id */
    int64_t block_size;   /* elements per block (1 for plain types) */
    size_t type_size;     /* bytes per block */
    bool quantized;
} pl_dtype_traits;

/* Traits of a type id, or NULL for an id GGML does not define. */
const pl_dtype_traits *pl_dtype_get(uint32_t id);
const char *pl_dtype_name(pl_dtype t);
/* Looks a type up by name (case-insensitive); returns false if unknown. */
bool pl_dtype_from_name(const char *name, pl_dtype *out);
/* Bytes of a row of n elements; 0 if n is not a multiple of the block size. */
size_t pl_dtype_row_size(pl_dtype t, int64_t n);

#endif
