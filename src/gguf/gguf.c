/*
 * GGUF reader (v2 and v3, little-endian). See gguf.h for the contract.
 *
 * Design:
 *   - The file is mapped read-only (or, for pl_gguf_open_memory, borrowed)
 *     and parsed once with a bounds-checked cursor. Nothing is copied except
 *     tensor names (so callers get NUL-terminated strings); KV strings and
 *     arrays point into the mapping.
 *   - Every count read from the file is checked against the bytes that are
 *     actually left before anything is allocated from it, so the memory we
 *     allocate is bounded by a small multiple of the file size whatever the
 *     header claims.
 *   - String arrays get an index of element offsets at open (one pass over
 *     the array, which we must make anyway to validate it), so element i is
 *     O(1) afterwards; the Qwen3 vocabulary has ~151k tokens and merges.
 *   - Keys and tensor names go into hash tables, so duplicate detection is
 *     linear rather than quadratic even for hostile files with millions of
 *     entries, and lookups are O(1).
 *
 * Limits match llama.cpp's gguf.cpp where it has one (1 GiB strings, 2^30
 * array elements, tensor names shorter than GGML_MAX_NAME = 64 bytes), so a
 * file we accept is one llama.cpp can read. We are stricter in a few places
 * the format leaves open: bools must be 0 or 1, dimensions must be positive,
 * n_dims must be 1..4, keys and names may not contain NUL bytes, and tensors
 * may not overlap. Unlike llama.cpp we do not require tensors to be packed
 * back to back in table order; only aligned, in bounds and disjoint.
 */
#include "gguf/gguf.h"

#include <errno.h>
#include <fcntl.h>
#include <float.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "core/status.h"

#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ != __ORDER_LITTLE_ENDIAN__
#error "the GGUF reader reads little-endian values with memcpy: it needs a little-endian host"
#endif

#define PL_GGUF_MAX_STRING (UINT64_C(1) << 30)      /* llama.cpp's GGUF_MAX_STRING_LENGTH */
#define PL_GGUF_MAX_ARRAY (UINT64_C(1) << 30)       /* llama.cpp's GGUF_MAX_ARRAY_ELEMENTS */
#define PL_GGUF_MAX_NAME 64                         /* GGML_MAX_NAME, including the NUL */
#define PL_GGUF_DEFAULT_ALIGNMENT 32
#define PL_GGUF_HEADER_BYTES 24                     /* magic, version, n_tensors, n_kv */
/* The smallest possible encodings, used to reject absurd counts up front:
 * a KV is a u64 key length, a >= 1 byte key, a u32 type and a >= 1 byte value;
 * a tensor info is a u64 name length, a >= 1 byte name, a u32 n_dims, at least
 * one i64 dimension, a u32 type and a u64 offset. */
#define PL_GGUF_MIN_KV_BYTES 14
#define PL_GGUF_MIN_TENSOR_BYTES 33
#define PL_GGUF_N_TYPES 13

typedef struct pl_gguf_kv {
    pl_gguf_str key;
    pl_gguf_type type;        /* PL_GGUF_ARRAY for arrays */
    pl_gguf_type elem;        /* arrays: element type; scalars: == type */
    uint64_t n;               /* arrays: element count; scalars: 1 */
    const uint8_t *data;      /* scalars: the value (strings: the characters); arrays: element 0 */
    uint64_t str_len;         /* scalar strings: length */
    const uint8_t *raw;       /* the serialized value, right after the u32 type field */
    uint64_t raw_size;
    uint64_t *str_off;        /* string arrays: offset from base of each element's length prefix */
} pl_gguf_kv;

/* Open-addressing hash set of indices (stored +1, 0 = empty). */
typedef struct pl_gguf_htab {
    int64_t *slots;
    uint64_t mask;            /* capacity - 1; capacity is a power of two (0 slots: mask unused) */
    uint64_t count;
} pl_gguf_htab;

struct pl_gguf {
    char *name;
    const uint8_t *base;
    size_t size;
    void *map;                /* non-NULL when we own an mmap of map_size bytes */
    size_t map_size;
    uint32_t version;
    uint64_t alignment;
    uint64_t data_offset;
    int64_t n_kv;             /* while parsing: the entries initialised so far */
    uint64_t kv_cap;
    pl_gguf_kv *kv;
    pl_gguf_htab kv_index;
    int64_t n_tensors;
    uint64_t tensor_cap;
    pl_gguf_tensor *tensors;
    char *names;              /* tensor_cap * PL_GGUF_MAX_NAME bytes of NUL-terminated names */
    pl_gguf_htab tensor_index;
};

/* ---- small helpers ------------------------------------------------------- */

static const char *const pl_gguf_type_names[PL_GGUF_N_TYPES] = {
    "u8", "i8", "u16", "i16", "u32", "i32", "f32", "bool", "str", "arr", "u64", "i64", "f64",
};
static const uint8_t pl_gguf_type_sizes[PL_GGUF_N_TYPES] = {1, 1, 2, 2, 4, 4, 4, 1, 0, 0, 8, 8, 8};

size_t pl_gguf_type_size(pl_gguf_type t) {
    return (unsigned)t < PL_GGUF_N_TYPES ? pl_gguf_type_sizes[t] : 0;
}

const char *pl_gguf_type_name(pl_gguf_type t) {
    return (unsigned)t < PL_GGUF_N_TYPES ? pl_gguf_type_names[t] : "?";
}

/* Formats "<name>: <message>" as the thread's last error. */
static pl_status PL_PRINTF(3, 4) gerr(const pl_gguf *g, pl_status st, const char *fmt, ...) {
    char msg[768];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    return pl_errorf(st, "%s: %s", g->name, msg);
}

/* Keys and names come from the file: show them printable and bounded, so an
 * error message never carries control bytes or megabytes of garbage. */
typedef struct { char s[96]; } pl_gguf_shown;

