/* Methods of str / dict / list / loop values, the global functions
 * (range, namespace, dict, raise_exception, strftime_now), and Python's two
 * string formatting languages ('%' and str.format).
 *
 * Like Hugging Face's ImmutableSandboxedEnvironment, methods that mutate a
 * list or dict (append, pop, update, ...) exist but fail when called with
 * "access to attribute 'append' of 'list' object is unsafe", and range() is
 * capped at 100000 items. */
#include "chat/jt.h"
#include <locale.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---------------------------------------------------------------- helpers */

static jt_str *self_str(const jt_val *self) { return self->u.s; }

static int need_str(jt_ctx *c, const jt_val *v, const char *what) {
    if (!v || v->t != JT_STR)
        return jt_err(c, "%s must be str, not %s", what, v ? jt_type_name(*v) : "nothing");
    return 0;
}

static bool arg_int(const jt_val *v, int64_t *out) {
    if (!v || (v->t != JT_INT && v->t != JT_BOOL)) return false;
    *out = jt_as_int(*v);
    return true;
}

/* Is cp in chars (a string of code points)? NULL chars: whitespace. */
static bool in_set(uint32_t cp, const jt_str *chars) {
    if (!chars) return jt_cp_space(cp);
    size_t i = 0;
    while (i < chars->len)
        if (jt_utf8_next(chars->s, chars->len, &i) == cp) return true;
    return false;
}

/* which: 1 = left, 2 = right, 3 = both */
int jt_str_method_strip(jt_ctx *c, jt_val s, jt_val *chars, int which, jt_val *out) {
    const jt_str *set = NULL;
    if (chars && chars->t != JT_NONE && chars->t != JT_UNDEF) {
        if (chars->t != JT_STR) return jt_err(c, "strip arg must be None or str");
        set = chars->u.s;
    }
    const jt_str *str = s.u.s;
    size_t i = 0, start = 0, end = str->len;
    if (which & 1) {
        while (i < str->len) {
            size_t st = i;
            uint32_t cp = jt_utf8_next(str->s, str->len, &i);
            if (!in_set(cp, set)) { i = st; break; }
        }
        start = i;
    }
    if (which & 2) {
        end = start;
        i = start;
        while (i < str->len) {
            uint32_t cp = jt_utf8_next(str->s, str->len, &i);
            if (!in_set(cp, set)) end = i;
        }
    }
    if (start == 0 && end == str->len) { *out = jt_ref(s); return 0; }
    return jt_new_str(c, str->s + start, end - start, out);
}

typedef uint32_t (*cp_map)(uint32_t);

static int map_cps(jt_ctx *c, const jt_str *s, int mode, jt_val *out) {
    /* mode 0 lower, 1 upper, 2 capitalize, 3 title, 4 swapcase */
    jt_buf b = {0};
    size_t i = 0;
    bool prev_cased = false, first = true;
    while (i < s->len) {
        uint32_t cp = jt_utf8_next(s->s, s->len, &i), r = cp;
        uint32_t up = jt_cp_upper(cp), lo = jt_cp_lower(cp);
        bool cased = up != cp || lo != cp;
        switch (mode) {
        case 0:
            r = lo;
            /* Python lowercases a capital sigma ending a word to 'ς' */
            if (cp == 0x3A3 && prev_cased) {
                size_t k = i;
                uint32_t next = k < s->len ? jt_utf8_next(s->s, s->len, &k) : 0;
                if (!(jt_cp_upper(next) != next || jt_cp_lower(next) != next)) r = 0x3C2;
            }
            break;
        case 1: r = up; break;
        case 2: r = first ? up : lo; break;
        case 3: r = prev_cased ? lo : up; break;
        default: r = up != cp ? up : lo; break;
        }
        if (mode == 1 && cp == 0xDF) { if (jt_buf_put(c, &b, "SS", 2)) goto fail; }
        else {
            char u[4];
            int n = jt_utf8_put(r, u);
            if (jt_buf_put(c, &b, u, (size_t)n)) goto fail;
        }
        prev_cased = cased;
        first = false;
    }
    return jt_buf_take(c, &b, out);
fail:
    jt_buf_free(&b);
    return -1;
}

int jt_str_lower_upper(jt_ctx *c, jt_val s, bool upper, jt_val *out) {
    const jt_str *str = s.u.s;
    if (str->ncp == str->len) {   /* ASCII fast path */
        jt_str *r = jt_str_alloc(c, str->len);
        if (!r) return -1;
        for (size_t i = 0; i < str->len; i++) {
            char ch = str->s[i];
            if (upper && ch >= 'a' && ch <= 'z') ch -= 32;
            else if (!upper && ch >= 'A' && ch <= 'Z') ch += 32;
            r->s[i] = ch;
        }
        jt_str_seal(r);
        *out = jt_strv(r);
        return 0;
    }
    return map_cps(c, str, upper ? 1 : 0, out);
}

/* Python's find() range arguments -> byte range [*b0, *b1) and the code
 * point index of *b0. Returns false if the range is empty/invalid. */
static bool sub_range(const jt_str *s, const jt_val *sv, const jt_val *ev, size_t *b0, size_t *b1, int64_t *cp0) {
    int64_t n = (int64_t)s->ncp, st = 0, en = n;
    if (sv && sv->t != JT_NONE) {
        st = jt_as_int(*sv);
        if (st < 0) { st += n; if (st < 0) st = 0; }
    }
    if (ev && ev->t != JT_NONE) {
        en = jt_as_int(*ev);
        if (en < 0) { en += n; if (en < 0) en = 0; }
        else if (en > n) en = n;
    }
    *cp0 = st;
    if (st > n) return false;
    *b0 = jt_utf8_offset(s, (size_t)st);
    *b1 = en < st ? *b0 : jt_utf8_offset(s, (size_t)en);
    return true;
}

static const char *find_bytes(const char *h, size_t hn, const char *n, size_t nn, bool last) {
    if (nn > hn) return NULL;
    if (!last) return nn ? memmem(h, hn, n, nn) : h;
    for (size_t i = hn - nn + 1; i-- > 0;)
        if (!memcmp(h + i, n, nn)) return h + i;
    return NULL;
}

