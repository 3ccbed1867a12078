/*
 * What this build and this machine can do, before anything goes wrong:
 *   devices        what this machine can open (filesystem/CPUID probes only)
 *   backends       every backend, implemented or declared, and its kernels
 *   architectures  the model architectures and the GGUF keys each reads
 *   ops            op schemas and, per backend, the implemented dtypes
 * Every listing is generated from the dispatch tables themselves (through
 * the public introspection calls of pocketllm.h), and each takes --json
 * (shapes documented in README.md).
 */
#include "cli.h"
#include "pocketllm.h"
#include <jansson.h>
#include <stdlib.h>
#include <string.h>

/* Static strings from the library; longer lists than any op has are a bug. */
#define MAX_DTYPES 64

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

/* A JSON array of names[0..n) (at most MAX_DTYPES were returned). */
static json_t *names_json(const char **names, size_t n) {
    json_t *a = json_array();
    for (size_t k = 0; k < n && k < MAX_DTYPES; k++) json_array_append_new(a, json_string(names[k]));
    return a;
}

/* Kernel dtypes of backend b for op, as a JSON array of names. */
static json_t *op_dtypes(int32_t b, int32_t op) {
    const char *names[MAX_DTYPES];
    size_t n = 0;
    if (pl_backend_op_dtypes(b, op, names, MAX_DTYPES, &n) != PL_OK) n = 0;
    return names_json(names, n);
}

static int cmd_devices(int argc, char **argv) {
    int mode;
    if (!want_json(argc, argv, &mode, "devices", "usage: pocketllm devices [--json]\n"
                   "What this machine can open. Probes only look at the filesystem and CPUID.")) return mode;
    json_t *arr = json_array();
    for (int32_t b = 0; b < pl_backend_count(); b++) {
        pl_backend_info info;
        char detail[256] = "";
        bool avail = false;
        if (pl_backend_get(b, &info) != PL_OK || pl_device_probe(b, &avail, detail, sizeof detail) != PL_OK) {
            json_decref(arr);
            return pl_cli_error("devices: %s", pl_last_error());
        }
        json_t *o = json_object();
        json_object_set_new(o, "name", json_string(info.name));
        json_object_set_new(o, "available", json_boolean(avail));
        json_object_set_new(o, "implemented", json_boolean(info.implemented));
        json_object_set_new(o, "usable", json_boolean(avail && info.implemented));
        json_object_set_new(o, "detail", json_string(detail));
        if (info.awaits) json_object_set_new(o, "awaits", json_string(info.awaits));
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
    for (int32_t b = 0; b < pl_backend_count(); b++) {
        pl_backend_info info;
        if (pl_backend_get(b, &info) != PL_OK) {
            json_decref(arr);
            return pl_cli_error("backends: %s", pl_last_error());
        }
        json_t *o = json_object();
        json_object_set_new(o, "name", json_string(info.name));
        json_object_set_new(o, "summary", json_string(info.summary));
        json_object_set_new(o, "status", json_string(info.implemented ? "implemented" : "declared"));
        if (info.awaits) json_object_set_new(o, "awaits", json_string(info.awaits));
        json_t *ops = json_object();
        for (int32_t op = 0; op < pl_op_count(); op++) {
            pl_op_info oi;
            json_t *d = op_dtypes(b, op);
            if (json_array_size(d) && pl_op_get(op, &oi) == PL_OK) json_object_set_new(ops, oi.name, d);
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
    for (int32_t a = 0; a < pl_arch_count(); a++) {
        pl_arch_info info;
        if (pl_arch_get(a, &info) != PL_OK) {
            json_decref(arr);
            return pl_cli_error("architectures: %s", pl_last_error());
        }
        json_t *o = json_object(), *keys = json_array();
        json_object_set_new(o, "name", json_string(info.name));
        json_object_set_new(o, "summary", json_string(info.summary));
        for (int32_t k = 0; k < info.n_keys; k++) {
            char buf[256];
            if (pl_arch_key(a, k, buf, sizeof buf, NULL) != PL_OK) {
                json_decref(keys);
                json_decref(o);
                json_decref(arr);
                return pl_cli_error("architectures: %s", pl_last_error());
            }
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

/* Operand k of op (-1: the output): its name and allowed dtypes. */
static json_t *operand_dtypes(int32_t op, int32_t k, const char **name) {
    const char *names[MAX_DTYPES];
    size_t n = 0;
    if (pl_op_operand(op, k, name, names, MAX_DTYPES, &n) != PL_OK) n = 0;
    return names_json(names, n);
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
    int32_t op_filter = only_op ? pl_op_index(only_op) : -1;
    if (only_op && op_filter < 0) return pl_cli_error("ops: unknown op '%s'", only_op);
    if (only_dev && pl_backend_index(only_dev) < 0) return pl_cli_error("ops: unknown backend '%s'", only_dev);
    json_t *arr = json_array();
    for (int32_t op = 0; op < pl_op_count(); op++) {
        if (only_op && op != op_filter) continue;
        pl_op_info s;
        if (pl_op_get(op, &s) != PL_OK) {
            json_decref(arr);
            return pl_cli_error("ops: %s", pl_last_error());
        }
        json_t *o = json_object(), *inputs = json_array(), *impl = json_object();
        json_object_set_new(o, "name", json_string(s.name));
        json_object_set_new(o, "summary", json_string(s.summary));
        for (int32_t k = 0; k < s.n_inputs; k++) {
            json_t *in = json_object();
            const char *name = "";
            json_t *dtypes = operand_dtypes(op, k, &name);
            json_object_set_new(in, "name", json_string(name));
            json_object_set_new(in, "dtypes", dtypes);
            json_array_append_new(inputs, in);
        }
        json_object_set_new(o, "inputs", inputs);
        const char *key_name = "";
        size_t n_key_dtypes;
        json_object_set_new(o, "output_dtypes", operand_dtypes(op, -1, NULL));
        pl_op_operand(op, s.key_input, &key_name, NULL, 0, &n_key_dtypes);
        json_object_set_new(o, "kernel_selected_by", json_string(key_name));
        json_object_set_new(o, "shape_rule", json_string(s.shape_rule));
        json_object_set_new(o, "params", json_string(s.params));
        for (int32_t b = 0; b < pl_backend_count(); b++) {
            pl_backend_info info;
            if (pl_backend_get(b, &info) == PL_OK && (!only_dev || !strcmp(only_dev, info.name)))
                json_object_set_new(impl, info.name, op_dtypes(b, op));
        }
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
