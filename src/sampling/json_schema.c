/*
 * JSON schema -> GBNF, in the manner of llama.cpp's json_schema_to_grammar:
 * each subschema becomes a rule; objects list required properties in the
 * schema's order, then optional ones (each may be skipped), then additional
 * ones; $ref targets become named rules, so recursive schemas are recursive
 * rules. Whitespace is at most one space between tokens (valid JSON, and
 * short outputs).
 *
 * Every keyword is either enforced or an annotation with no effect on
 * validity (title, description, ...); anything else fails with
 * PL_ERR_UNSUPPORTED naming the keyword, so a schema is never silently
 * loosened. Known looseness, documented here: oneOf is compiled like anyOf
 * (exclusivity is not checked), and an additional property may repeat the
 * name of a declared one.
 */
#include "sampling/grammar.h"
#include "core/status.h"
#include <jansson.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MAX_DEPTH 64
#define GBNF_MAX_COUNT 4096      /* largest m, n in GBNF {m,n} (gbnf_parse.c MAX_REPEAT) */
#define SCHEMA_MAX_COUNT 65536   /* largest minLength/maxLength/minItems/maxItems */

typedef struct sb { char *p; size_t n, cap; int oom; } sb;

static void sb_addn(sb *b, const char *s, size_t n) {
    if (b->oom) return;
    if (b->n + n + 1 > b->cap) {
        size_t cap = b->cap ? b->cap : 256;
        while (cap < b->n + n + 1) cap *= 2;
        char *q = realloc(b->p, cap);
        if (!q) { b->oom = 1; return; }
        b->p = q;
        b->cap = cap;
    }
    memcpy(b->p + b->n, s, n);
    b->n += n;
    b->p[b->n] = 0;
}
static void sb_add(sb *b, const char *s) { sb_addn(b, s, strlen(s)); }
static void sb_addf(sb *b, const char *fmt, ...) PL_PRINTF(2, 3);
static void sb_addf(sb *b, const char *fmt, ...) {
    char tmp[512];
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(tmp, sizeof tmp, fmt, ap);
    va_end(ap);
    if (n < 0) return;
    if ((size_t)n < sizeof tmp) { sb_addn(b, tmp, (size_t)n); return; }
    char *big = malloc((size_t)n + 1);
    if (!big) { b->oom = 1; return; }
    va_start(ap, fmt);
    vsnprintf(big, (size_t)n + 1, fmt, ap);
    va_end(ap);
    sb_addn(b, big, (size_t)n);
    free(big);
}

typedef struct comp {
    json_t *root;
    char **names, **bodies;
    size_t n, cap;
    char *ref_str[256];   /* $ref targets seen, and their rule */
    size_t ref_rule[256], n_refs;
    int depth;
    pl_status st;
    char msg[300];
} comp;

static void fail(comp *c, pl_status st, const char *fmt, ...) PL_PRINTF(3, 4);
static void fail(comp *c, pl_status st, const char *fmt, ...) {
    if (c->st != PL_OK) return;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(c->msg, sizeof c->msg, fmt, ap);
    va_end(ap);
    c->st = st;
}

static int find_rule(comp *c, const char *name) {
    for (size_t i = 0; i < c->n; i++) if (!strcmp(c->names[i], name)) return (int)i;
    return -1;
}

/* Adds rule `base` (made a valid name, made unique unless the body is the
 * same) and returns its name (owned by c). body may be NULL: reserved, to
 * be set later (recursive $refs). */
static const char *add_rule(comp *c, const char *base, const char *body) {
    if (c->st != PL_OK) return "x";
    char name[200];
    size_t k = 0;
    for (const char *s = base; *s && k < 150; s++)
        name[k++] = ((*s >= 'a' && *s <= 'z') || (*s >= 'A' && *s <= 'Z') || (*s >= '0' && *s <= '9')) ? *s : '-';
    if (!k) name[k++] = 'r';
    name[k] = 0;
    char uniq[220];
    snprintf(uniq, sizeof uniq, "%s", name);
    for (int i = 1;; i++) {
        int at = find_rule(c, uniq);
        if (at < 0) break;
        if (body && c->bodies[at] && !strcmp(c->bodies[at], body)) return c->names[at];
        snprintf(uniq, sizeof uniq, "%s%d", name, i);
    }
    if (c->n == c->cap) {
        size_t cap = c->cap ? c->cap * 2 : 32;
        char **nn = realloc(c->names, cap * sizeof *nn);
        if (nn) c->names = nn;
        char **bb = realloc(c->bodies, cap * sizeof *bb);
        if (bb) c->bodies = bb;
        if (!nn || !bb) { fail(c, PL_ERR_NO_MEMORY, "out of memory"); return "x"; }
        c->cap = cap;
    }
    c->names[c->n] = strdup(uniq);
    c->bodies[c->n] = body ? strdup(body) : NULL;
    if (!c->names[c->n] || (body && !c->bodies[c->n])) { fail(c, PL_ERR_NO_MEMORY, "out of memory"); return "x"; }
    return c->names[c->n++];
}

