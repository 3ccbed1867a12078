/* Filters and tests, with jinja2 3.1's semantics (and Hugging Face's tojson:
 * json.dumps(x, ensure_ascii=False, indent=None, separators=None,
 * sort_keys=False)). Filters that expect text take str() of their input, so
 * an undefined value acts as "" the way jinja2's Undefined does. */
#include "chat/jt.h"
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---------------------------------------------------------------- helpers */

static int soft_str(jt_ctx *c, jt_val v, jt_val *out) { return jt_to_str(c, v, out); }

static bool get_int(const jt_val *v, int64_t *out) {
    if (!v || (v->t != JT_INT && v->t != JT_BOOL)) return false;
    *out = jt_as_int(*v);
    return true;
}

/* One dotted path "a.b.0" (a string of n bytes) looked up on item with
 * jinja2's getitem rules; digits are indexes. dflt (may be NULL) replaces an
 * undefined result after each step, as make_attrgetter(default=) does. */
static int attr_path_str(jt_ctx *c, jt_val item, const char *p, size_t n, const jt_val *dflt, jt_val *out) {
    const char *end = p + n;
    jt_val cur = jt_ref(item);
    for (;;) {
        const char *dot = memchr(p, '.', (size_t)(end - p));
        const char *e = dot ? dot : end;
        jt_val key;
        bool digits = e > p;
        int64_t idx = 0;
        for (const char *q = p; q < e; q++) {
            if (*q < '0' || *q > '9' || idx > 100000000) { digits = false; break; }
            idx = idx * 10 + (*q - '0');
        }
        if (digits) key = jt_int(idx);
        else if (jt_new_str(c, p, (size_t)(e - p), &key)) { jt_decref(cur); return -1; }
        jt_val next;
        int r = jt_getitem(c, cur, key, &next);
        jt_decref(key);
        jt_decref(cur);
        if (r) return -1;
        if (dflt && next.t == JT_UNDEF) next = jt_ref(*dflt);
        cur = next;
        if (!dot) break;
        p = dot + 1;
    }
    *out = cur;
    return 0;
}

/* make_attrgetter: a path, or an integer index */
static int attr_path_d(jt_ctx *c, jt_val item, jt_val attr, const jt_val *dflt, jt_val *out) {
    if (attr.t == JT_STR) return attr_path_str(c, item, attr.u.s->s, attr.u.s->len, dflt, out);
    if (jt_getitem(c, item, attr, out)) return -1;
    if (dflt && out->t == JT_UNDEF) *out = jt_ref(*dflt);
    return 0;
}

static int attr_path(jt_ctx *c, jt_val item, jt_val attr, jt_val *out) { return attr_path_d(c, item, attr, NULL, out); }

static int lower_if_str(jt_ctx *c, bool case_sensitive, jt_val *v) {
    if (case_sensitive || v->t != JT_STR) return 0;
    jt_val l;
    int r = jt_str_lower_upper(c, *v, false, &l);
    jt_decref(*v);
    *v = r ? jt_none() : l;
    return r;
}

/* The unique/min/max/groupby key (make_attrgetter + ignore_case). */
static int item_key(jt_ctx *c, jt_val item, const jt_val *attr, bool case_sensitive, jt_val *out) {
    jt_val v;
    if (attr && attr->t != JT_NONE) { if (attr_path(c, item, *attr, &v)) return -1; }
    else v = jt_ref(item);
    if (lower_if_str(c, case_sensitive, &v)) return -1;
    *out = v;
    return 0;
}

/* The sort key (make_multi_attrgetter): a tuple with one value per
 * comma-separated attribute. Tuples compare equal before ordering, so
 * items whose keys are all undefined keep their order without an error. */
static int multi_key(jt_ctx *c, jt_val item, const jt_val *attr, bool case_sensitive, jt_val *out) {
    if (jt_new_list(c, 1, true, out)) return -1;
    if (!attr || attr->t != JT_STR) {
        jt_val v;
        if (item_key(c, item, attr, case_sensitive, &v) || jt_list_push(c, out->u.l, v)) { jt_decref(*out); return -1; }
        return 0;
    }
    const char *p = attr->u.s->s, *end = p + attr->u.s->len;
    for (;;) {
        const char *comma = memchr(p, ',', (size_t)(end - p));
        const char *e = comma ? comma : end;
        jt_val v;
        if (attr_path_str(c, item, p, (size_t)(e - p), NULL, &v) || lower_if_str(c, case_sensitive, &v) ||
            jt_list_push(c, out->u.l, v)) {
            jt_decref(*out);
            return -1;
        }
        if (!comma) break;
        p = comma + 1;
    }
    return 0;
}

/* Stable merge sort of idx[0..n) by keys; errors are recorded in c. */
static void merge_sort(jt_ctx *c, size_t *idx, size_t *tmp, size_t n, const jt_val *keys, bool reverse) {
    if (n < 2 || c->failed) return;
    size_t h = n / 2;
    merge_sort(c, idx, tmp, h, keys, reverse);
    merge_sort(c, idx + h, tmp, n - h, keys, reverse);
    size_t i = 0, j = h, k = 0;
    while (i < h && j < n) {
        int r = 0;
        if (c->failed) return;
        /* Python's sort only asks "right < left"; tuple keys compare
         * element equality first, so equal undefined keys do not fail */
        jt_compare(c, keys[idx[j]], keys[idx[i]], "<", &r);
        bool take_right = reverse ? (r == 1) : (r == -1);
        tmp[k++] = take_right ? idx[j++] : idx[i++];
    }
    while (i < h) tmp[k++] = idx[i++];
    while (j < n) tmp[k++] = idx[j++];
    memcpy(idx, tmp, n * sizeof *idx);
}

/* sorted(seq, key=...) as a list; multi: sort's tuple keys, else item_key */
static int sorted_list(jt_ctx *c, jt_val seq, const jt_val *attr, bool case_sensitive, bool reverse, bool multi,
                       jt_val *out) {
    jt_val lst;
    if (jt_iterate(c, seq, &lst)) return -1;
    size_t n = lst.u.l->n;
    jt_val *keys = NULL;
    size_t *idx = NULL, *tmp = NULL;
    int r = -1;
    if (jt_charge(c, n * (sizeof *keys + 2 * sizeof *idx))) goto done;
    keys = calloc(n ? n : 1, sizeof *keys);
    idx = malloc((n ? n : 1) * sizeof *idx);
    tmp = malloc((n ? n : 1) * sizeof *tmp);
    if (!keys || !idx || !tmp) { jt_oom(c); goto done; }
    for (size_t k = 0; k < n; k++)
        if ((multi ? multi_key : item_key)(c, lst.u.l->v[k], attr, case_sensitive, &keys[k])) goto done;
    for (size_t i = 0; i < n; i++) idx[i] = i;
    merge_sort(c, idx, tmp, n, keys, reverse);
    if (c->failed) goto done;
    if (jt_new_list(c, n, false, out)) goto done;
    for (size_t i = 0; i < n; i++)
        if (jt_list_push(c, out->u.l, jt_ref(lst.u.l->v[idx[i]]))) { jt_decref(*out); goto done; }
    r = 0;
done:
    if (keys)
        for (size_t i = 0; i < n; i++) jt_decref(keys[i]);
    free(keys);
    free(idx);
    free(tmp);
    jt_decref(lst);
    return r;
}

static bool arg_true(jt_args *a, size_t i, const char *name) {
    jt_val *v = jt_arg(a, i, name);
    return v && jt_truthy(*v);
}

/* ---------------------------------------------------------------- filters */

