/*
 * Text -> token ids: special-token partition, pre-tokenization, byte-level
 * BPE. Mirrors llama.cpp's llama_vocab::impl::tokenize for BPE vocabularies:
 *
 *  1. tokenizer_st_partition: every special token (control, user-defined,
 *     unknown), longest text first, cuts all of its occurrences out of the
 *     raw text that is left. With parse_special == false control and unknown
 *     tokens are skipped but user-defined ones are still cut out (Hugging
 *     Face does the same).
 *  2. Each raw fragment is decoded to codepoints (invalid bytes -> U+FFFD),
 *     split into words by the pre-tokenizer, and each word re-encoded as
 *     UTF-8 and mapped byte by byte through the GPT-2 byte-to-unicode table.
 *  3. BPE on each word: start from one symbol per byte, repeatedly merge the
 *     adjacent pair with the lowest merge rank (leftmost on ties) using a
 *     priority queue with lazy deletion, O(n log n) per word.
 *  4. A final symbol that is a token gives its id. One that is not (a byte
 *     whose GPT-2 character is not a token, or a merge whose result is
 *     missing from the vocabulary) falls back to smaller pieces:
 *       - when every byte of its GPT-2 text is a 1-byte token, those tokens,
 *         as llama.cpp does for gpt2 vocabularies (same ids);
 *       - otherwise the token of each input byte's GPT-2 character; an input
 *         byte without one cannot be represented at all and the call fails
 *         with PL_ERR_INVALID_ARG naming the byte and its offset.
 *     llama.cpp silently drops such bytes in both cases (checked with the
 *     reference build: a vocab without U+0101 tokenizes "a\x01b" as "ab",
 *     and "\xc3\xa9" merged into a non-token gives no ids at all); a
 *     prompt that loses text without a word is a wrong answer, so we keep
 *     every byte that has a token and refuse the rest.
 */
#include <stdlib.h>
#include <string.h>
#include "core/status.h"
#include "tokenizer/spm.h"
#include "tokenizer/tokenizer.h"
#include "tokenizer/ucd.h"
#include "tokenizer/vocab_internal.h"

/* Inputs are capped so that every index fits in 32 bits: re-encoding can
 * triple the size (each invalid byte becomes U+FFFD, 3 bytes), and a word's
 * symbols are indexed with int32_t and its bytes with uint32_t. */
#define PL_TOKENIZE_MAX_BYTES ((size_t)256 << 20)

typedef struct { size_t start, len; int32_t token; } frag;  /* token < 0: raw text */

typedef struct { uint32_t start, len; int32_t prev, next, id; } bpe_sym;

typedef struct { int32_t rank, left, right, result; uint32_t llen, rlen; } bpe_pair;

typedef struct {
    const pl_vocab *v;
    int32_t *out;
    size_t n_out, cap_out;
    uint32_t *cps;          /* codepoints of the current fragment */
    char *enc;              /* GPT-2 encoded bytes of the current word */
    size_t cap_enc;
    bpe_sym *sym;
    size_t cap_sym;
    bpe_pair *heap;
    size_t n_heap, cap_heap;
    unsigned char *wbytes;  /* UTF-8 bytes of the current word, one per initial symbol */
    size_t cap_wbytes;
    /* where the current word came from, to name an unrepresentable byte */
    const unsigned char *frag;  /* the raw fragment being tokenized */
    size_t frag_len, frag_off;  /* its length, its offset in the whole text */
    size_t word_cp;             /* index of the word's first codepoint in the fragment */
    pl_status err;          /* first failure */
} tok_ctx;

static bool grow(void **p, size_t *cap, size_t need, size_t elem, tok_ctx *c) {
    if (need <= *cap) return true;
    size_t ncap = *cap ? *cap : 64;
    while (ncap < need) ncap *= 2;
    void *np = realloc(*p, ncap * elem);
    if (!np) {
        if (c->err == PL_OK) c->err = pl_errorf(PL_ERR_NO_MEMORY, "tokenizer: out of memory");
        return false;
    }
    *p = np;
    *cap = ncap;
    return true;
}

static void emit(tok_ctx *c, int32_t id) {
    if (!grow((void **)&c->out, &c->cap_out, c->n_out + 1, sizeof *c->out, c)) return;
    c->out[c->n_out++] = id;
}

/* ---- heap of candidate merges, ordered by (rank, left) -------------------
 * A 4-ary heap: half the depth of a binary one and the four children share
 * cache lines, which matters for very long words (a megabyte of one letter
 * is one word of a million symbols). */

