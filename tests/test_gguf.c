/*
 * GGUF reader and writer tests:
 *   (a) every fixture model opens and a few facts about them are right;
 *   (b) writer round trips (memory and file, all KV types, several dtypes,
 *       alignments, fill callbacks, copy_kv) and writer argument checks;
 *   (c) hand-crafted corrupt files, each rejected with PL_ERR_FORMAT and its
 *       own message, plus every truncation of a small valid file;
 *   (d) inputs the fuzzer once found interesting (regressions).
 */
#include <dirent.h>
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "core/status.h"
#include "gguf/gguf.h"
#include "gguf/gguf_write.h"
#include "testutil.h"

/* ---- helpers ------------------------------------------------------------- */

static double now_ms(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec * 1e3 + ts.tv_nsec / 1e6;
}

static bool str_eq(pl_gguf_str s, const char *c) {
    return s.ptr && s.len == strlen(c) && memcmp(s.ptr, c, s.len) == 0;
}

/* A growable byte buffer for crafting raw GGUF bytes. */
typedef struct { uint8_t *p; size_t n, cap; } buf_t;

static void put(buf_t *b, const void *d, size_t n) {
    if (b->n + n > b->cap) {
        size_t c = b->cap ? b->cap : 256;
        while (c < b->n + n) c *= 2;
        b->p = realloc(b->p, c);
        if (!b->p) abort();   /* test harness only */
        b->cap = c;
    }
    if (n) memcpy(b->p + b->n, d, n);
    b->n += n;
}
static void put_u8(buf_t *b, uint8_t v) { put(b, &v, 1); }
static void put_u32(buf_t *b, uint32_t v) { put(b, &v, 4); }
static void put_u64(buf_t *b, uint64_t v) { put(b, &v, 8); }
static void put_str(buf_t *b, const char *s) { put_u64(b, strlen(s)); put(b, s, strlen(s)); }
static void put_zeros(buf_t *b, size_t n) { for (size_t i = 0; i < n; i++) put_u8(b, 0); }
static void pad_to(buf_t *b, size_t a) { while (b->n % a) put_u8(b, 0); }

static void hdr(buf_t *b, uint32_t version, uint64_t n_tensors, uint64_t n_kv) {
    put(b, "GGUF", 4);
    put_u32(b, version);
    put_u64(b, n_tensors);
    put_u64(b, n_kv);
}
static void kv_u32(buf_t *b, const char *k, uint32_t v) { put_str(b, k); put_u32(b, PL_GGUF_UINT32); put_u32(b, v); }
static void kv_u64(buf_t *b, const char *k, uint64_t v) { put_str(b, k); put_u32(b, PL_GGUF_UINT64); put_u64(b, v); }
static void kv_str(buf_t *b, const char *k, const char *v) { put_str(b, k); put_u32(b, PL_GGUF_STRING); put_str(b, v); }

static void tinfo(buf_t *b, const char *name, uint32_t n_dims, const int64_t *ne, uint32_t type, uint64_t off) {
    put_str(b, name);
    put_u32(b, n_dims);
    for (uint32_t j = 0; j < n_dims; j++) put_u64(b, (uint64_t)ne[j]);
    put_u32(b, type);
    put_u64(b, off);
}

/* A file with one tensor info and data_bytes of (zero) data after the
 * 32-aligned header. */
static buf_t one_tensor(const char *name, uint32_t n_dims, const int64_t *ne, uint32_t type, uint64_t off,
                        size_t data_bytes) {
    buf_t b = {0};
    hdr(&b, 3, 1, 0);
    tinfo(&b, name, n_dims, ne, type, off);
    pad_to(&b, 32);
    put_zeros(&b, data_bytes);
    return b;
}

static int n_corrupt_cases;

/* Opens bytes that must be rejected with PL_ERR_FORMAT and a message that
 * starts with the file name and contains phrase. */
static void expect_bad_at(const buf_t *b, const char *phrase, int line) {
    pl_gguf *g = (pl_gguf *)1;
    pl_status st = pl_gguf_open_memory(b->p, b->n, "corrupt.gguf", &g);
    const char *msg = pl_last_error();
    n_corrupt_cases++;
    CHECK(st == PL_ERR_FORMAT, "line %d: status %d (%s), want FORMAT; msg: %s", line, st, pl_status_str(st), msg);
    CHECK(g == NULL, "line %d: handle not NULL on failure", line);
    CHECK(strncmp(msg, "corrupt.gguf: ", 14) == 0, "line %d: message lacks the file prefix: %s", line, msg);
    CHECK(strstr(msg, phrase) != NULL, "line %d: message '%s' lacks '%s'", line, msg, phrase);
    if (getenv("PL_TEST_VERBOSE")) printf("  rejected: %s\n", msg);
    if (st == PL_OK) pl_gguf_close(g);
}
#define EXPECT_BAD(b, phrase) do { expect_bad_at(&(b), (phrase), __LINE__); free((b).p); } while (0)

/* Opens bytes that must be accepted. */
static pl_gguf *expect_ok_at(const void *p, size_t n, int line) {
    pl_gguf *g = NULL;
    pl_status st = pl_gguf_open_memory(p, n, "ok.gguf", &g);
    CHECK(st == PL_OK && g, "line %d: open failed: %s", line, pl_last_error());
    return st == PL_OK ? g : NULL;
}
#define EXPECT_OK(p, n) expect_ok_at((p), (n), __LINE__)

/* Walks every KV, array element and tensor through the accessors, checking
 * that everything the handle returns lies inside the image. */
static void walk_all(const pl_gguf *g) {
    const uint8_t *base = pl_gguf_base(g);
    size_t size = pl_gguf_size(g);
    bool ok = true;
    for (int64_t i = 0; i < pl_gguf_n_kv(g); i++) {
        pl_gguf_str k = pl_gguf_kv_key(g, i);
        ok &= k.ptr && k.len > 0 && (const uint8_t *)k.ptr >= base && (const uint8_t *)k.ptr + k.len <= base + size;
        char key[512];
        if (k.len >= sizeof key) continue;
        memcpy(key, k.ptr, k.len);
        key[k.len] = 0;
        ok &= pl_gguf_find_key(g, key) == i;
        if (pl_gguf_kv_type(g, i) == PL_GGUF_ARRAY) {
            pl_gguf_type et;
            uint64_t n;
            const void *d;
            ok &= pl_gguf_get_arr(g, key, &et, &n, &d) == PL_OK;
            for (uint64_t j = 0; j < n; j++) {
                if (et == PL_GGUF_STRING) {
                    pl_gguf_str s;
                    ok &= pl_gguf_arr_str(g, key, j, &s) == PL_OK;
                    ok &= (const uint8_t *)s.ptr >= base && (const uint8_t *)s.ptr + s.len <= base + size;
                } else if (et != PL_GGUF_BOOL) {
                    double f;
                    ok &= pl_gguf_arr_f64(g, key, j, &f) == PL_OK;
                }
            }
        } else if (pl_gguf_kv_type(g, i) == PL_GGUF_STRING) {
            pl_gguf_str s;
            ok &= pl_gguf_get_str(g, key, &s) == PL_OK;
            ok &= (const uint8_t *)s.ptr >= base && (const uint8_t *)s.ptr + s.len <= base + size;
        }
    }
    for (int64_t i = 0; i < pl_gguf_n_tensors(g); i++) {
        const pl_gguf_tensor *t = pl_gguf_tensor_at(g, i);
        ok &= t && pl_gguf_find_tensor(g, t->name) == t;
        ok &= t->n_dims >= 1 && t->n_dims <= 4;
        ok &= (const uint8_t *)t->data >= base && (const uint8_t *)t->data + t->size <= base + size;
        ok &= ((const uint8_t *)t->data - base) % pl_gguf_alignment(g) == 0;
        ok &= (uint64_t)((const uint8_t *)t->data - base) == pl_gguf_data_offset(g) + t->offset;
        ok &= pl_dtype_row_size(t->dtype, t->ne[0]) * (uint64_t)(t->ne[1] * t->ne[2] * t->ne[3]) == t->size;
    }
    CHECK(ok, "%s: walk found an inconsistency", pl_gguf_name(g));
}

/* ---- (a) fixtures -------------------------------------------------------- */

