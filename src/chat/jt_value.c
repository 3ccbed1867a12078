/* The renderer's value model: Python-like scalars, refcounted immutable
 * strings/lists/tuples/dicts, and Python's str(), repr(), ==, < on them. */
#include "chat/jt.h"
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ----------------------------------------------------------------- errors */

int jt_err(jt_ctx *c, const char *fmt, ...) {
    if (c->failed) return -1;
    c->failed = true;
    c->st = PL_ERR_INVALID_ARG;
    c->err_line = c->line;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(c->err, sizeof c->err, fmt, ap);
    va_end(ap);
    return -1;
}

int jt_oom(jt_ctx *c) {
    if (c->failed) return -1;
    jt_err(c, "out of memory");
    c->st = PL_ERR_NO_MEMORY;
    return -1;
}

int jt_undef_error(jt_ctx *c, jt_val v) {
    if (v.uk == 3) return jt_err(c, "%s object has no element %lld", jt_type_name_t(v.uo), (long long)v.u.i);
    if (v.uk == 1 && v.u.uname)
        return jt_err(c, "'%s object' has no attribute '%s'", jt_type_name_t(v.uo), v.u.uname);
    if (v.uk == 2 && v.uo != JT_UNDEF && !v.u.uname)
        return jt_err(c, "'%s object' has no such attribute or item", jt_type_name_t(v.uo));
    if (v.u.uname) return jt_err(c, "'%s' is undefined", v.u.uname);
    return jt_err(c, "undefined value used");
}

/* Every allocation made on behalf of the template is charged, so a template
 * that builds ever-larger values in a loop stops with an error instead of
 * exhausting memory or time. */
int jt_charge(jt_ctx *c, uint64_t bytes) {
    if (!c) return 0;
    c->allocated += bytes;
    if (c->allocated > c->max_alloc)
        return jt_err(c, "template allocated more than the limit of %llu bytes",
                      (unsigned long long)c->max_alloc);
    return 0;
}

/* -------------------------------------------------------------- refcounts */

static void free_heap(jt_val v);

void jt_incref(jt_val v) {
    if (jt_is_heap(v) && v.t != JT_NS && v.u.h->rc >= 0) v.u.h->rc++;
}

/* Values that died while another value was being freed. Freeing is not
 * recursive: a chain of values can be longer than any depth limit (a dict
 * holding a bound method of a dict holding ..., a macro whose scope holds
 * the previous macro, built one link per loop iteration), so the outermost
 * jt_decref frees dead values from this list until it is empty. Per thread,
 * as renders run on several threads at once. */
static _Thread_local struct {
    jt_val *v;
    size_t n, cap;
    bool draining;
    jt_val small[64];
} dead;

static bool dead_push(jt_val v) {
    if (!dead.v) {
        dead.v = dead.small;
        dead.cap = sizeof dead.small / sizeof dead.small[0];
    }
    if (dead.n == dead.cap) {
        size_t nc = dead.cap * 2;
        jt_val *nv = dead.v == dead.small ? malloc(nc * sizeof *nv) : realloc(dead.v, nc * sizeof *nv);
        if (!nv) return false;
        if (dead.v == dead.small) memcpy(nv, dead.small, sizeof dead.small);
        dead.v = nv;
        dead.cap = nc;
    }
    dead.v[dead.n++] = v;
    return true;
}

void jt_decref(jt_val v) {
    if (!jt_is_heap(v) || v.t == JT_NS) return;   /* namespaces: owned by the render */
    jt_hdr *h = v.u.h;
    if (h->rc < 0) return;                        /* immortal (AST constants) */
    if (--h->rc > 0) return;
    if (dead.draining) {
        /* out of memory for the list: free it here, recursing (the one case) */
        if (!dead_push(v)) free_heap(v);
        return;
    }
    dead.draining = true;
    free_heap(v);
    while (dead.n) free_heap(dead.v[--dead.n]);
    if (dead.v != dead.small) free(dead.v);
    dead.v = NULL;
    dead.cap = 0;
    dead.draining = false;
}

static void free_heap(jt_val v) {
    switch (v.t) {
    case JT_STR: free(v.u.s); break;
    case JT_LIST:
    case JT_TUPLE: {
        jt_list *l = v.u.l;
        for (size_t i = 0; i < l->n; i++) jt_decref(l->v[i]);
        free(l->v);
        free(l);
        break;
    }
    case JT_DICT: {
        jt_dict *d = v.u.d;
        for (size_t i = 0; i < d->n; i++) { jt_decref(d->k[i]); jt_decref(d->v[i]); }
        free(d->k);
        free(d->v);
        free(d->idx);
        free(d);
        break;
    }
    case JT_FUNC: {
        jt_func *f = v.u.fn;
        if (f->self) { jt_decref(*f->self); free(f->self); }
        if (f->frame) jt_frame_release(f->frame);
        free(f);
        break;
    }
    case JT_LOOP: {
        jt_loop *lp = v.u.lp;
        jt_val items = {JT_LIST, 0, 0, {0}};
        items.u.l = lp->items;
        jt_decref(items);
        if (lp->changed) jt_decref(jt_strv(lp->changed));
        free(lp);
        break;
    }
    default: break;
    }
}

