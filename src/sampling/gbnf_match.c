/*
 * The GBNF matcher: stack sets advanced one code point at a time (the
 * llama.cpp algorithm). A stack lists grammar positions still to match, the
 * last one on top; "advancing" a stack expands rule references at the top
 * until a character element is on top (or the stack is empty: a full match).
 * Left recursion is refused by the parser, so expansion terminates.
 *
 * Sets live in caller-owned pl_u32vec buffers, appended at the end, so the
 * token-trie walk (grammar_vocab.c) can push a set per trie level and pop it
 * by truncating the buffer: no allocation per node.
 */
#include "sampling/grammar.h"
#include <stdlib.h>
#include <string.h>

#define MAX_STACK_DEPTH 4096   /* deeper nesting is rejected as no match */

int pl_u32vec_reserve(pl_u32vec *v, size_t extra) {
    if (v->n + extra <= v->cap) return 0;
    size_t cap = v->cap ? v->cap : 256;
    while (cap < v->n + extra) cap *= 2;
    uint32_t *d = realloc(v->d, cap * sizeof *d);
    if (!d) return -1;
    v->d = d;
    v->cap = cap;
    return 0;
}

int pl_utf8_feed(pl_utf8_partial *p, uint8_t b, uint32_t *cp) {
    if (p->n_remain == 0) {
        if (b < 0x80) { *cp = b; return 1; }
        if (b < 0xC2) return -1;                 /* continuation or overlong lead */
        if (b < 0xE0) { p->value = b & 0x1F; p->n_remain = 1; p->len = 2; return 0; }
        if (b < 0xF0) { p->value = b & 0x0F; p->n_remain = 2; p->len = 3; return 0; }
        if (b < 0xF5) { p->value = b & 0x07; p->n_remain = 3; p->len = 4; return 0; }
        return -1;
    }
    if ((b & 0xC0) != 0x80) return -1;
    p->value = (p->value << 6) | (b & 0x3F);
    p->n_remain--;
    /* after the second byte the range is known: refuse overlong forms,
     * surrogates and values above U+10FFFF as early as possible */
    if (p->len == 3 && p->n_remain == 1 && (p->value < 0x20 || (p->value >= 0x360 && p->value < 0x380))) return -1;
    if (p->len == 4 && p->n_remain == 2 && (p->value < 0x10 || p->value > 0x10F)) return -1;
    if (p->n_remain) return 0;
    *cp = p->value;
    p->value = 0;
    p->len = 0;
    return 1;
}

static int is_char_elem(uint32_t t) { return t == GE_CHAR || t == GE_CHAR_NOT || t == GE_CHAR_ANY; }
static int is_end(uint32_t t) { return t == GE_END || t == GE_ALT; }

/* Does the class at el[i] match cp? *next receives the element after it. */
static int match_char(const pl_gelem *el, uint32_t i, uint32_t cp, uint32_t *next) {
    int positive = el[i].type != GE_CHAR_NOT, found = 0;
    do {
        if (el[i + 1].type == GE_CHAR_RNG_UPPER) {
            found |= el[i].value <= cp && cp <= el[i + 1].value;
            i += 2;
        } else if (el[i].type == GE_CHAR_ANY) {
            found = 1;
            i += 1;
        } else {
            found |= el[i].value == cp;
            i += 1;
        }
    } while (el[i].type == GE_CHAR_ALT);
    *next = i;
    return found == positive;
}

/* Is some code point in [lo, hi] matched by the class at el[i]? Exact, so a
 * token ending inside a character is only allowed if some continuation of
 * it can still match (otherwise generation could get stuck). */
static int class_meets_range(const pl_gelem *el, uint32_t i, uint32_t lo, uint32_t hi) {
    int positive = el[i].type != GE_CHAR_NOT;
    uint32_t rl[64], rh[64];
    int n = 0, any = 0;
    do {
        uint32_t a, b;
        if (el[i + 1].type == GE_CHAR_RNG_UPPER) { a = el[i].value; b = el[i + 1].value; i += 2; }
        else if (el[i].type == GE_CHAR_ANY) { any = 1; a = 0; b = 0; i += 1; }
        else { a = b = el[i].value; i += 1; }
        if (positive && a <= hi && b >= lo) return 1;
        if (!positive && n < 64) { rl[n] = a; rh[n] = b; n++; }
        else if (!positive) return 1;   /* too many ranges to check exactly: allow */
    } while (el[i].type == GE_CHAR_ALT);
    if (positive) return any;
    /* negated: is [lo, hi] fully covered by the excluded ranges? */
    uint32_t cur = lo;
    for (;;) {
        int moved = 0;
        for (int k = 0; k < n; k++)
            if (rl[k] <= cur && cur <= rh[k]) {
                if (rh[k] >= hi) return 0;
                cur = rh[k] + 1;
                moved = 1;
            }
        if (!moved) return 1;
    }
}