static void test_fixtures(void) {
    char dir[4096];
    snprintf(dir, sizeof dir, "%s", pl_fixture("models"));
    DIR *d = opendir(dir);
    CHECK(d != NULL, "cannot list %s", dir);
    if (!d) return;
    int n_opened = 0;
    struct dirent *e;
    while ((e = readdir(d)) != NULL) {
        size_t len = strlen(e->d_name);
        if (len < 5 || strcmp(e->d_name + len - 5, ".gguf") != 0) continue;
        char path[8192];
        snprintf(path, sizeof path, "%s/%s", dir, e->d_name);
        pl_gguf *g = NULL;
        pl_status st = pl_gguf_open(path, &g);
        CHECK(st == PL_OK, "%s: %s", e->d_name, pl_last_error());
        if (st != PL_OK) continue;
        n_opened++;
        CHECK(strcmp(pl_gguf_name(g), e->d_name) == 0, "name is '%s', want the basename", pl_gguf_name(g));
        CHECK(pl_gguf_version(g) == 2 || pl_gguf_version(g) == 3, "%s: version %u", e->d_name, pl_gguf_version(g));
        walk_all(g);
        /* The fixtures were written by llama.cpp; rebuilding each one with
         * our writer (copy every KV, add every tensor) must reproduce it byte
         * for byte: the writer's layout is llama.cpp's. */
        pl_gguf_writer *w = NULL;
        bool ok = pl_gguf_writer_create(&w) == PL_OK;
        for (int64_t i = 0; ok && i < pl_gguf_n_kv(g); i++) ok = pl_gguf_writer_copy_kv(w, g, i) == PL_OK;
        for (int64_t i = 0; ok && i < pl_gguf_n_tensors(g); i++) {
            const pl_gguf_tensor *t = pl_gguf_tensor_at(g, i);
            ok = pl_gguf_writer_add_tensor(w, t->name, t->dtype, t->n_dims, t->ne, t->data, t->size) == PL_OK;
        }
        void *mem = NULL;
        size_t size = 0;
        ok = ok && pl_gguf_writer_to_memory(w, &mem, &size) == PL_OK;
        CHECK(ok && size == pl_gguf_size(g) && memcmp(mem, pl_gguf_base(g), size) == 0,
              "%s: rewriting it does not reproduce the file (%s)", e->d_name, ok ? "bytes differ" : pl_last_error());
        free(mem);
        pl_gguf_writer_free(w);
        pl_gguf_close(g);
    }
    closedir(d);
    CHECK(n_opened >= 19, "only %d fixture models opened", n_opened);

    /* tiny-qwen3-f16 facts. */
    pl_gguf *g = NULL;
    pl_gguf_type et;
    CHECK(pl_gguf_open(pl_fixture("models/tiny-qwen3-f16.gguf"), &g) == PL_OK, "%s", pl_last_error());
    if (g) {
        pl_gguf_str s;
        CHECK(pl_gguf_get_str(g, "general.architecture", &s) == PL_OK && str_eq(s, "qwen3"), "architecture");
        const pl_gguf_tensor *t = pl_gguf_find_tensor(g, "token_embd.weight");
        CHECK(t && t->dtype == PL_F16 && t->n_dims == 2 && t->ne[0] == 256 && t->ne[1] == 8448 && t->ne[2] == 1 &&
                  t->size == 256u * 8448u * 2u,
              "token_embd.weight shape/type");
        CHECK(pl_gguf_find_tensor(g, "no.such.tensor") == NULL, "absent tensor found");
        uint32_t n_layer = 0;
        CHECK(pl_gguf_get_u32(g, "qwen3.block_count", &n_layer) == PL_OK && n_layer == 2, "block_count %u", n_layer);
        int64_t emb = 0;
        CHECK(pl_gguf_get_i64(g, "qwen3.embedding_length", &emb) == PL_OK && emb == 256, "embedding_length");
        float eps = 0;
        CHECK(pl_gguf_get_f32(g, "qwen3.attention.layer_norm_rms_epsilon", &eps) == PL_OK && eps > 0 && eps < 1e-3,
              "rms eps");
        uint64_t nt = 0;
        const void *dp = (const void *)1;
        CHECK(pl_gguf_get_arr(g, "tokenizer.ggml.tokens", &et, &nt, &dp) == PL_OK && et == PL_GGUF_STRING &&
                  nt == 8448 && dp == NULL,
              "tokens array: type %d n %llu", (int)et, (unsigned long long)nt);
        CHECK(pl_gguf_get_str(g, "no.such.key", &s) == PL_ERR_NOT_FOUND, "missing key status");
        CHECK(strstr(pl_last_error(), "tiny-qwen3-f16.gguf: key 'no.such.key' not found"), "%s", pl_last_error());
        CHECK(pl_gguf_get_u32(g, "general.architecture", &n_layer) == PL_ERR_FORMAT, "u32 from a string");
        CHECK(strstr(pl_last_error(), "has type str, expected an integer"), "%s", pl_last_error());
        CHECK(pl_gguf_get_arr(g, "general.architecture", &et, &nt, &dp) == PL_ERR_FORMAT, "arr from a string");
        CHECK(pl_gguf_arr_str(g, "tokenizer.ggml.tokens", 8448, &s) == PL_ERR_INVALID_ARG, "index out of range");
        CHECK(pl_gguf_arr_f64(g, "tokenizer.ggml.tokens", 0, NULL) == PL_ERR_FORMAT, "f64 from a string array");
        pl_gguf_close(g);
    }

    /* qwen3-vocab: the big string arrays, and how fast they open. */
    double best = 1e9;
    for (int rep = 0; rep < 3; rep++) {
        double t0 = now_ms();
        pl_status st = pl_gguf_open(pl_fixture("models/qwen3-vocab.gguf"), &g);
        double dt = now_ms() - t0;
        if (dt < best) best = dt;
        CHECK(st == PL_OK, "%s", pl_last_error());
        if (st != PL_OK) return;
        if (rep < 2) pl_gguf_close(g);
    }
    printf("qwen3-vocab.gguf opened in %.2f ms (best of 3)\n", best);
    CHECK(best < 2000, "opening the vocab took %.1f ms", best);
    uint64_t n = 0;
    CHECK(pl_gguf_get_arr(g, "tokenizer.ggml.tokens", &et, &n, NULL) == PL_OK && et == PL_GGUF_STRING &&
              n >= 151643,
          "vocab tokens: %llu", (unsigned long long)n);
    pl_gguf_str s;
    CHECK(pl_gguf_arr_str(g, "tokenizer.ggml.tokens", 0, &s) == PL_OK && str_eq(s, "!"), "token 0");
    CHECK(pl_gguf_arr_str(g, "tokenizer.ggml.tokens", 151643, &s) == PL_OK && str_eq(s, "<|endoftext|>"),
          "token 151643 is '%.*s'", (int)s.len, s.ptr);
    CHECK(pl_gguf_arr_str(g, "tokenizer.ggml.tokens", n - 1, &s) == PL_OK && s.len > 0, "last token");
    CHECK(pl_gguf_arr_str(g, "tokenizer.ggml.tokens", n, &s) == PL_ERR_INVALID_ARG, "one past the end");
    uint64_t nm = 0;
    CHECK(pl_gguf_get_arr(g, "tokenizer.ggml.merges", &et, &nm, NULL) == PL_OK && et == PL_GGUF_STRING &&
              nm == 151387,
          "merges: %llu", (unsigned long long)nm);
    CHECK(pl_gguf_arr_str(g, "tokenizer.ggml.merges", 0, &s) == PL_OK && s.len >= 3 && memchr(s.ptr, ' ', s.len),
          "merge 0 '%.*s'", (int)s.len, s.ptr);
    const void *tt = NULL;
    uint64_t ntt = 0;
    CHECK(pl_gguf_get_arr(g, "tokenizer.ggml.token_type", &et, &ntt, &tt) == PL_OK && et == PL_GGUF_INT32 &&
              ntt == n && tt != NULL,
          "token_type");
    int64_t ty = 0;
    CHECK(pl_gguf_arr_i64(g, "tokenizer.ggml.token_type", 0, &ty) == PL_OK && ty == 1, "token_type[0] = %lld",
          (long long)ty);
    CHECK(pl_gguf_arr_i64(g, "tokenizer.ggml.token_type", 151643, &ty) == PL_OK && ty == 3,
          "token_type[151643] = %lld", (long long)ty);
    CHECK(pl_gguf_n_tensors(g) == 0, "vocab file has tensors");
    pl_gguf_close(g);

    /* I/O errors. */
    g = (pl_gguf *)1;
    pl_status st = pl_gguf_open("/nonexistent/dir/model.gguf", &g);
    CHECK(st == PL_ERR_IO && g == NULL, "missing file: %d", st);
    CHECK(strstr(pl_last_error(), "model.gguf: cannot open '/nonexistent/dir/model.gguf'"), "%s", pl_last_error());
    st = pl_gguf_open(pl_fixture("models"), &g);
    CHECK(st == PL_ERR_IO && strstr(pl_last_error(), "not a regular file"), "directory: %s", pl_last_error());
    CHECK(pl_gguf_open(NULL, &g) == PL_ERR_INVALID_ARG, "NULL path");
    CHECK(pl_gguf_open_memory("x", 1, NULL, NULL) == PL_ERR_INVALID_ARG, "NULL out");
    st = pl_gguf_open_memory("", 0, "empty.gguf", &g);
    CHECK(st == PL_ERR_FORMAT && strstr(pl_last_error(), "empty.gguf: file is empty"), "%s", pl_last_error());
    char tmp[] = "/tmp/pl_gguf_empty_XXXXXX";
    int fd = mkstemp(tmp);
    if (fd >= 0) {
        close(fd);
        st = pl_gguf_open(tmp, &g);
        CHECK(st == PL_ERR_FORMAT && strstr(pl_last_error(), "file is empty"), "empty file: %s", pl_last_error());
        unlink(tmp);
    }
}

/* ---- (b) writer ---------------------------------------------------------- */

static pl_status fill_ramp(void *user, const char *name, void *dst, uint64_t size) {
    int *calls = user;
    (*calls)++;
    uint8_t *p = dst;
    for (uint64_t i = 0; i < size; i++) p[i] = (uint8_t)(i * 7 + 1);
    return strcmp(name, "filled") == 0 ? PL_OK : pl_errorf(PL_ERR_INTERNAL, "wrong name %s", name);
}

