/*
 * GGUF v3 writer. See gguf_write.h.
 *
 * Each KV is kept as its key plus the exact bytes that follow the type field
 * in the file, so writing is concatenation and copying a KV from an open file
 * is a memcpy of its raw value. The layout (offsets, padding, total size) is
 * computed in one place, layout(), with overflow-checked arithmetic; both
 * outputs (memory, file) stream through the same emit path so they cannot
 * disagree.
 *
 * The limits enforced here are the reader's (and llama.cpp's), so anything
 * this writer produces can be read back.
 */
#include "gguf/gguf_write.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/status.h"

#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ != __ORDER_LITTLE_ENDIAN__
#error "the GGUF writer stores values with memcpy: it needs a little-endian host"
#endif

#define PLW_MAX_STRING (UINT64_C(1) << 30)
#define PLW_MAX_ARRAY (UINT64_C(1) << 30)
#define PLW_MAX_NAME 63 /* bytes, GGML_MAX_NAME - 1 */
#define PLW_DEFAULT_ALIGNMENT 32
#define PLW_N_TYPES 13

typedef struct plw_kv {
    char *key;
    size_t key_len;
    uint32_t type;
    uint8_t *val;       /* serialized value (after the type field) */
    size_t val_len;
} plw_kv;

typedef struct plw_tensor {
    char name[PLW_MAX_NAME + 1];
    size_t name_len;
    pl_dtype dtype;
    uint32_t n_dims;
    int64_t ne[4];
    uint64_t size;
    const void *data;
    pl_gguf_fill_fn fill;
    void *user;
} plw_tensor;

struct pl_gguf_writer {
    plw_kv *kv;
    int64_t n_kv, cap_kv;
    plw_tensor *t;
    int64_t n_t, cap_t;
};

static const uint8_t plw_type_size[PLW_N_TYPES] = {1, 1, 2, 2, 4, 4, 4, 1, 0, 0, 8, 8, 8};

pl_status pl_gguf_writer_create(pl_gguf_writer **out) {
    if (!out) return pl_errorf(PL_ERR_INVALID_ARG, "gguf writer: out is NULL");
    *out = calloc(1, sizeof **out);
    return *out ? PL_OK : pl_errorf(PL_ERR_NO_MEMORY, "gguf writer: out of memory");
}

void pl_gguf_writer_free(pl_gguf_writer *w) {
    if (!w) return;
    for (int64_t i = 0; i < w->n_kv; i++) {
        free(w->kv[i].key);
        free(w->kv[i].val);
    }
    free(w->kv);
    free(w->t);
    free(w);
}

int64_t pl_gguf_writer_n_kv(const pl_gguf_writer *w) { return w ? w->n_kv : 0; }
int64_t pl_gguf_writer_n_tensors(const pl_gguf_writer *w) { return w ? w->n_t : 0; }

/* Grows an array of elem-sized items to hold at least need items. */
static bool grow(void **arr, int64_t *cap, int64_t need, size_t elem) {
    if (need <= *cap) return true;
    int64_t nc = *cap ? *cap : 16;
    while (nc < need) {
        if (__builtin_mul_overflow(nc, 2, &nc)) return false;
    }
    size_t bytes;
    if (__builtin_mul_overflow((size_t)nc, elem, &bytes)) return false;
    void *p = realloc(*arr, bytes);
    if (!p) return false;
    *arr = p;
    *cap = nc;
    return true;
}

static int64_t find_kv(const pl_gguf_writer *w, const char *key, size_t len) {
    for (int64_t i = 0; i < w->n_kv; i++)
        if (w->kv[i].key_len == len && memcmp(w->kv[i].key, key, len) == 0) return i;
    return -1;
}

static pl_status check_key(const pl_gguf_writer *w, const char *key) {
    if (!w || !key) return pl_errorf(PL_ERR_INVALID_ARG, "gguf writer: NULL writer or key");
    size_t len = strlen(key);
    if (len == 0) return pl_errorf(PL_ERR_INVALID_ARG, "gguf writer: empty key");
    if (len > PLW_MAX_STRING) return pl_errorf(PL_ERR_INVALID_ARG, "gguf writer: key longer than 1 GiB");
    return PL_OK;
}