/* Primitive rules, added on first use. */
static const char *prim(comp *c, const char *name) {
    static const char *const defs[][2] = {
        {"space", "\" \"?"},
        /* \u escapes: any code point but U+0000 and lone surrogates (a
         * high one must be followed by a low one), which JSON parsers
         * (jansson, the server's tool-call parser) refuse */
        {"char", "[^\"\\\\\\x7F\\x00-\\x1F] | [\\\\] ([\"\\\\/bfnrt] | \"u\" ( "
                 "\"0\" ([1-9a-fA-F] [0-9a-fA-F]{2} | \"0\" ([1-9a-fA-F] [0-9a-fA-F] | \"0\" [1-9a-fA-F])) "
                 "| [1-9a-cA-CeEfF] [0-9a-fA-F]{3} | [dD] [0-7] [0-9a-fA-F]{2} "
                 "| [dD] [89abAB] [0-9a-fA-F]{2} [\\\\] \"u\" [dD] [c-fC-F] [0-9a-fA-F]{2} ))"},
        {"string", "\"\\\"\" char* \"\\\"\" space"},
        {"boolean", "(\"true\" | \"false\") space"},
        {"null", "\"null\" space"},
        {"integral-part", "[0] | [1-9] [0-9]{0,15}"},
        {"decimal-part", "[0-9]{1,16}"},
        {"integer", "(\"-\"? integral-part) space"},
        {"number", "(\"-\"? integral-part) (\".\" decimal-part)? ([eE] [-+]? integral-part)? space"},
        {"value", "object | array | string | number | boolean | null"},
        {"object", "\"{\" space ( string \":\" space value (\",\" space string \":\" space value)* )? \"}\" space"},
        {"array", "\"[\" space ( value (\",\" space value)* )? \"]\" space"},
        /* year 0001..9999: RFC 3339's 4DIGIT admits 0000, which no date
         * library (Python's date, jsonschema's check) accepts */
        {"date", "([1-9] [0-9]{3} | \"0\" ([1-9] [0-9]{2} | \"0\" ([1-9] [0-9] | \"0\" [1-9]))) \"-\" ( (\"0\" [13578] | \"1\" [02]) \"-\" (\"0\" [1-9] | [12] [0-9] | \"3\" [01]) "
                 "| (\"0\" [469] | \"11\") \"-\" (\"0\" [1-9] | [12] [0-9] | \"30\") "
                 "| \"02-\" (\"0\" [1-9] | \"1\" [0-9] | \"2\" [0-8]) )"},
        {"time", "([01] [0-9] | \"2\" [0-3]) \":\" [0-5] [0-9] \":\" [0-5] [0-9] (\".\" [0-9]{1,6})? "
                 "(\"Z\" | [+-] ([01] [0-9] | \"2\" [0-3]) \":\" [0-5] [0-9])"},
        {"date-time", "date \"T\" time"},
        {"uuid", "[0-9a-fA-F]{8} \"-\" [0-9a-fA-F]{4} \"-\" [0-9a-fA-F]{4} \"-\" [0-9a-fA-F]{4} \"-\" [0-9a-fA-F]{12}"},
    };
    static const char *const deps[][4] = {
        {"string", "char", "space", NULL}, {"boolean", "space", NULL}, {"null", "space", NULL},
        {"integer", "integral-part", "space", NULL}, {"number", "integral-part", "decimal-part", "space"},
        {"value", "object", "array", NULL}, {"object", "string", "value", "space"}, {"array", "value", "space", NULL},
        {"value", "string", "number", NULL}, {"value", "boolean", "null", NULL}, {"date-time", "date", "time", NULL},
    };
    /* after a failure add_rule adds nothing, so the dependency walk below
     * would never find what it added and recurse forever */
    if (c->st != PL_OK) return "x";
    if (find_rule(c, name) >= 0) return name;
    for (size_t i = 0; i < sizeof defs / sizeof *defs; i++) {
        if (strcmp(defs[i][0], name)) continue;
        const char *r = add_rule(c, name, defs[i][1]);
        for (size_t d = 0; d < sizeof deps / sizeof *deps; d++)
            if (!strcmp(deps[d][0], name))
                for (int k = 1; k < 4 && deps[d][k]; k++) prim(c, deps[d][k]);
        return r;
    }
    fail(c, PL_ERR_INTERNAL, "no primitive '%s'", name);
    return "x";
}

/* A GBNF string literal of bytes s. */
static void lit(sb *b, const char *s, size_t n) {
    sb_add(b, "\"");
    for (size_t i = 0; i < n; i++) {
        unsigned char ch = (unsigned char)s[i];
        if (ch == '"' || ch == '\\') { char e[3] = {'\\', (char)ch, 0}; sb_add(b, e); }
        else if (ch == '\n') sb_add(b, "\\n");
        else if (ch == '\r') sb_add(b, "\\r");
        else if (ch == '\t') sb_add(b, "\\t");
        else if (ch < 0x20) sb_addf(b, "\\x%02X", ch);
        else sb_addn(b, (const char *)&ch, 1);
    }
    sb_add(b, "\"");
}

/* The literal for a JSON value (compact serialization) followed by space. */
static void const_lit(comp *c, sb *b, json_t *v) {
    char *s = json_dumps(v, JSON_COMPACT | JSON_ENCODE_ANY);
    if (!s) { fail(c, PL_ERR_NO_MEMORY, "out of memory"); return; }
    lit(b, s, strlen(s));
    free(s);
    sb_add(b, " ");
    sb_add(b, prim(c, "space"));
}

static const char *visit(comp *c, json_t *s, const char *name);

/* ---- integer ranges ------------------------------------------------------ */

/* Digit strings of length n (no leading zero unless n == 1) in [lo, hi],
 * lo and hi as n-digit strings. */
static void digits_range(sb *b, const char *lo, const char *hi, size_t n) {
    if (n == 0) { sb_add(b, "\"\""); return; }
    /* the full range is one class: without this shortcut both halves below
     * recurse again and the grammar doubles per digit (2^15 alternatives for
     * a 15-digit bound, found by fuzz_json_schema) */
    if (strspn(lo, "0") >= n && strspn(hi, "9") >= n) { sb_addf(b, "[0-9]{%zu}", n); return; }
    if (lo[0] == hi[0]) {
        sb_addf(b, "[%c] ", lo[0]);
        if (n > 1) { sb_add(b, "("); digits_range(b, lo + 1, hi + 1, n - 1); sb_add(b, ")"); }
        else sb_add(b, "\"\"");
        return;
    }
    char nines[24], zeros[24];
    memset(nines, '9', n - 1); nines[n - 1] = 0;
    memset(zeros, '0', n - 1); zeros[n - 1] = 0;
    sb_add(b, "(");
    /* lo[0] followed by >= lo[1..] */
    sb_addf(b, "[%c] ", lo[0]);
    if (n > 1) { sb_add(b, "("); digits_range(b, lo + 1, nines, n - 1); sb_add(b, ")"); }
    if (lo[0] + 1 <= hi[0] - 1) {
        sb_addf(b, " | [%c-%c]", lo[0] + 1, hi[0] - 1);
        if (n > 1) sb_addf(b, " [0-9]{%zu}", n - 1);
    }
    sb_addf(b, " | [%c] ", hi[0]);
    if (n > 1) { sb_add(b, "("); digits_range(b, zeros, hi + 1, n - 1); sb_add(b, ")"); }
    sb_add(b, ")");
}

