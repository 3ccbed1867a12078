/* Tokens -> AST, a recursive-descent copy of jinja2's parser (3.1), so that
 * precedence matches exactly:
 *   condexpr (a if c else b) < or < and < not < comparisons (== != < <= > >=
 *   in, not in; chained) < + - < ~ < * / // % < ** < unary - + < primary with
 *   postfix (.attr [item] (call)) and then filters / tests (| f, is t).
 * Note the jinja2 quirks this keeps: '~' binds tighter than '+', '**' is
 * left-associative, '-x|f' is '(-x)|f', and 'not x is y' is 'not (x is y)'.
 *
 * Node fields by kind (see jt.h):
 *   BODY list/n            DATA text/text_len      OUTPUT list/n (expressions)
 *   IF list=tests list2=bodies n, e=else           FOR a=target b=iter c=if d=body e=else
 *   SET a=target b=value   SETBLOCK a=target c=filter chain d=body
 *   MACRO name, list=params list2=defaults n, d=body
 *   CALLBLOCK a=call, list/list2/n=caller params, d=body
 *   FILTERBLOCK c=filter chain d=body             WITH list=targets list2=values n d=body
 *   CONST cval  NAME name  NSREF name.name2  TUPLE/LIST list/n  DICT list=keys list2=values
 *   GETATTR a.name  GETITEM a[b]  SLICE a:b:c  CALL a(args)  FILTER a|name(args)
 *   TEST a is name(args)  BINOP a op b  NEG/POS/NOT a  AND/OR a b
 *   COMPARE a (ops[i] list[i])...  CONCAT list  CONDEXPR b if a else c
 * A filter chain whose innermost FILTER has a == NULL takes its input from
 * the enclosing statement (filter blocks, {% set x | f %}). */
#include "chat/jt.h"
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

typedef struct parser {
    const jt_token *t;
    size_t n, i;
    jt_arena *arena;
    jt_syntax_error *err;
    bool failed;
    int depth;
    int loop_depth;
    const char *stack_base;   /* JT_STACK_HERE() of jt_parse */
    size_t max_stack;         /* JT_MAX_PARSE_STACK, or less on a small thread stack */
} parser;

typedef struct nvec {
    jt_node **v;
    size_t n, cap;
} nvec;

typedef struct svec {
    const char **v;
    size_t n, cap;
} svec;

static const jt_token *cur(parser *P) { return &P->t[P->i]; }
static const jt_token *look(parser *P) { return P->i + 1 < P->n ? &P->t[P->i + 1] : &P->t[P->n - 1]; }
static void adv(parser *P) { if (P->i + 1 < P->n) P->i++; }
static bool is_op(const jt_token *t, int op) { return t->type == JT_TK_OP && t->op == op; }
static bool is_name(const jt_token *t, const char *s) { return t->type == JT_TK_NAME && !strcmp(t->s, s); }

static const char *op_text(int op) {
    static const char *txt[] = {"", "+", "-", "*", "/", "//", "%", "**", "~", "[", "]", "(", ")", "{", "}",
                                "==", "!=", ">", ">=", "<", "<=", "=", ".", ":", "|", ",", ";", "in", "not in"};
    return op >= 0 && op < (int)(sizeof txt / sizeof txt[0]) ? txt[op] : "?";
}

static void describe(const jt_token *t, char *buf, size_t cap) {
    switch (t->type) {
    case JT_TK_DATA: snprintf(buf, cap, "template data"); break;
    case JT_TK_VAR_BEGIN: snprintf(buf, cap, "begin of print statement"); break;
    case JT_TK_VAR_END: snprintf(buf, cap, "end of print statement"); break;
    case JT_TK_BLOCK_BEGIN: snprintf(buf, cap, "begin of statement block"); break;
    case JT_TK_BLOCK_END: snprintf(buf, cap, "end of statement block"); break;
    case JT_TK_NAME: snprintf(buf, cap, "'%.60s'", t->s); break;
    case JT_TK_STRING: snprintf(buf, cap, "string"); break;
    case JT_TK_INT: snprintf(buf, cap, "integer"); break;
    case JT_TK_FLOAT: snprintf(buf, cap, "float"); break;
    case JT_TK_OP: snprintf(buf, cap, "'%s'", op_text(t->op)); break;
    default: snprintf(buf, cap, "end of template"); break;
    }
}

static void *failst(parser *P, const jt_token *t, pl_status st, const char *fmt, ...) {
    if (P->failed) return NULL;
    P->failed = true;
    P->err->line = t->line;
    P->err->col = t->col;
    P->err->st = st;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(P->err->msg, sizeof P->err->msg, fmt, ap);
    va_end(ap);
    return NULL;
}
#define fail(P, t, ...) failst(P, t, PL_ERR_FORMAT, __VA_ARGS__)

static void *oom(parser *P) {
    void *r = failst(P, cur(P), PL_ERR_NO_MEMORY, "out of memory");
    return r;
}

static jt_node *node(parser *P, int kind, const jt_token *t) {
    jt_node *n = jt_arena_alloc(P->arena, sizeof *n);
    if (!n) return oom(P);
    n->kind = (uint8_t)kind;
    n->line = t->line;
    n->col = t->col;
    return n;
}

static bool nvec_push(parser *P, nvec *v, jt_node *x) {
    if (v->n == v->cap) {
        size_t nc = v->cap ? v->cap * 2 : 4;
        jt_node **nv = jt_arena_alloc(P->arena, nc * sizeof *nv);
        if (!nv) { oom(P); return false; }
        if (v->n) memcpy(nv, v->v, v->n * sizeof *nv);
        v->v = nv;
        v->cap = nc;
    }
    v->v[v->n++] = x;
    return true;
}