/* Takes ownership of val (freed on failure too). */
static pl_status set_kv(pl_gguf_writer *w, const char *key, uint32_t type, uint8_t *val, size_t val_len) {
    pl_status st = check_key(w, key);
    if (st != PL_OK) {
        free(val);
        return st;
    }
    size_t len = strlen(key);
    int64_t i = find_kv(w, key, len);
    if (i >= 0) {
        free(w->kv[i].val);
        w->kv[i].type = type;
        w->kv[i].val = val;
        w->kv[i].val_len = val_len;
        return PL_OK;
    }
    char *k = malloc(len + 1);
    if (!k || !grow((void **)&w->kv, &w->cap_kv, w->n_kv + 1, sizeof *w->kv)) {
        free(k);
        free(val);
        return pl_errorf(PL_ERR_NO_MEMORY, "gguf writer: out of memory adding key '%s'", key);
    }
    memcpy(k, key, len + 1);
    w->kv[w->n_kv++] = (plw_kv){k, len, type, val, val_len};
    return PL_OK;
}

static pl_status set_scalar(pl_gguf_writer *w, const char *key, pl_gguf_type type, const void *v) {
    size_t n = plw_type_size[type];
    uint8_t *val = malloc(n);
    if (!val) return pl_errorf(PL_ERR_NO_MEMORY, "gguf writer: out of memory");
    memcpy(val, v, n);
    return set_kv(w, key, (uint32_t)type, val, n);
}

pl_status pl_gguf_writer_add_u8(pl_gguf_writer *w, const char *key, uint8_t v) { return set_scalar(w, key, PL_GGUF_UINT8, &v); }
pl_status pl_gguf_writer_add_i8(pl_gguf_writer *w, const char *key, int8_t v) { return set_scalar(w, key, PL_GGUF_INT8, &v); }
pl_status pl_gguf_writer_add_u16(pl_gguf_writer *w, const char *key, uint16_t v) { return set_scalar(w, key, PL_GGUF_UINT16, &v); }
pl_status pl_gguf_writer_add_i16(pl_gguf_writer *w, const char *key, int16_t v) { return set_scalar(w, key, PL_GGUF_INT16, &v); }
pl_status pl_gguf_writer_add_u32(pl_gguf_writer *w, const char *key, uint32_t v) { return set_scalar(w, key, PL_GGUF_UINT32, &v); }
pl_status pl_gguf_writer_add_i32(pl_gguf_writer *w, const char *key, int32_t v) { return set_scalar(w, key, PL_GGUF_INT32, &v); }
pl_status pl_gguf_writer_add_u64(pl_gguf_writer *w, const char *key, uint64_t v) { return set_scalar(w, key, PL_GGUF_UINT64, &v); }
pl_status pl_gguf_writer_add_i64(pl_gguf_writer *w, const char *key, int64_t v) { return set_scalar(w, key, PL_GGUF_INT64, &v); }
pl_status pl_gguf_writer_add_f32(pl_gguf_writer *w, const char *key, float v) { return set_scalar(w, key, PL_GGUF_FLOAT32, &v); }
pl_status pl_gguf_writer_add_f64(pl_gguf_writer *w, const char *key, double v) { return set_scalar(w, key, PL_GGUF_FLOAT64, &v); }

pl_status pl_gguf_writer_add_bool(pl_gguf_writer *w, const char *key, bool v) {
    uint8_t b = v ? 1 : 0;
    return set_scalar(w, key, PL_GGUF_BOOL, &b);
}

pl_status pl_gguf_writer_add_str_n(pl_gguf_writer *w, const char *key, const char *s, uint64_t len) {
    PL_TRY(check_key(w, key));
    if (!s && len) return pl_errorf(PL_ERR_INVALID_ARG, "gguf writer: NULL string for key '%s'", key);
    if (len > PLW_MAX_STRING)
        return pl_errorf(PL_ERR_INVALID_ARG, "gguf writer: value of key '%s' is longer than 1 GiB", key);
    size_t n = 8 + (size_t)len;
    uint8_t *val = malloc(n);
    if (!val) return pl_errorf(PL_ERR_NO_MEMORY, "gguf writer: out of memory");
    memcpy(val, &len, 8);
    if (len) memcpy(val + 8, s, (size_t)len);
    return set_kv(w, key, PL_GGUF_STRING, val, n);
}

