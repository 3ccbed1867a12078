/* Stop strings, UTF-8 boundaries and reasoning split for `pocketllm serve`
 * (see server_text.h for the pipeline). */
#include "server_text.h"
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int pl_srv_buf_add(pl_srv_buf *b, const char *s, size_t n) {
    if (b->n + n + 1 > b->cap) {
        size_t cap = b->cap ? b->cap : 64;
        while (cap < b->n + n + 1) {
            if (cap > ((size_t)-1) / 2) return -1;
            cap *= 2;
        }
        char *q = realloc(b->p, cap);
        if (!q) return -1;
        b->p = q;
        b->cap = cap;
    }
    if (n) memcpy(b->p + b->n, s, n);
    b->n += n;
    b->p[b->n] = 0;
    return 0;
}

int pl_srv_buf_addf(pl_srv_buf *b, const char *fmt, ...) {
    char small[256];
    va_list ap;
    va_start(ap, fmt);
    int k = vsnprintf(small, sizeof small, fmt, ap);
    va_end(ap);
    if (k < 0) return -1;
    if ((size_t)k < sizeof small) return pl_srv_buf_add(b, small, (size_t)k);
    char *big = malloc((size_t)k + 1);
    if (!big) return -1;
    va_start(ap, fmt);
    vsnprintf(big, (size_t)k + 1, fmt, ap);
    va_end(ap);
    int rc = pl_srv_buf_add(b, big, (size_t)k);
    free(big);
    return rc;
}

void pl_srv_buf_free(pl_srv_buf *b) {
    free(b->p);
    b->p = NULL;
    b->n = b->cap = 0;
}

/* Drops the first k bytes of b. */
static void buf_consume(pl_srv_buf *b, size_t k) {
    if (k >= b->n) { b->n = 0; if (b->p) b->p[0] = 0; return; }
    memmove(b->p, b->p + k, b->n - k);
    b->n -= k;
    b->p[b->n] = 0;
}

/* Length of the UTF-8 sequence a lead byte announces; 0 for bytes that can
 * never start one (continuation bytes, C0/C1, F5..FF). */
static int utf8_len(unsigned char c) {
    if (c < 0x80) return 1;
    if (c >= 0xC2 && c <= 0xDF) return 2;
    if (c >= 0xE0 && c <= 0xEF) return 3;
    if (c >= 0xF0 && c <= 0xF4) return 4;
    return 0;
}

size_t pl_srv_utf8_complete(const char *s, size_t n) {
    const unsigned char *p = (const unsigned char *)s;
    /* Walk back over at most 3 continuation bytes to the lead byte. */
    size_t i = n, back = 0;
    while (i > 0 && back < 4) {
        unsigned char c = p[i - 1];
        if ((c & 0xC0) != 0x80) {
            int need = utf8_len(c);
            /* Hold the tail back only when it is a valid but unfinished start. */
            return (need > 1 && (size_t)need > back + 1) ? i - 1 : n;
        }
        i--;
        back++;
    }
    return n;
}

int pl_srv_utf8_sanitize(pl_srv_buf *out, const char *s, size_t n) {
    const unsigned char *p = (const unsigned char *)s;
    size_t i = 0, run = 0; /* run: start of the current stretch of valid bytes */
    while (i < n) {
        unsigned char c = p[i];
        if (c < 0x80) { i++; continue; }
        int k = utf8_len(c);
        bool ok = k > 0 && i + (size_t)k <= n;
        for (int j = 1; ok && j < k; j++) ok = (p[i + j] & 0xC0) == 0x80;
        if (ok && k == 3) {
            unsigned cp = ((c & 0x0Fu) << 12) | ((p[i + 1] & 0x3Fu) << 6) | (p[i + 2] & 0x3Fu);
            ok = cp >= 0x800 && !(cp >= 0xD800 && cp <= 0xDFFF);
        }
        if (ok && k == 4) {
            unsigned cp = ((c & 0x07u) << 18) | ((p[i + 1] & 0x3Fu) << 12) | ((p[i + 2] & 0x3Fu) << 6) |
                          (p[i + 3] & 0x3Fu);
            ok = cp >= 0x10000 && cp <= 0x10FFFF;
        }
        if (ok) { i += (size_t)k; continue; }
        if (pl_srv_buf_add(out, s + run, i - run) || pl_srv_buf_add(out, "\xEF\xBF\xBD", 3)) return -1;
        i++;
        run = i;
    }
    return pl_srv_buf_add(out, s + run, n - run);
}

void pl_srv_text_init(pl_srv_text *t, const char *const *stops, size_t n_stops, bool parse_reasoning,
                      bool think_open) {
    memset(t, 0, sizeof *t);
    t->stops = stops;
    t->n_stops = n_stops;
    t->parse_reasoning = parse_reasoning;
    t->rstate = parse_reasoning && think_open ? PL_SRV_R_THINK : PL_SRV_R_START;
    t->skip_nl = t->rstate == PL_SRV_R_THINK;
}

void pl_srv_text_free(pl_srv_text *t) {
    pl_srv_buf_free(&t->raw);
    pl_srv_buf_free(&t->think);
    pl_srv_buf_free(&t->content);
    pl_srv_buf_free(&t->reasoning);
}

