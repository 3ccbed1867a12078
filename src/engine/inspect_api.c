/*
 * Public inspection API: a GGUF file opened on its own (no model, no
 * tokenizer), its metadata, its tensor table, and the reference decoder of
 * its tensors' blocks. A thin layer over the internal GGUF reader
 * (gguf/gguf.h) and row decoders (quant/quant.h); used by tools and by the
 * Python package's oracle tests.
 */
#include "pocketllm.h"
#include "core/status.h"
#include "gguf/gguf.h"
#include "kernels/dtype.h"
#include "quant/quant.h"
#include <stdlib.h>
#include <string.h>

struct pl_inspect {
    pl_gguf *g;
};

PL_API pl_status pl_inspect_open(const char *path, pl_inspect **out) {
    if (!out) return pl_errorf(PL_ERR_INVALID_ARG, "pl_inspect_open: out is NULL");
    *out = NULL;
    if (!path) return pl_errorf(PL_ERR_INVALID_ARG, "no file path given");
    pl_inspect *f = calloc(1, sizeof *f);
    if (!f) return pl_errorf(PL_ERR_NO_MEMORY, "out of memory");
    pl_status st = pl_gguf_open(path, &f->g);
    if (st != PL_OK) {
        free(f);
        return st;
    }
    *out = f;
    return PL_OK;
}

PL_API void pl_inspect_close(pl_inspect *f) {
    if (!f) return;
    pl_gguf_close(f->g);
    free(f);
}

PL_API uint32_t pl_inspect_version(const pl_inspect *f) { return f ? pl_gguf_version(f->g) : 0; }
PL_API uint64_t pl_inspect_alignment(const pl_inspect *f) { return f ? pl_gguf_alignment(f->g) : 0; }
PL_API uint64_t pl_inspect_data_offset(const pl_inspect *f) { return f ? pl_gguf_data_offset(f->g) : 0; }

/* ---- metadata --------------------------------------------------------------*/

PL_API int64_t pl_inspect_n_meta(const pl_inspect *f) { return f ? pl_gguf_n_kv(f->g) : 0; }

PL_API pl_status pl_inspect_meta_key(const pl_inspect *f, int64_t i, const char **key, size_t *len) {
    if (!f || !key || !len) return pl_errorf(PL_ERR_INVALID_ARG, "pl_inspect_meta_key: bad arguments");
    if (i < 0 || i >= pl_gguf_n_kv(f->g))
        return pl_errorf(PL_ERR_INVALID_ARG, "metadata index %lld out of range (%lld keys)", (long long)i,
                         (long long)pl_gguf_n_kv(f->g));
    pl_gguf_str s = pl_gguf_kv_key(f->g, i);
    *key = s.ptr;
    *len = (size_t)s.len;
    return PL_OK;
}

static pl_status find(const pl_inspect *f, const char *key, int64_t *idx) {
    if (!f || !key) return pl_errorf(PL_ERR_INVALID_ARG, "bad arguments");
    *idx = pl_gguf_find_key(f->g, key);
    if (*idx < 0) return pl_errorf(PL_ERR_NOT_FOUND, "%s: key '%s' not found", pl_gguf_name(f->g), key);
    return PL_OK;
}

PL_API pl_status pl_inspect_meta_type(const pl_inspect *f, const char *key, int *type, int *elem_type,
                                      uint64_t *n) {
    int64_t idx;
    PL_TRY(find(f, key, &idx));
    pl_gguf_type t = pl_gguf_kv_type(f->g, idx);
    int et = -1;
    uint64_t count = 1;
    if (t == PL_GGUF_ARRAY) {
        pl_gguf_type e;
        PL_TRY(pl_gguf_get_arr(f->g, key, &e, &count, NULL));
        et = (int)e;
    }
    if (type) *type = (int)t;
    if (elem_type) *elem_type = et;
    if (n) *n = count;
    return PL_OK;
}

/* The bytes of a scalar value (after its type field) as stored in the file. */
static pl_status scalar_raw(const pl_inspect *f, const char *key, int64_t idx, pl_gguf_type *t, const void **p,
                            uint64_t *size) {
    *t = pl_gguf_kv_type(f->g, idx);
    if (*t == PL_GGUF_ARRAY || *t == PL_GGUF_STRING)
        return pl_errorf(PL_ERR_INVALID_ARG, "%s: key '%s' is not a number (%s)", pl_gguf_name(f->g), key,
                         pl_gguf_type_name(*t));
    PL_TRY(pl_gguf_kv_raw(f->g, idx, p, size));
    if (*size < pl_gguf_type_size(*t)) return pl_errorf(PL_ERR_INTERNAL, "key '%s': short value", key);
    return PL_OK;
}

#define RD(T) do { T v_; memcpy(&v_, p, sizeof v_); iv = (int64_t)v_; dv = (double)v_; } while (0)

