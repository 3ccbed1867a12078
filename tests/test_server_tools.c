/* Unit tests of the server's tool-call parser (tools/pocketllm/server_tools.c):
 * single, multiple, malformed and unknown-function calls in the Qwen/Hermes
 * tag form and the Llama 3 JSON form, and the streaming invariant (the scan
 * of every prefix is a prefix of the final scan, and nothing undecided is
 * released early); the incremental streamer reassembles to the scan on
 * every chunking; the grammar for forced calls accepts exactly calls whose
 * arguments match the schemas. The tiny fixture models generate gibberish,
 * so these cases cannot be reached through the HTTP tests. */
#include "testutil.h"
#include "../tools/pocketllm/server_text.c"
#include "../tools/pocketllm/server_tools.c"

static const char NAMES[] = "get_weather\0get_time\0";

/* Runs the incremental streamer over text in chunks of `step` bytes and
 * reassembles what it reports: content, and calls as "name=args|...". With
 * compare_json the arguments are re-serialized compactly (streamed
 * fragments keep the model's spacing). */
static void stream_all(const char *text, size_t step, bool stream_args, size_t max_calls, pl_srv_buf *content,
                       pl_srv_buf *calls_out, bool *ok) {
    size_t n = strlen(text);
    pl_srv_tool_stream st = {0};
    json_t *calls = json_array();   /* [[name, args]] by index */
    *ok = true;
    for (size_t upto = 0;; upto = upto + step > n ? n : upto + step) {
        bool final = upto == n;
        json_t *d = json_array();
        if (pl_srv_tools_stream(&st, text, upto, NAMES, final, stream_args, max_calls, content, d)) *ok = false;
        size_t i;
        json_t *x;
        json_array_foreach(d, i, x) {
            size_t idx = (size_t)json_integer_value(json_object_get(x, "index"));
            json_t *nm = json_object_get(x, "name"), *ar = json_object_get(x, "arguments");
            if (nm) {
                if (idx != json_array_size(calls)) *ok = false;   /* announced in order, once */
                json_array_append_new(calls, json_pack("[O, s]", nm, ""));
            }
            json_t *c = json_array_get(calls, idx);
            if (!c || !json_is_string(ar)) { *ok = false; continue; }
            pl_srv_buf a = {0};
            pl_srv_buf_addf(&a, "%s%s", json_string_value(json_array_get(c, 1)), json_string_value(ar));
            json_array_set_new(c, 1, json_string(a.p));
            pl_srv_buf_free(&a);
        }
        json_decref(d);
        if (final) break;
    }
    size_t i;
    json_t *c;
    json_array_foreach(calls, i, c) {
        const char *args = json_string_value(json_array_get(c, 1));
        json_t *parsed = json_loads(args, 0, NULL);
        char *compact = parsed ? json_dumps(parsed, JSON_COMPACT | JSON_ENSURE_ASCII) : NULL;
        pl_srv_buf_addf(calls_out, "%s%s=%s", i ? "|" : "", json_string_value(json_array_get(c, 0)),
                        compact ? compact : args);
        free(compact);
        json_decref(parsed);
    }
    json_decref(calls);
}

static void check_stream(const char *name, const char *text, const char *want_content, const char *want_calls,
                         bool stream_args) {
    static const size_t steps[] = {1, 2, 3, 7, 1000};
    for (size_t s = 0; s < sizeof steps / sizeof *steps; s++) {
        pl_srv_buf c = {0}, k = {0};
        bool ok;
        stream_all(text, steps[s], stream_args, SIZE_MAX, &c, &k, &ok);
        CHECK(ok, "%s: stream (step %zu, args %d) failed", name, steps[s], stream_args);
        CHECK(!strcmp(c.p ? c.p : "", want_content), "%s: stream (step %zu, args %d) content [%s], want [%s]", name,
              steps[s], stream_args, c.p ? c.p : "", want_content);
        CHECK(!strcmp(k.p ? k.p : "", want_calls), "%s: stream (step %zu, args %d) calls [%s], want [%s]", name,
              steps[s], stream_args, k.p ? k.p : "", want_calls);
        pl_srv_buf_free(&c);
        pl_srv_buf_free(&k);
    }
}

