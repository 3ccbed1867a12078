/*
 * `pocketllm run --chat`: a chat with the model, its prompts rendered by the
 * model's own chat template.
 *
 * Each turn renders the whole conversation again (as llama.cpp's chat does),
 * tokenizes it with special-token parsing, and reuses the KV cache for the
 * longest prefix it shares with the tokens already evaluated, so only the new
 * tail (the end of the last reply, the new user message, the generation
 * prompt) is prefilled. The conversation lives in slot 0 of the model's KV
 * cache, addressed through pl_model_forward with explicit positions (a
 * pl_session cannot be rewound to a prefix).
 *
 * Qwen3 templates get enable_thinking=false unless --think is given.
 */
#include "chat_repl.h"
#include "cli.h"
#include "chat/chat_template.h"
#include "gguf/gguf.h"
#include <errno.h>
#include <jansson.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

typedef struct chat {
    pl_model *m;
    const pl_chat_opts *o;
    pl_chat_template *tpl;  /* NULL: built-in ChatML */
    char bos[128], eos[128];
    bool add_bos;           /* the file asks for a BOS token */
    int32_t bos_id;
} chat;

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + ts.tv_nsec / 1e9;
}

static void token_text(const pl_model *m, const pl_gguf *g, const char *key, char *out, size_t cap) {
    int64_t id;
    size_t len = 0;
    out[0] = 0;
    if (!g || pl_gguf_get_i64(g, key, &id) != PL_OK || id < 0 || id >= pl_model_n_vocab(m)) return;
    if (pl_token_to_piece(m, (int32_t)id, true, out, cap - 1, &len) == PL_OK && len < cap) out[len] = 0;
    else out[0] = 0;
}

static int chat_init(chat *c, const pl_model *m, const pl_chat_opts *o) {
    memset(c, 0, sizeof *c);
    c->m = (pl_model *)m;
    c->o = o;
    pl_gguf *g = NULL;
    if (!o->model_path || pl_gguf_open(o->model_path, &g) != PL_OK) g = NULL;
    token_text(m, g, "tokenizer.ggml.bos_token_id", c->bos, sizeof c->bos);
    token_text(m, g, "tokenizer.ggml.eos_token_id", c->eos, sizeof c->eos);
    /* The template as chat-template --model and serve read it: all of its
     * bytes, any length (a template with a NUL byte is refused). */
    pl_status tst = g ? pl_chat_template_from_gguf(g, NULL, NULL, &c->tpl) : PL_ERR_NOT_FOUND;
    pl_gguf_close(g);
    /* Whether the tokenizer adds a BOS: tokenizing "" as the file says. */
    int32_t *ids = NULL;
    size_t n = 0;
    if (pl_tokenize(m, "", 0, false, NULL, &ids, &n) == PL_OK && n == 1) {
        c->add_bos = true;
        c->bos_id = ids[0];
    }
    pl_free(ids);
    if (tst == PL_ERR_NOT_FOUND) {
        fprintf(stderr, "note: the model has no chat template; using ChatML\n");
    } else if (tst != PL_OK) {
        fprintf(stderr, "warning: cannot use the model's chat template (%s); using ChatML\n", pl_last_error());
        c->tpl = NULL;
    }
    return 0;
}

static void chat_free(chat *c) { pl_chat_template_free(c->tpl); }

/* ChatML, for files without a usable template. */
static char *render_chatml(json_t *messages) {
    size_t cap = 256, n = 0, i;
    char *s = malloc(cap);
    json_t *msg;
    if (!s) return NULL;
    s[0] = 0;
    json_array_foreach(messages, i, msg) {
        const char *role = json_string_value(json_object_get(msg, "role"));
        const char *content = json_string_value(json_object_get(msg, "content"));
        size_t need = n + strlen(role ? role : "") + strlen(content ? content : "") + 64;
        if (need > cap) {
            while (cap < need) cap *= 2;
            char *q = realloc(s, cap);
            if (!q) { free(s); return NULL; }
            s = q;
        }
        n += (size_t)sprintf(s + n, "<|im_start|>%s\n%s<|im_end|>\n", role ? role : "user", content ? content : "");
    }
    if (n + 32 > cap) {
        char *q = realloc(s, n + 32);
        if (!q) { free(s); return NULL; }
        s = q;
    }
    strcpy(s + n, "<|im_start|>assistant\n");
    return s;
}

