/* Template text -> tokens, following jinja2's lexer (3.1) with Hugging
 * Face's settings: trim_blocks=True, lstrip_blocks=True, no line statements,
 * keep_trailing_newline=False. Every detail of whitespace handling matters
 * because chat templates are compared byte for byte:
 *   - the source's newlines are normalised to "\n" and one trailing newline
 *     is dropped;
 *   - "{%-", "{{-", "{#-" strip all whitespace before the tag;
 *   - otherwise, for "{%" and "{#" (not "{{") without "+", spaces/tabs
 *     between the start of the line and the tag are removed (lstrip_blocks);
 *   - "-%}", "-}}", "-#}" strip all whitespace after the tag;
 *   - "%}" and "#}" eat one directly following newline (trim_blocks);
 *   - inside a tag, "}}" / "%}" only end the tag when brackets balance. */
#include "chat/jt.h"
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ------------------------------------------------------------------ arena */

struct jt_arena_chunk {
    jt_arena_chunk *next;
    size_t used, cap;
    _Alignas(16) unsigned char data[];
};

void *jt_arena_alloc(jt_arena *a, size_t size) {
    size = (size + 15) & ~(size_t)15;
    jt_arena_chunk *c = a->head;
    if (!c || c->cap - c->used < size) {
        size_t cap = size > 16384 ? size : 16384;
        c = malloc(sizeof(jt_arena_chunk) + cap);
        if (!c) return NULL;
        c->next = a->head;
        c->used = 0;
        c->cap = cap;
        a->head = c;
    }
    void *p = c->data + c->used;
    c->used += size;
    memset(p, 0, size);
    return p;
}

char *jt_arena_strdup(jt_arena *a, const char *s, size_t n) {
    char *p = jt_arena_alloc(a, n + 1);
    if (!p) return NULL;
    memcpy(p, s, n);
    p[n] = 0;
    return p;
}

void jt_arena_free(jt_arena *a) {
    jt_arena_chunk *c = a->head;
    while (c) {
        jt_arena_chunk *n = c->next;
        free(c);
        c = n;
    }
    a->head = NULL;
}

/* ------------------------------------------------------------------ lexer */

typedef struct lexer {
    const char *src;
    size_t len, pos;
    jt_arena *arena;
    jt_token *toks;
    size_t n, cap;
    /* incremental line/column tracking */
    size_t lc_off;
    int lc_line, lc_col;
    jt_syntax_error *err;
    bool failed;
} lexer;

static void linecol(lexer *L, size_t off, int *line, int *col) {
    if (off < L->lc_off) { L->lc_off = 0; L->lc_line = 1; L->lc_col = 1; }
    for (; L->lc_off < off && L->lc_off < L->len; L->lc_off++) {
        unsigned char ch = (unsigned char)L->src[L->lc_off];
        if (ch == '\n') { L->lc_line++; L->lc_col = 1; }
        else if ((ch & 0xC0) != 0x80) L->lc_col++;   /* columns count code points */
    }
    *line = L->lc_line;
    *col = L->lc_col;
}

static int lex_fail(lexer *L, size_t off, const char *fmt, ...) {
    if (L->failed) return -1;
    L->failed = true;
    linecol(L, off, &L->err->line, &L->err->col);
    L->err->st = PL_ERR_FORMAT;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(L->err->msg, sizeof L->err->msg, fmt, ap);
    va_end(ap);
    return -1;
}

static jt_token *emit(lexer *L, int type, size_t off) {
    if (L->n == L->cap) {
        size_t nc = L->cap ? L->cap * 2 : 64;
        jt_token *nt = realloc(L->toks, nc * sizeof *nt);
        if (!nt) {
            lex_fail(L, off, "out of memory");
            L->err->st = PL_ERR_NO_MEMORY;
            return NULL;
        }
        L->toks = nt;
        L->cap = nc;
    }
    jt_token *t = &L->toks[L->n++];
    memset(t, 0, sizeof *t);
    t->type = (uint8_t)type;
    linecol(L, off, &t->line, &t->col);
    return t;
}

