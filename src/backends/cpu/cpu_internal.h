/* Internals of the optimized `cpu` backend, shared by its files.
 *
 * Every kernel exists twice: a portable C version (cpu_*.c, baseline x86-64
 * or any other architecture) and an AVX2+FMA+F16C version (cpu_*_avx2.c,
 * compiled with those flags). The portable entry points pick the AVX2 path at
 * run time with pl_cpu_has_avx2(); the *_avx2 symbols are only declared (and
 * only defined) on x86-64, which is the only place CMake compiles them.
 */
#ifndef PL_BACKENDS_CPU_INTERNAL_H
#define PL_BACKENDS_CPU_INTERNAL_H
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include "kernels/abi.h"
#include "quant/blocks.h"

#if defined(__x86_64__) || defined(_M_X64)
#define PL_CPU_HAVE_AVX2_BUILD 1
#else
#define PL_CPU_HAVE_AVX2_BUILD 0
#endif

/* ---- matmul micro-kernels ---------------------------------------------------
 *
 * A tile kernel computes nr weight rows x nc activation rows:
 *     dst[c * dst_stride + r] = dot(W row r, A row c)   r < nr, c < nc
 * w points at the first weight row (w_stride bytes apart, K elements in the
 * weight dtype), a at the first activation row (a_stride bytes apart, K
 * elements in the activation format of that weight dtype: see
 * pl_cpu_mm_type). nr <= max_nr and nc <= max_nc of the type. */
typedef void (*pl_cpu_mm_kernel)(int64_t K, const void *w, size_t w_stride, int nr,
                                 const void *a, size_t a_stride, int nc,
                                 float *dst, size_t dst_stride);
/* Converts one F32 activation row of K elements to the activation format. */
typedef void (*pl_cpu_from_float)(const float *x, void *dst, int64_t K);

typedef struct pl_cpu_mm_type {
    pl_dtype wtype;          /* weight dtype */
    /* Activation format, as llama.cpp picks it (vec_dot_type): Q8_K for the
     * k-quants, Q8_0 for Q8_0, and for F16 / BF16 weights the activations
     * rounded to F16 / BF16 (stored here widened back to F32, which gives
     * the same products and saves a conversion per use). F32: none. */
    pl_dtype vtype;
    pl_cpu_from_float from_float;   /* NULL: activations are used as they are */
    pl_cpu_mm_kernel kernel;
    int max_nr, max_nc;
} pl_cpu_mm_type;

/* The implementation for a weight dtype on this CPU, or NULL. */
const pl_cpu_mm_type *pl_cpu_mm_type_get(pl_dtype wtype);
/* Bytes of one converted activation row of K elements (0: none needed). */
size_t pl_cpu_mm_act_row_size(const pl_cpu_mm_type *t, int64_t K);

/* Portable activation converters (bit-exact with llama.cpp on x86: q8_0 as
 * its AVX quantize_row_q8_0, q8_K as quantize_row_q8_K_ref). */
void pl_cpu_quantize_q8_0(const float *x, void *dst, int64_t K);
void pl_cpu_quantize_q8_K(const float *x, void *dst, int64_t K);
void pl_cpu_round_f16(const float *x, void *dst, int64_t K);
void pl_cpu_round_bf16(const float *x, void *dst, int64_t K);

/* Portable tile kernels (cpu_matmul.c). */
void pl_cpu_mm_f32(int64_t K, const void *w, size_t ws, int nr, const void *a, size_t as, int nc, float *d, size_t ds);
void pl_cpu_mm_f16(int64_t K, const void *w, size_t ws, int nr, const void *a, size_t as, int nc, float *d, size_t ds);
void pl_cpu_mm_bf16(int64_t K, const void *w, size_t ws, int nr, const void *a, size_t as, int nc, float *d, size_t ds);
void pl_cpu_mm_q8_0(int64_t K, const void *w, size_t ws, int nr, const void *a, size_t as, int nc, float *d, size_t ds);
void pl_cpu_mm_q4_K(int64_t K, const void *w, size_t ws, int nr, const void *a, size_t as, int nc, float *d, size_t ds);
void pl_cpu_mm_q6_K(int64_t K, const void *w, size_t ws, int nr, const void *a, size_t as, int nc, float *d, size_t ds);

#if PL_CPU_HAVE_AVX2_BUILD
/* AVX2 versions (cpu_matmul_avx2.c). */
void pl_cpu_quantize_q8_0_avx2(const float *x, void *dst, int64_t K);
void pl_cpu_quantize_q8_K_avx2(const float *x, void *dst, int64_t K);
void pl_cpu_round_f16_avx2(const float *x, void *dst, int64_t K);
void pl_cpu_round_bf16_avx2(const float *x, void *dst, int64_t K);
void pl_cpu_mm_f32_avx2(int64_t K, const void *w, size_t ws, int nr, const void *a, size_t as, int nc, float *d, size_t ds);
void pl_cpu_mm_f16_avx2(int64_t K, const void *w, size_t ws, int nr, const void *a, size_t as, int nc, float *d, size_t ds);
void pl_cpu_mm_bf16_avx2(int64_t K, const void *w, size_t ws, int nr, const void *a, size_t as, int nc, float *d, size_t ds);
void pl_cpu_mm_q8_0_avx2(int64_t K, const void *w, size_t ws, int nr, const void *a, size_t as, int nc, float *d, size_t ds);
void pl_cpu_mm_q4_K_avx2(int64_t K, const void *w, size_t ws, int nr, const void *a, size_t as, int nc, float *d, size_t ds);
void pl_cpu_mm_q6_K_avx2(int64_t K, const void *w, size_t ws, int nr, const void *a, size_t as, int nc, float *d, size_t ds);
#endif

