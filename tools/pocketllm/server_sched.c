/*
 * The scheduler of `pocketllm serve`: a bounded FIFO queue of requests and
 * one thread that owns the model and runs continuous batching.
 *
 * Each step builds a single pl_batch: first one decode token for every
 * sequence that is generating, then prompt tokens of sequences still in
 * prefill (oldest admission first) up to the step's token budget: --batch
 * when no sequence is decoding, else as many as keep the step's predicted
 * time within --max-step-ms (by default a multiple of the measured decode
 * step; the step's time predicted as max(decode step, rows x row cost),
 * server_budget.c), at most --max-num-batched-tokens (vLLM's name; a
 * fixed count when it is given alone), so a long prompt is prefilled in
 * chunks interleaved with the running sequences' decode steps (chunked
 * prefill). The split of a prompt
 * into chunks does not change its numbers: the model is loaded
 * batch-invariant (tests/server/test_chunked_prefill.py). Logits are
 * requested for the decode tokens and for the last prompt token of a prompt
 * that completes in this step, so each slot contributes at most one row (the
 * engine returns at most n_seq rows per sub-batch). Every sequence has its
 * own slot, positions restarting at 0, and its own sampler, so batching does
 * not change what any one request generates.
 *
 * A request needs one free slot per choice (n x prompts); it is admitted
 * whole, in arrival order, when that many slots are free.
 *
 * Prompt cache: a finished sequence leaves its KV cache in its slot, and the
 * slot remembers the tokens at positions 0.. (slot_tok). A new sequence takes
 * the free slot whose tokens share the longest prefix with its prompt when
 * that prefix covers more than --slot-prompt-similarity of the prompt
 * (llama-server's rule), else the least recently used free slot; either way
 * it prefills only what follows the common prefix. Attention reads a slot's
 * positions 0..pos only, so the stale rows past the prefix need no clearing:
 * they are overwritten before they are read. The last prompt token is always
 * evaluated again, since its logits were not kept. Each token's K/V rows
 * depend only on the tokens before it, and the forward pass is
 * batch-invariant, so starting mid-sequence gives the same numbers as a full
 * prefill (tests/server/test_prompt_cache.py checks token identity).
 * With --cache-ram, what a slot held past the reused prefix is first copied
 * to host memory, and a prompt that a kept prefix covers further than its
 * slot does gets those rows copied back (server_spill.c). Last, a longer
 * prefix that another slot holds is copied from that slot (share_prefix).
 */
#include "server.h"
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#ifdef __GLIBC__
#include <malloc.h>
#endif

double pl_srv_now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + ts.tv_nsec / 1e9;
}

void pl_srv_log(const char *fmt, ...) {
    char line[1024];
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    struct tm tm;
    gmtime_r(&ts.tv_sec, &tm);
    int k = snprintf(line, sizeof line, "%02d:%02d:%02d.%03ld serve: ", tm.tm_hour, tm.tm_min, tm.tm_sec,
                     ts.tv_nsec / 1000000);
    va_list ap;
    va_start(ap, fmt);
    if (k > 0 && (size_t)k < sizeof line) vsnprintf(line + k, sizeof line - (size_t)k, fmt, ap);
    va_end(ap);
    /* One write per line keeps lines from different threads whole. */
    fprintf(stderr, "%s\n", line);
}

pl_srv_request *pl_srv_request_new(void) {
    pl_srv_request *r = calloc(1, sizeof *r);
    if (!r) return NULL;
    atomic_init(&r->refs, 1);
    atomic_init(&r->cancelled, false);
    pthread_mutex_init(&r->mu, NULL);
    /* Waiters use timed waits on the monotonic clock (wall-clock jumps must
     * not stall a stream). */
    pthread_condattr_t ca;
    pthread_condattr_init(&ca);
    pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
    pthread_cond_init(&r->cv, &ca);
    pthread_condattr_destroy(&ca);
    r->max_tokens = -1;
    return r;
}

void pl_srv_request_unref(pl_srv_request *r) {
    if (!r || atomic_fetch_sub(&r->refs, 1) != 1) return;
    for (int i = 0; i < r->n_seqs; i++) {
        pl_srv_text_free(&r->seqs[i].text);
        free(r->seqs[i].tokens);
        free(r->seqs[i].lps);
        pl_sampler_free(r->seqs[i].smp);
        pl_grammar_free(r->seqs[i].grammar);  /* after its sampler, which points at it */
        pl_srv_buf_free(&r->seqs[i].tool_text);
        pl_srv_buf_free(&r->seqs[i].tool_ws);
    }
    free(r->seqs);
    pl_grammar_free(r->grammar);
    for (int i = 0; i < r->n_prompts; i++) pl_free(r->prompts[i]);
    free(r->prompts);
    free(r->n_prompt_tok);
    for (size_t i = 0; i < r->n_stops; i++) free(r->stops[i]);
    free(r->bias_id);
    free(r->bias);
    pthread_mutex_destroy(&r->mu);
    pthread_cond_destroy(&r->cv);
    free(r);
}

int pl_srv_submit(pl_srv *s, pl_srv_request *r) {
    pthread_mutex_lock(&s->mu);
    s->m_requests++;
    /* --queue counts requests that wait for a slot. Queued requests that
     * free slots will take at the scheduler's next turn are not waiting: a
     * slot freed in the middle of a step (its request done, the response on
     * its way) is only claimed after the step, and a client that got its
     * answer and sent the next request at once was refused as busy. */
    int free_now = s->n_seq - s->slots_busy;
    if (s->stop_sched || s->q_len >= s->cfg.queue + (free_now > 0 ? free_now : 0)) {
        s->m_rejected++;
        pthread_mutex_unlock(&s->mu);
        return -1;
    }
    atomic_fetch_add(&r->refs, 1);
    r->t_submit = pl_srv_now();
    r->next = NULL;
    if (s->q_tail) s->q_tail->next = r;
    else s->q_head = r;
    s->q_tail = r;
    s->q_len++;
    pthread_cond_signal(&s->cv);
    pthread_mutex_unlock(&s->mu);
    return 0;
}

