/*
 * Issue 16: the JSON schema -> grammar compiler.
 *   - every schema of tests/schemas/ compiles (in < 50 ms) to a grammar;
 *   - PL_SCHEMA_SAMPLES (default 6; the full run is 100) samples per schema
 *     at temperature 1 with the tiny random Qwen3 model (the sampler settings
 *     of `pocketllm run --json-schema F --temp 1 --seed i`), every one
 *     validated by Python's jsonschema package (tests/schemas/validate.py);
 *   - keywords that cannot be enforced are refused, naming the keyword;
 *   - `pocketllm run --json-schema` end to end.
 */
#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include "pocketllm.h"
#include "testutil.h"

static int cmpstr(const void *a, const void *b) { return strcmp(*(char *const *)a, *(char *const *)b); }

static double now_ms(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec * 1e3 + ts.tv_nsec / 1e6;
}

static void json_str(FILE *f, const char *s, size_t n) {
    fputc('"', f);
    for (size_t i = 0; i < n; i++) {
        unsigned char c = (unsigned char)s[i];
        if (c == '"' || c == '\\') fprintf(f, "\\%c", c);
        else if (c < 0x20) fprintf(f, "\\u%04x", c);
        else fputc(c, f);
    }
    fputc('"', f);
}

static void expect_refused(const char *schema, const char *needle) {
    pl_grammar *g = NULL;
    pl_status st = pl_grammar_from_json_schema(NULL, schema, strlen(schema), &g);
    CHECK(st != PL_OK && !g, "accepted: %s", schema);
    CHECK(strstr(pl_last_error(), needle) != NULL, "%s: message '%s' lacks '%s'", schema, pl_last_error(), needle);
    pl_grammar_free(g);
}

