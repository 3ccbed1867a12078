/* Per-op time profile of a forward pass (prefill of P tokens, then N decode
 * steps), grouped by op and weight dtype/shape. Uses the executor's per-node
 * observer hook, so the kernels themselves are untouched.
 *
 * Time source: thread CPU time of the calling thread by default (robust on a
 * shared, loaded machine for 1-thread runs); PROFILE_WALL=1 for wall time
 * (use that for multi-threaded runs on a quiet machine).
 *
 * Build (after building build-perf):
 *   cc -O2 -std=c11 -D_GNU_SOURCE -Iinclude -Isrc bench/profile_ops.c \
 *      build-perf/lib/libpocketllm.a -ljansson -lm -lpthread -o build-perf/profile_ops
 * Usage: profile_ops MODEL [P=512] [N=16] [threads=1]
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include "engine/model.h"

static clockid_t g_clock = CLOCK_THREAD_CPUTIME_ID;
static double now_s(void) {
    struct timespec ts;
    clock_gettime(g_clock, &ts);
    return ts.tv_sec + ts.tv_nsec * 1e-9;
}

#define MAX_KEYS 128
typedef struct entry { char key[96]; double t; long n; } entry;
typedef struct prof { entry e[MAX_KEYS]; int n; double last; double total; } prof;

static void key_of(const pl_node *nd, char *k, size_t cap) {
    const char *op = pl_op_name(nd->op);
    if (nd->op == PL_OP_MATMUL)
        snprintf(k, cap, "matmul %s %lldx%lld", pl_dtype_name(nd->src[0]->dtype), (long long)nd->src[0]->ne[0],
                 (long long)nd->src[0]->ne[1]);
    else
        snprintf(k, cap, "%s", op);
}

static void on_node(void *user, const pl_node *nd) {
    prof *p = user;
    double t = now_s(), dt = t - p->last;
    char k[96];
    key_of(nd, k, sizeof k);
    int i;
    for (i = 0; i < p->n; i++)
        if (!strcmp(p->e[i].key, k)) break;
    if (i == p->n && p->n < MAX_KEYS) { snprintf(p->e[p->n].key, sizeof p->e[0].key, "%s", k); p->n++; }
    if (i < MAX_KEYS) { p->e[i].t += dt; p->e[i].n++; }
    p->total += dt;
    p->last = now_s();
}

static int cmp_e(const void *a, const void *b) {
    double x = ((const entry *)a)->t, y = ((const entry *)b)->t;
    return x < y ? 1 : x > y ? -1 : 0;
}

static void report(const char *title, prof *p, double per) {
    qsort(p->e, (size_t)p->n, sizeof p->e[0], cmp_e);
    printf("%s: %.3f ms per %s\n", title, p->total * 1e3 / per, per > 1 ? "token-step" : "run");
    for (int i = 0; i < p->n; i++)
        printf("  %-40s %9.3f ms  %5.1f%%  (%ld calls)\n", p->e[i].key, p->e[i].t * 1e3 / per,
               100 * p->e[i].t / p->total, p->e[i].n);
}

int main(int argc, char **argv) {
    if (argc < 2) { fprintf(stderr, "usage: profile_ops MODEL [P] [N] [threads]\n"); return 1; }
    int P = argc > 2 ? atoi(argv[2]) : 512, N = argc > 3 ? atoi(argv[3]) : 16, T = argc > 4 ? atoi(argv[4]) : 1;
    if (getenv("PROFILE_WALL")) g_clock = CLOCK_MONOTONIC;
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
    srand(1);
    for (int i = 0; i < P + N + 1; i++) { tok[i] = rand() % V; pos[i] = i; }
    static prof pp, tg;
    m->ctx->on_node = on_node;
    for (int rep = 0; rep < 2; rep++) { /* first rep warms up */
        memset(&pp, 0, sizeof pp);
        if (P > 0) {
            m->ctx->on_node_user = &pp;
            want[P - 1] = true;
            pl_batch b = {P, tok, pos, NULL, want};
            pp.last = now_s();
            if (pl_model_forward(m, &b, logits) != PL_OK) { fprintf(stderr, "%s\n", pl_last_error()); return 1; }
            want[P - 1] = false;
        }
    }
    memset(&tg, 0, sizeof tg);
    m->ctx->on_node_user = &tg;
    for (int i = 0; i < N; i++) {
        bool w = true;
        pl_batch b = {1, &tok[i], &pos[i], NULL, &w};
        tg.last = now_s();
        if (pl_model_forward(m, &b, logits) != PL_OK) { fprintf(stderr, "%s\n", pl_last_error()); return 1; }
    }
    if (P > 0) report("prefill", &pp, 1), printf("  => %.1f tok/s\n", P / pp.total);
    if (N > 0) report("decode", &tg, N), printf("  => %.1f tok/s\n", N / tg.total);
    pl_model_free(m);
    return 0;
}