void pl_srv_cancel(pl_srv *s, pl_srv_request *r) {
    if (atomic_exchange(&r->cancelled, true)) return;
    /* A request still waiting for a slot leaves the queue now. Leaving it
     * for the scheduler to drop kept its place for as long as the forward
     * step in progress ran (seconds for a long prefill), and clients that
     * hung up and came back were refused as "busy" meanwhile. A running
     * request's slots are freed at the start of the next step. */
    pthread_mutex_lock(&s->mu);
    pl_srv_request *prev = NULL;
    for (pl_srv_request *q = s->q_head; q; prev = q, q = q->next) {
        if (q != r) continue;
        if (prev) prev->next = r->next;
        else s->q_head = r->next;
        if (s->q_tail == r) s->q_tail = prev;
        s->q_len--;
        s->m_cancelled++;
        r->next = NULL;
        pl_srv_request_unref(r); /* the queue's reference; the caller holds its own */
        break;
    }
    pthread_cond_signal(&s->cv);
    pthread_mutex_unlock(&s->mu);
}

/* ---- scheduler thread ------------------------------------------------------*/

/* Latency histogram bounds in seconds (TTFT and inter-token latency): from a
 * millisecond (a tiny model decoding) to ten seconds (a long queue). */
static const double hist_le[PL_SRV_HIST_BUCKETS] = {0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.075,
                                                    0.1,   0.25,   0.5,   1.0,  2.5,   5.0,  10.0};

static void hist_observe(pl_srv_hist *h, double v) {
    int b = 0;
    while (b < PL_SRV_HIST_BUCKETS && v > hist_le[b]) b++;
    h->count[b]++;
    h->sum += v;
    h->n++;
}

static int free_slots(pl_srv *s) {
    int n = 0;
    for (int i = 0; i < s->n_seq; i++) n += s->slot_seq[i] == NULL;
    return n;
}

/* Marks seq finished and frees its slot. Returns true when that was the last
 * running sequence of its request (the scheduler then drops its reference). */
/* Remembers what slot q's KV cache holds as q leaves it: the prompt, then
 * the sampled tokens that were fed back (q->pos positions in all; the last
 * sampled token never was). After a failed step the cache is in an unknown
 * state and is forgotten. */
static int32_t slot_keep(pl_srv *s, pl_srv_seq *q, bool ok) {
    int slot = q->slot;
    if (!s->cfg.prompt_cache || !ok || q->pos <= 0) return 0;
    size_t n = (size_t)q->pos;
    if (n > s->slot_cap[slot]) {
        int32_t *t = realloc(s->slot_tok[slot], n * sizeof *t);
        if (!t) return 0;
        s->slot_tok[slot] = t;
        s->slot_cap[slot] = n;
    }
    size_t np = n < q->n_prompt ? n : q->n_prompt;
    memcpy(s->slot_tok[slot], q->prompt, np * sizeof *q->prompt);
    /* q->tokens is written by this thread only: no lock needed to read it. */
    size_t ng = n - np;
    if (ng > q->n_tokens) ng = q->n_tokens;
    if (ng) memcpy(s->slot_tok[slot] + np, q->tokens, ng * sizeof *q->tokens);
    return (int32_t)(np + ng);
}

static bool seq_finish(pl_srv *s, pl_srv_seq *q, const char *finish) {
    pl_srv_request *r = q->req;
    if (q->slot >= 0) {
        int32_t kept = slot_keep(s, q, strcmp(finish, "error") != 0);
        int slot = q->slot;
        s->slot_seq[q->slot] = NULL;
        q->slot = -1;
        /* At once, not after the step: pl_srv_submit counts free slots. */
        pthread_mutex_lock(&s->mu);
        s->slot_cached[slot] = kept;
        s->slot_pos[slot] = -1;
        s->slots_busy = s->n_seq - free_slots(s);
        pthread_mutex_unlock(&s->mu);
    }
    q->state = PL_SEQ_DONE;
    pthread_mutex_lock(&r->mu);
    if (!q->done) {
        pl_srv_text_finish(&q->text);
        q->done = true;
        q->finish = finish;
        r->n_done++;
    }
    bool last = r->n_done == r->n_seqs;
    if (last) r->t_done = pl_srv_now();
    pthread_cond_broadcast(&r->cv);
    pthread_mutex_unlock(&r->mu);
    return last;
}

static void request_fail(pl_srv *s, pl_srv_request *r, int http, const char *msg) {
    pthread_mutex_lock(&r->mu);
    if (!r->failed) {
        r->failed = true;
        r->fail_http = http;
        snprintf(r->fail_msg, sizeof r->fail_msg, "%s", msg);
    }
    pthread_mutex_unlock(&r->mu);
    bool last = false;
    for (int i = 0; i < r->n_seqs; i++)
        if (r->seqs[i].state != PL_SEQ_DONE) last = seq_finish(s, &r->seqs[i], "error");
    if (last) pl_srv_request_unref(r);
}

/* Under s->mu: picks the free slot for q (see the top of this file) and
 * returns how many of its prompt tokens that slot's cache already holds. */
