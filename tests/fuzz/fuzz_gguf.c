/*
 * libFuzzer target for the GGUF reader (and, through a round trip, the
 * writer). See tests/fuzz/README.md for how to build and run it.
 *
 * For every input:
 *   1. pl_gguf_open_memory must either fail cleanly (PL_ERR_FORMAT with a
 *      message, no handle) or succeed;
 *   2. on success, every KV (through every typed getter), every array element
 *      and every tensor is walked, touching the first and last byte of each
 *      string and tensor so ASan sees any out-of-bounds pointer;
 *   3. everything accepted is copied into a writer (copy_kv + add_tensor),
 *      written to memory and reopened: the writer must accept whatever the
 *      reader accepted, and the reader must accept whatever the writer wrote,
 *      with the same keys, values and tensor bytes.
 * An invariant violation traps, which libFuzzer reports as a crash.
 */
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "gguf/gguf.h"
#include "gguf/gguf_write.h"

#define REQUIRE(c) do { if (!(c)) __builtin_trap(); } while (0)

static volatile uint64_t pl_fuzz_sink;

static void touch(const void *p, uint64_t n) {
    if (!n) return;
    const volatile uint8_t *c = p;
    pl_fuzz_sink += c[0] + c[n - 1];
}

static void walk_kv(const pl_gguf *g, int64_t i) {
    pl_gguf_str k = pl_gguf_kv_key(g, i);
    REQUIRE(k.ptr && k.len > 0);
    touch(k.ptr, k.len);
    char *key = malloc((size_t)k.len + 1);
    REQUIRE(key);
    memcpy(key, k.ptr, (size_t)k.len);
    key[k.len] = 0;
    REQUIRE(pl_gguf_find_key(g, key) == i);   /* keys are unique and NUL-free */

    pl_gguf_type t = pl_gguf_kv_type(g, i);
    const void *raw;
    uint64_t raw_size;
    REQUIRE(pl_gguf_kv_raw(g, i, &raw, &raw_size) == PL_OK);
    touch(raw, raw_size);

    uint32_t u32;
    int64_t i64;
    float f;
    bool b;
    pl_gguf_str s;
    pl_status st;
    st = pl_gguf_get_u32(g, key, &u32);
    REQUIRE(st == PL_OK || st == PL_ERR_FORMAT);
    st = pl_gguf_get_i64(g, key, &i64);
    REQUIRE(st == PL_OK || st == PL_ERR_FORMAT);
    st = pl_gguf_get_f32(g, key, &f);
    REQUIRE(st == PL_ERR_FORMAT || (st == PL_OK && (t == PL_GGUF_FLOAT32 || t == PL_GGUF_FLOAT64)));
    if (t == PL_GGUF_FLOAT32) REQUIRE(st == PL_OK);
    st = pl_gguf_get_bool(g, key, &b);
    REQUIRE((st == PL_OK) == (t == PL_GGUF_BOOL));
    st = pl_gguf_get_str(g, key, &s);
    REQUIRE((st == PL_OK) == (t == PL_GGUF_STRING));
    if (st == PL_OK) touch(s.ptr, s.len);

    pl_gguf_type et;
    uint64_t n;
    const void *data;
    st = pl_gguf_get_arr(g, key, &et, &n, &data);
    REQUIRE((st == PL_OK) == (t == PL_GGUF_ARRAY));
    if (st == PL_OK) {
        if (et == PL_GGUF_STRING) {
            REQUIRE(data == NULL);
            for (uint64_t j = 0; j < n; j++) {
                REQUIRE(pl_gguf_arr_str(g, key, j, &s) == PL_OK);
                touch(s.ptr, s.len);
            }
        } else {
            touch(data, n * pl_gguf_type_size(et));
            for (uint64_t j = 0; j < n; j++) {
                double d;
                st = pl_gguf_arr_f64(g, key, j, &d);
                REQUIRE(st == PL_OK || et == PL_GGUF_BOOL);
                st = pl_gguf_arr_i64(g, key, j, &i64);
                REQUIRE(st == PL_OK || st == PL_ERR_FORMAT);
            }
        }
        REQUIRE(pl_gguf_arr_str(g, key, n, &s) != PL_OK);
        double d;
        REQUIRE(pl_gguf_arr_f64(g, key, n, &d) != PL_OK);
    }
    free(key);
}