static int f_tojson(jt_ctx *c, jt_val *in, jt_args *a, jt_val *out) {
    static const char *const kw[] = {"ensure_ascii", "indent", "separators", "sort_keys", NULL};
    if (jt_args_check(c, a, "tojson", 4, kw)) return -1;
    jt_json_opts o = {NULL, ", ", ": ", false, false};
    char ind[1024];
    o.ensure_ascii = arg_true(a, 0, "ensure_ascii");
    o.sort_keys = arg_true(a, 3, "sort_keys");
    jt_val *iv = jt_arg(a, 1, "indent");
    if (iv && iv->t != JT_NONE) {
        if (iv->t == JT_STR) {
            if (iv->u.s->len >= sizeof ind) return jt_err(c, "tojson indent is too long");
            memcpy(ind, iv->u.s->s, iv->u.s->len + 1);
        } else if (iv->t == JT_INT || iv->t == JT_BOOL) {
            int64_t n = jt_as_int(*iv);
            if (n >= (int64_t)sizeof ind) return jt_err(c, "tojson indent is too large");
            if (n < 0) n = 0;
            memset(ind, ' ', (size_t)n);
            ind[n] = 0;
        } else {
            return jt_err(c, "tojson indent must be an int or a string");
        }
        o.indent = ind;
        o.item_sep = ",";   /* json.dumps' default separators with an indent */
    }
    jt_val *sv = jt_arg(a, 2, "separators");
    if (sv && sv->t != JT_NONE) {
        if (!jt_is_seq(*sv) || sv->u.l->n != 2 || sv->u.l->v[0].t != JT_STR || sv->u.l->v[1].t != JT_STR)
            return jt_err(c, "tojson separators must be a pair of strings");
        o.item_sep = sv->u.l->v[0].u.s->s;
        o.key_sep = sv->u.l->v[1].u.s->s;
    }
    jt_buf b = {0};
    if (jt_put_json(c, &b, *in, &o, 0)) { jt_buf_free(&b); return -1; }
    return jt_buf_take(c, &b, out);
}

static int f_string(jt_ctx *c, jt_val *in, jt_args *a, jt_val *out) {
    if (jt_args_check(c, a, "string", 0, NULL)) return -1;
    return soft_str(c, *in, out);
}

static int f_safe(jt_ctx *c, jt_val *in, jt_args *a, jt_val *out) {
    if (jt_args_check(c, a, "safe", 0, NULL)) return -1;
    return soft_str(c, *in, out);
}

static int f_trim(jt_ctx *c, jt_val *in, jt_args *a, jt_val *out) {
    static const char *const kw[] = {"chars", NULL};
    if (jt_args_check(c, a, "trim", 1, kw)) return -1;
    jt_val s;
    if (soft_str(c, *in, &s)) return -1;
    int r = jt_str_method_strip(c, s, jt_arg(a, 0, "chars"), 3, out);
    jt_decref(s);
    return r;
}

static int case_filter(jt_ctx *c, jt_val *in, jt_args *a, int mode, jt_val *out) {
    if (jt_args_check(c, a, "case filter", 0, NULL)) return -1;
    jt_val s;
    if (soft_str(c, *in, &s)) return -1;
    int r = mode < 2 ? jt_str_lower_upper(c, s, mode == 1, out) : jt_str_map_case(c, s, mode, out);
    jt_decref(s);
    return r;
}
static int f_lower(jt_ctx *c, jt_val *in, jt_args *a, jt_val *out) { return case_filter(c, in, a, 0, out); }
static int f_upper(jt_ctx *c, jt_val *in, jt_args *a, jt_val *out) { return case_filter(c, in, a, 1, out); }
static int f_capitalize(jt_ctx *c, jt_val *in, jt_args *a, jt_val *out) { return case_filter(c, in, a, 2, out); }

/* jinja2's title: split on runs of [-\s({[<], capitalize each piece */
static int f_title(jt_ctx *c, jt_val *in, jt_args *a, jt_val *out) {
    if (jt_args_check(c, a, "title", 0, NULL)) return -1;
    jt_val s;
    if (soft_str(c, *in, &s)) return -1;
    jt_buf b = {0};
    const jt_str *str = s.u.s;
    size_t i = 0;
    bool word_start = true;
    int r = 0;
    while (i < str->len && !r) {
        uint32_t cp = jt_utf8_next(str->s, str->len, &i);
        bool sep = cp == '-' || cp == '(' || cp == '{' || cp == '[' || cp == '<' || jt_cp_space(cp);
        uint32_t o = sep ? cp : word_start ? jt_cp_upper(cp) : jt_cp_lower(cp);
        word_start = sep;
        char u[4];
        int n = jt_utf8_put(o, u);
        r = jt_buf_put(c, &b, u, (size_t)n);
    }
    jt_decref(s);
    if (r) { jt_buf_free(&b); return -1; }
    return jt_buf_take(c, &b, out);
}

static int f_length(jt_ctx *c, jt_val *in, jt_args *a, jt_val *out) {
    if (jt_args_check(c, a, "length", 0, NULL)) return -1;
    int64_t n = jt_len_of(*in);
    if (n < 0) return jt_err(c, "object of type '%s' has no len()", jt_type_name(*in));
    *out = jt_int(n);
    return 0;
}

static int f_default(jt_ctx *c, jt_val *in, jt_args *a, jt_val *out) {
    static const char *const kw[] = {"default_value", "boolean", NULL};
    if (jt_args_check(c, a, "default", 2, kw)) return -1;
    jt_val *d = jt_arg(a, 0, "default_value");
    bool boolean = arg_true(a, 1, "boolean");
    if (in->t == JT_UNDEF || (boolean && !jt_truthy(*in))) {
        if (d) *out = jt_ref(*d);
        else return jt_new_str(c, "", 0, out);
        return 0;
    }
    *out = jt_ref(*in);
    return 0;
}

static int f_first_last(jt_ctx *c, jt_val *in, jt_args *a, bool last, jt_val *out) {
    if (jt_args_check(c, a, last ? "last" : "first", 0, NULL)) return -1;
    if (in->t == JT_LIST || in->t == JT_TUPLE) {
        size_t n = in->u.l->n;
        *out = n ? jt_ref(in->u.l->v[last ? n - 1 : 0]) : jt_undef(NULL, 2);
        return 0;
    }
    jt_val lst;
    if (jt_iterate(c, *in, &lst)) return -1;
    size_t n = lst.u.l->n;
    *out = n ? jt_ref(lst.u.l->v[last ? n - 1 : 0]) : jt_undef(NULL, 2);
    jt_decref(lst);
    return 0;
}
static int f_first(jt_ctx *c, jt_val *in, jt_args *a, jt_val *out) { return f_first_last(c, in, a, false, out); }
static int f_last(jt_ctx *c, jt_val *in, jt_args *a, jt_val *out) { return f_first_last(c, in, a, true, out); }

static int f_join(jt_ctx *c, jt_val *in, jt_args *a, jt_val *out) {
    static const char *const kw[] = {"d", "attribute", NULL};
    if (jt_args_check(c, a, "join", 2, kw)) return -1;
    jt_val *d = jt_arg(a, 0, "d"), *attr = jt_arg(a, 1, "attribute");
    jt_val lst;
    if (jt_iterate(c, *in, &lst)) return -1;
    jt_buf b = {0};
    int r = 0;
    for (size_t i = 0; i < lst.u.l->n && !r; i++) {
        if (i && d) r = jt_put_str(c, &b, *d);
        if (r) break;
        if (attr && attr->t != JT_NONE) {
            jt_val v;
            r = attr_path(c, lst.u.l->v[i], *attr, &v);
            if (!r) { r = jt_put_str(c, &b, v); jt_decref(v); }
        } else {
            r = jt_put_str(c, &b, lst.u.l->v[i]);
        }
    }
    jt_decref(lst);
    if (r) { jt_buf_free(&b); return -1; }
    return jt_buf_take(c, &b, out);
}

