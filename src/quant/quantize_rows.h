/*
 * Whole-row quantization with an optional importance matrix: what GGML's
 * quantize_<type>(src, dst, nrow, n_per_row, imatrix) computes, and so what
 * llama-quantize writes for one tensor.
 *
 * imatrix (NULL or n_per_row floats) is the mean squared activation of each
 * input column of the weight (sum of x^2 over the calibration tokens divided
 * by their count; see quant/imatrix.h). With it, every quantizer weights its
 * squared error per element by imatrix[col] * sqrt(sigma^2 + x^2) (as GGML
 * does), so columns that see large activations are reproduced more
 * faithfully. Without it, the k-quants fall back to GGML's reference
 * algorithms (quant/quant.h: pl_quantize_row).
 *
 * Implementations: quant/quantize_kq.c (q2_K..q6_K with weights),
 * quant/quantize_iq.c (IQ2_XXS, IQ2_XS, IQ1_S, IQ1_M, TQ1_0, TQ2_0), and the
 * dispatch below in quant/quantize_kq.c.
 */
#ifndef PL_QUANT_QUANTIZE_ROWS_H
#define PL_QUANT_QUANTIZE_ROWS_H
#include <stdbool.h>
#include <stdint.h>
#include "pocketllm.h"
#include "kernels/dtype.h"

/* True if pl_quantize_rows can produce dtype t (with or without imatrix). */
bool pl_quantize_rows_supported(pl_dtype t);
/* True if t cannot be produced without an importance matrix (GGML asserts
 * for these: IQ2_XXS, IQ2_XS, IQ1_S). */
bool pl_quantize_needs_imatrix(pl_dtype t);
/* True if an importance matrix changes t's result (the k-quants from q2_K to
 * q6_K and the IQ types; not f32/f16/bf16/q8_0/TQ). */
bool pl_quantize_uses_imatrix(pl_dtype t);

/* Quantizes nrows rows of n_per_row floats (n_per_row a multiple of t's
 * block size) into dst, pl_dtype_row_size(t, n_per_row) bytes per row.
 * PL_ERR_UNSUPPORTED for a type without a quantizer, PL_ERR_INVALID_ARG for a
 * bad shape or a missing imatrix where one is required. Rows are independent,
 * so callers may split a tensor across threads by rows. */
pl_status pl_quantize_rows(pl_dtype t, const float *src, void *dst, int64_t nrows, int64_t n_per_row,
                           const float *imatrix);

/* The weighted k-quant rows (quant/quantize_kq.c); qw = n_per_row weights. */
void pl_quantize_row_q2_K_w(const float *x, void *dst, int64_t n_per_row, const float *qw);
void pl_quantize_row_q3_K_w(const float *x, void *dst, int64_t n_per_row, const float *qw);
void pl_quantize_row_q4_K_w(const float *x, void *dst, int64_t n_per_row, const float *qw);
void pl_quantize_row_q5_K_w(const float *x, void *dst, int64_t n_per_row, const float *qw);
void pl_quantize_row_q6_K_w(const float *x, void *dst, int64_t n_per_row, const float *qw);

/* The IQ / TQ rows (quant/quantize_iq.c). qw may be NULL only for iq1_m and
 * the TQ types (which ignore it). */
void pl_quantize_row_iq2_xxs_w(const float *x, void *dst, int64_t n_per_row, const float *qw);
void pl_quantize_row_iq2_xs_w(const float *x, void *dst, int64_t n_per_row, const float *qw);
void pl_quantize_row_iq1_s_w(const float *x, void *dst, int64_t n_per_row, const float *qw);
void pl_quantize_row_iq1_m_w(const float *x, void *dst, int64_t n_per_row, const float *qw);
void pl_quantize_row_tq1_0(const float *x, void *dst, int64_t n);
void pl_quantize_row_tq2_0(const float *x, void *dst, int64_t n);

#endif