int main(void) {
    expect_refused("{\"type\":\"string\",\"not\":{\"const\":\"a\"}}", "'not'");
    expect_refused("{\"allOf\":[{\"type\":\"integer\"}]}", "'allOf'");
    expect_refused("{\"type\":\"integer\",\"multipleOf\":3}", "'multipleOf'");
    expect_refused("{\"type\":\"array\",\"uniqueItems\":true}", "'uniqueItems'");
    expect_refused("{\"type\":\"string\",\"format\":\"email\"}", "'email'");
    expect_refused("{\"type\":\"number\",\"minimum\":1.5}", "minimum/maximum on type 'number'");
    expect_refused("{\"type\":\"object\",\"patternProperties\":{}}", "'patternProperties'");
    expect_refused("{\"$ref\":\"#/$defs/missing\"}", "does not resolve");
    expect_refused("{\"type\":\"string\",\"pattern\":\"^(?=a)b$\"}", "lookaround");
    expect_refused("{\"type\":", "invalid JSON");
    /* found by fuzz_json_schema: a malformed quantifier was copied into the
     * grammar verbatim, which then failed to parse */
    expect_refused("{\"type\": \"string\", \"pattern\": \"^[0-9]{3]{4}$\"}", "bad or unsupported quantifier");
    expect_refused("{\"type\": \"string\", \"pattern\": \"^a{2,1}$\"}", "bad or unsupported quantifier");
    /* found by fuzz_json_schema: after an error, adding the "value" rule
     * recursed without end (stack overflow) */
    expect_refused("{\"pattern\": \"^[0-9]$\"}", "'pattern' without a 'type'");
    /* found by fuzz_json_schema: a 15-digit integer bound gave a grammar
     * that doubled per digit (seconds to compile); now small and fast */
    {
        const char *big = "{\"type\": \"integer\", \"minimum\": -462123524691324, \"maximum\": 999999999999999}";
        char *gb = NULL;
        size_t gbl = 0;
        CHECK(pl_json_schema_to_gbnf(big, strlen(big), &gb, &gbl) == PL_OK, "big bounds: %s", pl_last_error());
        CHECK(gbl < 20000, "big bounds: %zu bytes of grammar", gbl);
        pl_grammar *g = NULL;
        CHECK(pl_grammar_from_gbnf(NULL, gb, gbl, &g) == PL_OK, "big bounds parse: %s", pl_last_error());
        static const char *yes[] = {"-462123524691324", "-1", "0", "999999999999999", "123456789"};
        static const char *no[] = {"-462123524691325", "-999999999999999", "1000000000000000", "-0", "007"};
        for (int i = 0; i < 5 && g; i++) {
            pl_grammar_reset(g);
            CHECK(pl_grammar_accept_text(g, yes[i], strlen(yes[i])) == PL_OK && pl_grammar_is_accepting(g), "in range: %s", yes[i]);
            pl_grammar_reset(g);
            CHECK(!(pl_grammar_accept_text(g, no[i], strlen(no[i])) == PL_OK && pl_grammar_is_accepting(g)), "out of range: %s", no[i]);
        }
        pl_grammar_free(g);
        pl_free(gb);
    }

    /* found by the server's structured-output tests: the date rule let the
     * year 0000 through, which jsonschema's date check refuses */
    {
        const char *ds = "{\"type\": \"string\", \"format\": \"date\"}";
        char *gb = NULL;
        size_t gbl = 0;
        pl_grammar *g = NULL;
        CHECK(pl_json_schema_to_gbnf(ds, strlen(ds), &gb, &gbl) == PL_OK, "date: %s", pl_last_error());
        CHECK(gb && pl_grammar_from_gbnf(NULL, gb, gbl, &g) == PL_OK, "date parse: %s", pl_last_error());
        static const char *yes[] = {"\"0001-01-01\"", "\"0010-12-31\"", "\"0999-02-28\"", "\"2024-06-30\"", "\"9999-12-31\""};
        static const char *no[] = {"\"0000-01-01\"", "\"2024-13-01\"", "\"2024-02-30\"", "\"2024-04-31\"", "\"024-01-01\""};
        for (int i = 0; i < 5 && g; i++) {
            pl_grammar_reset(g);
            CHECK(pl_grammar_accept_text(g, yes[i], strlen(yes[i])) == PL_OK && pl_grammar_is_accepting(g), "date: %s", yes[i]);
            pl_grammar_reset(g);
            CHECK(!(pl_grammar_accept_text(g, no[i], strlen(no[i])) == PL_OK && pl_grammar_is_accepting(g)), "not a date: %s", no[i]);
        }
        pl_grammar_free(g);
        pl_free(gb);
    }

    /* found by the server's tool-call tests: strings allowed any \uXXXX, so
     * the model wrote a lone surrogate (\ude00), which jansson refuses: the
     * forced tool call then came back as text. U+0000 is refused the same way.
     * Both are out of the grammar now; a surrogate pair is one character. */
    {
        const char *ss = "{\"type\": \"string\", \"maxLength\": 2}";
        char *gb = NULL;
        size_t gbl = 0;
        pl_grammar *g = NULL;
        CHECK(pl_json_schema_to_gbnf(ss, strlen(ss), &gb, &gbl) == PL_OK, "string: %s", pl_last_error());
        CHECK(gb && pl_grammar_from_gbnf(NULL, gb, gbl, &g) == PL_OK, "string parse: %s", pl_last_error());
        static const char *yes[] = {"\"\\u00e9\"", "\"\\ud83d\\ude00\"", "\"\\uD7FF\\uE000\"", "\"\\u0001\"", "\"\\uFFFF\""};
        static const char *no[] = {"\"\\ude00\"", "\"\\ud800\"", "\"\\uD83Dx\"", "\"\\u0000\"", "\"\\ud83d\\u0041\""};
        for (int i = 0; i < 5 && g; i++) {
            pl_grammar_reset(g);
            CHECK(pl_grammar_accept_text(g, yes[i], strlen(yes[i])) == PL_OK && pl_grammar_is_accepting(g), "escape: %s", yes[i]);
            pl_grammar_reset(g);
            CHECK(!(pl_grammar_accept_text(g, no[i], strlen(no[i])) == PL_OK && pl_grammar_is_accepting(g)), "bad escape: %s", no[i]);
        }
        pl_grammar_free(g);
        pl_free(gb);
    }

    /* found by fuzz_json_schema: maxLength/maxItems above 4096 compiled to a
     * {m,n} the GBNF parser refuses ("repetition count above the limit");
     * counts up to 65536 now compile exactly, larger ones are refused */
    expect_refused("{\"type\":\"string\",\"maxLength\":65537}", "'maxLength' 65537 is above the limit 65536");
    expect_refused("{\"type\":\"array\",\"minItems\":100000}", "'minItems' 100000 is above the limit 65536");
    {
        static const struct { const char *schema; int lo, hi; } cases[] = {
            {"{\"type\":\"string\",\"maxLength\":5000}", 0, 5000},
            {"{\"type\":\"string\",\"minLength\":4097}", 4097, -1},
            {"{\"type\":\"string\",\"minLength\":9000,\"maxLength\":13000}", 9000, 13000},
            {"{\"type\":\"string\",\"minLength\":100,\"maxLength\":8193}", 100, 8193},
        };
        static const int lens[] = {0, 1, 99, 100, 4095, 4096, 4097, 5000, 5001, 8192, 8193, 8194, 8999, 9000, 13000, 13001};
        char *text = malloc(13004);
        for (size_t ci = 0; ci < sizeof cases / sizeof cases[0] && text; ci++) {
            pl_grammar *g = NULL;
            const char *sc = cases[ci].schema;
            CHECK(pl_grammar_from_json_schema(NULL, sc, strlen(sc), &g) == PL_OK, "%s: %s", sc, pl_last_error());
            for (size_t li = 0; li < sizeof lens / sizeof lens[0] && g; li++) {
                int n = lens[li];
                text[0] = '"';
                memset(text + 1, 'x', (size_t)n);
                text[n + 1] = '"';
                pl_grammar_reset(g);
                int ok = pl_grammar_accept_text(g, text, (size_t)n + 2) == PL_OK && pl_grammar_is_accepting(g);
                int want = n >= cases[ci].lo && (cases[ci].hi < 0 || n <= cases[ci].hi);
                CHECK(ok == want, "%s: a string of %d chars %s", sc, n, ok ? "accepted" : "refused");
            }
            pl_grammar_free(g);
        }
        const char *arr = "{\"type\":\"array\",\"items\":{\"type\":\"integer\"},\"minItems\":4100,\"maxItems\":4101}";
        pl_grammar *g = NULL;
        CHECK(pl_grammar_from_json_schema(NULL, arr, strlen(arr), &g) == PL_OK, "%s: %s", arr, pl_last_error());
        for (int n = 4099; n <= 4102 && g && text; n++) {
            size_t k = 0;
            text[k++] = '[';
            for (int i = 0; i < n; i++) { if (i) text[k++] = ','; text[k++] = '7'; }
            text[k++] = ']';
            pl_grammar_reset(g);
            int ok = pl_grammar_accept_text(g, text, k) == PL_OK && pl_grammar_is_accepting(g);
            CHECK(ok == (n == 4100 || n == 4101), "%s: %d items %s", arr, n, ok ? "accepted" : "refused");
        }
        pl_grammar_free(g);
        free(text);
    }

    const char *dir = PL_TEST_FIXTURES "/../schemas";
    DIR *d = opendir(dir);
    CHECK(d != NULL, "open %s", dir);
    if (!d) return pl_test_summary("test_grammar_schema");
    char *files[256];
    int nf = 0;
    struct dirent *e;
    while ((e = readdir(d)) && nf < 256)
        if (strlen(e->d_name) > 5 && !strcmp(e->d_name + strlen(e->d_name) - 5, ".json")) files[nf++] = strdup(e->d_name);
    closedir(d);
    qsort(files, (size_t)nf, sizeof *files, cmpstr);
    CHECK(nf >= 40, "only %d schemas", nf);

    pl_model_params mp = pl_model_default_params();
    mp.n_threads = 1;
    pl_model *m = NULL;
    if (pl_model_load(pl_fixture("models/tiny-qwen3-f32.gguf"), &mp, &m) != PL_OK) { CHECK(0, "load: %s", pl_last_error()); return pl_test_summary("test_grammar_schema"); }
    int32_t nv = pl_model_n_vocab(m);
    const char *env = getenv("PL_SCHEMA_SAMPLES");
    int samples = env ? atoi(env) : 6;
    char out_path[] = "/tmp/pl_schema_outXXXXXX";
    int fd = mkstemp(out_path);
    FILE *out = fd >= 0 ? fdopen(fd, "w") : NULL;
    CHECK(out != NULL, "temp file");
    pl_session *sess = NULL;
    pl_session_create(m, &sess);
    float *logits = malloc((size_t)nv * sizeof *logits);
    int32_t *prompt = NULL;
    size_t n_prompt = 0;
    pl_tokenize(m, "JSON:", 5, true, NULL, &prompt, &n_prompt);
    double worst_ms = 0, total_tokens = 0;
    const char *worst = "";
    for (int fi = 0; fi < nf && out; fi++) {
        char path[1024];
        snprintf(path, sizeof path, "%s/%s", dir, files[fi]);
        size_t len = 0;
        char *schema = pl_read_file(path, &len);
        CHECK(schema != NULL, "read %s", path);
        if (!schema) continue;
        double t0 = now_ms();
        char *gbnf = NULL;
        size_t gl = 0;
        pl_status st = pl_json_schema_to_gbnf(schema, len, &gbnf, &gl);
        pl_grammar *text_g = NULL;
        if (st == PL_OK) st = pl_grammar_from_gbnf(NULL, gbnf, gl, &text_g);
        double ms = now_ms() - t0;
        CHECK(st == PL_OK, "%s: %s", files[fi], pl_last_error());
        if (ms > worst_ms) { worst_ms = ms; worst = files[fi]; }
        pl_grammar *g = NULL;
        CHECK(pl_grammar_from_json_schema(m, schema, len, &g) == PL_OK, "%s: %s", files[fi], pl_last_error());
        for (int si = 0; si < samples && g && text_g; si++) {
            pl_sampler_params sp = pl_sampler_default_params();
            sp.temperature = 1.0f;
            sp.seed = (uint64_t)si;
            pl_sampler *smp = NULL;
            pl_sampler_create(&sp, nv, &smp);
            pl_grammar_reset(g);
            pl_grammar_reset(text_g);
            pl_sampler_set_grammar(smp, g);
            pl_session_reset(sess);
            pl_session_eval(sess, prompt, n_prompt, logits);
            char text[8192];
            size_t tn = 0;
            int ended = 0;
            for (int step = 0; step < 300; step++) {
                int32_t tok = pl_sampler_sample(smp, logits);
                CHECK(tok >= 0, "%s seed %d: %s", files[fi], si, pl_last_error());
                if (tok < 0) break;
                total_tokens++;
                if (pl_token_is_eog(m, tok)) { ended = 1; break; }
                size_t n = 0;
                if (pl_token_to_piece(m, tok, false, text + tn, sizeof text - tn, &n) != PL_OK) break;
                tn += n;
                if (pl_session_eval(sess, &tok, 1, logits) != PL_OK) break;
            }
            /* text-level: the output (even a cut one) stays inside the grammar */
            CHECK(pl_grammar_accept_text(text_g, text, tn) == PL_OK, "%s seed %d: '%.*s' leaves the grammar", files[fi], si, (int)tn, text);
            fprintf(out, "{\"schema\": ");
            json_str(out, path, strlen(path));
            fprintf(out, ", \"ended\": %s, \"text\": ", ended ? "true" : "false");
            json_str(out, text, tn);
            fprintf(out, "}\n");
            pl_sampler_free(smp);
        }
        pl_grammar_free(g);
        pl_grammar_free(text_g);
        free(gbnf);
        free(schema);
    }
    if (out) fclose(out);
    printf("%d schemas, %d samples each, %.0f tokens; slowest compile %.2f ms (%s)\n", nf, samples, total_tokens, worst_ms, worst);
#ifndef PL_TEST_SANITIZED
    CHECK(worst_ms < 50.0, "schema compile took %.1f ms (%s)", worst_ms, worst);
#endif
    char cmd[2048];
    snprintf(cmd, sizeof cmd, "python3 %s/validate.py %s", dir, out_path);
    int rc = system(cmd);
    CHECK(rc == 0, "validate.py failed (exit %d): outputs in %s", rc, out_path);
    if (rc == 0) remove(out_path);

    /* the CLI flag end to end */
    snprintf(cmd, sizeof cmd, "%s/pocketllm run -m %s -p hi --json-schema %s/02_person.json --temp 1 --seed 3 --json "
             "-n 200 > %s.cli 2>&1", PL_TEST_BIN, pl_fixture("models/tiny-qwen3-f32.gguf"), dir, out_path);
    CHECK(system(cmd) == 0, "pocketllm run --json-schema failed");
    snprintf(cmd, sizeof cmd, "python3 -c \"import json,sys,jsonschema; r=json.load(open(sys.argv[1])); "
             "jsonschema.validate(json.loads(r['text']), json.load(open(sys.argv[2]))); print('cli:', r['text'])\" %s.cli %s/02_person.json",
             out_path, dir);
    CHECK(system(cmd) == 0, "the CLI output does not validate");
    snprintf(cmd, sizeof cmd, "%s.cli", out_path);
    remove(cmd);

    free(logits);
    pl_free(prompt);
    pl_session_free(sess);
    pl_model_free(m);
    for (int i = 0; i < nf; i++) free(files[i]);
    return pl_test_summary("test_grammar_schema");
}
