/*
 * Vocabulary loading (tokenizer.ggml.* keys of a GGUF file), token lookups,
 * end-of-generation detection and detokenization of single tokens.
 *
 * Behaviour follows llama.cpp's llama_vocab::impl::load / token_to_piece,
 * with these deliberate differences (all on malformed or unusual files,
 * where llama.cpp either warns and carries on or aborts):
 *   - tokens / token_type / scores arrays of different lengths are an error
 *     (llama.cpp accepts longer token_type / scores arrays);
 *   - a special-token id key out of range is an error (llama.cpp warns and
 *     keeps its default); missing keys mean "none" (llama.cpp's gpt2 default
 *     of bos = eos = 11 is a legacy of GPT-2 itself and is not copied);
 *   - a merge must be exactly two non-empty halves around exactly one
 *     space, else loading fails: llama.cpp records one without a space as
 *     the pair ("", ""), which can never match, and splits one with more
 *     spaces at the first space after position 0 ("a b x y" -> "a" and
 *     "b x y", checked with the reference build), which silently disables
 *     the merge the file meant and so changes the tokenization. Byte-level
 *     BPE text never holds a raw space (it is spelled U+0120), so a correct
 *     file has none of those. Merges whose halves are not tokens are
 *     accepted, as llama.cpp does (the BPE can still form such symbols);
 *   - a missing tokenizer.ggml.pre is an error rather than llama.cpp's
 *     generic "default" pre-tokenizer, which is not implemented.
 *   - an empty token text stays empty: the token is a piece of zero bytes
 *     (detokenizes to nothing) that no text looks up and that never matches
 *     as a special token. llama.cpp renames it "[EMPTY_<id>]" (with a
 *     warning), so generating it printed that made-up text.
 * Everything else (duplicate token texts rejected, text-based EOG / EOT /
 * FIM detection, first merge of a duplicated pair wins) is as llama.cpp
 * does it.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "core/status.h"
#include "tokenizer/tokenizer.h"
#include "tokenizer/ucd.h"
#include "tokenizer/vocab_internal.h"

/* Bounds that keep every index in 32 bits; real vocabularies are far below. */
#define PL_VOCAB_MAX_TOKENS (1 << 26)
#define PL_VOCAB_MAX_MERGES (1u << 26)
#define PL_VOCAB_MAX_ARENA 0xF0000000u

/* ---- hashing ------------------------------------------------------------- */

static inline uint64_t mix64(uint64_t x) {
    /* splitmix64 finalizer: cheap and spreads short keys well */
    x ^= x >> 30;
    x *= 0xBF58476D1CE4E5B9ull;
    x ^= x >> 27;
    x *= 0x94D049BB133111EBull;
    x ^= x >> 31;
    return x;
}

uint64_t pl_tok_hash(const void *p, size_t n) {
    const unsigned char *s = p;
    uint64_t h = 0x9E3779B97F4A7C15ull ^ (uint64_t)n;
    while (n >= 8) {
        uint64_t k;
        memcpy(&k, s, 8);
        h = mix64(h ^ k);
        s += 8;
        n -= 8;
    }
    uint64_t k = 0;
    for (size_t i = 0; i < n; i++) k |= (uint64_t)s[i] << (8 * i);
    return mix64(h ^ k ^ 0xA5A5A5A5ull);
}

/* Power-of-two table size with a load factor of at most 3/4 (linear
 * probing stays short at that load and the tables stay small enough to
 * mostly live in cache). */
static uint64_t table_size_for(uint64_t n) {
    uint64_t sz = 16;
    while (sz * 3 < n * 4) sz <<= 1;
    return sz;
}

int32_t pl_vocab_lookup(const pl_vocab *v, const char *s, size_t n) {
    if (!v->tok_map) return -1;
    uint64_t h = pl_tok_hash(s, n);
    uint32_t hi = (uint32_t)(h >> 32);
    uint64_t i = h & v->tok_map_mask;
    for (;;) {
        const pl_tok_slot *slot = &v->tok_map[i];
        if (slot->id1 == 0) return -1;
        if (slot->hash_hi == hi) {
            uint32_t id = slot->id1 - 1;
            if (v->tok_len[id] == n && memcmp(v->arena + v->tok_off[id], s, n) == 0) return (int32_t)id;
        }
        i = (i + 1) & v->tok_map_mask;
    }
}

#if defined(__GNUC__)
#define PL_PREFETCH(p) __builtin_prefetch(p)
#else
#define PL_PREFETCH(p) ((void)0)
#endif

/* Looks up cnt strings at once: all hashes first, with their table slots
 * prefetched, then the probes. Loading a 150k-token vocabulary is mostly
 * cache misses in these tables, and overlapping them roughly halves it. */
#define LOOKUP_BATCH 32
static void lookup_batch(const pl_vocab *v, const char *const *s, const size_t *n, int32_t *out, size_t cnt) {
    uint64_t hash[LOOKUP_BATCH];
    for (size_t j = 0; j < cnt; j++) {
        hash[j] = pl_tok_hash(s[j], n[j]);
        PL_PREFETCH(&v->tok_map[hash[j] & v->tok_map_mask]);
    }
    for (size_t j = 0; j < cnt; j++) {
        uint32_t hi = (uint32_t)(hash[j] >> 32);
        uint64_t i = hash[j] & v->tok_map_mask;
        out[j] = -1;
        for (;;) {
            const pl_tok_slot *slot = &v->tok_map[i];
            if (slot->id1 == 0) break;
            if (slot->hash_hi == hi) {
                uint32_t id = slot->id1 - 1;
                if (v->tok_len[id] == n[j] && memcmp(v->arena + v->tok_off[id], s[j], n[j]) == 0) {
                    out[j] = (int32_t)id;
                    break;
                }
            }
            i = (i + 1) & v->tok_map_mask;
        }
    }
}

static inline uint64_t pair_key(int32_t l, int32_t r) {
    return ((uint64_t)(uint32_t)(l + 1) << 32) | (uint32_t)(r + 1);
}

static uint64_t str_pair_hash(const char *l, size_t ll, const char *r, size_t rl) {
    return mix64(pl_tok_hash(l, ll) * 0x9E3779B97F4A7C15ull ^ pl_tok_hash(r, rl));
}

