/* pocketllm serve: an OpenAI-compatible HTTP server (see server.h). */
#include "cli.h"
#include "server.h"
#include <signal.h>
#include <sys/resource.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static const char *serve_usage =
    "usage: pocketllm serve --model M [options]\n"
    "  --host H             address to listen on (default 127.0.0.1)\n"
    "  --port P             TCP port (default 8080; 0 picks a free one)\n"
    "  --parallel N         sequences decoded together = KV-cache slots (default 4)\n"
    "  --ctx N              context length per slot (default min(model, 4096))\n"
    "  --batch N            max tokens per forward step (default 512)\n"
    "  --max-num-batched-tokens N  chunked prefill: at most N tokens per step while any sequence is\n"
    "                       decoding, its decode tokens included (vLLM's name; default --batch); given\n"
    "                       without --max-step-ms, exactly that budget (no time budget): a long prompt\n"
    "                       is prefilled N at a time between the others' decode steps\n"
    "  --max-step-ms MS     time budget of a step while any sequence is decoding (= their inter-token\n"
    "                       latency): prompt tokens are added to a step only as far as its predicted\n"
    "                       time (max(measured decode step, rows x measured row cost)) stays within MS\n"
    "                       (default: from --max-step-factor and the measured decode step; 0 = off, a fixed\n"
    "                       128 tokens); a prompt with nobody decoding gets a full --batch chunk\n"
    "  --max-step-factor F  the default --max-step-ms: the decode step x (1 + (F - 1) x 3 / n) while n\n"
    "                       sequences decode: F with 3, 2.5 with 1 at the default (default 1.5)\n"
    "  --queue N            requests that may wait for a slot (default 4 x parallel; more get 503)\n"
    "  --threads N          worker threads (default: all cores)\n"
    "  --device ref|cpu|cuda backend (default cpu; 'pocketllm devices' lists them)\n"
    "  --api-key K          require 'Authorization: Bearer K' on /v1 routes\n"
    "  --alias NAME         model id reported by the API (default: the file name)\n"
    "  --timeout S          seconds an idle connection is kept open (default 60)\n"
    "  --request-timeout S  seconds a client has to send a whole request, line, headers and body,\n"
    "                       however slowly it trickles (default 15; generation time is not counted)\n"
    "  --max-conns N        open connections in all; more get 503 + Retry-After (default 1024)\n"
    "  --max-conns-per-ip N open connections from one client address; more get 503 (default 64;\n"
    "                       0 = no limit: set 0 behind a reverse proxy, where all come from one address)\n"
    "  --metrics            serve Prometheus metrics on GET /metrics\n"
    "  --no-prompt-cache    do not reuse a slot's cached prompt prefix (request field cache_prompt:false\n"
    "                       does the same for one request)\n"
    "  --slot-prompt-similarity F  share of a prompt a free slot's cache must cover to be chosen over\n"
    "                       the least recently used slot (default 0.5; 0 = always the longest match)\n"
    "  --drain-timeout S    on SIGTERM, seconds to let running requests finish while new ones get 503\n"
    "                       and /health answers 503 (default 30; a second signal stops at once)\n"
    "  --cache-ram N, -cram N  keep the KV cache of evicted prompt prefixes in up to N MiB of host memory\n"
    "                       (llama-server's name and unit; default 0 = off) and restore a returning\n"
    "                       prefix by copy instead of prefilling it again\n"
    "  --health-queue-full-503  /health answers 503 while every slot is busy and the queue is full\n"
    "  --cache-type-k T, -ctk T  K cache type: f16 (default), q8_0 or q4_0 (llama.cpp's, rotated)\n"
    "  --cache-type-v T, -ctv T  V cache type: f16 (default), q8_0 or q4_0\n"
    "routes: POST /v1/chat/completions, POST /v1/completions, GET /v1/models, GET /health,\n"
    "        GET /slots, POST /tokenize, POST /detokenize, GET /metrics (with --metrics)\n";