pl_status pl_gguf_writer_add_str(pl_gguf_writer *w, const char *key, const char *s) {
    if (!s) return pl_errorf(PL_ERR_INVALID_ARG, "gguf writer: NULL string for key '%s'", key ? key : "?");
    return pl_gguf_writer_add_str_n(w, key, s, strlen(s));
}

pl_status pl_gguf_writer_add_arr(pl_gguf_writer *w, const char *key, pl_gguf_type elem_type, const void *data,
                                 uint64_t n) {
    PL_TRY(check_key(w, key));
    if ((unsigned)elem_type >= PLW_N_TYPES || elem_type == PL_GGUF_STRING || elem_type == PL_GGUF_ARRAY)
        return pl_errorf(PL_ERR_INVALID_ARG, "gguf writer: array '%s': element type %d is not a fixed-size type",
                         key, (int)elem_type);
    if (!data && n) return pl_errorf(PL_ERR_INVALID_ARG, "gguf writer: array '%s': NULL data", key);
    if (n > PLW_MAX_ARRAY)
        return pl_errorf(PL_ERR_INVALID_ARG, "gguf writer: array '%s' has more than 2^30 elements", key);
    size_t es = plw_type_size[elem_type];
    if (elem_type == PL_GGUF_BOOL) {
        const uint8_t *b = data;
        for (uint64_t i = 0; i < n; i++)
            if (b[i] > 1)
                return pl_errorf(PL_ERR_INVALID_ARG, "gguf writer: bool array '%s' element %llu is %u, not 0 or 1",
                                 key, (unsigned long long)i, b[i]);
    }
    size_t bytes = (size_t)n * es; /* n <= 2^30, es <= 8 */
    uint8_t *val = malloc(12 + bytes);
    if (!val) return pl_errorf(PL_ERR_NO_MEMORY, "gguf writer: out of memory for array '%s'", key);
    uint32_t et = (uint32_t)elem_type;
    memcpy(val, &et, 4);
    memcpy(val + 4, &n, 8);
    if (bytes) memcpy(val + 12, data, bytes);
    return set_kv(w, key, PL_GGUF_ARRAY, val, 12 + bytes);
}

pl_status pl_gguf_writer_add_arr_str_n(pl_gguf_writer *w, const char *key, const pl_gguf_str *strs, uint64_t n) {
    PL_TRY(check_key(w, key));
    if (!strs && n) return pl_errorf(PL_ERR_INVALID_ARG, "gguf writer: array '%s': NULL strings", key);
    if (n > PLW_MAX_ARRAY)
        return pl_errorf(PL_ERR_INVALID_ARG, "gguf writer: array '%s' has more than 2^30 elements", key);
    size_t total = 12;
    for (uint64_t i = 0; i < n; i++) {
        if (!strs[i].ptr && strs[i].len)
            return pl_errorf(PL_ERR_INVALID_ARG, "gguf writer: array '%s' element %llu is NULL", key,
                             (unsigned long long)i);
        if (strs[i].len > PLW_MAX_STRING)
            return pl_errorf(PL_ERR_INVALID_ARG, "gguf writer: array '%s' element %llu is longer than 1 GiB", key,
                             (unsigned long long)i);
        if (__builtin_add_overflow(total, (size_t)strs[i].len + 8, &total))
            return pl_errorf(PL_ERR_INVALID_ARG, "gguf writer: array '%s' is too large", key);
    }
    uint8_t *val = malloc(total);
    if (!val) return pl_errorf(PL_ERR_NO_MEMORY, "gguf writer: out of memory for array '%s'", key);
    uint32_t et = PL_GGUF_STRING;
    memcpy(val, &et, 4);
    memcpy(val + 4, &n, 8);
    size_t pos = 12;
    for (uint64_t i = 0; i < n; i++) {
        uint64_t len = strs[i].len;
        memcpy(val + pos, &len, 8);
        if (len) memcpy(val + pos + 8, strs[i].ptr, (size_t)len);
        pos += 8 + (size_t)len;
    }
    return set_kv(w, key, PL_GGUF_ARRAY, val, total);
}

