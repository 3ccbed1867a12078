/* The tools' two small containers, written once: a whole file read into
 * memory, and a growable array of token ids. (Growable byte text is
 * pl_srv_buf, server_text.h.) */
#ifndef PL_CLI_BUF_H
#define PL_CLI_BUF_H
#include <stddef.h>
#include <stdint.h>

/* The whole file at path, malloc'd with a NUL after its *len bytes (free()).
 * NULL when it cannot be opened or read, or when out of memory; errno says
 * which. */
char *pl_cli_read_file(const char *path, size_t *len);

typedef struct pl_cli_tokens {
    int32_t *p;
    size_t n, cap;
} pl_cli_tokens;

/* Appends n ids. Returns 0, or -1 when out of memory (v unchanged). */
int pl_cli_tokens_add(pl_cli_tokens *v, const int32_t *t, size_t n);

#endif
