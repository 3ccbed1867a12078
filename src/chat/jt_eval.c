/* The evaluator: statements write to the current output buffer, expressions
 * produce owned values. Scoping follows jinja2: for-loop bodies, macros,
 * call blocks and with-blocks get their own scope (one per iteration for
 * loops); if-blocks do not; {% set %} writes to the innermost scope, so a
 * set inside a loop is not visible after it (use namespace()). Lookups fall
 * back to the render's context variables and then to the global functions.
 *
 * Every recursive entry point counts depth and steps, so no template can
 * overflow the C stack or run unbounded. */
#include "chat/jt.h"
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum { EXEC_OK = 0, EXEC_BREAK = 1, EXEC_CONTINUE = 2, EXEC_ERR = -1 };

static int exec_body(jt_ctx *c, const jt_node *body);

#if !defined(__GNUC__)
const char *jt_stack_here(void) {
    volatile char here = 0;
    return (const char *)&here;
}
#endif

/* The lowest address of this thread's stack (glibc; 0 when unknown),
 * looked up once per thread: pthread_getattr_np reads /proc/self/maps for
 * the main thread. */
static uintptr_t stack_low_end(void) {
#if defined(__GLIBC__)
    static _Thread_local uintptr_t low;
    static _Thread_local bool known;
    if (!known) {
        pthread_attr_t attr;
        void *addr = NULL;
        size_t size = 0;
        if (pthread_getattr_np(pthread_self(), &attr) == 0) {
            if (pthread_attr_getstack(&attr, &addr, &size) == 0) low = (uintptr_t)addr;
            pthread_attr_destroy(&attr);
        }
        known = true;
    }
    return low;
#else
    return 0;
#endif
}

size_t jt_stack_budget(const char *here, size_t want) {
    uintptr_t low = stack_low_end(), h = (uintptr_t)here;
    if (!low || h <= low) return want;
    size_t room = (size_t)(h - low);
    size_t usable = room > 2 * JT_STACK_MARGIN ? room - JT_STACK_MARGIN : room / 2;
    return usable < want ? usable : want;
}

bool jt_stack_low(const jt_ctx *c) {
    return c->stack_base && jt_stack_span(c->stack_base, JT_STACK_HERE()) > c->max_stack;
}

static int enter(jt_ctx *c, const jt_node *n) {
    c->line = n->line;
    if (++c->steps > c->max_steps)
        return jt_err(c, "template evaluation exceeded the limit of %llu steps", (unsigned long long)c->max_steps);
    if (++c->depth > JT_MAX_EVAL_DEPTH || jt_stack_low(c)) {
        c->depth--;
        return jt_err(c, "template recursion too deep (more than %d levels or %zu bytes of stack)", JT_MAX_EVAL_DEPTH,
                      c->max_stack);
    }
    return 0;
}

/* ----------------------------------------------------------------- frames */

static jt_frame *frame_new(jt_ctx *c, jt_frame *parent) {
    if (jt_charge(c, sizeof(jt_frame))) return NULL;
    jt_frame *f = calloc(1, sizeof *f);
    if (!f) { jt_oom(c); return NULL; }
    f->rc = 1;
    f->parent = parent;
    if (parent) parent->rc++;
    return f;
}

static void frame_clear(jt_frame *f) {
    /* values are released from the end; f->n shrinks first so a release that
     * looks at this frame sees only live entries */
    while (f->n) {
        jt_val v = f->vars[--f->n].v;
        jt_decref(v);
    }
}

void jt_frame_clear(jt_frame *f) { frame_clear(f); }

void jt_frame_release(jt_frame *f) {
    while (f && --f->rc == 0) {
        jt_frame *p = f->parent;
        frame_clear(f);
        free(f->vars);
        free(f);
        f = p;
    }
}

static int frame_push(jt_ctx *c) {
    jt_frame *f = frame_new(c, c->frame);
    if (!f) return -1;
    c->frame = f;
    return 0;
}

/* Leaving a scope empties it first: a macro defined in a scope refers back
 * to it, and emptying breaks that cycle (see JT_N_MACRO). */
static void frame_pop(jt_ctx *c) {
    jt_frame *f = c->frame;
    c->frame = f->parent;
    frame_clear(f);
    jt_frame_release(f);
}

/* Sets name in frame f; steals v. */
static int frame_set(jt_ctx *c, jt_frame *f, const char *name, jt_val v) {
    for (size_t i = 0; i < f->n; i++)
        if (!strcmp(f->vars[i].name, name)) {
            jt_decref(f->vars[i].v);
            f->vars[i].v = v;
            return 0;
        }
    if (f->n == f->cap) {
        size_t nc = f->cap ? f->cap * 2 : 8;
        if (jt_charge(c, (nc - f->cap) * sizeof(jt_var))) { jt_decref(v); return -1; }
        jt_var *nv = realloc(f->vars, nc * sizeof *nv);
        if (!nv) { jt_decref(v); return jt_oom(c); }
        f->vars = nv;
        f->cap = nc;
    }
    f->vars[f->n].name = name;
    f->vars[f->n].v = v;
    f->n++;
    return 0;
}

static int lookup(jt_ctx *c, const char *name, jt_val *out) {
    for (jt_frame *f = c->frame; f; f = f->parent)
        for (size_t i = f->n; i-- > 0;)
            if (!strcmp(f->vars[i].name, name)) { *out = jt_ref(f->vars[i].v); return 0; }
    if (c->context) {
        jt_val *v = jt_dict_gets(c->context, name, strlen(name));
        if (v) { *out = jt_ref(*v); return 0; }
    }
    int r = jt_find_global(c, name, out);
    if (r < 0) return -1;
    if (r == 0) *out = jt_undef(name, 0);
    return 0;
}

/* -------------------------------------------------------------- arguments */

void jt_args_init(jt_args *a) {
    a->pos = a->small_pos;
    a->npos = 0;
    a->kwn = a->small_kwn;
    a->kwv = a->small_kwv;
    a->nkw = 0;
    a->hold = jt_none();
}

void jt_args_free(jt_args *a) {
    for (size_t i = 0; i < a->npos; i++) jt_decref(a->pos[i]);
    for (size_t i = 0; i < a->nkw; i++) jt_decref(a->kwv[i]);
    if (a->pos != a->small_pos) free(a->pos);
    if (a->kwv != a->small_kwv) { free(a->kwv); free((void *)a->kwn); }
    jt_decref(a->hold);
    jt_args_init(a);
}

