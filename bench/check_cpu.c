/* Quick agreement check of the cpu backend against ref (until/besides
 * tests/test_ops.c): random inputs, NMSE per op x dtype x shape, at 1 and
 * several threads. Run with PL_CPU_FEATURES=none to check the portable
 * kernels. Build (from the repo root, after building build-cpu):
 *   gcc -O2 -std=c11 -D_GNU_SOURCE -Iinclude -Isrc -Itests bench/check_cpu.c \
 *       build-cpu/lib/libpocketllm.a -ljansson -lm -lpthread -o build-cpu/check_cpu
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "kernels/abi.h"
#include "quant/quant.h"
#include "core/fp16.h"
#include "core/cpu_features.h"
#include "pocketllm.h"
#include "ophelpers.h"
#include "quant/blocks.h"
#include "backends/cpu/cpu_internal.h"

extern const pl_backend pl_backend_ref, pl_backend_cpu;
static pl_rng rng = {12345};
static int n_fail, n_pass;
static pl_exec_ctx *cpu_ctx[3];
static int nthreads_of[3] = {1, 2, 3};

static pl_tensor *mk(pl_dtype dt, int nd, int64_t a, int64_t b, int64_t c) {
    pl_tensor *t = calloc(1, sizeof *t);
    int64_t ne[3] = {a, b, c};
    pl_tensor_init(t, dt, nd, ne, NULL);
    t->data = calloc(1, pl_tensor_nbytes(t));
    return t;
}
static void fill(pl_tensor *t, float sigma) { pl_fill_normal(&rng, t->data, pl_tensor_nelements(t), sigma); }

static double run_cmp(pl_node *node, const char *what) {
    pl_tensor *dst = node->dst;
    size_t nb = pl_tensor_nbytes(dst);
    /* for kv_store, dst is the cache: start both from the same content */
    void *orig = malloc(nb), *ref = malloc(nb);
    memcpy(orig, dst->data, nb);
    pl_exec_ctx *rctx;
    pl_backend_ref.ctx_create(1, &rctx);
    pl_dtype key = pl_node_key_dtype(node);
    pl_status st = pl_node_validate(node);
    if (st != PL_OK) { printf("INVALID %s: %s\n", what, pl_last_error()); n_fail++; return INFINITY; }
    const pl_kernel *rk = pl_backend_lookup(&pl_backend_ref, node->op, key);
    const pl_kernel *ck = pl_backend_lookup(&pl_backend_cpu, node->op, key);
    if (!ck) { printf("MISSING cpu kernel %s\n", what); n_fail++; return INFINITY; }
    rk->run(rctx, node);
    memcpy(ref, dst->data, nb);
    double worst = 0;
    for (int i = 0; i < 3; i++) {
        memcpy(dst->data, orig, nb);
        pl_exec_ctx *c = cpu_ctx[i];
        size_t ws = ck->work_size ? ck->work_size(node, c->n_threads) : 0;
        c->work = ws ? malloc(ws) : NULL;
        c->work_size = ws;
        st = ck->run(c, node);
        free(c->work);
        c->work = NULL;
        c->work_size = 0;
        if (st != PL_OK) { printf("ERROR %s: %s\n", what, pl_last_error()); n_fail++; return INFINITY; }
        double e;
        if (dst->dtype == PL_F16) {
            int64_t n = pl_tensor_nelements(dst);
            float *a = malloc(n * 4), *b = malloc(n * 4);
            for (int64_t k = 0; k < n; k++) { a[k] = pl_f16_to_f32(((uint16_t *)dst->data)[k]); b[k] = pl_f16_to_f32(((uint16_t *)ref)[k]); }
            e = pl_nmse(a, b, n);
            free(a); free(b);
        } else e = pl_nmse(dst->data, ref, pl_tensor_nelements(dst));
        if (e > worst || isnan(e)) worst = e;
    }
    pl_backend_ref.ctx_free(rctx);
    free(orig); free(ref);
    return worst;
}

static void report(const char *what, double e, double tol) {
    bool ok = e <= tol;
    if (ok) n_pass++; else n_fail++;
    printf("%-4s %-60s nmse %.3e (tol %.0e)\n", ok ? "ok" : "FAIL", what, e, tol);
}