/* Non-negative decimal numbers in [lo, hi]; hi < 0: unbounded. */
static void nonneg_range(sb *b, long long lo, long long hi) {
    char ls[24], hs[24];
    int first = 1;
    sb_add(b, "(");
    for (int len = 1; len <= 19; len++) {
        long long pmin = 1, pmax;
        for (int i = 1; i < len; i++) pmin *= 10;
        if (len == 1) pmin = 0;
        pmax = len == 19 ? 9223372036854775807LL : (pmin ? pmin * 10 - 1 : 9);
        long long a = lo > pmin ? lo : pmin, z = (hi >= 0 && hi < pmax) ? hi : pmax;
        if (a > z) continue;
        if (hi < 0 && a == pmin && len > 1) {
            /* every number of this length and more */
            sb_addf(b, "%s[1-9] [0-9]{%d,}", first ? "" : " | ", len - 1);
            first = 0;
            break;
        }
        snprintf(ls, sizeof ls, "%lld", a);
        snprintf(hs, sizeof hs, "%lld", z);
        sb_add(b, first ? "" : " | ");
        digits_range(b, ls, hs, strlen(ls));
        first = 0;
        if (hi < 0 && z == pmax && len < 19) {
            sb_addf(b, " | [1-9] [0-9]{%d,}", len);
            break;
        }
        if (hi >= 0 && z == hi) break;
    }
    if (first) sb_add(b, "\"\"");
    sb_add(b, ")");
}

static void int_range(comp *c, sb *b, int has_lo, long long lo, int has_hi, long long hi) {
    if (has_lo && has_hi && lo > hi) { fail(c, PL_ERR_INVALID_ARG, "json schema: minimum %lld above maximum %lld", lo, hi); return; }
    if (has_lo && lo < -999999999999999999LL) has_lo = 0;
    if (has_hi && hi > 999999999999999999LL) has_hi = 0;
    sb_add(b, "(");
    int alt = 0;
    /* negative part: -[max(1,-hi) .. -lo] */
    if (!has_lo || lo < 0) {
        long long nlo = has_hi && hi < 0 ? -hi : 1, nhi = has_lo ? -lo : -1;
        sb_add(b, "\"-\" ");
        nonneg_range(b, nlo, nhi);
        alt = 1;
    }
    if (!has_hi || hi >= 0) {
        if (alt) sb_add(b, " | ");
        nonneg_range(b, has_lo && lo > 0 ? lo : 0, has_hi ? hi : -1);
    }
    sb_add(b, ") ");
    sb_add(b, prim(c, "space"));
}

/* ---- regex patterns ------------------------------------------------------- */

typedef struct rx { comp *c; const char *p, *end; } rx;

static void rx_alt(rx *r, sb *b, int depth);

/* A class body in GBNF of one escape like \d, or a single char. */
static int rx_escape_class(char e, sb *b) {
    switch (e) {
    case 'd': sb_add(b, "0-9"); return 1;
    case 'w': sb_add(b, "a-zA-Z0-9_"); return 1;
    case 's': sb_add(b, " \\t"); return 1;   /* \n \r etc. need JSON escapes: not generated */
    default: return 0;
    }
}

static void rx_char_lit(rx *r, sb *b, unsigned char ch) {
    if (ch == '"' || ch == '\\' || ch < 0x20) {
        fail(r->c, PL_ERR_UNSUPPORTED, "json schema: pattern: the character 0x%02X needs a JSON escape (unsupported)", ch);
        return;
    }
    char s[2] = {(char)ch, 0};
    lit(b, s, 1);
}

static void rx_class_char(rx *r, sb *b, unsigned char ch) {
    if (ch == '"' || ch == '\\' || ch < 0x20) {
        fail(r->c, PL_ERR_UNSUPPORTED, "json schema: pattern: the character 0x%02X in a class needs a JSON escape (unsupported)", ch);
        return;
    }
    if (ch == ']' || ch == '[' || ch == '-' || ch == '^') sb_addf(b, "\\x%02X", ch);
    else sb_addn(b, (const char *)&ch, 1);
}

static void rx_atom(rx *r, sb *b, int depth) {
    char ch = *r->p;
    if (ch == '(') {
        r->p++;
        if (r->p + 1 < r->end && r->p[0] == '?' && r->p[1] == ':') r->p += 2;
        else if (r->p < r->end && *r->p == '?') { fail(r->c, PL_ERR_UNSUPPORTED, "json schema: pattern: lookaround / named groups are unsupported"); return; }
        sb_add(b, "(");
        rx_alt(r, b, depth + 1);
        sb_add(b, ")");
        if (r->p >= r->end || *r->p != ')') { fail(r->c, PL_ERR_INVALID_ARG, "json schema: pattern: missing ')'"); return; }
        r->p++;
    } else if (ch == '[') {
        r->p++;
        int neg = 0;
        if (r->p < r->end && *r->p == '^') { neg = 1; r->p++; }
        sb_add(b, neg ? "[^\"\\\\\\x00-\\x1F" : "[");
        int first = 1;
        while (r->p < r->end && (*r->p != ']' || first)) {
            first = 0;
            unsigned char a = (unsigned char)*r->p++;
            if (a == '\\' && r->p < r->end) {
                char e = *r->p++;
                if (rx_escape_class(e, b)) continue;
                a = (unsigned char)(e == 'n' ? '\n' : e == 't' ? '\t' : e);
            }
            rx_class_char(r, b, a);
            if (r->p + 1 < r->end && *r->p == '-' && r->p[1] != ']') {
                r->p++;
                unsigned char z = (unsigned char)*r->p++;
                if (z == '\\' && r->p < r->end) z = (unsigned char)*r->p++;
                sb_add(b, "-");
                rx_class_char(r, b, z);
            }
        }
        if (r->p >= r->end) { fail(r->c, PL_ERR_INVALID_ARG, "json schema: pattern: missing ']'"); return; }
        r->p++;
        sb_add(b, "]");
    } else if (ch == '.') {
        r->p++;
        sb_add(b, prim(r->c, "char"));
    } else if (ch == '\\') {
        r->p++;
        if (r->p >= r->end) { fail(r->c, PL_ERR_INVALID_ARG, "json schema: pattern ends in '\\'"); return; }
        char e = *r->p++;
        if (e == 'd' || e == 'w' || e == 's') { sb_add(b, "["); rx_escape_class(e, b); sb_add(b, "]"); }
        else if (e == 'D' || e == 'W' || e == 'S' || e == 'b' || e == 'B' || (e >= '1' && e <= '9'))
            fail(r->c, PL_ERR_UNSUPPORTED, "json schema: pattern: '\\%c' is unsupported", e);
        else rx_char_lit(r, b, (unsigned char)e);
    } else {
        r->p++;
        rx_char_lit(r, b, (unsigned char)ch);
    }
}