static bool svec_push(parser *P, svec *v, const char *x) {
    if (v->n == v->cap) {
        size_t nc = v->cap ? v->cap * 2 : 4;
        const char **nv = jt_arena_alloc(P->arena, nc * sizeof *nv);
        if (!nv) { oom(P); return false; }
        if (v->n) memcpy(nv, v->v, v->n * sizeof *nv);
        v->v = nv;
        v->cap = nc;
    }
    v->v[v->n++] = x;
    return true;
}

static bool expect_op(parser *P, int op) {
    if (is_op(cur(P), op)) { adv(P); return true; }
    char d[80];
    describe(cur(P), d, sizeof d);
    fail(P, cur(P), "expected '%s', got %s", op_text(op), d);
    return false;
}

static bool expect_type(parser *P, int type, const char *what) {
    if (cur(P)->type == type) { adv(P); return true; }
    char d[80];
    describe(cur(P), d, sizeof d);
    fail(P, cur(P), "expected %s, got %s", what, d);
    return false;
}

static bool expect_name_kw(parser *P, const char *kw) {
    if (is_name(cur(P), kw)) { adv(P); return true; }
    char d[80];
    describe(cur(P), d, sizeof d);
    fail(P, cur(P), "expected '%s', got %s", kw, d);
    return false;
}

/* Every recursion of the parser passes here (statements, parenthesised and
 * bracketed expressions, call arguments, unary operators, else branches);
 * chains (x|f|g, a.b.c, 1+2+3) are parsed by loops. Besides the depth, the
 * C stack used is bounded: one level is a dozen frames (expression ->
 * condexpr -> or -> ... -> primary), larger in sanitizer builds. */
static bool enter(parser *P) {
    if (++P->depth > JT_MAX_PARSE_DEPTH || jt_stack_span(P->stack_base, JT_STACK_HERE()) > P->max_stack) {
        fail(P, cur(P), "template nested too deeply (more than %d levels)", JT_MAX_PARSE_DEPTH);
        return false;
    }
    return true;
}

/* An immortal string constant owned by the template. */
static jt_node *const_str(parser *P, const jt_token *t, const char *s, size_t len) {
    jt_node *n = node(P, JT_N_CONST, t);
    if (!n) return NULL;
    jt_str *str = jt_arena_alloc(P->arena, sizeof(jt_str) + len + 1);
    if (!str) return oom(P);
    str->h.rc = -1;
    str->len = len;
    if (len) memcpy(str->s, s, len);
    jt_str_seal(str);
    n->cval = jt_strv(str);
    return n;
}

static jt_node *parse_expression(parser *P, bool with_condexpr);
static jt_node *parse_tuple(parser *P, bool simplified, bool with_condexpr, const char *const *extra_end,
                            bool explicit_parens, bool with_namespace);
static jt_node *parse_unary(parser *P, bool with_filter);
static jt_node *parse_primary(parser *P, bool with_namespace);
static jt_node *parse_postfix(parser *P, jt_node *n);
static jt_node *parse_filter(parser *P, jt_node *n, bool start_inline);
static jt_node *subparse(parser *P, const char *const *end);

/* ------------------------------------------------------------ expressions */

static jt_argnodes *parse_call_args(parser *P) {
    const jt_token *open = cur(P);
    if (!expect_op(P, JT_OP_LPAREN)) return NULL;
    jt_argnodes *a = jt_arena_alloc(P->arena, sizeof *a);
    if (!a) return oom(P);
    nvec pos = {0}, kwv = {0};
    svec kwn = {0};
    bool need_comma = false;
    while (!is_op(cur(P), JT_OP_RPAREN)) {
        if (need_comma) {
            if (!expect_op(P, JT_OP_COMMA)) return NULL;
            if (is_op(cur(P), JT_OP_RPAREN)) break;
        }
        if (is_op(cur(P), JT_OP_MUL)) {
            if (a->dyn_args || a->dyn_kwargs) return fail(P, open, "invalid syntax for function call expression");
            adv(P);
            if (!(a->dyn_args = parse_expression(P, true))) return NULL;
        } else if (is_op(cur(P), JT_OP_POW)) {
            if (a->dyn_kwargs) return fail(P, open, "invalid syntax for function call expression");
            adv(P);
            if (!(a->dyn_kwargs = parse_expression(P, true))) return NULL;
        } else if (cur(P)->type == JT_TK_NAME && is_op(look(P), JT_OP_ASSIGN)) {
            if (a->dyn_kwargs) return fail(P, open, "invalid syntax for function call expression");
            const char *key = cur(P)->s;
            adv(P);
            adv(P);
            jt_node *v = parse_expression(P, true);
            if (!v || !svec_push(P, &kwn, key) || !nvec_push(P, &kwv, v)) return NULL;
        } else {
            if (a->dyn_args || a->dyn_kwargs || kwn.n)
                return fail(P, open, "invalid syntax for function call expression");
            jt_node *v = parse_expression(P, true);
            if (!v || !nvec_push(P, &pos, v)) return NULL;
        }
        need_comma = true;
    }
    if (!expect_op(P, JT_OP_RPAREN)) return NULL;
    a->pos = pos.v;
    a->npos = pos.n;
    a->kwn = kwn.v;
    a->kwv = kwv.v;
    a->nkw = kwn.n;
    return a;
}

static jt_argnodes *empty_args(parser *P) {
    jt_argnodes *a = jt_arena_alloc(P->arena, sizeof *a);
    if (!a) oom(P);
    return a;
}

