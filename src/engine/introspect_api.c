/*
 * Public read-only introspection (include/pocketllm.h): backends, their
 * device probes and kernel dtypes, the architecture registry and the op
 * schemas. Everything is read from the tables the engine dispatches
 * through (kernels/abi.h, models/arch.h), never from a copy, so a listing
 * cannot drift from what the build does. Presentation (tables, JSON) is the
 * caller's: nothing here prints.
 */
#include "kernels/abi.h"
#include "models/arch.h"
#include "models/arch_table.h"
#include "core/status.h"
#include <stdio.h>
#include <string.h>

static const pl_backend *backend_at(int32_t i) {
    if (i < 0) return NULL;
    const pl_backend *const *b = pl_backends();
    for (int32_t k = 0; b[k]; k++)
        if (k == i) return b[k];
    return NULL;
}

static const pl_arch *arch_at(int32_t i) {
    if (i < 0) return NULL;
    const pl_arch *const *a = pl_archs();
    for (int32_t k = 0; a[k]; k++)
        if (k == i) return a[k];
    return NULL;
}

static const pl_op_schema *op_at(int32_t op) {
    return op >= 0 && op < PL_OP_COUNT ? pl_op_schema_get((pl_op)op) : NULL;
}

/* Appends a name to a caller's list: names[*n] if it fits; counts it always. */
static void push_name(const char **names, size_t cap, size_t *n, const char *name) {
    if (names && *n < cap) names[*n] = name;
    (*n)++;
}

/* ---- backends ---------------------------------------------------------------*/

PL_API int32_t pl_backend_count(void) {
    int32_t n = 0;
    for (const pl_backend *const *b = pl_backends(); *b; b++) n++;
    return n;
}

PL_API pl_status pl_backend_get(int32_t i, pl_backend_info *out) {
    const pl_backend *b = backend_at(i);
    if (!b || !out) return pl_errorf(PL_ERR_INVALID_ARG, "no backend %d (there are %d)", i, pl_backend_count());
    out->name = b->name;
    out->summary = b->summary ? b->summary : "";
    out->awaits = b->awaits;
    /* a context to run in and a dispatch table to run with */
    out->implemented = b->ctx_create != NULL && b->n_kernels > 0;
    return PL_OK;
}

PL_API int32_t pl_backend_index(const char *name) {
    if (!name) return -1;
    const pl_backend *const *b = pl_backends();
    for (int32_t k = 0; b[k]; k++)
        if (!strcmp(b[k]->name, name)) return k;
    return -1;
}

PL_API pl_status pl_backend_op_dtypes(int32_t i, int32_t op, const char **names, size_t cap, size_t *n) {
    const pl_backend *b = backend_at(i);
    if (!n) return pl_errorf(PL_ERR_INVALID_ARG, "pl_backend_op_dtypes: n is NULL");
    *n = 0;
    if (!b) return pl_errorf(PL_ERR_INVALID_ARG, "no backend %d (there are %d)", i, pl_backend_count());
    if (!op_at(op)) return pl_errorf(PL_ERR_INVALID_ARG, "no op %d (there are %d)", op, (int)PL_OP_COUNT);
    for (size_t k = 0; k < b->n_kernels; k++)
        if ((int32_t)b->kernels[k].op == op)
            push_name(names, cap, n, b->kernels[k].key == PL_DTYPE_ANY ? "any" : pl_dtype_name(b->kernels[k].key));
    return PL_OK;
}

PL_API pl_status pl_device_probe(int32_t i, bool *available, char *detail, size_t cap) {
    const pl_backend *b = backend_at(i);
    if (!b || !available) return pl_errorf(PL_ERR_INVALID_ARG, "no backend %d (there are %d)", i, pl_backend_count());
    /* Probes write with snprintf; give them a scratch line when the caller
     * wants no detail, so every probe runs the same way. */
    char scratch[16];
    if (!detail || !cap) {
        detail = scratch;
        cap = sizeof scratch;
    }
    detail[0] = 0;
    if (!b->probe) {
        snprintf(detail, cap, "host memory");
        *available = true;
    } else {
        *available = b->probe(detail, cap);
    }
    return PL_OK;
}