static int pick_slot(pl_srv *s, const pl_srv_seq *q, size_t *reuse) {
    bool cache = s->cfg.prompt_cache && q->req->cache_prompt;
    int best = -1, lru = -1;
    size_t best_lcp = 0, lru_lcp = 0;
    for (int i = 0; i < s->n_seq; i++) {
        if (s->slot_seq[i]) continue;
        size_t lcp = 0, n = (size_t)s->slot_cached[i];
        if (cache)
            while (lcp < n && lcp < q->n_prompt && s->slot_tok[i][lcp] == q->prompt[lcp]) lcp++;
        if (best < 0 || lcp > best_lcp) { best = i; best_lcp = lcp; }
        if (lru < 0 || s->slot_used_at[i] < s->slot_used_at[lru]) { lru = i; lru_lcp = lcp; }
    }
    int slot = lru;
    size_t lcp = lru_lcp;
    if (best_lcp > 0 && (double)best_lcp / (double)q->n_prompt > (double)s->cfg.slot_similarity) {
        slot = best;
        lcp = best_lcp;
    }
    /* The last prompt token is evaluated again: its logits were not kept. */
    if (lcp >= q->n_prompt) lcp = q->n_prompt - 1;
    *reuse = lcp;
    return slot;
}

/* Prefixes shorter than this are left to the prefill (a copy of a few rows
 * saves less than the search and the copy cost). */
#define SHARE_MIN_TOKENS 16

/* Under s->mu, at admission, after q's slot holds its own reusable prefix
 * (reuse tokens, its own cache and --cache-ram's): when another slot holds a
 * longer prefix of q's prompt -- a busy slot's prompt rows already computed,
 * or an idle slot's cache that q did not take -- those rows are copied slot
 * to slot (pl_model_kv_read / pl_model_kv_write) instead of prefilled. The
 * case: concurrent conversations sharing a system prompt, each new one
 * landing in a slot that does not hold it. The rows are the bytes the other
 * slot computed for the same tokens at the same positions, as a slot's own
 * cache is. Returns the new reuse (the old one if nothing was copied). */
static size_t share_prefix(pl_srv *s, const pl_srv_seq *q, int slot, size_t reuse) {
    if (!s->cfg.prompt_cache || !q->req->cache_prompt || q->n_prompt < 2) return reuse;
    size_t want = q->n_prompt - 1;   /* the last prompt token is evaluated again */
    size_t best = reuse;
    int src = -1;
    for (int i = 0; i < s->n_seq; i++) {
        if (i == slot) continue;
        const int32_t *tok;
        size_t n;
        const pl_srv_seq *p = s->slot_seq[i];
        if (p) { tok = p->prompt; n = p->n_prompt; }
        else { tok = s->slot_tok[i]; n = s->slot_cached[i] > 0 ? (size_t)s->slot_cached[i] : 0; }
        int32_t len = pl_model_kv_len(s->model, i);   /* rows computed so far */
        if (len <= 0 || !tok) continue;
        if (n > (size_t)len) n = (size_t)len;
        if (n > want) n = want;
        if (n <= best) continue;
        size_t c = 0;
        while (c < n && tok[c] == q->prompt[c]) c++;
        if (c > best) { best = c; src = i; }
    }
    if (src < 0 || best - reuse < SHARE_MIN_TOKENS) return reuse;
    size_t pb = pl_model_kv_pos_bytes(s->model), n = best - reuse;
    char *buf = pb ? malloc(n * pb) : NULL;
    bool ok = buf && pl_model_kv_read(s->model, src, (int32_t)reuse, (int32_t)n, buf, n * pb) == PL_OK &&
              pl_model_kv_write(s->model, slot, (int32_t)reuse, (int32_t)n, buf, n * pb) == PL_OK;
    free(buf);
    if (!ok) {
        pl_model_kv_truncate(s->model, slot, (int32_t)reuse);
        return reuse;
    }
    s->m_share_hits++;
    s->m_share_tok += n;
    return best;
}

/* Under s->mu: drops cancelled requests from the queue, then admits from the
 * head while enough slots are free. */
static void admit(pl_srv *s) {
    pl_srv_request **pp = &s->q_head, *prev = NULL;
    while (*pp) {
        pl_srv_request *r = *pp;
        if (atomic_load(&r->cancelled)) {
            *pp = r->next;
            if (s->q_tail == r) s->q_tail = prev;
            s->q_len--;
            s->m_cancelled++;
            pl_srv_request_unref(r);
            continue;
        }
        prev = r;
        pp = &r->next;
    }
    while (s->q_head && s->q_head->n_seqs <= free_slots(s)) {
        pl_srv_request *r = s->q_head;
        s->q_head = r->next;
        if (!s->q_head) s->q_tail = NULL;
        s->q_len--;
        size_t cached = 0;
        int per_prompt = r->n_prompts > 0 ? r->n_seqs / r->n_prompts : 1;
        for (int i = 0; i < r->n_seqs; i++) {
            pl_srv_seq *q = &r->seqs[i];
            size_t reuse = 0;
            int slot = pick_slot(s, q, &reuse);
            /* --cache-ram: what the slot holds past reuse is about to be
             * prefilled over; keep it in host memory first. */
            pl_srv_spill_save(s, slot, reuse);
            s->slot_seq[slot] = q;
            q->slot = slot;
            q->state = PL_SEQ_PREFILL;
            q->admit_no = s->admit_counter++;
            s->slot_used_at[slot] = q->admit_no + 1;
            /* The slot's cache now holds the prompt's first `reuse` tokens
             * only; what it held past them is prefilled over. */
            pl_model_kv_truncate(s->model, slot, (int32_t)reuse);
            reuse = pl_srv_spill_restore(s, q, slot, reuse);
            reuse = share_prefix(s, q, slot, reuse);
            s->slot_cached[slot] = (int32_t)reuse;
            s->slot_pos[slot] = (int32_t)reuse;
            q->n_cached = reuse;
            q->n_fed = reuse;
            q->pos = (int32_t)reuse;
            q->t_last = 0;
            /* usage counts each distinct prompt once (its first choice). */
            if (i % per_prompt == 0) cached += reuse;
            s->m_prompt_all += q->n_prompt;
            s->m_cache_queries += q->n_prompt;
            s->m_cache_tok += reuse;
            s->m_cache_hits += reuse > 0;
        }
        pthread_mutex_lock(&r->mu);
        r->usage_cached = cached;
        pthread_mutex_unlock(&r->mu);
    }
    s->slots_busy = s->n_seq - free_slots(s);
}