int32_t pl_vocab_merge_rank(const pl_vocab *v, int32_t left, int32_t right,
                            const char *ltext, size_t llen, const char *rtext, size_t rlen,
                            int32_t *result) {
    if (left >= 0 && right >= 0) {
        /* Both halves are tokens: only the id map can hold the pair. */
        uint64_t key = pair_key(left, right);
        uint64_t i = mix64(key) & v->merge_mask;
        for (;;) {
            const pl_merge_slot *m = &v->merges[i];
            if (m->key == 0) return -1;
            if (m->key == key) {
                *result = m->result;
                return (int32_t)m->rank;
            }
            i = (i + 1) & v->merge_mask;
        }
    }
    if (v->n_str_merges == 0) return -1;
    uint64_t h = str_pair_hash(ltext, llen, rtext, rlen);
    uint64_t i = h & v->str_merge_mask;
    for (;;) {
        uint32_t slot = v->str_merge_map[i];
        if (slot == 0) return -1;
        const pl_str_merge *m = &v->str_merges[slot - 1];
        if (m->hash == h && m->left_len == llen && m->right_len == rlen &&
            memcmp(v->merge_arena + m->left_off, ltext, llen) == 0 &&
            memcmp(v->merge_arena + m->right_off, rtext, rlen) == 0) {
            *result = -1;
            if (rtext == ltext + llen) *result = pl_vocab_lookup(v, ltext, llen + rlen);
            return (int32_t)m->rank;
        }
        i = (i + 1) & v->str_merge_mask;
    }
}

/* ---- loading helpers ----------------------------------------------------- */

static const char K_MODEL[] = "tokenizer.ggml.model";
static const char K_PRE[] = "tokenizer.ggml.pre";
static const char K_TOKENS[] = "tokenizer.ggml.tokens";
static const char K_TYPES[] = "tokenizer.ggml.token_type";
static const char K_SCORES[] = "tokenizer.ggml.scores";
static const char K_MERGES[] = "tokenizer.ggml.merges";

static bool str_eq(pl_gguf_str s, const char *lit) {
    size_t n = strlen(lit);
    return s.len == n && memcmp(s.ptr, lit, n) == 0;
}

/* Prints at most 64 bytes of a file string into a message, with control and
 * non-ASCII bytes escaped, so hostile names cannot garble the message. */
static void printable(pl_gguf_str s, char *out, size_t cap) {
    size_t o = 0;
    for (uint64_t i = 0; i < s.len && i < 64 && o + 5 < cap; i++) {
        unsigned char c = (unsigned char)s.ptr[i];
        if (c >= 0x20 && c < 0x7F && c != '\'') out[o++] = (char)c;
        else o += (size_t)snprintf(out + o, cap - o, "\\x%02x", c);
    }
    if (s.len > 64 && o + 4 < cap) { memcpy(out + o, "...", 3); o += 3; }
    out[o < cap ? o : cap - 1] = 0;
}

static bool is_integer_type(pl_gguf_type t) {
    switch (t) {
        case PL_GGUF_UINT8: case PL_GGUF_INT8: case PL_GGUF_UINT16: case PL_GGUF_INT16:
        case PL_GGUF_UINT32: case PL_GGUF_INT32: case PL_GGUF_UINT64: case PL_GGUF_INT64:
            return true;
        default:
            return false;
    }
}

/* Looks a key up as an array; *found = false if absent. */
static pl_status get_array(const pl_gguf *g, const char *key, bool *found,
                           pl_gguf_type *et, uint64_t *n, const void **data) {
    *found = false;
    if (pl_gguf_find_key(g, key) < 0) return PL_OK;
    if (pl_gguf_kv_type(g, pl_gguf_find_key(g, key)) != PL_GGUF_ARRAY)
        return pl_errorf(PL_ERR_FORMAT, "%s: %s is not an array", pl_gguf_name(g), key);
    PL_TRY(pl_gguf_get_arr(g, key, et, n, data));
    *found = true;
    return PL_OK;
}

static void vocab_free_parts(pl_vocab *v) {
    free(v->arena);
    free(v->tok_off);
    free(v->tok_len);
    free(v->tok_type);
    free(v->attr);
    free(v->tok_map);
    free(v->merges);
    free(v->merge_arena);
    free(v->str_merges);
    free(v->str_merge_map);
    free(v->special);
    free(v->scores);
}

void pl_vocab_free(pl_vocab *v) {
    if (!v) return;
    vocab_free_parts(v);
    free(v);
}

static pl_status oom(const pl_gguf *g, const char *what) {
    return pl_errorf(PL_ERR_NO_MEMORY, "%s: out of memory building the tokenizer (%s)", pl_gguf_name(g), what);
}