static int check_int_args(jt_ctx *c, const jt_val *a, const jt_val *b) {
    const jt_val *v[2] = {a, b};
    for (int i = 0; i < 2; i++)
        if (v[i] && v[i]->t != JT_NONE && v[i]->t != JT_INT && v[i]->t != JT_BOOL)
            return jt_err(c, "slice indices must be integers or None");
    return 0;
}

/* ------------------------------------------------------------ str methods */

static int m_strip(jt_ctx *c, const jt_val *self, jt_args *a, jt_val *out) {
    if (jt_args_check(c, a, "strip", 1, NULL)) return -1;
    return jt_str_method_strip(c, *self, jt_arg(a, 0, NULL), 3, out);
}
static int m_lstrip(jt_ctx *c, const jt_val *self, jt_args *a, jt_val *out) {
    if (jt_args_check(c, a, "lstrip", 1, NULL)) return -1;
    return jt_str_method_strip(c, *self, jt_arg(a, 0, NULL), 1, out);
}
static int m_rstrip(jt_ctx *c, const jt_val *self, jt_args *a, jt_val *out) {
    if (jt_args_check(c, a, "rstrip", 1, NULL)) return -1;
    return jt_str_method_strip(c, *self, jt_arg(a, 0, NULL), 2, out);
}
static int m_upper(jt_ctx *c, const jt_val *self, jt_args *a, jt_val *out) {
    if (jt_args_check(c, a, "upper", 0, NULL)) return -1;
    return jt_str_lower_upper(c, *self, true, out);
}
static int m_lower(jt_ctx *c, const jt_val *self, jt_args *a, jt_val *out) {
    if (jt_args_check(c, a, "lower", 0, NULL)) return -1;
    return jt_str_lower_upper(c, *self, false, out);
}
static int m_title(jt_ctx *c, const jt_val *self, jt_args *a, jt_val *out) {
    if (jt_args_check(c, a, "title", 0, NULL)) return -1;
    return map_cps(c, self_str(self), 3, out);
}
static int m_capitalize(jt_ctx *c, const jt_val *self, jt_args *a, jt_val *out) {
    if (jt_args_check(c, a, "capitalize", 0, NULL)) return -1;
    return map_cps(c, self_str(self), 2, out);
}
static int m_swapcase(jt_ctx *c, const jt_val *self, jt_args *a, jt_val *out) {
    if (jt_args_check(c, a, "swapcase", 0, NULL)) return -1;
    return map_cps(c, self_str(self), 4, out);
}

static int starts_ends(jt_ctx *c, const jt_val *self, jt_args *a, bool ends, jt_val *out) {
    static const char *const kw[] = {NULL};
    if (jt_args_check(c, a, ends ? "endswith" : "startswith", 3, kw)) return -1;
    jt_val *p = jt_arg(a, 0, NULL);
    if (!p) return jt_err(c, "%s() takes at least 1 argument (0 given)", ends ? "endswith" : "startswith");
    jt_val *sv = jt_arg(a, 1, NULL), *ev = jt_arg(a, 2, NULL);
    if (check_int_args(c, sv, ev)) return -1;
    const jt_str *s = self_str(self);
    size_t b0, b1;
    int64_t cp0;
    bool ok = sub_range(s, sv, ev, &b0, &b1, &cp0);
    size_t np = jt_is_seq(*p) ? p->u.l->n : 1;
    bool res = false;
    for (size_t i = 0; i < np && !res; i++) {
        jt_val pre = jt_is_seq(*p) ? p->u.l->v[i] : *p;
        if (pre.t != JT_STR)
            return jt_err(c, "%s first arg must be str or a tuple of str, not %s", ends ? "endswith" : "startswith",
                          jt_type_name(pre));
        if (!ok) continue;
        size_t n = pre.u.s->len, len = b1 - b0;
        if (n > len) continue;
        res = !memcmp(s->s + (ends ? b1 - n : b0), pre.u.s->s, n);
    }
    *out = jt_bool(res);
    return 0;
}
static int m_startswith(jt_ctx *c, const jt_val *self, jt_args *a, jt_val *out) { return starts_ends(c, self, a, false, out); }
static int m_endswith(jt_ctx *c, const jt_val *self, jt_args *a, jt_val *out) { return starts_ends(c, self, a, true, out); }

/* find / rfind / index / rindex / count */
static int find_common(jt_ctx *c, const jt_val *self, jt_args *a, int mode, jt_val *out) {
    static const char *names[] = {"find", "rfind", "index", "rindex", "count"};
    if (jt_args_check(c, a, names[mode], 3, NULL)) return -1;
    jt_val *sub = jt_arg(a, 0, NULL);
    if (need_str(c, sub, "substring")) return -1;
    jt_val *sv = jt_arg(a, 1, NULL), *ev = jt_arg(a, 2, NULL);
    if (check_int_args(c, sv, ev)) return -1;
    const jt_str *s = self_str(self);
    size_t b0, b1;
    int64_t cp0;
    bool ok = sub_range(s, sv, ev, &b0, &b1, &cp0);
    if (mode == 4) {
        int64_t n = 0;
        if (ok) {
            if (sub->u.s->len == 0) n = (int64_t)jt_utf8_count(s->s + b0, b1 - b0) + 1;
            else {
                size_t i = b0;
                const char *f;
                while ((f = find_bytes(s->s + i, b1 - i, sub->u.s->s, sub->u.s->len, false))) {
                    n++;
                    i = (size_t)(f - s->s) + sub->u.s->len;
                }
            }
        }
        *out = jt_int(n);
        return 0;
    }
    const char *f = ok ? find_bytes(s->s + b0, b1 - b0, sub->u.s->s, sub->u.s->len, mode == 1 || mode == 3) : NULL;
    if (!f) {
        if (mode >= 2) return jt_err(c, "substring not found");
        *out = jt_int(-1);
        return 0;
    }
    *out = jt_int(cp0 + (int64_t)jt_utf8_count(s->s + b0, (size_t)(f - (s->s + b0))));
    return 0;
}
static int m_find(jt_ctx *c, const jt_val *self, jt_args *a, jt_val *out) { return find_common(c, self, a, 0, out); }
static int m_rfind(jt_ctx *c, const jt_val *self, jt_args *a, jt_val *out) { return find_common(c, self, a, 1, out); }
static int m_index_s(jt_ctx *c, const jt_val *self, jt_args *a, jt_val *out) { return find_common(c, self, a, 2, out); }
static int m_rindex(jt_ctx *c, const jt_val *self, jt_args *a, jt_val *out) { return find_common(c, self, a, 3, out); }
static int m_count_s(jt_ctx *c, const jt_val *self, jt_args *a, jt_val *out) { return find_common(c, self, a, 4, out); }

