/*
 * Issue 16: the GBNF grammar engine.
 *   - parse errors carry line:column and a message; left recursion, undefined
 *     rules, a missing root are refused;
 *   - every operator, repetition bounds, character classes, escapes, '.';
 *   - UTF-8: multi-byte characters, text split inside a character;
 *   - a property test: on random grammars, the engine's full-match verdict on
 *     random strings equals an independent backtracking matcher's (written
 *     here, over the grammar's syntax tree, not the engine's compiled form);
 *   - tokens: the tiny Qwen3 vocabulary (byte-level BPE: byte tokens end
 *     inside characters), masks against per-token checks, generation at
 *     temperature 1 always matches, greedy with the argmax fast path equals
 *     greedy over the fully masked row; the 151k Qwen3 vocabulary mask.
 */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include "pocketllm.h"
#include "testutil.h"

static int full_match(const char *gbnf, const char *text, size_t len) {
    pl_grammar *g = NULL;
    if (pl_grammar_from_gbnf(NULL, gbnf, strlen(gbnf), &g) != PL_OK) {
        fprintf(stderr, "parse failed: %s\n%s\n", pl_last_error(), gbnf);
        return -1;
    }
    int ok = pl_grammar_accept_text(g, text, len) == PL_OK && pl_grammar_is_accepting(g);
    pl_grammar_free(g);
    return ok;
}
#define M(gr, s) full_match(gr, s, strlen(s))

static void expect_error(const char *gbnf, const char *needle) {
    pl_grammar *g = NULL;
    pl_status st = pl_grammar_from_gbnf(NULL, gbnf, strlen(gbnf), &g);
    CHECK(st != PL_OK && !g, "'%s' was accepted", gbnf);
    CHECK(strstr(pl_last_error(), needle) != NULL, "'%s': message '%s' lacks '%s'", gbnf, pl_last_error(), needle);
    pl_grammar_free(g);
}

static void test_parse_errors(void) {
    expect_error("root ::= \"abc", "grammar 1:14: unexpected end of input in a string literal");
    expect_error("root ::= [a-z", "grammar 1:10: unterminated character class");
    expect_error("root ::= x\n", "grammar 1:10: undefined rule 'x'");
    expect_error("a ::= \"x\"\n", "no 'root' rule");
    expect_error("root ::= \"a\"\nfoo = \"b\"\n", "grammar 2:5: expecting '::=' after the rule name 'foo'");
    expect_error("root ::= (\"a\"", "grammar 1:10: expecting ')'");
    expect_error("root ::= \"a\")", "grammar 1:13: unmatched ')'");
    expect_error("root ::= * \"a\"", "grammar 1:10: expecting an item before the repetition operator");
    expect_error("root ::= \"a\"{3,1}", "maximum below minimum");
    expect_error("root ::= \"a\"{x}", "grammar 1:14: expecting an integer");
    expect_error("root ::= \"\\q\"", "grammar 1:11: unknown escape");
    expect_error("root ::= \"\\x4\"", "expecting 2 hex digits");
    expect_error("root ::= root \"a\" | \"b\"", "left recursion in rule 'root'");
    expect_error("root ::= a\na ::= b? root \"x\"\nb ::= \"y\"", "left recursion");
    expect_error("root ::= []", "empty character class");
    expect_error("root ::= \"a\"\nroot ::= \"b\"", "defined twice");
    expect_error("", "no 'root' rule");
}

