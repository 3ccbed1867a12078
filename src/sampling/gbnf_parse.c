/*
 * GBNF parser: llama.cpp's grammar syntax, same semantics, so grammars users
 * bring from llama.cpp behave the same here. Differences: every error names
 * its line:column, and limits (nesting depth, repetition counts, total size)
 * make hostile input fail with a message instead of exhausting the stack or
 * memory.
 *
 * Like llama.cpp, a rule's sequence ends at a newline unless it is inside
 * parentheses; `::=` may be followed by newlines; left recursion is refused
 * (a stack-based matcher would loop on it).
 */
#include "sampling/grammar.h"
#include "core/status.h"
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MAX_DEPTH 256          /* nested parentheses */
#define MAX_REPEAT 4096        /* m and n of {m,n} */
#define MAX_ELEMENTS (1u << 22) /* whole grammar after expanding repetitions */

typedef struct evec { pl_gelem *d; size_t n, cap; } evec;

typedef struct parser {
    const char *src, *end;
    evec *rules;          /* per rule id; d == NULL: referenced, not yet defined */
    char **names;
    size_t *name_pos;     /* offset of the first reference, for "undefined rule" */
    size_t n_rules, cap_rules;
    size_t total;
    int depth;
    pl_status st;
    char msg[320];
} parser;

static void perr(parser *p, const char *at, const char *fmt, ...) PL_PRINTF(3, 4);
static void perr(parser *p, const char *at, const char *fmt, ...) {
    if (p->st != PL_OK) return;
    int line = 1, col = 1;
    if (!at || at > p->end) at = p->end;
    for (const char *c = p->src; c < at; c++) {
        if (*c == '\n') { line++; col = 1; } else col++;
    }
    char m[256];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(m, sizeof m, fmt, ap);
    va_end(ap);
    snprintf(p->msg, sizeof p->msg, "grammar %d:%d: %s", line, col, m);
    p->st = PL_ERR_INVALID_ARG;
}

static void nomem(parser *p) {
    if (p->st != PL_OK) return;
    snprintf(p->msg, sizeof p->msg, "out of memory");
    p->st = PL_ERR_NO_MEMORY;
}

static int epush(parser *p, evec *v, uint32_t type, uint32_t value) {
    if (p->st != PL_OK) return -1;
    if (++p->total > MAX_ELEMENTS) { perr(p, NULL, "grammar too large (over %u elements after expanding repetitions)", MAX_ELEMENTS); return -1; }
    if (v->n == v->cap) {
        size_t cap = v->cap ? v->cap * 2 : 16;
        pl_gelem *d = realloc(v->d, cap * sizeof *d);
        if (!d) { nomem(p); return -1; }
        v->d = d;
        v->cap = cap;
    }
    v->d[v->n++] = (pl_gelem){type, value};
    return 0;
}

static int is_word(char c) { return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '-' || c == '_' || (c >= '0' && c <= '9'); }
static int is_digit(char c) { return c >= '0' && c <= '9'; }

static uint32_t new_rule(parser *p, const char *name, size_t len, size_t pos) {
    if (p->st != PL_OK) return 0;
    if (p->n_rules == p->cap_rules) {
        size_t cap = p->cap_rules ? p->cap_rules * 2 : 32;
        evec *r = realloc(p->rules, cap * sizeof *r);
        if (r) p->rules = r;
        char **nm = realloc(p->names, cap * sizeof *nm);
        if (nm) p->names = nm;
        size_t *np = realloc(p->name_pos, cap * sizeof *np);
        if (np) p->name_pos = np;
        if (!r || !nm || !np) { nomem(p); return 0; }
        p->cap_rules = cap;
    }
    char *s = malloc(len + 1);
    if (!s) { nomem(p); return 0; }
    memcpy(s, name, len);
    s[len] = 0;
    p->rules[p->n_rules] = (evec){0};
    p->names[p->n_rules] = s;
    p->name_pos[p->n_rules] = pos;
    return (uint32_t)p->n_rules++;
}

static uint32_t symbol_id(parser *p, const char *name, size_t len, size_t pos) {
    for (size_t i = 0; i < p->n_rules; i++)
        if (strlen(p->names[i]) == len && !memcmp(p->names[i], name, len)) return (uint32_t)i;
    return new_rule(p, name, len, pos);
}

