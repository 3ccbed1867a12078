/* Portable MATMUL tile kernels for q4_0, q4_1, q5_0, q5_1 (see
 * cpu_matmul_legacy.h), the q8_1 activation converter, and the type table
 * the cpu matmul driver picks them from. The AVX2 versions are in
 * cpu_matmul_legacy_avx2.c.
 *
 * Every block is decoded once to its 32 integer codes (signed for the _0
 * types, unsigned plus the offset m for the _1 types) and dotted with up to
 * 4 activation rows: the arithmetic of llama.cpp's generic
 * ggml_vec_dot_<type>_q8_<0|1>.
 */
#include <math.h>
#include <string.h>
#include "backends/cpu/cpu_internal.h"
#include "backends/cpu/cpu_matmul_legacy.h"
#include "core/cpu_features.h"
#include "core/fp16.h"
#include "quant/blocks.h"

void pl_cpu_quantize_q8_1(const float *x, void *dst, int64_t K) {
    block_q8_1 *y = dst;
    for (int64_t i = 0; i < K / QK8_1; i++, x += QK8_1) {
        float amax = 0.0f;
        for (int j = 0; j < QK8_1; j++) {
            float a = fabsf(x[j]);
            amax = a > amax ? a : amax;
        }
        const float d = amax / 127.f;
        const float id = amax != 0.0f ? 127.f / amax : 0.0f;
        y[i].d = pl_f32_to_f16(d);
        int sum = 0;
        for (int j = 0; j < QK8_1; j++) {
            long v = lrintf(x[j] * id);   /* default rounding: nearest-even, as _mm256_round_ps */
            y[i].qs[j] = (int8_t)(v > 127 ? 127 : v < -128 ? -128 : v);
            sum += y[i].qs[j];
        }
        /* llama.cpp multiplies the float d (not its f16 rounding) by the
         * integer sum, then rounds to f16 */
        y[i].s = pl_f32_to_f16(d * (float)sum);
    }
}

/* The 32 codes of a block: element j's low 4 bits are nibble j / 16 of
 * qs[j % 16]; q5 types add bit j of the little-endian qh as bit 4. */
static inline void pl_nibbles32(const uint8_t *qs, int *q) {
    for (int j = 0; j < 16; j++) {
        q[j] = qs[j] & 0x0F;
        q[j + 16] = qs[j] >> 4;
    }
}

static inline void pl_q5_high(const uint8_t qh[4], int *q) {
    uint32_t h;
    memcpy(&h, qh, 4);
    for (int j = 0; j < 32; j++) q[j] |= (int)((h >> j) & 1) << 4;
}

static inline int pl_dot32(const int *q, const int8_t *y) {
    int s = 0;
    for (int j = 0; j < 32; j++) s += q[j] * y[j];
    return s;
}

/* One tile of a _0 type: codes (already offset) times q8_0 rows. */
#define PL_LEGACY_TILE0(BLOCK, DECODE)                                                                     \
    const int64_t nb = K / 32;                                                                             \
    for (int r = 0; r < nr; r++) {                                                                         \
        const BLOCK *x = (const BLOCK *)((const char *)w + r * ws);                                        \
        float s[4] = {0};                                                                                  \
        for (int64_t i = 0; i < nb; i++) {                                                                 \
            int q[32];                                                                                     \
            DECODE;                                                                                        \
            const float dx = pl_f16_to_f32(x[i].d);                                                        \
            for (int c = 0; c < nc; c++) {                                                                 \
                const block_q8_0 *y = (const block_q8_0 *)((const char *)a + c * as) + i;                  \
                s[c] += (float)pl_dot32(q, y->qs) * (dx * pl_f16_to_f32(y->d));                            \
            }                                                                                              \
        }                                                                                                  \
        for (int c = 0; c < nc; c++) d[c * ds + r] = s[c];                                                 \
    }

/* One tile of a _1 type: unsigned codes times q8_1 rows, plus m * s. */
#define PL_LEGACY_TILE1(BLOCK, DECODE)                                                                     \
    const int64_t nb = K / 32;                                                                             \
    for (int r = 0; r < nr; r++) {                                                                         \
        const BLOCK *x = (const BLOCK *)((const char *)w + r * ws);                                        \
        float s[4] = {0};                                                                                  \
        for (int64_t i = 0; i < nb; i++) {                                                                 \
            int q[32];                                                                                     \
            DECODE;                                                                                        \
            const float dx = pl_f16_to_f32(x[i].d), mx = pl_f16_to_f32(x[i].m);                           \
            for (int c = 0; c < nc; c++) {                                                                 \
                const block_q8_1 *y = (const block_q8_1 *)((const char *)a + c * as) + i;                  \
                s[c] += (dx * pl_f16_to_f32(y->d)) * (float)pl_dot32(q, y->qs) + mx * pl_f16_to_f32(y->s); \
            }                                                                                              \
        }                                                                                                  \
        for (int c = 0; c < nc; c++) d[c * ds + r] = s[c];                                                 \
    }

