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
    struct sampler_mods *mods; /* penalties / logit bias; NULL = none set (the fast path) */
    pl_grammar *grammar;  /* not owned; NULL: unconstrained */
    float *masked;        /* logits copy the grammar masks */
};

static void mods_free(struct sampler_mods *m);
static const float *mods_apply(pl_sampler *s, const float *logits);
static void mods_record(pl_sampler *s, int32_t tok);

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
    mods_free(s->mods);
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
static int32_t grammar_sample(pl_sampler *s, const float *logits, int32_t best);

PL_API int32_t pl_sampler_sample(pl_sampler *s, const float *logits) {
    s->n_sampled++;
    int32_t best = argmax_checked(logits, s->n_vocab);
    if (best < 0) return bad_logits(s, logits);
    if (!s->mods && !s->grammar) return sample_row(s, logits, best);
    /* Penalties and bias work on a copy (the caller's row is not modified);
     * the raw row was checked above, and they add only finite amounts. The
     * grammar then constrains the modified row (llama.cpp applies its
     * grammar after the penalties too). */
    const float *row = logits;
    if (s->mods) {
        row = mods_apply(s, logits);
        best = 0;
        for (int32_t i = 1; i < s->n_vocab; i++)
            if (row[i] > row[best]) best = i;
    }
    int32_t tok = s->grammar ? grammar_sample(s, row, best) : sample_row(s, row, best);
    if (tok >= 0 && s->mods) mods_record(s, tok);
    return tok;
}

/* The sampling chain from top-k on under s->grammar; best is the argmax of
 * logits (already checked). Advances the grammar by the chosen token. */