static void rx_seq(rx *r, sb *b, int depth) {
    int any = 0;
    while (r->p < r->end && *r->p != '|' && *r->p != ')' && r->c->st == PL_OK) {
        if (*r->p == '^' || *r->p == '$') {
            fail(r->c, PL_ERR_UNSUPPORTED, "json schema: pattern: '%c' inside the pattern is unsupported", *r->p);
            return;
        }
        if (*r->p == '*' || *r->p == '+' || *r->p == '?' || *r->p == '{') {
            fail(r->c, PL_ERR_INVALID_ARG, "json schema: pattern: quantifier '%c' without an item", *r->p);
            return;
        }
        sb item = {0};
        sb_add(&item, "(");
        rx_atom(r, &item, depth);
        sb_add(&item, ")");
        if (r->p < r->end && (*r->p == '*' || *r->p == '+' || *r->p == '?')) {
            char q = *r->p++;
            sb_addn(&item, &q, 1);
        } else if (r->p < r->end && *r->p == '{') {
            /* {m}, {m,}, {m,n}: checked here, never copied blindly into the grammar */
            const char *q = r->p + 1;
            long long lo = 0, hi = -1;
            int nd = 0;
            while (q < r->end && *q >= '0' && *q <= '9' && nd < 5) { lo = lo * 10 + (*q++ - '0'); nd++; }
            int ok = nd > 0;
            if (ok && q < r->end && *q == ',') {
                q++;
                int nd2 = 0;
                if (q < r->end && *q >= '0' && *q <= '9') hi = 0;
                while (q < r->end && *q >= '0' && *q <= '9' && nd2 < 5) { hi = hi * 10 + (*q++ - '0'); nd2++; }
            } else hi = lo;
            if (!ok || q >= r->end || *q != '}' || (hi >= 0 && hi < lo) || lo > GBNF_MAX_COUNT || hi > GBNF_MAX_COUNT) {
                free(item.p);
                fail(r->c, PL_ERR_UNSUPPORTED, "json schema: pattern: bad or unsupported quantifier at '%.10s'", r->p);
                return;
            }
            if (hi < 0) sb_addf(&item, "{%lld,}", lo);
            else sb_addf(&item, "{%lld,%lld}", lo, hi);
            r->p = q + 1;
        }
        if (r->p < r->end && (*r->p == '?' || *r->p == '+')) r->p++;   /* lazy / possessive: same language */
        if (any) sb_add(b, " ");
        sb_add(b, item.p ? item.p : "");
        free(item.p);
        any = 1;
    }
    if (!any) sb_add(b, "\"\"");
}

static void rx_alt(rx *r, sb *b, int depth) {
    if (depth > MAX_DEPTH) { fail(r->c, PL_ERR_INVALID_ARG, "json schema: pattern nested too deeply"); return; }
    rx_seq(r, b, depth);
    while (r->p < r->end && *r->p == '|' && r->c->st == PL_OK) {
        r->p++;
        sb_add(b, " | ");
        rx_seq(r, b, depth);
    }
}

static void pattern_rule(comp *c, sb *b, const char *pat) {
    rx r = {c, pat, pat + strlen(pat)};
    int anchored_start = 0, anchored_end = 0;
    if (r.p < r.end && *r.p == '^') { anchored_start = 1; r.p++; }
    if (r.end > r.p && r.end[-1] == '$' && !(r.end - 1 > r.p && r.end[-2] == '\\')) { anchored_end = 1; r.end--; }
    sb_add(b, "\"\\\"\" ");
    /* JSON schema patterns match anywhere unless anchored */
    if (!anchored_start) { sb_add(b, prim(c, "char")); sb_add(b, "* "); }
    sb_add(b, "(");
    rx_alt(&r, b, 0);
    sb_add(b, ")");
    if (r.p != r.end && c->st == PL_OK) fail(c, PL_ERR_INVALID_ARG, "json schema: pattern: unmatched ')'");
    if (!anchored_end) { sb_add(b, " "); sb_add(b, prim(c, "char")); sb_add(b, "*"); }
    sb_add(b, " \"\\\"\" ");
    sb_add(b, prim(c, "space"));
}

/* ---- schemas ---------------------------------------------------------------- */

static const char *const annotations[] = {
    "title", "description", "$schema", "$id", "$comment", "default", "examples", "readOnly", "writeOnly",
    "deprecated", "$defs", "definitions", "discriminator", NULL,
};
static const char *const enforced[] = {
    "type", "properties", "required", "additionalProperties", "enum", "const", "items", "prefixItems",
    "minItems", "maxItems", "anyOf", "oneOf", "$ref", "minLength", "maxLength", "pattern", "format",
    "minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum", NULL,
};

static int in_list(const char *const *l, const char *k) {
    for (; *l; l++) if (!strcmp(*l, k)) return 1;
    return 0;
}