static int push_sub(jt_ctx *c, jt_val lst, const char *s, size_t n) {
    jt_val v;
    if (jt_new_str(c, s, n, &v)) return -1;
    return jt_list_push(c, lst.u.l, v);
}

static int split_common(jt_ctx *c, const jt_val *self, jt_args *a, bool right, jt_val *out) {
    static const char *const kw[] = {"sep", "maxsplit", NULL};
    if (jt_args_check(c, a, right ? "rsplit" : "split", 2, kw)) return -1;
    jt_val *sepv = jt_arg(a, 0, "sep"), *mv = jt_arg(a, 1, "maxsplit");
    int64_t maxsplit = -1;
    if (mv && !arg_int(mv, &maxsplit)) return jt_err(c, "maxsplit must be an integer");
    if (maxsplit < 0) maxsplit = INT64_MAX;
    const jt_str *s = self_str(self);
    if (jt_new_list(c, 0, false, out)) return -1;
    if (!sepv || sepv->t == JT_NONE) {
        /* runs of whitespace, no empty strings; once maxsplit is reached
         * the rest is one item (CPython keeps its far-end whitespace) */
        size_t n = 0, cap = 0, *w = NULL;   /* word boundaries: start, end */
        size_t i = 0;
        int rc = 0;
        while (i < s->len) {
            size_t j = i;
            if (jt_cp_space(jt_utf8_next(s->s, s->len, &j))) { i = j; continue; }
            size_t st = i;
            while (i < s->len) {
                j = i;
                if (jt_cp_space(jt_utf8_next(s->s, s->len, &j))) break;
                i = j;
            }
            if (n + 2 > cap) {
                size_t nc = cap ? cap * 2 : 16;
                if (jt_charge(c, nc * sizeof *w)) { rc = -1; break; }
                size_t *nw = realloc(w, nc * sizeof *nw);
                if (!nw) { rc = jt_oom(c); break; }
                w = nw;
                cap = nc;
            }
            w[n++] = st;
            w[n++] = i;
        }
        size_t nw = n / 2;
        if (!rc) {
            if ((uint64_t)maxsplit >= nw || nw == 0) {
                for (size_t k = 0; k < nw && !rc; k++) rc = push_sub(c, *out, s->s + w[2 * k], w[2 * k + 1] - w[2 * k]);
            } else if (!right) {
                size_t m = (size_t)maxsplit;
                for (size_t k = 0; k < m && !rc; k++) rc = push_sub(c, *out, s->s + w[2 * k], w[2 * k + 1] - w[2 * k]);
                if (!rc) rc = push_sub(c, *out, s->s + w[2 * m], s->len - w[2 * m]);
            } else {
                size_t first = nw - (size_t)maxsplit;   /* words [0, first) stay together */
                rc = push_sub(c, *out, s->s, w[2 * (first - 1) + 1]);
                for (size_t k = first; k < nw && !rc; k++) rc = push_sub(c, *out, s->s + w[2 * k], w[2 * k + 1] - w[2 * k]);
            }
        }
        free(w);
        if (rc) goto fail;
        return 0;
    }
    if (sepv->t != JT_STR) { jt_err(c, "must be str or None, not %s", jt_type_name(*sepv)); goto fail; }
    const jt_str *sep = sepv->u.s;
    if (sep->len == 0) { jt_err(c, "empty separator"); goto fail; }
    if (!right) {
        size_t i = 0;
        int64_t count = 0;
        const char *f;
        while (count < maxsplit && (f = find_bytes(s->s + i, s->len - i, sep->s, sep->len, false))) {
            if (push_sub(c, *out, s->s + i, (size_t)(f - (s->s + i)))) goto fail;
            i = (size_t)(f - s->s) + sep->len;
            count++;
        }
        if (push_sub(c, *out, s->s + i, s->len - i)) goto fail;
        return 0;
    }
    /* rsplit: collect from the right, then reverse */
    size_t j = s->len;
    int64_t count = 0;
    const char *f;
    while (count < maxsplit && (f = find_bytes(s->s, j, sep->s, sep->len, true))) {
        size_t pos = (size_t)(f - s->s);
        if (push_sub(c, *out, s->s + pos + sep->len, j - pos - sep->len)) goto fail;
        j = pos;
        count++;
    }
    if (push_sub(c, *out, s->s, j)) goto fail;
    jt_list *l = out->u.l;
    for (size_t k = 0; k < l->n / 2; k++) {
        jt_val t = l->v[k];
        l->v[k] = l->v[l->n - 1 - k];
        l->v[l->n - 1 - k] = t;
    }
    return 0;
fail:
    jt_decref(*out);
    return -1;
}
static int m_split(jt_ctx *c, const jt_val *self, jt_args *a, jt_val *out) { return split_common(c, self, a, false, out); }
static int m_rsplit(jt_ctx *c, const jt_val *self, jt_args *a, jt_val *out) { return split_common(c, self, a, true, out); }

