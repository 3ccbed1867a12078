/* GELU as GGML's CPU backend computes it inside GEGLU (the normative scalar
 * definition; the ref backend calls it per element, the cpu backend tabulates
 * pl_gelu_f16_entry over all 65536 f16 values, as GGML does).
 *
 * GGML_GELU_FP16 is defined in ggml-cpu's vec.h, so its f32 geglu rounds the
 * gate to f16, reads gelu from a table built as f16(gelu_tanh(f16 value)) and
 * multiplies by up in float; gates outside (-10, 10) bypass the table. The
 * tanh-form constants and evaluation order are GGML's ggml_gelu_f32.
 * Checked against libggml-cpu's exported ggml_table_gelu_f16 (all 65536
 * entries equal; see tests/fixtures/PROVENANCE.md). */
#ifndef PL_KERNELS_GELU_H
#define PL_KERNELS_GELU_H
#include "core/fp16.h"
#include <math.h>

#define PL_GELU_COEF_A 0.044715f
#define PL_GELU_SQRT_2_OVER_PI 0.79788456080286535587989211986876f

/* The reference build of ggml-cpu (-march=native, GCC's default
 * -ffp-contract=fast) contracts 1 + (A*x)*x into one fused multiply-add; the
 * explicit fmaf keeps that rounding whatever this file is compiled with (it
 * changes one table entry, x = -1.999, against the unfused form). */
static inline float pl_gelu_tanh_f32(float x) {
    const float inner = fmaf(PL_GELU_COEF_A * x, x, 1.0f);
    return 0.5f * x * (1.0f + tanhf(PL_GELU_SQRT_2_OVER_PI * x * inner));
}

/* The table entry for the f16 bit pattern h. */
static inline pl_f16 pl_gelu_f16_entry(pl_f16 h) { return pl_f32_to_f16(pl_gelu_tanh_f32(pl_f16_to_f32(h))); }

/* gelu(g) * u exactly as GGML's ggml_vec_geglu_f32 (GGML_GELU_FP16). */
static inline float pl_geglu_ggml(float g, float u) {
    if (g <= -10.0f) return 0.0f;
    if (g >= 10.0f) return g * u;
    return pl_f16_to_f32(pl_gelu_f16_entry(pl_f32_to_f16(g))) * u;
}

#endif
