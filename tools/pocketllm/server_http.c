/*
 * HTTP side of `pocketllm serve` on libmicrohttpd, one thread per
 * connection. Handlers may therefore block: a non-streaming request waits for
 * its result inside the access handler, a streaming one inside the response's
 * content reader. Both waits are timed so that they can also watch the socket:
 * a client that hangs up cancels its request at once (the scheduler frees the
 * slots at its next step) instead of when the next write fails.
 *
 * Slow clients and connection limits: what libmicrohttpd 0.9.75 offers, and
 * what we use.
 *   - MHD_OPTION_CONNECTION_TIMEOUT is an idle timeout: every byte received
 *     restarts it, so a client trickling one byte per second holds its
 *     connection (and, here, a thread) forever. MHD has no whole-request
 *     deadline. We keep it as the idle timeout (--timeout).
 *   - MHD_OPTION_CONNECTION_LIMIT and MHD_OPTION_PER_IP_CONNECTION_LIMIT, and
 *     the accept policy callback, can only accept-and-close: the client gets
 *     no answer at all. We keep MHD's total limit as a hard ceiling above
 *     ours (max_conns + 64) and do not use its per-IP limit.
 *   - MHD_OPTION_NOTIFY_CONNECTION (STARTED/CLOSED, with a socket context)
 *     plus MHD_get_connection_info (CONNECTION_FD, CLIENT_ADDRESS) let us keep
 *     our own registry of live connections, and MHD_OPTION_URI_LOG_CALLBACK
 *     tells us when a request line has arrived.
 *   - Thread models: thread-per-connection (used: handlers block while they
 *     wait for generation) or an internal poll/epoll thread pool
 *     (MHD_OPTION_THREAD_POOL_SIZE) with suspend/resume, which would make
 *     slow sockets cheap but needs every handler rewritten non-blocking. One
 *     thread per connection with a 1 MiB stack is affordable at the ~1000
 *     connections we allow, so we keep it.
 *   - MHD_OPTION_LISTEN_BACKLOG_SIZE: the kernel default (SOMAXCONN) is fine.
 *   - MHD_OPTION_STRICT_FOR_CLIENT=1 (used) makes MHD answer 400 to HTTP/1.1
 *     requests without Host and to a folded line with nothing before it, and
 *     close a request line with a space in the URL; see "framing" below for
 *     what it does not cover.
 * What we do:
 *   - Deadlines: a connection must deliver its request line, headers and
 *     body within request_timeout seconds of connecting; on a kept-alive
 *     connection the next request must arrive whole within idle_timeout of
 *     the last response and within request_timeout of its request line. A
 *     watchdog thread shutdown()s the socket of any connection past its
 *     deadline (MHD then closes it). No deadline runs while a request is
 *     worked on or its response (a stream) is sent.
 *   - Limits: a connection beyond max_conns in all, or beyond
 *     max_conns_per_ip from its address, is still accepted by MHD, but its
 *     request is answered 503 with Retry-After as soon as its headers are in,
 *     and the connection closed; it gets only a short deadline (OVER_GRACE_S)
 *     to send those headers. Beyond MHD's ceiling, connections are dropped.
 *   - Framing: MHD frames bodies itself, so anything a proxy in front might
 *     read differently is refused with 400 and the connection closed:
 *     conflicting Content-Length headers, Content-Length with
 *     Transfer-Encoding, a Transfer-Encoding other than one "chunked".
 *     A Content-Length above the body limit is answered 413 at once.
 *     Not visible through MHD's API, so not refused: bare-LF line ends (MHD
 *     reads them as CRLF), obsolete folding after a header (MHD joins it to
 *     that header's value; strict mode refuses only a fold with nothing
 *     before it) and a NUL inside a header value (MHD cuts the value
 *     there). A request line MHD cannot parse is closed by MHD without an
 *     answer; one without a line end is closed at its deadline.
 *     tests/server/test_http_hygiene.py pins these.
 */
#include "server.h"
#include <errno.h>
#include <microhttpd.h>
#include <netdb.h>
#include <poll.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/socket.h>
#include <time.h>

/* A connection beyond a limit gets this long to send the request that we
 * answer with 503: enough for any client that is not trickling. */
#define OVER_GRACE_S 3.0

typedef struct conn_ctx {
    pl_srv_buf body;
    bool too_large;
    double t0;
    unsigned status;
    bool streamed;
    bool close;              /* the response says Connection: close */
    bool inflight;           /* counted in s->inflight until the answer is sent (drain) */
    char line[272];          /* "METHOD /path" for the access log, escaped */
} conn_ctx;

/* One TCP connection, from MHD's STARTED to its CLOSED notification. The
 * watchdog reads it, so every field after `next` is guarded by the
 * registry's mutex. */
typedef struct pl_conn {
    struct pl_conn *prev, *next;
    int fd;                  /* open until CLOSED (MHD closes it after notifying) */
    char ip[64];             /* numeric client address: the per-address key */
    double deadline;         /* pl_srv_now() by which the request must be in; 0 = none */
    bool over;               /* beyond a connection limit: answer 503 */
    bool cut;                /* already shut down by the watchdog */
} pl_conn;

typedef struct http_impl {
    pthread_mutex_t mu;
    pl_conn *head;
    int n;
    atomic_bool stop;
    pthread_t watchdog;
    bool watchdog_running;
} http_impl;