int jt_splitlines(jt_ctx *c, jt_val str, bool keep, jt_val *out) {
    const jt_str *s = str.u.s;
    if (jt_new_list(c, 0, false, out)) return -1;
    size_t i = 0, st = 0;
    while (i < s->len) {
        size_t k = i;
        uint32_t cp = jt_utf8_next(s->s, s->len, &k);
        bool brk = cp == '\n' || cp == '\r' || cp == 0x0B || cp == 0x0C || (cp >= 0x1C && cp <= 0x1E) ||
                   cp == 0x85 || cp == 0x2028 || cp == 0x2029;
        if (!brk) { i = k; continue; }
        size_t e = k;
        if (cp == '\r' && e < s->len && s->s[e] == '\n') e++;
        if (push_sub(c, *out, s->s + st, (keep ? e : i) - st)) { jt_decref(*out); return -1; }
        i = st = e;
    }
    if (st < s->len && push_sub(c, *out, s->s + st, s->len - st)) { jt_decref(*out); return -1; }
    return 0;
}

static int m_splitlines(jt_ctx *c, const jt_val *self, jt_args *a, jt_val *out) {
    static const char *const kw[] = {"keepends", NULL};
    if (jt_args_check(c, a, "splitlines", 1, kw)) return -1;
    jt_val *kv = jt_arg(a, 0, "keepends");
    return jt_splitlines(c, *self, kv && jt_truthy(*kv), out);
}

int jt_str_replace(jt_ctx *c, jt_val s, jt_val old, jt_val new_, int64_t count, jt_val *out) {
    const jt_str *str = s.u.s, *o = old.u.s, *n = new_.u.s;
    if (count < 0) count = INT64_MAX;
    jt_buf b = {0};
    if (o->len == 0) {
        /* Python inserts the replacement around every character */
        size_t i = 0;
        int64_t done = 0;
        while (done < count) {
            if (jt_buf_put(c, &b, n->s, n->len)) goto fail;
            done++;
            if (i >= str->len) break;
            size_t st = i;
            jt_utf8_next(str->s, str->len, &i);
            if (jt_buf_put(c, &b, str->s + st, i - st)) goto fail;
        }
        if (jt_buf_put(c, &b, str->s + i, str->len - i)) goto fail;
        return jt_buf_take(c, &b, out);
    }
    const char *f;
    size_t i = 0;
    int64_t done = 0;
    bool any = false;
    while (done < count && (f = find_bytes(str->s + i, str->len - i, o->s, o->len, false))) {
        size_t pos = (size_t)(f - str->s);
        if (jt_buf_put(c, &b, str->s + i, pos - i) || jt_buf_put(c, &b, n->s, n->len)) goto fail;
        i = pos + o->len;
        done++;
        any = true;
    }
    if (!any) { *out = jt_ref(s); return 0; }
    if (jt_buf_put(c, &b, str->s + i, str->len - i)) goto fail;
    return jt_buf_take(c, &b, out);
fail:
    jt_buf_free(&b);
    return -1;
}

static int m_replace(jt_ctx *c, const jt_val *self, jt_args *a, jt_val *out) {
    static const char *const kw[] = {"old", "new", "count", NULL};
    if (jt_args_check(c, a, "replace", 3, kw)) return -1;
    jt_val *o = jt_arg(a, 0, "old"), *n = jt_arg(a, 1, "new"), *cv = jt_arg(a, 2, "count");
    if (need_str(c, o, "replace() argument 1") || need_str(c, n, "replace() argument 2")) return -1;
    int64_t count = -1;
    if (cv && !arg_int(cv, &count)) return jt_err(c, "replace() count must be an integer");
    return jt_str_replace(c, *self, *o, *n, count, out);
}

static int m_join(jt_ctx *c, const jt_val *self, jt_args *a, jt_val *out) {
    if (jt_args_check(c, a, "join", 1, NULL)) return -1;
    jt_val *it = jt_arg(a, 0, NULL);
    if (!it) return jt_err(c, "join() takes exactly one argument (0 given)");
    jt_val lst;
    if (jt_iterate(c, *it, &lst)) return -1;
    jt_buf b = {0};
    int r = 0;
    for (size_t i = 0; i < lst.u.l->n && !r; i++) {
        jt_val v = lst.u.l->v[i];
        if (v.t != JT_STR) { r = jt_err(c, "sequence item %zu: expected str instance, %s found", i, jt_type_name(v)); break; }
        if (i) r = jt_buf_put(c, &b, self->u.s->s, self->u.s->len);
        if (!r) r = jt_buf_put(c, &b, v.u.s->s, v.u.s->len);
    }
    jt_decref(lst);
    if (r) { jt_buf_free(&b); return -1; }
    return jt_buf_take(c, &b, out);
}

static int pad(jt_ctx *c, const jt_val *self, jt_args *a, int align, jt_val *out) {
    static const char *names[] = {"ljust", "rjust", "center"};
    if (jt_args_check(c, a, names[align], 2, NULL)) return -1;
    int64_t width;
    if (!arg_int(jt_arg(a, 0, NULL), &width)) return jt_err(c, "%s() width must be an integer", names[align]);
    jt_val *fv = jt_arg(a, 1, NULL);
    const char *fill = " ";
    size_t fl = 1;
    if (fv) {
        if (fv->t != JT_STR || fv->u.s->ncp != 1)
            return jt_err(c, "The fill character must be exactly one character long");
        fill = fv->u.s->s;
        fl = fv->u.s->len;
    }
    const jt_str *s = self_str(self);
    if (width <= (int64_t)s->ncp) { *out = jt_ref(*self); return 0; }
    if ((uint64_t)width > c->max_output) return jt_err(c, "string exceeds the output limit of %zu bytes", c->max_output);
    size_t total = (size_t)width - s->ncp, left;
    if (align == 0) left = 0;
    else if (align == 1) left = total;
    else left = total / 2 + (total & (size_t)width & 1);   /* Python's centering */
    jt_buf b = {0};
    int r = 0;
    for (size_t i = 0; i < left && !r; i++) r = jt_buf_put(c, &b, fill, fl);
    if (!r) r = jt_buf_put(c, &b, s->s, s->len);
    for (size_t i = left; i < total && !r; i++) r = jt_buf_put(c, &b, fill, fl);
    if (r) { jt_buf_free(&b); return -1; }
    return jt_buf_take(c, &b, out);
}
static int m_ljust(jt_ctx *c, const jt_val *self, jt_args *a, jt_val *out) { return pad(c, self, a, 0, out); }
static int m_rjust(jt_ctx *c, const jt_val *self, jt_args *a, jt_val *out) { return pad(c, self, a, 1, out); }
static int m_center(jt_ctx *c, const jt_val *self, jt_args *a, jt_val *out) { return pad(c, self, a, 2, out); }

