#include "cli.h"
#include "pocketllm.h"
#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>

#define PL_CLI_MAX_COMMANDS 64
static const pl_cli_command *pl_cli_commands[PL_CLI_MAX_COMMANDS];
static int pl_cli_n_commands;

void pl_cli_register(const pl_cli_command *cmd) {
    if (pl_cli_n_commands < PL_CLI_MAX_COMMANDS) pl_cli_commands[pl_cli_n_commands++] = cmd;
}

int pl_cli_error(const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    fputs("pocketllm: ", stderr);
    vfprintf(stderr, fmt, ap);
    fputc('\n', stderr);
    va_end(ap);
    return 1;
}

bool pl_cli_opt(int argc, char **argv, int *i, const char *name, const char **val, bool *bad) {
    const char *a = argv[*i];
    size_t n = strlen(name);
    if (strncmp(a, name, n) != 0) return false;
    if (a[n] == '=') { *val = a + n + 1; return true; }
    if (a[n] != 0) return false;
    if (*i + 1 >= argc) {
        pl_cli_error("option %s needs a value", name);
        *bad = true;
        return true;
    }
    *val = argv[++*i];
    return true;
}

bool pl_cli_parse_int(const char *s, long long min, long long max, long long *out) {
    char *end;
    errno = 0;
    long long v = strtoll(s, &end, 10);
    if (errno || end == s || *end || v < min || v > max) return false;
    *out = v;
    return true;
}

bool pl_cli_parse_float(const char *s, double *out) {
    char *end;
    errno = 0;
    double v = strtod(s, &end);
    if (errno || end == s || *end || !isfinite(v)) return false;
    *out = v;
    return true;
}

void pl_cli_json_string(FILE *f, const char *s, size_t len) {
    fputc('"', f);
    const unsigned char *p = (const unsigned char *)s;
    size_t i = 0;
    while (i < len) {
        unsigned char c = p[i];
        if (c == '"') { fputs("\\\"", f); i++; continue; }
        if (c == '\\') { fputs("\\\\", f); i++; continue; }
        if (c < 0x20) {
            switch (c) {
            case '\n': fputs("\\n", f); break;
            case '\r': fputs("\\r", f); break;
            case '\t': fputs("\\t", f); break;
            default: fprintf(f, "\\u%04x", c);
            }
            i++;
            continue;
        }
        if (c < 0x80) { fputc(c, f); i++; continue; }
        /* Validate one UTF-8 sequence; invalid bytes become U+FFFD. */
        int n = c >= 0xF0 && c <= 0xF4 ? 4 : c >= 0xE0 ? 3 : c >= 0xC2 && c <= 0xDF ? 2 : 0;
        if (c >= 0xF5) n = 0;
        bool ok = n > 0 && i + n <= len;
        for (int k = 1; ok && k < n; k++) ok = (p[i + k] & 0xC0) == 0x80;
        if (ok && n == 3) {
            unsigned cp = ((c & 0x0F) << 12) | ((p[i + 1] & 0x3F) << 6) | (p[i + 2] & 0x3F);
            ok = cp >= 0x800 && !(cp >= 0xD800 && cp <= 0xDFFF);
        }
        if (ok && n == 4) {
            unsigned cp = ((c & 0x07) << 18) | ((p[i + 1] & 0x3F) << 12) | ((p[i + 2] & 0x3F) << 6) | (p[i + 3] & 0x3F);
            ok = cp >= 0x10000 && cp <= 0x10FFFF;
        }
        if (ok) { fwrite(p + i, 1, (size_t)n, f); i += (size_t)n; }
        else { fputs("\xEF\xBF\xBD", f); i++; }
    }
    fputc('"', f);
}

static int cmp_cmd(const void *a, const void *b) {
    return strcmp((*(const pl_cli_command *const *)a)->name, (*(const pl_cli_command *const *)b)->name);
}

static void usage(FILE *f) {
    fprintf(f, "usage: pocketllm <command> [options]\n\ncommands:\n");
    for (int i = 0; i < pl_cli_n_commands; i++)
        fprintf(f, "  %-14s %s\n", pl_cli_commands[i]->name, pl_cli_commands[i]->summary);
    fprintf(f, "\n'pocketllm <command> --help' describes a command's options.\n");
}

int main(int argc, char **argv) {
    qsort(pl_cli_commands, (size_t)pl_cli_n_commands, sizeof pl_cli_commands[0], cmp_cmd);
    if (argc < 2 || !strcmp(argv[1], "--help") || !strcmp(argv[1], "-h") || !strcmp(argv[1], "help")) {
        usage(argc < 2 ? stderr : stdout);
        return argc < 2 ? 2 : 0;
    }
    if (!strcmp(argv[1], "--version")) { printf("pocketllm %s\n", pl_version()); return 0; }
    for (int i = 0; i < pl_cli_n_commands; i++)
        if (!strcmp(argv[1], pl_cli_commands[i]->name)) return pl_cli_commands[i]->main(argc - 1, argv + 1);
    pl_cli_error("unknown command '%s' (see 'pocketllm --help')", argv[1]);
    return 2;
}
