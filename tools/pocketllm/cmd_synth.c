/*
 * pocketllm synth: writes a Qwen3-shaped (or, with --arch llama, Llama-shaped:
 * no Q/K norms, normal RoPE) GGUF with random weights of the real shapes and
 * the real tokenizer (copied from a vocab-only GGUF), for benchmarks at
 * 0.6B-8B sizes and for tiny test fixtures. llama.cpp loads the result too.
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
#include "core/status.h"
#include <math.h>
#include <stdlib.h>
#include <string.h>

typedef struct synth_dims {
    const char *name;
    int64_t n_embd, n_layer, n_head, n_head_kv, head_dim, n_ff;
    bool tied;
} synth_dims;

/* Qwen3 release configurations. */
static const synth_dims presets[] = {
    {"0.6b", 1024, 28, 16, 8, 128, 3072, true},
    {"1.7b", 2048, 28, 16, 8, 128, 6144, true},
    {"4b", 2560, 36, 32, 8, 128, 9728, true},
    {"8b", 4096, 36, 32, 8, 128, 12288, false},
};

typedef struct synth_tensor {
    char name[64];
    pl_dtype dtype;
    int64_t ne[3];   /* ne[2]: experts of a 3-D expert tensor, else 1 */
    int n_dims;
    uint64_t seed;
    bool is_norm;
    const float *values;   /* fixed F32 content (rope_freqs), or NULL = random */
} synth_tensor;

typedef struct fill_job {
    const synth_tensor *t;
    char *dst;
    size_t row_bytes;
    float *bufs;   /* one row buffer per thread */
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
    const int64_t n = t->ne[0], rows = t->n_dims > 1 ? t->ne[1] * (t->n_dims > 2 ? t->ne[2] : 1) : 1;
    float *row = j->bufs + (size_t)ith * (size_t)n;
    const float a = t->is_norm ? 0.1f : sqrtf(3.0f / (float)n);
    for (int64_t r = ith; r < rows; r += nth) {
        uint64_t s = mix64(t->seed + (uint64_t)r * 0x9E3779B97F4A7C15ull);
        for (int64_t i = 0; i < n; i++) {
            s = s * 6364136223846793005ull + 1442695040888963407ull;
            float u = (float)((s >> 40) * (1.0 / 16777216.0)) * 2.0f - 1.0f; /* [-1, 1) */
            row[i] = t->is_norm ? 1.0f + a * u : a * u;
        }
        pl_quantize_row(t->dtype, row, j->dst + (size_t)r * j->row_bytes, n);
    }
}

