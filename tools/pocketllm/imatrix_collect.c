/*
 * Importance-matrix collection through the public observer (see
 * imatrix_collect.h). Sums are kept in float and accumulated row by row,
 * column by column, as llama.cpp's collector does, so the same activations
 * give the same sums (and the same file as the library's collector did).
 */
#include "imatrix_collect.h"
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct imx_entry {
    char *name;
    int64_t n_cols;
    float *sums;       /* n_cols (one matrix: dense weights) */
    float count;       /* tokens summed (float, as stored in the file) */
} imx_entry;

struct imx_collector {
    imx_entry *e;
    int n, cap;
    char *dataset;
    uint32_t chunk_count, chunk_size;
    bool process_output;
    pl_status error;
    char msg[256];
};

imx_collector *imx_create(const char *dataset, int chunk_size, bool process_output) {
    imx_collector *c = calloc(1, sizeof *c);
    if (!c) return NULL;
    c->dataset = strdup(dataset ? dataset : "");
    if (!c->dataset) {
        free(c);
        return NULL;
    }
    c->chunk_size = chunk_size > 0 ? (uint32_t)chunk_size : 0;
    c->process_output = process_output;
    return c;
}

void imx_free(imx_collector *c) {
    if (!c) return;
    for (int i = 0; i < c->n; i++) {
        free(c->e[i].name);
        free(c->e[i].sums);
    }
    free(c->e);
    free(c->dataset);
    free(c);
}


static imx_entry *find_or_add(imx_collector *c, const char *name, int64_t n_cols) {
    for (int i = 0; i < c->n; i++)
        if (!strcmp(c->e[i].name, name)) return &c->e[i];
    if (c->n == c->cap) {
        const int cap = c->cap ? 2 * c->cap : 64;
        imx_entry *e = realloc(c->e, (size_t)cap * sizeof *e);
        if (!e) return NULL;
        c->e = e;
        c->cap = cap;
    }
    imx_entry *e = &c->e[c->n];
    e->name = strdup(name);
    e->n_cols = n_cols;
    e->sums = calloc((size_t)n_cols, sizeof(float));
    e->count = 0;
    if (!e->name || !e->sums) {
        free(e->name);
        free(e->sums);
        return NULL;
    }
    c->n++;
    return e;
}

void imx_observe(void *user, const pl_node_info *nd) {
    imx_collector *c = user;
    if (!nd->weight || strcmp(nd->op, "matmul") || c->error != PL_OK) return;
    /* llama.cpp ignores small batches (< 16 rows) and everything that is not
     * a repeating-layer weight (or the output projection on request). */
    if (!nd->input || nd->ne[1] < 16) return;
    if (strncmp(nd->weight, "blk.", 4) && !(c->process_output && !strcmp(nd->weight, "output.weight"))) return;
    imx_entry *e = find_or_add(c, nd->weight, nd->ne[0]);
    if (!e) {
        c->error = PL_ERR_NO_MEMORY;
        snprintf(c->msg, sizeof c->msg, "out of memory collecting the importance matrix");
        return;
    }
    if (e->n_cols != nd->ne[0]) {
        c->error = PL_ERR_INTERNAL;
        snprintf(c->msg, sizeof c->msg, "imatrix: inconsistent input size for %s (%lld vs %lld)", nd->weight,
                 (long long)e->n_cols, (long long)nd->ne[0]);
        return;
    }
    /* input: [ne0 columns, ne1 rows, ne2, ne3], rows strided by nb[1..3] */
    for (int64_t i3 = 0; i3 < nd->ne[3]; i3++)
        for (int64_t i2 = 0; i2 < nd->ne[2]; i2++)
            for (int64_t r = 0; r < nd->ne[1]; r++) {
                const float *xr = (const float *)((const char *)nd->input + r * nd->nb[1] + i2 * nd->nb[2] +
                                                  i3 * nd->nb[3]);
                for (int64_t j = 0; j < nd->ne[0]; j++) e->sums[j] += xr[j] * xr[j];
            }
    for (int64_t j = 0; j < nd->ne[0]; j++)
        if (!isfinite(e->sums[j])) {
            c->error = PL_ERR_INTERNAL;
            snprintf(c->msg, sizeof c->msg, "imatrix: non-finite activation statistics in %s", nd->weight);
            return;
        }
    e->count += (float)(nd->ne[1] * nd->ne[2] * nd->ne[3]);
}

pl_status imx_attach(imx_collector *c, pl_model *m) { return pl_model_set_observer(m, imx_observe, c); }
void imx_detach(imx_collector *c, pl_model *m) {
    (void)c;
    pl_model_set_observer(m, NULL, NULL);
}
void imx_add_chunk(imx_collector *c) { c->chunk_count++; }
int imx_n_entries(const imx_collector *c) { return c->n; }
uint32_t imx_chunk_count(const imx_collector *c) { return c->chunk_count; }
uint32_t imx_chunk_size(const imx_collector *c) { return c->chunk_size; }

pl_status imx_status(const imx_collector *c, const char **msg) {
    if (msg) *msg = c->msg;
    return c->error;
}

pl_status imx_save(const imx_collector *c, const char *path) {
    pl_imatrix_entry *e = malloc((size_t)(c->n ? c->n : 1) * sizeof *e);
    if (!e) return PL_ERR_NO_MEMORY;
    for (int i = 0; i < c->n; i++) e[i] = (pl_imatrix_entry){c->e[i].name, c->e[i].n_cols, 1, c->e[i].sums, &c->e[i].count};
    pl_status st = pl_imatrix_write(path, c->dataset, c->chunk_count, c->chunk_size, e, (size_t)c->n);
    free(e);
    return st;
}
