/*
 * Loading: open the GGUF, build the tokenizer, pick the architecture, bind
 * and shape-check weights, then plan every byte the device needs (weights,
 * KV cache, scratch, kernel work memory) and check it against the budget
 * BEFORE allocating anything large.
 */
#include "engine/model.h"
#include "core/status.h"
#include "core/threadpool.h"
#include "quant/hadamard.h"
#include "quant/quant.h"
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

/* Strings in the mapping are not NUL-terminated, so pl_model_meta_str hands
 * out a copy that lives as long as the model: one per key, made on first
 * use, whatever its length (the GGUF reader already limits strings to
 * 1 GiB). Readers on several threads may race to add the same key; the
 * loser's copy is kept on the list too and freed with the model. */
typedef struct pl_meta_copy {
    struct pl_meta_copy *next;
    char *key;
    char text[];
} pl_meta_copy;

PL_API pl_model_params pl_model_default_params(void) {
    pl_model_params p = {0};
    p.device = "cpu";
    return p;
}

pl_tensor *pl_model_weight(pl_model *m, const char *name) {
    const pl_gguf_tensor *gt = pl_gguf_find_tensor(m->gguf, name);
    if (!gt) return NULL;
    int64_t idx = -1;
    for (int64_t i = 0; i < m->n_weights; i++)
        if (pl_gguf_tensor_at(m->gguf, i) == gt) { idx = i; break; }
    return idx >= 0 ? &m->weights[idx] : NULL;
}

pl_status pl_model_bind(pl_model *m, pl_tensor **dst, bool required, uint64_t allowed,
                        int n_dims, const int64_t *ne, const char *fmt, ...) {
    char name[128];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(name, sizeof name, fmt, ap);
    va_end(ap);
    *dst = NULL;
    pl_tensor *t = pl_model_weight(m, name);
    if (!t) {
        if (!required) return PL_OK;
        return pl_errorf(PL_ERR_FORMAT, "%s: missing tensor '%s'", m->file_name, name);
    }
    bool ok = true;
    for (int i = 0; i < 4; i++) {
        int64_t want = i < n_dims ? ne[i] : 1;
        if (t->ne[i] != want) ok = false;
    }
    if (!ok)
        return pl_errorf(PL_ERR_FORMAT,
                         "%s: tensor '%s' has shape [%lld, %lld, %lld, %lld], but the hyperparameters say [%lld, %lld]",
                         m->file_name, name, (long long)t->ne[0], (long long)t->ne[1], (long long)t->ne[2],
                         (long long)t->ne[3], (long long)ne[0], (long long)(n_dims > 1 ? ne[1] : 1));
    if (allowed && !(allowed & PL_DTMASK(t->dtype)))
        return pl_errorf(PL_ERR_UNSUPPORTED, "%s: tensor '%s' has type %s, which is not supported there",
                         m->file_name, name, pl_dtype_name(t->dtype));
    if (!allowed && !pl_backend_supports(m->backend, PL_OP_MATMUL, t->dtype))
        return pl_errorf(PL_ERR_UNSUPPORTED, "%s: tensor '%s' has type %s, which backend '%s' cannot run",
                         m->file_name, name, pl_dtype_name(t->dtype), m->backend->name);
    m->weight_bytes += pl_tensor_nbytes(t);
    m->n_params += (uint64_t)pl_tensor_nelements(t);
    m->weight_used[t - m->weights] = true;   /* device backends upload exactly these */
    *dst = t;
    return PL_OK;
}

static pl_status hp_key(pl_model *m, const char *suffix, char *key, size_t cap) {
    int n = snprintf(key, cap, "%s.%s", m->arch_name, suffix);
    if (n < 0 || (size_t)n >= cap) return pl_errorf(PL_ERR_INVALID_ARG, "key too long");
    return PL_OK;
}

pl_status pl_model_hp_int(pl_model *m, const char *suffix, bool required, int64_t def, int64_t *out) {
    char key[160];
    PL_TRY(hp_key(m, suffix, key, sizeof key));
    pl_status st = pl_gguf_get_i64(m->gguf, key, out);
    if (st == PL_ERR_NOT_FOUND) {
        if (required) return pl_errorf(PL_ERR_FORMAT, "%s: missing hyperparameter '%s'", m->file_name, key);
        *out = def;
        return PL_OK;
    }
    return st;
}

