/*
 * Per-tensor type rules of the file types (see quant/quantize_mix.h). The
 * branches follow llama.cpp's llama_tensor_get_type_impl for the file types
 * listed in k_ftypes; branches that only concern other file types (IQ3_*,
 * IQ4_*, IQ2_S/M, Q2_K_S, MXFP4) or other architectures (Falcon, 70B Llama)
 * are left out, which changes nothing for the types here because those
 * conditions are false for them.
 */
#include "quant/quantize_mix.h"
#include "core/status.h"
#include "gguf/gguf.h"
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

static const pl_ftype_info k_ftypes[] = {
    {"F32", PL_FTYPE_ALL_F32, PL_F32, false, "32-bit floats (no quantization)"},
    {"F16", PL_FTYPE_F16, PL_F16, false, "16-bit floats"},
    {"BF16", PL_FTYPE_BF16, PL_BF16, false, "bfloat16"},
    {"Q8_0", PL_FTYPE_Q8_0, PL_Q8_0, false, "8.5 bpw, near lossless"},
    {"Q6_K", PL_FTYPE_Q6_K, PL_Q6_K, false, "6.56 bpw"},
    {"Q5_K_M", PL_FTYPE_Q5_K_M, PL_Q5_K, false, "q5_K, q6_K for half of attn_v / ffn_down"},
    {"Q5_K_S", PL_FTYPE_Q5_K_S, PL_Q5_K, false, "q5_K"},
    {"Q5_1", PL_FTYPE_Q5_1, PL_Q5_1, false, "legacy 6 bpw"},
    {"Q5_0", PL_FTYPE_Q5_0, PL_Q5_0, false, "legacy 5.5 bpw"},
    {"Q4_K_M", PL_FTYPE_Q4_K_M, PL_Q4_K, false, "q4_K, q6_K for half of attn_v / ffn_down"},
    {"Q4_K_S", PL_FTYPE_Q4_K_S, PL_Q4_K, false, "q4_K, q5_K for the first attn_v / ffn_down"},
    {"Q4_1", PL_FTYPE_Q4_1, PL_Q4_1, false, "legacy 5 bpw"},
    {"Q4_0", PL_FTYPE_Q4_0, PL_Q4_0, false, "legacy 4.5 bpw"},
    {"Q3_K_L", PL_FTYPE_Q3_K_L, PL_Q3_K, false, "q3_K, q5_K attn_v / attn_output / ffn_down"},
    {"Q3_K_M", PL_FTYPE_Q3_K_M, PL_Q3_K, false, "q3_K, q4_K/q5_K attn_v / attn_output / ffn_down"},
    {"Q3_K_S", PL_FTYPE_Q3_K_S, PL_Q3_K, false, "q3_K"},
    {"Q2_K", PL_FTYPE_Q2_K, PL_Q2_K, false, "q2_K, q3_K attn_v / attn_output / ffn_down"},
    {"IQ2_XS", PL_FTYPE_IQ2_XS, PL_IQ2_XS, true, "2.31 bpw codebook"},
    {"IQ2_XXS", PL_FTYPE_IQ2_XXS, PL_IQ2_XXS, true, "2.06 bpw codebook"},
    {"IQ1_M", PL_FTYPE_IQ1_M, PL_IQ1_M, true, "1.75 bpw codebook"},
    {"IQ1_S", PL_FTYPE_IQ1_S, PL_IQ1_S, true, "1.56 bpw codebook"},
    {"TQ2_0", PL_FTYPE_TQ2_0, PL_TQ2_0, false, "ternary, 2.06 bpw"},
    {"TQ1_0", PL_FTYPE_TQ1_0, PL_TQ1_0, false, "ternary, 1.69 bpw"},
};

const pl_ftype_info *pl_ftypes(int *n) {
    *n = (int)(sizeof k_ftypes / sizeof k_ftypes[0]);
    return k_ftypes;
}

const pl_ftype_info *pl_ftype_find(const char *name) {
    for (size_t i = 0; i < sizeof k_ftypes / sizeof k_ftypes[0]; i++)
        if (!strcasecmp(name, k_ftypes[i].name)) return &k_ftypes[i];
    return NULL;
}

const pl_ftype_info *pl_ftype_by_id(int ftype) {
    for (size_t i = 0; i < sizeof k_ftypes / sizeof k_ftypes[0]; i++)
        if (k_ftypes[i].ftype == ftype) return &k_ftypes[i];
    return NULL;
}

/* ---- tensor names --------------------------------------------------------------*/

static bool has(const char *s, const char *sub) { return strstr(s, sub) != NULL; }

