/*
 * Host-side sampling. Greedy is argmax (lowest id wins a tie). Otherwise the
 * chain is llama.cpp's: top-k -> top-p -> min-p -> temperature -> draw, where
 * the draw consumes exactly one uniform value from a seeded xoshiro256**
 * stream, so one seed reproduces one text.
 *
 * Logits that are NaN or +Inf (or all -Inf) mean the model's arithmetic
 * broke -- corrupt or badly quantized weights. Argmax over them silently
 * picked token 0 ("!" in Qwen vocabularies: "!!!!!!" and exit 0), so the
 * argmax scan, which every sampling call makes anyway, also checks every
 * value: one compare per logit in the same loop. A bad row makes
 * pl_sampler_sample return -1 with the reason in pl_last_error(). -Inf alone
 * is a masked token and stays allowed.
 */
#include "core/status.h"
#include "pocketllm.h"
#include <math.h>
#include <stdlib.h>
#include <string.h>

typedef struct cand { float logit; int32_t id; } cand;

struct pl_sampler {
    pl_sampler_params p;
    int32_t n_vocab;
    uint64_t s[4];
    cand *c;
    uint64_t n_sampled;   /* calls so far: names the token in an error */
    pl_grammar *grammar;  /* not owned; NULL: unconstrained */
    float *masked;        /* logits copy the grammar masks */
};

