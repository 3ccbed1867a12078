/*
 * The (op, key dtype) pairs the CUDA backend implements: one list, read by
 * both sides of the module boundary. The loader (cuda_loader.c, in the
 * library) turns it into the `cuda` backend's kernel table, so `pocketllm
 * ops/backends` can list it without loading anything; the module
 * (cuda_backend.cu) turns it into its own dispatch list, and the loader
 * refuses a module whose list differs (a module built from another tree).
 *
 * Weight formats: f32, f16, bf16, q8_0, q4_K, q6_K, and the quantization
 * ladder's q2_K, q3_K, q5_K, iq2_xxs, iq2_xs, iq2_s, iq1_s, iq1_m, tq1_0,
 * tq2_0 (every type in llama.cpp's Q2_K / IQ2 / IQ1 / TQ mixes), decoded
 * inside the kernels (the file's packed blocks are uploaded as they are).
 * Everything else a Qwen3 graph uses is f32, plus f16 or f32 KV caches.
 */
#ifndef PL_BACKENDS_CUDA_TABLE_H
#define PL_BACKENDS_CUDA_TABLE_H

#define PL_CUDA_WEIGHT_TYPES(X, op) \
    X(op, PL_F32)                   \
    X(op, PL_F16)                   \
    X(op, PL_BF16)                  \
    X(op, PL_Q8_0)                  \
    X(op, PL_Q4_K)                  \
    X(op, PL_Q6_K)                  \
    X(op, PL_Q2_K)                  \
    X(op, PL_Q3_K)                  \
    X(op, PL_Q5_K)                  \
    X(op, PL_IQ2_XXS)               \
    X(op, PL_IQ2_XS)                \
    X(op, PL_IQ2_S)                 \
    X(op, PL_IQ1_S)                 \
    X(op, PL_IQ1_M)                 \
    X(op, PL_TQ1_0)                 \
    X(op, PL_TQ2_0)

#define PL_CUDA_KERNELS(X)                          \
    PL_CUDA_WEIGHT_TYPES(X, PL_OP_GET_ROWS)         \
    X(PL_OP_RMS_NORM, PL_F32)                       \
    PL_CUDA_WEIGHT_TYPES(X, PL_OP_MATMUL)           \
    X(PL_OP_ADD, PL_F32)                            \
    X(PL_OP_SWIGLU, PL_F32)                         \
    X(PL_OP_ROPE, PL_F32)                           \
    X(PL_OP_KV_STORE, PL_F16)                       \
    X(PL_OP_KV_STORE, PL_F32)                       \
    X(PL_OP_ATTENTION, PL_F16)                      \
    X(PL_OP_ATTENTION, PL_F32)                      \
    X(PL_OP_GEGLU, PL_F32)                          \
    X(PL_OP_SCALE, PL_F32)                          \
    X(PL_OP_SOFTCAP, PL_F32)

#endif