/* ---- helpers ------------------------------------------------------------------*/

/* The request being handled by this thread (one thread per connection). */
static _Thread_local conn_ctx *tl_cc;

static enum MHD_Result send_text(struct MHD_Connection *c, unsigned status, char *text, size_t len,
                                 const char *type) {
    conn_ctx *cc = tl_cc;
    struct MHD_Response *resp = MHD_create_response_from_buffer(len, text, MHD_RESPMEM_MUST_FREE);
    if (!resp) { free(text); return MHD_NO; }
    MHD_add_response_header(resp, MHD_HTTP_HEADER_CONTENT_TYPE, type);
    if (status == 401) MHD_add_response_header(resp, MHD_HTTP_HEADER_WWW_AUTHENTICATE, "Bearer");
    if (status == 503) MHD_add_response_header(resp, MHD_HTTP_HEADER_RETRY_AFTER, "1");
    /* MHD closes the connection after a response that says so: needed when
     * the body was not read (early answers) or cannot be trusted. */
    if (cc && cc->close) MHD_add_response_header(resp, MHD_HTTP_HEADER_CONNECTION, "close");
    enum MHD_Result ret = MHD_queue_response(c, status, resp);
    MHD_destroy_response(resp);
    if (cc) cc->status = status;
    return ret;
}

static enum MHD_Result send_json(struct MHD_Connection *c, unsigned status, json_t *j) {
    char *txt = j ? json_dumps(j, JSON_COMPACT) : NULL;
    json_decref(j);
    if (!txt) return MHD_NO;
    size_t n = strlen(txt);
    /* A trailing newline makes curl output readable; JSON does not mind. */
    char *t2 = realloc(txt, n + 2);
    if (t2) { txt = t2; txt[n++] = '\n'; txt[n] = 0; }
    return send_text(c, status, txt, n, "application/json");
}

static enum MHD_Result send_error(struct MHD_Connection *c, const pl_srv_error *e) {
    return send_json(c, (unsigned)e->http, pl_srv_error_json(e));
}

static enum MHD_Result fail(struct MHD_Connection *c, int http, const char *param, const char *code,
                            const char *msg) {
    pl_srv_error e;
    pl_srv_fail(&e, http, param, code, "%s", msg);
    return send_error(c, &e);
}

static int conn_fd(struct MHD_Connection *c) {
    const union MHD_ConnectionInfo *ci = MHD_get_connection_info(c, MHD_CONNECTION_INFO_CONNECTION_FD);
    return ci ? ci->connect_fd : -1;
}

/* Has the peer closed its end? Pipelined request bytes are not a hang-up. */
static bool client_gone(int fd) {
    if (fd < 0) return false;
    struct pollfd p = {.fd = fd, .events = POLLIN | POLLRDHUP};
    if (poll(&p, 1, 0) <= 0) return false;
    if (p.revents & (POLLHUP | POLLERR | POLLNVAL | POLLRDHUP)) return true;
    if (p.revents & POLLIN) {
        char b;
        ssize_t k = recv(fd, &b, 1, MSG_PEEK | MSG_DONTWAIT);
        return k == 0 || (k < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR);
    }
    return false;
}

static void deadline_in(struct timespec *ts, long ms) {
    clock_gettime(CLOCK_MONOTONIC, ts);
    ts->tv_nsec += ms * 1000000L;
    ts->tv_sec += ts->tv_nsec / 1000000000L;
    ts->tv_nsec %= 1000000000L;
}

static json_t *load_body(pl_srv *s, conn_ctx *cc, pl_srv_error *e) {
    /* server_openai.c: client-facing messages instead of jansson's texts,
     * and (with s) texts too long for the context refused before parsing. */
    return pl_srv_body_json(s, cc->body.p, cc->body.n, e);
}

/* ---- connections: registry, limits, deadlines -----------------------------------*/

static pl_conn *conn_of(struct MHD_Connection *c) {
    const union MHD_ConnectionInfo *ci = MHD_get_connection_info(c, MHD_CONNECTION_INFO_SOCKET_CONTEXT);
    return ci ? ci->socket_context : NULL;
}

/* when = 0: no deadline. keep_sooner: only move the deadline earlier. */
static void set_deadline(pl_srv *s, struct MHD_Connection *c, double when, bool keep_sooner) {
    http_impl *h = s->http_impl;
    pl_conn *k = conn_of(c);
    if (!h || !k) return;
    pthread_mutex_lock(&h->mu);
    if (!keep_sooner || k->deadline == 0 || when < k->deadline) k->deadline = when;
    pthread_mutex_unlock(&h->mu);
}

static bool conn_over(pl_srv *s, struct MHD_Connection *c) {
    http_impl *h = s->http_impl;
    pl_conn *k = conn_of(c);
    if (!h || !k) return false;
    pthread_mutex_lock(&h->mu);
    bool over = k->over;
    pthread_mutex_unlock(&h->mu);
    return over;
}