static json_t *resolve_ref(comp *c, const char *ref) {
    if (strncmp(ref, "#", 1)) { fail(c, PL_ERR_UNSUPPORTED, "json schema: $ref '%s': only local refs (#/...) are supported", ref); return NULL; }
    json_t *cur = c->root;
    const char *p = ref + 1;
    while (*p == '/') {
        p++;
        const char *e = strchr(p, '/');
        size_t n = e ? (size_t)(e - p) : strlen(p);
        char key[256];
        if (n >= sizeof key) { fail(c, PL_ERR_INVALID_ARG, "json schema: $ref '%s' too long", ref); return NULL; }
        /* JSON pointer escapes ~1 -> /, ~0 -> ~ */
        size_t k = 0;
        for (size_t i = 0; i < n; i++) {
            if (p[i] == '~' && i + 1 < n && (p[i + 1] == '0' || p[i + 1] == '1')) { key[k++] = p[i + 1] == '1' ? '/' : '~'; i++; }
            else key[k++] = p[i];
        }
        key[k] = 0;
        cur = json_is_object(cur) ? json_object_get(cur, key) : NULL;
        if (!cur) { fail(c, PL_ERR_INVALID_ARG, "json schema: $ref '%s' does not resolve", ref); return NULL; }
        p += n;
    }
    return cur;
}

static void kv_rule_body(comp *c, sb *b, const char *key, json_t *val_schema, const char *name) {
    sb kb = {0};
    size_t kl = strlen(key);
    json_t *ks = json_stringn(key, kl);
    char *kj = json_dumps(ks, JSON_ENCODE_ANY);
    json_decref(ks);
    if (!kj) { fail(c, PL_ERR_NO_MEMORY, "out of memory"); return; }
    lit(b, kj, strlen(kj));
    free(kj);
    free(kb.p);
    sb_add(b, " space \":\" space ");
    char sub[300];
    snprintf(sub, sizeof sub, "%s-%s", name, key);
    sb_add(b, visit(c, val_schema, sub));
}

/* llama.cpp's chain for optional keys: ks[i] may be skipped, later ones
 * follow with a comma. */
static void optional_chain(comp *c, sb *b, const char **kv, size_t n, int first_optional, const char *name) {
    if (!strcmp(kv[0], "*add")) {
        /* additional properties: kv name stored after the marker */
    }
    if (first_optional) sb_addf(b, "( \",\" space %s )?", kv[0]);
    else sb_add(b, kv[0]);
    if (n > 1) {
        sb rest = {0};
        optional_chain(c, &rest, kv + 1, n - 1, 1, name);
        char rn[300];
        snprintf(rn, sizeof rn, "%s-rest", kv[0]);
        sb_addf(b, " %s", add_rule(c, rn, rest.p ? rest.p : "\"\""));
        free(rest.p);
    }
}

static const char *object_rule(comp *c, json_t *s, const char *name) {
    json_t *props = json_object_get(s, "properties"), *req = json_object_get(s, "required");
    json_t *add = json_object_get(s, "additionalProperties");
    if (props && !json_is_object(props)) { fail(c, PL_ERR_INVALID_ARG, "json schema: 'properties' must be an object"); return "x"; }
    if (req && !json_is_array(req)) { fail(c, PL_ERR_INVALID_ARG, "json schema: 'required' must be an array"); return "x"; }
    size_t np = props ? json_object_size(props) : 0;
    const char **req_kv = calloc(np + 1, sizeof *req_kv), **opt_kv = calloc(np + 2, sizeof *opt_kv);
    size_t nr = 0, no = 0;
    if (!req_kv || !opt_kv) { free(req_kv); free(opt_kv); fail(c, PL_ERR_NO_MEMORY, "out of memory"); return "x"; }
    size_t i;
    json_t *v;
    json_array_foreach(req, i, v) {
        /* a required key without a declared schema is legal JSON schema,
         * but this compiler only orders declared keys: refuse, not ignore */
        if (!json_is_string(v) || !props || !json_object_get(props, json_string_value(v))) {
            fail(c, PL_ERR_UNSUPPORTED, "json schema: required key '%s' is not in 'properties' (unsupported)",
                 json_is_string(v) ? json_string_value(v) : "?");
            break;
        }
    }
    const char *key;
    json_object_foreach(props, key, v) {
        int is_req = 0;
        json_t *r;
        json_array_foreach(req, i, r) if (json_is_string(r) && !strcmp(json_string_value(r), key)) is_req = 1;
        sb body = {0};
        kv_rule_body(c, &body, key, v, name);
        char kn[300];
        snprintf(kn, sizeof kn, "%s-%s-kv", name, key);
        const char *rn = add_rule(c, kn, body.p ? body.p : "\"\"");
        free(body.p);
        if (is_req) req_kv[nr++] = rn;
        else opt_kv[no++] = rn;
    }
    int additional = !add || json_is_true(add) || json_is_object(add);
    if (add && !json_is_boolean(add) && !json_is_object(add)) { fail(c, PL_ERR_INVALID_ARG, "json schema: bad 'additionalProperties'"); }
    const char *add_kv = NULL;
    if (additional && c->st == PL_OK) {
        sb body = {0};
        sb_add(&body, prim(c, "string"));
        sb_add(&body, " \":\" space ");
        char vn[300];
        snprintf(vn, sizeof vn, "%s-additional-value", name);
        sb_add(&body, json_is_object(add) ? visit(c, add, vn) : prim(c, "value"));
        char kn[300];
        snprintf(kn, sizeof kn, "%s-additional-kv", name);
        add_kv = add_rule(c, kn, body.p ? body.p : "\"\"");
        free(body.p);
    }
    sb b = {0};
    sb_add(&b, "\"{\" space ");
    for (i = 0; i < nr; i++) sb_addf(&b, "%s%s", i ? " \",\" space " : "", req_kv[i]);
    if ((no || add_kv) && c->st == PL_OK) {
        sb_add(&b, " (");
        if (nr) sb_add(&b, " \",\" space ( ");
        for (size_t k = 0; k < no; k++) {
            if (k) sb_add(&b, " | ");
            sb part = {0};
            optional_chain(c, &part, opt_kv + k, no - k, 0, name);
            if (add_kv) { sb_add(&part, " ( \",\" space "); sb_add(&part, add_kv); sb_add(&part, " )*"); }
            sb_add(&b, part.p ? part.p : "\"\"");
            free(part.p);
        }
        if (add_kv) sb_addf(&b, "%s%s ( \",\" space %s )*", no ? " | " : "", add_kv, add_kv);
        if (nr) sb_add(&b, " )");
        sb_add(&b, " )?");
    }
    sb_add(&b, " \"}\" space");
    prim(c, "space");
    free(req_kv);
    free(opt_kv);
    const char *r = add_rule(c, name, b.p ? b.p : "\"\"");
    free(b.p);
    return r;
}