static pl_gguf_shown show(const void *p, uint64_t len) {
    pl_gguf_shown out;
    const unsigned char *c = p;
    size_t max = sizeof out.s - 4, n = 0;
    for (uint64_t i = 0; i < len && n < max; i++)
        out.s[n++] = (c[i] >= 0x20 && c[i] < 0x7f) ? (char)c[i] : '?';
    if (len > max) {
        memcpy(out.s + n, "...", 3);
        n += 3;
    }
    out.s[n] = 0;
    return out;
}

/* FNV-1a: keys are short and this is not exposed to timing attacks. */
static uint64_t hash_bytes(const void *p, size_t n) {
    const unsigned char *c = p;
    uint64_t h = UINT64_C(1469598103934665603);
    for (size_t i = 0; i < n; i++) {
        h ^= c[i];
        h *= UINT64_C(1099511628211);
    }
    return h;
}

typedef pl_gguf_str (*pl_gguf_keyfn)(const pl_gguf *g, int64_t idx);

static pl_gguf_str kv_key_of(const pl_gguf *g, int64_t idx) { return g->kv[idx].key; }

/* Reads the name buffer, not tensors[idx].name: the buffer may move while
 * the table is parsed, and the pointers are set once it no longer can. */
static pl_gguf_str tensor_name_of(const pl_gguf *g, int64_t idx) {
    const char *name = g->names + (size_t)idx * PL_GGUF_MAX_NAME;
    pl_gguf_str s = {name, strlen(name)};
    return s;
}

/* Returns the index stored under s, or -1. */
static int64_t htab_lookup(const pl_gguf *g, const pl_gguf_htab *h, pl_gguf_keyfn keyof, const char *s,
                           size_t n) {
    if (!h->slots) return -1;
    for (uint64_t i = hash_bytes(s, n) & h->mask;; i = (i + 1) & h->mask) {
        int64_t v = h->slots[i];
        if (v == 0) return -1;
        pl_gguf_str k = keyof(g, v - 1);
        if (k.len == n && memcmp(k.ptr, s, n) == 0) return v - 1;
    }
}

/* Inserts idx under s, unless s is already present: then returns the index
 * stored under it (a duplicate). Returns -1 after inserting, -2 when out of
 * memory. The table grows as entries arrive (load factor <= 1/2), so its
 * size follows what the file really contains, not what its header claims. */
static int64_t htab_insert(const pl_gguf *g, pl_gguf_htab *h, pl_gguf_keyfn keyof, const char *s, size_t n,
                           int64_t idx) {
    int64_t found = htab_lookup(g, h, keyof, s, n);
    if (found >= 0) return found;
    uint64_t cap = h->slots ? h->mask + 1 : 0;
    if ((h->count + 1) * 2 > cap) {
        uint64_t ncap = cap ? cap * 2 : 16;
        if (ncap > SIZE_MAX / sizeof(int64_t)) return -2;
        int64_t *ns = calloc((size_t)ncap, sizeof *ns);
        if (!ns) return -2;
        for (uint64_t i = 0; i < cap; i++) {
            int64_t v = h->slots[i];
            if (!v) continue;
            pl_gguf_str k = keyof(g, v - 1);
            uint64_t j = hash_bytes(k.ptr, (size_t)k.len) & (ncap - 1);
            while (ns[j]) j = (j + 1) & (ncap - 1);
            ns[j] = v;
        }
        free(h->slots);
        h->slots = ns;
        h->mask = ncap - 1;
    }
    uint64_t i = hash_bytes(s, n) & h->mask;
    while (h->slots[i]) i = (i + 1) & h->mask;
    h->slots[i] = idx + 1;
    h->count++;
    return -1;
}

/* Makes room for `need` elements of `elem` bytes (new ones zeroed), growing
 * geometrically but never past `max` (the count the header claims). */
static bool grow_zeroed(void **arr, uint64_t *cap, uint64_t need, uint64_t max, size_t elem) {
    if (need <= *cap) return true;
    uint64_t nc = *cap ? *cap * 2 : 16;
    if (nc > max) nc = max;
    if (nc < need) nc = need;
    if (nc > SIZE_MAX / elem) return false;
    void *p = realloc(*arr, (size_t)nc * elem);
    if (!p) return false;
    memset((char *)p + (size_t)*cap * elem, 0, (size_t)(nc - *cap) * elem);
    *arr = p;
    *cap = nc;
    return true;
}

/* ---- bounds-checked cursor ----------------------------------------------- */

typedef struct pl_gguf_rd {
    const uint8_t *p;
    uint64_t size;
    uint64_t pos;
} pl_gguf_rd;

static inline uint64_t rd_left(const pl_gguf_rd *r) { return r->size - r->pos; }

static inline bool rd_u32(pl_gguf_rd *r, uint32_t *v) {
    if (rd_left(r) < 4) return false;
    memcpy(v, r->p + r->pos, 4);
    r->pos += 4;
    return true;
}

static inline bool rd_u64(pl_gguf_rd *r, uint64_t *v) {
    if (rd_left(r) < 8) return false;
    memcpy(v, r->p + r->pos, 8);
    r->pos += 8;
    return true;
}

typedef enum { PL_STR_OK, PL_STR_TRUNC, PL_STR_HUGE, PL_STR_PAST_END } pl_gguf_strres;

static inline pl_gguf_strres rd_str(pl_gguf_rd *r, pl_gguf_str *out) {
    uint64_t len;
    if (!rd_u64(r, &len)) return PL_STR_TRUNC;
    out->len = len;
    if (len > PL_GGUF_MAX_STRING) return PL_STR_HUGE;
    if (len > rd_left(r)) return PL_STR_PAST_END;
    out->ptr = (const char *)(r->p + r->pos);
    r->pos += len;
    return PL_STR_OK;
}

static pl_status str_error(const pl_gguf *g, pl_gguf_strres res, uint64_t len, const char *what) {
    switch (res) {
    case PL_STR_TRUNC:
        return gerr(g, PL_ERR_FORMAT, "file is truncated in the length of %s", what);
    case PL_STR_HUGE:
        return gerr(g, PL_ERR_FORMAT, "string length %llu of %s exceeds the 1 GiB limit",
                    (unsigned long long)len, what);
    default:
        return gerr(g, PL_ERR_FORMAT, "string length %llu of %s runs past the end of file",
                    (unsigned long long)len, what);
    }
}

