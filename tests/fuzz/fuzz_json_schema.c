/*
 * libFuzzer target for the JSON schema -> grammar compiler (issue 16).
 * The input is a schema. Invariants (violations trap): compilation either
 * fails with a message starting "json schema" (or "out of memory"), or its
 * GBNF parses (the compiler never emits a grammar the parser refuses) and
 * the start state exists.
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include "pocketllm.h"

#define REQUIRE(c) do { if (!(c)) __builtin_trap(); } while (0)

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (size > 8192) return 0;
    char *gbnf = NULL;
    size_t glen = 0;
    pl_status st = pl_json_schema_to_gbnf((const char *)data, size, &gbnf, &glen);
    if (st != PL_OK) {
        const char *m = pl_last_error();
        REQUIRE(!gbnf);
        REQUIRE(!strncmp(m, "json schema", 11) || !strcmp(m, "out of memory"));
        return 0;
    }
    pl_grammar *g = NULL;
    st = pl_grammar_from_gbnf(NULL, gbnf, glen, &g);
    /* legal refusals: a left-recursive $ref cycle ({"$ref":"#"}), and a
     * start state with more parse stacks than the matcher bounds (nested
     * pattern quantifiers such as ((a?){99}){99}) */
    REQUIRE(st == PL_OK || strstr(pl_last_error(), "left recursion") || strstr(pl_last_error(), "grammar: too ambiguous"));
    pl_grammar_free(g);
    pl_free(gbnf);
    return 0;
}