static int m_zfill(jt_ctx *c, const jt_val *self, jt_args *a, jt_val *out) {
    if (jt_args_check(c, a, "zfill", 1, NULL)) return -1;
    int64_t width;
    if (!arg_int(jt_arg(a, 0, NULL), &width)) return jt_err(c, "zfill() width must be an integer");
    const jt_str *s = self_str(self);
    if (width <= (int64_t)s->ncp) { *out = jt_ref(*self); return 0; }
    if ((uint64_t)width > c->max_output) return jt_err(c, "string exceeds the output limit of %zu bytes", c->max_output);
    size_t zeros = (size_t)width - s->ncp;
    jt_buf b = {0};
    size_t st = 0;
    int r = 0;
    if (s->len && (s->s[0] == '+' || s->s[0] == '-')) { r = jt_buf_putc(c, &b, s->s[0]); st = 1; }
    for (size_t i = 0; i < zeros && !r; i++) r = jt_buf_putc(c, &b, '0');
    if (!r) r = jt_buf_put(c, &b, s->s + st, s->len - st);
    if (r) { jt_buf_free(&b); return -1; }
    return jt_buf_take(c, &b, out);
}

static int predicate(jt_ctx *c, const jt_val *self, jt_args *a, int kind, jt_val *out) {
    if (jt_args_check(c, a, "is...", 0, NULL)) return -1;
    const jt_str *s = self_str(self);
    bool res = s->len > 0, any_cased = false;
    size_t i = 0;
    while (i < s->len) {
        uint32_t cp = jt_utf8_next(s->s, s->len, &i);
        bool up = jt_cp_lower(cp) != cp, lo = jt_cp_upper(cp) != cp;
        switch (kind) {
        case 0: res = res && jt_cp_digit(cp); break;                       /* isdigit/isdecimal/isnumeric */
        case 1: res = res && jt_cp_alpha(cp); break;                       /* isalpha */
        case 2: res = res && (jt_cp_alpha(cp) || jt_cp_digit(cp)); break;  /* isalnum */
        case 3: res = res && jt_cp_space(cp); break;                       /* isspace */
        case 4: if (up) res = false; if (lo) any_cased = true; break;      /* islower */
        case 5: if (lo) res = false; if (up) any_cased = true; break;      /* isupper */
        }
    }
    if (kind >= 4) res = res && any_cased;
    *out = jt_bool(res);
    return 0;
}
static int m_isdigit(jt_ctx *c, const jt_val *self, jt_args *a, jt_val *out) { return predicate(c, self, a, 0, out); }
static int m_isalpha(jt_ctx *c, const jt_val *self, jt_args *a, jt_val *out) { return predicate(c, self, a, 1, out); }
static int m_isalnum(jt_ctx *c, const jt_val *self, jt_args *a, jt_val *out) { return predicate(c, self, a, 2, out); }
static int m_isspace(jt_ctx *c, const jt_val *self, jt_args *a, jt_val *out) { return predicate(c, self, a, 3, out); }
static int m_islower(jt_ctx *c, const jt_val *self, jt_args *a, jt_val *out) { return predicate(c, self, a, 4, out); }
static int m_isupper(jt_ctx *c, const jt_val *self, jt_args *a, jt_val *out) { return predicate(c, self, a, 5, out); }

static int m_removefix(jt_ctx *c, const jt_val *self, jt_args *a, bool suffix, jt_val *out) {
    if (jt_args_check(c, a, suffix ? "removesuffix" : "removeprefix", 1, NULL)) return -1;
    jt_val *p = jt_arg(a, 0, NULL);
    if (need_str(c, p, "argument")) return -1;
    const jt_str *s = self_str(self);
    size_t n = p->u.s->len;
    if (n && n <= s->len && !memcmp(s->s + (suffix ? s->len - n : 0), p->u.s->s, n))
        return jt_new_str(c, s->s + (suffix ? 0 : n), s->len - n, out);
    *out = jt_ref(*self);
    return 0;
}
static int m_removeprefix(jt_ctx *c, const jt_val *self, jt_args *a, jt_val *out) { return m_removefix(c, self, a, false, out); }
static int m_removesuffix(jt_ctx *c, const jt_val *self, jt_args *a, jt_val *out) { return m_removefix(c, self, a, true, out); }

static int m_partition_common(jt_ctx *c, const jt_val *self, jt_args *a, bool right, jt_val *out) {
    if (jt_args_check(c, a, right ? "rpartition" : "partition", 1, NULL)) return -1;
    jt_val *sep = jt_arg(a, 0, NULL);
    if (need_str(c, sep, "separator")) return -1;
    if (!sep->u.s->len) return jt_err(c, "empty separator");
    const jt_str *s = self_str(self);
    const char *f = find_bytes(s->s, s->len, sep->u.s->s, sep->u.s->len, right);
    if (jt_new_list(c, 3, true, out)) return -1;
    size_t n = sep->u.s->len;
    int r;
    if (!f) {
        if (right) r = push_sub(c, *out, "", 0) || push_sub(c, *out, "", 0) || push_sub(c, *out, s->s, s->len);
        else r = push_sub(c, *out, s->s, s->len) || push_sub(c, *out, "", 0) || push_sub(c, *out, "", 0);
    } else {
        size_t pos = (size_t)(f - s->s);
        r = push_sub(c, *out, s->s, pos) || push_sub(c, *out, sep->u.s->s, n) ||
            push_sub(c, *out, s->s + pos + n, s->len - pos - n);
    }
    if (r) { jt_decref(*out); return -1; }
    return 0;
}
static int m_partition(jt_ctx *c, const jt_val *self, jt_args *a, jt_val *out) { return m_partition_common(c, self, a, false, out); }
static int m_rpartition(jt_ctx *c, const jt_val *self, jt_args *a, jt_val *out) { return m_partition_common(c, self, a, true, out); }