pl_status pl_model_hp_float(pl_model *m, const char *suffix, bool required, float def, float *out) {
    char key[160];
    PL_TRY(hp_key(m, suffix, key, sizeof key));
    pl_status st = pl_gguf_get_f32(m->gguf, key, out);
    if (st == PL_ERR_NOT_FOUND) {
        if (required) return pl_errorf(PL_ERR_FORMAT, "%s: missing hyperparameter '%s'", m->file_name, key);
        *out = def;
        return PL_OK;
    }
    return st;
}

static pl_status bind_all_tensors(pl_model *m, pl_plan_retype_fn retype, void *retype_user) {
    m->n_weights = pl_gguf_n_tensors(m->gguf);
    m->weights = calloc((size_t)(m->n_weights ? m->n_weights : 1), sizeof *m->weights);
    m->weight_used = calloc((size_t)(m->n_weights ? m->n_weights : 1), sizeof *m->weight_used);
    if (!m->weights || !m->weight_used) return pl_errorf(PL_ERR_NO_MEMORY, "out of memory");
    for (int64_t i = 0; i < m->n_weights; i++) {
        const pl_gguf_tensor *gt = pl_gguf_tensor_at(m->gguf, i);
        pl_tensor *t = &m->weights[i];
        /* The GGUF reader already checked dims, type and bounds. Weights stay
         * in the mapping, packed: kernels decode them. */
        pl_tensor_init(t, retype ? retype(retype_user, gt) : gt->dtype, (int)gt->n_dims, gt->ne, (void *)gt->data);
        t->buffer = PL_BUF_WEIGHTS;
        snprintf(t->name, sizeof t->name, "%s", gt->name);
    }
    return PL_OK;
}

static void fill_inputs(pl_model *m, pl_tensor *ids, pl_tensor *pos, pl_tensor *seq, pl_tensor *out,
                        int n, int n_out) {
    /* ids | pos | seq | out, n_batch each: the host arrays, or (device
     * backends) their device copy, which forward.c uploads in one go. NULL
     * while only planning. */
    int32_t *in = m->dev ? (int32_t *)m->inputs_dev : m->in_ids;
    const size_t nb = (size_t)m->n_batch;
    pl_tensor_init(ids, PL_I32, 1, (int64_t[]){n}, in);
    pl_tensor_init(pos, PL_I32, 1, (int64_t[]){n}, in ? in + nb : NULL);
    pl_tensor_init(seq, PL_I32, 1, (int64_t[]){n}, in ? in + 2 * nb : NULL);
    pl_tensor_init(out, PL_I32, 1, (int64_t[]){n_out}, in ? in + 3 * nb : NULL);
    ids->buffer = pos->buffer = seq->buffer = out->buffer = PL_BUF_HOST;
}

/* Builds the graph for n tokens / n_out logits rows into g. */
pl_status pl_model_build_graph(pl_model *m, pl_graph *g, int n, int n_out, pl_tensor **logits) {
    pl_graph_reset(g);
    g->attn_batch_invariant = m->batch_invariant;
    pl_tensor ids, pos, seq, out;
    fill_inputs(m, &ids, &pos, &seq, &out, n, n_out);
    pl_graph_inputs in = {pl_graph_external(g, &ids), pl_graph_external(g, &pos), pl_graph_external(g, &seq),
                          pl_graph_external(g, &out)};
    *logits = m->arch->build(m, g, &in);
    if (g->error != PL_OK) return g->error;
    for (int i = 0; i < g->n_nodes; i++) {
        pl_status st = pl_node_validate(&g->nodes[i]);
        if (st != PL_OK) return pl_error_prefix(st, "graph");
    }
    return PL_OK;
}

/* The distinct model weights that matmul nodes of the planned graph read and
 * that the backend wants to keep a prepared copy of (weight_prepare_size >
 * 0). Returns how many were written to out (room for m->n_weights). */