/* A fresh helper rule named after its parent, like llama.cpp's "name_3". */
static uint32_t gen_rule(parser *p, uint32_t parent) {
    char buf[300];
    int n = snprintf(buf, sizeof buf, "%.200s_%zu", p->names[parent], p->n_rules);
    return new_rule(p, buf, (size_t)n, 0);
}

static const char *skip_space(parser *p, const char *s, int newline_ok) {
    while (s < p->end) {
        if (*s == '#') {
            while (s < p->end && *s != '\n' && *s != '\r') s++;
        } else if (*s == ' ' || *s == '\t' || (newline_ok && (*s == '\r' || *s == '\n'))) {
            s++;
        } else break;
    }
    return s;
}

static const char *parse_name(parser *p, const char *s) {
    const char *e = s;
    while (e < p->end && is_word(*e)) e++;
    if (e == s) { perr(p, s, "expecting a rule name"); return NULL; }
    return e;
}

static int hexval(char c) {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    return -1;
}

/* One UTF-8 code point of the source; invalid bytes read as themselves. */
static const char *decode_src(parser *p, const char *s, uint32_t *cp) {
    static const int lookup[] = {1, 1, 1, 1, 1, 1, 1, 1, 0, 0, 0, 0, 2, 2, 3, 4};
    uint8_t b = (uint8_t)*s;
    int n = lookup[b >> 4];
    if (n <= 1 || s + n > p->end) { *cp = b; return s + 1; }
    uint32_t v = b & ((1u << (7 - n)) - 1);
    for (int i = 1; i < n; i++) {
        uint8_t c = (uint8_t)s[i];
        if ((c & 0xC0) != 0x80) { *cp = b; return s + 1; }
        v = (v << 6) | (c & 0x3F);
    }
    *cp = v;
    return s + n;
}

static const char *parse_char(parser *p, const char *s, uint32_t *cp) {
    if (s >= p->end) { perr(p, s, "unexpected end of input"); return NULL; }
    if (*s != '\\') return decode_src(p, s, cp);
    if (s + 1 >= p->end) { perr(p, s, "unexpected end of input after '\\'"); return NULL; }
    int nhex = 0;
    switch (s[1]) {
    case 'x': nhex = 2; break;
    case 'u': nhex = 4; break;
    case 'U': nhex = 8; break;
    case 't': *cp = '\t'; return s + 2;
    case 'r': *cp = '\r'; return s + 2;
    case 'n': *cp = '\n'; return s + 2;
    case '\\': case '"': case '[': case ']': *cp = (uint8_t)s[1]; return s + 2;
    default: perr(p, s, "unknown escape '\\%c'", s[1]); return NULL;
    }
    uint32_t v = 0;
    const char *h = s + 2;
    for (int i = 0; i < nhex; i++, h++) {
        int d = h < p->end ? hexval(*h) : -1;
        if (d < 0) { perr(p, s, "expecting %d hex digits after '\\%c'", nhex, s[1]); return NULL; }
        v = v * 16 + (uint32_t)d;
    }
    if (v > 0x10FFFF) { perr(p, s, "code point U+%X is out of range", v); return NULL; }
    *cp = v;
    return h;
}

static const char *parse_int(parser *p, const char *s, long *out) {
    const char *e = s;
    long v = 0;
    while (e < p->end && is_digit(*e)) {
        v = v * 10 + (*e - '0');
        if (v > MAX_REPEAT) { perr(p, s, "repetition count above the limit %d", MAX_REPEAT); return NULL; }
        e++;
    }
    if (e == s) { perr(p, s, "expecting an integer"); return NULL; }
    *out = v;
    return e;
}

static const char *parse_alternates(parser *p, const char *s, uint32_t rule_id, int nested);

/* x{min,max} (max < 0: unbounded), exactly as llama.cpp expands it: min
 * copies of x, then a chain of optional helper rules. */