static const char THINK_OPEN[] = "<think>";
static const char THINK_CLOSE[] = "</think>";

/* Longest k < len(pat) such that s ends with the first k bytes of pat. */
static size_t partial_suffix(const char *s, size_t n, const char *pat, size_t plen) {
    size_t k = plen - 1 < n ? plen - 1 : n;
    for (; k > 0; k--)
        if (!memcmp(s + n - k, pat, k)) return k;
    return 0;
}

static const char *find_bytes(const char *hay, size_t n, const char *needle, size_t m) {
    if (m == 0 || m > n) return NULL;
    return memmem(hay, n, needle, m);
}

/* Runs released bytes through the reasoning splitter. final: no more bytes
 * will come, so nothing may stay held. */
static int split_feed(pl_srv_text *t, const char *s, size_t n, bool final) {
    if (!t->parse_reasoning) return pl_srv_utf8_sanitize(&t->content, s, n);
    if (pl_srv_buf_add(&t->think, s, n)) return -1;
    pl_srv_buf *b = &t->think;
    for (;;) {
        if (t->rstate == PL_SRV_R_START) {
            size_t i = 0;
            while (i < b->n && (b->p[i] == ' ' || b->p[i] == '\n' || b->p[i] == '\r' || b->p[i] == '\t')) i++;
            size_t rem = b->n - i, olen = sizeof THINK_OPEN - 1;
            if (rem >= olen && !memcmp(b->p + i, THINK_OPEN, olen)) {
                buf_consume(b, i + olen);
                t->rstate = PL_SRV_R_THINK;
                t->skip_nl = true;
                continue;
            }
            /* Still could be the start of "<think>": wait for more. */
            if (!final && rem < olen && (rem == 0 || !memcmp(b->p + i, THINK_OPEN, rem))) return 0;
            t->rstate = PL_SRV_R_CONTENT;
            t->skip_nl = false;
            continue;
        }
        if (t->skip_nl) {
            size_t i = 0;
            while (i < b->n && b->p[i] == '\n') i++;
            buf_consume(b, i);
            if (b->n == 0) return 0;
            t->skip_nl = false;
        }
        if (t->rstate == PL_SRV_R_CONTENT) {
            int rc = pl_srv_utf8_sanitize(&t->content, b->p, b->n);
            buf_consume(b, b->n);
            return rc;
        }
        /* PL_SRV_R_THINK */
        size_t clen = sizeof THINK_CLOSE - 1;
        const char *end = find_bytes(b->p, b->n, THINK_CLOSE, clen);
        if (end) {
            size_t k = (size_t)(end - b->p);
            while (k > 0 && b->p[k - 1] == '\n') k--; /* reasoning is stripped of newlines */
            if (pl_srv_utf8_sanitize(&t->reasoning, b->p, k)) return -1;
            buf_consume(b, (size_t)(end - b->p) + clen);
            t->rstate = PL_SRV_R_CONTENT;
            t->skip_nl = true;
            continue;
        }
        size_t keep = 0;
        if (!final) {
            /* Hold what may become "</think>" and trailing newlines (they
             * are dropped if the block closes right after them). */
            keep = partial_suffix(b->p, b->n, THINK_CLOSE, clen);
            while (keep < b->n && b->p[b->n - keep - 1] == '\n') keep++;
        }
        size_t k = b->n - keep;
        if (final)
            while (k > 0 && b->p[k - 1] == '\n') k--;
        if (pl_srv_utf8_sanitize(&t->reasoning, b->p, k)) return -1;
        buf_consume(b, final ? b->n : k);
        return 0;
    }
}

int pl_srv_text_push(pl_srv_text *t, const char *piece, size_t n) {
    if (t->stopped) return 1;
    if (pl_srv_buf_add(&t->raw, piece, n)) return -1;
    pl_srv_buf *r = &t->raw;
    /* Earliest stop string wholly inside the unreleased bytes. A match can
     * only start there, because everything that could begin one is held. */
    const char *hit = NULL;
    for (size_t i = 0; i < t->n_stops; i++) {
        const char *h = find_bytes(r->p, r->n, t->stops[i], strlen(t->stops[i]));
        if (h && (!hit || h < hit)) hit = h;
    }
    if (hit) {
        r->n = (size_t)(hit - r->p);
        r->p[r->n] = 0;
        t->stopped = true;
        return 1;
    }
    size_t hold = 0;
    for (size_t i = 0; i < t->n_stops; i++) {
        size_t h = partial_suffix(r->p, r->n, t->stops[i], strlen(t->stops[i]));
        if (h > hold) hold = h;
    }
    size_t rel = pl_srv_utf8_complete(r->p, r->n - hold);
    if (rel == 0) return 0;
    int rc = split_feed(t, r->p, rel, false);
    buf_consume(r, rel);
    return rc;
}

int pl_srv_text_finish(pl_srv_text *t) {
    int rc = split_feed(t, t->raw.p ? t->raw.p : "", t->raw.n, true);
    buf_consume(&t->raw, t->raw.n);
    return rc;
}