static int m_format(jt_ctx *c, const jt_val *self, jt_args *a, jt_val *out) { return jt_str_format(c, *self, a, out); }

/* ----------------------------------------------------- dict / list methods */

static int m_items(jt_ctx *c, const jt_val *self, jt_args *a, jt_val *out) {
    if (jt_args_check(c, a, "items", 0, NULL)) return -1;
    jt_dict *d = self->u.d;
    if (jt_new_list(c, d->n, false, out)) return -1;
    for (size_t i = 0; i < d->n; i++) {
        jt_val t;
        if (jt_new_list(c, 2, true, &t)) goto fail;
        if (jt_list_push(c, t.u.l, jt_ref(d->k[i])) || jt_list_push(c, t.u.l, jt_ref(d->v[i]))) { jt_decref(t); goto fail; }
        if (jt_list_push(c, out->u.l, t)) goto fail;
    }
    out->u.l->view = 3;
    return 0;
fail:
    jt_decref(*out);
    return -1;
}

static int keys_values(jt_ctx *c, const jt_val *self, jt_args *a, bool values, jt_val *out) {
    if (jt_args_check(c, a, values ? "values" : "keys", 0, NULL)) return -1;
    jt_dict *d = self->u.d;
    if (jt_new_list(c, d->n, false, out)) return -1;
    for (size_t i = 0; i < d->n; i++)
        if (jt_list_push(c, out->u.l, jt_ref(values ? d->v[i] : d->k[i]))) { jt_decref(*out); return -1; }
    out->u.l->view = values ? 2 : 1;
    return 0;
}
static int m_keys(jt_ctx *c, const jt_val *self, jt_args *a, jt_val *out) { return keys_values(c, self, a, false, out); }
static int m_values(jt_ctx *c, const jt_val *self, jt_args *a, jt_val *out) { return keys_values(c, self, a, true, out); }

static int m_get(jt_ctx *c, const jt_val *self, jt_args *a, jt_val *out) {
    if (jt_args_check(c, a, "get", 2, NULL)) return -1;
    jt_val *k = jt_arg(a, 0, NULL), *d = jt_arg(a, 1, NULL);
    if (!k) return jt_err(c, "get expected at least 1 argument, got 0");
    if (!jt_hashable(*k)) return jt_err(c, "unhashable type: '%s'", jt_type_name(*k));
    jt_val *v = jt_dict_get(self->u.d, *k);
    *out = v ? jt_ref(*v) : d ? jt_ref(*d) : jt_none();
    return 0;
}

static int m_copy(jt_ctx *c, const jt_val *self, jt_args *a, jt_val *out) {
    if (jt_args_check(c, a, "copy", 0, NULL)) return -1;
    if (self->t == JT_DICT) {
        if (jt_new_dict(c, out)) return -1;
        for (size_t i = 0; i < self->u.d->n; i++)
            if (jt_dict_set(c, out->u.d, jt_ref(self->u.d->k[i]), jt_ref(self->u.d->v[i]))) { jt_decref(*out); return -1; }
        return 0;
    }
    *out = jt_ref(*self);   /* lists are immutable here, so a copy may share */
    return 0;
}

static int m_count_l(jt_ctx *c, const jt_val *self, jt_args *a, jt_val *out) {
    if (jt_args_check(c, a, "count", 1, NULL)) return -1;
    jt_val *x = jt_arg(a, 0, NULL);
    if (!x) return jt_err(c, "count() takes exactly one argument (0 given)");
    int64_t n = 0;
    for (size_t i = 0; i < self->u.l->n; i++) n += jt_equal(self->u.l->v[i], *x);
    *out = jt_int(n);
    return 0;
}

static int m_index_l(jt_ctx *c, const jt_val *self, jt_args *a, jt_val *out) {
    if (jt_args_check(c, a, "index", 1, NULL)) return -1;
    jt_val *x = jt_arg(a, 0, NULL);
    if (!x) return jt_err(c, "index expected at least 1 argument, got 0");
    for (size_t i = 0; i < self->u.l->n; i++)
        if (jt_equal(self->u.l->v[i], *x)) { *out = jt_int((int64_t)i); return 0; }
    return jt_err(c, "value is not in list");
}

/* ----------------------------------------------------------- loop object */

static int m_cycle(jt_ctx *c, const jt_val *self, jt_args *a, jt_val *out) {
    if (a->npos == 0) return jt_err(c, "no items for cycling given");
    *out = jt_ref(a->pos[self->u.lp->i % a->npos]);
    return 0;
}

static int m_changed(jt_ctx *c, const jt_val *self, jt_args *a, jt_val *out) {
    /* compare by repr, so the loop object never holds references that
     * could form a cycle */
    jt_buf b = {0};
    for (size_t i = 0; i < a->npos; i++)
        if (jt_buf_putc(c, &b, ',') || jt_put_repr(c, &b, a->pos[i], 0)) { jt_buf_free(&b); return -1; }
    jt_val s;
    if (jt_buf_take(c, &b, &s)) return -1;
    jt_loop *lp = self->u.lp;
    bool changed = !lp->changed || !jt_equal(jt_strv(lp->changed), s);
    if (lp->changed) jt_decref(jt_strv(lp->changed));
    lp->changed = s.u.s;
    *out = jt_bool(changed);
    return 0;
}

static int loop_attr(jt_ctx *c, jt_loop *lp, const char *name, jt_val *out) {
    size_t n = lp->items->n, i = lp->i;
    if (!strcmp(name, "index")) *out = jt_int((int64_t)i + 1);
    else if (!strcmp(name, "index0")) *out = jt_int((int64_t)i);
    else if (!strcmp(name, "revindex")) *out = jt_int((int64_t)(n - i));
    else if (!strcmp(name, "revindex0")) *out = jt_int((int64_t)(n - i - 1));
    else if (!strcmp(name, "first")) *out = jt_bool(i == 0);
    else if (!strcmp(name, "last")) *out = jt_bool(i + 1 == n);
    else if (!strcmp(name, "length")) *out = jt_int((int64_t)n);
    else if (!strcmp(name, "depth")) *out = jt_int(1);
    else if (!strcmp(name, "depth0")) *out = jt_int(0);
    else if (!strcmp(name, "previtem")) *out = i > 0 ? jt_ref(lp->items->v[i - 1]) : jt_undef("previtem", 2);
    else if (!strcmp(name, "nextitem")) *out = i + 1 < n ? jt_ref(lp->items->v[i + 1]) : jt_undef("nextitem", 2);
    else return 0;
    (void)c;
    return 1;
}

