/* Python's string formatting for templates: "fmt % args", str.format(), and
 * the |format filter. Covers the conversions templates use (s r d i f e g x
 * o c %, flags, width, precision, fill/align, sign, '#', '0', ','); anything
 * else is reported as an error rather than guessed. */
#include "chat/jt.h"
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct fspec {
    uint32_t fill;
    char align;      /* '<' '>' '^' '=' or 0 (default) */
    char sign;       /* '+' ' ' '-' or 0 */
    bool alt, zero, grouping;
    int64_t width;   /* -1: none */
    int64_t prec;    /* -1: none */
    char type;       /* 0: none */
} fspec;

static int put_cp(jt_ctx *c, jt_buf *b, uint32_t cp) {
    char u[4];
    int n = jt_utf8_put(cp, u);
    return jt_buf_put(c, b, u, (size_t)n);
}

/* Inserts ',' every three digits of the integer part of a number. */
static void group_digits(char *num, size_t cap) {
    char *p = num;
    if (*p == '-' || *p == '+' || *p == ' ') p++;
    size_t nd = 0;
    while (p[nd] >= '0' && p[nd] <= '9') nd++;
    size_t commas = nd > 3 ? (nd - 1) / 3 : 0;
    size_t len = strlen(num);
    if (!commas || len + commas + 1 > cap) return;
    size_t tail = len - (size_t)(p - num) - nd;
    memmove(p + nd + commas, p + nd, tail + 1);
    char *src = p + nd - 1, *dst = p + nd + commas - 1;
    for (size_t k = 0; k < nd; k++) {
        *dst-- = *src--;
        if (k % 3 == 2 && k + 1 < nd) *dst-- = ',';
    }
}

/* The number as text (with sign), per type; 0 = ok. */
static int format_number(jt_ctx *c, jt_val v, const fspec *f, bool percent, char *out, size_t cap) {
    char type = f->type;
    bool is_float = v.t == JT_FLOAT;
    char tmp[400];
    if (type == 'd' || type == 'i' || type == 'u') {
        if (is_float) {
            if (!percent) return jt_err(c, "Unknown format code 'd' for object of type 'float'");
            double x = trunc(v.u.f);
            if (!isfinite(x)) return jt_err(c, "cannot convert float %s to integer", isnan(x) ? "NaN" : "infinity");
            if (fabs(x) < 9.2e18) snprintf(tmp, sizeof tmp, "%lld", (long long)x);
            else snprintf(tmp, sizeof tmp, "%.0f", x);
        } else {
            snprintf(tmp, sizeof tmp, "%lld", (long long)jt_as_int(v));
        }
    } else if (type == 'x' || type == 'X' || type == 'o' || type == 'b') {
        if (is_float) return jt_err(c, "%%%c format: an integer is required, not float", type);
        int64_t x = jt_as_int(v);
        uint64_t m = x < 0 ? (uint64_t)0 - (uint64_t)x : (uint64_t)x;
        char digits[72];
        int nd = 0;
        unsigned base = type == 'o' ? 8 : type == 'b' ? 2 : 16;
        const char *al = type == 'X' ? "0123456789ABCDEF" : "0123456789abcdef";
        do { digits[nd++] = al[m % base]; m /= base; } while (m);
        char *o = tmp;
        if (x < 0) *o++ = '-';
        if (f->alt) { *o++ = '0'; *o++ = type == 'o' ? 'o' : type == 'b' ? 'b' : type; }
        while (nd) *o++ = digits[--nd];
        *o = 0;
    } else {
        double x = jt_as_float(v);
        int prec = f->prec < 0 ? 6 : f->prec > 100 ? 100 : (int)f->prec;
        if (isnan(x) || isinf(x)) {
            const char *t = isnan(x) ? "nan" : "inf";
            snprintf(tmp, sizeof tmp, "%s%s", (isinf(x) && x < 0) ? "-" : "", t);
            if (type == 'F' || type == 'E' || type == 'G')
                for (char *p = tmp; *p; p++) *p = (char)(*p >= 'a' ? *p - 32 : *p);
        } else if (type == 'f' || type == 'F' || type == 'e' || type == 'E' || type == 'g' || type == 'G') {
            char fmt[16];
            snprintf(fmt, sizeof fmt, "%%%s.*%c", f->alt ? "#" : "", type);
            snprintf(tmp, sizeof tmp, fmt, prec, x);
        } else if (type == '%') {
            snprintf(tmp, sizeof tmp, "%.*f%%", prec, x * 100);
        } else if (type == 0 && is_float) {
            if (f->prec < 0) jt_fmt_float(x, tmp);
            else {
                snprintf(tmp, sizeof tmp, "%.*g", f->prec == 0 ? 1 : prec, x);
                if (!strpbrk(tmp, ".e")) strcat(tmp, ".0");
            }
        } else {
            return jt_err(c, "unsupported format character '%c'", type ? type : '?');
        }
    }
    if (f->grouping) group_digits(tmp, sizeof tmp);
    const char *sign = "";
    if (tmp[0] != '-') {
        if (f->sign == '+') sign = "+";
        else if (f->sign == ' ') sign = " ";
    }
    snprintf(out, cap, "%s%s", sign, tmp);
    return 0;
}

