#include "kernels/dtype.h"
#include <strings.h>

/* Block sizes and byte sizes follow GGML's type_traits exactly. */
static const pl_dtype_traits pl_dtype_table[PL_DTYPE_COUNT] = {
    [PL_F32] = {"f32", 1, 4, false},
    [PL_F16] = {"f16", 1, 2, false},
    [PL_Q4_0] = {"q4_0", 32, 18, true},
    [PL_Q4_1] = {"q4_1", 32, 20, true},
    [PL_Q5_0] = {"q5_0", 32, 22, true},
    [PL_Q5_1] = {"q5_1", 32, 24, true},
    [PL_Q8_0] = {"q8_0", 32, 34, true},
    [PL_Q8_1] = {"q8_1", 32, 36, true},
    [PL_Q2_K] = {"q2_K", 256, 84, true},
    [PL_Q3_K] = {"q3_K", 256, 110, true},
    [PL_Q4_K] = {"q4_K", 256, 144, true},
    [PL_Q5_K] = {"q5_K", 256, 176, true},
    [PL_Q6_K] = {"q6_K", 256, 210, true},
    [PL_Q8_K] = {"q8_K", 256, 292, true},
    [PL_IQ2_XXS] = {"iq2_xxs", 256, 66, true},
    [PL_IQ2_XS] = {"iq2_xs", 256, 74, true},
    [PL_IQ3_XXS] = {"iq3_xxs", 256, 98, true},
    [PL_IQ1_S] = {"iq1_s", 256, 50, true},
    [PL_IQ4_NL] = {"iq4_nl", 32, 18, true},
    [PL_IQ3_S] = {"iq3_s", 256, 110, true},
    [PL_IQ2_S] = {"iq2_s", 256, 82, true},
    [PL_IQ4_XS] = {"iq4_xs", 256, 136, true},
    [PL_I8] = {"i8", 1, 1, false},
    [PL_I16] = {"i16", 1, 2, false},
    [PL_I32] = {"i32", 1, 4, false},
    [PL_I64] = {"i64", 1, 8, false},
    [PL_F64] = {"f64", 1, 8, false},
    [PL_IQ1_M] = {"iq1_m", 256, 56, true},
    [PL_BF16] = {"bf16", 1, 2, false},
    [PL_TQ1_0] = {"tq1_0", 256, 54, true},
    [PL_TQ2_0] = {"tq2_0", 256, 66, true},
};

const pl_dtype_traits *pl_dtype_get(uint32_t id) {
    if (id >= PL_DTYPE_COUNT || !pl_dtype_table[id].name) return NULL;
    return &pl_dtype_table[id];
}

const char *pl_dtype_name(pl_dtype t) {
    const pl_dtype_traits *tr = pl_dtype_get((uint32_t)t);
    return tr ? tr->name : "?";
}

bool pl_dtype_from_name(const char *name, pl_dtype *out) {
    for (uint32_t i = 0; i < PL_DTYPE_COUNT; i++) {
        if (pl_dtype_table[i].name && strcasecmp(pl_dtype_table[i].name, name) == 0) {
            *out = (pl_dtype)i;
            return true;
        }
    }
    return false;
}

size_t pl_dtype_row_size(pl_dtype t, int64_t n) {
    const pl_dtype_traits *tr = pl_dtype_get((uint32_t)t);
    if (!tr || n < 0 || n % tr->block_size) return 0;
    return (size_t)(n / tr->block_size) * tr->type_size;
}