static int get_count(comp *c, json_t *s, const char *k, long long *out) {
    json_t *v = json_object_get(s, k);
    if (!v) return 0;
    if (!json_is_integer(v) || json_integer_value(v) < 0) { fail(c, PL_ERR_INVALID_ARG, "json schema: '%s' must be a non-negative integer", k); return 0; }
    if (json_integer_value(v) > SCHEMA_MAX_COUNT) {
        fail(c, PL_ERR_UNSUPPORTED, "json schema: '%s' %lld is above the limit %d", k, (long long)json_integer_value(v), SCHEMA_MAX_COUNT);
        return 0;
    }
    *out = json_integer_value(v);
    return 1;
}

/* (item){min,max} for counts above the GBNF parser's {m,n} limit (4096): a
 * fixed run of {4096} chunks, then the optional tail as
 *   ((item){0,4095} | (item){4096} TAIL')
 * which accepts exactly 0..V more items and keeps at most two parse stacks
 * alive at once (both alternatives share only the first 4095 items). */
static void repeat_tail(sb *b, const char *item, long long v) {
    if (v <= GBNF_MAX_COUNT) { sb_addf(b, "(%s){0,%lld}", item, v); return; }
    sb_addf(b, "((%s){0,%d} | (%s){%d} ", item, GBNF_MAX_COUNT - 1, item, GBNF_MAX_COUNT);
    repeat_tail(b, item, v - GBNF_MAX_COUNT);
    sb_add(b, ")");
}

static void repeat_counted(sb *b, const char *item, long long min, int has_max, long long max) {
    while (min > GBNF_MAX_COUNT) {
        sb_addf(b, "(%s){%d} ", item, GBNF_MAX_COUNT);
        min -= GBNF_MAX_COUNT;
        max -= GBNF_MAX_COUNT;
    }
    if (!has_max) sb_addf(b, "(%s){%lld,}", item, min);
    else if (max <= GBNF_MAX_COUNT) sb_addf(b, "(%s){%lld,%lld}", item, min, max);
    else {
        if (min) sb_addf(b, "(%s){%lld} ", item, min);
        repeat_tail(b, item, max - min);
    }
}

/* item{min,max} separated by commas, for arrays and strings */
static void repeat_sep(sb *b, const char *item, long long min, int has_max, long long max, const char *sep) {
    if (has_max && max == 0) { sb_add(b, "\"\""); return; }
    if (min == 0) sb_add(b, "(");
    sb_addf(b, "%s", item);
    long long lo = min ? min - 1 : 0;
    char *rest = NULL;
    size_t need = strlen(sep) + strlen(item) + 2;
    if (!(rest = malloc(need))) { b->oom = 1; return; }
    snprintf(rest, need, "%s %s", sep, item);
    sb_add(b, " ");
    repeat_counted(b, rest, lo, has_max, max - 1);
    free(rest);
    if (min == 0) sb_add(b, ")?");
}