pl_status pl_gguf_writer_add_arr_str(pl_gguf_writer *w, const char *key, const char *const *strs, uint64_t n) {
    PL_TRY(check_key(w, key));
    if (!strs && n) return pl_errorf(PL_ERR_INVALID_ARG, "gguf writer: array '%s': NULL strings", key);
    if (n > PLW_MAX_ARRAY)
        return pl_errorf(PL_ERR_INVALID_ARG, "gguf writer: array '%s' has more than 2^30 elements", key);
    pl_gguf_str *v = malloc(n ? (size_t)n * sizeof *v : 1);
    if (!v) return pl_errorf(PL_ERR_NO_MEMORY, "gguf writer: out of memory for array '%s'", key);
    for (uint64_t i = 0; i < n; i++) {
        if (!strs[i]) {
            free(v);
            return pl_errorf(PL_ERR_INVALID_ARG, "gguf writer: array '%s' element %llu is NULL", key,
                             (unsigned long long)i);
        }
        v[i].ptr = strs[i];
        v[i].len = strlen(strs[i]);
    }
    pl_status st = pl_gguf_writer_add_arr_str_n(w, key, v, n);
    free(v);
    return st;
}

pl_status pl_gguf_writer_copy_kv(pl_gguf_writer *w, const pl_gguf *g, int64_t idx) {
    if (!w || !g || idx < 0 || idx >= pl_gguf_n_kv(g))
        return pl_errorf(PL_ERR_INVALID_ARG, "gguf writer: copy_kv: bad argument");
    pl_gguf_str k = pl_gguf_kv_key(g, idx);
    const void *raw;
    uint64_t raw_size;
    PL_TRY(pl_gguf_kv_raw(g, idx, &raw, &raw_size));
    /* The reader guarantees keys are non-empty, NUL-free and within the file. */
    char *key = malloc((size_t)k.len + 1);
    uint8_t *val = malloc(raw_size ? (size_t)raw_size : 1);
    if (!key || !val) {
        free(key);
        free(val);
        return pl_errorf(PL_ERR_NO_MEMORY, "gguf writer: out of memory copying a key");
    }
    memcpy(key, k.ptr, (size_t)k.len);
    key[k.len] = 0;
    memcpy(val, raw, (size_t)raw_size);
    pl_status st = set_kv(w, key, (uint32_t)pl_gguf_kv_type(g, idx), val, (size_t)raw_size);
    free(key);
    return st;
}

pl_status pl_gguf_writer_remove_key(pl_gguf_writer *w, const char *key) {
    PL_TRY(check_key(w, key));
    int64_t i = find_kv(w, key, strlen(key));
    if (i < 0) return pl_errorf(PL_ERR_NOT_FOUND, "gguf writer: key '%s' not found", key);
    free(w->kv[i].key);
    free(w->kv[i].val);
    memmove(&w->kv[i], &w->kv[i + 1], (size_t)(w->n_kv - i - 1) * sizeof *w->kv);
    w->n_kv--;
    return PL_OK;
}

/* ---- tensors ------------------------------------------------------------- */