static int f_items(jt_ctx *c, jt_val *in, jt_args *a, jt_val *out) {
    if (jt_args_check(c, a, "items", 0, NULL)) return -1;
    if (in->t == JT_UNDEF) return jt_new_list(c, 0, false, out);
    if (in->t != JT_DICT) return jt_err(c, "Can only get item pairs from a mapping.");
    jt_dict *d = in->u.d;
    if (jt_new_list(c, d->n, false, out)) return -1;
    for (size_t i = 0; i < d->n; i++) {
        jt_val t;
        if (jt_new_list(c, 2, true, &t)) { jt_decref(*out); return -1; }
        if (jt_list_push(c, t.u.l, jt_ref(d->k[i])) || jt_list_push(c, t.u.l, jt_ref(d->v[i])) ||
            jt_list_push(c, out->u.l, t)) {
            jt_decref(*out);
            return -1;
        }
    }
    return 0;
}

static int f_list(jt_ctx *c, jt_val *in, jt_args *a, jt_val *out) {
    if (jt_args_check(c, a, "list", 0, NULL)) return -1;
    jt_val lst;
    if (jt_iterate(c, *in, &lst)) return -1;
    if (lst.t == JT_LIST && !lst.u.l->view) { *out = lst; return 0; }
    /* a tuple or a dict view becomes a list */
    if (jt_new_list(c, lst.u.l->n, false, out)) { jt_decref(lst); return -1; }
    for (size_t i = 0; i < lst.u.l->n; i++)
        if (jt_list_push(c, out->u.l, jt_ref(lst.u.l->v[i]))) { jt_decref(lst); jt_decref(*out); return -1; }
    jt_decref(lst);
    return 0;
}

static int f_replace(jt_ctx *c, jt_val *in, jt_args *a, jt_val *out) {
    static const char *const kw[] = {"old", "new", "count", NULL};
    if (jt_args_check(c, a, "replace", 3, kw)) return -1;
    jt_val *o = jt_arg(a, 0, "old"), *n = jt_arg(a, 1, "new"), *cv = jt_arg(a, 2, "count");
    if (!o || !n) return jt_err(c, "replace() needs 'old' and 'new'");
    int64_t count = -1;
    if (cv && cv->t != JT_NONE && !get_int(cv, &count)) return jt_err(c, "replace() count must be an integer");
    jt_val s, os, ns;
    if (soft_str(c, *in, &s)) return -1;
    if (soft_str(c, *o, &os)) { jt_decref(s); return -1; }
    if (soft_str(c, *n, &ns)) { jt_decref(s); jt_decref(os); return -1; }
    int r = jt_str_replace(c, s, os, ns, count, out);
    jt_decref(s);
    jt_decref(os);
    jt_decref(ns);
    return r;
}

/* Python int(str): optional sign, digits with single underscores, spaces */
static bool parse_int_str(const jt_str *s, int base, int64_t *out) {
    size_t i = 0, n = s->len;
    while (i < n) { size_t j = i; if (!jt_cp_space(jt_utf8_next(s->s, n, &j))) break; i = j; }
    while (n > i) {
        size_t st = n - 1;
        while (st > i && ((unsigned char)s->s[st] & 0xC0) == 0x80) st--;
        size_t j = st;
        if (!jt_cp_space(jt_utf8_next(s->s, n, &j))) break;
        n = st;
    }
    bool neg = false;
    if (i < n && (s->s[i] == '+' || s->s[i] == '-')) neg = s->s[i++] == '-';
    if (base == 16 && i + 1 < n && s->s[i] == '0' && (s->s[i + 1] | 32) == 'x') i += 2;
    else if (base == 8 && i + 1 < n && s->s[i] == '0' && (s->s[i + 1] | 32) == 'o') i += 2;
    else if (base == 2 && i + 1 < n && s->s[i] == '0' && (s->s[i + 1] | 32) == 'b') i += 2;
    if (i >= n) return false;
    uint64_t v = 0;
    bool prev_digit = false;
    for (; i < n; i++) {
        char ch = s->s[i];
        if (ch == '_' && prev_digit && i + 1 < n) { prev_digit = false; continue; }
        int d = (ch >= '0' && ch <= '9') ? ch - '0' : ((ch | 32) >= 'a' && (ch | 32) <= 'z') ? (ch | 32) - 'a' + 10 : 99;
        if (d >= base) return false;
        if (v > (UINT64_MAX - (uint64_t)d) / (uint64_t)base) return false;
        v = v * (uint64_t)base + (uint64_t)d;
        prev_digit = true;
    }
    if (!prev_digit) return false;
    if (v > (uint64_t)INT64_MAX + (neg ? 1 : 0)) return false;
    *out = neg ? (int64_t)(0 - v) : (int64_t)v;
    return true;
}

static bool parse_float_str(const jt_str *s, double *out) {
    char buf[128];
    size_t k = 0;
    for (size_t i = 0; i < s->len && k < sizeof buf - 1; i++)
        if (s->s[i] != '_') buf[k++] = s->s[i];
    if (k >= sizeof buf - 1) return false;
    buf[k] = 0;
    char *p = buf;
    while (*p == ' ' || *p == '\t' || *p == '\n' || *p == '\r' || *p == '\f' || *p == '\v') p++;
    if ((p[0] == '0' && (p[1] | 32) == 'x') || ((p[0] == '-' || p[0] == '+') && p[1] == '0' && (p[2] | 32) == 'x'))
        return false;
    char *end;
    double v = strtod(p, &end);
    if (end == p) return false;
    while (*end == ' ' || *end == '\t' || *end == '\n' || *end == '\r' || *end == '\f' || *end == '\v') end++;
    if (*end) return false;
    *out = v;
    return true;
}

static int f_int(jt_ctx *c, jt_val *in, jt_args *a, jt_val *out) {
    static const char *const kw[] = {"default", "base", NULL};
    if (jt_args_check(c, a, "int", 2, kw)) return -1;
    jt_val *d = jt_arg(a, 0, "default"), *bv = jt_arg(a, 1, "base");
    int64_t base = 10;
    if (bv && !get_int(bv, &base)) return jt_err(c, "int() base must be an integer");
    if (base < 2 || base > 36) return jt_err(c, "int() base must be >= 2 and <= 36");
    if (in->t == JT_UNDEF) return jt_undef_error(c, *in);   /* Undefined.__int__ raises */
    if (in->t == JT_INT || in->t == JT_BOOL) { *out = jt_int(jt_as_int(*in)); return 0; }
    if (in->t == JT_FLOAT && isfinite(in->u.f) && fabs(in->u.f) < 9.2e18) { *out = jt_int((int64_t)in->u.f); return 0; }
    if (in->t == JT_STR) {
        int64_t v;
        double f;
        if (parse_int_str(in->u.s, (int)base, &v)) { *out = jt_int(v); return 0; }
        if (parse_float_str(in->u.s, &f) && isfinite(f) && fabs(f) < 9.2e18) { *out = jt_int((int64_t)f); return 0; }
    }
    *out = d ? jt_ref(*d) : jt_int(0);
    return 0;
}

