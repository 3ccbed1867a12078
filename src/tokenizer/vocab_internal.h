/*
 * The pl_vocab structure, shared by vocab.c (loading, lookups, pieces) and
 * tokenize.c (special-token partition + BPE). Private to src/tokenizer.
 */
#ifndef PL_TOKENIZER_VOCAB_INTERNAL_H
#define PL_TOKENIZER_VOCAB_INTERNAL_H
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include "tokenizer/pretok.h"
#include "tokenizer/tokenizer.h"

/* Token attributes, as llama.cpp's llama_token_attr: derived from the GGUF
 * token type, then adjusted by the load-time rules (EOG-looking tokens become
 * CONTROL, ...). Bit flags: a token may carry several. */
enum {
    PL_ATTR_UNKNOWN = 1 << 0,
    PL_ATTR_UNUSED = 1 << 1,
    PL_ATTR_NORMAL = 1 << 2,
    PL_ATTR_CONTROL = 1 << 3,
    PL_ATTR_USER_DEFINED = 1 << 4,
    PL_ATTR_BYTE = 1 << 5,
    PL_ATTR_LSTRIP = 1 << 6,     /* never set yet (model-name rules of llama.cpp) */
    PL_ATTR_RSTRIP = 1 << 7,
    PL_ATTR_EOG = 1 << 8,        /* ours: member of llama.cpp's special_eog_ids */
};

typedef struct pl_tok_slot {
    uint32_t id1;      /* token id + 1; 0 = empty */
    uint32_t hash_hi;  /* upper half of the text's hash */
} pl_tok_slot;

typedef struct pl_merge_slot {
    uint64_t key;      /* ((uint64)left+1) << 32 | (right+1); 0 = empty */
    uint32_t rank;
    int32_t result;    /* token id of left+right, or -1 */
} pl_merge_slot;

/* A merge whose halves are not both tokens (llama.cpp tolerates those). */
typedef struct pl_str_merge {
    uint32_t left_off, left_len, right_off, right_len;  /* into merge_arena */
    uint32_t rank;
    uint64_t hash;
} pl_str_merge;

struct pl_vocab {
    int32_t n_tokens;

    /* token texts, NUL-terminated, in one arena */
    char *arena;
    uint32_t *tok_off;
    uint32_t *tok_len;
    uint8_t *tok_type;      /* GGUF token type as stored (unknown values -> 0) */
    uint16_t *attr;         /* PL_ATTR_* */

    /* text -> id: open addressing with linear probing. Each slot keeps 32
     * bits of the hash and where the text is, so that a lookup costs one
     * cache miss for the slot and one for the text. */
    pl_tok_slot *tok_map;
    uint64_t tok_map_mask;

    /* (left id, right id) -> rank and the id of the merged text, one 16-byte
     * slot per entry so a probe is a single cache line */
    pl_merge_slot *merges;
    uint64_t merge_mask;

    /* merges with a half that is not a token (rare; usually none) */
    char *merge_arena;
    pl_str_merge *str_merges;
    uint32_t n_str_merges;
    uint32_t *str_merge_map;  /* slot = index + 1 */
    uint64_t str_merge_mask;

    /* byte b's GPT-2 character: its UTF-8 (1-2 bytes), its token id */
    char gpt2_enc[256][2];
    uint8_t gpt2_len[256];
    int32_t byte_tok[256];    /* id of the token spelled gpt2_enc[b], or -1 */
    int32_t single_tok[256];  /* id of the token whose text is the 1-byte string b, or -1 */

    /* special-token ids (-1 = none) */
    int32_t bos, eos, eot, eom, unk, sep, pad, mask;
    int32_t fim_pre, fim_suf, fim_mid, fim_pad, fim_rep, fim_sep;
    bool add_bos, add_eos;

    /* control / user-defined / unknown tokens, longest text first */
    int32_t *special;
    int32_t n_special;

    const pl_pretok_info *pretok;

    /* SentencePiece vocabularies (tokenizer.ggml.model "llama"; spm.c) */
    bool spm;
    bool add_space_prefix;    /* tokenizer.ggml.add_space_prefix, default true */
    float *scores;            /* [n_tokens], NULL when the file has none */
    int32_t spm_byte_tok[256];/* byte fallback: <0xXX>, else the 1-byte token, else -1 */
};

uint64_t pl_tok_hash(const void *p, size_t n);
/* Id of the token whose stored text is s[0..n), or -1. */
int32_t pl_vocab_lookup(const pl_vocab *v, const char *s, size_t n);
/* Rank of merging two adjacent symbols (ids, -1 if not a token; texts for the
 * rare string fallback), or -1 if they do not merge. *result gets the merged
 * token id (or -1). */
int32_t pl_vocab_merge_rank(const pl_vocab *v, int32_t left, int32_t right,
                            const char *ltext, size_t llen, const char *rtext, size_t rlen,
                            int32_t *result);

#endif
