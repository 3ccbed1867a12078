/*
 * What this build and this machine can do, before anything goes wrong:
 *   devices        what this machine can open (filesystem/CPUID probes only)
 *   backends       every backend, implemented or declared, and its kernels
 *   architectures  the model architectures and the GGUF keys each reads
 *   ops            op schemas and, per backend, the implemented dtypes
 * Every listing is generated from the dispatch tables themselves, and each
 * takes --json (shapes documented in README.md).
 */
#include "cli.h"
#include "kernels/abi.h"
#include "models/arch.h"
#include <jansson.h>
#include <stdlib.h>
#include <string.h>

static bool backend_implemented(const pl_backend *b) { return b->ctx_create != NULL && b->n_kernels > 0; }

static bool backend_probe(const pl_backend *b, char *detail, size_t cap) {
    if (!b->probe) {
        snprintf(detail, cap, "host memory");
        return true;
    }
    return b->probe(detail, cap);
}

static int print_json(json_t *j) {
    char *s = json_dumps(j, JSON_INDENT(2) | JSON_PRESERVE_ORDER);
    json_decref(j);
    if (!s) return pl_cli_error("out of memory");
    puts(s);
    free(s);
    return 0;
}

static bool want_json(int argc, char **argv, int *rc, const char *cmd, const char *usage) {
    bool json = false;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--json")) json = true;
        else if (!strcmp(argv[i], "--help")) { puts(usage); *rc = 0; return false; }
        else { *rc = pl_cli_error("%s: unknown option '%s'", cmd, argv[i]); return false; }
    }
    *rc = json ? 1 : 2;
    return true;
}

/* Kernel dtypes of backend b for op, as a JSON array of names. */
static json_t *op_dtypes(const pl_backend *b, pl_op op) {
    json_t *a = json_array();
    for (size_t k = 0; k < b->n_kernels; k++)
        if (b->kernels[k].op == op)
            json_array_append_new(a, json_string(b->kernels[k].key == PL_DTYPE_ANY ? "any" : pl_dtype_name(b->kernels[k].key)));
    return a;
}

static int cmd_devices(int argc, char **argv) {
    int mode;
    if (!want_json(argc, argv, &mode, "devices", "usage: pocketllm devices [--json]\n"
                   "What this machine can open. Probes only look at the filesystem and CPUID.")) return mode;
    json_t *arr = json_array();
    for (const pl_backend *const *b = pl_backends(); *b; b++) {
        char detail[256] = "";
        bool avail = backend_probe(*b, detail, sizeof detail);
        json_t *o = json_object();
        json_object_set_new(o, "name", json_string((*b)->name));
        json_object_set_new(o, "available", json_boolean(avail));
        json_object_set_new(o, "implemented", json_boolean(backend_implemented(*b)));
        json_object_set_new(o, "usable", json_boolean(avail && backend_implemented(*b)));
        json_object_set_new(o, "detail", json_string(detail));
        if ((*b)->awaits) json_object_set_new(o, "awaits", json_string((*b)->awaits));
        json_array_append_new(arr, o);
    }
    if (mode == 1) return print_json(arr);
    printf("%-9s %-10s %-12s %s\n", "backend", "available", "implemented", "detail");
    size_t i;
    json_t *o;
    json_array_foreach(arr, i, o) {
        printf("%-9s %-10s %-12s %s: %s\n", json_string_value(json_object_get(o, "name")),
               json_is_true(json_object_get(o, "available")) ? "yes" : "no",
               json_is_true(json_object_get(o, "implemented")) ? "yes" : "no",
               json_string_value(json_object_get(o, "name")), json_string_value(json_object_get(o, "detail")));
    }
    json_decref(arr);
    return 0;
}