/* name with optional dots: "foo.bar" */
static const char *parse_dotted_name(parser *P) {
    const jt_token *t = cur(P);
    if (t->type != JT_TK_NAME) { expect_type(P, JT_TK_NAME, "a name"); return NULL; }
    adv(P);
    const char *name = t->s;
    while (is_op(cur(P), JT_OP_DOT)) {
        adv(P);
        const jt_token *u = cur(P);
        if (!expect_type(P, JT_TK_NAME, "a name")) return NULL;
        size_t l1 = strlen(name), l2 = strlen(u->s);
        char *m = jt_arena_alloc(P->arena, l1 + l2 + 2);
        if (!m) return oom(P);
        memcpy(m, name, l1);
        m[l1] = '.';
        memcpy(m + l1 + 1, u->s, l2 + 1);
        name = m;
    }
    return name;
}

static jt_node *parse_filter(parser *P, jt_node *n, bool start_inline) {
    while (is_op(cur(P), JT_OP_PIPE) || start_inline) {
        if (!start_inline) adv(P);
        const jt_token *t = cur(P);
        const char *name = parse_dotted_name(P);
        if (!name) return NULL;
        jt_node *f = node(P, JT_N_FILTER, t);
        if (!f) return NULL;
        f->a = n;
        f->name = name;
        f->args = is_op(cur(P), JT_OP_LPAREN) ? parse_call_args(P) : empty_args(P);
        if (!f->args) return NULL;
        f->filter = jt_find_filter(name);
        if (!f->filter) return fail(P, t, "no filter named '%s'", name);
        n = f;
        start_inline = false;
    }
    return n;
}

static jt_node *parse_test(parser *P, jt_node *n) {
    const jt_token *is_tok = cur(P);
    adv(P);   /* 'is' */
    bool negated = false;
    if (is_name(cur(P), "not")) { adv(P); negated = true; }
    const jt_token *t = cur(P);
    const char *name = parse_dotted_name(P);
    if (!name) return NULL;
    jt_node *tn = node(P, JT_N_TEST, is_tok);
    if (!tn) return NULL;
    tn->a = n;
    tn->name = name;
    const jt_token *c = cur(P);
    if (is_op(c, JT_OP_LPAREN)) {
        tn->args = parse_call_args(P);
    } else if ((c->type == JT_TK_NAME || c->type == JT_TK_STRING || c->type == JT_TK_INT ||
                c->type == JT_TK_FLOAT || is_op(c, JT_OP_LBRACKET) || is_op(c, JT_OP_LBRACE)) &&
               !is_name(c, "else") && !is_name(c, "or") && !is_name(c, "and")) {
        /* one argument without parentheses: "x is divisibleby 3" */
        if (is_name(c, "is")) return fail(P, c, "you cannot chain multiple tests with 'is'");
        jt_node *arg = parse_primary(P, false);
        if (!arg || !(arg = parse_postfix(P, arg))) return NULL;
        tn->args = empty_args(P);
        if (!tn->args) return NULL;
        tn->args->pos = jt_arena_alloc(P->arena, sizeof(jt_node *));
        if (!tn->args->pos) return oom(P);
        tn->args->pos[0] = arg;
        tn->args->npos = 1;
    } else {
        tn->args = empty_args(P);
    }
    if (!tn->args) return NULL;
    tn->test = jt_find_test(name);
    if (!tn->test) return fail(P, t, "no test named '%s'", name);
    if (negated) {
        jt_node *nn = node(P, JT_N_NOT, is_tok);
        if (!nn) return NULL;
        nn->a = tn;
        return nn;
    }
    return tn;
}

static jt_node *parse_subscribed(parser *P) {
    const jt_token *t = cur(P);
    jt_node *args[3] = {NULL, NULL, NULL};
    if (is_op(cur(P), JT_OP_COLON)) {
        adv(P);
    } else {
        jt_node *e = parse_expression(P, true);
        if (!e) return NULL;
        if (!is_op(cur(P), JT_OP_COLON)) return e;
        adv(P);
        args[0] = e;
    }
    if (!is_op(cur(P), JT_OP_COLON) && !is_op(cur(P), JT_OP_RBRACKET) && !is_op(cur(P), JT_OP_COMMA)) {
        if (!(args[1] = parse_expression(P, true))) return NULL;
    }
    if (is_op(cur(P), JT_OP_COLON)) {
        adv(P);
        if (!is_op(cur(P), JT_OP_RBRACKET) && !is_op(cur(P), JT_OP_COMMA)) {
            if (!(args[2] = parse_expression(P, true))) return NULL;
        }
    }
    jt_node *s = node(P, JT_N_SLICE, t);
    if (!s) return NULL;
    s->a = args[0];
    s->b = args[1];
    s->c = args[2];
    return s;
}

static jt_node *parse_subscript(parser *P, jt_node *n) {
    const jt_token *t = cur(P);
    adv(P);
    if (t->op == JT_OP_DOT) {
        const jt_token *a = cur(P);
        adv(P);
        if (a->type == JT_TK_NAME) {
            jt_node *g = node(P, JT_N_GETATTR, t);
            if (!g) return NULL;
            g->a = n;
            g->name = a->s;
            return g;
        }
        if (a->type != JT_TK_INT) return fail(P, a, "expected name or number");
        jt_node *k = node(P, JT_N_CONST, a);
        if (!k) return NULL;
        k->cval = jt_int(a->ival);
        jt_node *g = node(P, JT_N_GETITEM, t);
        if (!g) return NULL;
        g->a = n;
        g->b = k;
        return g;
    }
    nvec args = {0};
    while (!is_op(cur(P), JT_OP_RBRACKET)) {
        if (args.n && !expect_op(P, JT_OP_COMMA)) return NULL;
        jt_node *s = parse_subscribed(P);
        if (!s || !nvec_push(P, &args, s)) return NULL;
    }
    if (!expect_op(P, JT_OP_RBRACKET)) return NULL;
    jt_node *idx = args.n ? args.v[0] : NULL;
    if (args.n != 1) {   /* x[] and x[a, b] subscript with a tuple, as in jinja2 */
        idx = node(P, JT_N_TUPLE, t);
        if (!idx) return NULL;
        idx->list = args.v;
        idx->n = args.n;
    }
    jt_node *g = node(P, JT_N_GETITEM, t);
    if (!g) return NULL;
    g->a = n;
    g->b = idx;
    return g;
}