/* No NaN or +Inf, and not all -Inf: what pl_sampler_sample refuses a row
 * for, so a -1 on a sane row is the grammar's doing. */
static bool row_is_sane(const float *row, int32_t n) {
    bool finite = false;
    for (int32_t i = 0; i < n; i++) {
        if (isnan(row[i]) || row[i] == INFINITY) return false;
        if (row[i] > -INFINITY) finite = true;
    }
    return finite;
}

/* Records a sampled token; decides whether the sequence ends here. */
static void seq_token(pl_srv *s, pl_srv_seq *q, int32_t tok, uint64_t *n_gen) {
    pl_srv_request *r = q->req;
    const char *finish = NULL;
    char piece_small[256], *piece = piece_small;
    size_t len = 0;
    bool eog = pl_token_is_eog(s->model, tok);
    if (!eog && pl_token_to_piece(s->model, tok, false, piece_small, sizeof piece_small, &len) != PL_OK) {
        piece = len ? malloc(len) : NULL;
        if (!piece || pl_token_to_piece(s->model, tok, false, piece, len, &len) != PL_OK) len = 0;
    }
    pthread_mutex_lock(&r->mu);
    if (r->t_first == 0) r->t_first = pl_srv_now();
    if (q->n_tokens == q->cap_tokens) {
        size_t cap = q->cap_tokens ? q->cap_tokens * 2 : 64;
        int32_t *t = realloc(q->tokens, cap * sizeof *t);
        if (t) { q->tokens = t; q->cap_tokens = cap; }
    }
    if (q->n_tokens < q->cap_tokens) q->tokens[q->n_tokens++] = tok;
    (*n_gen)++;
    if (eog) finish = "stop";
    else {
        int rc = pl_srv_text_push(&q->text, piece, len);
        if (rc == 1) finish = "stop";
    }
    pthread_cond_broadcast(&r->cv);
    size_t n_gen_seq = q->n_tokens;
    pthread_mutex_unlock(&r->mu);
    if (piece != piece_small) free(piece);

    q->next_tok = tok;
    q->state = PL_SEQ_DECODE;
    /* A grammar that admits nothing more ends the output as a stop would. */
    if (!finish && q->grammar && pl_grammar_is_done(q->grammar)) finish = "stop";
    if (!finish && r->max_tokens >= 0 && (long long)n_gen_seq >= r->max_tokens) finish = "length";
    /* The token would be fed at q->pos: past the context there is no room. */
    if (!finish && q->pos >= s->n_ctx) finish = "length";
    if (finish && seq_finish(s, q, finish)) pl_srv_request_unref(r);
}

/* Cancelled requests leave at once; their slots are free for this step. */
static void reap_cancelled(pl_srv *s, uint64_t *n_cancelled) {
    for (int i = 0; i < s->n_seq; i++) {
        pl_srv_seq *q = s->slot_seq[i];
        if (!q || !atomic_load(&q->req->cancelled)) continue;
        pl_srv_request *r = q->req;
        bool last = false;
        for (int k = 0; k < r->n_seqs; k++)
            if (r->seqs[k].state != PL_SEQ_DONE) last = seq_finish(s, &r->seqs[k], "cancelled");
        if (last) {
            (*n_cancelled)++;
            pl_srv_request_unref(r);
        }
    }
}

