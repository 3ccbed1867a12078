#!/usr/bin/env python3
"""Writes the seeds of fuzz_chat_template_gguf: one small GGUF v3 file per
real template in tests/fixtures/templates/ (metadata only, no tensors): the
template under tokenizer.chat_template, a four-token gpt2 vocabulary whose
first two tokens are that model's BOS and EOS text, and their ids. Plus a file
with no template and one whose template holds a NUL byte.

    python3 tests/fuzz/make_chat_template_gguf_seeds.py [OUT_DIR]

(default OUT_DIR: tests/fuzz/seeds/fuzz_chat_template_gguf)."""
import os
import struct
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
TEMPLATES = os.path.join(HERE, "..", "fixtures", "templates")

# BOS/EOS text of each model family (as its tokenizer_config.json has it)
SPECIAL = {
    "HuggingFaceTB-SmolLM3-3B": ("<|im_start|>", "<|im_end|>"),
    "Qwen-Qwen2.5-7B-Instruct": ("<|endoftext|>", "<|im_end|>"),
    "Qwen-Qwen3-0.6B": ("<|endoftext|>", "<|im_end|>"),
    "deepseek-ai-DeepSeek-R1-Distill-Qwen-32B": ("<\uff5cbegin\u2581of\u2581sentence\uff5c>",
                                                  "<\uff5cend\u2581of\u2581sentence\uff5c>"),
    "google-gemma-2-2b-it": ("<bos>", "<eos>"),
    "meta-llama-Llama-3.2-3B-Instruct": ("<|begin_of_text|>", "<|eot_id|>"),
    "microsoft-Phi-3.5-mini-instruct": ("<s>", "<|endoftext|>"),
    "mistralai-Mistral-Nemo-Instruct-2407": ("<s>", "</s>"),
}


def s(b):
    if isinstance(b, str):
        b = b.encode()
    return struct.pack("<Q", len(b)) + b


def kv_str(k, v):
    return s(k) + struct.pack("<I", 8) + s(v)


def kv_u32(k, v):
    return s(k) + struct.pack("<II", 4, v)


def kv_arr_str(k, items):
    return s(k) + struct.pack("<IIQ", 9, 8, len(items)) + b"".join(s(x) for x in items)


def kv_arr_i32(k, items):
    return s(k) + struct.pack("<IIQ", 9, 5, len(items)) + b"".join(struct.pack("<i", x) for x in items)


def gguf(template, bos, eos):
    kvs = [kv_str("general.architecture", "qwen3"),
           kv_str("tokenizer.ggml.model", "gpt2"),
           kv_str("tokenizer.ggml.pre", "qwen2"),
           kv_arr_str("tokenizer.ggml.tokens", [bos, eos, "a", "b"]),
           kv_arr_i32("tokenizer.ggml.token_type", [3, 3, 1, 1]),
           kv_arr_str("tokenizer.ggml.merges", []),
           kv_u32("tokenizer.ggml.bos_token_id", 0),
           kv_u32("tokenizer.ggml.eos_token_id", 1)]
    if template is not None:
        kvs.append(kv_str("tokenizer.chat_template", template))
    return struct.pack("<4sIQQ", b"GGUF", 3, 0, len(kvs)) + b"".join(kvs)


def main():
    out = sys.argv[1] if len(sys.argv) > 1 else os.path.join(HERE, "seeds", "fuzz_chat_template_gguf")
    os.makedirs(out, exist_ok=True)
    for name in sorted(os.listdir(TEMPLATES)):
        if not name.endswith(".jinja"):
            continue
        model = name[:-len(".jinja")]
        bos, eos = SPECIAL.get(model, ("<s>", "</s>"))
        t = open(os.path.join(TEMPLATES, name), "rb").read()
        open(os.path.join(out, model + ".gguf"), "wb").write(gguf(t, bos, eos))
    open(os.path.join(out, "no-template.gguf"), "wb").write(gguf(None, "<s>", "</s>"))
    open(os.path.join(out, "nul-in-template.gguf"), "wb").write(
        gguf(b"{{ bos_token }}\0{% for m in messages %}{{ m.content }}{% endfor %}", "<s>", "</s>"))


if __name__ == "__main__":
    main()
