/*
 * The fit arithmetic: every rung of the quantization ladder planned with the
 * loader's own planner (see engine/fit.h).
 *
 * A rung is planned by re-typing the model's tensor table with the rung's
 * mix (quant/quantize_mix.h) and running pl_model_plan_gguf on it: nothing
 * is quantized, no weight is read. For the Qwen3 presets the tensor table
 * itself is synthesized: a GGUF header with the release shapes is built in
 * an anonymous mapping as large as the file would be; its data pages are
 * never touched, so they cost no memory.
 */
#include "engine/fit.h"
#include "engine/model.h"
#include "models/arch_table.h"
#include "core/status.h"
#include "gguf/gguf.h"
#include "quant/quantize_mix.h"
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/mman.h>

static const char *const k_ladder[] = {"Q8_0", "Q6_K", "Q4_K_M", "Q2_K", "IQ2_XS", "IQ2_XXS",
                                       "IQ1_M", "IQ1_S", "TQ2_0", "TQ1_0"};

const char *const *pl_fit_ladder(int *n) {
    *n = (int)(sizeof k_ladder / sizeof k_ladder[0]);
    return k_ladder;
}

/* Precision rank of a file type: its position in pl_ftypes (highest first). */
static int ftype_rank(int ftype) {
    int n;
    const pl_ftype_info *ft = pl_ftypes(&n);
    for (int i = 0; i < n; i++)
        if (ft[i].ftype == ftype) return i;
    return -1;
}

/* The file's type: general.file_type if known, else the most common type of
 * its 2-D tensors. */
static int source_ftype(const pl_gguf *g) {
    uint32_t v;
    if (pl_gguf_get_u32(g, "general.file_type", &v) == PL_OK && pl_ftype_by_id((int)v)) return (int)v;
    int count[PL_DTYPE_COUNT] = {0};
    for (int64_t i = 0; i < pl_gguf_n_tensors(g); i++) {
        const pl_gguf_tensor *t = pl_gguf_tensor_at(g, i);
        if (t->n_dims >= 2 && t->dtype < PL_DTYPE_COUNT) count[t->dtype]++;
    }
    int best = PL_F16;
    for (int t = 0; t < PL_DTYPE_COUNT; t++)
        if (count[t] > count[best]) best = t;
    int n;
    const pl_ftype_info *ft = pl_ftypes(&n);
    for (int i = 0; i < n; i++)
        if ((int)ft[i].base == best) return ft[i].ftype;
    return -1;
}

typedef struct retype_map {
    const pl_gguf_tensor **src;
    pl_dtype *dt;
    int64_t n;
} retype_map;

static pl_dtype retype_lookup(void *user, const pl_gguf_tensor *t) {
    const retype_map *r = user;
    for (int64_t i = 0; i < r->n; i++)
        if (r->src[i] == t) return r->dt[i];
    return t->dtype;
}

/* The KV cache choices of a rung, best first. Both types given: exactly
 * those. Neither: f16, then q8_0 for K and V -- at a given weight rung the
 * cache goes down before the weights do, so the order of the plans is
 *     (as is, f16) > (Q8_0, f16) > (Q8_0, q8_0) > (Q6_K, f16) > (Q6_K, q8_0) > ...
 * Why: a rotated q8_0 cache is the q8_0 format itself (8 bits, one scale
 * per 32 values), the loss of the Q8_0 weight rung, and smaller than that
 * of any rung below it (on the fixture goldens q8_0-cache logits stay within
 * 0.22 of llama.cpp's f16-cache ones; a weight rung below Q8_0 moves them by
 * up to 1.0), while it halves the cache, which at long contexts is what does
 * not fit. A 16/32-bit file's own rung keeps the f16 cache: its next rung,
 * Q8_0 weights, costs the same precision and also halves the bytes each
 * decoded token reads. q4_0 is never chosen on its own: its loss (logits
 * within 1.3 on the same goldens, as large as a weight rung) buys a quarter
 * of the cache; that is the user's call (--cache-type-k/v). */