static void check_matmul(pl_dtype dt, int64_t K, int64_t N, int64_t M, int strided) {
    pl_tensor *w = mk(dt, 2, K, N, 1);
    float *wf = malloc(K * N * 4);
    pl_fill_normal(&rng, wf, K * N, 1.0f);
    for (int64_t n = 0; n < N; n++) pl_quantize_row(dt, wf + n * K, (char *)w->data + n * w->nb[1], K);
    pl_tensor *x = mk(PL_F32, 2, K + (strided ? 16 : 0), M, 1);
    fill(x, 1.0f);
    if (strided) x->ne[0] = K;   /* rows keep their padded stride */
    pl_tensor *y = mk(PL_F32, 2, N, M, 1);
    pl_node node = {.op = PL_OP_MATMUL, .src = {w, x}, .dst = y};
    char what[128];
    snprintf(what, sizeof what, "matmul %s K=%lld N=%lld M=%lld%s", pl_dtype_name(dt), (long long)K, (long long)N, (long long)M, strided ? " strided" : "");
    double tol = (dt == PL_F32) ? 1e-10 : (dt == PL_F16 || dt == PL_BF16) ? 1e-5 : 5e-4;
    report(what, run_cmp(&node, what), tol);
    free(wf);
}

static void check_get_rows(pl_dtype dt, int64_t C, int64_t R, int64_t n) {
    pl_tensor *tab = mk(dt, 2, C, R, 1);
    float *f = malloc(C * R * 4);
    pl_fill_normal(&rng, f, C * R, 1.0f);
    for (int64_t r = 0; r < R; r++) pl_quantize_row(dt, f + r * C, (char *)tab->data + r * tab->nb[1], C);
    pl_tensor *ids = mk(PL_I32, 1, n, 1, 1);
    for (int64_t i = 0; i < n; i++) ((int32_t *)ids->data)[i] = (int32_t)pl_rng_int(&rng, 0, R - 1);
    pl_tensor *y = mk(PL_F32, 2, C, n, 1);
    pl_node node = {.op = PL_OP_GET_ROWS, .src = {tab, ids}, .dst = y};
    char what[128];
    snprintf(what, sizeof what, "get_rows %s C=%lld n=%lld", pl_dtype_name(dt), (long long)C, (long long)n);
    report(what, run_cmp(&node, what), 0);
    free(f);
}

static void check_simple(pl_op op, int64_t n, int64_t rows, int strided, int bcast) {
    pl_tensor *a = mk(PL_F32, 2, n + (strided ? 8 : 0), rows, 1);
    fill(a, 2.0f);
    if (strided) a->ne[0] = n;
    pl_tensor *b = mk(PL_F32, 2, n, (op == PL_OP_RMS_NORM || bcast) ? 1 : rows, 1);
    if (op == PL_OP_RMS_NORM) b->n_dims = 1;
    fill(b, 1.0f);
    pl_tensor *y = mk(PL_F32, 2, n, rows, 1);
    pl_node node = {.op = op, .src = {a, b}, .dst = y, .fparams = {1e-6f}};
    char what[128];
    snprintf(what, sizeof what, "%s n=%lld rows=%lld%s%s", pl_op_name(op), (long long)n, (long long)rows, strided ? " strided" : "", bcast ? " bcast" : "");
    report(what, run_cmp(&node, what), op == PL_OP_ADD ? 0 : 1e-12);
}

static void check_rope(int64_t hd, int64_t nh, int64_t nt, int n_rot, int mode, float fs) {
    pl_tensor *x = mk(PL_F32, 3, hd, nh, nt);
    fill(x, 1.0f);
    pl_tensor *pos = mk(PL_I32, 1, nt, 1, 1);
    for (int64_t i = 0; i < nt; i++) ((int32_t *)pos->data)[i] = (int32_t)pl_rng_int(&rng, 0, 5000);
    pl_tensor *y = mk(PL_F32, 3, hd, nh, nt);
    pl_node node = {.op = PL_OP_ROPE, .src = {x, pos}, .dst = y, .iparams = {n_rot, mode}, .fparams = {1000000.f, fs}};
    char what[128];
    snprintf(what, sizeof what, "rope hd=%lld nh=%lld nt=%lld n_rot=%d mode=%d fs=%g", (long long)hd, (long long)nh, (long long)nt, n_rot, mode, fs);
    report(what, run_cmp(&node, what), 0);
}

