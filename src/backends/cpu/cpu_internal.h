/* Internals of the optimized `cpu` backend, shared by its files.
 *
 * Every kernel exists twice: a portable C version (cpu_*.c, baseline x86-64
 * or any other architecture) and an AVX2+FMA+F16C version (cpu_*_avx2.c,
 * compiled with those flags). The portable entry points pick the AVX2 path at
 * run time with pl_cpu_has_avx2(); the *_avx2 symbols are only declared (and
 * only defined) on x86-64, which is the only place CMake compiles them.
 */
#ifndef PL_BACKENDS_CPU_INTERNAL_H
#define PL_BACKENDS_CPU_INTERNAL_H
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include "kernels/abi.h"
#include "quant/blocks.h"

/* x86-64 builds compile the *_avx2.c files; elsewhere only the portable
 * kernels exist. -DPL_CPU_HAVE_AVX2_BUILD=0 compiles an x86 tree as the
 * others (tests/CMakeLists.txt: portable_sources). */
#ifndef PL_CPU_HAVE_AVX2_BUILD
#if defined(__x86_64__) || defined(_M_X64)
#define PL_CPU_HAVE_AVX2_BUILD 1
#else
#define PL_CPU_HAVE_AVX2_BUILD 0
#endif
#endif

/* ---- matmul micro-kernels ---------------------------------------------------
 *
 * A tile kernel computes nr weight rows x nc activation rows:
 *     dst[c * dst_stride + r] = dot(W row r, A row c)   r < nr, c < nc
 * w points at the first weight row (w_stride bytes apart, K elements in the
 * weight dtype), a at the first activation row (a_stride bytes apart, K
 * elements in the activation format of that weight dtype: see
 * pl_cpu_mm_type). nr <= max_nr and nc <= max_nc of the type. */
typedef void (*pl_cpu_mm_kernel)(int64_t K, const void *w, size_t w_stride, int nr,
                                 const void *a, size_t a_stride, int nc,
                                 float *dst, size_t dst_stride);
/* Converts one F32 activation row of K elements to the activation format. */
typedef void (*pl_cpu_from_float)(const float *x, void *dst, int64_t K);

typedef struct pl_cpu_mm_type {
    pl_dtype wtype;          /* weight dtype */
    /* Activation format, as llama.cpp picks it (vec_dot_type): Q8_K for the
     * k-quants, Q8_0 for Q8_0, and for F16 / BF16 weights the activations
     * rounded to F16 / BF16 (stored here widened back to F32, which gives
     * the same products and saves a conversion per use). F32: none. */
    pl_dtype vtype;
    pl_cpu_from_float from_float;   /* NULL: activations are used as they are */
    pl_cpu_mm_kernel kernel;
    int max_nr, max_nc;
} pl_cpu_mm_type;

/* The implementation for a weight dtype on this CPU, or NULL. */
const pl_cpu_mm_type *pl_cpu_mm_type_get(pl_dtype wtype);
/* Bytes of one converted activation row of K elements (0: none needed). */
size_t pl_cpu_mm_act_row_size(const pl_cpu_mm_type *t, int64_t K);

/* Portable activation converters (bit-exact with llama.cpp on x86: q8_0 as
 * its AVX quantize_row_q8_0, q8_K as quantize_row_q8_K_ref). */
void pl_cpu_quantize_q8_0(const float *x, void *dst, int64_t K);
void pl_cpu_quantize_q8_K(const float *x, void *dst, int64_t K);
void pl_cpu_round_f16(const float *x, void *dst, int64_t K);
void pl_cpu_round_bf16(const float *x, void *dst, int64_t K);

/* Portable tile kernels (cpu_matmul.c). */
void pl_cpu_mm_f32(int64_t K, const void *w, size_t ws, int nr, const void *a, size_t as, int nc, float *d, size_t ds);
void pl_cpu_mm_f16(int64_t K, const void *w, size_t ws, int nr, const void *a, size_t as, int nc, float *d, size_t ds);
void pl_cpu_mm_bf16(int64_t K, const void *w, size_t ws, int nr, const void *a, size_t as, int nc, float *d, size_t ds);
void pl_cpu_mm_q8_0(int64_t K, const void *w, size_t ws, int nr, const void *a, size_t as, int nc, float *d, size_t ds);
void pl_cpu_mm_q4_K(int64_t K, const void *w, size_t ws, int nr, const void *a, size_t as, int nc, float *d, size_t ds);
void pl_cpu_mm_q6_K(int64_t K, const void *w, size_t ws, int nr, const void *a, size_t as, int nc, float *d, size_t ds);

#if PL_CPU_HAVE_AVX2_BUILD
/* AVX2 versions (cpu_matmul_avx2.c). */
void pl_cpu_quantize_q8_0_avx2(const float *x, void *dst, int64_t K);
void pl_cpu_quantize_q8_K_avx2(const float *x, void *dst, int64_t K);
void pl_cpu_round_f16_avx2(const float *x, void *dst, int64_t K);
void pl_cpu_round_bf16_avx2(const float *x, void *dst, int64_t K);
void pl_cpu_mm_f32_avx2(int64_t K, const void *w, size_t ws, int nr, const void *a, size_t as, int nc, float *d, size_t ds);
void pl_cpu_mm_f16_avx2(int64_t K, const void *w, size_t ws, int nr, const void *a, size_t as, int nc, float *d, size_t ds);
void pl_cpu_mm_bf16_avx2(int64_t K, const void *w, size_t ws, int nr, const void *a, size_t as, int nc, float *d, size_t ds);
void pl_cpu_mm_q8_0_avx2(int64_t K, const void *w, size_t ws, int nr, const void *a, size_t as, int nc, float *d, size_t ds);
void pl_cpu_mm_q4_K_avx2(int64_t K, const void *w, size_t ws, int nr, const void *a, size_t as, int nc, float *d, size_t ds);
void pl_cpu_mm_q6_K_avx2(int64_t K, const void *w, size_t ws, int nr, const void *a, size_t as, int nc, float *d, size_t ds);
#endif