static void client_ip(struct MHD_Connection *c, char *out, size_t cap) {
    snprintf(out, cap, "?");
    const union MHD_ConnectionInfo *ci = MHD_get_connection_info(c, MHD_CONNECTION_INFO_CLIENT_ADDRESS);
    if (!ci || !ci->client_addr) return;
    const struct sockaddr *sa = ci->client_addr;
    socklen_t len = sa->sa_family == AF_INET6 ? sizeof(struct sockaddr_in6) : sizeof(struct sockaddr_in);
    if (getnameinfo(sa, len, out, (socklen_t)cap, NULL, 0, NI_NUMERICHOST) != 0) snprintf(out, cap, "?");
}

static void on_connection(void *cls, struct MHD_Connection *c, void **socket_context,
                          enum MHD_ConnectionNotificationCode code) {
    pl_srv *s = cls;
    http_impl *h = s->http_impl;
    if (code == MHD_CONNECTION_NOTIFY_STARTED) {
        pl_conn *k = calloc(1, sizeof *k);
        if (!k) return; /* unguarded (no deadline, no limit) rather than refused */
        k->fd = conn_fd(c);
        client_ip(c, k->ip, sizeof k->ip);
        pthread_mutex_lock(&h->mu);
        int same = 0;
        for (pl_conn *o = h->head; o; o = o->next) same += !strcmp(o->ip, k->ip);
        k->over = h->n >= s->cfg.max_conns || (s->cfg.max_conns_per_ip > 0 && same >= s->cfg.max_conns_per_ip);
        k->deadline = pl_srv_now() + (k->over ? OVER_GRACE_S : (double)s->cfg.request_timeout);
        k->next = h->head;
        if (h->head) h->head->prev = k;
        h->head = k;
        h->n++;
        pthread_mutex_unlock(&h->mu);
        *socket_context = k;
        return;
    }
    pl_conn *k = *socket_context;
    if (!k) return;
    pthread_mutex_lock(&h->mu);
    if (k->prev) k->prev->next = k->next;
    else h->head = k->next;
    if (k->next) k->next->prev = k->prev;
    h->n--;
    pthread_mutex_unlock(&h->mu);
    free(k);
    *socket_context = NULL;
}

/* The request line is in: its headers and body get request_timeout from
 * now, or less if the connection's deadline is sooner. */
static void *on_uri(void *cls, const char *uri, struct MHD_Connection *c) {
    pl_srv *s = cls;
    (void)uri;
    set_deadline(s, c, pl_srv_now() + s->cfg.request_timeout, true);
    return NULL;
}

/* Shuts down the sockets of connections past their deadline. shutdown(), not
 * close(): the fd stays MHD's, its thread sees EOF and closes it; the
 * registry lock keeps the fd from being closed and reused meanwhile. */
static void *watchdog_main(void *arg) {
    pl_srv *s = arg;
    http_impl *h = s->http_impl;
    while (!atomic_load(&h->stop)) {
        struct timespec ts = {0, 100 * 1000000L};
        nanosleep(&ts, NULL);
        double now = pl_srv_now();
        int cut = 0;
        pthread_mutex_lock(&h->mu);
        for (pl_conn *k = h->head; k; k = k->next)
            if (k->deadline > 0 && now >= k->deadline && !k->cut && k->fd >= 0) {
                shutdown(k->fd, SHUT_RDWR);
                k->cut = true;
                cut++;
            }
        int live = h->n;
        pthread_mutex_unlock(&h->mu);
        /* One line per sweep, not per connection: under a slow-client flood
         * the log stays readable. */
        if (cut)
            pl_srv_log("closed %d connection%s whose request did not arrive in time (%d open)", cut,
                       cut == 1 ? "" : "s", live - cut);
    }
    return NULL;
}

/* Client-controlled text for the log: bytes outside printable ASCII (and
 * the backslash) as \xNN, so that a "%0a" in a URL cannot forge a log line
 * nor "%1b" reach a terminal. */
static void log_escape(char *out, size_t cap, const char *in, size_t max_in) {
    size_t o = 0;
    for (size_t i = 0; in[i] && i < max_in && o + 5 < cap; i++) {
        unsigned char ch = (unsigned char)in[i];
        if (ch >= 0x20 && ch < 0x7f && ch != '\\') out[o++] = (char)ch;
        else o += (size_t)snprintf(out + o, cap - o, "\\x%02x", ch);
    }
    out[o] = 0;
}

/* ---- request framing ----------------------------------------------------------*/

typedef struct framing {
    int n_cl, n_te;
    const char *cl;
    size_t cl_len;
    bool cl_conflict, cl_bad, te_bad;
} framing;

static enum MHD_Result framing_header(void *cls, enum MHD_ValueKind kind, const char *key, size_t key_size,
                                      const char *value, size_t value_size) {
    framing *f = cls;
    (void)kind;
    if (key_size == 14 && !strncasecmp(key, "Content-Length", 14)) {
        bool digits = value_size > 0;
        for (size_t i = 0; i < value_size; i++) digits &= value[i] >= '0' && value[i] <= '9';
        f->cl_bad |= !digits;
        if (f->n_cl++ && (value_size != f->cl_len || memcmp(value, f->cl, value_size))) f->cl_conflict = true;
        f->cl = value;
        f->cl_len = value_size;
    } else if (key_size == 17 && !strncasecmp(key, "Transfer-Encoding", 17)) {
        f->n_te++;
        f->te_bad |= value_size != 7 || strncasecmp(value, "chunked", 7);
    }
    return MHD_YES;
}