static pl_status fill_fail(void *user, const char *name, void *dst, uint64_t size) {
    return pl_errorf(PL_ERR_INTERNAL, "fill failed on purpose");
}

/* Builds a writer with one KV of every type and a few tensors. */
static pl_gguf_writer *build_writer(uint32_t alignment, float *f32data, uint16_t *f16data, uint8_t *q4k,
                                    uint8_t *q80, int *fill_calls) {
    pl_gguf_writer *w = NULL;
    bool ok = pl_gguf_writer_create(&w) == PL_OK;
    if (!ok) return NULL;
    ok &= pl_gguf_writer_add_str(w, "general.architecture", "qwen3") == PL_OK;
    if (alignment) ok &= pl_gguf_writer_add_u32(w, "general.alignment", alignment) == PL_OK;
    ok &= pl_gguf_writer_add_u8(w, "t.u8", 200) == PL_OK;
    ok &= pl_gguf_writer_add_i8(w, "t.i8", -100) == PL_OK;
    ok &= pl_gguf_writer_add_u16(w, "t.u16", 60000) == PL_OK;
    ok &= pl_gguf_writer_add_i16(w, "t.i16", -30000) == PL_OK;
    ok &= pl_gguf_writer_add_u32(w, "t.u32", 4000000000u) == PL_OK;
    ok &= pl_gguf_writer_add_i32(w, "t.i32", -2000000000) == PL_OK;
    ok &= pl_gguf_writer_add_u64(w, "t.u64", UINT64_MAX) == PL_OK;
    ok &= pl_gguf_writer_add_i64(w, "t.i64", INT64_MIN) == PL_OK;
    ok &= pl_gguf_writer_add_f32(w, "t.f32", 1.5f) == PL_OK;
    ok &= pl_gguf_writer_add_f64(w, "t.f64", -2.25) == PL_OK;
    ok &= pl_gguf_writer_add_f64(w, "t.bigf64", 1e300) == PL_OK;
    ok &= pl_gguf_writer_add_bool(w, "t.bool", true) == PL_OK;
    ok &= pl_gguf_writer_add_str_n(w, "t.strn", "a\0b", 3) == PL_OK;
    ok &= pl_gguf_writer_add_str(w, "t.empty", "") == PL_OK;
    const int32_t i32s[] = {1, -2, 3};
    ok &= pl_gguf_writer_add_arr(w, "a.i32", PL_GGUF_INT32, i32s, 3) == PL_OK;
    const float f32s[] = {0.5f, -1.0f, 2.0f, 1e30f};
    ok &= pl_gguf_writer_add_arr(w, "a.f32", PL_GGUF_FLOAT32, f32s, 4) == PL_OK;
    const uint64_t u64s[] = {0, UINT64_MAX};
    ok &= pl_gguf_writer_add_arr(w, "a.u64", PL_GGUF_UINT64, u64s, 2) == PL_OK;
    const uint8_t bools[] = {1, 0, 1};
    ok &= pl_gguf_writer_add_arr(w, "a.bool", PL_GGUF_BOOL, bools, 3) == PL_OK;
    ok &= pl_gguf_writer_add_arr(w, "a.empty", PL_GGUF_UINT8, NULL, 0) == PL_OK;
    const char *strs[] = {"hello", "", "w\xc3\xb6rld"};
    ok &= pl_gguf_writer_add_arr_str(w, "a.str", strs, 3) == PL_OK;
    pl_gguf_str sn[] = {{"x\0y", 3}, {"z", 1}};
    ok &= pl_gguf_writer_add_arr_str_n(w, "a.strn", sn, 2) == PL_OK;

    for (int i = 0; i < 64; i++) f32data[i] = (float)i - 10.0f;
    for (int i = 0; i < 3 * 8; i++) f16data[i] = (uint16_t)(0x3c00 + i);
    for (int i = 0; i < 144 * 2; i++) q4k[i] = (uint8_t)(i * 13);
    for (int i = 0; i < 34 * 3; i++) q80[i] = (uint8_t)(255 - i);
    int64_t ne1[1] = {64}, ne2[2] = {8, 3}, ne3[2] = {256, 2}, ne4[3] = {32, 1, 3}, ne5[4] = {5, 2, 1, 3};
    ok &= pl_gguf_writer_add_tensor(w, "t.f32", PL_F32, 1, ne1, f32data, 64 * 4) == PL_OK;
    ok &= pl_gguf_writer_add_tensor(w, "t.f16", PL_F16, 2, ne2, f16data, 3 * 8 * 2) == PL_OK;
    ok &= pl_gguf_writer_add_tensor(w, "t.q4k", PL_Q4_K, 2, ne3, q4k, 144 * 2) == PL_OK;
    ok &= pl_gguf_writer_add_tensor(w, "t.q80", PL_Q8_0, 3, ne4, q80, 34 * 3) == PL_OK;
    ok &= pl_gguf_writer_add_tensor_fill(w, "filled", PL_I8, 4, ne5, fill_ramp, fill_calls) == PL_OK;
    if (!ok) {
        fprintf(stderr, "build_writer: %s\n", pl_last_error());
        pl_gguf_writer_free(w);
        return NULL;
    }
    return w;
}