/* ---- prepared (repacked) weights -------------------------------------------------
 *
 * At load time (pl_backend.weight_prepare) the matmul weights get a copy in
 * a layout made for the SIMD kernels: panels of consecutive rows interleaved,
 * so a kernel streams one contiguous block per panel and one vector load
 * serves every row of the panel. Panel p holds rows PR*p .. PR*p + PR-1, its
 * blocks for k = 0..K-1 contiguous; panels are contiguous.
 *
 * q4_K -> pl_q4kx16 (16 rows per block of 256 k): the 6-bit scales and
 * mins unpacked to bytes, the nibbles reordered so that vector v of group g
 * (32 k) holds, at byte 4*r + e, element 4*(2v) + e of row r in its low
 * nibble and element 4*(2v+1) + e in its high nibble ("chunks" of 4 k per
 * row, the unit of a dpbusd lane); stored vector-major ([v][g]), the order
 * in which a decode sweep reads them. Exactly the same numbers as the
 * original blocks.
 * q6_K -> pl_q6kx16 likewise: low 4 bits as q4_K's nibbles, the high 2 bits
 * of chunk 4h + j at bits 2j..2j+1 of vector h, scales as bytes
 * [group16][row]; per (h, g) the high-bit vector and the two low-bit vectors
 * it completes, next to each other: a decode sweep reads the block forward
 * (a layout that made it jump between three 512-byte streams ran at a third
 * of the streaming rate from memory).
 * Sixteen rows: one 512-bit vector per (v, g) and one 4-byte activation
 * broadcast per 16 rows (8-row panels with 256-bit vectors: the same
 * arithmetic, half the rows per load and per broadcast; measured 1.3-1.8x
 * slower from cache and in prefill, 10-15% slower in a stand-alone sweep
 * from memory, about the same in a model's decode). A weight with
 * N % 16 == 8 gets a last panel padded with zero rows, never stored.
 * f16 -> 64 rows interleaved per k: [group of 64 rows][k][64]; a kernel panel
 * is 16 of those rows (one vector of 16 per k, the activation broadcast: an
 * outer product), and a decode sweep over the 4 panels of a group reads one
 * contiguous stream. */
#define PL_KQX_ROWS 16       /* rows per k-quant panel */
static inline int64_t pl_kqx_panels(int64_t N) { return (N + PL_KQX_ROWS - 1) / PL_KQX_ROWS; }
/* The scales of a q4_K or q5_K panel block (the two share them; q5_K's are
 * q4_K's, see pl_q5kx16). */
typedef struct pl_kx16_scales {
    uint16_t d[16], dmin[16];   /* f16, per row */
    uint8_t sc[8][16];          /* [group][row] */
    uint8_t m[4][16][2];        /* [group pair][row][group & 1] */
} pl_kx16_scales;
typedef struct pl_q4kx16 {
    pl_kx16_scales s;
    uint8_t qs[4][8][64];       /* [vector][group][4*row + e] */
} pl_q4kx16;
typedef struct pl_q6kx16 {
    uint16_t d[16];             /* f16, per row */
    int8_t sc[16][16];          /* [group16][row] */
    /* [h][g][0]: the 2 high bits of chunk 4h + j at bits 2j;
     * [h][g][1 + i]: low-bit vector v = 2h + i of group g (as q4kx16.qs) */
    uint8_t q[2][8][3][64];
} pl_q6kx16;
#define PL_F16X_ROWS 16      /* rows per kernel panel */
#define PL_F16X_GROUP 64     /* rows interleaved per k in the layout */
/* First element of f16 panel p (16 rows) of a K-column prepared weight; its
 * next k is PL_F16X_GROUP elements further. */
#define PL_F16X_PANEL(K, p) ((size_t)((p) / 4) * (size_t)(K) * PL_F16X_GROUP + (size_t)((p) % 4) * PL_F16X_ROWS)

/* Activation format of the prepared k-quant kernels: a q8_K block (bit-exact
 * with quantize_row_q8_K) plus its sums per 32 (bsum32[g] = bsums[2g] +
 * bsums[2g+1], q4_K's mins) and -32 * bsums (q6_K's offset), precomputed
 * once per activation row. */
typedef struct pl_q8kx {
    block_q8_K b;
    int16_t bsum32[8];
    int32_t nb32[16];
} pl_q8kx;

/* q4_0 -> pl_q40x16 (16 rows per block of 32 k): vector v holds, at byte
 * 4*r + e, element 8v + e of row r in its low nibble and 8v + 4 + e in its
 * high nibble (chunks 2v and 2v + 1), the f16 scales per row beside them.
 * q5_0 -> pl_q50x16: the same, plus one vector whose byte 4*r + e holds at
 * bit c the fifth bit of element 4c + e of row r. Exactly the numbers of the
 * original blocks; the activations are pl_q80x (llama.cpp's q8_0, as its
 * vec_dot_type for both, plus the sum of the codes for the code offset). */
typedef struct pl_q40x16 {
    uint16_t d[16];             /* f16, per row */
    uint8_t qs[4][64];          /* [vector][4*row + e] */
} pl_q40x16;
typedef struct pl_q50x16 {
    uint16_t d[16];
    uint8_t qh[64];             /* [4*row + e], bit c: element 4c + e */
    uint8_t qs[4][64];
} pl_q50x16;
typedef struct pl_q80x {
    float d;                    /* the q8_0 block's f16 scale, widened */
    int32_t sum;                /* sum of the 32 codes */
    int8_t qs[32];
} pl_q80x;
/* q4_1 -> pl_q41x16, q5_1 -> pl_q51x16: the layouts of q4_0 / q5_0 plus the
 * f16 offsets m per row; the codes are unsigned (0..15 / 0..31) and the
 * activations pl_q81x (llama.cpp's q8_1, the vec_dot_type of both). */