static void *sched_main(void *arg) {
    pl_srv *s = arg;
    const int n_seq = s->n_seq;
    const size_t n_vocab = (size_t)s->n_vocab;
    const int cap = s->n_batch + n_seq;
    int32_t *tok = malloc((size_t)cap * sizeof *tok);
    int32_t *pos = malloc((size_t)cap * sizeof *pos);
    int32_t *seq = malloc((size_t)cap * sizeof *seq);
    bool *want = malloc((size_t)cap * sizeof *want);
    pl_srv_seq **rows = malloc((size_t)n_seq * sizeof *rows);
    pl_srv_seq **order = malloc((size_t)n_seq * sizeof *order);
    float *logits = malloc((size_t)n_seq * n_vocab * sizeof *logits);
    double *lat_ttft = malloc((size_t)n_seq * sizeof *lat_ttft);
    double *lat_itl = malloc((size_t)n_seq * sizeof *lat_itl);
    if (!tok || !pos || !seq || !want || !rows || !order || !logits || !lat_ttft || !lat_itl) {
        pl_srv_log("scheduler: out of memory; generation is unavailable");
        pthread_mutex_lock(&s->mu);
        while (!s->stop_sched) pthread_cond_wait(&s->cv, &s->mu);
        pthread_mutex_unlock(&s->mu);
        goto out;
    }

    pthread_mutex_lock(&s->mu);
    for (;;) {
        if (s->stop_sched) break;
        admit(s);
        int active = n_seq - free_slots(s);
        if (active == 0) {
            pthread_cond_wait(&s->cv, &s->mu);
            continue;
        }
        pthread_mutex_unlock(&s->mu);

        uint64_t n_cancelled = 0, n_gen = 0, n_prompt = 0;
        reap_cancelled(s, &n_cancelled);

        /* Decode tokens first: they are cheap and keep streams flowing. */
        int nb = 0, nrows = 0, norder = 0;
        for (int i = 0; i < n_seq; i++) {
            pl_srv_seq *q = s->slot_seq[i];
            if (!q) continue;
            if (q->state == PL_SEQ_DECODE) {
                tok[nb] = q->next_tok;
                pos[nb] = q->pos;
                seq[nb] = q->slot;
                want[nb] = true;
                rows[nrows++] = q;
                nb++;
            } else if (q->state == PL_SEQ_PREFILL) {
                order[norder++] = q;
            }
        }
        /* Prefill in admission order within the remaining budget. */
        for (int i = 1; i < norder; i++)
            for (int j = i; j > 0 && order[j]->admit_no < order[j - 1]->admit_no; j--) {
                pl_srv_seq *t = order[j]; order[j] = order[j - 1]; order[j - 1] = t;
            }
        /* Chunked prefill: while any sequence is decoding, the step holds
         * only as many prompt tokens as keep its predicted time within the
         * target inter-token latency (--max-step-ms; capped by
         * --max-num-batched-tokens, which alone fixes the count instead), so
         * a long prompt arriving is prefilled a chunk per step between the
         * others' decode tokens instead of stalling them for the whole
         * prompt. With no one decoding nobody waits on the step: prefill
         * runs at --batch. */
        const int n_decode = nb;
        int budget = pl_srv_step_prompt_budget(&s->est, &s->budget, n_decode);
        for (int i = 0; i < norder && budget > 0; i++) {
            pl_srv_seq *q = order[i];
            size_t k = q->n_prompt - q->n_fed;
            if (k > (size_t)budget) k = (size_t)budget;
            for (size_t j = 0; j < k; j++) {
                size_t p = q->n_fed + j;
                tok[nb] = q->prompt[p];
                pos[nb] = (int32_t)p;
                seq[nb] = q->slot;
                want[nb] = p + 1 == q->n_prompt;
                if (want[nb]) rows[nrows++] = q;
                nb++;
            }
            q->chunk = k;
            budget -= (int)k;
            n_prompt += k;
        }

        pl_status st = PL_OK;
        double t0 = pl_srv_now();
        if (nb > 0) {
            pl_batch b = {nb, tok, pos, seq, want};
            st = pl_model_forward(s->model, &b, logits);
        }
        double dt = pl_srv_now() - t0;
        if (st == PL_OK) pl_srv_step_observe(&s->est, n_decode, (int)n_prompt, dt);

        if (st != PL_OK) {
            char msg[256];
            snprintf(msg, sizeof msg, "inference failed: %s", pl_last_error());
            pl_srv_log("%s", msg);
            /* Every sequence in the batch is in an unknown state: fail them. */
            for (int i = 0; i < n_seq; i++) {
                pl_srv_seq *q = s->slot_seq[i];
                if (q) request_fail(s, q->req, 500, msg);
            }
            pthread_mutex_lock(&s->mu);
            s->m_failed++;
            continue;
        }
        /* Advance positions for what was fed, then sample. */
        for (int i = 0; i < n_seq; i++) {
            pl_srv_seq *q = s->slot_seq[i];
            if (!q) continue;
            if (q->state == PL_SEQ_DECODE) q->pos++;
            else if (q->state == PL_SEQ_PREFILL) {
                q->n_fed += q->chunk;
                q->pos = (int32_t)q->n_fed;
                q->chunk = 0;
            }
        }
        /* Latency: a row's token exists once the step is over. Observed
         * before sampling, which may finish (and free) the request. */
        double t_tok = pl_srv_now();
        int n_ttft = 0, n_itl = 0;
        for (int i = 0; i < nrows; i++) {
            pl_srv_seq *q = rows[i];
            if (q->state == PL_SEQ_DONE) continue;
            if (q->t_last == 0) {
                if (q->index == 0) lat_ttft[n_ttft++] = t_tok - q->req->t_submit;
            } else {
                lat_itl[n_itl++] = t_tok - q->t_last;
            }
            q->t_last = t_tok;
        }
        for (int i = 0; i < nrows; i++) {
            pl_srv_seq *q = rows[i];
            if (q->state == PL_SEQ_DONE) continue;
            const float *row = logits + (size_t)i * n_vocab;
            int32_t t = pl_sampler_sample(q->smp, row);
            /* A grammar that allows no token of this vocabulary here (a
             * dead end the model cannot spell): the output ends cleanly. */
            if (t < 0 && q->grammar && row_is_sane(row, n_vocab)) {
                if (seq_finish(s, q, "stop")) pl_srv_request_unref(q->req);
                continue;
            }
            /* -1: NaN/Inf logits (broken weights). Feeding -1 on as a token
             * read out of bounds; the request fails with the reason. */
            if (t < 0 || pl_srv_record_logprobs(s, q, row, t) != 0) {
                char msg[256];
                snprintf(msg, sizeof msg, "generation failed: %s", pl_last_error());
                pl_srv_log("%s", msg);
                request_fail(s, q->req, 500, msg);
                continue;
            }
            seq_token(s, q, t, &n_gen);
        }

        pthread_mutex_lock(&s->mu);
        s->m_steps++;
        s->m_busy_s += dt;
        s->est_pub = s->est;
        s->m_gen_tok += n_gen;
        s->m_prompt_tok += n_prompt;
        s->m_cancelled += n_cancelled;
        double now = pl_srv_now();
        if (s->win_t0 == 0) s->win_t0 = now;
        s->win_tok += n_gen;
        if (now - s->win_t0 >= 1.0) {
            s->rate = s->win_tok / (now - s->win_t0);
            s->win_t0 = now;
            s->win_tok = 0;
        }
        s->slots_busy = n_seq - free_slots(s);
        for (int i = 0; i < n_ttft; i++) hist_observe(&s->h_ttft, lat_ttft[i]);
        for (int i = 0; i < n_itl; i++) hist_observe(&s->h_itl, lat_itl[i]);
        for (int i = 0; i < n_seq; i++)
            if (s->slot_seq[i]) s->slot_pos[i] = s->slot_seq[i]->pos;
    }
    /* Shutting down: everything still queued or running fails with 503. */
    while (s->q_head) {
        pl_srv_request *r = s->q_head;
        s->q_head = r->next;
        s->q_len--;
        pthread_mutex_unlock(&s->mu);
        /* request_fail drops the queue's reference with the last sequence. */
        request_fail(s, r, 503, "the server is shutting down");
        pthread_mutex_lock(&s->mu);
    }
    s->q_tail = NULL;
    pthread_mutex_unlock(&s->mu);
    for (int i = 0; i < n_seq; i++)
        if (s->slot_seq[i]) request_fail(s, s->slot_seq[i]->req, 503, "the server is shutting down");
out:
    free(tok); free(pos); free(seq); free(want); free(rows); free(order); free(logits);
    free(lat_ttft); free(lat_itl);
    return NULL;
}

