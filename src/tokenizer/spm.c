/*
 * SentencePiece (tokenizer.ggml.model == "llama") encoding, as llama.cpp's
 * llm_tokenizer_spm_session, so that ids are identical:
 *
 *  1. The raw fragment gets a leading space when add_space_prefix is set and
 *     it starts the text or follows a special token; every ' ' becomes U+2581
 *     ("\xe2\x96\x81"). No other normalization.
 *  2. One symbol per UTF-8 character, its length taken from the lead byte
 *     (a stray continuation byte is a 1-byte symbol; a sequence cut by the end
 *     of the text is shortened).
 *  3. Every adjacent pair whose concatenated text is a token is a candidate,
 *     ranked by that token's score (highest first, leftmost on ties). The best
 *     is merged and its neighbours become candidates, until none is left. A
 *     popped candidate whose symbols changed since it was queued is dropped
 *     by llama.cpp's test (both alive and their lengths still add up).
 *  4. A symbol that is a token gives its id; any other is a single character
 *     that never merged (a merged symbol's text is always a token), which
 *     falls back to one <0xXX> token per byte, or to the 1-byte token when
 *     the vocabulary has no byte tokens. A byte with neither is an error
 *     naming it (llama.cpp throws).
 */
#include <stdlib.h>
#include <string.h>
#include "core/status.h"
#include "tokenizer/spm.h"
#include "tokenizer/vocab_internal.h"

typedef struct { uint32_t start, n; int32_t prev, next; } spm_sym;
typedef struct { float score; int32_t left, right; uint32_t size; } spm_bigram;

typedef struct {
    const pl_vocab *v;
    const char *text;
    spm_sym *sym;
    spm_bigram *heap;
    size_t n_heap, cap_heap;
    pl_status err;
} spm_ctx;

/* a before b in the queue: higher score, then smaller left */
static inline bool bg_before(const spm_bigram *a, const spm_bigram *b) {
    return a->score > b->score || (a->score == b->score && a->left < b->left);
}

static void bg_push(spm_ctx *c, spm_bigram b) {
    if (c->n_heap == c->cap_heap) {
        size_t nc = c->cap_heap ? c->cap_heap * 2 : 64;
        spm_bigram *nh = realloc(c->heap, nc * sizeof *nh);
        if (!nh) {
            if (c->err == PL_OK) c->err = pl_errorf(PL_ERR_NO_MEMORY, "tokenizer: out of memory");
            return;
        }
        c->heap = nh;
        c->cap_heap = nc;
    }
    size_t i = c->n_heap++;
    while (i > 0) {
        size_t p = (i - 1) / 2;
        if (!bg_before(&b, &c->heap[p])) break;
        c->heap[i] = c->heap[p];
        i = p;
    }
    c->heap[i] = b;
}

static spm_bigram bg_pop(spm_ctx *c) {
    spm_bigram top = c->heap[0], last = c->heap[--c->n_heap];
    size_t i = 0, n = c->n_heap;
    for (;;) {
        size_t l = 2 * i + 1, m = l;
        if (l >= n) break;
        if (l + 1 < n && bg_before(&c->heap[l + 1], &c->heap[l])) m = l + 1;
        if (!bg_before(&c->heap[m], &last)) break;
        c->heap[i] = c->heap[m];
        i = m;
    }
    if (n) c->heap[i] = last;
    return top;
}

static void try_bigram(spm_ctx *c, int32_t l, int32_t r) {
    if (l < 0 || r < 0) return;
    const uint32_t size = c->sym[l].n + c->sym[r].n;
    const int32_t id = pl_vocab_lookup(c->v, c->text + c->sym[l].start, size);
    if (id < 0) return;
    bg_push(c, (spm_bigram){c->v->scores ? c->v->scores[id] : 0.0f, l, r, size});
}

static inline uint32_t utf8_len(unsigned char lead) {
    static const uint8_t lens[16] = {1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 2, 2, 3, 4};
    return lens[lead >> 4];
}

pl_status pl_spm_encode(const pl_vocab *v, const char *raw, size_t len, bool space_prefix, int32_t **out,
                        size_t *n_out, size_t *cap_out) {
    /* the escaped text: U+2581 for every space (3 bytes for 1) */
    size_t spaces = space_prefix ? 1 : 0;
    for (size_t i = 0; i < len; i++) spaces += raw[i] == ' ';
    const size_t n = len + (space_prefix ? 1 : 0) + 2 * spaces;
    if (n == 0) return PL_OK;
    char *text = malloc(n);
    spm_sym *sym = malloc(n * sizeof *sym);
    if (!text || !sym) {
        free(text);
        free(sym);
        return pl_errorf(PL_ERR_NO_MEMORY, "tokenizer: out of memory for %zu bytes", len);
    }
    size_t t = 0;
    if (space_prefix) { memcpy(text, "\xe2\x96\x81", 3); t = 3; }
    for (size_t i = 0; i < len; i++) {
        if (raw[i] == ' ') { memcpy(text + t, "\xe2\x96\x81", 3); t += 3; }
        else text[t++] = raw[i];
    }

    spm_ctx c = {v, text, sym, NULL, 0, 0, PL_OK};
    int32_t ns = 0;
    for (size_t off = 0; off < n;) {
        uint32_t l = utf8_len((unsigned char)text[off]);
        if (l > n - off) l = (uint32_t)(n - off);
        sym[ns] = (spm_sym){(uint32_t)off, l, ns - 1, off + l == n ? -1 : ns + 1};
        off += l;
        ns++;
    }
    for (int32_t i = 1; i < ns && c.err == PL_OK; i++) try_bigram(&c, i - 1, i);
    while (c.n_heap && c.err == PL_OK) {
        spm_bigram b = bg_pop(&c);
        spm_sym *L = &sym[b.left], *R = &sym[b.right];
        if (L->n == 0 || R->n == 0 || L->n + R->n != b.size) continue;
        L->n += R->n;
        R->n = 0;
        L->next = R->next;
        if (R->next >= 0) sym[R->next].prev = b.left;
        try_bigram(&c, L->prev, b.left);
        try_bigram(&c, b.left, L->next);
    }

    for (int32_t i = 0; i != -1 && c.err == PL_OK; i = sym[i].next) {
        const char *s = text + sym[i].start;
        int32_t id = pl_vocab_lookup(v, s, sym[i].n);
        int32_t ids[4];
        uint32_t k = 0;
        if (id >= 0) ids[k++] = id;
        else {
            for (uint32_t j = 0; j < sym[i].n && c.err == PL_OK; j++) {
                const unsigned char b = (unsigned char)s[j];
                int32_t bt = v->spm_byte_tok[b];
                if (bt < 0) {
                    c.err = pl_errorf(PL_ERR_INVALID_ARG,
                                      "tokenizer: byte 0x%02X has no token (neither <0x%02X> nor the byte itself)",
                                      b, b);
                    break;
                }
                ids[k++] = bt;
            }
        }
        if (c.err != PL_OK) break;
        if (*n_out + k > *cap_out) {
            size_t nc = *cap_out ? *cap_out : 64;
            while (nc < *n_out + k) nc *= 2;
            int32_t *no = realloc(*out, nc * sizeof *no);
            if (!no) { c.err = pl_errorf(PL_ERR_NO_MEMORY, "tokenizer: out of memory"); break; }
            *out = no;
            *cap_out = nc;
        }
        memcpy(*out + *n_out, ids, k * sizeof *ids);
        *n_out += k;
    }
    free(c.heap);
    free(sym);
    free(text);
    return c.err;
}