/* want_calls: "name=args|name=args" ("" for none). */
static void check_scan(const char *name, const char *text, const char *want_content, const char *want_calls) {
    size_t n = strlen(text);
    pl_srv_buf c = {0};
    json_t *calls = pl_srv_tools_scan(text, n, NAMES, true, &c);
    CHECK(calls != NULL, "%s: out of memory", name);
    const char *got = c.p ? c.p : "";
    CHECK(!strcmp(got, want_content), "%s: content [%s], want [%s]", name, got, want_content);
    pl_srv_buf w = {0};
    size_t i;
    json_t *x;
    json_array_foreach(calls, i, x) {
        pl_srv_buf_addf(&w, "%s%s=%s", i ? "|" : "", json_string_value(json_object_get(x, "name")),
                        json_string_value(json_object_get(x, "arguments")));
    }
    const char *gc = w.p ? w.p : "";
    CHECK(!strcmp(gc, want_calls), "%s: calls [%s], want [%s]", name, gc, want_calls);

    /* Streaming: scan every prefix as it would arrive token by token. */
    size_t prev_content = 0, prev_calls = 0;
    for (size_t k = 0; k <= n; k++) {
        pl_srv_buf pc = {0};
        json_t *pcalls = pl_srv_tools_scan(text, k, NAMES, false, &pc);
        CHECK(pc.n <= c.n && (pc.n == 0 || !memcmp(pc.p, c.p, pc.n)), "%s: prefix %zu content [%s] is not a prefix",
              name, k, pc.p ? pc.p : "");
        CHECK(pc.n >= prev_content, "%s: prefix %zu content shrank", name, k);
        CHECK(json_array_size(pcalls) <= json_array_size(calls) && json_array_size(pcalls) >= prev_calls,
              "%s: prefix %zu has %zu calls", name, k, json_array_size(pcalls));
        for (size_t j = 0; j < json_array_size(pcalls); j++)
            CHECK(json_equal(json_array_get(pcalls, j), json_array_get(calls, j)), "%s: prefix %zu call %zu differs",
                  name, k, j);
        /* Undecided text is never released: no prefix shows a tag byte. */
        CHECK(!(pc.n && memmem(pc.p, pc.n, "<tool", 5) && !strstr(want_content, "<tool")),
              "%s: prefix %zu released a tag", name, k);
        prev_content = pc.n;
        prev_calls = json_array_size(pcalls);
        json_decref(pcalls);
        pl_srv_buf_free(&pc);
    }
    json_decref(calls);
    pl_srv_buf_free(&c);
    pl_srv_buf_free(&w);
    /* The incremental streamer decides the same, whatever the chunking. */
    check_stream(name, text, want_content, want_calls, false);
}

/* Does the grammar accept text as a complete output? */
static bool accepts(const char *gbnf, const char *text) {
    pl_grammar *g = NULL;
    if (pl_grammar_from_gbnf(NULL, gbnf, strlen(gbnf), &g) != PL_OK) return false;
    bool ok = pl_grammar_accept_text(g, text, strlen(text)) == PL_OK && pl_grammar_is_accepting(g);
    pl_grammar_free(g);
    return ok;
}

#define CALL(name, args) "<tool_call>\n{\"name\": \"" name "\", \"arguments\": " args "}\n</tool_call>"

