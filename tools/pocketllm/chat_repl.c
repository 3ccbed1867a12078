/*
 * `pocketllm run --chat`: a chat with the model, its prompts built by
 * chat_prompt.c (the model's own chat template; serve builds its prompts
 * there too).
 *
 * Each turn renders the whole conversation again (as llama.cpp's chat does),
 * tokenizes it, and reuses the KV cache for the longest prefix it shares
 * with the tokens already evaluated, so only the new tail (the end of the
 * last reply, the new user message, the generation prompt) is prefilled. The
 * conversation lives in slot 0 of the model's KV cache, addressed through
 * pl_model_forward with explicit positions (a pl_session cannot be rewound
 * to a prefix).
 *
 * Templates get enable_thinking=false unless --think is given (the built-in
 * ChatML fallback gets no enable_thinking at all: plain ChatML). With
 * --tools the tools reach the template, the calls in a reply are parsed with
 * serve's parser (server_tools.c) and printed, and /tool answers them.
 */
#include "chat_repl.h"
#include "chat_prompt.h"
#include "cli.h"
#include "cli_buf.h"
#include "server_tools.h"
#include <errno.h>
#include <jansson.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

struct pl_chat {
    pl_model *m;
    const pl_chat_opts *o;
    pl_chat_prompt *prompt;
    json_t *kwargs;               /* template variables: tools, enable_thinking */
    char tool_names[PL_SRV_TOOL_NAMES];   /* NUL-separated (server_tools.h); "" = no tools */
    pl_grammar *grammar;          /* NULL = unconstrained */
    unsigned turns;               /* replies so far (call ids, seeds) */
};

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + ts.tv_nsec / 1e9;
}

/* --tools: an OpenAI tools array, [{"type": "function", "function": {"name": ...}}]. */
static int load_tools(pl_chat *c, const char *path) {
    json_error_t jerr;
    json_t *tools = json_load_file(path, JSON_REJECT_DUPLICATES, &jerr);
    if (!tools) return pl_cli_error("--tools %s:%d:%d: %s", path, jerr.line, jerr.column, jerr.text);
    size_t used = 0, i;
    json_t *t;
    int rc = 0;
    if (!json_is_array(tools) || !json_array_size(tools)) rc = pl_cli_error("--tools %s: want a non-empty JSON array of tools", path);
    json_array_foreach(tools, i, t) {
        if (rc) break;
        json_t *type = json_object_get(t, "type"), *fn = json_object_get(t, "function");
        json_t *name = json_object_get(fn, "name");
        if (!json_is_string(type) || strcmp(json_string_value(type), "function") || !json_is_object(fn))
            rc = pl_cli_error("--tools %s: tools[%zu] must be {\"type\": \"function\", \"function\": {...}}", path, i);
        else if (!json_is_string(name) || !json_string_length(name) || strlen(json_string_value(name)) != json_string_length(name))
            rc = pl_cli_error("--tools %s: tools[%zu].function.name must be a non-empty string", path, i);
        else if (used + json_string_length(name) + 2 > sizeof c->tool_names)
            rc = pl_cli_error("--tools %s: too many tools (names over %d bytes)", path, PL_SRV_TOOL_NAMES);
        else {
            memcpy(c->tool_names + used, json_string_value(name), json_string_length(name) + 1);
            used += json_string_length(name) + 1;
            c->tool_names[used] = 0;
        }
    }
    if (!rc) json_object_set(c->kwargs, "tools", tools);
    json_decref(tools);
    return rc;
}

