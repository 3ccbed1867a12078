/*
 * Importance matrices: the GGUF file format of llama.cpp's imatrix tool (see
 * quant/imatrix.h). Collection is the caller's, through the public per-node
 * observer (pl_model_set_observer; tools/pocketllm/imatrix_collect.c).
 */
#include "quant/imatrix.h"
#include "core/status.h"
#include "gguf/gguf.h"
#include "gguf/gguf_write.h"
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct im_entry {
    char *name;
    int64_t n_cols, n_mat;
    float *sums;       /* n_cols * n_mat */
    float *counts;     /* n_mat (float, as stored in the file) */
    float *weights;    /* sums / counts, computed on demand */
    bool weights_valid;
} im_entry;

struct pl_imatrix {
    im_entry *e;
    int n, cap;
    char *dataset;
    uint32_t chunk_count, chunk_size;
};

pl_status pl_imatrix_create(const char *dataset, int chunk_size, pl_imatrix **out) {
    *out = NULL;
    pl_imatrix *im = calloc(1, sizeof *im);
    if (!im) return pl_errorf(PL_ERR_NO_MEMORY, "out of memory");
    im->dataset = strdup(dataset ? dataset : "");
    if (!im->dataset) {
        free(im);
        return pl_errorf(PL_ERR_NO_MEMORY, "out of memory");
    }
    im->chunk_size = chunk_size > 0 ? (uint32_t)chunk_size : 0;
    *out = im;
    return PL_OK;
}

void pl_imatrix_free(pl_imatrix *im) {
    if (!im) return;
    for (int i = 0; i < im->n; i++) {
        free(im->e[i].name);
        free(im->e[i].sums);
        free(im->e[i].counts);
        free(im->e[i].weights);
    }
    free(im->e);
    free(im->dataset);
    free(im);
}

int pl_imatrix_n_entries(const pl_imatrix *im) { return im->n; }
const char *pl_imatrix_entry_name(const pl_imatrix *im, int i) { return i >= 0 && i < im->n ? im->e[i].name : NULL; }
uint32_t pl_imatrix_chunk_count(const pl_imatrix *im) { return im->chunk_count; }
uint32_t pl_imatrix_chunk_size(const pl_imatrix *im) { return im->chunk_size; }
const char *pl_imatrix_dataset(const pl_imatrix *im) { return im->dataset; }

static im_entry *find_entry(pl_imatrix *im, const char *name) {
    for (int i = 0; i < im->n; i++)
        if (!strcmp(im->e[i].name, name)) return &im->e[i];
    return NULL;
}

static im_entry *add_entry(pl_imatrix *im, const char *name, int64_t n_cols, int64_t n_mat) {
    if (im->n == im->cap) {
        int cap = im->cap ? 2 * im->cap : 64;
        im_entry *e = realloc(im->e, (size_t)cap * sizeof *e);
        if (!e) return NULL;
        im->e = e;
        im->cap = cap;
    }
    im_entry *e = &im->e[im->n];
    memset(e, 0, sizeof *e);
    e->name = strdup(name);
    e->n_cols = n_cols;
    e->n_mat = n_mat;
    e->sums = calloc((size_t)(n_cols * n_mat), sizeof(float));
    e->counts = calloc((size_t)n_mat, sizeof(float));
    if (!e->name || !e->sums || !e->counts) {
        free(e->name);
        free(e->sums);
        free(e->counts);
        return NULL;
    }
    im->n++;
    return e;
}

const float *pl_imatrix_weights(pl_imatrix *im, const char *name, int64_t *n) {
    im_entry *e = find_entry(im, name);
    if (!e) return NULL;
    if (!e->weights_valid) {
        if (!e->weights) e->weights = malloc((size_t)(e->n_cols * e->n_mat) * sizeof(float));
        if (!e->weights) return NULL;
        for (int64_t j = 0; j < e->n_mat; j++) {
            /* llama-quantize rounds the stored count to an integer first */
            const float count = (float)lroundf(e->counts[j]);
            for (int64_t i = 0; i < e->n_cols; i++)
                e->weights[j * e->n_cols + i] = count > 0.0f ? e->sums[j * e->n_cols + i] / count : 1.0f;
        }
        e->weights_valid = true;
    }
    if (n) *n = e->n_cols * e->n_mat;
    return e->weights;
}

