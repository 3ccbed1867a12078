/*
 * pl_grammar: a compiled grammar bound to a vocabulary, plus its matching
 * state. Masking a logits row walks a trie of the vocabulary's token bytes
 * against the current stack set: one step per trie edge, so a byte that no
 * stack accepts rejects every token below it at once (for a JSON grammar
 * expecting '"', one failed edge drops all 151k-vocab tokens not starting
 * with '"'). Masks are cached keyed by the exact matcher state (stack set +
 * partial UTF-8), because decoding revisits the same states (inside a
 * string, between array items) over and over.
 *
 * Immutable parts (rules, vocabulary trie) are shared by clones through
 * atomic reference counts, so a server can compile a grammar once and hand
 * each request a clone; mutable state and the mask cache are per clone, so
 * clones may run on different threads.
 */
#include "sampling/grammar.h"
#include "core/status.h"
#include "engine/model.h"
#include <math.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#define CACHE_SLOTS 64

typedef struct gvocab {
    atomic_int refs;
    int32_t n_vocab;
    uint8_t *bytes;        /* every token's piece, back to back */
    uint32_t *off;         /* [n_vocab + 1] */
    uint8_t *eog;          /* [n_vocab] */
    /* trie: node 0 is the root */
    uint32_t n_nodes;
    uint32_t *first_child, *sibling, *tok_begin, *tok_count;
    uint8_t *edge;         /* byte on the edge into the node */
    int32_t *sorted;       /* token ids in trie (piece) order */
} gvocab;

typedef struct grshared { atomic_int refs; pl_grules *rules; } grshared;

typedef struct cache_ent { uint64_t hash; uint32_t *key; size_t key_n; uint64_t *bits; } cache_ent;

struct pl_grammar {
    grshared *sh;
    gvocab *voc;          /* NULL: text-only grammar */
    pl_gmatch m;
    pl_u32vec cur;        /* the current stack set, at offset 0 */
    pl_utf8_partial partial;
    bool eog_seen;
    pl_u32vec work;
    cache_ent cache[CACHE_SLOTS];
    int cache_next;
    uint64_t *bits;       /* mask being built */
};

/* ---- vocabulary trie ---------------------------------------------------- */

static void gvocab_release(gvocab *v) {
    if (!v || atomic_fetch_sub(&v->refs, 1) != 1) return;
    free(v->bytes); free(v->off); free(v->eog);
    free(v->first_child); free(v->sibling); free(v->tok_begin); free(v->tok_count);
    free(v->edge); free(v->sorted);
    free(v);
}

typedef struct sort_ent { const uint8_t *p; uint32_t len; int32_t id; } sort_ent;

static int cmp_piece(const void *a, const void *b) {
    const sort_ent *x = a, *y = b;
    uint32_t n = x->len < y->len ? x->len : y->len;
    int c = memcmp(x->p, y->p, n);
    if (c) return c;
    if (x->len != y->len) return x->len < y->len ? -1 : 1;
    return x->id < y->id ? -1 : x->id > y->id;
}

