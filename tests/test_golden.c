/*
 * End-to-end golden test: every fixture model, on every backend, against
 * llama.cpp's greedy tokens and top-20 logits, by the rule of
 * tests/fixtures/PROVENANCE.md ("How to compare"):
 *  - at every step whose golden margin >= M the greedy token must match;
 *  - a mismatch below M means the sequences legitimately parted: stop there;
 *  - up to that point the logits of the golden top-20 ids are within tol.
 * Prints per-fixture agreement figures (steps compared, max logit diff).
 *
 * Devices: PL_GOLDEN_DEVICES (comma-separated; default ref,cpu,cuda). A
 * device whose probe says it is not on this machine (cuda without a GPU, or
 * a build without the CUDA module) is skipped with that reason; on a device
 * backend, a fixture whose weight types it has no kernels for is skipped
 * with the loader's message (host backends must run every fixture).
 * PL_GOLDEN_SKIP_MISSING=1 skips fixtures whose model file is absent (a tree
 * slimmed by scripts/gpu-slim.sh) instead of failing.
 */
#include "testutil.h"
#include "pocketllm.h"
#include "kernels/abi.h"
#include <unistd.h>
#include <jansson.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

typedef struct fixture {
    const char *name;
    float margin;     /* M */
    float tol;        /* max |logit - golden| over the top-20 */
    const char *cache;  /* NULL: f16 KV cache, golden/<name>.json; "q8_0" / "q4_0": that K and V cache
                         * (rotated, as the reference does), golden/kv/<name>-kv<cache>.json */
} fixture;

static const fixture fixtures[] = {
    {"tiny-qwen3-f32", 0.1f, 0.1f, NULL},
    {"tiny-qwen3-f16", 0.1f, 0.1f, NULL},
    {"tiny-qwen3-bf16", 0.5f, 0.25f, NULL},
    {"tiny-qwen3-q8_0", 1.0f, 1.0f, NULL},
    {"tiny-qwen3-q6_k", 1.0f, 1.0f, NULL},
    {"tiny-qwen3-q4_k_m", 1.0f, 1.0f, NULL},
    {"tiny-qwen3-untied-f16", 0.1f, 0.1f, NULL},
    {"tiny-qwen3-untied-q4_k_m", 1.0f, 1.0f, NULL},
    {"tiny-qwen2-f16", 0.1f, 0.1f, NULL},
    {"tiny-qwen2-q4_k_m", 1.0f, 1.0f, NULL},
    {"tiny-llama-f16", 0.1f, 0.1f, NULL},
    {"tiny-llama-q4_k_m", 1.0f, 1.0f, NULL},
    {"tiny-llama3-f16", 0.1f, 0.1f, NULL},      /* llama3 RoPE frequency factors (rope_freqs.weight) */
    {"tiny-llama3-q4_k_m", 1.0f, 1.0f, NULL},
    /* SPM vocab (BOS added), untied output (TinyLlama / Mistral files); q8_0, but measured within
     * 0.065 (ref) and 0.034 (cpu) of the goldens, so a tighter rule than 1.0 keeps steps decisive */
    {"tiny-llama-spm-untied-q8_0", 0.2f, 0.2f, NULL},
    {"tiny-qwen3moe-f16", 0.1f, 0.1f, NULL},
    {"tiny-qwen3moe-q4_k_m", 1.0f, 1.0f, NULL},
    /* gemma3: 7 layers (layer 5 global, the rest sliding-window), window 8, so
     * every prompt's later steps attend across the window's edge; the f16 file
     * declares final_logit_softcapping 8, the q4_k_m file (same weights) none. */
    {"tiny-gemma3-f16", 0.1f, 0.1f, NULL},
    {"tiny-gemma3-q4_k_m", 1.0f, 1.0f, NULL},
    /* The quantization ladder (q2_K, IQ and TQ files). tol 1.0 as for the other
     * quantized files: exact arithmetic on the decoded weights (ref) is measured
     * at up to 0.862 from llama.cpp (iq2_xxs; PROVENANCE.md's float64 pass found
     * 0.86), the cpu backend (q8_K activations, as llama.cpp) at up to 0.66. */
    {"tiny-qwen3-q2_k", 1.0f, 1.0f, NULL},
    {"tiny-qwen3-iq2_xxs", 1.0f, 1.0f, NULL},
    {"tiny-qwen3-iq2_xs", 1.0f, 1.0f, NULL},
    {"tiny-qwen3-iq1_s", 1.0f, 1.0f, NULL},
    {"tiny-qwen3-iq1_m", 1.0f, 1.0f, NULL},
    {"tiny-qwen3-tq2_0", 1.0f, 1.0f, NULL},
    {"tiny-qwen3-tq1_0", 1.0f, 1.0f, NULL},
    /* Quantized KV caches (--cache-type-k/-v q8_0 | q4_0; goldens: llama.cpp
     * with the same cache types, flash attention on and its default Hadamard
     * rotation: head_dim 64 here, 128 for untied, where K turns by H_128 and
     * V by H_64). Rounding K and V to 8 or 4 bits makes a step's logits jump
     * with last-bit differences upstream (a value crossing a rounding edge):
     * llama.cpp itself, fed the same 7 tokens as one batch or as 6 + 1, moves
     * the logits by up to 0.047 with an f16 cache, 0.04 with q8_0 and 0.44 with
     * q4_0 (tiny-qwen3-f16, case 0). Hence, measured against the goldens:
     *  - q8_0: M = tol = 0.25 for f16 files (ref and cpu land within 0.22;
     *    without the rotation 0.57 and token mismatches), 1.0 for quantized;
     *  - q4_0: M = 1.0 (the quantized-file rule) and tol 1.5 (within 1.31
     *    here; without the rotation 3.8 to 5.9 and mismatches at every file).
     * q4_K_M weights with a q4_0 cache are left out: the ref backend's exact
     * weight arithmetic (up to 0.86 from llama.cpp alone) and q4_0's jumps
     * together part from the golden at margins up to 1.8. */
    {"tiny-qwen3-f16", 0.25f, 0.25f, "q8_0"},
    {"tiny-qwen3-f16", 1.0f, 1.5f, "q4_0"},
    {"tiny-qwen3-untied-f16", 0.25f, 0.25f, "q8_0"},
    {"tiny-qwen3-untied-f16", 1.0f, 1.5f, "q4_0"},
    {"tiny-qwen2-f16", 0.25f, 0.25f, "q8_0"},
    {"tiny-qwen2-f16", 1.0f, 1.5f, "q4_0"},
    {"tiny-llama-f16", 0.25f, 0.25f, "q8_0"},
    {"tiny-llama-f16", 1.0f, 1.5f, "q4_0"},
    {"tiny-qwen3-q4_k_m", 1.0f, 1.0f, "q8_0"},
};