typedef struct kv_choice {
    const char *k, *v;
} kv_choice;

static int kv_choices(const pl_model_params *mp, bool float_as_is, kv_choice *out) {
    if (mp->cache_type_k || mp->cache_type_v) {
        out[0] = (kv_choice){mp->cache_type_k ? mp->cache_type_k : "f16", mp->cache_type_v ? mp->cache_type_v : "f16"};
        return 1;
    }
    out[0] = (kv_choice){"f16", "f16"};
    if (float_as_is) return 1;
    out[1] = (kv_choice){"q8_0", "q8_0"};
    return 2;
}

static pl_status plan_with(pl_gguf *g, const pl_model_params *mp, kv_choice kv, int n_ctx, retype_map *map,
                           pl_memory_plan *plan) {
    pl_model_params p = *mp;
    p.cache_type_k = kv.k;
    p.cache_type_v = kv.v;
    p.memory_budget = 0;   /* the plan itself, compared with the budget here */
    if (n_ctx > 0) p.n_ctx = n_ctx;
    pl_error_clear();
    return pl_model_plan_gguf(g, &p, map ? retype_lookup : NULL, map, plan);
}

/* The longest context up to cap that the budget holds with kv (0: none). The
 * plan grows with the context (the cache linearly, scratch a little), so a
 * bisection over it finds the edge. */
static int32_t longest_ctx(pl_gguf *g, const pl_model_params *mp, kv_choice kv, retype_map *map, uint64_t budget,
                           int cap) {
    pl_memory_plan plan;
    if (plan_with(g, mp, kv, cap, map, &plan) == PL_OK && plan.total <= budget) return cap;
    int lo = 0, hi = cap;   /* lo fits (0 = nothing), hi does not */
    while (hi - lo > 1) {
        const int mid = lo + (hi - lo) / 2;
        if (plan_with(g, mp, kv, mid, map, &plan) == PL_OK && plan.total <= budget) lo = mid;
        else hi = mid;
    }
    return lo;
}

static void plan_one(pl_gguf *g, const pl_model_params *mp, retype_map *map, uint64_t n_params, uint64_t budget,
                     int ctx_cap, bool float_as_is, pl_fit_rung_rec *r) {
    kv_choice kv[2];
    const int n_kv = kv_choices(mp, float_as_is, kv);
    for (int i = 0; i < n_kv; i++) {
        r->status = plan_with(g, mp, kv[i], 0, map, &r->plan);
        r->cache_k = kv[i].k;
        r->cache_v = kv[i].v;
        r->fits = r->status == PL_OK && r->plan.total <= budget;
        /* a rung that fits takes the first choice that fits; one that does
         * not reports the smallest (the last) */
        if (r->status != PL_OK || r->fits) break;
    }
    if (r->status != PL_OK) snprintf(r->error, sizeof r->error, "%s", pl_last_error());
    r->n_params = n_params;
    r->bpw = n_params ? (double)r->plan.weights * 8.0 / (double)n_params : 0;
    r->max_ctx = r->status == PL_OK && ctx_cap > 0
                     ? longest_ctx(g, mp, (kv_choice){r->cache_k, r->cache_v}, map, budget, ctx_cap)
                     : 0;
}

