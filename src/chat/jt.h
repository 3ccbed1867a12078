/*
 * jt.h — internals of the chat-template renderer (a Jinja2 subset).
 *
 * Layout of the implementation:
 *   jt_value.c    value model: refcounted strings/lists/dicts, Python str()
 *                 and repr(), equality, ordering, UTF-8 and case helpers
 *   jt_json.c     jansson -> values, and tojson (Python json.dumps)
 *   jt_lexer.c    template text -> tokens (whitespace control, trim_blocks,
 *                 lstrip_blocks exactly as jinja2's lexer does them)
 *   jt_parser.c   tokens -> AST (jinja2's grammar and precedence)
 *   jt_eval.c     statements and expressions, scopes, macros, calls
 *   jt_filters.c  filters and tests
 *   jt_methods.c  str/dict/list methods and global functions
 *   jt_format.c   Python's "%" formatting and str.format()
 *   chat_template.c  the public API (chat_template.h)
 *
 * Everything a render creates is refcounted and released before the render
 * returns. Values that may form cycles (namespaces) are owned by the render
 * and torn down at its end, so hostile templates cannot leak or recurse
 * without bound. AST constants are "immortal" (rc < 0): a parsed template is
 * never written during a render, so one template can be rendered from
 * several threads at once.
 */
#ifndef PL_CHAT_JT_H
#define PL_CHAT_JT_H
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <time.h>
#include "pocketllm.h"

/* Hard limits that protect the C stack; the soft limits (output size,
 * iterations, ...) are per render, see pl_chat_template_options. */
#define JT_MAX_PARSE_DEPTH 200   /* nesting of statements + parenthesised expressions */
#define JT_MAX_PARSE_STACK (256 << 10)   /* bytes of C stack the parser may use */
#define JT_MAX_EVAL_DEPTH 1000   /* evaluator recursion (~5 levels per macro call) */
#define JT_MAX_VALUE_DEPTH 256   /* nesting of lists/dicts */
#define JT_MAX_BRACKETS 256      /* open brackets inside one tag */
#define JT_MAX_RANGE 100000      /* like jinja2's sandbox MAX_RANGE */

typedef struct jt_ctx jt_ctx;
typedef struct jt_node jt_node;

/* An address in the current C stack frame, for measuring how much stack a
 * recursion has used. The frame address, not a local's: under ASan's
 * detect_stack_use_after_return locals live in a heap "fake stack", and
 * their addresses say nothing about the real stack. */
#if defined(__GNUC__)
#define JT_STACK_HERE() ((const char *)__builtin_frame_address(0))
#else
const char *jt_stack_here(void);
#define JT_STACK_HERE() jt_stack_here()
#endif
/* The most C stack a recursion starting at here may use: want, or less
 * when the thread's stack has less room left below here (a thread created
 * with a small stack), keeping JT_STACK_MARGIN for the frames that run
 * between two checks (filters, libc, sanitizer runtime). */
#define JT_STACK_MARGIN (96 << 10)
size_t jt_stack_budget(const char *here, size_t want);
/* Bytes of stack between base and here (the stack grows down everywhere
 * this runs; the absolute difference works either way). */
static inline size_t jt_stack_span(const char *base, const char *here) {
    uintptr_t a = (uintptr_t)here, b = (uintptr_t)base;
    return a < b ? (size_t)(b - a) : (size_t)(a - b);
}

/* ------------------------------------------------------------------ values */

typedef enum jt_type {
    JT_UNDEF, JT_NONE, JT_BOOL, JT_INT, JT_FLOAT, JT_STR, JT_LIST, JT_TUPLE,
    JT_DICT, JT_NS, JT_FUNC, JT_LOOP,
} jt_type;

/* Common header of heap values. rc < 0 marks an immortal value. depth is the
 * container nesting depth (scalars 0), bounded by JT_MAX_VALUE_DEPTH so that
 * every recursive walk over a value (free, repr, equality, tojson) is bounded. */
typedef struct jt_hdr {
    int32_t rc;
    uint32_t depth;
} jt_hdr;

typedef struct jt_str {
    jt_hdr h;
    size_t len;   /* bytes */
    size_t ncp;   /* code points (an invalid UTF-8 byte counts as one) */
    char s[];     /* NUL-terminated */
} jt_str;

struct jt_val;
typedef struct jt_list {  /* also tuples; immutable once built */
    jt_hdr h;
    size_t n, cap;
    struct jt_val *v;
    uint8_t view;         /* dict.keys()/values()/items() (1/2/3), groupby tuple (4): repr/attrs */
} jt_list;

