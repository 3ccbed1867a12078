/* The quantized-cache attention's inner steps (cpu_attention_quant_avx2.c;
 * the driver is in cpu_attention.c, "quantized caches"): the V step, and the
 * prefill tiles' kernels (q8_0 K scores with VNNI, the scan over a
 * transposed score tile, the V step from a decoded tile). All need AVX-512
 * (the VNNI ones avx512vnni); the caller checks pl_cpu_has_vnni512. */
#ifndef PL_CPU_ATTENTION_QUANT_H
#define PL_CPU_ATTENTION_QUANT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include "kernels/dtype.h"

/* The V step of R query rows over n cache positions, AVX-512: each V row
 * (dtype t: q8_0, q4_0, f16 or f32 -- a tile decoded beforehand; row j at
 * v + j * vs, hd elements) is decoded
 * once into registers and added to every row's accumulator acc[r*hd..]:
 * E[r*ldE + j] with the sign bit set marks a new maximum (acc = acc * -E + v),
 * else acc += E * v -- pl_cpu_attq_axpy_avx2's roundings, element for
 * element. hd % 16 == 0 and hd <= 128. Returns false (nothing done) for
 * other shapes and dtypes. */
bool pl_cpu_attq_vstep_avx512(int R, const float *E, int64_t ldE, int64_t n, pl_dtype t, const char *v, size_t vs,
                              int64_t hd, float *acc);

/* q8_0 K scores for a prefill block (AVX-512 VNNI; the caller checks the
 * CPU): R query rows already in q8_0 (row r at qc + r * qrow, hd / 32
 * blocks) are packed once per block into qpack (pl_cpu_attq_qk_qpack_size
 * bytes); then per tile of n K rows (q8_0, row j at k + j * ks)
 * sc[j * ldS + r] (transposed: a position's rows side by side, for
 * pl_cpu_attq_scan_t) = the dot of K row j and query row r, bit for bit as
 * pl_cpu_mm_q8_0_avx2 computes it (unscaled). kpack: scratch of
 * pl_cpu_attq_qk_kpack_size(n, hd) bytes. hd % 32 == 0. */
size_t pl_cpu_attq_qk_qpack_size(int R, int64_t hd);
size_t pl_cpu_attq_qk_kpack_size(int64_t n, int64_t hd);
void pl_cpu_attq_qk_prepare(int R, const char *qc, size_t qrow, int64_t hd, void *qpack);
void pl_cpu_attq_qk_scores(int R, const void *qpack, const char *k, size_t ks, int64_t n, int64_t hd, void *kpack,
                           float *sc, int64_t ldS);

/* The running-maximum scan of pl_att_scan (cpu_attention.c) for R rows at
 * once, 16 per vector, on a transposed tile: ET[j * ldT + r] (j < n) holds
 * row r's dot with position j; row r sees lim[r] (0..n) positions of the
 * tile. Per row, as pl_att_scan after the scale: e = scale * dot, at a new
 * maximum (e > M) the argument M - e and M = e, else e - M; exp (pl_exp8 in
 * whole groups of 8 from the tile's start, expf for the row's last
 * lim % 8); then S = S * e + 1 (the tag -e) or S = S * 1 + e. Positions
 * past lim[r] get 0. ldT % 16 == 0. */
void pl_cpu_attq_scan_t(int R, float *ET, int64_t ldT, int64_t n, const int32_t *lim, float scale, float *M,
                        float *S, bool exp16);
/* The V step of pl_cpu_attq_vstep_avx512 for a decoded f32 tile V [n][hd]
 * and the transposed weights ET[j * ldT + r]. */
bool pl_cpu_attq_vtile_t(int R, const float *ET, int64_t ldT, int64_t n, const float *V, int64_t hd, float *acc);
/* A V tile, n q8_0 / q4_0 rows of hd (row j at v + j * vs), decoded to
 * out [n][hd] f32 (d * q exactly); false (nothing done) for other dtypes. */
bool pl_cpu_attq_vdecode_avx512(pl_dtype t, const char *v, size_t vs, int64_t n, int64_t hd, float *out);
/* q8_0 K scores for R = 1 or 2 query rows (decode: one token's KV group),
 * AVX-512 VNNI: qpack from pl_cpu_attq_qk_prepare(R, ...); per K row j
 * (q8_0, at k + j * ks) sc[r * ldS + j] = the dot of K row j and query row
 * r, bit for bit as pl_cpu_mm_q8_0_avx2 (unscaled; not transposed). Reads
 * K rows up to 8 past n only as prefetches. false (nothing done) for other
 * R or hd (32..128, a multiple of 32). */
bool pl_cpu_attq_qk_dec(int R, const void *qpack, const char *k, size_t ks, int64_t n, int64_t hd, float *sc,
                        int64_t ldS);
/* The scan's exp (its exp16 argument): true pl_exp8's operations on a zmm,
 * false two pl_exp8 calls (the same bits). pl_cpu_attq_exp16_mode: -1
 * follows the switch PL_CPU_ATTQ_EXP16 (on by default); tests set 0 or 1.
 * pl_cpu_attq_exp16: y[i] = that exp of x[i] for whole groups of 16 of n
 * (tests). */
extern int pl_cpu_attq_exp16_mode;
void pl_cpu_attq_exp16(const float *x, float *y, int64_t n, bool native);

#endif