static int f_float(jt_ctx *c, jt_val *in, jt_args *a, jt_val *out) {
    static const char *const kw[] = {"default", NULL};
    if (jt_args_check(c, a, "float", 1, kw)) return -1;
    jt_val *d = jt_arg(a, 0, "default");
    if (in->t == JT_UNDEF) return jt_undef_error(c, *in);   /* Undefined.__float__ raises */
    if (jt_is_num(*in)) { *out = jt_float(jt_as_float(*in)); return 0; }
    double f;
    if (in->t == JT_STR && parse_float_str(in->u.s, &f)) { *out = jt_float(f); return 0; }
    *out = d ? jt_ref(*d) : jt_float(0.0);
    return 0;
}

static int f_abs(jt_ctx *c, jt_val *in, jt_args *a, jt_val *out) {
    if (jt_args_check(c, a, "abs", 0, NULL)) return -1;
    if (in->t == JT_INT || in->t == JT_BOOL) {
        int64_t v = jt_as_int(*in);
        if (v == INT64_MIN) return jt_err(c, "integer overflow");
        *out = jt_int(v < 0 ? -v : v);
        return 0;
    }
    if (in->t == JT_FLOAT) { *out = jt_float(fabs(in->u.f)); return 0; }
    return jt_err(c, "bad operand type for abs(): '%s'", jt_type_name(*in));
}

static int f_round(jt_ctx *c, jt_val *in, jt_args *a, jt_val *out) {
    static const char *const kw[] = {"precision", "method", NULL};
    if (jt_args_check(c, a, "round", 2, kw)) return -1;
    int64_t prec = 0;
    jt_val *pv = jt_arg(a, 0, "precision"), *mv = jt_arg(a, 1, "method");
    if (pv && !get_int(pv, &prec)) return jt_err(c, "round() precision must be an integer");
    const char *method = mv && mv->t == JT_STR ? mv->u.s->s : "common";
    if (strcmp(method, "common") && strcmp(method, "ceil") && strcmp(method, "floor"))
        return jt_err(c, "method must be common, ceil or floor");
    if (!jt_is_num(*in)) return jt_err(c, "type %s doesn't define __round__ method", jt_type_name(*in));
    if (prec > 300) prec = 300;
    if (prec < -300) prec = -300;
    if (!strcmp(method, "common")) {
        if (in->t != JT_FLOAT) { *out = jt_int(jt_as_int(*in)); return 0; }   /* round(int, n) is the int */
        double x = in->u.f;
        if (!isfinite(x)) { *out = jt_float(x); return 0; }
        if (prec >= 0) {
            /* correctly rounded, half to even, like Python's round() */
            char buf[400];
            snprintf(buf, sizeof buf, "%.*f", (int)prec, x);
            *out = jt_float(strtod(buf, NULL));
        } else {
            double p = pow(10.0, (double)-prec);
            *out = jt_float(nearbyint(x / p) * p);
        }
        return 0;
    }
    double p = pow(10.0, (double)prec), x = jt_as_float(*in);
    *out = jt_float((!strcmp(method, "ceil") ? ceil(x * p) : floor(x * p)) / p);
    return 0;
}

static int f_indent(jt_ctx *c, jt_val *in, jt_args *a, jt_val *out) {
    static const char *const kw[] = {"width", "first", "blank", NULL};
    if (jt_args_check(c, a, "indent", 3, kw)) return -1;
    jt_val *wv = jt_arg(a, 0, "width");
    bool first = arg_true(a, 1, "first"), blank = arg_true(a, 2, "blank");
    char ind[1024];
    if (!wv) strcpy(ind, "    ");
    else if (wv->t == JT_STR) {
        if (wv->u.s->len >= sizeof ind) return jt_err(c, "indent width too long");
        memcpy(ind, wv->u.s->s, wv->u.s->len + 1);
    } else {
        int64_t w;
        if (!get_int(wv, &w)) return jt_err(c, "indent width must be an integer or a string");
        if (w < 0) w = 0;
        if (w >= (int64_t)sizeof ind) return jt_err(c, "indent width too large");
        memset(ind, ' ', (size_t)w);
        ind[w] = 0;
    }
    /* jinja2 does "s += newline", so anything but a string fails */
    if (in->t == JT_UNDEF) return jt_undef_error(c, *in);
    if (in->t != JT_STR) return jt_err(c, "unsupported operand type(s) for +=: '%s' and 'str'", jt_type_name(*in));
    jt_val s = jt_ref(*in);
    /* s + "\n", then splitlines, as jinja2 does */
    jt_buf tb = {0};
    if (jt_put_str(c, &tb, s) || jt_buf_putc(c, &tb, '\n')) { jt_buf_free(&tb); jt_decref(s); return -1; }
    jt_decref(s);
    if (jt_buf_take(c, &tb, &s)) return -1;
    jt_val lines;
    int r = jt_splitlines(c, s, false, &lines);
    jt_decref(s);
    if (r) return -1;
    jt_buf b = {0};
    if (first) r = jt_buf_puts(c, &b, ind);
    jt_list *l = lines.u.l;
    for (size_t i = 0; i < l->n && !r; i++) {
        jt_str *line = l->v[i].u.s;
        if (i) {
            r = jt_buf_putc(c, &b, '\n');
            if (!r && (blank || line->len)) r = jt_buf_puts(c, &b, ind);
        }
        if (!r) r = jt_buf_put(c, &b, line->s, line->len);
    }
    jt_decref(lines);
    if (r) { jt_buf_free(&b); return -1; }
    return jt_buf_take(c, &b, out);
}

static int f_center(jt_ctx *c, jt_val *in, jt_args *a, jt_val *out) {
    static const char *const kw[] = {"width", NULL};
    if (jt_args_check(c, a, "center", 1, kw)) return -1;
    jt_val s;
    if (soft_str(c, *in, &s)) return -1;
    jt_args ca;
    jt_args_init(&ca);
    jt_val *wv = jt_arg(a, 0, "width");
    int r = jt_args_push(c, &ca, wv ? jt_ref(*wv) : jt_int(80));
    if (!r) {
        r = jt_call_method(c, s, "center", &ca, out);
        r = r == 1 ? 0 : -1;
    }
    jt_args_free(&ca);
    jt_decref(s);
    return r;
}

static int f_wordcount(jt_ctx *c, jt_val *in, jt_args *a, jt_val *out) {
    if (jt_args_check(c, a, "wordcount", 0, NULL)) return -1;
    jt_val s;
    if (soft_str(c, *in, &s)) return -1;
    int64_t n = 0;
    bool inword = false;
    size_t i = 0;
    while (i < s.u.s->len) {
        uint32_t cp = jt_utf8_next(s.u.s->s, s.u.s->len, &i);
        bool w = cp == '_' || jt_cp_alpha(cp) || jt_cp_digit(cp);
        if (w && !inword) n++;
        inword = w;
    }
    jt_decref(s);
    *out = jt_int(n);
    return 0;
}

static int f_escape(jt_ctx *c, jt_val *in, jt_args *a, jt_val *out) {
    if (jt_args_check(c, a, "escape", 0, NULL)) return -1;
    jt_val s;
    if (soft_str(c, *in, &s)) return -1;
    jt_buf b = {0};
    int r = 0;
    for (size_t i = 0; i < s.u.s->len && !r; i++) {
        char ch = s.u.s->s[i];
        switch (ch) {
        case '&': r = jt_buf_puts(c, &b, "&amp;"); break;
        case '<': r = jt_buf_puts(c, &b, "&lt;"); break;
        case '>': r = jt_buf_puts(c, &b, "&gt;"); break;
        case '"': r = jt_buf_puts(c, &b, "&#34;"); break;
        case '\'': r = jt_buf_puts(c, &b, "&#39;"); break;
        default: r = jt_buf_putc(c, &b, ch);
        }
    }
    jt_decref(s);
    if (r) { jt_buf_free(&b); return -1; }
    return jt_buf_take(c, &b, out);
}