/* ---------------------------------------------------------------- strings */

jt_str *jt_str_alloc(jt_ctx *c, size_t len) {
    if (len > c->max_output) {
        jt_err(c, "string of %zu bytes exceeds the output limit of %zu bytes", len, c->max_output);
        return NULL;
    }
    if (jt_charge(c, sizeof(jt_str) + len + 1)) return NULL;
    jt_str *s = malloc(sizeof(jt_str) + len + 1);
    if (!s) { jt_oom(c); return NULL; }
    s->h.rc = 1;
    s->h.depth = 0;
    s->len = len;
    s->ncp = len;
    s->s[len] = 0;
    return s;
}

void jt_str_seal(jt_str *s) {
    s->s[s->len] = 0;
    s->ncp = jt_utf8_count(s->s, s->len);
}

int jt_new_str(jt_ctx *c, const char *p, size_t n, jt_val *out) {
    jt_str *s = jt_str_alloc(c, n);
    if (!s) return -1;
    if (n) memcpy(s->s, p, n);
    jt_str_seal(s);
    *out = jt_strv(s);
    return 0;
}

int jt_new_cstr(jt_ctx *c, const char *p, jt_val *out) { return jt_new_str(c, p, strlen(p), out); }

/* ------------------------------------------------------------------ lists */

int jt_new_list(jt_ctx *c, size_t cap, bool tuple, jt_val *out) {
    if (jt_charge(c, sizeof(jt_list) + cap * sizeof(jt_val))) return -1;
    jt_list *l = calloc(1, sizeof *l);
    if (!l) return jt_oom(c);
    if (cap) {
        l->v = malloc(cap * sizeof(jt_val));
        if (!l->v) { free(l); return jt_oom(c); }
    }
    l->h.rc = 1;
    l->cap = cap;
    out->t = tuple ? JT_TUPLE : JT_LIST;
    out->uk = out->uo = 0;
    out->u.l = l;
    return 0;
}

int jt_list_push(jt_ctx *c, jt_list *l, jt_val item) {
    uint32_t d = jt_depth(item);
    if (d + 1 > JT_MAX_VALUE_DEPTH) {
        jt_decref(item);
        return jt_err(c, "value nested more than %d levels deep", JT_MAX_VALUE_DEPTH);
    }
    if (l->n == l->cap) {
        size_t nc = l->cap ? l->cap * 2 : 4;
        if (jt_charge(c, (nc - l->cap) * sizeof(jt_val))) { jt_decref(item); return -1; }
        jt_val *nv = realloc(l->v, nc * sizeof(jt_val));
        if (!nv) { jt_decref(item); return jt_oom(c); }
        l->v = nv;
        l->cap = nc;
    }
    l->v[l->n++] = item;
    if (d + 1 > l->h.depth) l->h.depth = d + 1;
    return 0;
}

/* ------------------------------------------------------------------ dicts */

bool jt_hashable(jt_val v) {
    return v.t == JT_STR || v.t == JT_INT || v.t == JT_FLOAT || v.t == JT_BOOL || v.t == JT_NONE;
}

static uint64_t hash_bytes(const char *s, size_t n) {
    uint64_t h = 1469598103934665603ull;
    for (size_t i = 0; i < n; i++) { h ^= (unsigned char)s[i]; h *= 1099511628211ull; }
    return h;
}

static uint64_t hash_int(uint64_t x) {
    x ^= x >> 33; x *= 0xff51afd7ed558ccdull; x ^= x >> 33;
    return x;
}

/* Python: hash(1) == hash(1.0) == hash(True), so equal numbers share a key. */
static uint64_t key_hash(jt_val k) {
    switch (k.t) {
    case JT_STR: return hash_bytes(k.u.s->s, k.u.s->len);
    case JT_BOOL: return hash_int((uint64_t)k.u.b);
    case JT_INT: return hash_int((uint64_t)k.u.i);
    case JT_FLOAT: {
        double f = k.u.f;
        if (f == floor(f) && fabs(f) < 9.2e18) return hash_int((uint64_t)(int64_t)f);
        uint64_t bits;
        memcpy(&bits, &f, sizeof bits);
        return hash_int(bits);
    }
    default: return 0x9e3779b97f4a7c15ull;
    }
}

static bool key_eq(jt_val a, jt_val b) {
    if (a.t == JT_STR && b.t == JT_STR)
        return a.u.s->len == b.u.s->len && !memcmp(a.u.s->s, b.u.s->s, a.u.s->len);
    return jt_equal(a, b);
}

int jt_new_dict(jt_ctx *c, jt_val *out) {
    if (jt_charge(c, sizeof(jt_dict))) return -1;
    jt_dict *d = calloc(1, sizeof *d);
    if (!d) return jt_oom(c);
    d->h.rc = 1;
    out->t = JT_DICT;
    out->uk = out->uo = 0;
    out->u.d = d;
    return 0;
}

static void index_insert(jt_dict *d, size_t slot) {
    size_t mask = d->idx_cap - 1, i = key_hash(d->k[slot]) & mask;
    while (d->idx[i]) i = (i + 1) & mask;
    d->idx[i] = (uint32_t)(slot + 1);
}