static void repeat(parser *p, evec *out, size_t last_start, uint32_t parent, long min, long max, const char *at) {
    if (last_start == out->n) { perr(p, at, "expecting an item before the repetition operator"); return; }
    size_t n_prev = out->n - last_start;
    pl_gelem *prev = malloc(n_prev * sizeof *prev);
    if (!prev) { nomem(p); return; }
    memcpy(prev, out->d + last_start, n_prev * sizeof *prev);
    if (min == 0) {
        p->total -= out->n - last_start;
        out->n = last_start;
    } else {
        for (long i = 1; i < min && p->st == PL_OK; i++)
            for (size_t k = 0; k < n_prev; k++) epush(p, out, prev[k].type, prev[k].value);
    }
    uint32_t last_rec = 0;
    long n_opt = max < 0 ? 1 : max - min;
    for (long i = 0; i < n_opt && p->st == PL_OK; i++) {
        uint32_t rid = gen_rule(p, parent);
        if (p->st != PL_OK) break;
        evec rec = {0};
        for (size_t k = 0; k < n_prev; k++) epush(p, &rec, prev[k].type, prev[k].value);
        if (i > 0 || max < 0) epush(p, &rec, GE_RULE_REF, max < 0 ? rid : last_rec);
        epush(p, &rec, GE_ALT, 0);
        epush(p, &rec, GE_END, 0);
        p->rules[rid] = rec;
        last_rec = rid;
    }
    if (n_opt > 0) epush(p, out, GE_RULE_REF, last_rec);
    free(prev);
}

static const char *parse_sequence(parser *p, const char *s, uint32_t rule_id, evec *out, int nested) {
    size_t last_start = out->n;
    while (s < p->end && p->st == PL_OK) {
        if (*s == '"') {
            s++;
            last_start = out->n;
            while (s < p->end && *s != '"') {
                uint32_t cp;
                if (!(s = parse_char(p, s, &cp))) return NULL;
                epush(p, out, GE_CHAR, cp);
            }
            if (s >= p->end) { perr(p, s, "unexpected end of input in a string literal"); return NULL; }
            s = skip_space(p, s + 1, nested);
        } else if (*s == '[') {
            const char *open = s;
            s++;
            uint32_t start_type = GE_CHAR;
            if (s < p->end && *s == '^') { s++; start_type = GE_CHAR_NOT; }
            last_start = out->n;
            while (s < p->end && *s != ']') {
                uint32_t cp;
                if (!(s = parse_char(p, s, &cp))) return NULL;
                epush(p, out, last_start < out->n ? GE_CHAR_ALT : start_type, cp);
                if (s + 1 < p->end && *s == '-' && s[1] != ']') {
                    uint32_t hi;
                    if (!(s = parse_char(p, s + 1, &hi))) return NULL;
                    epush(p, out, GE_CHAR_RNG_UPPER, hi);
                }
            }
            if (s >= p->end) { perr(p, open, "unterminated character class"); return NULL; }
            if (last_start == out->n) {
                /* [] matches nothing and [^] anything: llama.cpp refuses both too */
                perr(p, open, "empty character class"); return NULL;
            }
            s = skip_space(p, s + 1, nested);
        } else if (is_word(*s)) {
            const char *e = parse_name(p, s);
            if (!e) return NULL;
            uint32_t ref = symbol_id(p, s, (size_t)(e - s), (size_t)(s - p->src));
            last_start = out->n;
            epush(p, out, GE_RULE_REF, ref);
            s = skip_space(p, e, nested);
        } else if (*s == '(') {
            const char *open = s;
            if (++p->depth > MAX_DEPTH) { perr(p, s, "parentheses nested deeper than %d", MAX_DEPTH); return NULL; }
            uint32_t sub = gen_rule(p, rule_id);
            if (p->st != PL_OK) return NULL;
            s = parse_alternates(p, skip_space(p, s + 1, 1), sub, 1);
            if (!s) return NULL;
            p->depth--;
            last_start = out->n;
            epush(p, out, GE_RULE_REF, sub);
            if (s >= p->end || *s != ')') { perr(p, open, "expecting ')' to close this '('"); return NULL; }
            s = skip_space(p, s + 1, nested);
        } else if (*s == '.') {
            last_start = out->n;
            epush(p, out, GE_CHAR_ANY, 0);
            s = skip_space(p, s + 1, nested);
        } else if (*s == '*' || *s == '+' || *s == '?') {
            repeat(p, out, last_start, rule_id, *s == '+', *s == '?' ? 1 : -1, s);
            s = skip_space(p, s + 1, nested);
        } else if (*s == '{') {
            const char *open = s;
            s = skip_space(p, s + 1, nested);
            long min = 0, max = -1;
            if (!(s = parse_int(p, s, &min))) return NULL;
            s = skip_space(p, s, nested);
            if (s < p->end && *s == ',') {
                s = skip_space(p, s + 1, nested);
                if (s < p->end && is_digit(*s)) {
                    if (!(s = parse_int(p, s, &max))) return NULL;
                    s = skip_space(p, s, nested);
                }
            } else max = min;
            if (s >= p->end || *s != '}') { perr(p, s, "expecting ',' or '}' in a repetition"); return NULL; }
            if (max >= 0 && max < min) { perr(p, open, "repetition {%ld,%ld}: maximum below minimum", min, max); return NULL; }
            repeat(p, out, last_start, rule_id, min, max, open);
            s = skip_space(p, s + 1, nested);
        } else break;
    }
    return p->st == PL_OK ? s : NULL;
}