static void check_attention(pl_dtype cdt, int64_t hd, int64_t nh, int64_t nkv, int64_t nt, int64_t n_ctx, int64_t n_seq) {
    pl_tensor *q = mk(PL_F32, 3, hd, nh, nt);
    fill(q, 1.0f);
    pl_tensor *k = mk(cdt, 3, hd * nkv, n_ctx, n_seq), *v = mk(cdt, 3, hd * nkv, n_ctx, n_seq);
    int64_t ne = hd * nkv * n_ctx * n_seq;
    float *tmp = malloc(ne * 4);
    pl_fill_normal(&rng, tmp, ne, 1.0f);
    pl_quantize_row(cdt, tmp, k->data, ne);
    pl_fill_normal(&rng, tmp, ne, 1.0f);
    pl_quantize_row(cdt, tmp, v->data, ne);
    pl_tensor *pos = mk(PL_I32, 1, nt, 1, 1), *seq = mk(PL_I32, 1, nt, 1, 1);
    for (int64_t i = 0; i < nt; i++) {
        ((int32_t *)pos->data)[i] = (int32_t)pl_rng_int(&rng, 0, n_ctx - 1);
        ((int32_t *)seq->data)[i] = (int32_t)pl_rng_int(&rng, 0, n_seq - 1);
    }
    pl_tensor *y = mk(PL_F32, 2, hd * nh, nt, 1);
    pl_node node = {.op = PL_OP_ATTENTION, .src = {q, k, v, pos, seq}, .dst = y, .iparams = {(int)nkv}, .fparams = {1.0f / sqrtf((float)hd)}};
    char what[128];
    snprintf(what, sizeof what, "attention %s hd=%lld nh=%lld nkv=%lld nt=%lld n_ctx=%lld", pl_dtype_name(cdt), (long long)hd, (long long)nh, (long long)nkv, (long long)nt, (long long)n_ctx);
    report(what, run_cmp(&node, what), 1e-9);
    free(tmp);
}

static void check_kv_store(pl_dtype cdt, int64_t kv_dim, int64_t nt, int64_t n_ctx, int64_t n_seq) {
    pl_tensor *rows = mk(PL_F32, 2, kv_dim, nt, 1);
    fill(rows, 1.0f);
    pl_tensor *cache = mk(cdt, 3, kv_dim, n_ctx, n_seq);
    pl_tensor *pos = mk(PL_I32, 1, nt, 1, 1), *seq = mk(PL_I32, 1, nt, 1, 1);
    for (int64_t i = 0; i < nt; i++) {
        ((int32_t *)pos->data)[i] = (int32_t)pl_rng_int(&rng, 0, n_ctx - 1);
        ((int32_t *)seq->data)[i] = (int32_t)pl_rng_int(&rng, 0, n_seq - 1);
    }
    pl_node node = {.op = PL_OP_KV_STORE, .src = {rows, pos, seq}, .dst = cache};
    char what[128];
    snprintf(what, sizeof what, "kv_store %s kv_dim=%lld nt=%lld", pl_dtype_name(cdt), (long long)kv_dim, (long long)nt);
    report(what, run_cmp(&node, what), 0);
}

/* Activation quantizers: AVX2 == portable; q8_K == GGML's reference. */
static void check_quantizers(void) {
    enum { K = 4096 };
    static float x[K];
    static char a[K * 2], b[K * 2];
    int bad_q8k = 0, bad_q80 = 0, diff_ref_q80 = 0;
    for (int it = 0; it < 200; it++) {
        pl_fill_normal(&rng, x, K, it % 3 ? 1.0f : 1e-3f);
        if (it % 5 == 0) for (int i = 0; i < K; i += 7) x[i] = 0;            /* zeros */
        if (it % 7 == 0) { x[10] = 5.0f; x[20] = -5.0f; x[300] = -5.0f; x[310] = 5.0f; } /* ties */
        if (it % 11 == 0) memset(x + 256, 0, 256 * 4);                        /* all-zero block */
        if (it % 13 == 0) for (int i = 0; i < K; i++) x[i] = (float)((i % 9) - 4) * 0.5f; /* exact halves */
        pl_quantize_row_q8_K(x, a, K);
        pl_cpu_quantize_q8_K(x, b, K);
        bad_q8k += memcmp(a, b, K / 256 * sizeof(block_q8_K)) != 0;
#if PL_CPU_HAVE_AVX2_BUILD
        if (pl_cpu_has_avx2()) {
            pl_cpu_quantize_q8_K_avx2(x, b, K);
            bad_q8k += memcmp(a, b, K / 256 * sizeof(block_q8_K)) != 0;
            pl_cpu_quantize_q8_0(x, a, K);
            pl_cpu_quantize_q8_0_avx2(x, b, K);
            bad_q80 += memcmp(a, b, K / 32 * sizeof(block_q8_0)) != 0;
        }
#endif
        pl_quantize_row_q8_0(x, a, K);
        pl_cpu_quantize_q8_0(x, b, K);
        diff_ref_q80 += memcmp(a, b, K / 32 * sizeof(block_q8_0)) != 0;
    }
    report("q8_K quantizers (portable, avx2) == pl_quantize_row_q8_K", bad_q8k, 0);
    report("q8_0 quantizer avx2 == portable", bad_q80, 0);
#if PL_CPU_HAVE_AVX2_BUILD
    if (pl_cpu_has_avx2()) {
        /* f16 / bf16 rounding, including NaN, Inf, ties and subnormals */
        static uint32_t bits[K];
        for (int i = 0; i < K; i++) bits[i] = (uint32_t)pl_rng_u64(&rng);
        bits[0] = 0x7fc00001; bits[1] = 0xff800000; bits[2] = 0x3f808000; bits[3] = 0x3f818000; bits[4] = 0x00000001;
        bits[5] = 0x7f800001; bits[6] = 0x477fefff; bits[7] = 0x477ff000;
        memcpy(x, bits, sizeof bits);
        static float ra[K], rb[K];
        pl_cpu_round_bf16(x, ra, K);
        pl_cpu_round_bf16_avx2(x, rb, K);
        report("bf16 rounding avx2 == portable (bitwise)", memcmp(ra, rb, sizeof ra) != 0, 0);
        pl_cpu_round_f16(x, ra, K);
        pl_cpu_round_f16_avx2(x, rb, K);
        int bad = 0;
        for (int i = 0; i < K; i++) bad += !(isnan(ra[i]) && isnan(rb[i])) && memcmp(&ra[i], &rb[i], 4) != 0;
        report("f16 rounding avx2 == portable (bitwise, NaN payloads aside)", bad, 0);
    }
#endif
    printf("info: q8_0 (llama.cpp x86 rounding) differs from the _ref quantizer in %d/200 rows\n", diff_ref_q80);
}