static uint64_t stack_hash(const uint32_t *st, uint32_t len) {
    uint64_t h = 1469598103934665603ull ^ len;
    for (uint32_t k = 0; k < len; k++) h = (h ^ st[k]) * 1099511628211ull;
    return h;
}

/* Looks the stack st[0..len) up in a {generation, offset + 1} table of
 * `cap` slots (a power of two) whose entries point into `stacks` ({len,
 * positions...} records). 1: found; 0: not, *slot_out is the free slot. */
static int stack_lookup(const uint32_t *ht, uint32_t cap, uint32_t gen, const uint32_t *stacks, const uint32_t *st,
                        uint32_t len, uint32_t *slot_out) {
    uint64_t h = stack_hash(st, len);
    uint32_t slot = (uint32_t)(h ^ (h >> 32)) & (cap - 1);
    for (;; slot = (slot + 1) & (cap - 1)) {
        const uint32_t *e = ht + 2 * slot;
        if (e[0] != gen) break;
        const uint32_t *p = stacks + e[1] - 1;
        if (p[0] == len && !memcmp(p + 1, st, len * sizeof *p)) return 1;
    }
    *slot_out = slot;
    return 0;
}

/* Has the stack scratch[base .. base+len) (a rule on top) been expanded into
 * the set being built? If not, remembers it. 1: yes, 0: no, -1: out of
 * memory. */
static int already_expanded(pl_gmatch *m, size_t base, uint32_t len) {
    if (!m->seen_ht && !(m->seen_ht = calloc(2 * PL_GM_SEEN_HT, sizeof *m->seen_ht))) return -1;
    const uint32_t *st = m->scratch.d + base;
    uint32_t slot;
    if (stack_lookup(m->seen_ht, PL_GM_SEEN_HT, m->gen, m->seen.d, st, len, &slot)) return 1;
    if (m->seen_used >= PL_GM_SEEN_HT / 2) return 0;   /* full: expand without remembering */
    if (pl_u32vec_reserve(&m->seen, len + 1)) return -1;
    st = m->scratch.d + base;
    m->seen_ht[2 * slot] = m->gen;
    m->seen_ht[2 * slot + 1] = (uint32_t)m->seen.n + 1;
    m->seen.d[m->seen.n++] = len;
    memcpy(m->seen.d + m->seen.n, st, len * sizeof *st);
    m->seen.n += len;
    m->seen_used++;
    return 0;
}

/* Appends the stack in scratch[base .. base+len) to the set being built at
 * out[set], expanding rule references; dedups. */
static int advance(pl_gmatch *m, pl_u32vec *out, size_t set, size_t base, uint32_t len) {
    const pl_gelem *el = m->r->el;
    m->work += len + 1;
    if (m->work > PL_GM_MAX_WORK) {
        m->overflow = 1;
        return -1;
    }
    if (len == 0 || !(el[m->scratch.d[base + len - 1]].type == GE_RULE_REF)) {
        /* a finished stack: add unless already present (hashed: an
         * ambiguous grammar can hold thousands of stacks) */
        const uint32_t *st = m->scratch.d + base;
        uint32_t slot;
        if (stack_lookup(m->ht, PL_GM_HT, m->gen, out->d + set, st, len, &slot)) return 0;
        uint32_t count = out->d[set];
        if (count >= PL_GM_MAX_STACKS || out->d[set + 1] + len + 1 > PL_GM_MAX_WORDS) {
            m->overflow = 1;
            return -1;
        }
        if (pl_u32vec_reserve(out, len + 1)) return -1;
        st = m->scratch.d + base;   /* (scratch is not out: still valid) */
        m->ht[2 * slot] = m->gen;
        m->ht[2 * slot + 1] = (uint32_t)(out->n - set) + 1;
        out->d[out->n++] = len;
        memcpy(out->d + out->n, st, len * sizeof *out->d);
        out->n += len;
        out->d[set] += 1;
        out->d[set + 1] += len + 1;
        return 0;
    }
    if (len >= MAX_STACK_DEPTH) return 0;
    int seen = already_expanded(m, base, len);
    if (seen) return seen < 0 ? -1 : 0;
    uint32_t pos = m->scratch.d[base + len - 1];
    uint32_t ref = el[pos].value;
    uint32_t alt = m->r->rule_start[ref];
    for (;;) {
        /* new stack: below the ref, then the continuation after it, then the alternative */
        size_t nb = m->scratch.n;
        if (pl_u32vec_reserve(&m->scratch, len + 1)) return -1;
        memmove(m->scratch.d + nb, m->scratch.d + base, (len - 1) * sizeof(uint32_t));
        uint32_t nl = len - 1;
        if (!is_end(el[pos + 1].type)) m->scratch.d[nb + nl++] = pos + 1;
        if (!is_end(el[alt].type)) m->scratch.d[nb + nl++] = alt;
        m->scratch.n = nb + nl;
        int rc = advance(m, out, set, nb, nl);
        m->scratch.n = nb;
        if (rc) return rc;
        while (!is_end(el[alt].type)) alt++;
        if (el[alt].type == GE_END) break;
        alt++;
    }
    return 0;
}