static void test_operators(void) {
    const char *g = "root ::= \"ab\" | \"c\" d\nd ::= [0-9]";
    CHECK(M(g, "ab") == 1 && M(g, "c7") == 1 && M(g, "c") == 0 && M(g, "abc") == 0 && M(g, "") == 0, "alternation");
    g = "root ::= (\"x\" | \"y\")* \"z\"";
    CHECK(M(g, "z") == 1 && M(g, "xyxz") == 1 && M(g, "xy") == 0 && M(g, "zz") == 0, "star + group");
    g = "root ::= \"a\"+";
    CHECK(M(g, "a") == 1 && M(g, "aaaa") == 1 && M(g, "") == 0, "plus");
    g = "root ::= \"a\"? \"b\"";
    CHECK(M(g, "b") == 1 && M(g, "ab") == 1 && M(g, "aab") == 0, "optional");
    g = "root ::= \"a\"{3}";
    CHECK(M(g, "aa") == 0 && M(g, "aaa") == 1 && M(g, "aaaa") == 0, "{3}");
    g = "root ::= \"a\"{2,}";
    CHECK(M(g, "a") == 0 && M(g, "aa") == 1 && M(g, "aaaaaaa") == 1, "{2,}");
    g = "root ::= \"a\"{1,3}";
    CHECK(M(g, "") == 0 && M(g, "a") == 1 && M(g, "aaa") == 1 && M(g, "aaaa") == 0, "{1,3}");
    g = "root ::= \"a\"{0,2} \"b\"";
    CHECK(M(g, "b") == 1 && M(g, "aab") == 1 && M(g, "aaab") == 0, "{0,2}");
    g = "root ::= (\"ab\"){2} [c]{0}";
    CHECK(M(g, "abab") == 1 && M(g, "ab") == 0 && M(g, "ababc") == 0, "group {2}, {0}");
    g = "root ::= [a-c_]+ [^a-z]";
    CHECK(M(g, "ab_cX") == 1 && M(g, "ab_ca") == 0 && M(g, "d1") == 0 && M(g, "a\n") == 1, "classes");
    g = "root ::= . . # a comment\n";
    CHECK(M(g, "xy") == 1 && M(g, "\xc3\xa9\n") == 1 && M(g, "x") == 0, "any char + comment");
    g = "root ::= \"\\n\\t\\\\\\\"\\x41\\u00e9\\U0001F600\" [\\]\\[]";
    CHECK(M(g, "\n\t\\\"A\xc3\xa9\xf0\x9f\x98\x80]") == 1, "escapes");
    g = "root ::=\n  \"{\" (\n    \"a\"\n    | \"b\"\n  )* \"}\"  # multi-line group\n";
    CHECK(M(g, "{abba}") == 1 && M(g, "{c}") == 0, "multi-line group");
    g = "root ::= item (\",\" item)*\nitem ::= [0-9]+ | \"[\" root? \"]\"";
    CHECK(M(g, "1,[2,[]],33") == 1 && M(g, "1,[2,[]") == 0, "recursion (not left)");
    g = "root ::= a b\na ::= \"x\"?\nb ::= \"y\"?";
    CHECK(M(g, "") == 1 && M(g, "xy") == 1 && M(g, "y") == 1 && M(g, "yx") == 0, "nullable rules");
}