static int cmd_backends(int argc, char **argv) {
    int mode;
    if (!want_json(argc, argv, &mode, "backends", "usage: pocketllm backends [--json]")) return mode;
    json_t *arr = json_array();
    for (const pl_backend *const *b = pl_backends(); *b; b++) {
        json_t *o = json_object();
        json_object_set_new(o, "name", json_string((*b)->name));
        json_object_set_new(o, "summary", json_string((*b)->summary ? (*b)->summary : ""));
        json_object_set_new(o, "status", json_string(backend_implemented(*b) ? "implemented" : "declared"));
        if ((*b)->awaits) json_object_set_new(o, "awaits", json_string((*b)->awaits));
        json_t *ops = json_object();
        for (int op = 0; op < PL_OP_COUNT; op++) {
            json_t *d = op_dtypes(*b, (pl_op)op);
            if (json_array_size(d)) json_object_set_new(ops, pl_op_name((pl_op)op), d);
            else json_decref(d);
        }
        json_object_set_new(o, "ops", ops);
        json_array_append_new(arr, o);
    }
    if (mode == 1) return print_json(arr);
    size_t i;
    json_t *o;
    json_array_foreach(arr, i, o) {
        printf("%s (%s): %s\n", json_string_value(json_object_get(o, "name")),
               json_string_value(json_object_get(o, "status")), json_string_value(json_object_get(o, "summary")));
        if (json_object_get(o, "awaits")) printf("  awaits: %s\n", json_string_value(json_object_get(o, "awaits")));
        const char *op;
        json_t *d;
        json_object_foreach(json_object_get(o, "ops"), op, d) {
            printf("  %-10s", op);
            size_t k;
            json_t *t;
            json_array_foreach(d, k, t) printf(" %s", json_string_value(t));
            putchar('\n');
        }
    }
    json_decref(arr);
    return 0;
}

static int cmd_architectures(int argc, char **argv) {
    int mode;
    if (!want_json(argc, argv, &mode, "architectures", "usage: pocketllm architectures [--json]")) return mode;
    json_t *arr = json_array();
    for (const pl_arch *const *a = pl_archs(); *a; a++) {
        json_t *o = json_object(), *keys = json_array();
        json_object_set_new(o, "name", json_string((*a)->name));
        json_object_set_new(o, "summary", json_string((*a)->summary));
        for (int k = 0; (*a)->keys && (*a)->keys[k]; k++) {
            char buf[256];
            const char *key = (*a)->keys[k], *p = strstr(key, "{arch}");
            if (p) snprintf(buf, sizeof buf, "%.*s%s%s", (int)(p - key), key, (*a)->name, p + 6);
            else snprintf(buf, sizeof buf, "%s", key);
            json_array_append_new(keys, json_string(buf));
        }
        json_object_set_new(o, "keys", keys);
        json_array_append_new(arr, o);
    }
    if (mode == 1) return print_json(arr);
    size_t i;
    json_t *o;
    json_array_foreach(arr, i, o) {
        printf("%s: %s\n", json_string_value(json_object_get(o, "name")), json_string_value(json_object_get(o, "summary")));
        size_t k;
        json_t *key;
        json_array_foreach(json_object_get(o, "keys"), k, key) printf("  %s\n", json_string_value(key));
    }
    json_decref(arr);
    return 0;
}

static json_t *dtype_mask_json(uint64_t mask) {
    json_t *a = json_array();
    for (uint32_t t = 0; t < PL_DTYPE_COUNT; t++)
        if ((mask >> t) & 1) {
            const pl_dtype_traits *tr = pl_dtype_get(t);
            if (tr) json_array_append_new(a, json_string(tr->name));
        }
    return a;
}