/* Tokens: texts into one arena, the text -> id map, token types. */
static pl_status load_tokens(pl_vocab *v, const pl_gguf *g) {
    bool found;
    pl_gguf_type et;
    uint64_t n;
    const void *data;
    PL_TRY(get_array(g, K_TOKENS, &found, &et, &n, &data));
    if (!found) return pl_errorf(PL_ERR_FORMAT, "%s: no %s (the vocabulary) in the file", pl_gguf_name(g), K_TOKENS);
    if (et != PL_GGUF_STRING)
        return pl_errorf(PL_ERR_FORMAT, "%s: %s must be an array of strings, not %s", pl_gguf_name(g), K_TOKENS, pl_gguf_type_name(et));
    if (n == 0) return pl_errorf(PL_ERR_FORMAT, "%s: %s is empty", pl_gguf_name(g), K_TOKENS);
    if (n > PL_VOCAB_MAX_TOKENS)
        return pl_errorf(PL_ERR_FORMAT, "%s: %s has %llu entries (more than %d)", pl_gguf_name(g), K_TOKENS,
                         (unsigned long long)n, PL_VOCAB_MAX_TOKENS);
    v->n_tokens = (int32_t)n;

    /* First pass: arena size. */
    uint64_t total = 0;
    for (uint64_t i = 0; i < n; i++) {
        pl_gguf_str s;
        PL_TRY(pl_gguf_arr_str(g, K_TOKENS, i, &s));
        total += s.len + 1;
        if (total > PL_VOCAB_MAX_ARENA)
            return pl_errorf(PL_ERR_FORMAT, "%s: %s texts are too large (over %u bytes)", pl_gguf_name(g), K_TOKENS, PL_VOCAB_MAX_ARENA);
    }
    v->arena = malloc(total ? total : 1);
    v->tok_off = malloc(n * sizeof *v->tok_off);
    v->tok_len = malloc(n * sizeof *v->tok_len);
    v->tok_type = calloc(n, 1);
    v->attr = calloc(n, sizeof *v->attr);
    v->tok_map_mask = table_size_for(n) - 1;
    v->tok_map = calloc(v->tok_map_mask + 1, sizeof *v->tok_map);
    if (!v->arena || !v->tok_off || !v->tok_len || !v->tok_type || !v->attr || !v->tok_map)
        return oom(g, "token table");

    uint32_t off = 0;
    for (uint64_t i = 0; i < n; i++) {
        pl_gguf_str s;
        PL_TRY(pl_gguf_arr_str(g, K_TOKENS, i, &s));
        char *dst = v->arena + off;
        uint32_t len = (uint32_t)s.len;
        if (len) memcpy(dst, s.ptr, len);
        dst[len] = 0;
        v->tok_off[i] = off;
        v->tok_len[i] = len;
        off += len + 1;
    }

    /* text -> id, in blocks whose table slots are prefetched first */
    for (uint64_t base = 0; base < n; base += LOOKUP_BATCH) {
        uint64_t hash[LOOKUP_BATCH];
        size_t cnt = n - base < LOOKUP_BATCH ? (size_t)(n - base) : LOOKUP_BATCH;
        for (size_t j = 0; j < cnt; j++) {
            hash[j] = pl_tok_hash(v->arena + v->tok_off[base + j], v->tok_len[base + j]);
            PL_PREFETCH(&v->tok_map[hash[j] & v->tok_map_mask]);
        }
        for (size_t j = 0; j < cnt; j++) {
            uint64_t i = base + j;
            const char *text = v->arena + v->tok_off[i];
            uint32_t len = v->tok_len[i];
            uint64_t h = hash[j] & v->tok_map_mask;
            /* Empty tokens are not looked up by text: no word or merge is
             * empty, and several of them are not duplicates of each other. */
            if (len == 0) continue;
            for (;;) {
                pl_tok_slot *slot = &v->tok_map[h];
                if (slot->id1 == 0) {
                    slot->id1 = (uint32_t)i + 1;
                    slot->hash_hi = (uint32_t)(hash[j] >> 32);
                    break;
                }
                uint32_t other = slot->id1 - 1;
                if (slot->hash_hi == (uint32_t)(hash[j] >> 32) && v->tok_len[other] == len &&
                    memcmp(v->arena + v->tok_off[other], text, len) == 0) {
                    char buf[300];
                    pl_gguf_str t = {text, len};
                    printable(t, buf, sizeof buf);
                    return pl_errorf(PL_ERR_FORMAT, "%s: duplicate token in %s: '%s' has ids %u and %llu",
                                     pl_gguf_name(g), K_TOKENS, buf, other, (unsigned long long)i);
                }
                h = (h + 1) & v->tok_map_mask;
            }
        }
    }

    /* Token types (optional: all NORMAL without them, as llama.cpp). */
    PL_TRY(get_array(g, K_TYPES, &found, &et, &n, &data));
    if (found) {
        if (!is_integer_type(et))
            return pl_errorf(PL_ERR_FORMAT, "%s: %s must be an array of integers, not %s", pl_gguf_name(g), K_TYPES, pl_gguf_type_name(et));
        if (n != (uint64_t)v->n_tokens)
            return pl_errorf(PL_ERR_FORMAT, "%s: %s has %llu entries but %s has %d", pl_gguf_name(g), K_TYPES,
                             (unsigned long long)n, K_TOKENS, v->n_tokens);
    }
    for (int32_t i = 0; i < v->n_tokens; i++) {
        int64_t t = PL_TOKEN_TYPE_NORMAL;
        if (found) {
            if (et == PL_GGUF_INT32) {
                int32_t t32;
                memcpy(&t32, (const char *)data + 4 * (size_t)i, 4);
                t = t32;
            } else {
                PL_TRY(pl_gguf_arr_i64(g, K_TYPES, (uint64_t)i, &t));
            }
        }
        uint16_t a;
        switch (t) {
            case PL_TOKEN_TYPE_NORMAL: a = PL_ATTR_NORMAL; break;
            case PL_TOKEN_TYPE_UNKNOWN: a = PL_ATTR_UNKNOWN; break;
            case PL_TOKEN_TYPE_CONTROL: a = PL_ATTR_CONTROL; break;
            case PL_TOKEN_TYPE_USER_DEFINED: a = PL_ATTR_USER_DEFINED; break;
            case PL_TOKEN_TYPE_UNUSED: a = PL_ATTR_UNUSED; break;
            case PL_TOKEN_TYPE_BYTE: a = PL_ATTR_BYTE; break;
            default: a = 0; t = PL_TOKEN_TYPE_UNDEFINED; break;  /* llama.cpp: UNDEFINED */
        }
        v->tok_type[i] = (uint8_t)t;
        v->attr[i] = a;
    }

    /* Scores: not used by BPE, but a present array must match. */
    PL_TRY(get_array(g, K_SCORES, &found, &et, &n, &data));
    if (found) {
        if (!(et == PL_GGUF_FLOAT32 || et == PL_GGUF_FLOAT64 || is_integer_type(et)))
            return pl_errorf(PL_ERR_FORMAT, "%s: %s must be an array of numbers, not %s", pl_gguf_name(g), K_SCORES, pl_gguf_type_name(et));
        if (n != (uint64_t)v->n_tokens)
            return pl_errorf(PL_ERR_FORMAT, "%s: %s has %llu entries but %s has %d", pl_gguf_name(g), K_SCORES,
                             (unsigned long long)n, K_TOKENS, v->n_tokens);
        if (v->spm) {   /* SentencePiece merges by score */
            v->scores = malloc(n * sizeof *v->scores);
            if (!v->scores) return oom(g, "token scores");
            for (uint64_t i = 0; i < n; i++) {
                if (et == PL_GGUF_FLOAT32) memcpy(&v->scores[i], (const char *)data + 4 * i, 4);
                else {
                    double d = 0;
                    int64_t iv = 0;
                    if (et == PL_GGUF_FLOAT64) PL_TRY(pl_gguf_arr_f64(g, K_SCORES, i, &d));
                    else { PL_TRY(pl_gguf_arr_i64(g, K_SCORES, i, &iv)); d = (double)iv; }
                    v->scores[i] = (float)d;
                }
            }
        }
    } else if (v->spm) {
        return pl_errorf(PL_ERR_FORMAT, "%s: a SentencePiece vocabulary needs %s", pl_gguf_name(g), K_SCORES);
    }
    return PL_OK;
}

/* Growth state of the string-pair merge table while loading. */
typedef struct { size_t str_cap, arena_cap, arena_len; } str_merge_state;

/* Records a merge one of whose halves is not a token (llama.cpp keeps those
 * too: BPE can still form such a symbol when a merge result is missing from
 * the vocabulary). The first rank of a repeated pair stays. */