static int reindex(jt_ctx *c, jt_dict *d) {
    size_t cap = 16;
    while (cap < d->n * 2 + 2) cap *= 2;
    if (jt_charge(c, cap * sizeof(uint32_t))) return -1;
    uint32_t *idx = calloc(cap, sizeof *idx);
    if (!idx) return jt_oom(c);
    free(d->idx);
    d->idx = idx;
    d->idx_cap = cap;
    for (size_t i = 0; i < d->n; i++) index_insert(d, i);
    return 0;
}

static long find_slot(const jt_dict *d, jt_val key) {
    if (!d->idx) {
        for (size_t i = 0; i < d->n; i++)
            if (key_eq(d->k[i], key)) return (long)i;
        return -1;
    }
    size_t mask = d->idx_cap - 1, i = key_hash(key) & mask;
    while (d->idx[i]) {
        size_t s = d->idx[i] - 1;
        if (key_eq(d->k[s], key)) return (long)s;
        i = (i + 1) & mask;
    }
    return -1;
}

jt_val *jt_dict_get(const jt_dict *d, jt_val key) {
    long s = find_slot(d, key);
    return s < 0 ? NULL : &d->v[s];
}

jt_val *jt_dict_gets(const jt_dict *d, const char *s, size_t n) {
    /* Lookup by C string: no key value needs to be built. */
    if (!d->idx) {
        for (size_t i = 0; i < d->n; i++) {
            jt_val k = d->k[i];
            if (k.t == JT_STR && k.u.s->len == n && !memcmp(k.u.s->s, s, n)) return &d->v[i];
        }
        return NULL;
    }
    size_t mask = d->idx_cap - 1, i = hash_bytes(s, n) & mask;
    while (d->idx[i]) {
        size_t sl = d->idx[i] - 1;
        jt_val k = d->k[sl];
        if (k.t == JT_STR && k.u.s->len == n && !memcmp(k.u.s->s, s, n)) return &d->v[sl];
        i = (i + 1) & mask;
    }
    return NULL;
}

int jt_dict_set(jt_ctx *c, jt_dict *d, jt_val key, jt_val val) {
    if (!jt_hashable(key)) {
        jt_err(c, "unhashable type: '%s'", jt_type_name(key));
        jt_decref(key);
        jt_decref(val);
        return -1;
    }
    uint32_t dv = jt_depth(val);
    if (dv + 1 > JT_MAX_VALUE_DEPTH) {
        jt_decref(key);
        jt_decref(val);
        return jt_err(c, "value nested more than %d levels deep", JT_MAX_VALUE_DEPTH);
    }
    long s = find_slot(d, key);
    if (s >= 0) {   /* Python keeps the first key object and position */
        jt_decref(key);
        jt_decref(d->v[s]);
        d->v[s] = val;
    } else {
        if (d->n == d->cap) {
            size_t nc = d->cap ? d->cap * 2 : 4;
            if (d->n >= UINT32_MAX - 1) { jt_decref(key); jt_decref(val); return jt_err(c, "dict too large"); }
            if (jt_charge(c, (nc - d->cap) * 2 * sizeof(jt_val))) { jt_decref(key); jt_decref(val); return -1; }
            jt_val *nk = realloc(d->k, nc * sizeof(jt_val));
            if (!nk) { jt_decref(key); jt_decref(val); return jt_oom(c); }
            d->k = nk;
            jt_val *nv = realloc(d->v, nc * sizeof(jt_val));
            if (!nv) { jt_decref(key); jt_decref(val); return jt_oom(c); }
            d->v = nv;
            d->cap = nc;
        }
        d->k[d->n] = key;
        d->v[d->n] = val;
        d->n++;
        if (d->idx) {
            if (d->n * 2 + 2 > d->idx_cap) { if (reindex(c, d)) return -1; }
            else index_insert(d, d->n - 1);
        } else if (d->n > 8) {
            if (reindex(c, d)) return -1;
        }
    }
    if (dv + 1 > d->h.depth) d->h.depth = dv + 1;
    return 0;
}

void jt_dict_clear(jt_dict *d) {
    for (size_t i = 0; i < d->n; i++) { jt_decref(d->k[i]); jt_decref(d->v[i]); }
    d->n = 0;
    free(d->idx);
    d->idx = NULL;
    d->idx_cap = 0;
    d->h.depth = 0;
}

/* ---------------------------------------------------- namespaces and funcs */

int jt_new_ns(jt_ctx *c, jt_val *out) {
    if (jt_charge(c, sizeof(jt_ns))) return -1;
    jt_ns *ns = calloc(1, sizeof *ns);
    if (!ns) return jt_oom(c);
    jt_val d;
    if (jt_new_dict(c, &d)) { free(ns); return -1; }
    ns->h.rc = -1;
    ns->h.depth = 0;
    ns->d = d.u.d;
    ns->next = c->namespaces;
    c->namespaces = ns;
    out->t = JT_NS;
    out->uk = out->uo = 0;
    out->u.ns = ns;
    return 0;
}

int jt_new_func(jt_ctx *c, int kind, const char *name, jt_val *out) {
    if (jt_charge(c, sizeof(jt_func))) return -1;
    jt_func *f = calloc(1, sizeof *f);
    if (!f) return jt_oom(c);
    f->h.rc = 1;
    f->kind = (uint8_t)kind;
    f->name = name;
    out->t = JT_FUNC;
    out->uk = out->uo = 0;
    out->u.fn = f;
    return 0;
}

