/* tq1_0's compact prepared layout (PL_PACK_TQ1_X16) in both of its byte
 * codes: the lookup code (pl_cpu_tq1_lut4(), cpu_packed_tq.c) and ggml's
 * (PL_CPU_TQ1DEC=0).
 *   - the lookup code: every one of the 243 trit tuples gets its own byte and
 *     pl_tq1c_fields / pl_tq1c_t4 give its trits back;
 *   - a weight whose tq1_0 bytes (qs and qh) take every value 0..255 (ggml
 *     defines the trits of any byte, not only the ones its quantizer writes):
 *     prepared matmul in each code against ref (NMSE, NaN fails) and the
 *     unprepared cpu kernel (NMSE < 1e-9), the two codes bit for bit against
 *     each other (the block sums are exact integers, the float steps the
 *     same), one activation row == batched bit for bit, get_rows from the
 *     copy == ref bit for bit.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "testutil.h"
#include "ophelpers.h"
#include "cpu_ctx.h"
#include "backends/cpu/cpu_internal.h"
#include "core/fp16.h"
#include "kernels/abi.h"
#include "quant/quant.h"

static void test_codes(void) {
    bool seen[256] = {false}, distinct = true, back = true;
    for (int v = 0; v < 243; v++) {
        uint8_t t[5];
        for (int k = 0, x = v; k < 5; k++, x /= 3) t[k] = (uint8_t)(x % 3);
        const uint8_t c = pl_tq1c_encode(t);
        distinct &= !seen[c];
        seen[c] = true;
        for (int k = 0; k < 4; k++) back &= ((pl_tq1c_fields[c] >> (2 * k)) & 3) == t[k];
        back &= pl_tq1c_t4[c & 63] == t[4];
    }
    CHECK(distinct, "tq1 lookup code: 243 tuples, 243 distinct bytes");
    CHECK(back, "tq1 lookup code: the tables give every tuple's trits back");
}

/* y[M][N] of the prepared matmul in the code `mode` (1: lookup, 0: ggml's),
 * with the one-row and get_rows checks. */
static void run_prepared(int mode, const pl_tensor *w, int64_t K, int64_t N, const float *x, int64_t M, float *y,
                         const float *g_ref, const int32_t *ids, int64_t n_ids) {
    pl_cpu_tq1_lut4_mode = mode;
    pl_tensor tx, ty;
    pl_tensor_init(&tx, PL_F32, 2, (int64_t[]){K, M}, (void *)x);
    pl_tensor_init(&ty, PL_F32, 2, (int64_t[]){N, M}, y);
    pl_node nd = {.op = PL_OP_MATMUL, .src = {(pl_tensor *)w, &tx}, .dst = &ty};
    const pl_kernel *k = pl_backend_lookup(&pl_backend_cpu, PL_OP_MATMUL, PL_TQ1_0);
    pl_exec_ctx *prep = cpu_ctx(2, k->work_size(&nd, 2));
    const pl_tensor *ws[1] = {w};
    CHECK(pl_backend_cpu.weight_prepare_size(prep, w) > 0, "tq1_0 [%lld, %lld] has a prepared layout", (long long)K,
          (long long)N);
    CHECK(pl_backend_cpu.weight_prepare(prep, ws, 1, NULL, NULL) == PL_OK, "prepare tq1_0");
    const pl_cpu_packed *pk = pl_cpu_packed_find(prep, w);
    CHECK(pk != NULL, "the copy is found");
    if (pk && pl_cpu_tq1_compact())
        CHECK(pk->kind == PL_PACK_TQ1_X16, "compact tq1_0 where VBMI is (kind %d)", (int)pk->kind);
    CHECK(run_on(&pl_backend_cpu, prep, &nd) == PL_OK, "prepared matmul, code %d", mode);
    float *y1 = malloc((size_t)N * 4);
    bool same = true;
    for (int64_t m = 0; m < M; m++) {
        pl_tensor x1, ty1;
        pl_tensor_init(&x1, PL_F32, 2, (int64_t[]){K, 1}, (void *)(x + m * K));
        pl_tensor_init(&ty1, PL_F32, 2, (int64_t[]){N, 1}, y1);
        pl_node n1 = {.op = PL_OP_MATMUL, .src = {(pl_tensor *)w, &x1}, .dst = &ty1};
        CHECK(run_on(&pl_backend_cpu, prep, &n1) == PL_OK, "prepared matmul, one row");
        same &= memcmp(y1, y + m * N, (size_t)N * 4) == 0;
    }
    CHECK(same, "code %d: one activation row == batched, bit for bit", mode);
    free(y1);
    pl_tensor tid, tg;
    float *g = malloc((size_t)(K * n_ids) * 4);
    pl_tensor_init(&tid, PL_I32, 1, (int64_t[]){n_ids}, (void *)ids);
    pl_tensor_init(&tg, PL_F32, 2, (int64_t[]){K, n_ids}, g);
    pl_node gr = {.op = PL_OP_GET_ROWS, .src = {(pl_tensor *)w, &tid}, .dst = &tg};
    CHECK(run_on(&pl_backend_cpu, prep, &gr) == PL_OK, "get_rows from the copy");
    CHECK(memcmp(g, g_ref, (size_t)(K * n_ids) * 4) == 0, "code %d: get_rows from the copy == ref, bit for bit", mode);
    free(g);
    cpu_ctx_free(prep);
    pl_cpu_tq1_lut4_mode = -1;
}