int pl_chat_open(pl_model *m, const pl_chat_opts *o, pl_chat **out) {
    *out = NULL;
    pl_chat *c = calloc(1, sizeof *c);
    if (!c || !(c->kwargs = json_object())) { free(c); return pl_cli_error("out of memory"); }
    c->m = m;
    c->o = o;
    int rc = 0;
    if (pl_chat_prompt_create(m, o->model_path, &c->prompt) != PL_OK) rc = pl_cli_error("%s", pl_chat_prompt_error());
    else if (pl_chat_prompt_notice(c->prompt)) fprintf(stderr, "note: %s\n", pl_chat_prompt_notice(c->prompt));
    /* Templates get enable_thinking (Qwen3's think by default); the
     * built-in fallback renders plain ChatML. */
    if (!rc && pl_chat_prompt_template(c->prompt)) json_object_set_new(c->kwargs, "enable_thinking", json_boolean(o->think));
    if (!rc && o->tools_path) rc = load_tools(c, o->tools_path);
    if (!rc && o->grammar_text) {
        pl_status st = o->grammar_is_schema ? pl_grammar_from_json_schema(m, o->grammar_text, o->grammar_len, &c->grammar)
                                            : pl_grammar_from_gbnf(m, o->grammar_text, o->grammar_len, &c->grammar);
        if (st != PL_OK) rc = pl_cli_error("%s: %s", o->grammar_name ? o->grammar_name : "grammar", pl_last_error());
    }
    if (rc) { pl_chat_close(c); return rc; }
    *out = c;
    return 0;
}

void pl_chat_close(pl_chat *c) {
    if (!c) return;
    pl_chat_prompt_free(c->prompt);
    json_decref(c->kwargs);
    pl_grammar_free(c->grammar);
    free(c);
}

/* The prompt tokens for the conversation so far, with the generation prompt. */
static int conversation_tokens(pl_chat *c, json_t *msgs, int32_t **ids, size_t *n) {
    pl_chat_prompt_tokens t;
    const char *param = NULL;
    pl_status st = pl_chat_prompt_tokenize(c->prompt, msgs, c->kwargs, NULL, &t, &param);
    if (st != PL_OK) return pl_cli_error("%s", pl_chat_prompt_error());
    if (t.plain_text) fprintf(stderr, "note: the message contains special-token text; it is read as plain text\n");
    *ids = t.ids;
    *n = t.n;
    return 0;
}

static json_t *message(const char *role, const char *content) {
    json_t *m = json_object();
    json_object_set_new(m, "role", json_string(role));
    json_object_set_new(m, "content", json_string(content));
    return m;
}

/* A JSON string of generated bytes, which may not be valid UTF-8 (a reply
 * cut off mid-character; jansson refuses those): invalid bytes become U+FFFD. */
static json_t *text_value(const char *s, size_t n) {
    pl_srv_buf b = {0};
    json_t *v = pl_srv_utf8_sanitize(&b, s ? s : "", s ? n : 0) ? NULL : json_stringn(b.p ? b.p : "", b.n);
    pl_srv_buf_free(&b);
    return v ? v : json_string("");
}

int pl_chat_turn_tokens(pl_chat *c, const char *user, int32_t **ids, size_t *n_ids) {
    json_t *msgs = json_array();
    if (c->o->system) json_array_append_new(msgs, message("system", c->o->system));
    json_array_append_new(msgs, message("user", user));
    int rc = conversation_tokens(c, msgs, ids, n_ids);
    json_decref(msgs);
    return rc;
}

/* The calls in a reply as OpenAI tool calls ({id, type, function: {name,
 * arguments (a JSON string)}}), its other text in *content; NULL without
 * tools or when out of memory. */
static json_t *tool_calls(pl_chat *c, const char *text, size_t n, pl_srv_buf *content) {
    if (!c->tool_names[0]) return NULL;
    json_t *found = pl_srv_tools_scan(text ? text : "", n, c->tool_names, true, content);
    json_t *out = found ? json_array() : NULL;
    char req[32];
    snprintf(req, sizeof req, "chat-%u", c->turns);
    size_t k;
    json_t *f;
    json_array_foreach(found, k, f) {
        char id[32];
        pl_srv_tools_call_id(req, 0, k, id);
        json_array_append_new(out, json_pack("{s:s, s:s, s:{s:O, s:O}}", "id", id, "type", "function", "function",
                                             "name", json_object_get(f, "name"), "arguments",
                                             json_object_get(f, "arguments")));
    }
    json_decref(found);
    return out;
}

void pl_chat_print_tool_calls(pl_chat *c, const char *text, size_t n, bool json) {
    pl_srv_buf content = {0};
    json_t *calls = tool_calls(c, text, n, &content);
    pl_srv_buf_free(&content);
    if (!calls) return;
    if (json) {
        char *s = json_dumps(calls, JSON_COMPACT);
        printf(", \"tool_calls\": %s", s ? s : "[]");
        free(s);
    } else {
        size_t k;
        json_t *call;
        json_array_foreach(calls, k, call) {
            char *s = json_dumps(call, JSON_COMPACT);
            if (s) printf("tool_call: %s\n", s);
            free(s);
        }
    }
    fflush(stdout);
    json_decref(calls);
}