static jt_node *parse_call(parser *P, jt_node *n) {
    const jt_token *t = cur(P);
    jt_node *c = node(P, JT_N_CALL, t);
    if (!c) return NULL;
    c->a = n;
    if (!(c->args = parse_call_args(P))) return NULL;
    return c;
}

static jt_node *parse_postfix(parser *P, jt_node *n) {
    while (n) {
        const jt_token *t = cur(P);
        if (is_op(t, JT_OP_DOT) || is_op(t, JT_OP_LBRACKET)) n = parse_subscript(P, n);
        else if (is_op(t, JT_OP_LPAREN)) n = parse_call(P, n);
        else break;
    }
    return n;
}

static jt_node *parse_filter_expr(parser *P, jt_node *n) {
    while (n) {
        const jt_token *t = cur(P);
        if (is_op(t, JT_OP_PIPE)) n = parse_filter(P, n, false);
        else if (is_name(t, "is")) n = parse_test(P, n);
        else if (is_op(t, JT_OP_LPAREN)) n = parse_call(P, n);
        else break;
    }
    return n;
}

static jt_node *parse_list(parser *P) {
    const jt_token *t = cur(P);
    adv(P);
    nvec items = {0};
    while (!is_op(cur(P), JT_OP_RBRACKET)) {
        if (items.n && !expect_op(P, JT_OP_COMMA)) return NULL;
        if (is_op(cur(P), JT_OP_RBRACKET)) break;
        jt_node *e = parse_expression(P, true);
        if (!e || !nvec_push(P, &items, e)) return NULL;
    }
    if (!expect_op(P, JT_OP_RBRACKET)) return NULL;
    jt_node *n = node(P, JT_N_LIST, t);
    if (!n) return NULL;
    n->list = items.v;
    n->n = items.n;
    return n;
}

static jt_node *parse_dict(parser *P) {
    const jt_token *t = cur(P);
    adv(P);
    nvec keys = {0}, vals = {0};
    while (!is_op(cur(P), JT_OP_RBRACE)) {
        if (keys.n && !expect_op(P, JT_OP_COMMA)) return NULL;
        if (is_op(cur(P), JT_OP_RBRACE)) break;
        jt_node *k = parse_expression(P, true);
        if (!k || !expect_op(P, JT_OP_COLON)) return NULL;
        jt_node *v = parse_expression(P, true);
        if (!v || !nvec_push(P, &keys, k) || !nvec_push(P, &vals, v)) return NULL;
    }
    if (!expect_op(P, JT_OP_RBRACE)) return NULL;
    jt_node *n = node(P, JT_N_DICT, t);
    if (!n) return NULL;
    n->list = keys.v;
    n->list2 = vals.v;
    n->n = keys.n;
    return n;
}

static jt_node *parse_primary(parser *P, bool with_namespace) {
    const jt_token *t = cur(P);
    jt_node *n;
    if (t->type == JT_TK_NAME) {
        adv(P);
        if (!strcmp(t->s, "true") || !strcmp(t->s, "True") || !strcmp(t->s, "false") || !strcmp(t->s, "False")) {
            if (!(n = node(P, JT_N_CONST, t))) return NULL;
            n->cval = jt_bool(t->s[0] == 't' || t->s[0] == 'T');
        } else if (!strcmp(t->s, "none") || !strcmp(t->s, "None")) {
            if (!(n = node(P, JT_N_CONST, t))) return NULL;
            n->cval = jt_none();
        } else if (with_namespace && is_op(cur(P), JT_OP_DOT)) {
            adv(P);
            const jt_token *a = cur(P);
            if (!expect_type(P, JT_TK_NAME, "a name")) return NULL;
            if (!(n = node(P, JT_N_NSREF, t))) return NULL;
            n->name = t->s;
            n->name2 = a->s;
        } else {
            if (!(n = node(P, JT_N_NAME, t))) return NULL;
            n->name = t->s;
        }
        return n;
    }
    if (t->type == JT_TK_STRING) {
        /* adjacent string literals are concatenated */
        size_t total = 0, k = P->i;
        while (k < P->n && P->t[k].type == JT_TK_STRING) total += P->t[k++].len;
        char *buf = jt_arena_alloc(P->arena, total + 1);
        if (!buf) return oom(P);
        size_t o = 0;
        while (cur(P)->type == JT_TK_STRING) {
            memcpy(buf + o, cur(P)->s, cur(P)->len);
            o += cur(P)->len;
            adv(P);
        }
        return const_str(P, t, buf, o);
    }
    if (t->type == JT_TK_INT || t->type == JT_TK_FLOAT) {
        adv(P);
        if (!(n = node(P, JT_N_CONST, t))) return NULL;
        n->cval = t->type == JT_TK_INT ? jt_int(t->ival) : jt_float(t->fval);
        return n;
    }
    if (is_op(t, JT_OP_LPAREN)) {
        adv(P);
        n = parse_tuple(P, false, true, NULL, true, false);
        if (!n || !expect_op(P, JT_OP_RPAREN)) return NULL;
        return n;
    }
    if (is_op(t, JT_OP_LBRACKET)) return parse_list(P);
    if (is_op(t, JT_OP_LBRACE)) return parse_dict(P);
    char d[80];
    describe(t, d, sizeof d);
    return fail(P, t, "unexpected %s", d);
}