static void test_utf8(void) {
    const char *g = "root ::= [\xc3\xa0-\xc3\xbf\xe4\xb8\x80-\xe9\xbe\xa5]+";  /* à-ÿ and CJK */
    CHECK(M(g, "\xc3\xa9\xe4\xb8\xad\xe6\x96\x87") == 1, "multi-byte class");
    CHECK(M(g, "e") == 0 && M(g, "\xc3") == 0, "ascii / incomplete rejected");
    CHECK(M(g, "\xc3\x80") == 0, "U+00C0 is outside");
    pl_grammar *gr = NULL;
    CHECK(pl_grammar_from_gbnf(NULL, g, strlen(g), &gr) == PL_OK, "parse");
    if (!gr) return;
    /* a character split across calls, as tokens split it */
    CHECK(pl_grammar_accept_text(gr, "\xe4", 1) == PL_OK, "lead byte of U+4E2D");
    CHECK(!pl_grammar_is_accepting(gr), "inside a character is not a complete match");
    CHECK(pl_grammar_accept_text(gr, "\xb8", 1) == PL_OK, "second byte");
    CHECK(pl_grammar_accept_text(gr, "\xad\xc3", 2) == PL_OK, "last byte + next lead");
    CHECK(pl_grammar_accept_text(gr, "\x41", 1) != PL_OK, "a non-continuation byte after a lead byte");
    CHECK(pl_grammar_accept_text(gr, "\xa9", 1) == PL_OK && pl_grammar_is_accepting(gr), "state kept after refusal");
    /* a lead byte whose every completion is outside the class */
    CHECK(pl_grammar_accept_text(gr, "\xc2", 1) != PL_OK, "U+0080..U+00BF cannot match");
    CHECK(pl_grammar_accept_text(gr, "\xf0", 1) != PL_OK, "4-byte lead cannot match");
    pl_grammar_free(gr);
    /* overlong forms and surrogates are not characters: a byte-level vocab
     * can spell '}' as F0 80 81 BD, which no UTF-8 reader accepts */
    g = "root ::= [}] | [^a]";
    CHECK(M(g, "}") == 1 && M(g, "\xf0\x80\x81\xbd") == 0 && M(g, "\xe0\x81\xbd") == 0 && M(g, "\xc1\xbd") == 0,
          "overlong");
    CHECK(M(g, "\xed\xa0\x80") == 0 && M(g, "\xf4\x90\x80\x80") == 0 && M(g, "\xf4\x8f\xbf\xbf") == 1,
          "surrogate / above U+10FFFF / U+10FFFF");
    g = "root ::= [^\xc3\xa9]";
    CHECK(M(g, "\xc3\xa8") == 1 && M(g, "\xc3\xa9") == 0 && M(g, "\xc3") == 0, "negated multi-byte");
}

/* ---- property test ---------------------------------------------------------
 * A random grammar as a tree; printed as GBNF for the engine and matched by
 * a backtracking matcher that returns every end position a node can reach. */

enum { N_LIT, N_CLASS, N_SEQ, N_ALT, N_REP, N_REF };
typedef struct node { int kind; char lit[4]; int nlit; char lo, hi; int neg; struct node *kid[3]; int nkid; int min, max; int ref; } node;
enum { MAXN = 4096, MAXLEN = 12, NRULES = 3 };
static node pool[MAXN];
static int npool;
static node *rules[NRULES];
static uint64_t rng = 88172645463325252ull;
static uint32_t rnd(uint32_t n) { rng ^= rng << 13; rng ^= rng >> 7; rng ^= rng << 17; return (uint32_t)(rng % n); }

static node *gen(int depth, int rule) {
    node *n = &pool[npool++];
    memset(n, 0, sizeof *n);
    int k = depth <= 0 ? (int)rnd(2) : (int)rnd(6);
    if (k == N_REF && rule + 1 >= NRULES) k = N_LIT;
    n->kind = k;
    switch (k) {
    case N_LIT: n->nlit = 1 + (int)rnd(2); for (int i = 0; i < n->nlit; i++) n->lit[i] = (char)('a' + rnd(3)); break;
    case N_CLASS: n->lo = (char)('a' + rnd(3)); n->hi = (char)(n->lo + rnd(2)); n->neg = rnd(4) == 0; break;
    case N_SEQ: case N_ALT: n->nkid = 2 + (int)rnd(2); for (int i = 0; i < n->nkid; i++) n->kid[i] = gen(depth - 1, rule); break;
    case N_REP: n->nkid = 1; n->kid[0] = gen(depth - 1, rule); n->min = (int)rnd(3); n->max = rnd(3) ? n->min + (int)rnd(3) : -1; break;
    case N_REF: n->ref = rule + 1 + (int)rnd(NRULES - rule - 1); break;
    }
    return n;
}