static int32_t grammar_sample(pl_sampler *s, const float *logits, int32_t best) {
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

/* ---- penalties and logit bias ------------------------------------------------
 * Kept apart from the chain above: a sampler without any of them never
 * allocates this state and never copies a row. */

struct sampler_mods {
    float repeat, freq, presence;
    int32_t last_n;          /* 0 off, -1 whole history */
    int32_t *bias_id;
    float *bias;
    size_t n_bias;
    int32_t *hist;           /* prompt + sampled tokens (the repeat window) */
    size_t n_hist, cap_hist;
    int32_t *count;          /* per token: times sampled (frequency/presence) */
    int32_t *seen;           /* distinct sampled tokens, in order */
    size_t n_seen;
    uint32_t *stamp, cur;    /* dedups the repeat window per call */
    float *row;              /* the modified copy of the logits */
};

static void mods_free(struct sampler_mods *m) {
    if (!m) return;
    free(m->bias_id); free(m->bias); free(m->hist); free(m->count); free(m->seen); free(m->stamp); free(m->row);
    free(m);
}

static pl_status mods_get(pl_sampler *s) {
    if (s->mods) return PL_OK;
    struct sampler_mods *m = calloc(1, sizeof *m);
    size_t n = (size_t)s->n_vocab;
    if (m) {
        m->repeat = 1.0f;
        m->last_n = 64;
        m->count = calloc(n, sizeof *m->count);
        m->seen = malloc(n * sizeof *m->seen);
        m->stamp = calloc(n, sizeof *m->stamp);
        m->row = malloc(n * sizeof *m->row);
    }
    if (!m || !m->count || !m->seen || !m->stamp || !m->row) {
        mods_free(m);
        return pl_errorf(PL_ERR_NO_MEMORY, "out of memory");
    }
    s->mods = m;
    return PL_OK;
}

PL_API pl_status pl_sampler_set_penalties(pl_sampler *s, float repeat_penalty, int32_t repeat_last_n,
                                          float frequency_penalty, float presence_penalty) {
    if (!s) return pl_errorf(PL_ERR_INVALID_ARG, "no sampler");
    if (!(repeat_penalty > 0.0f) || !isfinite(repeat_penalty))
        return pl_errorf(PL_ERR_INVALID_ARG, "repeat_penalty must be a positive number, got %g", (double)repeat_penalty);
    if (repeat_last_n < -1) return pl_errorf(PL_ERR_INVALID_ARG, "repeat_last_n must be >= -1, got %d", repeat_last_n);
    if (!(frequency_penalty >= -2.0f && frequency_penalty <= 2.0f))
        return pl_errorf(PL_ERR_INVALID_ARG, "frequency_penalty must be between -2 and 2, got %g", (double)frequency_penalty);
    if (!(presence_penalty >= -2.0f && presence_penalty <= 2.0f))
        return pl_errorf(PL_ERR_INVALID_ARG, "presence_penalty must be between -2 and 2, got %g", (double)presence_penalty);
    pl_status st = mods_get(s);
    if (st != PL_OK) return st;
    s->mods->repeat = repeat_penalty;
    s->mods->last_n = repeat_last_n;
    s->mods->freq = frequency_penalty;
    s->mods->presence = presence_penalty;
    return PL_OK;
}

PL_API pl_status pl_sampler_set_logit_bias(pl_sampler *s, const int32_t *ids, const float *bias, size_t n) {
    if (!s || (n && (!ids || !bias))) return pl_errorf(PL_ERR_INVALID_ARG, "bad logit bias arguments");
    for (size_t i = 0; i < n; i++) {
        if (ids[i] < 0 || ids[i] >= s->n_vocab)
            return pl_errorf(PL_ERR_INVALID_ARG, "logit bias: token id %d is outside the vocabulary (0..%d)", ids[i],
                             s->n_vocab - 1);
        if (!isfinite(bias[i])) return pl_errorf(PL_ERR_INVALID_ARG, "logit bias of token %d is not finite", ids[i]);
    }
    pl_status st = mods_get(s);
    if (st != PL_OK) return st;
    struct sampler_mods *m = s->mods;
    int32_t *ni = n ? malloc(n * sizeof *ni) : NULL;
    float *nb = n ? malloc(n * sizeof *nb) : NULL;
    if (n && (!ni || !nb)) { free(ni); free(nb); return pl_errorf(PL_ERR_NO_MEMORY, "out of memory"); }
    if (n) { memcpy(ni, ids, n * sizeof *ni); memcpy(nb, bias, n * sizeof *nb); }
    free(m->bias_id); free(m->bias);
    m->bias_id = ni; m->bias = nb; m->n_bias = n;
    return PL_OK;
}

static pl_status hist_push(struct sampler_mods *m, int32_t tok) {
    if (m->n_hist == m->cap_hist) {
        size_t cap = m->cap_hist ? m->cap_hist * 2 : 256;
        int32_t *h = realloc(m->hist, cap * sizeof *h);
        if (!h) return pl_errorf(PL_ERR_NO_MEMORY, "out of memory");
        m->hist = h; m->cap_hist = cap;
    }
    m->hist[m->n_hist++] = tok;
    return PL_OK;
}

PL_API pl_status pl_sampler_add_history(pl_sampler *s, const int32_t *ids, size_t n) {
    if (!s || (n && !ids)) return pl_errorf(PL_ERR_INVALID_ARG, "bad history arguments");
    pl_status st = mods_get(s);
    for (size_t i = 0; i < n && st == PL_OK; i++) {
        if (ids[i] < 0 || ids[i] >= s->n_vocab)
            return pl_errorf(PL_ERR_INVALID_ARG, "history: token id %d is outside the vocabulary", ids[i]);
        st = hist_push(s->mods, ids[i]);
    }
    return st;
}

/* A sampled token joins the repeat window and the generated counts. An
 * allocation failure only shortens the window. */
static void mods_record(pl_sampler *s, int32_t tok) {
    struct sampler_mods *m = s->mods;
    if (tok < 0) return;
    (void)hist_push(m, tok);
    if (m->count[tok]++ == 0) m->seen[m->n_seen++] = tok;
}

/* bias -> repeat penalty over the window -> frequency/presence over the
 * generated tokens, as llama.cpp orders logit_bias before its penalties
 * sampler (which applies repeat, then frequency/presence, per token). */
static const float *mods_apply(pl_sampler *s, const float *logits) {
    struct sampler_mods *m = s->mods;
    float *row = m->row;
    memcpy(row, logits, (size_t)s->n_vocab * sizeof *row);
    for (size_t i = 0; i < m->n_bias; i++) row[m->bias_id[i]] += m->bias[i];
    if (m->repeat != 1.0f && m->last_n != 0 && m->n_hist) {
        size_t n = m->last_n < 0 || (size_t)m->last_n > m->n_hist ? m->n_hist : (size_t)m->last_n;
        if (++m->cur == 0) { memset(m->stamp, 0, (size_t)s->n_vocab * sizeof *m->stamp); m->cur = 1; }
        for (size_t i = m->n_hist - n; i < m->n_hist; i++) {
            int32_t t = m->hist[i];
            if (m->stamp[t] == m->cur) continue; /* once per distinct token, as llama.cpp */
            m->stamp[t] = m->cur;
            row[t] = row[t] <= 0.0f ? row[t] * m->repeat : row[t] / m->repeat;
        }
    }
    if (m->freq != 0.0f || m->presence != 0.0f)
        for (size_t i = 0; i < m->n_seen; i++) {
            int32_t t = m->seen[i];
            row[t] -= m->freq * (float)m->count[t] + m->presence;
        }
    return row;
}

/* ---- log-probabilities -------------------------------------------------------*/

/* a ranks below b: smaller logit, or equal and larger id. */
static int lp_worse(const pl_token_logprob *a, const pl_token_logprob *b) {
    return a->logprob < b->logprob || (a->logprob == b->logprob && a->token > b->token);
}

static void heap_down(pl_token_logprob *h, int32_t n, int32_t i) {
    for (;;) {
        int32_t l = 2 * i + 1, r = l + 1, w = i;
        if (l < n && lp_worse(&h[l], &h[w])) w = l;
        if (r < n && lp_worse(&h[r], &h[w])) w = r;
        if (w == i) return;
        pl_token_logprob t = h[i]; h[i] = h[w]; h[w] = t;
        i = w;
    }
}

PL_API pl_status pl_logprobs(const float *logits, int32_t n_vocab, int32_t token, float *logprob,
                             pl_token_logprob *top, int32_t n_top) {
    if (!logits || n_vocab <= 0 || token < -1 || token >= n_vocab || n_top < 0 || n_top > n_vocab ||
        (n_top && !top))
        return pl_errorf(PL_ERR_INVALID_ARG, "bad logprobs arguments");
    /* One pass: the max and a min-heap of the n_top best (its root is the
     * worst kept), so the cost is O(n_vocab log n_top). */
    float mx = -INFINITY;
    int32_t nh = 0;
    for (int32_t i = 0; i < n_vocab; i++) {
        float x = logits[i];
        if (!(x < INFINITY)) return pl_errorf(PL_ERR_FORMAT, "logprobs: token id %d has logit %s", i, isnan(x) ? "nan" : "inf");
        if (x > mx) mx = x;
        if (!n_top) continue;
        pl_token_logprob c = {i, x};
        if (nh < n_top) {
            int32_t j = nh++;
            top[j] = c;
            while (j > 0 && lp_worse(&top[j], &top[(j - 1) / 2])) {
                pl_token_logprob t = top[j]; top[j] = top[(j - 1) / 2]; top[(j - 1) / 2] = t;
                j = (j - 1) / 2;
            }
        } else if (lp_worse(&top[0], &c)) {
            top[0] = c;
            heap_down(top, nh, 0);
        }
    }
    if (mx == -INFINITY) return pl_errorf(PL_ERR_FORMAT, "logprobs: every logit is -inf");
    double z = 0;
    for (int32_t i = 0; i < n_vocab; i++) z += (double)expf(logits[i] - mx); /* float exp: 3x faster, sum in double */
    double lse = (double)mx + log(z);
    /* Heap sort in place: repeatedly move the worst to the end. */
    for (int32_t n = nh; n > 1; n--) {
        pl_token_logprob t = top[0]; top[0] = top[n - 1]; top[n - 1] = t;
        heap_down(top, n - 1, 0);
    }
    for (int32_t i = 0; i < nh; i++) top[i].logprob = (float)((double)top[i].logprob - lse);
    if (logprob) *logprob = token >= 0 ? (float)((double)logits[token] - lse) : 0.0f;
    return PL_OK;
}
