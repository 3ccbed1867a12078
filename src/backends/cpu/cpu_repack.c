/* Load-time weight preparation for the cpu backend (pl_backend.weight_prepare):
 * copies of the matmul weights in the interleaved layouts of
 * cpu_internal.h, in one anonymous mapping (transparent huge pages where the
 * kernel allows: a decode step streams all of it, and 2 MiB pages spare the
 * TLB and let the prefetchers run across what would be 4 KiB boundaries).
 *
 * Only done where the prepared kernels run (AVX-512 F/BW/VL + VNNI, see
 * pl_cpu_has_vnni512) and for shapes they take: q4_K / q5_K / q6_K / q4_0 / q5_0 /
 * q2_K / q3_K with N % 8 == 0 (16-row panels, the last one zero-padded when
 * N % 16 == 8; q4_0 / q5_0 also not with PL_CPU_LEGACY=0),
 * f16 with N % 16 == 0. Everything else keeps the original layout and the
 * kernels of cpu_matmul*.c. PL_CPU_REPACK=0 disables it (before/after runs);
 * PL_CPU_Q5K=0 only for q5_K.
 *
 * The repacking is a pure reordering (plus unpacking the 6-bit q4_K scales to
 * bytes): the prepared kernels compute with exactly the numbers of the file.
 */
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include "backends/cpu/cpu_internal.h"
#include "core/cpu_features.h"
#include "core/fp16.h"
#include "core/status.h"
#include "core/threadpool.h"

bool pl_cpu_has_vnni512(void) {
#if PL_CPU_HAVE_AVX2_BUILD
    static int cached = -1;
    if (cached < 0) {
        const pl_cpu_features *f = pl_cpu_features_get();
        cached = pl_cpu_has_avx2() && f->avx512f && f->avx512bw && f->avx512vl && f->avx512vnni;
    }
    return cached;
#else
    return false;
#endif
}

/* Switches for before/after measurements (bench/RESULTS.md), read once:
 * PL_CPU_REPACK=0 (no prepared weights), PL_CPU_FUSE=0 (no fused node
 * groups), PL_CPU_FLASH=0 (the two-pass prefill attention instead of the
 * tiled one), PL_CPU_FA=0 (f32 two-pass attention for small batches too,
 * instead of llama.cpp's flash-attention numerics), PL_CPU_GUIDED=0 (fixed
 * decode chunks instead of guided self-scheduling). All default to on. */
bool pl_cpu_switch(const char *name) {
    const char *e = getenv(name);
    return !(e && e[0] == '0');
}

bool pl_cpu_repack_enabled(void) {
    static int cached = -1;
    if (cached < 0) cached = pl_cpu_switch("PL_CPU_REPACK");
    return cached;
}

bool pl_cpu_q5k_enabled(void) {
    static int cached = -1;
    if (cached < 0) cached = pl_cpu_switch("PL_CPU_Q5K");
    return cached;
}

pl_cpu_pack_kind pl_cpu_pack_kind_for(const pl_tensor *w) {
    if (!w || w->n_dims > 2 || w->ne[2] * w->ne[3] != 1 || !pl_tensor_is_contiguous(w)) return PL_PACK_NONE;
    if (!pl_cpu_has_vnni512() || !pl_cpu_repack_enabled()) return PL_PACK_NONE;
    const int64_t K = w->ne[0], N = w->ne[1];
    switch (w->dtype) {
        case PL_Q4_K: return K % QK_K == 0 && N % 8 == 0 ? PL_PACK_Q4K_X16 : PL_PACK_NONE;
        case PL_Q6_K: return K % QK_K == 0 && N % 8 == 0 ? PL_PACK_Q6K_X16 : PL_PACK_NONE;
        case PL_F16: return K % 8 == 0 && N % PL_F16X_GROUP == 0 ? PL_PACK_F16_X16 : PL_PACK_NONE;
        case PL_Q4_0: return K % QK8_0 == 0 && N % 8 == 0 && pl_cpu_legacy_enabled() ? PL_PACK_Q40_X16 : PL_PACK_NONE;
        case PL_Q5_0: return K % QK8_0 == 0 && N % 8 == 0 && pl_cpu_legacy_enabled() ? PL_PACK_Q50_X16 : PL_PACK_NONE;
        case PL_Q4_1: return K % QK8_1 == 0 && N % 8 == 0 && pl_cpu_legacy_enabled() ? PL_PACK_Q41_X16 : PL_PACK_NONE;
        case PL_Q5_1: return K % QK8_1 == 0 && N % 8 == 0 && pl_cpu_legacy_enabled() ? PL_PACK_Q51_X16 : PL_PACK_NONE;
        case PL_Q2_K: return K % QK_K == 0 && N % 8 == 0 ? PL_PACK_Q2K_X16 : PL_PACK_NONE;
        case PL_Q3_K: return K % QK_K == 0 && N % 8 == 0 ? PL_PACK_Q3K_X16 : PL_PACK_NONE;
        case PL_TQ1_0: return K % QK_K == 0 && N % 8 == 0 ? (pl_cpu_tq1_compact() ? PL_PACK_TQ1_X16 : PL_PACK_TQ_X16) : PL_PACK_NONE;
        case PL_TQ2_0: return K % QK_K == 0 && N % 8 == 0 ? PL_PACK_TQ_X16 : PL_PACK_NONE;
        case PL_IQ2_XXS: return K % QK_K == 0 && N % 8 == 0 && pl_cpu_iqx_enabled() ? PL_PACK_IQ2XXS_X16 : PL_PACK_NONE;
        case PL_IQ2_XS: return K % QK_K == 0 && N % 8 == 0 && pl_cpu_iqx_enabled() ? PL_PACK_IQ2XSX_X16 : PL_PACK_NONE;
        case PL_IQ1_S: return K % QK_K == 0 && N % 8 == 0 && pl_cpu_iqx_enabled() ? PL_PACK_IQ1SX_X16 : PL_PACK_NONE;
        case PL_IQ1_M: return K % QK_K == 0 && N % 8 == 0 && pl_cpu_iqx_enabled() ? PL_PACK_IQ1MX_X16 : PL_PACK_NONE;
        case PL_IQ2_S: return K % QK_K == 0 && N % 8 == 0 && pl_cpu_iqx_enabled() ? PL_PACK_IQ2SX_X16 : PL_PACK_NONE;
        case PL_Q5_K: return K % QK_K == 0 && N % 8 == 0 && pl_cpu_q5k_enabled() ? PL_PACK_Q5K_X16 : PL_PACK_NONE;
        default: return PL_PACK_NONE;
    }
}