/* Formats one value into b following spec f: percent-style ("%5s") or
 * format()-style ("{:>5}"), which differ in defaults and in what they allow. */
static int format_one(jt_ctx *c, jt_buf *b, jt_val v, const fspec *f, bool percent) {
    char type = f->type;
    if (!percent) {
        bool spec_empty = !type && f->width < 0 && f->prec < 0 && !f->align && !f->sign && !f->alt && !f->zero &&
                          !f->grouping && !f->fill;
        if (v.t == JT_UNDEF && !spec_empty) return jt_undef_error(c, v);
        /* bool with a spec formats as an int; other objects take no spec */
        if (v.t == JT_BOOL && !spec_empty) v = jt_int(v.u.b);
        if (!jt_is_num(v) && v.t != JT_STR && !spec_empty)
            return jt_err(c, "unsupported format string passed to %s.__format__", jt_type_name(v));
        if (v.t == JT_STR) {
            if (f->sign) return jt_err(c, "Sign not allowed in string format specifier");
            if (f->alt) return jt_err(c, "Alternate form (#) not allowed in string format specifier");
            if (f->grouping) return jt_err(c, "Cannot specify ',' with 's'.");
            if (f->align == '=') return jt_err(c, "'=' alignment not allowed in string format specifier");
            if (type && type != 's') return jt_err(c, "Unknown format code '%c' for object of type 'str'", type);
        } else if (jt_is_num(v)) {
            if (type == 's') return jt_err(c, "Unknown format code 's' for object of type '%s'", jt_type_name(v));
            if (v.t != JT_FLOAT && f->prec >= 0 && !strchr("eEfFgG%", type ? type : 'd'))
                return jt_err(c, "Precision not allowed in integer format specifier");
        }
    }
    jt_buf body = {0};
    char num[512];
    bool numeric = false;
    int r = 0;
    if (type == 's' || type == 'r' || type == 'a' || (type == 0 && !jt_is_num(v)) || (type == 0 && v.t == JT_BOOL)) {
        r = (type == 'r' || type == 'a') ? jt_put_repr(c, &body, v, 0) : jt_put_str(c, &body, v);
        if (!r && f->prec >= 0) {
            size_t cut = 0, k = 0;
            while (cut < body.n && (int64_t)k < f->prec) { jt_utf8_next(body.p, body.n, &cut); k++; }
            body.n = cut;
        }
    } else if (type == 'c') {
        if (!jt_is_num(v) || v.t == JT_FLOAT) {
            jt_buf_free(&body);
            return jt_err(c, "%%c requires an int or a unicode character, not %s", jt_type_name(v));
        }
        int64_t x = jt_as_int(v);
        if (x < 0 || x > 0x10FFFF) { jt_buf_free(&body); return jt_err(c, "%%c arg not in range(0x110000)"); }
        char u[4];
        int n = jt_utf8_put((uint32_t)x, u);
        r = jt_buf_put(c, &body, u, (size_t)n);   /* may be a NUL byte */
    } else {
        if (!jt_is_num(v)) {
            jt_buf_free(&body);
            return jt_err(c, "%%%c format: a real number is required, not %s", type, jt_type_name(v));
        }
        fspec g = *f;
        if (type == 0) g.type = v.t == JT_FLOAT ? 0 : 'd';
        r = format_number(c, v, &g, percent, num, sizeof num);
        if (!r) r = jt_buf_puts(c, &body, num);
        numeric = true;
    }
    if (r) { jt_buf_free(&body); return -1; }
    size_t ncp = jt_utf8_count(body.p ? body.p : "", body.n);
    int64_t padn = f->width > (int64_t)ncp ? f->width - (int64_t)ncp : 0;
    if (padn > (int64_t)c->max_output) { jt_buf_free(&body); return jt_err(c, "format width too large"); }
    /* defaults: %-formatting right-aligns everything, format() left-aligns text */
    char align = f->align ? f->align : (numeric || percent) ? '>' : '<';
    uint32_t fill = f->fill ? f->fill : ' ';
    if (f->zero && !f->align && !(percent && !numeric)) {
        align = numeric ? '=' : '<';
        if (!f->fill) fill = '0';
    }
    int64_t left = align == '>' ? padn : align == '^' ? padn / 2 : align == '=' ? padn : 0;
    int64_t right = padn - left;
    size_t sign_len = 0;
    const char *bp = body.p ? body.p : "";
    if (align == '=' && body.n && (bp[0] == '-' || bp[0] == '+' || bp[0] == ' ')) sign_len = 1;
    if (align == '=' && body.n > sign_len + 1 && bp[sign_len] == '0' &&
        (bp[sign_len + 1] == 'x' || bp[sign_len + 1] == 'X' || bp[sign_len + 1] == 'o' || bp[sign_len + 1] == 'b'))
        sign_len += 2;
    size_t head = align == '=' ? sign_len : 0;
    r = jt_buf_put(c, b, bp, head);
    for (int64_t i = 0; i < left && !r; i++) r = put_cp(c, b, fill);
    if (!r) r = jt_buf_put(c, b, bp + head, body.n - head);
    for (int64_t i = 0; i < right && !r; i++) r = put_cp(c, b, fill);
    jt_buf_free(&body);
    return r;
}