/* ---- architectures ----------------------------------------------------------*/

PL_API int32_t pl_arch_count(void) {
    int32_t n = 0;
    for (const pl_arch *const *a = pl_archs(); *a; a++) n++;
    return n;
}

PL_API pl_status pl_arch_get(int32_t i, pl_arch_info *out) {
    const pl_arch *a = arch_at(i);
    if (!a || !out) return pl_errorf(PL_ERR_INVALID_ARG, "no architecture %d (there are %d)", i, pl_arch_count());
    out->name = a->name;
    out->summary = a->summary ? a->summary : "";
    out->n_keys = 0;
    while (a->hparams && a->hparams[out->n_keys].key) out->n_keys++;
    return PL_OK;
}

PL_API pl_status pl_arch_key(int32_t i, int32_t k, char *buf, size_t cap, size_t *len) {
    pl_arch_info info;
    if (len) *len = 0;
    PL_TRY(pl_arch_get(i, &info));
    if (k < 0 || k >= info.n_keys)
        return pl_errorf(PL_ERR_INVALID_ARG, "architecture %s has no key %d (it has %d)", info.name, k, info.n_keys);
    /* the registry writes "{arch}" where the architecture's name goes */
    const char *key = arch_at(i)->hparams[k].key, *p = strstr(key, "{arch}");
    size_t need = p ? (size_t)(p - key) + strlen(info.name) + strlen(p + 6) : strlen(key);
    if (len) *len = need;
    if (!buf || cap <= need)
        return pl_errorf(PL_ERR_INVALID_ARG, "a buffer of %zu bytes cannot hold key '%s' (%zu bytes and a NUL)", cap,
                         key, need);
    if (p) snprintf(buf, cap, "%.*s%s%s", (int)(p - key), key, info.name, p + 6);
    else memcpy(buf, key, need + 1);
    return PL_OK;
}

/* ---- ops ----------------------------------------------------------------------*/

PL_API int32_t pl_op_count(void) { return PL_OP_COUNT; }

PL_API pl_status pl_op_get(int32_t op, pl_op_info *out) {
    const pl_op_schema *s = op_at(op);
    if (!s || !out) return pl_errorf(PL_ERR_INVALID_ARG, "no op %d (there are %d)", op, (int)PL_OP_COUNT);
    out->name = s->name;
    out->summary = s->summary ? s->summary : "";
    out->shape_rule = s->shape_rule ? s->shape_rule : "";
    out->params = s->params ? s->params : "";
    out->n_inputs = s->n_src;
    out->key_input = s->key_operand < 0 ? -1 : s->key_operand;
    return PL_OK;
}

PL_API int32_t pl_op_index(const char *name) {
    pl_op op;
    return name && pl_op_from_name(name, &op) ? (int32_t)op : -1;
}

PL_API pl_status pl_op_operand(int32_t op, int32_t k, const char **name, const char **dtypes, size_t cap,
                               size_t *n) {
    const pl_op_schema *s = op_at(op);
    if (!n) return pl_errorf(PL_ERR_INVALID_ARG, "pl_op_operand: n is NULL");
    *n = 0;
    if (!s) return pl_errorf(PL_ERR_INVALID_ARG, "no op %d (there are %d)", op, (int)PL_OP_COUNT);
    if (k < -1 || k >= s->n_src) return pl_errorf(PL_ERR_INVALID_ARG, "op %s has no input %d (it has %d)", s->name, k, s->n_src);
    if (name) *name = k < 0 ? "output" : s->src_names[k] ? s->src_names[k] : "";
    /* the schema's mask, bit t = dtype id t, in id order */
    uint64_t mask = k < 0 ? s->dst_dtypes : s->src_dtypes[k];
    for (uint32_t t = 0; t < PL_DTYPE_COUNT; t++)
        if ((mask >> t) & 1) {
            const pl_dtype_traits *tr = pl_dtype_get(t);
            if (tr) push_name(dtypes, cap, n, tr->name);
        }
    return PL_OK;
}