/* Python's str.isspace() on the UTF-8 sequence at s[i]; sets *n to its size. */
static bool space_at(const char *s, size_t len, size_t i, size_t *n) {
    size_t j = i;
    uint32_t cp = jt_utf8_next(s, len, &j);
    *n = j - i;
    return jt_cp_space(cp);
}

/* Length of text[0..n) after Python's rstrip(). */
static size_t rstrip_len(const char *s, size_t n) {
    size_t end = n;
    while (end > 0) {
        /* step back one code point */
        size_t st = end - 1;
        while (st > 0 && ((unsigned char)s[st] & 0xC0) == 0x80 && end - st < 4) st--;
        size_t cl;
        if (!space_at(s, end, st, &cl) || st + cl != end) break;
        end = st;
    }
    return end;
}

static size_t skip_space(const char *s, size_t len, size_t i) {
    size_t cl;
    while (i < len && space_at(s, len, i, &cl)) i += cl;
    return i;
}

/* Data before a tag, with the tag's whitespace control applied. */
static int emit_data(lexer *L, size_t start, size_t end, char sign, bool lstrip_ok) {
    const char *t = L->src + start;
    size_t n = end - start;
    if (sign == '-') {
        n = rstrip_len(t, n);
    } else if (sign != '+' && lstrip_ok) {
        /* lstrip_blocks: only whitespace between the last newline (or the
         * start of a line) and the tag */
        size_t l_pos = n;
        while (l_pos > 0 && t[l_pos - 1] != '\n') l_pos--;
        bool line_starting = start == 0 || L->src[start - 1] == '\n';
        if ((l_pos > 0 || line_starting) && l_pos < n && skip_space(t, n, l_pos) == n) n = l_pos;
    }
    if (n == 0) return 0;
    jt_token *tk = emit(L, JT_TK_DATA, start);
    if (!tk) return -1;
    tk->s = t;
    tk->len = n;
    return 0;
}

static bool is_name_start(unsigned char c) { return (c | 32) >= 'a' && (c | 32) <= 'z' ? true : c == '_' || c >= 0x80; }
static bool is_name_char(unsigned char c) { return is_name_start(c) || (c >= '0' && c <= '9'); }
static bool is_digit(char c) { return c >= '0' && c <= '9'; }

/* digits with single underscores between them: (\d+_)*\d+ */
static size_t scan_digits(const char *s, size_t len, size_t i) {
    if (i >= len || !is_digit(s[i])) return 0;
    size_t j = i;
    while (j < len) {
        if (is_digit(s[j])) { j++; continue; }
        if (s[j] == '_' && j + 1 < len && is_digit(s[j + 1])) { j++; continue; }
        break;
    }
    return j - i;
}

static int hexval(char c) {
    if (c >= '0' && c <= '9') return c - '0';
    if ((c | 32) >= 'a' && (c | 32) <= 'f') return (c | 32) - 'a' + 10;
    return -1;
}

/* Decodes a string literal body the way jinja2 does (Python's
 * "unicode-escape"): \n \t \r \\ \' \" \a \b \f \v, octal, \xhh, \uhhhh,
 * \Uhhhhhhhh, backslash-newline; unknown escapes stay as written. */