static jt_node *parse_unary(parser *P, bool with_filter) {
    const jt_token *t = cur(P);
    jt_node *n;
    if (is_op(t, JT_OP_SUB) || is_op(t, JT_OP_ADD)) {
        if (!enter(P)) return NULL;
        adv(P);
        jt_node *x = parse_unary(P, false);
        P->depth--;
        if (!x || !(n = node(P, t->op == JT_OP_SUB ? JT_N_NEG : JT_N_POS, t))) return NULL;
        n->a = x;
    } else {
        n = parse_primary(P, false);
    }
    n = parse_postfix(P, n);
    if (with_filter) n = parse_filter_expr(P, n);
    return n;
}

static jt_node *binop(parser *P, const jt_token *t, int op, jt_node *a, jt_node *b) {
    jt_node *n = node(P, JT_N_BINOP, t);
    if (!n) return NULL;
    n->op = (uint8_t)op;
    n->a = a;
    n->b = b;
    return n;
}

static jt_node *parse_pow(parser *P) {
    jt_node *l = parse_unary(P, true);
    while (l && is_op(cur(P), JT_OP_POW)) {
        const jt_token *t = cur(P);
        adv(P);
        jt_node *r = parse_unary(P, true);
        if (!r) return NULL;
        l = binop(P, t, JT_OP_POW, l, r);
    }
    return l;
}

static jt_node *parse_math2(parser *P) {
    jt_node *l = parse_pow(P);
    while (l) {
        const jt_token *t = cur(P);
        if (!(is_op(t, JT_OP_MUL) || is_op(t, JT_OP_DIV) || is_op(t, JT_OP_FLOORDIV) || is_op(t, JT_OP_MOD)))
            break;
        adv(P);
        jt_node *r = parse_pow(P);
        if (!r) return NULL;
        l = binop(P, t, t->op, l, r);
    }
    return l;
}

static jt_node *parse_concat(parser *P) {
    const jt_token *t = cur(P);
    jt_node *first = parse_math2(P);
    if (!first || !is_op(cur(P), JT_OP_TILDE)) return first;
    nvec args = {0};
    if (!nvec_push(P, &args, first)) return NULL;
    while (is_op(cur(P), JT_OP_TILDE)) {
        adv(P);
        jt_node *x = parse_math2(P);
        if (!x || !nvec_push(P, &args, x)) return NULL;
    }
    jt_node *n = node(P, JT_N_CONCAT, t);
    if (!n) return NULL;
    n->list = args.v;
    n->n = args.n;
    return n;
}

static jt_node *parse_math1(parser *P) {
    jt_node *l = parse_concat(P);
    while (l && (is_op(cur(P), JT_OP_ADD) || is_op(cur(P), JT_OP_SUB))) {
        const jt_token *t = cur(P);
        adv(P);
        jt_node *r = parse_concat(P);
        if (!r) return NULL;
        l = binop(P, t, t->op, l, r);
    }
    return l;
}

static jt_node *parse_compare(parser *P) {
    const jt_token *t0 = cur(P);
    jt_node *e = parse_math1(P);
    if (!e) return NULL;
    nvec operands = {0};
    uint8_t *ops = NULL;
    size_t nops = 0, capops = 0;
    for (;;) {
        const jt_token *t = cur(P);
        int op;
        if (t->type == JT_TK_OP && (t->op == JT_OP_EQ || t->op == JT_OP_NE || t->op == JT_OP_LT ||
                                    t->op == JT_OP_LTEQ || t->op == JT_OP_GT || t->op == JT_OP_GTEQ)) {
            op = t->op;
            adv(P);
        } else if (is_name(t, "in")) {
            op = JT_OP_IN;
            adv(P);
        } else if (is_name(t, "not") && is_name(look(P), "in")) {
            op = JT_OP_NOTIN;
            adv(P);
            adv(P);
        } else {
            break;
        }
        jt_node *r = parse_math1(P);
        if (!r || !nvec_push(P, &operands, r)) return NULL;
        if (nops == capops) {
            size_t nc = capops ? capops * 2 : 4;
            uint8_t *no = jt_arena_alloc(P->arena, nc);
            if (!no) return oom(P);
            if (nops) memcpy(no, ops, nops);
            ops = no;
            capops = nc;
        }
        ops[nops++] = (uint8_t)op;
    }
    if (!nops) return e;
    jt_node *n = node(P, JT_N_COMPARE, t0);
    if (!n) return NULL;
    n->a = e;
    n->list = operands.v;
    n->ops = ops;
    n->n = nops;
    return n;
}

static jt_node *parse_not(parser *P) {
    const jt_token *t = cur(P);
    if (is_name(t, "not")) {
        if (!enter(P)) return NULL;
        adv(P);
        jt_node *x = parse_not(P);
        P->depth--;
        if (!x) return NULL;
        jt_node *n = node(P, JT_N_NOT, t);
        if (!n) return NULL;
        n->a = x;
        return n;
    }
    return parse_compare(P);
}

static jt_node *parse_and(parser *P) {
    jt_node *l = parse_not(P);
    while (l && is_name(cur(P), "and")) {
        const jt_token *t = cur(P);
        adv(P);
        jt_node *r = parse_not(P);
        if (!r) return NULL;
        jt_node *n = node(P, JT_N_AND, t);
        if (!n) return NULL;
        n->a = l;
        n->b = r;
        l = n;
    }
    return l;
}

static jt_node *parse_or(parser *P) {
    jt_node *l = parse_and(P);
    while (l && is_name(cur(P), "or")) {
        const jt_token *t = cur(P);
        adv(P);
        jt_node *r = parse_and(P);
        if (!r) return NULL;
        jt_node *n = node(P, JT_N_OR, t);
        if (!n) return NULL;
        n->a = l;
        n->b = r;
        l = n;
    }
    return l;
}