static int cmd_ops(int argc, char **argv) {
    const char *only_op = NULL, *only_dev = NULL;
    bool json = false, bad = false;
    for (int i = 1; i < argc && !bad; i++) {
        if (!strcmp(argv[i], "--json")) json = true;
        else if (!strcmp(argv[i], "--help")) {
            puts("usage: pocketllm ops [--op NAME] [--device NAME] [--json]");
            return 0;
        } else if (pl_cli_opt(argc, argv, &i, "--op", &only_op, &bad)) {}
        else if (pl_cli_opt(argc, argv, &i, "--device", &only_dev, &bad)) {}
        else return pl_cli_error("ops: unknown option '%s'", argv[i]);
    }
    if (bad) return 1;
    pl_op op_filter = PL_OP_COUNT;
    if (only_op && !pl_op_from_name(only_op, &op_filter)) return pl_cli_error("ops: unknown op '%s'", only_op);
    if (only_dev && !pl_backend_find(only_dev)) return pl_cli_error("ops: unknown backend '%s'", only_dev);
    json_t *arr = json_array();
    for (int op = 0; op < PL_OP_COUNT; op++) {
        if (only_op && op != (int)op_filter) continue;
        const pl_op_schema *s = pl_op_schema_get((pl_op)op);
        json_t *o = json_object(), *inputs = json_array(), *impl = json_object();
        json_object_set_new(o, "name", json_string(s->name));
        json_object_set_new(o, "summary", json_string(s->summary ? s->summary : ""));
        for (int k = 0; k < s->n_src; k++) {
            json_t *in = json_object();
            json_object_set_new(in, "name", json_string(s->src_names[k] ? s->src_names[k] : ""));
            json_object_set_new(in, "dtypes", dtype_mask_json(s->src_dtypes[k]));
            json_array_append_new(inputs, in);
        }
        json_object_set_new(o, "inputs", inputs);
        json_object_set_new(o, "output_dtypes", dtype_mask_json(s->dst_dtypes));
        json_object_set_new(o, "kernel_selected_by",
                            json_string(s->key_operand < 0 ? "output" : s->src_names[s->key_operand]));
        json_object_set_new(o, "shape_rule", json_string(s->shape_rule ? s->shape_rule : ""));
        json_object_set_new(o, "params", json_string(s->params ? s->params : ""));
        for (const pl_backend *const *b = pl_backends(); *b; b++)
            if (!only_dev || !strcmp(only_dev, (*b)->name)) json_object_set_new(impl, (*b)->name, op_dtypes(*b, (pl_op)op));
        json_object_set_new(o, "implemented", impl);
        json_array_append_new(arr, o);
    }
    if (json) return print_json(arr);
    size_t i;
    json_t *o;
    json_array_foreach(arr, i, o) {
        printf("%s: %s\n", json_string_value(json_object_get(o, "name")), json_string_value(json_object_get(o, "summary")));
        size_t k;
        json_t *in;
        json_array_foreach(json_object_get(o, "inputs"), k, in) {
            printf("  input %-8s", json_string_value(json_object_get(in, "name")));
            size_t t;
            json_t *d;
            json_array_foreach(json_object_get(in, "dtypes"), t, d) printf(" %s", json_string_value(d));
            putchar('\n');
        }
        printf("  shapes:  %s\n", json_string_value(json_object_get(o, "shape_rule")));
        if (*json_string_value(json_object_get(o, "params")))
            printf("  params:  %s\n", json_string_value(json_object_get(o, "params")));
        printf("  kernel selected by the dtype of: %s\n", json_string_value(json_object_get(o, "kernel_selected_by")));
        const char *bn;
        json_t *d;
        json_object_foreach(json_object_get(o, "implemented"), bn, d) {
            printf("  %-8s", bn);
            if (!json_array_size(d)) printf(" (none)");
            size_t t;
            json_t *dt;
            json_array_foreach(d, t, dt) printf(" %s", json_string_value(dt));
            putchar('\n');
        }
    }
    json_decref(arr);
    return 0;
}

PL_CLI_COMMAND(pl_cmd_devices, "devices", "what this machine can open, and what each backend lacks", cmd_devices)
PL_CLI_COMMAND(pl_cmd_backends, "backends", "every backend, its status and the ops/dtypes it implements", cmd_backends)
PL_CLI_COMMAND(pl_cmd_architectures, "architectures", "model architectures and the GGUF keys they read", cmd_architectures)
PL_CLI_COMMAND(pl_cmd_ops, "ops", "op schemas and per-backend implemented dtypes", cmd_ops)
