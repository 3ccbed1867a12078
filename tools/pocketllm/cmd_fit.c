/*
 * pocketllm fit: where a model stands on the quantization ladder for one
 * device and budget (pl_fit, pocketllm.h): for every rung the bytes it needs (weights
 * at the rung's mix + KV cache + scratch, from the loader's planner), whether
 * it fits, and the plan -- the highest-precision rung that fits.
 *
 * --check CASES.jsonl also demands that the model still answers correctly:
 * starting at the highest rung that fits, the model is quantized to that rung
 * (in a temporary directory), loaded under the budget, and every case
 * ({"prompt": ..., "expect": substring}) is run greedily. A rung that passes
 * all cases is the plan. A rung that fails stops the descent: lower rungs
 * only lose more precision, so no rung both fits and answers correctly.
 */
#include "cli.h"
#include "cli_fit.h"
#include "pocketllm.h"
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

enum { CHECK_NONE = 0, CHECK_PASS, CHECK_FAIL, CHECK_SKIP };
enum { MAX_RUNGS = 32 };   /* more than the ladder has */

typedef struct fit_case {
    char *prompt, *expect;
    int max_tokens;
} fit_case;

static const char *fit_usage =
    "usage: pocketllm fit (--model M | --preset 0.6b|1.7b|4b|8b|30b-a3b --vocab VOCAB.gguf) [options]\n"
    "  --device D            device to plan for (default cpu)\n"
    "  --memory BYTES        budget, e.g. 4G (GiB), 4GB (10^9), 4294967296; default: the device's\n"
    "                        free memory (cpu: MemAvailable)\n"
    "  --ctx N               context length to plan the KV cache for (default min(model, 4096))\n"
    "  --threads N           threads the plan assumes (default: all cores)\n"
    "  --cache-type-k T, --cache-type-v T   plan every rung with these KV cache types (f16, q8_0,\n"
    "                        q4_0); default: f16, or q8_0 where that makes a rung fit -- the cache is\n"
    "                        lowered before the weights are\n"
    "  --json                one JSON object on stdout\n"
    "  --check CASES.jsonl   also require each case {\"prompt\", \"expect\"} to pass greedily\n"
    "  --imatrix F           importance matrix for checking the IQ rungs\n"
    "  --check-tokens N      tokens generated per case (default 32)\n"
    "  --keep DIR            keep the quantized files of --check in DIR\n"
    "ladder: as is > Q8_0 > Q6_K > Q4_K_M > Q2_K > IQ2_XS > IQ2_XXS > IQ1_M > IQ1_S > TQ2_0 > TQ1_0\n"
    "each rung also shows its KV cache type and the longest context ('max ctx') the budget holds there\n"
    "exit status: 0 with a plan, 3 when no rung fits (or passes --check), 1 on errors\n";

static void free_cases(fit_case *c, int n) {
    for (int i = 0; i < n; i++) {
        free(c[i].prompt);
        free(c[i].expect);
    }
    free(c);
}

static int load_cases(const char *path, fit_case **out, int *n_out) {
    FILE *f = fopen(path, "r");
    if (!f) return pl_cli_error("fit: cannot open %s", path);
    fit_case *c = NULL;
    int n = 0, lineno = 0;
    char *line = NULL;
    size_t cap = 0;
    ssize_t len;
    int rc = 0;
    while ((len = getline(&line, &cap, f)) >= 0 && !rc) {
        lineno++;
        while (len > 0 && (line[len - 1] == '\n' || line[len - 1] == '\r' || line[len - 1] == ' ')) line[--len] = 0;
        if (len == 0) continue;
        json_error_t err;
        json_t *j = json_loads(line, 0, &err);
        const char *prompt = j ? json_string_value(json_object_get(j, "prompt")) : NULL;
        const char *expect = j ? json_string_value(json_object_get(j, "expect")) : NULL;
        json_t *mt = j ? json_object_get(j, "max_tokens") : NULL;
        if (!prompt || !expect) rc = pl_cli_error("fit: %s:%d: expected {\"prompt\": ..., \"expect\": ...}", path, lineno);
        else {
            fit_case *nc = realloc(c, (size_t)(n + 1) * sizeof *c);
            if (!nc) rc = pl_cli_error("out of memory");
            else {
                c = nc;
                c[n].prompt = strdup(prompt);
                c[n].expect = strdup(expect);
                c[n].max_tokens = json_is_integer(mt) ? (int)json_integer_value(mt) : 0;
                n++;
            }
        }
        json_decref(j);
    }
    free(line);
    fclose(f);
    if (!rc && n == 0) rc = pl_cli_error("fit: %s has no cases", path);
    if (rc) {
        free_cases(c, n);
        return rc;
    }
    *out = c;
    *n_out = n;
    return 0;
}

