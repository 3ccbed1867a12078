/* The harness shared by the prepared-layout matmul benchmarks (bench_packed.c,
 * bench_iq_decode.c): for each dtype of a list, a K x N weight and M
 * activation rows, timed on the cpu backend with the weight as stored and
 * with its prepared (repacked) layout.
 * "hot": one weight matrix, cache-resident after the first call; "cold":
 * rotating over copies that exceed the last-level cache (what decode sees).
 * Reports the best of repeated runs, thread CPU time by default (robust on a
 * loaded machine; BENCH_WALL=1 for wall time).
 * Arguments: [K N [M...]]; env BENCH_TYPES (a comma list of dtype names),
 * BENCH_THREADS (default 1). A bench supplies its dtype list and how the
 * first weight copy is filled (pl_bench_fill_fn). */
#ifndef PL_BENCH_KERNEL_UTIL_H
#define PL_BENCH_KERNEL_UTIL_H
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include "backends/cpu/cpu_internal.h"
#include "core/threadpool.h"
#include "kernels/abi.h"
#include "quant/quant.h"
#include "ophelpers.h"

extern const pl_backend pl_backend_cpu;

typedef struct pl_bench_args {
    int64_t K, N;
    int64_t Ms[8];   /* activation rows per run */
    int nM;
    int nth;
    clockid_t clock;
} pl_bench_args;

/* Fill w (N rows of row bytes, dtype dt) from wf (N x K normal floats) or rng. */
typedef void (*pl_bench_fill_fn)(pl_rng *rng, pl_dtype dt, const float *wf, char *w, int64_t K, int64_t N, size_t row);

static inline pl_bench_args pl_bench_parse(int argc, char **argv) {
    pl_bench_args a = {.K = 1024, .N = 3072, .Ms = {1, 512}, .nM = 2, .clock = CLOCK_THREAD_CPUTIME_ID};
    if (getenv("BENCH_WALL")) a.clock = CLOCK_MONOTONIC;
    if (argc >= 3) { a.K = atoll(argv[1]); a.N = atoll(argv[2]); }
    if (argc >= 4) { a.nM = 0; for (int i = 3; i < argc && a.nM < 8; i++) a.Ms[a.nM++] = atoll(argv[i]); }
    a.nth = getenv("BENCH_THREADS") ? atoi(getenv("BENCH_THREADS")) : 1;
    return a;
}

static inline double pl_bench_now(clockid_t clock) {
    struct timespec ts;
    clock_gettime(clock, &ts);
    return ts.tv_sec + ts.tv_nsec * 1e-9;
}

/* n_copies copies of one weight (the first filled by fill), page-aligned. */
static inline char **pl_bench_weight_copies(pl_rng *rng, pl_dtype dt, const float *wf, const pl_bench_args *a,
                                            pl_bench_fill_fn fill, size_t row, int n_copies) {
    const size_t wbytes = row * (size_t)a->N;
    char **copies = malloc(n_copies * sizeof *copies);
    for (int c = 0; c < n_copies; c++) {
        copies[c] = aligned_alloc(4096, (wbytes + 4095) & ~(size_t)4095);
        if (c == 0) fill(rng, dt, wf, copies[0], a->K, a->N, row);
        else memcpy(copies[c], copies[0], wbytes);
    }
    return copies;
}

/* Best (and, cold, mean) seconds of k->run on node: hot on copy 0, cold
 * rotating over the copies, each copy run in its own context. */
static inline void pl_bench_time(const pl_kernel *k, pl_node *node, pl_tensor *w, char **copies, pl_exec_ctx **ctxs,
                                 int n_copies, void *wb, size_t work, int64_t M, clockid_t clock, double res[2],
                                 double *mean_cold) {
    for (int cold = 0; cold < 2; cold++) {
        double best = 1e30, sum = 0;
        int reps = M == 1 ? 400 : 6, c = 0;
        for (int rep = -2; rep < reps; rep++) {
            if (cold) c = (c + 1) % n_copies;
            w->data = copies[c];
            ctxs[c]->work = wb;
            ctxs[c]->work_size = work;
            double t0 = pl_bench_now(clock);
            k->run(ctxs[c], node);
            double dt_ = pl_bench_now(clock) - t0;
            if (rep >= 0 && dt_ < best) best = dt_;
            if (rep >= 0) sum += dt_;
        }
        res[cold] = best;
        if (cold) *mean_cold = sum / reps;
    }
}

