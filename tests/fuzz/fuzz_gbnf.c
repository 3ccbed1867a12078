/*
 * libFuzzer target for the GBNF grammar engine (issue 16).
 *
 * The input up to its first NUL byte is a grammar; the rest is text fed to
 * it in chunks of 1..4 bytes (splitting UTF-8 characters the way tokens do).
 * Invariants (violations trap):
 *   - parsing succeeds or fails with a message starting "grammar " (with
 *     line:col) or "out of memory";
 *   - a refused chunk leaves the state unchanged: feeding the same bytes
 *     again is refused again, and the accepting flag does not change;
 *   - a clone behaves exactly like the original on every chunk;
 *   - text accepted in chunks is accepted in one piece from the start, with
 *     the same final accepting verdict (chunking must not matter).
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include "pocketllm.h"

#define REQUIRE(c) do { if (!(c)) __builtin_trap(); } while (0)

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    const uint8_t *nul = memchr(data, 0, size);
    size_t glen = nul ? (size_t)(nul - data) : size;
    const char *text = nul ? (const char *)nul + 1 : "";
    size_t tlen = nul ? size - glen - 1 : 0;
    if (tlen > 256) tlen = 256;
    pl_grammar *g = NULL;
    pl_status st = pl_grammar_from_gbnf(NULL, (const char *)data, glen, &g);
    if (st != PL_OK) {
        REQUIRE(!g);
        const char *m = pl_last_error();
        REQUIRE(!strncmp(m, "grammar ", 8) || !strcmp(m, "out of memory"));
        return 0;
    }
    pl_grammar *c = NULL;
    REQUIRE(pl_grammar_clone(g, &c) == PL_OK);
    size_t done = 0, pos = 0;
    while (pos < tlen) {
        size_t n = 1 + (size_t)((uint8_t)text[pos] % 4);
        if (pos + n > tlen) n = tlen - pos;
        bool acc = pl_grammar_is_accepting(g);
        pl_status a = pl_grammar_accept_text(g, text + pos, n);
        pl_status b = pl_grammar_accept_text(c, text + pos, n);
        REQUIRE((a == PL_OK) == (b == PL_OK));
        if (a != PL_OK) {
            REQUIRE(pl_grammar_is_accepting(g) == acc);
            REQUIRE(pl_grammar_accept_text(g, text + pos, n) != PL_OK);
            break;
        }
        REQUIRE(pl_grammar_is_accepting(g) == pl_grammar_is_accepting(c));
        pos += n;
        done = pos;
    }
    if (done) {
        REQUIRE(pl_grammar_reset(c) == PL_OK);
        REQUIRE(pl_grammar_accept_text(c, text, done) == PL_OK);
        REQUIRE(pl_grammar_is_accepting(c) == pl_grammar_is_accepting(g));
    }
    pl_grammar_free(c);
    pl_grammar_free(g);
    return 0;
}
