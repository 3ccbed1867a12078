/* Quick prefill/decode timing through the public API (the executor path the
 * CLI uses, with no per-node observer), reporting tok/s by wall time and by
 * process CPU time (on a loaded machine the latter is the stable figure for
 * one thread: it counts only the time the process ran).
 *
 * Build (after building build-perf):
 *   cc -O2 -std=c11 -D_GNU_SOURCE -Iinclude bench/quick_bench.c \
 *      build-perf/lib/libpocketllm.a -ljansson -lm -lpthread -o build-perf/quick_bench
 * Usage: quick_bench MODEL [P=512] [N=64] [threads=1] [reps=2]
 */
#include <stdio.h>
#include <stdlib.h>
#include <time.h>
#include "pocketllm.h"

static double now(clockid_t c) {
    struct timespec ts;
    clock_gettime(c, &ts);
    return ts.tv_sec + ts.tv_nsec * 1e-9;
}

int main(int argc, char **argv) {
    if (argc < 2) { fprintf(stderr, "usage: quick_bench MODEL [P] [N] [threads] [reps]\n"); return 1; }
    const int P = argc > 2 ? atoi(argv[2]) : 512, N = argc > 3 ? atoi(argv[3]) : 64;
    const int T = argc > 4 ? atoi(argv[4]) : 1, R = argc > 5 ? atoi(argv[5]) : 2;
    pl_model_params mp = pl_model_default_params();
    mp.n_threads = T;
    mp.n_ctx = P + N + 1;
    mp.n_batch = P > 0 ? P : 1;
    pl_model *m;
    if (pl_model_load(argv[1], &mp, &m) != PL_OK) { fprintf(stderr, "%s\n", pl_last_error()); return 1; }
    const int V = pl_model_n_vocab(m);
    float *logits = malloc((size_t)V * sizeof(float));
    int32_t *tok = malloc(sizeof(int32_t) * (size_t)(P + N + 1)), *pos = malloc(sizeof(int32_t) * (size_t)(P + N + 1));
    bool *want = calloc((size_t)(P + N + 1), 1);
    srand(42);
    for (int i = 0; i < P + N + 1; i++) { tok[i] = rand() % V; pos[i] = i; }
    double best_w[2] = {1e30, 1e30}, best_c[2] = {1e30, 1e30};
    for (int rep = -1; rep < R; rep++) {
        if (P > 0) {
            want[P - 1] = true;
            pl_batch b = {P, tok, pos, NULL, want};
            double w0 = now(CLOCK_MONOTONIC), c0 = now(CLOCK_PROCESS_CPUTIME_ID);
            if (pl_model_forward(m, &b, logits) != PL_OK) { fprintf(stderr, "%s\n", pl_last_error()); return 1; }
            double w = now(CLOCK_MONOTONIC) - w0, c = now(CLOCK_PROCESS_CPUTIME_ID) - c0;
            want[P - 1] = false;
            if (rep >= 0 && w < best_w[0]) best_w[0] = w;
            if (rep >= 0 && c < best_c[0]) best_c[0] = c;
        }
        if (N > 0) {
            double w0 = now(CLOCK_MONOTONIC), c0 = now(CLOCK_PROCESS_CPUTIME_ID);
            for (int i = 0; i < N; i++) {
                bool wl = true;
                pl_batch b = {1, &tok[i], &pos[i], NULL, &wl};
                if (pl_model_forward(m, &b, logits) != PL_OK) { fprintf(stderr, "%s\n", pl_last_error()); return 1; }
            }
            double w = now(CLOCK_MONOTONIC) - w0, c = now(CLOCK_PROCESS_CPUTIME_ID) - c0;
            if (rep >= 0 && w < best_w[1]) best_w[1] = w;
            if (rep >= 0 && c < best_c[1]) best_c[1] = c;
        }
    }
    printf("%s t=%d", argv[1], T);
    if (P > 0) printf("  pp%d: %.1f tok/s wall, %.1f tok/s cpu", P, P / best_w[0], P / best_c[0] * T);
    if (N > 0) printf("  tg%d: %.1f tok/s wall, %.1f tok/s cpu", N, N / best_w[1], N / best_c[1] * T);
    printf("\n");
    pl_model_free(m);
    return 0;
}