static int f_format(jt_ctx *c, jt_val *in, jt_args *a, jt_val *out) {
    jt_val s;
    if (soft_str(c, *in, &s)) return -1;
    jt_val args;
    int r;
    if (a->npos && a->nkw) {
        jt_decref(s);
        return jt_err(c, "can't handle positional and keyword arguments at the same time");
    }
    if (a->nkw) {
        r = jt_new_dict(c, &args);
        for (size_t i = 0; i < a->nkw && !r; i++) {
            jt_val k;
            r = jt_new_cstr(c, a->kwn[i], &k);
            if (!r) r = jt_dict_set(c, args.u.d, k, jt_ref(a->kwv[i]));
        }
    } else {
        r = jt_new_list(c, a->npos, true, &args);
        for (size_t i = 0; i < a->npos && !r; i++) r = jt_list_push(c, args.u.l, jt_ref(a->pos[i]));
    }
    if (!r) r = jt_str_percent(c, s, args, out);
    jt_decref(args);
    jt_decref(s);
    return r;
}

static int f_reverse(jt_ctx *c, jt_val *in, jt_args *a, jt_val *out) {
    if (jt_args_check(c, a, "reverse", 0, NULL)) return -1;
    if (in->t == JT_STR) {
        jt_val lst;
        if (jt_iterate(c, *in, &lst)) return -1;
        jt_buf b = {0};
        int r = 0;
        for (size_t i = lst.u.l->n; i-- > 0 && !r;) r = jt_put_str(c, &b, lst.u.l->v[i]);
        jt_decref(lst);
        if (r) { jt_buf_free(&b); return -1; }
        return jt_buf_take(c, &b, out);
    }
    jt_val lst;
    if (jt_iterate(c, *in, &lst)) return -1;
    int r = jt_new_list(c, lst.u.l->n, false, out);
    for (size_t i = lst.u.l->n; i-- > 0 && !r;) {
        r = jt_list_push(c, out->u.l, jt_ref(lst.u.l->v[i]));
        if (r) jt_decref(*out);
    }
    jt_decref(lst);
    return r;
}

static int f_sort(jt_ctx *c, jt_val *in, jt_args *a, jt_val *out) {
    static const char *const kw[] = {"reverse", "case_sensitive", "attribute", NULL};
    if (jt_args_check(c, a, "sort", 3, kw)) return -1;
    return sorted_list(c, *in, jt_arg(a, 2, "attribute"), arg_true(a, 1, "case_sensitive"), arg_true(a, 0, "reverse"),
                       true, out);
}

static int f_dictsort(jt_ctx *c, jt_val *in, jt_args *a, jt_val *out) {
    static const char *const kw[] = {"case_sensitive", "by", "reverse", NULL};
    if (jt_args_check(c, a, "dictsort", 3, kw)) return -1;
    jt_val *by = jt_arg(a, 1, "by");
    int pos = 0;
    if (by && by->t == JT_STR) {
        if (!strcmp(by->u.s->s, "value")) pos = 1;
        else if (strcmp(by->u.s->s, "key")) return jt_err(c, "You can only sort by either \"key\" or \"value\"");
    }
    jt_val items;
    jt_args none;
    jt_args_init(&none);
    if (in->t != JT_DICT) return jt_err(c, "dictsort: '%s' object has no attribute 'items'", jt_type_name(*in));
    if (f_items(c, in, &none, &items)) return -1;
    jt_val attr = jt_int(pos);
    int r = sorted_list(c, items, &attr, arg_true(a, 0, "case_sensitive"), arg_true(a, 2, "reverse"), false, out);
    jt_decref(items);
    return r;
}

static int f_unique(jt_ctx *c, jt_val *in, jt_args *a, jt_val *out) {
    static const char *const kw[] = {"case_sensitive", "attribute", NULL};
    if (jt_args_check(c, a, "unique", 2, kw)) return -1;
    jt_val *attr = jt_arg(a, 1, "attribute");
    bool cs = arg_true(a, 0, "case_sensitive");
    jt_val lst, seen;
    if (jt_iterate(c, *in, &lst)) return -1;
    if (jt_new_dict(c, &seen)) { jt_decref(lst); return -1; }
    int r = jt_new_list(c, 0, false, out);
    bool seen_undef = false;   /* Undefined is hashable; all of them are equal */
    for (size_t i = 0; i < lst.u.l->n && !r; i++) {
        jt_val k;
        r = item_key(c, lst.u.l->v[i], attr, cs, &k);
        if (r) break;
        if (k.t == JT_UNDEF) {
            if (!seen_undef) r = jt_list_push(c, out->u.l, jt_ref(lst.u.l->v[i]));
            seen_undef = true;
            continue;
        }
        if (!jt_hashable(k)) { r = jt_err(c, "unhashable type: '%s'", jt_type_name(k)); jt_decref(k); break; }
        if (jt_dict_get(seen.u.d, k)) { jt_decref(k); continue; }
        r = jt_dict_set(c, seen.u.d, k, jt_none());
        if (!r) r = jt_list_push(c, out->u.l, jt_ref(lst.u.l->v[i]));
    }
    if (r && out->t == JT_LIST) jt_decref(*out);
    jt_decref(seen);
    jt_decref(lst);
    return r;
}

static int minmax(jt_ctx *c, jt_val *in, jt_args *a, bool max, jt_val *out) {
    static const char *const kw[] = {"case_sensitive", "attribute", NULL};
    if (jt_args_check(c, a, max ? "max" : "min", 2, kw)) return -1;
    jt_val *attr = jt_arg(a, 1, "attribute");
    bool cs = arg_true(a, 0, "case_sensitive");
    jt_val lst;
    if (jt_iterate(c, *in, &lst)) return -1;
    jt_val best = jt_undef(NULL, 2), bestk = jt_none();
    int r = 0;
    for (size_t i = 0; i < lst.u.l->n && !r; i++) {
        jt_val k;
        if ((r = item_key(c, lst.u.l->v[i], attr, cs, &k))) break;
        int cmp = 0;
        if (i == 0 || (!(r = jt_compare(c, k, bestk, "<", &cmp)) && cmp == (max ? 1 : -1))) {
            jt_decref(bestk);
            bestk = k;
            best = lst.u.l->v[i];
        } else {
            jt_decref(k);
        }
    }
    jt_decref(bestk);
    if (!r) *out = jt_ref(best);
    jt_decref(lst);
    return r;
}
static int f_max(jt_ctx *c, jt_val *in, jt_args *a, jt_val *out) { return minmax(c, in, a, true, out); }
static int f_min(jt_ctx *c, jt_val *in, jt_args *a, jt_val *out) { return minmax(c, in, a, false, out); }