/* ------------------------------------------------------- Python semantics */

bool jt_truthy(jt_val v) {
    switch (v.t) {
    case JT_UNDEF: case JT_NONE: return false;
    case JT_BOOL: return v.u.b;
    case JT_INT: return v.u.i != 0;
    case JT_FLOAT: return v.u.f != 0.0;
    case JT_STR: return v.u.s->len != 0;
    case JT_LIST: case JT_TUPLE: return v.u.l->n != 0;
    case JT_DICT: return v.u.d->n != 0;
    default: return true;
    }
}

const char *jt_type_name_t(int t) {
    static const char *names[] = {"Undefined", "NoneType", "bool", "int", "float", "str", "list",
                                  "tuple", "dict", "Namespace", "function", "LoopContext"};
    return t >= 0 && t <= JT_LOOP ? names[t] : "object";
}

const char *jt_type_name(jt_val v) {
    if (v.t == JT_FUNC) return v.u.fn->kind == JT_FN_MACRO ? "Macro" : "builtin_function_or_method";
    return jt_type_name_t(v.t);
}

int64_t jt_len_of(jt_val v) {
    switch (v.t) {
    case JT_UNDEF: return 0;
    case JT_STR: return (int64_t)v.u.s->ncp;
    case JT_LIST: case JT_TUPLE: return (int64_t)v.u.l->n;
    case JT_DICT: return (int64_t)v.u.d->n;
    case JT_LOOP: return (int64_t)v.u.lp->items->n;
    default: return -1;
    }
}

bool jt_equal(jt_val a, jt_val b) {
    if (jt_is_num(a) && jt_is_num(b)) {
        if (a.t != JT_FLOAT && b.t != JT_FLOAT) return jt_as_int(a) == jt_as_int(b);
        return jt_as_float(a) == jt_as_float(b);
    }
    if (a.t != b.t) return false;
    switch (a.t) {
    case JT_UNDEF: case JT_NONE: return true;
    case JT_STR:
        return a.u.s == b.u.s || (a.u.s->len == b.u.s->len && !memcmp(a.u.s->s, b.u.s->s, a.u.s->len));
    case JT_LIST: case JT_TUPLE: {
        if (a.u.l == b.u.l) return true;
        if (a.u.l->n != b.u.l->n) return false;
        for (size_t i = 0; i < a.u.l->n; i++)
            if (!jt_equal(a.u.l->v[i], b.u.l->v[i])) return false;
        return true;
    }
    case JT_DICT: {
        if (a.u.d == b.u.d) return true;
        if (a.u.d->n != b.u.d->n) return false;
        for (size_t i = 0; i < a.u.d->n; i++) {
            jt_val *o = jt_dict_get(b.u.d, a.u.d->k[i]);
            if (!o || !jt_equal(a.u.d->v[i], *o)) return false;
        }
        return true;
    }
    default: return a.u.h == b.u.h;
    }
}

int jt_compare(jt_ctx *c, jt_val a, jt_val b, const char *op, int *res) {
    if (a.t == JT_UNDEF) return jt_undef_error(c, a);
    if (b.t == JT_UNDEF) return jt_undef_error(c, b);
    if (jt_is_num(a) && jt_is_num(b)) {
        if (a.t != JT_FLOAT && b.t != JT_FLOAT) {
            int64_t x = jt_as_int(a), y = jt_as_int(b);
            *res = x < y ? -1 : x > y;
        } else {
            double x = jt_as_float(a), y = jt_as_float(b);
            *res = (isnan(x) || isnan(y)) ? 2 : x < y ? -1 : x > y;
        }
        return 0;
    }
    if (a.t == JT_STR && b.t == JT_STR) {
        /* UTF-8 byte order is code point order. */
        size_t n = a.u.s->len < b.u.s->len ? a.u.s->len : b.u.s->len;
        int r = memcmp(a.u.s->s, b.u.s->s, n);
        *res = r < 0 ? -1 : r > 0 ? 1 : a.u.s->len < b.u.s->len ? -1 : a.u.s->len > b.u.s->len;
        return 0;
    }
    if (a.t == b.t && jt_is_seq(a)) {
        if (jt_stack_low(c)) return jt_err(c, "values nested too deeply to compare");
        jt_list *x = a.u.l, *y = b.u.l;
        for (size_t i = 0; i < x->n && i < y->n; i++) {
            if (jt_equal(x->v[i], y->v[i])) continue;
            return jt_compare(c, x->v[i], y->v[i], op, res);
        }
        *res = x->n < y->n ? -1 : x->n > y->n;
        return 0;
    }
    return jt_err(c, "'%s' not supported between instances of '%s' and '%s'", op, jt_type_name(a),
                  jt_type_name(b));
}

/* ---------------------------------------------------------------- buffers */