static const char *typed(comp *c, json_t *s, const char *type, const char *name) {
    sb b = {0};
    const char *r = NULL;
    if (!strcmp(type, "object")) return object_rule(c, s, name);
    if (!strcmp(type, "array")) {
        json_t *items = json_object_get(s, "items"), *prefix = json_object_get(s, "prefixItems");
        long long min = 0, max = 0;
        get_count(c, s, "minItems", &min);
        int has_max = get_count(c, s, "maxItems", &max);
        if (has_max && max < min) { fail(c, PL_ERR_INVALID_ARG, "json schema: maxItems below minItems"); return "x"; }
        if (prefix) {
            if (!json_is_array(prefix)) { fail(c, PL_ERR_INVALID_ARG, "json schema: 'prefixItems' must be an array"); return "x"; }
            if (items || min || has_max) { fail(c, PL_ERR_UNSUPPORTED, "json schema: 'prefixItems' with items/minItems/maxItems is unsupported"); return "x"; }
            sb_add(&b, "\"[\" space ");
            size_t i;
            json_t *it;
            json_array_foreach(prefix, i, it) {
                char sub[300];
                snprintf(sub, sizeof sub, "%s-%zu", name, i);
                sb_addf(&b, "%s%s", i ? " \",\" space " : "", visit(c, it, sub));
            }
            sb_add(&b, " \"]\" space");
        } else {
            char sub[300];
            snprintf(sub, sizeof sub, "%s-item", name);
            const char *item = items ? (json_is_object(items) ? visit(c, items, sub) : (json_is_true(items) ? prim(c, "value") : NULL)) : prim(c, "value");
            if (!item) { fail(c, PL_ERR_UNSUPPORTED, "json schema: 'items' must be a schema object (got another kind)"); return "x"; }
            sb_add(&b, "\"[\" space ");
            repeat_sep(&b, item, min, has_max, max, "\",\" space");
            sb_add(&b, " \"]\" space");
        }
        prim(c, "space");
    } else if (!strcmp(type, "string")) {
        json_t *pat = json_object_get(s, "pattern"), *fmt = json_object_get(s, "format");
        long long min = 0, max = 0;
        int has_min = get_count(c, s, "minLength", &min), has_max = get_count(c, s, "maxLength", &max);
        if (has_max && max < min) { fail(c, PL_ERR_INVALID_ARG, "json schema: maxLength below minLength"); return "x"; }
        if ((pat || fmt) && (has_min || has_max)) { fail(c, PL_ERR_UNSUPPORTED, "json schema: minLength/maxLength together with pattern/format is unsupported"); return "x"; }
        if (pat && fmt) { fail(c, PL_ERR_UNSUPPORTED, "json schema: pattern together with format is unsupported"); return "x"; }
        if (pat) {
            if (!json_is_string(pat)) { fail(c, PL_ERR_INVALID_ARG, "json schema: 'pattern' must be a string"); return "x"; }
            pattern_rule(c, &b, json_string_value(pat));
        } else if (fmt) {
            const char *f = json_is_string(fmt) ? json_string_value(fmt) : "";
            if (strcmp(f, "date") && strcmp(f, "time") && strcmp(f, "date-time") && strcmp(f, "uuid")) {
                fail(c, PL_ERR_UNSUPPORTED, "json schema: unsupported format '%s' (supported: date, time, date-time, uuid)", f);
                return "x";
            }
            sb_addf(&b, "\"\\\"\" %s \"\\\"\" %s", prim(c, f), prim(c, "space"));
        } else if (has_min || has_max) {
            sb_add(&b, "\"\\\"\" ");
            repeat_counted(&b, prim(c, "char"), min, has_max, max);
            sb_addf(&b, " \"\\\"\" %s", prim(c, "space"));
        } else {
            return prim(c, "string");
        }
    } else if (!strcmp(type, "integer")) {
        json_t *mn = json_object_get(s, "minimum"), *mx = json_object_get(s, "maximum");
        json_t *emn = json_object_get(s, "exclusiveMinimum"), *emx = json_object_get(s, "exclusiveMaximum");
        if (!mn && !mx && !emn && !emx) return prim(c, "integer");
        int has_lo = 0, has_hi = 0;
        long long lo = 0, hi = 0;
        json_t *bounds[4] = {mn, emn, mx, emx};
        for (int k = 0; k < 4; k++) {
            json_t *v = bounds[k];
            if (!v) continue;
            if (!json_is_number(v)) { fail(c, PL_ERR_INVALID_ARG, "json schema: integer bounds must be numbers"); return "x"; }
            double d = json_number_value(v);
            if (d < -9e17 || d > 9e17) continue;
            long long x;
            if (k < 2) { x = (long long)d; if ((double)x < d) x++; if (k == 1 && (double)x == d) x++; if (!has_lo || x > lo) lo = x; has_lo = 1; }
            else { x = (long long)d; if ((double)x > d) x--; if (k == 3 && (double)x == d) x--; if (!has_hi || x < hi) hi = x; has_hi = 1; }
        }
        int_range(c, &b, has_lo, lo, has_hi, hi);
    } else if (!strcmp(type, "number")) {
        if (json_object_get(s, "minimum") || json_object_get(s, "maximum") || json_object_get(s, "exclusiveMinimum") ||
            json_object_get(s, "exclusiveMaximum")) {
            fail(c, PL_ERR_UNSUPPORTED, "json schema: minimum/maximum on type 'number' is unsupported (use type 'integer')");
            return "x";
        }
        return prim(c, "number");
    } else if (!strcmp(type, "boolean")) {
        return prim(c, "boolean");
    } else if (!strcmp(type, "null")) {
        return prim(c, "null");
    } else {
        fail(c, PL_ERR_INVALID_ARG, "json schema: unknown type '%s'", type);
        return "x";
    }
    r = add_rule(c, name, b.p ? b.p : "\"\"");
    free(b.p);
    return r;
}

static int has_enforced_besides_ref(json_t *s) {
    const char *k;
    json_t *v;
    json_object_foreach(s, k, v) if (strcmp(k, "$ref") && !in_list(annotations, k)) return 1;
    return 0;
}

