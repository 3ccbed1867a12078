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

static const pl_hparam_decl llama_hparams[] = {PL_DENSE_HPARAMS, PL_HK_READ("{arch}.rope.scaling.type"),
                                               PL_HK_READ("{arch}.rope.scaling.factor"), PL_HPARAMS_END};

/* rope_freqs.weight (llama3 frequency factors: [n_rot/2] F32, shared by every
 * layer as llama.cpp's TENSOR_DUPLICATED binding of layer 0's) comes first,
 * as the converter yields its extra tensors first. */
static const pl_tensor_decl llama_tensors[] = {
    {"rope_freqs.weight", PL_TR_FACTORS, PL_TD_OPTIONAL, PL_GW_ROPE_FREQS, 1, {PL_DIM_ROT_HALF}},
    PL_DENSE_T_EMBD,
    PL_DENSE_T_ATTN,
    PL_DENSE_T_QKV_BIAS(PL_TD_UNWRITTEN | PL_TD_OPTIONAL),
    PL_DENSE_T_FFN_NORM,
    PL_DENSE_T_FFN,
    PL_DENSE_T_OUTPUT,
    PL_TENSORS_END};

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
    PL_TRY(pl_dense_read_hparams(m, 0, true));
    PL_TRY(pl_arch_bind_tensors(m, llama_tensors));
    PL_TRY(pl_dense_check_bias(m));
    const pl_tensor *rope_freqs = m->globals[PL_GW_ROPE_FREQS];
    if (rope_freqs && rope_freqs->data) {
        const float *f = (const float *)rope_freqs->data;
        for (int64_t i = 0; i < m->hp.n_rot / 2; i++)
            if (!(f[i] > 0.0f) || !isfinite(f[i]))
                return pl_errorf(PL_ERR_FORMAT, "%s: rope_freqs.weight[%lld] = %g is not a finite factor > 0",
                                 m->file_name, (long long)i, (double)f[i]);
    }
    return PL_OK;
}

const pl_arch pl_arch_llama = {
    .name = "llama",
    .summary = "Llama 2/3 dense (GQA, SwiGLU, normal RoPE, optional Q/K/V biases, llama3 RoPE factors)",
    .hparams = llama_hparams, .tensors = llama_tensors, .presets = pl_qwen3_presets, .synth = true,
    .load = llama_load, .build = pl_dense_build, .capacity = pl_arch_qwen_capacity};
