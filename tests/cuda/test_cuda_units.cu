/*
 * The CUDA kernels' per-block arithmetic, run on the CPU: no GPU needed.
 *
 * cuda_quant.cuh holds, as __host__ __device__ code, everything in the
 * kernels that knows a weight format's bits: the get_rows group decoder, the
 * GEMV unit dot products and the GEMM tile decoder. This program compiles
 * that same code for the host and checks it against the reference decoders
 * of quant/dequant.c on random rows:
 *  - get_rows groups are bit-identical with pl_dequantize_row;
 *  - GEMM tile values are pl_dequantize_row's rounded to f16, bit for bit;
 *  - the same for the ladder types (q2_K, q3_K, q5_K, iq2_xxs/xs/s, iq1_s/m,
 *    tq1_0/tq2_0; random blocks where there is no reference quantizer),
 *    their IQ codebooks read from the library's tables on the host;
 *  - GEMV units, summed over a row, equal the dot product of the reference-
 *    decoded weights with the activations (for the integer path: with the
 *    8-bit quantized activations, decoded), to float rounding; with aligned
 *    and unaligned (byte-load) weight rows.
 * What it cannot check (thread mapping, shared memory, MMA fragments) the
 * GPU run of tests/test_cuda.c does.
 */
extern "C" { /* the library's C headers first, so their declarations get C linkage */
#include "kernels/dtype.h"
#include "quant/quant.h"
}
#include "backends/cuda/cuda_quant.cuh"
#include "ophelpers.h"
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int n_pass, n_fail;
#define CHECK(cond, ...)                                                      \
    do {                                                                      \
        if (cond) n_pass++;                                                   \
        else {                                                                \
            n_fail++;                                                         \
            fprintf(stderr, "FAIL %s:%d: ", __FILE__, __LINE__);              \
            fprintf(stderr, __VA_ARGS__);                                     \
            fputc('\n', stderr);                                              \
        }                                                                     \
    } while (0)

/* Rows of n weights of type t, each starting `offset` bytes into a 64-byte
 * aligned slot (offset 0: 16-byte aligned rows; 8: rows only 8-aligned). */
typedef struct rows {
    unsigned char *mem;
    size_t stride;
    int n_rows;
    int64_t n;
    pl_dtype t;
} rows;

static rows make_rows(pl_dtype t, int64_t n, int n_rows, size_t offset, pl_rng *r) {
    rows w;
    w.t = t;
    w.n = n;
    w.n_rows = n_rows;
    w.stride = (pl_dtype_row_size(t, n) + offset + 63) & ~(size_t)63;
    w.mem = (unsigned char *)aligned_alloc(64, w.stride * (size_t)n_rows + 64);
    memset(w.mem, 0, w.stride * (size_t)n_rows + 64);
    float *tmp = (float *)malloc((size_t)n * sizeof(float));
    const pl_dtype_traits *tr = pl_dtype_get(t);
    for (int i = 0; i < n_rows; i++) {
        unsigned char *row = w.mem + (size_t)i * w.stride + offset;
        pl_fill_normal(r, tmp, n, 1.0f);
        if (pl_quantize_row(t, tmp, row, n)) continue;
        /* No reference quantizer (the IQ / TQ types): random blocks, re-drawn
         * until they decode to finite, moderate values (as test_ops does).
         * Random bits reach every grid entry, sign pattern and scale. */
        for (int64_t b = 0; b < n / tr->block_size; b++) {
            unsigned char *blk = row + b * tr->type_size;
            pl_random_block(r, t, blk);
        }
    }
    free(tmp);
    w.mem += offset;   /* rows at mem + i * stride */
    return w;
}

static const unsigned char *row_at(const rows *w, int i) { return w->mem + (size_t)i * w->stride; }

/* ---- get_rows ----------------------------------------------------------------------------------- */