static int prepared_weights(pl_model *m, const pl_tensor **out, uint64_t *orig_bytes, uint64_t *copy_bytes) {
    int n = 0;
    *orig_bytes = *copy_bytes = 0;
    if (!m->backend->weight_prepare_size || !m->backend->weight_prepare) return 0;
    for (int i = 0; i < m->planned.n_nodes; i++) {
        const pl_node *nd = &m->planned.nodes[i];
        if ((nd->op != PL_OP_MATMUL && nd->op != PL_OP_MATMUL_ID) || !nd->src[0] || nd->src[0]->buffer != PL_BUF_WEIGHTS) continue;
        const pl_tensor *w = NULL;
        for (int64_t k = 0; k < m->n_weights && !w; k++)
            if (m->weights[k].data == nd->src[0]->data && m->weights[k].dtype == nd->src[0]->dtype) w = &m->weights[k];
        bool seen = !w;
        for (int k = 0; k < n && !seen; k++) seen = out[k] == w;
        if (seen) continue;
        size_t sz = m->backend->weight_prepare_size(m->ctx, w);
        if (!sz) continue;
        out[n++] = w;
        *orig_bytes += pl_tensor_nbytes(w);
        *copy_bytes += sz;
    }
    return n;
}

/* After the backend copied part of an original: those pages leave this
 * process's memory. The mapping is the file's, private and never written,
 * so this only unmaps page-cache pages; a later read (get_rows on tied
 * embeddings) faults the few pages it needs back in. */
static void release_original(void *user, const void *p, size_t bytes) {
    (void)user;
    const uintptr_t pg = (uintptr_t)sysconf(_SC_PAGESIZE);
    uintptr_t lo = ((uintptr_t)p + pg - 1) & ~(pg - 1);
    uintptr_t hi = ((uintptr_t)p + bytes) & ~(pg - 1);
    if (hi <= lo) return;
    madvise((void *)lo, hi - lo, MADV_DONTNEED);
    /* later reads (a row per token) fault in their own page, not a window */
    madvise((void *)lo, hi - lo, MADV_RANDOM);
}

/* The host KV cache. A decode step reads one head's slice of every cache
 * row: a few hundred bytes at a stride of kilobytes, two rows per 4 KiB
 * page, so with small pages the sweep misses the TLB about every other row.
 * Caches of 4 MiB and more therefore ask for transparent huge pages (2 MiB
 * aligned; untouched pages still cost nothing; the plan already counts
 * every byte). 0.6B Q4_K_M tg32 at depth 2048, 1 thread: see bench/RESULTS.md. */
static void *pl_host_kv_alloc(uint64_t bytes) {
    const uint64_t huge = (uint64_t)2 << 20;
    if (bytes < 2 * huge) return aligned_alloc(64, (bytes + 63) & ~(uint64_t)63);
    const uint64_t size = (bytes + huge - 1) & ~(huge - 1);
    void *p = aligned_alloc(huge, size);
#ifdef MADV_HUGEPAGE
    if (p) madvise(p, size, MADV_HUGEPAGE);
#endif
    return p;
}

pl_status pl_cache_type_parse(const char *name, const char *what, pl_dtype *out) {
    if (!name || !*name || !strcmp(name, "f16")) *out = PL_F16; /* llama.cpp's default cache */
    else if (!strcmp(name, "q8_0")) *out = PL_Q8_0;
    else if (!strcmp(name, "q4_0")) *out = PL_Q4_0;
    else
        return pl_errorf(PL_ERR_INVALID_ARG, "unknown %s '%s' (use f16, q8_0 or q4_0)", what ? what : "cache type",
                         name);
    return PL_OK;
}

/* The cache types of the params, checked against the backend and the head
 * size before any weight is read. Sets kv_dtype / kv_dtype_v and the
 * rotation sizes llama.cpp would use. */
