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
 * n_mat is 1 for a dense 2-D weight (experts would have one row each). The
 * quantizers want the per-column mean, sum / count (quant/quantize_rows.h).
 *
 * Collecting: pl_imatrix_attach installs an observer on a loaded model's
 * executor (pl_exec_ctx.on_node) that, after every MATMUL whose weight is a
 * "blk.*" tensor and whose input has at least 16 rows (llama.cpp's rules),
 * adds the squared input activations into the entry of that weight.
 */
#ifndef PL_QUANT_IMATRIX_H
#define PL_QUANT_IMATRIX_H
#include <stdbool.h>
#include <stdint.h>
#include "pocketllm.h"

typedef struct pl_imatrix pl_imatrix;

/* An empty matrix for collection. dataset: the text's name (stored in
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

/* Collection. attach: every forward pass of m adds its matmul inputs;
 * detach: stops (call before freeing the model or the matrix). Set
 * process_output to also collect output.weight (llama.cpp's
 * --process-output). */
pl_status pl_imatrix_attach(pl_imatrix *im, pl_model *m, bool process_output);
void pl_imatrix_detach(pl_model *m);
/* Marks one more chunk of text as processed. */
void pl_imatrix_add_chunk(pl_imatrix *im);
/* The first error met while collecting (e.g. a weight seen with two different
 * input sizes), PL_OK if none. */
pl_status pl_imatrix_status(const pl_imatrix *im);

pl_status pl_imatrix_save(const pl_imatrix *im, const char *path);

#endif
