/* Matmul micro-benchmark of the cpu backend with and without prepared
 * (repacked) weights: for each dtype, a K x N weight, M activation rows,
 * the weight quantized from normal floats. The harness (hot / cold runs,
 * timing, output) is bench_kernel_util.h's.
 *
 * Build (after building build-perf):
 *   cc -O2 -std=c11 -D_GNU_SOURCE -Iinclude -Isrc -Itests bench/bench_packed.c \
 *      build-perf/lib/libpocketllm.a -ljansson -lm -lpthread -o build-perf/bench_packed
 * Usage: bench_packed [K N [M...]]   (env BENCH_TYPES=q4_K,q6_K,f16, BENCH_THREADS=1, BENCH_WALL=1)
 */
#include "bench_kernel_util.h"

static void fill_quantized(pl_rng *rng, pl_dtype dt, const float *wf, char *w, int64_t K, int64_t N, size_t row) {
    for (int64_t n = 0; n < N; n++) pl_quantize_row(dt, wf + n * K, w + n * row, K);
}

int main(int argc, char **argv) {
    static const pl_dtype types[] = {PL_Q4_K, PL_Q6_K, PL_F16};
    return pl_bench_matmul_main(argc, argv, types, sizeof types / sizeof types[0], fill_quantized);
}
