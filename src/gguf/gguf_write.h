/*
 * An in-memory GGUF builder that writes standard GGUF v3 files (the layout
 * llama.cpp's gguf writer produces, so llama.cpp and PocketLLM's reader both
 * read them):
 *
 *   header | key/values | tensor infos | zero padding to alignment |
 *   tensor 0 data | padding | tensor 1 data | padding | ...
 *
 * Tensors are laid out back to back in the order they were added, each padded
 * to general.alignment (default 32; set it with pl_gguf_writer_add_u32(w,
 * "general.alignment", A), A a power of two).
 *
 *     pl_gguf_writer *w;
 *     PL_TRY(pl_gguf_writer_create(&w));
 *     pl_gguf_writer_add_str(w, "general.architecture", "qwen3");
 *     int64_t ne[2] = {256, 8448};
 *     pl_gguf_writer_add_tensor(w, "token_embd.weight", PL_F16, 2, ne, data, nbytes);
 *     pl_status st = pl_gguf_writer_write_file(w, "out.gguf");
 *     pl_gguf_writer_free(w);
 *
 * Keys: setting a key that already exists replaces its value in place (as
 * llama.cpp's gguf_set_* do), so a quantizer can copy every KV of its input
 * and then override general.file_type. Everything passed in is copied,
 * except tensor data, which is referenced and must stay valid until the last
 * write (or is produced on demand by a fill callback).
 *
 * Every function validates its input (non-empty NUL-free keys, tensor names
 * 1..63 bytes, 1..4 positive dims, known dtype, ne[0] a multiple of the block
 * size, data size equal to the shape's byte size, no duplicate tensor names)
 * and returns PL_ERR_INVALID_ARG with a message otherwise; the writer is left
 * unchanged by a failed call.
 */
#ifndef PL_GGUF_GGUF_WRITE_H
#define PL_GGUF_GGUF_WRITE_H
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include "gguf/gguf.h"

typedef struct pl_gguf_writer pl_gguf_writer;

pl_status pl_gguf_writer_create(pl_gguf_writer **out);
void pl_gguf_writer_free(pl_gguf_writer *w);

/* ---- key/values ---- */
pl_status pl_gguf_writer_add_u8(pl_gguf_writer *w, const char *key, uint8_t v);
pl_status pl_gguf_writer_add_i8(pl_gguf_writer *w, const char *key, int8_t v);
pl_status pl_gguf_writer_add_u16(pl_gguf_writer *w, const char *key, uint16_t v);
pl_status pl_gguf_writer_add_i16(pl_gguf_writer *w, const char *key, int16_t v);
pl_status pl_gguf_writer_add_u32(pl_gguf_writer *w, const char *key, uint32_t v);
pl_status pl_gguf_writer_add_i32(pl_gguf_writer *w, const char *key, int32_t v);
pl_status pl_gguf_writer_add_u64(pl_gguf_writer *w, const char *key, uint64_t v);
pl_status pl_gguf_writer_add_i64(pl_gguf_writer *w, const char *key, int64_t v);
pl_status pl_gguf_writer_add_f32(pl_gguf_writer *w, const char *key, float v);
pl_status pl_gguf_writer_add_f64(pl_gguf_writer *w, const char *key, double v);
pl_status pl_gguf_writer_add_bool(pl_gguf_writer *w, const char *key, bool v);
/* A NUL-terminated string value. */
pl_status pl_gguf_writer_add_str(pl_gguf_writer *w, const char *key, const char *s);
/* A string value of len bytes (may contain NULs). */
pl_status pl_gguf_writer_add_str_n(pl_gguf_writer *w, const char *key, const char *s, uint64_t len);
/* An array of n fixed-size elements of elem_type (any type but string and
 * array), laid out as in the file: little-endian, packed. For bool arrays
 * each byte must be 0 or 1. */
pl_status pl_gguf_writer_add_arr(pl_gguf_writer *w, const char *key, pl_gguf_type elem_type,
                                 const void *data, uint64_t n);
/* An array of n NUL-terminated strings. */
pl_status pl_gguf_writer_add_arr_str(pl_gguf_writer *w, const char *key, const char *const *strs, uint64_t n);
/* An array of n strings with explicit lengths. */
pl_status pl_gguf_writer_add_arr_str_n(pl_gguf_writer *w, const char *key, const pl_gguf_str *strs, uint64_t n);
/* Copies KV idx of an open file verbatim (same key, type and value). */
pl_status pl_gguf_writer_copy_kv(pl_gguf_writer *w, const pl_gguf *g, int64_t idx);
/* Removes a key; PL_ERR_NOT_FOUND if absent. */
pl_status pl_gguf_writer_remove_key(pl_gguf_writer *w, const char *key);
int64_t pl_gguf_writer_n_kv(const pl_gguf_writer *w);

/* ---- tensors (file order = call order) ---- */
/* data: size bytes, which must equal the shape's byte size; referenced, not
 * copied. */
pl_status pl_gguf_writer_add_tensor(pl_gguf_writer *w, const char *name, pl_dtype dtype, uint32_t n_dims,
                                    const int64_t *ne, const void *data, uint64_t size);
/* For tensors produced at write time (generators, quantizers): fill is called
 * once per write with a zeroed buffer of the tensor's byte size and returns
 * PL_OK or an error (which aborts the write). */
typedef pl_status (*pl_gguf_fill_fn)(void *user, const char *name, void *dst, uint64_t size);
pl_status pl_gguf_writer_add_tensor_fill(pl_gguf_writer *w, const char *name, pl_dtype dtype, uint32_t n_dims,
                                         const int64_t *ne, pl_gguf_fill_fn fill, void *user);
int64_t pl_gguf_writer_n_tensors(const pl_gguf_writer *w);

/* ---- output ---- */
/* Total bytes the file will have (PL_ERR_INVALID_ARG for a bad alignment). */
pl_status pl_gguf_writer_file_size(const pl_gguf_writer *w, uint64_t *size);
/* Writes the file (a partial file is removed on failure). PL_ERR_IO on I/O
 * errors. */
pl_status pl_gguf_writer_write_file(const pl_gguf_writer *w, const char *path);
/* The whole file in one malloc'd buffer; release it with free(). */
pl_status pl_gguf_writer_to_memory(const pl_gguf_writer *w, void **buf, size_t *size);

#endif