static void print_node(const node *n, char *buf, size_t cap) {
    size_t l = strlen(buf);
    switch (n->kind) {
    case N_LIT: snprintf(buf + l, cap - l, "\"%.*s\"", n->nlit, n->lit); break;
    case N_CLASS: snprintf(buf + l, cap - l, "[%s%c-%c]", n->neg ? "^" : "", n->lo, n->hi); break;
    case N_SEQ: case N_ALT:
        snprintf(buf + l, cap - l, "(");
        for (int i = 0; i < n->nkid; i++) {
            if (i) { l = strlen(buf); snprintf(buf + l, cap - l, n->kind == N_ALT ? " | " : " "); }
            print_node(n->kid[i], buf, cap);
        }
        l = strlen(buf); snprintf(buf + l, cap - l, ")");
        break;
    case N_REP:
        snprintf(buf + l, cap - l, "(");
        print_node(n->kid[0], buf, cap);
        l = strlen(buf);
        if (n->max < 0) snprintf(buf + l, cap - l, "){%d,}", n->min);
        else if (n->min == 0 && n->max == 1) snprintf(buf + l, cap - l, ")?");
        else snprintf(buf + l, cap - l, "){%d,%d}", n->min, n->max);
        break;
    case N_REF: snprintf(buf + l, cap - l, "r%d", n->ref); break;
    }
}

/* Sets bit e of *out for every end e such that n matches s[pos..e). */
static void ref_match(const node *n, const char *s, int len, int pos, uint32_t *out);
static void seq_from(const node *n, int i, const char *s, int len, int pos, uint32_t *out) {
    if (i == n->nkid) { *out |= 1u << pos; return; }
    uint32_t mid = 0;
    ref_match(n->kid[i], s, len, pos, &mid);
    for (int e = pos; e <= len; e++) if (mid >> e & 1) seq_from(n, i + 1, s, len, e, out);
}
static void rep_from(const node *n, int count, const char *s, int len, int pos, uint32_t *out) {
    if (count >= n->min) *out |= 1u << pos;
    if (n->max >= 0 && count >= n->max) return;
    uint32_t mid = 0;
    ref_match(n->kid[0], s, len, pos, &mid);
    for (int e = pos; e <= len; e++) {
        if (!(mid >> e & 1)) continue;
        if (e == pos && count >= n->min) continue;   /* empty iteration adds nothing */
        rep_from(n, count + 1, s, len, e, out);
    }
}
static void ref_match(const node *n, const char *s, int len, int pos, uint32_t *out) {
    switch (n->kind) {
    case N_LIT:
        if (pos + n->nlit <= len && !memcmp(s + pos, n->lit, (size_t)n->nlit)) *out |= 1u << (pos + n->nlit);
        break;
    case N_CLASS:
        if (pos < len && ((s[pos] >= n->lo && s[pos] <= n->hi) != n->neg)) *out |= 1u << (pos + 1);
        break;
    case N_SEQ: seq_from(n, 0, s, len, pos, out); break;
    case N_ALT: for (int i = 0; i < n->nkid; i++) ref_match(n->kid[i], s, len, pos, out); break;
    case N_REP: rep_from(n, 0, s, len, pos, out); break;
    case N_REF: ref_match(rules[n->ref], s, len, pos, out); break;
    }
}

static void test_property(void) {
    int n_grammars = 300, agree = 0, total = 0, n_match = 0;
    static char buf[1 << 16];
    for (int t = 0; t < n_grammars; t++) {
        npool = 0;
        for (int r = NRULES - 1; r >= 0; r--) rules[r] = gen(3, r);
        buf[0] = 0;
        for (int r = 0; r < NRULES; r++) {
            size_t l = strlen(buf);
            snprintf(buf + l, sizeof buf - l, r ? "r%d ::= " : "root ::= ", r);
            print_node(rules[r], buf, sizeof buf);
            l = strlen(buf);
            snprintf(buf + l, sizeof buf - l, "\n");
        }
        pl_grammar *g = NULL;
        if (pl_grammar_from_gbnf(NULL, buf, strlen(buf), &g) != PL_OK) {
            /* the only legal refusal: left recursion through a nullable repetition */
            CHECK(strstr(pl_last_error(), "left recursion"), "grammar refused: %s\n%s", pl_last_error(), buf);
            continue;
        }
        pl_grammar_free(g);
        for (int k = 0; k < 60; k++) {
            char s[MAXLEN + 1];
            int len = (int)rnd(MAXLEN + 1);
            for (int i = 0; i < len; i++) s[i] = (char)('a' + rnd(4));
            s[len] = 0;
            uint32_t ends = 0;
            ref_match(rules[0], s, len, 0, &ends);
            int want = (int)(ends >> len & 1);
            int got = full_match(buf, s, (size_t)len);
            total++;
            n_match += want;
            if (got == want) agree++;
            else if (total - agree <= 5) fprintf(stderr, "disagree on '%s': engine %d, reference %d\n%s", s, got, want, buf);
        }
    }
    CHECK(agree == total, "%d of %d verdicts differ", total - agree, total);
    CHECK(n_match > total / 50, "only %d of %d strings match: the test would not see a wrong 'yes'", n_match, total);
    printf("property: %d strings on random grammars, %d matching\n", total, n_match);
}