/* text for a one-line report: control characters escaped, at most n bytes */
static void escape_into(char *dst, size_t cap, const char *s, size_t n) {
    size_t o = 0;
    for (size_t i = 0; s[i] && i < n && o + 5 < cap; i++) {
        const unsigned char c = (unsigned char)s[i];
        if (c == '\n') { dst[o++] = '\\'; dst[o++] = 'n'; }
        else if (c < 0x20 || c == 0x7f) o += (size_t)snprintf(dst + o, cap - o, "\\x%02x", c);
        else dst[o++] = (char)c;
    }
    dst[o] = 0;
}

/* Runs every case greedily on the model at path, loaded under the budget.
 * Returns CHECK_PASS / CHECK_FAIL, or -1 (with a message) when the model
 * cannot be run. why receives the first failing case. */
static int run_cases(const char *path, const pl_model_params *mp, const fit_case *cases, int n_cases, int n_tokens,
                     char *why, size_t why_cap) {
    pl_model *m = NULL;
    if (pl_model_load(path, mp, &m) != PL_OK) {
        snprintf(why, why_cap, "%s", pl_last_error());
        return -1;
    }
    int result = CHECK_PASS;
    const int32_t n_vocab = pl_model_n_vocab(m);
    float *logits = malloc((size_t)n_vocab * sizeof *logits);
    for (int c = 0; c < n_cases && result == CHECK_PASS; c++) {
        const int max = cases[c].max_tokens > 0 ? cases[c].max_tokens : n_tokens;
        int32_t *ids = NULL, *gen = malloc((size_t)(max + 1) * sizeof *gen);
        size_t n_ids = 0;
        int n_gen = 0;
        pl_session *s = NULL;
        char *text = NULL;
        size_t text_len = 0;
        if (!logits || !gen || pl_tokenize(m, cases[c].prompt, strlen(cases[c].prompt), true, NULL, &ids, &n_ids) != PL_OK ||
            n_ids == 0 || pl_session_create(m, &s) != PL_OK || pl_session_eval(s, ids, n_ids, logits) != PL_OK) {
            snprintf(why, why_cap, "case %d: %s", c + 1, *pl_last_error() ? pl_last_error() : "cannot evaluate the prompt");
            result = -1;
        } else {
            while (n_gen < max) {
                int32_t best = 0;
                for (int32_t v = 1; v < n_vocab; v++)
                    if (logits[v] > logits[best]) best = v;
                if (pl_token_is_eog(m, best)) break;
                gen[n_gen++] = best;
                if (pl_session_pos(s) >= pl_model_n_ctx(m) || pl_session_eval(s, &best, 1, logits) != PL_OK) break;
            }
            if (pl_detokenize(m, gen, (size_t)n_gen, false, &text, &text_len) != PL_OK) {
                snprintf(why, why_cap, "case %d: %s", c + 1, pl_last_error());
                result = -1;
            } else if (!strstr(text, cases[c].expect)) {
                char got[120], want[64];
                escape_into(got, sizeof got, text, 80);
                escape_into(want, sizeof want, cases[c].expect, 40);
                snprintf(why, why_cap, "case %d: expected \"%s\" in \"%s\"", c + 1, want, got);
                result = CHECK_FAIL;
            }
        }
        pl_free(text);
        pl_free(ids);
        free(gen);
        pl_session_free(s);
    }
    free(logits);
    pl_model_free(m);
    return result;
}

/* True when a rung's plan needs cache types other than the default f16. */
static bool kv_note(const pl_fit_rung_info *g) { return strcmp(g->cache_type_k, "f16") || strcmp(g->cache_type_v, "f16"); }