int jt_args_push(jt_ctx *c, jt_args *a, jt_val v) {
    size_t cap = a->pos == a->small_pos ? 6 : 0;
    if (a->pos != a->small_pos) {
        /* heap arrays grow in powers of two from 8 */
        cap = 8;
        while (cap < a->npos) cap *= 2;
    }
    if (a->npos == cap) {
        if (a->npos >= 1000000) { jt_decref(v); return jt_err(c, "too many arguments"); }
        size_t nc = cap < 8 ? 8 : cap * 2;
        jt_val *np = a->pos == a->small_pos ? malloc(nc * sizeof *np) : realloc(a->pos, nc * sizeof *np);
        if (!np) { jt_decref(v); return jt_oom(c); }
        if (a->pos == a->small_pos) memcpy(np, a->small_pos, a->npos * sizeof *np);
        a->pos = np;
    }
    a->pos[a->npos++] = v;
    return 0;
}

int jt_args_push_kw(jt_ctx *c, jt_args *a, const char *k, jt_val v) {
    for (size_t i = 0; i < a->nkw; i++)
        if (!strcmp(a->kwn[i], k)) {
            jt_decref(v);
            return jt_err(c, "got multiple values for keyword argument '%s'", k);
        }
    size_t cap = 4;
    if (a->kwv != a->small_kwv) { cap = 8; while (cap < a->nkw) cap *= 2; }
    if (a->nkw == cap) {
        if (a->nkw >= 100000) { jt_decref(v); return jt_err(c, "too many keyword arguments"); }
        size_t nc = cap < 8 ? 8 : cap * 2;
        jt_val *nv;
        const char **nk;
        if (a->kwv == a->small_kwv) {
            nv = malloc(nc * sizeof *nv);
            nk = malloc(nc * sizeof *nk);
            if (!nv || !nk) { free(nv); free(nk); jt_decref(v); return jt_oom(c); }
            memcpy(nv, a->small_kwv, a->nkw * sizeof *nv);
            memcpy(nk, a->small_kwn, a->nkw * sizeof *nk);
        } else {
            nv = realloc(a->kwv, nc * sizeof *nv);
            if (!nv) { jt_decref(v); return jt_oom(c); }
            a->kwv = nv;
            nk = realloc((void *)a->kwn, nc * sizeof *nk);
            if (!nk) { jt_decref(v); return jt_oom(c); }
        }
        a->kwv = nv;
        a->kwn = nk;
    }
    a->kwn[a->nkw] = k;
    a->kwv[a->nkw] = v;
    a->nkw++;
    return 0;
}

jt_val *jt_arg(jt_args *a, size_t idx, const char *name) {
    if (idx < a->npos) return &a->pos[idx];
    if (name)
        for (size_t i = 0; i < a->nkw; i++)
            if (!strcmp(a->kwn[i], name)) return &a->kwv[i];
    return NULL;
}

int jt_args_check(jt_ctx *c, jt_args *a, const char *fname, size_t max_pos, const char *const *kwnames) {
    if (a->npos > max_pos)
        return jt_err(c, "%s() takes at most %zu positional argument%s (%zu given)", fname, max_pos,
                      max_pos == 1 ? "" : "s", a->npos);
    for (size_t i = 0; i < a->nkw; i++) {
        bool ok = false;
        size_t k = 0;
        for (const char *const *n = kwnames; n && *n; n++, k++)
            if (!strcmp(*n, a->kwn[i])) {
                ok = true;
                if (k < a->npos) return jt_err(c, "%s() got multiple values for argument '%s'", fname, *n);
            }
        if (!ok) return jt_err(c, "%s() got an unexpected keyword argument '%s'", fname, a->kwn[i]);
    }
    return 0;
}

static int eval_args(jt_ctx *c, const jt_argnodes *an, jt_args *a) {
    jt_args_init(a);
    if (!an) return 0;
    for (size_t i = 0; i < an->npos; i++) {
        jt_val v;
        if (jt_eval(c, an->pos[i], &v) || jt_args_push(c, a, v)) goto fail;
    }
    if (an->dyn_args) {
        jt_val v, lst;
        if (jt_eval(c, an->dyn_args, &v)) goto fail;
        int r = jt_iterate(c, v, &lst);
        jt_decref(v);
        if (r) goto fail;
        for (size_t i = 0; i < lst.u.l->n; i++)
            if (jt_args_push(c, a, jt_ref(lst.u.l->v[i]))) { jt_decref(lst); goto fail; }
        jt_decref(lst);
    }
    for (size_t i = 0; i < an->nkw; i++) {
        jt_val v;
        if (jt_eval(c, an->kwv[i], &v) || jt_args_push_kw(c, a, an->kwn[i], v)) goto fail;
    }
    if (an->dyn_kwargs) {
        jt_val v;
        if (jt_eval(c, an->dyn_kwargs, &v)) goto fail;
        if (v.t != JT_DICT) {
            jt_err(c, "argument after ** must be a mapping, not %s", jt_type_name(v));
            jt_decref(v);
            goto fail;
        }
        a->hold = v;   /* the keys' bytes must outlive the arguments */
        for (size_t i = 0; i < v.u.d->n; i++) {
            if (v.u.d->k[i].t != JT_STR) { jt_err(c, "keywords must be strings"); goto fail; }
            if (jt_args_push_kw(c, a, v.u.d->k[i].u.s->s, jt_ref(v.u.d->v[i]))) goto fail;
        }
    }
    return 0;
fail:
    jt_args_free(a);
    return -1;
}

/* ------------------------------------------------------------- iteration */

int jt_iterate(jt_ctx *c, jt_val v, jt_val *out) {
    switch (v.t) {
    case JT_LIST: case JT_TUPLE: *out = jt_ref(v); return 0;
    case JT_UNDEF: return jt_new_list(c, 0, false, out);
    case JT_DICT: {
        if (jt_new_list(c, v.u.d->n, false, out)) return -1;
        for (size_t i = 0; i < v.u.d->n; i++)
            if (jt_list_push(c, out->u.l, jt_ref(v.u.d->k[i]))) { jt_decref(*out); return -1; }
        return 0;
    }
    case JT_STR: {
        jt_str *s = v.u.s;
        if (jt_new_list(c, s->ncp, false, out)) return -1;
        size_t i = 0;
        while (i < s->len) {
            size_t st = i;
            jt_utf8_next(s->s, s->len, &i);
            jt_val ch;
            if (jt_new_str(c, s->s + st, i - st, &ch) || jt_list_push(c, out->u.l, ch)) { jt_decref(*out); return -1; }
        }
        return 0;
    }
    case JT_LOOP: *out = jt_ref((jt_val){JT_LIST, 0, 0, {.l = v.u.lp->items}}); return 0;
    default: return jt_err(c, "'%s' object is not iterable", jt_type_name(v));
    }
}

/* ---------------------------------------------------------------- access */

