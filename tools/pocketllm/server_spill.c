/*
 * `serve --cache-ram N`: the prompt cache's second tier, in host memory.
 *
 * A slot's cached tokens are lost when a new request takes the slot and
 * prefills over them. With --cache-ram, the scheduler first copies the
 * slot's KV rows out (pl_model_kv_read) into an entry of this store: the
 * tokens and their rows, position-major, so any prefix of an entry is usable
 * on its own. When a later request is admitted, the entry sharing the
 * longest prefix with its prompt is copied back into its slot
 * (pl_model_kv_write) past what the slot itself already holds, and only the
 * rest is prefilled. Entries are dropped least recently used first to keep
 * the store within N MiB; an entry that is a prefix of a newer one is
 * replaced by it.
 *
 * The rows are the bytes the slot held, restored at the positions they came
 * from, so a restored prefix gives what recomputing it gives
 * (tests/server/test_cache_ram.py checks token identity).
 *
 * Called by the scheduler thread at admission, under s->mu (which also
 * guards the counters and gauges): a copy of a few MB (28 KiB per token of a
 * 1.5B model's f16 cache) holds back request submission for milliseconds.
 */
#include "server.h"
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

long long pl_srv_mem_available_mib(void) {
    FILE *f = fopen("/proc/meminfo", "r");
    if (!f) return -1;
    char line[256];
    long long kib = -1;
    while (fgets(line, sizeof line, f))
        if (sscanf(line, "MemAvailable: %lld kB", &kib) == 1) break;
    fclose(f);
    return kib < 0 ? -1 : kib / 1024;
}

/* Prefixes shorter than this are cheaper to prefill than to keep. */
#define SPILL_MIN_TOKENS 16

typedef struct spill_entry {
    int32_t *tok;
    int32_t n;
    char *kv;                /* n x pos_bytes, position-major (pl_model_kv_read) */
    uint64_t used_at;
} spill_entry;

typedef struct pl_srv_spill {
    spill_entry *e;
    int n, cap;
    size_t pos_bytes;
    uint64_t clock;
} pl_srv_spill;

static size_t entry_bytes(const pl_srv *s, const spill_entry *e) {
    return (size_t)e->n * (s->spill->pos_bytes + sizeof(int32_t));
}

static void drop(pl_srv *s, int i) {
    pl_srv_spill *sp = s->spill;
    size_t b = entry_bytes(s, &sp->e[i]);
    free(sp->e[i].tok);
    free(sp->e[i].kv);
    sp->e[i] = sp->e[--sp->n];
    s->spill_bytes -= b;
    s->spill_entries = (uint64_t)sp->n;
}

static size_t lcp(const int32_t *a, size_t na, const int32_t *b, size_t nb) {
    size_t n = 0;
    while (n < na && n < nb && a[n] == b[n]) n++;
    return n;
}

pl_status pl_srv_spill_init(pl_srv *s) {
    if (s->cfg.cache_ram_mib <= 0) return PL_OK;
    s->spill = calloc(1, sizeof *s->spill);
    if (!s->spill) return PL_ERR_NO_MEMORY;
    s->spill->pos_bytes = pl_model_kv_pos_bytes(s->model);
    s->spill_capacity = (uint64_t)s->cfg.cache_ram_mib << 20;
    return PL_OK;
}

void pl_srv_spill_free(pl_srv *s) {
    if (!s->spill) return;
    for (int i = 0; i < s->spill->n; i++) {
        free(s->spill->e[i].tok);
        free(s->spill->e[i].kv);
    }
    free(s->spill->e);
    free(s->spill);
    s->spill = NULL;
}

void pl_srv_spill_save(pl_srv *s, int slot, size_t reuse) {
    pl_srv_spill *sp = s->spill;
    const int32_t n = s->slot_cached[slot];
    /* Only what the new request prefills over is lost: a conversation's
     * next turn keeps nearly all of its slot and needs no copy. */
    if (!sp || n < SPILL_MIN_TOKENS || (size_t)n < reuse + SPILL_MIN_TOKENS) return;
    const int32_t *tok = s->slot_tok[slot];
    const size_t need = (size_t)n * (sp->pos_bytes + sizeof(int32_t));
    if (need > s->spill_capacity) return;
    /* Kept already (the slot was restored from an entry that covers it, or
     * a longer one was saved): only refresh it. An entry the slot's tokens
     * extend is replaced. */
    for (int i = 0; i < sp->n; i++) {
        spill_entry *e = &sp->e[i];
        size_t c = lcp(e->tok, (size_t)e->n, tok, (size_t)n);
        if (c == (size_t)n) { e->used_at = ++sp->clock; return; }
        if (c == (size_t)e->n) { drop(s, i); i--; }
    }
    /* Least recently used first, until the new entry fits. */
    while (sp->n > 0 && s->spill_bytes + need > s->spill_capacity) {
        int lru = 0;
        for (int i = 1; i < sp->n; i++)
            if (sp->e[i].used_at < sp->e[lru].used_at) lru = i;
        drop(s, lru);
        s->m_spill_evicted++;
    }
    if (sp->n == sp->cap) {
        int cap = sp->cap ? 2 * sp->cap : 8;
        spill_entry *e = realloc(sp->e, (size_t)cap * sizeof *e);
        if (!e) return;
        sp->e = e;
        sp->cap = cap;
    }
    spill_entry e = {malloc((size_t)n * sizeof(int32_t)), n, malloc((size_t)n * sp->pos_bytes), ++sp->clock};
    if (!e.tok || !e.kv || pl_model_kv_read(s->model, slot, 0, n, e.kv, (size_t)n * sp->pos_bytes) != PL_OK) {
        /* Out of memory or a slot shorter than recorded: nothing kept. */
        if (e.tok && e.kv) pl_srv_log("cache-ram: not kept: %s", pl_last_error());
        free(e.tok);
        free(e.kv);
        return;
    }
    memcpy(e.tok, tok, (size_t)n * sizeof(int32_t));
    sp->e[sp->n++] = e;
    s->spill_bytes += need;
    s->spill_entries = (uint64_t)sp->n;
    s->m_spill_saved++;
}

size_t pl_srv_spill_restore(pl_srv *s, const pl_srv_seq *q, int slot, size_t reuse) {
    pl_srv_spill *sp = s->spill;
    if (!sp || !q->req->cache_prompt || q->n_prompt < 2) return reuse;
    int best = -1;
    size_t best_n = reuse;
    for (int i = 0; i < sp->n; i++) {
        size_t c = lcp(sp->e[i].tok, (size_t)sp->e[i].n, q->prompt, q->n_prompt);
        if (c > best_n) { best = i; best_n = c; }
    }
    /* The last prompt token is evaluated again: its logits are needed. */
    if (best_n >= q->n_prompt) best_n = q->n_prompt - 1;
    if (best < 0 || best_n <= reuse) return reuse;
    spill_entry *e = &sp->e[best];
    /* The slot's first `reuse` tokens are the prompt's, and so are the
     * entry's: only the positions past them are copied. */
    const int32_t n = (int32_t)(best_n - reuse);
    if (pl_model_kv_write(s->model, slot, (int32_t)reuse, n, e->kv + reuse * sp->pos_bytes,
                          (size_t)n * sp->pos_bytes) != PL_OK) {
        pl_srv_log("cache-ram: restore failed: %s", pl_last_error());
        return reuse;
    }
    e->used_at = ++sp->clock;
    s->m_spill_hits++;
    s->m_spill_tok += (uint64_t)n;
    return best_n;
}