static int decode_string(lexer *L, size_t off, const char *s, size_t n, jt_token *tk) {
    char *out = jt_arena_alloc(L->arena, n + 1);
    if (!out) return lex_fail(L, off, "out of memory");
    size_t o = 0;
    for (size_t i = 0; i < n; i++) {
        if (s[i] != '\\' || i + 1 >= n) { out[o++] = s[i]; continue; }
        char e = s[++i];
        uint32_t cp;
        int digits = 0;
        switch (e) {
        case '\n': continue;
        case '\\': out[o++] = '\\'; continue;
        case '\'': out[o++] = '\''; continue;
        case '"': out[o++] = '"'; continue;
        case 'a': out[o++] = 7; continue;
        case 'b': out[o++] = 8; continue;
        case 'f': out[o++] = 12; continue;
        case 'n': out[o++] = '\n'; continue;
        case 'r': out[o++] = '\r'; continue;
        case 't': out[o++] = '\t'; continue;
        case 'v': out[o++] = 11; continue;
        case 'x': digits = 2; break;
        case 'u': digits = 4; break;
        case 'U': digits = 8; break;
        default:
            if (e >= '0' && e <= '7') {
                cp = 0;
                int k = 0;
                while (k < 3 && i < n && s[i] >= '0' && s[i] <= '7') { cp = cp * 8 + (uint32_t)(s[i] - '0'); i++; k++; }
                i--;
                char u[4];
                int m = jt_utf8_put(cp, u);
                memcpy(out + o, u, (size_t)m);   /* octal escapes are <= 3 bytes: fits in 4 source bytes */
                o += (size_t)m;
                continue;
            }
            out[o++] = '\\';
            out[o++] = e;
            continue;
        }
        cp = 0;
        for (int k = 0; k < digits; k++) {
            int h = i + 1 + (size_t)k < n ? hexval(s[i + 1 + k]) : -1;
            if (h < 0) return lex_fail(L, off, "truncated \\%c escape in string literal", e);
            cp = cp * 16 + (uint32_t)h;
        }
        i += (size_t)digits;
        if (cp > 0x10FFFF) return lex_fail(L, off, "illegal Unicode character in string literal");
        /* join a \ud83d\ude00 pair into one character; lone surrogates
         * cannot be UTF-8 and become U+FFFD */
        if (cp >= 0xD800 && cp <= 0xDBFF && i + 6 < n && s[i + 1] == '\\' && s[i + 2] == 'u') {
            uint32_t lo = 0;
            int k;
            for (k = 0; k < 4; k++) {
                int h = hexval(s[i + 3 + k]);
                if (h < 0) break;
                lo = lo * 16 + (uint32_t)h;
            }
            if (k == 4 && lo >= 0xDC00 && lo <= 0xDFFF) {
                cp = 0x10000 + ((cp - 0xD800) << 10) + (lo - 0xDC00);
                i += 6;
            }
        }
        if (cp >= 0xD800 && cp <= 0xDFFF) cp = 0xFFFD;
        char u[4];
        int m = jt_utf8_put(cp, u);
        memcpy(out + o, u, (size_t)m);    /* an escape is at least as long as its UTF-8 */
        o += (size_t)m;
    }
    out[o] = 0;
    tk->s = out;
    tk->len = o;
    return 0;
}

static const struct { const char *s; uint8_t op; } ops2[] = {
    {"//", JT_OP_FLOORDIV}, {"**", JT_OP_POW}, {"==", JT_OP_EQ}, {"!=", JT_OP_NE},
    {">=", JT_OP_GTEQ}, {"<=", JT_OP_LTEQ},
};

static int op1(char c) {
    switch (c) {
    case '+': return JT_OP_ADD; case '-': return JT_OP_SUB; case '/': return JT_OP_DIV;
    case '*': return JT_OP_MUL; case '%': return JT_OP_MOD; case '~': return JT_OP_TILDE;
    case '[': return JT_OP_LBRACKET; case ']': return JT_OP_RBRACKET;
    case '(': return JT_OP_LPAREN; case ')': return JT_OP_RPAREN;
    case '{': return JT_OP_LBRACE; case '}': return JT_OP_RBRACE;
    case '>': return JT_OP_GT; case '<': return JT_OP_LT; case '=': return JT_OP_ASSIGN;
    case '.': return JT_OP_DOT; case ':': return JT_OP_COLON; case '|': return JT_OP_PIPE;
    case ',': return JT_OP_COMMA; case ';': return JT_OP_SEMICOLON;
    default: return 0;
    }
}

