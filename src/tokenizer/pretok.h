/*
 * Pre-tokenizers (private to src/tokenizer): split text into the "words" that
 * BPE merges never cross, selected by the GGUF key tokenizer.ggml.pre.
 *
 * Each splitter reproduces one of llama.cpp's hand-written splitters in
 * unicode.cpp (unicode_regex_split_custom_*), not the regex it is named
 * after: where the two could differ, the function is what the reference
 * engine runs.
 */
#ifndef PL_TOKENIZER_PRETOK_H
#define PL_TOKENIZER_PRETOK_H
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

typedef enum pl_pretok_kind {
    /* (?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+ */
    PL_PRETOK_QWEN2,
    /* the same with \p{N}{1,3} */
    PL_PRETOK_LLAMA3,
    /* 's|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+ */
    PL_PRETOK_GPT2,
    /* \p{N} first (every digit alone), then GPT2 on the pieces between digits (smollm, starcoder) */
    PL_PRETOK_DIGITS_GPT2,
} pl_pretok_kind;

/* One row of the tokenizer.ggml.pre table. */
typedef struct pl_pretok_info {
    const char *name;        /* value of tokenizer.ggml.pre */
    pl_pretok_kind kind;
    bool ignore_merges;      /* a word that is itself a token skips BPE (llama3) */
    bool add_bos_default;    /* add_bos when tokenizer.ggml.add_bos_token is absent */
    bool clean_spaces;       /* llama.cpp's clean_spaces (for detokenizers) */
} pl_pretok_info;

/* The row for a tokenizer.ggml.pre value, or NULL if not supported. */
const pl_pretok_info *pl_pretok_find(const char *name, size_t len);

/* End (exclusive, > pos) of the word that starts at cps[pos], pos < n.
 * cps is one fragment of text (between special tokens) as codepoints. */
size_t pl_pretok_next(pl_pretok_kind kind, const uint32_t *cps, size_t n, size_t pos);

#endif
