/*
 * A bounds-checked GGUF (v2, v3, little-endian) reader.
 *
 * The file is memory-mapped; pl_gguf_open validates the whole header, every
 * key/value, and the tensor table before returning, so accessors never read
 * outside the mapping. Every problem gives PL_ERR_FORMAT (or PL_ERR_IO) and a
 * message naming it, prefixed with the file name:
 *     "model.gguf: tensor 'blk.3.ffn_up.weight' extends past end of file"
 * No function here asserts on, or trusts, a byte of the file.
 */
#ifndef PL_GGUF_GGUF_H
#define PL_GGUF_GGUF_H
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include "pocketllm.h"
#include "kernels/dtype.h"

typedef enum pl_gguf_type {
    PL_GGUF_UINT8 = 0, PL_GGUF_INT8 = 1, PL_GGUF_UINT16 = 2, PL_GGUF_INT16 = 3,
    PL_GGUF_UINT32 = 4, PL_GGUF_INT32 = 5, PL_GGUF_FLOAT32 = 6, PL_GGUF_BOOL = 7,
    PL_GGUF_STRING = 8, PL_GGUF_ARRAY = 9, PL_GGUF_UINT64 = 10, PL_GGUF_INT64 = 11,
    PL_GGUF_FLOAT64 = 12,
} pl_gguf_type;

/* A string inside the mapping: NOT NUL-terminated. */
typedef struct pl_gguf_str {
    const char *ptr;
    uint64_t len;
} pl_gguf_str;

typedef struct pl_gguf_tensor {
    const char *name;          /* NUL-terminated copy */
    pl_dtype dtype;
    uint32_t n_dims;           /* 1..4 */
    int64_t ne[4];             /* unused dims are 1 */
    uint64_t offset;           /* from the start of the data section */
    uint64_t size;             /* bytes */
    const void *data;          /* inside the mapping, aligned to general.alignment */
} pl_gguf_tensor;

typedef struct pl_gguf pl_gguf;

/* Opens and validates a file. Messages are prefixed with the path's
 * basename. open_memory uses name as the prefix (NULL = "<memory>"). */
pl_status pl_gguf_open(const char *path, pl_gguf **out);
/* Validates an in-memory image (no copy: data must outlive the handle). */
pl_status pl_gguf_open_memory(const void *data, size_t size, const char *name, pl_gguf **out);
void pl_gguf_close(pl_gguf *g);

const char *pl_gguf_name(const pl_gguf *g);     /* the prefix used in messages */
uint32_t pl_gguf_version(const pl_gguf *g);
uint64_t pl_gguf_alignment(const pl_gguf *g);
const void *pl_gguf_base(const pl_gguf *g);     /* start of the mapping */
size_t pl_gguf_size(const pl_gguf *g);
/* File offset where the data section starts (tensor offsets are relative to
 * it). Added by the GGUF reader owner. */
uint64_t pl_gguf_data_offset(const pl_gguf *g);

/* ---- key/values ---- */
int64_t pl_gguf_n_kv(const pl_gguf *g);
int64_t pl_gguf_find_key(const pl_gguf *g, const char *key);   /* -1 if absent */
pl_gguf_str pl_gguf_kv_key(const pl_gguf *g, int64_t idx);
pl_gguf_type pl_gguf_kv_type(const pl_gguf *g, int64_t idx);
/* The serialized value of KV idx as it is in the file, the bytes after its u32
 * type field (for arrays: element type, count, elements). Used to copy a KV
 * verbatim (pl_gguf_writer_copy_kv). */
pl_status pl_gguf_kv_raw(const pl_gguf *g, int64_t idx, const void **data, uint64_t *size);

/* Typed getters by key. They return PL_ERR_NOT_FOUND if the key is absent and
 * PL_ERR_FORMAT (with a message naming key and types) if the stored type does
 * not convert: integer getters accept any integer type whose value fits;
 * pl_gguf_get_f32 accepts float32/float64. */
pl_status pl_gguf_get_u32(const pl_gguf *g, const char *key, uint32_t *out);
pl_status pl_gguf_get_i64(const pl_gguf *g, const char *key, int64_t *out);
pl_status pl_gguf_get_f32(const pl_gguf *g, const char *key, float *out);
pl_status pl_gguf_get_bool(const pl_gguf *g, const char *key, bool *out);
pl_status pl_gguf_get_str(const pl_gguf *g, const char *key, pl_gguf_str *out);

/* Arrays. pl_gguf_get_arr gives the element type and count. For arrays of
 * fixed-size elements, *data points at the first element inside the mapping
 * (possibly unaligned: read with memcpy or the helpers below). For string
 * arrays *data is NULL: use pl_gguf_arr_str. */
pl_status pl_gguf_get_arr(const pl_gguf *g, const char *key, pl_gguf_type *elem_type,
                          uint64_t *n, const void **data);
/* Element i of a string array (O(1): offsets are indexed at open). */
pl_status pl_gguf_arr_str(const pl_gguf *g, const char *key, uint64_t i, pl_gguf_str *out);
/* Element i of a numeric array converted to double / int64 (any numeric type). */
pl_status pl_gguf_arr_f64(const pl_gguf *g, const char *key, uint64_t i, double *out);
pl_status pl_gguf_arr_i64(const pl_gguf *g, const char *key, uint64_t i, int64_t *out);

/* ---- tensors ---- */
int64_t pl_gguf_n_tensors(const pl_gguf *g);
const pl_gguf_tensor *pl_gguf_tensor_at(const pl_gguf *g, int64_t i);
const pl_gguf_tensor *pl_gguf_find_tensor(const pl_gguf *g, const char *name); /* NULL if absent */

/* Size in bytes of one element type of a KV value (0 for string/array). */
size_t pl_gguf_type_size(pl_gguf_type t);
const char *pl_gguf_type_name(pl_gguf_type t);

#endif