size_t pl_cpu_packed_bytes(pl_cpu_pack_kind kind, int64_t K, int64_t N) {
    switch (kind) {
        case PL_PACK_Q4K_X16: return (size_t)pl_kqx_panels(N) * (size_t)(K / QK_K) * sizeof(pl_q4kx16);
        case PL_PACK_Q6K_X16: return (size_t)pl_kqx_panels(N) * (size_t)(K / QK_K) * sizeof(pl_q6kx16);
        case PL_PACK_F16_X16: return (size_t)N * (size_t)K * 2;
        case PL_PACK_Q40_X16: return (size_t)pl_kqx_panels(N) * (size_t)(K / QK8_0) * sizeof(pl_q40x16);
        case PL_PACK_Q50_X16: return (size_t)pl_kqx_panels(N) * (size_t)(K / QK8_0) * sizeof(pl_q50x16);
        case PL_PACK_Q41_X16: return (size_t)pl_kqx_panels(N) * (size_t)(K / QK8_1) * sizeof(pl_q41x16);
        case PL_PACK_Q51_X16: return (size_t)pl_kqx_panels(N) * (size_t)(K / QK8_1) * sizeof(pl_q51x16);
        case PL_PACK_Q2K_X16: return (size_t)pl_kqx_panels(N) * (size_t)(K / QK_K) * sizeof(pl_q2kx16);
        case PL_PACK_Q3K_X16: return (size_t)pl_kqx_panels(N) * (size_t)(K / QK_K) * sizeof(pl_q3kx16);
        case PL_PACK_TQ_X16: return (size_t)pl_kqx_panels(N) * pl_tqx_panel_bytes(K);
        case PL_PACK_TQ1_X16: return (size_t)pl_kqx_panels(N) * pl_tq1x_panel_bytes(K);
        case PL_PACK_IQ2XXS_X16: return (size_t)pl_kqx_panels(N) * pl_iq2xxsx_panel_bytes(K);
        case PL_PACK_IQ2XSX_X16: return (size_t)pl_kqx_panels(N) * pl_iq2xsx_panel_bytes(K);
        case PL_PACK_IQ1SX_X16: return (size_t)pl_kqx_panels(N) * pl_iq1sx_panel_bytes(K);
        case PL_PACK_IQ1MX_X16: return (size_t)pl_kqx_panels(N) * pl_iq1mx_panel_bytes(K);
        case PL_PACK_IQ2SX_X16: return (size_t)pl_kqx_panels(N) * pl_iq2sx_panel_bytes(K);
        case PL_PACK_Q5K_X16: return (size_t)pl_kqx_panels(N) * (size_t)(K / QK_K) * sizeof(pl_q5kx16);
        default: return 0;
    }
}

/* Expert e of a 3-D expert tensor [K, N, n_expert] as a 2-D weight: each
 * expert is prepared as its own weight, keyed by its data pointer, and
 * matmul_id (cpu_moe.c) runs the dense kernels on exactly this view. */
void pl_cpu_expert_view(const pl_tensor *w, int64_t e, pl_tensor *v) {
    *v = *w;
    v->n_dims = 2;
    v->ne[2] = v->ne[3] = 1;
    v->nb[2] = v->nb[3] = v->nb[1] * (size_t)v->ne[1];
    v->data = (char *)w->data + (size_t)e * w->nb[2];
}

static bool pl_cpu_is_experts(const pl_tensor *w) {
    return w && w->n_dims == 3 && w->ne[2] > 1 && w->ne[3] == 1 && pl_tensor_is_contiguous(w);
}

size_t pl_cpu_weight_prepare_size(const pl_exec_ctx *ctx, const pl_tensor *w) {
    (void)ctx;
    if (pl_cpu_is_experts(w)) {   /* one page-aligned copy per expert, as weight_prepare lays them out */
        pl_tensor v;
        pl_cpu_expert_view(w, 0, &v);
        const pl_cpu_pack_kind kind = pl_cpu_pack_kind_for(&v);
        return kind ? ((pl_cpu_packed_bytes(kind, v.ne[0], v.ne[1]) + 4095) & ~(size_t)4095) * (size_t)w->ne[2] : 0;
    }
    pl_cpu_pack_kind kind = pl_cpu_pack_kind_for(w);
    return kind ? pl_cpu_packed_bytes(kind, w->ne[0], w->ne[1]) : 0;
}

/* ---- the layouts ------------------------------------------------------------*/