static void print_text(const pl_fit_result *r, const pl_fit_rung_info *rungs, const int *check, char (*why)[256],
                       int plan, bool checked) {
    const double mib = 1048576.0;
    const int n_rungs = pl_fit_n_rungs(r);
    printf("fit: %s on %s, %d-token context, budget %.1f MiB%s\n", pl_fit_model(r), pl_fit_device(r),
           (int)pl_fit_n_ctx(r), pl_fit_budget(r) / mib, pl_fit_budget_is_free_memory(r) ? " (free memory)" : "");
    printf("  %-14s %11s %11s %11s %11s %6s %9s %8s  %s\n", "rung", "weights", "KV cache", "scratch", "total MiB",
           "bpw", "KV type", "max ctx", "fits");
    for (int i = 0; i < n_rungs; i++) {
        const pl_fit_rung_info *g = &rungs[i];
        char name[32];
        snprintf(name, sizeof name, "%s%s", g->name, g->as_is ? " (as is)" : "");
        if (g->status != PL_OK) {
            printf("  %-14s cannot run here: %s\n", name, g->error);
            continue;
        }
        char kv[24];
        if (!strcmp(g->cache_type_k, g->cache_type_v)) snprintf(kv, sizeof kv, "%s", g->cache_type_k);
        else snprintf(kv, sizeof kv, "%s/%s", g->cache_type_k, g->cache_type_v);
        printf("  %-14s %11.1f %11.1f %11.1f %11.1f %6.2f %9s %8d  %s%s", name, g->plan.weights / mib,
               g->plan.kv_cache / mib, g->plan.scratch / mib, g->plan.total / mib, g->bpw, kv, (int)g->max_ctx,
               g->fits ? "yes" : "no", i == plan ? "  <- plan" : "");
        if (check[i] == CHECK_PASS) printf("  [check: pass]");
        else if (check[i] == CHECK_FAIL) printf("  [check: FAIL: %s]", why[i]);
        else if (check[i] == CHECK_SKIP) printf("  [check: skipped: %s]", why[i]);
        putchar('\n');
    }
    if (plan < 0) {
        if (checked && pl_fit_chosen(r) >= 0)
            printf("plan: none -- no rung both fits and passes the checks\n");
        else
            printf("plan: none -- even %s needs more than the budget\n", rungs[n_rungs - 1].name);
    } else if (rungs[plan].as_is) {
        printf("plan: %s as is%s%s%s%s\n", rungs[plan].name, kv_note(&rungs[plan]) ? " with --cache-type-k " : "",
               kv_note(&rungs[plan]) ? rungs[plan].cache_type_k : "", kv_note(&rungs[plan]) ? " --cache-type-v " : "",
               kv_note(&rungs[plan]) ? rungs[plan].cache_type_v : "");
    } else {
        printf("plan: %s (%.1f MiB)%s%s%s%s%s\n", rungs[plan].name, rungs[plan].plan.total / mib,
               kv_note(&rungs[plan]) ? " with --cache-type-k " : "", kv_note(&rungs[plan]) ? rungs[plan].cache_type_k : "",
               kv_note(&rungs[plan]) ? " --cache-type-v " : "", kv_note(&rungs[plan]) ? rungs[plan].cache_type_v : "",
               rungs[plan].needs_imatrix ? ", needs an importance matrix (pocketllm imatrix)" : "");
    }
}

static void print_json(const pl_fit_result *r, const pl_fit_rung_info *rungs, const int *check, char (*why)[256],
                       int plan) {
    static const char *const cs[] = {NULL, "pass", "fail", "skipped"};
    printf("{\"model\": ");
    pl_cli_json_string(stdout, pl_fit_model(r), strlen(pl_fit_model(r)));
    printf(", \"device\": \"%s\", \"n_ctx\": %d, \"budget\": %llu, \"budget_source\": \"%s\", \"rungs\": [",
           pl_fit_device(r), (int)pl_fit_n_ctx(r), (unsigned long long)pl_fit_budget(r),
           pl_fit_budget_is_free_memory(r) ? "free_memory" : "given");
    for (int i = 0; i < pl_fit_n_rungs(r); i++) {
        const pl_fit_rung_info *g = &rungs[i];
        printf("%s\n  {\"name\": \"%s\", \"as_is\": %s, \"needs_imatrix\": %s, ", i ? "," : "", g->name,
               g->as_is ? "true" : "false", g->needs_imatrix ? "true" : "false");
        if (g->status != PL_OK) {
            printf("\"fits\": false, \"error\": ");
            pl_cli_json_string(stdout, g->error, strlen(g->error));
        } else {
            printf("\"weights\": %llu, \"kv_cache\": %llu, \"scratch\": %llu, \"total\": %llu, \"bpw\": %.4f, \"fits\": %s",
                   (unsigned long long)g->plan.weights, (unsigned long long)g->plan.kv_cache,
                   (unsigned long long)g->plan.scratch, (unsigned long long)g->plan.total, g->bpw,
                   g->fits ? "true" : "false");
            printf(", \"cache_type_k\": \"%s\", \"cache_type_v\": \"%s\", \"max_ctx\": %d", g->cache_type_k,
                   g->cache_type_v, (int)g->max_ctx);
        }
        if (check[i]) {
            printf(", \"check\": \"%s\"", cs[check[i]]);
            if (check[i] != CHECK_PASS) {
                printf(", \"check_detail\": ");
                pl_cli_json_string(stdout, why[i], strlen(why[i]));
            }
        }
        printf("}");
    }
    printf("\n], \"plan\": ");
    if (plan < 0) printf("null");
    else printf("\"%s\"", rungs[plan].name);
    if (plan >= 0)
        printf(", \"plan_cache_type_k\": \"%s\", \"plan_cache_type_v\": \"%s\"", rungs[plan].cache_type_k,
               rungs[plan].cache_type_v);
    printf("}\n");
}