static int f_sum(jt_ctx *c, jt_val *in, jt_args *a, jt_val *out) {
    static const char *const kw[] = {"attribute", "start", NULL};
    if (jt_args_check(c, a, "sum", 2, kw)) return -1;
    jt_val *attr = jt_arg(a, 0, "attribute"), *st = jt_arg(a, 1, "start");
    jt_val lst;
    if (jt_iterate(c, *in, &lst)) return -1;
    bool is_float = st && st->t == JT_FLOAT;
    int64_t isum = st && !is_float ? (st->t == JT_INT || st->t == JT_BOOL ? jt_as_int(*st) : 0) : 0;
    double fsum = is_float ? st->u.f : 0;
    int r = 0;
    if (st && !jt_is_num(*st)) r = jt_err(c, "sum() start must be a number");
    for (size_t i = 0; i < lst.u.l->n && !r; i++) {
        jt_val v;
        if (attr && attr->t != JT_NONE) { if ((r = attr_path(c, lst.u.l->v[i], *attr, &v))) break; }
        else v = jt_ref(lst.u.l->v[i]);
        if (!jt_is_num(v)) r = jt_err(c, "unsupported operand type(s) for +: 'int' and '%s'", jt_type_name(v));
        else if (v.t == JT_FLOAT || is_float) {
            if (!is_float) { fsum = (double)isum; is_float = true; }
            fsum += jt_as_float(v);
        } else if (__builtin_add_overflow(isum, jt_as_int(v), &isum)) r = jt_err(c, "integer overflow");
        jt_decref(v);
    }
    jt_decref(lst);
    if (!r) *out = is_float ? jt_float(fsum) : jt_int(isum);
    return r;
}

static int f_batch(jt_ctx *c, jt_val *in, jt_args *a, jt_val *out) {
    static const char *const kw[] = {"linecount", "fill_with", NULL};
    if (jt_args_check(c, a, "batch", 2, kw)) return -1;
    int64_t n;
    if (!get_int(jt_arg(a, 0, "linecount"), &n)) return jt_err(c, "batch() linecount must be an integer");
    if (n <= 0) n = INT64_MAX;   /* jinja2 then yields everything as one batch */
    jt_val *fill = jt_arg(a, 1, "fill_with");
    jt_val lst;
    if (jt_iterate(c, *in, &lst)) return -1;
    int r = jt_new_list(c, 0, false, out);
    jt_val cur = jt_none();
    for (size_t i = 0; i < lst.u.l->n && !r; i++) {
        if (cur.t == JT_NONE && (r = jt_new_list(c, n < 64 ? (size_t)n : 64, false, &cur))) break;
        r = jt_list_push(c, cur.u.l, jt_ref(lst.u.l->v[i]));
        if (!r && (int64_t)cur.u.l->n == n) { r = jt_list_push(c, out->u.l, cur); cur = jt_none(); }
    }
    if (!r && cur.t == JT_LIST) {
        while (fill && !r && (int64_t)cur.u.l->n < n) r = jt_list_push(c, cur.u.l, jt_ref(*fill));
        if (!r) { r = jt_list_push(c, out->u.l, cur); cur = jt_none(); }
    }
    jt_decref(cur);
    jt_decref(lst);
    if (r && out->t == JT_LIST) jt_decref(*out);
    return r;
}

/* map(attribute='x', default=d) or map('filter', *args) */
static int f_map(jt_ctx *c, jt_val *in, jt_args *a, jt_val *out) {
    jt_val lst;
    if (!jt_truthy(*in)) return jt_new_list(c, 0, false, out);   /* jinja2: "if value:" */
    if (jt_iterate(c, *in, &lst)) return -1;
    jt_val *attr = jt_arg(a, (size_t)-1, "attribute"), *def = jt_arg(a, (size_t)-1, "default");
    int r = 0;
    const char *fname = NULL;
    jt_args fa;
    jt_args_init(&fa);
    if (!attr) {
        if (a->npos == 0 || a->pos[0].t != JT_STR) { jt_decref(lst); return jt_err(c, "map requires a filter argument"); }
        fname = a->pos[0].u.s->s;
        for (size_t i = 1; i < a->npos && !r; i++) r = jt_args_push(c, &fa, jt_ref(a->pos[i]));
        for (size_t i = 0; i < a->nkw && !r; i++) r = jt_args_push_kw(c, &fa, a->kwn[i], jt_ref(a->kwv[i]));
    } else if (a->npos || a->nkw > (def ? 2u : 1u)) {
        jt_decref(lst);
        return jt_err(c, "map with an attribute takes only 'attribute' and 'default'");
    }
    if (!r) r = jt_new_list(c, lst.u.l->n, false, out);
    for (size_t i = 0; i < lst.u.l->n && !r; i++) {
        jt_val v;
        if (attr) {
            r = attr_path_d(c, lst.u.l->v[i], *attr, def, &v);
        } else {
            r = jt_apply_filter(c, fname, &lst.u.l->v[i], &fa, &v);
        }
        if (!r) r = jt_list_push(c, out->u.l, v);
        if (r) jt_decref(*out);
    }
    jt_args_free(&fa);
    jt_decref(lst);
    return r;
}

/* select/reject (attr == false) and selectattr/rejectattr (attr == true) */
static int select_common(jt_ctx *c, jt_val *in, jt_args *a, bool attr, bool keep_when, jt_val *out) {
    jt_val lst;
    if (!jt_truthy(*in)) return jt_new_list(c, 0, false, out);   /* jinja2: "if value:" */
    if (jt_iterate(c, *in, &lst)) return -1;
    size_t k = 0;
    jt_val *attrv = NULL;
    if (attr) {
        if (a->npos < 1) { jt_decref(lst); return jt_err(c, "missing parameter for attribute name"); }
        attrv = &a->pos[k++];
    }
    const char *tname = NULL;
    if (k < a->npos) {
        if (a->pos[k].t != JT_STR) { jt_decref(lst); return jt_err(c, "test name must be a string"); }
        tname = a->pos[k++].u.s->s;
    }
    jt_args ta;
    jt_args_init(&ta);
    int r = 0;
    for (size_t i = k; i < a->npos && !r; i++) r = jt_args_push(c, &ta, jt_ref(a->pos[i]));
    for (size_t i = 0; i < a->nkw && !r; i++) r = jt_args_push_kw(c, &ta, a->kwn[i], jt_ref(a->kwv[i]));
    if (!r) r = jt_new_list(c, 0, false, out);
    for (size_t i = 0; i < lst.u.l->n && !r; i++) {
        jt_val item = lst.u.l->v[i], v;
        if (attrv) { if ((r = attr_path(c, item, *attrv, &v))) { jt_decref(*out); break; } }
        else v = jt_ref(item);
        bool res;
        if (tname) r = jt_apply_test(c, tname, &v, &ta, &res);
        else res = jt_truthy(v);
        jt_decref(v);
        if (!r && res == keep_when) r = jt_list_push(c, out->u.l, jt_ref(item));
        if (r) jt_decref(*out);
    }
    jt_args_free(&ta);
    jt_decref(lst);
    return r;
}
static int f_select(jt_ctx *c, jt_val *in, jt_args *a, jt_val *out) { return select_common(c, in, a, false, true, out); }
static int f_reject(jt_ctx *c, jt_val *in, jt_args *a, jt_val *out) { return select_common(c, in, a, false, false, out); }
static int f_selectattr(jt_ctx *c, jt_val *in, jt_args *a, jt_val *out) { return select_common(c, in, a, true, true, out); }
static int f_rejectattr(jt_ctx *c, jt_val *in, jt_args *a, jt_val *out) { return select_common(c, in, a, true, false, out); }

/* groupby(attribute, default=None, case_sensitive=False): sorted by the
 * key, consecutive equal keys grouped; items are (grouper, list) tuples that
 * also answer .grouper and .list. */