/* ----------------------------------------------------------- dispatching */

typedef struct method_def {
    const char *name;
    jt_native_fn fn;   /* NULL: exists but unsafe (mutating) */
} method_def;

static const method_def str_methods[] = {
    {"capitalize", m_capitalize}, {"casefold", m_lower}, {"center", m_center}, {"count", m_count_s},
    {"endswith", m_endswith}, {"find", m_find}, {"format", m_format}, {"index", m_index_s},
    {"isalnum", m_isalnum}, {"isalpha", m_isalpha}, {"isdecimal", m_isdigit}, {"isdigit", m_isdigit},
    {"islower", m_islower}, {"isnumeric", m_isdigit}, {"isspace", m_isspace}, {"isupper", m_isupper},
    {"join", m_join}, {"ljust", m_ljust}, {"lower", m_lower}, {"lstrip", m_lstrip}, {"partition", m_partition},
    {"removeprefix", m_removeprefix}, {"removesuffix", m_removesuffix}, {"replace", m_replace},
    {"rfind", m_rfind}, {"rindex", m_rindex}, {"rjust", m_rjust}, {"rpartition", m_rpartition},
    {"rsplit", m_rsplit}, {"rstrip", m_rstrip}, {"split", m_split}, {"splitlines", m_splitlines},
    {"startswith", m_startswith}, {"strip", m_strip}, {"swapcase", m_swapcase}, {"title", m_title},
    {"upper", m_upper}, {"zfill", m_zfill}, {NULL, NULL},
};

static const method_def dict_methods[] = {
    {"copy", m_copy}, {"get", m_get}, {"items", m_items}, {"keys", m_keys}, {"values", m_values},
    {"clear", NULL}, {"pop", NULL}, {"popitem", NULL}, {"setdefault", NULL}, {"update", NULL},
    {NULL, NULL},
};

static const method_def list_methods[] = {
    {"copy", m_copy}, {"count", m_count_l}, {"index", m_index_l},
    {"append", NULL}, {"clear", NULL}, {"extend", NULL}, {"insert", NULL}, {"pop", NULL},
    {"remove", NULL}, {"reverse", NULL}, {"sort", NULL}, {NULL, NULL},
};

static const method_def tuple_methods[] = {{"count", m_count_l}, {"index", m_index_l}, {NULL, NULL}};
static const method_def loop_methods[] = {{"cycle", m_cycle}, {"changed", m_changed}, {NULL, NULL}};

static const method_def *methods_for(jt_val obj, const char *name) {
    const method_def *t;
    switch (obj.t) {
    case JT_STR: t = str_methods; break;
    case JT_DICT: t = dict_methods; break;
    case JT_LIST: t = list_methods; break;
    case JT_TUPLE: t = tuple_methods; break;
    case JT_LOOP: t = loop_methods; break;
    default: return NULL;
    }
    for (; t->name; t++)
        if (!strcmp(t->name, name)) return t;
    return NULL;
}

int jt_find_method(jt_ctx *c, jt_val obj, const char *name, jt_val *out) {
    if (obj.t == JT_LOOP) {
        int r = loop_attr(c, obj.u.lp, name, out);
        if (r) return r;
    }
    const method_def *m = methods_for(obj, name);
    if (!m) return 0;
    if (jt_new_func(c, m->fn ? JT_FN_NATIVE : JT_FN_UNSAFE, m->name, out)) return -1;
    jt_func *f = out->u.fn;
    f->fn = m->fn;
    f->self = malloc(sizeof *f->self);
    if (!f->self) { jt_decref(*out); return jt_oom(c); }
    *f->self = jt_ref(obj);
    return 1;
}

int jt_call_method(jt_ctx *c, jt_val obj, const char *name, jt_args *a, jt_val *out) {
    const method_def *m = methods_for(obj, name);
    if (!m) return 0;
    if (!m->fn)
        return jt_err(c, "access to attribute '%s' of '%s' object is unsafe", name, jt_type_name(obj));
    return m->fn(c, &obj, a, out) ? -1 : 1;
}

/* -------------------------------------------------------------- globals */

static int g_range(jt_ctx *c, const jt_val *self, jt_args *a, jt_val *out) {
    if (jt_args_check(c, a, "range", 3, NULL)) return -1;
    int64_t v[3] = {0, 0, 1};
    if (a->npos == 0) return jt_err(c, "range expected at least 1 argument, got 0");
    for (size_t i = 0; i < a->npos; i++)
        if (!arg_int(&a->pos[i], &v[i])) return jt_err(c, "'%s' object cannot be interpreted as an integer", jt_type_name(a->pos[i]));
    int64_t start = 0, stop, step = 1;
    if (a->npos == 1) stop = v[0];
    else { start = v[0]; stop = v[1]; if (a->npos == 3) step = v[2]; }
    if (step == 0) return jt_err(c, "range() arg 3 must not be zero");
    /* length without overflow */
    long double len = step > 0 ? (stop > start ? ((long double)stop - start - 1) / step + 1 : 0)
                               : (start > stop ? ((long double)start - stop - 1) / (-(long double)step) + 1 : 0);
    if (len > JT_MAX_RANGE)
        return jt_err(c, "Range too big. The sandbox blocks ranges larger than MAX_RANGE (%d).", JT_MAX_RANGE);
    size_t n = (size_t)len;
    if (jt_new_list(c, n, false, out)) return -1;
    for (size_t i = 0; i < n; i++)
        if (jt_list_push(c, out->u.l, jt_int(start + (int64_t)i * step))) { jt_decref(*out); return -1; }
    (void)self;
    return 0;
}