static void check_round_trip(const pl_gguf *g, uint32_t alignment, const float *f32data, const uint16_t *f16data,
                             const uint8_t *q4k, const uint8_t *q80) {
    CHECK(pl_gguf_version(g) == 3, "version");
    CHECK(pl_gguf_alignment(g) == (alignment ? alignment : 32), "alignment %llu",
          (unsigned long long)pl_gguf_alignment(g));
    CHECK(pl_gguf_n_kv(g) == (alignment ? 23 : 22), "n_kv %lld", (long long)pl_gguf_n_kv(g));
    CHECK(pl_gguf_n_tensors(g) == 5, "n_tensors");
    pl_gguf_str s;
    uint32_t u32;
    int64_t i64;
    float f;
    bool b;
    CHECK(pl_gguf_get_str(g, "general.architecture", &s) == PL_OK && str_eq(s, "qwen3"), "arch");
    CHECK(pl_gguf_get_u32(g, "t.u8", &u32) == PL_OK && u32 == 200, "u8");
    CHECK(pl_gguf_get_i64(g, "t.i8", &i64) == PL_OK && i64 == -100, "i8");
    CHECK(pl_gguf_get_u32(g, "t.i8", &u32) == PL_ERR_FORMAT, "negative i8 as u32");
    CHECK(strstr(pl_last_error(), "does not fit in u32"), "%s", pl_last_error());
    CHECK(pl_gguf_get_u32(g, "t.u16", &u32) == PL_OK && u32 == 60000, "u16");
    CHECK(pl_gguf_get_i64(g, "t.i16", &i64) == PL_OK && i64 == -30000, "i16");
    CHECK(pl_gguf_get_u32(g, "t.u32", &u32) == PL_OK && u32 == 4000000000u, "u32");
    CHECK(pl_gguf_get_i64(g, "t.i32", &i64) == PL_OK && i64 == -2000000000, "i32");
    CHECK(pl_gguf_get_u32(g, "t.u64", &u32) == PL_ERR_FORMAT, "u64 max as u32");
    CHECK(pl_gguf_get_i64(g, "t.u64", &i64) == PL_ERR_FORMAT, "u64 max as i64");
    CHECK(pl_gguf_get_i64(g, "t.i64", &i64) == PL_OK && i64 == INT64_MIN, "i64");
    CHECK(pl_gguf_get_f32(g, "t.f32", &f) == PL_OK && f == 1.5f, "f32");
    CHECK(pl_gguf_get_f32(g, "t.f64", &f) == PL_OK && f == -2.25f, "f64");
    CHECK(pl_gguf_get_f32(g, "t.u8", &f) == PL_ERR_FORMAT, "f32 from u8");
    CHECK(pl_gguf_get_f32(g, "t.bigf64", &f) == PL_ERR_FORMAT, "1e300 as f32");
    CHECK(strstr(pl_last_error(), "does not fit in f32"), "%s", pl_last_error());
    CHECK(pl_gguf_get_bool(g, "t.bool", &b) == PL_OK && b, "bool");
    CHECK(pl_gguf_get_bool(g, "t.u8", &b) == PL_ERR_FORMAT, "bool from u8");
    CHECK(pl_gguf_get_str(g, "t.strn", &s) == PL_OK && s.len == 3 && memcmp(s.ptr, "a\0b", 3) == 0, "str_n");
    CHECK(pl_gguf_get_str(g, "t.empty", &s) == PL_OK && s.len == 0, "empty str");
    CHECK(pl_gguf_kv_type(g, pl_gguf_find_key(g, "t.f64")) == PL_GGUF_FLOAT64, "kv_type");
    CHECK(pl_gguf_kv_type(g, -1) == (pl_gguf_type)-1 && pl_gguf_kv_key(g, 999).ptr == NULL, "bad kv index");

    pl_gguf_type et;
    uint64_t n;
    const void *d;
    CHECK(pl_gguf_get_arr(g, "a.i32", &et, &n, &d) == PL_OK && et == PL_GGUF_INT32 && n == 3, "a.i32");
    CHECK(pl_gguf_arr_i64(g, "a.i32", 1, &i64) == PL_OK && i64 == -2, "a.i32[1]");
    double dv;
    CHECK(pl_gguf_arr_f64(g, "a.i32", 2, &dv) == PL_OK && dv == 3.0, "a.i32[2] as f64");
    CHECK(pl_gguf_arr_i64(g, "a.i32", 3, &i64) == PL_ERR_INVALID_ARG, "a.i32[3]");
    CHECK(pl_gguf_arr_f64(g, "a.f32", 3, &dv) == PL_OK && dv == (double)1e30f, "a.f32[3]");
    CHECK(pl_gguf_arr_i64(g, "a.f32", 2, &i64) == PL_OK && i64 == 2, "integral float as i64");
    CHECK(pl_gguf_arr_i64(g, "a.f32", 0, &i64) == PL_ERR_FORMAT, "0.5 as i64");
    CHECK(pl_gguf_arr_i64(g, "a.f32", 3, &i64) == PL_ERR_FORMAT, "1e30 as i64");
    CHECK(pl_gguf_arr_i64(g, "a.u64", 1, &i64) == PL_ERR_FORMAT, "u64 max as i64");
    CHECK(pl_gguf_arr_f64(g, "a.bool", 0, &dv) == PL_ERR_FORMAT, "bool array as numbers");
    CHECK(pl_gguf_get_arr(g, "a.bool", &et, &n, &d) == PL_OK && et == PL_GGUF_BOOL && n == 3 &&
              memcmp(d, "\1\0\1", 3) == 0,
          "a.bool");
    CHECK(pl_gguf_get_arr(g, "a.empty", &et, &n, &d) == PL_OK && et == PL_GGUF_UINT8 && n == 0, "a.empty");
    CHECK(pl_gguf_get_arr(g, "a.str", &et, &n, &d) == PL_OK && et == PL_GGUF_STRING && n == 3 && d == NULL, "a.str");
    CHECK(pl_gguf_arr_str(g, "a.str", 0, &s) == PL_OK && str_eq(s, "hello"), "a.str[0]");
    CHECK(pl_gguf_arr_str(g, "a.str", 1, &s) == PL_OK && s.len == 0, "a.str[1]");
    CHECK(pl_gguf_arr_str(g, "a.str", 2, &s) == PL_OK && str_eq(s, "w\xc3\xb6rld"), "a.str[2]");
    CHECK(pl_gguf_arr_str(g, "a.strn", 0, &s) == PL_OK && s.len == 3 && memcmp(s.ptr, "x\0y", 3) == 0, "a.strn");
    CHECK(pl_gguf_arr_str(g, "a.i32", 0, &s) == PL_ERR_FORMAT, "string from an int array");

    const pl_gguf_tensor *t = pl_gguf_find_tensor(g, "t.f32");
    CHECK(t && t->dtype == PL_F32 && t->n_dims == 1 && t->ne[0] == 64 && t->ne[1] == 1 && t->size == 256 &&
              memcmp(t->data, f32data, 256) == 0 && t->offset == 0,
          "t.f32");
    t = pl_gguf_find_tensor(g, "t.f16");
    CHECK(t && t->dtype == PL_F16 && t->n_dims == 2 && t->ne[0] == 8 && t->ne[1] == 3 &&
              memcmp(t->data, f16data, 48) == 0,
          "t.f16");
    t = pl_gguf_find_tensor(g, "t.q4k");
    CHECK(t && t->dtype == PL_Q4_K && t->ne[0] == 256 && t->ne[1] == 2 && t->size == 288 &&
              memcmp(t->data, q4k, 288) == 0,
          "t.q4k");
    t = pl_gguf_find_tensor(g, "t.q80");
    CHECK(t && t->dtype == PL_Q8_0 && t->n_dims == 3 && t->ne[2] == 3 && t->size == 102 &&
              memcmp(t->data, q80, 102) == 0,
          "t.q80");
    t = pl_gguf_find_tensor(g, "filled");
    bool ramp = t && t->dtype == PL_I8 && t->n_dims == 4 && t->size == 30;
    for (uint64_t i = 0; ramp && i < t->size; i++) ramp = ((const uint8_t *)t->data)[i] == (uint8_t)(i * 7 + 1);
    CHECK(ramp, "filled tensor");
    /* Tensors are packed in order, each padded to the alignment (llama.cpp
     * requires exactly this). */
    uint64_t a = pl_gguf_alignment(g), expect = 0;
    for (int64_t i = 0; i < pl_gguf_n_tensors(g); i++) {
        const pl_gguf_tensor *ti = pl_gguf_tensor_at(g, i);
        CHECK(ti->offset == expect, "tensor %lld offset %llu, want %llu", (long long)i,
              (unsigned long long)ti->offset, (unsigned long long)expect);
        expect += (ti->size + a - 1) / a * a;
    }
    CHECK(pl_gguf_data_offset(g) % a == 0, "data offset alignment");
    CHECK(pl_gguf_data_offset(g) + expect == pl_gguf_size(g), "file ends after the last tensor's padding");
    CHECK(pl_gguf_tensor_at(g, 5) == NULL && pl_gguf_tensor_at(g, -1) == NULL, "tensor_at range");
    walk_all(g);
}

