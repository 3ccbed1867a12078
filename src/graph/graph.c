#include "graph/graph.h"
#include "core/status.h"
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define PL_SCRATCH_ALIGN 64

pl_status pl_graph_init(pl_graph *g, int cap_tensors, int cap_nodes) {
    memset(g, 0, sizeof *g);
    g->tensors = calloc((size_t)cap_tensors + 1, sizeof *g->tensors);
    g->nodes = calloc((size_t)cap_nodes + 1, sizeof *g->nodes);
    if (!g->tensors || !g->nodes) {
        pl_graph_free(g);
        return pl_errorf(PL_ERR_NO_MEMORY, "cannot allocate a graph of %d tensors", cap_tensors);
    }
    g->cap_tensors = cap_tensors;
    g->cap_nodes = cap_nodes;
    return PL_OK;
}

void pl_graph_free(pl_graph *g) {
    free(g->tensors);
    free(g->nodes);
    memset(g, 0, sizeof *g);
}

void pl_graph_reset(pl_graph *g) {
    g->n_tensors = 0;
    g->n_nodes = 0;
    g->error = PL_OK;
}

static int tensor_index(const pl_graph *g, const pl_tensor *t) {
    return (int)((const pl_graph_tensor *)t - g->tensors);
}

/* On overflow, hand out the spare slot at the end so builders can keep going. */
static pl_graph_tensor *alloc_tensor(pl_graph *g) {
    if (g->n_tensors >= g->cap_tensors) {
        if (g->error == PL_OK)
            g->error = pl_errorf(PL_ERR_INTERNAL, "graph tensor capacity %d exceeded", g->cap_tensors);
        pl_graph_tensor *spare = &g->tensors[g->cap_tensors];
        memset(spare, 0, sizeof *spare);
        spare->view_of = -1;
        spare->external = true;
        return spare;
    }
    pl_graph_tensor *gt = &g->tensors[g->n_tensors++];
    memset(gt, 0, sizeof *gt);
    gt->view_of = -1;
    return gt;
}

pl_tensor *pl_graph_external(pl_graph *g, const pl_tensor *src) {
    pl_graph_tensor *gt = alloc_tensor(g);
    gt->t = *src;
    gt->external = true;
    return &gt->t;
}

pl_tensor *pl_graph_new(pl_graph *g, pl_dtype dtype, int n_dims, const int64_t *ne, const char *name) {
    pl_graph_tensor *gt = alloc_tensor(g);
    pl_tensor_init(&gt->t, dtype, n_dims, ne, NULL);
    gt->t.buffer = PL_BUF_SCRATCH;
    if (name) snprintf(gt->t.name, sizeof gt->t.name, "%s", name);
    return &gt->t;
}

pl_tensor *pl_graph_reshape(pl_graph *g, pl_tensor *src, int n_dims, const int64_t *ne) {
    int64_t n = 1;
    for (int i = 0; i < n_dims; i++) n *= ne[i];
    if (n != pl_tensor_nelements(src) || !pl_tensor_is_contiguous(src)) {
        if (g->error == PL_OK)
            g->error = pl_errorf(PL_ERR_INTERNAL, "bad reshape of '%s'", src->name);
    }
    pl_graph_tensor *gt = alloc_tensor(g);
    pl_tensor_init(&gt->t, src->dtype, n_dims, ne, src->data);
    gt->t.buffer = src->buffer;
    snprintf(gt->t.name, sizeof gt->t.name, "%s", src->name);
    int si = tensor_index(g, src);
    if (si >= 0 && si < g->n_tensors) {
        const pl_graph_tensor *sg = &g->tensors[si];
        gt->external = sg->external;
        gt->view_of = sg->external ? -1 : (sg->view_of >= 0 ? sg->view_of : si);
    } else {
        gt->external = true;
    }
    return &gt->t;
}

pl_node *pl_graph_add_node(pl_graph *g, pl_op op, pl_tensor *dst, int n_src, pl_tensor *const *src) {
    static pl_node spare;
    if (g->n_nodes >= g->cap_nodes) {
        if (g->error == PL_OK)
            g->error = pl_errorf(PL_ERR_INTERNAL, "graph node capacity %d exceeded", g->cap_nodes);
        memset(&spare, 0, sizeof spare);
        return &spare;
    }
    pl_node *n = &g->nodes[g->n_nodes++];
    memset(n, 0, sizeof *n);
    n->op = op;
    n->dst = dst;
    for (int i = 0; i < n_src && i < PL_MAX_SRC; i++) n->src[i] = src[i];
    return n;
}

