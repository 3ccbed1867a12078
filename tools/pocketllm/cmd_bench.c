/*
 * pocketllm bench: llama-bench semantics.
 *   ppP: one batch of P prompt tokens from an empty cache, logits for the last;
 *   tgN: N single-token decode steps from an empty cache, no sampling.
 *   -d D ("ppP @ dD", "tgN @ dD"): the same tests after D context tokens:
 *   the cache holds positions 0..D-1 (filled in n_batch chunks, not timed)
 *   and the test runs at positions D... The fill is done once for both
 *   tests: every repetition writes only positions >= D, so positions 0..D-1
 *   stay exactly what a refill would write (llama-bench refills before each
 *   repetition).
 * Each test runs once to warm up, then r times; mean and stddev of tok/s.
 * Decode also reports achieved GB/s (weight bytes + KV bytes read per token),
 * prefill GFLOP/s (2 * params per token + attention).
 */
#include "cli.h"
#include "pocketllm.h"
#include "cli_fit.h"
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + ts.tv_nsec / 1e9;
}

typedef struct bench_result {
    char test[64];
    double mean, std, rate; /* tok/s mean, stddev, GB/s or GFLOP/s */
    double bytes;           /* decode: bytes read per token */
    bool is_pp;
} bench_result;

/* n tokens at positions pos0.. of slot 0, one batch. Positions restart at
 * pos0, so everything from pos0 on is overwritten ("empty" for pos0 = 0). */
static pl_status run_pp(pl_model *m, int n, const int32_t *toks, float *logits, int pos0) {
    int32_t *pos = malloc((size_t)n * sizeof *pos), *seq = calloc((size_t)n, sizeof *seq);
    bool *want = calloc((size_t)n, sizeof *want);
    if (!pos || !seq || !want) { free(pos); free(seq); free(want); return PL_ERR_NO_MEMORY; }
    for (int i = 0; i < n; i++) pos[i] = pos0 + i;
    want[n - 1] = true;
    pl_batch b = {n, toks, pos, seq, want};
    pl_status st = pl_model_forward(m, &b, logits);
    free(pos); free(seq); free(want);
    return st;
}

static pl_status run_tg(pl_model *m, int n, const int32_t *toks, float *logits, int pos0) {
    for (int i = 0; i < n; i++) {
        int32_t pos = pos0 + i, seq = 0;
        bool want = true;
        pl_batch b = {1, &toks[i], &pos, &seq, &want};
        pl_status st = pl_model_forward(m, &b, logits);
        if (st != PL_OK) return st;
    }
    return PL_OK;
}

/* The depth context: positions 0..d-1 in chunks of at most n_batch. */
static pl_status fill_depth(pl_model *m, int d, int n_batch, const int32_t *toks, float *logits) {
    for (int i = 0; i < d; i += n_batch) {
        const int c = d - i < n_batch ? d - i : n_batch;
        pl_status st = run_pp(m, c, toks + i, logits, i);
        if (st != PL_OK) return st;
    }
    return PL_OK;
}