static void test_writer(void) {
    static float f32data[64];
    static uint16_t f16data[24];
    static uint8_t q4k[288], q80[102];
    const uint32_t aligns[] = {0, 1, 8, 64, 4096};
    for (size_t ai = 0; ai < sizeof aligns / sizeof aligns[0]; ai++) {
        int fills = 0;
        pl_gguf_writer *w = build_writer(aligns[ai], f32data, f16data, q4k, q80, &fills);
        CHECK(w != NULL, "build_writer");
        if (!w) continue;
        void *mem = NULL;
        size_t size = 0;
        uint64_t predicted = 0;
        CHECK(pl_gguf_writer_file_size(w, &predicted) == PL_OK, "file_size");
        CHECK(pl_gguf_writer_to_memory(w, &mem, &size) == PL_OK, "to_memory: %s", pl_last_error());
        CHECK(size == predicted, "size %zu, predicted %llu", size, (unsigned long long)predicted);
        CHECK(fills == 1, "fill called %d times", fills);
        pl_gguf *g = EXPECT_OK(mem, size);
        if (g) {
            check_round_trip(g, aligns[ai], f32data, f16data, q4k, q80);
            pl_gguf_close(g);
        }
        /* The file output is byte-identical to the memory output. */
        char path[] = "/tmp/pl_gguf_rt_XXXXXX";
        int fd = mkstemp(path);
        CHECK(fd >= 0, "mkstemp");
        if (fd >= 0) {
            close(fd);
            CHECK(pl_gguf_writer_write_file(w, path) == PL_OK, "write_file: %s", pl_last_error());
            size_t flen = 0;
            char *file = pl_read_file(path, &flen);
            CHECK(file && flen == size && memcmp(file, mem, size) == 0, "file differs from memory output");
            free(file);
            g = NULL;
            CHECK(pl_gguf_open(path, &g) == PL_OK, "reopen: %s", pl_last_error());
            if (g) {
                check_round_trip(g, aligns[ai], f32data, f16data, q4k, q80);
                pl_gguf_close(g);
            }
            unlink(path);
        }
        free(mem);
        pl_gguf_writer_free(w);
    }

    /* Replace, remove and copy KVs. */
    pl_gguf_writer *w = NULL;
    CHECK(pl_gguf_writer_create(&w) == PL_OK, "create");
    CHECK(pl_gguf_writer_add_u32(w, "k", 1) == PL_OK, "add");
    CHECK(pl_gguf_writer_add_str(w, "k2", "v") == PL_OK, "add");
    CHECK(pl_gguf_writer_add_str(w, "k", "replaced") == PL_OK, "replace");
    CHECK(pl_gguf_writer_n_kv(w) == 2, "replace keeps one entry");
    CHECK(pl_gguf_writer_remove_key(w, "k2") == PL_OK && pl_gguf_writer_n_kv(w) == 1, "remove");
    CHECK(pl_gguf_writer_remove_key(w, "k2") == PL_ERR_NOT_FOUND, "remove absent");
    void *mem = NULL;
    size_t size = 0;
    CHECK(pl_gguf_writer_to_memory(w, &mem, &size) == PL_OK, "to_memory");
    pl_gguf *g = EXPECT_OK(mem, size);
    if (g) {
        pl_gguf_str s;
        CHECK(pl_gguf_get_str(g, "k", &s) == PL_OK && str_eq(s, "replaced"), "replaced value");
        CHECK(pl_gguf_n_kv(g) == 1 && pl_gguf_n_tensors(g) == 0, "counts");
        /* A tensor-less file ends right after its header: no padding. */
        CHECK(pl_gguf_data_offset(g) >= size, "tensor-less data offset");
        pl_gguf_close(g);
    }
    free(mem);
    pl_gguf_writer_free(w);

    /* Writer argument checks. */
    CHECK(pl_gguf_writer_create(&w) == PL_OK, "create");
    int64_t ne[4] = {32, 2, 1, 1}, bad0[2] = {32, 0}, badneg[1] = {-32}, big[2] = {INT64_MAX, 2};
    static float data[64];
    CHECK(pl_gguf_writer_add_u8(w, "", 1) == PL_ERR_INVALID_ARG, "empty key");
    CHECK(pl_gguf_writer_add_u8(w, NULL, 1) == PL_ERR_INVALID_ARG, "NULL key");
    CHECK(pl_gguf_writer_add_str(w, "s", NULL) == PL_ERR_INVALID_ARG, "NULL string");
    CHECK(pl_gguf_writer_add_arr(w, "a", PL_GGUF_STRING, data, 1) == PL_ERR_INVALID_ARG, "string via add_arr");
    CHECK(pl_gguf_writer_add_arr(w, "a", PL_GGUF_ARRAY, data, 1) == PL_ERR_INVALID_ARG, "nested array");
    CHECK(pl_gguf_writer_add_arr(w, "a", (pl_gguf_type)13, data, 1) == PL_ERR_INVALID_ARG, "bad elem type");
    CHECK(pl_gguf_writer_add_arr(w, "a", PL_GGUF_BOOL, "\2", 1) == PL_ERR_INVALID_ARG, "bool 2");
    CHECK(pl_gguf_writer_add_arr(w, "a", PL_GGUF_UINT8, data, (UINT64_C(1) << 30) + 1) == PL_ERR_INVALID_ARG,
          "huge array");
    const char *nullstrs[] = {"a", NULL};
    CHECK(pl_gguf_writer_add_arr_str(w, "a", nullstrs, 2) == PL_ERR_INVALID_ARG, "NULL string element");
    CHECK(pl_gguf_writer_n_kv(w) == 0, "failed adds left KVs behind");
    CHECK(pl_gguf_writer_add_tensor(w, "w", PL_F32, 2, ne, data, 256) == PL_OK, "good tensor");
    CHECK(pl_gguf_writer_add_tensor(w, "w", PL_F32, 2, ne, data, 256) == PL_ERR_INVALID_ARG, "duplicate tensor");
    CHECK(strstr(pl_last_error(), "duplicate tensor name 'w'"), "%s", pl_last_error());
    CHECK(pl_gguf_writer_add_tensor(w, "x", PL_F32, 2, ne, data, 255) == PL_ERR_INVALID_ARG, "wrong size");
    CHECK(pl_gguf_writer_add_tensor(w, "x", PL_F32, 0, ne, data, 4) == PL_ERR_INVALID_ARG, "0 dims");
    CHECK(pl_gguf_writer_add_tensor(w, "x", PL_F32, 5, ne, data, 256) == PL_ERR_INVALID_ARG, "5 dims");
    CHECK(pl_gguf_writer_add_tensor(w, "x", PL_F32, 2, bad0, data, 0) == PL_ERR_INVALID_ARG, "zero dim");
    CHECK(pl_gguf_writer_add_tensor(w, "x", PL_F32, 1, badneg, data, 0) == PL_ERR_INVALID_ARG, "negative dim");
    CHECK(pl_gguf_writer_add_tensor(w, "x", PL_F32, 2, big, data, 0) == PL_ERR_INVALID_ARG, "overflowing shape");
    CHECK(pl_gguf_writer_add_tensor(w, "x", PL_Q4_K, 2, ne, data, 256) == PL_ERR_INVALID_ARG, "ne0 not a multiple of the block");
    CHECK(pl_gguf_writer_add_tensor(w, "x", (pl_dtype)4, 2, ne, data, 256) == PL_ERR_INVALID_ARG, "unknown dtype");
    CHECK(pl_gguf_writer_add_tensor(w, "", PL_F32, 2, ne, data, 256) == PL_ERR_INVALID_ARG, "empty name");
    char longname[80];
    memset(longname, 'n', 64);
    longname[64] = 0;
    CHECK(pl_gguf_writer_add_tensor(w, longname, PL_F32, 2, ne, data, 256) == PL_ERR_INVALID_ARG, "64-byte name");
    longname[63] = 0;
    CHECK(pl_gguf_writer_add_tensor(w, longname, PL_F32, 2, ne, data, 256) == PL_OK, "63-byte name");
    CHECK(pl_gguf_writer_add_tensor_fill(w, "y", PL_F32, 2, ne, NULL, NULL) == PL_ERR_INVALID_ARG, "NULL fill");
    CHECK(pl_gguf_writer_n_tensors(w) == 2, "failed adds left tensors behind");
    CHECK(pl_gguf_writer_add_u32(w, "general.alignment", 3) == PL_OK, "set bad alignment");
    CHECK(pl_gguf_writer_to_memory(w, &mem, &size) == PL_ERR_INVALID_ARG && mem == NULL, "alignment 3 written");
    CHECK(pl_gguf_writer_add_u32(w, "general.alignment", 0) == PL_OK, "set bad alignment");
    CHECK(pl_gguf_writer_to_memory(w, &mem, &size) == PL_ERR_INVALID_ARG, "alignment 0 written");
    CHECK(pl_gguf_writer_add_u64(w, "general.alignment", 32) == PL_OK, "set u64 alignment");
    CHECK(pl_gguf_writer_to_memory(w, &mem, &size) == PL_ERR_INVALID_ARG, "u64 alignment written");
    CHECK(pl_gguf_writer_add_u32(w, "general.alignment", 16) == PL_OK, "set alignment 16");
    CHECK(pl_gguf_writer_to_memory(w, &mem, &size) == PL_OK, "alignment 16: %s", pl_last_error());
    g = EXPECT_OK(mem, size);
    if (g) {
        CHECK(pl_gguf_alignment(g) == 16 && pl_gguf_find_tensor(g, longname) != NULL, "63-byte name read back");
        pl_gguf_close(g);
    }
    free(mem);
    /* A failing fill aborts the write and removes the partial file. */
    CHECK(pl_gguf_writer_add_tensor_fill(w, "bad", PL_F32, 2, ne, fill_fail, NULL) == PL_OK, "fill tensor");
    mem = (void *)1;
    CHECK(pl_gguf_writer_to_memory(w, &mem, &size) == PL_ERR_INTERNAL && mem == NULL, "fill failure (memory)");
    char path[] = "/tmp/pl_gguf_fail_XXXXXX";
    int fd = mkstemp(path);
    if (fd >= 0) {
        close(fd);
        CHECK(pl_gguf_writer_write_file(w, path) == PL_ERR_INTERNAL, "fill failure (file)");
        CHECK(access(path, F_OK) != 0, "partial file left behind");
        unlink(path);
    }
    CHECK(pl_gguf_writer_write_file(w, "/nonexistent/dir/x.gguf") == PL_ERR_IO, "unwritable path");
    pl_gguf_writer_free(w);

    /* copy_kv: rebuild the vocab file's metadata and compare. */
    g = NULL;
    CHECK(pl_gguf_open(pl_fixture("models/qwen3-vocab.gguf"), &g) == PL_OK, "%s", pl_last_error());
    if (!g) return;
    CHECK(pl_gguf_writer_create(&w) == PL_OK, "create");
    bool ok = true;
    for (int64_t i = 0; i < pl_gguf_n_kv(g); i++) ok &= pl_gguf_writer_copy_kv(w, g, i) == PL_OK;
    CHECK(ok, "copy_kv: %s", pl_last_error());
    CHECK(pl_gguf_writer_copy_kv(w, g, pl_gguf_n_kv(g)) == PL_ERR_INVALID_ARG, "copy_kv out of range");
    CHECK(pl_gguf_writer_to_memory(w, &mem, &size) == PL_OK, "to_memory");
    pl_gguf *g2 = EXPECT_OK(mem, size);
    if (g2) {
        CHECK(pl_gguf_n_kv(g2) == pl_gguf_n_kv(g), "kv count");
        bool same = true;
        for (int64_t i = 0; i < pl_gguf_n_kv(g); i++) {
            const void *r1, *r2;
            uint64_t n1, n2;
            pl_gguf_str k1 = pl_gguf_kv_key(g, i), k2 = pl_gguf_kv_key(g2, i);
            same &= k1.len == k2.len && memcmp(k1.ptr, k2.ptr, k1.len) == 0;
            same &= pl_gguf_kv_type(g, i) == pl_gguf_kv_type(g2, i);
            same &= pl_gguf_kv_raw(g, i, &r1, &n1) == PL_OK && pl_gguf_kv_raw(g2, i, &r2, &n2) == PL_OK;
            same &= n1 == n2 && memcmp(r1, r2, n1) == 0;
        }
        CHECK(same, "copied KVs differ");
        pl_gguf_str s;
        CHECK(pl_gguf_arr_str(g2, "tokenizer.ggml.tokens", 151643, &s) == PL_OK && str_eq(s, "<|endoftext|>"),
              "copied vocab");
        pl_gguf_close(g2);
    }
    free(mem);
    pl_gguf_writer_free(w);
    pl_gguf_close(g);
}

/* ---- (c) corrupt files --------------------------------------------------- */

/* A small valid file whose last tensor ends exactly at EOF (no trailing
 * padding), so that every proper prefix of it is invalid. */