static const char *stable_name(jt_val key) {
    /* Only AST strings (immortal) outlive the value that names them. */
    return key.t == JT_STR && key.u.s->h.rc < 0 ? key.u.s->s : NULL;
}

int jt_getattr(jt_ctx *c, jt_val obj, const char *name, jt_val *out) { return jt_getattr_ex(c, obj, name, true, out); }

/* stable: name outlives any value (an AST name), so an Undefined result may
 * quote it in its error message; otherwise the message goes without it. */
int jt_getattr_ex(jt_ctx *c, jt_val obj, const char *name, bool stable, jt_val *out) {
    jt_val *v;
    switch (obj.t) {
    case JT_UNDEF: return jt_undef_error(c, obj);
    case JT_DICT: {
        int r = jt_find_method(c, obj, name, out);
        if (r) return r < 0 ? -1 : 0;
        v = jt_dict_gets(obj.u.d, name, strlen(name));
        break;
    }
    case JT_NS: v = jt_dict_gets(obj.u.ns->d, name, strlen(name)); break;
    case JT_TUPLE:
        if (obj.u.l->view == 4 && obj.u.l->n == 2) {   /* groupby's (grouper, list) */
            if (!strcmp(name, "grouper")) { *out = jt_ref(obj.u.l->v[0]); return 0; }
            if (!strcmp(name, "list")) { *out = jt_ref(obj.u.l->v[1]); return 0; }
        }
        /* fall through */
    case JT_STR: case JT_LIST: case JT_LOOP: {
        int r = jt_find_method(c, obj, name, out);
        if (r) return r < 0 ? -1 : 0;
        v = NULL;
        break;
    }
    default: v = NULL; break;
    }
    if (v) { *out = jt_ref(*v); return 0; }
    *out = jt_undef(stable ? name : NULL, stable ? 1 : 2);
    out->uo = obj.t;
    return 0;
}

static int index_of(jt_val key, int64_t n, int64_t *idx) {
    if (key.t != JT_INT && key.t != JT_BOOL) return 0;
    int64_t i = jt_as_int(key);
    if (i < 0) i += n;
    if (i < 0 || i >= n) return -1;
    *idx = i;
    return 1;
}

int jt_getitem(jt_ctx *c, jt_val obj, jt_val key, jt_val *out) {
    switch (obj.t) {
    case JT_UNDEF: return jt_undef_error(c, obj);
    case JT_DICT: {
        if (jt_hashable(key)) {
            jt_val *v = jt_dict_get(obj.u.d, key);
            if (v) { *out = jt_ref(*v); return 0; }
        }
        break;
    }
    case JT_LIST: case JT_TUPLE: {
        int64_t i;
        int r = index_of(key, (int64_t)obj.u.l->n, &i);
        if (r > 0) { *out = jt_ref(obj.u.l->v[i]); return 0; }
        if (r < 0) goto no_element;
        break;
    }
    case JT_STR: {
        int64_t i;
        int r = index_of(key, (int64_t)obj.u.s->ncp, &i);
        if (r > 0) {
            size_t a = jt_utf8_offset(obj.u.s, (size_t)i), b = a;
            jt_utf8_next(obj.u.s->s, obj.u.s->len, &b);
            return jt_new_str(c, obj.u.s->s + a, b - a, out);
        }
        if (r < 0) goto no_element;
        break;
    }
    default: break;
    }
    /* jinja2: a failed subscript with a string falls back to an attribute */
    if (key.t == JT_STR && obj.t != JT_DICT) return jt_getattr_ex(c, obj, key.u.s->s, stable_name(key) != NULL, out);
    if (key.t == JT_STR) {
        int r = jt_find_method(c, obj, key.u.s->s, out);
        if (r) return r < 0 ? -1 : 0;
    }
    *out = jt_undef(stable_name(key), stable_name(key) ? 1 : 2);
    out->uo = obj.t;
    return 0;
no_element:   /* "'list object' has no element 5" */
    *out = jt_undef(NULL, 3);
    out->u.i = jt_as_int(key);
    out->uo = obj.t;
    return 0;
}

/* Python slice index normalisation (PySlice_AdjustIndices). */
static int64_t slice_count(int64_t len, const jt_val *sv, const jt_val *ev, int64_t step, int64_t *start) {
    int64_t st, en;
    if (!sv) st = step < 0 ? len - 1 : 0;
    else {
        st = jt_as_int(*sv);
        if (st < 0) { st += len; if (st < 0) st = step < 0 ? -1 : 0; }
        else if (st >= len) st = step < 0 ? len - 1 : len;
    }
    if (!ev) en = step < 0 ? -1 : len;
    else {
        en = jt_as_int(*ev);
        if (en < 0) { en += len; if (en < 0) en = step < 0 ? -1 : 0; }
        else if (en >= len) en = step < 0 ? len - 1 : len;
    }
    *start = st;
    if (step > 0) return st < en ? (en - st - 1) / step + 1 : 0;
    return en < st ? (st - en - 1) / (-step) + 1 : 0;
}

/* jinja2 compiles x[a:b] to a plain Python subscript (not its forgiving
 * getitem), so slicing something that is not a sequence is an error. */
static int do_slice(jt_ctx *c, jt_val obj, const jt_val *s, const jt_val *e, const jt_val *st, jt_val *out) {
    if (obj.t == JT_UNDEF) return jt_undef_error(c, obj);
    if (obj.t == JT_DICT) return jt_err(c, "unhashable type: 'slice'");
    if (!jt_is_seq(obj) && obj.t != JT_STR) return jt_err(c, "'%s' object is not subscriptable", jt_type_name(obj));
    for (int k = 0; k < 3; k++) {
        const jt_val *x = k == 0 ? s : k == 1 ? e : st;
        if (x && x->t != JT_INT && x->t != JT_BOOL)
            return jt_err(c, "slice indices must be integers or None or have an __index__ method");
    }
    int64_t step = st ? jt_as_int(*st) : 1;
    if (step == 0) return jt_err(c, "slice step cannot be zero");
    if (step == INT64_MIN) step = -INT64_MAX;
    if (jt_is_seq(obj)) {
        jt_list *l = obj.u.l;
        int64_t start, n = slice_count((int64_t)l->n, s, e, step, &start);
        if (start == 0 && step == 1 && n == (int64_t)l->n) { *out = jt_ref(obj); return 0; }
        if (jt_new_list(c, (size_t)n, obj.t == JT_TUPLE, out)) return -1;
        for (int64_t i = 0; i < n; i++)
            if (jt_list_push(c, out->u.l, jt_ref(l->v[start + i * step]))) { jt_decref(*out); return -1; }
        return 0;
    }
    if (obj.t == JT_STR) {
        jt_str *str = obj.u.s;
        int64_t start, n = slice_count((int64_t)str->ncp, s, e, step, &start);
        if (str->ncp == str->len && step == 1) return jt_new_str(c, str->s + start, (size_t)n, out);
        /* code point offsets (ncp + 1 entries) */
        size_t *off = NULL;
        if (str->ncp != str->len) {
            if (jt_charge(c, (str->ncp + 1) * sizeof(size_t))) return -1;
            off = malloc((str->ncp + 1) * sizeof *off);
            if (!off) return jt_oom(c);
            size_t i = 0, k = 0;
            while (i < str->len) { off[k++] = i; jt_utf8_next(str->s, str->len, &i); }
            off[k] = str->len;
        }
        jt_buf b = {0};
        int r = 0;
        for (int64_t i = 0; i < n && !r; i++) {
            int64_t j = start + i * step;
            size_t a = off ? off[j] : (size_t)j, z = off ? off[j + 1] : (size_t)j + 1;
            r = jt_buf_put(c, &b, str->s + a, z - a);
        }
        free(off);
        if (r) { jt_buf_free(&b); return -1; }
        return jt_buf_take(c, &b, out);
    }
    *out = jt_undef(NULL, 2);
    return 0;
}