/* ---- parsing ------------------------------------------------------------- */

static pl_status parse_header(pl_gguf *g, pl_gguf_rd *r, uint64_t *n_tensors, uint64_t *n_kv) {
    if (g->size < 4)
        return gerr(g, PL_ERR_FORMAT, "file is truncated: %zu bytes is too short for the GGUF magic", g->size);
    if (memcmp(g->base, "GGUF", 4) != 0) {
        /* A writer that packed the magic as a big-endian u32 would produce
         * "FUGG"; say what it is rather than "not GGUF". */
        if (memcmp(g->base, "FUGG", 4) == 0)
            return gerr(g, PL_ERR_FORMAT, "big-endian GGUF is not supported");
        return gerr(g, PL_ERR_FORMAT, "bad magic '%s' (expected 'GGUF'): not a GGUF file",
                    show(g->base, 4).s);
    }
    r->pos = 4;
    uint32_t version;
    if (!rd_u32(r, &version)) return gerr(g, PL_ERR_FORMAT, "file is truncated in the GGUF version");
    if (version == 0) return gerr(g, PL_ERR_FORMAT, "bad GGUF version 0");
    /* A big-endian file's version (2 or 3) reads as 0x02000000 / 0x03000000
     * here: the low half is zero for every plausible byte-swapped version. */
    if ((version & 0xFFFFu) == 0) {
        uint32_t swapped = __builtin_bswap32(version);
        if (swapped >= 1 && swapped <= 3)
            return gerr(g, PL_ERR_FORMAT, "big-endian GGUF is not supported (version field reads 0x%08x)", version);
        return gerr(g, PL_ERR_FORMAT, "unsupported GGUF version %u (only versions 2 and 3 are supported)", version);
    }
    if (version == 1)
        return gerr(g, PL_ERR_FORMAT, "GGUF version 1 is not supported (only versions 2 and 3): convert the file again");
    if (version > 3)
        return gerr(g, PL_ERR_FORMAT, "unsupported GGUF version %u (only versions 2 and 3 are supported)", version);
    g->version = version;
    if (!rd_u64(r, n_tensors) || !rd_u64(r, n_kv))
        return gerr(g, PL_ERR_FORMAT, "file is truncated in the header (%zu bytes)", g->size);
    /* Every tensor and KV takes some minimum number of bytes, so a count that
     * cannot fit in what is left is rejected before we allocate for it. */
    uint64_t left = rd_left(r);
    if (*n_tensors > left / PL_GGUF_MIN_TENSOR_BYTES)
        return gerr(g, PL_ERR_FORMAT, "absurd tensor count %llu for a file of %zu bytes",
                    (unsigned long long)*n_tensors, g->size);
    if (*n_kv > left / PL_GGUF_MIN_KV_BYTES)
        return gerr(g, PL_ERR_FORMAT, "absurd key/value count %llu for a file of %zu bytes",
                    (unsigned long long)*n_kv, g->size);
    if (*n_kv * PL_GGUF_MIN_KV_BYTES + *n_tensors * PL_GGUF_MIN_TENSOR_BYTES > left)
        return gerr(g, PL_ERR_FORMAT, "%llu tensors and %llu key/values cannot fit in a file of %zu bytes",
                    (unsigned long long)*n_tensors, (unsigned long long)*n_kv, g->size);
    return PL_OK;
}

static pl_status parse_array(pl_gguf *g, pl_gguf_rd *r, pl_gguf_kv *kv, const char *key) {
    uint32_t et;
    uint64_t n;
    if (!rd_u32(r, &et))
        return gerr(g, PL_ERR_FORMAT, "file is truncated in the element type of array '%s'", key);
    if (!rd_u64(r, &n))
        return gerr(g, PL_ERR_FORMAT, "file is truncated in the length of array '%s'", key);
    if (et == PL_GGUF_ARRAY)
        return gerr(g, PL_ERR_FORMAT, "array '%s' is an array of arrays, which GGUF readers do not support", key);
    if (et >= PL_GGUF_N_TYPES)
        return gerr(g, PL_ERR_FORMAT, "array '%s' has invalid element type %u", key, et);
    if (n > PL_GGUF_MAX_ARRAY)
        return gerr(g, PL_ERR_FORMAT, "array '%s' has %llu elements, more than the limit of 2^30", key,
                    (unsigned long long)n);
    kv->elem = (pl_gguf_type)et;
    kv->n = n;
    kv->data = r->p + r->pos;
    if (et == PL_GGUF_STRING) {
        /* Each element is at least its u64 length prefix. */
        if (n > rd_left(r) / 8)
            return gerr(g, PL_ERR_FORMAT, "array '%s' has %llu elements, more than fit in the remaining %llu bytes",
                        key, (unsigned long long)n, (unsigned long long)rd_left(r));
        /* Pass 1 validates every element; only then is the index allocated,
         * so its size (8 bytes per element) is bounded by bytes that exist. */
        uint64_t start = r->pos;
        for (uint64_t i = 0; i < n; i++) {
            pl_gguf_str s = {NULL, 0};
            pl_gguf_strres res = rd_str(r, &s);
            if (res != PL_STR_OK) {
                char what[160];
                snprintf(what, sizeof what, "element %llu of array '%s'", (unsigned long long)i, key);
                return str_error(g, res, s.len, what);
            }
        }
        kv->str_off = malloc(n ? (size_t)n * sizeof *kv->str_off : 1);
        if (!kv->str_off) return gerr(g, PL_ERR_NO_MEMORY, "out of memory indexing array '%s'", key);
        for (uint64_t i = 0, pos = start; i < n; i++) {
            uint64_t len;
            kv->str_off[i] = pos;
            memcpy(&len, r->p + pos, 8);
            pos += 8 + len;
        }
        return PL_OK;
    }
    size_t es = pl_gguf_type_sizes[et];
    if (n > rd_left(r) / es)
        return gerr(g, PL_ERR_FORMAT, "array '%s' has %llu elements, more than fit in the remaining %llu bytes",
                    key, (unsigned long long)n, (unsigned long long)rd_left(r));
    if (et == PL_GGUF_BOOL) {
        for (uint64_t i = 0; i < n; i++) {
            uint8_t b = kv->data[i];
            if (b > 1)
                return gerr(g, PL_ERR_FORMAT, "element %llu of bool array '%s' is %u (must be 0 or 1)",
                            (unsigned long long)i, key, b);
        }
    }
    r->pos += n * es;
    return PL_OK;
}