/* NULL: the body's framing is unambiguous. Otherwise why it is not. */
static const char *framing_error(struct MHD_Connection *c) {
    framing f = {0};
    MHD_get_connection_values_n(c, MHD_HEADER_KIND, framing_header, &f);
    if (f.cl_conflict) return "conflicting Content-Length headers";
    if (f.cl_bad) return "invalid Content-Length header";
    if (f.n_te && f.n_cl) return "both Transfer-Encoding and Content-Length";
    if (f.n_te > 1 || f.te_bad) return "unsupported Transfer-Encoding (only one 'chunked' is accepted)";
    return NULL;
}

/* ---- streaming ----------------------------------------------------------------*/

typedef struct stream_ctx {
    pl_srv *s;
    pl_srv_request *r;
    struct MHD_Connection *conn;
    int fd;
    pl_srv_buf out;
    size_t off;
    size_t *sent_c, *sent_r;
    bool *fin_sent;
    bool started, ended, complete;
    double last_check;
} stream_ctx;

static int sse_event(pl_srv_buf *o, json_t *j) {
    char *txt = j ? json_dumps(j, JSON_COMPACT) : NULL;
    json_decref(j);
    if (!txt) return -1;
    int rc = pl_srv_buf_add(o, "data: ", 6) | pl_srv_buf_add(o, txt, strlen(txt)) | pl_srv_buf_add(o, "\n\n", 2);
    free(txt);
    return rc;
}

/* With r->mu held: formats every delta not sent yet. Returns -1 on OOM. */
static int stream_collect(stream_ctx *st) {
    pl_srv_request *r = st->r;
    pl_srv *s = st->s;
    int rc = 0;
    if (!st->started) {
        st->started = true;
        if (r->kind == PL_SRV_CHAT)
            for (int i = 0; i < r->n_seqs; i++)
                rc |= sse_event(&st->out, pl_srv_chunk_json(s, r, r->seqs[i].index, true, NULL, 0, NULL, 0, NULL));
    }
    for (int i = 0; i < r->n_seqs; i++) {
        pl_srv_seq *q = &r->seqs[i];
        if (st->fin_sent[i]) continue;
        pl_srv_buf *c = &q->text.content, *rs = &q->text.reasoning;
        bool new_r = rs->n > st->sent_r[i], new_c = c->n > st->sent_c[i];
        if (new_r || new_c) {
            rc |= sse_event(&st->out, pl_srv_chunk_json(s, r, q->index, false, new_c ? c->p + st->sent_c[i] : NULL,
                                                        new_c ? c->n - st->sent_c[i] : 0,
                                                        new_r ? rs->p + st->sent_r[i] : NULL,
                                                        new_r ? rs->n - st->sent_r[i] : 0, NULL));
            st->sent_c[i] = c->n;
            st->sent_r[i] = rs->n;
        }
        if (q->done && !r->failed) {
            rc |= sse_event(&st->out, pl_srv_chunk_json(s, r, q->index, false, NULL, 0, NULL, 0, q->finish));
            st->fin_sent[i] = true;
        }
    }
    if (r->n_done == r->n_seqs) {
        if (r->failed) {
            pl_srv_error e;
            pl_srv_fail(&e, r->fail_http, NULL, NULL, "%s", r->fail_msg);
            rc |= sse_event(&st->out, pl_srv_error_json(&e));
        } else {
            if (r->include_usage) rc |= sse_event(&st->out, pl_srv_usage_chunk_json(s, r));
            rc |= pl_srv_buf_add(&st->out, "data: [DONE]\n\n", 14);
            st->complete = true;
        }
        st->ended = true;
    }
    return rc ? -1 : 0;
}

static ssize_t stream_read(void *cls, uint64_t pos, char *buf, size_t max) {
    stream_ctx *st = cls;
    (void)pos;
    for (;;) {
        if (st->off < st->out.n) {
            size_t n = st->out.n - st->off < max ? st->out.n - st->off : max;
            memcpy(buf, st->out.p + st->off, n);
            st->off += n;
            return (ssize_t)n;
        }
        st->out.n = 0;
        st->off = 0;
        if (st->ended) {
            /* Back to the idle timeout for the keep-alive that follows. */
            MHD_set_connection_option(st->conn, MHD_CONNECTION_OPTION_TIMEOUT, (unsigned)st->s->cfg.idle_timeout);
            return MHD_CONTENT_READER_END_OF_STREAM;
        }
        pthread_mutex_lock(&st->r->mu);
        int rc = stream_collect(st);
        if (rc == 0 && st->out.n == 0) {
            struct timespec ts;
            deadline_in(&ts, 100);
            pthread_cond_timedwait(&st->r->cv, &st->r->mu, &ts);
        }
        pthread_mutex_unlock(&st->r->mu);
        if (rc) return MHD_CONTENT_READER_END_WITH_ERROR;
        double now = pl_srv_now();
        if (st->out.n == 0 && now - st->last_check >= 0.05) {
            st->last_check = now;
            if (client_gone(st->fd)) {
                pl_srv_cancel(st->s, st->r);
                return MHD_CONTENT_READER_END_WITH_ERROR;
            }
        }
    }
}