static const char *parse_alternates(parser *p, const char *s, uint32_t rule_id, int nested) {
    evec rule = {0};
    s = parse_sequence(p, s, rule_id, &rule, nested);
    while (s && s < p->end && *s == '|') {
        epush(p, &rule, GE_ALT, 0);
        s = parse_sequence(p, skip_space(p, s + 1, 1), rule_id, &rule, nested);
    }
    epush(p, &rule, GE_END, 0);
    if (!s || p->st != PL_OK) { free(rule.d); return NULL; }
    if (p->rules[rule_id].d) {
        /* llama.cpp lets a later definition replace an earlier one silently;
         * that is almost always a mistake in a hand-written grammar */
        free(rule.d);
        perr(p, NULL, "rule '%s' is defined twice", p->names[rule_id]);
        return NULL;
    }
    p->rules[rule_id] = rule;
    return s;
}

static const char *parse_rule(parser *p, const char *s) {
    const char *e = parse_name(p, s);
    if (!e) return NULL;
    uint32_t id = symbol_id(p, s, (size_t)(e - s), (size_t)(s - p->src));
    if (p->st != PL_OK) return NULL;
    if (p->rules[id].d) { perr(p, s, "rule '%s' is defined twice", p->names[id]); return NULL; }
    const char *q = skip_space(p, e, 0);
    if (q + 3 > p->end || memcmp(q, "::=", 3)) { perr(p, q, "expecting '::=' after the rule name '%s'", p->names[id]); return NULL; }
    q = parse_alternates(p, skip_space(p, q + 3, 1), id, 0);
    if (!q) return NULL;
    if (q < p->end && *q == '\r') q++;
    if (q < p->end && *q == '\n') q++;
    else if (q < p->end) {
        if (*q == ')') perr(p, q, "unmatched ')'");
        else perr(p, q, "expecting a newline or the end of input, found '%c'", *q);
        return NULL;
    }
    return skip_space(p, q, 1);
}

/* ---- checks after parsing ------------------------------------------------ */

static int nullable_alt_scan(const pl_grules *g, const uint8_t *nullable, uint32_t i) {
    for (const pl_gelem *e = g->el + i; ; e++) {
        if (e->type == GE_END || e->type == GE_ALT) return 1;
        if (e->type != GE_RULE_REF || !nullable[e->value]) return 0;
    }
}

/* 0 ok, else the id+1 of a left-recursive rule. Iterative DFS with an
 * explicit stack so deep chains of helper rules cannot overflow the C stack. */
