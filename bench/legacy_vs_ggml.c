/* Are PocketLLM's q4_1 x q8_1 numerics llama.cpp's, bit for bit? A measuring
 * tool (never a test: it links llama.cpp's prebuilt libggml-cpu). Random
 * weights (q4_1 through pl_quantize_row) and activations with outliers and
 * a DC offset; each row's q8_1 activation blocks and its dot product from
 * pl_cpu_quantize_q8_1_avx2 + pl_cpu_mm_q4_1_avx2 against ggml's
 * from_float (GGML_TYPE_Q8_1) + vec_dot (GGML_TYPE_Q4_1). Build, after
 * building build/ (REFBIN: a directory with libggml-cpu.so, libggml-base.so):
 *   gcc -O2 -std=c11 -D_GNU_SOURCE -Iinclude -Isrc bench/legacy_vs_ggml.c build/lib/libpocketllm.a \
 *       -L$REFBIN -lggml-cpu -lggml-base -ljansson -lm -lpthread -Wl,-rpath,$REFBIN -o /tmp/legacy_vs_ggml
 * 2026-12-05: 0 of 2000 rows differ (K = 1536), llama.cpp d32676d.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "backends/cpu/cpu_matmul_legacy.h"
#include "quant/blocks.h"
#include "quant/quant.h"

/* ggml-cpu.h's struct ggml_type_traits_cpu, declared here so that the
 * build needs no llama.cpp headers */
typedef struct ggml_traits {
    void (*from_float)(const float *, void *, int64_t);
    void (*vec_dot)(int, float *, size_t, const void *, size_t, const void *, size_t, int);
    int vec_dot_type;
    int64_t nrows;
} ggml_traits;
const ggml_traits *ggml_get_type_traits_cpu(int type);
void ggml_cpu_init(void);
enum { GGML_Q4_1 = 3, GGML_Q8_1 = 9 };

static double normal(void) {
    const double u = (rand() + 1.0) / (RAND_MAX + 2.0), v = (rand() + 1.0) / (RAND_MAX + 2.0);
    return sqrt(-2 * log(u)) * cos(6.283185307179586 * v);
}

int main(void) {
    enum { K = 1536, ROWS = 2000 };
    ggml_cpu_init();
    const ggml_traits *tq = ggml_get_type_traits_cpu(GGML_Q4_1), *t8 = ggml_get_type_traits_cpu(GGML_Q8_1);
    if (tq->vec_dot_type != GGML_Q8_1) printf("note: ggml's q4_1 vec_dot_type is %d, not q8_1\n", tq->vec_dot_type);
    static float w[K], x[K];
    static block_q4_1 wq[K / 32];
    static block_q8_1 ours[K / 32], theirs[K / 32];
    int act_diff = 0, dot_diff = 0;
    for (int it = 0; it < ROWS; it++) {
        for (int k = 0; k < K; k++) {
            w[k] = (float)(normal() * 0.05 + 0.01);
            x[k] = (float)(normal() * (it % 3 == 0 ? 5 : 1) + (it % 2 ? 0.7 : 0));
            if (rand() % 200 == 0) x[k] *= 50;   /* an outlier */
        }
        pl_quantize_row(PL_Q4_1, w, wq, K);
        pl_cpu_quantize_q8_1_avx2(x, ours, K);
        t8->from_float(x, theirs, K);
        act_diff += memcmp(ours, theirs, sizeof ours) != 0;
        float s1, s2;
        pl_cpu_mm_q4_1_avx2(K, wq, 0, 1, ours, 0, 1, &s1, 1);
        tq->vec_dot(K, &s2, 0, wq, 0, theirs, 0, 1);
        dot_diff += memcmp(&s1, &s2, 4) != 0;
    }
    printf("K=%d, %d rows: q8_1 activations differ in %d rows, dot products in %d\n", K, ROWS, act_diff, dot_diff);
    return act_diff || dot_diff;
}
