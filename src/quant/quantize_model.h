/*
 * Quantizing a whole GGUF model file, as llama-quantize does: the same
 * per-tensor types (quant/quantize_mix.h), the same quantizers with the same
 * importance-matrix weights (quant/quantize_rows.h), the same tensor order,
 * metadata (every key of the input, then general.quantization_version,
 * general.file_type and the quantize.imatrix.* keys) and layout, so the
 * output is byte-identical with llama-quantize's where our quantizers are.
 *
 * The output is written tensor by tensor (each produced when the writer
 * reaches it), so memory stays at one output tensor plus row buffers.
 */
#ifndef PL_QUANT_QUANTIZE_MODEL_H
#define PL_QUANT_QUANTIZE_MODEL_H
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include "pocketllm.h"

typedef struct pl_quantize_params {
    const char *ftype;          /* a pl_ftype_info name: "Q4_K_M", "IQ2_XXS", ... */
    const char *imatrix_path;   /* NULL: none (the IQ1/IQ2 types then fail) */
    int n_threads;              /* 0: all cores */
    FILE *log;                  /* per-tensor progress lines; NULL: silent */
} pl_quantize_params;

typedef struct pl_quantize_stats {
    uint64_t n_elements;        /* of all tensors */
    uint64_t bytes_in, bytes_out;  /* tensor data, input and output */
    uint64_t file_size;         /* of the output file */
    int n_tensors, n_quantized, n_fallback;
} pl_quantize_stats;

/* Quantizes in_path into out_path. stats may be NULL. */
pl_status pl_quantize_file(const char *in_path, const char *out_path, const pl_quantize_params *p,
                           pl_quantize_stats *stats);

#endif