/* ------------------------------------------------------------- operators */

static int type_error2(jt_ctx *c, const char *op, jt_val a, jt_val b) {
    return jt_err(c, "unsupported operand type(s) for %s: '%s' and '%s'", op, jt_type_name(a), jt_type_name(b));
}

static int repeat(jt_ctx *c, jt_val seq, int64_t times, jt_val *out) {
    if (times < 0) times = 0;
    if (seq.t == JT_STR) {
        size_t len = seq.u.s->len;
        if (len && (uint64_t)times > c->max_output / len)
            return jt_err(c, "string exceeds the output limit of %zu bytes", c->max_output);
        jt_str *s = jt_str_alloc(c, len * (size_t)times);
        if (!s) return -1;
        for (int64_t i = 0; i < times; i++) memcpy(s->s + (size_t)i * len, seq.u.s->s, len);
        jt_str_seal(s);
        *out = jt_strv(s);
        return 0;
    }
    jt_list *l = seq.u.l;
    if (l->n && (uint64_t)times > (c->max_alloc / sizeof(jt_val)) / l->n)
        return jt_err(c, "sequence repetition too large");
    if (jt_new_list(c, l->n * (size_t)times, seq.t == JT_TUPLE, out)) return -1;
    for (int64_t i = 0; i < times; i++)
        for (size_t k = 0; k < l->n; k++)
            if (jt_list_push(c, out->u.l, jt_ref(l->v[k]))) { jt_decref(*out); return -1; }
    return 0;
}

static int64_t py_floordiv(int64_t a, int64_t b) {
    int64_t q = a / b;
    if ((a % b != 0) && ((a < 0) != (b < 0))) q--;
    return q;
}

static int64_t py_mod(int64_t a, int64_t b) {
    int64_t m = a % b;
    if (m != 0 && ((m < 0) != (b < 0))) m += b;
    return m;
}

static int binop(jt_ctx *c, int op, jt_val a, jt_val b, jt_val *out) {
    static const char *names[] = {[JT_OP_ADD] = "+", [JT_OP_SUB] = "-", [JT_OP_MUL] = "*", [JT_OP_DIV] = "/",
                                  [JT_OP_FLOORDIV] = "//", [JT_OP_MOD] = "%", [JT_OP_POW] = "**"};
    const char *on = names[op];
    if (a.t == JT_UNDEF) return jt_undef_error(c, a);
    if (b.t == JT_UNDEF && !(op == JT_OP_MOD && a.t == JT_STR)) return jt_undef_error(c, b);
    bool nums = jt_is_num(a) && jt_is_num(b);
    bool ints = nums && a.t != JT_FLOAT && b.t != JT_FLOAT;
    switch (op) {
    case JT_OP_ADD:
        if (ints) {
            int64_t r;
            if (__builtin_add_overflow(jt_as_int(a), jt_as_int(b), &r)) return jt_err(c, "integer overflow");
            *out = jt_int(r);
            return 0;
        }
        if (nums) { *out = jt_float(jt_as_float(a) + jt_as_float(b)); return 0; }
        if (a.t == JT_STR && b.t == JT_STR) {
            if (!b.u.s->len) { *out = jt_ref(a); return 0; }
            if (!a.u.s->len) { *out = jt_ref(b); return 0; }
            if (b.u.s->len > c->max_output || a.u.s->len > c->max_output - b.u.s->len)
                return jt_err(c, "string exceeds the output limit of %zu bytes", c->max_output);
            jt_str *s = jt_str_alloc(c, a.u.s->len + b.u.s->len);
            if (!s) return -1;
            memcpy(s->s, a.u.s->s, a.u.s->len);
            memcpy(s->s + a.u.s->len, b.u.s->s, b.u.s->len);
            s->s[s->len] = 0;
            s->ncp = a.u.s->ncp + b.u.s->ncp;
            *out = jt_strv(s);
            return 0;
        }
        if (jt_is_seq(a) && a.t == b.t) {
            if (jt_new_list(c, a.u.l->n + b.u.l->n, a.t == JT_TUPLE, out)) return -1;
            for (size_t i = 0; i < a.u.l->n; i++)
                if (jt_list_push(c, out->u.l, jt_ref(a.u.l->v[i]))) { jt_decref(*out); return -1; }
            for (size_t i = 0; i < b.u.l->n; i++)
                if (jt_list_push(c, out->u.l, jt_ref(b.u.l->v[i]))) { jt_decref(*out); return -1; }
            return 0;
        }
        if (a.t == JT_STR || a.t == JT_LIST || a.t == JT_TUPLE)
            return jt_err(c, "can only concatenate %s (not \"%s\") to %s", jt_type_name(a), jt_type_name(b),
                          jt_type_name(a));
        return type_error2(c, on, a, b);
    case JT_OP_SUB:
        if (ints) {
            int64_t r;
            if (__builtin_sub_overflow(jt_as_int(a), jt_as_int(b), &r)) return jt_err(c, "integer overflow");
            *out = jt_int(r);
            return 0;
        }
        if (nums) { *out = jt_float(jt_as_float(a) - jt_as_float(b)); return 0; }
        return type_error2(c, on, a, b);
    case JT_OP_MUL:
        if (ints) {
            int64_t r;
            if (__builtin_mul_overflow(jt_as_int(a), jt_as_int(b), &r)) return jt_err(c, "integer overflow");
            *out = jt_int(r);
            return 0;
        }
        if (nums) { *out = jt_float(jt_as_float(a) * jt_as_float(b)); return 0; }
        if ((a.t == JT_STR || jt_is_seq(a)) && (b.t == JT_INT || b.t == JT_BOOL)) return repeat(c, a, jt_as_int(b), out);
        if ((b.t == JT_STR || jt_is_seq(b)) && (a.t == JT_INT || a.t == JT_BOOL)) return repeat(c, b, jt_as_int(a), out);
        return type_error2(c, on, a, b);
    case JT_OP_DIV:
        if (nums) {
            double y = jt_as_float(b);
            if (y == 0) return jt_err(c, "division by zero");
            *out = jt_float(jt_as_float(a) / y);
            return 0;
        }
        return type_error2(c, on, a, b);
    case JT_OP_FLOORDIV:
    case JT_OP_MOD:
        if (ints) {
            int64_t x = jt_as_int(a), y = jt_as_int(b);
            if (y == 0) return jt_err(c, "integer division or modulo by zero");
            if (x == INT64_MIN && y == -1) {
                if (op == JT_OP_MOD) { *out = jt_int(0); return 0; }
                return jt_err(c, "integer overflow");
            }
            *out = jt_int(op == JT_OP_FLOORDIV ? py_floordiv(x, y) : py_mod(x, y));
            return 0;
        }
        if (nums) {
            double x = jt_as_float(a), y = jt_as_float(b);
            if (y == 0) return jt_err(c, op == JT_OP_MOD ? "float modulo" : "float floor division by zero");
            /* CPython's float divmod */
            double mod = fmod(x, y), div = (x - mod) / y, fl;
            if (mod != 0) {
                if ((y < 0) != (mod < 0)) { mod += y; div -= 1.0; }
            } else {
                mod = copysign(0.0, y);
            }
            if (div != 0) {
                fl = floor(div);
                if (div - fl > 0.5) fl += 1.0;
            } else {
                fl = copysign(0.0, x / y);
            }
            *out = jt_float(op == JT_OP_MOD ? mod : fl);
            return 0;
        }
        if (op == JT_OP_MOD && a.t == JT_STR) return jt_str_percent(c, a, b, out);
        return type_error2(c, on, a, b);
    case JT_OP_POW:
        if (ints) {
            int64_t base = jt_as_int(a), e = jt_as_int(b);
            if (e < 0) {
                if (base == 0) return jt_err(c, "0.0 cannot be raised to a negative power");
                *out = jt_float(pow((double)base, (double)e));
                return 0;
            }
            int64_t r = 1;
            while (e > 0) {
                if (e & 1) { if (__builtin_mul_overflow(r, base, &r)) return jt_err(c, "integer overflow"); }
                e >>= 1;
                if (e && __builtin_mul_overflow(base, base, &base)) return jt_err(c, "integer overflow");
            }
            *out = jt_int(r);
            return 0;
        }
        if (nums) {
            double x = jt_as_float(a), y = jt_as_float(b);
            if (x == 0 && y < 0) return jt_err(c, "0.0 cannot be raised to a negative power");
            if (x < 0 && y != floor(y)) return jt_err(c, "complex results are not supported");
            *out = jt_float(pow(x, y));
            return 0;
        }
        return type_error2(c, "** or pow()", a, b);
    default: return jt_err(c, "internal error: unknown operator");
    }
}