static pl_status setup_cache_types(pl_model *m, const pl_model_params *p) {
    PL_TRY(pl_cache_type_parse(p->cache_type_k, "cache type for K (--cache-type-k)", &m->kv_dtype));
    PL_TRY(pl_cache_type_parse(p->cache_type_v, "cache type for V (--cache-type-v)", &m->kv_dtype_v));
    const pl_dtype types[2] = {m->kv_dtype, m->kv_dtype_v};
    for (int i = 0; i < 2; i++) {
        /* the attention kernel is chosen by K's dtype; each cache needs its store */
        const bool ok = pl_backend_supports(m->backend, PL_OP_KV_STORE, types[i]) &&
                        (i == 1 || pl_backend_supports(m->backend, PL_OP_ATTENTION, types[i]));
        if (!ok)
            return pl_errorf(PL_ERR_UNSUPPORTED, "backend '%s' has no kernels for a %s %s cache (use --cache-type-%s f16)",
                             m->backend->name, pl_dtype_name(types[i]), i ? "V" : "K", i ? "v" : "k");
    }
    return PL_OK;
}

/* After the hyperparameters are known: the block size and the rotation. */
static pl_status setup_cache_shape(pl_model *m) {
    const int64_t D = m->hp.head_dim;
    const bool qk = m->kv_dtype != PL_F16, qv = m->kv_dtype_v != PL_F16;
    if ((qk || qv) && D % 32)
        return pl_errorf(PL_ERR_UNSUPPORTED, "%s: head size %lld is not a multiple of 32, which a %s cache needs",
                         m->file_name, (long long)D, pl_dtype_name(qk ? m->kv_dtype : m->kv_dtype_v));
    const char *off = getenv("PL_ATTN_ROT_DISABLE");
    const bool rot_off = off && atoi(off) != 0;
    m->k_rot = qk && !rot_off ? pl_hadamard_k_size(D) : 0;
    m->v_rot = qv && !rot_off ? pl_hadamard_v_size(D) : 0;
    return PL_OK;
}