static pl_status gvocab_build(const pl_model *model, gvocab **out) {
    *out = NULL;
    int32_t n = pl_model_n_vocab(model);
    if (n <= 0) return pl_errorf(PL_ERR_INVALID_ARG, "grammar: the model has no vocabulary");
    gvocab *v = calloc(1, sizeof *v);
    sort_ent *se = NULL;
    uint32_t *last_child = NULL;
    if (!v) return pl_errorf(PL_ERR_NO_MEMORY, "out of memory");
    atomic_init(&v->refs, 1);
    v->n_vocab = n;
    v->off = malloc(((size_t)n + 1) * sizeof *v->off);
    v->eog = calloc((size_t)n, 1);
    size_t cap = (size_t)n * 8 + 64, used = 0;
    v->bytes = malloc(cap);
    if (!v->off || !v->eog || !v->bytes) goto oom;
    for (int32_t id = 0; id < n; id++) {
        size_t len = 0;
        v->off[id] = (uint32_t)used;
        v->eog[id] = pl_token_is_eog(model, id);
        pl_status st = pl_token_to_piece(model, id, false, (char *)v->bytes + used, cap - used, &len);
        if (st != PL_OK && len > 0 && used + len > cap) {
            while (cap < used + len) cap *= 2;
            uint8_t *nb = realloc(v->bytes, cap);
            if (!nb) goto oom;
            v->bytes = nb;
            st = pl_token_to_piece(model, id, false, (char *)v->bytes + used, cap - used, &len);
        }
        if (st != PL_OK) len = 0;   /* unusable token: never allowed */
        used += len;
    }
    v->off[n] = (uint32_t)used;
    se = malloc((size_t)n * sizeof *se);
    if (!se) goto oom;
    int32_t m = 0;
    size_t max_nodes = 1;
    for (int32_t id = 0; id < n; id++) {
        uint32_t len = v->off[id + 1] - v->off[id];
        if (!len) continue;
        se[m++] = (sort_ent){v->bytes + v->off[id], len, id};
        max_nodes += len;
    }
    qsort(se, (size_t)m, sizeof *se, cmp_piece);
    v->first_child = calloc(max_nodes, sizeof(uint32_t));
    v->sibling = calloc(max_nodes, sizeof(uint32_t));
    v->tok_begin = calloc(max_nodes, sizeof(uint32_t));
    v->tok_count = calloc(max_nodes, sizeof(uint32_t));
    v->edge = calloc(max_nodes, 1);
    v->sorted = malloc(((size_t)m + 1) * sizeof *v->sorted);
    last_child = calloc(max_nodes, sizeof *last_child);
    uint32_t path_cap = 1024, *path = malloc(path_cap * sizeof *path);
    if (!v->first_child || !v->sibling || !v->tok_begin || !v->tok_count || !v->edge || !v->sorted || !last_child || !path) {
        free(path);
        goto oom;
    }
    uint32_t nn = 1;
    path[0] = 0;
    for (int32_t i = 0; i < m; i++) {
        uint32_t lcp = 0;
        if (i > 0) {
            uint32_t lim = se[i].len < se[i - 1].len ? se[i].len : se[i - 1].len;
            while (lcp < lim && se[i].p[lcp] == se[i - 1].p[lcp]) lcp++;
        }
        if (se[i].len + 1 > path_cap) {
            while (path_cap < se[i].len + 1) path_cap *= 2;
            uint32_t *np = realloc(path, path_cap * sizeof *np);
            if (!np) { free(path); goto oom; }
            path = np;
        }
        for (uint32_t d = lcp; d < se[i].len; d++) {
            uint32_t parent = path[d], node = nn++;
            v->edge[node] = se[i].p[d];
            if (last_child[parent]) v->sibling[last_child[parent]] = node;
            else v->first_child[parent] = node;
            last_child[parent] = node;
            path[d + 1] = node;
        }
        uint32_t node = path[se[i].len];
        if (!v->tok_count[node]) v->tok_begin[node] = (uint32_t)i;
        v->tok_count[node]++;
        v->sorted[i] = se[i].id;
    }
    v->n_nodes = nn;
    free(path);
    free(last_child);
    free(se);
    *out = v;
    return PL_OK;
oom:
    free(last_child);
    free(se);
    gvocab_release(v);
    return pl_errorf(PL_ERR_NO_MEMORY, "out of memory");
}

static void gvocab_release_any(void *v) { gvocab_release(v); }

/* The model's shared trie (model.h: grammar_vocab), built on first use. Two
 * threads racing here may both build; one wins the swap, the other frees its
 * copy. Returns a new reference. */
static pl_status gvocab_get(const pl_model *cmodel, gvocab **out) {
    pl_model *model = (pl_model *)cmodel;   /* the cache is the only mutable part */
    gvocab *v = atomic_load(&model->grammar_vocab);
    if (v) {
        atomic_fetch_add(&v->refs, 1);
        *out = v;
        return PL_OK;
    }
    PL_TRY(gvocab_build(cmodel, &v));
    atomic_fetch_add(&v->refs, 1);           /* the model's reference */
    model->grammar_vocab_release = gvocab_release_any;
    void *expected = NULL;
    if (!atomic_compare_exchange_strong(&model->grammar_vocab, &expected, v)) {
        atomic_fetch_sub(&v->refs, 1);
        gvocab_release(v);
        v = expected;
        atomic_fetch_add(&v->refs, 1);
    }
    *out = v;
    return PL_OK;
}