static bool ends_with(const char *s, const char *suf) {
    size_t n = strlen(s), k = strlen(suf);
    return n >= k && !strcmp(s + n - k, suf);
}

bool pl_mix_allows_quantization(const char *name, int n_dims) {
    if (n_dims < 2 || !ends_with(name, "weight")) return false;
    /* llama.cpp's exclusions: norms, MoE routers, tiny or positional tensors */
    static const char *const never[] = {"_norm.weight", "ffn_gate_inp.weight", "ffn_gate_tid2eid.weight", "altup",
                                        "laurel", "per_layer_model_proj", "ssm_conv1d", "shortconv.conv.weight",
                                        "indexer.k_proj.weight", "indexer.q_proj.weight", "time_mix_",
                                        "attn_rel_b.weight", ".position_embd", "sam.pos_embd", "sam.neck.",
                                        "sam.net_", ".rel_pos", ".patch_embd", ".patch_merger", "a.rvq.codebook",
                                        "mm.a.code_embd"};
    for (size_t i = 0; i < sizeof never / sizeof never[0]; i++)
        if (has(name, never[i])) return false;
    if (!strcmp(name, "position_embd.weight") || !strcmp(name, "token_types.weight")) return false;
    return true;
}

enum cat { C_TOKEN_EMBD, C_ATTN_Q, C_ATTN_V, C_ATTN_K, C_ATTN_QKV, C_ATTN_KV_B, C_ATTN_OUT, C_FFN_UP, C_FFN_GATE,
           C_FFN_DOWN, C_OUTPUT, C_OTHER };

static enum cat category(const char *n) {
    if (!strcmp(n, "output.weight")) return C_OUTPUT;
    if (!strcmp(n, "token_embd.weight") || !strcmp(n, "per_layer_token_embd.weight")) return C_TOKEN_EMBD;
    if (has(n, "attn_qkv.weight")) return C_ATTN_QKV;
    if (has(n, "attn_kv_b.weight")) return C_ATTN_KV_B;
    if (has(n, "attn_v.weight")) return C_ATTN_V;
    if (has(n, "attn_k.weight")) return C_ATTN_K;
    if (has(n, "attn_q.weight")) return C_ATTN_Q;
    if (has(n, "attn_output.weight")) return C_ATTN_OUT;
    if (has(n, "ffn_up")) return C_FFN_UP;
    if (has(n, "ffn_gate")) return C_FFN_GATE;
    if (has(n, "ffn_down")) return C_FFN_DOWN;
    return C_OTHER;
}

static bool is_attn_v(enum cat c) { return c == C_ATTN_V || c == C_ATTN_QKV || c == C_ATTN_KV_B; }

static int layer_of(const char *name) {
    int l = -1;
    if (sscanf(name, "blk.%d.", &l) != 1) l = -1;
    return l;
}

int pl_mix_compare(const void *pa, const void *pb) {
    const pl_mix_tensor *a = pa, *b = pb;
    const int la = layer_of(a->name), lb = layer_of(b->name);
    if (la != lb) return la < lb ? -1 : 1;
    return strcmp(a->name, b->name);
}

bool pl_mix_requires_imatrix(const char *name, pl_dtype t) {
    if (!strcmp(name, "token_embd.weight") || !strcmp(name, "per_layer_token_embd.weight") ||
        !strcmp(name, "output.weight"))
        return false;
    return t == PL_IQ3_XXS || t == PL_IQ2_XXS || t == PL_IQ2_XS || t == PL_IQ2_S || t == PL_IQ1_M || t == PL_IQ1_S;
}

/* ---- the rules ---------------------------------------------------------------------*/

typedef struct mix_state {
    int n_attention_wv, i_attention_wv;
    int n_ffn_down, i_ffn_down, i_ffn_gate, i_ffn_up;
    bool tied;
} mix_state;

/* llama.cpp's layer selection for the "_M" mixes: the first and last eighth
 * of the layers and every third one in between. */
static bool use_more_bits(int i_layer, int n_layers) {
    return i_layer < n_layers / 8 || i_layer >= 7 * n_layers / 8 || (i_layer - n_layers / 8) % 3 == 2;
}

static bool is_iq_low(int f) {
    return f == PL_FTYPE_IQ2_XXS || f == PL_FTYPE_IQ2_XS || f == PL_FTYPE_IQ1_S || f == PL_FTYPE_IQ1_M;
}