static int cmd_fit(int argc, char **argv) {
    const char *model = NULL, *preset = NULL, *vocab = NULL, *device = "cpu", *memory = NULL, *cases_path = NULL,
               *imatrix = NULL, *keep = NULL, *v;
    long long ctx = 0, threads = 0, check_tokens = 32;
    bool json = false, bad = false;
    const char *cache_k = NULL, *cache_v = NULL;
    for (int i = 1; i < argc && !bad; i++) {
        const char *a = argv[i];
        if (!strcmp(a, "--help") || !strcmp(a, "-h")) {
            fputs(fit_usage, stdout);
            return 0;
        } else if (!strcmp(a, "--json")) json = true;
        else if (pl_cli_cache_opt(argc, argv, &i, &cache_k, &cache_v, &bad)) {}
        else if (pl_cli_opt(argc, argv, &i, "--model", &model, &bad) || pl_cli_opt(argc, argv, &i, "-m", &model, &bad)) {}
        else if (pl_cli_opt(argc, argv, &i, "--preset", &preset, &bad)) {}
        else if (pl_cli_opt(argc, argv, &i, "--vocab", &vocab, &bad)) {}
        else if (pl_cli_opt(argc, argv, &i, "--device", &device, &bad)) {}
        else if (pl_cli_opt(argc, argv, &i, "--memory", &memory, &bad)) {}
        else if (pl_cli_opt(argc, argv, &i, "--check", &cases_path, &bad)) {}
        else if (pl_cli_opt(argc, argv, &i, "--imatrix", &imatrix, &bad)) {}
        else if (pl_cli_opt(argc, argv, &i, "--keep", &keep, &bad)) {}
        else if (pl_cli_opt(argc, argv, &i, "--ctx", &v, &bad)) {
            if (!bad && !pl_cli_parse_int(v, 1, 1 << 24, &ctx)) return pl_cli_error("bad --ctx '%s'", v);
        } else if (pl_cli_opt(argc, argv, &i, "--threads", &v, &bad) || pl_cli_opt(argc, argv, &i, "-t", &v, &bad)) {
            if (!bad && !pl_cli_parse_int(v, 0, 1024, &threads)) return pl_cli_error("bad --threads '%s'", v);
        } else if (pl_cli_opt(argc, argv, &i, "--check-tokens", &v, &bad)) {
            if (!bad && !pl_cli_parse_int(v, 1, 1 << 16, &check_tokens)) return pl_cli_error("bad --check-tokens '%s'", v);
        } else return pl_cli_error("fit: unknown option '%s' (see 'pocketllm fit --help')", a);
    }
    if (bad) return 1;
    if (!model == !preset) return pl_cli_error("fit: give exactly one of --model or --preset");
    if (cases_path && !model) return pl_cli_error("fit: --check needs --model (a preset has no weights)");
    uint64_t budget = 0;
    char budget_msg[512];
    if (memory && pl_cli_parse_budget(memory, device, &budget, budget_msg, sizeof budget_msg) != PL_OK)
        return pl_cli_error("fit: bad --memory: %s", budget_msg);
    if (preset && !vocab) return pl_cli_error("a preset needs --vocab VOCAB.gguf (the tokenizer)");
    pl_fit_params fp = pl_fit_default_params();
    fp.device = device;
    fp.n_ctx = (int)ctx;
    fp.n_threads = (int)threads;
    fp.budget = budget;
    fp.cache_type_k = cache_k;
    fp.cache_type_v = cache_v;
    pl_fit_result *r = NULL;
    int rc = 0;
    pl_status st = preset ? pl_fit_preset(preset, vocab, &fp, &r) : pl_fit(model, &fp, &r);
    if (st != PL_OK) {
        /* the device's free memory is unknown: say how to give one */
        if (!memory && (st == PL_ERR_UNSUPPORTED || st == PL_ERR_IO) && strstr(pl_last_error(), "give a budget"))
            return pl_cli_error("%s (--memory BYTES)", pl_last_error());
        return pl_cli_error("%s", pl_last_error());
    }
    const int n_rungs = pl_fit_n_rungs(r);
    pl_fit_rung_info rungs[MAX_RUNGS];
    for (int i = 0; i < n_rungs && i < MAX_RUNGS; i++) pl_fit_rung(r, i, &rungs[i]);
    if (n_rungs < 1 || n_rungs > MAX_RUNGS) {
        pl_fit_free(r);
        return pl_cli_error("fit: the planner returned %d rungs", n_rungs);
    }
    if (pl_fit_reason_of(r) == PL_FIT_CANNOT_RUN) { /* not a model this device can run at all */
        rc = pl_cli_error("fit: %s", rungs[0].error);
        pl_fit_free(r);
        return rc;
    }
    int check[MAX_RUNGS] = {0};
    char why[MAX_RUNGS][256];
    memset(why, 0, sizeof why);
    int plan = pl_fit_chosen(r);
    if (cases_path && plan >= 0) {
        fit_case *cases = NULL;
        int n_cases = 0;
        if ((rc = load_cases(cases_path, &cases, &n_cases))) {
            pl_fit_free(r);
            return rc;
        }
        char dir[512];
        if (keep) snprintf(dir, sizeof dir, "%s", keep);
        else {
            const char *tmp = getenv("TMPDIR");
            snprintf(dir, sizeof dir, "%s/pocketllm-fit-XXXXXX", tmp && *tmp ? tmp : "/tmp");
            if (!mkdtemp(dir)) {
                free_cases(cases, n_cases);
                pl_fit_free(r);
                return pl_cli_error("fit: cannot create a temporary directory in %s", tmp && *tmp ? tmp : "/tmp");
            }
        }
        pl_model_params mp = pl_model_default_params();
        mp.device = device;
        mp.n_ctx = (int)ctx;
        mp.n_threads = (int)threads;
        mp.memory_budget = pl_fit_budget(r);
        const int first = plan;
        plan = -1;
        for (int i = first; i < n_rungs && !rc; i++) {
            const pl_fit_rung_info *g = &rungs[i];
            if (!g->fits) continue;
            char path[1024];
            snprintf(path, sizeof path, "%s", model);
            if (!g->as_is) {
                if (g->needs_imatrix && !imatrix) {
                    check[i] = CHECK_SKIP;
                    snprintf(why[i], sizeof why[i], "needs --imatrix");
                    break;
                }
                snprintf(path, sizeof path, "%s/%s.gguf", dir, g->name);
                if (!json) fprintf(stderr, "fit: quantizing to %s ...\n", g->name);
                pl_quantize_params qp = pl_quantize_default_params();
                qp.type = g->name;
                qp.imatrix_path = g->needs_imatrix ? imatrix : NULL;
                qp.n_threads = (int)threads;
                if (pl_quantize_file(model, path, &qp) != PL_OK) {
                    rc = pl_cli_error("fit: quantizing to %s: %s", g->name, pl_last_error());
                    break;
                }
            }
            if (!json) fprintf(stderr, "fit: checking %s on %d case(s) ...\n", g->name, n_cases);
            mp.cache_type_k = g->cache_type_k;   /* the rung's plan, cache types included */
            mp.cache_type_v = g->cache_type_v;
            const int res = run_cases(path, &mp, cases, n_cases, (int)check_tokens, why[i], sizeof why[i]);
            if (!g->as_is && !keep) unlink(path);
            if (res < 0) {
                rc = pl_cli_error("fit: cannot run %s: %s", g->name, why[i]);
                break;
            }
            check[i] = res;
            if (res == CHECK_PASS) {
                plan = i;
                break;
            }
            break; /* a failing rung stops the descent */
        }
        if (!keep) rmdir(dir);
        free_cases(cases, n_cases);
    }
    if (!rc) {
        if (json) print_json(r, rungs, check, why, plan);
        else print_text(r, rungs, check, why, plan, cases_path != NULL);
        rc = plan >= 0 ? 0 : 3;
    }
    pl_fit_free(r);
    return rc;
}

PL_CLI_COMMAND(pl_cmd_fit, "fit", "the quantization rung a model needs to fit a device's memory", cmd_fit)