void pl_cpu_mm_q4_0(int64_t K, const void *w, size_t ws, int nr, const void *a, size_t as, int nc, float *d,
                    size_t ds) {
    PL_LEGACY_TILE0(block_q4_0, pl_nibbles32(x[i].qs, q); for (int j = 0; j < 32; j++) q[j] -= 8)
}

void pl_cpu_mm_q5_0(int64_t K, const void *w, size_t ws, int nr, const void *a, size_t as, int nc, float *d,
                    size_t ds) {
    PL_LEGACY_TILE0(block_q5_0, pl_nibbles32(x[i].qs, q); pl_q5_high(x[i].qh, q);
                    for (int j = 0; j < 32; j++) q[j] -= 16)
}

void pl_cpu_mm_q4_1(int64_t K, const void *w, size_t ws, int nr, const void *a, size_t as, int nc, float *d,
                    size_t ds) {
    PL_LEGACY_TILE1(block_q4_1, pl_nibbles32(x[i].qs, q))
}

void pl_cpu_mm_q5_1(int64_t K, const void *w, size_t ws, int nr, const void *a, size_t as, int nc, float *d,
                    size_t ds) {
    PL_LEGACY_TILE1(block_q5_1, pl_nibbles32(x[i].qs, q); pl_q5_high(x[i].qh, q))
}

/* ---- type tables -------------------------------------------------------------*/

static const pl_cpu_mm_type legacy_types_portable[] = {
    {PL_Q4_0, PL_Q8_0, pl_cpu_quantize_q8_0, pl_cpu_mm_q4_0, 1, 4},
    {PL_Q4_1, PL_Q8_1, pl_cpu_quantize_q8_1, pl_cpu_mm_q4_1, 1, 4},
    {PL_Q5_0, PL_Q8_0, pl_cpu_quantize_q8_0, pl_cpu_mm_q5_0, 1, 4},
    {PL_Q5_1, PL_Q8_1, pl_cpu_quantize_q8_1, pl_cpu_mm_q5_1, 1, 4},
};

#if PL_CPU_HAVE_AVX2_BUILD
static const pl_cpu_mm_type legacy_types_avx2[] = {
    {PL_Q4_0, PL_Q8_0, pl_cpu_quantize_q8_0_avx2, pl_cpu_mm_q4_0_avx2, 1, 4},
    {PL_Q4_1, PL_Q8_1, pl_cpu_quantize_q8_1_avx2, pl_cpu_mm_q4_1_avx2, 1, 4},
    {PL_Q5_0, PL_Q8_0, pl_cpu_quantize_q8_0_avx2, pl_cpu_mm_q5_0_avx2, 1, 4},
    {PL_Q5_1, PL_Q8_1, pl_cpu_quantize_q8_1_avx2, pl_cpu_mm_q5_1_avx2, 1, 4},
};
#endif

static const pl_cpu_mm_type *legacy_find(const pl_cpu_mm_type *tab, size_t n, pl_dtype wtype) {
    for (size_t i = 0; i < n; i++)
        if (tab[i].wtype == wtype) return &tab[i];
    return NULL;
}

const pl_cpu_mm_type *pl_cpu_mm_type_get_legacy_portable(pl_dtype wtype) {
    return legacy_find(legacy_types_portable, sizeof legacy_types_portable / sizeof legacy_types_portable[0], wtype);
}

/* PL_CPU_LEGACY=0 leaves these types to the generic decode-to-f32 path (for
 * before/after numbers, bench/RESULTS.md); read once. */
bool pl_cpu_legacy_enabled(void) {
    static int on = -1;
    if (on < 0) on = pl_cpu_switch("PL_CPU_LEGACY");
    return on;
}

const pl_cpu_mm_type *pl_cpu_mm_type_get_legacy(pl_dtype wtype) {
    if (!pl_cpu_legacy_enabled()) return NULL;
#if PL_CPU_HAVE_AVX2_BUILD
    if (pl_cpu_has_avx2())
        return legacy_find(legacy_types_avx2, sizeof legacy_types_avx2 / sizeof legacy_types_avx2[0], wtype);
#endif
    return pl_cpu_mm_type_get_legacy_portable(wtype);
}