static inline uint32_t pl_ld32(const uint8_t *p) {
    uint32_t v;
    memcpy(&v, p, 4);
    return v;
}

static inline void pl_st32(uint8_t *p, uint32_t v) { memcpy(p, &v, 4); }

/* Four codes (bytes) at a time: the 4 elements of a chunk of one row are 4
 * consecutive bytes both in the original blocks and in the layout. A full
 * panel writes every byte of its blocks; rows past nr (a padded last panel)
 * are zero: d = dmin = 0, codes 0.
 * Row r of a q4_K / q5_K panel block from the fields the two block types
 * share (d, dmin, the 12 scale bytes, the 128 nibble bytes): the scales and
 * mins unpacked, the nibbles into the low-bit vectors qs. */
static void pl_pack_k45_row(const uint16_t d, const uint16_t dmin, const uint8_t *scales, const uint8_t *qs, int r,
                            pl_kx16_scales *o, uint8_t (*oqs)[8][64]) {
    o->d[r] = d;
    o->dmin[r] = dmin;
    for (int g = 0; g < 8; g++) {
        uint8_t sc, m;
        pl_q4k_scale_min(g, scales, &sc, &m);
        o->sc[g][r] = sc;
        o->m[g / 2][r][g & 1] = m;
        const uint8_t *q = qs + 32 * (g / 2);   /* group g: nibble g & 1 of these 32 bytes */
        for (int v = 0; v < 4; v++) {
            const uint32_t w0 = pl_ld32(q + 8 * v), w1 = pl_ld32(q + 8 * v + 4);
            const uint32_t lo = (g & 1) ? (w0 >> 4) & 0x0F0F0F0Fu : w0 & 0x0F0F0F0Fu;
            const uint32_t hi = (g & 1) ? (w1 >> 4) & 0x0F0F0F0Fu : w1 & 0x0F0F0F0Fu;
            pl_st32(&oqs[v][g][4 * r], lo | hi << 4);
        }
    }
}

static void pl_pack_q4k_panel(const char *src, size_t row_bytes, int64_t nb, int nr, pl_q4kx16 *out) {
    if (nr < PL_KQX_ROWS) memset(out, 0, (size_t)nb * sizeof *out);   /* the padding rows */
    for (int64_t b = 0; b < nb; b++)
        for (int r = 0; r < nr; r++) {
            const block_q4_K *x = (const block_q4_K *)(src + r * row_bytes) + b;
            pl_pack_k45_row(x->d, x->dmin, x->scales, x->qs, r, &out[b].s, out[b].qs);
        }
}

/* q5_K: element 32g + l has its low 4 bits where q4_K has them (nibble
 * g & 1 of qs[32 (g / 2) + l]) and its fifth bit at bit g of qh[l]. */
static void pl_pack_q5k_panel(const char *src, size_t row_bytes, int64_t nb, int nr, pl_q5kx16 *out) {
    if (nr < PL_KQX_ROWS) memset(out, 0, (size_t)nb * sizeof *out);   /* the padding rows */
    for (int64_t b = 0; b < nb; b++) {
        pl_q5kx16 *o = &out[b];
        for (int r = 0; r < nr; r++) {
            const block_q5_K *x = (const block_q5_K *)(src + r * row_bytes) + b;
            pl_pack_k45_row(x->d, x->dmin, x->scales, x->qs, r, &o->s, o->qs);
            for (int g = 0; g < 8; g++)
                for (int e = 0; e < 4; e++) {
                    uint8_t h = 0;
                    for (int c = 0; c < 8; c++) h |= (uint8_t)(((x->qh[4 * c + e] >> g) & 1) << c);
                    o->qh[g][4 * r + e] = h;
                }
        }
    }
}

/* q6_K: element 32g + l (g = 4h + quarter) has its low 4 bits in nibble
 * quarter / 2 of ql[64h + 32 (quarter & 1) + l] and its top 2 bits at bits
 * 2 quarter of qh[32h + l]. */
static void pl_pack_q6k_panel(const char *src, size_t row_bytes, int64_t nb, int nr, pl_q6kx16 *out) {
    if (nr < PL_KQX_ROWS) memset(out, 0, (size_t)nb * sizeof *out);   /* the padding rows */
    for (int64_t b = 0; b < nb; b++) {
        pl_q6kx16 *o = &out[b];
        for (int r = 0; r < nr; r++) {
            const block_q6_K *x = (const block_q6_K *)(src + r * row_bytes) + b;
            o->d[r] = x->d;
            for (int i = 0; i < 16; i++) o->sc[i][r] = x->scales[i];
            for (int g = 0; g < 8; g++) {
                const int h = g / 4, quarter = g % 4;
                const uint8_t *ql = x->ql + 64 * h + 32 * (quarter & 1), *qh = x->qh + 32 * h;
                const int ls = 4 * (quarter >> 1), hs = 2 * quarter;
                for (int v = 0; v < 4; v++) {
                    const uint32_t lo = (pl_ld32(ql + 8 * v) >> ls) & 0x0F0F0F0Fu;
                    const uint32_t hi = (pl_ld32(ql + 8 * v + 4) >> ls) & 0x0F0F0F0Fu;
                    pl_st32(&o->q[v / 2][g][1 + (v & 1)][4 * r], lo | hi << 4);
                }
                for (int hh = 0; hh < 2; hh++) {
                    uint32_t w = 0;
                    for (int jj = 0; jj < 4; jj++) w |= ((pl_ld32(qh + 16 * hh + 4 * jj) >> hs) & 0x03030303u) << (2 * jj);
                    pl_st32(&o->q[hh][g][0][4 * r], w);
                }
            }
        }
    }
}