static pl_status plan_memory(pl_model *m, const pl_model_params *p, bool plan_only) {
    const pl_hparams *hp = &m->hp;
    const int64_t kv_dim = hp->n_head_kv * hp->head_dim;
    /* bytes of one K row plus one V row (quantized rows are whole blocks) */
    const uint64_t row_kv = pl_dtype_row_size(m->kv_dtype, kv_dim) + pl_dtype_row_size(m->kv_dtype_v, kv_dim);
    uint64_t per_layer = 0, kv_total = 0, k_bytes = 0;
    if (__builtin_mul_overflow((uint64_t)m->n_ctx, (uint64_t)m->n_seq, &per_layer) ||
        __builtin_mul_overflow(per_layer, row_kv, &per_layer) ||
        __builtin_mul_overflow(per_layer, (uint64_t)hp->n_layer, &kv_total))
        return pl_errorf(PL_ERR_DOES_NOT_FIT, "KV cache size overflows");
    /* per layer: the K cache, then the V cache (k_bytes into the layer's slice) */
    k_bytes = (uint64_t)m->n_ctx * (uint64_t)m->n_seq * pl_dtype_row_size(m->kv_dtype, kv_dim);

    int cap_t, cap_n;
    m->arch->capacity(m, &cap_t, &cap_n);
    PL_TRY(pl_graph_init(&m->planned, cap_t, cap_n));
    PL_TRY(pl_graph_init(&m->graph, cap_t, cap_n));
    /* Cache descriptors exist before the plan (their data comes later). */
    m->k_cache = calloc((size_t)hp->n_layer, sizeof *m->k_cache);
    m->v_cache = calloc((size_t)hp->n_layer, sizeof *m->v_cache);
    if (!m->k_cache || !m->v_cache) return pl_errorf(PL_ERR_NO_MEMORY, "out of memory");
    for (int64_t l = 0; l < hp->n_layer; l++) {
        int64_t ne[3] = {kv_dim, m->n_ctx, m->n_seq};
        pl_tensor_init(&m->k_cache[l], m->kv_dtype, 3, ne, NULL);
        pl_tensor_init(&m->v_cache[l], m->kv_dtype_v, 3, ne, NULL);
        m->k_cache[l].buffer = m->v_cache[l].buffer = PL_BUF_KV;
        snprintf(m->k_cache[l].name, sizeof m->k_cache[l].name, "cache_k_l%d", (int)l);
        snprintf(m->v_cache[l].name, sizeof m->v_cache[l].name, "cache_v_l%d", (int)l);
    }
    pl_tensor *logits;
    PL_TRY(pl_model_build_graph(m, &m->planned, m->n_batch, m->n_logits_max, &logits));
    size_t scratch = pl_graph_plan(&m->planned);
    if (m->planned.error != PL_OK) return m->planned.error;
    size_t work;
    PL_TRY(pl_graph_work_size(&m->planned, m->backend, m->ctx->n_threads, &work));
    size_t inputs = 4 * (size_t)m->n_batch * sizeof(int32_t);

    /* Backend copies of matmul weights replace the originals in memory. */
    const pl_tensor **prep = calloc((size_t)(m->n_weights ? m->n_weights : 1), sizeof *prep);
    if (!prep) return pl_errorf(PL_ERR_NO_MEMORY, "out of memory");
    uint64_t prep_orig = 0, prep_copy = 0;
    const int n_prep = prepared_weights(m, prep, &prep_orig, &prep_copy);

    m->plan.weights = m->weight_bytes - prep_orig + prep_copy;
    m->plan.kv_cache = kv_total;
    m->plan.scratch = scratch + work + inputs;
    m->plan.total = m->plan.weights + m->plan.kv_cache + m->plan.scratch;
    if (p->memory_budget && m->plan.total > p->memory_budget) {
        free(prep);
        return pl_errorf(PL_ERR_DOES_NOT_FIT,
                         "%s needs %.1f MiB on device '%s' (weights %.1f, KV cache %.1f, scratch %.1f) "
                         "but the budget is %.1f MiB",
                         m->file_name, m->plan.total / 1048576.0, m->backend->name, m->plan.weights / 1048576.0,
                         m->plan.kv_cache / 1048576.0, m->plan.scratch / 1048576.0, p->memory_budget / 1048576.0);
    }
    if (!plan_only && m->dev) {
        /* The device must hold the whole plan (we never offload to the host),
         * checked before anything is allocated or uploaded, with
         * PL_DEVICE_HEADROOM to spare. */
        uint64_t free_b = 0, total_b = 0;
        char desc[256] = "";
        pl_status st = m->dev->mem_info(m->ctx, &free_b, &total_b, desc, sizeof desc);
        const uint64_t headroom = PL_DEVICE_HEADROOM;
        if (st == PL_OK && m->plan.total + headroom > free_b)
            st = pl_errorf(PL_ERR_DOES_NOT_FIT,
                           "%s needs %.1f MiB on device '%s' (weights %.1f, KV cache %.1f, scratch %.1f, plus %.0f "
                           "of headroom) but %s has %.1f of %.1f MiB free; use a smaller quantization or context",
                           m->file_name, m->plan.total / 1048576.0, m->backend->name, m->plan.weights / 1048576.0,
                           m->plan.kv_cache / 1048576.0, m->plan.scratch / 1048576.0, headroom / 1048576.0,
                           desc[0] ? desc : m->backend->name, free_b / 1048576.0, total_b / 1048576.0);
        if (st != PL_OK) {
            free(prep);
            return st;
        }
    }
    pl_status prep_st = PL_OK;
    if (!plan_only && n_prep > 0) prep_st = m->backend->weight_prepare(m->ctx, prep, n_prep, release_original, NULL);
    free(prep);
    PL_TRY(prep_st);
    if (plan_only) return PL_OK;

    /* Allocate. Untouched pages of the (host) cache cost nothing until used;
     * a device's KV buffer comes zero-filled. */
    m->scratch_size = scratch;
    m->ctx->work_size = work;
    if (m->dev) {
        PL_TRY(m->dev->buffer_alloc(m->ctx, PL_BUF_KV, kv_total, &m->kv_mem));
        PL_TRY(m->dev->buffer_alloc(m->ctx, PL_BUF_SCRATCH, scratch + 64, &m->scratch));
        if (work) PL_TRY(m->dev->buffer_alloc(m->ctx, PL_BUF_SCRATCH, work, &m->ctx->work));
        PL_TRY(m->dev->buffer_alloc(m->ctx, PL_BUF_SCRATCH, inputs, &m->inputs_dev));
    } else {
        m->kv_mem = pl_host_kv_alloc(kv_total);
        m->scratch = aligned_alloc(64, (scratch + 64 + 63) & ~(size_t)63);
        m->ctx->work = work ? aligned_alloc(64, (work + 63) & ~(size_t)63) : NULL;
    }
    /* one allocation, so a device backend gets the inputs in one upload */
    m->in_ids = calloc(4 * (size_t)m->n_batch, sizeof(int32_t));
    if (m->in_ids) {
        m->in_pos = m->in_ids + m->n_batch;
        m->in_seq = m->in_ids + 2 * (size_t)m->n_batch;
        m->in_out = m->in_ids + 3 * (size_t)m->n_batch;
    }
    m->slot_used = calloc((size_t)m->n_seq, sizeof(bool));
    m->kv_len = calloc((size_t)m->n_seq, sizeof(int32_t));
    if (!m->kv_mem || !m->scratch || (work && !m->ctx->work) || !m->in_ids || !m->slot_used || !m->kv_len)
        return pl_errorf(PL_ERR_NO_MEMORY, "cannot allocate %.1f MiB for the KV cache and scratch",
                         (kv_total + scratch + work) / 1048576.0);
    for (int64_t l = 0; l < hp->n_layer; l++) {
        m->k_cache[l].data = (char *)m->kv_mem + (size_t)l * per_layer;
        m->v_cache[l].data = (char *)m->kv_mem + (size_t)l * per_layer + k_bytes;
    }
    return PL_OK;
}