static void test_every_byte(int64_t K, int64_t N) {
    pl_rng r = {(uint64_t)K * 31 + (uint64_t)N};
    const int64_t nb = K / QK_K;
    block_tq1_0 *wq = aligned_alloc(64, ((size_t)(nb * N) * sizeof(block_tq1_0) + 63) & ~(size_t)63);
    bool hit[256] = {false};
    uint32_t i = 0;
    for (int64_t j = 0; j < nb * N; j++) {
        /* 97 is odd: 256 consecutive bytes take every value once */
        for (size_t k = 0; k < sizeof wq[j].qs; k++, i++) hit[wq[j].qs[k] = (uint8_t)(i * 97 + 13)] = true;
        for (size_t k = 0; k < sizeof wq[j].qh; k++, i++) hit[wq[j].qh[k] = (uint8_t)(i * 97 + 13)] = true;
        wq[j].d = pl_f32_to_f16(0.01f + 0.05f * (float)(pl_rng_u64(&r) % 1000) / 1000.0f);
    }
    int n_hit = 0;
    for (int v = 0; v < 256; v++) n_hit += hit[v];
    CHECK(n_hit == 256, "the weight holds every byte value (%d of 256)", n_hit);
    pl_tensor w;
    pl_tensor_init(&w, PL_TQ1_0, 2, (int64_t[]){K, N}, wq);

    const int64_t M = 11;
    float *x = malloc((size_t)(K * M) * 4);
    pl_fill_normal(&r, x, K * M, 1.0f);
    float *y_ref = malloc((size_t)(N * M) * 4), *y_plain = malloc((size_t)(N * M) * 4);
    float *y_lut = malloc((size_t)(N * M) * 4), *y_ggml = malloc((size_t)(N * M) * 4);
    pl_tensor tx, ty;
    pl_tensor_init(&tx, PL_F32, 2, (int64_t[]){K, M}, x);
    pl_tensor_init(&ty, PL_F32, 2, (int64_t[]){N, M}, y_ref);
    pl_node nd = {.op = PL_OP_MATMUL, .src = {&w, &tx}, .dst = &ty};
    CHECK(run_ref(&nd) == PL_OK, "ref matmul tq1_0");
    const pl_kernel *k = pl_backend_lookup(&pl_backend_cpu, PL_OP_MATMUL, PL_TQ1_0);
    pl_exec_ctx *plain = cpu_ctx(2, k->work_size(&nd, 2));
    ty.data = y_plain;
    CHECK(run_on(&pl_backend_cpu, plain, &nd) == PL_OK, "unprepared cpu matmul tq1_0");
    cpu_ctx_free(plain);

    const int64_t n_ids = 4;
    const int32_t ids[4] = {0, (int32_t)(N - 1), (int32_t)(N / 2), 5};
    float *g_ref = malloc((size_t)(K * n_ids) * 4);
    pl_tensor tid, tg;
    pl_tensor_init(&tid, PL_I32, 1, (int64_t[]){n_ids}, (void *)ids);
    pl_tensor_init(&tg, PL_F32, 2, (int64_t[]){K, n_ids}, g_ref);
    pl_node gr = {.op = PL_OP_GET_ROWS, .src = {&w, &tid}, .dst = &tg};
    CHECK(run_ref(&gr) == PL_OK, "ref get_rows");

    run_prepared(1, &w, K, N, x, M, y_lut, g_ref, ids, n_ids);
    run_prepared(0, &w, K, N, x, M, y_ggml, g_ref, ids, n_ids);
    const double e = pl_nmse(y_lut, y_ref, N * M);
    CHECK(e < 5e-4 && e == e, "lookup code K=%lld N=%lld: vs ref nmse %g", (long long)K, (long long)N, e);
    CHECK(memcmp(y_lut, y_ggml, (size_t)(N * M) * 4) == 0, "lookup code == ggml's code, bit for bit");
    const double e_plain = pl_nmse(y_lut, y_plain, N * M);
    CHECK(e_plain < 1e-9, "lookup code vs the unprepared cpu kernel nmse %g", e_plain);
    free(g_ref);
    free(y_ref);
    free(y_plain);
    free(y_lut);
    free(y_ggml);
    free(x);
    free(wq);
}

int main(void) {
    test_codes();
    if (!pl_cpu_has_vnni512()) {
        printf("no AVX-512 VNNI: no prepared tq1_0 here (the codes only)\n");
        return pl_test_summary("test_cpu_tq1x");
    }
    test_every_byte(512, 48);    /* 2 blocks, 3 panels */
    test_every_byte(1280, 40);   /* an odd block count, a padded last panel */
    return pl_test_summary("test_cpu_tq1x");
}