/* ------------------------------------------------------------ "%" format */

int jt_str_percent(jt_ctx *c, jt_val fmt, jt_val args, jt_val *out) {
    const jt_str *s = fmt.u.s;
    bool is_tuple = args.t == JT_TUPLE;
    bool is_map = args.t == JT_DICT;
    /* Python skips the "not all arguments converted" check for any right
     * operand with __getitem__ (lists, Undefined), not only dicts */
    bool lenient = is_map || args.t == JT_LIST || args.t == JT_UNDEF;
    size_t nargs = is_tuple ? args.u.l->n : 1, ai = 0;
    bool used_single = false;
    jt_buf b = {0};
    size_t i = 0;
    while (i < s->len) {
        const char *pc = memchr(s->s + i, '%', s->len - i);
        size_t next = pc ? (size_t)(pc - s->s) : s->len;
        if (jt_buf_put(c, &b, s->s + i, next - i)) goto fail;
        if (!pc) break;
        i = next + 1;
        if (i >= s->len) { jt_err(c, "incomplete format"); goto fail; }
        if (s->s[i] == '%') { if (jt_buf_putc(c, &b, '%')) goto fail; i++; continue; }
        jt_val arg = jt_none();
        bool have_arg = false;
        if (s->s[i] == '(') {
            size_t e = i + 1;
            int depth = 1;
            while (e < s->len && depth) { if (s->s[e] == '(') depth++; else if (s->s[e] == ')') depth--; e++; }
            if (depth) { jt_err(c, "incomplete format key"); goto fail; }
            if (!is_map) { jt_err(c, "format requires a mapping"); goto fail; }
            jt_val *v = jt_dict_gets(args.u.d, s->s + i + 1, e - i - 2);
            if (!v) { jt_err(c, "'%.*s'", (int)(e - i - 2), s->s + i + 1); goto fail; }
            arg = *v;
            have_arg = true;
            used_single = true;
            i = e;
        }
        fspec f = {0, 0, 0, false, false, false, -1, -1, 0};
        for (; i < s->len; i++) {
            char ch = s->s[i];
            if (ch == '-') f.align = '<';
            else if (ch == '+') f.sign = '+';
            else if (ch == ' ') { if (f.sign != '+') f.sign = ' '; }
            else if (ch == '#') f.alt = true;
            else if (ch == '0') f.zero = true;
            else break;
        }
        for (int part = 0; part < 2; part++) {
            if (part == 1) {
                if (i < s->len && s->s[i] == '.') { i++; f.prec = 0; }
                else break;
            }
            int64_t *dst = part == 0 ? &f.width : &f.prec;
            if (i < s->len && s->s[i] == '*') {
                i++;
                if (!is_tuple || ai >= nargs) { jt_err(c, "not enough arguments for format string"); goto fail; }
                jt_val w = args.u.l->v[ai++];
                if (w.t != JT_INT && w.t != JT_BOOL) { jt_err(c, "* wants int"); goto fail; }
                *dst = jt_as_int(w);
                if (part == 0 && *dst < 0) { f.align = '<'; *dst = -*dst; }
                continue;
            }
            int64_t n = part == 0 ? -1 : 0;
            while (i < s->len && s->s[i] >= '0' && s->s[i] <= '9') {
                n = (n < 0 ? 0 : n) * 10 + (s->s[i++] - '0');
                if (n > 1000000) { jt_err(c, "width too big"); goto fail; }
            }
            *dst = n;
        }
        while (i < s->len && (s->s[i] == 'l' || s->s[i] == 'h' || s->s[i] == 'L')) i++;
        if (i >= s->len) { jt_err(c, "incomplete format"); goto fail; }
        char type = s->s[i++];
        if (!strchr("sradiufFeEgGxXoc", type)) {
            jt_err(c, "unsupported format character '%c' (0x%x)", type >= 0x20 && type < 0x7f ? type : '?', (unsigned char)type);
            goto fail;
        }
        f.type = type == 'u' ? 'd' : type;
        if (f.align == '<') f.zero = false;
        if (!have_arg) {
            if (is_tuple) {
                if (ai >= nargs) { jt_err(c, "not enough arguments for format string"); goto fail; }
                arg = args.u.l->v[ai++];
            } else {
                if (used_single && !is_map) { jt_err(c, "not enough arguments for format string"); goto fail; }
                arg = args;
                used_single = true;
            }
        }
        if (type == 'c' && arg.t == JT_STR) {
            if (arg.u.s->ncp != 1) { jt_err(c, "%%c requires int or char"); goto fail; }
            f.type = 's';
        }
        if (format_one(c, &b, arg, &f, true)) goto fail;
    }
    if ((is_tuple && ai < nargs) || (!is_tuple && !lenient && !used_single)) {
        jt_err(c, "not all arguments converted during string formatting");
        goto fail;
    }
    return jt_buf_take(c, &b, out);
fail:
    jt_buf_free(&b);
    return -1;
}