/* Tokens inside {% ... %} or {{ ... }}, up to and including the end tag. */
static int lex_tag(lexer *L, bool block, size_t tag_off) {
    const char *s = L->src;
    size_t len = L->len;
    char stack[JT_MAX_BRACKETS];
    int depth = 0;
    for (;;) {
        size_t p = L->pos;
        if (p >= len)
            return lex_fail(L, tag_off, "unexpected end of template: tag opened here is not closed with '%s'",
                            block ? "%}" : "}}");
        char endc = block ? '%' : '}';
        if (depth == 0) {
            if (block && s[p] == '+' && p + 2 < len + 0 && s[p + 1] == '%' && s[p + 2] == '}') {
                if (!emit(L, JT_TK_BLOCK_END, p)) return -1;
                L->pos = p + 3;
                return 0;
            }
            if (s[p] == '-' && p + 2 < len && s[p + 1] == endc && s[p + 2] == '}') {
                if (!emit(L, block ? JT_TK_BLOCK_END : JT_TK_VAR_END, p)) return -1;
                L->pos = skip_space(s, len, p + 3);
                return 0;
            }
            if (s[p] == endc && p + 1 < len && s[p + 1] == '}') {
                if (!emit(L, block ? JT_TK_BLOCK_END : JT_TK_VAR_END, p)) return -1;
                L->pos = p + 2;
                if (block && L->pos < len && s[L->pos] == '\n') L->pos++;   /* trim_blocks */
                return 0;
            }
        }
        size_t cl;
        if (space_at(s, len, p, &cl)) { L->pos = skip_space(s, len, p); continue; }
        unsigned char c = (unsigned char)s[p];
        /* float: (?<!\.)(\d+_)*\d+((\.(\d+_)*\d+)?e[+\-]?(\d+_)*\d+|\.(\d+_)*\d+) */
        if (is_digit((char)c)) {
            size_t d = scan_digits(s, len, p), q = p + d;
            bool is_float = false;
            if (p == 0 || s[p - 1] != '.') {
                size_t r = q;
                bool frac = false;
                if (r < len && s[r] == '.' && scan_digits(s, len, r + 1)) { r += 1 + scan_digits(s, len, r + 1); frac = true; }
                size_t e = r;
                if (e < len && (s[e] | 32) == 'e') {
                    size_t f = e + 1;
                    if (f < len && (s[f] == '+' || s[f] == '-')) f++;
                    size_t ed = scan_digits(s, len, f);
                    if (ed) { r = f + ed; is_float = true; }
                }
                if (frac) is_float = true;
                if (is_float) {
                    char buf[128];
                    size_t k = 0;
                    for (size_t i = p; i < r && k < sizeof buf - 1; i++)
                        if (s[i] != '_') buf[k++] = s[i];
                    buf[k] = 0;
                    jt_token *t = emit(L, JT_TK_FLOAT, p);
                    if (!t) return -1;
                    t->fval = strtod(buf, NULL);
                    L->pos = r;
                    continue;
                }
            }
            /* integer: 0b.. 0o.. 0x.. | [1-9](_?\d)* | 0(_?0)* */
            int base = 10;
            size_t r = p;
            if (c == '0' && p + 2 < len + 1 && p + 1 < len) {
                char b = (char)(s[p + 1] | 32);
                base = b == 'b' ? 2 : b == 'o' ? 8 : b == 'x' ? 16 : 10;
            }
            uint64_t v = 0;
            bool overflow = false;
            if (base != 10) {
                r = p + 2;
                size_t start = r;
                for (;;) {
                    size_t q2 = r;
                    if (q2 < len && s[q2] == '_') q2++;
                    int h = q2 < len ? hexval(s[q2]) : -1;
                    if (h < 0 || h >= base) break;
                    if (v > (UINT64_MAX - (uint64_t)h) / (uint64_t)base) overflow = true;
                    v = v * (uint64_t)base + (uint64_t)h;
                    r = q2 + 1;
                }
                if (r == start) { base = 10; r = p; v = 0; }
            }
            if (base == 10) {
                if (c == '0') {
                    r = p + 1;
                    while (r < len && (s[r] == '0' || (s[r] == '_' && r + 1 < len && s[r + 1] == '0'))) r++;
                } else {
                    r = p;
                    while (r < len && (is_digit(s[r]) || (s[r] == '_' && r + 1 < len && is_digit(s[r + 1])))) {
                        if (s[r] != '_') {
                            uint64_t dgt = (uint64_t)(s[r] - '0');
                            if (v > (UINT64_MAX - dgt) / 10) overflow = true;
                            v = v * 10 + dgt;
                        }
                        r++;
                    }
                }
            }
            if (overflow || v > (uint64_t)INT64_MAX)
                return lex_fail(L, p, "integer literal too large");
            jt_token *t = emit(L, JT_TK_INT, p);
            if (!t) return -1;
            t->ival = (int64_t)v;
            L->pos = r;
            continue;
        }
        if (is_name_start(c)) {
            size_t q = p;
            while (q < len && is_name_char((unsigned char)s[q])) q++;
            jt_token *t = emit(L, JT_TK_NAME, p);
            if (!t) return -1;
            t->s = jt_arena_strdup(L->arena, s + p, q - p);
            if (!t->s) return lex_fail(L, p, "out of memory");
            t->len = q - p;
            L->pos = q;
            continue;
        }
        if (c == '\'' || c == '"') {
            size_t q = p + 1;
            while (q < len && s[q] != (char)c) q += (s[q] == '\\') ? 2 : 1;
            if (q >= len) return lex_fail(L, p, "unterminated string literal");
            jt_token *t = emit(L, JT_TK_STRING, p);
            if (!t) return -1;
            if (decode_string(L, p, s + p + 1, q - p - 1, t)) return -1;
            L->pos = q + 1;
            continue;
        }
        int op = 0;
        size_t oplen = 1;
        for (size_t k = 0; k < sizeof ops2 / sizeof ops2[0]; k++)
            if (p + 1 < len && s[p] == ops2[k].s[0] && s[p + 1] == ops2[k].s[1]) { op = ops2[k].op; oplen = 2; break; }
        if (!op) op = op1((char)c);
        if (!op) {
            if (c == '\'' || c == '"') return lex_fail(L, p, "unterminated string literal");
            return lex_fail(L, p, "unexpected char '%c'", c >= 0x20 && c < 0x7f ? c : '?');
        }
        if (op == JT_OP_LBRACE || op == JT_OP_LPAREN || op == JT_OP_LBRACKET) {
            if (depth >= JT_MAX_BRACKETS) return lex_fail(L, p, "brackets nested too deeply");
            stack[depth++] = op == JT_OP_LBRACE ? '}' : op == JT_OP_LPAREN ? ')' : ']';
        } else if (op == JT_OP_RBRACE || op == JT_OP_RPAREN || op == JT_OP_RBRACKET) {
            if (depth == 0) return lex_fail(L, p, "unexpected '%c'", c);
            char want = stack[--depth];
            if (want != (char)c) return lex_fail(L, p, "unexpected '%c', expected '%c'", c, want);
        }
        jt_token *t = emit(L, JT_TK_OP, p);
        if (!t) return -1;
        t->op = (uint8_t)op;
        L->pos = p + oplen;
    }
}

