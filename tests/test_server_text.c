/* Unit tests of the server's text pipeline (tools/pocketllm/server_text.c):
 * stop strings across token boundaries, UTF-8 hold-back, and the
 * <think>...</think> reasoning split, fed in every possible chunking. The
 * tiny fixture models generate gibberish, so these cases cannot be reached
 * through the HTTP tests. */
#include "testutil.h"
#include "../tools/pocketllm/server_text.c"

/* Feeds text in pieces of `step` bytes; returns 1 if a stop string hit. */
static int run(pl_srv_text *t, const char *text, size_t step) {
    size_t n = strlen(text);
    for (size_t i = 0; i < n; i += step) {
        size_t k = n - i < step ? n - i : step;
        if (pl_srv_text_push(t, text + i, k) == 1) { pl_srv_text_finish(t); return 1; }
    }
    pl_srv_text_finish(t);
    return 0;
}

static void check_case(const char *name, const char *text, const char *const *stops, size_t n_stops, bool reasoning,
                       bool think_open, const char *want_content, const char *want_reasoning, int want_stop) {
    for (size_t step = 1; step <= strlen(text) + 1; step++) {
        pl_srv_text t;
        pl_srv_text_init(&t, stops, n_stops, reasoning, think_open);
        int hit = run(&t, text, step);
        const char *c = t.content.p ? t.content.p : "", *r = t.reasoning.p ? t.reasoning.p : "";
        CHECK(hit == want_stop, "%s (step %zu): stop %d, want %d", name, step, hit, want_stop);
        CHECK(!strcmp(c, want_content), "%s (step %zu): content [%s], want [%s]", name, step, c, want_content);
        CHECK(!strcmp(r, want_reasoning), "%s (step %zu): reasoning [%s], want [%s]", name, step, r, want_reasoning);
        pl_srv_text_free(&t);
    }
}

/* While streaming, nothing of a stop string may ever be released. */
static void check_holdback(void) {
    const char *stops[] = {"STOP"};
    pl_srv_text t;
    pl_srv_text_init(&t, stops, 1, false, false);
    pl_srv_text_push(&t, "abc ST", 6);
    CHECK(t.content.n == 4 && !memcmp(t.content.p, "abc ", 4), "held back: [%s]", t.content.p);
    pl_srv_text_push(&t, "O", 1);
    CHECK(t.content.n == 4, "still held: [%s]", t.content.p);
    pl_srv_text_push(&t, "x", 1);
    CHECK(!strcmp(t.content.p, "abc STOx"), "released after mismatch: [%s]", t.content.p);
    pl_srv_text_free(&t);

    /* An incomplete UTF-8 sequence is never released; a complete one is. */
    pl_srv_text_init(&t, NULL, 0, false, false);
    pl_srv_text_push(&t, "a\xE2\x82", 3);
    CHECK(t.content.n == 1, "partial UTF-8 held: %zu bytes out", t.content.n);
    pl_srv_text_push(&t, "\xAC", 1);
    CHECK(!strcmp(t.content.p, "a\xE2\x82\xAC"), "euro sign released");
    /* Invalid bytes are not held, they become U+FFFD. */
    pl_srv_text_push(&t, "\xFF", 1);
    CHECK(!strcmp(t.content.p, "a\xE2\x82\xAC\xEF\xBF\xBD"), "invalid byte replaced");
    /* A truncated sequence at the very end becomes U+FFFD too. */
    pl_srv_text_push(&t, "\xF0\x9F", 2);
    pl_srv_text_finish(&t);
    CHECK(t.content.n == 1 + 3 + 3 + 3 + 3, "trailing partial replaced (%zu bytes)", t.content.n);
    pl_srv_text_free(&t);

    /* Reasoning: a partial "</think>" is held while streaming. */
    pl_srv_text_init(&t, NULL, 0, true, false);
    pl_srv_text_push(&t, "<think>\nabc</th", 15);
    CHECK(t.reasoning.n == 3 && !memcmp(t.reasoning.p, "abc", 3), "reasoning so far [%s]",
          t.reasoning.p ? t.reasoning.p : "");
    CHECK(t.content.n == 0, "no content yet");
    pl_srv_text_push(&t, "ink>\n\nanswer", 12);
    CHECK(!strcmp(t.content.p, "answer"), "content [%s]", t.content.p ? t.content.p : "");
    pl_srv_text_free(&t);
}

static void check_utf8(void) {
    CHECK(pl_srv_utf8_complete("ab", 2) == 2, "ascii");
    CHECK(pl_srv_utf8_complete("a\xC3", 2) == 1, "2-byte lead held");
    CHECK(pl_srv_utf8_complete("a\xC3\xA9", 3) == 3, "2-byte complete");
    CHECK(pl_srv_utf8_complete("\xF0\x9F\x98", 3) == 0, "4-byte partial held");
    CHECK(pl_srv_utf8_complete("\xF0\x9F\x98\x80", 4) == 4, "4-byte complete");
    CHECK(pl_srv_utf8_complete("a\x80", 2) == 2, "stray continuation not held");
    pl_srv_buf b = {0};
    pl_srv_utf8_sanitize(&b, "x\xC0\xAFy\xED\xA0\x80z", 8);
    CHECK(!strcmp(b.p, "x\xEF\xBF\xBD\xEF\xBF\xBDy\xEF\xBF\xBD\xEF\xBF\xBD\xEF\xBF\xBDz"), "overlong and surrogate");
    pl_srv_buf_free(&b);
}

int main(void) {
    const char *s1[] = {"END"};
    const char *s2[] = {"xyz", "lo w"};
    check_case("no stops", "hello world", NULL, 0, false, false, "hello world", "", 0);
    check_case("stop inside", "hello END world", s1, 1, false, false, "hello ", "", 1);
    check_case("stop at start", "ENDx", s1, 1, false, false, "", "", 1);
    check_case("partial stop at end", "hello EN", s1, 1, false, false, "hello EN", "", 0);
    check_case("earliest of two", "hello world xyz", s2, 2, false, false, "hel", "", 1);
    check_case("think split", "<think>\nplan\n</think>\n\nanswer", NULL, 0, true, false, "answer", "plan", 0);
    check_case("think, no answer yet", "<think>\nplan more\n", NULL, 0, true, false, "", "plan more", 0);
    check_case("no think", "just text", NULL, 0, true, false, "just text", "", 0);
    check_case("leading space then think", " <think>a</think>b", NULL, 0, true, false, "b", "a", 0);
    check_case("think not at start", "a <think>b</think>", NULL, 0, true, false, "a <think>b</think>", "", 0);
    check_case("forced open", "plan\n</think>\n\nok", NULL, 0, true, true, "ok", "plan", 0);
    check_case("newlines inside reasoning", "<think>\na\n\nb\n</think>c", NULL, 0, true, false, "c", "a\n\nb", 0);
    check_case("reasoning off", "<think>x</think>y", NULL, 0, false, false, "<think>x</think>y", "", 0);
    check_case("stop inside reasoning", "<think>abENDcd</think>e", s1, 1, true, false, "", "ab", 1);
    check_case("lt in content", "<b>bold</b>", NULL, 0, true, false, "<b>bold</b>", "", 0);
    check_holdback();
    check_utf8();
    return pl_test_summary("server_text");
}