static pl_status add_str_merge(pl_vocab *v, const pl_gguf *g, str_merge_state *sm,
                               const char *l, size_t ll, const char *r, size_t rl, uint32_t rank) {
    if (!v->str_merge_map) {
        v->str_merge_mask = 63;
        v->str_merge_map = calloc(64, sizeof *v->str_merge_map);
        if (!v->str_merge_map) return oom(g, "merges");
    }
    uint64_t hash = str_pair_hash(l, ll, r, rl);
    uint64_t h = hash & v->str_merge_mask;
    while (v->str_merge_map[h] != 0) {
        const pl_str_merge *m = &v->str_merges[v->str_merge_map[h] - 1];
        if (m->hash == hash && m->left_len == ll && m->right_len == rl &&
            memcmp(v->merge_arena + m->left_off, l, ll) == 0 &&
            memcmp(v->merge_arena + m->right_off, r, rl) == 0)
            return PL_OK;  /* duplicate pair */
        h = (h + 1) & v->str_merge_mask;
    }
    if (sm->arena_len + ll + rl > PL_VOCAB_MAX_ARENA)
        return pl_errorf(PL_ERR_FORMAT, "%s: %s texts are too large", pl_gguf_name(g), K_MERGES);
    if (v->n_str_merges + 1 > sm->str_cap) {
        size_t ncap = sm->str_cap ? sm->str_cap * 2 : 64;
        pl_str_merge *nm = realloc(v->str_merges, ncap * sizeof *nm);
        if (!nm) return oom(g, "merges");
        v->str_merges = nm;
        sm->str_cap = ncap;
    }
    if (sm->arena_len + ll + rl > sm->arena_cap) {
        size_t ncap = (sm->arena_len + ll + rl) * 2 + 256;
        char *na = realloc(v->merge_arena, ncap);
        if (!na) return oom(g, "merges");
        v->merge_arena = na;
        sm->arena_cap = ncap;
    }
    pl_str_merge *m = &v->str_merges[v->n_str_merges];
    m->left_off = (uint32_t)sm->arena_len;
    m->left_len = (uint32_t)ll;
    memcpy(v->merge_arena + sm->arena_len, l, ll);
    sm->arena_len += ll;
    m->right_off = (uint32_t)sm->arena_len;
    m->right_len = (uint32_t)rl;
    memcpy(v->merge_arena + sm->arena_len, r, rl);
    sm->arena_len += rl;
    m->rank = rank;
    m->hash = hash;
    v->n_str_merges++;
    v->str_merge_map[h] = v->n_str_merges;
    /* keep the load factor at most 1/2 */
    if ((uint64_t)v->n_str_merges * 2 > v->str_merge_mask) {
        uint64_t nmask = v->str_merge_mask * 2 + 1;
        uint32_t *nmap = calloc(nmask + 1, sizeof *nmap);
        if (!nmap) return oom(g, "merges");
        for (uint32_t k = 0; k < v->n_str_merges; k++) {
            uint64_t p = v->str_merges[k].hash & nmask;
            while (nmap[p]) p = (p + 1) & nmask;
            nmap[p] = k + 1;
        }
        free(v->str_merge_map);
        v->str_merge_map = nmap;
        v->str_merge_mask = nmask;
    }
    return PL_OK;
}

/* Merges: "left right" strings, rank = position in the array. */
static pl_status load_merges(pl_vocab *v, const pl_gguf *g) {
    bool found;
    pl_gguf_type et;
    uint64_t n;
    const void *data;
    PL_TRY(get_array(g, K_MERGES, &found, &et, &n, &data));
    if (!found) return pl_errorf(PL_ERR_FORMAT, "%s: no %s in the file (a gpt2 tokenizer needs its merges)", pl_gguf_name(g), K_MERGES);
    if (et != PL_GGUF_STRING)
        return pl_errorf(PL_ERR_FORMAT, "%s: %s must be an array of strings, not %s", pl_gguf_name(g), K_MERGES, pl_gguf_type_name(et));
    if (n > PL_VOCAB_MAX_MERGES)
        return pl_errorf(PL_ERR_FORMAT, "%s: %s has %llu entries (more than %u)", pl_gguf_name(g), K_MERGES,
                         (unsigned long long)n, PL_VOCAB_MAX_MERGES);

    v->merge_mask = table_size_for(n) - 1;
    v->merges = calloc(v->merge_mask + 1, sizeof *v->merges);
    if (!v->merges) return oom(g, "merge table");

    str_merge_state sm = {0, 0, 0};
    pl_status st = PL_OK;
    /* Per block of merges: the halves, their ids, the concatenations. The
     * lookups are batched (see lookup_batch); the table inserts then run in
     * rank order, so the first of two equal pairs keeps its rank. */
    const char *bs[2 * LOOKUP_BATCH];
    size_t bn[2 * LOOKUP_BATCH];
    int32_t bid[2 * LOOKUP_BATCH], cid[LOOKUP_BATCH / 2];
    char *cbuf = NULL;
    size_t cbuf_cap = 0;

    for (uint64_t base = 0; base < n && st == PL_OK; base += LOOKUP_BATCH / 2) {
        size_t cnt = n - base < LOOKUP_BATCH / 2 ? (size_t)(n - base) : LOOKUP_BATCH / 2;
        size_t ctot = 0;
        for (size_t j = 0; j < cnt; j++) {
            uint64_t i = base + j;
            pl_gguf_str s;
            st = pl_gguf_arr_str(g, K_MERGES, i, &s);
            if (st != PL_OK) break;
            /* Exactly one space, with text on both sides (see the top). */
            const char *sp = s.len ? memchr(s.ptr, ' ', s.len) : NULL;
            if (!sp || sp == s.ptr || (uint64_t)(sp - s.ptr) + 1 >= s.len ||
                memchr(sp + 1, ' ', s.len - (uint64_t)(sp - s.ptr) - 1)) {
                char buf[300];
                printable(s, buf, sizeof buf);
                st = pl_errorf(PL_ERR_FORMAT,
                               "%s: %s[%llu] = '%s' is not two non-empty halves separated by exactly one space",
                               pl_gguf_name(g), K_MERGES, (unsigned long long)i, buf);
                break;
            }
            bs[2 * j] = s.ptr;
            bn[2 * j] = (size_t)(sp - s.ptr);
            bs[2 * j + 1] = sp + 1;
            bn[2 * j + 1] = (size_t)(s.len - bn[2 * j] - 1);
            ctot += (size_t)s.len;
        }
        if (st != PL_OK) break;
        lookup_batch(v, bs, bn, bid, 2 * cnt);

        /* the merged texts, for the id of each merge's result */
        if (ctot > cbuf_cap) {
            cbuf_cap = ctot * 2;
            char *nb = realloc(cbuf, cbuf_cap);
            if (!nb) { st = oom(g, "merges"); break; }
            cbuf = nb;
        }
        const char *cs[LOOKUP_BATCH / 2];
        size_t cn[LOOKUP_BATCH / 2], co = 0;
        for (size_t j = 0; j < cnt; j++) {
            memcpy(cbuf + co, bs[2 * j], bn[2 * j]);
            memcpy(cbuf + co + bn[2 * j], bs[2 * j + 1], bn[2 * j + 1]);
            cs[j] = cbuf + co;
            cn[j] = bn[2 * j] + bn[2 * j + 1];
            co += cn[j];
        }
        lookup_batch(v, cs, cn, cid, cnt);
        for (size_t j = 0; j < cnt; j++)
            if (bid[2 * j] >= 0 && bid[2 * j + 1] >= 0)
                PL_PREFETCH(&v->merges[mix64(pair_key(bid[2 * j], bid[2 * j + 1])) & v->merge_mask]);

        for (size_t j = 0; j < cnt && st == PL_OK; j++) {
            uint64_t i = base + j;
            const char *l = bs[2 * j], *r = bs[2 * j + 1];
            size_t ll = bn[2 * j], rl = bn[2 * j + 1];
            int32_t lid = bid[2 * j], rid = bid[2 * j + 1];
            if (lid >= 0 && rid >= 0) {
                uint64_t key = pair_key(lid, rid);
                uint64_t h = mix64(key) & v->merge_mask;
                while (v->merges[h].key != 0 && v->merges[h].key != key) h = (h + 1) & v->merge_mask;
                if (v->merges[h].key == key) continue;  /* duplicate pair: the first rank stays */
                v->merges[h].key = key;
                v->merges[h].rank = (uint32_t)i;
                v->merges[h].result = cid[j];
                continue;
            }
            /* A half that is not a token: keep the strings (rare). */
            st = add_str_merge(v, g, &sm, l, ll, r, rl, (uint32_t)i);
        }
    }
    free(cbuf);
    return st;
}