/* A fresh sampler for one reply: run's options, the prompt as the repeat
 * window's start, the grammar from its start. Reply k draws with seed + k
 * (the first reply samples exactly as run --prompt does). */
static pl_sampler *reply_sampler(pl_chat *c, const int32_t *prompt, size_t n) {
    const pl_chat_opts *o = c->o;
    pl_sampler_params sp = o->sampler;
    sp.seed += c->turns;
    pl_sampler *smp = NULL;
    if (pl_sampler_create(&sp, pl_model_n_vocab(c->m), &smp) != PL_OK ||
        (o->penalties &&
         pl_sampler_set_penalties(smp, o->repeat_penalty, o->repeat_last_n, o->frequency_penalty, o->presence_penalty)) ||
        (o->n_bias && pl_sampler_set_logit_bias(smp, o->bias_ids, o->bias, o->n_bias)) ||
        (o->penalties && pl_sampler_add_history(smp, prompt, n)) || (c->grammar && pl_grammar_reset(c->grammar))) {
        pl_cli_error("%s", *pl_last_error() ? pl_last_error() : "out of memory");
        pl_sampler_free(smp);
        return NULL;
    }
    pl_sampler_set_grammar(smp, c->grammar);
    return smp;
}

/* ---- the interactive loop ---------------------------------------------------*/

static volatile sig_atomic_t g_interrupted;
static void on_sigint(int sig) { (void)sig; g_interrupted = 1; }

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
    "With --tools: /tool TEXT answers the next tool call of the last reply with TEXT.\n"
    "End a line with \\ to continue the message on the next line. Ctrl-C stops a reply.\n";

/* Drops the oldest turn (a user message and everything up to the next user
 * message) after the n_fixed leading messages; the last message stays. */
static void drop_oldest_turn(json_t *msgs, size_t n_fixed) {
    json_array_remove(msgs, n_fixed);
    while (json_array_size(msgs) > n_fixed + 1) {
        const char *role = json_string_value(json_object_get(json_array_get(msgs, n_fixed), "role"));
        if (role && !strcmp(role, "user")) break;
        json_array_remove(msgs, n_fixed);
    }
}

/* /tool TEXT: a tool message answering the next unanswered call in pending
 * (popped); NULL (message printed) when there is none. */
static json_t *tool_result(json_t *pending, const char *text) {
    json_t *call = json_array_get(pending, 0);
    if (!call) {
        fprintf(stderr, "no tool call to answer (/tool answers the calls of the last reply)\n");
        return NULL;
    }
    json_t *m = message("tool", text);
    json_object_set(m, "tool_call_id", json_object_get(call, "id"));
    json_object_set(m, "name", json_object_get(json_object_get(call, "function"), "name"));
    json_array_remove(pending, 0);
    return m;
}

