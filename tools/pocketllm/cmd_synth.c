/*
 * pocketllm synth: writes a checkpoint of any architecture whose declaration
 * says it can (pl_arch.synth: qwen3, qwen3moe, llama, gemma3) with random
 * weights of the real shapes and the real tokenizer (copied from a vocab-only
 * GGUF), for benchmarks at 0.6B-30B sizes and for tiny test fixtures.
 * llama.cpp loads the result too. The keys and the tensor list come from the
 * architecture's tables (src/models/arch_table.h), so this file names no
 * architecture's tensors.
 * --rope-llama3 FACTOR:LOW:HIGH:CTX (llama only) adds rope_freqs.weight, the
 * llama3 (Llama 3.1+) RoPE frequency factors, computed as llama.cpp's
 * converter does from rope_scaling {factor, low_freq_factor,
 * high_freq_factor, original_max_position_embeddings}.
 *
 * Weights: uniform in [-a, a] with a = sqrt(3 / fan_in) (unit-variance
 * activations through each projection), norms 1 + small noise. Every tensor is
 * seeded from (seed, tensor name), so files are reproducible and rows can be
 * generated in parallel.
 *
 * --imatrix F (llama.cpp's GGUF imatrix, e.g. `pocketllm imatrix` run on a
 * file synth wrote with the same seed): the rows are quantized as
 * `pocketllm quantize --imatrix F` quantizes them (quant/quantize_rows.h),
 * each matrix of a 3-D expert tensor with its expert's slice of the
 * imatrix, so file types that need one (IQ2_XXS, ...) can be written
 * directly too: synth Q4_K_M -> imatrix -> synth IQ2_XXS, never an f16 file.
 *
 * The one subcommand that includes internal headers (core/threadpool.h,
 * gguf/gguf_write.h, quant/quant.h; quant/quantize_mix.h and core/status.h for
 * --type FILETYPE): it writes test checkpoints with the
 * library's GGUF writer and block encoders, which are not public API. Every
 * other file under tools/ reaches the engine through pocketllm.h only.
 */
#include "cli.h"
#include "core/threadpool.h"
#include "gguf/gguf.h"
#include "gguf/gguf_write.h"
#include "quant/quant.h"
#include "quant/quantize_mix.h"
#include "quant/quantize_rows.h"
#include "quant/imatrix.h"
#include "core/status.h"
#include "models/arch_table.h"
#include <math.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

typedef struct synth_dims {
    const char *name;
    int64_t n_embd, n_layer, n_head, n_head_kv, head_dim, n_ff;
    bool tied;
} synth_dims;

typedef struct synth_tensor {
    char name[64];
    pl_dtype dtype;
    int64_t ne[3];   /* ne[2]: experts of a 3-D expert tensor, else 1 */
    int n_dims;
    uint64_t seed;
    bool is_norm;
    const float *values;   /* fixed F32 content (rope_freqs), or NULL = random */
    bool with_rows;        /* --imatrix: quantized by pl_quantize_rows, as `pocketllm quantize` */
    const float *imatrix;  /* its weights, ne[0] per matrix (expert), or NULL */
} synth_tensor;

typedef struct fill_job {
    const synth_tensor *t;
    char *dst;
    size_t row_bytes;
    float *bufs;   /* one row buffer per thread */
    int64_t rows;  /* rows to quantize: the tensor's, or the distinct-row pool's */
    atomic_int st; /* the first failure of any thread (pl_status) */
} fill_job;