/* ---- special tokens ------------------------------------------------------ */

typedef struct { const char *key; size_t field; } special_key;

static pl_status load_special_ids(pl_vocab *v, const pl_gguf *g) {
    static const special_key keys[] = {
        {"tokenizer.ggml.bos_token_id", offsetof(pl_vocab, bos)},
        {"tokenizer.ggml.eos_token_id", offsetof(pl_vocab, eos)},
        {"tokenizer.ggml.eot_token_id", offsetof(pl_vocab, eot)},
        {"tokenizer.ggml.eom_token_id", offsetof(pl_vocab, eom)},
        {"tokenizer.ggml.unknown_token_id", offsetof(pl_vocab, unk)},
        {"tokenizer.ggml.seperator_token_id", offsetof(pl_vocab, sep)},  /* sic, as in GGUF */
        {"tokenizer.ggml.padding_token_id", offsetof(pl_vocab, pad)},
        {"tokenizer.ggml.mask_token_id", offsetof(pl_vocab, mask)},
        {"tokenizer.ggml.fim_pre_token_id", offsetof(pl_vocab, fim_pre)},
        {"tokenizer.ggml.fim_suf_token_id", offsetof(pl_vocab, fim_suf)},
        {"tokenizer.ggml.fim_mid_token_id", offsetof(pl_vocab, fim_mid)},
        {"tokenizer.ggml.fim_pad_token_id", offsetof(pl_vocab, fim_pad)},
        {"tokenizer.ggml.fim_rep_token_id", offsetof(pl_vocab, fim_rep)},
        {"tokenizer.ggml.fim_sep_token_id", offsetof(pl_vocab, fim_sep)},
        /* deprecated spellings, read after the current ones as llama.cpp does */
        {"tokenizer.ggml.prefix_token_id", offsetof(pl_vocab, fim_pre)},
        {"tokenizer.ggml.suffix_token_id", offsetof(pl_vocab, fim_suf)},
        {"tokenizer.ggml.middle_token_id", offsetof(pl_vocab, fim_mid)},
    };
    for (size_t k = 0; k < sizeof keys / sizeof keys[0]; k++) {
        int32_t *field = (int32_t *)((char *)v + keys[k].field);
        int64_t id;
        pl_status st = pl_gguf_get_i64(g, keys[k].key, &id);
        if (st == PL_ERR_NOT_FOUND) continue;
        if (st != PL_OK) return st;
        if (id < 0 || id >= v->n_tokens)
            return pl_errorf(PL_ERR_FORMAT, "%s: %s = %lld is outside the vocabulary (%d tokens)",
                             pl_gguf_name(g), keys[k].key, (long long)id, v->n_tokens);
        *field = (int32_t)id;
    }

    bool b;
    pl_status st = pl_gguf_get_bool(g, "tokenizer.ggml.add_bos_token", &b);
    if (st == PL_OK) v->add_bos = b;
    else if (st != PL_ERR_NOT_FOUND) return st;
    st = pl_gguf_get_bool(g, "tokenizer.ggml.add_eos_token", &b);
    if (st == PL_OK) v->add_eos = b;
    else if (st != PL_ERR_NOT_FOUND) return st;
    if (v->add_bos && v->bos < 0)
        return pl_errorf(PL_ERR_FORMAT, "%s: tokenizer.ggml.add_bos_token is true, but tokenizer.ggml.bos_token_id is not set", pl_gguf_name(g));
    if (v->add_eos && v->eos < 0)
        return pl_errorf(PL_ERR_FORMAT, "%s: tokenizer.ggml.add_eos_token is true, but tokenizer.ggml.eos_token_id is not set", pl_gguf_name(g));
    return PL_OK;
}

static int32_t find_text(const pl_vocab *v, const char *s) {
    return pl_vocab_lookup(v, s, strlen(s));
}

/* If *slot is unset, the token (lowest id) whose text is in list becomes it
 * and is made a control token. llama.cpp walks an unordered_map, so which of
 * several candidates wins is unspecified there; only the id of the slot
 * depends on it, not the EOG set. */