static pl_status scalar_value(const pl_inspect *f, const char *key, int64_t idx, int64_t *i_out, double *d_out) {
    pl_gguf_type t;
    const void *p;
    uint64_t size;
    PL_TRY(scalar_raw(f, key, idx, &t, &p, &size));
    int64_t iv = 0;
    double dv = 0;
    switch (t) {
    case PL_GGUF_UINT8: RD(uint8_t); break;
    case PL_GGUF_INT8: RD(int8_t); break;
    case PL_GGUF_UINT16: RD(uint16_t); break;
    case PL_GGUF_INT16: RD(int16_t); break;
    case PL_GGUF_UINT32: RD(uint32_t); break;
    case PL_GGUF_INT32: RD(int32_t); break;
    case PL_GGUF_BOOL: RD(uint8_t); iv = iv != 0; dv = iv; break;
    case PL_GGUF_INT64: RD(int64_t); break;
    case PL_GGUF_UINT64: {
        uint64_t v;
        memcpy(&v, p, 8);
        if (i_out && v > (uint64_t)INT64_MAX)
            return pl_errorf(PL_ERR_INVALID_ARG, "key '%s': value %llu does not fit in int64", key,
                             (unsigned long long)v);
        iv = (int64_t)v;
        dv = (double)v;
        break;
    }
    case PL_GGUF_FLOAT32: {
        float v;
        memcpy(&v, p, 4);
        dv = v;
        if (i_out) return pl_errorf(PL_ERR_INVALID_ARG, "key '%s' is a float, not an integer", key);
        break;
    }
    case PL_GGUF_FLOAT64: {
        memcpy(&dv, p, 8);
        if (i_out) return pl_errorf(PL_ERR_INVALID_ARG, "key '%s' is a float, not an integer", key);
        break;
    }
    default: return pl_errorf(PL_ERR_INVALID_ARG, "key '%s' is not a number", key);
    }
    if (i_out) *i_out = iv;
    if (d_out) *d_out = dv;
    return PL_OK;
}

PL_API pl_status pl_inspect_meta_i64(const pl_inspect *f, const char *key, int64_t i, int64_t *out) {
    int64_t idx;
    PL_TRY(find(f, key, &idx));
    if (!out) return pl_errorf(PL_ERR_INVALID_ARG, "pl_inspect_meta_i64: out is NULL");
    if (i < 0) return scalar_value(f, key, idx, out, NULL);
    return pl_gguf_arr_i64(f->g, key, (uint64_t)i, out);
}

PL_API pl_status pl_inspect_meta_f64(const pl_inspect *f, const char *key, int64_t i, double *out) {
    int64_t idx;
    PL_TRY(find(f, key, &idx));
    if (!out) return pl_errorf(PL_ERR_INVALID_ARG, "pl_inspect_meta_f64: out is NULL");
    if (i < 0) return scalar_value(f, key, idx, NULL, out);
    return pl_gguf_arr_f64(f->g, key, (uint64_t)i, out);
}

PL_API pl_status pl_inspect_meta_str(const pl_inspect *f, const char *key, int64_t i, const char **ptr,
                                     size_t *len) {
    int64_t idx;
    PL_TRY(find(f, key, &idx));
    if (!ptr || !len) return pl_errorf(PL_ERR_INVALID_ARG, "pl_inspect_meta_str: bad arguments");
    pl_gguf_str s;
    if (i < 0) PL_TRY(pl_gguf_get_str(f->g, key, &s));
    else PL_TRY(pl_gguf_arr_str(f->g, key, (uint64_t)i, &s));
    *ptr = s.ptr;
    *len = (size_t)s.len;
    return PL_OK;
}

/* ---- tensors ---------------------------------------------------------------*/

PL_API int64_t pl_inspect_n_tensors(const pl_inspect *f) { return f ? pl_gguf_n_tensors(f->g) : 0; }

PL_API pl_status pl_inspect_tensor(const pl_inspect *f, int64_t i, pl_tensor_info *out) {
    if (!f || !out) return pl_errorf(PL_ERR_INVALID_ARG, "pl_inspect_tensor: bad arguments");
    if (i < 0 || i >= pl_gguf_n_tensors(f->g))
        return pl_errorf(PL_ERR_INVALID_ARG, "tensor index %lld out of range (%lld tensors)", (long long)i,
                         (long long)pl_gguf_n_tensors(f->g));
    const pl_gguf_tensor *t = pl_gguf_tensor_at(f->g, i);
    memset(out, 0, sizeof *out);
    out->name = t->name;
    out->type = (int32_t)t->dtype;
    const char *tn = pl_dtype_name(t->dtype);
    out->type_name = tn ? tn : "?";
    out->n_dims = (int32_t)t->n_dims;
    for (int d = 0; d < 4; d++) out->ne[d] = t->ne[d];
    out->offset = t->offset;
    out->size = t->size;
    return PL_OK;
}

PL_API pl_status pl_inspect_dequantize(const pl_inspect *f, int64_t i, int64_t row0, int64_t n_rows, float *dst) {
    pl_tensor_info info;
    PL_TRY(pl_inspect_tensor(f, i, &info));
    if (!dst) return pl_errorf(PL_ERR_INVALID_ARG, "pl_inspect_dequantize: dst is NULL");
    const pl_gguf_tensor *t = pl_gguf_tensor_at(f->g, i);
    if (!pl_can_dequantize(t->dtype))
        return pl_errorf(PL_ERR_UNSUPPORTED, "tensor '%s': no decoder for type %s", t->name, info.type_name);
    int64_t rows = t->ne[1] * t->ne[2] * t->ne[3];
    if (row0 < 0 || n_rows < 0 || row0 > rows || n_rows > rows - row0)
        return pl_errorf(PL_ERR_INVALID_ARG, "tensor '%s': rows %lld..%lld out of range (%lld rows)", t->name,
                         (long long)row0, (long long)(row0 + n_rows), (long long)rows);
    size_t row_size = pl_dtype_row_size(t->dtype, t->ne[0]);
    if (row_size == 0)
        return pl_errorf(PL_ERR_FORMAT, "tensor '%s': row of %lld elements is not a whole number of blocks", t->name,
                         (long long)t->ne[0]);
    const char *src = (const char *)t->data;
    for (int64_t r = 0; r < n_rows; r++)
        pl_dequantize_row(t->dtype, src + (size_t)(row0 + r) * row_size, dst + (size_t)r * (size_t)t->ne[0],
                          t->ne[0]);
    return PL_OK;
}