/* ---- tokens ------------------------------------------------------------- */

static int32_t find_token(pl_model *m, const char *bytes, size_t len) {
    char piece[64];
    for (int32_t id = 0; id < pl_model_n_vocab(m); id++) {
        size_t n = 0;
        if (pl_token_to_piece(m, id, false, piece, sizeof piece, &n) == PL_OK && n == len && !memcmp(piece, bytes, len)) return id;
    }
    return -1;
}

/* Mask from the trie walk == per-token pl_grammar_allows, for every token. */
static void check_mask_vs_allows(pl_grammar *g, int32_t nv, const char *what) {
    float *l = calloc((size_t)nv, sizeof *l);
    CHECK(pl_grammar_apply(g, l) == PL_OK, "apply");
    int bad = 0, allowed = 0;
    for (int32_t id = 0; id < nv; id++) {
        int a = l[id] == 0.0f, b = pl_grammar_allows(g, id);
        allowed += a;
        if (a != b && bad++ < 3) fprintf(stderr, "%s: token %d mask %d allows %d\n", what, id, a, b);
    }
    CHECK(!bad, "%s: %d tokens differ between the mask and pl_grammar_allows", what, bad);
    CHECK(allowed > 0, "%s: no token allowed", what);
    free(l);
}

static const char *gen_grammars[] = {
    "root ::= \"{\" ws \"\\\"a\\\":\" ws num (\",\" ws num){0,3} ws \"}\"\nnum ::= \"-\"? [0-9]{1,4}\nws ::= [ ]?",
    "root ::= [\xe4\xb8\x80-\xe9\xbe\xa5\xc3\xa0-\xc3\xbf]{2,6} \"!\"",   /* byte tokens split these characters */
    "root ::= (\"yes\" | \"no\" | \"maybe\") (\" \" [a-z]+)? \".\"",
    "root ::= \"\\\"\" [^\"\\\\\\x00-\\x1f]{0,20} \"\\\"\"",
};

