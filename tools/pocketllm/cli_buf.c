/* cli_buf.h: the file reader and the token array of the tools. */
#include "cli_buf.h"
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

char *pl_cli_read_file(const char *path, size_t *len) {
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    size_t cap = 1 << 16, n = 0, got;
    char *buf = malloc(cap + 1);
    /* Read until EOF, doubling; the +1 keeps room for the NUL. */
    while (buf && (got = fread(buf + n, 1, cap - n, f)) > 0) {
        n += got;
        if (n == cap) {
            char *nb = realloc(buf, 2 * cap + 1);
            if (!nb) {
                free(buf);
                buf = NULL;
                errno = ENOMEM;
                break;
            }
            buf = nb;
            cap *= 2;
        }
    }
    if (buf && ferror(f)) {
        free(buf);
        buf = NULL;
        errno = EIO;
    } else if (!buf && errno != ENOMEM) {
        errno = ENOMEM;
    }
    fclose(f);
    if (!buf) return NULL;
    buf[n] = 0;
    *len = n;
    return buf;
}

int pl_cli_tokens_add(pl_cli_tokens *v, const int32_t *t, size_t n) {
    if (n > SIZE_MAX / sizeof *t - v->n) return -1;
    if (v->n + n > v->cap) {
        size_t cap = v->cap ? v->cap : 256;
        while (cap < v->n + n) cap *= 2;
        int32_t *q = realloc(v->p, cap * sizeof *q);
        if (!q) return -1;
        v->p = q;
        v->cap = cap;
    }
    if (n) memcpy(v->p + v->n, t, n * sizeof *t);
    v->n += n;
    return 0;
}