/* The prompt for messages, with the generation prompt; BOS text the
 * tokenizer will add itself is stripped. */
static char *render(const chat *c, json_t *messages) {
    char *out = NULL;
    if (!c->tpl) {
        out = render_chatml(messages);
        if (!out) pl_cli_error("out of memory");
        return out;
    }
    json_t *ctx = json_object();
    json_object_set(ctx, "messages", messages);
    json_object_set_new(ctx, "add_generation_prompt", json_true());
    json_object_set_new(ctx, "bos_token", json_string(c->bos));
    json_object_set_new(ctx, "eos_token", json_string(c->eos));
    json_object_set_new(ctx, "enable_thinking", json_boolean(c->o->think));
    size_t n = 0;
    pl_status st = pl_chat_template_render(c->tpl, ctx, NULL, &out, &n);
    json_decref(ctx);
    if (st != PL_OK) {
        pl_cli_error("the chat template rejected the conversation: %s", pl_last_error());
        return NULL;
    }
    size_t bl = strlen(c->bos);
    if (c->add_bos && bl && n >= bl && !memcmp(out, c->bos, bl)) memmove(out, out + bl, n - bl + 1);
    return out;
}

static json_t *message(const char *role, const char *content) {
    json_t *m = json_object();
    json_object_set_new(m, "role", json_string(role));
    json_object_set_new(m, "content", json_string(content));
    return m;
}

char *pl_chat_render_turn(const pl_model *model, const pl_chat_opts *o, const char *user) {
    chat c;
    chat_init(&c, model, o);
    json_t *msgs = json_array();
    if (o->system) json_array_append_new(msgs, message("system", o->system));
    json_array_append_new(msgs, message("user", user));
    char *out = render(&c, msgs);
    json_decref(msgs);
    chat_free(&c);
    return out;
}

/* ---- the interactive loop ---------------------------------------------------*/

static volatile sig_atomic_t g_interrupted;
static void on_sigint(int sig) { (void)sig; g_interrupted = 1; }

typedef struct tokbuf { int32_t *p; size_t n, cap; } tokbuf;

static int tb_push(tokbuf *b, int32_t t) {
    if (b->n == b->cap) {
        size_t cap = b->cap ? b->cap * 2 : 1024;
        int32_t *q = realloc(b->p, cap * sizeof *q);
        if (!q) return -1;
        b->p = q;
        b->cap = cap;
    }
    b->p[b->n++] = t;
    return 0;
}

/* Evaluates ids at positions pos0.. of slot 0; logits after the last one. */
static pl_status eval_at(pl_model *m, const int32_t *ids, size_t n, int32_t pos0, float *logits) {
    int32_t *pos = malloc(n * sizeof *pos), *seq = calloc(n, sizeof *seq);
    bool *want = calloc(n, sizeof *want);
    pl_status st = PL_ERR_NO_MEMORY;
    if (pos && seq && want) {
        for (size_t i = 0; i < n; i++) pos[i] = pos0 + (int32_t)i;
        want[n - 1] = true;
        pl_batch b = {(int32_t)n, ids, pos, seq, want};
        st = pl_model_forward(m, &b, logits);
    }
    free(pos);
    free(seq);
    free(want);
    return st;
}

/* Tokenizes a rendered prompt: special tokens parsed, BOS as the file says. */
static int tokenize_prompt(const chat *c, const char *text, tokbuf *out) {
    static const bool no_bos = false;
    int32_t *ids = NULL;
    size_t n = 0;
    out->n = 0;
    if (pl_tokenize(c->m, text, strlen(text), true, &no_bos, &ids, &n) != PL_OK) return pl_cli_error("%s", pl_last_error());
    int rc = 0;
    if (c->add_bos && (n == 0 || ids[0] != c->bos_id)) rc |= tb_push(out, c->bos_id);
    for (size_t i = 0; i < n && !rc; i++) rc |= tb_push(out, ids[i]);
    pl_free(ids);
    return rc ? pl_cli_error("out of memory") : 0;
}

/* Reads one message: a line, continued while it ends with a backslash.
 * Returns NULL at end of input or on Ctrl-C. */
