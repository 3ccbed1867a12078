/*
 * Importance matrices in llama.cpp's GGUF imatrix format (what llama-imatrix
 * writes and llama-quantize --imatrix reads):
 *
 *   general.type = "imatrix"
 *   imatrix.datasets    = [names of the calibration texts]
 *   imatrix.chunk_count = chunks of text the statistics saw (u32)
 *   imatrix.chunk_size  = tokens per chunk (u32)
 *   for every matmul weight W (sorted by name):
 *     "<W>.in_sum2"  F32 [n_cols, n_mat]  sum over tokens of x[col]^2, x = W's input
 *     "<W>.counts"   F32 [1, n_mat]       number of tokens summed
 *
 * n_mat is 1 for a dense 2-D weight (written 1-D: in_sum2 [n_cols], counts
 * [1]) and n_expert for a 3-D expert tensor [n_cols, n_rows, n_expert]: one
 * row of sums and one count per expert (the rows routed to it; 0 for an
 * expert the text never reached). The quantizers want the per-column mean,
 * sum / count (quant/quantize_rows.h), each expert's matrix its own slice.
 *
 * Collecting is not the library's: a program installs a per-node observer
 * (pl_model_set_observer) and sums the squared matmul inputs itself, then
 * writes them with pl_imatrix_write (pocketllm.h); the CLI's collector is
 * tools/pocketllm/imatrix_collect.c. This module reads the files (for the
 * quantizer) and writes them.
 */
#ifndef PL_QUANT_IMATRIX_H
#define PL_QUANT_IMATRIX_H
#include <stdbool.h>
#include <stdint.h>
#include "pocketllm.h"

typedef struct pl_imatrix pl_imatrix;

/* An empty matrix. dataset: the text's name (stored in
 * imatrix.datasets); chunk_size: tokens per chunk. */
pl_status pl_imatrix_create(const char *dataset, int chunk_size, pl_imatrix **out);
/* Reads a GGUF imatrix file (PL_ERR_FORMAT for anything else, including the
 * legacy .dat format). */
pl_status pl_imatrix_load(const char *path, pl_imatrix **out);
void pl_imatrix_free(pl_imatrix *im);

int pl_imatrix_n_entries(const pl_imatrix *im);
const char *pl_imatrix_entry_name(const pl_imatrix *im, int i);
uint32_t pl_imatrix_chunk_count(const pl_imatrix *im);
uint32_t pl_imatrix_chunk_size(const pl_imatrix *im);
/* The first dataset name, or "" if none. */
const char *pl_imatrix_dataset(const pl_imatrix *im);

/* The quantization weights of tensor `name`: n_cols * n_mat floats, the
 * per-column mean of x^2 (1 where a matrix saw no tokens), as llama-quantize
 * computes them. NULL if the matrix has no entry for that name. The pointer
 * stays valid until the matrix is freed or collects more data. */
const float *pl_imatrix_weights(pl_imatrix *im, const char *name, int64_t *n);

/* Writes the matrix with pl_imatrix_write. */
pl_status pl_imatrix_save(const pl_imatrix *im, const char *path);

#endif