static void stream_free(void *cls) {
    stream_ctx *st = cls;
    /* Closed before the end (hang-up, write error): stop generating. */
    if (!st->complete) pl_srv_cancel(st->s, st->r);
    pl_srv_request_unref(st->r);
    pl_srv_buf_free(&st->out);
    free(st->sent_c);
    free(st->sent_r);
    free(st->fin_sent);
    free(st);
}

/* ---- routes -------------------------------------------------------------------*/

static enum MHD_Result handle_generate(pl_srv *s, struct MHD_Connection *c, conn_ctx *cc, pl_srv_kind kind) {
    /* Counted before the state is read: a drain that starts after this
     * waits for the answer (on_completed uncounts it once it is sent). */
    atomic_fetch_add(&s->inflight, 1);
    cc->inflight = true;
    int state = atomic_load(&s->state);
    if (state == PL_SRV_DRAINING || state == PL_SRV_STOPPING)
        return fail(c, 503, NULL, "shutting_down", "the server is shutting down; retry on another replica");
    if (state != PL_SRV_READY)
        return fail(c, 503, NULL, "model_loading", "the model is still loading");
    pl_srv_error e;
    memset(&e, 0, sizeof e);
    json_t *body = load_body(s, cc, &e);
    if (!body) return send_error(c, &e);
    pl_srv_request *r = pl_srv_parse_request(s, kind, body, &e);
    json_decref(body);
    if (!r) return send_error(c, &e);
    snprintf(r->route, sizeof r->route, "%s", kind == PL_SRV_CHAT ? "chat" : "completions");
    if (pl_srv_submit(s, r)) {
        pl_srv_request_unref(r);
        return fail(c, 503, NULL, "server_busy", "the server is busy: too many requests are waiting; retry later");
    }
    int fd = conn_fd(c);
    /* No idle timeout while the request is being worked on: the socket is
     * legitimately quiet while we queue and generate. */
    MHD_set_connection_option(c, MHD_CONNECTION_OPTION_TIMEOUT, 0u);

    if (r->stream) {
        stream_ctx *st = calloc(1, sizeof *st);
        if (st) {
            st->sent_c = calloc((size_t)r->n_seqs, sizeof *st->sent_c);
            st->sent_r = calloc((size_t)r->n_seqs, sizeof *st->sent_r);
            st->fin_sent = calloc((size_t)r->n_seqs, sizeof *st->fin_sent);
        }
        if (!st || !st->sent_c || !st->sent_r || !st->fin_sent) {
            if (st) { free(st->sent_c); free(st->sent_r); free(st->fin_sent); free(st); }
            pl_srv_cancel(s, r);
            pl_srv_request_unref(r);
            return fail(c, 500, NULL, NULL, "out of memory");
        }
        st->s = s;
        st->r = r; /* the stream owns the handler's reference now */
        st->conn = c;
        st->fd = fd;
        st->last_check = pl_srv_now();
        struct MHD_Response *resp = MHD_create_response_from_callback(MHD_SIZE_UNKNOWN, 16384, stream_read, st,
                                                                      stream_free);
        if (!resp) { stream_free(st); return MHD_NO; }
        MHD_add_response_header(resp, MHD_HTTP_HEADER_CONTENT_TYPE, "text/event-stream");
        MHD_add_response_header(resp, MHD_HTTP_HEADER_CACHE_CONTROL, "no-cache");
        enum MHD_Result ret = MHD_queue_response(c, 200, resp);
        MHD_destroy_response(resp);
        cc->status = 200;
        cc->streamed = true;
        return ret;
    }

    bool gone = false;
    double last_check = pl_srv_now();
    pthread_mutex_lock(&r->mu);
    while (r->n_done < r->n_seqs) {
        struct timespec ts;
        deadline_in(&ts, 100);
        pthread_cond_timedwait(&r->cv, &r->mu, &ts);
        double now = pl_srv_now();
        if (r->n_done < r->n_seqs && now - last_check >= 0.05) {
            last_check = now;
            pthread_mutex_unlock(&r->mu);
            gone = client_gone(fd);
            pthread_mutex_lock(&r->mu);
            if (gone) break;
        }
    }
    pthread_mutex_unlock(&r->mu);
    if (gone) {
        pl_srv_cancel(s, r);
        pl_srv_request_unref(r);
        cc->status = 499; /* nginx's "client closed request", for the log */
        return MHD_NO;
    }
    MHD_set_connection_option(c, MHD_CONNECTION_OPTION_TIMEOUT, (unsigned)s->cfg.idle_timeout);
    enum MHD_Result ret;
    if (r->failed) {
        ret = fail(c, r->fail_http, NULL, NULL, r->fail_msg);
    } else {
        size_t gen = 0;
        for (int i = 0; i < r->n_seqs; i++) gen += r->seqs[i].n_tokens;
        double dt = r->t_done - r->t_first;
        pl_srv_log("%s %s: prompt %zu tokens, generated %zu tokens in %.0f ms (%.1f tok/s), first token after %.0f ms",
                   r->route, r->id, r->usage_prompt, gen, (r->t_done - r->t_submit) * 1e3,
                   dt > 0 && gen > 1 ? (gen - 1) / dt : 0.0, (r->t_first - r->t_submit) * 1e3);
        ret = send_json(c, 200, pl_srv_response_json(s, r));
    }
    pl_srv_request_unref(r);
    return ret;
}