static int contains(jt_ctx *c, jt_val needle, jt_val hay, bool *res) {
    switch (hay.t) {
    case JT_STR:
        if (needle.t != JT_STR)
            return jt_err(c, "'in <string>' requires string as left operand, not %s", jt_type_name(needle));
        *res = needle.u.s->len == 0 ||
               memmem(hay.u.s->s, hay.u.s->len, needle.u.s->s, needle.u.s->len) != NULL;
        return 0;
    case JT_LIST: case JT_TUPLE:
        *res = false;
        for (size_t i = 0; i < hay.u.l->n && !*res; i++) *res = jt_equal(needle, hay.u.l->v[i]);
        return 0;
    case JT_DICT:
        if (needle.t == JT_UNDEF) { *res = false; return 0; }   /* Undefined is hashable, never a key */
        if (!jt_hashable(needle)) return jt_err(c, "unhashable type: '%s'", jt_type_name(needle));
        *res = jt_dict_get(hay.u.d, needle) != NULL;
        return 0;
    case JT_UNDEF: *res = false; return 0;
    default: return jt_err(c, "argument of type '%s' is not iterable", jt_type_name(hay));
    }
}

static int compare_op(jt_ctx *c, int op, jt_val a, jt_val b, bool *res) {
    int r;
    switch (op) {
    case JT_OP_EQ: *res = jt_equal(a, b); return 0;
    case JT_OP_NE: *res = !jt_equal(a, b); return 0;
    case JT_OP_IN: return contains(c, a, b, res);
    case JT_OP_NOTIN: if (contains(c, a, b, res)) return -1; *res = !*res; return 0;
    case JT_OP_LT: if (jt_compare(c, a, b, "<", &r)) return -1; *res = r == -1; return 0;
    case JT_OP_LTEQ: if (jt_compare(c, a, b, "<=", &r)) return -1; *res = r == -1 || r == 0; return 0;
    case JT_OP_GT: if (jt_compare(c, a, b, ">", &r)) return -1; *res = r == 1; return 0;
    case JT_OP_GTEQ: if (jt_compare(c, a, b, ">=", &r)) return -1; *res = r == 1 || r == 0; return 0;
    default: return jt_err(c, "internal error: unknown comparison");
    }
}

/* ----------------------------------------------------------------- calls */

static int capture_body(jt_ctx *c, const jt_node *body, jt_val *out) {
    jt_buf buf = {0}, *saved = c->out;
    c->out = &buf;
    int r = exec_body(c, body);
    c->out = saved;
    if (r < 0) { jt_buf_free(&buf); return -1; }
    return jt_buf_take(c, &buf, out);
}

/* Binds macro (or caller) parameters in the current frame. Extra
 * positional arguments go to 'varargs', unknown keywords to 'kwargs'. */