typedef struct jt_dict {  /* insertion-ordered; keys are hashable scalars */
    jt_hdr h;
    size_t n, cap;
    struct jt_val *k, *v;
    uint32_t *idx;        /* open-addressing index (slot+1), built when n > 8 */
    size_t idx_cap;
} jt_dict;

typedef struct jt_ns {    /* namespace(): the one mutable object */
    jt_hdr h;
    jt_dict *d;
    struct jt_ns *next;   /* render-owned list, torn down at the end */
} jt_ns;

typedef struct jt_frame jt_frame;
typedef struct jt_args jt_args;
typedef int (*jt_native_fn)(jt_ctx *c, const struct jt_val *self, jt_args *a, struct jt_val *out);

enum { JT_FN_NATIVE, JT_FN_MACRO, JT_FN_CALLER, JT_FN_UNSAFE };

typedef struct jt_func {
    jt_hdr h;
    uint8_t kind;
    const char *name;
    jt_native_fn fn;          /* JT_FN_NATIVE */
    struct jt_val *self;      /* bound receiver (owned), or NULL */
    const jt_node *node;      /* JT_FN_MACRO: the macro; JT_FN_CALLER: the call block */
    jt_frame *frame;          /* macro: defining scope; caller: the call block's (owned) */
} jt_func;

typedef struct jt_loop {
    jt_hdr h;
    jt_list *items;
    size_t i;                 /* index0 */
    jt_str *changed;          /* loop.changed(): last args, as their repr */
} jt_loop;

typedef struct jt_val {
    uint8_t t;        /* jt_type */
    uint8_t uk;       /* JT_UNDEF: 0 unknown name, 1 missing attribute, 2 other, 3 no element u.i */
    uint8_t uo;       /* JT_UNDEF, uk == 1: type of the object that lacked it */
    union {
        bool b;
        int64_t i;
        double f;
        jt_str *s;
        jt_list *l;
        jt_dict *d;
        jt_ns *ns;
        jt_func *fn;
        jt_loop *lp;
        jt_hdr *h;
        const char *uname;    /* JT_UNDEF (uk 0, 1): name for the error message (may be NULL) */
    } u;
} jt_val;

static inline jt_val jt_undef(const char *name, int kind) {
    jt_val v = {JT_UNDEF, (uint8_t)kind, 0, {0}};
    v.u.uname = name;
    return v;
}
static inline jt_val jt_none(void) { jt_val v = {JT_NONE, 0, 0, {0}}; return v; }
static inline jt_val jt_bool(bool b) { jt_val v = {JT_BOOL, 0, 0, {0}}; v.u.b = b; return v; }
static inline jt_val jt_int(int64_t i) { jt_val v = {JT_INT, 0, 0, {0}}; v.u.i = i; return v; }
static inline jt_val jt_float(double f) { jt_val v = {JT_FLOAT, 0, 0, {0}}; v.u.f = f; return v; }
static inline bool jt_is_heap(jt_val v) { return v.t >= JT_STR; }
static inline bool jt_is_num(jt_val v) { return v.t == JT_INT || v.t == JT_FLOAT || v.t == JT_BOOL; }
static inline bool jt_is_seq(jt_val v) { return v.t == JT_LIST || v.t == JT_TUPLE; }
static inline int64_t jt_as_int(jt_val v) { return v.t == JT_BOOL ? (int64_t)v.u.b : v.u.i; }
static inline double jt_as_float(jt_val v) {
    return v.t == JT_FLOAT ? v.u.f : v.t == JT_BOOL ? (double)v.u.b : (double)v.u.i;
}
static inline uint32_t jt_depth(jt_val v) {
    return (v.t == JT_LIST || v.t == JT_TUPLE || v.t == JT_DICT) ? v.u.h->depth : 0;
}

void jt_incref(jt_val v);
void jt_decref(jt_val v);
static inline jt_val jt_ref(jt_val v) { jt_incref(v); return v; }

/* Constructors. All return 0, or -1 with the error recorded in c. Functions
 * documented as "steal" take ownership of the values passed in, also on error. */
