/* Matmul micro-benchmark of the ladder's low rungs (IQ2 / IQ1 codebooks and
 * their neighbours q2_K, tq2_0, q5_K) on the cpu backend, with and without
 * prepared (repacked) weights: for each dtype, a K x N weight, M activation
 * rows. Weights are random blocks (no imatrix needed). A copy of
 * bench_packed.c with its own type list.
 * "hot": one weight matrix, cache-resident after the first call; "cold":
 * rotating over copies that exceed the last-level cache (what decode sees).
 * Reports the best of repeated runs, thread CPU time by default (robust on a
 * loaded machine; BENCH_WALL=1 for wall time).
 *
 * Build (after building build-perf):
 *   cc -O2 -std=c11 -D_GNU_SOURCE -Iinclude -Isrc -Itests bench/bench_iq_decode.c \
 *      build-perf/lib/libpocketllm.a -ljansson -lm -lpthread -o build-perf/bench_iq_decode
 * Usage: bench_packed [K N [M...]]   (env BENCH_TYPES=iq2_xxs,q2_K, BENCH_THREADS=1;
 * the "original" rows run with the prepared layouts off for that type)
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>
#include "backends/cpu/cpu_internal.h"
#include "core/threadpool.h"
#include "kernels/abi.h"
#include "quant/quant.h"
#include "ophelpers.h"

extern const pl_backend pl_backend_cpu;
static clockid_t g_clock = CLOCK_THREAD_CPUTIME_ID;

static double now_s(void) {
    struct timespec ts;
    clock_gettime(g_clock, &ts);
    return ts.tv_sec + ts.tv_nsec * 1e-9;
}

int main(int argc, char **argv) {
    int64_t K = 1024, N = 3072;
    int64_t Ms[8] = {1, 512};
    int nM = 2;
    if (getenv("BENCH_WALL")) g_clock = CLOCK_MONOTONIC;
    if (argc >= 3) { K = atoll(argv[1]); N = atoll(argv[2]); }
    if (argc >= 4) { nM = 0; for (int i = 3; i < argc && nM < 8; i++) Ms[nM++] = atoll(argv[i]); }
    const int nth = getenv("BENCH_THREADS") ? atoi(getenv("BENCH_THREADS")) : 1;
    const pl_dtype types[] = {PL_IQ2_XXS, PL_IQ2_XS, PL_IQ2_S, PL_IQ1_S, PL_IQ1_M, PL_Q2_K, PL_TQ2_0, PL_Q5_K};
    pl_rng rng = {7};
    float *wf = malloc((size_t)(K * N) * 4);
    pl_fill_normal(&rng, wf, K * N, 1.0f);
    printf("K=%lld N=%lld threads=%d (%s time)\n", (long long)K, (long long)N, nth,
           g_clock == CLOCK_MONOTONIC ? "wall" : "thread cpu");
    printf("%-5s %5s %-8s | %9s %8s | %9s %8s\n", "dtype", "M", "layout", "hot GOP/s", "GB/s", "cold GOP/s", "GB/s");
    for (size_t d = 0; d < sizeof types / sizeof types[0]; d++) {
        const pl_dtype dt = types[d];
        const char *only = getenv("BENCH_TYPES");
        if (only && !strstr(only, pl_dtype_name(dt))) continue;
        const size_t row = pl_dtype_row_size(dt, K), wbytes = row * (size_t)N;
        int n_copies = (int)(256e6 / wbytes) + 2;
        char **copies = malloc(n_copies * sizeof *copies);
        pl_exec_ctx **ctxs = malloc(n_copies * sizeof *ctxs);
        for (int c = 0; c < n_copies; c++) {
            copies[c] = aligned_alloc(4096, (wbytes + 4095) & ~(size_t)4095);
            if (c == 0)
                for (int64_t n = 0; n < N; n++)
                    for (int64_t b = 0; b < K / pl_dtype_get(dt)->block_size; b++)
                        pl_random_block(&rng, dt, (unsigned char *)copies[0] + n * row + b * pl_dtype_get(dt)->type_size);
            else memcpy(copies[c], copies[0], wbytes);
        }
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
            for (int mi = 0; mi < nM; mi++) {
                const int64_t M = Ms[mi];
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
                for (int cold = 0; cold < 2; cold++) {
                    double best = 1e30, sum = 0;
                    int reps = M == 1 ? 400 : 6, c = 0;
                    for (int rep = -2; rep < reps; rep++) {
                        if (cold) c = (c + 1) % n_copies;
                        w.data = copies[c];
                        ctxs[c]->work = wb;
                        ctxs[c]->work_size = work;
                        double t0 = now_s();
                        k->run(ctxs[c], &node);
                        double dt_ = now_s() - t0;
                        if (rep >= 0 && dt_ < best) best = dt_;
                        if (rep >= 0) sum += dt_;
                    }
                    res[cold] = best;
                    if (cold) mean_cold = sum / reps;
                }
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