static int max_cases = 1 << 30;

static int argmax(const float *x, int n) {
    int b = 0;
    for (int i = 1; i < n; i++)
        if (x[i] > x[b]) b = i;
    return b;
}

static void run_fixture(const fixture *fx, const char *device) {
    char path[512], gpath[512];
    snprintf(path, sizeof path, "%s", pl_fixture("models/"));
    strncat(path, fx->name, sizeof path - strlen(path) - 8);
    strcat(path, ".gguf");
    char label[64];
    snprintf(label, sizeof label, "%s%s%s", fx->name, fx->cache ? " kv" : "", fx->cache ? fx->cache : "");
    if (fx->cache)
        snprintf(gpath, sizeof gpath, "%s%s-kv%s.json", pl_fixture("golden/kv/"), fx->name, fx->cache);
    else
        snprintf(gpath, sizeof gpath, "%s%s.json", pl_fixture("golden/"), fx->name);
    const char *skip_missing = getenv("PL_GOLDEN_SKIP_MISSING");
    if (skip_missing && *skip_missing && strcmp(skip_missing, "0") && access(path, R_OK) != 0) {
        printf("%-26s %-4s skipped: %s is absent (PL_GOLDEN_SKIP_MISSING)\n", fx->name, device, path);
        return;
    }
    const pl_backend *be = pl_backend_find(device);

    json_error_t jerr;
    json_t *root = json_load_file(gpath, 0, &jerr);
    CHECK(root != NULL, "%s: cannot parse golden file: %s", gpath, jerr.text);
    if (!root) return;

    pl_model_params mp = pl_model_default_params();
    mp.device = device;
    mp.n_ctx = 512;
    mp.n_threads = 2;
    mp.cache_type_k = fx->cache;
    mp.cache_type_v = fx->cache;
    pl_model *m = NULL;
    pl_status st = pl_model_load(path, &mp, &m);
    if (st == PL_ERR_UNSUPPORTED && be && be->device &&
        (strstr(pl_last_error(), "which backend") || strstr(pl_last_error(), "has no kernels for a"))) {
        printf("%-26s %-4s skipped: %s\n", label, device, pl_last_error());
        json_decref(root);
        return;
    }
    CHECK(st == PL_OK, "%s on %s: load failed: %s", fx->name, device, pl_last_error());
    if (st != PL_OK) { json_decref(root); return; }

    const int n_vocab = pl_model_n_vocab(m);
    CHECK(n_vocab == json_integer_value(json_object_get(root, "n_vocab")), "%s: n_vocab", fx->name);
    float *logits = malloc((size_t)n_vocab * sizeof *logits);
    int steps_compared = 0, decisive = 0, parted = 0, fails = 0;
    double max_diff = 0;
    size_t ci;
    json_t *cs;
    json_array_foreach(json_object_get(root, "cases"), ci, cs) {
        if ((int)ci >= max_cases) break;
        const char *prompt = json_string_value(json_object_get(cs, "prompt"));
        json_t *gtok = json_object_get(cs, "tokens");
        int32_t *ids;
        size_t n;
        st = pl_tokenize(m, prompt, strlen(prompt), true, NULL, &ids, &n);
        CHECK(st == PL_OK, "tokenize: %s", pl_last_error());
        if (st != PL_OK) continue;
        bool same = n == json_array_size(gtok);
        for (size_t i = 0; same && i < n; i++) same = ids[i] == json_integer_value(json_array_get(gtok, i));
        CHECK(same, "%s: prompt tokens differ for case %zu", fx->name, ci);

        pl_session *s = NULL;
        st = pl_session_create(m, &s);
        CHECK(st == PL_OK, "session: %s", pl_last_error());
        if (st != PL_OK) { pl_free(ids); continue; }
        st = pl_session_eval(s, ids, n, logits);
        CHECK(st == PL_OK, "eval: %s", pl_last_error());
        json_t *greedy = json_object_get(cs, "greedy");
        json_t *steps = json_object_get(cs, "steps");
        for (size_t k = 0; st == PL_OK && k < json_array_size(greedy); k++) {
            json_t *step = json_array_get(steps, k);
            double margin = json_real_value(json_object_get(step, "margin"));
            int want = (int)json_integer_value(json_array_get(greedy, k));
            int got = argmax(logits, n_vocab);
            bool nan = false;
            size_t ti;
            json_t *pair;
            double step_diff = 0;
            json_array_foreach(json_object_get(step, "top"), ti, pair) {
                int id = (int)json_integer_value(json_array_get(pair, 0));
                double gl = json_number_value(json_array_get(pair, 1));
                double d = fabs((double)logits[id] - gl);
                if (isnan(logits[id])) nan = true;
                if (d > step_diff) step_diff = d;
            }
            steps_compared++;
            if (step_diff > max_diff) max_diff = step_diff;
            CHECK(!nan && step_diff <= fx->tol, "%s/%s case %zu step %zu: logit diff %.4f > %.2f", label,
                  device, ci, k, step_diff, fx->tol);
            if (margin >= fx->margin) {
                decisive++;
                CHECK(got == want, "%s/%s case %zu step %zu: token %d, golden %d (margin %.3f)", label, device,
                      ci, k, got, want, margin);
                if (got != want) { fails++; break; }
            } else if (got != want) {
                parted++;
                break;
            }
            int32_t next = got;
            st = pl_session_eval(s, &next, 1, logits);
            CHECK(st == PL_OK, "eval: %s", pl_last_error());
        }
        pl_session_free(s);
        pl_free(ids);
    }
    printf("%-26s %-4s steps %3d  decisive %3d  parted %d  token mismatches %d  max |dlogit| %.4f\n", label,
           device, steps_compared, decisive, parted, fails, max_diff);
    free(logits);
    pl_model_free(m);
    json_decref(root);
}