static enum MHD_Result handle_tokenize(pl_srv *s, struct MHD_Connection *c, conn_ctx *cc) {
    if (atomic_load(&s->state) != PL_SRV_READY) return fail(c, 503, NULL, "model_loading", "the model is still loading");
    pl_srv_error e;
    json_t *body = load_body(NULL, cc, &e);
    if (!body) return send_error(c, &e);
    json_t *content = json_object_get(body, "content"), *as = json_object_get(body, "add_special"),
           *ps = json_object_get(body, "parse_special");
    enum MHD_Result ret;
    if (!json_is_string(content)) ret = fail(c, 400, "content", "invalid_type", "'content' must be a string");
    else if (as && !json_is_null(as) && !json_is_boolean(as))
        ret = fail(c, 400, "add_special", "invalid_type", "'add_special' must be a boolean");
    else if (ps && !json_is_null(ps) && !json_is_boolean(ps))
        ret = fail(c, 400, "parse_special", "invalid_type", "'parse_special' must be a boolean");
    else {
        bool add = json_is_true(as), parse = !json_is_false(ps);
        int32_t *ids = NULL;
        size_t n = 0;
        if (pl_tokenize(s->model, json_string_value(content), json_string_length(content), parse, &add, &ids, &n) !=
            PL_OK) {
            ret = fail(c, 400, "content", NULL, pl_last_error());
        } else {
            json_t *arr = json_array();
            for (size_t i = 0; i < n; i++) json_array_append_new(arr, json_integer(ids[i]));
            pl_free(ids);
            ret = send_json(c, 200, json_pack("{s:o}", "tokens", arr));
        }
    }
    json_decref(body);
    return ret;
}

static enum MHD_Result handle_detokenize(pl_srv *s, struct MHD_Connection *c, conn_ctx *cc) {
    if (atomic_load(&s->state) != PL_SRV_READY) return fail(c, 503, NULL, "model_loading", "the model is still loading");
    pl_srv_error e;
    json_t *body = load_body(NULL, cc, &e);
    if (!body) return send_error(c, &e);
    json_t *toks = json_object_get(body, "tokens");
    enum MHD_Result ret;
    size_t n = json_array_size(toks);
    int32_t *ids = json_is_array(toks) ? malloc((n ? n : 1) * sizeof *ids) : NULL;
    if (!json_is_array(toks)) {
        ret = fail(c, 400, "tokens", "invalid_type", "'tokens' must be an array of token ids");
    } else if (!ids) {
        ret = fail(c, 500, NULL, NULL, "out of memory");
    } else {
        bool ok = true;
        for (size_t i = 0; i < n && ok; i++) {
            json_t *v = json_array_get(toks, i);
            ok = json_is_integer(v) && json_integer_value(v) >= 0 && json_integer_value(v) < s->n_vocab;
            if (ok) ids[i] = (int32_t)json_integer_value(v);
        }
        char *text = NULL;
        size_t len = 0;
        if (!ok) {
            char msg[96];
            snprintf(msg, sizeof msg, "'tokens' must hold token ids between 0 and %d", s->n_vocab - 1);
            ret = fail(c, 400, "tokens", "invalid_value", msg);
        } else if (pl_detokenize(s->model, ids, n, true, &text, &len) != PL_OK) {
            ret = fail(c, 400, "tokens", NULL, pl_last_error());
        } else {
            pl_srv_buf clean = {0};
            pl_srv_utf8_sanitize(&clean, text, len);
            pl_free(text);
            ret = send_json(c, 200, json_pack("{s:o}", "content", json_stringn(clean.p ? clean.p : "", clean.n)));
            pl_srv_buf_free(&clean);
        }
    }
    free(ids);
    json_decref(body);
    return ret;
}

static bool authorized(pl_srv *s, struct MHD_Connection *c) {
    const char *key = s->cfg.api_key;
    if (!key || !*key) return true;
    const char *h = NULL;
    size_t n = 0;
    /* The value's full length, not strlen, so that "Bearer KEY\0junk" is not
     * KEY. libmicrohttpd 0.9.75 itself reports strlen as the length (it
     * stores values as C strings), so there the junk is gone before we look;
     * this holds wherever MHD keeps the real length. */
    if (MHD_lookup_connection_value_n(c, MHD_HEADER_KIND, MHD_HTTP_HEADER_AUTHORIZATION,
                                      strlen(MHD_HTTP_HEADER_AUTHORIZATION), &h, &n) != MHD_YES || !h)
        return false;
    if (n < 7 || strncasecmp(h, "Bearer ", 7) != 0) return false;
    h += 7;
    n -= 7;
    while (n && *h == ' ') { h++; n--; }
    size_t b = strlen(key);
    /* Constant time in the key's content. */
    unsigned char diff = (unsigned char)(n != b);
    for (size_t i = 0; i < b; i++) diff |= (unsigned char)(key[i] ^ (i < n ? h[i] : 0));
    return diff == 0;
}