typedef struct pl_q41x16 {
    uint16_t d[16];             /* f16, per row */
    uint16_t m[16];             /* f16, per row */
    uint8_t qs[4][64];          /* as pl_q40x16 */
} pl_q41x16;
typedef struct pl_q51x16 {
    uint16_t d[16];
    uint16_t m[16];
    uint8_t qh[64];             /* as pl_q50x16 */
    uint8_t qs[4][64];
} pl_q51x16;
typedef struct pl_q81x {
    float d;                    /* the q8_1 block's f16 d, widened */
    float s;                    /* its f16 s = d * sum(codes), widened */
    int8_t qs[32];
} pl_q81x;

/* q2_K -> pl_q2kx16, q3_K -> pl_q3kx16 (16 rows per block of 256 k; kernels
 * in cpu_packed_klow_avx2.c, activations pl_q8kx). The 2-bit codes: vector
 * t = 4q + c (q, c = 0..3) holds at byte 4*r + e, bit pair j, element
 * 16*(4j + q) + 4c + e of row r (chunk c of sub-block s = 4j + q), so every
 * chunk of a sub-block sits at the same bit pair (taken out by an AND alone).
 * q2_K keeps its scale/min bytes as in the file (scale low nibble, min high),
 * paired [p][row][s & 1] for sub-blocks s = 2p, 2p + 1: 1344 bytes per
 * panel block, as the 16 original blocks. q3_K: the 6-bit scales minus 32
 * as int8, paired the same way; hm[t][j] bit 4*r + e: the hmask bit of that
 * code (a 64-bit byte mask per chunk vector); padded to 1856 bytes (29 cache
 * lines, 1.05x the file) so that no code vector straddles two lines (8%
 * faster decode sweeps from memory than 1824 unaligned bytes in
 * bench_packed). Exactly the file's numbers. */
typedef struct pl_q2kx16 {
    uint16_t d[16], dmin[16];   /* f16, per row */
    uint8_t sm[8][16][2];       /* [pair][row][s & 1]: scales[s] of the original */
    uint8_t qs[16][64];         /* [vector t][4*row + e] */
} pl_q2kx16;
typedef struct pl_q3kx16 {
    uint8_t qs[16][64];         /* low 2 bits, as pl_q2kx16.qs */
    uint64_t hm[16][4];         /* [vector t][bit pair j]: bit 4*row + e */
    int8_t sc[8][16][2];        /* [pair][row][s & 1]: scale s - 32 */
    uint16_t d[16];             /* f16, per row */
    uint8_t pad[32];            /* to a multiple of 64 bytes */
} pl_q3kx16;
_Static_assert(sizeof(pl_q2kx16) % 64 == 0 && sizeof(pl_q3kx16) % 64 == 0, "whole cache lines per panel block");

/* q5_K -> pl_q5kx16 (16 rows per block of 256 k; kernels in
 * cpu_packed_avx2.c beside q4_K's, activations pl_q8kx): q4_K's layout
 * (scales and mins unpacked to bytes, the low nibbles as pl_q4kx16.qs) plus
 * the fifth bits, one vector per group g of 32 k: byte 4*r + e, bit c holds
 * the high bit of element 4c + e of group g of row r (chunk c), as
 * pl_q50x16.qh. The high-bit vectors come before the nibbles: a decode sweep
 * reads each block forward. 2880 bytes per panel block (45 cache lines;
 * 1.02x the 16 original blocks: the scales and mins unpacked). Exactly the
 * file's numbers. Decode from memory runs at the bandwidth ceiling either
 * way (the unprepared AVX-512 tile already did); the layout pays off in
 * prefill (pp64 2.2x on Q5_K_M, 1 thread). */
typedef struct pl_q5kx16 {
    pl_kx16_scales s;           /* as pl_q4kx16.s */
    uint8_t qh[8][64];          /* [group][4*row + e], bit c: chunk c */
    uint8_t qs[4][8][64];       /* [vector][group][4*row + e], as pl_q4kx16.qs */
} pl_q5kx16;
_Static_assert(sizeof(pl_q5kx16) % 64 == 0, "whole cache lines per panel block");
_Static_assert(sizeof(pl_q4kx16) == 2368 && sizeof(pl_q5kx16) == 2880, "q4_K / q5_K panel blocks: 320 bytes of scales, then the codes, no padding");

typedef enum pl_cpu_pack_kind { PL_PACK_NONE = 0, PL_PACK_Q4K_X16, PL_PACK_Q6K_X16, PL_PACK_F16_X16,
                                PL_PACK_Q40_X16, PL_PACK_Q50_X16,
                                PL_PACK_Q2K_X16, PL_PACK_Q3K_X16, PL_PACK_TQ_X16, PL_PACK_TQ1_X16,
                                PL_PACK_IQ2XXS_X16, PL_PACK_IQ2XSX_X16, PL_PACK_IQ1SX_X16,
                                PL_PACK_IQ1MX_X16, PL_PACK_IQ2SX_X16,
                                PL_PACK_Q41_X16, PL_PACK_Q51_X16,
                                PL_PACK_Q5K_X16 } pl_cpu_pack_kind;

typedef struct pl_cpu_packed {
    const void *orig;           /* the original tensor's data pointer (the lookup key) */
    const void *data;           /* the copy */
    pl_cpu_pack_kind kind;
    int64_t K, N;
} pl_cpu_packed;

/* The cpu backend's context: pl_exec_ctx first (ctx_create makes these). */
typedef struct pl_cpu_ctx {
    pl_exec_ctx base;
    uint32_t magic;
    pl_cpu_packed *packed;      /* sorted by orig */
    int n_packed;
    void *arena;                /* one mapping for all copies */
    size_t arena_size;
} pl_cpu_ctx;
#define PL_CPU_CTX_MAGIC 0x43505531u