/* q4_0 / q5_0: element j of a block has its low 4 bits in nibble j / 16 of
 * qs[j % 16] and (q5_0) its fifth bit at bit j of the little-endian qh. */
static inline int pl_q4_nib(const uint8_t *qs, int j) { return j < 16 ? qs[j] & 0xF : qs[j - 16] >> 4; }

static void pl_pack_q40_panel(const char *src, size_t row_bytes, int64_t nb, int nr, pl_q40x16 *out) {
    if (nr < PL_KQX_ROWS) memset(out, 0, (size_t)nb * sizeof *out);   /* the padding rows */
    for (int64_t b = 0; b < nb; b++)
        for (int r = 0; r < nr; r++) {
            const block_q4_0 *x = (const block_q4_0 *)(src + r * row_bytes) + b;
            out[b].d[r] = x->d;
            for (int v = 0; v < 4; v++)
                for (int e = 0; e < 4; e++)
                    out[b].qs[v][4 * r + e] = (uint8_t)(pl_q4_nib(x->qs, 8 * v + e) | pl_q4_nib(x->qs, 8 * v + 4 + e) << 4);
        }
}

static void pl_pack_q50_panel(const char *src, size_t row_bytes, int64_t nb, int nr, pl_q50x16 *out) {
    if (nr < PL_KQX_ROWS) memset(out, 0, (size_t)nb * sizeof *out);
    for (int64_t b = 0; b < nb; b++)
        for (int r = 0; r < nr; r++) {
            const block_q5_0 *x = (const block_q5_0 *)(src + r * row_bytes) + b;
            uint32_t qh;
            memcpy(&qh, x->qh, 4);
            out[b].d[r] = x->d;
            for (int e = 0; e < 4; e++) {
                uint8_t h = 0;
                for (int c = 0; c < 8; c++) h |= (uint8_t)(((qh >> (4 * c + e)) & 1) << c);
                out[b].qh[4 * r + e] = h;
            }
            for (int v = 0; v < 4; v++)
                for (int e = 0; e < 4; e++)
                    out[b].qs[v][4 * r + e] = (uint8_t)(pl_q4_nib(x->qs, 8 * v + e) | pl_q4_nib(x->qs, 8 * v + 4 + e) << 4);
        }
}

/* q4_1 / q5_1: the nibbles and fifth bits placed as q4_0's / q5_0's, plus m. */
static void pl_pack_q41_panel(const char *src, size_t row_bytes, int64_t nb, int nr, pl_q41x16 *out) {
    if (nr < PL_KQX_ROWS) memset(out, 0, (size_t)nb * sizeof *out);   /* the padding rows */
    for (int64_t b = 0; b < nb; b++)
        for (int r = 0; r < nr; r++) {
            const block_q4_1 *x = (const block_q4_1 *)(src + r * row_bytes) + b;
            out[b].d[r] = x->d;
            out[b].m[r] = x->m;
            for (int v = 0; v < 4; v++)
                for (int e = 0; e < 4; e++)
                    out[b].qs[v][4 * r + e] = (uint8_t)(pl_q4_nib(x->qs, 8 * v + e) | pl_q4_nib(x->qs, 8 * v + 4 + e) << 4);
        }
}

static void pl_pack_q51_panel(const char *src, size_t row_bytes, int64_t nb, int nr, pl_q51x16 *out) {
    if (nr < PL_KQX_ROWS) memset(out, 0, (size_t)nb * sizeof *out);
    for (int64_t b = 0; b < nb; b++)
        for (int r = 0; r < nr; r++) {
            const block_q5_1 *x = (const block_q5_1 *)(src + r * row_bytes) + b;
            uint32_t qh;
            memcpy(&qh, x->qh, 4);
            out[b].d[r] = x->d;
            out[b].m[r] = x->m;
            for (int e = 0; e < 4; e++) {
                uint8_t h = 0;
                for (int c = 0; c < 8; c++) h |= (uint8_t)(((qh >> (4 * c + e)) & 1) << c);
                out[b].qh[4 * r + e] = h;
            }
            for (int v = 0; v < 4; v++)
                for (int e = 0; e < 4; e++)
                    out[b].qs[v][4 * r + e] = (uint8_t)(pl_q4_nib(x->qs, 8 * v + e) | pl_q4_nib(x->qs, 8 * v + 4 + e) << 4);
        }
}

/* q2_K / q3_K: element k of a block has its 2 low bits at bits 2 ((k % 128) / 32)
 * of qs[32 (k / 128) + k % 32] and (q3_K) its high bit at bit k / 32 of
 * hmask[k % 32]. In the layout, element k = 16 s + 4 c + e (s = 4 j + q)
 * goes to bit pair j of byte 4 r + e of vector 4 q + c. */
static inline int pl_q2_code(const uint8_t *qs, int k) { return (qs[32 * (k / 128) + k % 32] >> (2 * ((k % 128) / 32))) & 3; }
static inline int pl_klow_elem(int t, int j, int e) { return 16 * (4 * j + t / 4) + 4 * (t % 4) + e; }