static enum MHD_Result route(pl_srv *s, struct MHD_Connection *c, conn_ctx *cc, const char *url,
                             const char *method) {
    bool get = !strcmp(method, "GET") || !strcmp(method, "HEAD");
    bool post = !strcmp(method, "POST");
    struct { const char *path; bool post; int id; } routes[] = {
        {"/health", false, 0},           {"/v1/models", false, 1},   {"/metrics", false, 2},
        {"/v1/chat/completions", true, 3}, {"/v1/completions", true, 4}, {"/tokenize", true, 5},
        {"/detokenize", true, 6},        {"/slots", false, 7},
    };
    int id = -1;
    bool want_post = false;
    for (size_t i = 0; i < sizeof routes / sizeof routes[0]; i++)
        if (!strcmp(url, routes[i].path)) { id = routes[i].id; want_post = routes[i].post; }
    if (id == 2 && !s->cfg.metrics) id = -1;
    if (id < 0) {
        char msg[200];
        snprintf(msg, sizeof msg, "unknown endpoint: %.16s %.120s", method, url);
        return fail(c, 404, NULL, "unknown_url", msg);
    }
    if (want_post ? !post : !get) return fail(c, 405, NULL, "method_not_allowed", "method not allowed for this endpoint");
    if (!strncmp(url, "/v1/", 4) && !authorized(s, c))
        return fail(c, 401, NULL, "invalid_api_key", "invalid or missing API key (send 'Authorization: Bearer <key>')");
    if (cc->too_large) {
        char msg[96];
        snprintf(msg, sizeof msg, "the request body is larger than %u bytes", PL_SRV_MAX_BODY);
        return fail(c, 413, NULL, "request_too_large", msg);
    }
    switch (id) {
    case 0: {
        /* Readiness for load balancers: 503 while loading, while draining
         * after SIGTERM, and (--health-queue-full-503) while no request could
         * be queued, so that traffic goes to another replica. */
        int state = atomic_load(&s->state);
        if (state == PL_SRV_DRAINING || state == PL_SRV_STOPPING)
            return fail(c, 503, NULL, "shutting_down", "the server is shutting down");
        if (state != PL_SRV_READY) return fail(c, 503, NULL, "model_loading", "the model is still loading");
        if (s->cfg.health_queue_full_503) {
            pthread_mutex_lock(&s->mu);
            bool full = s->q_len >= s->cfg.queue && s->slots_busy >= s->n_seq;
            pthread_mutex_unlock(&s->mu);
            if (full) return fail(c, 503, NULL, "queue_full", "every slot is busy and the queue is full");
        }
        return send_json(c, 200, json_pack("{s:s}", "status", "ok"));
    }
    case 7:
        if (atomic_load(&s->state) == PL_SRV_LOADING)
            return fail(c, 503, NULL, "model_loading", "the model is still loading");
        return send_json(c, 200, pl_srv_slots_json(s));
    case 1: return send_json(c, 200, pl_srv_models_json(s));
    case 2: {
        pl_srv_buf o = {0};
        pl_srv_metrics_text(s, &o);
        if (!o.p) return MHD_NO;
        return send_text(c, 200, o.p, o.n, "text/plain; version=0.0.4; charset=utf-8");
    }
    case 3: return handle_generate(s, c, cc, PL_SRV_CHAT);
    case 4: return handle_generate(s, c, cc, PL_SRV_COMPLETION);
    case 5: return handle_tokenize(s, c, cc);
    default: return handle_detokenize(s, c, cc);
    }
}

static enum MHD_Result on_request(void *cls, struct MHD_Connection *c, const char *url, const char *method,
                                  const char *version, const char *upload, size_t *upload_size, void **con_cls) {
    pl_srv *s = cls;
    (void)version;
    conn_ctx *cc = *con_cls;
    if (!cc) {
        /* First call: headers only. Bodies are collected in the next calls. */
        cc = calloc(1, sizeof *cc);
        if (!cc) return MHD_NO;
        cc->t0 = pl_srv_now();
        char m[80], u[180];
        log_escape(m, sizeof m, method, 16);
        log_escape(u, sizeof u, url, 120);
        snprintf(cc->line, sizeof cc->line, "%s %s", m, u);
        *con_cls = cc;
        /* Answers before the body: the connection closes after them, so
         * an unread (or ambiguously framed) body is never taken for the next
         * request. The request deadline keeps running meanwhile. */
        const char *why = framing_error(c);
        tl_cc = cc;
        cc->close = true;
        enum MHD_Result ret = MHD_YES;
        if (conn_over(s, c)) {
            ret = fail(c, 503, NULL, "too_many_connections",
                       "too many open connections (from this address or in all); retry later");
        } else if (why) {
            ret = fail(c, 400, NULL, "bad_framing", why);
        } else {
            const char *cl = MHD_lookup_connection_value(c, MHD_HEADER_KIND, MHD_HTTP_HEADER_CONTENT_LENGTH);
            if (cl && strtoull(cl, NULL, 10) > PL_SRV_MAX_BODY) {
                cc->too_large = true;
                char msg[96];
                snprintf(msg, sizeof msg, "the request body is larger than %u bytes", PL_SRV_MAX_BODY);
                ret = fail(c, 413, NULL, "request_too_large", msg);
            } else {
                cc->close = false;
            }
        }
        tl_cc = NULL;
        return ret;
    }
    if (cc->status) { *upload_size = 0; return MHD_YES; } /* answered early; drop the rest */
    if (*upload_size) {
        /* Too large: keep reading (and dropping) so the 413 reaches a client
         * that sends the whole body before it reads the answer. */
        if (!cc->too_large) {
            if (cc->body.n + *upload_size > PL_SRV_MAX_BODY || pl_srv_buf_add(&cc->body, upload, *upload_size)) {
                cc->too_large = true;
                pl_srv_buf_free(&cc->body);
            }
        }
        *upload_size = 0;
        return MHD_YES;
    }
    /* The whole request is in: no deadline while it is worked on and answered. */
    set_deadline(s, c, 0, false);
    tl_cc = cc;
    enum MHD_Result ret = route(s, c, cc, url, method);
    tl_cc = NULL;
    return ret;
}