int jt_buf_put(jt_ctx *c, jt_buf *b, const char *s, size_t n) {
    if (n > c->max_output || b->n > c->max_output - n)
        return jt_err(c, "output exceeds the limit of %zu bytes", c->max_output);
    if (b->n + n + 1 > b->cap) {
        size_t nc = b->cap ? b->cap : 256;
        while (nc < b->n + n + 1) nc *= 2;
        char *np = realloc(b->p, nc);
        if (!np) return jt_oom(c);
        b->p = np;
        b->cap = nc;
    }
    if (n) memcpy(b->p + b->n, s, n);
    b->n += n;
    b->p[b->n] = 0;
    return 0;
}

int jt_buf_puts(jt_ctx *c, jt_buf *b, const char *s) { return jt_buf_put(c, b, s, strlen(s)); }
int jt_buf_putc(jt_ctx *c, jt_buf *b, char ch) { return jt_buf_put(c, b, &ch, 1); }

void jt_buf_free(jt_buf *b) {
    free(b->p);
    b->p = NULL;
    b->n = b->cap = 0;
}

int jt_buf_take(jt_ctx *c, jt_buf *b, jt_val *out) {
    int r = jt_new_str(c, b->p ? b->p : "", b->n, out);
    jt_buf_free(b);
    return r;
}

/* ------------------------------------------------------- numbers as text */

void jt_fmt_int(int64_t i, char out[24]) { snprintf(out, 24, "%lld", (long long)i); }

/* Python's repr(float): the shortest digits that round-trip, in fixed
 * notation when the decimal exponent is in [-4, 16), else d.ddde+XX. */
void jt_fmt_float(double x, char out[40]) {
    if (isnan(x)) { strcpy(out, "nan"); return; }
    if (isinf(x)) { strcpy(out, x < 0 ? "-inf" : "inf"); return; }
    if (x == 0) { strcpy(out, signbit(x) ? "-0.0" : "0.0"); return; }
    char buf[48];
    for (int p = 1; p <= 17; p++) {
        snprintf(buf, sizeof buf, "%.*e", p - 1, x);
        if (strtod(buf, NULL) == x) break;
    }
    /* buf: [-]d[.ddd]e[+-]XX */
    char digits[24];
    int nd = 0, exp10 = 0;
    bool neg = false;
    const char *p = buf;
    if (*p == '-') { neg = true; p++; }
    for (; *p && *p != 'e'; p++)
        if (*p >= '0' && *p <= '9' && nd < 20) digits[nd++] = *p;
    if (*p == 'e') exp10 = atoi(p + 1);
    while (nd > 1 && digits[nd - 1] == '0') nd--;
    digits[nd] = 0;
    char *o = out;
    if (neg) *o++ = '-';
    if (exp10 >= -4 && exp10 < 16) {
        int decpt = exp10 + 1;   /* digits before the point */
        if (decpt <= 0) {
            *o++ = '0'; *o++ = '.';
            for (int i = 0; i < -decpt; i++) *o++ = '0';
            for (int i = 0; i < nd; i++) *o++ = digits[i];
        } else if (decpt >= nd) {
            for (int i = 0; i < nd; i++) *o++ = digits[i];
            for (int i = nd; i < decpt; i++) *o++ = '0';
            *o++ = '.'; *o++ = '0';
        } else {
            for (int i = 0; i < decpt; i++) *o++ = digits[i];
            *o++ = '.';
            for (int i = decpt; i < nd; i++) *o++ = digits[i];
        }
        *o = 0;
        return;
    }
    o = out;
    if (neg) *o++ = '-';
    *o++ = digits[0];
    if (nd > 1) {
        *o++ = '.';
        for (int i = 1; i < nd; i++) *o++ = digits[i];
    }
    snprintf(o, (size_t)(out + 40 - o), "e%c%02d", exp10 < 0 ? '-' : '+', exp10 < 0 ? -exp10 : exp10);
}

/* ------------------------------------------------------------ str / repr */

static int put_str_repr(jt_ctx *c, jt_buf *b, const jt_str *s) {
    bool has_sq = memchr(s->s, '\'', s->len) != NULL, has_dq = memchr(s->s, '"', s->len) != NULL;
    char q = (has_sq && !has_dq) ? '"' : '\'';
    if (jt_buf_putc(c, b, q)) return -1;
    size_t i = 0, run = 0;
    while (i < s->len) {
        size_t start = i;
        uint32_t cp = jt_utf8_next(s->s, s->len, &i);
        char esc[16];
        const char *e = NULL;
        if (cp == (uint32_t)q || cp == '\\') { esc[0] = '\\'; esc[1] = (char)cp; esc[2] = 0; e = esc; }
        else if (cp == '\n') e = "\\n";
        else if (cp == '\r') e = "\\r";
        else if (cp == '\t') e = "\\t";
        else if (cp < 0x20 || cp == 0x7f) { snprintf(esc, sizeof esc, "\\x%02x", cp); e = esc; }
        else if (cp >= 0xDC80 && cp <= 0xDCFF) { snprintf(esc, sizeof esc, "\\udc%02x", cp & 0xff); e = esc; }
        else if (cp >= 0x80 && !jt_cp_printable(cp)) {
            if (cp <= 0xff) snprintf(esc, sizeof esc, "\\x%02x", cp);
            else if (cp <= 0xffff) snprintf(esc, sizeof esc, "\\u%04x", cp);
            else snprintf(esc, sizeof esc, "\\U%08x", cp);
            e = esc;
        }
        if (e) {
            if (jt_buf_put(c, b, s->s + run, start - run) || jt_buf_puts(c, b, e)) return -1;
            run = i;
        }
    }
    if (jt_buf_put(c, b, s->s + run, s->len - run)) return -1;
    return jt_buf_putc(c, b, q);
}