/* The whole benchmark: every dtype of types (those in BENCH_TYPES if set),
 * original then prepared layout, every M; one line per (dtype, layout, M). */
static inline int pl_bench_matmul_main(int argc, char **argv, const pl_dtype *types, size_t n_types,
                                       pl_bench_fill_fn fill) {
    const pl_bench_args a = pl_bench_parse(argc, argv);
    const int64_t K = a.K, N = a.N;
    const int nth = a.nth;
    pl_rng rng = {7};
    float *wf = malloc((size_t)(K * N) * 4);
    pl_fill_normal(&rng, wf, K * N, 1.0f);
    printf("K=%lld N=%lld threads=%d (%s time)\n", (long long)K, (long long)N, nth,
           a.clock == CLOCK_MONOTONIC ? "wall" : "thread cpu");
    printf("%-5s %5s %-8s | %9s %8s | %9s %8s\n", "dtype", "M", "layout", "hot GOP/s", "GB/s", "cold GOP/s", "GB/s");
    for (size_t d = 0; d < n_types; d++) {
        const pl_dtype dt = types[d];
        const char *only = getenv("BENCH_TYPES");
        if (only && !strstr(only, pl_dtype_name(dt))) continue;
        const size_t row = pl_dtype_row_size(dt, K), wbytes = row * (size_t)N;
        int n_copies = (int)(256e6 / wbytes) + 2;
        char **copies = pl_bench_weight_copies(&rng, dt, wf, &a, fill, row, n_copies);
        pl_exec_ctx **ctxs = malloc(n_copies * sizeof *ctxs);
        for (int packed = 0; packed < 2; packed++) {
            pl_tensor w;
            int64_t new_[2] = {K, N};
            /* one context per copy (a context holds one prepared copy per weight) */
            for (int c = 0; c < n_copies; c++) {
                pl_backend_cpu.ctx_create(nth, &ctxs[c]);
                if (packed) {
                    pl_tensor_init(&w, dt, 2, new_, copies[c]);
                    const pl_tensor *ws[1] = {&w};
                    if (pl_backend_cpu.weight_prepare_size(ctxs[c], &w) == 0) { packed = 2; break; }
                    pl_backend_cpu.weight_prepare(ctxs[c], ws, 1, NULL, NULL);
                }
            }
            if (packed == 2) { printf("%-5s (no prepared layout on this cpu)\n", pl_dtype_name(dt)); break; }
            for (int mi = 0; mi < a.nM; mi++) {
                const int64_t M = a.Ms[mi];
                int64_t nex[2] = {K, M}, ney[2] = {N, M};
                pl_tensor x, y;
                float *xd = malloc((size_t)(K * M) * 4), *yd = malloc((size_t)(N * M) * 4);
                pl_fill_normal(&rng, xd, K * M, 1.0f);
                pl_tensor_init(&x, PL_F32, 2, nex, xd);
                pl_tensor_init(&y, PL_F32, 2, ney, yd);
                pl_tensor_init(&w, dt, 2, new_, copies[0]);
                pl_node node = {.op = PL_OP_MATMUL, .src = {&w, &x}, .dst = &y};
                const pl_kernel *k = pl_backend_lookup(&pl_backend_cpu, PL_OP_MATMUL, dt);
                size_t work = k->work_size(&node, nth);
                void *wb = aligned_alloc(64, (work + 63) & ~(size_t)63);
                double res[2], mean_cold = 0;
                pl_bench_time(k, &node, &w, copies, ctxs, n_copies, wb, work, M, a.clock, res, &mean_cold);
                const double ops = 2.0 * K * N * M;
                printf("%-5s %5lld %-8s | %9.1f %8.1f | %9.1f %8.1f | mean cold %8.1f GB/s\n", pl_dtype_name(dt), (long long)M,
                       packed ? "packed" : "original", ops / res[0] * 1e-9, wbytes / res[0] * 1e-9, ops / res[1] * 1e-9,
                       wbytes / res[1] * 1e-9, wbytes / mean_cold * 1e-9);
                fflush(stdout);
                free(xd); free(yd); free(wb);
            }
            for (int c = 0; c < n_copies; c++) { ctxs[c]->work = NULL; pl_backend_cpu.ctx_free(ctxs[c]); }
        }
        for (int c = 0; c < n_copies; c++) free(copies[c]);
        free(copies);
        free(ctxs);
    }
    free(wf);
    return 0;
}
#endif
