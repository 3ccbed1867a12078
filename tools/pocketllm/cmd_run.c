/* pocketllm run: prompt in, generated text out (streamed or as JSON). */
#include "cli.h"
#include "pocketllm.h"
#include "cli_fit.h"
#include "chat_repl.h"
#include "cli_buf.h"
#include "server_text.h"
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static double now_ms(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec * 1e3 + ts.tv_nsec / 1e6;
}

static const char *run_usage =
    "usage: pocketllm run --model M --prompt P [options]\n"
    "  --max-tokens N        tokens to generate (default 128)\n"
    "  --temperature T       0 = greedy (default); > 0 samples\n"
    "  --top-k K --top-p P --min-p P   sampling filters (defaults 40, 0.95, 0.05)\n"
    "  --seed S              RNG seed (default 0x5eed)\n"
    "  --threads N           worker threads (default: all cores)\n"
    "  --device ref|cpu|cuda backend (default cpu; 'pocketllm devices' lists them)\n"
    "  --ctx N               context length (default min(model, 4096))\n"
    "  --memory BYTES|auto   device memory budget (e.g. 4G); a model that does not fit is refused\n"
    "  --no-parse-special    treat special-token text in the prompt as plain text\n"
    "  --json                print one JSON object instead of streaming text\n"
    "  --chat                use the model's chat template: with --prompt, answer that one message;\n"
    "                        without, an interactive chat (/exit, /clear; history kept)\n"
    "  --system S            a system message for --chat\n"
    "  --think               let Qwen3 models think (--chat passes enable_thinking=false otherwise)\n"
    "  --tools FILE          with --chat: an OpenAI tools array (JSON); the model's tool calls are printed\n"
    "                        (\"tool_call: {...}\" lines; with --json a \"tool_calls\" array); /tool answers one\n"
    "  --repeat-penalty F    llama.cpp's repetition penalty (1 = off, default)\n"
    "  --repeat-last-n N     tokens of prompt + output it looks at (default 64; 0 off, -1 all)\n"
    "  --frequency-penalty F --presence-penalty F   OpenAI's penalties over generated tokens (-2..2, default 0)\n"
    "  --logit-bias ID=BIAS  add BIAS (-100..100) to token ID's logit; repeatable\n"
    "  --logprobs N          with --json: each generated token's log-probability and the top N (0..20)\n"
    "  --grammar FILE        constrain the output to a GBNF grammar (llama.cpp syntax, start rule 'root')\n"
    "  --json-schema FILE    constrain the output to JSON valid against a JSON schema\n"
    "                        ({\"type\":\"json_object\"}: any JSON object)\n";

/* Penalty, bias and logprobs options (issue 16), parsed apart from the
 * others so that the two lists grow independently. */
typedef struct run_sampling {
    double repeat, freq, presence;
    long long last_n, logprobs;   /* logprobs < 0: not asked for */
    int32_t *bias_id;
    float *bias;
    size_t n_bias;
    bool any;
} run_sampling;