static int bind_params(jt_ctx *c, const jt_node *m, jt_args *a, bool is_macro) {
    size_t np = m->n;
    for (size_t i = 0; i < np; i++) {
        const char *pname = m->list[i]->name;
        jt_val v;
        jt_val *given = i < a->npos ? &a->pos[i] : NULL;
        if (!given)
            for (size_t k = 0; k < a->nkw; k++)
                if (!strcmp(a->kwn[k], pname)) { given = &a->kwv[k]; break; }
        if (given) v = jt_ref(*given);
        else if (m->list2[i]) { if (jt_eval(c, m->list2[i], &v)) return -1; }
        else v = jt_undef(pname, 0);
        if (frame_set(c, c->frame, pname, v)) return -1;
    }
    if (!is_macro) return 0;
    jt_val varargs, kwargs;
    size_t extra = a->npos > np ? a->npos - np : 0;
    if (jt_new_list(c, extra, true, &varargs)) return -1;
    for (size_t i = np; i < a->npos; i++)
        if (jt_list_push(c, varargs.u.l, jt_ref(a->pos[i]))) { jt_decref(varargs); return -1; }
    if (frame_set(c, c->frame, "varargs", varargs)) return -1;
    if (jt_new_dict(c, &kwargs)) return -1;
    for (size_t k = 0; k < a->nkw; k++) {
        bool is_param = !strcmp(a->kwn[k], "caller");
        for (size_t i = 0; i < np && !is_param; i++) is_param = !strcmp(a->kwn[k], m->list[i]->name);
        if (is_param) continue;
        jt_val key;
        if (jt_new_cstr(c, a->kwn[k], &key) || jt_dict_set(c, kwargs.u.d, key, jt_ref(a->kwv[k]))) {
            jt_decref(kwargs);
            return -1;
        }
    }
    if (frame_set(c, c->frame, "kwargs", kwargs)) return -1;
    jt_val *caller = jt_arg(a, (size_t)-1, "caller");
    if (caller && frame_set(c, c->frame, "caller", jt_ref(*caller))) return -1;
    return 0;
}

static int call_macro(jt_ctx *c, jt_func *f, jt_args *a, jt_val *out) {
    const jt_node *m = f->node;
    if (enter(c, m)) return -1;
    /* a macro sees the scope it was defined in (a caller: the call block's),
     * not its caller's */
    jt_frame *saved = c->frame;
    jt_frame *fr = frame_new(c, f->frame ? f->frame : c->root);
    int r = -1;
    if (fr) {
        c->frame = fr;
        r = bind_params(c, m, a, f->kind == JT_FN_MACRO);
        if (!r) r = capture_body(c, m->d, out);
        c->frame = saved;
        frame_clear(fr);
        jt_frame_release(fr);
    }
    c->depth--;
    return r;
}

int jt_call(jt_ctx *c, jt_val fn, jt_args *a, jt_val *out) {
    if (fn.t == JT_UNDEF) return jt_undef_error(c, fn);
    if (fn.t != JT_FUNC) return jt_err(c, "'%s' object is not callable", jt_type_name(fn));
    jt_func *f = fn.u.fn;
    switch (f->kind) {
    case JT_FN_NATIVE: return f->fn(c, f->self, a, out);
    case JT_FN_MACRO: case JT_FN_CALLER: return call_macro(c, f, a, out);
    default:
        return jt_err(c, "access to attribute '%s' of '%s' object is unsafe", f->name ? f->name : "?",
                      f->self ? jt_type_name(*f->self) : "object");
    }
}

static int eval_call(jt_ctx *c, const jt_node *n, jt_val *extra_caller, jt_val *out) {
    jt_args a;
    int r;
    if (n->a->kind == JT_N_GETATTR) {
        /* obj.method(...) without building a bound method first */
        jt_val obj;
        if (jt_eval(c, n->a->a, &obj)) return -1;
        if (eval_args(c, n->args, &a)) { jt_decref(obj); return -1; }
        if (extra_caller && jt_args_push_kw(c, &a, "caller", jt_ref(*extra_caller))) {
            jt_args_free(&a);
            jt_decref(obj);
            return -1;
        }
        r = obj.t == JT_UNDEF ? jt_undef_error(c, obj) : jt_call_method(c, obj, n->a->name, &a, out);
        if (r == 0) {
            jt_val fn;
            r = jt_getattr(c, obj, n->a->name, &fn);
            if (!r) {
                r = jt_call(c, fn, &a, out);
                jt_decref(fn);
            }
        } else if (r == 1) {
            r = 0;
        }
        jt_args_free(&a);
        jt_decref(obj);
        return r;
    }
    jt_val fn;
    if (jt_eval(c, n->a, &fn)) return -1;
    if (eval_args(c, n->args, &a)) { jt_decref(fn); return -1; }
    if (extra_caller && jt_args_push_kw(c, &a, "caller", jt_ref(*extra_caller))) {
        jt_args_free(&a);
        jt_decref(fn);
        return -1;
    }
    r = jt_call(c, fn, &a, out);
    jt_args_free(&a);
    jt_decref(fn);
    return r;
}

/* A filter chain; the innermost filter of a block filter takes *input.
 * x|f|g|... is a tree as deep as the chain is long (the parser builds it
 * with a loop, so no parse depth limit applies): each link is one level of
 * recursion here and is counted like any other. */
static int eval_filter(jt_ctx *c, const jt_node *n, const jt_val *input, jt_val *out) {
    jt_val in;
    if (!n->a) in = input ? jt_ref(*input) : jt_undef(NULL, 2);
    else if (n->a->kind == JT_N_FILTER) {
        if (enter(c, n->a)) return -1;
        int r = eval_filter(c, n->a, input, &in);
        c->depth--;
        if (r) return -1;
    } else if (jt_eval(c, n->a, &in)) return -1;
    jt_args a;
    if (eval_args(c, n->args, &a)) { jt_decref(in); return -1; }
    c->line = n->line;
    int r = n->filter(c, &in, &a, out);
    jt_args_free(&a);
    jt_decref(in);
    return r;
}

/* ------------------------------------------------------------ expressions */

