/* Matmul micro-benchmark of the cpu backend: GFLOP/s (and weight GB/s) per
 * weight dtype for a Qwen3-0.6B-like projection (K=1024, N=3072 by default)
 * at M = 1 (decode) and M = 64 (prefill), 1 and 2 threads.
 *
 * "hot" reuses one weight matrix (cache-resident after the first call);
 * "cold" rotates over enough copies to exceed the last-level cache, which is
 * what decode sees in a real model. Build (after building build-cpu):
 *   gcc -O2 -std=c11 -D_GNU_SOURCE -Iinclude -Isrc -Itests bench/bench_matmul.c \
 *       build-cpu/lib/libpocketllm.a -ljansson -lm -lpthread -o build-cpu/bench_matmul
 * Usage: bench_matmul [K N [threads...]]
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include "kernels/abi.h"
#include "quant/quant.h"
#include "core/cpu_features.h"
#include "ophelpers.h"

extern const pl_backend pl_backend_cpu;

/* BENCH_CPUTIME=1: process CPU time instead of wall time, divided by the
 * thread count: what the wall time would be on dedicated cores, on a busy
 * machine where wall time is meaningless (time spent descheduled is not
 * counted; time spent spin-waiting is, so this errs on the slow side). */
static clockid_t g_clock = CLOCK_MONOTONIC;

static double now_s(void) {
    struct timespec ts;
    clock_gettime(g_clock, &ts);
    return ts.tv_sec + ts.tv_nsec * 1e-9;
}

static int cmp_d(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

int main(int argc, char **argv) {
    int64_t K = 1024, N = 3072;
    int threads[8] = {1, 2};
    int n_threads = 2;
    if (getenv("BENCH_CPUTIME")) g_clock = CLOCK_PROCESS_CPUTIME_ID;
    if (argc >= 3) { K = atoll(argv[1]); N = atoll(argv[2]); }
    if (argc >= 4) { n_threads = 0; for (int i = 3; i < argc && n_threads < 8; i++) threads[n_threads++] = atoi(argv[i]); }
    printf("cpu: %s; K=%lld N=%lld\n", pl_cpu_features_get()->description, (long long)K, (long long)N);
    const pl_dtype types[] = {PL_F32, PL_F16, PL_BF16, PL_Q8_0, PL_Q4_K, PL_Q6_K};
    const int Ms[] = {1, 64};
    pl_rng rng = {7};
    float *wf = malloc(K * N * 4);
    pl_fill_normal(&rng, wf, K * N, 1.0f);
    printf("%-5s %3s %3s | %10s %8s | %10s %8s\n", "dtype", "M", "thr", "hot GF/s", "GB/s", "cold GF/s", "GB/s");
    for (size_t d = 0; d < sizeof types / sizeof types[0]; d++) {
        const pl_dtype dt = types[d];
        const char *only = getenv("BENCH_TYPES");   /* e.g. "q4_K,q6_K" */
        if (only && !strstr(only, pl_dtype_name(dt))) continue;
        const size_t row = pl_dtype_row_size(dt, K), wbytes = row * N;
        /* copies to cover ~512 MB: the L3 of this EPYC may be much larger than the 32 MB lscpu shows */
        int n_copies = (int)(512e6 / wbytes) + 1;
        if (n_copies < 2) n_copies = 2;
        char **copies = malloc(n_copies * sizeof *copies);
        for (int c = 0; c < n_copies; c++) {
            copies[c] = aligned_alloc(64, (wbytes + 63) & ~(size_t)63);
            if (c == 0) for (int64_t n = 0; n < N; n++) pl_quantize_row(dt, wf + n * K, copies[0] + n * row, K);
            else memcpy(copies[c], copies[0], wbytes);
        }
        for (size_t mi = 0; mi < sizeof Ms / sizeof Ms[0]; mi++) {
            const int64_t M = Ms[mi];
            int64_t nex[2] = {K, M}, ney[2] = {N, M}, new_[2] = {K, N};
            pl_tensor w, x, y;
            pl_tensor_init(&w, dt, 2, new_, copies[0]);
            float *xd = malloc(K * M * 4), *yd = malloc(N * M * 4);
            pl_fill_normal(&rng, xd, K * M, 1.0f);
            pl_tensor_init(&x, PL_F32, 2, nex, xd);
            pl_tensor_init(&y, PL_F32, 2, ney, yd);
            pl_node node = {.op = PL_OP_MATMUL, .src = {&w, &x}, .dst = &y};
            const pl_kernel *k = pl_backend_lookup(&pl_backend_cpu, PL_OP_MATMUL, dt);
            for (int ti = 0; ti < n_threads; ti++) {
                pl_exec_ctx *ctx;
                pl_backend_cpu.ctx_create(threads[ti], &ctx);
                ctx->work_size = k->work_size ? k->work_size(&node, threads[ti]) : 0;
                ctx->work = ctx->work_size ? aligned_alloc(64, (ctx->work_size + 63) & ~(size_t)63) : NULL;
                double res[2];
                for (int cold = 0; cold < 2; cold++) {
                    /* repeat for ~0.4 s of samples; report the minimum */
                    double samples[4096];
                    int ns = 0;
                    struct timespec ts0;
                    clock_gettime(CLOCK_MONOTONIC, &ts0);
                    const double wall_end = ts0.tv_sec + ts0.tv_nsec * 1e-9 + 0.4;
                    int c = 0;
                    for (int warm = 0; warm < 3; warm++) k->run(ctx, &node);
                    for (;;) {
                        struct timespec tw;
                        clock_gettime(CLOCK_MONOTONIC, &tw);
                        if ((tw.tv_sec + tw.tv_nsec * 1e-9 >= wall_end && ns >= 5) || ns >= 4096) break;
                        if (cold) { w.data = copies[c]; c = (c + 1) % n_copies; }
                        double t0 = now_s();
                        k->run(ctx, &node);
                        samples[ns++] = now_s() - t0;
                    }
                    w.data = copies[0];
                    qsort(samples, ns, sizeof samples[0], cmp_d);
                    res[cold] = samples[0];
                    /* CPU time is summed over the threads: per-thread share */
                    if (g_clock != CLOCK_MONOTONIC) res[cold] /= threads[ti];   /* min: the machine is shared, min is the stable statistic */
                }
                const double flop = 2.0 * K * N * M;
                printf("%-5s %3lld %3d | %10.1f %8.1f | %10.1f %8.1f\n", pl_dtype_name(dt), (long long)M, threads[ti],
                       flop / res[0] * 1e-9, wbytes / res[0] * 1e-9, flop / res[1] * 1e-9, wbytes / res[1] * 1e-9);
                fflush(stdout);
                free(ctx->work);
                ctx->work = NULL;
                pl_backend_cpu.ctx_free(ctx);
            }
            free(xd);
            free(yd);
        }
        for (int c = 0; c < n_copies; c++) free(copies[c]);
        free(copies);
    }
    free(wf);
    return 0;
}