static void pl_pack_q2k_panel(const char *src, size_t row_bytes, int64_t nb, int nr, pl_q2kx16 *out) {
    memset(out, 0, (size_t)nb * sizeof *out);   /* the codes are or-ed in; padding rows stay 0 */
    for (int64_t b = 0; b < nb; b++)
        for (int r = 0; r < nr; r++) {
            const block_q2_K *x = (const block_q2_K *)(src + r * row_bytes) + b;
            out[b].d[r] = x->d;
            out[b].dmin[r] = x->dmin;
            for (int s = 0; s < 16; s++) out[b].sm[s / 2][r][s & 1] = x->scales[s];
            for (int t = 0; t < 16; t++)
                for (int j = 0; j < 4; j++)
                    for (int e = 0; e < 4; e++)
                        out[b].qs[t][4 * r + e] |= (uint8_t)(pl_q2_code(x->qs, pl_klow_elem(t, j, e)) << (2 * j));
        }
}

/* The 6-bit scale s of a q3_K block minus 32 (as pl_dequantize_row_q3_K). */
static inline int pl_q3k_scale(const uint8_t sc[12], int s) {
    const int lo = s < 8 ? (sc[s] & 0xF) : (sc[s - 8] >> 4);
    const int hi = (sc[8 + s % 4] >> (2 * (s / 4))) & 3;
    return (lo | (hi << 4)) - 32;
}

static void pl_pack_q3k_panel(const char *src, size_t row_bytes, int64_t nb, int nr, pl_q3kx16 *out) {
    memset(out, 0, (size_t)nb * sizeof *out);
    for (int64_t b = 0; b < nb; b++)
        for (int r = 0; r < nr; r++) {
            const block_q3_K *x = (const block_q3_K *)(src + r * row_bytes) + b;
            out[b].d[r] = x->d;
            for (int s = 0; s < 16; s++) out[b].sc[s / 2][r][s & 1] = (int8_t)pl_q3k_scale(x->scales, s);
            for (int t = 0; t < 16; t++)
                for (int j = 0; j < 4; j++)
                    for (int e = 0; e < 4; e++) {
                        const int k = pl_klow_elem(t, j, e);
                        out[b].qs[t][4 * r + e] |= (uint8_t)(pl_q2_code(x->qs, k) << (2 * j));
                        out[b].hm[t][j] |= (uint64_t)((x->hmask[k % 32] >> (k / 32)) & 1) << (4 * r + e);
                    }
        }
}

static void pl_pack_f16_panel(const char *src, size_t row_bytes, int64_t K, uint16_t *out) {
    for (int r = 0; r < PL_F16X_GROUP; r++) {
        const uint16_t *x = (const uint16_t *)(src + r * row_bytes);
        for (int64_t k = 0; k < K; k++) out[k * PL_F16X_GROUP + r] = x[k];
    }
}

typedef struct pl_pack_job {
    const pl_tensor *w;
    pl_cpu_packed *pk;
    void (*copied)(void *user, const void *p, size_t bytes);
    void *user;
} pl_pack_job;

/* Panels per slice: a thread reports each slice of the original as copied
 * (about 1 MiB at a time), so the originals leave memory as the copies grow. */
#define PL_PACK_SLICE_BYTES ((size_t)1 << 20)

static void pl_pack_task(void *arg, int ith, int nth) {
    const pl_pack_job *j = arg;
    const pl_tensor *w = j->w;
    const int64_t K = w->ne[0], N = w->ne[1];
    const int rows = j->pk->kind == PL_PACK_F16_X16 ? PL_F16X_GROUP : PL_KQX_ROWS;
    const int64_t n_panels = (N + rows - 1) / rows;
    int64_t lo, hi;
    pl_cpu_split(n_panels, ith, nth, &lo, &hi);
    const size_t panel_bytes = pl_cpu_packed_bytes(j->pk->kind, K, rows);
    const size_t src_panel = (size_t)rows * w->nb[1];
    int64_t slice = (int64_t)(PL_PACK_SLICE_BYTES / src_panel);
    if (slice < 1) slice = 1;
    int64_t reported = lo;
    for (int64_t p = lo; p < hi; p++) {
        const char *src = (const char *)w->data + (size_t)(p * rows) * w->nb[1];
        char *dst = (char *)j->pk->data + (size_t)p * panel_bytes;
        const int nr = N - p * rows < rows ? (int)(N - p * rows) : rows;
        switch (j->pk->kind) {
            case PL_PACK_Q4K_X16: pl_pack_q4k_panel(src, w->nb[1], K / QK_K, nr, (pl_q4kx16 *)dst); break;
            case PL_PACK_Q6K_X16: pl_pack_q6k_panel(src, w->nb[1], K / QK_K, nr, (pl_q6kx16 *)dst); break;
            case PL_PACK_F16_X16: pl_pack_f16_panel(src, w->nb[1], K, (uint16_t *)dst); break;
            case PL_PACK_Q40_X16: pl_pack_q40_panel(src, w->nb[1], K / QK8_0, nr, (pl_q40x16 *)dst); break;
            case PL_PACK_Q50_X16: pl_pack_q50_panel(src, w->nb[1], K / QK8_0, nr, (pl_q50x16 *)dst); break;
            case PL_PACK_Q41_X16: pl_pack_q41_panel(src, w->nb[1], K / QK8_1, nr, (pl_q41x16 *)dst); break;
            case PL_PACK_Q51_X16: pl_pack_q51_panel(src, w->nb[1], K / QK8_1, nr, (pl_q51x16 *)dst); break;
            case PL_PACK_Q2K_X16: pl_pack_q2k_panel(src, w->nb[1], K / QK_K, nr, (pl_q2kx16 *)dst); break;
            case PL_PACK_Q3K_X16: pl_pack_q3k_panel(src, w->nb[1], K / QK_K, nr, (pl_q3kx16 *)dst); break;
            case PL_PACK_TQ_X16: pl_tqx_pack_panel(w->dtype, src, w->nb[1], K, nr, (uint8_t *)dst); break;
            case PL_PACK_TQ1_X16: pl_tq1x_pack_panel(src, w->nb[1], K, nr, (uint8_t *)dst); break;
            case PL_PACK_IQ2XXS_X16: pl_iq2xxsx_pack_panel(src, w->nb[1], K, nr, (uint8_t *)dst); break;
            case PL_PACK_IQ2XSX_X16: pl_iq2xsx_pack_panel(src, w->nb[1], K, nr, (uint8_t *)dst); break;
            case PL_PACK_IQ1SX_X16: pl_iq1sx_pack_panel(src, w->nb[1], K, nr, (uint8_t *)dst); break;
            case PL_PACK_IQ1MX_X16: pl_iq1mx_pack_panel(src, w->nb[1], K, nr, (uint8_t *)dst); break;
            case PL_PACK_IQ2SX_X16: pl_iq2sx_pack_panel(src, w->nb[1], K, nr, (uint8_t *)dst); break;
            case PL_PACK_Q5K_X16: pl_pack_q5k_panel(src, w->nb[1], K / QK_K, nr, (pl_q5kx16 *)dst); break;
            default: break;
        }
        if (j->copied && (p + 1 - reported >= slice || p + 1 == hi)) {
            /* the last panel's source may be short of a whole panel */
            const int64_t end_row = (p + 1) * rows < N ? (p + 1) * rows : N;
            j->copied(j->user, (const char *)w->data + (size_t)reported * src_panel,
                      (size_t)(end_row - reported * rows) * w->nb[1]);
            reported = p + 1;
        }
    }
}