static void test_grammar(void) {
    json_t *tools = json_loads(
        "[{\"type\": \"function\", \"function\": {\"name\": \"get_weather\", \"parameters\": {\"type\": \"object\","
        "  \"properties\": {\"city\": {\"type\": \"string\"}, \"unit\": {\"enum\": [\"c\", \"f\"]}},"
        "  \"required\": [\"city\"], \"additionalProperties\": false}}},"
        " {\"type\": \"function\", \"function\": {\"name\": \"get_time\"}},"
        " {\"type\": \"function\", \"function\": {\"name\": \"book\", \"parameters\": {\"$defs\": {\"P\": {\"type\": \"object\","
        "  \"properties\": {\"age\": {\"type\": \"integer\"}}, \"required\": [\"age\"], \"additionalProperties\": false}},"
        "  \"type\": \"object\", \"properties\": {\"who\": {\"$ref\": \"#/$defs/P\"}}, \"required\": [\"who\"],"
        "  \"additionalProperties\": false}}},"
        " {\"type\": \"function\", \"function\": {\"name\": \"book2\", \"parameters\": {\"$defs\": {\"P\": {\"type\": \"string\"}},"
        "  \"type\": \"object\", \"properties\": {\"who\": {\"$ref\": \"#/$defs/P\"}}, \"required\": [\"who\"],"
        "  \"additionalProperties\": false}}},"
        " {\"type\": \"function\", \"function\": {\"name\": \"note\", \"parameters\": {\"type\": \"object\","
        "  \"properties\": {\"t\": {\"type\": \"string\"}, \"in\": {\"type\": \"object\", \"properties\": {\"u\": {\"type\": \"integer\"}}}},"
        "  \"required\": [\"t\"]}}}]",
        0, NULL);
    CHECK(tools != NULL, "tools json");
    char *g = NULL, why[256];
    CHECK(!pl_srv_tools_grammar(tools, NULL, false, &g, why, sizeof why), "grammar: %s", why);
    if (g) {
        CHECK(accepts(g, CALL("get_weather", "{\"city\": \"Paris\"}")), "a valid call is refused:\n%s", g);
        CHECK(accepts(g, CALL("get_weather", "{\"city\": \"Paris\", \"unit\": \"c\"}")), "optional key refused");
        CHECK(accepts(g, CALL("get_time", "{}")), "no-parameter call refused");
        CHECK(accepts(g, CALL("book", "{\"who\": {\"age\": 7}}")), "$ref call refused");
        CHECK(accepts(g, CALL("book2", "{\"who\": \"Ann\"}")), "second $defs/P refused");
        CHECK(!accepts(g, CALL("book2", "{\"who\": {\"age\": 7}}")), "tools' $defs mixed up");
        CHECK(!accepts(g, CALL("book", "{\"who\": \"Ann\"}")), "tools' $defs mixed up");
        CHECK(!accepts(g, CALL("get_weather", "{}")), "missing required key accepted");
        CHECK(!accepts(g, CALL("get_weather", "{\"city\": 3}")), "wrong type accepted");
        CHECK(!accepts(g, CALL("get_weather", "{\"city\": \"x\", \"unit\": \"k\"}")), "enum not enforced");
        CHECK(!accepts(g, CALL("get_time", "{\"x\": 1}")), "no-parameter call took arguments");
        CHECK(!accepts(g, CALL("rm_rf", "{}")), "unknown function accepted");
        /* no additionalProperties: no other keys (at every level) */
        CHECK(accepts(g, CALL("note", "{\"t\": \"a\", \"in\": {\"u\": 1}}")), "note refused");
        CHECK(!accepts(g, CALL("note", "{\"t\": \"a\", \"x\": 1}")), "invented key accepted");
        CHECK(!accepts(g, CALL("note", "{\"t\": \"a\", \"in\": {\"u\": 1, \"v\": 2}}")), "invented inner key accepted");
        CHECK(!accepts(g, CALL("get_time", "{}") "\n" CALL("get_time", "{}")), "two calls without parallel");
        CHECK(!accepts(g, "hello"), "text accepted");
    }
    free(g);
    CHECK(!pl_srv_tools_grammar(tools, NULL, true, &g, why, sizeof why), "grammar: %s", why);
    if (g) {
        CHECK(accepts(g, CALL("get_time", "{}") "\n" CALL("get_weather", "{\"city\": \"Oslo\"}")), "parallel refused");
        CHECK(accepts(g, CALL("get_time", "{}")), "one call refused with parallel");
    }
    free(g);
    CHECK(!pl_srv_tools_grammar(tools, "get_time", false, &g, why, sizeof why), "grammar: %s", why);
    if (g) {
        CHECK(accepts(g, CALL("get_time", "{}")), "named call refused");
        CHECK(!accepts(g, CALL("get_weather", "{\"city\": \"Paris\"}")), "other function accepted when named");
        /* the prefill the server puts in the prompt is a valid start */
        pl_grammar *gr = NULL;
        CHECK(pl_grammar_from_gbnf(NULL, g, strlen(g), &gr) == PL_OK, "compile");
        const char *pre = "<tool_call>\n{\"name\": \"get_time\"";
        CHECK(gr && pl_grammar_accept_text(gr, pre, strlen(pre)) == PL_OK, "prefill refused");
        pl_grammar_free(gr);
    }
    free(g);
    json_t *bad = json_loads("[{\"type\": \"function\", \"function\": {\"name\": \"f\"}},"
                             " {\"type\": \"function\", \"function\": {\"name\": \"g\", \"parameters\":"
                             " {\"type\": \"object\", \"not\": {}}}}]", 0, NULL);
    g = NULL;
    CHECK(pl_srv_tools_grammar(bad, NULL, false, &g, why, sizeof why) == -1 && !g, "unsupported keyword accepted");
    CHECK(strstr(why, "tools[1]") && strstr(why, "not"), "message [%s]", why);
    json_decref(bad);
    json_decref(tools);
}