/* The prepared copy of weight w in this context, or NULL. */
const pl_cpu_packed *pl_cpu_packed_find(const pl_exec_ctx *ctx, const pl_tensor *w);
/* Row r of a prepared weight decoded to F32, as pl_dequantize_row would. */
void pl_cpu_packed_get_row(const pl_cpu_packed *pk, int64_t r, float *out);
/* The layout the prepared kernels want for a weight on this CPU. */
pl_cpu_pack_kind pl_cpu_pack_kind_for(const pl_tensor *w);
size_t pl_cpu_weight_prepare_size(const pl_exec_ctx *ctx, const pl_tensor *w);
/* Expert e of a 3-D expert tensor [K, N, n_expert] as a 2-D [K, N] weight
 * (qwen3moe): weight_prepare packs each expert of such a tensor as one of
 * these, so matmul_id finds the copy of this view (cpu_moe.c). */
void pl_cpu_expert_view(const pl_tensor *w, int64_t e, pl_tensor *v);
/* Bytes of the prepared copy of a K x N weight of a kind (N = one panel's
 * rows: the bytes of a panel). */
size_t pl_cpu_packed_bytes(pl_cpu_pack_kind kind, int64_t K, int64_t N);
pl_status pl_cpu_weight_prepare(pl_exec_ctx *ctx, const pl_tensor *const *ws, int n,
                                void (*copied)(void *user, const void *p, size_t bytes), void *user);
void pl_cpu_packed_free(pl_cpu_ctx *c);
/* Whether the prepared kernels can run here (AVX-512 F/BW/VL/VNNI + AVX2). */
bool pl_cpu_has_vnni512(void);
/* PL_CPU_REPACK=0 turns weight preparation off (for before/after numbers);
 * pl_cpu_switch(name): false when the environment variable name is "0". */
bool pl_cpu_repack_enabled(void);
/* PL_CPU_LEGACY=0: q4_0 / q4_1 / q5_0 / q5_1 go through the generic
 * decode-to-f32 path, unprepared (cpu_matmul_legacy.c; before/after runs). */
bool pl_cpu_legacy_enabled(void);
bool pl_cpu_switch(const char *name);
/* PL_CPU_Q5K=0: q5_K keeps its unprepared tiles (before/after runs). */
bool pl_cpu_q5k_enabled(void);
/* The blocked decode attention (cpu_attention.c): -1 follows the switch
 * PL_CPU_ATT_BLOCK; tests set 0 (off) or 1 (on where it applies). */
extern int pl_cpu_att_blocked_mode;
/* The quantized-cache prefill tiles (cpu_attention.c: each V tile decoded
 * once per block of query rows, q8_0 K scores with VNNI): -1 follows the
 * switch PL_CPU_ATTQ_TILE; tests set 0 (off) or 1 (on where it applies). */
extern int pl_cpu_attq_tile_mode;

/* Matmul with a prepared weight (cpu_packed.c); a group of up to
 * PL_CPU_MM_GROUP_MAX matmuls reading the same activations (converted once,
 * one pool job), optionally with swiglu = SWIGLU(dst of nodes[0], dst of
 * nodes[1]) folded in (n == 2, both of one kind and N). */
#define PL_CPU_MM_GROUP_MAX 4
pl_status pl_cpu_matmul_packed(pl_exec_ctx *ctx, const pl_node *node, const pl_cpu_packed *pk);
pl_status pl_cpu_matmul_packed_group(pl_exec_ctx *ctx, const pl_node *const *nodes, const pl_cpu_packed *const *pks,
                                     int n, const pl_node *swiglu);
/* pl_backend.graph_execute of the cpu backend (cpu_graph.c). */
pl_status pl_cpu_graph_execute(pl_exec_ctx *ctx, const struct pl_graph *g);
size_t pl_cpu_work_matmul_packed(const pl_node *node, pl_cpu_pack_kind kind);

#if PL_CPU_HAVE_AVX2_BUILD
/* Prepared-layout kernels (cpu_packed_avx2.c, AVX-512 VNNI by target attribute).
 * A call computes panels [p0, p1) x activation rows [c0, c1):
 *   dst[c * N + r] for r in the panels' rows. */
void pl_cpu_q8kx_quantize_avx2(const float *x, pl_q8kx *y, int64_t K);
/* q4_0 / q5_0 prepared kernels (cpu_packed_legacy_avx2.c) */
void pl_cpu_q80x_quantize_avx2(const float *x, pl_q80x *y, int64_t K);
void pl_cpu_gemm_q40x16_vnni(int64_t K, const pl_q40x16 *w, int64_t p0, int64_t p1, const pl_q80x *a, size_t as,
                             int64_t c0, int64_t c1, float *dst, int64_t N);
void pl_cpu_gemm_q50x16_vnni(int64_t K, const pl_q50x16 *w, int64_t p0, int64_t p1, const pl_q80x *a, size_t as,
                             int64_t c0, int64_t c1, float *dst, int64_t N);
/* q4_1 / q5_1 prepared kernels (cpu_packed_legacy_avx2.c) */
void pl_cpu_q81x_quantize_avx2(const float *x, pl_q81x *y, int64_t K);
void pl_cpu_gemm_q41x16_vnni(int64_t K, const pl_q41x16 *w, int64_t p0, int64_t p1, const pl_q81x *a, size_t as,
                             int64_t c0, int64_t c1, float *dst, int64_t N);
void pl_cpu_gemm_q51x16_vnni(int64_t K, const pl_q51x16 *w, int64_t p0, int64_t p1, const pl_q81x *a, size_t as,
                             int64_t c0, int64_t c1, float *dst, int64_t N);
/* q2_K / q3_K prepared kernels (cpu_packed_klow_avx2.c) */
void pl_cpu_gemm_q2kx16_vnni(int64_t K, const pl_q2kx16 *w, int64_t p0, int64_t p1, const pl_q8kx *a, size_t as,
                             int64_t c0, int64_t c1, float *dst, int64_t N);
void pl_cpu_gemm_q3kx16_vnni(int64_t K, const pl_q3kx16 *w, int64_t p0, int64_t p1, const pl_q8kx *a, size_t as,
                             int64_t c0, int64_t c1, float *dst, int64_t N);