int jt_put_repr(jt_ctx *c, jt_buf *b, jt_val v, int depth) {
    if (depth > JT_MAX_VALUE_DEPTH + 8 || jt_stack_low(c))
        return jt_err(c, "value nested more than %d levels deep", JT_MAX_VALUE_DEPTH);
    char num[40];
    switch (v.t) {
    case JT_UNDEF: return jt_buf_puts(c, b, "Undefined");
    case JT_STR: return put_str_repr(c, b, v.u.s);
    case JT_LIST:
    case JT_TUPLE: {
        jt_list *l = v.u.l;
        static const char *views[] = {"", "dict_keys(", "dict_values(", "dict_items(", ""};
        if (l->view && jt_buf_puts(c, b, views[l->view <= 4 ? l->view : 0])) return -1;
        if (jt_buf_putc(c, b, v.t == JT_LIST ? '[' : '(')) return -1;
        for (size_t i = 0; i < l->n; i++) {
            if (i && jt_buf_put(c, b, ", ", 2)) return -1;
            if (jt_put_repr(c, b, l->v[i], depth + 1)) return -1;
        }
        if (v.t == JT_TUPLE && l->n == 1 && jt_buf_putc(c, b, ',')) return -1;
        if (jt_buf_putc(c, b, v.t == JT_LIST ? ']' : ')')) return -1;
        return l->view && l->view < 4 ? jt_buf_putc(c, b, ')') : 0;
    }
    case JT_DICT: {
        jt_dict *d = v.u.d;
        if (jt_buf_putc(c, b, '{')) return -1;
        for (size_t i = 0; i < d->n; i++) {
            if (i && jt_buf_put(c, b, ", ", 2)) return -1;
            if (jt_put_repr(c, b, d->k[i], depth + 1) || jt_buf_put(c, b, ": ", 2) ||
                jt_put_repr(c, b, d->v[i], depth + 1))
                return -1;
        }
        return jt_buf_putc(c, b, '}');
    }
    case JT_NS: {
        jt_val d = {JT_DICT, 0, 0, {0}};
        d.u.d = v.u.ns->d;
        if (jt_buf_puts(c, b, "<Namespace ") || jt_put_repr(c, b, d, depth + 1)) return -1;
        return jt_buf_putc(c, b, '>');
    }
    case JT_FUNC:
        if (v.u.fn->kind == JT_FN_MACRO) {
            snprintf(num, sizeof num, "<Macro '%.24s'>", v.u.fn->name ? v.u.fn->name : "");
            return jt_buf_puts(c, b, num);
        }
        if (jt_buf_puts(c, b, "<built-in function ") || jt_buf_puts(c, b, v.u.fn->name ? v.u.fn->name : "?"))
            return -1;
        return jt_buf_putc(c, b, '>');
    case JT_LOOP:
        snprintf(num, sizeof num, "<LoopContext %zu/%zu>", v.u.lp->i + 1, v.u.lp->items->n);
        return jt_buf_puts(c, b, num);
    default: return jt_put_str(c, b, v);
    }
}

int jt_put_str(jt_ctx *c, jt_buf *b, jt_val v) {
    char num[40];
    switch (v.t) {
    case JT_UNDEF: return 0;
    case JT_NONE: return jt_buf_put(c, b, "None", 4);
    case JT_BOOL: return v.u.b ? jt_buf_put(c, b, "True", 4) : jt_buf_put(c, b, "False", 5);
    case JT_INT: jt_fmt_int(v.u.i, num); return jt_buf_puts(c, b, num);
    case JT_FLOAT: jt_fmt_float(v.u.f, num); return jt_buf_puts(c, b, num);
    case JT_STR: return jt_buf_put(c, b, v.u.s->s, v.u.s->len);
    default: return jt_put_repr(c, b, v, 0);
    }
}

int jt_to_str(jt_ctx *c, jt_val v, jt_val *out) {
    if (v.t == JT_STR) { *out = jt_ref(v); return 0; }
    jt_buf b = {0};
    if (jt_put_str(c, &b, v)) { jt_buf_free(&b); return -1; }
    return jt_buf_take(c, &b, out);
}

/* ------------------------------------------------------------------ UTF-8 */