static int cmd_serve(int argc, char **argv) {
    pl_srv_config cfg = {0};
    cfg.host = "127.0.0.1";
    cfg.port = 8080;
    cfg.device = "cpu";
    cfg.parallel = 4;
    cfg.batch = 512;
    cfg.queue = -1;
    cfg.idle_timeout = 60;
    cfg.request_timeout = 15;
    cfg.max_conns = 1024;
    cfg.max_conns_per_ip = 64;
    cfg.prompt_cache = true;
    cfg.slot_similarity = 0.5f;
    cfg.drain_timeout = 30;
    cfg.max_step_ms = -1;
    cfg.max_step_factor = 1.5;
    const char *v;
    bool bad = false;
    long long x;
    const char *cache_k = NULL, *cache_v = NULL;
    for (int i = 1; i < argc && !bad; i++) {
        const char *a = argv[i];
        if (!strcmp(a, "--help") || !strcmp(a, "-h")) { fputs(serve_usage, stdout); return 0; }
        else if (!strcmp(a, "--metrics")) cfg.metrics = true;
        else if (pl_cli_cache_opt(argc, argv, &i, &cache_k, &cache_v, &bad)) {}
        else if (!strcmp(a, "--no-prompt-cache")) cfg.prompt_cache = false;
        else if (!strcmp(a, "--health-queue-full-503")) cfg.health_queue_full_503 = true;
        else if (pl_cli_opt(argc, argv, &i, "--slot-prompt-similarity", &v, &bad)) {
            double f;
            if (bad) break;
            if (!pl_cli_parse_float(v, &f) || !(f >= 0 && f <= 1))
                return pl_cli_error("bad --slot-prompt-similarity '%s' (a number from 0 to 1)", v);
            cfg.slot_similarity = (float)f;
        }
        else if (pl_cli_opt(argc, argv, &i, "--max-step-ms", &v, &bad)) {
            double f;
            if (bad) break;
            if (!pl_cli_parse_float(v, &f) || !(f >= 0 && f <= 1e6))
                return pl_cli_error("bad --max-step-ms '%s' (milliseconds, 0 = off)", v);
            cfg.max_step_ms = f;
        }
        else if (pl_cli_opt(argc, argv, &i, "--max-step-factor", &v, &bad)) {
            double f;
            if (bad) break;
            if (!pl_cli_parse_float(v, &f) || !(f > 1 && f <= 1000))
                return pl_cli_error("bad --max-step-factor '%s' (a number above 1)", v);
            cfg.max_step_factor = f;
        }
        else if (pl_cli_opt(argc, argv, &i, "--model", &cfg.model_path, &bad) ||
                 pl_cli_opt(argc, argv, &i, "-m", &cfg.model_path, &bad)) {}
        else if (pl_cli_opt(argc, argv, &i, "--host", &cfg.host, &bad)) {}
        else if (pl_cli_opt(argc, argv, &i, "--device", &cfg.device, &bad)) {}
        else if (pl_cli_opt(argc, argv, &i, "--api-key", &cfg.api_key, &bad)) {}
        else if (pl_cli_opt(argc, argv, &i, "--alias", &cfg.alias, &bad)) {}
#define INT_OPT(name, lo, hi, field)                                                                   \
        else if (pl_cli_opt(argc, argv, &i, name, &v, &bad)) {                                      \
            if (bad) break;                                                                          \
            if (!pl_cli_parse_int(v, lo, hi, &x)) return pl_cli_error("bad %s '%s'", name, v);       \
            cfg.field = (int)x;                                                                      \
        }
        INT_OPT("--port", 0, 65535, port)
        INT_OPT("--parallel", 1, 256, parallel)
        INT_OPT("-np", 1, 256, parallel)
        INT_OPT("--ctx", 1, 1 << 24, ctx)
        INT_OPT("--batch", 1, 1 << 16, batch)
        INT_OPT("--max-num-batched-tokens", 1, 1 << 16, max_batched_tokens)
        INT_OPT("--queue", 0, 1 << 16, queue)
        INT_OPT("--threads", 0, 1024, threads)
        INT_OPT("-t", 0, 1024, threads)
        INT_OPT("--timeout", 1, 86400, idle_timeout)
        INT_OPT("--request-timeout", 1, 86400, request_timeout)
        INT_OPT("--max-conns", 1, 1 << 16, max_conns)
        INT_OPT("--max-conns-per-ip", 0, 1 << 16, max_conns_per_ip)
        INT_OPT("--drain-timeout", 0, 86400, drain_timeout)
        INT_OPT("--cache-ram", 0, 1 << 24, cache_ram_mib)
        INT_OPT("-cram", 0, 1 << 24, cache_ram_mib)
#undef INT_OPT
        else return pl_cli_error("serve: unknown option '%s' (see 'pocketllm serve --help')", a);
    }
    if (bad) return 1;
    if (!cfg.model_path) return pl_cli_error("serve: --model is required");
    if (pl_cli_check_device("serve", cfg.device)) return 1;   /* before listening: nothing to serve */
    if (cfg.queue < 0) cfg.queue = 4 * cfg.parallel;
    if (cfg.cache_ram_mib > 0 && !cfg.prompt_cache)
        return pl_cli_error("serve: --cache-ram keeps evicted prompt-cache prefixes: it needs the prompt cache "
                            "(drop --no-prompt-cache)");
    if (cfg.cache_ram_mib > 0) {
        /* Counted up front: the store may fill, so it must fit beside the
         * model in the memory there is now (MemAvailable), not fail later. */
        long long avail = pl_srv_mem_available_mib();
        if (avail >= 0 && cfg.cache_ram_mib > avail)
            return pl_cli_error("serve: --cache-ram %lld MiB is more than the %lld MiB of memory available",
                                cfg.cache_ram_mib, avail);
    }
    /* Each connection is a socket (and a thread): raise the soft descriptor
     * limit toward the hard one, and allow no more connections than fit. */
    struct rlimit rl;
    if (getrlimit(RLIMIT_NOFILE, &rl) == 0) {
        rlim_t want = (rlim_t)cfg.max_conns + 64 + 64; /* MHD's hard ceiling, plus model and log files */
        if (rl.rlim_cur != RLIM_INFINITY && rl.rlim_cur < want) {
            rl.rlim_cur = rl.rlim_max == RLIM_INFINITY || rl.rlim_max > want ? want : rl.rlim_max;
            setrlimit(RLIMIT_NOFILE, &rl);
            getrlimit(RLIMIT_NOFILE, &rl);
        }
        if (rl.rlim_cur != RLIM_INFINITY && rl.rlim_cur < want) {
            int fit = (int)rl.rlim_cur - 128;
            fprintf(stderr, "pocketllm: serve: open-file limit %llu: --max-conns lowered from %d to %d\n",
                    (unsigned long long)rl.rlim_cur, cfg.max_conns, fit > 1 ? fit : 1);
            cfg.max_conns = fit > 1 ? fit : 1;
        }
    }

    /* Signals: handled by sigwait in this thread only; every thread created
     * from here on inherits the mask. A vanished client must not kill us. */
    sigset_t sigs;
    sigemptyset(&sigs);
    sigaddset(&sigs, SIGINT);
    sigaddset(&sigs, SIGTERM);
    pthread_sigmask(SIG_BLOCK, &sigs, NULL);
    signal(SIGPIPE, SIG_IGN);

    static pl_srv s; /* large; lives for the whole command */
    memset(&s, 0, sizeof s);
    s.cfg = cfg;
    pthread_mutex_init(&s.mu, NULL);
    pthread_cond_init(&s.cv, NULL);
    atomic_init(&s.state, PL_SRV_LOADING);
    s.started = (long long)time(NULL);
    const char *base = strrchr(cfg.model_path, '/');
    snprintf(s.model_id, sizeof s.model_id, "%s", cfg.alias ? cfg.alias : base ? base + 1 : cfg.model_path);

    /* Listen first: /health answers 503 while the model loads. */
    if (pl_srv_http_start(&s)) return 1;
    pl_srv_log("listening on http://%s:%d", cfg.host, s.bound_port);

    double t0 = pl_srv_now();
    /* Test hook: a slow load, so that tests can observe /health's 503. */
    const char *delay = getenv("POCKETLLM_SERVE_TEST_LOAD_DELAY_MS");
    if (delay && atoi(delay) > 0) {
        struct timespec ts = {atoi(delay) / 1000, (long)(atoi(delay) % 1000) * 1000000L};
        nanosleep(&ts, NULL);
    }
    pl_model_params mp = pl_model_default_params();
    mp.device = cfg.device;
    mp.n_threads = cfg.threads;
    mp.n_ctx = cfg.ctx;
    mp.n_seq = cfg.parallel;
    mp.n_batch = cfg.batch;
    /* Greedy output must not depend on the prompt cache or on what else is in
     * the batch (test_prompt_cache.py): the decode path for every batch. */
    mp.batch_invariant = true;
    mp.cache_type_k = cache_k;
    mp.cache_type_v = cache_v;
    if (pl_model_load(cfg.model_path, &mp, &s.model) != PL_OK) {
        int rc = pl_cli_error("%s", pl_last_error());
        pl_srv_http_stop(&s);
        return rc;
    }
    s.n_vocab = pl_model_n_vocab(s.model);
    s.n_ctx = pl_model_n_ctx(s.model);
    s.n_seq = cfg.parallel;
    s.n_batch = cfg.batch;
    if ((long long)s.n_batch > (long long)s.n_ctx * s.n_seq) s.n_batch = s.n_ctx * s.n_seq;
    /* 128: on a CPU a step of 128 prompt tokens costs a few decode steps of
     * a 1.5B model, a stall the other streams can take. A step whose decode
     * tokens alone reach the budget still takes one prompt token, so a
     * prompt always advances (server_sched.c). */
    s.step_budget = cfg.max_batched_tokens > 0 ? cfg.max_batched_tokens : 128;
    if (s.step_budget > s.n_batch) s.step_budget = s.n_batch;
    /* The time budget (server_budget.h) unless --max-step-ms 0, or an
     * explicit --max-num-batched-tokens without --max-step-ms (its fixed
     * count, as before the time budget). --max-num-batched-tokens stays a
     * hard cap; until both costs are measured a step holds the old default
     * count. */
    s.budget.n_batch = s.n_batch;
    s.budget.timed = cfg.max_step_ms != 0 && !(cfg.max_batched_tokens > 0 && cfg.max_step_ms < 0);
    s.budget.cap = s.budget.timed && cfg.max_batched_tokens <= 0 ? s.n_batch : s.step_budget;
    s.budget.max_step_s = cfg.max_step_ms > 0 ? cfg.max_step_ms / 1e3 : 0;
    s.budget.factor = cfg.max_step_factor;
    s.budget.slack_seqs = PL_SRV_SLACK_SEQS;
    s.budget.fallback = s.step_budget;
    /* The linear prompt cost by default; PL_SERVE_STEP_COST=roofline models
     * a step as max(decode step, rows x row cost) (server_budget.h). Measured
     * against each other on a quiet machine (bench/RESULTS.md, 2026-12-06),
     * the roofline lost aggregate tok/s and TTFT p95 at K = 8 and did not
     * bring TTFT p95 at K = 2 closer to llama-server, so it stays opt-in. */
    const char *cost = getenv("PL_SERVE_STEP_COST");
    s.budget.cost = cost && strcmp(cost, "roofline") == 0 ? PL_SRV_COST_ROOFLINE : PL_SRV_COST_LINEAR;
    int rc = 0;
    if (cfg.cache_ram_mib > 0) {
        /* The model is loaded: its plan is resident now; the store comes on
         * top of it. */
        pl_memory_plan plan = pl_model_memory_plan(s.model);
        long long avail = pl_srv_mem_available_mib();
        if (avail >= 0 && cfg.cache_ram_mib > avail) {
            rc = pl_cli_error("serve: --cache-ram %lld MiB does not fit: %lld MiB of memory is available with the "
                              "model loaded (weights %.1f, KV cache %.1f, scratch %.1f MiB)",
                              cfg.cache_ram_mib, avail, plan.weights / 1048576.0, plan.kv_cache / 1048576.0,
                              plan.scratch / 1048576.0);
            goto done;
        }
        size_t pb = pl_model_kv_pos_bytes(s.model);
        pl_srv_log("cache-ram: up to %lld MiB of host memory for evicted prompt prefixes (%zu bytes per token: "
                   "%lld tokens)", cfg.cache_ram_mib, pb,
                   pb ? (long long)(((unsigned long long)cfg.cache_ram_mib << 20) / (pb + 4)) : 0LL);
    }
    if (pl_srv_chat_init(&s) != PL_OK || pl_srv_spill_init(&s) != PL_OK || pl_srv_sched_start(&s) != PL_OK) {
        rc = pl_cli_error("serve: cannot start: out of memory");
        goto done;
    }
    atomic_store(&s.state, PL_SRV_READY);
    char while_decoding[96];
    if (!s.budget.timed) snprintf(while_decoding, sizeof while_decoding, "%d while decoding", s.step_budget);
    else if (s.budget.max_step_s > 0)
        snprintf(while_decoding, sizeof while_decoding, "steps of %g ms while decoding, at most %d tokens",
                 cfg.max_step_ms, s.budget.cap);
    else
        snprintf(while_decoding, sizeof while_decoding, "steps of 1 + %g x 3 / n decode steps while n decode, at most %d tokens",
                 cfg.max_step_factor - 1, s.budget.cap);
    if (s.budget.timed && s.budget.cost == PL_SRV_COST_ROOFLINE) {
        size_t n = strlen(while_decoding);
        snprintf(while_decoding + n, sizeof while_decoding - n, ", roofline cost");
    }
    pl_srv_log("ready: %s (%s, device %s) loaded in %.0f ms; %d slots x %d tokens of context, batch %d (%s), queue %d%s",
               s.model_id, pl_model_arch(s.model), pl_model_device(s.model), (pl_srv_now() - t0) * 1e3, s.n_seq,
               s.n_ctx, s.n_batch, while_decoding, cfg.queue, cfg.api_key ? ", API key required" : "");

    int sig = 0;
    sigwait(&sigs, &sig);
    if (sig == SIGTERM && cfg.drain_timeout > 0) {
        /* Graceful drain (what an orchestrator or balancer sends): /health
         * and new generation requests answer 503 so balancers move on, and
         * what is queued or running finishes and is sent, up to
         * --drain-timeout. A second signal ends the wait. */
        atomic_store(&s.state, PL_SRV_DRAINING);
        int load = pl_srv_load(&s);
        pl_srv_log("SIGTERM: draining %d request%s (at most %d s)", load, load == 1 ? "" : "s", cfg.drain_timeout);
        double until = pl_srv_now() + cfg.drain_timeout;
        struct timespec tick = {0, 50 * 1000000L};
        while ((load = pl_srv_load(&s)) > 0 && pl_srv_now() < until) {
            if (sigtimedwait(&sigs, NULL, &tick) > 0) break;
        }
        if (load > 0) pl_srv_log("drain: %d request%s still running; stopping them", load, load == 1 ? "" : "s");
        else pl_srv_log("drain: done");
    }
    pl_srv_log("signal %d: shutting down", sig);
done:
    atomic_store(&s.state, PL_SRV_STOPPING);
    /* Order matters: the scheduler fails what is still running, which lets
     * the connection threads finish, which lets the daemon stop. */
    pl_srv_sched_stop(&s);
    pl_srv_http_stop(&s);
    pl_srv_chat_free(&s);
    pl_srv_sched_free(&s);
    pl_srv_spill_free(&s);
    pl_model_free(s.model);
    return rc;
}

PL_CLI_COMMAND(pl_cmd_serve, "serve", "OpenAI-compatible HTTP server", cmd_serve)