static void detect_by_text(pl_vocab *v, int32_t *slot, const char *const *list) {
    if (*slot >= 0) return;
    int32_t best = -1;
    for (; *list; list++) {
        int32_t id = find_text(v, *list);
        if (id >= 0 && (best < 0 || id < best)) best = id;
    }
    if (best >= 0) {
        *slot = best;
        v->attr[best] |= PL_ATTR_CONTROL;
    }
}

/* The text-based rules of llama.cpp's load(): EOT / EOM / FIM detection, the
 * end-of-generation set, and its model-specific workarounds. */
static void detect_special(pl_vocab *v) {
    static const char *const eot_texts[] = {
        "<|eot_id|>", "<|im_end|>", "<|end|>", "<end_of_turn>", "<|endoftext|>", "<|end_of_text|>",
        "<EOT>", "_<EOT>", "[EOT]", "<\xef\xbd\x9c" "end\xe2\x96\x81of\xe2\x96\x81sentence\xef\xbd\x9c>",
        "<end_of_utterance>", NULL};
    static const char *const eom_texts[] = {"<|eom_id|>", NULL};
    static const char *const fim_pre_texts[] = {
        "<|fim_prefix|>", "<fim-prefix>", "<fim_prefix>", "<\xef\xbd\x9c" "fim\xe2\x96\x81" "begin\xef\xbd\x9c>",
        "<PRE>", "\xe2\x96\x81<PRE>", "<|code_prefix|>", "<|prefix|>", NULL};
    static const char *const fim_suf_texts[] = {
        "<|fim_suffix|>", "<fim-suffix>", "<fim_suffix>", "<\xef\xbd\x9c" "fim\xe2\x96\x81hole\xef\xbd\x9c>",
        "<SUF>", "\xe2\x96\x81<SUF>", "<|code_suffix|>", "<|suffix|>", NULL};
    static const char *const fim_mid_texts[] = {
        "<|fim_middle|>", "<fim-middle>", "<fim_middle>", "<\xef\xbd\x9c" "fim\xe2\x96\x81" "end\xef\xbd\x9c>",
        "<MID>", "\xe2\x96\x81<MID>", "<|code_middle|>", "<|middle|>", NULL};
    static const char *const fim_pad_texts[] = {"<|fim_pad|>", "<fim-pad>", "<fim_pad>", "<PAD>", "[PAD]", NULL};
    static const char *const fim_rep_texts[] = {"<|fim_repo|>", "<|repo_name|>", "<fim-repo>", "<REPO>", "<reponame>", NULL};
    static const char *const fim_sep_texts[] = {"<|file_sep|>", NULL};
    static const char *const eog_texts[] = {
        "<|eot_id|>", "<|im_end|>", "<|end|>", "<|return|>", "<|call|>", "<|flush|>", "<|calls|>",
        "<end_of_turn>", "<|endoftext|>", "</s>", "<|eom_id|>", "<EOT>", "_<EOT>", "[EOT]", "[EOS]",
        "<|end_of_text|>", "<end_of_utterance>", "<eos>", "<turn|>", "<|tool_response>",
        "<\xef\xbd\x9c" "end\xe2\x96\x81of\xe2\x96\x81sentence\xef\xbd\x9c>", "[e~[", NULL};
    static const char *const always_user_defined[] = {"<|channel|>", "<|message|>", "<|start|>", "<|constrain|>", NULL};

    detect_by_text(v, &v->eot, eot_texts);
    detect_by_text(v, &v->eom, eom_texts);
    detect_by_text(v, &v->fim_pre, fim_pre_texts);
    detect_by_text(v, &v->fim_suf, fim_suf_texts);
    detect_by_text(v, &v->fim_mid, fim_mid_texts);
    detect_by_text(v, &v->fim_pad, fim_pad_texts);
    detect_by_text(v, &v->fim_rep, fim_rep_texts);
    detect_by_text(v, &v->fim_sep, fim_sep_texts);

    /* Control tokens named "unused..." are unused. */
    for (int32_t id = 0; id < v->n_tokens; id++) {
        if ((v->attr[id] & PL_ATTR_CONTROL) && strstr(v->arena + v->tok_off[id], "unused"))
            v->attr[id] |= PL_ATTR_UNUSED;
    }

    /* End of generation: FIM pad/repo/sep, every token with an EOG-looking
     * text (made control), then eos / eot / eom. */
    if (v->fim_pad >= 0) v->attr[v->fim_pad] |= PL_ATTR_EOG;
    if (v->fim_rep >= 0) v->attr[v->fim_rep] |= PL_ATTR_EOG;
    if (v->fim_sep >= 0) v->attr[v->fim_sep] |= PL_ATTR_EOG;
    for (const char *const *t = eog_texts; *t; t++) {
        int32_t id = find_text(v, *t);
        if (id >= 0) v->attr[id] |= PL_ATTR_EOG | PL_ATTR_CONTROL;
    }
    /* gpt-oss: these are always rendered */
    for (const char *const *t = always_user_defined; *t; t++) {
        int32_t id = find_text(v, *t);
        if (id >= 0) v->attr[id] = (uint16_t)((v->attr[id] & PL_ATTR_EOG) | PL_ATTR_USER_DEFINED);
    }
    if (v->eos >= 0) v->attr[v->eos] |= PL_ATTR_EOG;
    if (v->eot >= 0) v->attr[v->eot] |= PL_ATTR_EOG;
    if (v->eom >= 0) v->attr[v->eom] |= PL_ATTR_EOG;

    /* o200k_harmony / solar-open: "<|end|>" ends a message, not generation. */
    int32_t id_return = find_text(v, "<|return|>"), id_call = find_text(v, "<|call|>");
    int32_t id_calls = find_text(v, "<|calls|>"), id_flush = find_text(v, "<|flush|>");
    int32_t id_end = find_text(v, "<|end|>");
#define IS_EOG(id) ((id) >= 0 && (v->attr[id] & PL_ATTR_EOG))
    bool has_call = IS_EOG(id_call) || IS_EOG(id_calls);
    if (IS_EOG(id_end) && ((IS_EOG(id_return) && has_call) || (has_call && IS_EOG(id_flush))))
        v->attr[id_end] = PL_ATTR_USER_DEFINED;
    /* gemma4 / paddleocr: "</s>" is not EOG when "<|tool_response>" is. */
    int32_t id_s = find_text(v, "</s>"), id_tool = find_text(v, "<|tool_response>");
    if (IS_EOG(id_s) && IS_EOG(id_tool)) v->attr[id_s] = PL_ATTR_NORMAL;
#undef IS_EOG
}