/* ---- op entry points (one per table entry family) ----------------------------*/

pl_status pl_cpu_op_matmul(pl_exec_ctx *ctx, const pl_node *node);
size_t pl_cpu_work_matmul(const pl_node *node, int n_threads);
pl_status pl_cpu_op_get_rows(pl_exec_ctx *ctx, const pl_node *node);
pl_status pl_cpu_op_rms_norm(pl_exec_ctx *ctx, const pl_node *node);
pl_status pl_cpu_op_add(pl_exec_ctx *ctx, const pl_node *node);
pl_status pl_cpu_op_swiglu(pl_exec_ctx *ctx, const pl_node *node);
pl_status pl_cpu_op_rope(pl_exec_ctx *ctx, const pl_node *node);
pl_status pl_cpu_op_kv_store(pl_exec_ctx *ctx, const pl_node *node);
pl_status pl_cpu_op_attention(pl_exec_ctx *ctx, const pl_node *node);
size_t pl_cpu_work_attention(const pl_node *node, int n_threads);

/* ---- shared helpers -----------------------------------------------------------*/

/* Scratch for a kernel: ctx->work if it is large enough, else a private
 * allocation (so a caller that did not size the work buffer still gets a
 * correct result). Release with pl_cpu_scratch_release. 64-byte aligned. */
typedef struct pl_cpu_scratch {
    void *ptr;
    void *owned;
} pl_cpu_scratch;
pl_status pl_cpu_scratch_get(pl_exec_ctx *ctx, size_t bytes, pl_cpu_scratch *s);
void pl_cpu_scratch_release(pl_cpu_scratch *s);

/* Splits [0, n) into nth near-equal ranges; thread ith gets [*lo, *hi). */
static inline void pl_cpu_split(int64_t n, int ith, int nth, int64_t *lo, int64_t *hi) {
    int64_t per = n / nth, rem = n % nth;
    *lo = ith * per + (ith < rem ? ith : rem);
    *hi = *lo + per + (ith < rem ? 1 : 0);
}

/* Row r of a tensor viewed as a 2-D [ne0, ne1*ne2*ne3] matrix of rows. */
static inline char *pl_cpu_row(const pl_tensor *t, int64_t r) {
    int64_t i1 = r % t->ne[1];
    int64_t i23 = r / t->ne[1];
    int64_t i2 = i23 % t->ne[2];
    int64_t i3 = i23 / t->ne[2];
    return (char *)t->data + i1 * t->nb[1] + i2 * t->nb[2] + i3 * t->nb[3];
}

/* Element-wise helpers with AVX2 versions (cpu_ops.c / cpu_ops_avx2.c). */
void pl_cpu_vec_f16_to_f32(const uint16_t *x, float *y, int64_t n);
void pl_cpu_vec_f32_to_f16(const float *x, uint16_t *y, int64_t n);
void pl_cpu_vec_bf16_to_f32(const uint16_t *x, float *y, int64_t n);
#if PL_CPU_HAVE_AVX2_BUILD
void pl_cpu_vec_f16_to_f32_avx2(const uint16_t *x, float *y, int64_t n);
void pl_cpu_vec_f32_to_f16_avx2(const float *x, uint16_t *y, int64_t n);
void pl_cpu_vec_bf16_to_f32_avx2(const uint16_t *x, float *y, int64_t n);
/* Attention inner loops (cpu_attention_avx2.c); see cpu_attention.c. */
void pl_cpu_att_scores_avx2(int R, const float *const *q, const char *k, size_t ks, bool f16, int64_t n_kv,
                            int64_t hd, float scale, float *S, int64_t ldS);
void pl_cpu_att_values_avx2(int R, const float *P, int64_t ldS, const char *v, size_t vs, bool f16, int64_t n_kv,
                            int64_t hd, float *O, bool accumulate);
float pl_cpu_att_softmax_avx2(float *x, int64_t n);
double pl_cpu_sumsq_avx2(const float *x, int64_t n);
void pl_cpu_scale_mul_avx2(const float *x, float s, const float *w, float *y, int64_t n);
void pl_cpu_add_avx2(const float *a, const float *b, float *y, int64_t n);
void pl_cpu_swiglu_avx2(const float *g, const float *u, float *y, int64_t n);
#endif

#endif