/* ---- state ----------------------------------------------------------------*/

static void cache_clear(pl_grammar *g) {
    for (int i = 0; i < CACHE_SLOTS; i++) {
        free(g->cache[i].key);
        free(g->cache[i].bits);
        g->cache[i] = (cache_ent){0};
    }
    g->cache_next = 0;
}

PL_API void pl_grammar_free(pl_grammar *g) {
    if (!g) return;
    cache_clear(g);
    free(g->bits);
    free(g->cur.d);
    free(g->work.d);
    pl_gm_free(&g->m);
    if (g->sh && atomic_fetch_sub(&g->sh->refs, 1) == 1) {
        pl_grules_free(g->sh->rules);
        free(g->sh);
    }
    gvocab_release(g->voc);
    free(g);
}

/* The matcher's limits (grammar.h) were hit while matching `what`. */
static pl_status too_ambiguous(const char *what) {
    return pl_errorf(PL_ERR_UNSUPPORTED,
                     "grammar: too ambiguous (%s needs more than the matcher allows: %d live parse stacks, %u words, "
                     "%u words expanded per character, %llu per token mask)",
                     what, PL_GM_MAX_STACKS, PL_GM_MAX_WORDS, PL_GM_MAX_WORK, (unsigned long long)PL_GM_MAX_MASK_WORK);
}

static pl_status set_initial(pl_grammar *g) {
    g->cur.n = 0;
    g->partial = (pl_utf8_partial){0};
    g->eog_seen = false;
    g->m.overflow = 0;
    if (pl_gm_initial(&g->m, &g->cur) == (size_t)-1)
        return g->m.overflow ? too_ambiguous("its start")
                             : pl_errorf(PL_ERR_NO_MEMORY, "out of memory");
    return PL_OK;
}

static pl_status grammar_new(grshared *sh, gvocab *voc, pl_grammar **out) {
    pl_grammar *g = calloc(1, sizeof *g);
    if (!g) return pl_errorf(PL_ERR_NO_MEMORY, "out of memory");
    g->sh = sh;
    atomic_fetch_add(&sh->refs, 1);
    if (voc) { g->voc = voc; atomic_fetch_add(&voc->refs, 1); }
    g->m.r = sh->rules;
    if (voc && !(g->bits = malloc(((size_t)voc->n_vocab + 63) / 64 * 8))) {
        pl_grammar_free(g);
        return pl_errorf(PL_ERR_NO_MEMORY, "out of memory");
    }
    *out = g;
    return PL_OK;
}

static pl_status from_rules(const pl_model *model, pl_grules *rules, pl_grammar **out) {
    grshared *sh = calloc(1, sizeof *sh);
    if (!sh) { pl_grules_free(rules); return pl_errorf(PL_ERR_NO_MEMORY, "out of memory"); }
    atomic_init(&sh->refs, 1);
    sh->rules = rules;
    gvocab *voc = NULL;
    pl_status st = model ? gvocab_get(model, &voc) : PL_OK;
    pl_grammar *g = NULL;
    if (st == PL_OK) st = grammar_new(sh, voc, &g);
    /* drop the builders' references: g holds its own */
    if (atomic_fetch_sub(&sh->refs, 1) == 1) { pl_grules_free(sh->rules); free(sh); }
    gvocab_release(voc);
    if (st == PL_OK && (st = set_initial(g)) != PL_OK) { pl_grammar_free(g); g = NULL; }
    *out = g;
    return st;
}

PL_API pl_status pl_grammar_from_gbnf(const pl_model *vocab_source, const char *text, size_t len, pl_grammar **out) {
    if (!out) return pl_errorf(PL_ERR_INVALID_ARG, "grammar: NULL out");
    *out = NULL;
    pl_grules *r = NULL;
    PL_TRY(pl_gbnf_parse(text, len, NULL, &r));
    return from_rules(vocab_source, r, out);
}