static void round_trip(const pl_gguf *g) {
    pl_gguf_writer *w = NULL;
    REQUIRE(pl_gguf_writer_create(&w) == PL_OK);
    for (int64_t i = 0; i < pl_gguf_n_kv(g); i++) REQUIRE(pl_gguf_writer_copy_kv(w, g, i) == PL_OK);
    for (int64_t i = 0; i < pl_gguf_n_tensors(g); i++) {
        const pl_gguf_tensor *t = pl_gguf_tensor_at(g, i);
        REQUIRE(pl_gguf_writer_add_tensor(w, t->name, t->dtype, t->n_dims, t->ne, t->data, t->size) == PL_OK);
    }
    /* A tensor-less file may declare general.alignment up to 2^31, and the
     * writer pads the header to it (as llama.cpp's does): a valid 2 GiB
     * output. Check the predicted size and skip building such files. */
    uint64_t predicted = 0;
    REQUIRE(pl_gguf_writer_file_size(w, &predicted) == PL_OK);
    if (predicted > (UINT64_C(16) << 20)) {
        REQUIRE(pl_gguf_n_tensors(g) == 0);
        pl_gguf_writer_free(w);
        return;
    }
    void *buf = NULL;
    size_t size = 0;
    REQUIRE(pl_gguf_writer_to_memory(w, &buf, &size) == PL_OK && size == predicted);
    pl_gguf *g2 = NULL;
    REQUIRE(pl_gguf_open_memory(buf, size, "roundtrip.gguf", &g2) == PL_OK);
    REQUIRE(pl_gguf_n_kv(g2) == pl_gguf_n_kv(g) && pl_gguf_n_tensors(g2) == pl_gguf_n_tensors(g));
    REQUIRE(pl_gguf_alignment(g2) == pl_gguf_alignment(g));
    for (int64_t i = 0; i < pl_gguf_n_kv(g); i++) {
        pl_gguf_str k1 = pl_gguf_kv_key(g, i), k2 = pl_gguf_kv_key(g2, i);
        const void *r1, *r2;
        uint64_t n1, n2;
        REQUIRE(k1.len == k2.len && memcmp(k1.ptr, k2.ptr, (size_t)k1.len) == 0);
        REQUIRE(pl_gguf_kv_type(g, i) == pl_gguf_kv_type(g2, i));
        REQUIRE(pl_gguf_kv_raw(g, i, &r1, &n1) == PL_OK && pl_gguf_kv_raw(g2, i, &r2, &n2) == PL_OK);
        REQUIRE(n1 == n2 && memcmp(r1, r2, (size_t)n1) == 0);
    }
    for (int64_t i = 0; i < pl_gguf_n_tensors(g); i++) {
        const pl_gguf_tensor *a = pl_gguf_tensor_at(g, i), *b = pl_gguf_tensor_at(g2, i);
        REQUIRE(strcmp(a->name, b->name) == 0 && a->dtype == b->dtype && a->n_dims == b->n_dims);
        REQUIRE(memcmp(a->ne, b->ne, sizeof a->ne) == 0 && a->size == b->size);
        REQUIRE(memcmp(a->data, b->data, (size_t)a->size) == 0);
    }
    pl_gguf_close(g2);
    free(buf);
    pl_gguf_writer_free(w);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    pl_gguf *g = (pl_gguf *)&pl_fuzz_sink;   /* must be reset to NULL on failure */
    pl_status st = pl_gguf_open_memory(data, size, "fuzz.gguf", &g);
    if (st != PL_OK) {
        REQUIRE(g == NULL);
        REQUIRE(st == PL_ERR_FORMAT);
        REQUIRE(strncmp(pl_last_error(), "fuzz.gguf: ", 11) == 0);
        return 0;
    }
    REQUIRE(g != NULL);
    const uint8_t *base = pl_gguf_base(g);
    REQUIRE(base == data && pl_gguf_size(g) == size);
    uint64_t a = pl_gguf_alignment(g);
    REQUIRE(a && (a & (a - 1)) == 0);
    for (int64_t i = 0; i < pl_gguf_n_kv(g); i++) walk_kv(g, i);
    REQUIRE(pl_gguf_kv_key(g, pl_gguf_n_kv(g)).ptr == NULL);
    for (int64_t i = 0; i < pl_gguf_n_tensors(g); i++) {
        const pl_gguf_tensor *t = pl_gguf_tensor_at(g, i);
        REQUIRE(t && t->name && pl_gguf_find_tensor(g, t->name) == t);
        REQUIRE(t->n_dims >= 1 && t->n_dims <= 4 && t->size > 0);
        for (int j = 0; j < 4; j++) REQUIRE(t->ne[j] >= 1);
        const uint8_t *p = t->data;
        REQUIRE(p >= base && (uint64_t)(p - base) == pl_gguf_data_offset(g) + t->offset);
        REQUIRE(t->size <= size - (size_t)(p - base));
        REQUIRE(t->offset % a == 0);
        touch(p, t->size);
    }
    REQUIRE(pl_gguf_tensor_at(g, pl_gguf_n_tensors(g)) == NULL);
    round_trip(g);
    pl_gguf_close(g);
    return 0;
}
