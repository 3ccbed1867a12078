/*
 * Llama (Llama 2 / 3 / 3.1 / 3.2, TinyLlama, SmolLM, Mistral-7B dense): the
 * dense decoder of qwen.c with normal (adjacent-pair) RoPE, no Q/K norms,
 * optional Q/K/V biases, tied or untied output, as llama.cpp's LLM_ARCH_LLAMA.
 *
 * Not yet supported, refused at load with the key or tensor named: llama3's
 * RoPE frequency factors (rope_freqs.weight, Llama 3.1+ long-context
 * scaling) and RoPE scaling other than linear; an attention output bias.
 */
#include "models/dense.h"
#include "core/status.h"
#include "gguf/gguf.h"
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
    if (pl_gguf_find_tensor(m->gguf, "rope_freqs.weight"))
        return pl_errorf(PL_ERR_UNSUPPORTED,
                         "%s: rope_freqs.weight (llama3 RoPE frequency factors) is not supported yet", m->file_name);
    if (pl_gguf_find_tensor(m->gguf, "blk.0.attn_output.bias"))
        return pl_errorf(PL_ERR_UNSUPPORTED, "%s: blk.0.attn_output.bias is not supported", m->file_name);
    return pl_dense_load(m, false, PL_DENSE_BIAS_OPTIONAL, 0);
}

const pl_arch pl_arch_llama = {"llama", "Llama 2/3 dense (GQA, SwiGLU, normal RoPE, optional Q/K/V biases)",
                               llama_keys, llama_load, pl_dense_build, pl_arch_qwen_capacity};
