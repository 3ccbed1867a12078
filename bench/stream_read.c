/* Streaming-read bandwidth: the memory-wall ceiling for decode.
 *
 * Each of T threads reads its own slice of a buffer much larger than the
 * last-level cache (default 1 GiB in total), sequentially, with 256-bit
 * loads summed into a few accumulators (so the loop is load-bound, not
 * add-bound), repeatedly; the best pass over the whole buffer is reported in
 * GB/s (1e9 bytes). This is what a decode step does with the weights: one
 * sequential read of every byte, nothing written.
 *
 * Build: cc -O2 -mavx2 -pthread bench/stream_read.c -o stream_read
 *        (without -mavx2 it falls back to 64-bit loads.)
 * Usage: stream_read [threads=1] [MiB=1024] [passes=5] [--json]
 */
#define _GNU_SOURCE
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>
#ifdef __AVX2__
#include <immintrin.h>
#endif

typedef struct job {
    const char *base;
    size_t bytes;
    pthread_barrier_t *bar;
    int passes;
    double *t_pass;  /* per-pass wall time, written by thread 0 */
    uint64_t sink;
} job;

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + ts.tv_nsec * 1e-9;
}

static uint64_t read_slice(const char *p, size_t n) {
#ifdef __AVX2__
    __m256i a0 = _mm256_setzero_si256(), a1 = a0, a2 = a0, a3 = a0;
    for (size_t i = 0; i + 128 <= n; i += 128) {
        a0 = _mm256_add_epi64(a0, _mm256_load_si256((const __m256i *)(p + i)));
        a1 = _mm256_add_epi64(a1, _mm256_load_si256((const __m256i *)(p + i + 32)));
        a2 = _mm256_add_epi64(a2, _mm256_load_si256((const __m256i *)(p + i + 64)));
        a3 = _mm256_add_epi64(a3, _mm256_load_si256((const __m256i *)(p + i + 96)));
    }
    a0 = _mm256_add_epi64(_mm256_add_epi64(a0, a1), _mm256_add_epi64(a2, a3));
    uint64_t r[4];
    _mm256_storeu_si256((__m256i *)r, a0);
    return r[0] + r[1] + r[2] + r[3];
#else
    const uint64_t *q = (const uint64_t *)p;
    uint64_t s0 = 0, s1 = 0, s2 = 0, s3 = 0;
    for (size_t i = 0; i + 4 <= n / 8; i += 4) { s0 += q[i]; s1 += q[i + 1]; s2 += q[i + 2]; s3 += q[i + 3]; }
    return s0 + s1 + s2 + s3;
#endif
}

static void *worker(void *arg) {
    job *j = arg;
    for (int p = 0; p < j->passes; p++) {
        pthread_barrier_wait(j->bar);
        double t0 = now_s();
        j->sink += read_slice(j->base, j->bytes);
        pthread_barrier_wait(j->bar);
        if (j->t_pass) j->t_pass[p] = now_s() - t0;
    }
    return NULL;
}

int main(int argc, char **argv) {
    int T = 1, passes = 5, json = 0;
    size_t mib = 1024;
    int pos = 0;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--json")) { json = 1; continue; }
        if (pos == 0) T = atoi(argv[i]);
        else if (pos == 1) mib = (size_t)atoll(argv[i]);
        else if (pos == 2) passes = atoi(argv[i]);
        pos++;
    }
    if (T < 1 || T > 256 || mib < 1 || passes < 1) { fprintf(stderr, "usage: stream_read [threads] [MiB] [passes] [--json]\n"); return 1; }
    const size_t total = mib << 20, slice = (total / (size_t)T) & ~(size_t)4095;
    char *buf = mmap(NULL, total, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (buf == MAP_FAILED) { perror("mmap"); return 1; }
    madvise(buf, total, getenv("STREAM_HUGE") ? MADV_HUGEPAGE : MADV_NOHUGEPAGE); /* default: 4 KiB pages, as a file mapping */
    for (size_t i = 0; i < total; i += 64) buf[i] = (char)i; /* fault every page in, all lines dirty once */
    pthread_barrier_t bar;
    pthread_barrier_init(&bar, NULL, (unsigned)T);
    job *jobs = calloc((size_t)T, sizeof *jobs);
    pthread_t *th = calloc((size_t)T, sizeof *th);
    double *t_pass = calloc((size_t)passes, sizeof *t_pass);
    for (int t = 0; t < T; t++) {
        jobs[t] = (job){buf + (size_t)t * slice, slice, &bar, passes, t == 0 ? t_pass : NULL, 0};
        if (t) pthread_create(&th[t], NULL, worker, &jobs[t]);
    }
    worker(&jobs[0]);
    uint64_t sink = jobs[0].sink;
    for (int t = 1; t < T; t++) { pthread_join(th[t], NULL); sink += jobs[t].sink; }
    double best = 1e30, sum = 0;
    for (int p = 0; p < passes; p++) { if (t_pass[p] < best) best = t_pass[p]; sum += t_pass[p]; }
    const double bytes = (double)slice * T;
    if (json)
        printf("{\"threads\": %d, \"bytes\": %.0f, \"best_gb_s\": %.3f, \"mean_gb_s\": %.3f, \"sink\": %llu}\n", T, bytes,
               bytes / best / 1e9, bytes * passes / sum / 1e9, (unsigned long long)(sink & 1));
    else
        printf("stream_read: %d thread(s), %.0f MiB: best %.2f GB/s, mean %.2f GB/s\n", T, bytes / 1048576.0,
               bytes / best / 1e9, bytes * passes / sum / 1e9);
    return 0;
}
