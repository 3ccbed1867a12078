/* Helpers shared by test_ops.c and test_quant.c (header-only: each test is
 * its own executable linked with testutil.c only). Deterministic RNG, random
 * data, error metrics. */
#ifndef PL_TESTS_OPHELPERS_H
#define PL_TESTS_OPHELPERS_H
#include <math.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include "kernels/abi.h"
#include "kernels/dtype.h"
#include "quant/quant.h"

typedef struct pl_rng { uint64_t s; } pl_rng;

static inline uint64_t pl_rng_u64(pl_rng *r) {
    /* splitmix64: good enough for test data, and reproducible everywhere */
    uint64_t z = (r->s += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

/* Uniform in [0, 1). */
static inline double pl_rng_unif(pl_rng *r) { return (double)(pl_rng_u64(r) >> 11) * 0x1.0p-53; }

/* Uniform integer in [lo, hi]. */
static inline int64_t pl_rng_int(pl_rng *r, int64_t lo, int64_t hi) {
    return lo + (int64_t)(pl_rng_u64(r) % (uint64_t)(hi - lo + 1));
}

/* Standard normal (Box-Muller). */
static inline double pl_rng_normal(pl_rng *r) {
    double u1 = pl_rng_unif(r), u2 = pl_rng_unif(r);
    if (u1 < 1e-300) u1 = 1e-300;
    return sqrt(-2.0 * log(u1)) * cos(6.283185307179586 * u2);
}

static inline void pl_fill_normal(pl_rng *r, float *x, int64_t n, float sigma) {
    for (int64_t i = 0; i < n; i++) x[i] = (float)(sigma * pl_rng_normal(r));
}

static inline void pl_fill_unif(pl_rng *r, float *x, int64_t n, float lo, float hi) {
    for (int64_t i = 0; i < n; i++) x[i] = (float)(lo + (hi - lo) * pl_rng_unif(r));
}

/* Normalized mean squared error sum((a-b)^2) / sum(b^2), b the reference.
 * Returns INFINITY if a has a NaN/Inf, and 0 for two all-zero vectors. */
static inline double pl_nmse(const float *a, const float *b, int64_t n) {
    double num = 0, den = 0;
    for (int64_t i = 0; i < n; i++) {
        if (!isfinite(a[i]) || !isfinite(b[i])) return INFINITY;
        const double d = (double)a[i] - (double)b[i];
        num += d * d;
        den += (double)b[i] * (double)b[i];
    }
    if (den == 0) return num == 0 ? 0 : INFINITY;
    return num / den;
}

/* sqrt(mean((a-b)^2)) / sqrt(mean(b^2)): relative RMS error. */
static inline double pl_rel_rmse(const float *a, const float *b, int64_t n) {
    return sqrt(pl_nmse(a, b, n));
}

/* Random bytes for one block of dtype t, redrawn (up to 1000 times) until
 * the block decodes to finite, moderate values (|x| < 1e3). For the types
 * without a reference quantizer (IQ / TQ): random bits reach every grid
 * entry, sign pattern and scale. */
static inline void pl_random_block(pl_rng *r, pl_dtype t, unsigned char *blk) {
    const pl_dtype_traits *tr = pl_dtype_get(t);
    float dec[256];
    for (int attempt = 0; attempt < 1000; attempt++) {
        for (size_t k = 0; k < tr->type_size; k++) blk[k] = (unsigned char)pl_rng_u64(r);
        pl_dequantize_row(t, blk, dec, tr->block_size);
        bool ok = true;
        for (int64_t k = 0; k < tr->block_size; k++) ok = ok && isfinite(dec[k]) && fabsf(dec[k]) < 1e3f;
        if (ok) return;
    }
}

/* Rows of weights in any readable dtype: Gaussian values encoded with the
 * reference quantizer; for a dtype without one (the IQ / TQ types), random
 * blocks (pl_random_block). */
static inline void pl_fill_rows(pl_tensor *t, pl_rng *r, float sigma) {
    const int64_t n = t->ne[0];
    float *tmp = (float *)malloc((size_t)n * sizeof *tmp);
    const pl_dtype_traits *tr = pl_dtype_get(t->dtype);
    for (int64_t i2 = 0; i2 < t->ne[2]; i2++)
        for (int64_t i1 = 0; i1 < t->ne[1]; i1++) {
            unsigned char *row = (unsigned char *)pl_tensor_row(t, i1, i2, 0);
            pl_fill_normal(r, tmp, n, sigma);
            if (pl_quantize_row(t->dtype, tmp, row, n)) continue;
            for (int64_t b = 0; b < n / tr->block_size; b++) pl_random_block(r, t->dtype, row + b * tr->type_size);
        }
    free(tmp);
}

#endif