static pl_status add_tensor(pl_gguf_writer *w, const char *name, pl_dtype dtype, uint32_t n_dims, const int64_t *ne,
                            const void *data, uint64_t size, bool check_size, pl_gguf_fill_fn fill, void *user) {
    if (!w || !name || !ne) return pl_errorf(PL_ERR_INVALID_ARG, "gguf writer: NULL writer, name or shape");
    size_t len = strlen(name);
    if (len == 0 || len > PLW_MAX_NAME)
        return pl_errorf(PL_ERR_INVALID_ARG, "gguf writer: tensor name '%s' must be 1 to %d bytes", name,
                         PLW_MAX_NAME);
    if (n_dims < 1 || n_dims > 4)
        return pl_errorf(PL_ERR_INVALID_ARG, "gguf writer: tensor '%s' has %u dimensions (must be 1 to 4)", name,
                         n_dims);
    const pl_dtype_traits *tr = pl_dtype_get((uint32_t)dtype);
    if (!tr) return pl_errorf(PL_ERR_INVALID_ARG, "gguf writer: tensor '%s' has unknown dtype %d", name, (int)dtype);
    int64_t nelem = 1;
    for (uint32_t j = 0; j < n_dims; j++) {
        if (ne[j] <= 0)
            return pl_errorf(PL_ERR_INVALID_ARG, "gguf writer: tensor '%s' dimension %u is %lld (must be positive)",
                             name, j, (long long)ne[j]);
        if (__builtin_mul_overflow(nelem, ne[j], &nelem))
            return pl_errorf(PL_ERR_INVALID_ARG, "gguf writer: tensor '%s' has too many elements", name);
    }
    if (ne[0] % tr->block_size != 0)
        return pl_errorf(PL_ERR_INVALID_ARG,
                         "gguf writer: tensor '%s' row of %lld elements is not a multiple of the %s block size %lld",
                         name, (long long)ne[0], tr->name, (long long)tr->block_size);
    uint64_t bytes;
    if (__builtin_mul_overflow((uint64_t)(nelem / tr->block_size), (uint64_t)tr->type_size, &bytes) ||
        bytes > SIZE_MAX)
        return pl_errorf(PL_ERR_INVALID_ARG, "gguf writer: tensor '%s' byte size overflows", name);
    if (check_size && (size != bytes || !data))
        return pl_errorf(PL_ERR_INVALID_ARG,
                         "gguf writer: tensor '%s' data is %llu bytes, but its %s shape needs %llu", name,
                         (unsigned long long)size, tr->name, (unsigned long long)bytes);
    for (int64_t i = 0; i < w->n_t; i++)
        if (w->t[i].name_len == len && memcmp(w->t[i].name, name, len) == 0)
            return pl_errorf(PL_ERR_INVALID_ARG, "gguf writer: duplicate tensor name '%s'", name);
    if (!grow((void **)&w->t, &w->cap_t, w->n_t + 1, sizeof *w->t))
        return pl_errorf(PL_ERR_NO_MEMORY, "gguf writer: out of memory adding tensor '%s'", name);
    plw_tensor *t = &w->t[w->n_t++];
    memset(t, 0, sizeof *t);
    memcpy(t->name, name, len + 1);
    t->name_len = len;
    t->dtype = dtype;
    t->n_dims = n_dims;
    for (uint32_t j = 0; j < 4; j++) t->ne[j] = j < n_dims ? ne[j] : 1;
    t->size = bytes;
    t->data = data;
    t->fill = fill;
    t->user = user;
    return PL_OK;
}

pl_status pl_gguf_writer_add_tensor(pl_gguf_writer *w, const char *name, pl_dtype dtype, uint32_t n_dims,
                                    const int64_t *ne, const void *data, uint64_t size) {
    return add_tensor(w, name, dtype, n_dims, ne, data, size, true, NULL, NULL);
}

pl_status pl_gguf_writer_add_tensor_fill(pl_gguf_writer *w, const char *name, pl_dtype dtype, uint32_t n_dims,
                                         const int64_t *ne, pl_gguf_fill_fn fill, void *user) {
    if (!fill) return pl_errorf(PL_ERR_INVALID_ARG, "gguf writer: tensor '%s': NULL fill callback", name ? name : "?");
    return add_tensor(w, name, dtype, n_dims, ne, NULL, 0, false, fill, user);
}

/* ---- layout and output --------------------------------------------------- */

typedef struct plw_layout {
    uint64_t alignment;
    uint64_t header;       /* bytes before the padding that precedes the data section */
    uint64_t data_offset;  /* start of the data section */
    uint64_t total;        /* file size */
} plw_layout;

static bool pad_to(uint64_t x, uint64_t a, uint64_t *out) {
    if (__builtin_add_overflow(x, a - 1, out)) return false;
    *out &= ~(a - 1);
    return true;
}