static int cmd_bench(int argc, char **argv) {
    const char *model_path = NULL, *device = "cpu", *memory = NULL, *v;
    long long p = 512, n = 128, r = 5, threads = 0, depth = 0;
    bool json = false, bad = false;
    const char *cache_k = NULL, *cache_v = NULL;
    for (int i = 1; i < argc && !bad; i++) {
        const char *a = argv[i];
        if (!strcmp(a, "--help") || !strcmp(a, "-h")) {
            puts("usage: pocketllm bench --model M [-p 512] [-n 128] [-r 5] [--threads N] [--device D] [--json]\n"
                 "                       [-d DEPTH] [--memory BYTES|auto]\n"
                 "  -p 0 or -n 0 skips that test. -d (--n-depth): run the tests after DEPTH context tokens\n"
                 "  (\"tg128 @ d4096\"). --memory: a model that does not fit the budget is refused.");
            fputs(pl_cli_cache_usage, stdout);
            return 0;
        } else if (!strcmp(a, "--json")) json = true;
        else if (pl_cli_cache_opt(argc, argv, &i, &cache_k, &cache_v, &bad)) {}
        else if (pl_cli_opt(argc, argv, &i, "--model", &model_path, &bad) || pl_cli_opt(argc, argv, &i, "-m", &model_path, &bad)) {}
        else if (pl_cli_opt(argc, argv, &i, "--device", &device, &bad)) {}
        else if (pl_cli_opt(argc, argv, &i, "--memory", &memory, &bad)) {}
        else if (pl_cli_opt(argc, argv, &i, "-p", &v, &bad)) { if (!bad && !pl_cli_parse_int(v, 0, 1 << 16, &p)) return pl_cli_error("bad -p '%s'", v); }
        else if (pl_cli_opt(argc, argv, &i, "-n", &v, &bad)) { if (!bad && !pl_cli_parse_int(v, 0, 1 << 16, &n)) return pl_cli_error("bad -n '%s'", v); }
        else if (pl_cli_opt(argc, argv, &i, "-d", &v, &bad) || pl_cli_opt(argc, argv, &i, "--n-depth", &v, &bad)) {
            if (!bad && !pl_cli_parse_int(v, 0, 1 << 20, &depth)) return pl_cli_error("bad -d '%s'", v);
        }
        else if (pl_cli_opt(argc, argv, &i, "-r", &v, &bad)) { if (!bad && !pl_cli_parse_int(v, 1, 1000, &r)) return pl_cli_error("bad -r '%s'", v); }
        else if (pl_cli_opt(argc, argv, &i, "--threads", &v, &bad) || pl_cli_opt(argc, argv, &i, "-t", &v, &bad)) {
            if (!bad && !pl_cli_parse_int(v, 0, 1024, &threads)) return pl_cli_error("bad --threads '%s'", v);
        } else return pl_cli_error("bench: unknown option '%s'", a);
    }
    if (bad) return 1;
    if (!model_path) return pl_cli_error("bench: --model is required");
    if (pl_cli_check_device("bench", device)) return 1;

    pl_model_params mp = pl_model_default_params();
    mp.device = device;
    mp.n_threads = (int)threads;
    /* each test starts at position depth */
    mp.n_ctx = (int)(depth + (p > n ? p : n) > 0 ? depth + (p > n ? p : n) : 512);
    mp.n_batch = (int)(p > 0 ? p : depth > 0 ? (depth < 512 ? depth : 512) : 1);
    mp.cache_type_k = cache_k;
    mp.cache_type_v = cache_v;
    const char *tk = cache_k ? cache_k : "f16", *tv = cache_v ? cache_v : "f16";
    /* as llama-bench: the cache type columns only when one is not the default */
    const bool kv_cols = strcmp(tk, "f16") || strcmp(tv, "f16");
    char budget_msg[512];
    if (memory && pl_cli_parse_budget(memory, device, &mp.memory_budget, budget_msg, sizeof budget_msg) != PL_OK)
        return pl_cli_error("bench: bad --memory: %s", budget_msg);
    pl_model *m = NULL;
    pl_status lst = pl_model_load(model_path, &mp, &m);
    if (lst != PL_OK) {
        pl_cli_error("%s", pl_last_error());
        if (lst == PL_ERR_DOES_NOT_FIT) { /* name the rung that would fit, and how to make it */
            char advice[2048];
            pl_cli_fit_advice(model_path, &mp, advice, sizeof advice);
            if (*advice) fprintf(stderr, "%s\n", advice);
        }
        return 1;
    }

    const int32_t n_vocab = pl_model_n_vocab(m);
    float *logits = malloc((size_t)n_vocab * sizeof *logits);
    const long long n_toks = depth + (p > n ? p : n);
    int32_t *toks = malloc((size_t)n_toks * sizeof *toks + sizeof *toks);
    if (!logits || !toks) {
        free(logits); free(toks); pl_model_free(m);
        return pl_cli_error("bench: out of memory");
    }
    srand(42);
    for (long long i = 0; i < n_toks; i++) toks[i] = rand() % n_vocab;
    const int32_t *test_toks = toks + depth;   /* the depth context comes first */
    const double params = (double)pl_model_n_params(m);
    const double wbytes = (double)pl_model_weight_bytes(m);
    const pl_memory_plan plan = pl_model_memory_plan(m);
    const double kv_bytes_per_pos = (double)plan.kv_cache / (double)pl_model_n_ctx(m);

    /* The depth context, once: the tests only write positions >= depth. */
    if (depth > 0 && fill_depth(m, (int)depth, mp.n_batch, toks, logits) != PL_OK) {
        int rc = pl_cli_error("%s", pl_last_error());
        free(logits); free(toks); pl_model_free(m);
        return rc;
    }
    bench_result res[2];
    int n_res = 0;
    for (int t = 0; t < 2; t++) {
        long long cnt = t == 0 ? p : n;
        if (cnt <= 0) continue;
        bench_result *br = &res[n_res++];
        br->is_pp = t == 0;
        if (depth > 0) snprintf(br->test, sizeof br->test, "%s%lld @ d%lld", t == 0 ? "pp" : "tg", cnt, depth);
        else snprintf(br->test, sizeof br->test, "%s%lld", t == 0 ? "pp" : "tg", cnt);
        double sum = 0, sum2 = 0;
        for (long long rep = -1; rep < r; rep++) {
            double t0 = now_s();
            pl_status st = t == 0 ? run_pp(m, (int)cnt, test_toks, logits, (int)depth)
                                  : run_tg(m, (int)cnt, test_toks, logits, (int)depth);
            double dt = now_s() - t0;
            if (st != PL_OK) {
                int rc = pl_cli_error("%s", pl_last_error());
                free(logits); free(toks); pl_model_free(m);
                return rc;
            }
            if (rep < 0) continue; /* warm-up */
            double ts = cnt / dt;
            sum += ts;
            sum2 += ts * ts;
        }
        br->mean = sum / r;
        br->std = r > 1 ? sqrt(fmax(0, (sum2 - sum * sum / r) / (r - 1))) : 0;
        if (br->is_pp) {
            /* 2 flops per weight per token; attention adds ~2*ctx*kv terms, small here. */
            br->rate = br->mean * 2.0 * params / 1e9;
        } else {
            /* Each step reads all weights plus the cache so far (depth + on
             * average n/2 rows). */
            br->bytes = wbytes + kv_bytes_per_pos * ((double)depth + (double)cnt / 2.0);
            br->rate = br->mean * br->bytes / 1e9;
        }
    }

    const char *name = strrchr(model_path, '/');
    name = name ? name + 1 : model_path;
    if (json) {
        printf("[");
        for (int i = 0; i < n_res; i++) {
            printf("%s\n  {\"model\": ", i ? "," : "");
            pl_cli_json_string(stdout, name, strlen(name));   /* a file name may hold quotes */
            printf(", \"device\": \"%s\", \"threads\": %d, \"test\": \"%s\", \"tok_s\": %.3f, "
                   "\"tok_s_std\": %.3f, \"%s\": %.3f, \"model_bytes\": %.0f, \"params\": %.0f, \"n_depth\": %lld",
                   pl_model_device(m), pl_model_n_threads(m), res[i].test, res[i].mean, res[i].std,
                   res[i].is_pp ? "gflop_s" : "gb_s", res[i].rate, wbytes, params, depth);
            if (!res[i].is_pp) printf(", \"bytes_per_token\": %.0f", res[i].bytes);
            printf(", \"type_k\": \"%s\", \"type_v\": \"%s\"", tk, tv);
            printf("}");
        }
        printf("\n]\n");
    } else {
        printf("| model | size | params | backend | threads |%s test | t/s | GB/s or GFLOP/s |\n",
               kv_cols ? " type_k | type_v |" : "");
        printf("| --- | ---: | ---: | --- | ---: |%s ---: | ---: | ---: |\n", kv_cols ? " --- | --- |" : "");
        for (int i = 0; i < n_res; i++)
        {
            char size[32], np[32];
            if (wbytes >= 1073741824.0) snprintf(size, sizeof size, "%.2f GiB", wbytes / 1073741824.0);
            else snprintf(size, sizeof size, "%.2f MiB", wbytes / 1048576.0);
            if (params >= 1e9) snprintf(np, sizeof np, "%.2f B", params / 1e9);
            else snprintf(np, sizeof np, "%.2f M", params / 1e6);
            char kvc[64] = "";
            if (kv_cols) snprintf(kvc, sizeof kvc, " %s | %s |", tk, tv);
            printf("| %s | %s | %s | %s | %d |%s %s | %.2f ± %.2f | %.1f %s |\n", name, size, np, pl_model_device(m),
                   pl_model_n_threads(m), kvc, res[i].test, res[i].mean, res[i].std, res[i].rate,
                   res[i].is_pp ? "GFLOP/s" : "GB/s");
        }
    }
    free(logits);
    free(toks);
    pl_model_free(m);
    return 0;
}

PL_CLI_COMMAND(pl_cmd_bench, "bench", "measure prefill and decode speed (llama-bench semantics)", cmd_bench)