/* Plans the as-is rung and every ladder rung below the file's type. */
static pl_status plan_rungs(pl_gguf *g, const char *label, const pl_model_params *mp, uint64_t budget, int ctx_cap,
                            pl_fit_result *out) {
    memset(out, 0, sizeof *out);
    snprintf(out->model, sizeof out->model, "%s", label);
    snprintf(out->device, sizeof out->device, "%s", mp->device ? mp->device : "cpu");
    out->budget = budget;
    out->chosen = -1;
    pl_mix_model mm;
    PL_TRY(pl_mix_model_of(g, &mm));
    const int64_t n = pl_gguf_n_tensors(g);
    pl_mix_tensor *mix = calloc((size_t)(n ? n : 1), sizeof *mix);
    retype_map map = {calloc((size_t)(n ? n : 1), sizeof *map.src), calloc((size_t)(n ? n : 1), sizeof *map.dt), n};
    if (!mix || !map.src || !map.dt) {
        free(mix);
        free(map.src);
        free(map.dt);
        return pl_errorf(PL_ERR_NO_MEMORY, "out of memory");
    }
    uint64_t n_params = 0;
    for (int64_t i = 0; i < n; i++) {
        const pl_gguf_tensor *t = pl_gguf_tensor_at(g, i);
        mix[i] = (pl_mix_tensor){t->name, (int)t->n_dims, {t->ne[0], t->ne[1], t->ne[2], t->ne[3]}, t->dtype, t->dtype, false};
        n_params += (uint64_t)(t->ne[0] * t->ne[1] * t->ne[2] * t->ne[3]);
    }
    qsort(mix, (size_t)n, sizeof *mix, pl_mix_compare);

    const int src = source_ftype(g);
    const pl_ftype_info *sft = pl_ftype_by_id(src);
    pl_fit_rung_rec *r = &out->rungs[out->n_rungs++];
    snprintf(r->name, sizeof r->name, "%s", sft ? sft->name : "as-is");
    r->ftype = src;
    r->as_is = true;
    const bool float_src = sft && (sft->base == PL_F32 || sft->base == PL_F16 || sft->base == PL_BF16);
    plan_one(g, mp, NULL, n_params, budget, ctx_cap, float_src, r);

    const int src_rank = ftype_rank(src);
    for (size_t k = 0; k < sizeof k_ladder / sizeof k_ladder[0]; k++) {
        const pl_ftype_info *ft = pl_ftype_find(k_ladder[k]);
        if (src_rank >= 0 && ftype_rank(ft->ftype) <= src_rank) continue;
        pl_mix_plan(ft, &mm, false, mix, n);
        for (int64_t i = 0; i < n; i++) {
            map.src[i] = pl_gguf_find_tensor(g, mix[i].name);
            map.dt[i] = mix[i].target;
        }
        r = &out->rungs[out->n_rungs++];
        snprintf(r->name, sizeof r->name, "%s", ft->name);
        r->ftype = ft->ftype;
        r->needs_imatrix = ft->needs_imatrix;
        plan_one(g, mp, &map, n_params, budget, ctx_cap, false, r);
    }
    for (int i = 0; i < out->n_rungs; i++) {
        r = &out->rungs[i];
        if (r->fits && out->chosen < 0) out->chosen = i;
    }
    free(mix);
    free(map.src);
    free(map.dt);
    return PL_OK;
}

static pl_model_params model_params_of(const pl_fit_params *p) {
    pl_model_params mp = pl_model_default_params();
    if (p->device) mp.device = p->device;
    mp.n_ctx = p->n_ctx;
    mp.n_threads = p->n_threads;
    mp.cache_type_k = p->cache_type_k;
    mp.cache_type_v = p->cache_type_v;
    return mp;
}

/* The trained context of a file (the cap of the longest-context search). */
static int trained_ctx(const pl_gguf *g) {
    pl_gguf_str arch;
    int64_t v = 0;
    if (pl_gguf_get_str(g, "general.architecture", &arch) == PL_OK && arch.len < 100) {
        char key[160];
        snprintf(key, sizeof key, "%.*s.context_length", (int)arch.len, arch.ptr);
        if (pl_gguf_get_i64(g, key, &v) != PL_OK) v = 0;
    }
    return v > 0 && v <= (1 << 24) ? (int)v : 4096;
}

static pl_status budget_of(const pl_fit_params *p, uint64_t *budget, bool *from_device) {
    *from_device = false;
    if (p->budget) {
        *budget = p->budget;
        return PL_OK;
    }
    *from_device = true;
    return pl_device_free_memory(p->device, budget);
}

static const char *base_name(const char *path) {
    const char *s = strrchr(path, '/');
    return s ? s + 1 : path;
}