static pl_status layout(const pl_gguf_writer *w, plw_layout *L) {
    if (!w) return pl_errorf(PL_ERR_INVALID_ARG, "gguf writer: NULL writer");
    L->alignment = PLW_DEFAULT_ALIGNMENT;
    int64_t ai = find_kv(w, "general.alignment", strlen("general.alignment"));
    if (ai >= 0) {
        uint32_t a = 0;
        if (w->kv[ai].type != PL_GGUF_UINT32)
            return pl_errorf(PL_ERR_INVALID_ARG, "gguf writer: general.alignment must be a u32");
        memcpy(&a, w->kv[ai].val, 4);
        if (a == 0 || (a & (a - 1)) != 0)
            return pl_errorf(PL_ERR_INVALID_ARG, "gguf writer: general.alignment %u is not a nonzero power of two", a);
        L->alignment = a;
    }
    bool ok = true;
    uint64_t pos = 24, x;
    for (int64_t i = 0; i < w->n_kv && ok; i++) {
        ok = !__builtin_add_overflow((uint64_t)w->kv[i].key_len, (uint64_t)12 + w->kv[i].val_len, &x) &&
             !__builtin_add_overflow(pos, x, &pos);
    }
    for (int64_t i = 0; i < w->n_t && ok; i++)
        ok = !__builtin_add_overflow(pos, 8 + w->t[i].name_len + 4 + 8 * (uint64_t)w->t[i].n_dims + 4 + 8, &pos);
    L->header = pos;
    ok = ok && pad_to(pos, L->alignment, &L->data_offset);
    pos = L->data_offset;
    for (int64_t i = 0; i < w->n_t && ok; i++)
        ok = pad_to(w->t[i].size, L->alignment, &x) && !__builtin_add_overflow(pos, x, &pos);
    if (!ok || pos > SIZE_MAX) return pl_errorf(PL_ERR_INVALID_ARG, "gguf writer: file size overflows");
    L->total = pos;
    return PL_OK;
}

pl_status pl_gguf_writer_file_size(const pl_gguf_writer *w, uint64_t *size) {
    plw_layout L;
    PL_TRY(layout(w, &L));
    if (size) *size = L.total;
    return PL_OK;
}

/* Output sink: either a memory buffer of known size or a FILE. */
typedef struct plw_sink {
    uint8_t *mem;
    size_t pos;
    FILE *f;
    const char *path;
} plw_sink;

static pl_status emit(plw_sink *s, const void *p, size_t n) {
    if (!n) return PL_OK;
    if (s->mem) {
        memcpy(s->mem + s->pos, p, n);
        s->pos += n;
        return PL_OK;
    }
    if (fwrite(p, 1, n, s->f) != n)
        return pl_errorf(PL_ERR_IO, "%s: write failed: %s", s->path, strerror(errno));
    s->pos += n;
    return PL_OK;
}

static pl_status emit_zeros(plw_sink *s, uint64_t n) {
    static const uint8_t zeros[4096];
    while (n) {
        size_t k = n < sizeof zeros ? (size_t)n : sizeof zeros;
        PL_TRY(emit(s, zeros, k));
        n -= k;
    }
    return PL_OK;
}

static pl_status emit_u32(plw_sink *s, uint32_t v) { return emit(s, &v, 4); }
static pl_status emit_u64(plw_sink *s, uint64_t v) { return emit(s, &v, 8); }

static pl_status emit_tensor_data(plw_sink *s, const plw_tensor *t) {
    if (!t->fill) return emit(s, t->data, (size_t)t->size);
    if (s->mem) {
        /* Fill in place: no extra copy. */
        memset(s->mem + s->pos, 0, (size_t)t->size);
        pl_status st = t->fill(t->user, t->name, s->mem + s->pos, t->size);
        if (st != PL_OK) return st;
        s->pos += (size_t)t->size;
        return PL_OK;
    }
    void *buf = calloc(1, t->size ? (size_t)t->size : 1);
    if (!buf) return pl_errorf(PL_ERR_NO_MEMORY, "gguf writer: out of memory filling tensor '%s'", t->name);
    pl_status st = t->fill(t->user, t->name, buf, t->size);
    if (st == PL_OK) st = emit(s, buf, (size_t)t->size);
    free(buf);
    return st;
}