static void test_tokens(void) {
    pl_model_params mp = pl_model_default_params();
    mp.n_threads = 1;
    pl_model *m = NULL;
    if (pl_model_load(pl_fixture("models/tiny-qwen3-f32.gguf"), &mp, &m) != PL_OK) {
        CHECK(0, "load: %s", pl_last_error());
        return;
    }
    int32_t nv = pl_model_n_vocab(m);
    /* a byte token ending inside a character */
    int32_t c3 = find_token(m, "\xc3", 1), a9 = find_token(m, "\xa9", 1), a = find_token(m, "a", 1);
    CHECK(c3 >= 0 && a9 >= 0 && a >= 0, "byte tokens present (%d %d %d)", c3, a9, a);
    pl_grammar *g = NULL;
    const char *ge = "root ::= \"\xc3\xa9\" \"a\"";
    CHECK(pl_grammar_from_gbnf(m, ge, strlen(ge), &g) == PL_OK, "parse");
    if (g && c3 >= 0 && a9 >= 0) {
        CHECK(pl_grammar_allows(g, c3) && !pl_grammar_allows(g, a9) && !pl_grammar_allows(g, a), "start");
        check_mask_vs_allows(g, nv, "before e-acute");
        CHECK(pl_grammar_accept(g, c3) == PL_OK, "accept 0xC3");
        CHECK(pl_grammar_allows(g, a9) && !pl_grammar_allows(g, c3) && !pl_grammar_allows(g, a), "inside the character");
        check_mask_vs_allows(g, nv, "inside e-acute");
        CHECK(pl_grammar_accept(g, a) != PL_OK, "'a' refused mid-character");
        CHECK(pl_grammar_accept(g, a9) == PL_OK && pl_grammar_accept(g, a) == PL_OK, "complete it");
        CHECK(pl_grammar_is_done(g) && pl_grammar_is_accepting(g), "done");
        int32_t eog = -1;
        for (int32_t id = 0; id < nv && eog < 0; id++) if (pl_token_is_eog(m, id)) eog = id;
        check_mask_vs_allows(g, nv, "at the end");
        CHECK(eog >= 0 && pl_grammar_allows(g, eog) && pl_grammar_accept(g, eog) == PL_OK, "end of generation");
        pl_grammar *c = NULL;
        CHECK(pl_grammar_reset(g) == PL_OK && pl_grammar_clone(g, &c) == PL_OK, "reset + clone");
        CHECK(c && pl_grammar_accept(c, c3) == PL_OK && pl_grammar_allows(g, c3) && !pl_grammar_allows(c, c3), "clones independent");
        pl_grammar_free(c);
    }
    pl_grammar_free(g);

    /* generation at temperature 1 always matches; masks agree with allows */
    pl_session *sess = NULL;
    CHECK(pl_session_create(m, &sess) == PL_OK, "session");
    float *logits = malloc((size_t)nv * sizeof *logits), *masked = malloc((size_t)nv * sizeof *masked);
    int32_t prompt[2] = {100, 200};
    int n_runs = 0, n_complete = 0;
    for (size_t gi = 0; gi < sizeof gen_grammars / sizeof *gen_grammars; gi++) {
        for (int seed = 0; seed < 6; seed++) {
            pl_grammar *gr = NULL, *check = NULL;
            const char *src = gen_grammars[gi];
            CHECK(pl_grammar_from_gbnf(m, src, strlen(src), &gr) == PL_OK, "grammar %zu: %s", gi, pl_last_error());
            CHECK(pl_grammar_from_gbnf(NULL, src, strlen(src), &check) == PL_OK, "text grammar");
            pl_sampler_params sp = pl_sampler_default_params();
            sp.temperature = seed < 5 ? 1.0f : 0.0f;
            sp.top_k = 0; sp.top_p = 1.0f; sp.min_p = 0.0f;
            sp.seed = (uint64_t)seed * 7919 + gi;
            pl_sampler *smp = NULL, *ref = NULL;
            pl_sampler_create(&sp, nv, &smp);
            pl_sampler_create(&sp, nv, &ref);
            pl_sampler_set_grammar(smp, gr);
            pl_grammar *shadow = NULL;
            pl_grammar_clone(gr, &shadow);
            pl_session_reset(sess);
            CHECK(pl_session_eval(sess, prompt, 2, logits) == PL_OK, "eval");
            char text[1024];
            size_t tn = 0;
            int ended = 0;
            for (int step = 0; step < 60; step++) {
                if (step < 3) check_mask_vs_allows(shadow, nv, "generation");
                /* greedy: the fast path must equal argmax over the masked row */
                memcpy(masked, logits, (size_t)nv * sizeof *masked);
                pl_grammar_apply(shadow, masked);
                int32_t want = sp.temperature <= 0 ? pl_sampler_sample(ref, masked) : -2;
                int32_t tok = pl_sampler_sample(smp, logits);
                CHECK(tok >= 0, "sample: %s", pl_last_error());
                if (tok < 0) break;
                if (want != -2) CHECK(tok == want, "greedy fast path chose %d, masked argmax %d", tok, want);
                CHECK(masked[tok] > -INFINITY, "sampled token %d is masked", tok);
                pl_grammar_accept(shadow, tok);
                if (pl_token_is_eog(m, tok)) { ended = 1; break; }
                size_t n = 0;
                pl_token_to_piece(m, tok, false, text + tn, sizeof text - tn, &n);
                tn += n;
                if (pl_session_eval(sess, &tok, 1, logits) != PL_OK) break;
            }
            n_runs++;
            CHECK(pl_grammar_accept_text(check, text, tn) == PL_OK, "grammar %zu seed %d: output '%.*s' leaves the grammar", gi, seed, (int)tn, text);
            if (ended) {
                n_complete++;
                CHECK(pl_grammar_is_accepting(check), "grammar %zu seed %d: ended on an incomplete '%.*s'", gi, seed, (int)tn, text);
            }
            if (seed == 0) printf("grammar %zu: '%.*s'%s\n", gi, (int)tn, text, ended ? "" : " (cut)");
            pl_grammar_free(shadow);
            pl_sampler_free(smp);
            pl_sampler_free(ref);
            pl_grammar_free(gr);
            pl_grammar_free(check);
        }
    }
    CHECK(n_complete >= n_runs / 2, "only %d of %d runs ended", n_complete, n_runs);
    free(logits);
    free(masked);
    pl_session_free(sess);
    pl_model_free(m);
}

