/* Matmul micro-benchmark of the ladder's low rungs (IQ2 / IQ1 codebooks and
 * their neighbours q2_K, tq2_0, q5_K) on the cpu backend, with and without
 * prepared (repacked) weights: for each dtype, a K x N weight, M activation
 * rows. Weights are random blocks (no imatrix needed). The harness (hot /
 * cold runs, timing, output) is bench_kernel_util.h's, as bench_packed.c's.
 *
 * Build (after building build-perf):
 *   cc -O2 -std=c11 -D_GNU_SOURCE -Iinclude -Isrc -Itests bench/bench_iq_decode.c \
 *      build-perf/lib/libpocketllm.a -ljansson -lm -lpthread -o build-perf/bench_iq_decode
 * Usage: bench_iq_decode [K N [M...]]   (env BENCH_TYPES=iq2_xxs,q2_K, BENCH_THREADS=1, BENCH_WALL=1;
 * the "original" rows run with the prepared layouts off for that type; PL_CPU_IQDEC=0 gives the
 * prepared iq2_xxs / iq2_xs weights the gather tile at M = 1 too, the before of the one-row kernels;
 * PL_CPU_IQ1DEC=0 does the same for iq1_s / iq1_m alone; PL_CPU_IQ2XSDEC=0 gives iq2_xs at M = 1 the
 * permute-lookup one-row kernel instead of the dword-gather one; PL_CPU_IQ2XXSDEC=0 gives iq2_xxs at M = 1
 * the previous one-row kernel, pl_iq2xxsx_panel1p; PL_CPU_IQ1SDEC=0 gives iq1_s at M = 1 the group
 * kernel before the pair kernel; PL_CPU_IQ1SACT=0 / PL_CPU_IQ1MACT=0 make the iq1_s / iq1_m one-row
 * kernels' activation data per block and panel instead of once a call)
 */
#include "bench_kernel_util.h"

static void fill_random_blocks(pl_rng *rng, pl_dtype dt, const float *wf, char *w, int64_t K, int64_t N, size_t row) {
    const int64_t bs = pl_dtype_get(dt)->block_size;
    const size_t ts = pl_dtype_get(dt)->type_size;
    for (int64_t n = 0; n < N; n++)
        for (int64_t b = 0; b < K / bs; b++) pl_random_block(rng, dt, (unsigned char *)w + n * row + b * ts);
}

int main(int argc, char **argv) {
    static const pl_dtype types[] = {PL_IQ2_XXS, PL_IQ2_XS, PL_IQ2_S, PL_IQ1_S, PL_IQ1_M, PL_Q2_K, PL_TQ2_0, PL_Q5_K};
    return pl_bench_matmul_main(argc, argv, types, sizeof types / sizeof types[0], fill_random_blocks);
}