int main(int argc, char **argv) {
    const char *devs_env = getenv("PL_GOLDEN_DEVICES");
    char devs[256];
    snprintf(devs, sizeof devs, "%s", devs_env ? devs_env : "ref,cpu,cuda");
    const char *only = argc > 1 ? argv[1] : NULL;
#ifdef PL_TEST_SANITIZED
    /* Under ASan+UBSan (a Debug build, ~20x slower) the Release run already
     * covers the numbers: check memory safety on a spread of weight types
     * and the first two prompts of each. */
    static const char *const sanitized_subset[] = {"tiny-qwen3-f32", "tiny-qwen3-bf16", "tiny-qwen3-q4_k_m",
                                                   "tiny-qwen3-untied-q4_k_m", "tiny-qwen3-iq2_xxs",
                                                   "tiny-qwen3-tq1_0", "tiny-qwen2-q4_k_m", "tiny-llama-q4_k_m", NULL};
    max_cases = 2;
#endif
    char *save = NULL;
    for (char *d = strtok_r(devs, ",", &save); d; d = strtok_r(NULL, ",", &save)) {
        const pl_backend *b = pl_backend_find(d);
        char detail[512] = "";
        if (b && b->probe && !b->probe(detail, sizeof detail)) { /* e.g. cuda on a machine without a GPU */
            printf("test_golden: device %s: not available here (%s), skipped\n", d, detail);
            continue;
        }
        for (size_t i = 0; i < sizeof fixtures / sizeof fixtures[0]; i++)
        {
            char label[64];   /* "name" or "name kvq8_0": the filter matches either */
            snprintf(label, sizeof label, "%s%s%s", fixtures[i].name, fixtures[i].cache ? " kv" : "",
                     fixtures[i].cache ? fixtures[i].cache : "");
            bool pick = !only || strstr(label, only);
#ifdef PL_TEST_SANITIZED
            bool in_subset = false;
            for (int k = 0; sanitized_subset[k]; k++) in_subset |= !strcmp(sanitized_subset[k], fixtures[i].name);
            pick = pick && (only || in_subset);
#endif
            if (pick) run_fixture(&fixtures[i], d);
        }
    }
    return pl_test_summary("test_golden");
}
