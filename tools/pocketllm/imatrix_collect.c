/*
 * Importance-matrix collection through the public observer (see
 * imatrix_collect.h). Sums are kept in float and accumulated row by row,
 * column by column, as llama.cpp's collector does, so the same activations
 * give the same sums (and the same file as the library's collector did).
 * Expert tensors (matmul_id) get one row of sums and one count per expert.
 */
#include "imatrix_collect.h"
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct imx_entry {
    char *name;
    int64_t n_cols, n_mat;
    float *sums;       /* n_cols * n_mat: one row of sums per matrix (expert) */
    float *counts;     /* n_mat: tokens summed into each (float, as stored in the file) */
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
        free(c->e[i].counts);
    }
    free(c->e);
    free(c->dataset);
    free(c);
}


/* The entry of weight `name`: n_mat matrices of n_cols (n_mat 1 for a dense
 * weight, n_expert for an expert tensor). NULL with c->error set when out of
 * memory or when the weight was seen before with another shape. */
static imx_entry *entry_for(imx_collector *c, const char *name, int64_t n_cols, int64_t n_mat) {
    imx_entry *e = NULL;
    for (int i = 0; i < c->n && !e; i++)
        if (!strcmp(c->e[i].name, name)) e = &c->e[i];
    if (e) {
        if (e->n_cols == n_cols && e->n_mat == n_mat) return e;
        c->error = PL_ERR_INTERNAL;
        snprintf(c->msg, sizeof c->msg, "imatrix: inconsistent input size for %s (%lld x %lld vs %lld x %lld)", name,
                 (long long)e->n_cols, (long long)e->n_mat, (long long)n_cols, (long long)n_mat);
        return NULL;
    }
    if (c->n == c->cap) {
        const int cap = c->cap ? 2 * c->cap : 64;
        imx_entry *ne = realloc(c->e, (size_t)cap * sizeof *ne);
        if (!ne) goto oom;
        c->e = ne;
        c->cap = cap;
    }
    e = &c->e[c->n];
    e->name = strdup(name);
    e->n_cols = n_cols;
    e->n_mat = n_mat;
    e->sums = calloc((size_t)(n_cols * n_mat), sizeof(float));
    e->counts = calloc((size_t)n_mat, sizeof(float));
    if (!e->name || !e->sums || !e->counts) {
        free(e->name);
        free(e->sums);
        free(e->counts);
        goto oom;
    }
    c->n++;
    return e;
oom:
    c->error = PL_ERR_NO_MEMORY;
    snprintf(c->msg, sizeof c->msg, "out of memory collecting the importance matrix");
    return NULL;
}

static bool sums_finite(imx_collector *c, const imx_entry *e, int64_t mat) {
    for (int64_t j = 0; j < e->n_cols; j++)
        if (!isfinite(e->sums[mat * e->n_cols + j])) {
            c->error = PL_ERR_INTERNAL;
            snprintf(c->msg, sizeof c->msg, "imatrix: non-finite activation statistics in %s", e->name);
            return false;
        }
    return true;
}

/* A dense matmul: every input row adds its squares to the one matrix. */
static void observe_matmul(imx_collector *c, const pl_node_info *nd) {
    /* llama.cpp ignores small batches (< 16 rows) and everything that is not
     * a repeating-layer weight (or the output projection on request). */
    if (!nd->input || nd->ne[1] < 16) return;
    if (strncmp(nd->weight, "blk.", 4) && !(c->process_output && !strcmp(nd->weight, "output.weight"))) return;
    imx_entry *e = entry_for(c, nd->weight, nd->ne[0], 1);
    if (!e) return;
    /* input: [ne0 columns, ne1 rows, ne2, ne3], rows strided by nb[1..3] */
    for (int64_t i3 = 0; i3 < nd->ne[3]; i3++)
        for (int64_t i2 = 0; i2 < nd->ne[2]; i2++)
            for (int64_t r = 0; r < nd->ne[1]; r++) {
                const float *xr = (const float *)((const char *)nd->input + r * nd->nb[1] + i2 * nd->nb[2] +
                                                  i3 * nd->nb[3]);
                for (int64_t j = 0; j < nd->ne[0]; j++) e->sums[j] += xr[j] * xr[j];
            }
    if (sums_finite(c, e, 0)) e->counts[0] += (float)(nd->ne[1] * nd->ne[2] * nd->ne[3]);
}

/* An expert-indexed matmul (matmul_id), as llama.cpp's collector treats
 * MUL_MAT_ID: every one, whatever its batch size or name. Slot j of token t
 * routed to expert ex adds the squares of input row (j % n_x, t) to expert
 * ex's sums and 1 to its count, so an expert never routed to keeps count 0.
 * Visiting slots in the outer loop and tokens in the inner one adds each
 * expert's rows in llama.cpp's order (it loops expert, slot, token), so the
 * float sums are the same. input: [n_cols, n_x, n_tok]; ids: [k, n_tok]. */
static void observe_matmul_id(imx_collector *c, const pl_node_info *nd) {
    if (!nd->input || !nd->ids || nd->n_expert < 1 || nd->ne[1] < 1) return;
    if (nd->ne[3] != 1 || nd->ids_ne[1] != nd->ne[2]) {
        c->error = PL_ERR_INTERNAL;
        snprintf(c->msg, sizeof c->msg, "imatrix: %s: input [%lld, %lld, %lld, %lld] does not match ids [%lld, %lld]",
                 nd->weight, (long long)nd->ne[0], (long long)nd->ne[1], (long long)nd->ne[2], (long long)nd->ne[3],
                 (long long)nd->ids_ne[0], (long long)nd->ids_ne[1]);
        return;
    }
    imx_entry *e = entry_for(c, nd->weight, nd->ne[0], nd->n_expert);
    if (!e) return;
    for (int64_t j = 0; j < nd->ids_ne[0]; j++)
        for (int64_t t = 0; t < nd->ids_ne[1]; t++) {
            const int32_t ex = *(const int32_t *)((const char *)nd->ids + j * nd->ids_nb[0] + t * nd->ids_nb[1]);
            if (ex < 0 || ex >= nd->n_expert) {
                c->error = PL_ERR_INTERNAL;
                snprintf(c->msg, sizeof c->msg, "imatrix: %s: expert id %d out of range 0..%lld", nd->weight, (int)ex,
                         (long long)nd->n_expert - 1);
                return;
            }
            const float *x = (const float *)((const char *)nd->input + (j % nd->ne[1]) * nd->nb[1] + t * nd->nb[2]);
            float *s = e->sums + (int64_t)ex * e->n_cols;
            for (int64_t i = 0; i < e->n_cols; i++) s[i] += x[i] * x[i];
            e->counts[ex] += 1.0f;
        }
    for (int64_t ex = 0; ex < e->n_mat; ex++)
        if (!sums_finite(c, e, ex)) return;
}

void imx_observe(void *user, const pl_node_info *nd) {
    imx_collector *c = user;
    if (!nd->weight || c->error != PL_OK) return;
    if (!strcmp(nd->op, "matmul")) observe_matmul(c, nd);
    else if (!strcmp(nd->op, "matmul_id")) observe_matmul_id(c, nd);
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
    for (int i = 0; i < c->n; i++) e[i] = (pl_imatrix_entry){c->e[i].name, c->e[i].n_cols, c->e[i].n_mat, c->e[i].sums, c->e[i].counts};
    pl_status st = pl_imatrix_write(path, c->dataset, c->chunk_count, c->chunk_size, e, (size_t)c->n);
    free(e);
    return st;
}