/* After "{%" (and an optional sign): is this "raw" followed by the tag end? */
static bool match_raw(const char *s, size_t len, size_t i, size_t *after) {
    i = skip_space(s, len, i);
    if (i + 3 > len || memcmp(s + i, "raw", 3) != 0) return false;
    i = skip_space(s, len, i + 3);
    if (i + 3 <= len && s[i] == '-' && s[i + 1] == '%' && s[i + 2] == '}') { *after = skip_space(s, len, i + 3); return true; }
    if (i + 2 <= len && s[i] == '%' && s[i + 1] == '}') { *after = i + 2; return true; }
    return false;
}

/* Finds "{%[-+]? endraw %}" from i. Sets the data end, the sign and the end
 * of the closing tag. */
static bool find_endraw(const char *s, size_t len, size_t i, size_t *data_end, char *sign, size_t *after) {
    for (; i + 1 < len; i++) {
        if (s[i] != '{' || s[i + 1] != '%') continue;
        size_t j = i + 2;
        char sg = 0;
        if (j < len && (s[j] == '-' || s[j] == '+')) sg = s[j++];
        j = skip_space(s, len, j);
        if (j + 6 > len || memcmp(s + j, "endraw", 6) != 0) continue;
        j = skip_space(s, len, j + 6);
        if (j + 3 <= len && s[j] == '+' && s[j + 1] == '%' && s[j + 2] == '}') *after = j + 3;
        else if (j + 3 <= len && s[j] == '-' && s[j + 1] == '%' && s[j + 2] == '}') *after = skip_space(s, len, j + 3);
        else if (j + 2 <= len && s[j] == '%' && s[j + 1] == '}') {
            *after = j + 2;
            if (*after < len && s[*after] == '\n') (*after)++;
        } else continue;
        *data_end = i;
        *sign = sg;
        return true;
    }
    return false;
}