static int pl_packed_cmp(const void *a, const void *b) {
    uintptr_t x = (uintptr_t)((const pl_cpu_packed *)a)->orig, y = (uintptr_t)((const pl_cpu_packed *)b)->orig;
    return x < y ? -1 : x > y;
}

static pl_status pl_cpu_weight_prepare_2d(pl_exec_ctx *ctx, const pl_tensor *const *ws, int n,
                                          void (*copied)(void *user, const void *p, size_t bytes), void *user);

/* 3-D expert tensors are expanded into one 2-D view per expert first. */
pl_status pl_cpu_weight_prepare(pl_exec_ctx *ctx, const pl_tensor *const *ws, int n,
                                void (*copied)(void *user, const void *p, size_t bytes), void *user) {
    int64_t n_views = 0;
    for (int i = 0; i < n; i++) n_views += pl_cpu_is_experts(ws[i]) ? ws[i]->ne[2] : 1;
    if (n_views == n || n_views > INT32_MAX) return pl_cpu_weight_prepare_2d(ctx, ws, n, copied, user);
    pl_tensor *views = calloc((size_t)n_views, sizeof *views);
    const pl_tensor **list = calloc((size_t)n_views, sizeof *list);
    if (!views || !list) {
        free(views);
        free(list);
        return pl_errorf(PL_ERR_NO_MEMORY, "cpu: out of memory");
    }
    int64_t k = 0;
    for (int i = 0; i < n; i++) {
        if (!pl_cpu_is_experts(ws[i])) {
            list[k++] = ws[i];
            continue;
        }
        for (int64_t e = 0; e < ws[i]->ne[2]; e++) {
            pl_cpu_expert_view(ws[i], e, &views[k]);
            list[k] = &views[k];
            k++;
        }
    }
    pl_status st = pl_cpu_weight_prepare_2d(ctx, list, (int)n_views, copied, user);
    free(views);
    free(list);
    return st;
}