/* Control, user-defined and unknown tokens are matched in raw text by
 * pl_vocab_tokenize, longest first (llama.cpp's cache_special_tokens). Equal
 * lengths go in id order (llama.cpp's std::sort leaves that unspecified). */
typedef struct { uint32_t len; int32_t id; } len_id;

static int cmp_len_id(const void *pa, const void *pb) {
    const len_id *a = pa, *b = pb;
    if (a->len != b->len) return a->len > b->len ? -1 : 1;
    return (a->id > b->id) - (a->id < b->id);
}

static pl_status build_special_cache(pl_vocab *v, const pl_gguf *g) {
    const uint16_t mask = PL_ATTR_CONTROL | PL_ATTR_USER_DEFINED | PL_ATTR_UNKNOWN;
    int32_t n = 0;
    /* An empty text matches nowhere (and would match everywhere in the
     * partition's search), so empty tokens are not special here. */
    for (int32_t id = 0; id < v->n_tokens; id++)
        if ((v->attr[id] & mask) && v->tok_len[id] > 0) n++;
    v->special = malloc((size_t)(n ? n : 1) * sizeof *v->special);
    len_id *tmp = malloc((size_t)(n ? n : 1) * sizeof *tmp);
    if (!v->special || !tmp) {
        free(tmp);
        return oom(g, "special tokens");
    }
    int32_t k = 0;
    for (int32_t id = 0; id < v->n_tokens; id++)
        if ((v->attr[id] & mask) && v->tok_len[id] > 0) tmp[k++] = (len_id){v->tok_len[id], id};
    qsort(tmp, (size_t)n, sizeof *tmp, cmp_len_id);
    for (int32_t i = 0; i < n; i++) v->special[i] = tmp[i].id;
    free(tmp);
    v->n_special = n;
    return PL_OK;
}

/* Both loaders end here: special-token attributes and the partition cache,
 * then hand the vocabulary out or free it on any earlier failure (st). */
static pl_status finish_load(pl_vocab *v, const pl_gguf *g, pl_status st, pl_vocab **out) {
    if (st == PL_OK) {
        detect_special(v);
        st = build_special_cache(v, g);
    }
    if (st != PL_OK) {
        pl_vocab_free(v);
        return st;
    }
    *out = v;
    return PL_OK;
}

/* ---- SentencePiece ------------------------------------------------------- */

/* llama.cpp's SPM settings (llama_vocab::impl::load): BOS 1, EOS 2, UNK 0
 * unless the file says otherwise; add_bos on, add_eos off, a space prefix;
 * tokenizer.ggml.pre is not read. */
static const pl_pretok_info k_spm_info = {"(sentencepiece)", PL_PRETOK_QWEN2, false, true, false};

static pl_status load_spm(const pl_gguf *g, pl_vocab **out) {
    pl_vocab *v = calloc(1, sizeof *v);
    if (!v) return oom(g, "vocabulary");
    v->spm = true;
    v->pretok = &k_spm_info;
    v->bos = 1;
    v->eos = 2;
    v->unk = 0;
    v->eot = v->eom = v->sep = v->pad = v->mask = -1;
    v->fim_pre = v->fim_suf = v->fim_mid = v->fim_pad = v->fim_rep = v->fim_sep = -1;
    v->add_bos = true;
    v->add_eos = false;
    v->add_space_prefix = true;
    pl_status st = load_tokens(v, g);
    if (st == PL_OK && (v->bos >= v->n_tokens || v->eos >= v->n_tokens || v->unk >= v->n_tokens)) {
        /* the defaults point outside a tiny vocabulary: only explicit ids count */
        if (v->bos >= v->n_tokens) v->bos = -1;
        if (v->eos >= v->n_tokens) v->eos = -1;
        if (v->unk >= v->n_tokens) v->unk = -1;
    }
    if (st == PL_OK) st = load_special_ids(v, g);
    if (st == PL_OK) {
        bool b;
        st = pl_gguf_get_bool(g, "tokenizer.ggml.add_space_prefix", &b);
        if (st == PL_OK) v->add_space_prefix = b;
        else if (st == PL_ERR_NOT_FOUND) st = PL_OK;
    }
    if (st == PL_OK) {
        static const char hex[] = "0123456789ABCDEF";
        for (int b = 0; b < 256; b++) {
            char name[6] = {'<', '0', 'x', hex[b >> 4], hex[b & 15], '>'}, c = (char)b;
            int32_t id = pl_vocab_lookup(v, name, 6);
            v->spm_byte_tok[b] = id >= 0 ? id : pl_vocab_lookup(v, &c, 1);
            v->byte_tok[b] = v->single_tok[b] = -1;
        }
    }
    return finish_load(v, g, st, out);
}

/* ---- public: load -------------------------------------------------------- */

pl_status pl_vocab_load(const pl_gguf *g, pl_vocab **out) {
    if (!out) return pl_errorf(PL_ERR_INVALID_ARG, "pl_vocab_load: out is NULL");
    *out = NULL;
    if (!g) return pl_errorf(PL_ERR_INVALID_ARG, "pl_vocab_load: no GGUF file");

    pl_gguf_str model, pre;
    pl_status st = pl_gguf_get_str(g, K_MODEL, &model);
    if (st == PL_ERR_NOT_FOUND)
        return pl_errorf(PL_ERR_NOT_FOUND, "%s: no %s: the file has no tokenizer", pl_gguf_name(g), K_MODEL);
    if (st != PL_OK) return st;
    if (str_eq(model, "llama")) return load_spm(g, out);
    if (!str_eq(model, "gpt2")) {
        char buf[300];
        printable(model, buf, sizeof buf);
        return pl_errorf(PL_ERR_UNSUPPORTED,
                         "%s: tokenizer model '%s' is not supported (supported: 'gpt2', byte-level BPE, and 'llama', "
                         "SentencePiece)", pl_gguf_name(g), buf);
    }
    st = pl_gguf_get_str(g, K_PRE, &pre);
    if (st == PL_ERR_NOT_FOUND)
        return pl_errorf(PL_ERR_UNSUPPORTED,
                         "%s: no %s: llama.cpp would use its generic 'default' pre-tokenizer, which is not supported "
                         "(supported: qwen2, llama3, gpt-2 and their aliases)", pl_gguf_name(g), K_PRE);
    if (st != PL_OK) return st;
    const pl_pretok_info *pretok = pl_pretok_find(pre.ptr, (size_t)pre.len);
    if (!pretok) {
        char buf[300];
        printable(pre, buf, sizeof buf);
        return pl_errorf(PL_ERR_UNSUPPORTED, "%s: pre-tokenizer '%s' (%s) is not supported (supported: qwen2, llama3, gpt-2 and their aliases)",
                         pl_gguf_name(g), buf, K_PRE);
    }

    pl_vocab *v = calloc(1, sizeof *v);
    if (!v) return oom(g, "vocabulary");
    v->pretok = pretok;
    v->bos = v->eos = v->eot = v->eom = v->unk = v->sep = v->pad = v->mask = -1;
    v->fim_pre = v->fim_suf = v->fim_mid = v->fim_pad = v->fim_rep = v->fim_sep = -1;
    v->add_bos = pretok->add_bos_default;
    v->add_eos = false;

    st = load_tokens(v, g);
    if (st == PL_OK) st = load_merges(v, g);
    if (st == PL_OK) st = load_special_ids(v, g);
    if (st == PL_OK) {
        for (int b = 0; b < 256; b++) {
            v->gpt2_len[b] = (uint8_t)pl_gpt2_byte_utf8((unsigned char)b, v->gpt2_enc[b]);
            v->byte_tok[b] = pl_vocab_lookup(v, v->gpt2_enc[b], v->gpt2_len[b]);
            char c = (char)b;
            v->single_tok[b] = pl_vocab_lookup(v, &c, 1);
        }
    }
    return finish_load(v, g, st, out);
}