pl_status pl_srv_sched_start(pl_srv *s) {
#ifdef __GLIBC__
    /* Request buffers of a megabyte and more (bodies, parsed texts, token
     * ids) get their own mappings, returned to the OS when freed. glibc's
     * default threshold rises to the largest block freed (up to 32 MiB), after
     * which such buffers come from the per-thread arenas and stay resident
     * when freed (malloc_trim does not shrink those arenas' tops): a burst of
     * 8 MB requests left ~40 MiB behind. Set after the model is loaded; the
     * forward steps allocate nothing this large. */
    mallopt(M_MMAP_THRESHOLD, 1 << 20);
#endif
    size_t n = (size_t)s->n_seq;
    s->slot_seq = calloc(n, sizeof *s->slot_seq);
    s->slot_tok = calloc(n, sizeof *s->slot_tok);
    s->slot_cap = calloc(n, sizeof *s->slot_cap);
    s->slot_used_at = calloc(n, sizeof *s->slot_used_at);
    s->slot_pos = calloc(n, sizeof *s->slot_pos);
    s->slot_cached = calloc(n, sizeof *s->slot_cached);
    if (!s->slot_seq || !s->slot_tok || !s->slot_cap || !s->slot_used_at || !s->slot_pos || !s->slot_cached)
        return PL_ERR_NO_MEMORY;
    for (size_t i = 0; i < n; i++) s->slot_pos[i] = -1;
    if (pthread_create(&s->sched, NULL, sched_main, s) != 0) return PL_ERR_INTERNAL;
    s->sched_running = true;
    return PL_OK;
}

void pl_srv_sched_stop(pl_srv *s) {
    if (!s->sched_running) return;
    pthread_mutex_lock(&s->mu);
    s->stop_sched = true;
    pthread_cond_broadcast(&s->cv);
    pthread_mutex_unlock(&s->mu);
    pthread_join(s->sched, NULL);
    s->sched_running = false;
}

void pl_srv_sched_free(pl_srv *s) {
    for (int i = 0; s->slot_tok && i < s->n_seq; i++) free(s->slot_tok[i]);
    free(s->slot_tok); free(s->slot_cap); free(s->slot_used_at); free(s->slot_pos); free(s->slot_cached);
    free(s->slot_seq);
    s->slot_tok = NULL; s->slot_cap = NULL; s->slot_used_at = NULL; s->slot_pos = NULL; s->slot_cached = NULL;
    s->slot_seq = NULL;
}

int pl_srv_load(pl_srv *s) {
    pthread_mutex_lock(&s->mu);
    int n = s->q_len + s->slots_busy;
    pthread_mutex_unlock(&s->mu);
    return n + atomic_load(&s->inflight);
}

json_t *pl_srv_slots_json(pl_srv *s) {
    json_t *slots = json_array();
    pthread_mutex_lock(&s->mu);
    for (int i = 0; s->slot_pos && i < s->n_seq; i++) {
        bool busy = s->slot_pos[i] >= 0;
        json_array_append_new(slots, json_pack("{s:i, s:s, s:i, s:i}", "id", i, "state", busy ? "busy" : "idle",
                                               "cached_tokens", busy ? s->slot_pos[i] : s->slot_cached[i],
                                               "n_ctx", s->n_ctx));
    }
    json_t *o = json_pack("{s:o, s:i, s:i, s:i}", "slots", slots, "queue_depth", s->q_len, "queue_capacity",
                          s->cfg.queue, "slots_busy", s->slots_busy);
    if (o && s->spill)
        json_object_set_new(o, "cache_ram", json_pack("{s:I, s:I, s:I}", "entries", (json_int_t)s->spill_entries,
                                                      "bytes", (json_int_t)s->spill_bytes, "capacity_bytes",
                                                      (json_int_t)s->spill_capacity));
    pthread_mutex_unlock(&s->mu);
    return o;
}

