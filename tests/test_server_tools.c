/* Unit tests of the server's tool-call parser (tools/pocketllm/server_tools.c):
 * single, multiple, malformed and unknown-function calls in the Qwen/Hermes
 * tag form and the Llama 3 JSON form, and the streaming invariant (the scan
 * of every prefix is a prefix of the final scan, and nothing undecided is
 * released early). The tiny fixture models generate gibberish, so these
 * cases cannot be reached through the HTTP tests. */
#include "testutil.h"
#include "../tools/pocketllm/server_text.c"
#include "../tools/pocketllm/server_tools.c"

static const char NAMES[] = "get_weather\0get_time\0";

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

    char id1[32], id2[32], id3[32];
    pl_srv_tools_call_id("chatcmpl-abc", 0, 0, id1);
    pl_srv_tools_call_id("chatcmpl-abc", 0, 1, id2);
    pl_srv_tools_call_id("chatcmpl-abc", 0, 0, id3);
    CHECK(!strncmp(id1, "call_", 5) && strlen(id1) == 29, "call id [%s]", id1);
    CHECK(strcmp(id1, id2) && !strcmp(id1, id3), "call ids [%s] [%s] [%s]", id1, id2, id3);
    return pl_test_summary("server_tools");
}