static jt_node *parse_condexpr(parser *P) {
    jt_node *e1 = parse_or(P);
    while (e1 && is_name(cur(P), "if")) {
        const jt_token *t = cur(P);
        adv(P);
        jt_node *e2 = parse_or(P);
        if (!e2) return NULL;
        jt_node *e3 = NULL;
        if (is_name(cur(P), "else")) {
            adv(P);
            if (!enter(P)) return NULL;
            e3 = parse_condexpr(P);
            P->depth--;
            if (!e3) return NULL;
        }
        jt_node *n = node(P, JT_N_CONDEXPR, t);
        if (!n) return NULL;
        n->a = e2;
        n->b = e1;
        n->c = e3;
        e1 = n;
    }
    return e1;
}

static jt_node *parse_expression(parser *P, bool with_condexpr) {
    if (!enter(P)) return NULL;
    jt_node *n = with_condexpr ? parse_condexpr(P) : parse_or(P);
    P->depth--;
    return n;
}

static bool is_tuple_end(parser *P, const char *const *extra_end) {
    const jt_token *t = cur(P);
    if (t->type == JT_TK_VAR_END || t->type == JT_TK_BLOCK_END || is_op(t, JT_OP_RPAREN)) return true;
    for (; extra_end && *extra_end; extra_end++)
        if (is_name(t, *extra_end)) return true;
    return false;
}

static jt_node *parse_tuple(parser *P, bool simplified, bool with_condexpr, const char *const *extra_end,
                            bool explicit_parens, bool with_namespace) {
    const jt_token *t = cur(P);
    nvec args = {0};
    bool is_tuple = false;
    for (;;) {
        if (args.n && !expect_op(P, JT_OP_COMMA)) return NULL;
        if (is_tuple_end(P, extra_end)) break;
        jt_node *e = simplified ? parse_primary(P, with_namespace) : parse_expression(P, with_condexpr);
        if (!e || !nvec_push(P, &args, e)) return NULL;
        if (is_op(cur(P), JT_OP_COMMA)) is_tuple = true;
        else break;
    }
    if (!is_tuple) {
        if (args.n) return args.v[0];
        if (!explicit_parens) {
            char d[80];
            describe(cur(P), d, sizeof d);
            return fail(P, cur(P), "expected an expression, got %s", d);
        }
    }
    jt_node *n = node(P, JT_N_TUPLE, t);
    if (!n) return NULL;
    n->list = args.v;
    n->n = args.n;
    return n;
}

/* ------------------------------------------------------------- statements */

static bool can_assign(const jt_node *n, bool ns_ok) {
    if (n->kind == JT_N_NAME) return true;
    if (n->kind == JT_N_NSREF) return ns_ok;
    if (n->kind == JT_N_TUPLE) {
        for (size_t i = 0; i < n->n; i++)
            if (!can_assign(n->list[i], ns_ok)) return false;
        return true;
    }
    return false;
}

static jt_node *parse_assign_target(parser *P, bool name_only, const char *const *extra_end, bool with_namespace) {
    const jt_token *t = cur(P);
    jt_node *n;
    if (name_only) {
        if (!expect_type(P, JT_TK_NAME, "a name")) return NULL;
        if (!(n = node(P, JT_N_NAME, t))) return NULL;
        n->name = t->s;
    } else {
        n = parse_tuple(P, true, true, extra_end, false, with_namespace);
        if (!n) return NULL;
    }
    if (!can_assign(n, with_namespace)) return fail(P, t, "can't assign to this expression");
    return n;
}

static jt_node *parse_statements(parser *P, const char *const *end, bool drop_needle) {
    if (is_op(cur(P), JT_OP_COLON)) adv(P);
    if (!expect_type(P, JT_TK_BLOCK_END, "end of statement block")) return NULL;
    jt_node *body = subparse(P, end);
    if (body && drop_needle) adv(P);
    return body;
}

static const char *const END_FOR[] = {"endfor", "else", NULL};
static const char *const END_FOR2[] = {"endfor", NULL};
static const char *const END_IF[] = {"elif", "else", "endif", NULL};
static const char *const END_IF2[] = {"endif", NULL};
static const char *const END_SET[] = {"endset", NULL};
static const char *const END_MACRO[] = {"endmacro", NULL};
static const char *const END_CALL[] = {"endcall", NULL};
static const char *const END_FILTER[] = {"endfilter", NULL};
static const char *const END_WITH[] = {"endwith", NULL};
static const char *const END_BLOCK[] = {"endblock", NULL};
static const char *const END_GENERATION[] = {"endgeneration", NULL};
static const char *const END_AUTOESCAPE[] = {"endautoescape", NULL};
static const char *const IN_END[] = {"in", NULL};
static const char *const RECURSIVE_END[] = {"recursive", NULL};

static jt_node *parse_for(parser *P) {
    const jt_token *t = cur(P);
    adv(P);
    jt_node *n = node(P, JT_N_FOR, t);
    if (!n) return NULL;
    if (!(n->a = parse_assign_target(P, false, IN_END, false))) return NULL;
    if (!expect_name_kw(P, "in")) return NULL;
    if (!(n->b = parse_tuple(P, false, false, RECURSIVE_END, false, false))) return NULL;
    if (is_name(cur(P), "if")) {
        adv(P);
        if (!(n->c = parse_expression(P, true))) return NULL;
    }
    if (is_name(cur(P), "recursive")) {
        return failst(P, cur(P), PL_ERR_UNSUPPORTED, "recursive for loops are not supported");
    }
    P->loop_depth++;
    n->d = parse_statements(P, END_FOR, false);
    P->loop_depth--;
    if (!n->d) return NULL;
    bool has_else = is_name(cur(P), "else");
    adv(P);
    if (has_else && !(n->e = parse_statements(P, END_FOR2, true))) return NULL;
    return n;
}