/* ---- op helpers ------------------------------------------------------------*/

pl_tensor *pl_op_get_rows(pl_graph *g, pl_tensor *table, pl_tensor *ids) {
    int64_t ne[2] = {table->ne[0], ids->ne[0]};
    pl_tensor *dst = pl_graph_new(g, PL_F32, 2, ne, "get_rows");
    pl_graph_add_node(g, PL_OP_GET_ROWS, dst, 2, (pl_tensor *[]){table, ids});
    return dst;
}

pl_tensor *pl_op_rms_norm(pl_graph *g, pl_tensor *x, pl_tensor *w, float eps) {
    pl_tensor *dst = pl_graph_new(g, PL_F32, x->n_dims, x->ne, "rms_norm");
    pl_node *n = pl_graph_add_node(g, PL_OP_RMS_NORM, dst, 2, (pl_tensor *[]){x, w});
    n->fparams[0] = eps;
    return dst;
}

pl_tensor *pl_op_matmul(pl_graph *g, pl_tensor *w, pl_tensor *x) {
    int64_t ne[2] = {w->ne[1], x->ne[1]};
    pl_tensor *dst = pl_graph_new(g, PL_F32, 2, ne, "matmul");
    pl_graph_add_node(g, PL_OP_MATMUL, dst, 2, (pl_tensor *[]){w, x});
    return dst;
}

pl_tensor *pl_op_add(pl_graph *g, pl_tensor *a, pl_tensor *b) {
    pl_tensor *dst = pl_graph_new(g, PL_F32, a->n_dims, a->ne, "add");
    pl_graph_add_node(g, PL_OP_ADD, dst, 2, (pl_tensor *[]){a, b});
    return dst;
}

pl_tensor *pl_op_swiglu(pl_graph *g, pl_tensor *gate, pl_tensor *up) {
    pl_tensor *dst = pl_graph_new(g, PL_F32, gate->n_dims, gate->ne, "swiglu");
    pl_graph_add_node(g, PL_OP_SWIGLU, dst, 2, (pl_tensor *[]){gate, up});
    return dst;
}

pl_tensor *pl_op_rope(pl_graph *g, pl_tensor *x, pl_tensor *pos, int n_rot, int mode,
                      float freq_base, float freq_scale) {
    pl_tensor *dst = pl_graph_new(g, PL_F32, x->n_dims, x->ne, "rope");
    pl_node *n = pl_graph_add_node(g, PL_OP_ROPE, dst, 2, (pl_tensor *[]){x, pos});
    n->iparams[0] = n_rot;
    n->iparams[1] = mode;
    n->fparams[0] = freq_base;
    n->fparams[1] = freq_scale;
    return dst;
}

void pl_op_kv_store(pl_graph *g, pl_tensor *rows, pl_tensor *pos, pl_tensor *seq, pl_tensor *cache) {
    pl_op_kv_store_rot(g, rows, pos, seq, cache, 0, 0);
}

void pl_op_kv_store_rot(pl_graph *g, pl_tensor *rows, pl_tensor *pos, pl_tensor *seq, pl_tensor *cache, int rot,
                        int head_dim) {
    pl_node *n = pl_graph_add_node(g, PL_OP_KV_STORE, cache, 3, (pl_tensor *[]){rows, pos, seq});
    if (n && rot) {
        n->iparams[0] = rot;
        n->iparams[1] = head_dim;
    }
}

pl_tensor *pl_op_attention(pl_graph *g, pl_tensor *q, pl_tensor *kc, pl_tensor *vc,
                           pl_tensor *pos, pl_tensor *seq, int n_kv_head, float scale) {
    int64_t ne[2] = {q->ne[0] * q->ne[1], q->ne[2]};
    pl_tensor *dst = pl_graph_new(g, PL_F32, 2, ne, "attention");
    pl_node *n = pl_graph_add_node(g, PL_OP_ATTENTION, dst, 5, (pl_tensor *[]){q, kc, vc, pos, seq});
    n->iparams[0] = n_kv_head;
    n->iparams[1] = g->attn_batch_invariant ? 1 : 0;
    n->fparams[0] = scale;
    return dst;
}