/* The full Qwen3 vocabulary (151k): masks agree with per-token checks, and
 * their cost. */
static void test_big_vocab(void) {
    pl_model_params mp = pl_model_default_params();
    mp.vocab_only = true;
    pl_model *m = NULL;
    if (pl_model_load(pl_fixture("models/qwen3-vocab.gguf"), &mp, &m) != PL_OK) { CHECK(0, "load: %s", pl_last_error()); return; }
    const char *src = "root ::= \"{\\\"name\\\": \\\"\" [^\"]* \"\\\"}\"";
    clock_t t0 = clock();
    pl_grammar *g = NULL;
    CHECK(pl_grammar_from_gbnf(m, src, strlen(src), &g) == PL_OK, "parse");
    double build_ms = (double)(clock() - t0) * 1e3 / CLOCKS_PER_SEC;
    if (g) {
        int32_t nv = pl_model_n_vocab(m);
        check_mask_vs_allows(g, nv, "151k start");
        CHECK(pl_grammar_accept_text(g, "{\"name\": \"ab", 12) == PL_OK, "prefix");
        t0 = clock();
        float *l = calloc((size_t)nv, sizeof *l);
        pl_grammar_apply(g, l);
        double mask_ms = (double)(clock() - t0) * 1e3 / CLOCKS_PER_SEC;
        check_mask_vs_allows(g, nv, "151k in a string");
        printf("151k vocab: build %.1f ms, string-state mask %.1f ms\n", build_ms, mask_ms);
        free(l);
    }
    /* A second grammar on the same model shares the first one's vocabulary
     * trie (model.h: grammar_vocab), and both outlive the model: each holds a
     * reference (ASan catches a use after free here). */
    const char *src2 = "root ::= \"[\" [0-9]+ \"]\"";
    pl_grammar *g2 = NULL;
    t0 = clock();
    CHECK(pl_grammar_from_gbnf(m, src2, strlen(src2), &g2) == PL_OK, "second grammar");
    const double build2_ms = (double)(clock() - t0) * 1e3 / CLOCKS_PER_SEC;
    const int32_t nv = pl_model_n_vocab(m);
    pl_model_free(m);
    if (g && g2) {
        check_mask_vs_allows(g, nv, "151k in a string, model freed");
        check_mask_vs_allows(g2, nv, "151k second grammar, model freed");
        CHECK(pl_grammar_accept_text(g2, "[12", 3) == PL_OK && !pl_grammar_is_accepting(g2), "second grammar runs");
        CHECK(pl_grammar_accept_text(g2, "]", 1) == PL_OK && pl_grammar_is_accepting(g2), "second grammar accepts");
        printf("151k vocab: second grammar (shared trie) %.1f ms\n", build2_ms);
    }
    pl_grammar_free(g);
    pl_grammar_free(g2);
}

