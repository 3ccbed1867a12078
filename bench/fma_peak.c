/* Peak f32 FMA throughput of one core: the ceiling of an f16-weight prefill,
 * whose products run as f32 FMAs (f16 weights converted with F16C, the
 * activations f16-rounded floats), in PocketLLM as in llama.cpp. Twelve
 * independent accumulator chains of 8 or 16 lanes, so the loop is bound by
 * FMA throughput, not latency; the best of several runs is reported in
 * GFLOP/s (2 flops per FMA lane).
 *
 * Build: cc -O3 -mavx2 -mfma bench/fma_peak.c -o fma_peak   (-O3: the chains stay in registers)
 *        (add -mavx512f for the 512-bit figure as well)
 * Usage: fma_peak [seconds per run = 0.3]
 */
#define _POSIX_C_SOURCE 199309L
#include <immintrin.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + ts.tv_nsec * 1e-9;
}

#define CHAINS 12
#define ITERS 1000000L

static double run256(volatile float *sink) {
    __m256 a[CHAINS];
    const __m256 x = _mm256_set1_ps(1.0000001f), y = _mm256_set1_ps(0.9999999f);
    for (int c = 0; c < CHAINS; c++) a[c] = _mm256_set1_ps((float)c);
    const double t0 = now_s();
    for (long i = 0; i < ITERS; i++)
        for (int c = 0; c < CHAINS; c++) a[c] = _mm256_fmadd_ps(a[c], x, y);
    const double t = now_s() - t0;
    float s = 0;
    for (int c = 0; c < CHAINS; c++) s += _mm256_cvtss_f32(a[c]);
    *sink = s;
    return 2.0 * 8 * CHAINS * ITERS / t * 1e-9;
}

#ifdef __AVX512F__
static double run512(volatile float *sink) {
    __m512 a[CHAINS];
    const __m512 x = _mm512_set1_ps(1.0000001f), y = _mm512_set1_ps(0.9999999f);
    for (int c = 0; c < CHAINS; c++) a[c] = _mm512_set1_ps((float)c);
    const double t0 = now_s();
    for (long i = 0; i < ITERS; i++)
        for (int c = 0; c < CHAINS; c++) a[c] = _mm512_fmadd_ps(a[c], x, y);
    const double t = now_s() - t0;
    float s = 0;
    for (int c = 0; c < CHAINS; c++) s += _mm512_reduce_add_ps(a[c]);
    *sink = s;
    return 2.0 * 16 * CHAINS * ITERS / t * 1e-9;
}
#endif

int main(int argc, char **argv) {
    const double budget = argc > 1 ? atof(argv[1]) : 0.3;
    volatile float sink;
    double best256 = 0, best512 = 0;
    const double t0 = now_s();
    do {
        double g = run256(&sink);
        if (g > best256) best256 = g;
#ifdef __AVX512F__
        g = run512(&sink);
        if (g > best512) best512 = g;
#endif
    } while (now_s() - t0 < budget * 5);
    printf("fma_peak: one core, f32 FMA: %.1f GFLOP/s (256-bit)", best256);
    if (best512 > 0) printf(", %.1f GFLOP/s (512-bit)", best512);
    printf("\n");
    return 0;
}