static uint64_t splitmix64(uint64_t *x) {
    uint64_t z = (*x += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

static uint64_t rotl(uint64_t x, int k) { return (x << k) | (x >> (64 - k)); }

static uint64_t next_u64(pl_sampler *s) {
    uint64_t *st = s->s;
    const uint64_t result = rotl(st[1] * 5, 7) * 9;
    const uint64_t t = st[1] << 17;
    st[2] ^= st[0]; st[3] ^= st[1]; st[1] ^= st[2]; st[0] ^= st[3];
    st[2] ^= t;
    st[3] = rotl(st[3], 45);
    return result;
}

/* Uniform in [0, 1) with 53 random bits. */
static double next_uniform(pl_sampler *s) { return (double)(next_u64(s) >> 11) * 0x1.0p-53; }

PL_API pl_sampler_params pl_sampler_default_params(void) {
    pl_sampler_params p = {0};
    p.temperature = 0.0f;
    p.top_k = 40;
    p.top_p = 0.95f;
    p.min_p = 0.05f;
    p.seed = 0x5eed;
    return p;
}

PL_API pl_status pl_sampler_create(const pl_sampler_params *p, int32_t n_vocab, pl_sampler **out) {
    *out = NULL;
    if (!p || n_vocab <= 0) return pl_errorf(PL_ERR_INVALID_ARG, "bad sampler parameters");
    if (!isfinite(p->temperature) || !isfinite(p->top_p) || !isfinite(p->min_p) || p->top_p < 0 || p->min_p > 1)
        return pl_errorf(PL_ERR_INVALID_ARG, "sampler parameters out of range");
    pl_sampler *s = calloc(1, sizeof *s);
    if (!s) return pl_errorf(PL_ERR_NO_MEMORY, "out of memory");
    s->c = malloc((size_t)n_vocab * sizeof *s->c);
    if (!s->c) { free(s); return pl_errorf(PL_ERR_NO_MEMORY, "out of memory"); }
    s->p = *p;
    s->n_vocab = n_vocab;
    uint64_t x = p->seed;
    for (int i = 0; i < 4; i++) s->s[i] = splitmix64(&x);
    *out = s;
    return PL_OK;
}

PL_API void pl_sampler_free(pl_sampler *s) {
    if (!s) return;
    free(s->c);
    free(s->masked);
    free(s);
}

static int cmp_cand_desc(const void *a, const void *b) {
    const cand *x = a, *y = b;
    if (x->logit != y->logit) return x->logit < y->logit ? 1 : -1;
    return x->id < y->id ? -1 : x->id > y->id;
}

/* Moves the k largest to the front (unordered), expected O(n). */
static void select_top_k(cand *c, int n, int k) {
    int lo = 0, hi = n - 1;
    while (lo < hi) {
        cand pivot = c[lo + (hi - lo) / 2];
        int i = lo, j = hi;
        while (i <= j) {
            while (cmp_cand_desc(&c[i], &pivot) < 0) i++;
            while (cmp_cand_desc(&c[j], &pivot) > 0) j--;
            if (i <= j) { cand t = c[i]; c[i] = c[j]; c[j] = t; i++; j--; }
        }
        if (k - 1 <= j) hi = j;
        else if (k - 1 >= i) lo = i;
        else break;
    }
}

/* Index of the largest logit (lowest id on ties), or -1 if a logit is NaN
 * or +Inf or all are -Inf. !(x < INFINITY) is true exactly for NaN and +Inf;
 * it is OR-ed into a flag rather than branched on, so the loop stays as
 * cheap as the plain argmax. */
static int32_t argmax_checked(const float *logits, int32_t n) {
    int32_t best = 0;
    float bv = logits[0];
    int bad = !(bv < INFINITY);
    for (int32_t i = 1; i < n; i++) {
        float x = logits[i];
        bad |= !(x < INFINITY);
        if (x > bv) { bv = x; best = i; }
    }
    return bad || bv == -INFINITY ? -1 : best;
}

/* The error for a row argmax_checked refused (a second scan, error path only). */
static int32_t bad_logits(const pl_sampler *s, const float *logits) {
    int32_t id = 0;
    while (id < s->n_vocab - 1 && logits[id] < INFINITY) id++;
    if (logits[id] < INFINITY) {
        pl_errorf(PL_ERR_FORMAT, "the model produced NaN/Inf logits at generated token %llu (every logit is -inf)"
                  " -- corrupt or badly quantized weights?", (unsigned long long)s->n_sampled);
    } else {
        pl_errorf(PL_ERR_FORMAT, "the model produced NaN/Inf logits at generated token %llu (token id %d has logit %s)"
                  " -- corrupt or badly quantized weights?", (unsigned long long)s->n_sampled, id,
                  isnan(logits[id]) ? "nan" : "inf");
    }
    return -1;
}

PL_API void pl_sampler_set_grammar(pl_sampler *s, pl_grammar *g) {
    if (s) s->grammar = g;
}

static int32_t sample_row(pl_sampler *s, const float *logits, int32_t best);

PL_API int32_t pl_sampler_sample(pl_sampler *s, const float *logits) {
    s->n_sampled++;
    int32_t best = argmax_checked(logits, s->n_vocab);
    if (best < 0) return bad_logits(s, logits);
    if (!s->grammar) return sample_row(s, logits, best);
    /* Grammar: greedy tries the argmax first -- if it is allowed it is also
     * the argmax of the masked row (ties included: it is the lowest id among
     * the maximal ones), so the full mask is only needed when it is not. */
    if (s->p.temperature <= 0.0f && pl_grammar_allows(s->grammar, best)) {
        if (pl_grammar_accept(s->grammar, best) != PL_OK) return -1;
        return best;
    }
    if (s->p.temperature <= 0.0f) {
        /* Then the next best few, in (logit desc, id asc) order: the first
         * allowed one is the masked argmax, since every token ranked above
         * it is among them and rejected. A full mask costs a walk of the
         * vocabulary trie; this is one selection pass. */
        enum { K = 32 };
        int n = 0;
        for (int32_t i = 0; i < s->n_vocab; i++) s->c[n++] = (cand){logits[i], i};
        int k = n < K ? n : K;
        select_top_k(s->c, n, k);
        qsort(s->c, (size_t)k, sizeof *s->c, cmp_cand_desc);
        for (int i = 0; i < k && s->c[i].logit > -INFINITY; i++) {
            if (!pl_grammar_allows(s->grammar, s->c[i].id)) continue;
            if (pl_grammar_accept(s->grammar, s->c[i].id) != PL_OK) return -1;
            return s->c[i].id;
        }
    }
    if (!s->masked && !(s->masked = malloc((size_t)s->n_vocab * sizeof *s->masked))) {
        pl_errorf(PL_ERR_NO_MEMORY, "out of memory");
        return -1;
    }
    memcpy(s->masked, logits, (size_t)s->n_vocab * sizeof *s->masked);
    if (pl_grammar_apply(s->grammar, s->masked) != PL_OK) return -1;
    best = argmax_checked(s->masked, s->n_vocab);
    if (best < 0) {
        pl_errorf(PL_ERR_INVALID_ARG, "the grammar allows no token at generated token %llu",
                  (unsigned long long)s->n_sampled);
        return -1;
    }
    int32_t tok = sample_row(s, s->masked, best);
    /* the draw's last-candidate fallback (rounding) must not pick a masked token */
    if (tok >= 0 && s->masked[tok] == -INFINITY) tok = best;
    if (tok >= 0 && pl_grammar_accept(s->grammar, tok) != PL_OK) return -1;
    return tok;
}

/* The sampling chain on a row already checked by argmax_checked. */
static int32_t sample_row(pl_sampler *s, const float *logits, int32_t best) {
    const pl_sampler_params *p = &s->p;
    if (p->temperature <= 0.0f) return best;

    /* Candidates. Without top-k, tokens 40 nats below the best carry less
     * than 1e-12 of the mass in total: dropping them avoids a full sort. */
    float maxl = logits[best];
    int n = 0;
    for (int32_t i = 0; i < s->n_vocab; i++) {
        if (p->top_k <= 0 && logits[i] < maxl - 40.0f) continue;
        s->c[n++] = (cand){logits[i], i};
    }
    if (n == 0) return best;
    if (p->top_k > 0 && p->top_k < n) {
        select_top_k(s->c, n, p->top_k);
        n = p->top_k;
    }
    qsort(s->c, (size_t)n, sizeof *s->c, cmp_cand_desc);

    /* top-p on the softmax at temperature 1. */
    if (p->top_p < 1.0f) {
        double z = 0;
        for (int i = 0; i < n; i++) z += exp((double)s->c[i].logit - s->c[0].logit);
        double cum = 0;
        for (int i = 0; i < n; i++) {
            cum += exp((double)s->c[i].logit - s->c[0].logit) / z;
            if (cum >= p->top_p) { n = i + 1; break; }
        }
    }
    /* min-p: keep p_i >= min_p * p_max. */
    if (p->min_p > 0.0f) {
        double cut = (double)s->c[0].logit + log((double)p->min_p);
        int keep = 1;
        while (keep < n && s->c[keep].logit >= cut) keep++;
        n = keep;
    }
    /* Temperature, then one draw. */
    double z = 0;
    for (int i = 0; i < n; i++) z += exp(((double)s->c[i].logit - s->c[0].logit) / p->temperature);
    double u = next_uniform(s) * z, cum = 0;
    for (int i = 0; i < n; i++) {
        cum += exp(((double)s->c[i].logit - s->c[0].logit) / p->temperature);
        if (u < cum) return s->c[i].id;
    }
    return s->c[n - 1].id;
}