template <int T>
static void check_groups(pl_rng *r) {
    const int64_t n = pl_dtype_get(T)->block_size == 1 ? 33 : 512;
    rows w = make_rows((pl_dtype)T, n, 3, 0, r);
    float ref[512], got[512];
    constexpr int G = pl_cu_group<T>::G;
    for (int i = 0; i < w.n_rows; i++) {
        pl_dequantize_row((pl_dtype)T, row_at(&w, i), ref, n);
        for (int64_t g = 0; g < n / G; g++) pl_cu_decode_group<T>(row_at(&w, i), g, got + g * G);
        CHECK(!memcmp(ref, got, (size_t)n * sizeof(float)), "get_rows %s row %d differs from the reference decoder",
              pl_dtype_name((pl_dtype)T), i);
    }
}

/* ---- GEMM tile decode ------------------------------------------------------------------------------- */

template <int T>
static void check_tiles(pl_rng *r, int64_t n, size_t offset, bool vec) {
    rows w = make_rows((pl_dtype)T, n, 3, offset, r);
    float *ref = (float *)malloc((size_t)n * sizeof(float));
    for (int i = 0; i < w.n_rows; i++) {
        pl_dequantize_row((pl_dtype)T, row_at(&w, i), ref, n);
        bool same = true;
        for (int64_t k = 0; k < n; k += 32) {
            uint32_t h[16];
            pl_cu_dequant32_h<T>((const char *)row_at(&w, i), k, n, vec, h);
            for (int e = 0; e < 32; e++) {
                const uint16_t got = (uint16_t)(h[e / 2] >> (16 * (e % 2)));
                const uint16_t want = k + e < n ? __half_as_ushort(__float2half_rn(ref[k + e])) : 0;
                same = same && got == want;
            }
        }
        CHECK(same, "gemm tile decode %s (n %lld, row offset %zu, vec %d) differs from the reference rounded to f16",
              pl_dtype_name((pl_dtype)T), (long long)n, offset, (int)vec);
    }
    free(ref);
}

/* ---- GEMV units ------------------------------------------------------------------------------------ */

/* The activation quantization of k_quantize_x (cuda_gemv.cu), on the host. */
static void quantize_x(const float *x, int64_t K, int M, pl_cu_xq q) {
    for (int m = 0; m < M; m++)
        for (int64_t b = 0; b < K / 32; b++) {
            const float *v = x + m * K + 32 * b;
            float amax = 0.0f;
            for (int i = 0; i < 32; i++) amax = fmaxf(amax, fabsf(v[i]));
            const float d = amax / 127.0f, id = d > 0.0f ? 1.0f / d : 0.0f;
            int s[2] = {0, 0};
            for (int i = 0; i < 32; i++) {
                const int qi = (int)rintf(v[i] * id);
                q.q[m * K + 32 * b + i] = (int8_t)qi;
                s[i / 16] += qi;
            }
            q.d[m * (K / 32) + b] = d;
            q.s[m * (K / 16) + 2 * b] = d * (float)s[0];
            q.s[m * (K / 16) + 2 * b + 1] = d * (float)s[1];
        }
}