static pl_status parse_kvs(pl_gguf *g, pl_gguf_rd *r, uint64_t n_kv) {
    for (int64_t i = 0; (uint64_t)i < n_kv; i++) {
        if (!grow_zeroed((void **)&g->kv, &g->kv_cap, (uint64_t)i + 1, n_kv, sizeof *g->kv))
            return gerr(g, PL_ERR_NO_MEMORY, "out of memory for %llu key/values", (unsigned long long)n_kv);
        g->n_kv = i + 1;
        pl_gguf_kv *kv = &g->kv[i];
        char what[64];
        pl_gguf_str k = {0};
        pl_gguf_strres res = rd_str(r, &k);
        if (res != PL_STR_OK) {
            snprintf(what, sizeof what, "the key of key/value %lld", (long long)i);
            return str_error(g, res, k.len, what);
        }
        if (k.len == 0) return gerr(g, PL_ERR_FORMAT, "key/value %lld has an empty key", (long long)i);
        pl_gguf_shown ks = show(k.ptr, k.len);
        const char *key = ks.s;
        /* Keys are looked up as C strings: an embedded NUL would make a key
         * unreachable, or two distinct keys look alike. */
        if (memchr(k.ptr, 0, (size_t)k.len))
            return gerr(g, PL_ERR_FORMAT, "key/value %lld: key '%s' contains a NUL byte", (long long)i, key);
        kv->key = k;
        int64_t dup = htab_insert(g, &g->kv_index, kv_key_of, k.ptr, (size_t)k.len, i);
        if (dup == -2) return gerr(g, PL_ERR_NO_MEMORY, "out of memory indexing keys");
        if (dup >= 0) return gerr(g, PL_ERR_FORMAT, "duplicate key '%s'", key);
        uint32_t type;
        if (!rd_u32(r, &type)) return gerr(g, PL_ERR_FORMAT, "file is truncated in the type of key '%s'", key);
        kv->raw = r->p + r->pos;
        uint64_t raw_start = r->pos;
        if (type == PL_GGUF_ARRAY) {
            kv->type = PL_GGUF_ARRAY;
            PL_TRY(parse_array(g, r, kv, key));
        } else if (type >= PL_GGUF_N_TYPES) {
            return gerr(g, PL_ERR_FORMAT, "key '%s' has invalid value type %u", key, type);
        } else if (type == PL_GGUF_STRING) {
            kv->type = kv->elem = PL_GGUF_STRING;
            kv->n = 1;
            pl_gguf_str s = {0};
            res = rd_str(r, &s);
            if (res != PL_STR_OK) {
                char w[160];
                snprintf(w, sizeof w, "the value of key '%s'", key);
                return str_error(g, res, s.len, w);
            }
            kv->data = (const uint8_t *)s.ptr;
            kv->str_len = s.len;
        } else {
            kv->type = kv->elem = (pl_gguf_type)type;
            kv->n = 1;
            size_t es = pl_gguf_type_sizes[type];
            if (rd_left(r) < es) return gerr(g, PL_ERR_FORMAT, "file is truncated in the value of key '%s'", key);
            kv->data = r->p + r->pos;
            if (type == PL_GGUF_BOOL && kv->data[0] > 1)
                return gerr(g, PL_ERR_FORMAT, "bool key '%s' has value %u (must be 0 or 1)", key, kv->data[0]);
            r->pos += es;
        }
        kv->raw_size = r->pos - raw_start;
    }
    return PL_OK;
}

static pl_status parse_alignment(pl_gguf *g) {
    g->alignment = PL_GGUF_DEFAULT_ALIGNMENT;
    int64_t idx = pl_gguf_find_key(g, "general.alignment");
    if (idx < 0) return PL_OK;
    const pl_gguf_kv *kv = &g->kv[idx];
    /* llama.cpp reads it with gguf_get_val_u32, which asserts the type. */
    if (kv->type != PL_GGUF_UINT32)
        return gerr(g, PL_ERR_FORMAT, "general.alignment has type %s, but it must be u32",
                    pl_gguf_type_name(kv->type));
    uint32_t a;
    memcpy(&a, kv->data, 4);
    if (a == 0 || (a & (a - 1)) != 0)
        return gerr(g, PL_ERR_FORMAT, "general.alignment %u is not a nonzero power of two", a);
    g->alignment = a;
    return PL_OK;
}