PL_API pl_status pl_json_schema_to_gbnf(const char *schema, size_t len, char **gbnf, size_t *gbnf_len) {
    if (!gbnf) return pl_errorf(PL_ERR_INVALID_ARG, "json schema: NULL out");
    size_t dummy;
    return pl_json_schema_compile(schema, len, gbnf, gbnf_len ? gbnf_len : &dummy);
}

PL_API pl_status pl_grammar_from_json_schema(const pl_model *vocab_source, const char *schema, size_t len,
                                             pl_grammar **out) {
    if (!out) return pl_errorf(PL_ERR_INVALID_ARG, "grammar: NULL out");
    *out = NULL;
    char *gbnf = NULL;
    size_t glen = 0;
    PL_TRY(pl_json_schema_compile(schema, len, &gbnf, &glen));
    pl_grules *r = NULL;
    pl_status st = pl_gbnf_parse(gbnf, glen, NULL, &r);
    free(gbnf);
    if (st != PL_OK) return pl_error_prefix(st, "json schema: internal grammar error");
    return from_rules(vocab_source, r, out);
}

PL_API pl_status pl_grammar_clone(const pl_grammar *src, pl_grammar **out) {
    if (!src || !out) return pl_errorf(PL_ERR_INVALID_ARG, "grammar: NULL argument");
    *out = NULL;
    pl_grammar *g = NULL;
    PL_TRY(grammar_new(src->sh, src->voc, &g));
    if (pl_u32vec_reserve(&g->cur, src->cur.n)) { pl_grammar_free(g); return pl_errorf(PL_ERR_NO_MEMORY, "out of memory"); }
    memcpy(g->cur.d, src->cur.d, src->cur.n * sizeof *g->cur.d);
    g->cur.n = src->cur.n;
    g->partial = src->partial;
    g->eog_seen = src->eog_seen;
    *out = g;
    return PL_OK;
}

PL_API pl_status pl_grammar_reset(pl_grammar *g) {
    if (!g) return pl_errorf(PL_ERR_INVALID_ARG, "grammar: NULL");
    return set_initial(g);
}

PL_API bool pl_grammar_is_accepting(const pl_grammar *g) {
    return g && (g->eog_seen || (g->partial.n_remain == 0 && pl_gm_accepting(g->cur.d)));
}

PL_API bool pl_grammar_is_done(const pl_grammar *g) {
    return g && (g->eog_seen || (g->partial.n_remain == 0 && pl_gm_finished(g->cur.d)));
}

/* Runs bytes from the current state in g->work. 1: viable (*set_off is the
 * resulting set, *pp the partial state), 0: rejected, -1: out of memory or
 * too ambiguous (g->m.overflow). */
static int run_bytes(pl_grammar *g, const uint8_t *b, size_t n, pl_utf8_partial *pp, size_t *set_off) {
    g->m.overflow = 0;
    g->work.n = 0;
    if (pl_u32vec_reserve(&g->work, g->cur.n)) return -1;
    memcpy(g->work.d, g->cur.d, g->cur.n * sizeof *g->work.d);
    g->work.n = g->cur.n;
    size_t set = 0;
    *pp = g->partial;
    for (size_t i = 0; i < n; i++) {
        uint32_t cp;
        int r = pl_utf8_feed(pp, b[i], &cp);
        if (r < 0) return 0;
        if (r == 0) continue;
        size_t ns = pl_gm_accept_cp(&g->m, &g->work, set, cp);
        if (ns == (size_t)-1) return -1;
        if (g->work.d[ns] == 0) return 0;
        /* keep only the newest set: move it to the front */
        size_t words = 2 + g->work.d[ns + 1];
        memmove(g->work.d, g->work.d + ns, words * sizeof *g->work.d);
        g->work.n = words;
        set = 0;
    }
    if (pp->n_remain && !pl_gm_partial_ok(&g->m, g->work.d + set, pp)) return 0;
    *set_off = set;
    return 1;
}

static void commit_work(pl_grammar *g, size_t set, pl_utf8_partial pp) {
    size_t words = 2 + g->work.d[set + 1];
    pl_u32vec t = g->cur;
    g->cur = g->work;
    g->work = t;
    if (set) memmove(g->cur.d, g->cur.d + set, words * sizeof *g->cur.d);
    g->cur.n = words;
    g->partial = pp;
}