#define HEAP_D 4

static inline bool pair_less(const bpe_pair *a, const bpe_pair *b) {
    return a->rank < b->rank || (a->rank == b->rank && a->left < b->left);
}

static void heap_push(tok_ctx *c, bpe_pair p) {
    if (!grow((void **)&c->heap, &c->cap_heap, c->n_heap + 1, sizeof *c->heap, c)) return;
    size_t i = c->n_heap++;
    while (i > 0) {
        size_t parent = (i - 1) / HEAP_D;
        if (!pair_less(&p, &c->heap[parent])) break;
        c->heap[i] = c->heap[parent];
        i = parent;
    }
    c->heap[i] = p;
}

static bpe_pair heap_pop(tok_ctx *c) {
    bpe_pair top = c->heap[0];
    bpe_pair last = c->heap[--c->n_heap];
    size_t i = 0, n = c->n_heap;
    if (n == 0) return top;
    for (;;) {
        size_t first = HEAP_D * i + 1;
        if (first >= n) break;
        size_t end = first + HEAP_D < n ? first + HEAP_D : n;
        size_t m = first;
        for (size_t k = first + 1; k < end; k++)
            if (pair_less(&c->heap[k], &c->heap[m])) m = k;
        if (!pair_less(&c->heap[m], &last)) break;
        c->heap[i] = c->heap[m];
        i = m;
    }
    c->heap[i] = last;
    return top;
}

static void try_pair(tok_ctx *c, int32_t l, int32_t r) {
    if (l < 0 || r < 0) return;
    const bpe_sym *L = &c->sym[l], *R = &c->sym[r];
    int32_t result = -1;
    int32_t rank = pl_vocab_merge_rank(c->v, L->id, R->id, c->enc + L->start, L->len,
                                       c->enc + R->start, R->len, &result);
    if (rank < 0) return;
    heap_push(c, (bpe_pair){rank, l, r, result, L->len, R->len});
}

/* Fails the call for byte k of the current word (no token can represent
 * it), naming its offset in the caller's text. Only runs on that error, so
 * it re-decodes the fragment to map the word's re-encoded UTF-8 back to the
 * input: invalid input bytes were read as U+FFFD, whose 3 bytes are what is
 * missing then, and the offset is that of the invalid input byte. */
static void unrepresentable(tok_ctx *c, uint32_t k) {
    size_t pos = 0, cp_i = 0, start = 0;
    uint32_t cp = 0, skip = k;
    while (pos < c->frag_len) {
        start = pos;
        cp = pl_utf8_decode(c->frag, c->frag_len, &pos);
        if (cp_i++ < c->word_cp) continue;
        uint32_t n = cp < 0x80 ? 1 : cp < 0x800 ? 2 : cp < 0x10000 ? 3 : 4;
        if (skip < n) break;
        skip -= n;
    }
    bool replaced = cp == 0xFFFD && !(pos - start == 3 && c->frag[start] == 0xEF);
    size_t off = c->frag_off + start + (replaced ? 0 : skip);
    unsigned byte = replaced ? c->frag[start] : c->wbytes[k];
    c->err = pl_errorf(PL_ERR_INVALID_ARG,
                       "cannot tokenize byte 0x%02x at offset %zu%s: the vocabulary has no token for it "
                       "(no byte fallback)", byte, off,
                       replaced ? " (invalid UTF-8, read as U+FFFD)" : "");
}

/* A final symbol that is not a token: see step 4 at the top. */
static void fallback(tok_ctx *c, int32_t i, int32_t end) {
    const pl_vocab *v = c->v;
    const bpe_sym *s = &c->sym[i];
    bool all_single = true;
    for (uint32_t k = 0; k < s->len && all_single; k++)
        all_single = v->single_tok[(unsigned char)c->enc[s->start + k]] >= 0;
    if (all_single) {
        for (uint32_t k = 0; k < s->len; k++) emit(c, v->single_tok[(unsigned char)c->enc[s->start + k]]);
        return;
    }
    /* symbol i spans the initial symbols (input bytes) i .. end-1 */
    for (int32_t k = i; k < end && c->err == PL_OK; k++) {
        int32_t t = v->byte_tok[c->wbytes[k]];
        if (t < 0) unrepresentable(c, (uint32_t)k);
        else emit(c, t);
    }
}