typedef struct synth_ctx {
    pl_threadpool *pool;
    float *bufs;
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
    fill_job j = {u->t, dst, pl_dtype_row_size(u->t->dtype, u->t->ne[0]), u->ctx->bufs};
    pl_threadpool_run(u->ctx->pool, fill_rows, &j);
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

static const char *akey(char *buf, size_t cap, const char *arch, const char *suffix) {
    snprintf(buf, cap, "%s.%s", arch, suffix);
    return buf;
}

/* ---- qwen3moe --------------------------------------------------------------
 * --arch qwen3moe: the qwen3 layer with the dense FFN replaced by experts
 * (src/models/qwen3moe.c). Expert shape: --experts X:K:Fx (expert_count,
 * expert_used_count, expert_feed_forward_length); the preset 30b-a3b is
 * Qwen3-30B-A3B (feed_forward_length 6144 is written as the release has it;
 * no tensor uses it). */
typedef struct synth_moe {
    int64_t n_expert, n_used, n_ff_exp;
} synth_moe;

static const synth_dims moe_preset_30b = {"30b-a3b", 2048, 48, 32, 4, 128, 6144, false};
static const synth_moe moe_experts_30b = {128, 8, 768};

static bool parse_experts(const char *s, synth_moe *m) {
    long long v[3];
    if (!s || sscanf(s, "%lld:%lld:%lld", &v[0], &v[1], &v[2]) != 3) return false;
    if (v[0] < 1 || v[0] > 4096 || v[1] < 1 || v[1] > v[0] || v[2] < 1 || v[2] > (1 << 20)) return false;
    *m = (synth_moe){v[0], v[1], v[2]};
    return true;
}

static void synth_moe_keys(pl_gguf_writer *w, const char *arch, const synth_moe *x) {
    char key[96];
    pl_gguf_writer_add_u32(w, akey(key, sizeof key, arch, "expert_count"), (uint32_t)x->n_expert);
    pl_gguf_writer_add_u32(w, akey(key, sizeof key, arch, "expert_used_count"), (uint32_t)x->n_used);
    pl_gguf_writer_add_u32(w, akey(key, sizeof key, arch, "expert_feed_forward_length"), (uint32_t)x->n_ff_exp);
}

/* The expert FFN tensors of layer li after its ffn_norm, in the converter's
 * order; returns how many were written to ts. The router stays f32 (the
 * converter keeps ffn_gate_inp in f32 and llama-quantize never quantizes it). */
static size_t synth_moe_tensors(synth_tensor *ts, int li, int64_t E, const synth_moe *x, pl_dtype wt, uint64_t seed) {
    static const char *const names[4] = {"ffn_gate_inp", "ffn_gate_exps", "ffn_up_exps", "ffn_down_exps"};
    for (int i = 0; i < 4; i++) {
        synth_tensor *t = &ts[i];
        snprintf(t->name, sizeof t->name, "blk.%d.%s.weight", li, names[i]);
        t->dtype = i == 0 ? PL_F32 : wt;
        t->n_dims = i == 0 ? 2 : 3;
        t->ne[0] = i == 0 ? E : i == 3 ? x->n_ff_exp : E;
        t->ne[1] = i == 0 ? x->n_expert : i == 3 ? E : x->n_ff_exp;
        t->ne[2] = i == 0 ? 1 : x->n_expert;
        t->is_norm = false;
        t->seed = hash_name(t->name, seed);
    }
    return 4;
}

/* --type NAME_OF_A_FILE_TYPE (Q4_K_M, ...): each tensor gets the type the
 * quantizer's rules give it (quant/quantize_mix.h), written directly, so a
 * real-shape file never exists in f16 anywhere. */
static pl_status synth_apply_mix(const pl_ftype_info *ft, const pl_mix_model *mm, synth_tensor *ts, size_t n) {
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
    pl_status st = pl_mix_plan(ft, mm, false, mt, (int64_t)k);
    for (size_t j = 0; j < k && st == PL_OK; j++)
        for (size_t i = 0; i < n; i++)
            if (ts[i].name == mt[j].name) ts[i].dtype = mt[j].target;
    free(mt);
    return st;
}

/* gemma3: the sliding window of its local layers and, if asked for, a final
 * logit soft-capping value (llama.cpp reads both; see src/models/gemma3.c). */
static void synth_gemma3_keys(pl_gguf_writer *w, long long window, double softcap) {
    pl_gguf_writer_add_u32(w, "gemma3.attention.sliding_window", (uint32_t)window);
    if (softcap > 0) pl_gguf_writer_add_f32(w, "gemma3.final_logit_softcapping", (float)softcap);
}

static int cmd_synth(int argc, char **argv) {
    const char *arch = "qwen3", *preset = NULL, *type = "f16", *out = NULL, *vocab = NULL, *v, *experts = NULL;
    const char *rope_llama3 = NULL;
    long long seed = 1, threads = 0, window = 512;
    double softcap = 0;
    bool bad = false, untied = false;
    for (int i = 1; i < argc && !bad; i++) {
        if (!strcmp(argv[i], "--help")) {
            puts("usage: pocketllm synth --arch qwen3|llama|qwen3moe|gemma3 --preset 0.6b|1.7b|4b|8b|E:L:H:G:D:F --type f16\n"
                 "                       --out F --vocab VOCAB.gguf [--seed S] [--untied] [--threads N]\n"
                 "                       [--experts X:K:Fx] [--rope-llama3 FACTOR:LOW:HIGH:CTX] [--window W] [--softcap C]\n"
                 "  gemma3: --window W sliding window of the local layers (default 512); --softcap C final logit\n"
                 "          soft-capping (default none)\n"
                 "  E:L:H:G:D:F = n_embd:n_layer:n_head:n_head_kv:head_dim:n_ff\n"
                 "  types: f32 f16 bf16 q8_0 q4_K q6_K (matrices; norms stay f32), or a file type such as\n"
                 "         Q4_K_M: each tensor written directly in the type the quantizer's rules pick\n"
                 "  qwen3moe: --experts X:K:Fx = expert_count:expert_used_count:expert_feed_forward_length\n"
                 "            (required with E:L:H:G:D:F); --preset 30b-a3b = Qwen3-30B-A3B (2048:48:32:4:128:6144,\n"
                 "            128:8:768, untied)\n"
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
        else if (pl_cli_opt(argc, argv, &i, "--seed", &v, &bad)) {
            if (!bad && !pl_cli_parse_int(v, 0, INT64_MAX, &seed)) return pl_cli_error("bad --seed '%s'", v);
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
    const bool llama = !strcmp(arch, "llama"), moe = !strcmp(arch, "qwen3moe"), gemma3 = !strcmp(arch, "gemma3");
    if (strcmp(arch, "qwen3") && !llama && !moe && !gemma3)
        return pl_cli_error("synth: --arch must be qwen3, llama, qwen3moe or gemma3");
    if (!preset || !out || !vocab) return pl_cli_error("synth: --preset, --out and --vocab are required");
    if (experts && !moe) return pl_cli_error("synth: --experts is for --arch qwen3moe");
    synth_dims d;
    synth_moe xm = {0};
    bool found = false;
    if (moe && !strcmp(preset, moe_preset_30b.name)) {
        d = moe_preset_30b;
        xm = moe_experts_30b;
        found = true;
    }
    for (size_t i = 0; i < sizeof presets / sizeof presets[0] && !moe; i++)
        if (!strcmp(preset, presets[i].name)) { d = presets[i]; found = true; }
    if (!found && !parse_custom(preset, &d)) return pl_cli_error("synth: unknown preset '%s'", preset);
    if (moe && experts && !parse_experts(experts, &xm))
        return pl_cli_error("synth: bad --experts '%s' (X:K:Fx with 1 <= K <= X)", experts);
    if (moe && !xm.n_expert) return pl_cli_error("synth: --arch qwen3moe with a custom shape needs --experts X:K:Fx");
    if (untied) d.tied = false;
    double r3[4] = {0};
    if (rope_llama3) {
        if (!llama) return pl_cli_error("synth: --rope-llama3 needs --arch llama");
        if (sscanf(rope_llama3, "%lf:%lf:%lf:%lf", &r3[0], &r3[1], &r3[2], &r3[3]) != 4 || !(r3[0] >= 1) ||
            !(r3[1] > 0) || !(r3[2] > r3[1]) || !(r3[3] >= 1) || !isfinite(r3[0] + r3[1] + r3[2] + r3[3]))
            return pl_cli_error("synth: bad --rope-llama3 '%s' (FACTOR:LOW:HIGH:CTX, factor >= 1, 0 < low < high, "
                                "ctx >= 1)", rope_llama3);
    }
    pl_dtype wt;
    const pl_ftype_info *mix = NULL;
    if (!pl_dtype_from_name(type, &wt) || !pl_can_quantize(wt) || wt == PL_Q8_K || wt == PL_Q8_1) {
        mix = pl_ftype_find(type);
        if (!mix || mix->needs_imatrix) return pl_cli_error("synth: unsupported --type '%s'", type);
        wt = mix->base;
    }

    pl_gguf *vg = NULL;
    if (pl_gguf_open(vocab, &vg) != PL_OK) return pl_cli_error("%s", pl_last_error());
    uint64_t n_vocab = 0;
    pl_gguf_type et;
    const void *ad;
    if (pl_gguf_get_arr(vg, "tokenizer.ggml.tokens", &et, &n_vocab, &ad) != PL_OK) {
        pl_gguf_close(vg);
        return pl_cli_error("synth: %s has no tokenizer.ggml.tokens", vocab);
    }
    const int64_t V = (int64_t)n_vocab;

    pl_gguf_writer *w = NULL;
    pl_gguf_writer_create(&w);
    char name[128], key[96];
    pl_gguf_writer_add_str(w, "general.architecture", arch);
    snprintf(name, sizeof name, "synthetic %s %s %s", arch, d.name, type);
    pl_gguf_writer_add_str(w, "general.name", name);
    pl_gguf_writer_add_u32(w, "general.file_type", (uint32_t)(mix ? mix->ftype : file_type_of(wt)));
    pl_gguf_writer_add_u32(w, "general.quantization_version", 2);
    pl_gguf_writer_add_u32(w, akey(key, sizeof key, arch, "context_length"), 40960);
    pl_gguf_writer_add_u32(w, akey(key, sizeof key, arch, "embedding_length"), (uint32_t)d.n_embd);
    pl_gguf_writer_add_u32(w, akey(key, sizeof key, arch, "block_count"), (uint32_t)d.n_layer);
    pl_gguf_writer_add_u32(w, akey(key, sizeof key, arch, "feed_forward_length"), (uint32_t)d.n_ff);
    pl_gguf_writer_add_u32(w, akey(key, sizeof key, arch, "attention.head_count"), (uint32_t)d.n_head);
    pl_gguf_writer_add_u32(w, akey(key, sizeof key, arch, "attention.head_count_kv"), (uint32_t)d.n_head_kv);
    pl_gguf_writer_add_u32(w, akey(key, sizeof key, arch, "attention.key_length"), (uint32_t)d.head_dim);
    pl_gguf_writer_add_u32(w, akey(key, sizeof key, arch, "attention.value_length"), (uint32_t)d.head_dim);
    pl_gguf_writer_add_f32(w, akey(key, sizeof key, arch, "attention.layer_norm_rms_epsilon"), 1e-6f);
    pl_gguf_writer_add_f32(w, akey(key, sizeof key, arch, "rope.freq_base"), 1000000.0f);
    if (moe) synth_moe_keys(w, arch, &xm);
    if (gemma3) synth_gemma3_keys(w, window, softcap);
    for (int64_t i = 0; i < pl_gguf_n_kv(vg); i++) {
        pl_gguf_str k = pl_gguf_kv_key(vg, i);
        if (k.len > 10 && !memcmp(k.ptr, "tokenizer.", 10)) pl_gguf_writer_copy_kv(w, vg, i);
    }

    /* Tensor list in llama.cpp's converter order. */
    size_t cap = (size_t)d.n_layer * 13 + 4, n = 0;   /* the most tensors per layer (gemma3), + rope_freqs */
    synth_tensor *ts = calloc(cap, sizeof *ts);
    fill_user *users = calloc(cap, sizeof *users);
    const int64_t E = d.n_embd, H = d.n_head, G = d.n_head_kv, D = d.head_dim, F = d.n_ff;
#define ADD_T(dt, nd, a, b, norm, ...)                                              \
    do {                                                                            \
        synth_tensor *t = &ts[n++];                                                 \
        snprintf(t->name, sizeof t->name, __VA_ARGS__);                             \
        t->dtype = (dt); t->n_dims = (nd); t->ne[0] = (a); t->ne[1] = (b); t->ne[2] = 1; \
        t->is_norm = (norm); t->seed = hash_name(t->name, (uint64_t)seed);          \
    } while (0)
    float *rope_factors = NULL;
    if (rope_llama3) {
        /* first, as the converter yields its extra tensors first */
        rope_factors = malloc((size_t)(D / 2) * sizeof *rope_factors);
        llama3_rope_factors(rope_factors, D, 1000000.0, r3[0], r3[1], r3[2], r3[3]);
        ADD_T(PL_F32, 1, D / 2, 1, false, "rope_freqs.weight");
        ts[n - 1].values = rope_factors;
    }
    ADD_T(wt, 2, E, V, false, "token_embd.weight");
    for (int64_t l = 0; l < d.n_layer; l++) {
        int li = (int)l;
        ADD_T(PL_F32, 1, E, 1, true, "blk.%d.attn_norm.weight", li);
        ADD_T(wt, 2, E, H * D, false, "blk.%d.attn_q.weight", li);
        ADD_T(wt, 2, E, G * D, false, "blk.%d.attn_k.weight", li);
        ADD_T(wt, 2, E, G * D, false, "blk.%d.attn_v.weight", li);
        ADD_T(wt, 2, H * D, E, false, "blk.%d.attn_output.weight", li);
        if (!llama) {
            ADD_T(PL_F32, 1, D, 1, true, "blk.%d.attn_q_norm.weight", li);
            ADD_T(PL_F32, 1, D, 1, true, "blk.%d.attn_k_norm.weight", li);
        }
        ADD_T(PL_F32, 1, E, 1, true, "blk.%d.ffn_norm.weight", li);
        if (moe) {
            n += synth_moe_tensors(&ts[n], li, E, &xm, wt, (uint64_t)seed);
            continue;
        }
        ADD_T(wt, 2, E, F, false, "blk.%d.ffn_gate.weight", li);
        ADD_T(wt, 2, E, F, false, "blk.%d.ffn_up.weight", li);
        ADD_T(wt, 2, F, E, false, "blk.%d.ffn_down.weight", li);
        if (gemma3) { /* the sandwich norms (stored with Gemma's + 1 already in, as the converter writes them) */
            ADD_T(PL_F32, 1, E, 1, true, "blk.%d.post_attention_norm.weight", li);
            ADD_T(PL_F32, 1, E, 1, true, "blk.%d.post_ffw_norm.weight", li);
        }
    }
    ADD_T(PL_F32, 1, E, 1, true, "output_norm.weight");
    if (!d.tied) ADD_T(wt, 2, E, V, false, "output.weight");
#undef ADD_T

    synth_ctx sc = {0};
    int rc = 0;
    if (mix) {
        const pl_mix_model mm = {d.n_layer, d.n_head, d.n_head_kv, moe ? xm.n_expert : 0};
        if (synth_apply_mix(mix, &mm, ts, n) != PL_OK) { rc = pl_cli_error("%s", pl_last_error()); goto done; }
    }
    int64_t max_row = E > F ? E : F;
    if (moe && xm.n_ff_exp > max_row) max_row = xm.n_ff_exp;
    if (H * D > max_row) max_row = H * D;
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
    return rc;
}

PL_CLI_COMMAND(pl_cmd_synth, "synth", "write a random-weight checkpoint of real Qwen3 shapes", cmd_synth)