static pl_status parse_tensor_info(pl_gguf *g, pl_gguf_rd *r, int64_t i) {
    pl_gguf_tensor *t = &g->tensors[i];
    char *name = g->names + (size_t)i * PL_GGUF_MAX_NAME;
    char what[64];
    pl_gguf_str s = {0};
    pl_gguf_strres res = rd_str(r, &s);
    if (res != PL_STR_OK) {
        snprintf(what, sizeof what, "the name of tensor %lld", (long long)i);
        return str_error(g, res, s.len, what);
    }
    if (s.len == 0) return gerr(g, PL_ERR_FORMAT, "tensor %lld has an empty name", (long long)i);
    if (s.len >= PL_GGUF_MAX_NAME)
        return gerr(g, PL_ERR_FORMAT, "tensor %lld name '%s' is too long (%llu bytes; the limit is %d)",
                    (long long)i, show(s.ptr, s.len).s, (unsigned long long)s.len, PL_GGUF_MAX_NAME - 1);
    if (memchr(s.ptr, 0, (size_t)s.len))
        return gerr(g, PL_ERR_FORMAT, "tensor %lld name '%s' contains a NUL byte", (long long)i, show(s.ptr, s.len).s);
    memcpy(name, s.ptr, (size_t)s.len);
    name[s.len] = 0;
    pl_gguf_shown ns = show(s.ptr, s.len);
    const char *shown = ns.s;
    int64_t dup = htab_insert(g, &g->tensor_index, tensor_name_of, s.ptr, (size_t)s.len, i);
    if (dup == -2) return gerr(g, PL_ERR_NO_MEMORY, "out of memory indexing tensor names");
    if (dup >= 0) return gerr(g, PL_ERR_FORMAT, "duplicate tensor name '%s'", shown);

    uint32_t n_dims;
    if (!rd_u32(r, &n_dims))
        return gerr(g, PL_ERR_FORMAT, "file is truncated in the dimension count of tensor '%s'", shown);
    if (n_dims < 1 || n_dims > 4)
        return gerr(g, PL_ERR_FORMAT, "tensor '%s' has %u dimensions (must be 1 to 4)", shown, n_dims);
    t->n_dims = n_dims;
    int64_t nelem = 1;
    for (uint32_t j = 0; j < 4; j++) {
        t->ne[j] = 1;
        if (j >= n_dims) continue;
        uint64_t v;
        if (!rd_u64(r, &v))
            return gerr(g, PL_ERR_FORMAT, "file is truncated in the shape of tensor '%s'", shown);
        int64_t d;
        memcpy(&d, &v, 8);   /* the field is an int64 */
        if (d <= 0)
            return gerr(g, PL_ERR_FORMAT, "tensor '%s' dimension %u is %lld (must be positive)", shown, j,
                        (long long)d);
        t->ne[j] = d;
        if (__builtin_mul_overflow(nelem, d, &nelem))
            return gerr(g, PL_ERR_FORMAT, "tensor '%s' has too many elements: its shape overflows int64", shown);
    }
    uint32_t type;
    if (!rd_u32(r, &type)) return gerr(g, PL_ERR_FORMAT, "file is truncated in the type of tensor '%s'", shown);
    const pl_dtype_traits *tr = pl_dtype_get(type);
    if (!tr) return gerr(g, PL_ERR_FORMAT, "tensor '%s' has unknown type id %u", shown, type);
    t->dtype = (pl_dtype)type;
    if (t->ne[0] % tr->block_size != 0)
        return gerr(g, PL_ERR_FORMAT,
                    "tensor '%s' has %lld elements per row, not a multiple of the %s block size %lld", shown,
                    (long long)t->ne[0], tr->name, (long long)tr->block_size);
    uint64_t size;
    if (__builtin_mul_overflow((uint64_t)(nelem / tr->block_size), (uint64_t)tr->type_size, &size) ||
        size > SIZE_MAX)
        return gerr(g, PL_ERR_FORMAT, "tensor '%s' byte size overflows", shown);
    t->size = size;
    if (!rd_u64(r, &t->offset))
        return gerr(g, PL_ERR_FORMAT, "file is truncated in the offset of tensor '%s'", shown);
    return PL_OK;
}

static int cmp_tensor_offset(const void *a, const void *b) {
    const pl_gguf_tensor *x = *(const pl_gguf_tensor *const *)a, *y = *(const pl_gguf_tensor *const *)b;
    return x->offset < y->offset ? -1 : x->offset > y->offset;
}

static pl_status place_tensors(pl_gguf *g, uint64_t header_end) {
    /* The data section starts at the header's end rounded up to the
     * alignment. It may lie past EOF only when there are no tensors (writers
     * do not always pad a tensor-less file). */
    uint64_t a = g->alignment, start;
    if (__builtin_add_overflow(header_end, a - 1, &start))
        return gerr(g, PL_ERR_FORMAT, "data section offset overflows");
    start &= ~(a - 1);
    g->data_offset = start;
    for (int64_t i = 0; i < g->n_tensors; i++) {
        pl_gguf_tensor *t = &g->tensors[i];
        if (t->offset % a != 0)
            return gerr(g, PL_ERR_FORMAT, "tensor '%s' offset %llu is not a multiple of the alignment %llu",
                        show(t->name, strlen(t->name)).s, (unsigned long long)t->offset, (unsigned long long)a);
        uint64_t begin, end;
        if (__builtin_add_overflow(start, t->offset, &begin) || __builtin_add_overflow(begin, t->size, &end) ||
            end > g->size)
            return gerr(g, PL_ERR_FORMAT, "tensor '%s' extends past end of file", show(t->name, strlen(t->name)).s);
        t->data = g->base + begin;
    }
    if (g->n_tensors < 2) return PL_OK;
    /* Disjointness: sort by offset and compare neighbours. */
    const pl_gguf_tensor **order = malloc((size_t)g->n_tensors * sizeof *order);
    if (!order) return gerr(g, PL_ERR_NO_MEMORY, "out of memory checking tensor overlap");
    for (int64_t i = 0; i < g->n_tensors; i++) order[i] = &g->tensors[i];
    qsort(order, (size_t)g->n_tensors, sizeof *order, cmp_tensor_offset);
    pl_status st = PL_OK;
    for (int64_t i = 1; i < g->n_tensors; i++) {
        /* Both ends are in bounds (checked above), so this cannot overflow. */
        if (order[i - 1]->offset + order[i - 1]->size > order[i]->offset) {
            st = gerr(g, PL_ERR_FORMAT, "tensors '%s' and '%s' overlap",
                      show(order[i - 1]->name, strlen(order[i - 1]->name)).s,
                      show(order[i]->name, strlen(order[i]->name)).s);
            break;
        }
    }
    free(order);
    return st;
}