static void test_truncations(void) {
    pl_gguf_writer *w = NULL;
    pl_gguf_writer_create(&w);
    pl_gguf_writer_add_str(w, "general.architecture", "qwen3");
    pl_gguf_writer_add_u32(w, "u", 7);
    pl_gguf_writer_add_bool(w, "b", false);
    pl_gguf_writer_add_f64(w, "d", 1.0);
    const char *strs[] = {"a", "bc", ""};
    pl_gguf_writer_add_arr_str(w, "s", strs, 3);
    const int16_t i16s[] = {1, 2, 3};
    pl_gguf_writer_add_arr(w, "i", PL_GGUF_INT16, i16s, 3);
    static float data[64];
    int64_t ne1[1] = {8}, ne2[2] = {8, 4};
    pl_gguf_writer_add_tensor(w, "a", PL_F32, 1, ne1, data, 32);
    pl_gguf_writer_add_tensor(w, "b", PL_F32, 2, ne2, data, 128);
    void *mem = NULL;
    size_t size = 0;
    CHECK(pl_gguf_writer_to_memory(w, &mem, &size) == PL_OK, "to_memory");
    pl_gguf_writer_free(w);
    pl_gguf *g = EXPECT_OK(mem, size);
    pl_gguf_close(g);
    int bad = 0;
    for (size_t n = 0; n < size; n++) {
        /* A fresh, exactly sized copy so ASan catches any read past n. */
        uint8_t *cut = malloc(n ? n : 1);
        memcpy(cut, mem, n);
        g = NULL;
        pl_status st = pl_gguf_open_memory(cut, n, "cut.gguf", &g);
        if (st != PL_ERR_FORMAT || g != NULL || strncmp(pl_last_error(), "cut.gguf: ", 10) != 0) {
            if (bad++ < 5) fprintf(stderr, "truncation at %zu: status %d: %s\n", n, st, pl_last_error());
        }
        if (g) pl_gguf_close(g);
        free(cut);
    }
    CHECK(bad == 0, "%d of %zu truncations were not rejected cleanly", bad, size);
    free(mem);
}