static int eval_inner(jt_ctx *c, const jt_node *n, jt_val *out) {
    switch (n->kind) {
    case JT_N_CONST: *out = jt_ref(n->cval); return 0;
    case JT_N_NAME: return lookup(c, n->name, out);
    case JT_N_TUPLE:
    case JT_N_LIST: {
        if (jt_new_list(c, n->n, n->kind == JT_N_TUPLE, out)) return -1;
        for (size_t i = 0; i < n->n; i++) {
            jt_val v;
            if (jt_eval(c, n->list[i], &v) || jt_list_push(c, out->u.l, v)) { jt_decref(*out); return -1; }
        }
        return 0;
    }
    case JT_N_DICT: {
        if (jt_new_dict(c, out)) return -1;
        for (size_t i = 0; i < n->n; i++) {
            jt_val k, v;
            if (jt_eval(c, n->list[i], &k)) { jt_decref(*out); return -1; }
            if (jt_eval(c, n->list2[i], &v)) { jt_decref(k); jt_decref(*out); return -1; }
            if (jt_dict_set(c, out->u.d, k, v)) { jt_decref(*out); return -1; }
        }
        return 0;
    }
    case JT_N_GETATTR: {
        jt_val obj;
        if (jt_eval(c, n->a, &obj)) return -1;
        int r = jt_getattr(c, obj, n->name, out);
        jt_decref(obj);
        return r;
    }
    case JT_N_GETITEM: {
        jt_val obj;
        if (jt_eval(c, n->a, &obj)) return -1;
        int r;
        if (n->b->kind == JT_N_SLICE) {
            const jt_node *s = n->b;
            jt_val v[3];
            int k = 0;
            r = 0;
            for (; k < 3 && !r; k++) {
                const jt_node *x = k == 0 ? s->a : k == 1 ? s->b : s->c;
                if (!x) v[k] = jt_none();
                else r = jt_eval(c, x, &v[k]);
            }
            if (r) k--;
            if (!r)
                r = do_slice(c, obj, v[0].t == JT_NONE ? NULL : &v[0], v[1].t == JT_NONE ? NULL : &v[1],
                             v[2].t == JT_NONE ? NULL : &v[2], out);
            for (int i = 0; i < k; i++) jt_decref(v[i]);
        } else {
            jt_val key;
            r = jt_eval(c, n->b, &key);
            if (!r) {
                r = jt_getitem(c, obj, key, out);
                jt_decref(key);
            }
        }
        jt_decref(obj);
        return r;
    }
    case JT_N_CALL: return eval_call(c, n, NULL, out);
    case JT_N_FILTER: return eval_filter(c, n, NULL, out);
    case JT_N_TEST: {
        jt_val in;
        if (jt_eval(c, n->a, &in)) return -1;
        jt_args a;
        if (eval_args(c, n->args, &a)) { jt_decref(in); return -1; }
        bool res = false;
        c->line = n->line;
        int r = n->test(c, &in, &a, &res);
        jt_args_free(&a);
        jt_decref(in);
        if (!r) *out = jt_bool(res);
        return r;
    }
    case JT_N_BINOP: {
        jt_val a, b;
        if (jt_eval(c, n->a, &a)) return -1;
        if (jt_eval(c, n->b, &b)) { jt_decref(a); return -1; }
        c->line = n->line;
        int r = binop(c, n->op, a, b, out);
        jt_decref(a);
        jt_decref(b);
        return r;
    }
    case JT_N_NEG:
    case JT_N_POS: {
        jt_val a;
        if (jt_eval(c, n->a, &a)) return -1;
        int r = 0;
        if (a.t == JT_UNDEF) r = jt_undef_error(c, a);
        else if (a.t == JT_INT || a.t == JT_BOOL) {
            int64_t x = jt_as_int(a);
            if (n->kind == JT_N_NEG && x == INT64_MIN) r = jt_err(c, "integer overflow");
            else *out = jt_int(n->kind == JT_N_NEG ? -x : x);
        } else if (a.t == JT_FLOAT) *out = jt_float(n->kind == JT_N_NEG ? -a.u.f : a.u.f);
        else r = jt_err(c, "bad operand type for unary %c: '%s'", n->kind == JT_N_NEG ? '-' : '+', jt_type_name(a));
        jt_decref(a);
        return r;
    }
    case JT_N_NOT: {
        jt_val a;
        if (jt_eval(c, n->a, &a)) return -1;
        *out = jt_bool(!jt_truthy(a));
        jt_decref(a);
        return 0;
    }
    case JT_N_AND:
    case JT_N_OR: {
        jt_val a;
        if (jt_eval(c, n->a, &a)) return -1;
        bool t = jt_truthy(a);
        if ((n->kind == JT_N_AND) != t) { *out = a; return 0; }
        jt_decref(a);
        return jt_eval(c, n->b, out);
    }
    case JT_N_COMPARE: {
        jt_val left;
        if (jt_eval(c, n->a, &left)) return -1;
        bool res = true;
        for (size_t i = 0; i < n->n && res; i++) {
            jt_val right;
            if (jt_eval(c, n->list[i], &right)) { jt_decref(left); return -1; }
            c->line = n->line;
            if (compare_op(c, n->ops[i], left, right, &res)) { jt_decref(left); jt_decref(right); return -1; }
            jt_decref(left);
            left = right;
        }
        jt_decref(left);
        *out = jt_bool(res);
        return 0;
    }
    case JT_N_CONCAT: {
        jt_buf b = {0};
        for (size_t i = 0; i < n->n; i++) {
            jt_val v;
            if (jt_eval(c, n->list[i], &v)) { jt_buf_free(&b); return -1; }
            int r = jt_put_str(c, &b, v);
            jt_decref(v);
            if (r) { jt_buf_free(&b); return -1; }
        }
        return jt_buf_take(c, &b, out);
    }
    case JT_N_CONDEXPR: {
        jt_val t;
        if (jt_eval(c, n->a, &t)) return -1;
        bool yes = jt_truthy(t);
        jt_decref(t);
        if (yes) return jt_eval(c, n->b, out);
        if (n->c) return jt_eval(c, n->c, out);
        *out = jt_undef(NULL, 2);
        return 0;
    }
    case JT_N_NSREF:
        return jt_err(c, "namespace attribute reference used as a value");
    default: return jt_err(c, "internal error: unexpected node %d in an expression", n->kind);
    }
}

int jt_eval(jt_ctx *c, const jt_node *n, jt_val *out) {
    if (enter(c, n)) return -1;
    int r = eval_inner(c, n, out);
    c->depth--;
    return r;
}

/* ------------------------------------------------------------- statements */

/* Assigns value (borrowed) to a target in frame f. */
static int assign(jt_ctx *c, const jt_node *t, jt_val v, jt_frame *f) {
    if (t->kind == JT_N_NAME) return frame_set(c, f, t->name, jt_ref(v));
    if (t->kind == JT_N_NSREF) {
        jt_val ns;
        if (lookup(c, t->name, &ns)) return -1;
        if (ns.t != JT_NS) {
            jt_decref(ns);
            return jt_err(c, "cannot assign attribute on non-namespace object");
        }
        jt_val key;
        if (jt_new_cstr(c, t->name2, &key)) return -1;
        return jt_dict_set(c, ns.u.ns->d, key, jt_ref(v));
    }
    /* tuple unpacking */
    jt_val lst;
    if (jt_iterate(c, v, &lst)) return -1;
    size_t n = lst.u.l->n;
    int r = 0;
    if (n < t->n) r = jt_err(c, "not enough values to unpack (expected %zu, got %zu)", t->n, n);
    else if (n > t->n) r = jt_err(c, "too many values to unpack (expected %zu)", t->n);
    for (size_t i = 0; i < t->n && !r; i++) r = assign(c, t->list[i], lst.u.l->v[i], f);
    jt_decref(lst);
    return r;
}

static int count_iteration(jt_ctx *c) {
    if (++c->iterations > c->max_iterations)
        return jt_err(c, "loop iteration limit (%llu) exceeded", (unsigned long long)c->max_iterations);
    return 0;
}