jt_str *jt_str_alloc(jt_ctx *c, size_t len);        /* uninitialised bytes, NUL added */
void jt_str_seal(jt_str *s);                        /* computes ncp after writing s->s */
int jt_new_str(jt_ctx *c, const char *s, size_t n, jt_val *out);
int jt_new_cstr(jt_ctx *c, const char *s, jt_val *out);
static inline jt_val jt_strv(jt_str *s) { jt_val v = {JT_STR, 0, 0, {0}}; v.u.s = s; return v; }
int jt_new_list(jt_ctx *c, size_t cap, bool tuple, jt_val *out);
int jt_list_push(jt_ctx *c, jt_list *l, jt_val item);              /* steals item */
int jt_new_dict(jt_ctx *c, jt_val *out);
int jt_dict_set(jt_ctx *c, jt_dict *d, jt_val key, jt_val val);     /* steals both */
jt_val *jt_dict_get(const jt_dict *d, jt_val key);                  /* borrowed; NULL if absent */
jt_val *jt_dict_gets(const jt_dict *d, const char *s, size_t n);
void jt_dict_clear(jt_dict *d);
int jt_new_ns(jt_ctx *c, jt_val *out);
int jt_new_func(jt_ctx *c, int kind, const char *name, jt_val *out);
bool jt_hashable(jt_val v);

/* Python semantics. */
bool jt_truthy(jt_val v);
const char *jt_type_name(jt_val v);        /* Python's type name: 'str', 'NoneType', ... */
const char *jt_type_name_t(int t);
bool jt_equal(jt_val a, jt_val b);
/* Python ordering: *res is -1, 0, 1, or 2 when unordered (NaN). op names the
 * operator in the TypeError message. */
int jt_compare(jt_ctx *c, jt_val a, jt_val b, const char *op, int *res);
int64_t jt_len_of(jt_val v);               /* -1 if the value has no len() */

/* Byte buffer with the render's output limit. */
typedef struct jt_buf {
    char *p;
    size_t n, cap;
} jt_buf;
int jt_buf_put(jt_ctx *c, jt_buf *b, const char *s, size_t n);
int jt_buf_puts(jt_ctx *c, jt_buf *b, const char *s);
int jt_buf_putc(jt_ctx *c, jt_buf *b, char ch);
int jt_buf_take(jt_ctx *c, jt_buf *b, jt_val *out);   /* buffer -> string value; frees b */
void jt_buf_free(jt_buf *b);

int jt_put_str(jt_ctx *c, jt_buf *b, jt_val v);            /* Python str(v) */
int jt_put_repr(jt_ctx *c, jt_buf *b, jt_val v, int depth); /* Python repr(v) */
int jt_to_str(jt_ctx *c, jt_val v, jt_val *out);           /* str(v) as a value */
void jt_fmt_float(double f, char out[40]);                 /* Python repr(float) */
void jt_fmt_int(int64_t i, char out[24]);

/* UTF-8 and Unicode helpers (lenient: an invalid byte is one code point). */
uint32_t jt_utf8_next(const char *s, size_t n, size_t *i);
int jt_utf8_put(uint32_t cp, char out[4]);
size_t jt_utf8_count(const char *s, size_t n);
size_t jt_utf8_offset(const jt_str *s, size_t cp_index);   /* byte offset of code point */
bool jt_cp_space(uint32_t cp);          /* Python str.isspace() */
uint32_t jt_cp_upper(uint32_t cp);
uint32_t jt_cp_lower(uint32_t cp);
bool jt_cp_alpha(uint32_t cp);          /* approximate str.isalpha() */
bool jt_cp_digit(uint32_t cp);
bool jt_cp_printable(uint32_t cp);      /* approximate str.isprintable() */

/* ------------------------------------------------------------------- JSON */
struct json_t;
int jt_from_json(jt_ctx *c, const struct json_t *j, jt_val *out, int depth);
typedef struct jt_json_opts {
    const char *indent;          /* NULL: no newlines */
    const char *item_sep, *key_sep;
    bool ensure_ascii, sort_keys;
} jt_json_opts;
int jt_put_json(jt_ctx *c, jt_buf *b, jt_val v, const jt_json_opts *o, int level);

/* -------------------------------------------------------------------- AST */

typedef enum jt_op {
    JT_OP_NONE, JT_OP_ADD, JT_OP_SUB, JT_OP_MUL, JT_OP_DIV, JT_OP_FLOORDIV, JT_OP_MOD,
    JT_OP_POW, JT_OP_TILDE, JT_OP_LBRACKET, JT_OP_RBRACKET, JT_OP_LPAREN, JT_OP_RPAREN,
    JT_OP_LBRACE, JT_OP_RBRACE, JT_OP_EQ, JT_OP_NE, JT_OP_GT, JT_OP_GTEQ, JT_OP_LT,
    JT_OP_LTEQ, JT_OP_ASSIGN, JT_OP_DOT, JT_OP_COLON, JT_OP_PIPE, JT_OP_COMMA,
    JT_OP_SEMICOLON,
    JT_OP_IN, JT_OP_NOTIN,       /* comparison operators that are names */
} jt_op;