/* Starts an empty set at the end of out, with a fresh dedup generation. */
static size_t begin_set(pl_gmatch *m, pl_u32vec *out) {
    if (!m->ht && !(m->ht = calloc(2 * PL_GM_HT, sizeof *m->ht))) return (size_t)-1;
    if (++m->gen == 0) {   /* wrapped: clear once */
        memset(m->ht, 0, 2 * PL_GM_HT * sizeof *m->ht);
        if (m->seen_ht) memset(m->seen_ht, 0, 2 * PL_GM_SEEN_HT * sizeof *m->seen_ht);
        m->gen = 1;
    }
    m->seen.n = 0;
    m->seen_used = 0;
    if (pl_u32vec_reserve(out, 2)) return (size_t)-1;
    m->work = 0;
    size_t at = out->n;
    out->d[out->n++] = 0;
    out->d[out->n++] = 0;
    return at;
}

size_t pl_gm_initial(pl_gmatch *m, pl_u32vec *out) {
    size_t set = begin_set(m, out);
    if (set == (size_t)-1) return set;
    uint32_t alt = m->r->rule_start[m->r->root];
    const pl_gelem *el = m->r->el;
    for (;;) {
        size_t nb = m->scratch.n;
        if (pl_u32vec_reserve(&m->scratch, 1)) return (size_t)-1;
        uint32_t nl = 0;
        if (!is_end(el[alt].type)) m->scratch.d[nb + nl++] = alt;
        m->scratch.n = nb + nl;
        int rc = advance(m, out, set, nb, nl);
        m->scratch.n = nb;
        if (rc) return (size_t)-1;
        while (!is_end(el[alt].type)) alt++;
        if (el[alt].type == GE_END) break;
        alt++;
    }
    return set;
}

size_t pl_gm_accept_cp(pl_gmatch *m, pl_u32vec *out, size_t in, uint32_t cp) {
    size_t set = begin_set(m, out);
    if (set == (size_t)-1) return set;
    const pl_gelem *el = m->r->el;
    uint32_t count = out->d[in];
    size_t p = in + 2;
    for (uint32_t k = 0; k < count; k++) {
        uint32_t len = out->d[p];
        if (len > 0) {
            uint32_t top = out->d[p + len], next;
            if (is_char_elem(el[top].type) && match_char(el, top, cp, &next)) {
                size_t nb = m->scratch.n;
                if (pl_u32vec_reserve(&m->scratch, len)) return (size_t)-1;
                memcpy(m->scratch.d + nb, out->d + p + 1, (len - 1) * sizeof(uint32_t));
                uint32_t nl = len - 1;
                if (!is_end(el[next].type)) m->scratch.d[nb + nl++] = next;
                m->scratch.n = nb + nl;
                int rc = advance(m, out, set, nb, nl);
                m->scratch.n = nb;
                if (rc) return (size_t)-1;
            }
        }
        p += 1 + len;
    }
    return set;
}

int pl_gm_partial_ok(const pl_gmatch *m, const uint32_t *set, const pl_utf8_partial *pp) {
    uint32_t shift = 6u * (uint32_t)pp->n_remain;
    uint32_t lo = pp->value << shift, hi = lo | ((1u << shift) - 1);
    static const uint32_t min_cp[] = {0, 0, 0x80, 0x800, 0x10000};   /* by total length */
    if (pp->len >= 2 && pp->len <= 4 && lo < min_cp[pp->len]) lo = min_cp[pp->len];
    if (hi > 0x10FFFF) hi = 0x10FFFF;
    if (lo > hi) return 0;
    uint32_t count = set[0];
    const uint32_t *p = set + 2;
    for (uint32_t k = 0; k < count; k++) {
        uint32_t len = p[0];
        if (len > 0) {
            uint32_t top = p[len];
            if (is_char_elem(m->r->el[top].type) && class_meets_range(m->r->el, top, lo, hi)) return 1;
        }
        p += 1 + len;
    }
    return 0;
}

int pl_gm_accepting(const uint32_t *set) {
    uint32_t count = set[0];
    const uint32_t *p = set + 2;
    for (uint32_t k = 0; k < count; k++) {
        if (p[0] == 0) return 1;
        p += 1 + p[0];
    }
    return 0;
}

int pl_gm_finished(const uint32_t *set) {
    uint32_t count = set[0];
    const uint32_t *p = set + 2;
    for (uint32_t k = 0; k < count; k++) {
        if (p[0] != 0) return 0;
        p += 1 + p[0];
    }
    return 1;
}

void pl_gm_free(pl_gmatch *m) {
    free(m->scratch.d);
    m->scratch = (pl_u32vec){0};
    free(m->ht);
    m->ht = NULL;
    free(m->seen_ht);
    m->seen_ht = NULL;
    free(m->seen.d);
    m->seen = (pl_u32vec){0};
}
