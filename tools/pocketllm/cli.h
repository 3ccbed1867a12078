/* The pocketllm command: each subcommand lives in its own cmd_*.c file and
 * registers itself with PL_CLI_COMMAND, so adding one touches no other file. */
#ifndef PL_CLI_H
#define PL_CLI_H
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>

typedef struct pl_cli_command {
    const char *name;
    const char *summary;
    int (*main)(int argc, char **argv);   /* argv[0] is the subcommand name */
} pl_cli_command;

void pl_cli_register(const pl_cli_command *cmd);

#define PL_CLI_COMMAND(ident, cname, csummary, fn)                                  \
    static const pl_cli_command ident = {cname, csummary, fn};                      \
    __attribute__((constructor)) static void ident##_register(void) { pl_cli_register(&ident); }

/* Prints "pocketllm: <message>" to stderr; returns 1 (the exit status). */
int pl_cli_error(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

/* Small option parser: matches "--name value" and "--name=value".
 * Returns true and sets *val (and advances *i) when argv[*i] is that option;
 * prints an error and sets *bad if the value is missing. */
bool pl_cli_opt(int argc, char **argv, int *i, const char *name, const char **val, bool *bad);
bool pl_cli_parse_int(const char *s, long long min, long long max, long long *out);
bool pl_cli_parse_float(const char *s, double *out);
/* Checks --device before loading (cli_device.c): 0 if the backend exists
 * and its probe finds the device; else prints a one-line error and returns
 * 1 (the exit status). */
int pl_cli_check_device(const char *cmd, const char *device);
/* The KV cache type options of run, bench, serve and fit (cli_cache.c):
 * --cache-type-k / -ctk and --cache-type-v / -ctv, each f16 | q8_0 | q4_0,
 * as llama.cpp's. Returns true if argv[*i] was one of them (the value goes to
 * *k or *v); a missing or unknown type prints an error and sets *bad, so a
 * typo stops the command before anything is loaded. */
bool pl_cli_cache_opt(int argc, char **argv, int *i, const char **k, const char **v, bool *bad);
/* The usage lines for those two options. */
extern const char pl_cli_cache_usage[];
/* JSON string escaping of arbitrary bytes (invalid UTF-8 becomes U+FFFD). */
void pl_cli_json_string(FILE *f, const char *s, size_t len);

#endif