/* ---- public: accessors --------------------------------------------------- */

int32_t pl_vocab_n_tokens(const pl_vocab *v) { return v ? v->n_tokens : 0; }
int32_t pl_vocab_bos(const pl_vocab *v) { return v ? v->bos : -1; }
int32_t pl_vocab_eos(const pl_vocab *v) { return v ? v->eos : -1; }
bool pl_vocab_add_bos(const pl_vocab *v) { return v && v->add_bos; }
bool pl_vocab_space_prefix(const pl_vocab *v) { return v && v->spm && v->add_space_prefix; }

bool pl_vocab_is_eog(const pl_vocab *v, int32_t id) {
    return v && id >= 0 && id < v->n_tokens && (v->attr[id] & PL_ATTR_EOG);
}

int pl_vocab_token_type(const pl_vocab *v, int32_t id) {
    if (!v || id < 0 || id >= v->n_tokens) return PL_TOKEN_TYPE_UNDEFINED;
    return v->tok_type[id];
}

const char *pl_vocab_token_text(const pl_vocab *v, int32_t id) {
    if (!v || id < 0 || id >= v->n_tokens) return NULL;
    return v->arena + v->tok_off[id];
}

int32_t pl_vocab_find(const pl_vocab *v, const char *text, size_t len) {
    if (!v || (!text && len)) return -1;
    return pl_vocab_lookup(v, text ? text : "", len);
}

/* ---- public: detokenization ---------------------------------------------- */

typedef struct { char *buf; size_t cap, len; } piece_writer;

static void pw_put(piece_writer *w, const void *p, size_t n) {
    if (w->len < w->cap) {
        size_t room = w->cap - w->len;
        memcpy(w->buf + w->len, p, n < room ? n : room);
    }
    w->len += n;
}

/* llama.cpp's llama_decode_text: each codepoint of the stored text is one
 * byte of the GPT-2 mapping; a codepoint outside it is spelled out as
 * "[UNK_BYTE_0x<utf8 hex><whole token text>]" exactly as llama.cpp does. */
static void decode_bpe_text(const pl_vocab *v, int32_t id, piece_writer *w) {
    const unsigned char *t = (const unsigned char *)v->arena + v->tok_off[id];
    size_t n = v->tok_len[id], pos = 0;
    while (pos < n) {
        uint32_t cp = pl_utf8_decode(t, n, &pos);
        int b = pl_gpt2_cp_to_byte(cp);
        if (b >= 0) {
            char c = (char)b;
            pw_put(w, &c, 1);
        } else {
            char u[4], hex[16];
            int un = pl_utf8_encode(cp, u);
            pw_put(w, "[UNK_BYTE_0x", 12);
            for (int i = 0; i < un; i++) {
                snprintf(hex, sizeof hex, "%02x", (unsigned char)u[i]);
                pw_put(w, hex, 2);
            }
            pw_put(w, t, n);
            pw_put(w, "]", 1);
        }
    }
}

static int hexval(char c) {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    return -1;
}

pl_status pl_vocab_piece(const pl_vocab *v, int32_t id, bool special,
                         char *buf, size_t cap, size_t *len) {
    if (len) *len = 0;
    if (!v || !len) return pl_errorf(PL_ERR_INVALID_ARG, "pl_vocab_piece: NULL argument");
    if (id < 0 || id >= v->n_tokens)
        return pl_errorf(PL_ERR_INVALID_ARG, "token id %d is out of range (vocabulary has %d tokens)", id, v->n_tokens);
    if (!buf) cap = 0;
    piece_writer w = {buf, cap, 0};
    uint16_t a = v->attr[id];
    const char *text = v->arena + v->tok_off[id];
    if (a & (PL_ATTR_CONTROL | PL_ATTR_UNKNOWN)) {
        if (special) pw_put(&w, text, v->tok_len[id]);
    } else if (a & PL_ATTR_USER_DEFINED) {
        pw_put(&w, text, v->tok_len[id]);
    } else if ((a & PL_ATTR_NORMAL) && v->spm) {
        /* U+2581 back to spaces (llama_unescape_whitespace) */
        for (size_t i = 0, n = v->tok_len[id]; i < n;) {
            if (i + 3 <= n && !memcmp(text + i, "\xe2\x96\x81", 3)) { pw_put(&w, " ", 1); i += 3; }
            else pw_put(&w, text + i++, 1);
        }
    } else if (a & PL_ATTR_NORMAL) {
        decode_bpe_text(v, id, &w);
    } else if (a & PL_ATTR_BYTE) {
        /* "<0xNN>" (llama.cpp reads text[3..5) as hex; anything else would
         * make it throw, here it renders as nothing) */
        if (v->tok_len[id] == 6 && memcmp(text, "<0x", 3) == 0 && text[5] == '>' &&
            hexval(text[3]) >= 0 && hexval(text[4]) >= 0) {
            char c = (char)(hexval(text[3]) * 16 + hexval(text[4]));
            pw_put(&w, &c, 1);
        }
    }
    /* UNUSED / UNDEFINED tokens render as nothing, as in llama.cpp. */
    *len = w.len;
    if (w.len > cap)
        return pl_errorf(PL_ERR_INVALID_ARG, "token %d needs %zu bytes, buffer has %zu", id, w.len, cap);
    return PL_OK;
}