/* ---- file format -----------------------------------------------------------------*/

static bool ends_with(const char *s, const char *suf, size_t *stem) {
    size_t n = strlen(s), k = strlen(suf);
    if (n <= k || strcmp(s + n - k, suf)) return false;
    *stem = n - k;
    return true;
}

pl_status pl_imatrix_load(const char *path, pl_imatrix **out) {
    *out = NULL;
    pl_gguf *g = NULL;
    pl_status st = pl_gguf_open(path, &g);
    if (st != PL_OK) return st;
    const char *base = pl_gguf_name(g);
    pl_imatrix *im = NULL;
    pl_gguf_str ds = {"", 0};
    pl_gguf_type et;
    uint64_t nds = 0;
    const void *dd;
    if (pl_gguf_get_arr(g, "imatrix.datasets", &et, &nds, &dd) == PL_OK && et == PL_GGUF_STRING && nds > 0)
        pl_gguf_arr_str(g, "imatrix.datasets", 0, &ds);
    char *dsname = strndup(ds.ptr, (size_t)ds.len);
    st = dsname ? pl_imatrix_create(dsname, 0, &im) : pl_errorf(PL_ERR_NO_MEMORY, "out of memory");
    free(dsname);
    if (st != PL_OK) goto done;
    uint32_t v;
    if (pl_gguf_get_u32(g, "imatrix.chunk_count", &v) == PL_OK) im->chunk_count = v;
    if (pl_gguf_get_u32(g, "imatrix.chunk_size", &v) == PL_OK) im->chunk_size = v;
    if (pl_gguf_find_key(g, "imatrix.chunk_count") < 0 || pl_gguf_find_key(g, "imatrix.chunk_size") < 0 ||
        pl_gguf_find_key(g, "imatrix.datasets") < 0) {
        st = pl_errorf(PL_ERR_FORMAT, "%s: not an importance matrix (no imatrix.* metadata)", base);
        goto done;
    }
    for (int64_t i = 0; i < pl_gguf_n_tensors(g); i++) {
        const pl_gguf_tensor *t = pl_gguf_tensor_at(g, i);
        size_t stem;
        if (!ends_with(t->name, ".in_sum2", &stem)) continue;
        char name[128];
        if (stem >= sizeof name - 8) {
            st = pl_errorf(PL_ERR_FORMAT, "%s: tensor name '%s' is too long", base, t->name);
            goto done;
        }
        memcpy(name, t->name, stem);
        strcpy(name + stem, ".counts");
        const pl_gguf_tensor *c = pl_gguf_find_tensor(g, name);
        name[stem] = 0;
        if (!c) {
            st = pl_errorf(PL_ERR_FORMAT, "%s: mismatched sums and counts for %s", base, name);
            goto done;
        }
        const int64_t n_cols = t->ne[0], n_mat = t->ne[1] * t->ne[2] * t->ne[3];
        const int64_t n_counts = c->ne[0] * c->ne[1] * c->ne[2] * c->ne[3];
        if (t->dtype != PL_F32 || c->dtype != PL_F32 || n_counts != n_mat) {
            st = pl_errorf(PL_ERR_FORMAT, "%s: entry %s: sums %s [%lld x %lld] and counts %s [%lld] do not match", base,
                           name, pl_dtype_name(t->dtype), (long long)n_cols, (long long)n_mat, pl_dtype_name(c->dtype),
                           (long long)n_counts);
            goto done;
        }
        im_entry *e = add_entry(im, name, n_cols, n_mat);
        if (!e) {
            st = pl_errorf(PL_ERR_NO_MEMORY, "out of memory");
            goto done;
        }
        memcpy(e->sums, t->data, (size_t)(n_cols * n_mat) * sizeof(float));
        memcpy(e->counts, c->data, (size_t)n_mat * sizeof(float));
    }
    if (im->n == 0) st = pl_errorf(PL_ERR_FORMAT, "%s: the importance matrix has no entries", base);
done:
    pl_gguf_close(g);
    if (st != PL_OK) {
        pl_imatrix_free(im);
        return st;
    }
    *out = im;
    return PL_OK;
}