static int f_groupby(jt_ctx *c, jt_val *in, jt_args *a, jt_val *out) {
    static const char *const kw[] = {"attribute", "default", "case_sensitive", NULL};
    if (jt_args_check(c, a, "groupby", 3, kw)) return -1;
    jt_val *attr = jt_arg(a, 0, "attribute"), *def = jt_arg(a, 1, "default");
    if (!attr) return jt_err(c, "groupby() missing required argument 'attribute'");
    bool cs = arg_true(a, 2, "case_sensitive");
    if (def && def->t == JT_NONE) def = NULL;
    jt_val sorted;
    /* sort by the key; default= applies, so sort a list of (key, item) */
    jt_val pairs;
    jt_val lst;
    if (jt_iterate(c, *in, &lst)) return -1;
    int r = jt_new_list(c, lst.u.l->n, false, &pairs);
    for (size_t i = 0; i < lst.u.l->n && !r; i++) {
        jt_val k, t;
        if ((r = attr_path_d(c, lst.u.l->v[i], *attr, def, &k))) break;
        if ((r = lower_if_str(c, cs, &k))) break;
        if ((r = jt_new_list(c, 2, true, &t))) { jt_decref(k); break; }
        r = jt_list_push(c, t.u.l, k) || jt_list_push(c, t.u.l, jt_ref(lst.u.l->v[i])) || jt_list_push(c, pairs.u.l, t);
    }
    jt_decref(lst);
    if (r) { if (pairs.t == JT_LIST) jt_decref(pairs); return -1; }
    jt_val zero = jt_int(0);
    r = sorted_list(c, pairs, &zero, true, false, false, &sorted);
    jt_decref(pairs);
    if (r) return -1;
    r = jt_new_list(c, 0, false, out);
    jt_list *sl = sorted.u.l;
    for (size_t i = 0; i < sl->n && !r;) {
        size_t j = i + 1;
        while (j < sl->n && jt_equal(sl->v[j].u.l->v[0], sl->v[i].u.l->v[0])) j++;
        jt_val group, items, grouper;
        if ((r = jt_new_list(c, j - i, false, &items))) break;
        for (size_t k = i; k < j && !r; k++) r = jt_list_push(c, items.u.l, jt_ref(sl->v[k].u.l->v[1]));
        /* the grouper is the real (not lowercased) key of the first item */
        if (!r) r = attr_path_d(c, items.u.l->v[0], *attr, def, &grouper);
        if (r) { jt_decref(items); break; }
        if ((r = jt_new_list(c, 2, true, &group))) { jt_decref(items); jt_decref(grouper); break; }
        group.u.l->view = 4;
        r = jt_list_push(c, group.u.l, grouper) || jt_list_push(c, group.u.l, items) || jt_list_push(c, out->u.l, group);
        i = j;
    }
    jt_decref(sorted);
    if (r && out->t == JT_LIST) jt_decref(*out);
    return r ? -1 : 0;
}

static int f_attr(jt_ctx *c, jt_val *in, jt_args *a, jt_val *out) {
    if (jt_args_check(c, a, "attr", 1, NULL)) return -1;
    jt_val *n = jt_arg(a, 0, NULL);
    if (!n || n->t != JT_STR) return jt_err(c, "attr() needs an attribute name");
    if (in->t == JT_UNDEF) return jt_undef_error(c, *in);
    /* getattr only: no item lookup */
    if (in->t == JT_NS) return jt_getattr_ex(c, *in, n->u.s->s, false, out);
    int r = jt_find_method(c, *in, n->u.s->s, out);
    if (r) return r < 0 ? -1 : 0;
    *out = jt_undef(NULL, 2);
    return 0;
}

static const struct { const char *name; jt_filter_fn fn; } filters[] = {
    {"abs", f_abs}, {"attr", f_attr}, {"batch", f_batch}, {"capitalize", f_capitalize}, {"center", f_center},
    {"count", f_length}, {"d", f_default}, {"default", f_default}, {"dictsort", f_dictsort}, {"e", f_escape},
    {"escape", f_escape}, {"first", f_first}, {"float", f_float}, {"forceescape", f_escape}, {"format", f_format}, {"groupby", f_groupby},
    {"indent", f_indent}, {"int", f_int}, {"items", f_items}, {"join", f_join}, {"last", f_last},
    {"length", f_length}, {"list", f_list}, {"lower", f_lower}, {"map", f_map}, {"max", f_max}, {"min", f_min},
    {"reject", f_reject}, {"rejectattr", f_rejectattr}, {"replace", f_replace}, {"reverse", f_reverse},
    {"round", f_round}, {"safe", f_safe}, {"select", f_select}, {"selectattr", f_selectattr}, {"sort", f_sort},
    {"string", f_string}, {"sum", f_sum}, {"title", f_title}, {"tojson", f_tojson}, {"trim", f_trim},
    {"unique", f_unique}, {"upper", f_upper}, {"wordcount", f_wordcount}, {NULL, NULL},
};

jt_filter_fn jt_find_filter(const char *name) {
    for (int i = 0; filters[i].name; i++)
        if (!strcmp(filters[i].name, name)) return filters[i].fn;
    return NULL;
}

int jt_apply_filter(jt_ctx *c, const char *name, jt_val *in, jt_args *a, jt_val *out) {
    jt_filter_fn f = jt_find_filter(name);
    if (!f) return jt_err(c, "no filter named '%s'", name);
    return f(c, in, a, out);
}

/* ------------------------------------------------------------------ tests */