static pl_status parse(pl_gguf *g) {
    pl_gguf_rd r = {g->base, g->size, 0};
    uint64_t n_tensors = 0, n_kv = 0;
    PL_TRY(parse_header(g, &r, &n_tensors, &n_kv));
    /* Tables grow as entries are parsed rather than being sized from the
     * header's counts: a corrupt count in a large file then fails as a format
     * error where the entries run out, not as a giant allocation. */
    PL_TRY(parse_kvs(g, &r, n_kv));
    PL_TRY(parse_alignment(g));
    for (int64_t i = 0; (uint64_t)i < n_tensors; i++) {
        uint64_t name_cap = g->tensor_cap;   /* both buffers grow in lockstep to the same capacity */
        if (!grow_zeroed((void **)&g->tensors, &g->tensor_cap, (uint64_t)i + 1, n_tensors, sizeof *g->tensors) ||
            !grow_zeroed((void **)&g->names, &name_cap, (uint64_t)i + 1, n_tensors, PL_GGUF_MAX_NAME)) {
            return gerr(g, PL_ERR_NO_MEMORY, "out of memory for %llu tensors", (unsigned long long)n_tensors);
        }
        g->n_tensors = i + 1;
        PL_TRY(parse_tensor_info(g, &r, i));
    }
    /* The name buffer is final now. */
    for (int64_t i = 0; i < g->n_tensors; i++) g->tensors[i].name = g->names + (size_t)i * PL_GGUF_MAX_NAME;
    return place_tensors(g, r.pos);
}

/* ---- open / close -------------------------------------------------------- */

static pl_gguf *alloc_handle(const char *name) {
    pl_gguf *g = calloc(1, sizeof *g);
    if (!g) return NULL;
    g->name = strdup(name);
    if (!g->name) {
        free(g);
        return NULL;
    }
    return g;
}

void pl_gguf_close(pl_gguf *g) {
    if (!g) return;
    if (g->kv)
        for (int64_t i = 0; i < g->n_kv; i++) free(g->kv[i].str_off);
    free(g->kv);
    free(g->kv_index.slots);
    free(g->tensors);
    free(g->names);
    free(g->tensor_index.slots);
    if (g->map) munmap(g->map, g->map_size);
    free(g->name);
    free(g);
}

static pl_status finish_open(pl_gguf *g, pl_gguf **out) {
    pl_status st = parse(g);
    if (st != PL_OK) {
        pl_gguf_close(g);
        return st;
    }
    *out = g;
    return PL_OK;
}

pl_status pl_gguf_open_memory(const void *data, size_t size, const char *name, pl_gguf **out) {
    if (!out) return pl_errorf(PL_ERR_INVALID_ARG, "pl_gguf_open_memory: out is NULL");
    *out = NULL;
    if (!name) name = "<memory>";
    if (!data && size) return pl_errorf(PL_ERR_INVALID_ARG, "%s: data is NULL", name);
    pl_gguf *g = alloc_handle(name);
    if (!g) return pl_errorf(PL_ERR_NO_MEMORY, "%s: out of memory", name);
    g->base = data ? data : (const uint8_t *)"";
    g->size = size;
    if (size == 0) {
        pl_gguf_close(g);
        return pl_errorf(PL_ERR_FORMAT, "%s: file is empty", name);
    }
    return finish_open(g, out);
}

pl_status pl_gguf_open(const char *path, pl_gguf **out) {
    if (!out) return pl_errorf(PL_ERR_INVALID_ARG, "pl_gguf_open: out is NULL");
    *out = NULL;
    if (!path) return pl_errorf(PL_ERR_INVALID_ARG, "pl_gguf_open: path is NULL");
    const char *slash = strrchr(path, '/');
    const char *base = slash && slash[1] ? slash + 1 : path;
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) return pl_errorf(PL_ERR_IO, "%s: cannot open '%s': %s", base, path, strerror(errno));
    struct stat stb;
    if (fstat(fd, &stb) != 0) {
        int e = errno;
        close(fd);
        return pl_errorf(PL_ERR_IO, "%s: cannot stat '%s': %s", base, path, strerror(e));
    }
    if (!S_ISREG(stb.st_mode)) {
        close(fd);
        return pl_errorf(PL_ERR_IO, "%s: '%s' is not a regular file", base, path);
    }
    if (stb.st_size == 0) {
        close(fd);
        return pl_errorf(PL_ERR_FORMAT, "%s: file is empty", base);
    }
    if ((uint64_t)stb.st_size > SIZE_MAX) {
        close(fd);
        return pl_errorf(PL_ERR_IO, "%s: file is too large to map", base);
    }
    size_t size = (size_t)stb.st_size;
    void *map = mmap(NULL, size, PROT_READ, MAP_PRIVATE, fd, 0);
    int e = errno;
    close(fd);   /* the mapping keeps the file referenced */
    if (map == MAP_FAILED) return pl_errorf(PL_ERR_IO, "%s: cannot mmap '%s': %s", base, path, strerror(e));
    pl_gguf *g = alloc_handle(base);
    if (!g) {
        munmap(map, size);
        return pl_errorf(PL_ERR_NO_MEMORY, "%s: out of memory", base);
    }
    g->map = map;
    g->map_size = size;
    g->base = map;
    g->size = size;
    return finish_open(g, out);
}

/* ---- accessors ----------------------------------------------------------- */

const char *pl_gguf_name(const pl_gguf *g) { return g ? g->name : ""; }
uint32_t pl_gguf_version(const pl_gguf *g) { return g ? g->version : 0; }
uint64_t pl_gguf_alignment(const pl_gguf *g) { return g ? g->alignment : 0; }
uint64_t pl_gguf_data_offset(const pl_gguf *g) { return g ? g->data_offset : 0; }
const void *pl_gguf_base(const pl_gguf *g) { return g ? g->base : NULL; }
size_t pl_gguf_size(const pl_gguf *g) { return g ? g->size : 0; }

int64_t pl_gguf_n_kv(const pl_gguf *g) { return g ? g->n_kv : 0; }

int64_t pl_gguf_find_key(const pl_gguf *g, const char *key) {
    if (!g || !key) return -1;
    return htab_lookup(g, &g->kv_index, kv_key_of, key, strlen(key));
}