/* Property: on random texts built from the pieces the parser cares about,
 * the incremental streamer (any chunking) reports exactly what one scan of
 * the whole text finds. */
static void test_stream_random(void) {
    static const char *const pieces[] = {
        "<tool_call>", "</tool_call>", "```", "```json\n", "<|python_tag|>", "{\"name\": \"get_time\", \"arguments\": {}}",
        "{\"name\": \"get_weather\", \"arguments\": {\"city\": \"P\"}}", "{\"name\": \"nope\", \"arguments\": {}}",
        "{\"name\": \"get_time\", \"parameters\": {}}", "{", "}", "\"", " ", "\n", "x", "<", "</tool", "<tool_", "`",
    };
    uint64_t rng = 0x9E3779B97F4A7C15ull;
    int bad = 0;
    for (int it = 0; it < 3000 && bad < 5; it++) {
        char text[512] = "";
        int n_pieces = 1 + (int)((rng >> 33) % 8);
        for (int k = 0; k < n_pieces; k++) {
            rng = rng * 6364136223846793005ull + 1442695040888963407ull;
            strcat(text, pieces[(rng >> 33) % (sizeof pieces / sizeof *pieces)]);
        }
        rng = rng * 6364136223846793005ull + 1442695040888963407ull;
        size_t step = 1 + (rng >> 33) % 6;
        pl_srv_buf c = {0}, w = {0}, sc = {0}, sk = {0};
        json_t *calls = pl_srv_tools_scan(text, strlen(text), NAMES, true, &c);
        size_t i;
        json_t *x;
        json_array_foreach(calls, i, x)
            pl_srv_buf_addf(&w, "%s%s=%s", i ? "|" : "", json_string_value(json_object_get(x, "name")),
                            json_string_value(json_object_get(x, "arguments")));
        bool ok;
        stream_all(text, step, false, SIZE_MAX, &sc, &sk, &ok);
        bool same = ok && !strcmp(c.p ? c.p : "", sc.p ? sc.p : "") && !strcmp(w.p ? w.p : "", sk.p ? sk.p : "");
        CHECK(same, "random text [%s] step %zu: scan [%s] [%s], stream [%s] [%s]", text, step, c.p ? c.p : "",
              w.p ? w.p : "", sc.p ? sc.p : "", sk.p ? sk.p : "");
        bad += !same;
        json_decref(calls);
        pl_srv_buf_free(&c);
        pl_srv_buf_free(&w);
        pl_srv_buf_free(&sc);
        pl_srv_buf_free(&sk);
    }
}