static int cmp_entry(const void *a, const void *b) {
    return strcmp(((const pl_imatrix_entry *)a)->name, ((const pl_imatrix_entry *)b)->name);
}

pl_status pl_imatrix_write(const char *path, const char *dataset, uint32_t chunk_count, uint32_t chunk_size,
                           const pl_imatrix_entry *entries, size_t n) {
    if (!path || (n && !entries)) return pl_errorf(PL_ERR_INVALID_ARG, "pl_imatrix_write: NULL argument");
    for (size_t i = 0; i < n; i++) {
        const pl_imatrix_entry *e = &entries[i];
        if (!e->name || !e->sums || !e->counts || e->n_cols <= 0 || e->n_mat <= 0 || strlen(e->name) > 140)
            return pl_errorf(PL_ERR_INVALID_ARG, "pl_imatrix_write: entry %zu is incomplete", i);
    }
    pl_gguf_writer *w = NULL;
    PL_TRY(pl_gguf_writer_create(&w));
    /* deterministic order, as llama.cpp: sorted by name */
    pl_imatrix_entry *sorted = malloc((n ? n : 1) * sizeof *sorted);
    char (*names)[160] = malloc((n ? n : 1) * 2 * sizeof *names);
    pl_status st = sorted && names ? PL_OK : pl_errorf(PL_ERR_NO_MEMORY, "out of memory");
    if (st == PL_OK) {
        if (n) memcpy(sorted, entries, n * sizeof *sorted);
        qsort(sorted, n, sizeof *sorted, cmp_entry);
        const char *ds = dataset ? dataset : "";
        pl_gguf_writer_add_str(w, "general.type", "imatrix");
        st = pl_gguf_writer_add_arr_str(w, "imatrix.datasets", &ds, 1);
    }
    if (st == PL_OK) st = pl_gguf_writer_add_u32(w, "imatrix.chunk_count", chunk_count);
    if (st == PL_OK) st = pl_gguf_writer_add_u32(w, "imatrix.chunk_size", chunk_size);
    for (size_t i = 0; i < n && st == PL_OK; i++) {
        const pl_imatrix_entry *e = &sorted[i];
        /* ggml drops trailing dimensions of 1: [n_cols] for a dense weight */
        const uint32_t nd = e->n_mat > 1 ? 2 : 1;
        snprintf(names[2 * i], sizeof names[0], "%s.in_sum2", e->name);
        snprintf(names[2 * i + 1], sizeof names[0], "%s.counts", e->name);
        st = pl_gguf_writer_add_tensor(w, names[2 * i], PL_F32, nd, (int64_t[]){e->n_cols, e->n_mat}, e->sums,
                                       (uint64_t)(e->n_cols * e->n_mat) * sizeof(float));
        if (st == PL_OK)
            st = pl_gguf_writer_add_tensor(w, names[2 * i + 1], PL_F32, nd, (int64_t[]){1, e->n_mat}, e->counts,
                                           (uint64_t)e->n_mat * sizeof(float));
    }
    if (st == PL_OK) st = pl_gguf_writer_write_file(w, path);
    free(sorted);
    free(names);
    pl_gguf_writer_free(w);
    return st;
}

pl_status pl_imatrix_save(const pl_imatrix *im, const char *path) {
    pl_imatrix_entry *e = malloc((size_t)(im->n ? im->n : 1) * sizeof *e);
    if (!e) return pl_errorf(PL_ERR_NO_MEMORY, "out of memory");
    for (int i = 0; i < im->n; i++)
        e[i] = (pl_imatrix_entry){im->e[i].name, im->e[i].n_cols, im->e[i].n_mat, im->e[i].sums, im->e[i].counts};
    pl_status st = pl_imatrix_write(path, im->dataset, im->chunk_count, im->chunk_size, e, (size_t)im->n);
    free(e);
    return st;
}