pl_gguf_str pl_gguf_kv_key(const pl_gguf *g, int64_t idx) {
    pl_gguf_str none = {NULL, 0};
    if (!g || idx < 0 || idx >= g->n_kv) return none;
    return g->kv[idx].key;
}

pl_gguf_type pl_gguf_kv_type(const pl_gguf *g, int64_t idx) {
    if (!g || idx < 0 || idx >= g->n_kv) return (pl_gguf_type)-1;
    return g->kv[idx].type;
}

pl_status pl_gguf_kv_raw(const pl_gguf *g, int64_t idx, const void **data, uint64_t *size) {
    if (!g || idx < 0 || idx >= g->n_kv || !data || !size)
        return pl_errorf(PL_ERR_INVALID_ARG, "pl_gguf_kv_raw: bad argument");
    *data = g->kv[idx].raw;
    *size = g->kv[idx].raw_size;
    return PL_OK;
}

static pl_status lookup(const pl_gguf *g, const char *key, const pl_gguf_kv **kv) {
    if (!g || !key) return pl_errorf(PL_ERR_INVALID_ARG, "gguf: NULL handle or key");
    int64_t idx = pl_gguf_find_key(g, key);
    if (idx < 0) return gerr(g, PL_ERR_NOT_FOUND, "key '%s' not found", key);
    *kv = &g->kv[idx];
    return PL_OK;
}

/* One numeric element, widened. */
typedef struct pl_gguf_num {
    enum { PL_NUM_U, PL_NUM_I, PL_NUM_F, PL_NUM_NONE } kind;
    uint64_t u;
    int64_t i;
    double f;
} pl_gguf_num;

static pl_gguf_num load_num(pl_gguf_type t, const uint8_t *p) {
    pl_gguf_num n = {PL_NUM_NONE, 0, 0, 0};
    switch (t) {
    case PL_GGUF_UINT8: n.kind = PL_NUM_U; n.u = p[0]; break;
    case PL_GGUF_INT8: { int8_t v; memcpy(&v, p, 1); n.kind = PL_NUM_I; n.i = v; break; }
    case PL_GGUF_UINT16: { uint16_t v; memcpy(&v, p, 2); n.kind = PL_NUM_U; n.u = v; break; }
    case PL_GGUF_INT16: { int16_t v; memcpy(&v, p, 2); n.kind = PL_NUM_I; n.i = v; break; }
    case PL_GGUF_UINT32: { uint32_t v; memcpy(&v, p, 4); n.kind = PL_NUM_U; n.u = v; break; }
    case PL_GGUF_INT32: { int32_t v; memcpy(&v, p, 4); n.kind = PL_NUM_I; n.i = v; break; }
    case PL_GGUF_UINT64: { uint64_t v; memcpy(&v, p, 8); n.kind = PL_NUM_U; n.u = v; break; }
    case PL_GGUF_INT64: { int64_t v; memcpy(&v, p, 8); n.kind = PL_NUM_I; n.i = v; break; }
    case PL_GGUF_FLOAT32: { float v; memcpy(&v, p, 4); n.kind = PL_NUM_F; n.f = v; break; }
    case PL_GGUF_FLOAT64: { double v; memcpy(&v, p, 8); n.kind = PL_NUM_F; n.f = v; break; }
    default: break;
    }
    /* Normalise non-negative signed values to unsigned for range checks. */
    if (n.kind == PL_NUM_I && n.i >= 0) {
        n.kind = PL_NUM_U;
        n.u = (uint64_t)n.i;
    }
    return n;
}

static bool is_int_type(pl_gguf_type t) {
    return t == PL_GGUF_UINT8 || t == PL_GGUF_INT8 || t == PL_GGUF_UINT16 || t == PL_GGUF_INT16 ||
           t == PL_GGUF_UINT32 || t == PL_GGUF_INT32 || t == PL_GGUF_UINT64 || t == PL_GGUF_INT64;
}

pl_status pl_gguf_get_u32(const pl_gguf *g, const char *key, uint32_t *out) {
    const pl_gguf_kv *kv = NULL;
    PL_TRY(lookup(g, key, &kv));
    if (!is_int_type(kv->type))
        return gerr(g, PL_ERR_FORMAT, "key '%s' has type %s, expected an integer", key, pl_gguf_type_name(kv->type));
    pl_gguf_num n = load_num(kv->type, kv->data);
    if (n.kind != PL_NUM_U || n.u > UINT32_MAX)
        return gerr(g, PL_ERR_FORMAT, "key '%s' (%s) value does not fit in u32", key, pl_gguf_type_name(kv->type));
    if (out) *out = (uint32_t)n.u;
    return PL_OK;
}

pl_status pl_gguf_get_i64(const pl_gguf *g, const char *key, int64_t *out) {
    const pl_gguf_kv *kv = NULL;
    PL_TRY(lookup(g, key, &kv));
    if (!is_int_type(kv->type))
        return gerr(g, PL_ERR_FORMAT, "key '%s' has type %s, expected an integer", key, pl_gguf_type_name(kv->type));
    pl_gguf_num n = load_num(kv->type, kv->data);
    if (n.kind == PL_NUM_U && n.u > (uint64_t)INT64_MAX)
        return gerr(g, PL_ERR_FORMAT, "key '%s' (u64) value does not fit in i64", key);
    if (out) *out = n.kind == PL_NUM_U ? (int64_t)n.u : n.i;
    return PL_OK;
}

pl_status pl_gguf_get_f32(const pl_gguf *g, const char *key, float *out) {
    const pl_gguf_kv *kv = NULL;
    PL_TRY(lookup(g, key, &kv));
    if (kv->type != PL_GGUF_FLOAT32 && kv->type != PL_GGUF_FLOAT64)
        return gerr(g, PL_ERR_FORMAT, "key '%s' has type %s, expected f32 or f64", key, pl_gguf_type_name(kv->type));
    double d = load_num(kv->type, kv->data).f;
    /* Converting an out-of-range double to float is undefined in C. */
    if (d > FLT_MAX || d < -FLT_MAX)
        return gerr(g, PL_ERR_FORMAT, "key '%s' (f64) value %g does not fit in f32", key, d);
    if (out) *out = (float)d;
    return PL_OK;
}