static const char *visit(comp *c, json_t *s, const char *name) {
    if (c->st != PL_OK) return "x";
    if (json_is_true(s) || (json_is_object(s) && json_object_size(s) == 0)) return prim(c, "value");
    if (!json_is_object(s)) { fail(c, PL_ERR_UNSUPPORTED, "json schema: a schema must be an object or true"); return "x"; }
    if (++c->depth > MAX_DEPTH) { fail(c, PL_ERR_INVALID_ARG, "json schema nested deeper than %d", MAX_DEPTH); return "x"; }
    const char *key;
    json_t *v;
    json_object_foreach(s, key, v) {
        if (!in_list(annotations, key) && !in_list(enforced, key)) {
            fail(c, PL_ERR_UNSUPPORTED, "json schema: unsupported keyword '%s' (it cannot be enforced)", key);
            c->depth--;
            return "x";
        }
    }
    const char *r = "x";
    json_t *ref = json_object_get(s, "$ref"), *t = json_object_get(s, "type");
    json_t *any = json_object_get(s, "anyOf");
    if (!any) any = json_object_get(s, "oneOf");
    if (ref) {
        if (!json_is_string(ref)) { fail(c, PL_ERR_INVALID_ARG, "json schema: '$ref' must be a string"); }
        else if (has_enforced_besides_ref(s)) {
            fail(c, PL_ERR_UNSUPPORTED, "json schema: keywords next to '$ref' are unsupported");
        } else {
            char rn[300];
            const char *rs = json_string_value(ref);
            const char *last = strrchr(rs, '/');
            snprintf(rn, sizeof rn, "ref-%s", last ? last + 1 : rs);
            /* one rule per ref target, reserved before visiting it so a
             * recursive schema refers to itself by name */
            size_t k = 0;
            while (k < c->n_refs && strcmp(c->ref_str[k], rs)) k++;
            if (k < c->n_refs) r = c->names[c->ref_rule[k]];
            else if (k == sizeof c->ref_str / sizeof *c->ref_str) fail(c, PL_ERR_UNSUPPORTED, "json schema: too many distinct $refs");
            else {
                json_t *target = resolve_ref(c, rs);
                const char *nm = target ? add_rule(c, rn, NULL) : NULL;
                if (nm && c->st == PL_OK) {
                    size_t at = (size_t)find_rule(c, nm);
                    if (!(c->ref_str[k] = strdup(rs))) fail(c, PL_ERR_NO_MEMORY, "out of memory");
                    else { c->ref_rule[k] = at; c->n_refs++; }
                    char tn[310];
                    snprintf(tn, sizeof tn, "%s-def", nm);
                    const char *body = visit(c, target, tn);
                    if (c->st == PL_OK && !(c->bodies[at] = strdup(body))) fail(c, PL_ERR_NO_MEMORY, "out of memory");
                    r = c->names[at];
                }
            }
        }
    } else if (any) {
        if (!json_is_array(any) || !json_array_size(any)) { fail(c, PL_ERR_INVALID_ARG, "json schema: anyOf/oneOf must be a non-empty array"); }
        else if (t || json_object_get(s, "properties")) { fail(c, PL_ERR_UNSUPPORTED, "json schema: anyOf/oneOf next to type/properties is unsupported"); }
        else {
            sb b = {0};
            size_t i;
            json_t *alt;
            json_array_foreach(any, i, alt) {
                char sub[300];
                snprintf(sub, sizeof sub, "%s-%zu", name, i);
                sb_addf(&b, "%s%s", i ? " | " : "", visit(c, alt, sub));
            }
            r = add_rule(c, name, b.p ? b.p : "\"\"");
            free(b.p);
        }
    } else if (json_object_get(s, "const")) {
        sb b = {0};
        const_lit(c, &b, json_object_get(s, "const"));
        r = add_rule(c, name, b.p ? b.p : "\"\"");
        free(b.p);
    } else if (json_object_get(s, "enum")) {
        json_t *e = json_object_get(s, "enum");
        if (!json_is_array(e) || !json_array_size(e)) { fail(c, PL_ERR_INVALID_ARG, "json schema: 'enum' must be a non-empty array"); }
        else {
            sb b = {0};
            size_t i;
            json_t *val;
            json_array_foreach(e, i, val) {
                if (i) sb_add(&b, " | ");
                sb_add(&b, "(");
                const_lit(c, &b, val);
                sb_add(&b, ")");
            }
            r = add_rule(c, name, b.p ? b.p : "\"\"");
            free(b.p);
        }
    } else if (json_is_array(t)) {
        sb b = {0};
        size_t i;
        json_t *tv;
        json_array_foreach(t, i, tv) {
            if (!json_is_string(tv)) { fail(c, PL_ERR_INVALID_ARG, "json schema: 'type' entries must be strings"); break; }
            char sub[300];
            snprintf(sub, sizeof sub, "%s-%s", name, json_string_value(tv));
            sb_addf(&b, "%s%s", i ? " | " : "", typed(c, s, json_string_value(tv), sub));
        }
        if (!i) fail(c, PL_ERR_INVALID_ARG, "json schema: empty 'type' array");
        r = add_rule(c, name, b.p ? b.p : "\"\"");
        free(b.p);
    } else if (json_is_string(t)) {
        r = typed(c, s, json_string_value(t), name);
    } else if (t) {
        fail(c, PL_ERR_INVALID_ARG, "json schema: 'type' must be a string or an array");
    } else if (json_object_get(s, "properties") || json_object_get(s, "additionalProperties") || json_object_get(s, "required")) {
        r = typed(c, s, "object", name);
    } else if (json_object_get(s, "items") || json_object_get(s, "prefixItems")) {
        r = typed(c, s, "array", name);
    } else {
        /* only annotations (or keywords that need a type to mean anything) */
        static const char *const typed_only[] = {"minLength", "maxLength", "pattern", "format", "minimum", "maximum",
                                                 "exclusiveMinimum", "exclusiveMaximum", "minItems", "maxItems", NULL};
        for (const char *const *k = typed_only; *k; k++)
            if (json_object_get(s, *k)) { fail(c, PL_ERR_UNSUPPORTED, "json schema: '%s' without a 'type' is unsupported", *k); break; }
        r = prim(c, "value");
    }
    c->depth--;
    return r;
}

pl_status pl_json_schema_compile(const char *schema, size_t len, char **gbnf, size_t *gbnf_len) {
    *gbnf = NULL;
    *gbnf_len = 0;
    if (!schema && len) return pl_errorf(PL_ERR_INVALID_ARG, "json schema: NULL text");
    json_error_t err;
    json_t *root = json_loadb(schema ? schema : "", len, JSON_DECODE_ANY, &err);
    if (!root) return pl_errorf(PL_ERR_INVALID_ARG, "json schema: invalid JSON at %d:%d: %s", err.line, err.column, err.text);
    comp c = {0};
    c.root = root;
    c.st = PL_OK;
    const char *top;
    json_t *t = json_is_object(root) ? json_object_get(root, "type") : NULL;
    if (json_is_string(t) && !strcmp(json_string_value(t), "json_object") && json_object_size(root) == 1)
        top = prim(&c, "object");   /* OpenAI's response_format {"type": "json_object"}: any object */
    else
        top = visit(&c, root, "root");
    sb out = {0};
    if (c.st == PL_OK) {
        if (strcmp(top, "root")) sb_addf(&out, "root ::= %s\n", top);
        for (size_t i = 0; i < c.n; i++) {
            if (!c.bodies[i]) { fail(&c, PL_ERR_INTERNAL, "json schema: rule '%s' never defined", c.names[i]); break; }
            sb_addf(&out, "%s ::= %s\n", c.names[i], c.bodies[i]);
        }
        if (out.oom) fail(&c, PL_ERR_NO_MEMORY, "out of memory");
    }
    for (size_t i = 0; i < c.n; i++) { free(c.names[i]); free(c.bodies[i]); }
    free(c.names);
    free(c.bodies);
    for (size_t i = 0; i < c.n_refs; i++) free(c.ref_str[i]);
    json_decref(root);
    if (c.st != PL_OK) {
        free(out.p);
        return pl_errorf(c.st, "%s", c.msg);
    }
    *gbnf = out.p;
    *gbnf_len = out.n;
    return PL_OK;
}
