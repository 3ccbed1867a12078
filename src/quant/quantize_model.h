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
#include "pocketllm.h"

/* pl_quantize_file (include/pocketllm.h) is implemented in
 * quant/quantize_model.c: the public params and stats are the whole
 * interface. Per-tensor overrides (pl_quant_override) are applied after the
 * mix's rules, as llama-quantize's --tensor-type does. */

#endif