/* An ambiguous grammar: "." root nests at every character, so the live
 * stacks grow with the text. Matching must stop with a clear error at the
 * stack limit (fuzz_gbnf once hung here), leaving the state as it was, and
 * a short text must still match. */
static void test_ambiguous(void) {
    const char *gb = "root ::= (\"ab\" | [c-e]+ | . root)* \"z\"{0,3} x?\nx ::= [^\\n]";
    pl_grammar *g = NULL;
    CHECK(pl_grammar_from_gbnf(NULL, gb, strlen(gb), &g) == PL_OK, "parse: %s", pl_last_error());
    if (!g) return;
    CHECK(pl_grammar_accept_text(g, "abcde", 5) == PL_OK, "a short text: %s", pl_last_error());
    char text[2048];
    for (size_t i = 0; i < sizeof text; i++) text[i] = "abcdez"[i % 6];
    pl_status st = PL_OK;
    size_t at = 0;
    for (; at < sizeof text && st == PL_OK; at += 4) st = pl_grammar_accept_text(g, text + at, 4);
    CHECK(st == PL_ERR_UNSUPPORTED && strstr(pl_last_error(), "too ambiguous"), "status %d after %zu bytes: %s", st, at,
          pl_last_error());
    bool acc = pl_grammar_is_accepting(g);
    CHECK(pl_grammar_accept_text(g, text + at - 4, 4) == PL_ERR_UNSUPPORTED && pl_grammar_is_accepting(g) == acc,
          "a refused step changes nothing");
    CHECK(pl_grammar_reset(g) == PL_OK && pl_grammar_accept_text(g, "ab", 2) == PL_OK, "reset, then match again");
    pl_grammar_free(g);
}

/* Nullable alternatives: each "a" below can match nothing along two paths
 * (the inner and the outer "?"), so the start of "q" a{40} "x" is reached
 * along 2^40 expansion paths that all end in the same few stacks. The
 * matcher expands each distinct stack once per step (fuzz_gbnf hit a 10 s
 * timeout on a grammar like it), so this matches at once -- and must match:
 * the grammar is not too ambiguous, only redundant. */
static void test_nullable_paths(void) {
    char gb[512];
    snprintf(gb, sizeof gb, "root ::= \"q\" %s \"x\"\na ::= (\"y\"?)?",
             "a a a a a a a a a a a a a a a a a a a a a a a a a a a a a a a a a a a a a a a a");
    pl_grammar *g = NULL;
    CHECK(pl_grammar_from_gbnf(NULL, gb, strlen(gb), &g) == PL_OK, "parse: %s", pl_last_error());
    if (!g) return;
    CHECK(pl_grammar_accept_text(g, "q", 1) == PL_OK, "q: %s", pl_last_error());
    CHECK(!pl_grammar_is_accepting(g), "q alone is not a match");
    CHECK(pl_grammar_accept_text(g, "yyy", 3) == PL_OK, "yyy: %s", pl_last_error());
    CHECK(pl_grammar_accept_text(g, "x", 1) == PL_OK && pl_grammar_is_accepting(g), "x ends it: %s", pl_last_error());
    CHECK(pl_grammar_reset(g) == PL_OK && pl_grammar_accept_text(g, "qx", 2) == PL_OK && pl_grammar_is_accepting(g),
          "qx: %s", pl_last_error());
    char many[48] = "q";
    memset(many + 1, 'y', 41);   /* one y more than 40 a's can take */
    many[42] = 0;
    CHECK(pl_grammar_reset(g) == PL_OK && pl_grammar_accept_text(g, many, 42) != PL_OK, "41 y's are refused");
    pl_grammar_free(g);
}

int main(void) {
    test_nullable_paths();
    test_ambiguous();
    test_parse_errors();
    test_operators();
    test_utf8();
    test_property();
    test_tokens();
    test_big_vocab();
    return pl_test_summary("test_grammar");
}