/* The context length the planner will use (for the report). */
static int ctx_of(const pl_gguf *g, int n_ctx) {
    if (n_ctx > 0) return n_ctx;
    pl_gguf_str arch;
    int64_t v = 4096;
    if (pl_gguf_get_str(g, "general.architecture", &arch) == PL_OK && arch.len < 100) {
        char key[160];
        snprintf(key, sizeof key, "%.*s.context_length", (int)arch.len, arch.ptr);
        if (pl_gguf_get_i64(g, key, &v) != PL_OK) v = 4096;
    }
    return (int)(v < 4096 && v > 0 ? v : 4096);
}

pl_status pl_fit_plan_file(const char *path, const pl_fit_params *p, pl_fit_result *out) {
    uint64_t budget;
    bool from_device;
    PL_TRY(budget_of(p, &budget, &from_device));
    pl_gguf *g = NULL;
    PL_TRY(pl_gguf_open(path, &g));
    const pl_model_params mp = model_params_of(p);
    pl_status st = plan_rungs(g, base_name(path), &mp, budget, trained_ctx(g), out);
    out->budget_is_free_memory = from_device;
    out->n_ctx = ctx_of(g, p->n_ctx);
    pl_gguf_close(g);
    return st;
}

/* ---- presets: a synthesized tensor table ----------------------------------------*/

typedef struct hbuf {
    uint8_t *p;
    size_t n, cap;
    bool oom;
} hbuf;

static void put(hbuf *b, const void *d, size_t n) {
    if (b->oom) return;
    if (b->n + n > b->cap) {
        size_t cap = b->cap ? b->cap : 4096;
        while (cap < b->n + n) cap *= 2;
        uint8_t *q = realloc(b->p, cap);
        if (!q) {
            b->oom = true;
            return;
        }
        b->p = q;
        b->cap = cap;
    }
    memcpy(b->p + b->n, d, n);
    b->n += n;
}
static void put_u32(hbuf *b, uint32_t v) { put(b, &v, 4); }   /* GGUF is little-endian, as are our hosts */
static void put_u64(hbuf *b, uint64_t v) { put(b, &v, 8); }
static void put_str(hbuf *b, const char *s) {
    put_u64(b, strlen(s));
    put(b, s, strlen(s));
}
static void kv_u32(hbuf *b, const char *k, uint32_t v) {
    put_str(b, k);
    put_u32(b, PL_GGUF_UINT32);
    put_u32(b, v);
}
static void kv_f32(hbuf *b, const char *k, float v) {
    put_str(b, k);
    put_u32(b, PL_GGUF_FLOAT32);
    put(b, &v, 4);
}

typedef struct syn_tensor {
    char name[64];
    int n_dims;
    int64_t ne[3];   /* ne[2]: experts of a 3-D expert tensor (qwen3moe), else 1 */
    pl_dtype dt;
} syn_tensor;

/* The preset's tensor table, walked from its architecture's declaration in
 * the converter's order (as pocketllm synth writes it): matrices in bf16 as
 * released, vectors and routers in f32. */
typedef struct syn_walk {
    syn_tensor *ts;
    size_t n, cap;
    bool tied;
} syn_walk;

static bool syn_keep(void *user, const pl_tensor_decl *d) {
    return (d->flags & PL_TD_TIED) && !((const syn_walk *)user)->tied;   /* no optional extras */
}

static void syn_add(void *user, const pl_tensor_decl *d, const char *name, const int64_t ne[3]) {
    syn_walk *w = user;
    if (w->n >= w->cap) return;
    syn_tensor *t = &w->ts[w->n++];
    snprintf(t->name, sizeof t->name, "%s", name);
    const bool f32 = d->role == PL_TR_NORM || d->role == PL_TR_BIAS || d->role == PL_TR_ROUTER ||
                     d->role == PL_TR_FACTORS;
    t->dt = f32 ? PL_F32 : PL_BF16;
    t->n_dims = d->n_dims;
    for (int i = 0; i < 3; i++) t->ne[i] = ne[i];
}

