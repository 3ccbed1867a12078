/*
 * The public listing of quantization mixes and tensor types (pocketllm.h):
 * a read-only view of quant/quantize_mix.h's table and the dtype traits.
 * pl_quantize_file itself is in quant/quantize_model.c.
 */
#include "pocketllm.h"
#include "core/status.h"
#include "kernels/dtype.h"
#include "quant/quantize_mix.h"
#include "quant/quantize_rows.h"

static double bpw_of(pl_dtype t) {
    const pl_dtype_traits *tr = pl_dtype_get((uint32_t)t);
    return tr && tr->block_size ? (double)tr->type_size * 8.0 / (double)tr->block_size : 0.0;
}

static void mix_info(const pl_ftype_info *ft, pl_quant_mix_info *out) {
    out->name = ft->name;
    out->ftype = ft->ftype;
    out->base_type = pl_dtype_name(ft->base);
    out->base_bpw = bpw_of(ft->base);
    out->needs_imatrix = ft->needs_imatrix;
    out->summary = ft->summary;
}

int32_t pl_quant_n_mixes(void) {
    int n;
    pl_ftypes(&n);
    return n;
}

pl_status pl_quant_mix(int32_t i, pl_quant_mix_info *out) {
    int n;
    const pl_ftype_info *ft = pl_ftypes(&n);
    if (!out || i < 0 || i >= n) return pl_errorf(PL_ERR_INVALID_ARG, "no quantization mix %d (0..%d)", (int)i, n - 1);
    mix_info(&ft[i], out);
    return PL_OK;
}

pl_status pl_quant_mix_find(const char *name, pl_quant_mix_info *out) {
    const pl_ftype_info *ft = name ? pl_ftype_find(name) : NULL;
    if (!ft) return pl_errorf(PL_ERR_NOT_FOUND, "unknown quantization type '%s'", name ? name : "");
    if (out) mix_info(ft, out);
    return PL_OK;
}

/* The tensor types an override may name: the float types and every type
 * with a quantizer, in GGML id order. */
static bool override_type(pl_dtype t) {
    return t == PL_F32 || t == PL_F16 || t == PL_BF16 || pl_quantize_rows_supported(t);
}

static int type_at(int32_t i) {
    int k = 0;
    for (int t = 0; t < PL_DTYPE_COUNT; t++) {
        if (!pl_dtype_get((uint32_t)t) || !pl_dtype_get((uint32_t)t)->name || !override_type((pl_dtype)t)) continue;
        if (k++ == i) return t;
    }
    return -1;
}

int32_t pl_quant_n_types(void) {
    int32_t n = 0;
    while (type_at(n) >= 0) n++;
    return n;
}

pl_status pl_quant_type(int32_t i, pl_quant_type_info *out) {
    const int t = i >= 0 ? type_at(i) : -1;
    if (!out || t < 0) return pl_errorf(PL_ERR_INVALID_ARG, "no tensor type %d", (int)i);
    const pl_dtype_traits *tr = pl_dtype_get((uint32_t)t);
    out->name = tr->name;
    out->type = t;
    out->block_size = tr->block_size;
    out->bpw = bpw_of((pl_dtype)t);
    out->needs_imatrix = pl_mix_requires_imatrix("blk.0.ffn_up.weight", (pl_dtype)t);
    return PL_OK;
}