/* Device backends: every weight the graph uses goes to the device once,
 * packed as in the file (the kernels decode it), into one buffer of
 * 256-byte aligned slices; the descriptors then point there. The file
 * mapping is only read, so the host keeps no second copy. */
static pl_status upload_weights(pl_model *m) {
    size_t total = 0;
    for (int64_t i = 0; i < m->n_weights; i++)
        if (m->weight_used[i]) total += (pl_tensor_nbytes(&m->weights[i]) + 255) & ~(size_t)255;
    if (!total) return PL_OK;
    PL_TRY(m->dev->buffer_alloc(m->ctx, PL_BUF_WEIGHTS, total, &m->weights_dev));
    size_t off = 0;
    for (int64_t i = 0; i < m->n_weights; i++) {
        if (!m->weight_used[i]) continue;
        pl_tensor *t = &m->weights[i];
        const size_t n = pl_tensor_nbytes(t);
        void *d = (char *)m->weights_dev + off;
        PL_TRY(m->dev->upload(m->ctx, d, t->data, n));
        t->data = d;
        off += (n + 255) & ~(size_t)255;
    }
    return m->dev->synchronize(m->ctx);   /* a failed copy is reported by the load, not the first forward */
}

static pl_status load_gguf(pl_model *m, const pl_model_params *p, pl_plan_retype_fn retype, void *retype_user,
                           bool plan_only) {
    PL_TRY(pl_vocab_load(m->gguf, &m->vocab));
    if (p->vocab_only) return PL_OK;

    pl_gguf_str arch;
    pl_status st = pl_gguf_get_str(m->gguf, "general.architecture", &arch);
    if (st == PL_ERR_NOT_FOUND) return pl_errorf(PL_ERR_FORMAT, "%s: no general.architecture", m->file_name);
    PL_TRY(st);
    if (arch.len == 0 || arch.len >= sizeof m->arch_name)
        return pl_errorf(PL_ERR_FORMAT, "%s: bad general.architecture", m->file_name);
    memcpy(m->arch_name, arch.ptr, arch.len);
    m->arch_name[arch.len] = 0;
    m->arch = pl_arch_find(m->arch_name);
    if (!m->arch)
        return pl_errorf(PL_ERR_UNSUPPORTED, "%s: architecture '%s' is not supported",
                         m->file_name, m->arch_name);

    const char *dev = p->device && *p->device ? p->device : "cpu";
    m->backend = pl_backend_find(dev);
    if (!m->backend || !m->backend->ctx_create)
        return pl_errorf(PL_ERR_UNSUPPORTED, "device '%s' is not available in this build", dev);
    m->dev = m->backend->device;
    /* For cuda this loads the module and starts the runtime: without a GPU
     * the load ends here, before any weight is read, with the reason. */
    PL_TRY(m->backend->ctx_create(p->n_threads, &m->ctx));
    m->ctx->backend = m->backend;
    PL_TRY(setup_cache_types(m, p));

    m->hp.n_vocab = pl_vocab_n_tokens(m->vocab);
    int64_t n_layer = 0;
    PL_TRY(pl_model_hp_int(m, "block_count", true, 0, &n_layer));
    if (n_layer <= 0 || n_layer > 4096)
        return pl_errorf(PL_ERR_FORMAT, "%s: implausible block_count %lld", m->file_name, (long long)n_layer);
    m->layers = calloc((size_t)n_layer, sizeof *m->layers);
    if (!m->layers) return pl_errorf(PL_ERR_NO_MEMORY, "out of memory");
    PL_TRY(bind_all_tensors(m, retype, retype_user));
    PL_TRY(m->arch->load(m));
    PL_TRY(setup_cache_shape(m));

    m->n_ctx = p->n_ctx > 0 ? p->n_ctx : (int)(m->hp.n_ctx_train < 4096 ? m->hp.n_ctx_train : 4096);
    if (m->n_ctx <= 0) m->n_ctx = 4096;
    m->n_seq = p->n_seq > 0 ? p->n_seq : 1;
    m->n_batch = p->n_batch > 0 ? p->n_batch : 512;
    m->batch_invariant = p->batch_invariant;
    if (m->n_batch > m->n_ctx * m->n_seq) m->n_batch = m->n_ctx * m->n_seq;
    m->n_logits_max = m->n_seq;
    if (p->n_outputs > m->n_logits_max) m->n_logits_max = p->n_outputs < m->n_batch ? p->n_outputs : m->n_batch;
    if (m->n_ctx > (1 << 24) || m->n_seq > 4096 || m->n_batch > (1 << 20))
        return pl_errorf(PL_ERR_INVALID_ARG, "context %d x %d sequences is too large", m->n_ctx, m->n_seq);
    PL_TRY(plan_memory(m, p, plan_only));
    if (!plan_only && m->dev) PL_TRY(upload_weights(m));
    return PL_OK;
}