/* BPE over c->enc[0..n_enc) whose symbols c->sym[0..n_sym) are set up. */
static void bpe_word(tok_ctx *c, int32_t n_sym) {
    c->n_heap = 0;
    for (int32_t i = 1; i < n_sym; i++) try_pair(c, i - 1, i);
    while (c->n_heap > 0 && c->err == PL_OK) {
        bpe_pair p = heap_pop(c);
        bpe_sym *L = &c->sym[p.left], *R = &c->sym[p.right];
        /* Stale entry: one side was merged since it was queued. A symbol only
         * grows (or empties), so unchanged lengths mean unchanged texts and
         * that the two are still neighbours. */
        if (L->len == 0 || R->len == 0 || L->len != p.llen || R->len != p.rlen) continue;
        L->len += R->len;
        L->id = p.result;
        R->len = 0;
        L->next = R->next;
        if (R->next >= 0) c->sym[R->next].prev = p.left;
        try_pair(c, L->prev, p.left);
        try_pair(c, p.left, L->next);
    }
    for (int32_t i = 0; i >= 0 && i < n_sym && c->err == PL_OK; i = c->sym[i].next) {
        const bpe_sym *s = &c->sym[i];
        if (s->len == 0) continue;
        if (s->id >= 0) emit(c, s->id);
        else fallback(c, i, s->next >= 0 ? s->next : n_sym);
    }
}

/* One pre-tokenized word, codepoints c->cps[a..b). */
static void tokenize_word(tok_ctx *c, size_t a, size_t b) {
    const pl_vocab *v = c->v;
    size_t n_bytes = 0;  /* UTF-8 length of the word: one symbol per byte */
    for (size_t i = a; i < b; i++) {
        uint32_t cp = c->cps[i];
        n_bytes += cp < 0x80 ? 1 : cp < 0x800 ? 2 : cp < 0x10000 ? 3 : 4;
    }
    if (!grow((void **)&c->enc, &c->cap_enc, n_bytes * 2, 1, c)) return;
    if (!grow((void **)&c->sym, &c->cap_sym, n_bytes, sizeof *c->sym, c)) return;
    if (!grow((void **)&c->wbytes, &c->cap_wbytes, n_bytes, 1, c)) return;
    uint32_t n_enc = 0;
    int32_t n_sym = 0;
    for (size_t i = a; i < b; i++) {
        char u[4];
        int un = pl_utf8_encode(c->cps[i], u);
        for (int k = 0; k < un; k++) {
            unsigned char byte = (unsigned char)u[k];
            bpe_sym *s = &c->sym[n_sym];
            s->start = n_enc;
            s->len = v->gpt2_len[byte];
            s->prev = n_sym - 1;
            s->next = n_sym + 1;
            s->id = v->byte_tok[byte];
            c->wbytes[n_sym] = byte;
            memcpy(c->enc + n_enc, v->gpt2_enc[byte], s->len);
            n_enc += s->len;
            n_sym++;
        }
    }
    c->sym[n_sym - 1].next = -1;
    if (v->pretok->ignore_merges) {
        /* llama3 family: a word that is a token is not merged piecewise */
        int32_t id = pl_vocab_lookup(v, c->enc, n_enc);
        if (id >= 0) {
            emit(c, id);
            return;
        }
    }
    bpe_word(c, n_sym);
}

static void tokenize_raw(tok_ctx *c, const unsigned char *s, size_t len, size_t off) {
    size_t n = 0, pos = 0;
    while (pos < len) c->cps[n++] = pl_utf8_decode(s, len, &pos);
    c->frag = s;
    c->frag_len = len;
    c->frag_off = off;
    for (size_t i = 0; i < n && c->err == PL_OK;) {
        size_t end = pl_pretok_next(c->v->pretok->kind, c->cps, n, i);
        if (end <= i || end > n) end = i + 1;  /* splitters always advance; belt and braces */
        c->word_cp = i;
        tokenize_word(c, i, end);
        i = end;
    }
}