static jt_node *parse_if(parser *P) {
    const jt_token *t = cur(P);
    adv(P);
    jt_node *n = node(P, JT_N_IF, t);
    if (!n) return NULL;
    nvec tests = {0}, bodies = {0};
    for (;;) {
        jt_node *test = parse_tuple(P, false, false, NULL, false, false);
        if (!test) return NULL;
        jt_node *body = parse_statements(P, END_IF, false);
        if (!body || !nvec_push(P, &tests, test) || !nvec_push(P, &bodies, body)) return NULL;
        const jt_token *e = cur(P);
        adv(P);
        if (is_name(e, "elif")) continue;
        if (is_name(e, "else") && !(n->e = parse_statements(P, END_IF2, true))) return NULL;
        break;
    }
    n->list = tests.v;
    n->list2 = bodies.v;
    n->n = tests.n;
    return n;
}

static jt_node *parse_set(parser *P) {
    const jt_token *t = cur(P);
    adv(P);
    jt_node *target = parse_assign_target(P, false, NULL, true);
    if (!target) return NULL;
    if (is_op(cur(P), JT_OP_ASSIGN)) {
        adv(P);
        jt_node *n = node(P, JT_N_SET, t);
        if (!n) return NULL;
        n->a = target;
        if (!(n->b = parse_tuple(P, false, true, NULL, false, false))) return NULL;
        return n;
    }
    jt_node *n = node(P, JT_N_SETBLOCK, t);
    if (!n) return NULL;
    n->a = target;
    if (is_op(cur(P), JT_OP_PIPE) && !(n->c = parse_filter(P, NULL, false))) return NULL;
    if (!(n->d = parse_statements(P, END_SET, true))) return NULL;
    return n;
}

static bool parse_signature(parser *P, jt_node *n) {
    if (!expect_op(P, JT_OP_LPAREN)) return false;
    nvec params = {0}, defaults = {0};
    bool seen_default = false;
    while (!is_op(cur(P), JT_OP_RPAREN)) {
        if (params.n && !expect_op(P, JT_OP_COMMA)) return false;
        jt_node *arg = parse_assign_target(P, true, NULL, false);
        if (!arg) return false;
        jt_node *def = NULL;
        if (is_op(cur(P), JT_OP_ASSIGN)) {
            adv(P);
            if (!(def = parse_expression(P, true))) return false;
            seen_default = true;
        } else if (seen_default) {
            fail(P, cur(P), "non-default argument follows default argument");
            return false;
        }
        if (!nvec_push(P, &params, arg) || !nvec_push(P, &defaults, def)) return false;
    }
    if (!expect_op(P, JT_OP_RPAREN)) return false;
    n->list = params.v;
    n->list2 = defaults.v;
    n->n = params.n;
    return true;
}

static jt_node *parse_macro(parser *P) {
    const jt_token *t = cur(P);
    adv(P);
    jt_node *n = node(P, JT_N_MACRO, t);
    if (!n) return NULL;
    const jt_token *nt = cur(P);
    if (!expect_type(P, JT_TK_NAME, "a macro name")) return NULL;
    n->name = nt->s;
    if (!parse_signature(P, n)) return NULL;
    int saved = P->loop_depth;
    P->loop_depth = 0;
    n->d = parse_statements(P, END_MACRO, true);
    P->loop_depth = saved;
    return n->d ? n : NULL;
}

static jt_node *parse_call_block(parser *P) {
    const jt_token *t = cur(P);
    adv(P);
    jt_node *n = node(P, JT_N_CALLBLOCK, t);
    if (!n) return NULL;
    if (is_op(cur(P), JT_OP_LPAREN) && !parse_signature(P, n)) return NULL;
    if (!(n->a = parse_expression(P, true))) return NULL;
    if (n->a->kind != JT_N_CALL) return fail(P, t, "expected call");
    int saved = P->loop_depth;
    P->loop_depth = 0;
    n->d = parse_statements(P, END_CALL, true);
    P->loop_depth = saved;
    return n->d ? n : NULL;
}

static jt_node *parse_filter_block(parser *P) {
    const jt_token *t = cur(P);
    adv(P);
    jt_node *n = node(P, JT_N_FILTERBLOCK, t);
    if (!n) return NULL;
    if (!(n->c = parse_filter(P, NULL, true))) return NULL;
    if (!(n->d = parse_statements(P, END_FILTER, true))) return NULL;
    return n;
}

static jt_node *parse_with(parser *P) {
    const jt_token *t = cur(P);
    adv(P);
    jt_node *n = node(P, JT_N_WITH, t);
    if (!n) return NULL;
    nvec targets = {0}, values = {0};
    while (cur(P)->type != JT_TK_BLOCK_END) {
        if (targets.n && !expect_op(P, JT_OP_COMMA)) return NULL;
        jt_node *tg = parse_assign_target(P, false, NULL, false);
        if (!tg || !expect_op(P, JT_OP_ASSIGN)) return NULL;
        jt_node *v = parse_expression(P, true);
        if (!v || !nvec_push(P, &targets, tg) || !nvec_push(P, &values, v)) return NULL;
    }
    n->list = targets.v;
    n->list2 = values.v;
    n->n = targets.n;
    if (!(n->d = parse_statements(P, END_WITH, true))) return NULL;
    return n;
}

/* {% block name %} renders in place (there is no inheritance here) in its
 * own scope; {% generation %} is Hugging Face's marker for assistant text
 * and renders its body unchanged. Both become a WITH without assignments. */
static jt_node *parse_scope_block(parser *P, const char *const *end, bool named) {
    const jt_token *t = cur(P);
    adv(P);
    jt_node *n = node(P, JT_N_WITH, t);
    if (!n) return NULL;
    const char *name = NULL;
    if (named) {
        const jt_token *nt = cur(P);
        if (!expect_type(P, JT_TK_NAME, "a block name")) return NULL;
        name = nt->s;
        if (is_name(cur(P), "scoped")) adv(P);
        if (is_name(cur(P), "required")) adv(P);
    }
    if (!(n->d = parse_statements(P, end, true))) return NULL;
    if (name && is_name(cur(P), name)) adv(P);
    return n;
}