/* ------------------------------------------------------------ str.format */

static int parse_spec(jt_ctx *c, const char *p, size_t n, fspec *f) {
    *f = (fspec){0, 0, 0, false, false, false, -1, -1, 0};
    size_t i = 0;
    /* [[fill]align] */
    size_t j = 0;
    uint32_t first = n ? jt_utf8_next(p, n, &j) : 0;
    if (j < n && strchr("<>=^", p[j])) { f->fill = first; f->align = p[j]; i = j + 1; }
    else if (n && strchr("<>=^", p[0])) { f->align = p[0]; i = 1; }
    if (i < n && (p[i] == '+' || p[i] == '-' || p[i] == ' ')) f->sign = p[i++];
    if (i < n && p[i] == '#') { f->alt = true; i++; }
    if (i < n && p[i] == '0') { f->zero = true; i++; }
    int64_t w = -1;
    while (i < n && p[i] >= '0' && p[i] <= '9') {
        w = (w < 0 ? 0 : w) * 10 + (p[i++] - '0');
        if (w > 1000000) return jt_err(c, "too many decimal digits in format string");
    }
    f->width = w;
    if (i < n && p[i] == ',') { f->grouping = true; i++; }
    if (i < n && p[i] == '.') {
        i++;
        int64_t pr = 0;
        if (i >= n || p[i] < '0' || p[i] > '9') return jt_err(c, "Format specifier missing precision");
        while (i < n && p[i] >= '0' && p[i] <= '9') {
            pr = pr * 10 + (p[i++] - '0');
            if (pr > 1000000) return jt_err(c, "too many decimal digits in format string");
        }
        f->prec = pr;
    }
    if (i < n) f->type = p[i++];
    if (i != n) return jt_err(c, "Invalid format specifier");
    if (f->type && !strchr("sdfFeEgGxXobc%", f->type)) return jt_err(c, "Unknown format code '%c'", f->type);
    return 0;
}