uint32_t jt_utf8_next(const char *s, size_t n, size_t *i) {
    const unsigned char *p = (const unsigned char *)s + *i;
    size_t left = n - *i;
    unsigned c = p[0];
    if (c < 0x80) { (*i)++; return c; }
    int len = (c >= 0xC2 && c <= 0xDF) ? 2 : (c >= 0xE0 && c <= 0xEF) ? 3 : (c >= 0xF0 && c <= 0xF4) ? 4 : 0;
    if (len && (size_t)len <= left) {
        bool ok = true;
        for (int k = 1; k < len; k++) ok = ok && (p[k] & 0xC0) == 0x80;
        if (ok) {
            uint32_t cp;
            if (len == 2) cp = ((c & 0x1F) << 6) | (p[1] & 0x3F);
            else if (len == 3) cp = ((c & 0x0F) << 12) | ((p[1] & 0x3F) << 6) | (p[2] & 0x3F);
            else cp = ((c & 0x07) << 18) | ((p[1] & 0x3F) << 12) | ((p[2] & 0x3F) << 6) | (p[3] & 0x3F);
            bool valid = (len == 3) ? (cp >= 0x800 && !(cp >= 0xD800 && cp <= 0xDFFF))
                       : (len == 4) ? (cp >= 0x10000 && cp <= 0x10FFFF) : true;
            if (valid) { *i += (size_t)len; return cp; }
        }
    }
    /* An invalid byte becomes a lone surrogate U+DC80..U+DCFF (Python's
     * "surrogateescape"), which jt_utf8_put turns back into that byte. */
    (*i)++;
    return 0xDC00 + c;
}

int jt_utf8_put(uint32_t cp, char out[4]) {
    if (cp >= 0xDC80 && cp <= 0xDCFF) { out[0] = (char)(cp - 0xDC00); return 1; }
    if (cp < 0x80) { out[0] = (char)cp; return 1; }
    if (cp < 0x800) { out[0] = (char)(0xC0 | (cp >> 6)); out[1] = (char)(0x80 | (cp & 0x3F)); return 2; }
    if (cp >= 0xD800 && cp <= 0xDFFF) cp = 0xFFFD;
    if (cp < 0x10000) {
        out[0] = (char)(0xE0 | (cp >> 12)); out[1] = (char)(0x80 | ((cp >> 6) & 0x3F));
        out[2] = (char)(0x80 | (cp & 0x3F));
        return 3;
    }
    if (cp > 0x10FFFF) cp = 0xFFFD;
    if (cp == 0xFFFD) { out[0] = (char)0xEF; out[1] = (char)0xBF; out[2] = (char)0xBD; return 3; }
    out[0] = (char)(0xF0 | (cp >> 18)); out[1] = (char)(0x80 | ((cp >> 12) & 0x3F));
    out[2] = (char)(0x80 | ((cp >> 6) & 0x3F)); out[3] = (char)(0x80 | (cp & 0x3F));
    return 4;
}

size_t jt_utf8_count(const char *s, size_t n) {
    size_t i = 0, k = 0;
    while (i < n) {
        if ((unsigned char)s[i] < 0x80) { i++; k++; continue; }
        jt_utf8_next(s, n, &i);
        k++;
    }
    return k;
}

size_t jt_utf8_offset(const jt_str *s, size_t cp_index) {
    if (s->ncp == s->len) return cp_index < s->len ? cp_index : s->len;
    size_t i = 0, k = 0;
    while (i < s->len && k < cp_index) { jt_utf8_next(s->s, s->len, &i); k++; }
    return i;
}

/* ---------------------------------------------------- Unicode properties */

bool jt_cp_space(uint32_t cp) {
    return (cp >= 0x09 && cp <= 0x0D) || (cp >= 0x1C && cp <= 0x20) || cp == 0x85 || cp == 0xA0 ||
           cp == 0x1680 || (cp >= 0x2000 && cp <= 0x200A) || cp == 0x2028 || cp == 0x2029 ||
           cp == 0x202F || cp == 0x205F || cp == 0x3000;
}

/* Simple (1:1) case mappings for the scripts chat text commonly uses: Latin,
 * Greek, Cyrillic, Armenian, fullwidth Latin. Other code points are left as
 * they are (Python maps a few more, and a handful such as 'ß' to two). */
uint32_t jt_cp_upper(uint32_t cp) {
    if (cp < 0x80) return (cp >= 'a' && cp <= 'z') ? cp - 32 : cp;
    if (cp == 0xB5) return 0x39C;
    if ((cp >= 0xE0 && cp <= 0xFE && cp != 0xF7)) return cp - 32;
    if (cp == 0xFF) return 0x178;
    if (cp >= 0x100 && cp <= 0x17F) {
        if (cp == 0x131) return 'I';
        if (cp == 0x17F) return 'S';
        if ((cp >= 0x139 && cp <= 0x148) || (cp >= 0x179 && cp <= 0x17E)) return (cp & 1) ? cp : cp - 1;
        if (cp == 0x130 || cp == 0x138 || cp == 0x149) return cp;
        return (cp & 1) ? cp - 1 : cp;
    }
    if (cp >= 0x3B1 && cp <= 0x3C9 && cp != 0x3C2) return cp - 32;
    if (cp == 0x3C2) return 0x3A3;
    if (cp >= 0x3AC && cp <= 0x3AF) return cp == 0x3AC ? 0x386 : cp - 37;
    if (cp == 0x3CC) return 0x38C;
    if (cp == 0x3CD || cp == 0x3CE) return cp - 63;
    if (cp >= 0x430 && cp <= 0x44F) return cp - 32;
    if (cp >= 0x450 && cp <= 0x45F) return cp - 80;
    if ((cp >= 0x460 && cp <= 0x481) || (cp >= 0x48A && cp <= 0x4BF) || (cp >= 0x4D0 && cp <= 0x52F))
        return (cp & 1) ? cp - 1 : cp;
    if (cp >= 0x561 && cp <= 0x586) return cp - 48;
    if ((cp >= 0x1E00 && cp <= 0x1E95) || (cp >= 0x1EA0 && cp <= 0x1EFF)) return (cp & 1) ? cp - 1 : cp;
    if (cp >= 0xFF41 && cp <= 0xFF5A) return cp - 32;
    return cp;
}

