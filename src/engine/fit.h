/*
 * The quantization ladder and the fit arithmetic.
 *
 * PocketLLM runs a model on exactly one device and never offloads. A model
 * that does not fit is quantized further down a fixed ladder, and the plan is
 * the highest-precision rung that fits:
 *
 *     (as is) > Q8_0 > Q6_K > Q4_K_M > Q2_K > IQ2_XS > IQ2_XXS > IQ1_M > IQ1_S
 *             > TQ2_0 > TQ1_0
 *
 * Each rung is a llama.cpp file type with its per-tensor mix
 * (quant/quantize_mix.h), so a rung's size is computed from the tensor shapes
 * alone. The ladder starts below the model's own type: an f16/bf16/f32 file
 * starts at "as is", then Q8_0; a Q4_K_M file starts at "as is", then Q2_K.
 * The ternary rungs come last by rule (they are for natively ternary
 * models); with llama.cpp's mixes they are not smaller than IQ1_S, so for an
 * ordinary model they are chosen only when IQ1_S cannot be made (never for
 * size reasons).
 *
 * Bytes needed on the device at a rung = weights at that rung + KV cache for
 * n_ctx tokens + scratch (activations, kernel work memory, inputs), computed
 * by the same planner pl_model_load runs (pl_model_plan_gguf), so "fits"
 * here means pl_model_load with that memory_budget succeeds.
 */
#ifndef PL_ENGINE_FIT_H
#define PL_ENGINE_FIT_H
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include "pocketllm.h"

#define PL_FIT_MAX_RUNGS 24

typedef struct pl_fit_rung_rec {
    char name[16];           /* "Q4_K_M", or the file's own type for the first rung */
    int ftype;               /* llama.cpp file type (general.file_type) */
    bool as_is;              /* the model unchanged */
    bool needs_imatrix;      /* producing it needs an importance matrix */
    pl_status status;        /* PL_OK, or why it cannot be planned on this device */
    char error[200];
    pl_memory_plan plan;     /* bytes on the device */
    uint64_t n_params;       /* elements of the weights */
    double bpw;              /* weight bits per element */
    bool fits;
    const char *cache_k, *cache_v;   /* KV cache types of the plan (static strings) */
    int32_t max_ctx;         /* longest context the budget holds with them (0: none) */
} pl_fit_rung_rec;

typedef struct pl_fit_result {
    char model[128];         /* file name or preset */
    char device[32];
    int n_ctx;
    uint64_t budget;
    bool budget_is_free_memory;   /* taken from the device, not given */
    int n_rungs;
    pl_fit_rung_rec rungs[PL_FIT_MAX_RUNGS];
    int chosen;              /* the highest rung that fits; -1: none */
} pl_fit_result;

/* The ladder's rung names below "as is", top first. */
const char *const *pl_fit_ladder(int *n);

/* Plans every rung of a model file into *out (pl_fit in pocketllm.h). */
pl_status pl_fit_plan_file(const char *path, const pl_fit_params *p, pl_fit_result *out);
/* Plans every rung of a Qwen3 release shape ("0.6b", "1.7b", "4b", "8b", as
 * released in bf16) without any weights: the tensor table is synthesized and
 * the tokenizer metadata is taken from vocab_path (a vocab-only GGUF). */
pl_status pl_fit_plan_preset(const char *preset, const char *vocab_path, const pl_fit_params *p, pl_fit_result *out);

/* Budget parsing ("4G", "auto") and the advice printed after
 * PL_ERR_DOES_NOT_FIT are presentation: they live in tools/pocketllm/cli_fit.c. */

#endif