void pl_cpu_gemm_q4kx16_vnni(int64_t K, const pl_q4kx16 *w, int64_t p0, int64_t p1, const pl_q8kx *a, size_t as,
                             int64_t c0, int64_t c1, float *dst, int64_t N);
void pl_cpu_gemm_q5kx16_vnni(int64_t K, const pl_q5kx16 *w, int64_t p0, int64_t p1, const pl_q8kx *a, size_t as,
                             int64_t c0, int64_t c1, float *dst, int64_t N);
void pl_cpu_gemm_q6kx16_vnni(int64_t K, const pl_q6kx16 *w, int64_t p0, int64_t p1, const pl_q8kx *a, size_t as,
                             int64_t c0, int64_t c1, float *dst, int64_t N);
void pl_cpu_gemm_f16x16_vnni(int64_t K, const uint16_t *w, int64_t p0, int64_t p1, const float *a, size_t as,
                             int64_t c0, int64_t c1, float *dst, int64_t N);
#endif

/* Ternary weights (tq2_0 and tq1_0) -> PL_PACK_TQ_X16 (cpu_packed_tq.c packs,
 * cpu_packed_tq_avx2.c computes): both types as trits t = 0..2 (value
 * t - 1) in 2 bits, 16 rows per panel. A panel of a K-column weight, nb =
 * K / 256 blocks:
 *   codes  [nb][16 vectors][64 bytes]: byte 4r + e of vector v, bits 2j..2j+1:
 *          the trit of element 16v + 4j + e of row r (4 chunks of 4 k per
 *          row and vector: one load feeds 4 vpdpbusd);
 *   scales [nb][16] f16: row r's block scale d;
 *   zero padding to a multiple of 64 bytes (every code vector 64-aligned).
 * tq1_0's 5-trits-per-byte form is expanded at load (+22% bytes: a decode
 * sweep then reads 2.06 instead of 1.69 bits per weight, but decoding base 3
 * in the inner loop costs more than that; see cpu_packed_tq_avx2.c).
 * Activations: pl_q8kx (the block's code sum, from bsum32, takes the -1 out). */
static inline size_t pl_tqx_panel_bytes(int64_t K) {
    const size_t nb = (size_t)(K / QK_K);
    return nb * 1024 + ((nb * 32 + 63) & ~(size_t)63);
}
void pl_tqx_pack_panel(pl_dtype dt, const char *src, size_t row_bytes, int64_t K, int nr, uint8_t *out);
void pl_tqx_get_row(const uint8_t *data, int64_t K, int64_t r, float *out);
/* tq1_0 -> PL_PACK_TQ1_X16 where AVX-512 VBMI is there (a 256-entry trit
 * lookup in two vpermi2b): the file's 5-trits-per-byte code kept, 13 code
 * vectors of 64 bytes per block and panel (byte 4r + e of vector u: element
 * e of chunks 5u..5u+4 of row r, see cpu_packed_tq.c), then the f16 scales
 * [nb][16], padded to 64 bytes: 1.69 bits per weight read, as in the file. */
#define PL_TQ1X_BLOCK (13 * 64)
static inline size_t pl_tq1x_panel_bytes(int64_t K) {
    const size_t nb = (size_t)(K / QK_K);
    return nb * PL_TQ1X_BLOCK + ((nb * 32 + 63) & ~(size_t)63);
}
void pl_tq1x_pack_panel(const char *src, size_t row_bytes, int64_t K, int nr, uint8_t *out);
void pl_tq1x_get_row(const uint8_t *data, int64_t K, int64_t r, float *out);
bool pl_cpu_has_vbmi(void);
bool pl_cpu_tq1_compact(void);   /* VBMI and not PL_CPU_TQ1X=0 */
#if PL_CPU_HAVE_AVX2_BUILD
void pl_cpu_gemm_tq1x16_vnni(int64_t K, const uint8_t *w, int64_t p0, int64_t p1, const pl_q8kx *a, size_t as,
                             int64_t c0, int64_t c1, float *dst, int64_t N);
void pl_cpu_gemm_tqx16_vnni(int64_t K, const uint8_t *w, int64_t p0, int64_t p1, const pl_q8kx *a, size_t as,
                            int64_t c0, int64_t c1, float *dst, int64_t N);
#endif
/* PL_PACK_TQ1_X16's byte code (cpu_packed_tq.c): where pl_cpu_tq1_lut4()
 * (default; PL_CPU_TQ1DEC=0 for ggml's code) vectors 0..11 of a block hold
 * pl_tq1c_encode() of their 5 trits, decoded by pl_tq1c_fields (t0..t3 as
 * 2-bit fields, the whole byte) and pl_tq1c_t4 (t4, the low 6 bits), and
 * vector 12 its 4 trits as 2-bit fields. pl_cpu_tq1_lut4_mode >= 0 overrides
 * the switch (tests; set it before packing, keep it while computing). */
extern int pl_cpu_tq1_lut4_mode;
bool pl_cpu_tq1_lut4(void);
uint8_t pl_tq1c_encode(const uint8_t t[5]);
extern const uint8_t pl_tq1c_fields[256];
extern const uint8_t pl_tq1c_t4[64];

/* iq2_xxs -> PL_PACK_IQ2XXS_X16 (cpu_packed_iq.c packs, cpu_packed_iq_avx2.c
 * computes): 16 rows per panel, the file's bits reordered (1056 bytes a panel
 * block = 16 x 66, no growth). A panel of a K-column weight, nb = K / 256:
 *   codes [nb][1024]: idx[32][16] then sg[32][16]; for group g (elements
 *         8g .. 8g+7) and row r: idx = the grid index, sg bits 0-6 = the
 *         7-bit sign index, bit 7 = bit (g % 4) of the 4-bit scale of
 *         sub-block g / 4 (the 16 bytes of a group are 16 rows: one gather
 *         of 8 grid entries per 8 rows, the 8 sign bytes one 64-bit mask);
 *   d     [nb][16] f16, per row.
 * Activations: pl_q8kx (only its q8_K block is read). */