uint32_t jt_cp_lower(uint32_t cp) {
    if (cp < 0x80) return (cp >= 'A' && cp <= 'Z') ? cp + 32 : cp;
    if (cp >= 0xC0 && cp <= 0xDE && cp != 0xD7) return cp + 32;
    if (cp == 0x178) return 0xFF;
    if (cp >= 0x100 && cp <= 0x17F) {
        if (cp == 0x130) return 'i';
        if ((cp >= 0x139 && cp <= 0x148) || (cp >= 0x179 && cp <= 0x17E)) return (cp & 1) ? cp + 1 : cp;
        if (cp == 0x131 || cp == 0x138 || cp == 0x149 || cp == 0x17F) return cp;
        return (cp & 1) ? cp : cp + 1;
    }
    if (cp >= 0x391 && cp <= 0x3A9 && cp != 0x3A2) return cp + 32;
    if (cp == 0x386) return 0x3AC;
    if (cp >= 0x388 && cp <= 0x38A) return cp + 37;
    if (cp == 0x38C) return 0x3CC;
    if (cp == 0x38E || cp == 0x38F) return cp + 63;
    if (cp >= 0x410 && cp <= 0x42F) return cp + 32;
    if (cp >= 0x400 && cp <= 0x40F) return cp + 80;
    if ((cp >= 0x460 && cp <= 0x481) || (cp >= 0x48A && cp <= 0x4BF) || (cp >= 0x4D0 && cp <= 0x52F))
        return (cp & 1) ? cp : cp + 1;
    if (cp >= 0x531 && cp <= 0x556) return cp + 48;
    if ((cp >= 0x1E00 && cp <= 0x1E95) || (cp >= 0x1EA0 && cp <= 0x1EFF)) return (cp & 1) ? cp : cp + 1;
    if (cp >= 0xFF21 && cp <= 0xFF3A) return cp + 32;
    return cp;
}

bool jt_cp_digit(uint32_t cp) { return cp >= '0' && cp <= '9'; }

bool jt_cp_alpha(uint32_t cp) {
    if (cp < 0x80) return (cp | 32) >= 'a' && (cp | 32) <= 'z';
    if (cp == 0xAA || cp == 0xB5 || cp == 0xBA) return true;
    if (cp >= 0xC0 && cp <= 0x24F) return cp != 0xD7 && cp != 0xF7;
    return (cp >= 0x370 && cp <= 0x3FF && cp != 0x37E && cp != 0x387) || (cp >= 0x400 && cp <= 0x52F) ||
           (cp >= 0x531 && cp <= 0x587) || (cp >= 0x5D0 && cp <= 0x5EA) || (cp >= 0x620 && cp <= 0x64A) ||
           (cp >= 0x1E00 && cp <= 0x1FFF) || (cp >= 0x3041 && cp <= 0x30FF && cp != 0x30FB) ||
           (cp >= 0x3400 && cp <= 0x4DBF) || (cp >= 0x4E00 && cp <= 0x9FFF) ||
           (cp >= 0xAC00 && cp <= 0xD7A3) || (cp >= 0xF900 && cp <= 0xFAFF) ||
           (cp >= 0xFF21 && cp <= 0xFF3A) || (cp >= 0xFF41 && cp <= 0xFF5A) || (cp >= 0x20000 && cp <= 0x3134F);
}

/* Python's str.isprintable(): false for separators other than ' ', controls,
 * format characters, surrogates, private use and (here only partly)
 * unassigned code points. Used by repr(). */
bool jt_cp_printable(uint32_t cp) {
    if (cp < 0x20 || (cp >= 0x7F && cp <= 0xA0) || cp == 0xAD) return false;
    if (cp < 0x300) return true;
    if ((cp >= 0x600 && cp <= 0x605) || cp == 0x61C || cp == 0x6DD || cp == 0x70F || cp == 0x8E2 ||
        cp == 0x180E || cp == 0x1680 || (cp >= 0x2000 && cp <= 0x200F) || (cp >= 0x2028 && cp <= 0x202F) ||
        (cp >= 0x205F && cp <= 0x2064) || (cp >= 0x2066 && cp <= 0x206F) || cp == 0x3000 ||
        (cp >= 0xD800 && cp <= 0xF8FF) || cp == 0xFEFF || (cp >= 0xFFF0 && cp <= 0xFFFB) ||
        cp == 0xFFFE || cp == 0xFFFF || cp == 0x110BD || cp == 0x110CD || (cp >= 0x13430 && cp <= 0x1343F) ||
        (cp >= 0x1BCA0 && cp <= 0x1BCA3) || (cp >= 0x1D173 && cp <= 0x1D17A) ||
        (cp >= 0xE0000 && cp <= 0xE0FFF) || cp >= 0xF0000)
        return false;
    return true;
}