PL_API pl_status pl_grammar_accept_text(pl_grammar *g, const char *text, size_t len) {
    if (!g || (!text && len)) return pl_errorf(PL_ERR_INVALID_ARG, "grammar: bad arguments");
    if (g->eog_seen) return pl_errorf(PL_ERR_INVALID_ARG, "grammar: the output has already ended");
    pl_utf8_partial pp;
    size_t set = 0;
    int r = run_bytes(g, (const uint8_t *)text, len, &pp, &set);
    if (r < 0 && g->m.overflow)
        return too_ambiguous("a step");
    if (r < 0) return pl_errorf(PL_ERR_NO_MEMORY, "out of memory");
    if (r == 0) return pl_errorf(PL_ERR_INVALID_ARG, "grammar: the text is not allowed here");
    commit_work(g, set, pp);
    return PL_OK;
}

PL_API bool pl_grammar_allows(pl_grammar *g, int32_t token) {
    if (!g || !g->voc || token < 0 || token >= g->voc->n_vocab || g->eog_seen) return false;
    if (g->voc->eog[token]) return pl_grammar_is_accepting(g);
    uint32_t o = g->voc->off[token], n = g->voc->off[token + 1] - o;
    if (!n) return false;
    pl_utf8_partial pp;
    size_t set;
    return run_bytes(g, g->voc->bytes + o, n, &pp, &set) == 1;
}

PL_API pl_status pl_grammar_accept(pl_grammar *g, int32_t token) {
    if (!g || !g->voc) return pl_errorf(PL_ERR_INVALID_ARG, "grammar: no vocabulary (built without a model)");
    if (token < 0 || token >= g->voc->n_vocab) return pl_errorf(PL_ERR_INVALID_ARG, "grammar: token %d out of range", token);
    if (g->eog_seen) return pl_errorf(PL_ERR_INVALID_ARG, "grammar: token %d after the end of the output", token);
    if (g->voc->eog[token]) {
        if (!pl_grammar_is_accepting(g)) return pl_errorf(PL_ERR_INVALID_ARG, "grammar: end of generation (token %d) before the grammar is complete", token);
        g->eog_seen = true;
        return PL_OK;
    }
    uint32_t o = g->voc->off[token], n = g->voc->off[token + 1] - o;
    pl_utf8_partial pp;
    size_t set = 0;
    int r = n ? run_bytes(g, g->voc->bytes + o, n, &pp, &set) : 0;
    if (r < 0 && g->m.overflow)
        return too_ambiguous("a step");
    if (r < 0) return pl_errorf(PL_ERR_NO_MEMORY, "out of memory");
    if (r == 0) return pl_errorf(PL_ERR_INVALID_ARG, "grammar: token %d is not allowed here", token);
    commit_work(g, set, pp);
    return PL_OK;
}

/* ---- masks --------------------------------------------------------------- */

typedef struct walk { pl_grammar *g; const gvocab *v; uint64_t *bits; int oom; uint64_t work; } walk;

static void allow_node(walk *w, uint32_t node) {
    for (uint32_t k = 0; k < w->v->tok_count[node]; k++) {
        int32_t id = w->v->sorted[w->v->tok_begin[node] + k];
        w->bits[id >> 6] |= 1ull << (id & 63);
    }
}

/* Allows every token below `node` whose bytes the set at work[set] (with
 * partial state pp) accepts. The work buffer grows by one set per level and
 * is truncated back on return. */
static void walk_trie(walk *w, uint32_t node, size_t set, pl_utf8_partial pp) {
    pl_u32vec *wk = &w->g->work;
    for (uint32_t c = w->v->first_child[node]; c && !w->oom; c = w->v->sibling[c]) {
        pl_utf8_partial np = pp;
        uint32_t cp;
        int r = pl_utf8_feed(&np, w->v->edge[c], &cp);
        if (r < 0) continue;
        size_t mark = wk->n, child_set = set;
        if (r == 1) {
            child_set = pl_gm_accept_cp(&w->g->m, wk, set, cp);
            if (child_set == (size_t)-1) { w->oom = 1; return; }
            w->work += w->g->m.work;
            if (w->work > PL_GM_MAX_MASK_WORK) { w->g->m.overflow = 1; w->oom = 1; return; }
            if (wk->d[child_set] == 0) { wk->n = mark; continue; }
        } else if (!pl_gm_partial_ok(&w->g->m, wk->d + set, &np)) {
            continue;
        }
        allow_node(w, c);
        if (w->v->first_child[c]) walk_trie(w, c, child_set, np);
        wk->n = mark;
    }
}