/* ---- metrics ----------------------------------------------------------------*/

static void metric(pl_srv_buf *o, const char *name, const char *type, const char *help, double v) {
    pl_srv_buf_addf(o, "# HELP pocketllm_%s %s\n# TYPE pocketllm_%s %s\npocketllm_%s %.17g\n", name, help, name,
                    type, name, v);
}

void pl_srv_metrics_text(pl_srv *s, pl_srv_buf *o) {
    pthread_mutex_lock(&s->mu);
    double now = pl_srv_now();
    /* With no step for a while the last window's rate is stale: decay it. */
    double rate = s->rate;
    if (s->win_t0 > 0 && now - s->win_t0 > 2.0) rate = s->win_tok / (now - s->win_t0);
    double busy = s->m_busy_s;
    metric(o, "requests_total", "counter", "Generation requests received.", (double)s->m_requests);
    metric(o, "requests_rejected_total", "counter", "Requests refused because the queue was full.",
           (double)s->m_rejected);
    metric(o, "requests_cancelled_total", "counter", "Requests whose client went away before the end.",
           (double)s->m_cancelled);
    metric(o, "requests_failed_total", "counter", "Forward steps that failed.", (double)s->m_failed);
    metric(o, "prompt_tokens_total", "counter", "Prompt tokens processed.", (double)s->m_prompt_tok);
    metric(o, "tokens_generated_total", "counter", "Tokens generated.", (double)s->m_gen_tok);
    metric(o, "tokens_per_second", "gauge", "Generation throughput over the last window.", rate);
    metric(o, "generation_tokens_per_second_avg", "gauge", "Generated tokens per second of busy time.",
           busy > 0 ? s->m_gen_tok / busy : 0.0);
    metric(o, "busy_seconds_total", "counter", "Time spent in forward steps.", busy);
    metric(o, "steps_total", "counter", "Forward steps (batches) run.", (double)s->m_steps);
    metric(o, "slots_busy", "gauge", "KV-cache slots in use.", (double)s->slots_busy);
    metric(o, "slots_total", "gauge", "KV-cache slots (--parallel).", (double)s->n_seq);
    metric(o, "queue_depth", "gauge", "Requests waiting for a slot.", (double)s->q_len);

    /* Issue 17: the pocketllm: names, then the names load balancers read
     * (the Gateway API inference extension's model server protocol reads
     * vLLM's queue and KV-cache gauges; llama-server's are for dashboards
     * made for it). The KV cache in use is the positions held by busy slots:
     * a prompt cache left in an idle slot is given up to the next request,
     * so it is not load. */
    double kv = 0;
    for (int i = 0; s->slot_pos && i < s->n_seq; i++)
        if (s->slot_pos[i] > 0) kv += s->slot_pos[i];
    double kv_ratio = s->n_seq > 0 && s->n_ctx > 0 ? kv / ((double)s->n_seq * s->n_ctx) : 0.0;
    struct { const char *name, *type, *help; double v; } g[] = {
        {"pocketllm:num_requests_running", "gauge", "Requests holding slots.", (double)s->slots_busy},
        {"pocketllm:num_requests_waiting", "gauge", "Requests waiting for a slot.", (double)s->q_len},
        {"pocketllm:kv_cache_usage_ratio", "gauge", "KV-cache positions in use by running requests (0-1).",
         kv_ratio},
        {"pocketllm:prompt_tokens_total", "counter", "Prompt tokens of admitted requests, cached ones included.",
         (double)s->m_prompt_all},
        {"pocketllm:prompt_tokens_processed_total", "counter", "Prompt tokens evaluated (not taken from the cache).",
         (double)s->m_prompt_tok},
        {"pocketllm:generation_tokens_total", "counter", "Tokens generated.", (double)s->m_gen_tok},
        {"pocketllm:prompt_cache_hits_total", "counter", "Sequences that reused a cached prompt prefix.",
         (double)s->m_cache_hits},
        {"pocketllm:prompt_cache_tokens_total", "counter", "Prompt tokens reused from the prompt cache.",
         (double)s->m_cache_tok},
        {"pocketllm:prompt_cache_shared_hits_total", "counter",
         "Sequences that copied a prompt prefix from another slot instead of prefilling it.", (double)s->m_share_hits},
        {"pocketllm:prompt_cache_shared_tokens_total", "counter",
         "Prompt tokens copied from another slot's cache instead of prefilled.", (double)s->m_share_tok},
        {"pocketllm:prompt_cache_ram_hits_total", "counter",
         "Sequences that restored a prompt prefix from host memory (--cache-ram).", (double)s->m_spill_hits},
        {"pocketllm:prompt_cache_ram_tokens_total", "counter",
         "Prompt tokens restored from host memory instead of prefilled (--cache-ram).", (double)s->m_spill_tok},
        {"pocketllm:prompt_cache_ram_saved_total", "counter", "Evicted slot prefixes kept in host memory.",
         (double)s->m_spill_saved},
        {"pocketllm:prompt_cache_ram_evictions_total", "counter",
         "Prefixes dropped from host memory to make room (least recently used).", (double)s->m_spill_evicted},
        {"pocketllm:prompt_cache_ram_bytes", "gauge", "Host memory held by kept prefixes.", (double)s->spill_bytes},
        {"pocketllm:prompt_cache_ram_capacity_bytes", "gauge", "--cache-ram in bytes (0 = off).",
         (double)s->spill_capacity},
        {"pocketllm:prompt_cache_ram_entries", "gauge", "Prefixes kept in host memory.", (double)s->spill_entries},
        {"pocketllm:step_decode_seconds", "gauge", "Estimated time of a decode-only step (0 = not measured yet).",
         s->est_pub.decode_s},
        {"pocketllm:step_decode_sequences", "gauge", "Sequences decoded in the steps of that estimate.",
         s->est_pub.decode_n},
        {"pocketllm:step_prompt_seconds_per_token", "gauge",
         "Estimated step time per prompt token added to a step (0 = not measured yet).", s->est_pub.prompt_s},
        {"pocketllm:step_row_seconds", "gauge",
         "Estimated step time per row (decode or prompt token) past the weight-read floor (0 = not measured yet).",
         s->est_pub.row_s},
        {"vllm:num_requests_running", "gauge", "Requests holding slots (vLLM name).", (double)s->slots_busy},
        {"vllm:num_requests_waiting", "gauge", "Requests waiting for a slot (vLLM name).", (double)s->q_len},
        {"vllm:gpu_cache_usage_perc", "gauge", "KV-cache usage, 1 = full (vLLM name).", kv_ratio},
        {"vllm:kv_cache_usage_perc", "gauge", "KV-cache usage, 1 = full (vLLM name).", kv_ratio},
        {"vllm:prompt_tokens_total", "counter", "Prompt tokens (vLLM name).", (double)s->m_prompt_all},
        {"vllm:generation_tokens_total", "counter", "Generated tokens (vLLM name).", (double)s->m_gen_tok},
        {"vllm:prefix_cache_queries_total", "counter", "Prompt tokens looked up in the prefix cache (vLLM name).",
         (double)s->m_cache_queries},
        {"vllm:prefix_cache_hits_total", "counter", "Prompt tokens found in the prefix cache (vLLM name).",
         (double)s->m_cache_tok},
        {"llamacpp:requests_processing", "gauge", "Requests holding slots (llama-server name).",
         (double)s->slots_busy},
        {"llamacpp:requests_deferred", "gauge", "Requests waiting for a slot (llama-server name).",
         (double)s->q_len},
        {"llamacpp:kv_cache_usage_ratio", "gauge", "KV-cache usage 0-1 (llama-server name).", kv_ratio},
    };
    for (size_t i = 0; i < sizeof g / sizeof g[0]; i++)
        pl_srv_buf_addf(o, "# HELP %s %s\n# TYPE %s %s\n%s %.17g\n", g[i].name, g[i].help, g[i].name, g[i].type,
                        g[i].name, g[i].v);
    struct { const char *name, *help; const pl_srv_hist *h; } hs[] = {
        {"pocketllm:time_to_first_token_seconds", "Time from arrival to the first token.", &s->h_ttft},
        {"pocketllm:inter_token_latency_seconds", "Time between consecutive tokens of a sequence.", &s->h_itl},
        {"vllm:time_to_first_token_seconds", "Time to the first token (vLLM name).", &s->h_ttft},
        {"vllm:time_per_output_token_seconds", "Time between tokens (vLLM name).", &s->h_itl},
    };
    for (size_t i = 0; i < sizeof hs / sizeof hs[0]; i++) {
        const pl_srv_hist *h = hs[i].h;
        pl_srv_buf_addf(o, "# HELP %s %s\n# TYPE %s histogram\n", hs[i].name, hs[i].help, hs[i].name);
        uint64_t cum = 0;
        for (int b = 0; b < PL_SRV_HIST_BUCKETS; b++) {
            cum += h->count[b];
            pl_srv_buf_addf(o, "%s_bucket{le=\"%g\"} %llu\n", hs[i].name, hist_le[b], (unsigned long long)cum);
        }
        pl_srv_buf_addf(o, "%s_bucket{le=\"+Inf\"} %llu\n%s_sum %.17g\n%s_count %llu\n", hs[i].name,
                        (unsigned long long)h->n, hs[i].name, h->sum, hs[i].name, (unsigned long long)h->n);
    }
    static const char *const classes[] = {"", "", "2xx", "3xx", "4xx", "5xx"};
    pl_srv_buf_addf(o, "# HELP pocketllm:http_responses_total HTTP answers by status class.\n"
                       "# TYPE pocketllm:http_responses_total counter\n");
    for (int c = 2; c < 6; c++)
        pl_srv_buf_addf(o, "pocketllm:http_responses_total{status=\"%s\"} %llu\n", classes[c],
                        (unsigned long long)s->m_status[c]);
    static const unsigned codes[] = {400, 401, 404, 405, 413, 429, 500, 503};
    pl_srv_buf_addf(o, "# HELP pocketllm:errors_total Error answers by HTTP status.\n"
                       "# TYPE pocketllm:errors_total counter\n");
    for (size_t c = 0; c < sizeof codes / sizeof codes[0]; c++)
        pl_srv_buf_addf(o, "pocketllm:errors_total{status=\"%u\"} %llu\n", codes[c],
                        (unsigned long long)s->m_err_code[c]);
    pthread_mutex_unlock(&s->mu);
}

void pl_srv_count_status(pl_srv *s, unsigned status) {
    static const unsigned codes[] = {400, 401, 404, 405, 413, 429, 500, 503};
    pthread_mutex_lock(&s->mu);
    if (status >= 200 && status < 600) s->m_status[status / 100]++;
    for (size_t c = 0; c < sizeof codes / sizeof codes[0]; c++)
        if (codes[c] == status) s->m_err_code[c]++;
    pthread_mutex_unlock(&s->mu);
}