static jt_node *parse_print(parser *P) {
    const jt_token *t = cur(P);
    adv(P);
    nvec exprs = {0};
    while (cur(P)->type != JT_TK_BLOCK_END) {
        if (exprs.n && !expect_op(P, JT_OP_COMMA)) return NULL;
        jt_node *e = parse_expression(P, true);
        if (!e || !nvec_push(P, &exprs, e)) return NULL;
    }
    jt_node *n = node(P, JT_N_OUTPUT, t);
    if (!n) return NULL;
    n->list = exprs.v;
    n->n = exprs.n;
    return n;
}

static jt_node *parse_statement(parser *P) {
    const jt_token *t = cur(P);
    if (t->type != JT_TK_NAME) return fail(P, t, "tag name expected");
    if (!enter(P)) return NULL;
    jt_node *n;
    const char *k = t->s;
    if (!strcmp(k, "for")) n = parse_for(P);
    else if (!strcmp(k, "if")) n = parse_if(P);
    else if (!strcmp(k, "set")) n = parse_set(P);
    else if (!strcmp(k, "macro")) n = parse_macro(P);
    else if (!strcmp(k, "call")) n = parse_call_block(P);
    else if (!strcmp(k, "filter")) n = parse_filter_block(P);
    else if (!strcmp(k, "with")) n = parse_with(P);
    else if (!strcmp(k, "print")) n = parse_print(P);
    else if (!strcmp(k, "block")) n = parse_scope_block(P, END_BLOCK, true);
    else if (!strcmp(k, "generation")) n = parse_scope_block(P, END_GENERATION, false);
    else if (!strcmp(k, "break") || !strcmp(k, "continue")) {
        if (P->loop_depth == 0) return fail(P, t, "'%s' outside of a loop", k);
        adv(P);
        n = node(P, k[0] == 'b' ? JT_N_BREAK : JT_N_CONTINUE, t);
    } else if (!strcmp(k, "autoescape")) {
        /* without HTML escaping, only "autoescape false" means the same thing */
        adv(P);
        jt_node *v = parse_expression(P, true);
        if (!v) return NULL;
        if (v->kind != JT_N_CONST || jt_truthy(v->cval))
            return failst(P, t, PL_ERR_UNSUPPORTED, "autoescaping is not supported in chat templates");
        if (!(n = node(P, JT_N_WITH, t)) || !(n->d = parse_statements(P, END_AUTOESCAPE, true))) return NULL;
    } else if (!strcmp(k, "extends") || !strcmp(k, "include") || !strcmp(k, "import") || !strcmp(k, "from")) {
        return failst(P, t, PL_ERR_UNSUPPORTED, "'%s' is not supported in chat templates", k);
    } else {
        return fail(P, t, "encountered unknown tag '%s'", k);
    }
    P->depth--;
    return n;
}

static bool in_list(const jt_token *t, const char *const *names) {
    for (; names && *names; names++)
        if (is_name(t, *names)) return true;
    return false;
}

static jt_node *subparse(parser *P, const char *const *end) {
    const jt_token *t0 = cur(P);
    nvec body = {0};
    for (;;) {
        const jt_token *t = cur(P);
        if (t->type == JT_TK_DATA) {
            jt_node *d = node(P, JT_N_DATA, t);
            if (!d) return NULL;
            d->text = t->s;
            d->text_len = t->len;
            if (!nvec_push(P, &body, d)) return NULL;
            adv(P);
        } else if (t->type == JT_TK_VAR_BEGIN) {
            adv(P);
            jt_node *e = parse_tuple(P, false, true, NULL, false, false);
            if (!e || !expect_type(P, JT_TK_VAR_END, "end of print statement")) return NULL;
            jt_node *o = node(P, JT_N_OUTPUT, t);
            if (!o) return NULL;
            o->list = jt_arena_alloc(P->arena, sizeof(jt_node *));
            if (!o->list) return oom(P);
            o->list[0] = e;
            o->n = 1;
            if (!nvec_push(P, &body, o)) return NULL;
        } else if (t->type == JT_TK_BLOCK_BEGIN) {
            adv(P);
            if (end && in_list(cur(P), end)) break;
            jt_node *s = parse_statement(P);
            if (!s || !nvec_push(P, &body, s)) return NULL;
            if (!expect_type(P, JT_TK_BLOCK_END, "end of statement block")) return NULL;
        } else if (t->type == JT_TK_EOF) {
            if (end) {
                char want[160] = "";
                for (const char *const *e = end; *e; e++) {
                    size_t l = strlen(want);
                    snprintf(want + l, sizeof want - l, "%s'%s'", l ? " or " : "", *e);
                }
                return fail(P, t, "unexpected end of template: looking for %s", want);
            }
            break;
        } else {
            char d[80];
            describe(t, d, sizeof d);
            return fail(P, t, "unexpected %s", d);
        }
    }
    jt_node *b = node(P, JT_N_BODY, t0);
    if (!b) return NULL;
    b->list = body.v;
    b->n = body.n;
    return b;
}

jt_node *jt_parse(const jt_token *toks, size_t ntoks, jt_arena *arena, jt_syntax_error *err) {
    parser P = {0};
    P.t = toks;
    P.n = ntoks;
    P.arena = arena;
    P.err = err;
    P.stack_base = JT_STACK_HERE();
    P.max_stack = jt_stack_budget(P.stack_base, JT_MAX_PARSE_STACK);
    jt_node *body = subparse(&P, NULL);
    return P.failed ? NULL : body;
}