#define TEST0(fname, expr)                                                          \
    static int fname(jt_ctx *c, jt_val *in, jt_args *a, bool *res) {                \
        if (jt_args_check(c, a, &#fname[2], 0, NULL)) return -1;                    \
        jt_val v = *in;                                                             \
        *res = (expr);                                                              \
        (void)v;                                                                    \
        return 0;                                                                   \
    }

TEST0(t_defined, v.t != JT_UNDEF)
TEST0(t_undefined, v.t == JT_UNDEF)
TEST0(t_none, v.t == JT_NONE)
TEST0(t_boolean, v.t == JT_BOOL)
TEST0(t_true, v.t == JT_BOOL && v.u.b)
TEST0(t_false, v.t == JT_BOOL && !v.u.b)
TEST0(t_integer, v.t == JT_INT)
TEST0(t_float, v.t == JT_FLOAT)
TEST0(t_number, jt_is_num(v))
TEST0(t_string, v.t == JT_STR)
TEST0(t_mapping, v.t == JT_DICT)
TEST0(t_iterable, v.t == JT_STR || jt_is_seq(v) || v.t == JT_DICT || v.t == JT_UNDEF || v.t == JT_LOOP)
TEST0(t_sequence, v.t == JT_STR || jt_is_seq(v) || v.t == JT_DICT || v.t == JT_UNDEF)
TEST0(t_callable, v.t == JT_FUNC || v.t == JT_UNDEF)   /* Undefined defines __call__ */
TEST0(t_escaped, false)

static int t_sameas(jt_ctx *c, jt_val *in, jt_args *a, bool *res) {
    static const char *const kw[] = {"other", NULL};
    if (jt_args_check(c, a, "sameas", 1, kw)) return -1;
    jt_val *o = jt_arg(a, 0, "other");
    if (!o) return jt_err(c, "sameas test needs an argument");
    if (jt_is_heap(*in) || jt_is_heap(*o)) *res = in->t == o->t && in->u.h == o->u.h;
    else *res = in->t == o->t && (in->t == JT_NONE || in->t == JT_UNDEF || jt_equal(*in, *o));
    return 0;
}

static int parity(jt_ctx *c, jt_val *in, bool odd, bool *res) {
    if (in->t == JT_INT || in->t == JT_BOOL) { *res = (jt_as_int(*in) & 1) == (odd ? 1 : 0); return 0; }
    if (in->t == JT_FLOAT) { double m = fmod(in->u.f, 2.0); if (m < 0) m += 2; *res = odd ? m == 1.0 : m == 0.0; return 0; }
    if (in->t == JT_UNDEF) return jt_undef_error(c, *in);
    return jt_err(c, "unsupported operand type(s) for %%: '%s' and 'int'", jt_type_name(*in));
}
static int t_even(jt_ctx *c, jt_val *in, jt_args *a, bool *res) {
    return jt_args_check(c, a, "even", 0, NULL) ? -1 : parity(c, in, false, res);
}
static int t_odd(jt_ctx *c, jt_val *in, jt_args *a, bool *res) {
    return jt_args_check(c, a, "odd", 0, NULL) ? -1 : parity(c, in, true, res);
}

static int t_divisibleby(jt_ctx *c, jt_val *in, jt_args *a, bool *res) {
    static const char *const kw[] = {"num", NULL};
    if (jt_args_check(c, a, "divisibleby", 1, kw)) return -1;
    jt_val *n = jt_arg(a, 0, "num");
    if (!n) return jt_err(c, "divisibleby test needs an argument");
    if (in->t == JT_UNDEF) return jt_undef_error(c, *in);
    if (!jt_is_num(*in) || !jt_is_num(*n)) return jt_err(c, "unsupported operand type(s) for %%");
    if (in->t != JT_FLOAT && n->t != JT_FLOAT) {
        int64_t d = jt_as_int(*n);
        if (d == 0) return jt_err(c, "integer division or modulo by zero");
        *res = d == -1 || jt_as_int(*in) % d == 0;
        return 0;
    }
    double d = jt_as_float(*n);
    if (d == 0) return jt_err(c, "float modulo");
    *res = fmod(jt_as_float(*in), d) == 0;
    return 0;
}

static int cmp_test(jt_ctx *c, jt_val *in, jt_args *a, int op, bool *res) {
    static const char *const kw[] = {"other", NULL};
    if (jt_args_check(c, a, "comparison test", 1, kw)) return -1;
    jt_val *o = jt_arg(a, 0, "other");
    if (!o) return jt_err(c, "comparison test needs an argument");
    if (op == 0) { *res = jt_equal(*in, *o); return 0; }
    if (op == 1) { *res = !jt_equal(*in, *o); return 0; }
    int r;
    if (jt_compare(c, *in, *o, op == 2 ? "<" : op == 3 ? "<=" : op == 4 ? ">" : ">=", &r)) return -1;
    switch (op) {
    case 2: *res = r == -1; break;
    case 3: *res = r == -1 || r == 0; break;
    case 4: *res = r == 1; break;
    default: *res = r == 1 || r == 0; break;
    }
    return 0;
}
static int t_eq(jt_ctx *c, jt_val *in, jt_args *a, bool *res) { return cmp_test(c, in, a, 0, res); }
static int t_ne(jt_ctx *c, jt_val *in, jt_args *a, bool *res) { return cmp_test(c, in, a, 1, res); }
static int t_lt(jt_ctx *c, jt_val *in, jt_args *a, bool *res) { return cmp_test(c, in, a, 2, res); }
static int t_le(jt_ctx *c, jt_val *in, jt_args *a, bool *res) { return cmp_test(c, in, a, 3, res); }
static int t_gt(jt_ctx *c, jt_val *in, jt_args *a, bool *res) { return cmp_test(c, in, a, 4, res); }
static int t_ge(jt_ctx *c, jt_val *in, jt_args *a, bool *res) { return cmp_test(c, in, a, 5, res); }

static int t_in(jt_ctx *c, jt_val *in, jt_args *a, bool *res) {
    static const char *const kw[] = {"seq", NULL};
    if (jt_args_check(c, a, "in", 1, kw)) return -1;
    jt_val *seq = jt_arg(a, 0, "seq");
    if (!seq) return jt_err(c, "in test needs an argument");
    jt_val lst;
    if (seq->t == JT_STR) {
        if (in->t != JT_STR) return jt_err(c, "'in <string>' requires string as left operand, not %s", jt_type_name(*in));
        *res = in->u.s->len == 0 || memmem(seq->u.s->s, seq->u.s->len, in->u.s->s, in->u.s->len);
        return 0;
    }
    if (seq->t == JT_DICT) {
        if (!jt_hashable(*in)) return jt_err(c, "unhashable type: '%s'", jt_type_name(*in));
        *res = jt_dict_get(seq->u.d, *in) != NULL;
        return 0;
    }
    if (jt_iterate(c, *seq, &lst)) return -1;
    *res = false;
    for (size_t i = 0; i < lst.u.l->n && !*res; i++) *res = jt_equal(*in, lst.u.l->v[i]);
    jt_decref(lst);
    return 0;
}

static int case_test(jt_ctx *c, jt_val *in, bool upper, bool *res) {
    jt_val s;
    if (jt_to_str(c, *in, &s)) return -1;
    bool any = false, ok = true;
    size_t i = 0;
    while (i < s.u.s->len) {
        uint32_t cp = jt_utf8_next(s.u.s->s, s.u.s->len, &i);
        bool is_up = jt_cp_lower(cp) != cp, is_lo = jt_cp_upper(cp) != cp;
        if (upper ? is_lo : is_up) ok = false;
        if (upper ? is_up : is_lo) any = true;
    }
    jt_decref(s);
    *res = ok && any;
    return 0;
}
static int t_lower(jt_ctx *c, jt_val *in, jt_args *a, bool *res) {
    return jt_args_check(c, a, "lower", 0, NULL) ? -1 : case_test(c, in, false, res);
}
static int t_upper(jt_ctx *c, jt_val *in, jt_args *a, bool *res) {
    return jt_args_check(c, a, "upper", 0, NULL) ? -1 : case_test(c, in, true, res);
}

static int t_filter(jt_ctx *c, jt_val *in, jt_args *a, bool *res) {
    if (jt_args_check(c, a, "filter", 0, NULL)) return -1;
    *res = in->t == JT_STR && jt_find_filter(in->u.s->s) != NULL;
    return 0;
}
static int t_test(jt_ctx *c, jt_val *in, jt_args *a, bool *res) {
    if (jt_args_check(c, a, "test", 0, NULL)) return -1;
    *res = in->t == JT_STR && jt_find_test(in->u.s->s) != NULL;
    return 0;
}

static const struct { const char *name; jt_test_fn fn; } tests[] = {
    {"!=", t_ne}, {"<", t_lt}, {"<=", t_le}, {"==", t_eq}, {">", t_gt}, {">=", t_ge},
    {"boolean", t_boolean}, {"callable", t_callable}, {"defined", t_defined}, {"divisibleby", t_divisibleby},
    {"eq", t_eq}, {"equalto", t_eq}, {"escaped", t_escaped}, {"even", t_even}, {"false", t_false},
    {"filter", t_filter}, {"float", t_float}, {"ge", t_ge}, {"greaterthan", t_gt}, {"gt", t_gt}, {"in", t_in},
    {"integer", t_integer}, {"iterable", t_iterable}, {"le", t_le}, {"lessthan", t_lt}, {"lower", t_lower},
    {"lt", t_lt}, {"mapping", t_mapping}, {"ne", t_ne}, {"none", t_none}, {"number", t_number}, {"odd", t_odd},
    {"sameas", t_sameas}, {"sequence", t_sequence}, {"string", t_string}, {"test", t_test}, {"true", t_true},
    {"undefined", t_undefined}, {"upper", t_upper}, {NULL, NULL},
};

jt_test_fn jt_find_test(const char *name) {
    for (int i = 0; tests[i].name; i++)
        if (!strcmp(tests[i].name, name)) return tests[i].fn;
    return NULL;
}

int jt_apply_test(jt_ctx *c, const char *name, jt_val *in, jt_args *a, bool *res) {
    jt_test_fn t = jt_find_test(name);
    if (!t) return jt_err(c, "no test named '%s'", name);
    return t(c, in, a, res);
}