typedef enum jt_kind {
    /* statements */
    JT_N_BODY, JT_N_DATA, JT_N_OUTPUT, JT_N_IF, JT_N_FOR, JT_N_SET, JT_N_SETBLOCK,
    JT_N_MACRO, JT_N_CALLBLOCK, JT_N_FILTERBLOCK, JT_N_WITH, JT_N_BREAK, JT_N_CONTINUE,
    /* expressions */
    JT_N_CONST, JT_N_NAME, JT_N_NSREF, JT_N_TUPLE, JT_N_LIST, JT_N_DICT, JT_N_GETATTR,
    JT_N_GETITEM, JT_N_SLICE, JT_N_CALL, JT_N_FILTER, JT_N_TEST, JT_N_BINOP, JT_N_NEG,
    JT_N_POS, JT_N_NOT, JT_N_AND, JT_N_OR, JT_N_COMPARE, JT_N_CONCAT, JT_N_CONDEXPR,
} jt_kind;

typedef int (*jt_filter_fn)(jt_ctx *c, jt_val *in, jt_args *a, jt_val *out);
typedef int (*jt_test_fn)(jt_ctx *c, jt_val *in, jt_args *a, bool *res);

/* Arguments of a call, filter or test (unevaluated). */
typedef struct jt_argnodes {
    jt_node **pos;
    size_t npos;
    const char **kwn;
    jt_node **kwv;
    size_t nkw;
    jt_node *dyn_args, *dyn_kwargs;   /* *args, **kwargs */
} jt_argnodes;

/* One node type for everything; the meaning of the fields depends on kind
 * (documented in jt_parser.c next to each constructor). */
struct jt_node {
    uint8_t kind;
    uint8_t op;         /* BINOP operator, FOR: recursive, TEST: unused */
    int32_t line, col;
    jt_node *a, *b, *c, *d, *e;
    jt_node **list;     /* BODY statements, TUPLE/LIST items, DICT keys, IF tests, MACRO params, COMPARE operands */
    jt_node **list2;    /* DICT values, IF bodies, MACRO defaults, WITH values */
    size_t n;
    uint8_t *ops;       /* COMPARE operators */
    const char *name;   /* NAME, GETATTR attribute, FILTER/TEST name, MACRO name, NSREF namespace */
    const char *name2;  /* NSREF attribute */
    const char *text;   /* DATA */
    size_t text_len;
    jt_val cval;        /* CONST (immortal) */
    jt_argnodes *args;  /* CALL, FILTER, TEST */
    jt_filter_fn filter;
    jt_test_fn test;
};

/* Arena for the AST: everything a template owns is freed at once. */
typedef struct jt_arena_chunk jt_arena_chunk;
typedef struct jt_arena {
    jt_arena_chunk *head;
} jt_arena;
void *jt_arena_alloc(jt_arena *a, size_t size);
char *jt_arena_strdup(jt_arena *a, const char *s, size_t n);
void jt_arena_free(jt_arena *a);

/* ------------------------------------------------------------------ lexer */

typedef enum jt_tok_type {
    JT_TK_DATA, JT_TK_VAR_BEGIN, JT_TK_VAR_END, JT_TK_BLOCK_BEGIN, JT_TK_BLOCK_END,
    JT_TK_NAME, JT_TK_STRING, JT_TK_INT, JT_TK_FLOAT, JT_TK_OP, JT_TK_EOF,
} jt_tok_type;

typedef struct jt_token {
    uint8_t type;
    uint8_t op;
    int32_t line, col;
    const char *s;      /* DATA text, NAME, decoded STRING (arena, NUL-terminated) */
    size_t len;
    int64_t ival;
    double fval;
} jt_token;

typedef struct jt_syntax_error {
    int line, col;
    pl_status st;
    char msg[256];
} jt_syntax_error;

int jt_lex(const char *src, size_t len, jt_arena *arena, jt_token **toks, size_t *ntoks,
           jt_syntax_error *err);
jt_node *jt_parse(const jt_token *toks, size_t ntoks, jt_arena *arena, jt_syntax_error *err);

/* ------------------------------------------------------------- evaluation */

/* A scope. Variable names point into the AST (or are static strings), so a
 * frame never copies a name. */
typedef struct jt_var {
    const char *name;
    jt_val v;
} jt_var;

struct jt_frame {
    int32_t rc;
    jt_frame *parent;
    jt_var *vars;
    size_t n, cap;
};

struct jt_args {
    jt_val *pos;
    size_t npos;
    const char **kwn;
    jt_val *kwv;
    size_t nkw;
    jt_val hold;          /* keeps **kwargs keys alive */
    jt_val small_pos[6];
    jt_val small_kwv[4];
    const char *small_kwn[4];
};