/* dict(*args, **kwargs) into d */
static int fill_dict(jt_ctx *c, jt_dict *d, jt_args *a, const char *fname) {
    if (a->npos > 1) return jt_err(c, "%s expected at most 1 argument, got %zu", fname, a->npos);
    if (a->npos == 1) {
        jt_val src = a->pos[0];
        if (src.t == JT_DICT) {
            for (size_t i = 0; i < src.u.d->n; i++)
                if (jt_dict_set(c, d, jt_ref(src.u.d->k[i]), jt_ref(src.u.d->v[i]))) return -1;
        } else {
            jt_val lst;
            if (jt_iterate(c, src, &lst)) return -1;
            for (size_t i = 0; i < lst.u.l->n; i++) {
                jt_val pair = lst.u.l->v[i];
                if (!jt_is_seq(pair) || pair.u.l->n != 2) {
                    jt_decref(lst);
                    return jt_err(c, "dictionary update sequence element #%zu has the wrong length", i);
                }
                if (jt_dict_set(c, d, jt_ref(pair.u.l->v[0]), jt_ref(pair.u.l->v[1]))) { jt_decref(lst); return -1; }
            }
            jt_decref(lst);
        }
    }
    for (size_t i = 0; i < a->nkw; i++) {
        jt_val k;
        if (jt_new_cstr(c, a->kwn[i], &k) || jt_dict_set(c, d, k, jt_ref(a->kwv[i]))) return -1;
    }
    return 0;
}

static int g_dict(jt_ctx *c, const jt_val *self, jt_args *a, jt_val *out) {
    if (jt_new_dict(c, out)) return -1;
    if (fill_dict(c, out->u.d, a, "dict")) { jt_decref(*out); return -1; }
    (void)self;
    return 0;
}

static int g_namespace(jt_ctx *c, const jt_val *self, jt_args *a, jt_val *out) {
    if (jt_new_ns(c, out)) return -1;   /* owned by the render: no cleanup needed on error */
    (void)self;
    return fill_dict(c, out->u.ns->d, a, "namespace");
}

static int g_raise(jt_ctx *c, const jt_val *self, jt_args *a, jt_val *out) {
    jt_val *m = jt_arg(a, 0, "message");
    jt_buf b = {0};
    if (m && jt_put_str(c, &b, *m)) { jt_buf_free(&b); return -1; }
    jt_err(c, "%s", b.p ? b.p : "");
    c->raised = true;
    jt_buf_free(&b);
    (void)self;
    (void)out;
    return -1;
}

static int g_strftime_now(jt_ctx *c, const jt_val *self, jt_args *a, jt_val *out) {
    if (jt_args_check(c, a, "strftime_now", 1, NULL)) return -1;
    jt_val *f = jt_arg(a, 0, NULL);
    if (need_str(c, f, "strftime_now() format")) return -1;
    if (f->u.s->len == 0) return jt_new_str(c, "", 0, out);
    /* always the C locale, so month and day names are the English ones
     * Python (in its default C locale) gives */
    locale_t loc = newlocale(LC_ALL_MASK, "C", (locale_t)0);
    if (!loc) return jt_oom(c);
    size_t cap = 256;
    int r = -1;
    for (;;) {
        char *buf = malloc(cap);
        if (!buf) { jt_oom(c); break; }
        size_t n = strftime_l(buf, cap, f->u.s->s, &c->now, loc);
        if (n > 0 || cap >= 65536) {
            r = jt_new_str(c, buf, n, out);
            free(buf);
            break;
        }
        free(buf);
        cap *= 4;
    }
    freelocale(loc);
    (void)self;
    return r;
}

/* joiner(sep): a function returning "" the first time and sep afterwards.
 * Its state lives in a namespace, the render-owned mutable object. */
static int joiner_call(jt_ctx *c, const jt_val *self, jt_args *a, jt_val *out) {
    jt_dict *d = self->u.ns->d;
    if (jt_args_check(c, a, "joiner", 0, NULL)) return -1;
    jt_val *used = jt_dict_gets(d, "used", 4);
    if (!used) {
        jt_val k;
        if (jt_new_cstr(c, "used", &k) || jt_dict_set(c, d, k, jt_bool(true))) return -1;
        return jt_new_str(c, "", 0, out);
    }
    jt_val *sep = jt_dict_gets(d, "sep", 3);
    *out = sep ? jt_ref(*sep) : jt_none();
    return 0;
}

static int g_joiner(jt_ctx *c, const jt_val *self, jt_args *a, jt_val *out) {
    static const char *const kw[] = {"sep", NULL};
    if (jt_args_check(c, a, "joiner", 1, kw)) return -1;
    jt_val *sv = jt_arg(a, 0, "sep");
    jt_val ns, sep, k;
    if (jt_new_ns(c, &ns)) return -1;
    if (sv) sep = jt_ref(*sv);
    else if (jt_new_cstr(c, ", ", &sep)) return -1;
    if (jt_new_cstr(c, "sep", &k)) { jt_decref(sep); return -1; }
    if (jt_dict_set(c, ns.u.ns->d, k, sep)) return -1;
    if (jt_new_func(c, JT_FN_NATIVE, "joiner", out)) return -1;
    out->u.fn->fn = joiner_call;
    out->u.fn->self = malloc(sizeof(jt_val));
    if (!out->u.fn->self) { jt_decref(*out); return jt_oom(c); }
    *out->u.fn->self = ns;
    (void)self;
    return 0;
}

static const struct { const char *name; jt_native_fn fn; } globals[] = {
    {"dict", g_dict}, {"joiner", g_joiner}, {"namespace", g_namespace}, {"raise_exception", g_raise}, {"range", g_range},
    {"strftime_now", g_strftime_now}, {NULL, NULL},
};

int jt_find_global(jt_ctx *c, const char *name, jt_val *out) {
    for (int i = 0; globals[i].name; i++)
        if (!strcmp(globals[i].name, name)) {
            if (jt_new_func(c, JT_FN_NATIVE, globals[i].name, out)) return -1;
            out->u.fn->fn = globals[i].fn;
            return 1;
        }
    return 0;
}

int jt_str_map_case(jt_ctx *c, jt_val s, int mode, jt_val *out) { return map_cps(c, s.u.s, mode, out); }