int main(void) {
    check_quantizers();
    printf("cpu features: %s (avx2 path %s)\n", pl_cpu_features_get()->description, pl_cpu_has_avx2() ? "on" : "off");
    for (int i = 0; i < 3; i++) pl_backend_cpu.ctx_create(nthreads_of[i], &cpu_ctx[i]);
    const pl_dtype mm[] = {PL_F32, PL_F16, PL_BF16, PL_Q8_0, PL_Q4_K, PL_Q6_K, PL_Q4_0, PL_Q5_K, PL_Q2_K};
    for (size_t d = 0; d < sizeof mm / sizeof mm[0]; d++) {
        const pl_dtype dt = mm[d];
        const int64_t bs = pl_dtype_get(dt)->block_size == 256 ? 256 : 32;
        check_matmul(dt, bs * 4, 37, 1, 0);
        check_matmul(dt, bs * 4, 64, 5, 1);
        check_matmul(dt, 1024, 67, 70, 0);
        check_matmul(dt, 2048 + 512, 8, 4, 0);
        if (bs == 32) check_matmul(dt, 96 + (dt == PL_F32 || dt == PL_F16 || dt == PL_BF16 ? 5 : 0), 13, 3, 1);
        check_get_rows(dt, bs * 3, 50, 7);
    }
    check_simple(PL_OP_RMS_NORM, 1024, 7, 1, 0);
    check_simple(PL_OP_RMS_NORM, 1029, 70, 0, 0);
    check_simple(PL_OP_ADD, 1024, 7, 1, 0);
    check_simple(PL_OP_ADD, 1029, 70, 0, 1);
    check_simple(PL_OP_SWIGLU, 3072, 3, 1, 0);
    check_simple(PL_OP_SWIGLU, 3071, 40, 0, 0);
    check_rope(128, 16, 5, 128, 2, 1.0f);
    check_rope(128, 16, 5, 128, 0, 1.0f);
    check_rope(80, 4, 30, 64, 2, 0.5f);
    check_rope(64, 8, 3, 32, 0, 0.25f);
    check_kv_store(PL_F16, 1024, 7, 64, 2);
    check_kv_store(PL_F32, 520, 70, 128, 3);
    check_attention(PL_F16, 128, 16, 8, 1, 64, 1);
    check_attention(PL_F16, 128, 16, 8, 9, 200, 2);
    check_attention(PL_F32, 64, 8, 2, 17, 100, 2);
    check_attention(PL_F32, 40, 12, 3, 5, 33, 1);
    check_attention(PL_F16, 72, 10, 1, 4, 50, 1);
    check_attention(PL_F16, 128, 4, 4, 3, 1500, 1);
    check_attention(PL_F32, 32, 40, 2, 6, 80, 2);    /* group 20 > run size */
    check_attention(PL_F16, 64, 12, 1, 11, 90, 3);   /* group 12: tb 1 */
    check_attention(PL_F16, 64, 12, 3, 11, 90, 3);   /* group 4: tb 2 */
    printf("%d passed, %d failed\n", n_pass, n_fail);
    for (int i = 0; i < 3; i++) pl_backend_cpu.ctx_free(cpu_ctx[i]);
    return n_fail != 0;
}
