/* Attention micro-benchmark of the cpu backend: one ATTENTION node with
 * Qwen3-0.6B shapes (head_dim 128, 16 query heads, 8 KV heads), a prefill of
 * P tokens after D cache positions (pp512 @ d4096 by default), 1 thread,
 * the f16 cache against the q8_0 cache (with llama.cpp's Hadamard rotation),
 * interleaved; prints the thread CPU time of each and the q8_0 / f16 speed
 * ratio. Env switches (PL_CPU_ATTQ_BLOCK=0 ...) apply as in the engine.
 * Build (after building build):
 *   gcc -O2 -std=c11 -D_GNU_SOURCE -Iinclude -Isrc -Itests bench/bench_attention.c \
 *       build/lib/libpocketllm.a -ljansson -lm -lpthread -o build/bench_attention
 * Usage: bench_attention [P=512] [D=4096] [reps=3] [inner=1: runs per timing]
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include "backends/cpu/cpu_internal.h"
#include "kernels/abi.h"
#include "quant/quant.h"
#include "ophelpers.h"

extern const pl_backend pl_backend_cpu;

enum { HD = 128, NH = 16, NKV = 8, KVD = NKV * HD };

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
    return ts.tv_sec + ts.tv_nsec * 1e-9;
}

typedef struct cache { pl_dtype t; char *k, *v; } cache;

static cache make_cache(pl_dtype t, int64_t n_ctx) {
    cache c = {.t = t};
    const size_t row = pl_dtype_row_size(t, KVD);
    c.k = malloc(row * (size_t)n_ctx);
    c.v = malloc(row * (size_t)n_ctx);
    pl_rng r = {7};
    float tmp[KVD];
    for (int64_t i = 0; i < n_ctx; i++) {
        pl_fill_normal(&r, tmp, KVD, 2.0f);
        pl_quantize_row(t, tmp, c.k + (size_t)i * row, KVD);
        pl_fill_normal(&r, tmp, KVD, 1.0f);
        pl_quantize_row(t, tmp, c.v + (size_t)i * row, KVD);
    }
    return c;
}

static double run(const cache *c, int64_t n_ctx, int P, int D, float *q, float *out) {
    int32_t *pos = malloc(sizeof(int32_t) * (size_t)P), *seq = calloc((size_t)P, sizeof(int32_t));
    for (int t = 0; t < P; t++) pos[t] = D + t;
    pl_tensor tq, tk, tv, tp, ts, td;
    pl_tensor_init(&tq, PL_F32, 3, (int64_t[]){HD, NH, P}, q);
    pl_tensor_init(&tk, c->t, 3, (int64_t[]){KVD, n_ctx, 1}, c->k);
    pl_tensor_init(&tv, c->t, 3, (int64_t[]){KVD, n_ctx, 1}, c->v);
    pl_tensor_init(&tp, PL_I32, 1, (int64_t[]){P}, pos);
    pl_tensor_init(&ts, PL_I32, 1, (int64_t[]){P}, seq);
    pl_tensor_init(&td, PL_F32, 2, (int64_t[]){HD * NH, P}, out);
    pl_node nd = {.op = PL_OP_ATTENTION, .src = {&tq, &tk, &tv, &tp, &ts}, .dst = &td};
    nd.iparams[0] = NKV;
    if (c->t != PL_F16) nd.iparams[2] = nd.iparams[3] = HD;   /* llama.cpp's rotation of a quantized cache */
    nd.fparams[0] = 1.0f / sqrtf((float)HD);
    const pl_kernel *k = pl_backend_lookup(&pl_backend_cpu, PL_OP_ATTENTION, pl_node_key_dtype(&nd));
    pl_exec_ctx *ctx = NULL;
    pl_backend_cpu.ctx_create(1, &ctx);
    ctx->work_size = k->work_size(&nd, 1);
    ctx->work = malloc(ctx->work_size);
    const double t0 = now_s();
    const pl_status st = k->run(ctx, &nd);
    const double t1 = now_s();
    if (st != PL_OK) fprintf(stderr, "attention failed: %d\n", (int)st);
    free(ctx->work);
    ctx->work = NULL;
    pl_backend_cpu.ctx_free(ctx);
    free(pos);
    free(seq);
    return t1 - t0;
}

int main(int argc, char **argv) {
    const int P = argc > 1 ? atoi(argv[1]) : 512, D = argc > 2 ? atoi(argv[2]) : 4096;
    const int reps = argc > 3 ? atoi(argv[3]) : 3;
    const int inner = argc > 4 ? atoi(argv[4]) : 1;   /* runs per timing (decode shapes: P = 1) */
    const int64_t n_ctx = D + P;
    cache f16 = make_cache(PL_F16, n_ctx), q8 = make_cache(PL_Q8_0, n_ctx);
    float *q = malloc(sizeof(float) * HD * NH * (size_t)P), *out = malloc(sizeof(float) * HD * NH * (size_t)P);
    pl_rng r = {11};
    pl_fill_normal(&r, q, (int64_t)HD * NH * P, 1.0f);
    double tf = 1e30, tq = 1e30;
    for (int i = 0; i < reps; i++) {
        double a = 0, b = 0;
        for (int k = 0; k < inner; k++) a += run(&f16, n_ctx, P, D, q, out);
        for (int k = 0; k < inner; k++) b += run(&q8, n_ctx, P, D, q, out);
        if (a < tf) tf = a;
        if (b < tq) tq = b;
        printf("rep %d: f16 %.4f s  q8_0 %.4f s\n", i, a, b);
    }
    /* the tiles on against off: the same bits expected */
    float *o2 = malloc(sizeof(float) * HD * NH * (size_t)P);
    pl_cpu_attq_tile_mode = 1;
    run(&q8, n_ctx, P, D, q, out);
    pl_cpu_attq_tile_mode = 0;
    run(&q8, n_ctx, P, D, q, o2);
    pl_cpu_attq_tile_mode = -1;
    printf("tiles on == off: %s\n", memcmp(out, o2, sizeof(float) * HD * NH * (size_t)P) ? "NO" : "yes");
    free(o2);
    printf("P=%d D=%d best: f16 %.3f s, q8_0 %.3f s, q8_0/f16 speed %.2f\n", P, D, tf, tq, tf / tq);
    free(q);
    free(out);
    return 0;
}