static uint64_t mix64(uint64_t z) {
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

static uint64_t hash_name(const char *s, uint64_t seed) {
    uint64_t h = seed ^ 0x9E3779B97F4A7C15ull;
    for (; *s; s++) h = mix64(h ^ (unsigned char)*s);
    return h;
}

static void fill_rows(void *arg, int ith, int nth) {
    fill_job *j = arg;
    const synth_tensor *t = j->t;
    const int64_t n = t->ne[0], rows = j->rows;
    float *row = j->bufs + (size_t)ith * (size_t)n;
    const float a = t->is_norm ? 0.1f : sqrtf(3.0f / (float)n);
    for (int64_t r = ith; r < rows; r += nth) {
        uint64_t s = mix64(t->seed + (uint64_t)r * 0x9E3779B97F4A7C15ull);
        for (int64_t i = 0; i < n; i++) {
            s = s * 6364136223846793005ull + 1442695040888963407ull;
            float u = (float)((s >> 40) * (1.0 / 16777216.0)) * 2.0f - 1.0f; /* [-1, 1) */
            row[i] = t->is_norm ? 1.0f + a * u : a * u;
        }
        void *dst = j->dst + (size_t)r * j->row_bytes;
        if (!t->with_rows) {
            pl_quantize_row(t->dtype, row, dst, n);
            continue;
        }
        /* row r of a 3-D tensor [n, ne1, n_expert] belongs to expert r / ne1 */
        const float *im = t->imatrix ? t->imatrix + (r / t->ne[1]) * n : NULL;
        const pl_status st = pl_quantize_rows(t->dtype, row, dst, 1, n, im);
        if (st != PL_OK) atomic_store(&j->st, (int)st);
    }
}

typedef struct synth_ctx {
    pl_threadpool *pool;
    float *bufs;
    int64_t distinct_rows;   /* --distinct-rows: 0 = every row its own */
} synth_ctx;

typedef struct fill_user {
    synth_ctx *ctx;
    const synth_tensor *t;
} fill_user;

static pl_status fill_tensor(void *user, const char *name, void *dst, uint64_t size) {
    fill_user *u = user;
    if (u->t->values) {
        memcpy(dst, u->t->values, (size_t)size);
        return PL_OK;
    }
    const synth_tensor *t = u->t;
    const int64_t rows = t->n_dims > 1 ? t->ne[1] * (t->n_dims > 2 ? t->ne[2] : 1) : 1;
    const int64_t pool = u->ctx->distinct_rows;
    fill_job j = {t, dst, pl_dtype_row_size(t->dtype, t->ne[0]), u->ctx->bufs, pool > 0 && rows > pool ? pool : rows,
                  PL_OK};
    pl_threadpool_run(u->ctx->pool, fill_rows, &j);
    if (atomic_load(&j.st) != PL_OK)
        return pl_errorf((pl_status)atomic_load(&j.st), "synth: cannot quantize %s to %s", name, pl_dtype_name(t->dtype));
    /* --distinct-rows P: rows past the first P are copies of pool rows picked
     * by a hash of (tensor, row), so a benchmark-sized file (30B-A3B: ~17 GiB
     * of Q4_K) is written at disk speed instead of an hour of quantizing.
     * The bytes are still the quantizer's output for random rows, and every
     * row has its own address, so kernels read exactly as much memory. With
     * --imatrix a pool row is quantized with its own expert's weights (the
     * pool is the first P rows) and its copies may land in other experts. */
    for (int64_t r = j.rows; r < rows; r++) {
        const uint64_t pick = mix64(t->seed ^ ((uint64_t)r * 0xD1B54A32D192ED03ull)) % (uint64_t)j.rows;
        memcpy((char *)dst + (size_t)r * j.row_bytes, (char *)dst + (size_t)pick * j.row_bytes, j.row_bytes);
    }
    return PL_OK;
}

static bool parse_custom(const char *s, synth_dims *d) {
    long long v[6];
    if (sscanf(s, "%lld:%lld:%lld:%lld:%lld:%lld", &v[0], &v[1], &v[2], &v[3], &v[4], &v[5]) != 6) return false;
    for (int i = 0; i < 6; i++)
        if (v[i] <= 0 || v[i] > (1 << 20)) return false;
    if (v[2] % v[3]) return false;
    *d = (synth_dims){"custom", v[0], v[1], v[2], v[3], v[4], v[5], true};
    return true;
}

static int file_type_of(pl_dtype t) {
    switch (t) {
    case PL_F32: return 0;
    case PL_F16: return 1;
    case PL_Q8_0: return 7;
    case PL_Q4_K: return 15;
    case PL_Q6_K: return 18;
    case PL_BF16: return 32;
    default: return 0;
    }
}

/* llama3 RoPE frequency factors [head_dim/2], as llama.cpp's converter
 * (LlamaModel.generate_extra_tensors): for pair i, freq = base^(-2i/dim) and
 * wavelen = 2 pi / freq; factor 1 above the high-frequency cut
 * (wavelen < ctx / high), `factor` below the low one (wavelen > ctx / low),
 * and 1 / ((1 - smooth) / factor + smooth) between, smooth =
 * (ctx / wavelen - low) / (high - low). */
static void llama3_rope_factors(float *out, int64_t dim, double base, double factor, double low, double high,
                                double ctx) {
    const double low_wavelen = ctx / low, high_wavelen = ctx / high;
    for (int64_t i = 0; i < dim / 2; i++) {
        const float freq = (float)(1.0 / pow(base, (double)(2 * i) / (double)dim));
        const double wavelen = 2.0 * 3.14159265358979323846 / (double)freq;
        if (wavelen < high_wavelen) out[i] = 1.0f;
        else if (wavelen > low_wavelen) out[i] = (float)factor;
        else {
            const double smooth = (ctx / wavelen - low) / (high - low);
            out[i] = (float)(1.0 / ((1.0 - smooth) / factor + smooth));
        }
    }
}

/* --experts X:K:Fx (expert_count, expert_used_count,
 * expert_feed_forward_length) of an expert architecture (qwen3moe) with a
 * custom shape; a preset (30b-a3b = Qwen3-30B-A3B) carries its own. */
typedef struct synth_moe {
    int64_t n_expert, n_used, n_ff_exp;
} synth_moe;

static bool parse_experts(const char *s, synth_moe *m) {
    long long v[3];
    if (!s || sscanf(s, "%lld:%lld:%lld", &v[0], &v[1], &v[2]) != 3) return false;
    if (v[0] < 1 || v[0] > 4096 || v[1] < 1 || v[1] > v[0] || v[2] < 1 || v[2] > (1 << 20)) return false;
    *m = (synth_moe){v[0], v[1], v[2]};
    return true;
}

/* Whether an architecture's table has a tensor with dimension dim / of role
 * role: what decides which of synth's options apply to it. */
static bool arch_has_dim(const pl_arch *a, pl_dim dim) {
    for (const pl_tensor_decl *d = a->tensors; d && d->name; d++)
        for (int i = 0; i < d->n_dims; i++)
            if (d->ne[i] == dim) return true;
    return false;
}
static bool arch_has_role(const pl_arch *a, pl_tensor_role role) {
    for (const pl_tensor_decl *d = a->tensors; d && d->name; d++)
        if (d->role == role) return true;
    return false;
}

/* "a, b or c": the synth-able architectures for which pred holds (pred
 * NULL: all), in registry order. */
static const char *arch_list(char *buf, size_t cap, bool (*pred)(const pl_arch *)) {
    const pl_arch *pick[32];
    int n = 0;
    for (const pl_arch *const *a = pl_archs(); *a && n < 32; a++)
        if ((*a)->synth && (!pred || pred(*a))) pick[n++] = *a;
    size_t len = 0;
    buf[0] = 0;
    for (int i = 0; i < n && len < cap; i++)
        len += (size_t)snprintf(buf + len, cap - len, "%s%s", i == 0 ? "" : i == n - 1 ? " or " : ", ", pick[i]->name);
    return buf;
}
static bool has_experts(const pl_arch *a) { return arch_has_dim(a, PL_DIM_X); }
static bool has_factors(const pl_arch *a) { return arch_has_role(a, PL_TR_FACTORS); }

static void synth_key(void *user, const char *key, bool is_float, int64_t i, float f) {
    if (is_float) pl_gguf_writer_add_f32(user, key, f);
    else pl_gguf_writer_add_u32(user, key, (uint32_t)i);
}

/* The tensor list, walked from the architecture's table
 * (pl_arch_each_tensor: llama.cpp's converter order). */
typedef struct synth_walk {
    synth_tensor *ts;
    size_t n, cap;
    pl_dtype wt;              /* matrices' dtype; vectors and routers stay F32 */
    bool tied;
    const float *factors;     /* rope_freqs values, or NULL: not written */
    uint64_t seed;
} synth_walk;

static bool synth_keep(void *user, const pl_tensor_decl *d) {
    const synth_walk *sw = user;
    if (d->flags & PL_TD_TIED) return !sw->tied;
    if (d->role == PL_TR_FACTORS) return sw->factors != NULL;
    return false;
}

static void synth_add(void *user, const pl_tensor_decl *d, const char *name, const int64_t ne[3]) {
    synth_walk *sw = user;
    if (sw->n >= sw->cap) return;
    synth_tensor *t = &sw->ts[sw->n++];
    snprintf(t->name, sizeof t->name, "%s", name);
    const bool f32 = d->role == PL_TR_NORM || d->role == PL_TR_BIAS || d->role == PL_TR_ROUTER ||
                     d->role == PL_TR_FACTORS;
    t->dtype = f32 ? PL_F32 : sw->wt;
    t->n_dims = d->n_dims;
    for (int i = 0; i < 3; i++) t->ne[i] = ne[i];
    t->is_norm = d->role == PL_TR_NORM;
    t->seed = hash_name(t->name, sw->seed);
    t->values = d->role == PL_TR_FACTORS ? sw->factors : NULL;
}

/* --type NAME_OF_A_FILE_TYPE (Q4_K_M, ...): each tensor gets the type the
 * quantizer's rules give it (quant/quantize_mix.h), written directly, so a
 * real-shape file never exists in f16 anywhere. */
static pl_status synth_apply_mix(const pl_ftype_info *ft, const pl_mix_model *mm, bool has_imatrix, synth_tensor *ts,
                                 size_t n) {
    pl_mix_tensor *mt = calloc(n, sizeof *mt);
    if (!mt) return pl_errorf(PL_ERR_NO_MEMORY, "synth: out of memory");
    size_t k = 0;
    for (size_t i = 0; i < n; i++) {
        if (!pl_mix_allows_quantization(ts[i].name, ts[i].n_dims)) continue;
        mt[k] = (pl_mix_tensor){.name = ts[i].name, .n_dims = ts[i].n_dims, .cur = PL_F32};
        mt[k].ne[0] = ts[i].ne[0];
        mt[k].ne[1] = ts[i].ne[1];
        mt[k].ne[2] = ts[i].ne[2] ? ts[i].ne[2] : 1;
        mt[k].ne[3] = 1;
        k++;
    }
    qsort(mt, k, sizeof *mt, pl_mix_compare);
    pl_status st = pl_mix_plan(ft, mm, has_imatrix, mt, (int64_t)k);
    for (size_t j = 0; j < k && st == PL_OK; j++)
        for (size_t i = 0; i < n; i++)
            if (ts[i].name == mt[j].name) ts[i].dtype = mt[j].target;
    free(mt);
    return st;
}

/* --imatrix: every tensor synth quantizes gets its entry, checked as
 * llama-quantize checks it -- n_per_row * n_expert values, or an error
 * (token_embd excepted: a wrong size there is ignored) -- and a type that
 * cannot be made without one (pl_mix_requires_imatrix: IQ2_XXS, ...) refuses
 * a tensor the imatrix has no entry for. */
static pl_status synth_bind_imatrix(pl_imatrix *im, const char *path, synth_tensor *ts, size_t n) {
    for (size_t i = 0; i < n; i++) {
        synth_tensor *t = &ts[i];
        if (t->values || t->dtype == PL_F32) continue;   /* norms, router, rope factors: written as f32 */
        if (!pl_quantize_rows_supported(t->dtype) && !pl_can_quantize(t->dtype))
            return pl_errorf(PL_ERR_UNSUPPORTED, "synth: no quantizer for type %s (needed for %s)",
                             pl_dtype_name(t->dtype), t->name);
        t->with_rows = pl_quantize_rows_supported(t->dtype);
        const int64_t n_mat = t->n_dims > 2 ? t->ne[2] : 1;
        int64_t nv = 0;
        const float *v = pl_imatrix_weights(im, t->name, &nv);
        if (v && nv == t->ne[0] * n_mat) {
            for (int64_t k = 0; k < nv; k++)
                if (!isfinite(v[k])) return pl_errorf(PL_ERR_FORMAT, "%s: imatrix contains non-finite values", path);
            t->imatrix = v;
        } else if (v && strcmp(t->name, "token_embd.weight"))
            return pl_errorf(PL_ERR_INVALID_ARG,
                             "%s: imatrix entry %s has %lld values, the tensor needs %lld (rows of %lld x %lld "
                             "matrices): an imatrix of another shape",
                             path, t->name, (long long)nv, (long long)(t->ne[0] * n_mat), (long long)t->ne[0],
                             (long long)n_mat);
        if (!t->imatrix && pl_mix_requires_imatrix(t->name, t->dtype))
            return pl_errorf(PL_ERR_INVALID_ARG, "%s: the imatrix has no entry for %s, which type %s needs", path,
                             t->name, pl_dtype_name(t->dtype));
        if (t->with_rows && !t->imatrix && pl_quantize_needs_imatrix(t->dtype))
            return pl_errorf(PL_ERR_INVALID_ARG, "%s: the imatrix has no entry for %s, which type %s needs", path,
                             t->name, pl_dtype_name(t->dtype));
    }
    return PL_OK;
}

static int cmd_synth(int argc, char **argv) {
    const char *arch = "qwen3", *preset = NULL, *type = "f16", *out = NULL, *vocab = NULL, *v, *experts = NULL;
    const char *rope_llama3 = NULL, *imatrix_path = NULL;
    long long seed = 1, threads = 0, window = 512, distinct_rows = 0;
    double softcap = 0;
    bool bad = false, untied = false;
    for (int i = 1; i < argc && !bad; i++) {
        if (!strcmp(argv[i], "--help")) {
            puts("usage: pocketllm synth --arch qwen3|llama|qwen3moe|gemma3 --preset 0.6b|1.7b|4b|8b|E:L:H:G:D:F --type f16\n"
                 "                       --out F --vocab VOCAB.gguf [--seed S] [--untied] [--threads N] [--distinct-rows P]\n"
                 "                       [--experts X:K:Fx] [--rope-llama3 FACTOR:LOW:HIGH:CTX] [--window W] [--softcap C]\n"
                 "  gemma3: --window W sliding window of the local layers (default 512); --softcap C final logit\n"
                 "          soft-capping (default none)\n"
                 "  E:L:H:G:D:F = n_embd:n_layer:n_head:n_head_kv:head_dim:n_ff\n"
                 "  types: f32 f16 bf16 q8_0 q4_K q6_K ... (every matrix; norms stay f32), or a file type such as\n"
                 "         Q4_K_M or Q2_K (upper case): each tensor written directly in the type the quantizer's\n"
                 "         rules pick\n"
                 "  qwen3moe: --experts X:K:Fx = expert_count:expert_used_count:expert_feed_forward_length\n"
                 "            (required with E:L:H:G:D:F); --preset 30b-a3b = Qwen3-30B-A3B (2048:48:32:4:128:6144,\n"
                 "            128:8:768, untied)\n"
                 "  --imatrix F: quantize with the importance matrix F (llama.cpp's GGUF imatrix, e.g.\n"
                 "    `pocketllm imatrix` on a file synth wrote with the same --seed), expert tensors per expert;\n"
                 "    needed by IQ2_XXS, IQ2_XS, IQ1_S, IQ1_M and the other ladder types that need one\n"
                 "  --distinct-rows P: quantize only P random rows per matrix and repeat them (picked by a\n"
                 "    hash) -- for speed benchmarks of very large shapes; the file keeps its full size\n"
                 "  --rope-llama3 (llama only): write rope_freqs.weight, llama3's RoPE frequency factors\n"
                 "    (rope_scaling factor, low_freq_factor, high_freq_factor, original context; e.g. 32:1:4:8192)");
            return 0;
        } else if (!strcmp(argv[i], "--untied")) untied = true;
        else if (pl_cli_opt(argc, argv, &i, "--arch", &arch, &bad)) {}
        else if (pl_cli_opt(argc, argv, &i, "--preset", &preset, &bad)) {}
        else if (pl_cli_opt(argc, argv, &i, "--type", &type, &bad)) {}
        else if (pl_cli_opt(argc, argv, &i, "--out", &out, &bad)) {}
        else if (pl_cli_opt(argc, argv, &i, "--vocab", &vocab, &bad)) {}
        else if (pl_cli_opt(argc, argv, &i, "--rope-llama3", &rope_llama3, &bad)) {}
        else if (pl_cli_opt(argc, argv, &i, "--experts", &experts, &bad)) {}
        else if (pl_cli_opt(argc, argv, &i, "--imatrix", &imatrix_path, &bad)) {}
        else if (pl_cli_opt(argc, argv, &i, "--seed", &v, &bad)) {
            if (!bad && !pl_cli_parse_int(v, 0, INT64_MAX, &seed)) return pl_cli_error("bad --seed '%s'", v);
        } else if (pl_cli_opt(argc, argv, &i, "--distinct-rows", &v, &bad)) {
            if (!bad && !pl_cli_parse_int(v, 1, INT64_MAX, &distinct_rows))
                return pl_cli_error("bad --distinct-rows '%s'", v);
        } else if (pl_cli_opt(argc, argv, &i, "--window", &v, &bad)) {
            if (!bad && !pl_cli_parse_int(v, 1, 1 << 24, &window)) return pl_cli_error("bad --window '%s'", v);
        } else if (pl_cli_opt(argc, argv, &i, "--softcap", &v, &bad)) {
            char *end = NULL;
            if (!bad && (softcap = strtod(v, &end), !end || *end || !(softcap > 0) || softcap > 1e6))
                return pl_cli_error("bad --softcap '%s' (a value > 0)", v);
        } else if (pl_cli_opt(argc, argv, &i, "--threads", &v, &bad)) {
            if (!bad && !pl_cli_parse_int(v, 0, 1024, &threads)) return pl_cli_error("bad --threads '%s'", v);
        } else return pl_cli_error("synth: unknown option '%s'", argv[i]);
    }
    if (bad) return 1;
    char names[160];
    const pl_arch *a = pl_arch_find(arch);
    if (!a || !a->synth) return pl_cli_error("synth: --arch must be %s", arch_list(names, sizeof names, NULL));
    if (!preset || !out || !vocab) return pl_cli_error("synth: --preset, --out and --vocab are required");
    const bool moe = has_experts(a);
    if (experts && !moe) return pl_cli_error("synth: --experts is for --arch %s", arch_list(names, sizeof names, has_experts));
    synth_dims d = {0};
    synth_moe xm = {0};
    bool found = false;
    for (const pl_arch_preset *p = a->presets; p && p->name && !found; p++)
        if (!strcmp(preset, p->name)) {
            d = (synth_dims){p->name, p->n_embd, p->n_layer, p->n_head, p->n_head_kv, p->head_dim, p->n_ff, p->tied};
            xm = (synth_moe){p->n_expert, p->n_expert_used, p->n_ff_exp};
            found = true;
        }
    if (!found && !parse_custom(preset, &d)) return pl_cli_error("synth: unknown preset '%s'", preset);
    if (moe && experts && !parse_experts(experts, &xm))
        return pl_cli_error("synth: bad --experts '%s' (X:K:Fx with 1 <= K <= X)", experts);
    if (moe && !xm.n_expert) return pl_cli_error("synth: --arch %s with a custom shape needs --experts X:K:Fx", arch);
    if (untied) d.tied = false;
    double r3[4] = {0};
    if (rope_llama3) {
        if (!has_factors(a)) return pl_cli_error("synth: --rope-llama3 needs --arch %s", arch_list(names, sizeof names, has_factors));
        if (sscanf(rope_llama3, "%lf:%lf:%lf:%lf", &r3[0], &r3[1], &r3[2], &r3[3]) != 4 || !(r3[0] >= 1) ||
            !(r3[1] > 0) || !(r3[2] > r3[1]) || !(r3[3] >= 1) || !isfinite(r3[0] + r3[1] + r3[2] + r3[3]))
            return pl_cli_error("synth: bad --rope-llama3 '%s' (FACTOR:LOW:HIGH:CTX, factor >= 1, 0 < low < high, "
                                "ctx >= 1)", rope_llama3);
    }
    /* A name spelled as llama-quantize's file type (Q2_K, TQ2_0: upper case)
     * gets that file type's mix; the same name as a ggml tensor type (q2_K,
     * tq2_0) puts every matrix in that one type. */
    pl_dtype wt;
    const pl_ftype_info *mix = pl_ftype_find(type);
    if (mix && strcmp(mix->name, type) != 0 && pl_dtype_from_name(type, &wt)) mix = NULL;
    if (!mix && (!pl_dtype_from_name(type, &wt) || !pl_can_quantize(wt) || wt == PL_Q8_K || wt == PL_Q8_1))
        mix = pl_ftype_find(type);
    if (mix) {
        if (mix->needs_imatrix && !imatrix_path)
            return pl_cli_error("synth: --type %s needs --imatrix FILE (an importance matrix: pocketllm imatrix on a "
                                "file synth wrote with the same --seed)", mix->name);
        wt = mix->base;
    } else if (!pl_dtype_from_name(type, &wt) || !pl_can_quantize(wt) || wt == PL_Q8_K || wt == PL_Q8_1)
        return pl_cli_error("synth: unsupported --type '%s'", type);
    pl_imatrix *im = NULL;
    if (imatrix_path && pl_imatrix_load(imatrix_path, &im) != PL_OK) return pl_cli_error("%s", pl_last_error());

    pl_gguf *vg = NULL;
    if (pl_gguf_open(vocab, &vg) != PL_OK) {
        pl_imatrix_free(im);
        return pl_cli_error("%s", pl_last_error());
    }
    uint64_t n_vocab = 0;
    pl_gguf_type et;
    const void *ad;
    if (pl_gguf_get_arr(vg, "tokenizer.ggml.tokens", &et, &n_vocab, &ad) != PL_OK) {
        pl_gguf_close(vg);
        pl_imatrix_free(im);
        return pl_cli_error("synth: %s has no tokenizer.ggml.tokens", vocab);
    }
    const int64_t V = (int64_t)n_vocab;

    pl_gguf_writer *w = NULL;
    pl_gguf_writer_create(&w);
    char name[128];
    pl_gguf_writer_add_str(w, "general.architecture", arch);
    snprintf(name, sizeof name, "synthetic %s %s %s", arch, d.name, type);
    pl_gguf_writer_add_str(w, "general.name", name);
    pl_gguf_writer_add_u32(w, "general.file_type", (uint32_t)(mix ? mix->ftype : file_type_of(wt)));
    pl_gguf_writer_add_u32(w, "general.quantization_version", 2);
    const pl_arch_preset shape = {d.name, d.n_embd, d.n_layer, d.n_head, d.n_head_kv, d.head_dim, d.n_ff, d.tied,
                                  xm.n_expert, xm.n_used, xm.n_ff_exp};
    pl_hparams hp;
    pl_arch_preset_hparams(&shape, V, &hp);
    hp.n_swa = window;                  /* written by architectures that declare a sliding window */
    hp.final_softcap = (float)softcap;  /* 0: not written */
    pl_arch_each_hparam(a, &hp, synth_key, w);   /* the {arch}.* keys the declaration writes */
    for (int64_t i = 0; i < pl_gguf_n_kv(vg); i++) {
        pl_gguf_str k = pl_gguf_kv_key(vg, i);
        if (k.len > 10 && !memcmp(k.ptr, "tokenizer.", 10)) pl_gguf_writer_copy_kv(w, vg, i);
    }
    if (im) {   /* the keys llama-quantize records for its imatrix */
        pl_gguf_writer_add_str(w, "quantize.imatrix.file", imatrix_path);
        if (*pl_imatrix_dataset(im)) pl_gguf_writer_add_str(w, "quantize.imatrix.dataset", pl_imatrix_dataset(im));
        pl_gguf_writer_add_u32(w, "quantize.imatrix.entries_count", (uint32_t)pl_imatrix_n_entries(im));
        if (pl_imatrix_chunk_count(im) > 0)
            pl_gguf_writer_add_u32(w, "quantize.imatrix.chunks_count", pl_imatrix_chunk_count(im));
    }

    /* Tensor list in llama.cpp's converter order, from the architecture's table. */
    size_t cap = 0;
    for (const pl_tensor_decl *td = a->tensors; td->name; td++)
        cap += td->flags & PL_TD_LAYER ? (size_t)d.n_layer : 1;
    synth_walk sw = {calloc(cap ? cap : 1, sizeof(synth_tensor)), 0, cap, wt, d.tied, NULL, (uint64_t)seed};
    synth_tensor *ts = sw.ts;
    fill_user *users = calloc(cap ? cap : 1, sizeof *users);
    float *rope_factors = NULL;
    if (rope_llama3) {
        rope_factors = malloc((size_t)(hp.n_rot / 2) * sizeof *rope_factors);
        llama3_rope_factors(rope_factors, hp.n_rot, 1000000.0, r3[0], r3[1], r3[2], r3[3]);
        sw.factors = rope_factors;
    }
    pl_arch_each_tensor(a, &hp, synth_keep, synth_add, &sw);
    const size_t n = sw.n;

    synth_ctx sc = {.distinct_rows = distinct_rows};
    int rc = 0;
    if (mix) {
        const pl_mix_model mm = {d.n_layer, d.n_head, d.n_head_kv, hp.n_expert};
        if (synth_apply_mix(mix, &mm, im != NULL, ts, n) != PL_OK) { rc = pl_cli_error("%s", pl_last_error()); goto done; }
    }
    if (im && synth_bind_imatrix(im, imatrix_path, ts, n) != PL_OK) {
        rc = pl_cli_error("%s", pl_last_error());
        goto done;
    }
    int64_t max_row = 1;   /* the longest row of any tensor (ne[0]) */
    for (size_t i = 0; i < n; i++)
        if (ts[i].ne[0] > max_row) max_row = ts[i].ne[0];
    if (pl_threadpool_create(threads > 0 ? (int)threads : pl_cpu_count(), &sc.pool) != PL_OK) { rc = pl_cli_error("%s", pl_last_error()); goto done; }
    sc.bufs = malloc((size_t)pl_threadpool_size(sc.pool) * (size_t)max_row * sizeof(float));
    for (size_t i = 0; i < n && !rc; i++) {
        users[i] = (fill_user){&sc, &ts[i]};
        int64_t ne[3] = {ts[i].ne[0], ts[i].ne[1], ts[i].ne[2]};
        if (pl_dtype_row_size(ts[i].dtype, ne[0]) == 0)
            rc = pl_cli_error("synth: row of %lld elements does not fit %s blocks", (long long)ne[0], type);
        else if (pl_gguf_writer_add_tensor_fill(w, ts[i].name, ts[i].dtype, (uint32_t)ts[i].n_dims, ne, fill_tensor,
                                                &users[i]) != PL_OK)
            rc = pl_cli_error("%s", pl_last_error());
    }
    if (!rc && pl_gguf_writer_write_file(w, out) != PL_OK) rc = pl_cli_error("%s", pl_last_error());
    if (!rc) {
        uint64_t size = 0;
        pl_gguf_writer_file_size(w, &size);
        fprintf(stderr, "wrote %s: %s %s, %s, %zu tensors, %.2f GiB\n", out, arch, d.name, type, n, size / 1073741824.0);
    }
done:
    free(sc.bufs);
    pl_threadpool_free(sc.pool);
    free(ts);
    free(users);
    free(rope_factors);
    pl_gguf_writer_free(w);
    pl_gguf_close(vg);
    pl_imatrix_free(im);
    return rc;
}

PL_CLI_COMMAND(pl_cmd_synth, "synth", "write a random-weight checkpoint of real Qwen3 shapes", cmd_synth)