static uint64_t hash_words(const uint32_t *d, size_t n, pl_utf8_partial p) {
    uint64_t h = 1469598103934665603ull ^ ((uint64_t)p.value << 8 | (uint64_t)p.n_remain);
    for (size_t i = 0; i < n; i++) h = (h ^ d[i]) * 1099511628211ull;
    return h;
}

/* The mask for the current state: cached, else computed into g->bits. */
static const uint64_t *current_mask(pl_grammar *g, pl_status *st) {
    const gvocab *v = g->voc;
    size_t nw = ((size_t)v->n_vocab + 63) / 64;
    size_t key_n = g->cur.n + 2;
    uint64_t h = hash_words(g->cur.d, g->cur.n, g->partial);
    for (int i = 0; i < CACHE_SLOTS; i++) {
        cache_ent *e = &g->cache[i];
        if (e->bits && e->hash == h && e->key_n == key_n && !memcmp(e->key, g->cur.d, g->cur.n * sizeof *e->key) &&
            e->key[g->cur.n] == g->partial.value && e->key[g->cur.n + 1] == ((uint32_t)g->partial.n_remain | (uint32_t)g->partial.len << 8))
            return e->bits;
    }
    memset(g->bits, 0, nw * 8);
    g->work.n = 0;
    if (pl_u32vec_reserve(&g->work, g->cur.n)) { *st = pl_errorf(PL_ERR_NO_MEMORY, "out of memory"); return NULL; }
    memcpy(g->work.d, g->cur.d, g->cur.n * sizeof *g->work.d);
    g->work.n = g->cur.n;
    walk w = {g, v, g->bits, 0, 0};
    g->m.overflow = 0;
    if (!g->eog_seen) walk_trie(&w, 0, 0, g->partial);
    if (w.oom && g->m.overflow) {
        *st = too_ambiguous("a token mask");
        return NULL;
    }
    if (w.oom) { *st = pl_errorf(PL_ERR_NO_MEMORY, "out of memory"); return NULL; }
    if (pl_grammar_is_accepting(g) && !g->eog_seen)
        for (int32_t id = 0; id < v->n_vocab; id++)
            if (v->eog[id]) g->bits[id >> 6] |= 1ull << (id & 63);
    /* cache it (a failed allocation only skips caching) */
    cache_ent *e = &g->cache[g->cache_next];
    uint32_t *key = malloc(key_n * sizeof *key);
    uint64_t *bits = malloc(nw * 8);
    if (key && bits) {
        free(e->key); free(e->bits);
        memcpy(key, g->cur.d, g->cur.n * sizeof *key);
        key[g->cur.n] = g->partial.value;
        key[g->cur.n + 1] = (uint32_t)g->partial.n_remain | (uint32_t)g->partial.len << 8;
        memcpy(bits, g->bits, nw * 8);
        *e = (cache_ent){h, key, key_n, bits};
        g->cache_next = (g->cache_next + 1) % CACHE_SLOTS;
    } else {
        free(key); free(bits);
    }
    return g->bits;
}

PL_API pl_status pl_grammar_apply(pl_grammar *g, float *logits) {
    if (!g || !logits) return pl_errorf(PL_ERR_INVALID_ARG, "grammar: NULL argument");
    if (!g->voc) return pl_errorf(PL_ERR_INVALID_ARG, "grammar: no vocabulary (built without a model)");
    pl_status st = PL_OK;
    const uint64_t *bits = current_mask(g, &st);
    if (!bits) return st;
    int32_t n = g->voc->n_vocab;
    for (int32_t i = 0; i < n; i++)
        if (!(bits[i >> 6] >> (i & 63) & 1)) logits[i] = -INFINITY;
    return PL_OK;
}