int pl_chat_repl(pl_model *m, const pl_chat_opts *o) {
    pl_chat *c = NULL;
    if (pl_chat_open(m, o, &c)) return 1;
    const bool tty = isatty(0);
    const int32_t n_ctx = pl_model_n_ctx(m), n_vocab = pl_model_n_vocab(m);
    /* Room kept for a reply when old turns have to be dropped. */
    const int32_t reserve = (int32_t)(o->max_tokens > 0 && o->max_tokens < n_ctx / 2 ? o->max_tokens : n_ctx / 4);
    json_t *msgs = json_array(), *pending = json_array();   /* pending: tool calls not answered yet */
    pl_cli_tokens cache = {0}, gen = {0};
    int32_t *prompt = NULL;
    size_t n_prompt = 0;
    float *logits = malloc((size_t)n_vocab * sizeof *logits);
    int rc = 0;
    if (!msgs || !pending || !logits) {
        rc = pl_cli_error("out of memory");
        goto out;
    }
    if (o->system) json_array_append_new(msgs, message("system", o->system));
    size_t n_fixed = json_array_size(msgs);

    struct sigaction sa, old_sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_sigint;   /* no SA_RESTART: Ctrl-C at the prompt ends getline */
    sigemptyset(&sa.sa_mask);
    sigaction(SIGINT, &sa, &old_sa);

    fprintf(stderr, "chat with %s (%s, context %d tokens%s%s%s). /help for commands, /exit to leave.\n",
            pl_model_meta_str(m, "general.name") ? pl_model_meta_str(m, "general.name") : "the model", pl_model_arch(m),
            n_ctx, o->think ? ", thinking on" : "", c->tool_names[0] ? ", tools" : "", c->grammar ? ", grammar" : "");
    for (;;) {
        g_interrupted = 0;
        char *line = read_message(tty);
        if (!line) { if (tty) fputc('\n', stdout); break; }
        if (!strcmp(line, "/exit") || !strcmp(line, "/quit")) { free(line); break; }
        if (!strcmp(line, "/clear")) {
            free(line);
            while (json_array_size(msgs) > n_fixed) json_array_remove(msgs, json_array_size(msgs) - 1);
            json_array_clear(pending);
            cache.n = 0;
            fprintf(stderr, "(conversation cleared)\n");
            continue;
        }
        if (!strcmp(line, "/help")) { free(line); fputs(repl_help, stderr); continue; }
        json_t *msg = NULL, *answered = NULL;
        if (!strncmp(line, "/tool", 5) && (!line[5] || line[5] == ' ' || line[5] == '\n')) {
            answered = json_incref(json_array_get(pending, 0));
            msg = tool_result(pending, line + 5 + (line[5] != 0));
            free(line);
            if (!msg) continue;
        } else if (line[0] == '/' && line[1] && !strchr(line, ' ') && !strchr(line, '\n')) {
            fprintf(stderr, "unknown command %s\n%s", line, repl_help);
            free(line);
            continue;
        } else if (!line[strspn(line, " \t\n")]) {
            free(line);
            continue;
        } else {
            msg = message("user", line);
            free(line);
            json_array_clear(pending);   /* a new question: earlier calls stay unanswered */
        }
        json_array_append_new(msgs, msg);
        /* Calls still unanswered: wait for their /tool results first. */
        if (answered && json_array_size(pending)) {
            fprintf(stderr, "(%zu more tool call%s to answer)\n", json_array_size(pending),
                    json_array_size(pending) > 1 ? "s" : "");
            json_decref(answered);
            continue;
        }

        /* Tokenize; drop the oldest turns while the prompt leaves no room. */
        bool ok = false;
        for (;;) {
            free(prompt);
            prompt = NULL;
            if (conversation_tokens(c, msgs, &prompt, &n_prompt)) break;
            if ((int64_t)n_prompt + reserve <= n_ctx) { ok = true; break; }
            if (json_array_size(msgs) <= n_fixed + 1) {
                if ((int64_t)n_prompt < n_ctx) { ok = true; break; }   /* no room for a long reply, but it fits */
                pl_cli_error("the message is too long for the context (%zu tokens, context %d)", n_prompt, n_ctx);
                break;
            }
            drop_oldest_turn(msgs, n_fixed);
            fprintf(stderr, "(context full: the oldest turn was dropped)\n");
        }
        if (!ok) {
            json_array_remove(msgs, json_array_size(msgs) - 1);
            if (answered) json_array_insert(pending, 0, answered);
            json_decref(answered);
            continue;
        }
        json_decref(answered);

        /* Reuse the cached prefix; always recompute at least the last token. */
        size_t keep = 0;
        while (keep < cache.n && keep < n_prompt && cache.p[keep] == prompt[keep]) keep++;
        if (keep == n_prompt) keep--;
        double t0 = now_s();
        if (eval_at(m, prompt + keep, n_prompt - keep, (int32_t)keep, logits) != PL_OK) {
            pl_cli_error("%s", pl_last_error());
            cache.n = 0;
            json_array_remove(msgs, json_array_size(msgs) - 1);
            continue;
        }
        double t_prompt = now_s() - t0;
        cache.n = 0;
        pl_cli_tokens_add(&cache, prompt, n_prompt);
        pl_sampler *smp = reply_sampler(c, prompt, n_prompt);
        if (!smp) { rc = 1; break; }

        /* Generate, streaming whole UTF-8 characters. */
        char *reply = NULL;
        size_t rlen = 0, rcap = 0, flushed = 0;
        const char *why = "";
        gen.n = 0;
        double t1 = now_s();
        for (;;) {
            if (g_interrupted) { why = " (interrupted)"; break; }
            int32_t tok = pl_sampler_sample(smp, logits);
            /* -1: NaN/Inf logits (broken weights) or nothing the grammar
             * allows; never feed it on as a token */
            if (tok < 0) {
                pl_cli_error("%s", pl_last_error());
                why = " (error)";
                break;
            }
            if (pl_token_is_eog(m, tok)) break;
            pl_cli_tokens_add(&gen, &tok, 1);
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
                size_t upto = rlen;   /* hold back an incomplete UTF-8 sequence */
                for (size_t back = 0; back < 4 && back < rlen; back++) {
                    unsigned char ch = (unsigned char)reply[rlen - 1 - back];
                    if ((ch & 0xC0) == 0x80) continue;
                    size_t need = ch >= 0xF0 ? 4 : ch >= 0xE0 ? 3 : ch >= 0xC0 ? 2 : 1;
                    if (need > back + 1) upto = rlen - 1 - back;
                    break;
                }
                if (upto > flushed) { fwrite(reply + flushed, 1, upto - flushed, stdout); fflush(stdout); flushed = upto; }
            }
            if (o->max_tokens > 0 && (long long)gen.n >= o->max_tokens) { why = " (max tokens)"; break; }
            if ((int32_t)cache.n >= n_ctx) { why = " (context full)"; break; }
            if (eval_at(m, &tok, 1, (int32_t)cache.n, logits) != PL_OK) {
                pl_cli_error("%s", pl_last_error());
                why = " (error)";
                break;
            }
            pl_cli_tokens_add(&cache, &tok, 1);
        }
        pl_sampler_free(smp);
        double t_gen = now_s() - t1;
        if (rlen > flushed) fwrite(reply + flushed, 1, rlen - flushed, stdout);
        fputc('\n', stdout);
        fflush(stdout);
        fprintf(stderr, "[%zu tokens, %.1f tok/s | prompt %zu tokens (%zu new), %.1f tok/s]%s\n", gen.n,
                t_gen > 0 && gen.n ? gen.n / t_gen : 0.0, n_prompt, n_prompt - keep,
                t_prompt > 0 ? (n_prompt - keep) / t_prompt : 0.0, why);
        /* With tools: the calls printed, kept in the history as structured
         * tool_calls (arguments as objects, as serve passes them), and
         * waiting for /tool results. */
        pl_srv_buf content = {0};
        json_t *calls = tool_calls(c, reply, rlen, &content);
        json_t *am = json_pack("{s:s, s:o}", "role", "assistant", "content", text_value(reply, rlen));
        if (json_array_size(calls)) {
            json_t *hist = json_array();
            size_t k;
            json_t *call;
            json_array_foreach(calls, k, call) {
                char *s = json_dumps(call, JSON_COMPACT);
                if (s) printf("tool_call: %s\n", s);
                free(s);
                json_t *fn = json_object_get(call, "function"), *args = json_object_get(fn, "arguments");
                json_t *obj = json_loads(json_string_value(args), 0, NULL);
                json_array_append_new(hist, json_pack("{s:O, s:s, s:{s:O, s:o}}", "id", json_object_get(call, "id"),
                                                      "type", "function", "function", "name", json_object_get(fn, "name"),
                                                      "arguments", obj ? obj : json_object()));
                json_array_append(pending, call);
            }
            fflush(stdout);
            json_object_set_new(am, "content", text_value(content.p, content.n));
            json_object_set_new(am, "tool_calls", hist);
        }
        pl_srv_buf_free(&content);
        json_decref(calls);
        json_array_append_new(msgs, am);
        free(reply);
        c->turns++;
    }
    sigaction(SIGINT, &old_sa, NULL);
out:
    json_decref(msgs);
    json_decref(pending);
    free(cache.p);
    free(prompt);
    free(gen.p);
    free(logits);
    pl_chat_close(c);
    return rc;
}