/* tokenizer_st_partition: returns the fragment list (malloc'd). */
static pl_status partition(const pl_vocab *v, const char *text, size_t len, bool parse_special,
                           frag **out, size_t *n_out) {
    size_t cap = 16, n = 1;
    frag *f = malloc(cap * sizeof *f);
    frag *g = NULL;
    size_t gcap = 0;
    if (!f) return pl_errorf(PL_ERR_NO_MEMORY, "tokenizer: out of memory");
    f[0] = (frag){0, len, -1};
    if (len == 0) n = 0;

    for (int32_t k = 0; k < v->n_special && n > 0; k++) {
        int32_t id = v->special[k];
        if (!parse_special && (v->attr[id] & (PL_ATTR_CONTROL | PL_ATTR_UNKNOWN))) continue;
        const char *tt = v->arena + v->tok_off[id];
        size_t tl = v->tok_len[id];
        size_t gn = 0;
        bool any = false;
        for (size_t i = 0; i < n; i++) {
            /* at most 2 new fragments per occurrence + the remainder */
            if (f[i].token >= 0 || f[i].len < tl) {
                if (gn + 1 > gcap) {
                    size_t nc = gcap ? gcap * 2 : 16;
                    frag *ng = realloc(g, nc * sizeof *ng);
                    if (!ng) goto oom;
                    g = ng;
                    gcap = nc;
                }
                g[gn++] = f[i];
                continue;
            }
            size_t s = f[i].start, e = f[i].start + f[i].len;
            for (;;) {
                const char *m = s < e ? memmem(text + s, e - s, tt, tl) : NULL;
                if (gn + 2 > gcap) {
                    size_t nc = gcap ? gcap * 2 : 16;
                    while (nc < gn + 2) nc *= 2;
                    frag *ng = realloc(g, nc * sizeof *ng);
                    if (!ng) goto oom;
                    g = ng;
                    gcap = nc;
                }
                if (!m) {
                    if (e > s) g[gn++] = (frag){s, e - s, -1};
                    break;
                }
                size_t at = (size_t)(m - text);
                any = true;
                /* LSTRIP / RSTRIP attributes (whitespace trimming around the
                 * token) are never set for supported vocabularies. */
                if (at > s) g[gn++] = (frag){s, at - s, -1};
                g[gn++] = (frag){at, tl, id};
                s = at + tl;
            }
        }
        if (any) {
            frag *t = f; f = g; g = t;
            size_t tc = cap; cap = gcap; gcap = tc;
            n = gn;
        }
    }
    free(g);
    *out = f;
    *n_out = n;
    return PL_OK;
oom:
    free(f);
    free(g);
    return pl_errorf(PL_ERR_NO_MEMORY, "tokenizer: out of memory");
}

pl_status pl_vocab_tokenize(const pl_vocab *v, const char *text, size_t len,
                            bool parse_special, int32_t **ids, size_t *n_ids) {
    if (ids) *ids = NULL;
    if (n_ids) *n_ids = 0;
    if (!v || !ids || !n_ids || (!text && len))
        return pl_errorf(PL_ERR_INVALID_ARG, "pl_vocab_tokenize: NULL argument");
    if (len > PL_TOKENIZE_MAX_BYTES)
        return pl_errorf(PL_ERR_INVALID_ARG, "pl_vocab_tokenize: text of %zu bytes is too long (limit %zu)",
                         len, PL_TOKENIZE_MAX_BYTES);

    frag *f = NULL;
    size_t nf = 0;
    PL_TRY(partition(v, text, len, parse_special, &f, &nf));

    tok_ctx c;
    memset(&c, 0, sizeof c);
    c.v = v;
    c.err = PL_OK;
    size_t max_raw = 0;
    for (size_t i = 0; i < nf; i++)
        if (f[i].token < 0 && f[i].len > max_raw) max_raw = f[i].len;
    if (max_raw) {
        c.cps = malloc(max_raw * sizeof *c.cps);
        if (!c.cps) c.err = pl_errorf(PL_ERR_NO_MEMORY, "tokenizer: out of memory for %zu bytes of text", len);
    }
    /* first guess of the output size: about one token per 4 bytes */
    grow((void **)&c.out, &c.cap_out, len / 4 + 16, sizeof *c.out, &c);

    bool prev_special = true;   /* SentencePiece: a space prefix at the start and after special tokens */
    for (size_t i = 0; i < nf && c.err == PL_OK; i++) {
        if (f[i].token >= 0) emit(&c, f[i].token);
        else if (v->spm)
            c.err = pl_spm_encode(v, text + f[i].start, f[i].len, v->add_space_prefix && prev_special, &c.out,
                                  &c.n_out, &c.cap_out);
        else tokenize_raw(&c, (const unsigned char *)text + f[i].start, f[i].len, f[i].start);
        prev_special = f[i].token >= 0;
    }

    free(f);
    free(c.cps);
    free(c.enc);
    free(c.sym);
    free(c.wbytes);
    free(c.heap);
    if (c.err != PL_OK) {
        free(c.out);
        return c.err;
    }
    *ids = c.out;
    *n_ids = c.n_out;
    return PL_OK;
}