static int exec_for(jt_ctx *c, const jt_node *n) {
    jt_val seq, items;
    if (jt_eval(c, n->b, &seq)) return -1;
    int r = jt_iterate(c, seq, &items);
    jt_decref(seq);
    if (r) return -1;
    if (frame_push(c)) { jt_decref(items); return -1; }
    jt_frame *f = c->frame;
    if (n->c) {
        /* "for x in xs if cond": filter first, so loop.length/last count
         * only the items that pass */
        jt_val kept;
        if (jt_new_list(c, 0, false, &kept)) goto fail;
        for (size_t i = 0; i < items.u.l->n; i++) {
            jt_val cond;
            frame_clear(f);
            if (count_iteration(c) || assign(c, n->a, items.u.l->v[i], f) || jt_eval(c, n->c, &cond)) {
                jt_decref(kept);
                goto fail;
            }
            bool keep = jt_truthy(cond);
            jt_decref(cond);
            if (keep && jt_list_push(c, kept.u.l, jt_ref(items.u.l->v[i]))) { jt_decref(kept); goto fail; }
        }
        jt_decref(items);
        items = kept;
    }
    size_t count = items.u.l->n;
    jt_val loopv = {JT_LOOP, 0, 0, {0}};
    if (jt_charge(c, sizeof(jt_loop))) goto fail;
    jt_loop *lp = calloc(1, sizeof *lp);
    if (!lp) { jt_oom(c); goto fail; }
    lp->h.rc = 1;
    lp->items = items.u.l;
    jt_incref(items);
    loopv.u.lp = lp;
    r = 0;
    for (size_t i = 0; i < count; i++) {
        frame_clear(f);
        lp->i = i;
        if (count_iteration(c) || frame_set(c, f, "loop", jt_ref(loopv)) || assign(c, n->a, items.u.l->v[i], f)) {
            r = -1;
            break;
        }
        r = exec_body(c, n->d);
        if (r == EXEC_BREAK) { r = 0; break; }
        if (r == EXEC_CONTINUE) r = 0;
        if (r) break;
    }
    frame_pop(c);
    jt_decref(loopv);
    jt_decref(items);
    if (r) return -1;
    if (count == 0 && n->e) return exec_body(c, n->e);
    return 0;
fail:
    frame_pop(c);
    jt_decref(items);
    return -1;
}

static int exec_stmt(jt_ctx *c, const jt_node *n) {
    switch (n->kind) {
    case JT_N_DATA: return jt_buf_put(c, c->out, n->text, n->text_len);
    case JT_N_OUTPUT:
        for (size_t i = 0; i < n->n; i++) {
            jt_val v;
            if (jt_eval(c, n->list[i], &v)) return -1;
            int r = jt_put_str(c, c->out, v);
            jt_decref(v);
            if (r) return -1;
        }
        return 0;
    case JT_N_IF:
        for (size_t i = 0; i < n->n; i++) {
            jt_val t;
            if (jt_eval(c, n->list[i], &t)) return -1;
            bool yes = jt_truthy(t);
            jt_decref(t);
            if (yes) return exec_body(c, n->list2[i]);
        }
        return n->e ? exec_body(c, n->e) : 0;
    case JT_N_FOR: return exec_for(c, n);
    case JT_N_SET: {
        jt_val v;
        if (jt_eval(c, n->b, &v)) return -1;
        int r = assign(c, n->a, v, c->frame);
        jt_decref(v);
        return r;
    }
    case JT_N_SETBLOCK:
    case JT_N_FILTERBLOCK: {
        /* the body has its own scope, as in jinja2 */
        jt_val s;
        if (frame_push(c)) return -1;
        int rb = capture_body(c, n->d, &s);
        frame_pop(c);
        if (rb) return -1;
        if (n->c) {
            jt_val f;
            int r = eval_filter(c, n->c, &s, &f);
            jt_decref(s);
            if (r) return -1;
            s = f;
        }
        int r = n->kind == JT_N_SETBLOCK ? assign(c, n->a, s, c->frame) : jt_put_str(c, c->out, s);
        jt_decref(s);
        return r;
    }
    case JT_N_MACRO: {
        jt_val f;
        if (jt_new_func(c, JT_FN_MACRO, n->name, &f)) return -1;
        f.u.fn->node = n;
        f.u.fn->frame = c->frame;   /* closure; the cycle is broken when the scope is left */
        c->frame->rc++;
        return frame_set(c, c->frame, n->name, f);
    }
    case JT_N_CALLBLOCK: {
        jt_val caller, res;
        if (jt_new_func(c, JT_FN_CALLER, "caller", &caller)) return -1;
        caller.u.fn->node = n;
        caller.u.fn->frame = c->frame;
        c->frame->rc++;
        int r = eval_call(c, n->a, &caller, &res);
        jt_decref(caller);
        if (r) return -1;
        r = jt_put_str(c, c->out, res);
        jt_decref(res);
        return r;
    }
    case JT_N_WITH: {
        /* values are evaluated in the enclosing scope, then bound */
        jt_val *vals = NULL;
        if (n->n) {
            vals = calloc(n->n, sizeof *vals);
            if (!vals) return jt_oom(c);
        }
        size_t k = 0;
        int r = 0;
        for (; k < n->n && !r; k++) r = jt_eval(c, n->list2[k], &vals[k]);
        if (r) k--;
        if (!r && !(r = frame_push(c))) {
            for (size_t i = 0; i < n->n && !r; i++) r = assign(c, n->list[i], vals[i], c->frame);
            if (!r) r = exec_body(c, n->d);
            frame_pop(c);
        }
        for (size_t i = 0; i < k; i++) jt_decref(vals[i]);
        free(vals);
        return r;
    }
    case JT_N_BREAK: return EXEC_BREAK;
    case JT_N_CONTINUE: return EXEC_CONTINUE;
    case JT_N_BODY: return exec_body(c, n);
    default: return jt_err(c, "internal error: unexpected statement node %d", n->kind);
    }
}

static int exec_body(jt_ctx *c, const jt_node *body) {
    /* depth and steps are counted per statement, not per body */
    int r = 0;
    for (size_t i = 0; i < body->n; i++) {
        const jt_node *s = body->list[i];
        c->line = s->line;
        if (s->kind == JT_N_DATA) {   /* the common case, without the bookkeeping */
            if (jt_buf_put(c, c->out, s->text, s->text_len)) { r = -1; break; }
            continue;
        }
        if (enter(c, s)) { r = -1; break; }
        r = exec_stmt(c, s);
        c->depth--;
        if (r) break;
    }
    return r;
}

int jt_render_body(jt_ctx *c, const jt_node *body) {
    int r = exec_body(c, body);
    return r < 0 ? -1 : 0;
}
