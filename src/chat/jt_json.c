/* JSON in and out. Input: a jansson value becomes renderer values (object
 * key order is kept; jansson preserves insertion order). Output: tojson,
 * which must equal Python's json.dumps(x, ensure_ascii=False) byte for byte
 * (", " and ": " separators, insertion order, floats as Python's repr,
 * NaN/Infinity, and json.dumps' layout when indent is given). jansson's own
 * encoder differs in all of these, hence this one. */
#include "chat/jt.h"
#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int jt_from_json(jt_ctx *c, const json_t *j, jt_val *out, int depth) {
    if (depth > JT_MAX_VALUE_DEPTH || jt_stack_low(c))
        return jt_err(c, "input nested more than %d levels deep", JT_MAX_VALUE_DEPTH);
    switch (json_typeof(j)) {
    case JSON_OBJECT: {
        if (jt_new_dict(c, out)) return -1;
        const char *key;
        json_t *val;
        void *it = json_object_iter((json_t *)j);
        while (it) {
            key = json_object_iter_key(it);
            val = json_object_iter_value(it);
#if JANSSON_VERSION_HEX >= 0x020e00
            size_t klen = json_object_iter_key_len(it);   /* keys may hold NUL bytes */
#else
            size_t klen = strlen(key);
#endif
            jt_val k, v;
            if (jt_new_str(c, key, klen, &k)) { jt_decref(*out); return -1; }
            if (jt_from_json(c, val, &v, depth + 1)) { jt_decref(k); jt_decref(*out); return -1; }
            if (jt_dict_set(c, out->u.d, k, v)) { jt_decref(*out); return -1; }
            it = json_object_iter_next((json_t *)j, it);
        }
        return 0;
    }
    case JSON_ARRAY: {
        size_t n = json_array_size(j);
        if (jt_new_list(c, n, false, out)) return -1;
        for (size_t i = 0; i < n; i++) {
            jt_val v;
            if (jt_from_json(c, json_array_get(j, i), &v, depth + 1) || jt_list_push(c, out->u.l, v)) {
                jt_decref(*out);
                return -1;
            }
        }
        return 0;
    }
    case JSON_STRING: return jt_new_str(c, json_string_value(j), json_string_length(j), out);
    case JSON_INTEGER: *out = jt_int((int64_t)json_integer_value(j)); return 0;
    case JSON_REAL: *out = jt_float(json_real_value(j)); return 0;
    case JSON_TRUE: *out = jt_bool(true); return 0;
    case JSON_FALSE: *out = jt_bool(false); return 0;
    default: *out = jt_none(); return 0;
    }
}

static int put_json_string(jt_ctx *c, jt_buf *b, const char *s, size_t len, bool ensure_ascii) {
    if (jt_buf_putc(c, b, '"')) return -1;
    size_t run = 0, i = 0;
    while (i < len) {
        size_t st = i;
        unsigned char ch = (unsigned char)s[i];
        char esc[16];
        const char *e = NULL;
        if (ch < 0x80) {
            i++;
            switch (ch) {
            case '"': e = "\\\""; break;
            case '\\': e = "\\\\"; break;
            case '\n': e = "\\n"; break;
            case '\r': e = "\\r"; break;
            case '\t': e = "\\t"; break;
            case '\b': e = "\\b"; break;
            case '\f': e = "\\f"; break;
            default:
                if (ch < 0x20) { snprintf(esc, sizeof esc, "\\u%04x", ch); e = esc; }
            }
        } else {
            uint32_t cp = jt_utf8_next(s, len, &i);
            if (ensure_ascii) {
                if (cp >= 0x10000) {
                    uint32_t v = cp - 0x10000;
                    snprintf(esc, sizeof esc, "\\u%04x\\u%04x", 0xD800 + (v >> 10), 0xDC00 + (v & 0x3FF));
                } else {
                    snprintf(esc, sizeof esc, "\\u%04x", cp);
                }
                e = esc;
            }
        }
        if (e) {
            if (jt_buf_put(c, b, s + run, st - run) || jt_buf_puts(c, b, e)) return -1;
            run = i;
        }
    }
    if (jt_buf_put(c, b, s + run, len - run)) return -1;
    return jt_buf_putc(c, b, '"');
}

static int put_float(jt_ctx *c, jt_buf *b, double f) {
    if (isnan(f)) return jt_buf_puts(c, b, "NaN");
    if (isinf(f)) return jt_buf_puts(c, b, f < 0 ? "-Infinity" : "Infinity");
    char num[40];
    jt_fmt_float(f, num);
    return jt_buf_puts(c, b, num);
}

static int put_newline_indent(jt_ctx *c, jt_buf *b, const char *indent, int level) {
    if (jt_buf_putc(c, b, '\n')) return -1;
    for (int i = 0; i < level; i++)
        if (jt_buf_puts(c, b, indent)) return -1;
    return 0;
}

/* A dict key as json.dumps converts it: str as is, numbers/bools/None to
 * their JSON text. */