static pl_status load_impl(pl_model *m, const char *path, const pl_model_params *p) {
    PL_TRY(pl_gguf_open(path, &m->gguf));
    return load_gguf(m, p, NULL, NULL, false);
}

pl_status pl_model_plan_gguf(pl_gguf *g, const pl_model_params *params, pl_plan_retype_fn retype, void *user,
                             pl_memory_plan *out) {
    memset(out, 0, sizeof *out);
    pl_model_params defaults = pl_model_default_params();
    if (!params) params = &defaults;
    pl_model *m = calloc(1, sizeof *m);
    if (!m) return pl_errorf(PL_ERR_NO_MEMORY, "out of memory");
    m->path = strdup(pl_gguf_name(g));
    if (!m->path) { free(m); return pl_errorf(PL_ERR_NO_MEMORY, "out of memory"); }
    m->file_name = m->path;
    m->gguf = g;
    pl_status st = load_gguf(m, params, retype, user, true);
    *out = m->plan;
    m->gguf = NULL; /* borrowed */
    pl_model_free(m);
    return st;
}

PL_API pl_status pl_model_load(const char *path, const pl_model_params *params, pl_model **out) {
    *out = NULL;
    if (!path) return pl_errorf(PL_ERR_INVALID_ARG, "no model path given");
    pl_model_params defaults = pl_model_default_params();
    if (!params) params = &defaults;
    pl_model *m = calloc(1, sizeof *m);
    if (!m) return pl_errorf(PL_ERR_NO_MEMORY, "out of memory");
    m->path = strdup(path);
    if (!m->path) { free(m); return pl_errorf(PL_ERR_NO_MEMORY, "out of memory"); }
    const char *slash = strrchr(m->path, '/');
    m->file_name = slash ? slash + 1 : m->path;
    pl_status st = load_impl(m, path, params);
    if (st != PL_OK) {
        pl_model_free(m);
        return st;
    }
    *out = m;
    return PL_OK;
}