static void on_completed(void *cls, struct MHD_Connection *c, void **con_cls, enum MHD_RequestTerminationCode toe) {
    pl_srv *s = cls;
    /* Kept alive: the next request must be in within the idle timeout, however
     * it trickles (MHD's own idle timer restarts with every byte). */
    set_deadline(s, c, pl_srv_now() + s->cfg.idle_timeout, false);
    conn_ctx *cc = *con_cls;
    if (!cc) return;
    const char *how = toe == MHD_REQUEST_TERMINATED_COMPLETED_OK ? "" : " (connection closed early)";
    if (cc->status != 0 || toe != MHD_REQUEST_TERMINATED_COMPLETED_OK)
        pl_srv_log("%s -> %u%s in %.1f ms", cc->line, cc->status, how, (pl_srv_now() - cc->t0) * 1e3);
    if (cc->status) pl_srv_count_status(s, cc->status);
    if (cc->inflight) atomic_fetch_sub(&s->inflight, 1);
    pl_srv_buf_free(&cc->body);
    free(cc);
    *con_cls = NULL;
}

int pl_srv_http_start(pl_srv *s) {
    struct addrinfo hints, *ai = NULL;
    memset(&hints, 0, sizeof hints);
    hints.ai_family = AF_UNSPEC;
    hints.ai_socktype = SOCK_STREAM;
    hints.ai_flags = AI_PASSIVE | AI_NUMERICSERV;
    char port[16];
    snprintf(port, sizeof port, "%d", s->cfg.port);
    int gai = getaddrinfo(s->cfg.host, port, &hints, &ai);
    if (gai != 0 || !ai) {
        fprintf(stderr, "pocketllm: serve: cannot resolve host '%s': %s\n", s->cfg.host, gai_strerror(gai));
        return -1;
    }
    unsigned flags = MHD_USE_THREAD_PER_CONNECTION | MHD_USE_INTERNAL_POLLING_THREAD | MHD_USE_POLL |
                     MHD_USE_ERROR_LOG;
    if (ai->ai_family == AF_INET6) flags |= MHD_USE_IPv6;
    http_impl *h = calloc(1, sizeof *h);
    if (!h) { freeaddrinfo(ai); fprintf(stderr, "pocketllm: serve: out of memory\n"); return -1; }
    pthread_mutex_init(&h->mu, NULL);
    atomic_init(&h->stop, false);
    s->http_impl = h;
    /* Our limits answer 503 (see the top of this file); MHD's, which only
     * drop, sit above them as a hard ceiling for the time between accept
     * and our answer. */
    unsigned hard = (unsigned)s->cfg.max_conns + 64;
    s->daemon = MHD_start_daemon(flags, (uint16_t)s->cfg.port, NULL, NULL, on_request, s, MHD_OPTION_SOCK_ADDR,
                                 ai->ai_addr, MHD_OPTION_CONNECTION_LIMIT, hard, MHD_OPTION_CONNECTION_TIMEOUT,
                                 (unsigned)s->cfg.idle_timeout, MHD_OPTION_NOTIFY_COMPLETED, on_completed, s,
                                 MHD_OPTION_NOTIFY_CONNECTION, on_connection, s, MHD_OPTION_URI_LOG_CALLBACK, on_uri,
                                 s, MHD_OPTION_STRICT_FOR_CLIENT, 1, MHD_OPTION_THREAD_STACK_SIZE, (size_t)1 << 20,
                                 MHD_OPTION_END);
    freeaddrinfo(ai);
    if (!s->daemon) {
        fprintf(stderr, "pocketllm: serve: cannot listen on %s:%d (%s)\n", s->cfg.host, s->cfg.port,
                errno ? strerror(errno) : "libmicrohttpd refused");
        pthread_mutex_destroy(&h->mu);
        free(h);
        s->http_impl = NULL;
        return -1;
    }
    if (pthread_create(&h->watchdog, NULL, watchdog_main, s) == 0) h->watchdog_running = true;
    else pl_srv_log("warning: no request-deadline watchdog (thread creation failed)");
    const union MHD_DaemonInfo *di = MHD_get_daemon_info(s->daemon, MHD_DAEMON_INFO_BIND_PORT);
    s->bound_port = di ? di->port : s->cfg.port;
    return 0;
}

void pl_srv_http_stop(pl_srv *s) {
    if (!s->daemon) return;
    MHD_stop_daemon(s->daemon); /* every connection is closed (and unregistered) after this */
    s->daemon = NULL;
    http_impl *h = s->http_impl;
    if (h->watchdog_running) {
        atomic_store(&h->stop, true);
        pthread_join(h->watchdog, NULL);
    }
    pthread_mutex_destroy(&h->mu);
    free(h);
    s->http_impl = NULL;
}