static int put_key(jt_ctx *c, jt_buf *b, jt_val k, bool ensure_ascii) {
    char num[40];
    switch (k.t) {
    case JT_STR: return put_json_string(c, b, k.u.s->s, k.u.s->len, ensure_ascii);
    case JT_INT: jt_fmt_int(k.u.i, num); break;
    case JT_BOOL: strcpy(num, k.u.b ? "true" : "false"); break;
    case JT_NONE: strcpy(num, "null"); break;
    case JT_FLOAT:
        if (isnan(k.u.f)) strcpy(num, "NaN");
        else if (isinf(k.u.f)) strcpy(num, k.u.f < 0 ? "-Infinity" : "Infinity");
        else jt_fmt_float(k.u.f, num);
        break;
    default:
        return jt_err(c, "keys must be str, int, float, bool or None, not %s", jt_type_name(k));
    }
    if (jt_buf_putc(c, b, '"') || jt_buf_puts(c, b, num)) return -1;
    return jt_buf_putc(c, b, '"');
}

static int cmp_keys(const void *x, const void *y) {
    const jt_val *a = *(const jt_val *const *)x, *b = *(const jt_val *const *)y;
    if (a->t == JT_STR && b->t == JT_STR) {
        size_t n = a->u.s->len < b->u.s->len ? a->u.s->len : b->u.s->len;
        int r = memcmp(a->u.s->s, b->u.s->s, n);
        return r ? r : (a->u.s->len > b->u.s->len) - (a->u.s->len < b->u.s->len);
    }
    double p = jt_is_num(*a) ? jt_as_float(*a) : 0, q = jt_is_num(*b) ? jt_as_float(*b) : 0;
    return (p > q) - (p < q);
}

int jt_put_json(jt_ctx *c, jt_buf *b, jt_val v, const jt_json_opts *o, int level) {
    if (level > JT_MAX_VALUE_DEPTH + 8 || jt_stack_low(c)) return jt_err(c, "value nested too deeply for tojson");
    switch (v.t) {
    case JT_NONE: return jt_buf_puts(c, b, "null");
    case JT_BOOL: return jt_buf_puts(c, b, v.u.b ? "true" : "false");
    case JT_INT: { char num[24]; jt_fmt_int(v.u.i, num); return jt_buf_puts(c, b, num); }
    case JT_FLOAT: return put_float(c, b, v.u.f);
    case JT_STR: return put_json_string(c, b, v.u.s->s, v.u.s->len, o->ensure_ascii);
    case JT_LIST:
    case JT_TUPLE: {
        jt_list *l = v.u.l;
        if (!l->n) return jt_buf_puts(c, b, "[]");
        if (jt_buf_putc(c, b, '[')) return -1;
        for (size_t i = 0; i < l->n; i++) {
            if (i && jt_buf_puts(c, b, o->item_sep)) return -1;
            if (o->indent && put_newline_indent(c, b, o->indent, level + 1)) return -1;
            if (jt_put_json(c, b, l->v[i], o, level + 1)) return -1;
        }
        if (o->indent && put_newline_indent(c, b, o->indent, level)) return -1;
        return jt_buf_putc(c, b, ']');
    }
    case JT_DICT: {
        jt_dict *d = v.u.d;
        if (!d->n) return jt_buf_puts(c, b, "{}");
        const jt_val **order = NULL;
        if (o->sort_keys) {
            if (jt_charge(c, d->n * sizeof *order)) return -1;
            order = malloc(d->n * sizeof *order);
            if (!order) return jt_oom(c);
            for (size_t i = 0; i < d->n; i++) order[i] = &d->k[i];
            for (size_t i = 0; i < d->n; i++)
                if (d->k[i].t != d->k[0].t && !(jt_is_num(d->k[i]) && jt_is_num(d->k[0]))) {
                    free(order);
                    return jt_err(c, "'<' not supported between instances of '%s' and '%s'",
                                  jt_type_name(d->k[i]), jt_type_name(d->k[0]));
                }
            qsort(order, d->n, sizeof *order, cmp_keys);
        }
        int r = jt_buf_putc(c, b, '{');
        for (size_t i = 0; i < d->n && !r; i++) {
            size_t k = order ? (size_t)(order[i] - d->k) : i;
            if (i) r = jt_buf_puts(c, b, o->item_sep);
            if (!r && o->indent) r = put_newline_indent(c, b, o->indent, level + 1);
            if (!r) r = put_key(c, b, d->k[k], o->ensure_ascii);
            if (!r) r = jt_buf_puts(c, b, o->key_sep);
            if (!r) r = jt_put_json(c, b, d->v[k], o, level + 1);
        }
        free(order);
        if (r) return -1;
        if (o->indent && put_newline_indent(c, b, o->indent, level)) return -1;
        return jt_buf_putc(c, b, '}');
    }
    default: {
        const char *tn = jt_type_name(v);
        return jt_err(c, "Object of type %s is not JSON serializable", tn);
    }
    }
}