template <int T>
static void check_gemv(pl_rng *r, int64_t K, size_t offset, bool vec) {
    const int M = 3, N = 4;
    const bool quant = T == PL_Q8_0 || T == PL_Q4_K || T == PL_Q6_K;
    rows w = make_rows((pl_dtype)T, K, N, offset, r);
    float *x = (float *)aligned_alloc(64, (size_t)(M * K + 16) * sizeof(float));
    pl_fill_normal(r, x, M * K, 1.0f);
    pl_cu_xq q;
    q.q = (int8_t *)aligned_alloc(64, (size_t)(M * K) + 64);
    q.d = (float *)aligned_alloc(64, (size_t)(M * K / 32 + 16) * sizeof(float));
    q.s = (float *)aligned_alloc(64, (size_t)(M * K / 16 + 16) * sizeof(float));
    if (quant) quantize_x(x, K, M, q);
    pl_cu_gv_args a;
    memset(&a, 0, sizeof a);
    a.K = K;
    a.N = N;
    a.M = M;
    a.x = (const char *)x;
    a.x_nb1 = (size_t)K * sizeof(float);
    a.xq = q;
    a.vec = vec;
    float *deq = (float *)malloc((size_t)K * sizeof(float));
    double worst = 0;
    for (int n = 0; n < N; n++) {
        float acc[4] = {0, 0, 0, 0};
        const int64_t U = pl_cu_gv_units<T>(K);
        for (int64_t u = 0; u < U; u++) pl_cu_gv_unit<T, 4>(a, (const char *)row_at(&w, n), u, acc);
        pl_dequantize_row((pl_dtype)T, row_at(&w, n), deq, K);
        for (int m = 0; m < M; m++) {
            double want = 0, mag = 0;
            for (int64_t k = 0; k < K; k++) {
                const double xv = quant ? (double)q.q[m * K + k] * (double)q.d[m * (K / 32) + k / 32] : (double)x[m * K + k];
                want += (double)deq[k] * xv;
                mag += fabs((double)deq[k] * xv);
            }
            const double err = fabs((double)acc[m] - want) / (mag > 0 ? mag : 1);
            if (err > worst) worst = err;
        }
    }
    CHECK(worst < 2e-6, "gemv units %s (K %lld, row offset %zu, vec %d): relative error %.3e", pl_dtype_name((pl_dtype)T),
          (long long)K, offset, (int)vec, worst);
    free(deq);
    free(x);
    free(q.q);
    free(q.d);
    free(q.s);
}

int main(void) {
    pl_rng r = {0xC0DA};
    check_groups<PL_F32>(&r);
    check_groups<PL_F16>(&r);
    check_groups<PL_BF16>(&r);
    check_groups<PL_Q8_0>(&r);
    check_groups<PL_Q4_K>(&r);
    check_groups<PL_Q6_K>(&r);

    check_tiles<PL_F16>(&r, 512, 0, true);
    check_tiles<PL_F16>(&r, 33, 2, false);
    check_tiles<PL_Q8_0>(&r, 512, 2, false);
    check_tiles<PL_Q4_K>(&r, 512, 0, true);
    check_tiles<PL_Q4_K>(&r, 512, 8, false);
    check_tiles<PL_Q6_K>(&r, 768, 2, false);

    check_gemv<PL_F32>(&r, 512, 0, true);
    check_gemv<PL_F32>(&r, 33, 4, false);
    check_gemv<PL_F16>(&r, 512, 0, true);
    check_gemv<PL_F16>(&r, 33, 2, false);
    check_gemv<PL_BF16>(&r, 512, 0, true);
    check_gemv<PL_BF16>(&r, 37, 2, false);
    check_gemv<PL_Q8_0>(&r, 512, 2, false);
    check_gemv<PL_Q4_K>(&r, 1024, 0, true);
    check_gemv<PL_Q4_K>(&r, 1024, 8, false);
    check_gemv<PL_Q6_K>(&r, 768, 2, false);

    /* The ladder types: one decoder (pl_cu_decode32) behind all three uses;
     * rows at offset 2 / 6 (blocks only 2-byte aligned, as in a file) and at
     * 0 with 16-byte activation loads. */
#define LADDER_CHECKS_(T)                       \
    check_groups<T>(&r);                        \
    check_tiles<T>(&r, 768, 2, false);          \
    check_gemv<T>(&r, 768, 6, false);           \
    check_gemv<T>(&r, 1024, 0, true);
    PL_CU_LADDER_TYPES(LADDER_CHECKS_)
#undef LADDER_CHECKS_

    printf("test_cuda_units: %d passed, %d failed\n", n_pass, n_fail);
    return n_fail ? 1 : 0;
}