pl_tensor *pl_op_attention_rot(pl_graph *g, pl_tensor *q, pl_tensor *kc, pl_tensor *vc, pl_tensor *pos,
                               pl_tensor *seq, int n_kv_head, float scale, int k_rot, int v_rot) {
    pl_tensor *dst = pl_op_attention(g, q, kc, vc, pos, seq, n_kv_head, scale);
    pl_node *n = g->n_nodes > 0 ? &g->nodes[g->n_nodes - 1] : NULL;
    if (n && n->dst == dst) {
        n->iparams[2] = k_rot;
        n->iparams[3] = v_rot;
    }
    return dst;
}

void pl_op_attention_window(pl_graph *g, pl_tensor *attn, int window) {
    for (int i = g->n_nodes - 1; i >= 0; i--)
        if (g->nodes[i].op == PL_OP_ATTENTION && g->nodes[i].dst == attn) {
            g->nodes[i].iparams[4] = window;
            return;
        }
}

/* ---- planning --------------------------------------------------------------*/

typedef struct free_block { size_t off, size; } free_block;

typedef struct allocator {
    free_block *blocks;
    int n, cap;
    size_t top;            /* high-water mark */
} allocator;

static size_t align_up(size_t x) { return (x + PL_SCRATCH_ALIGN - 1) & ~(size_t)(PL_SCRATCH_ALIGN - 1); }

static size_t alloc_take(allocator *a, size_t size) {
    size = align_up(size);
    int best = -1;
    for (int i = 0; i < a->n; i++)
        if (a->blocks[i].size >= size && (best < 0 || a->blocks[i].size < a->blocks[best].size)) best = i;
    if (best >= 0) {
        size_t off = a->blocks[best].off;
        a->blocks[best].off += size;
        a->blocks[best].size -= size;
        if (a->blocks[best].size == 0) a->blocks[best] = a->blocks[--a->n];
        return off;
    }
    /* Grow at the top, merging with a free block that ends there. */
    for (int i = 0; i < a->n; i++) {
        if (a->blocks[i].off + a->blocks[i].size == a->top) {
            size_t off = a->blocks[i].off;
            a->top = off + size;
            a->blocks[i] = a->blocks[--a->n];
            return off;
        }
    }
    size_t off = a->top;
    a->top += size;
    return off;
}

static void alloc_give(allocator *a, size_t off, size_t size) {
    size = align_up(size);
    /* Coalesce with neighbours. */
    for (int i = 0; i < a->n;) {
        free_block *b = &a->blocks[i];
        if (b->off + b->size == off) { off = b->off; size += b->size; *b = a->blocks[--a->n]; continue; }
        if (off + size == b->off) { size += b->size; *b = a->blocks[--a->n]; continue; }
        i++;
    }
    if (a->n == a->cap) {
        int cap = a->cap ? a->cap * 2 : 64;
        free_block *nb = realloc(a->blocks, (size_t)cap * sizeof *nb);
        if (!nb) return; /* leaks the block from the plan: still correct, just larger */
        a->blocks = nb;
        a->cap = cap;
    }
    a->blocks[a->n++] = (free_block){off, size};
}

static int storage_of(const pl_graph *g, const pl_tensor *t) {
    int i = tensor_index(g, t);
    if (i < 0 || i >= g->n_tensors) return -1;
    const pl_graph_tensor *gt = &g->tensors[i];
    if (gt->external) return -1;
    return gt->view_of >= 0 ? gt->view_of : i;
}

void pl_graph_keep(pl_graph *g, pl_tensor *t) {
    int i = tensor_index(g, t);
    if (i >= 0 && i < g->n_tensors) g->tensors[i].keep = true;
}