#define PL_IQ2XXSX_CODES 1024
static inline size_t pl_iq2xxsx_panel_bytes(int64_t K) { return (size_t)(K / QK_K) * (PL_IQ2XXSX_CODES + 32); }
void pl_iq2xxsx_pack_panel(const char *src, size_t row_bytes, int64_t K, int nr, uint8_t *out);
void pl_iq2xxsx_get_row(const uint8_t *data, int64_t K, int64_t r, float *out);
bool pl_cpu_iqx_enabled(void);   /* AVX-512 BITALG + VBMI there and not PL_CPU_IQX=0 */
#if PL_CPU_HAVE_AVX2_BUILD
void pl_cpu_gemm_iq2xxsx16_vnni(int64_t K, const uint8_t *w, int64_t p0, int64_t p1, const pl_q8kx *a, size_t as,
                                int64_t c0, int64_t c1, float *dst, int64_t N);
#endif

/* iq2_xs -> PL_PACK_IQ2XSX_X16 (the same files): per block of a panel
 *   codes [nb][1152]: q[16][16][2] u16 = qs[g] of row r (9-bit grid index |
 *         7-bit sign index << 9) at [g / 2][r][g % 2] (PL_IQ2XSX_Q): dword r
 *         of the 64 bytes of group pair p is row r's groups 2p, 2p + 1 (the
 *         one-row kernel's gather indices and sign bytes in place), then
 *         sc[8][16] u8 = scales[s] of row r;
 *   d     [nb][16] f16.  1184 bytes a panel block = 16 x 74, no growth. */
#define PL_IQ2XSX_CODES 1152
#define PL_IQ2XSX_Q(g, r) (32 * ((g) >> 1) + 2 * (r) + ((g) & 1))
static inline size_t pl_iq2xsx_panel_bytes(int64_t K) { return (size_t)(K / QK_K) * (PL_IQ2XSX_CODES + 32); }
void pl_iq2xsx_pack_panel(const char *src, size_t row_bytes, int64_t K, int nr, uint8_t *out);
void pl_iq2xsx_get_row(const uint8_t *data, int64_t K, int64_t r, float *out);
#if PL_CPU_HAVE_AVX2_BUILD
void pl_cpu_gemm_iq2xsx16_vnni(int64_t K, const uint8_t *w, int64_t p0, int64_t p1, const pl_q8kx *a, size_t as,
                               int64_t c0, int64_t c1, float *dst, int64_t N);
#endif

/* iq1_s -> PL_PACK_IQ1SX_X16 (the same files): per block of a panel
 *   codes [nb][768]: e[16][16][3] u8 = pair k (groups 2 k, 2 k + 1; sub-block k / 2) of row r, the
 *         24-bit little-endian lo | ia << 2 | ib << 13 (ia, ib the groups' 11-bit grid indices,
 *         qs | 3 qh bits << 8); lo, the sub-block's 4 other bits: pair 2 s has the delta sign
 *         (bit 0) and scale bit 0 (bit 1), pair 2 s + 1 scale bits 1, 2 (bits 0, 1). One zmm load
 *         and one vpermb give 16 dwords x, x & 0x1FFC (4 ia) and x >> 13 (ib) index the gathers;
 *   d     [nb][16] f16.  800 bytes a panel block = 16 x 50, no growth.
 * pl_iqx_iq1s_u: the 2048 grid entries + 1 (bytes 0..2, for vpdpbusd). */
#define PL_IQ1SX_CODES 768
static inline size_t pl_iq1sx_panel_bytes(int64_t K) { return (size_t)(K / QK_K) * (PL_IQ1SX_CODES + 32); }
void pl_iq1sx_pack_panel(const char *src, size_t row_bytes, int64_t K, int nr, uint8_t *out);
void pl_iq1sx_get_row(const uint8_t *data, int64_t K, int64_t r, float *out);
extern uint64_t pl_iqx_iq1s_u[2048];   /* filled by the first pl_iq1sx_pack_panel */
#if PL_CPU_HAVE_AVX2_BUILD
void pl_cpu_gemm_iq1sx16_vnni(int64_t K, const uint8_t *w, int64_t p0, int64_t p1, const pl_q8kx *a, size_t as,
                              int64_t c0, int64_t c1, float *dst, int64_t N);
#endif

/* iq1_m -> PL_PACK_IQ1MX_X16 (the same files): per block of a panel, 896
 * bytes = 16 x 56 (no growth; the f16 d stays in the scales' top nibbles):
 *   e[16][16][3] u8 = pair k (groups 2 k, 2 k + 1 = scale k) of row r, the
 *         24-bit little-endian da | db << 1 | ia << 2 | ib << 13 (ia, ib the
 *         groups' 11-bit grid indices qs | qh nibble bits 0-2 << 8; da, db
 *         their delta signs, nibble bit 3): one zmm load and one vpermb give
 *         16 dwords x, and x & 0x1FFC (4 ia), x >> 13 (ib) index the gathers,
 *         x's bits 0-3 a vpermd by the delta signs;
 *   sc[4][16] u16 at PL_IQ1MX_SC = the k-th little-endian u16 of scales of row r.
 * pl_iqx_iq1m_u: 8 (grid + 1) + delta + 1, by index | delta sign << 11. */
#define PL_IQ1MX_BLOCK 896
#define PL_IQ1MX_SC 768
static inline size_t pl_iq1mx_panel_bytes(int64_t K) { return (size_t)(K / QK_K) * PL_IQ1MX_BLOCK; }
void pl_iq1mx_pack_panel(const char *src, size_t row_bytes, int64_t K, int nr, uint8_t *out);
void pl_iq1mx_get_row(const uint8_t *data, int64_t K, int64_t r, float *out);
extern uint64_t pl_iqx_iq1m_u[4096];   /* filled by the first pl_iq1mx_pack_panel */
extern uint32_t pl_iqx_iq1m_c4[2048];  /* grid entry i as pl_iqx_iq1_c2's u16 in both halves; the same */
/* pl_iqx_iq1_c2[1 + i]: iq1 grid entry i as 8 two-bit codes g + 1, a u16 of padding either side
 * (the one-row kernels gather dwords); filled by the first iq1_s / iq1_m pack_panel. */