int jt_str_format(jt_ctx *c, jt_val fmt, jt_args *a, jt_val *out) {
    const jt_str *s = fmt.u.s;
    jt_buf b = {0};
    size_t i = 0, auto_idx = 0;
    int numbering = 0;   /* 1 auto, 2 manual */
    while (i < s->len) {
        char ch = s->s[i];
        if (ch == '}') {
            if (i + 1 < s->len && s->s[i + 1] == '}') { if (jt_buf_putc(c, &b, '}')) goto fail; i += 2; continue; }
            jt_err(c, "Single '}' encountered in format string");
            goto fail;
        }
        if (ch != '{') {
            size_t st = i;
            while (i < s->len && s->s[i] != '{' && s->s[i] != '}') i++;
            if (jt_buf_put(c, &b, s->s + st, i - st)) goto fail;
            continue;
        }
        if (i + 1 < s->len && s->s[i + 1] == '{') { if (jt_buf_putc(c, &b, '{')) goto fail; i += 2; continue; }
        size_t e = i + 1;
        while (e < s->len && s->s[e] != '}') {
            if (s->s[e] == '{') { jt_err(c, "nested replacement fields are not supported"); goto fail; }
            e++;
        }
        if (e >= s->len) { jt_err(c, "Single '{' encountered in format string"); goto fail; }
        const char *fld = s->s + i + 1;
        size_t flen = e - i - 1;
        i = e + 1;
        /* field [!conv] [:spec] */
        size_t colon = flen, bang = flen;
        for (size_t k = 0; k < flen; k++) {
            if (fld[k] == '!' && bang == flen && colon == flen) bang = k;
            if (fld[k] == ':' ) { colon = k; break; }
        }
        size_t name_end = bang < colon ? bang : colon;
        char conv = 0;
        if (bang < colon) {
            if (bang + 2 != colon) { jt_err(c, "expected ':' after conversion specifier"); goto fail; }
            conv = fld[bang + 1];
            if (conv != 'r' && conv != 's' && conv != 'a') { jt_err(c, "Unknown conversion specifier %c", conv); goto fail; }
        }
        /* argument name: up to the first '.' or '[' */
        size_t an = 0;
        while (an < name_end && fld[an] != '.' && fld[an] != '[') an++;
        jt_val cur;
        if (an == 0) {
            if (numbering == 2) { jt_err(c, "cannot switch from manual field specification to automatic field numbering"); goto fail; }
            numbering = 1;
            if (auto_idx >= a->npos) { jt_err(c, "Replacement index %zu out of range for positional args tuple", auto_idx); goto fail; }
            cur = jt_ref(a->pos[auto_idx++]);
        } else if (fld[0] >= '0' && fld[0] <= '9') {
            if (numbering == 1) { jt_err(c, "cannot switch from automatic field numbering to manual field specification"); goto fail; }
            numbering = 2;
            size_t idx = 0;
            for (size_t k = 0; k < an; k++) {
                if (fld[k] < '0' || fld[k] > '9' || idx > 100000) { jt_err(c, "invalid field name"); goto fail; }
                idx = idx * 10 + (size_t)(fld[k] - '0');
            }
            if (idx >= a->npos) { jt_err(c, "Replacement index %zu out of range for positional args tuple", idx); goto fail; }
            cur = jt_ref(a->pos[idx]);
        } else {
            jt_val *v = NULL;
            for (size_t k = 0; k < a->nkw; k++)
                if (strlen(a->kwn[k]) == an && !memcmp(a->kwn[k], fld, an)) v = &a->kwv[k];
            if (!v) { jt_err(c, "'%.*s'", (int)an, fld); goto fail; }
            cur = jt_ref(*v);
        }
        /* .attr and [key] chains */
        size_t k = an;
        while (k < name_end) {
            jt_val next;
            int r;
            if (fld[k] == '.') {
                size_t st = ++k;
                while (k < name_end && fld[k] != '.' && fld[k] != '[') k++;
                char nm[128];
                if (k - st == 0 || k - st >= sizeof nm) { jt_decref(cur); jt_err(c, "invalid attribute in format field"); goto fail; }
                memcpy(nm, fld + st, k - st);
                nm[k - st] = 0;
                /* the name must outlive an Undefined that mentions it: use no name */
                r = jt_getattr_ex(c, cur, nm, false, &next);
                if (!r && next.t == JT_UNDEF) { jt_decref(cur); jt_err(c, "'%s' object has no attribute '%s'", jt_type_name(cur), nm); goto fail; }
            } else {
                size_t st = ++k;
                while (k < name_end && fld[k] != ']') k++;
                if (k >= name_end) { jt_decref(cur); jt_err(c, "Missing ']' in format string"); goto fail; }
                jt_val key;
                bool digits = k > st;
                int64_t idx = 0;
                for (size_t q = st; q < k; q++) {
                    if (fld[q] < '0' || fld[q] > '9' || idx > 100000000) { digits = false; break; }
                    idx = idx * 10 + (fld[q] - '0');
                }
                if (digits) key = jt_int(idx);
                else if (jt_new_str(c, fld + st, k - st, &key)) { jt_decref(cur); goto fail; }
                k++;
                r = jt_getitem(c, cur, key, &next);
                jt_decref(key);
                if (!r && next.t == JT_UNDEF) { jt_decref(cur); jt_err(c, "format field lookup failed"); goto fail; }
            }
            jt_decref(cur);
            if (r) goto fail;
            cur = next;
        }
        fspec f;
        if (parse_spec(c, colon < flen ? fld + colon + 1 : "", colon < flen ? flen - colon - 1 : 0, &f)) {
            jt_decref(cur);
            goto fail;
        }
        if (conv) {
            jt_buf tb = {0};
            int r = conv == 's' ? jt_put_str(c, &tb, cur) : jt_put_repr(c, &tb, cur, 0);
            jt_decref(cur);
            if (r || jt_buf_take(c, &tb, &cur)) { jt_buf_free(&tb); goto fail; }
        }
        if (f.type == 's' && cur.t != JT_STR) { jt_decref(cur); jt_err(c, "Unknown format code 's' for object of type '%s'", jt_type_name(cur)); goto fail; }
        int r = format_one(c, &b, cur, &f, false);
        jt_decref(cur);
        if (r) goto fail;
    }
    return jt_buf_take(c, &b, out);
fail:
    jt_buf_free(&b);
    return -1;
}