int main(void) {
    check_scan("plain text", "It is sunny.", "It is sunny.", "");
    check_scan("single call", "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\"}}\n</tool_call>",
               "", "get_weather={\"city\":\"Paris\"}");
    check_scan("text before", "Let me check.\n<tool_call>\n{\"name\": \"get_time\", \"arguments\": {}}\n</tool_call>",
               "Let me check.\n", "get_time={}");
    check_scan("two calls",
               "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\"}}\n</tool_call>\n"
               "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Oslo\"}}\n</tool_call>",
               "\n", "get_weather={\"city\":\"Paris\"}|get_weather={\"city\":\"Oslo\"}");
    check_scan("string arguments", "<tool_call>{\"name\": \"get_weather\", \"arguments\": \"{\\\"city\\\": \\\"Rome\\\"}\"}</tool_call>",
               "", "get_weather={\"city\":\"Rome\"}");
    check_scan("bad json", "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": }\n</tool_call>",
               "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": }\n</tool_call>", "");
    check_scan("unknown function", "<tool_call>{\"name\": \"rm_rf\", \"arguments\": {}}</tool_call>",
               "<tool_call>{\"name\": \"rm_rf\", \"arguments\": {}}</tool_call>", "");
    check_scan("arguments not an object", "<tool_call>{\"name\": \"get_time\", \"arguments\": 3}</tool_call>",
               "<tool_call>{\"name\": \"get_time\", \"arguments\": 3}</tool_call>", "");
    check_scan("malformed then good",
               "<tool_call>oops</tool_call><tool_call>{\"name\": \"get_time\", \"arguments\": {}}</tool_call>",
               "<tool_call>oops</tool_call>", "get_time={}");
    check_scan("unclosed but complete", "<tool_call>\n{\"name\": \"get_time\", \"arguments\": {}}\n", "", "get_time={}");
    check_scan("unclosed and cut", "<tool_call>\n{\"name\": \"get_time\", \"argu",
               "<tool_call>\n{\"name\": \"get_time\", \"argu", "");
    check_scan("lt that is not a tag", "a < b and <tool", "a < b and <tool", "");
    check_scan("fenced call (Qwen2.5-Coder)",
               "```json\n{\n  \"name\": \"get_weather\",\n  \"arguments\": {\n    \"city\": \"Paris\"\n  }\n}\n```",
               "", "get_weather={\"city\":\"Paris\"}");
    check_scan("fenced code that is not a call", "Try:\n```python\nprint(1)\n```\ndone",
               "Try:\n```python\nprint(1)\n```\ndone", "");
    check_scan("single backtick", "use `x` here", "use `x` here", "");
    check_scan("llama3 json", "{\"name\": \"get_weather\", \"parameters\": {\"city\": \"Paris\"}}", "",
               "get_weather={\"city\":\"Paris\"}");
    check_scan("llama3 python tag", "<|python_tag|>{\"name\": \"get_time\", \"parameters\": {}}", "", "get_time={}");
    check_scan("json that is not a call", "{\"answer\": 42}", "{\"answer\": 42}", "");
    check_scan("leading whitespace text", "  \nhello", "  \nhello", "");

    /* Under a tool grammar, arguments stream in fragments and reassemble. */
    static const char *const formed[][3] = {
        {"<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\"}}\n</tool_call>", "",
         "get_weather={\"city\":\"Paris\"}"},
        {"Let me check.\n<tool_call>\n{\"name\": \"get_time\", \"arguments\": {}}\n</tool_call>", "Let me check.\n",
         "get_time={}"},
        {"<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Pa}ris\", \"n\": {\"a\": [1, {}]}} }\n</tool_call>\n"
         "<tool_call>\n{\"name\":\"get_time\",\"arguments\":{\"tz\":\"<tool\"}}\n</tool_call>",
         "\n", "get_weather={\"city\":\"Pa}ris\",\"n\":{\"a\":[1,{}]}}|get_time={\"tz\":\"<tool\"}"},
        {"<tool_call>\n{\"name\": \"get_time\", \"arguments\": {}}\n", "", "get_time={}"},
        {"<tool_call>oops</tool_call><tool_call>{\"name\": \"get_time\", \"arguments\": {}}</tool_call>",
         "<tool_call>oops</tool_call>", "get_time={}"},
        {"<tool_call>{\"name\": \"rm_rf\", \"arguments\": {}}</tool_call>",
         "<tool_call>{\"name\": \"rm_rf\", \"arguments\": {}}</tool_call>", ""},
        {"<tool_call>{\"name\": \"get_time\", \"arguments\": 3}</tool_call>",
         "<tool_call>{\"name\": \"get_time\", \"arguments\": 3}</tool_call>", ""},
        {"<tool_call>\n{\"name\": \"get_time\", \"argu", "<tool_call>\n{\"name\": \"get_time\", \"argu", ""},
        {"<tool_call>{\"name\": \"get_weather\", \"arguments\": \"{\\\"city\\\": \\\"Rome\\\"}\"}</tool_call>", "",
         "get_weather={\"city\":\"Rome\"}"},
    };
    for (size_t i = 0; i < sizeof formed / sizeof *formed; i++) {
        char nm[32];
        snprintf(nm, sizeof nm, "formed %zu", i);
        check_scan(nm, formed[i][0], formed[i][1], formed[i][2]);
        check_stream(nm, formed[i][0], formed[i][1], formed[i][2], true);
    }
    {
        /* The call is announced as soon as its head is complete, and the
         * arguments follow as they come; a possible end is held back. */
        const char *t = "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Oslo\"}}\n</tool";
        pl_srv_tool_stream st = {0};
        pl_srv_buf c = {0};
        json_t *d = json_array();
        size_t head = strstr(t, "{\"city") - t;
        CHECK(!pl_srv_tools_stream(&st, t, head - 1, NAMES, false, true, SIZE_MAX, &c, d), "stream");
        CHECK(json_array_size(d) == 0, "announced before the head is complete");
        CHECK(!pl_srv_tools_stream(&st, t, head + 4, NAMES, false, true, SIZE_MAX, &c, d), "stream");
        CHECK(json_array_size(d) == 2, "%zu events after the head", json_array_size(d));
        CHECK(!strcmp(json_string_value(json_object_get(json_array_get(d, 0), "name")), "get_weather"), "name");
        CHECK(!strcmp(json_string_value(json_object_get(json_array_get(d, 0), "arguments")), ""), "first args");
        CHECK(!strcmp(json_string_value(json_object_get(json_array_get(d, 1), "arguments")), "{\"ci"), "fragment [%s]",
              json_string_value(json_object_get(json_array_get(d, 1), "arguments")));
        CHECK(!pl_srv_tools_stream(&st, t, strlen(t), NAMES, false, true, SIZE_MAX, &c, d), "stream");
        CHECK(!strcmp(json_string_value(json_object_get(json_array_get(d, 2), "arguments")), "ty\": \"Oslo\""),
              "held back [%s]", json_string_value(json_object_get(json_array_get(d, 2), "arguments")));
        CHECK(c.n == 0, "content [%s]", c.p);
        json_decref(d);
        pl_srv_buf_free(&c);
    }
    {
        /* parallel_tool_calls false: the second call is dropped. */
        pl_srv_buf c = {0}, k = {0};
        bool ok;
        pl_srv_tool_stream st = {0};
        (void)st;
        const char *two = "<tool_call>{\"name\": \"get_time\", \"arguments\": {}}</tool_call>"
                          "<tool_call>{\"name\": \"get_weather\", \"arguments\": {}}</tool_call>";
        stream_all(two, 5, false, 1, &c, &k, &ok);
        CHECK(ok && !strcmp(k.p ? k.p : "", "get_time={}") && c.n == 0, "max_calls 1: [%s] [%s]", k.p, c.p);
        pl_srv_buf_free(&c);
        pl_srv_buf_free(&k);
    }
    test_grammar();
    test_stream_random();

    char id1[32], id2[32], id3[32];
    pl_srv_tools_call_id("chatcmpl-abc", 0, 0, id1);
    pl_srv_tools_call_id("chatcmpl-abc", 0, 1, id2);
    pl_srv_tools_call_id("chatcmpl-abc", 0, 0, id3);
    CHECK(!strncmp(id1, "call_", 5) && strlen(id1) == 29, "call id [%s]", id1);
    CHECK(strcmp(id1, id2) && !strcmp(id1, id3), "call ids [%s] [%s] [%s]", id1, id2, id3);
    return pl_test_summary("server_tools");
}
