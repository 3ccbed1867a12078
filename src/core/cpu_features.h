/* Runtime CPU feature detection (x86 CPUID + XGETBV), done once per process.
 *
 * SIMD code paths are compiled into *_avx2.c files with -mavx2 -mfma -mf16c
 * and are only entered after pl_cpu_features() says the CPU and the OS
 * support them, so the library still runs on baseline x86-64 (and builds on
 * other architectures, where every flag is false).
 *
 * The environment variable PL_CPU_FEATURES=none (or "scalar") masks every
 * SIMD flag, so the portable fallbacks can be tested on a modern machine. */
#ifndef PL_CORE_CPU_FEATURES_H
#define PL_CORE_CPU_FEATURES_H
#include <stdbool.h>

typedef struct pl_cpu_features {
    bool sse42, avx, avx2, fma, f16c;
    bool avx512f, avx512bw, avx512vl, avx512vnni, avx512bf16, avxvnni;
    /* "avx2 fma f16c avx512f ..." (or "none"); static storage. */
    const char *description;
} pl_cpu_features;

/* Detected once (thread-safe), then cached. Never NULL. */
const pl_cpu_features *pl_cpu_features_get(void);

/* The kernels' fast test: AVX2 + FMA + F16C all usable (the set our *_avx2.c
 * files are compiled for). */
bool pl_cpu_has_avx2(void);

#endif