static pl_status emit_all(const pl_gguf_writer *w, const plw_layout *L, plw_sink *s) {
    PL_TRY(emit(s, "GGUF", 4));
    PL_TRY(emit_u32(s, 3));
    PL_TRY(emit_u64(s, (uint64_t)w->n_t));
    PL_TRY(emit_u64(s, (uint64_t)w->n_kv));
    for (int64_t i = 0; i < w->n_kv; i++) {
        const plw_kv *kv = &w->kv[i];
        PL_TRY(emit_u64(s, kv->key_len));
        PL_TRY(emit(s, kv->key, kv->key_len));
        PL_TRY(emit_u32(s, kv->type));
        PL_TRY(emit(s, kv->val, kv->val_len));
    }
    uint64_t off = 0;
    for (int64_t i = 0; i < w->n_t; i++) {
        const plw_tensor *t = &w->t[i];
        PL_TRY(emit_u64(s, t->name_len));
        PL_TRY(emit(s, t->name, t->name_len));
        PL_TRY(emit_u32(s, t->n_dims));
        for (uint32_t j = 0; j < t->n_dims; j++) PL_TRY(emit_u64(s, (uint64_t)t->ne[j]));
        PL_TRY(emit_u32(s, (uint32_t)t->dtype));
        PL_TRY(emit_u64(s, off));
        uint64_t padded;
        pad_to(t->size, L->alignment, &padded);   /* cannot overflow: layout() checked */
        off += padded;
    }
    PL_TRY(emit_zeros(s, L->data_offset - L->header));
    for (int64_t i = 0; i < w->n_t; i++) {
        const plw_tensor *t = &w->t[i];
        PL_TRY(emit_tensor_data(s, t));
        uint64_t padded;
        pad_to(t->size, L->alignment, &padded);
        PL_TRY(emit_zeros(s, padded - t->size));
    }
    if (s->pos != L->total)
        return pl_errorf(PL_ERR_INTERNAL, "gguf writer: wrote %zu bytes, layout said %llu", s->pos,
                         (unsigned long long)L->total);
    return PL_OK;
}

pl_status pl_gguf_writer_to_memory(const pl_gguf_writer *w, void **buf, size_t *size) {
    if (!buf || !size) return pl_errorf(PL_ERR_INVALID_ARG, "gguf writer: NULL output");
    *buf = NULL;
    *size = 0;
    plw_layout L;
    PL_TRY(layout(w, &L));
    uint8_t *mem = malloc((size_t)L.total);
    if (!mem) return pl_errorf(PL_ERR_NO_MEMORY, "gguf writer: out of memory for %llu bytes", (unsigned long long)L.total);
    plw_sink s = {mem, 0, NULL, "<memory>"};
    pl_status st = emit_all(w, &L, &s);
    if (st != PL_OK) {
        free(mem);
        return st;
    }
    *buf = mem;
    *size = (size_t)L.total;
    return PL_OK;
}

pl_status pl_gguf_writer_write_file(const pl_gguf_writer *w, const char *path) {
    if (!path) return pl_errorf(PL_ERR_INVALID_ARG, "gguf writer: NULL path");
    plw_layout L;
    PL_TRY(layout(w, &L));
    FILE *f = fopen(path, "wb");
    if (!f) return pl_errorf(PL_ERR_IO, "%s: cannot create: %s", path, strerror(errno));
    setvbuf(f, NULL, _IOFBF, 1 << 20);
    plw_sink s = {NULL, 0, f, path};
    pl_status st = emit_all(w, &L, &s);
    if (st == PL_OK && fflush(f) != 0) st = pl_errorf(PL_ERR_IO, "%s: write failed: %s", path, strerror(errno));
    if (fclose(f) != 0 && st == PL_OK) st = pl_errorf(PL_ERR_IO, "%s: close failed: %s", path, strerror(errno));
    if (st != PL_OK) remove(path);
    return st;
}
