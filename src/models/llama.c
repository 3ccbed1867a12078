/*
 * Llama (Llama 2 / 3 / 3.1 / 3.2, TinyLlama, SmolLM, Mistral-7B dense): the
 * dense decoder of qwen.c with normal (adjacent-pair) RoPE, no Q/K norms,
 * optional Q/K/V biases, tied or untied output, as llama.cpp's LLM_ARCH_LLAMA.
 *
 * RoPE scaling as the file declares it: linear (rope.scaling.type = linear,
 * freq_scale = 1 / rope.scaling.factor) and llama3's frequency factors
 * (Llama 3.1+: rope_freqs.weight, F32 [n_rot/2], one tensor for all layers;
 * theta_i is divided by factor i). llama.cpp's converter declares llama3
 * scaling by that tensor alone (no rope.scaling.type: llama.cpp knows only
 * none/linear/yarn/longrope), so that is what is read here.
 *
 * Refused at load with the key or tensor named: rope.scaling.type other than
 * none/linear (yarn, longrope), a rope_freqs.weight of the wrong shape, type
 * or with a factor that is not finite and > 0, and an attention output bias.
 */
#include "models/dense.h"
#include "core/status.h"
#include "gguf/gguf.h"
#include <math.h>
#include <stdio.h>
#include <string.h>

static const char *const llama_keys[] = {
    "{arch}.context_length", "{arch}.embedding_length", "{arch}.block_count",
    "{arch}.feed_forward_length", "{arch}.attention.head_count",
    "{arch}.attention.head_count_kv", "{arch}.attention.key_length",
    "{arch}.attention.value_length", "{arch}.attention.layer_norm_rms_epsilon",
    "{arch}.rope.freq_base", "{arch}.rope.dimension_count", "{arch}.rope.scaling.type",
    "{arch}.rope.scaling.factor", NULL};

static pl_status llama_load(pl_model *m) {
    char key[160];
    pl_gguf_str type = {0};
    snprintf(key, sizeof key, "%s.rope.scaling.type", m->arch_name);
    pl_status st = pl_gguf_get_str(m->gguf, key, &type);
    if (st != PL_OK && st != PL_ERR_NOT_FOUND) return st;
    if (st == PL_OK && !(type.len == 4 && !memcmp(type.ptr, "none", 4)) &&
        !(type.len == 6 && !memcmp(type.ptr, "linear", 6)))
        return pl_errorf(PL_ERR_UNSUPPORTED, "%s: %s = '%.*s' is not supported (none and linear are)", m->file_name,
                         key, (int)(type.len < 64 ? type.len : 64), type.ptr);
    if (pl_gguf_find_tensor(m->gguf, "blk.0.attn_output.bias"))
        return pl_errorf(PL_ERR_UNSUPPORTED, "%s: blk.0.attn_output.bias is not supported", m->file_name);
    PL_TRY(pl_dense_load(m, false, PL_DENSE_BIAS_OPTIONAL, 0));
    /* llama3 frequency factors: [n_rot/2] F32 (n_rot from rope.dimension_count,
     * read by pl_dense_load), shared by every layer as llama.cpp's
     * TENSOR_DUPLICATED binding of layer 0's. */
    PL_TRY(pl_model_bind(m, &m->rope_freqs, false, PL_DTMASK(PL_F32), 1, (int64_t[]){m->hp.n_rot / 2},
                         "rope_freqs.weight"));
    if (m->rope_freqs && m->rope_freqs->data) {
        const float *f = (const float *)m->rope_freqs->data;
        for (int64_t i = 0; i < m->hp.n_rot / 2; i++)
            if (!(f[i] > 0.0f) || !isfinite(f[i]))
                return pl_errorf(PL_ERR_FORMAT, "%s: rope_freqs.weight[%lld] = %g is not a finite factor > 0",
                                 m->file_name, (long long)i, (double)f[i]);
    }
    return PL_OK;
}

const pl_arch pl_arch_llama = {"llama", "Llama 2/3 dense (GQA, SwiGLU, normal RoPE, optional Q/K/V biases, llama3 RoPE factors)",
                               llama_keys, llama_load, pl_dense_build, pl_arch_qwen_capacity};