extern uint16_t pl_iqx_iq1_c2[2050];
#if PL_CPU_HAVE_AVX2_BUILD
void pl_cpu_gemm_iq1mx16_vnni(int64_t K, const uint8_t *w, int64_t p0, int64_t p1, const pl_q8kx *a, size_t as,
                              int64_t c0, int64_t c1, float *dst, int64_t N);
#endif

/* iq2_s -> PL_PACK_IQ2SX_X16 (the same files): per block of a panel
 *   codes [nb][1280]: q[32][16] = low index byte of group g, row r;
 *         sg[32][16] = its 8 sign bits; qh[8][16], sc[8][16] = qh[s] and
 *         scales[s] of row r;
 *   d     [nb][16] f16.  1312 bytes a panel block = 16 x 82, no growth. */
#define PL_IQ2SX_CODES 1280
static inline size_t pl_iq2sx_panel_bytes(int64_t K) { return (size_t)(K / QK_K) * (PL_IQ2SX_CODES + 32); }
void pl_iq2sx_pack_panel(const char *src, size_t row_bytes, int64_t K, int nr, uint8_t *out);
void pl_iq2sx_get_row(const uint8_t *data, int64_t K, int64_t r, float *out);
#if PL_CPU_HAVE_AVX2_BUILD
void pl_cpu_gemm_iq2sx16_vnni(int64_t K, const uint8_t *w, int64_t p0, int64_t p1, const pl_q8kx *a, size_t as,
                              int64_t c0, int64_t c1, float *dst, int64_t N);
#endif

/* The iq2_xxs grid as 2-bit levels for the one-row kernels (cpu_packed_iq_avx2.c): byte i =
 * weights 0-3 of entry i, byte 256 + i = weights 4-7; filled by the first pl_iq2xxsx_pack_panel. */
#if PL_CPU_HAVE_AVX2_BUILD
extern uint8_t pl_iqx_iq2xxs_lv[512];
/* iq2_xxs one-row kernel: -1 = as PL_CPU_IQ2XXSDEC says, 1 = the default, 0 = pl_iq2xxsx_panel1p (tests set it) */
extern int pl_iqx_iq2xxs_dec;
extern uint8_t pl_iqx_iq2xs_lv[1024];   /* iq2_xs's: [i] and [512 + i], by pl_iq2xsx_pack_panel */
/* iq2_xs's for the gather kernel: [1 + i] = lv[i] | lv[512 + i] << 8, one u16 of padding either side */
extern uint16_t pl_iqx_iq2xs_c16[514];
/* iq2_xs one-row kernel: -1 = as PL_CPU_IQ2XSDEC says, 1 = gathers, 0 = the permute lookups (tests set it) */
extern int pl_iqx_iq2xs_dec;
/* iq1_s one-row kernel: -1 = as PL_CPU_IQ1SDEC says, 1 = the pair kernel (vpermd delta terms,
 * vpdpwssd scales), 0 = the group kernel before it; pl_iqx_iq1s_act: -1 = as PL_CPU_IQ1SACT says,
 * 1 = the gemm makes the activation data once (K <= 16384), 0 = per block and panel (tests set them) */
extern int pl_iqx_iq1s_dec, pl_iqx_iq1s_act;
#endif

/* ---- op entry points (one per table entry family) ----------------------------*/

pl_status pl_cpu_op_matmul(pl_exec_ctx *ctx, const pl_node *node);
size_t pl_cpu_work_matmul(const pl_node *node, int n_threads);
pl_status pl_cpu_op_get_rows(pl_exec_ctx *ctx, const pl_node *node);
pl_status pl_cpu_op_rms_norm(pl_exec_ctx *ctx, const pl_node *node);
pl_status pl_cpu_op_add(pl_exec_ctx *ctx, const pl_node *node);
pl_status pl_cpu_op_swiglu(pl_exec_ctx *ctx, const pl_node *node);
pl_status pl_cpu_op_geglu(pl_exec_ctx *ctx, const pl_node *node);   /* cpu_gemma.c */
pl_status pl_cpu_op_scale(pl_exec_ctx *ctx, const pl_node *node);   /* cpu_gemma.c */
pl_status pl_cpu_op_softcap(pl_exec_ctx *ctx, const pl_node *node); /* cpu_gemma.c */
pl_status pl_cpu_op_rope(pl_exec_ctx *ctx, const pl_node *node);
pl_status pl_cpu_op_kv_store(pl_exec_ctx *ctx, const pl_node *node);
pl_status pl_cpu_op_attention(pl_exec_ctx *ctx, const pl_node *node);
size_t pl_cpu_work_attention(const pl_node *node, int n_threads);

/* ---- shared helpers -----------------------------------------------------------*/

/* Scratch for a kernel: ctx->work if it is large enough, else a private
 * allocation (so a caller that did not size the work buffer still gets a
 * correct result). Release with pl_cpu_scratch_release. 64-byte aligned. */
typedef struct pl_cpu_scratch {
    void *ptr;
    void *owned;
} pl_cpu_scratch;
pl_status pl_cpu_scratch_get(pl_exec_ctx *ctx, size_t bytes, pl_cpu_scratch *s);
void pl_cpu_scratch_release(pl_cpu_scratch *s);

/* Splits [0, n) into nth near-equal ranges; thread ith gets [*lo, *hi). */
static inline void pl_cpu_split(int64_t n, int ith, int nth, int64_t *lo, int64_t *hi) {
    int64_t per = n / nth, rem = n % nth;
    *lo = ith * per + (ith < rem ? ith : rem);
    *hi = *lo + per + (ith < rem ? 1 : 0);
}