static pl_dtype rule(mix_state *qs, const pl_mix_model *mm, bool has_imatrix, int ftype, const pl_mix_tensor *t,
                     pl_dtype new_type) {
    const enum cat c = category(t->name);
    const int64_t n_gqa = mm->n_head_kv > 0 ? mm->n_head / mm->n_head_kv : 1;
    if (c == C_OUTPUT || (qs->tied && c == C_TOKEN_EMBD)) {
        const pl_dtype_traits *tr = pl_dtype_get((uint32_t)new_type);
        if (t->ne[0] % tr->block_size != 0) new_type = PL_Q8_0;
        else if (is_iq_low(ftype)) new_type = PL_Q5_K;
        else if (new_type != PL_Q8_0) new_type = PL_Q6_K;
    } else if (c == C_TOKEN_EMBD) {
        if (is_iq_low(ftype)) new_type = PL_Q2_K;
        else if (ftype == PL_FTYPE_TQ1_0 || ftype == PL_FTYPE_TQ2_0) new_type = PL_Q4_K;
    } else if (is_iq_low(ftype)) {
        if (is_attn_v(c)) {
            new_type = n_gqa >= 4 || mm->n_expert >= 4 ? PL_Q4_K : PL_Q2_K;
            qs->i_attention_wv++;
        } else if (mm->n_expert == 8 && c == C_ATTN_K) {
            new_type = PL_Q4_K;
        } else if (c == C_FFN_DOWN) {
            if (qs->i_ffn_down < qs->n_ffn_down / 8) new_type = PL_Q2_K;
            qs->i_ffn_down++;
        } else if (c == C_ATTN_OUT) {
            if (mm->n_expert == 8) new_type = PL_Q5_K;
            else if (ftype == PL_FTYPE_IQ1_S || ftype == PL_FTYPE_IQ1_M) new_type = PL_IQ2_XXS;
        }
    } else if (is_attn_v(c)) {
        if (ftype == PL_FTYPE_Q2_K) new_type = n_gqa >= 4 ? PL_Q4_K : PL_Q3_K;
        else if (ftype == PL_FTYPE_Q3_K_M) new_type = qs->i_attention_wv < 2 ? PL_Q5_K : PL_Q4_K;
        else if (ftype == PL_FTYPE_Q3_K_L) new_type = PL_Q5_K;
        else if ((ftype == PL_FTYPE_Q4_K_M || ftype == PL_FTYPE_Q5_K_M) &&
                 use_more_bits(qs->i_attention_wv, qs->n_attention_wv))
            new_type = PL_Q6_K;
        else if (ftype == PL_FTYPE_Q4_K_S && qs->i_attention_wv < 4) new_type = PL_Q5_K;
        if (mm->n_expert == 8) new_type = PL_Q8_0;
        qs->i_attention_wv++;
    } else if (c == C_ATTN_K) {
        if (mm->n_expert == 8) new_type = PL_Q8_0;
    } else if (c == C_FFN_DOWN) {
        /* dense models: the layer is the count of ffn_down tensors seen */
        int i_layer = qs->i_ffn_down, n_layer = qs->n_ffn_down;
        if (mm->n_expert > 1) {
            i_layer = layer_of(t->name);
            if (i_layer < 0 || i_layer >= n_layer) i_layer = qs->i_ffn_down;
        }
        if (ftype == PL_FTYPE_Q2_K) new_type = PL_Q3_K;
        else if (ftype == PL_FTYPE_Q3_K_M) new_type = i_layer < n_layer / 16 ? PL_Q5_K : PL_Q4_K;
        else if (ftype == PL_FTYPE_Q3_K_L) new_type = PL_Q5_K;
        else if (ftype == PL_FTYPE_Q4_K_M) {
            if (use_more_bits(i_layer, n_layer)) new_type = PL_Q6_K;
        } else if (ftype == PL_FTYPE_Q5_K_M && use_more_bits(i_layer, n_layer)) new_type = PL_Q6_K;
        else if (ftype == PL_FTYPE_Q4_K_S && i_layer < n_layer / 8) new_type = PL_Q5_K;
        else if ((ftype == PL_FTYPE_Q4_0 || ftype == PL_FTYPE_Q5_0) && has_imatrix && i_layer < n_layer / 8)
            new_type = ftype == PL_FTYPE_Q4_0 ? PL_Q4_1 : PL_Q5_1;
        qs->i_ffn_down++;
    } else if (c == C_ATTN_OUT) {
        if (mm->n_expert == 8) {
            if (ftype == PL_FTYPE_Q2_K || ftype == PL_FTYPE_Q3_K_S || ftype == PL_FTYPE_Q3_K_M ||
                ftype == PL_FTYPE_Q4_K_S || ftype == PL_FTYPE_Q4_K_M)
                new_type = PL_Q5_K;
        } else {
            if (ftype == PL_FTYPE_Q2_K) new_type = PL_Q3_K;
            else if (ftype == PL_FTYPE_Q3_K_M) new_type = PL_Q4_K;
            else if (ftype == PL_FTYPE_Q3_K_L) new_type = PL_Q5_K;
        }
    } else if (c == C_ATTN_QKV) {
        if (ftype == PL_FTYPE_Q3_K_M || ftype == PL_FTYPE_Q3_K_L) new_type = PL_Q4_K;
        else if (ftype == PL_FTYPE_Q4_K_M) new_type = PL_Q5_K;
        else if (ftype == PL_FTYPE_Q5_K_M) new_type = PL_Q6_K;
    } else if (c == C_FFN_GATE) {
        qs->i_ffn_gate++;
    } else if (c == C_FFN_UP) {
        qs->i_ffn_up++;
    }
    return new_type;
}