/* Returns true if argv[*i] was one of these options (*bad set on an error). */
static bool sampling_opt(int argc, char **argv, int *i, run_sampling *rs, bool *bad) {
    const char *v;
    if (pl_cli_opt(argc, argv, i, "--repeat-penalty", &v, bad)) {
        if (!*bad && (!pl_cli_parse_float(v, &rs->repeat) || !(rs->repeat > 0)))
            *bad = pl_cli_error("bad --repeat-penalty '%s' (a number > 0)", v) != 0;
    } else if (pl_cli_opt(argc, argv, i, "--repeat-last-n", &v, bad)) {
        if (!*bad && !pl_cli_parse_int(v, -1, 1 << 30, &rs->last_n))
            *bad = pl_cli_error("bad --repeat-last-n '%s' (-1, 0 or more)", v) != 0;
    } else if (pl_cli_opt(argc, argv, i, "--frequency-penalty", &v, bad)) {
        if (!*bad && (!pl_cli_parse_float(v, &rs->freq) || rs->freq < -2 || rs->freq > 2))
            *bad = pl_cli_error("bad --frequency-penalty '%s' (-2..2)", v) != 0;
    } else if (pl_cli_opt(argc, argv, i, "--presence-penalty", &v, bad)) {
        if (!*bad && (!pl_cli_parse_float(v, &rs->presence) || rs->presence < -2 || rs->presence > 2))
            *bad = pl_cli_error("bad --presence-penalty '%s' (-2..2)", v) != 0;
    } else if (pl_cli_opt(argc, argv, i, "--logprobs", &v, bad)) {
        if (!*bad && !pl_cli_parse_int(v, 0, 20, &rs->logprobs)) *bad = pl_cli_error("bad --logprobs '%s' (0..20)", v) != 0;
        return true;
    } else if (pl_cli_opt(argc, argv, i, "--logit-bias", &v, bad)) {
        if (*bad) return true;
        const char *eq = strchr(v, '=');
        char idbuf[32];
        long long id;
        double b;
        size_t k = eq ? (size_t)(eq - v) : 0;
        if (!eq || k == 0 || k >= sizeof idbuf) { *bad = pl_cli_error("bad --logit-bias '%s' (ID=BIAS)", v) != 0; return true; }
        memcpy(idbuf, v, k);
        idbuf[k] = 0;
        if (!pl_cli_parse_int(idbuf, 0, INT32_MAX, &id) || !pl_cli_parse_float(eq + 1, &b) || b < -100 || b > 100) {
            *bad = pl_cli_error("bad --logit-bias '%s' (ID=BIAS, BIAS in -100..100)", v) != 0;
            return true;
        }
        int32_t *ni = realloc(rs->bias_id, (rs->n_bias + 1) * sizeof *ni);
        if (ni) rs->bias_id = ni;
        float *nb = ni ? realloc(rs->bias, (rs->n_bias + 1) * sizeof *nb) : NULL;
        if (!nb) { *bad = pl_cli_error("out of memory") != 0; return true; }
        rs->bias = nb;
        rs->bias_id[rs->n_bias] = (int32_t)id;
        rs->bias[rs->n_bias++] = (float)b;
    } else return false;
    rs->any = true;
    return true;
}

/* Applies them to a new sampler; the prompt is the repeat window's start. */
static int sampling_apply(const run_sampling *rs, pl_sampler *smp, const int32_t *ids, size_t n_ids) {
    if (!rs->any) return 0;
    if (pl_sampler_set_penalties(smp, (float)rs->repeat, (int32_t)rs->last_n, (float)rs->freq, (float)rs->presence) ||
        pl_sampler_set_logit_bias(smp, rs->bias_id, rs->bias, rs->n_bias) || pl_sampler_add_history(smp, ids, n_ids))
        return pl_cli_error("run: %s", pl_last_error());
    return 0;
}

/* One generated token's log-probabilities for --json --logprobs. */
typedef struct run_lp { float lp; pl_token_logprob top[20]; } run_lp;

static void print_piece_json(const pl_model *model, int32_t tok) {
    char piece[256];
    size_t len = 0;
    if (pl_token_to_piece(model, tok, true, piece, sizeof piece, &len) != PL_OK) len = 0;
    pl_cli_json_string(stdout, piece, len);
}

static void print_logprobs_json(const pl_model *model, const int32_t *gen, const run_lp *lps, size_t n, int n_top) {
    printf(", \"logprobs\": [");
    for (size_t i = 0; i < n; i++) {
        printf("%s{\"token\": %d, \"text\": ", i ? ", " : "", gen[i]);
        print_piece_json(model, gen[i]);
        printf(", \"logprob\": %.9g, \"top_logprobs\": [", (double)(lps[i].lp < -9999 ? -9999 : lps[i].lp));
        for (int k = 0; k < n_top; k++) {
            printf("%s{\"token\": %d, \"text\": ", k ? ", " : "", lps[i].top[k].token);
            print_piece_json(model, lps[i].top[k].token);
            printf(", \"logprob\": %.9g}", (double)(lps[i].top[k].logprob < -9999 ? -9999 : lps[i].top[k].logprob));
        }
        printf("]}");
    }
    printf("]");
}

