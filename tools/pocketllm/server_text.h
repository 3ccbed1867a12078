/*
 * Text side of `pocketllm serve`: everything between "the model produced
 * these bytes" and "this delta may be sent to the client". Pure code (no
 * HTTP, no model) so it can be unit-tested on its own.
 *
 *   token pieces -> [stop strings] -> [UTF-8 boundary] -> [reasoning split]
 *                -> content / reasoning_content deltas (always valid UTF-8)
 *
 * Stop strings are matched on the raw bytes, so they work across token
 * boundaries; a suffix that could still grow into a stop string is held back
 * (never sent, then dropped if the stop string completes). Bytes of an
 * incomplete UTF-8 sequence are held back too, so no delta ever splits a
 * character. Qwen3-style "<think>...</think>" text is routed to the reasoning
 * buffer when reasoning parsing is on.
 */
#ifndef PL_SERVER_TEXT_H
#define PL_SERVER_TEXT_H
#include <stdbool.h>
#include <stddef.h>

typedef struct pl_srv_buf {
    char *p;
    size_t n, cap;
} pl_srv_buf;

/* Appends n bytes (keeps a NUL after them). Returns 0, or -1 when out of memory. */
int pl_srv_buf_add(pl_srv_buf *b, const char *s, size_t n);
int pl_srv_buf_addf(pl_srv_buf *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
void pl_srv_buf_free(pl_srv_buf *b);

/* The length of the longest prefix of s that does not end inside an
 * incomplete (but so far valid) UTF-8 sequence. */
size_t pl_srv_utf8_complete(const char *s, size_t n);
/* Appends s to out with every invalid UTF-8 byte replaced by U+FFFD. */
int pl_srv_utf8_sanitize(pl_srv_buf *out, const char *s, size_t n);

enum { PL_SRV_R_START, PL_SRV_R_THINK, PL_SRV_R_CONTENT };

typedef struct pl_srv_text {
    /* configuration (set before the first push) */
    const char *const *stops;   /* not owned */
    size_t n_stops;
    bool parse_reasoning;
    /* state */
    pl_srv_buf raw;             /* bytes produced but not released yet */
    pl_srv_buf think;           /* released bytes held by the reasoning splitter */
    int rstate;
    bool skip_nl;               /* drop newlines at the start of the next part */
    bool stopped;               /* a stop string matched: nothing more is accepted */
    /* output: everything released so far, valid UTF-8 */
    pl_srv_buf content;
    pl_srv_buf reasoning;
} pl_srv_text;

/* think_open: the prompt already opened a <think> block (the template ends
 * with "<think>\n"), so the output starts inside the reasoning. */
void pl_srv_text_init(pl_srv_text *t, const char *const *stops, size_t n_stops, bool parse_reasoning,
                      bool think_open);
void pl_srv_text_free(pl_srv_text *t);
/* Feeds one token's bytes. Returns 1 when a stop string completed (the text
 * ends before it and generation must stop), 0 otherwise, -1 out of memory. */
int pl_srv_text_push(pl_srv_text *t, const char *piece, size_t n);
/* Generation ended: releases everything still held back. */
int pl_srv_text_finish(pl_srv_text *t);

#endif