pl_status pl_gguf_get_bool(const pl_gguf *g, const char *key, bool *out) {
    const pl_gguf_kv *kv = NULL;
    PL_TRY(lookup(g, key, &kv));
    if (kv->type != PL_GGUF_BOOL)
        return gerr(g, PL_ERR_FORMAT, "key '%s' has type %s, expected bool", key, pl_gguf_type_name(kv->type));
    if (out) *out = kv->data[0] != 0;
    return PL_OK;
}

pl_status pl_gguf_get_str(const pl_gguf *g, const char *key, pl_gguf_str *out) {
    const pl_gguf_kv *kv = NULL;
    PL_TRY(lookup(g, key, &kv));
    if (kv->type != PL_GGUF_STRING)
        return gerr(g, PL_ERR_FORMAT, "key '%s' has type %s, expected str", key, pl_gguf_type_name(kv->type));
    if (out) {
        out->ptr = (const char *)kv->data;
        out->len = kv->str_len;
    }
    return PL_OK;
}

static pl_status lookup_arr(const pl_gguf *g, const char *key, const pl_gguf_kv **kv) {
    PL_TRY(lookup(g, key, kv));
    if ((*kv)->type != PL_GGUF_ARRAY)
        return gerr(g, PL_ERR_FORMAT, "key '%s' has type %s, expected an array", key, pl_gguf_type_name((*kv)->type));
    return PL_OK;
}

pl_status pl_gguf_get_arr(const pl_gguf *g, const char *key, pl_gguf_type *elem_type, uint64_t *n,
                          const void **data) {
    const pl_gguf_kv *kv = NULL;
    PL_TRY(lookup_arr(g, key, &kv));
    if (elem_type) *elem_type = kv->elem;
    if (n) *n = kv->n;
    if (data) *data = kv->elem == PL_GGUF_STRING ? NULL : kv->data;
    return PL_OK;
}

pl_status pl_gguf_arr_str(const pl_gguf *g, const char *key, uint64_t i, pl_gguf_str *out) {
    const pl_gguf_kv *kv = NULL;
    PL_TRY(lookup_arr(g, key, &kv));
    if (kv->elem != PL_GGUF_STRING)
        return gerr(g, PL_ERR_FORMAT, "array '%s' has element type %s, expected str", key, pl_gguf_type_name(kv->elem));
    if (i >= kv->n)
        return gerr(g, PL_ERR_INVALID_ARG, "index %llu out of range for array '%s' of %llu elements",
                    (unsigned long long)i, key, (unsigned long long)kv->n);
    /* Validated at open: the prefix and the characters are in bounds. */
    uint64_t off = kv->str_off[i], len;
    memcpy(&len, g->base + off, 8);
    if (out) {
        out->ptr = (const char *)(g->base + off + 8);
        out->len = len;
    }
    return PL_OK;
}

static pl_status arr_num(const pl_gguf *g, const char *key, uint64_t i, pl_gguf_num *out) {
    const pl_gguf_kv *kv = NULL;
    PL_TRY(lookup_arr(g, key, &kv));
    if (kv->elem == PL_GGUF_STRING || kv->elem == PL_GGUF_BOOL)
        return gerr(g, PL_ERR_FORMAT, "array '%s' has element type %s, expected numbers", key,
                    pl_gguf_type_name(kv->elem));
    if (i >= kv->n)
        return gerr(g, PL_ERR_INVALID_ARG, "index %llu out of range for array '%s' of %llu elements",
                    (unsigned long long)i, key, (unsigned long long)kv->n);
    *out = load_num(kv->elem, kv->data + i * pl_gguf_type_sizes[kv->elem]);
    return PL_OK;
}

pl_status pl_gguf_arr_f64(const pl_gguf *g, const char *key, uint64_t i, double *out) {
    pl_gguf_num n;
    PL_TRY(arr_num(g, key, i, &n));
    double v = n.kind == PL_NUM_F ? n.f : n.kind == PL_NUM_U ? (double)n.u : (double)n.i;
    if (out) *out = v;
    return PL_OK;
}

pl_status pl_gguf_arr_i64(const pl_gguf *g, const char *key, uint64_t i, int64_t *out) {
    pl_gguf_num n;
    PL_TRY(arr_num(g, key, i, &n));
    int64_t v;
    if (n.kind == PL_NUM_U) {
        if (n.u > (uint64_t)INT64_MAX)
            return gerr(g, PL_ERR_FORMAT, "element %llu of array '%s' does not fit in i64", (unsigned long long)i, key);
        v = (int64_t)n.u;
    } else if (n.kind == PL_NUM_I) {
        v = n.i;
    } else {
        /* A float converts only when it is an integer in range: -2^63 is
         * exact in double, 2^63 is the first value out of range. */
        if (!(n.f >= -9223372036854775808.0 && n.f < 9223372036854775808.0) || n.f != (double)(int64_t)n.f)
            return gerr(g, PL_ERR_FORMAT, "element %llu of array '%s' (%g) is not an integer in i64 range",
                        (unsigned long long)i, key, n.f);
        v = (int64_t)n.f;
    }
    if (out) *out = v;
    return PL_OK;
}

int64_t pl_gguf_n_tensors(const pl_gguf *g) { return g ? g->n_tensors : 0; }

const pl_gguf_tensor *pl_gguf_tensor_at(const pl_gguf *g, int64_t i) {
    if (!g || i < 0 || i >= g->n_tensors) return NULL;
    return &g->tensors[i];
}

const pl_gguf_tensor *pl_gguf_find_tensor(const pl_gguf *g, const char *name) {
    if (!g || !name) return NULL;
    int64_t i = htab_lookup(g, &g->tensor_index, tensor_name_of, name, strlen(name));
    return i < 0 ? NULL : &g->tensors[i];
}