size_t pl_graph_plan(pl_graph *g) {
    int n = g->n_tensors;
    int *last_use = malloc((size_t)(n ? n : 1) * sizeof *last_use);
    bool *placed = calloc((size_t)(n ? n : 1), 1);
    if (!last_use || !placed) { free(last_use); free(placed); g->error = PL_ERR_NO_MEMORY; return 0; }
    for (int i = 0; i < n; i++) last_use[i] = -1;
    for (int ni = 0; ni < g->n_nodes; ni++) {
        const pl_node *nd = &g->nodes[ni];
        for (int s = 0; s < PL_MAX_SRC; s++) {
            if (!nd->src[s]) continue;
            int st = storage_of(g, nd->src[s]);
            if (st >= 0) last_use[st] = ni;
        }
        int dt = storage_of(g, nd->dst);
        if (dt >= 0 && last_use[dt] < ni) last_use[dt] = ni;
    }
    for (int i = 0; i < n; i++)
        if (g->tensors[i].keep) {
            int st = g->tensors[i].view_of >= 0 ? g->tensors[i].view_of : i;
            last_use[st] = g->n_nodes; /* outlives the graph: never freed */
        }
    allocator a = {0};
    for (int ni = 0; ni < g->n_nodes; ni++) {
        const pl_node *nd = &g->nodes[ni];
        int dt = storage_of(g, nd->dst);
        if (dt >= 0 && !placed[dt]) {
            g->tensors[dt].offset = alloc_take(&a, pl_tensor_nbytes(&g->tensors[dt].t));
            placed[dt] = true;
        }
        /* Free everything whose last use is this node (after dst is placed, so
         * an output never aliases its own inputs). */
        for (int s = -1; s < PL_MAX_SRC; s++) {
            const pl_tensor *t = s < 0 ? nd->dst : nd->src[s];
            if (!t) continue;
            int st = storage_of(g, t);
            if (st >= 0 && placed[st] && last_use[st] == ni) {
                alloc_give(&a, g->tensors[st].offset, pl_tensor_nbytes(&g->tensors[st].t));
                last_use[st] = -2; /* freed */
            }
        }
    }
    size_t total = a.top;
    free(a.blocks);
    free(last_use);
    free(placed);
    return total;
}

pl_status pl_graph_apply_plan(pl_graph *g, const pl_graph *planned, void *scratch, size_t scratch_size) {
    if (g->n_tensors != planned->n_tensors || g->n_nodes != planned->n_nodes)
        return pl_errorf(PL_ERR_INTERNAL, "graph structure differs from the planned one (%d/%d tensors)",
                         g->n_tensors, planned->n_tensors);
    for (int i = 0; i < g->n_tensors; i++) {
        pl_graph_tensor *gt = &g->tensors[i];
        if (gt->external) continue;
        int st = gt->view_of >= 0 ? gt->view_of : i;
        size_t off = planned->tensors[st].offset;
        size_t need = pl_tensor_nbytes(&g->tensors[st].t);
        if (need > pl_tensor_nbytes(&planned->tensors[st].t) || off + need > scratch_size)
            return pl_errorf(PL_ERR_INTERNAL, "tensor '%s' outgrows its planned scratch slot", gt->t.name);
        gt->offset = off;
        gt->t.data = (char *)scratch + off;
    }
    return PL_OK;
}

pl_status pl_graph_execute(const pl_graph *g, pl_exec_ctx *ctx) {
    const pl_backend *b = ctx->backend;
    if (b->graph_execute && !ctx->on_node) return b->graph_execute(ctx, g);
    for (int i = 0; i < g->n_nodes; i++) {
        const pl_node *nd = &g->nodes[i];
        const pl_kernel *k = pl_backend_lookup(b, nd->op, pl_node_key_dtype(nd));
        if (!k)
            return pl_errorf(PL_ERR_UNSUPPORTED, "backend '%s' has no %s kernel for %s", b->name,
                             pl_op_name(nd->op), pl_dtype_name(pl_node_key_dtype(nd)));
        if (k->work_size && k->work_size(nd, ctx->n_threads) > ctx->work_size)
            return pl_errorf(PL_ERR_INTERNAL, "%s needs more work memory than planned", pl_op_name(nd->op));
        pl_status st = k->run(ctx, nd);
        if (st != PL_OK) return st;
        if (ctx->on_node) ctx->on_node(ctx->on_node_user, nd);
    }
    return PL_OK;
}

pl_status pl_graph_work_size(const pl_graph *g, const pl_backend *b, int n_threads, size_t *out) {
    size_t m = 0;
    for (int i = 0; i < g->n_nodes; i++) {
        const pl_node *nd = &g->nodes[i];
        const pl_kernel *k = pl_backend_lookup(b, nd->op, pl_node_key_dtype(nd));
        if (!k)
            return pl_errorf(PL_ERR_UNSUPPORTED, "backend '%s' has no %s kernel for %s weights", b->name,
                             pl_op_name(nd->op), pl_dtype_name(pl_node_key_dtype(nd)));
        if (k->work_size) {
            size_t w = k->work_size(nd, n_threads);
            if (w > m) m = w;
        }
    }
    *out = m;
    return PL_OK;
}