static int cmd_run(int argc, char **argv) {
    const char *model_path = NULL, *prompt = NULL, *device = "cpu", *memory = NULL, *v;
    long long max_tokens = 128, threads = 0, ctx = 0, top_k = 40, seed = 0x5eed;
    double temp = 0, top_p = 0.95, min_p = 0.05;
    bool parse_special = true, json = false, bad = false, chat = false, think = false, max_set = false;
    const char *system_msg = NULL, *grammar_path = NULL, *schema_path = NULL, *tools_path = NULL;
    pl_chat_opts co = {0};
    pl_chat *chat_h = NULL;   /* chat_repl.c: --chat --prompt's prompt tokens and tool calls */
    int32_t *chat_ids = NULL;
    size_t n_chat_ids = 0;
    run_sampling rsm = {.repeat = 1.0, .last_n = 64, .logprobs = -1};
    run_lp *lps = NULL;
    const char *cache_k = NULL, *cache_v = NULL;
    for (int i = 1; i < argc && !bad; i++) {
        const char *a = argv[i];
        if (!strcmp(a, "--help") || !strcmp(a, "-h")) { fputs(run_usage, stdout); fputs(pl_cli_cache_usage, stdout); return 0; }
        else if (sampling_opt(argc, argv, &i, &rsm, &bad)) {}
        else if (pl_cli_cache_opt(argc, argv, &i, &cache_k, &cache_v, &bad)) {}
        else if (!strcmp(a, "--json")) json = true;
        else if (!strcmp(a, "--no-parse-special")) parse_special = false;
        else if (!strcmp(a, "--chat")) chat = true;
        else if (!strcmp(a, "--think")) think = true;
        else if (pl_cli_opt(argc, argv, &i, "--system", &system_msg, &bad)) {}
        else if (pl_cli_opt(argc, argv, &i, "--grammar", &grammar_path, &bad)) {}
        else if (pl_cli_opt(argc, argv, &i, "--tools", &tools_path, &bad)) {}
        else if (pl_cli_opt(argc, argv, &i, "--json-schema", &schema_path, &bad)) {}
        else if (pl_cli_opt(argc, argv, &i, "--model", &model_path, &bad) || pl_cli_opt(argc, argv, &i, "-m", &model_path, &bad)) {}
        else if (pl_cli_opt(argc, argv, &i, "--prompt", &prompt, &bad) || pl_cli_opt(argc, argv, &i, "-p", &prompt, &bad)) {}
        else if (pl_cli_opt(argc, argv, &i, "--device", &device, &bad)) {}
        else if (pl_cli_opt(argc, argv, &i, "--memory", &memory, &bad)) {}
        else if (pl_cli_opt(argc, argv, &i, "--max-tokens", &v, &bad) || pl_cli_opt(argc, argv, &i, "-n", &v, &bad)) {
            if (!bad && !pl_cli_parse_int(v, 0, 1 << 24, &max_tokens)) return pl_cli_error("bad --max-tokens '%s'", v);
            max_set = true;
        } else if (pl_cli_opt(argc, argv, &i, "--threads", &v, &bad) || pl_cli_opt(argc, argv, &i, "-t", &v, &bad)) {
            if (!bad && !pl_cli_parse_int(v, 0, 1024, &threads)) return pl_cli_error("bad --threads '%s'", v);
        } else if (pl_cli_opt(argc, argv, &i, "--ctx", &v, &bad)) {
            if (!bad && !pl_cli_parse_int(v, 1, 1 << 24, &ctx)) return pl_cli_error("bad --ctx '%s'", v);
        } else if (pl_cli_opt(argc, argv, &i, "--top-k", &v, &bad)) {
            if (!bad && !pl_cli_parse_int(v, 0, 1 << 30, &top_k)) return pl_cli_error("bad --top-k '%s'", v);
        } else if (pl_cli_opt(argc, argv, &i, "--seed", &v, &bad)) {
            if (!bad && !pl_cli_parse_int(v, 0, INT64_MAX, &seed)) return pl_cli_error("bad --seed '%s'", v);
        } else if (pl_cli_opt(argc, argv, &i, "--temperature", &v, &bad) || pl_cli_opt(argc, argv, &i, "--temp", &v, &bad)) {
            if (!bad && (!pl_cli_parse_float(v, &temp) || temp < 0)) return pl_cli_error("bad --temperature '%s'", v);
        } else if (pl_cli_opt(argc, argv, &i, "--top-p", &v, &bad)) {
            if (!bad && (!pl_cli_parse_float(v, &top_p) || top_p < 0 || top_p > 1)) return pl_cli_error("bad --top-p '%s'", v);
        } else if (pl_cli_opt(argc, argv, &i, "--min-p", &v, &bad)) {
            if (!bad && (!pl_cli_parse_float(v, &min_p) || min_p < 0 || min_p > 1)) return pl_cli_error("bad --min-p '%s'", v);
        } else return pl_cli_error("run: unknown option '%s' (see 'pocketllm run --help')", a);
    }
    if (bad) { free(rsm.bias_id); free(rsm.bias); return 1; }
    if (!model_path) return pl_cli_error("run: --model is required");
    if (rsm.logprobs >= 0 && !json) return pl_cli_error("run: --logprobs needs --json");
    if (!prompt && !chat) return pl_cli_error("run: --prompt is required (or --chat for an interactive chat)");
    if (!prompt && json) return pl_cli_error("run: --json needs --prompt");
    if (grammar_path && schema_path) return pl_cli_error("run: --grammar and --json-schema exclude each other");
    if (tools_path && !chat) return pl_cli_error("run: --tools needs --chat");
    char *gtext = NULL;
    size_t gtext_len = 0;
    if (grammar_path || schema_path) {
        const char *gpath = grammar_path ? grammar_path : schema_path;
        if (!(gtext = pl_cli_read_file(gpath, &gtext_len)))
            return pl_cli_error("run: cannot read '%s': %s", gpath, strerror(errno));
    }

    if (pl_cli_check_device("run", device)) { free(gtext); return 1; }   /* e.g. --device cuda without a GPU: one line, no load */
    double t0 = now_ms();
    pl_model_params mp = pl_model_default_params();
    mp.device = device;
    mp.n_threads = (int)threads;
    mp.n_ctx = (int)ctx;
    mp.cache_type_k = cache_k;
    mp.cache_type_v = cache_v;
    char budget_msg[512];
    if (memory && pl_cli_parse_budget(memory, device, &mp.memory_budget, budget_msg, sizeof budget_msg) != PL_OK) {
        free(gtext);
        return pl_cli_error("run: bad --memory: %s", budget_msg);
    }
    if (!json) fprintf(stderr, "loading %s ...", model_path);
    pl_model *model = NULL;
    pl_status lst = pl_model_load(model_path, &mp, &model);
    if (lst != PL_OK) {
        if (!json) fputc('\n', stderr);
        pl_cli_error("%s", pl_last_error());
        if (lst == PL_ERR_DOES_NOT_FIT) { /* name the rung that would fit, and how to make it */
            char advice[2048];
            pl_cli_fit_advice(model_path, &mp, advice, sizeof advice);
            if (*advice) fprintf(stderr, "%s\n", advice);
        }
        free(gtext);
        return 1;
    }
    double load_ms = now_ms() - t0;
    if (!json) fprintf(stderr, " done (%.0f ms, %s, device %s)\n", load_ms, pl_model_arch(model), pl_model_device(model));
    if (chat) { /* chat_repl.c: the interactive chat, or one user turn's prompt as the chat builds it */
        co = (pl_chat_opts){.model_path = model_path, .system = system_msg, .think = think,
                            .max_tokens = max_set || prompt ? max_tokens : 0, .sampler = pl_sampler_default_params()};
        co.sampler.temperature = (float)temp, co.sampler.top_k = (int32_t)top_k, co.sampler.top_p = (float)top_p;
        co.sampler.min_p = (float)min_p, co.sampler.seed = (uint64_t)seed;
        co.penalties = rsm.any, co.repeat_penalty = (float)rsm.repeat, co.repeat_last_n = (int32_t)rsm.last_n;
        co.frequency_penalty = (float)rsm.freq, co.presence_penalty = (float)rsm.presence;
        co.bias_ids = rsm.bias_id, co.bias = rsm.bias, co.n_bias = rsm.n_bias, co.tools_path = tools_path;
        if (!prompt) { /* the chat compiles it (with --prompt, run's own path below does) */
            co.grammar_text = gtext, co.grammar_len = gtext_len, co.grammar_is_schema = schema_path != NULL;
            co.grammar_name = grammar_path ? grammar_path : schema_path;
        }
        int crc = !prompt ? pl_chat_repl(model, &co) : pl_chat_open(model, &co, &chat_h);
        if (!crc && prompt) crc = pl_chat_turn_tokens(chat_h, prompt, &chat_ids, &n_chat_ids);
        if (crc || !prompt) {
            pl_chat_close(chat_h);
            free(gtext);
            free(rsm.bias_id);
            free(rsm.bias);
            pl_model_free(model);
            return crc;
        }
    }

    int rc = 0;
    pl_grammar *grammar = NULL;
    int32_t *ids = NULL, *gen = NULL;
    size_t n_ids = 0, n_gen = 0;
    float *logits = NULL;
    pl_session *sess = NULL;
    pl_sampler *smp = NULL;
    pl_srv_buf text = {0};
    const char *finish = "length";
    double prefill_ms = 0, decode_ms = 0;
    const int32_t n_vocab = pl_model_n_vocab(model);

    if (gtext) {
        double tg = now_ms();
        pl_status gst = grammar_path ? pl_grammar_from_gbnf(model, gtext, gtext_len, &grammar)
                                     : pl_grammar_from_json_schema(model, gtext, gtext_len, &grammar);
        if (gst != PL_OK) { rc = pl_cli_error("%s: %s", grammar_path ? grammar_path : schema_path, pl_last_error()); goto done; }
        if (!json) fprintf(stderr, "grammar ready (%.1f ms)\n", now_ms() - tg);
    }

    if (chat_ids) {
        ids = chat_ids, n_ids = n_chat_ids;
        chat_ids = NULL;
    } else if (pl_tokenize(model, prompt, strlen(prompt), parse_special, NULL, &ids, &n_ids) != PL_OK) {
        rc = pl_cli_error("%s", pl_last_error());
        goto done;
    }
    if (n_ids == 0) { rc = pl_cli_error("run: the prompt is empty"); goto done; }
    if (n_ids + (size_t)max_tokens > (size_t)pl_model_n_ctx(model) && n_ids > (size_t)pl_model_n_ctx(model)) {
        rc = pl_cli_error("run: the prompt has %zu tokens but the context holds %d", n_ids, pl_model_n_ctx(model));
        goto done;
    }
    pl_sampler_params sp = pl_sampler_default_params();
    sp.temperature = (float)temp;
    sp.top_k = (int32_t)top_k;
    sp.top_p = (float)top_p;
    sp.min_p = (float)min_p;
    sp.seed = (uint64_t)seed;
    logits = malloc((size_t)n_vocab * sizeof *logits);
    gen = malloc(((size_t)max_tokens + 1) * sizeof *gen);
    if (!logits || !gen || pl_session_create(model, &sess) != PL_OK || pl_sampler_create(&sp, n_vocab, &smp) != PL_OK) {
        rc = pl_cli_error("%s", *pl_last_error() ? pl_last_error() : "out of memory");
        goto done;
    }
    if (sampling_apply(&rsm, smp, ids, n_ids)) { rc = 1; goto done; }
    if (rsm.logprobs >= 0 && !(lps = malloc(((size_t)max_tokens + 1) * sizeof *lps))) {
        rc = pl_cli_error("out of memory");
        goto done;
    }
    pl_sampler_set_grammar(smp, grammar);
    double t1 = now_ms();
    if (pl_session_eval(sess, ids, n_ids, logits) != PL_OK) { rc = pl_cli_error("%s", pl_last_error()); goto done; }
    prefill_ms = now_ms() - t1;

    size_t flushed = 0;
    double t2 = now_ms();
    for (long long step = 0; step < max_tokens; step++) {
        int32_t tok = pl_sampler_sample(smp, logits);
        /* -1: the logits were NaN/Inf (the reason is in pl_last_error) */
        if (tok < 0) { rc = pl_cli_error("%s", pl_last_error()); goto done; }
        /* The raw row's log-softmax: the model's distribution (see pl_logprobs). */
        if (lps && pl_logprobs(logits, n_vocab, tok, &lps[n_gen].lp, lps[n_gen].top, (int32_t)rsm.logprobs) != PL_OK) {
            rc = pl_cli_error("%s", pl_last_error());
            goto done;
        }
        gen[n_gen++] = tok;
        if (pl_token_is_eog(model, tok)) { finish = "stop"; break; }
        char piece[256];
        size_t len = 0;
        if (pl_token_to_piece(model, tok, false, piece, sizeof piece, &len) == PL_OK) pl_srv_buf_add(&text, piece, len);
        if (!json) {
            size_t ok = pl_srv_utf8_complete(text.p, text.n);
            if (ok > flushed) { fwrite(text.p + flushed, 1, ok - flushed, stdout); fflush(stdout); flushed = ok; }
        }
        if (step + 1 == max_tokens) break;
        if (pl_session_pos(sess) >= pl_model_n_ctx(model)) { finish = "length"; break; }
        if (pl_session_eval(sess, &tok, 1, logits) != PL_OK) { rc = pl_cli_error("%s", pl_last_error()); goto done; }
    }
    decode_ms = now_ms() - t2;
    if (!json) {
        if (text.n > flushed) fwrite(text.p + flushed, 1, text.n - flushed, stdout);
        fputc('\n', stdout);
        if (chat_h) pl_chat_print_tool_calls(chat_h, text.p, text.n, false);
        fprintf(stderr, "prompt %zu tokens, %.1f tok/s | generated %zu tokens, %.1f tok/s | %s\n", n_ids,
                prefill_ms > 0 ? n_ids * 1e3 / prefill_ms : 0.0, n_gen,
                decode_ms > 0 && n_gen > 1 ? (n_gen - 1) * 1e3 / decode_ms : 0.0, finish);
    } else {
        printf("{\"prompt_tokens\": [");
        for (size_t i = 0; i < n_ids; i++) printf("%s%d", i ? ", " : "", ids[i]);
        printf("], \"tokens\": [");
        for (size_t i = 0; i < n_gen; i++) printf("%s%d", i ? ", " : "", gen[i]);
        printf("], \"text\": ");
        pl_cli_json_string(stdout, text.p ? text.p : "", text.n);
        if (lps) print_logprobs_json(model, gen, lps, n_gen, (int)rsm.logprobs);
        if (chat_h) pl_chat_print_tool_calls(chat_h, text.p, text.n, true);
        printf(", \"finish_reason\": \"%s\", \"timings\": {\"load_ms\": %.3f, \"prefill_ms\": %.3f, "
               "\"prefill_tok_s\": %.3f, \"decode_ms\": %.3f, \"decode_tok_s\": %.3f}}\n",
               finish, load_ms, prefill_ms, prefill_ms > 0 ? n_ids * 1e3 / prefill_ms : 0.0, decode_ms,
               decode_ms > 0 && n_gen > 1 ? (n_gen - 1) * 1e3 / decode_ms : 0.0);
    }
done:
    free(lps);
    free(rsm.bias_id);
    free(rsm.bias);
    pl_chat_close(chat_h);
    free(chat_ids);
    free(gtext);
    pl_grammar_free(grammar);
    free(text.p);
    free(gen);
    free(logits);
    pl_free(ids);
    pl_sampler_free(smp);
    pl_session_free(sess);
    pl_model_free(model);
    return rc;
}

PL_CLI_COMMAND(pl_cmd_run, "run", "generate text from a prompt", cmd_run)