/* A type whose block fits rows of ne0 elements (llama.cpp's
 * tensor_type_fallback); *fell is set when the choice changed. */
static pl_dtype fallback(pl_dtype t, int64_t ne0, bool *fell) {
    const pl_dtype_traits *tr = pl_dtype_get((uint32_t)t);
    if (ne0 % tr->block_size == 0) return t;
    *fell = true;
    pl_dtype r;
    switch (t) {
    case PL_IQ1_S: case PL_IQ1_M: case PL_IQ2_XXS: case PL_IQ2_XS: case PL_IQ2_S: case PL_IQ3_XXS: case PL_IQ3_S:
    case PL_IQ4_XS: r = PL_IQ4_NL; break;
    case PL_Q2_K: case PL_Q3_K: case PL_TQ1_0: case PL_TQ2_0: r = PL_Q4_0; break;
    case PL_Q4_K: r = PL_Q5_0; break;
    case PL_Q5_K: r = PL_Q5_1; break;
    case PL_Q6_K: r = PL_Q8_0; break;
    default: r = PL_F16; break;
    }
    if (ne0 % pl_dtype_get((uint32_t)r)->block_size != 0) r = PL_F16;
    return r;
}

pl_status pl_mix_plan(const pl_ftype_info *ft, const pl_mix_model *mm, bool has_imatrix, pl_mix_tensor *ts,
                      int64_t n) {
    mix_state qs = {0};
    qs.tied = true;
    for (int64_t i = 0; i < n; i++) {
        const enum cat c = category(ts[i].name);
        if (is_attn_v(c)) qs.n_attention_wv++;
        if (c == C_OUTPUT) qs.tied = false;
    }
    qs.n_ffn_down = (int)mm->n_layer;
    const pl_dtype_traits *base = pl_dtype_get((uint32_t)ft->base);
    for (int64_t i = 0; i < n; i++) {
        pl_mix_tensor *t = &ts[i];
        t->fallback = false;
        if (!pl_mix_allows_quantization(t->name, t->n_dims)) {
            t->target = t->cur;
            continue;
        }
        pl_dtype nt = ft->base;
        if (base->quantized) {
            nt = rule(&qs, mm, has_imatrix, ft->ftype, t, nt);
            nt = fallback(nt, t->ne[0], &t->fallback);
        } else if (t->ne[0] % base->block_size) {
            nt = t->cur;
        }
        t->target = nt;
    }
    return PL_OK;
}

pl_status pl_mix_model_of(const pl_gguf *g, pl_mix_model *mm) {
    memset(mm, 0, sizeof *mm);
    pl_gguf_str arch;
    char key[160];
    if (pl_gguf_get_str(g, "general.architecture", &arch) != PL_OK || arch.len > 100)
        return pl_errorf(PL_ERR_FORMAT, "%s: no general.architecture", pl_gguf_name(g));
#define HP(field, suffix, def)                                                                     \
    do {                                                                                            \
        snprintf(key, sizeof key, "%.*s.%s", (int)arch.len, arch.ptr, suffix);                      \
        if (pl_gguf_get_i64(g, key, &mm->field) != PL_OK) mm->field = (def);                        \
    } while (0)
    HP(n_layer, "block_count", 0);
    HP(n_head, "attention.head_count", 1);
    HP(n_head_kv, "attention.head_count_kv", mm->n_head);
    HP(n_expert, "expert_count", 0);
#undef HP
    if (mm->n_layer <= 0) return pl_errorf(PL_ERR_FORMAT, "%s: no %.*s.block_count", pl_gguf_name(g), (int)arch.len, arch.ptr);
    return PL_OK;
}