static void test_corrupt(void) {
    buf_t b;
    const int64_t ne32[1] = {32};

    /* ---- header ---- */
    b = (buf_t){0}; put(&b, "GG", 2);
    EXPECT_BAD(b, "too short for the GGUF magic");
    b = (buf_t){0}; put(&b, "GGML", 4); put_u32(&b, 3); put_u64(&b, 0); put_u64(&b, 0);
    EXPECT_BAD(b, "bad magic 'GGML' (expected 'GGUF')");
    b = (buf_t){0}; put(&b, "\x7f" "ELF", 4); put_zeros(&b, 20);
    EXPECT_BAD(b, "bad magic '?ELF'");
    b = (buf_t){0}; put(&b, "FUGG", 4); put_zeros(&b, 20);
    EXPECT_BAD(b, "big-endian GGUF is not supported");
    b = (buf_t){0}; hdr(&b, 0x03000000u, 0, 0);   /* v3 written big-endian */
    EXPECT_BAD(b, "big-endian GGUF is not supported");
    b = (buf_t){0}; hdr(&b, 0x02000000u, 0, 0);
    EXPECT_BAD(b, "big-endian GGUF is not supported");
    b = (buf_t){0}; hdr(&b, 0, 0, 0);
    EXPECT_BAD(b, "bad GGUF version 0");
    b = (buf_t){0}; hdr(&b, 1, 0, 0);
    EXPECT_BAD(b, "GGUF version 1 is not supported");
    b = (buf_t){0}; hdr(&b, 4, 0, 0);
    EXPECT_BAD(b, "unsupported GGUF version 4 ");
    b = (buf_t){0}; hdr(&b, 0xFFFFFFFFu, 0, 0);
    EXPECT_BAD(b, "unsupported GGUF version 4294967295");
    b = (buf_t){0}; hdr(&b, 0x00050000u, 0, 0);
    EXPECT_BAD(b, "unsupported GGUF version 327680");
    b = (buf_t){0}; put(&b, "GGUF", 4); put_u32(&b, 3); put_u64(&b, 0);
    EXPECT_BAD(b, "file is truncated in the header");
    b = (buf_t){0}; hdr(&b, 3, UINT64_C(1) << 62, 0);
    EXPECT_BAD(b, "absurd tensor count 4611686018427387904");
    b = (buf_t){0}; hdr(&b, 3, UINT64_MAX, 0);
    EXPECT_BAD(b, "absurd tensor count 18446744073709551615");
    b = (buf_t){0}; hdr(&b, 3, 0, UINT64_C(1) << 40); put_zeros(&b, 64);
    EXPECT_BAD(b, "absurd key/value count 1099511627776");
    b = (buf_t){0}; hdr(&b, 3, 2, 3); put_zeros(&b, 100);   /* 2*33 + 3*14 = 108 > 100 */
    EXPECT_BAD(b, "2 tensors and 3 key/values cannot fit");

    /* ---- key/values ---- */
    b = (buf_t){0}; hdr(&b, 3, 0, 1); put_u64(&b, UINT64_C(1) << 40); put_zeros(&b, 16);
    EXPECT_BAD(b, "string length 1099511627776 of the key of key/value 0 exceeds the 1 GiB limit");
    b = (buf_t){0}; hdr(&b, 3, 0, 1); put_u64(&b, 1000); put_zeros(&b, 16);
    EXPECT_BAD(b, "string length 1000 of the key of key/value 0 runs past the end of file");
    b = (buf_t){0}; hdr(&b, 3, 0, 1); put_u64(&b, 0); put_u32(&b, PL_GGUF_UINT8); put_u8(&b, 1); put_zeros(&b, 4);
    EXPECT_BAD(b, "key/value 0 has an empty key");
    b = (buf_t){0}; hdr(&b, 3, 0, 1); put_u64(&b, 3); put(&b, "a\0b", 3); put_u32(&b, PL_GGUF_UINT8); put_u8(&b, 1);
    EXPECT_BAD(b, "key 'a?b' contains a NUL byte");
    b = (buf_t){0}; hdr(&b, 3, 0, 2); kv_u32(&b, "a.b", 1); kv_u32(&b, "a.b", 2);
    EXPECT_BAD(b, "duplicate key 'a.b'");
    b = (buf_t){0}; hdr(&b, 3, 0, 1); put_str(&b, "k"); put_u32(&b, 13); put_u32(&b, 0);
    EXPECT_BAD(b, "key 'k' has invalid value type 13");
    b = (buf_t){0}; hdr(&b, 3, 0, 1); put_str(&b, "k"); put_u32(&b, 0x80000000u); put_u32(&b, 0);
    EXPECT_BAD(b, "key 'k' has invalid value type 2147483648");
    b = (buf_t){0}; hdr(&b, 3, 0, 1); put_str(&b, "k"); put_u32(&b, PL_GGUF_UINT64); put_u32(&b, 0);
    EXPECT_BAD(b, "file is truncated in the value of key 'k'");
    b = (buf_t){0}; hdr(&b, 3, 0, 1); put_str(&b, "k"); put_u32(&b, PL_GGUF_STRING); put_u64(&b, 50);
    put(&b, "short", 5);
    EXPECT_BAD(b, "string length 50 of the value of key 'k' runs past the end of file");
    b = (buf_t){0}; hdr(&b, 3, 0, 1); put_str(&b, "flag"); put_u32(&b, PL_GGUF_BOOL); put_u8(&b, 2);
    EXPECT_BAD(b, "bool key 'flag' has value 2 (must be 0 or 1)");
    b = (buf_t){0}; hdr(&b, 3, 0, 1); put_str(&b, "arr"); put_u32(&b, PL_GGUF_ARRAY); put_u32(&b, 99);
    put_u64(&b, 1); put_u32(&b, 0);
    EXPECT_BAD(b, "array 'arr' has invalid element type 99");
    b = (buf_t){0}; hdr(&b, 3, 0, 1); put_str(&b, "arr"); put_u32(&b, PL_GGUF_ARRAY); put_u32(&b, PL_GGUF_ARRAY);
    put_u64(&b, 1); put_u32(&b, PL_GGUF_UINT8); put_u64(&b, 1); put_u8(&b, 0);
    EXPECT_BAD(b, "array 'arr' is an array of arrays");
    b = (buf_t){0}; hdr(&b, 3, 0, 1); put_str(&b, "arr"); put_u32(&b, PL_GGUF_ARRAY); put_u32(&b, PL_GGUF_UINT32);
    put_u64(&b, 1000); put_zeros(&b, 40);
    EXPECT_BAD(b, "array 'arr' has 1000 elements, more than fit in the remaining 40 bytes");
    b = (buf_t){0}; hdr(&b, 3, 0, 1); put_str(&b, "arr"); put_u32(&b, PL_GGUF_ARRAY); put_u32(&b, PL_GGUF_UINT64);
    put_u64(&b, UINT64_C(1) << 61); put_zeros(&b, 40);   /* n * 8 would wrap to 0 */
    EXPECT_BAD(b, "more than the limit of 2^30");
    b = (buf_t){0}; hdr(&b, 3, 0, 1); put_str(&b, "arr"); put_u32(&b, PL_GGUF_ARRAY); put_u32(&b, PL_GGUF_STRING);
    put_u64(&b, 100); put_str(&b, "x");
    EXPECT_BAD(b, "array 'arr' has 100 elements, more than fit in the remaining 9 bytes");
    b = (buf_t){0}; hdr(&b, 3, 0, 1); put_str(&b, "arr"); put_u32(&b, PL_GGUF_ARRAY); put_u32(&b, PL_GGUF_STRING);
    put_u64(&b, 2); put_str(&b, "x"); put_u64(&b, 500); put_zeros(&b, 8);
    EXPECT_BAD(b, "string length 500 of element 1 of array 'arr' runs past the end of file");
    b = (buf_t){0}; hdr(&b, 3, 0, 1); put_str(&b, "arr"); put_u32(&b, PL_GGUF_ARRAY); put_u32(&b, PL_GGUF_STRING);
    put_u64(&b, 2); put_str(&b, "x"); put_u64(&b, UINT64_MAX);
    EXPECT_BAD(b, "string length 18446744073709551615 of element 1 of array 'arr' exceeds the 1 GiB limit");
    b = (buf_t){0}; hdr(&b, 3, 0, 1); put_str(&b, "flags"); put_u32(&b, PL_GGUF_ARRAY); put_u32(&b, PL_GGUF_BOOL);
    put_u64(&b, 3); put(&b, "\1\0\xff", 3);
    EXPECT_BAD(b, "element 2 of bool array 'flags' is 255 (must be 0 or 1)");
    b = (buf_t){0}; hdr(&b, 3, 0, 1); put_u64(&b, 5); put(&b, "k\x01\xc3\xa9z", 5); put_u32(&b, 77);
    EXPECT_BAD(b, "key 'k???z' has invalid value type 77");   /* unprintable bytes are masked */

    /* ---- general.alignment ---- */
    b = (buf_t){0}; hdr(&b, 3, 0, 1); kv_u32(&b, "general.alignment", 0);
    EXPECT_BAD(b, "general.alignment 0 is not a nonzero power of two");
    b = (buf_t){0}; hdr(&b, 3, 0, 1); kv_u32(&b, "general.alignment", 3);
    EXPECT_BAD(b, "general.alignment 3 is not a nonzero power of two");
    b = (buf_t){0}; hdr(&b, 3, 0, 1); kv_u64(&b, "general.alignment", 32);
    EXPECT_BAD(b, "general.alignment has type u64, but it must be u32");
    b = (buf_t){0}; hdr(&b, 3, 0, 1); kv_str(&b, "general.alignment", "32");
    EXPECT_BAD(b, "general.alignment has type str, but it must be u32");

    /* ---- tensor infos ---- */
    b = one_tensor("", 1, ne32, PL_F32, 0, 128);
    EXPECT_BAD(b, "tensor 0 has an empty name");
    char longname[65];
    memset(longname, 'x', 64);
    longname[64] = 0;
    b = one_tensor(longname, 1, ne32, PL_F32, 0, 128);
    EXPECT_BAD(b, "tensor 0 name 'xxxx");
    b = one_tensor(longname, 1, ne32, PL_F32, 0, 128);
    EXPECT_BAD(b, "is too long (64 bytes; the limit is 63)");
    b = (buf_t){0}; hdr(&b, 3, 1, 0); put_u64(&b, 3); put(&b, "w\0x", 3); put_u32(&b, 1); put_u64(&b, 32);
    put_u32(&b, PL_F32); put_u64(&b, 0); pad_to(&b, 32); put_zeros(&b, 128);
    EXPECT_BAD(b, "tensor 0 name 'w?x' contains a NUL byte");
    b = (buf_t){0}; hdr(&b, 3, 1, 0); put_u64(&b, UINT64_C(1) << 31);
    put_zeros(&b, 64);
    EXPECT_BAD(b, "string length 2147483648 of the name of tensor 0 exceeds the 1 GiB limit");
    b = (buf_t){0}; hdr(&b, 3, 2, 0);
    tinfo(&b, "w", 1, ne32, PL_F32, 0); tinfo(&b, "w", 1, ne32, PL_F32, 128);
    pad_to(&b, 32); put_zeros(&b, 256);
    EXPECT_BAD(b, "duplicate tensor name 'w'");
    b = one_tensor("w", 0, ne32, PL_F32, 0, 128);
    EXPECT_BAD(b, "tensor 'w' has 0 dimensions (must be 1 to 4)");
    { const int64_t ne5[5] = {32, 1, 1, 1, 1};
      b = one_tensor("w", 5, ne5, PL_F32, 0, 128); }
    EXPECT_BAD(b, "tensor 'w' has 5 dimensions (must be 1 to 4)");
    { const int64_t ne[2] = {32, 0};
      b = one_tensor("w", 2, ne, PL_F32, 0, 128); }
    EXPECT_BAD(b, "tensor 'w' dimension 1 is 0 (must be positive)");
    { const int64_t ne[1] = {-5};
      b = one_tensor("w", 1, ne, PL_F32, 0, 128); }
    EXPECT_BAD(b, "tensor 'w' dimension 0 is -5 (must be positive)");
    { const int64_t ne[3] = {32, 1, INT64_MIN};
      b = one_tensor("w", 3, ne, PL_F32, 0, 128); }
    EXPECT_BAD(b, "tensor 'w' dimension 2 is -9223372036854775808");
    { const int64_t ne[2] = {INT64_C(1) << 40, INT64_C(1) << 40};
      b = one_tensor("w", 2, ne, PL_F32, 0, 128); }
    EXPECT_BAD(b, "tensor 'w' has too many elements: its shape overflows int64");
    { const int64_t ne[4] = {1 << 16, 1 << 16, 1 << 16, 1 << 16};
      b = one_tensor("w", 4, ne, PL_F32, 0, 128); }
    EXPECT_BAD(b, "shape overflows int64");
    { const int64_t ne[2] = {INT64_C(1) << 31, INT64_C(1) << 31};   /* 2^62 f32 = 2^64 bytes */
      b = one_tensor("w", 2, ne, PL_F32, 0, 128); }
    EXPECT_BAD(b, "tensor 'w' byte size overflows");
    b = one_tensor("w", 1, ne32, 4, 0, 128);   /* GGML's removed Q4_2 */
    EXPECT_BAD(b, "tensor 'w' has unknown type id 4");
    b = one_tensor("w", 1, ne32, 1000, 0, 128);
    EXPECT_BAD(b, "tensor 'w' has unknown type id 1000");
    { const int64_t ne[2] = {100, 2};
      b = one_tensor("w", 2, ne, PL_Q4_K, 0, 2048); }
    EXPECT_BAD(b, "tensor 'w' has 100 elements per row, not a multiple of the q4_K block size 256");
    { const int64_t ne[1] = {33};
      b = one_tensor("w", 1, ne, PL_Q8_0, 0, 2048); }
    EXPECT_BAD(b, "not a multiple of the q8_0 block size 32");
    b = (buf_t){0}; hdr(&b, 3, 1, 0); tinfo(&b, "w", 1, ne32, PL_F32, 0); pad_to(&b, 32); put_zeros(&b, 127);
    EXPECT_BAD(b, "tensor 'w' extends past end of file");
    b = one_tensor("w", 1, ne32, PL_F32, 4096, 128);
    EXPECT_BAD(b, "tensor 'w' extends past end of file");
    b = one_tensor("w", 1, ne32, PL_F32, UINT64_MAX - 31, 128);   /* aligned, but start + offset wraps */
    EXPECT_BAD(b, "tensor 'w' extends past end of file");
    b = one_tensor("w", 1, ne32, PL_F32, 4, 256);
    EXPECT_BAD(b, "tensor 'w' offset 4 is not a multiple of the alignment 32");
    b = (buf_t){0}; hdr(&b, 3, 1, 1); kv_u32(&b, "general.alignment", 64);
    tinfo(&b, "w", 1, ne32, PL_F32, 32); pad_to(&b, 64); put_zeros(&b, 256);
    EXPECT_BAD(b, "tensor 'w' offset 32 is not a multiple of the alignment 64");
    b = (buf_t){0}; hdr(&b, 3, 2, 0);   /* a: [0, 128), b: [96, 224) */
    tinfo(&b, "a", 1, ne32, PL_F32, 0); tinfo(&b, "b", 1, ne32, PL_F32, 96);
    pad_to(&b, 32); put_zeros(&b, 256);
    EXPECT_BAD(b, "tensors 'a' and 'b' overlap");
    b = (buf_t){0}; hdr(&b, 3, 3, 0);   /* listed out of order; c lies inside a */
    tinfo(&b, "a", 1, ne32, PL_F32, 128); tinfo(&b, "b", 1, ne32, PL_F32, 0); tinfo(&b, "c", 1, ne32, PL_F32, 192);
    pad_to(&b, 32); put_zeros(&b, 512);
    EXPECT_BAD(b, "tensors 'a' and 'c' overlap");
    b = (buf_t){0}; hdr(&b, 3, 1, 0); tinfo(&b, "w", 1, ne32, PL_F32, 0);   /* header only: no data section */
    EXPECT_BAD(b, "tensor 'w' extends past end of file");
    /* (a KV of padding keeps the counts plausible, so the cut is found where it is) */
    b = (buf_t){0}; hdr(&b, 3, 1, 1); kv_str(&b, "pad", "0123456789012345678901234567890123456789");
    put_str(&b, "w"); put_u32(&b, 2); put_u64(&b, 32);
    EXPECT_BAD(b, "file is truncated in the shape of tensor 'w'");

    printf("%d corrupt files rejected\n", n_corrupt_cases);
}