static char *read_message(bool tty) {
    char *msg = NULL, *line = NULL;
    size_t cap = 0, len = 0;
    if (tty) { fputs("> ", stdout); fflush(stdout); }
    for (;;) {
        errno = 0;
        ssize_t got = getline(&line, &cap, stdin);
        if (got < 0) { free(line); free(msg); return NULL; }
        while (got && (line[got - 1] == '\n' || line[got - 1] == '\r')) line[--got] = 0;
        bool more = got && line[got - 1] == '\\';
        if (more) line[--got] = 0;
        char *q = realloc(msg, len + (size_t)got + 2);
        if (!q) { free(line); free(msg); return NULL; }
        msg = q;
        memcpy(msg + len, line, (size_t)got);
        len += (size_t)got;
        if (more) msg[len++] = '\n';
        msg[len] = 0;
        if (!more) break;
        if (tty) { fputs(". ", stdout); fflush(stdout); }
    }
    free(line);
    return msg;
}

static const char *repl_help =
    "commands: /exit (or /quit, Ctrl-D) leaves, /clear forgets the conversation, /help shows this.\n"
    "End a line with \\ to continue the message on the next line. Ctrl-C stops a reply.\n";

int pl_chat_repl(pl_model *m, const pl_chat_opts *o) {
    chat c;
    chat_init(&c, m, o);
    const bool tty = isatty(0);
    const int32_t n_ctx = pl_model_n_ctx(m), n_vocab = pl_model_n_vocab(m);
    /* Room kept for a reply when old turns have to be dropped. */
    const int32_t reserve = (int32_t)(o->max_tokens > 0 && o->max_tokens < n_ctx / 2 ? o->max_tokens : n_ctx / 4);
    json_t *msgs = json_array();
    tokbuf cache = {0}, prompt = {0}, gen = {0};
    float *logits = malloc((size_t)n_vocab * sizeof *logits);
    pl_sampler *smp = NULL;
    int rc = 0;
    if (!msgs || !logits || pl_sampler_create(&o->sampler, n_vocab, &smp) != PL_OK) {
        rc = pl_cli_error("%s", *pl_last_error() ? pl_last_error() : "out of memory");
        goto out;
    }
    if (o->system) json_array_append_new(msgs, message("system", o->system));
    size_t n_fixed = json_array_size(msgs);

    struct sigaction sa, old_sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_sigint;   /* no SA_RESTART: Ctrl-C at the prompt ends getline */
    sigemptyset(&sa.sa_mask);
    sigaction(SIGINT, &sa, &old_sa);

    fprintf(stderr, "chat with %s (%s, context %d tokens%s). /help for commands, /exit to leave.\n",
            pl_model_meta_str(m, "general.name") ? pl_model_meta_str(m, "general.name") : "the model", pl_model_arch(m),
            n_ctx, o->think ? ", thinking on" : "");
    for (;;) {
        g_interrupted = 0;
        char *line = read_message(tty);
        if (!line) { if (tty) fputc('\n', stdout); break; }
        if (!strcmp(line, "/exit") || !strcmp(line, "/quit")) { free(line); break; }
        if (!strcmp(line, "/clear")) {
            free(line);
            while (json_array_size(msgs) > n_fixed) json_array_remove(msgs, json_array_size(msgs) - 1);
            cache.n = 0;
            fprintf(stderr, "(conversation cleared)\n");
            continue;
        }
        if (!strcmp(line, "/help")) { free(line); fputs(repl_help, stderr); continue; }
        if (line[0] == '/' && line[1] && !strchr(line, ' ') && !strchr(line, '\n')) {
            fprintf(stderr, "unknown command %s\n%s", line, repl_help);
            free(line);
            continue;
        }
        if (!line[strspn(line, " \t\n")]) { free(line); continue; }
        json_array_append_new(msgs, message("user", line));
        free(line);

        /* Render; drop the oldest turns while the prompt leaves no room. */
        char *text = NULL;
        for (;;) {
            free(text);
            text = render(&c, msgs);
            if (!text || tokenize_prompt(&c, text, &prompt)) break;
            if ((int64_t)prompt.n + reserve <= n_ctx) break;
            if (json_array_size(msgs) <= n_fixed + 1) {
                if ((int64_t)prompt.n < n_ctx) break;   /* no room for a long reply, but it fits */
                pl_cli_error("the message is too long for the context (%zu tokens, context %d)", prompt.n, n_ctx);
                free(text);
                text = NULL;
                break;
            }
            json_array_remove(msgs, n_fixed);   /* the oldest user message and its reply */
            if (json_array_size(msgs) > n_fixed + 1) json_array_remove(msgs, n_fixed);
            fprintf(stderr, "(context full: the oldest turn was dropped)\n");
        }
        if (!text) {
            json_array_remove(msgs, json_array_size(msgs) - 1);
            continue;
        }
        free(text);

        /* Reuse the cached prefix; always recompute at least the last token. */
        size_t keep = 0;
        while (keep < cache.n && keep < prompt.n && cache.p[keep] == prompt.p[keep]) keep++;
        if (keep == prompt.n) keep--;
        double t0 = now_s();
        if (eval_at(m, prompt.p + keep, prompt.n - keep, (int32_t)keep, logits) != PL_OK) {
            pl_cli_error("%s", pl_last_error());
            cache.n = 0;
            json_array_remove(msgs, json_array_size(msgs) - 1);
            continue;
        }
        double t_prompt = now_s() - t0;
        cache.n = 0;
        for (size_t i = 0; i < prompt.n; i++) tb_push(&cache, prompt.p[i]);

        /* Generate, streaming whole UTF-8 characters. */
        char *reply = NULL;
        size_t rlen = 0, rcap = 0, flushed = 0;
        const char *why = "";
        gen.n = 0;
        double t1 = now_s();
        for (;;) {
            if (g_interrupted) { why = " (interrupted)"; break; }
            int32_t tok = pl_sampler_sample(smp, logits);
            /* -1: NaN/Inf logits (broken weights); never feed it on as a token */
            if (tok < 0) {
                pl_cli_error("%s", pl_last_error());
                why = " (error)";
                break;
            }
            if (pl_token_is_eog(m, tok)) break;
            tb_push(&gen, tok);
            char piece[256];
            size_t len = 0;
            if (pl_token_to_piece(m, tok, false, piece, sizeof piece, &len) == PL_OK && len) {
                if (rlen + len + 1 > rcap) {
                    rcap = (rlen + len + 1) * 2;
                    char *q = realloc(reply, rcap);
                    if (!q) { why = " (out of memory)"; break; }
                    reply = q;
                }
                memcpy(reply + rlen, piece, len);
                rlen += len;
                reply[rlen] = 0;
                size_t ok = rlen;   /* hold back an incomplete UTF-8 sequence */
                for (size_t back = 0; back < 4 && back < rlen; back++) {
                    unsigned char ch = (unsigned char)reply[rlen - 1 - back];
                    if ((ch & 0xC0) == 0x80) continue;
                    size_t need = ch >= 0xF0 ? 4 : ch >= 0xE0 ? 3 : ch >= 0xC0 ? 2 : 1;
                    if (need > back + 1) ok = rlen - 1 - back;
                    break;
                }
                if (ok > flushed) { fwrite(reply + flushed, 1, ok - flushed, stdout); fflush(stdout); flushed = ok; }
            }
            if (o->max_tokens > 0 && (long long)gen.n >= o->max_tokens) { why = " (max tokens)"; break; }
            if ((int32_t)cache.n >= n_ctx) { why = " (context full)"; break; }
            if (eval_at(m, &tok, 1, (int32_t)cache.n, logits) != PL_OK) {
                pl_cli_error("%s", pl_last_error());
                why = " (error)";
                break;
            }
            tb_push(&cache, tok);
        }
        double t_gen = now_s() - t1;
        if (rlen > flushed) fwrite(reply + flushed, 1, rlen - flushed, stdout);
        fputc('\n', stdout);
        fflush(stdout);
        fprintf(stderr, "[%zu tokens, %.1f tok/s | prompt %zu tokens (%zu new), %.1f tok/s]%s\n", gen.n,
                t_gen > 0 && gen.n ? gen.n / t_gen : 0.0, prompt.n, prompt.n - keep,
                t_prompt > 0 ? (prompt.n - keep) / t_prompt : 0.0, why);
        json_array_append_new(msgs, message("assistant", reply ? reply : ""));
        free(reply);
    }
    sigaction(SIGINT, &old_sa, NULL);
out:
    json_decref(msgs);
    free(cache.p);
    free(prompt.p);
    free(gen.p);
    free(logits);
    pl_sampler_free(smp);
    chat_free(&c);
    return rc;
}
