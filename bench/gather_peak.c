/* Peak AVX-512 gather throughput of one core, from an L1-resident table: the
 * ceiling of the iq1_s / iq1_m one-row (decode) kernels, and why those rungs
 * cannot decode faster than IQ2_XXS on a core like this one (issue 21).
 *
 * The iq1 grid has 2048 entries, too many for in-register permutes (IQ2_XXS's
 * 256 entries take 4 vpermi2b per 64 lookups), so the one-row kernels look up
 * one entry per group of 8 weights of each row by vpgatherdd (16 rows a
 * gather). A gather element is one weight group: 8 multiply-adds, 16 ops. So
 * whatever the rest of the kernel does,
 *     iq1 one-row GOP/s <= 16 x (gather elements per ns),
 * and in GB/s of weights read: (elements per ns) x 8 weights x bits per weight
 * / 8 = elements per ns x 1.5625 (iq1_s) or x 1.75 (iq1_m). The kernels' other
 * work (the dot products on the looked-up codes) overlaps the gathers only in
 * part. IQ2_XXS's one-row kernel, gather-free, runs faster than this bound
 * (bench_iq_decode), so at equal work per weight the IQ1 rungs stay behind
 * it whenever decode is not bound by memory bandwidth.
 *
 * Measured: 16-lane dword gathers (the kernels' form), 8-lane dword and
 * 8-lane qword gathers (no cheaper per element on the cores we have seen), and
 * a plain scalar table lookup for scale; four independent gathers a step, the
 * indices random over a 2048-entry table of 16-bit codes (4 KB, as
 * pl_iqx_iq1_c2). Best of several runs, in elements per ns.
 *
 * Build: cc -O2 -mavx512f -mavx512bw bench/gather_peak.c -o gather_peak
 * Usage: gather_peak [seconds per run = 0.3]
 */
#define _POSIX_C_SOURCE 199309L
#include <immintrin.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + ts.tv_nsec * 1e-9;
}

#define ENTRIES 2048
#define NIDX 4096   /* 16 KB of indices: L1-resident next to the 4 KB table */
static uint16_t table[ENTRIES + 32] __attribute__((aligned(64)));
static int32_t idx[NIDX] __attribute__((aligned(64)));
static volatile int64_t sink;

/* one pass over the indices, 64 elements a step; returns the elements done */
static long pass_zmm(void) {
    __m512i acc[4] = {_mm512_setzero_si512(), _mm512_setzero_si512(), _mm512_setzero_si512(), _mm512_setzero_si512()};
    for (int i = 0; i < NIDX; i += 64)
        for (int j = 0; j < 4; j++)
            acc[j] = _mm512_add_epi32(acc[j], _mm512_i32gather_epi32(_mm512_load_si512(idx + i + 16 * j), (const void *)table, 2));
    sink += _mm512_reduce_add_epi32(_mm512_add_epi32(_mm512_add_epi32(acc[0], acc[1]), _mm512_add_epi32(acc[2], acc[3])));
    return NIDX;
}

static long pass_ymm(void) {
    __m256i acc[4] = {_mm256_setzero_si256(), _mm256_setzero_si256(), _mm256_setzero_si256(), _mm256_setzero_si256()};
    for (int i = 0; i < NIDX; i += 32)
        for (int j = 0; j < 4; j++)
            acc[j] = _mm256_add_epi32(acc[j], _mm256_i32gather_epi32((const int *)table, _mm256_load_si256((const __m256i *)(idx + i + 8 * j)), 2));
    int32_t v[8];
    _mm256_storeu_si256((__m256i *)v, _mm256_add_epi32(_mm256_add_epi32(acc[0], acc[1]), _mm256_add_epi32(acc[2], acc[3])));
    sink += v[0] + v[7];
    return NIDX;
}

static long pass_qword(void) {
    __m512i acc[4] = {_mm512_setzero_si512(), _mm512_setzero_si512(), _mm512_setzero_si512(), _mm512_setzero_si512()};
    for (int i = 0; i < NIDX; i += 32)
        for (int j = 0; j < 4; j++)
            acc[j] = _mm512_add_epi64(acc[j], _mm512_i32gather_epi64(_mm256_load_si256((const __m256i *)(idx + i + 8 * j)), (const void *)table, 2));
    sink += _mm512_reduce_add_epi64(_mm512_add_epi64(_mm512_add_epi64(acc[0], acc[1]), _mm512_add_epi64(acc[2], acc[3])));
    return NIDX;
}

static long pass_scalar(void) {
    uint32_t acc[4] = {0, 0, 0, 0};
    for (int i = 0; i < NIDX; i += 4)
        for (int j = 0; j < 4; j++) acc[j] += table[idx[i + j]];
    sink += acc[0] + acc[1] + acc[2] + acc[3];
    return NIDX;
}

/* best elements per ns over 5 runs of `secs` each */
static double best_rate(long (*pass)(void), double secs) {
    double best = 0;
    for (int r = 0; r < 5; r++) {
        long n = 0;
        const double t0 = now_s();
        double t;
        do {
            for (int k = 0; k < 64; k++) n += pass();
            t = now_s() - t0;
        } while (t < secs);
        if (n / t * 1e-9 > best) best = n / t * 1e-9;
    }
    return best;
}

int main(int argc, char **argv) {
    const double secs = argc > 1 ? atof(argv[1]) : 0.3;
    uint32_t s = 12345;
    for (int i = 0; i < ENTRIES + 32; i++) table[i] = (uint16_t)(i * 40503u);
    for (int i = 0; i < NIDX; i++) {
        s = s * 1103515245u + 12345u;
        idx[i] = (int32_t)((s >> 8) % ENTRIES);
    }
    const double z = best_rate(pass_zmm, secs);
    printf("gather 16 x dword (zmm):  %.2f elements/ns\n", z);
    printf("gather  8 x dword (ymm):  %.2f elements/ns\n", best_rate(pass_ymm, secs));
    printf("gather  8 x qword (zmm):  %.2f elements/ns\n", best_rate(pass_qword, secs));
    printf("scalar table lookup:      %.2f elements/ns\n", best_rate(pass_scalar, secs));
    printf("=> iq1 one-row ceiling from the zmm gathers alone: %.0f GOP/s, %.1f GB/s of iq1_s, %.1f GB/s of iq1_m weights\n",
           16 * z, z * 1.5625, z * 1.75);
    return 0;
}