static pl_status pl_cpu_weight_prepare_2d(pl_exec_ctx *ctx, const pl_tensor *const *ws, int n,
                                          void (*copied)(void *user, const void *p, size_t bytes), void *user) {
    pl_cpu_ctx *c = (pl_cpu_ctx *)ctx;
    if (!c || c->magic != PL_CPU_CTX_MAGIC) return pl_errorf(PL_ERR_INVALID_ARG, "cpu: weight_prepare needs a cpu context");
    if (c->arena) return pl_errorf(PL_ERR_INVALID_ARG, "cpu: weights of this context are already prepared");
    size_t total = 0;
    int n_ok = 0;
    for (int i = 0; i < n; i++) {
        const size_t sz = pl_cpu_weight_prepare_size(ctx, ws[i]);
        if (sz) { total += (sz + 4095) & ~(size_t)4095; n_ok++; }
    }
    if (!n_ok) return PL_OK;
    const size_t huge = (size_t)2 << 20;
    const size_t map_size = (total + huge - 1) & ~(huge - 1);
    void *arena = mmap(NULL, map_size, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (arena == MAP_FAILED)
        return pl_errorf(PL_ERR_NO_MEMORY, "cpu: cannot map %.1f MiB for the prepared weights", total / 1048576.0);
#ifdef MADV_HUGEPAGE
    madvise(arena, map_size, MADV_HUGEPAGE);
#endif
    pl_cpu_packed *tab = calloc((size_t)n_ok, sizeof *tab);
    if (!tab) {
        munmap(arena, map_size);
        return pl_errorf(PL_ERR_NO_MEMORY, "cpu: out of memory");
    }
    size_t off = 0;
    int k = 0;
    for (int i = 0; i < n; i++) {
        const pl_tensor *w = ws[i];
        const size_t sz = pl_cpu_weight_prepare_size(ctx, w);
        if (!sz) continue;
        pl_cpu_packed *pk = &tab[k++];
        pk->orig = w->data;
        pk->data = (char *)arena + off;
        pk->kind = pl_cpu_pack_kind_for(w);
        pk->K = w->ne[0];
        pk->N = w->ne[1];
        off += (sz + 4095) & ~(size_t)4095;
        pl_pack_job job = {w, pk, copied, user};
        pl_threadpool_run(ctx->pool, pl_pack_task, &job);
    }
    qsort(tab, (size_t)n_ok, sizeof *tab, pl_packed_cmp);
    c->packed = tab;
    c->n_packed = n_ok;
    c->arena = arena;
    c->arena_size = map_size;
    return PL_OK;
}

void pl_cpu_packed_free(pl_cpu_ctx *c) {
    if (c->arena) munmap(c->arena, c->arena_size);
    free(c->packed);
    c->arena = NULL;
    c->packed = NULL;
    c->n_packed = 0;
}

const pl_cpu_packed *pl_cpu_packed_find(const pl_exec_ctx *ctx, const pl_tensor *w) {
    const pl_cpu_ctx *c = (const pl_cpu_ctx *)ctx;
    if (!c || !w || c->magic != PL_CPU_CTX_MAGIC || !c->n_packed) return NULL;
    int lo = 0, hi = c->n_packed - 1;
    const uintptr_t key = (uintptr_t)w->data;
    while (lo <= hi) {
        const int mid = (lo + hi) / 2;
        const uintptr_t v = (uintptr_t)c->packed[mid].orig;
        if (v == key) {
            const pl_cpu_packed *pk = &c->packed[mid];
            /* the same tensor, not a view that happens to start there */
            if (pk->K == w->ne[0] && pk->N == w->ne[1] && w->ne[2] * w->ne[3] == 1 &&
                pl_cpu_pack_kind_for(w) == pk->kind)
                return pk;
            return NULL;
        }
        if (v < key) lo = mid + 1;
        else hi = mid - 1;
    }
    return NULL;
}

/* Row r of a prepared weight, decoded to F32 exactly as pl_dequantize_row
 * decodes the original (same expressions): get_rows on a tied embedding
 * reads the copy, so the original's pages stay out of memory. */
void pl_cpu_packed_get_row(const pl_cpu_packed *pk, int64_t r, float *out) {
    const int64_t K = pk->K, nb = K / QK_K;
    const int l = (int)(r % PL_KQX_ROWS);
    switch (pk->kind) {
        case PL_PACK_Q6K_X16: {
            const pl_q6kx16 *x = (const pl_q6kx16 *)pk->data + (r / PL_KQX_ROWS) * nb;
            for (int64_t b = 0; b < nb; b++, out += QK_K) {
                const float d = pl_f16_to_f32(x[b].d[l]);
                for (int k = 0; k < QK_K; k++) {
                    const int g = k / 32, c = (k % 32) / 4, e = k % 4, v = c / 2;
                    const int lo = (x[b].q[v / 2][g][1 + (v & 1)][4 * l + e] >> (4 * (c & 1))) & 0xF;
                    const int hi = (x[b].q[c / 4][g][0][4 * l + e] >> (2 * (c & 3))) & 3;
                    const int q = (lo | (hi << 4)) - 32;
                    out[k] = d * x[b].sc[k / 16][l] * q;
                }
            }
            break;
        }
        case PL_PACK_Q4K_X16:
        case PL_PACK_Q5K_X16: {
            /* d1 * code - m1, as pl_dequantize_row_q4_K / q5_K (q5_K's code: nibble + 16 * high bit) */
            const bool q5 = pk->kind == PL_PACK_Q5K_X16;
            const size_t bsz = q5 ? sizeof(pl_q5kx16) : sizeof(pl_q4kx16);
            const char *base = (const char *)pk->data + (size_t)(r / PL_KQX_ROWS) * (size_t)nb * bsz;
            for (int64_t b = 0; b < nb; b++, out += QK_K) {
                const char *xb = base + (size_t)b * bsz;
                const pl_kx16_scales *s = q5 ? &((const pl_q5kx16 *)xb)->s : &((const pl_q4kx16 *)xb)->s;
                const uint8_t (*qs)[8][64] = q5 ? ((const pl_q5kx16 *)xb)->qs : ((const pl_q4kx16 *)xb)->qs;
                const float d = pl_f16_to_f32(s->d[l]), dmin = pl_f16_to_f32(s->dmin[l]);
                for (int g = 0; g < 8; g++) {
                    const float d1 = d * s->sc[g][l], m1 = dmin * s->m[g / 2][l][g & 1];
                    for (int kk = 0; kk < 32; kk++) {
                        const int c = kk / 4, e = kk % 4;
                        const int q = (qs[c / 2][g][4 * l + e] >> (4 * (c & 1))) & 0xF;
                        const int h = q5 ? (((const pl_q5kx16 *)xb)->qh[g][4 * l + e] >> c) & 1 : 0;
                        out[32 * g + kk] = d1 * (q + (h ? 16 : 0)) - m1;
                    }
                }
            }
            break;
        }
        case PL_PACK_Q40_X16:
        case PL_PACK_Q50_X16: {
            /* (code - off) * d, as pl_dequantize_row_q4_0 / q5_0 */
            const int64_t nb32 = K / QK8_0;
            const bool q5 = pk->kind == PL_PACK_Q50_X16;
            const size_t bsz = q5 ? sizeof(pl_q50x16) : sizeof(pl_q40x16);
            const char *base = (const char *)pk->data + (size_t)(r / PL_KQX_ROWS) * (size_t)nb32 * bsz;
            for (int64_t b = 0; b < nb32; b++, out += QK8_0) {
                const char *xb = base + (size_t)b * bsz;
                const uint16_t *dp = q5 ? ((const pl_q50x16 *)xb)->d : ((const pl_q40x16 *)xb)->d;
                const uint8_t(*qs)[64] = q5 ? ((const pl_q50x16 *)xb)->qs : ((const pl_q40x16 *)xb)->qs;
                const float d = pl_f16_to_f32(dp[l]);
                for (int k = 0; k < QK8_0; k++) {
                    const int c = k / 4, e = k % 4;
                    int q = (qs[c / 2][4 * l + e] >> (4 * (c & 1))) & 0xF;
                    if (q5) q |= ((((const pl_q50x16 *)xb)->qh[4 * l + e] >> c) & 1) << 4;
                    out[k] = (q - (q5 ? 16 : 8)) * d;
                }
            }
            break;
        }
        case PL_PACK_Q41_X16:
        case PL_PACK_Q51_X16: {
            /* code * d + m, as pl_dequantize_row_q4_1 / q5_1 */
            const int64_t nb32 = K / QK8_1;
            const bool q5 = pk->kind == PL_PACK_Q51_X16;
            const size_t bsz = q5 ? sizeof(pl_q51x16) : sizeof(pl_q41x16);
            const char *base = (const char *)pk->data + (size_t)(r / PL_KQX_ROWS) * (size_t)nb32 * bsz;
            for (int64_t b = 0; b < nb32; b++, out += QK8_1) {
                const char *xb = base + (size_t)b * bsz;
                const uint16_t *dp = q5 ? ((const pl_q51x16 *)xb)->d : ((const pl_q41x16 *)xb)->d;
                const uint16_t *mp = q5 ? ((const pl_q51x16 *)xb)->m : ((const pl_q41x16 *)xb)->m;
                const uint8_t(*qs)[64] = q5 ? ((const pl_q51x16 *)xb)->qs : ((const pl_q41x16 *)xb)->qs;
                const float d = pl_f16_to_f32(dp[l]), m = pl_f16_to_f32(mp[l]);
                for (int k = 0; k < QK8_1; k++) {
                    const int c = k / 4, e = k % 4;
                    int q = (qs[c / 2][4 * l + e] >> (4 * (c & 1))) & 0xF;
                    if (q5) q |= ((((const pl_q51x16 *)xb)->qh[4 * l + e] >> c) & 1) << 4;
                    out[k] = q * d + m;
                }
            }
            break;
        }
        case PL_PACK_Q2K_X16: {
            /* dl * q - ml, as pl_dequantize_row_q2_K */
            const pl_q2kx16 *x = (const pl_q2kx16 *)pk->data + (r / PL_KQX_ROWS) * nb;
            for (int64_t b = 0; b < nb; b++, out += QK_K) {
                const float d = pl_f16_to_f32(x[b].d[l]), dmin = pl_f16_to_f32(x[b].dmin[l]);
                for (int k = 0; k < QK_K; k++) {
                    const int s = k / 16, c = (k % 16) / 4, e = k % 4, j = s / 4, t = 4 * (s % 4) + c;
                    const uint8_t sc = x[b].sm[s / 2][l][s & 1];
                    const float dl = d * (sc & 0xF), ml = dmin * (sc >> 4);
                    out[k] = dl * ((x[b].qs[t][4 * l + e] >> (2 * j)) & 3) - ml;
                }
            }
            break;
        }
        case PL_PACK_Q3K_X16: {
            /* dl * (low - 4 * !hbit), as pl_dequantize_row_q3_K */
            const pl_q3kx16 *x = (const pl_q3kx16 *)pk->data + (r / PL_KQX_ROWS) * nb;
            for (int64_t b = 0; b < nb; b++, out += QK_K) {
                const float d_all = pl_f16_to_f32(x[b].d[l]);
                for (int k = 0; k < QK_K; k++) {
                    const int s = k / 16, c = (k % 16) / 4, e = k % 4, j = s / 4, t = 4 * (s % 4) + c;
                    const float dl = d_all * x[b].sc[s / 2][l][s & 1];
                    const int low = (x[b].qs[t][4 * l + e] >> (2 * j)) & 3;
                    const int hb = (int)((x[b].hm[t][j] >> (4 * l + e)) & 1);
                    out[k] = dl * (low - (hb ? 0 : 4));
                }
            }
            break;
        }
        case PL_PACK_TQ_X16: pl_tqx_get_row(pk->data, K, r, out); break;
        case PL_PACK_TQ1_X16: pl_tq1x_get_row(pk->data, K, r, out); break;
        case PL_PACK_IQ2XXS_X16: pl_iq2xxsx_get_row(pk->data, K, r, out); break;
        case PL_PACK_IQ2XSX_X16: pl_iq2xsx_get_row(pk->data, K, r, out); break;
        case PL_PACK_IQ1SX_X16: pl_iq1sx_get_row(pk->data, K, r, out); break;
        case PL_PACK_IQ1MX_X16: pl_iq1mx_get_row(pk->data, K, r, out); break;
        case PL_PACK_IQ2SX_X16: pl_iq2sx_get_row(pk->data, K, r, out); break;
        case PL_PACK_F16_X16: {
            const uint16_t *w = (const uint16_t *)pk->data + (size_t)(r / PL_F16X_GROUP) * (size_t)K * PL_F16X_GROUP +
                                r % PL_F16X_GROUP;
            for (int64_t k = 0; k < K; k++) out[k] = pl_f16_to_f32(w[k * PL_F16X_GROUP]);
            break;
        }
        default: break;
    }
}
