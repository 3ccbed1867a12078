#include "testutil.h"
#include <stdlib.h>

int pl_test_passed, pl_test_failed;

int pl_test_summary(const char *name) {
    printf("%s: %d passed, %d failed\n", name, pl_test_passed, pl_test_failed);
    return pl_test_failed ? 1 : 0;
}

const char *pl_fixture(const char *rel) {
    static char buf[4096];
    snprintf(buf, sizeof buf, "%s/%s", PL_TEST_FIXTURES, rel);
    return buf;
}

char *pl_read_file(const char *path, size_t *len) {
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    if (fseek(f, 0, SEEK_END) != 0) { fclose(f); return NULL; }
    long n = ftell(f);
    if (n < 0) { fclose(f); return NULL; }
    rewind(f);
    char *buf = malloc((size_t)n + 1);
    if (!buf) { fclose(f); return NULL; }
    size_t got = fread(buf, 1, (size_t)n, f);
    fclose(f);
    if (got != (size_t)n) { free(buf); return NULL; }
    buf[n] = 0;
    if (len) *len = (size_t)n;
    return buf;
}
