/* Minimal test harness: CHECK records a failure and keeps going; every test
 * program ends with pl_test_summary(), which prints "N passed, N failed" and
 * returns the exit status. */
#ifndef PL_TESTUTIL_H
#define PL_TESTUTIL_H
#include <stdio.h>
#include <stddef.h>

extern int pl_test_passed, pl_test_failed;

#define CHECK(cond, ...) do { \
    if (cond) { pl_test_passed++; } \
    else { pl_test_failed++; fprintf(stderr, "FAIL %s:%d: %s: ", __FILE__, __LINE__, #cond); \
           fprintf(stderr, __VA_ARGS__); fputc('\n', stderr); } \
  } while (0)

int pl_test_summary(const char *name);
/* Path of a fixture file (static buffer, valid until the next call). */
const char *pl_fixture(const char *rel);
/* Reads a whole file; returns NULL on failure. Caller frees. */
char *pl_read_file(const char *path, size_t *len);

#endif