/* Files at the edge of validity that must be accepted. */
static void test_edge_valid(void) {
    buf_t b = {0};
    const int64_t ne32[1] = {32};
    /* v2 header, no KVs, no tensors, no padding. */
    hdr(&b, 2, 0, 0);
    pl_gguf *g = EXPECT_OK(b.p, b.n);
    CHECK(g && pl_gguf_version(g) == 2 && pl_gguf_n_kv(g) == 0 && pl_gguf_alignment(g) == 32, "v2 empty");
    pl_gguf_close(g);
    free(b.p);
    /* Tensors out of table order but disjoint, with a gap, and trailing bytes. */
    b = (buf_t){0};
    hdr(&b, 3, 2, 1);
    kv_u32(&b, "general.alignment", 1);
    tinfo(&b, "hi", 1, ne32, PL_F32, 300);
    tinfo(&b, "lo", 1, ne32, PL_F32, 0);
    put_zeros(&b, 428 + 17);
    g = EXPECT_OK(b.p, b.n);
    if (g) {
        const pl_gguf_tensor *t = pl_gguf_find_tensor(g, "hi");
        CHECK(t && (const uint8_t *)t->data == b.p + pl_gguf_data_offset(g) + 300, "unordered tensors");
        CHECK(pl_gguf_alignment(g) == 1, "alignment 1");
        pl_gguf_close(g);
    }
    free(b.p);
    /* Adjacent tensors (end of one == start of next) do not overlap. */
    b = (buf_t){0};
    hdr(&b, 3, 2, 0);
    tinfo(&b, "a", 1, ne32, PL_F32, 0);
    tinfo(&b, "b", 1, ne32, PL_F32, 128);
    pad_to(&b, 32);
    put_zeros(&b, 256);
    g = EXPECT_OK(b.p, b.n);
    pl_gguf_close(g);
    free(b.p);
    /* Empty string array; a NUL byte inside a string value is fine. */
    b = (buf_t){0};
    hdr(&b, 3, 0, 2);
    put_str(&b, "e"); put_u32(&b, PL_GGUF_ARRAY); put_u32(&b, PL_GGUF_STRING); put_u64(&b, 0);
    put_str(&b, "v"); put_u32(&b, PL_GGUF_STRING); put_u64(&b, 3); put(&b, "a\0b", 3);
    g = EXPECT_OK(b.p, b.n);
    if (g) {
        uint64_t n = 9;
        pl_gguf_str s;
        CHECK(pl_gguf_get_arr(g, "e", NULL, &n, NULL) == PL_OK && n == 0, "empty string array");
        CHECK(pl_gguf_arr_str(g, "e", 0, &s) == PL_ERR_INVALID_ARG, "index into empty array");
        CHECK(pl_gguf_get_str(g, "v", &s) == PL_OK && s.len == 3, "NUL in value");
        walk_all(g);
        pl_gguf_close(g);
    }
    free(b.p);
}

/* ---- (d) fuzzer regressions ---------------------------------------------- */

static void test_fuzz_regressions(void) {
    /* Crash inputs found by tests/fuzz/fuzz_gguf.c go here, with the status
     * they must now produce; each is opened from an exactly sized copy so
     * ASan catches any read outside it. (None so far: several million runs
     * found no crash. The entry below is a placeholder in the right form.) */
    static const struct { const char *bytes; size_t n; pl_status want; } cases[] = {
        {"GGUF\3\0\0\0", 8, PL_ERR_FORMAT},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        uint8_t *copy = malloc(cases[i].n);
        memcpy(copy, cases[i].bytes, cases[i].n);
        pl_gguf *g = NULL;
        pl_status st = pl_gguf_open_memory(copy, cases[i].n, "fuzz.gguf", &g);
        CHECK(st == cases[i].want, "fuzz case %zu: status %d: %s", i, st, pl_last_error());
        if (g) {
            walk_all(g);
            pl_gguf_close(g);
        }
        free(copy);
    }
}

/* ---- fuzz seeds ---------------------------------------------------------- */

/* PL_GGUF_WRITE_SEEDS=<dir> ./test_gguf writes the fuzz seeds kept in
 * tests/fuzz/seeds/fuzz_gguf/ (small files: the fixtures themselves are too big
 * to be useful seeds). Living here keeps the generator compiled and working. */
static void save(const char *dir, const char *name, const void *p, size_t n) {
    char path[4096];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    FILE *f = fopen(path, "wb");
    CHECK(f && fwrite(p, 1, n, f) == n && fclose(f) == 0, "cannot write %s", path);
}

static void save_writer(const char *dir, const char *name, pl_gguf_writer *w) {
    void *mem = NULL;
    size_t size = 0;
    CHECK(pl_gguf_writer_to_memory(w, &mem, &size) == PL_OK, "%s: %s", name, pl_last_error());
    if (mem) save(dir, name, mem, size);
    free(mem);
    pl_gguf_writer_free(w);
}

/* A miniature of a fixture: its small scalar KVs, the first few elements of
 * each array, and every tensor shrunk to one block row (real bytes from the
 * fixture, so quantized blocks are realistic). */
static void save_mini(const char *dir, const char *fixture, const char *name, uint64_t max_arr) {
    pl_gguf *g = NULL;
    CHECK(pl_gguf_open(pl_fixture(fixture), &g) == PL_OK, "%s", pl_last_error());
    if (!g) return;
    pl_gguf_writer *w = NULL;
    pl_gguf_writer_create(&w);
    for (int64_t i = 0; i < pl_gguf_n_kv(g); i++) {
        pl_gguf_str k = pl_gguf_kv_key(g, i);
        char key[256];
        snprintf(key, sizeof key, "%.*s", (int)k.len, k.ptr);
        pl_gguf_type t = pl_gguf_kv_type(g, i);
        if (t == PL_GGUF_ARRAY) {
            pl_gguf_type et;
            uint64_t n;
            const void *d;
            pl_gguf_get_arr(g, key, &et, &n, &d);
            if (n > max_arr) n = max_arr;
            if (et == PL_GGUF_STRING) {
                pl_gguf_str strs[64];
                for (uint64_t j = 0; j < n && j < 64; j++) pl_gguf_arr_str(g, key, j, &strs[j]);
                CHECK(pl_gguf_writer_add_arr_str_n(w, key, strs, n < 64 ? n : 64) == PL_OK, "%s", key);
            } else {
                CHECK(pl_gguf_writer_add_arr(w, key, et, d, n) == PL_OK, "%s", key);
            }
        } else if (t != PL_GGUF_STRING || (pl_gguf_get_str(g, key, &k) == PL_OK && k.len <= 200)) {
            CHECK(pl_gguf_writer_copy_kv(w, g, i) == PL_OK, "%s", key);
        }
    }
    for (int64_t i = 0; i < pl_gguf_n_tensors(g); i++) {
        const pl_gguf_tensor *t = pl_gguf_tensor_at(g, i);
        const pl_dtype_traits *tr = pl_dtype_get(t->dtype);
        /* 3-D expert tensors (qwen3moe) keep two experts of one block row */
        const int64_t n_exp = t->n_dims == 3 && t->ne[2] > 1 ? 2 : 1;
        int64_t ne[4] = {tr->block_size == 1 ? 16 : tr->block_size, 1, n_exp, 1};
        CHECK(pl_gguf_writer_add_tensor(w, t->name, t->dtype, t->n_dims, ne, t->data, tr->type_size *
                                        (tr->block_size == 1 ? 16 : 1) * (size_t)n_exp) == PL_OK, "%s", pl_last_error());
    }
    save_writer(dir, name, w);
    pl_gguf_close(g);
}

static void write_seeds(const char *dir) {
    static float f32data[64];
    static uint16_t f16data[24];
    static uint8_t q4k[288], q80[102];
    int fills = 0;
    pl_gguf_writer *w = NULL;
    pl_gguf_writer_create(&w);
    save_writer(dir, "empty-v3.gguf", w);
    save_writer(dir, "all-types.gguf", build_writer(0, f32data, f16data, q4k, q80, &fills));
    save_writer(dir, "all-types-align64.gguf", build_writer(64, f32data, f16data, q4k, q80, &fills));
    buf_t b = {0};
    const int64_t ne32[1] = {32};
    hdr(&b, 2, 2, 2);
    kv_u32(&b, "general.alignment", 1);
    kv_str(&b, "general.architecture", "qwen2");
    tinfo(&b, "hi", 1, ne32, PL_F32, 300);
    tinfo(&b, "lo", 1, ne32, PL_F32, 0);
    put_zeros(&b, 428 + 5);
    save(dir, "v2-unordered-align1.gguf", b.p, b.n);
    free(b.p);
    save_mini(dir, "models/qwen3-vocab.gguf", "mini-vocab.gguf", 48);
    save_mini(dir, "models/tiny-qwen3-f16.gguf", "mini-qwen3-f16.gguf", 8);
    save_mini(dir, "models/tiny-qwen3-q4_k_m.gguf", "mini-qwen3-q4_k_m.gguf", 8);
    save_mini(dir, "models/tiny-qwen3-iq2_xs.gguf", "mini-qwen3-iq2_xs.gguf", 8);
    save_mini(dir, "models/tiny-qwen2-f16.gguf", "mini-qwen2-f16.gguf", 8);
    save_mini(dir, "models/tiny-imatrix.gguf", "mini-imatrix.gguf", 8);
    save_mini(dir, "models/tiny-qwen3moe-f16.gguf", "mini-qwen3moe-f16.gguf", 8);
    printf("wrote fuzz seeds to %s\n", dir);
}

int main(void) {
    test_fixtures();
    test_writer();
    test_truncations();
    test_corrupt();
    test_edge_valid();
    test_fuzz_regressions();
    if (getenv("PL_GGUF_WRITE_SEEDS")) write_seeds(getenv("PL_GGUF_WRITE_SEEDS"));
    return pl_test_summary("test_gguf");
}
