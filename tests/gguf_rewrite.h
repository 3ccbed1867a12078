/* Rewritten copies of a GGUF fixture, for the load-validation tests
 * (test_model_load.c, test_gemma3.c): each case copies a fixture with one
 * key or tensor dropped, keys added or overridden, or one tensor replaced,
 * then loads the copy and expects a named refusal. */
#ifndef PL_TEST_GGUF_REWRITE_H
#define PL_TEST_GGUF_REWRITE_H
#include <stdbool.h>
#include <stdio.h>
#include <string.h>
#include "testutil.h"
#include "pocketllm.h"
#include "gguf/gguf.h"
#include "gguf/gguf_write.h"

/* Adds or overrides keys of the copy (src: the fixture, for its values). */
typedef void (*pl_rewrite_edit_fn)(pl_gguf_writer *w, const pl_gguf *src);
/* Writes its own version of tensor t into the copy in place of t's. */
typedef void (*pl_rewrite_tensor_fn)(pl_gguf_writer *w, const pl_gguf_tensor *t);

/* Copies fixture src (a path under tests/fixtures) into dst without KV
 * drop_key and tensor drop_tensor; edit (if any) then adds keys, and the
 * tensor named replace_tensor is written by replace instead. */
static inline void pl_rewrite_fixture(const char *src, const char *dst, const char *drop_key, const char *drop_tensor,
                                      pl_rewrite_edit_fn edit, const char *replace_tensor, pl_rewrite_tensor_fn replace) {
    pl_gguf *g = NULL;
    if (pl_gguf_open(pl_fixture(src), &g) != PL_OK) { CHECK(0, "open: %s", pl_last_error()); return; }
    pl_gguf_writer *w = NULL;
    pl_gguf_writer_create(&w);
    for (int64_t i = 0; i < pl_gguf_n_kv(g); i++) {
        pl_gguf_str k = pl_gguf_kv_key(g, i);
        if (drop_key && strlen(drop_key) == k.len && !memcmp(k.ptr, drop_key, k.len)) continue;
        pl_gguf_writer_copy_kv(w, g, i);
    }
    if (edit) edit(w, g);
    for (int64_t i = 0; i < pl_gguf_n_tensors(g); i++) {
        const pl_gguf_tensor *t = pl_gguf_tensor_at(g, i);
        if (drop_tensor && !strcmp(t->name, drop_tensor)) continue;
        if (replace_tensor && replace && !strcmp(t->name, replace_tensor)) {
            replace(w, t);
            continue;
        }
        pl_gguf_writer_add_tensor(w, t->name, t->dtype, t->n_dims, t->ne, t->data, t->size);
    }
    CHECK(pl_gguf_writer_write_file(w, dst) == PL_OK, "write: %s", pl_last_error());
    pl_gguf_writer_free(w);
    pl_gguf_close(g);
}

/* Loading path (on ref) must fail with status want and a message naming phrase. */
static inline void pl_expect_load_error(const char *path, const char *what, pl_status want, const char *phrase) {
    pl_model *m = NULL;
    pl_model_params p = pl_model_default_params();
    p.device = "ref";
    p.n_ctx = 64;
    pl_status st = pl_model_load(path, &p, &m);
    CHECK(st == want, "%s: status %d (%s), wanted %d", what, st, pl_last_error(), want);
    CHECK(strstr(pl_last_error(), phrase) != NULL, "%s: message '%s' lacks '%s'", what, pl_last_error(), phrase);
    if (st == PL_OK) pl_model_free(m);
    else printf("  %-30s -> %s\n", what, pl_last_error());
}
#endif