PL_API void pl_model_free(pl_model *m) {
    if (!m) return;
    if (m->ctx && m->dev) { /* device buffers go back before their context */
        void *bufs[] = {m->ctx->work, m->kv_mem, m->scratch, m->weights_dev, m->inputs_dev};
        for (size_t i = 0; i < sizeof bufs / sizeof bufs[0]; i++)
            if (bufs[i]) m->dev->buffer_free(m->ctx, bufs[i]);
        m->ctx->work = m->kv_mem = m->scratch = m->weights_dev = m->inputs_dev = NULL;
    }
    if (m->ctx) {
        void *work = m->ctx->work;
        m->ctx->work = NULL;
        if (m->backend && m->backend->ctx_free) m->backend->ctx_free(m->ctx);
        free(work);
    }
    pl_graph_free(&m->planned);
    pl_graph_free(&m->graph);
    void *gv = atomic_load(&m->grammar_vocab);
    if (gv && m->grammar_vocab_release) m->grammar_vocab_release(gv);
    free(m->kv_mem);
    free(m->scratch);
    free(m->k_cache);
    free(m->v_cache);
    free(m->in_ids); /* in_pos, in_seq, in_out point into it */
    free(m->slot_used);
    free(m->kv_len);
    free(m->layers);
    free(m->weights);
    free(m->weight_used);
    pl_vocab_free(m->vocab);
    for (pl_meta_copy *c = atomic_load(&m->meta_copies), *next; c; c = next) {
        next = c->next;
        free(c);
    }
    pl_gguf_close(m->gguf);
    free(m->path);
    free(m);
}

PL_API pl_memory_plan pl_model_memory_plan(const pl_model *m) { return m->plan; }
PL_API int32_t pl_model_n_vocab(const pl_model *m) { return (int32_t)(m->vocab ? pl_vocab_n_tokens(m->vocab) : 0); }
PL_API uint64_t pl_model_n_params(const pl_model *m) { return m->n_params; }
PL_API uint64_t pl_model_weight_bytes(const pl_model *m) { return m->weight_bytes; }
PL_API int pl_model_n_threads(const pl_model *m) { return m->ctx ? m->ctx->n_threads : 0; }
PL_API int32_t pl_model_n_ctx(const pl_model *m) { return m->n_ctx; }
PL_API const char *pl_model_arch(const pl_model *m) { return m->arch_name; }
PL_API const char *pl_model_device(const pl_model *m) { return m->backend ? m->backend->name : ""; }


static const char *meta_copy_find(pl_meta_copy *c, const char *key) {
    for (; c; c = c->next)
        if (!strcmp(c->key, key)) return c->text;
    return NULL;
}

PL_API const char *pl_model_meta_str(const pl_model *m, const char *key) {
    if (!m || !key) return NULL;
    pl_gguf_str s;
    if (pl_gguf_get_str(m->gguf, key, &s) != PL_OK) return NULL;
    /* A C string cannot hold a NUL byte: rather than a silently shortened
     * value, none (the length-aware reader is pl_inspect_meta_str). */
    if (memchr(s.ptr, 0, s.len)) {
        pl_errorf(PL_ERR_FORMAT, "%s: metadata string %s contains a NUL byte", m->file_name, key);
        return NULL;
    }
    pl_model *mm = (pl_model *)m;   /* the cache is not part of the model's value */
    const char *hit = meta_copy_find(atomic_load(&mm->meta_copies), key);
    if (hit) return hit;
    size_t kl = strlen(key);
    pl_meta_copy *c = malloc(sizeof *c + s.len + 1 + kl + 1);
    if (!c) {
        pl_errorf(PL_ERR_NO_MEMORY, "out of memory");
        return NULL;
    }
    memcpy(c->text, s.ptr, s.len);
    c->text[s.len] = 0;
    c->key = c->text + s.len + 1;
    memcpy(c->key, key, kl + 1);
    c->next = atomic_load(&mm->meta_copies);
    while (!atomic_compare_exchange_weak(&mm->meta_copies, &c->next, c)) {}
    return c->text;
}