static uint32_t find_left_recursion(const pl_grules *g) {
    uint32_t n = g->n_rules;
    uint8_t *nullable = calloc(n, 1), *state = calloc(n, 1);
    uint32_t *stk = malloc((size_t)n * 2 * sizeof *stk);
    uint32_t bad = 0;
    if (!nullable || !state || !stk) { free(nullable); free(state); free(stk); return UINT32_MAX; }
    for (int changed = 1; changed;) {
        changed = 0;
        for (uint32_t r = 0; r < n; r++) {
            if (nullable[r]) continue;
            uint32_t i = g->rule_start[r];
            for (;;) {
                if (nullable_alt_scan(g, nullable, i)) { nullable[r] = 1; changed = 1; break; }
                while (g->el[i].type != GE_END && g->el[i].type != GE_ALT) i++;
                if (g->el[i].type == GE_END) break;
                i++;
            }
        }
    }
    /* stack entries: (rule, element index of the next alternative scan) */
    for (uint32_t r0 = 0; r0 < n && !bad; r0++) {
        if (state[r0]) continue;
        size_t sp = 0;
        stk[sp++] = r0; stk[sp++] = g->rule_start[r0];
        state[r0] = 1;
        while (sp && !bad) {
            uint32_t r = stk[sp - 2], i = stk[sp - 1];
            if (g->el[i].type == GE_END) { state[r] = 2; sp -= 2; continue; }
            /* the left edge of the alternative starting at i: refs up to the
             * first non-nullable element */
            uint32_t j = i, next_ref = UINT32_MAX;
            for (; g->el[j].type != GE_END && g->el[j].type != GE_ALT; j++) {
                const pl_gelem *e = g->el + j;
                if (e->type != GE_RULE_REF) break;
                if (state[e->value] == 1) { bad = e->value + 1; break; }
                if (state[e->value] == 0) { next_ref = e->value; break; }
                if (!nullable[e->value]) break;
            }
            if (bad) break;
            if (next_ref != UINT32_MAX) {
                /* visit it, then rescan this alternative from the same place */
                state[next_ref] = 1;
                stk[sp++] = next_ref; stk[sp++] = g->rule_start[next_ref];
                continue;
            }
            while (g->el[j].type != GE_END && g->el[j].type != GE_ALT) j++;
            stk[sp - 1] = g->el[j].type == GE_END ? j : j + 1;
        }
    }
    free(nullable); free(state); free(stk);
    return bad;
}

void pl_grules_free(pl_grules *r) {
    if (!r) return;
    for (uint32_t i = 0; i < r->n_rules; i++) free(r->rule_name[i]);
    free(r->rule_name);
    free(r->rule_start);
    free(r->el);
    free(r);
}

pl_status pl_gbnf_parse(const char *text, size_t len, const char *start, pl_grules **out) {
    *out = NULL;
    if (!text && len) return pl_errorf(PL_ERR_INVALID_ARG, "grammar: NULL text");
    if (!start) start = "root";
    parser p = {0};
    p.src = text ? text : "";
    p.end = p.src + len;
    p.st = PL_OK;
    const char *s = skip_space(&p, p.src, 1);
    while (s && s < p.end) s = parse_rule(&p, s);
    if (p.st == PL_OK) {
        for (size_t i = 0; i < p.n_rules; i++)
            if (!p.rules[i].d) { perr(&p, p.src + p.name_pos[i], "undefined rule '%s'", p.names[i]); break; }
    }
    uint32_t root = UINT32_MAX;
    if (p.st == PL_OK) {
        for (size_t i = 0; i < p.n_rules; i++)
            if (!strcmp(p.names[i], start)) root = (uint32_t)i;
        if (root == UINT32_MAX) perr(&p, NULL, "the grammar has no '%s' rule (the start rule)", start);
    }
    pl_grules *g = NULL;
    if (p.st == PL_OK) {
        g = calloc(1, sizeof *g);
        if (g) {
            g->n_rules = (uint32_t)p.n_rules;
            g->root = root;
            g->el = malloc((p.total + 1) * sizeof *g->el);
            g->rule_start = malloc(p.n_rules * sizeof *g->rule_start);
            g->rule_name = p.names;
            p.names = NULL;
            if (g->el && g->rule_start) {
                uint32_t k = 0;
                for (size_t i = 0; i < p.n_rules; i++) {
                    g->rule_start[i] = k;
                    memcpy(g->el + k, p.rules[i].d, p.rules[i].n * sizeof *g->el);
                    k += (uint32_t)p.rules[i].n;
                }
                g->n_el = k;
            } else nomem(&p);
        } else nomem(&p);
    }
    if (p.st == PL_OK) {
        uint32_t bad = find_left_recursion(g);
        if (bad == UINT32_MAX) nomem(&p);
        else if (bad) perr(&p, NULL, "left recursion in rule '%s' (rewrite it as repetition, e.g. x ::= y (\",\" y)*)", g->rule_name[bad - 1]);
    }
    for (size_t i = 0; i < p.n_rules; i++) {
        free(p.rules[i].d);
        if (p.names) free(p.names[i]);
    }
    free(p.rules);
    free(p.names);
    free(p.name_pos);
    if (p.st != PL_OK) {
        pl_grules_free(g);
        return pl_errorf(p.st, "%s", p.msg);
    }
    *out = g;
    return PL_OK;
}