int jt_lex(const char *text, size_t tlen, jt_arena *arena, jt_token **toks, size_t *ntoks,
           jt_syntax_error *err) {
    *toks = NULL;
    *ntoks = 0;
    /* Normalise newlines and drop one trailing newline, as jinja2 does. */
    char *src = jt_arena_alloc(arena, tlen + 1);
    if (!src) { err->st = PL_ERR_NO_MEMORY; snprintf(err->msg, sizeof err->msg, "out of memory"); return -1; }
    size_t len = 0;
    for (size_t i = 0; i < tlen; i++) {
        if (text[i] == '\r') {
            src[len++] = '\n';
            if (i + 1 < tlen && text[i + 1] == '\n') i++;
        } else {
            src[len++] = text[i];
        }
    }
    if (len > 0 && src[len - 1] == '\n') len--;
    src[len] = 0;

    lexer L = {0};
    L.src = src;
    L.len = len;
    L.arena = arena;
    L.lc_line = 1;
    L.lc_col = 1;
    L.err = err;

    while (L.pos < len && !L.failed) {
        /* next "{{", "{%" or "{#" */
        size_t p = L.pos;
        const char *q = NULL;
        while (p + 1 < len) {
            q = memchr(src + p, '{', len - p - 1);
            if (!q) break;
            p = (size_t)(q - src);
            if (src[p + 1] == '{' || src[p + 1] == '%' || src[p + 1] == '#') break;
            p++;
            q = NULL;
        }
        if (!q) {
            if (emit_data(&L, L.pos, len, 0, false)) break;
            L.pos = len;
            break;
        }
        char kind = src[p + 1];
        size_t after_open = p + 2;
        char sign = 0;
        if (after_open < len && (src[after_open] == '-' || src[after_open] == '+')) sign = src[after_open++];
        size_t raw_after;
        bool raw = kind == '%' && match_raw(src, len, after_open, &raw_after);
        if (emit_data(&L, L.pos, p, sign, kind != '{')) break;
        if (raw) {
            size_t dend, rafter;
            char rsign;
            if (!find_endraw(src, len, raw_after, &dend, &rsign, &rafter)) {
                lex_fail(&L, p, "missing end of raw directive");
                break;
            }
            L.pos = raw_after;
            if (emit_data(&L, raw_after, dend, rsign, true)) break;
            L.pos = rafter;
            continue;
        }
        if (kind == '#') {
            /* the comment ends at the first "#}"; a '-' or '+' right before it
             * is its whitespace control */
            size_t e = after_open;
            while (e + 1 < len && !(src[e] == '#' && src[e + 1] == '}')) e++;
            if (e + 1 >= len) { lex_fail(&L, p, "missing end of comment tag"); break; }
            char esign = (e > after_open && (src[e - 1] == '-' || src[e - 1] == '+')) ? src[e - 1] : 0;
            size_t after = e + 2;
            if (esign == '-') after = skip_space(src, len, after);
            else if (esign != '+' && after < len && src[after] == '\n') after++;
            L.pos = after;
            continue;
        }
        if (!emit(&L, kind == '%' ? JT_TK_BLOCK_BEGIN : JT_TK_VAR_BEGIN, p)) break;
        L.pos = after_open;
        if (lex_tag(&L, kind == '%', p)) break;
    }
    if (!L.failed && emit(&L, JT_TK_EOF, len)) {
        *toks = L.toks;
        *ntoks = L.n;
        return 0;
    }
    free(L.toks);
    return -1;
}