struct jt_ctx {
    /* limits (from pl_chat_template_options) */
    size_t max_output;
    uint64_t max_iterations, max_steps, max_alloc;
    uint64_t iterations, steps, allocated;
    int depth;
    const char *stack_base;   /* JT_STACK_HERE() of the render's entry point */
    size_t max_stack;         /* C stack the evaluator may use below it */
    struct tm now;
    jt_buf *out;
    jt_frame *root, *frame;
    jt_dict *context;     /* the caller's variables (below the root frame) */
    jt_ns *namespaces;
    int line;             /* line of the node being evaluated, for messages */
    /* the first error wins */
    bool failed, raised;
    pl_status st;
    int err_line;
    char err[512];
};

void jt_frame_release(jt_frame *f);
void jt_frame_clear(jt_frame *f);

/* Whether the render has used up its C stack (c->max_stack below the
 * render's entry). Every recursion checks it besides its depth limit, so
 * fat frames (sanitizer builds) or a small thread stack cannot overflow. */
bool jt_stack_low(const jt_ctx *c);

int jt_err(jt_ctx *c, const char *fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 2, 3)))
#endif
    ;
int jt_oom(jt_ctx *c);
int jt_undef_error(jt_ctx *c, jt_val v);   /* "'x' is undefined" */
int jt_charge(jt_ctx *c, uint64_t bytes);  /* allocation budget */

int jt_render_body(jt_ctx *c, const jt_node *body);
int jt_eval(jt_ctx *c, const jt_node *n, jt_val *out);
int jt_getattr(jt_ctx *c, jt_val obj, const char *name, jt_val *out);   /* name: an AST name */
int jt_getattr_ex(jt_ctx *c, jt_val obj, const char *name, bool stable_name, jt_val *out);
int jt_getitem(jt_ctx *c, jt_val obj, jt_val key, jt_val *out);
int jt_call(jt_ctx *c, jt_val fn, jt_args *a, jt_val *out);
int jt_iterate(jt_ctx *c, jt_val v, jt_val *out_list);   /* materialises any iterable as a list */
void jt_args_init(jt_args *a);
void jt_args_free(jt_args *a);
int jt_args_push(jt_ctx *c, jt_args *a, jt_val v);               /* steals */
int jt_args_push_kw(jt_ctx *c, jt_args *a, const char *k, jt_val v);  /* steals */
/* Argument idx or keyword name (NULL if not given). */
jt_val *jt_arg(jt_args *a, size_t idx, const char *name);
int jt_args_check(jt_ctx *c, jt_args *a, const char *fname, size_t max_pos, const char *const *kwnames);

/* Filters, tests, methods, globals. */
jt_filter_fn jt_find_filter(const char *name);
jt_test_fn jt_find_test(const char *name);
int jt_apply_filter(jt_ctx *c, const char *name, jt_val *in, jt_args *a, jt_val *out);
int jt_apply_test(jt_ctx *c, const char *name, jt_val *in, jt_args *a, bool *res);
/* Method lookup: returns 1 and a bound method in *out when obj has a method
 * called name, 0 when not. Unsafe (mutating) methods give a JT_FN_UNSAFE. */
int jt_find_method(jt_ctx *c, jt_val obj, const char *name, jt_val *out);
/* Calls obj.name(args) directly; returns 1 if handled, 0 if not a method, -1 on error. */
int jt_call_method(jt_ctx *c, jt_val obj, const char *name, jt_args *a, jt_val *out);
/* Global functions: returns 1 if name is a global (*out set), 0 otherwise. */
int jt_find_global(jt_ctx *c, const char *name, jt_val *out);
/* String helpers shared by methods and filters (s must be a string). */
int jt_str_method_strip(jt_ctx *c, jt_val s, jt_val *chars, int which, jt_val *out);  /* which: 1 l, 2 r, 3 both */
int jt_str_lower_upper(jt_ctx *c, jt_val s, bool upper, jt_val *out);
int jt_str_replace(jt_ctx *c, jt_val s, jt_val old, jt_val new_, int64_t count, jt_val *out);
int jt_splitlines(jt_ctx *c, jt_val s, bool keepends, jt_val *out);
int jt_str_percent(jt_ctx *c, jt_val fmt, jt_val args, jt_val *out);   /* fmt % args */
int jt_str_format(jt_ctx *c, jt_val fmt, jt_args *a, jt_val *out);      /* fmt.format(...) */
int jt_str_map_case(jt_ctx *c, jt_val s, int mode, jt_val *out);         /* 2 capitalize, 3 title */

#endif