/* Row r of a tensor viewed as a 2-D [ne0, ne1*ne2*ne3] matrix of rows. */
static inline char *pl_cpu_row(const pl_tensor *t, int64_t r) {
    int64_t i1 = r % t->ne[1];
    int64_t i23 = r / t->ne[1];
    int64_t i2 = i23 % t->ne[2];
    int64_t i3 = i23 / t->ne[2];
    return (char *)t->data + i1 * t->nb[1] + i2 * t->nb[2] + i3 * t->nb[3];
}

/* Element-wise helpers with AVX2 versions (cpu_ops.c / cpu_ops_avx2.c). */
void pl_cpu_vec_f16_to_f32(const uint16_t *x, float *y, int64_t n);
void pl_cpu_vec_f32_to_f16(const float *x, uint16_t *y, int64_t n);
void pl_cpu_vec_bf16_to_f32(const uint16_t *x, float *y, int64_t n);
/* pl_hadamard_rows (quant/hadamard.h), bit-identical, vectorized when n is a
 * multiple of 8 */
void pl_cpu_hadamard_rows(float *x, int64_t len, int n);
#if PL_CPU_HAVE_AVX2_BUILD
void pl_cpu_vec_f16_to_f32_avx2(const uint16_t *x, float *y, int64_t n);
void pl_cpu_vec_f32_to_f16_avx2(const float *x, uint16_t *y, int64_t n);
void pl_cpu_hadamard_rows_avx2(float *x, int64_t len, int n);
void pl_cpu_vec_bf16_to_f32_avx2(const uint16_t *x, float *y, int64_t n);
/* Attention inner loops (cpu_attention_avx2.c); see cpu_attention.c. */
void pl_cpu_att_scores_avx2(int R, const float *const *q, const char *k, size_t ks, bool f16, int64_t n_kv,
                            int64_t hd, float scale, float *S, int64_t ldS);
void pl_cpu_att_values_avx2(int R, const float *P, int64_t ldS, const char *v, size_t vs, bool f16, int64_t n_kv,
                            int64_t hd, float *O, bool accumulate);
float pl_cpu_att_softmax_avx2(float *x, int64_t n);
/* Quantized-cache attention (cpu_attention.c): a = a * ms + vs * v over n
 * floats (n a multiple of 8), the scale then ggml_vec_mad_f32's fused add. */
void pl_cpu_attq_axpy_avx2(float *a, const float *v, float ms, float vs, int64_t n);
/* A q8_0 / q4_0 row slice of n elements (a multiple of 32) decoded to f32;
 * false for any other dtype (the caller decodes it). */
bool pl_cpu_attq_decode_avx2(pl_dtype t, const void *src, float *dst, int64_t n);
/* v: when not NULL, the V rows (stride vs) of the same positions are
 * brought into L2 as the K rows are read (the V recurrence that follows is
 * a latency-bound chain that cannot run ahead to its own misses). */
void pl_cpu_att_dots_ggml_avx2(int R, const float *const *q, const char *k, size_t ks, bool f16, int64_t n, int64_t hd,
                               float scale, float *S, int64_t ldS, const char *v, size_t vs);
void pl_cpu_att_dots_rows_avx2(int G, int group, const float *const *q, const char *k, size_t ks, bool f16,
                               int64_t n, int64_t hd, float scale, float *S, int64_t ldS);
/* The same scores and bits with the partial sums on zmm (AVX-512; group even, hd % 32 == 0). */
void pl_cpu_att_dots_rows_avx512(int G, int group, const float *const *q, const char *k, size_t ks, bool f16,
                                 int64_t n, int64_t hd, float scale, float *S, int64_t ldS);
void pl_cpu_att_vkq_rows_avx2(int G, int group, const float *E, int64_t ldE, int64_t n, const char *v, size_t vs,
                              bool f16, int64_t hd, float *A);
/* The same recurrence and bits with the accumulators in zmm registers (AVX-512; group even, hd % 32 == 0). */
void pl_cpu_att_vkq_rows_avx512(int G, int group, const float *E, int64_t ldE, int64_t n, const char *v, size_t vs,
                                bool f16, int64_t hd, float *A);
void pl_cpu_vexp_avx2(float *x, int64_t n);
void pl_cpu_att_vkq2_avx2(const float *e0, const float *e1, int64_t n, const char *v, size_t vs, bool f16, int64_t hd,
                          float inv0, float inv1, float *O0, float *O1);
void pl_cpu_att_vkq2_avx512(const float *e0, const float *e1, int64_t n, const char *v, size_t vs, bool f16, int64_t hd,
                            float inv0, float inv1, float *O0, float *O1);
size_t pl_cpu_att_flash_scratch(int R, int64_t hd);
void pl_cpu_att_flash_avx512(int R, const float *const *q, const int64_t *n_kv, const char *k, size_t ks,
                             const char *v, size_t vs, bool f16, int64_t hd, float scale, float *const *out,
                             float *scratch);
void pl_cpu_att_vkq_avx2(const float *e, int64_t n, const char *v, size_t vs, bool f16, int64_t hd, float inv,
                         float *O);
double pl_cpu_sumsq_avx2(const float *x, int64_t n);
void pl_cpu_scale_mul_avx2(const float *x, float s, const float *w, float *y, int64_t n);
void pl_cpu_add_avx2(const float *a, const float *b, float *y, int64_t n);
void pl_cpu_swiglu_avx2(const float *g, const float *u, float *y, int64_t n);
#endif

/* The decode q8_0 K scores with VNNI (cpu_attention.c, pl_cpu_attq_qk_dec:
 * a query pair per vector, K blocks broadcast from the cache): -1 follows
 * the switch PL_CPU_ATTQ_DEC; tests set 0 (off: the q8_0 matmul tile
 * kernel) or 1 (on where it applies). The same bits either way. */
extern int pl_cpu_attq_dec_mode;

#endif
