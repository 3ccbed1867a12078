/*
 * The importance-matrix accumulator behind `pocketllm imatrix`, built on the
 * public per-node observer (pl_model_set_observer): after every matmul whose
 * weight is a "blk.*" tensor (or output.weight on request) and whose input
 * has at least 16 rows (llama.cpp's rules), the squared input activations are
 * added per column into that weight's entry. Written with pl_imatrix_write
 * in llama.cpp's GGUF imatrix format. After every expert-indexed matmul
 * (matmul_id: ffn_*_exps, any batch size, as llama.cpp), each routed
 * (slot, token) row is added to its expert's sums and count: such an entry is
 * in_sum2 [n_cols, n_expert], counts [1, n_expert].
 */
#ifndef PL_TOOLS_IMATRIX_COLLECT_H
#define PL_TOOLS_IMATRIX_COLLECT_H
#include <stdbool.h>
#include <stdint.h>
#include "pocketllm.h"

typedef struct imx_collector imx_collector;

/* dataset: the text's name (imatrix.datasets); chunk_size: tokens per chunk.
 * NULL when out of memory. */
imx_collector *imx_create(const char *dataset, int chunk_size, bool process_output);
void imx_free(imx_collector *c);
/* attach: every forward pass of m adds its matmul inputs; detach (call before
 * freeing the model or the collector) stops. */
pl_status imx_attach(imx_collector *c, pl_model *m);
void imx_detach(imx_collector *c, pl_model *m);
/* The observer itself (imx_attach installs it), for callers that chain. */
void imx_observe(void *user, const pl_node_info *node);
/* One more chunk of text processed. */
void imx_add_chunk(imx_collector *c);
/* The first error met while collecting (a weight seen with two input sizes,
 * non-finite sums, out of memory), with pl_last_error-style text in msg;
 * PL_OK if none. */
pl_status imx_status(const imx_collector *c, const char **msg);
int imx_n_entries(const imx_collector *c);
uint32_t imx_chunk_count(const imx_collector *c);
uint32_t imx_chunk_size(const imx_collector *c);
pl_status imx_save(const imx_collector *c, const char *path);

#endif