typedef struct syn_kv {
    hbuf *kv;
    int64_t n;
} syn_kv;

static void syn_key(void *user, const char *key, bool is_float, int64_t i, float f) {
    syn_kv *k = user;
    if (is_float) kv_f32(k->kv, key, f);
    else kv_u32(k->kv, key, (uint32_t)i);
    k->n++;
}

pl_status pl_fit_plan_preset(const char *preset, const char *vocab_path, const pl_fit_params *p, pl_fit_result *out) {
    const pl_arch_preset *s = NULL;
    const pl_arch *a = pl_arch_find_preset(preset, &s);
    if (!a) {
        char names[256];
        pl_arch_preset_names(names, sizeof names);
        return pl_errorf(PL_ERR_INVALID_ARG, "unknown preset '%s' (%s)", preset, names);
    }
    const char *arch = a->name;
    if (!vocab_path) return pl_errorf(PL_ERR_INVALID_ARG, "a preset needs a vocabulary file (a vocab-only GGUF: the tokenizer)");
    uint64_t budget;
    bool from_device;
    PL_TRY(budget_of(p, &budget, &from_device));
    pl_gguf *vg = NULL;
    PL_TRY(pl_gguf_open(vocab_path, &vg));
    pl_gguf_type et;
    uint64_t n_vocab = 0;
    const void *ad;
    if (pl_gguf_get_arr(vg, "tokenizer.ggml.tokens", &et, &n_vocab, &ad) != PL_OK || n_vocab == 0) {
        pl_gguf_close(vg);
        return pl_errorf(PL_ERR_FORMAT, "%s has no tokenizer.ggml.tokens", vocab_path);
    }

    pl_hparams hp;
    pl_arch_preset_hparams(s, (int64_t)n_vocab, &hp);
    size_t cap = 0;
    for (const pl_tensor_decl *d = a->tensors; d->name; d++) cap += d->flags & PL_TD_LAYER ? (size_t)hp.n_layer : 1;
    syn_tensor *ts = calloc(cap ? cap : 1, sizeof *ts);
    if (!ts) {
        pl_gguf_close(vg);
        return pl_errorf(PL_ERR_NO_MEMORY, "out of memory");
    }
    syn_walk walk = {ts, 0, cap, s->tied};
    pl_arch_each_tensor(a, &hp, syn_keep, syn_add, &walk);
    const size_t nt = walk.n;

    hbuf h = {0};
    const uint32_t align = 32;
    int64_t n_kv = 0;
    hbuf kv = {0};
    char label[64];
    snprintf(label, sizeof label, "%s-%s (preset)", arch, s->name);
    put_str(&kv, "general.architecture");
    put_u32(&kv, PL_GGUF_STRING);
    put_str(&kv, arch);
    n_kv++;
    kv_u32(&kv, "general.file_type", PL_FTYPE_BF16), n_kv++;
    syn_kv keys = {&kv, 0};
    pl_arch_each_hparam(a, &hp, syn_key, &keys);   /* the {arch}.* keys the declaration writes */
    n_kv += keys.n;
    for (int64_t i = 0; i < pl_gguf_n_kv(vg); i++) {
        pl_gguf_str k = pl_gguf_kv_key(vg, i);
        const void *raw;
        uint64_t raw_n;
        if (k.len < 10 || memcmp(k.ptr, "tokenizer.", 10) || pl_gguf_kv_raw(vg, i, &raw, &raw_n) != PL_OK) continue;
        put_u64(&kv, k.len);
        put(&kv, k.ptr, k.len);
        put_u32(&kv, pl_gguf_kv_type(vg, i));
        put(&kv, raw, raw_n);
        n_kv++;
    }
    put_u32(&h, 0x46554747u); /* "GGUF" */
    put_u32(&h, 3);
    put_u64(&h, nt);
    put_u64(&h, (uint64_t)n_kv);
    if (!kv.oom) put(&h, kv.p, kv.n);
    uint64_t off = 0;
    for (size_t i = 0; i < nt; i++) {
        put_str(&h, ts[i].name);
        put_u32(&h, (uint32_t)ts[i].n_dims);
        for (int d = 0; d < ts[i].n_dims; d++) put_u64(&h, (uint64_t)ts[i].ne[d]);
        put_u32(&h, (uint32_t)ts[i].dt);
        put_u64(&h, off);
        off += (pl_dtype_row_size(ts[i].dt, ts[i].ne[0]) * (uint64_t)ts[i].ne[1] * (uint64_t)ts[i].ne[2] + align - 1) /
               align * align;
    }
    pl_status st = PL_OK;
    const size_t head = (h.n + align - 1) / align * align;
    const size_t total = head + off;
    void *map = MAP_FAILED;
    if (h.oom || kv.oom) st = pl_errorf(PL_ERR_NO_MEMORY, "out of memory");
    else {
        /* Only the header pages are ever written or read. */
        map = mmap(NULL, total, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
        if (map == MAP_FAILED) st = pl_errorf(PL_ERR_NO_MEMORY, "cannot reserve %.1f GiB of address space for the preset's tensor table", total / 1073741824.0);
    }
    pl_gguf *g = NULL;
    if (st == PL_OK) {
        memcpy(map, h.p, h.n);
        st = pl_gguf_open_memory(map, total, label, &g);
    }
    if (st == PL_OK) {
        const pl_model_params mp = model_params_of(p);
        st = plan_rungs(g, label, &mp, budget, trained_ctx(g), out);
        out->budget_is_free_memory = from_device;
        out->n_ctx = p->n_ctx > 0 ? p->n_ctx : 4096;
    }
    pl_gguf_close(g);
    if (map != MAP_FAILED) munmap(map, total);
    free(h.p);
    free(kv.p);
    free(ts);
    pl_gguf_close(vg);
    return st;
}

/* ---- device memory --------------------------------------------*/

pl_status pl_device_free_memory(const char *device, uint64_t *out) {
    const char *d = device && *device ? device : "cpu";
    const pl_backend *b = pl_backend_find(d);
    if (b && b->device && b->ctx_create) {
        /* Asks the device itself (for cuda this loads the module and starts
         * the runtime; without a GPU it fails here with the reason). The
         * loader's headroom is taken off, so that a plan fit/--memory auto
         * accept is one pl_model_load accepts too. */
        pl_exec_ctx *ctx = NULL;
        PL_TRY(b->ctx_create(1, &ctx));
        uint64_t free_b = 0, total_b = 0;
        pl_status st = b->device->mem_info(ctx, &free_b, &total_b, NULL, 0);
        b->ctx_free(ctx);
        if (st == PL_OK) *out = free_b > PL_DEVICE_HEADROOM ? free_b - PL_DEVICE_HEADROOM : 0;
        if (st == PL_OK && !*out)
            st = pl_errorf(PL_ERR_DOES_NOT_FIT, "device '%s' has no free memory left (%.1f MiB free)", d,
                           free_b / 1048576.0);
        return st;
    }
    if (strcmp(d, "cpu") && strcmp(d, "ref"))
        return pl_errorf(PL_ERR_UNSUPPORTED, "the free memory of device '%s' is unknown: give a budget", d);
    FILE *f = fopen("/proc/meminfo", "r");
    if (!f) return pl_errorf(PL_ERR_IO, "cannot read /proc/meminfo: give a budget");
    char line[256];
    unsigned long long kb = 0;
    bool found = false;
    while (fgets(line, sizeof line, f))
        if (sscanf(line, "MemAvailable: %llu kB", &kb) == 1) {
            found = true;
            break;
        }
    fclose(f);
    if (!found) return pl_errorf(PL_ERR_IO, "/proc/meminfo has no MemAvailable: give a budget");
    *out = (uint64_t)kb * 1024;
    return PL_OK;
}
