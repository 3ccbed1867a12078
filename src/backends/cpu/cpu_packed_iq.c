/* Load-time packing of iq2_xxs weights into the 16-row panel layout
 * PL_PACK_IQ2XXS_X16 (cpu_internal.h), and the row decoder get_rows uses on
 * a prepared table. Portable C: cpu_repack.c calls it from its pack task.
 *
 * The panel holds exactly the bits of the 16 original blocks (66 bytes a
 * row and block: 1056 bytes a panel block, the same memory as the file):
 * only the order changes, so the kernels compute with the file's numbers.
 */
#include <pthread.h>
#include <string.h>
#include "backends/cpu/cpu_internal.h"
#include "core/fp16.h"
#include "quant/ggml_tables.h"
#include "quant/quant.h"

static inline uint32_t iqx_rd_u32(const uint8_t *b) {
    return (uint32_t)b[0] | ((uint32_t)b[1] << 8) | ((uint32_t)b[2] << 16) | ((uint32_t)b[3] << 24);
}

/* Sub-block s (32 weights) of an iq2_xxs block is 8 bytes of qs: 4 grid
 * indices (groups 4s + l of 8 weights), then a u32 of 4 x 7 sign-index bits
 * (group l at bit 7l) and the scale ls in bits 28-31. */
/* pl_iqx_iq2xxs_lv (cpu_packed_iq_avx2.c's one-row kernel): the 2-bit level (0x08 -> 0, 0x19 -> 1,
 * 0x2b -> 2) of byte j of grid entry i at bits 2 (j % 4) of byte i (j < 4) or 256 + i (j >= 4). */
#if PL_CPU_HAVE_AVX2_BUILD
static void pl_iqx_lv_fill(const uint64_t *grid, int n, uint8_t *lv) {
    for (int i = 0; i < n; i++) {
        uint8_t lo = 0, hi = 0;
        for (int j = 0; j < 8; j++) {
            const uint8_t v = (uint8_t)(grid[i] >> (8 * j));
            const uint8_t l = v == 0x08 ? 0 : v == 0x19 ? 1 : 2;
            if (j < 4) lo |= (uint8_t)(l << (2 * j));
            else hi |= (uint8_t)(l << (2 * (j - 4)));
        }
        lv[i] = lo;
        lv[n + i] = hi;
    }
}
static void pl_iqx_iq2xxs_lv_init(void) { pl_iqx_lv_fill(pl_iq2xxs_grid, 256, pl_iqx_iq2xxs_lv); }
static void pl_iqx_iq2xs_lv_init(void) {
    pl_iqx_lv_fill(pl_iq2xs_grid, 512, pl_iqx_iq2xs_lv);
    for (int i = 0; i < 512; i++) pl_iqx_iq2xs_c16[1 + i] = (uint16_t)(pl_iqx_iq2xs_lv[i] | pl_iqx_iq2xs_lv[512 + i] << 8);
}
#endif

void pl_iq2xxsx_pack_panel(const char *src, size_t row_bytes, int64_t K, int nr, uint8_t *out) {
#if PL_CPU_HAVE_AVX2_BUILD
    static pthread_once_t once = PTHREAD_ONCE_INIT;
    pthread_once(&once, pl_iqx_iq2xxs_lv_init);
#endif
    const int64_t nb = K / QK_K;
    uint16_t *dv = (uint16_t *)(out + nb * PL_IQ2XXSX_CODES);
    memset(out, 0, pl_iq2xxsx_panel_bytes(K));
    for (int64_t b = 0; b < nb; b++) {
        uint8_t *idx = out + b * PL_IQ2XXSX_CODES, *sg = idx + 512;
        for (int r = 0; r < nr; r++) {
            const block_iq2_xxs *x = (const block_iq2_xxs *)(src + r * row_bytes) + b;
            const uint8_t *qs = (const uint8_t *)x->qs;
            dv[b * PL_KQX_ROWS + r] = x->d;
            for (int s = 0; s < 8; s++) {
                const uint32_t a = iqx_rd_u32(qs + 8 * s), w = iqx_rd_u32(qs + 8 * s + 4);
                for (int l = 0; l < 4; l++) {
                    const int g = 4 * s + l;
                    idx[16 * g + r] = (uint8_t)(a >> (8 * l));
                    sg[16 * g + r] = (uint8_t)(((w >> (7 * l)) & 127) | (((w >> (28 + l)) & 1) << 7));
                }
            }
        }
    }
}

/* Block b of row r (0..15) of a panel, put back in the file's form. */
static void pl_iq2xxsx_unpack_block(const uint8_t *panel, int64_t nb, int64_t b, int r, block_iq2_xxs *x) {
    const uint8_t *idx = panel + b * PL_IQ2XXSX_CODES, *sg = idx + 512;
    const uint16_t *dv = (const uint16_t *)(panel + nb * PL_IQ2XXSX_CODES);
    uint8_t *qs = (uint8_t *)x->qs;
    x->d = dv[b * PL_KQX_ROWS + r];
    for (int s = 0; s < 8; s++) {
        uint32_t w = 0;
        for (int l = 0; l < 4; l++) {
            const int g = 4 * s + l;
            qs[8 * s + l] = idx[16 * g + r];
            w |= (uint32_t)(sg[16 * g + r] & 127) << (7 * l) | (uint32_t)(sg[16 * g + r] >> 7) << (28 + l);
        }
        for (int i = 0; i < 4; i++) qs[8 * s + 4 + i] = (uint8_t)(w >> (8 * i));
    }
}

/* Row r of a prepared iq2_xxs weight, as pl_dequantize_row_iq2_xxs computes
 * it (the same function, on the blocks put back). */
void pl_iq2xxsx_get_row(const uint8_t *data, int64_t K, int64_t r, float *out) {
    const int64_t nb = K / QK_K;
    const uint8_t *panel = data + (size_t)(r / PL_KQX_ROWS) * pl_iq2xxsx_panel_bytes(K);
    for (int64_t b = 0; b < nb; b++) {
        block_iq2_xxs x;
        pl_iq2xxsx_unpack_block(panel, nb, b, (int)(r % PL_KQX_ROWS), &x);
        pl_dequantize_row(PL_IQ2_XXS, &x, out + b * QK_K, QK_K);
    }
}

/* PL_CPU_IQX=0 leaves the IQ weights unprepared (the AVX-512 tiles of
 * cpu_matmul_iq_avx2.c run on the file's blocks: before/after runs). The
 * kernels also need AVX-512 BITALG (vpopcntb for the sign parity) and VBMI
 * (vpermt2b). */
bool pl_cpu_iqx_enabled(void) {
#if PL_CPU_HAVE_AVX2_BUILD && defined(__GNUC__)
    static int cached = -1;
    if (cached < 0)
        cached = __builtin_cpu_supports("avx512bitalg") && __builtin_cpu_supports("avx512vbmi") && pl_cpu_switch("PL_CPU_IQX");
    return cached;
#else
    return false;
#endif
}

/* iq2_xs -> PL_PACK_IQ2XSX_X16: qs[g] (9-bit grid index | 7-bit sign index
 * << 9) and scales[s] of each row, as in the file, reordered: the two groups
 * 2p, 2p + 1 of a row side by side (u16 32 p + 2 r + (g & 1)), then the rows. */
void pl_iq2xsx_pack_panel(const char *src, size_t row_bytes, int64_t K, int nr, uint8_t *out) {
#if PL_CPU_HAVE_AVX2_BUILD
    static pthread_once_t once = PTHREAD_ONCE_INIT;
    pthread_once(&once, pl_iqx_iq2xs_lv_init);
#endif
    const int64_t nb = K / QK_K;
    uint16_t *dv = (uint16_t *)(out + nb * PL_IQ2XSX_CODES);
    memset(out, 0, pl_iq2xsx_panel_bytes(K));
    for (int64_t b = 0; b < nb; b++) {
        uint16_t *q = (uint16_t *)(out + b * PL_IQ2XSX_CODES);
        uint8_t *sc = out + b * PL_IQ2XSX_CODES + 1024;
        for (int r = 0; r < nr; r++) {
            const block_iq2_xs *x = (const block_iq2_xs *)(src + r * row_bytes) + b;
            dv[b * PL_KQX_ROWS + r] = x->d;
            for (int g = 0; g < 32; g++) q[PL_IQ2XSX_Q(g, r)] = x->qs[g];
            for (int s = 0; s < 8; s++) sc[16 * s + r] = x->scales[s];
        }
    }
}

void pl_iq2xsx_get_row(const uint8_t *data, int64_t K, int64_t r, float *out) {
    const int64_t nb = K / QK_K;
    const int l = (int)(r % PL_KQX_ROWS);
    const uint8_t *panel = data + (size_t)(r / PL_KQX_ROWS) * pl_iq2xsx_panel_bytes(K);
    const uint16_t *dv = (const uint16_t *)(panel + nb * PL_IQ2XSX_CODES);
    for (int64_t b = 0; b < nb; b++) {
        const uint16_t *q = (const uint16_t *)(panel + b * PL_IQ2XSX_CODES);
        const uint8_t *sc = panel + b * PL_IQ2XSX_CODES + 1024;
        block_iq2_xs x;
        x.d = dv[b * PL_KQX_ROWS + l];
        for (int g = 0; g < 32; g++) x.qs[g] = q[PL_IQ2XSX_Q(g, l)];
        for (int s = 0; s < 8; s++) x.scales[s] = sc[16 * s + l];
        pl_dequantize_row(PL_IQ2_XS, &x, out + b * QK_K, QK_K);
    }
}

/* iq1_s -> PL_PACK_IQ1SX_X16: per pair k of groups (2 k, 2 k + 1) and row r the 24 bits
 * lo | ia << 2 | ib << 13 (ia, ib the 11-bit grid indices; lo = delta sign | scale bit 0 << 1 for
 * k even, scale bits 1, 2 for k odd: the sub-block's qh bits 12-15). */
uint64_t pl_iqx_iq1s_u[2048];
/* pl_iqx_iq1_c2[1 + i]: grid entry i as 8 two-bit codes g + 1 (bits 2 j, 2 j + 1 = weight j), one
 * u16 of padding either side (the one-row kernels gather dwords at 2 i and 2 i - 2) */
uint16_t pl_iqx_iq1_c2[2050];
uint32_t pl_iqx_iq1m_c4[2048];
static void pl_iqx_iq1_c2_init(void) {
    for (int i = 0; i < 2048; i++) {
        unsigned e = 0;
        for (int j = 0; j < 8; j++) e |= (unsigned)((int8_t)(pl_iq1s_grid[i] >> (8 * j)) + 1) << (2 * j);
        pl_iqx_iq1_c2[1 + i] = (uint16_t)e;
        pl_iqx_iq1m_c4[i] = e * 0x10001u;   /* iq1_m's and iq1_s's one-row kernels gather from it */
    }
}
static void pl_iqx_iq1_c2_once(void) {
    static pthread_once_t once = PTHREAD_ONCE_INIT;
    pthread_once(&once, pl_iqx_iq1_c2_init);
}
static void pl_iqx_iq1s_init(void) {
    pl_iqx_iq1_c2_once();
    for (int i = 0; i < 2048; i++) {
        uint64_t e = 0;
        for (int j = 0; j < 8; j++) e |= (uint64_t)(uint8_t)((int8_t)(pl_iq1s_grid[i] >> (8 * j)) + 1) << (8 * j);
        pl_iqx_iq1s_u[i] = e;
    }
}

void pl_iq1sx_pack_panel(const char *src, size_t row_bytes, int64_t K, int nr, uint8_t *out) {
    static pthread_once_t once = PTHREAD_ONCE_INIT;
    pthread_once(&once, pl_iqx_iq1s_init);
    const int64_t nb = K / QK_K;
    uint16_t *dv = (uint16_t *)(out + nb * PL_IQ1SX_CODES);
    memset(out, 0, pl_iq1sx_panel_bytes(K));
    for (int64_t b = 0; b < nb; b++) {
        uint8_t *q = out + b * PL_IQ1SX_CODES;
        for (int r = 0; r < nr; r++) {
            const block_iq1_s *x = (const block_iq1_s *)(src + r * row_bytes) + b;
            dv[b * PL_KQX_ROWS + r] = x->d;
            for (int k = 0; k < 16; k++) {
                const uint32_t h = x->qh[k / 2], o = 6 * (k % 2);   /* the pair's index bits at o, o + 3 */
                const uint32_t lo = k % 2 ? (h >> 13 & 3) : (h >> 15 | (h >> 12 & 1) << 1);
                const uint32_t v = lo | (x->qs[2 * k] | (h >> o & 7) << 8) << 2 | (x->qs[2 * k + 1] | (h >> (o + 3) & 7) << 8) << 13;
                for (int j = 0; j < 3; j++) q[48 * k + 3 * r + j] = (uint8_t)(v >> (8 * j));
            }
        }
    }
}

void pl_iq1sx_get_row(const uint8_t *data, int64_t K, int64_t r, float *out) {
    const int64_t nb = K / QK_K;
    const int l = (int)(r % PL_KQX_ROWS);
    const uint8_t *panel = data + (size_t)(r / PL_KQX_ROWS) * pl_iq1sx_panel_bytes(K);
    const uint16_t *dv = (const uint16_t *)(panel + nb * PL_IQ1SX_CODES);
    for (int64_t b = 0; b < nb; b++) {
        const uint8_t *q = panel + b * PL_IQ1SX_CODES;
        block_iq1_s x;
        x.d = dv[b * PL_KQX_ROWS + l];
        memset(x.qh, 0, sizeof x.qh);
        for (int k = 0; k < 16; k++) {
            const uint8_t *e = q + 48 * k + 3 * l;
            const uint32_t v = e[0] | (uint32_t)e[1] << 8 | (uint32_t)e[2] << 16, o = 6 * (k % 2);
            x.qs[2 * k] = (uint8_t)(v >> 2);
            x.qs[2 * k + 1] = (uint8_t)(v >> 13);
            const uint32_t lo = k % 2 ? (v & 3) << 13 : (v & 1) << 15 | (v >> 1 & 1) << 12;
            x.qh[k / 2] = (uint16_t)(x.qh[k / 2] | (v >> 10 & 7) << o | (v >> 21 & 7) << (o + 3) | lo);
        }
        pl_dequantize_row(PL_IQ1_S, &x, out + b * QK_K, QK_K);
    }
}

/* iq1_m -> PL_PACK_IQ1MX_X16: per pair k of groups (2 k, 2 k + 1) and row r the 24 bits
 * da | db << 1 | ia << 2 | ib << 13 (ia, ib the 11-bit grid indices: qs[g] | qh nibble bits 0-2
 * << 8, da, db the nibbles' delta signs), then the 4 u16 of scales of each row, as in the file.
 * pl_iqx_iq1m_u[i | neg << 11]: the 8 codes 8 (g + 1) + delta + 1 (delta = -1 if neg else +1):
 * 0..18, unsigned. pl_iqx_iq1m_c4[i]: pl_iqx_iq1_c2's entry i in both halves of a u32. */
uint64_t pl_iqx_iq1m_u[4096];
static void pl_iqx_iq1m_init(void) {
    pl_iqx_iq1_c2_once();
    for (int i = 0; i < 4096; i++) {
        uint64_t e = 0;
        for (int j = 0; j < 8; j++) {
            const int g = (int8_t)(pl_iq1s_grid[i & 2047] >> (8 * j));
            e |= (uint64_t)(uint8_t)(8 * (g + 1) + (i & 2048 ? -1 : 1) + 1) << (8 * j);
        }
        pl_iqx_iq1m_u[i] = e;
    }
}

void pl_iq1mx_pack_panel(const char *src, size_t row_bytes, int64_t K, int nr, uint8_t *out) {
    static pthread_once_t once = PTHREAD_ONCE_INIT;
    pthread_once(&once, pl_iqx_iq1m_init);
    const int64_t nb = K / QK_K;
    memset(out, 0, pl_iq1mx_panel_bytes(K));
    for (int64_t b = 0; b < nb; b++) {
        uint8_t *q = out + b * PL_IQ1MX_BLOCK;
        uint16_t *sc = (uint16_t *)(q + PL_IQ1MX_SC);
        for (int r = 0; r < nr; r++) {
            const block_iq1_m *x = (const block_iq1_m *)(src + r * row_bytes) + b;
            for (int k = 0; k < 16; k++) {
                const uint32_t h = x->qh[k];
                const uint32_t v = (h >> 3 & 1) | (h >> 7) << 1 | (x->qs[2 * k] | (h & 7) << 8) << 2 |
                                   (x->qs[2 * k + 1] | (h >> 4 & 7) << 8) << 13;
                for (int j = 0; j < 3; j++) q[48 * k + 3 * r + j] = (uint8_t)(v >> (8 * j));
            }
            for (int k = 0; k < 4; k++) sc[16 * k + r] = (uint16_t)(x->scales[2 * k] | x->scales[2 * k + 1] << 8);
        }
    }
}

void pl_iq1mx_get_row(const uint8_t *data, int64_t K, int64_t r, float *out) {
    const int64_t nb = K / QK_K;
    const int l = (int)(r % PL_KQX_ROWS);
    const uint8_t *panel = data + (size_t)(r / PL_KQX_ROWS) * pl_iq1mx_panel_bytes(K);
    for (int64_t b = 0; b < nb; b++) {
        const uint8_t *q = panel + b * PL_IQ1MX_BLOCK;
        const uint16_t *sc = (const uint16_t *)(q + PL_IQ1MX_SC);
        block_iq1_m x;
        for (int k = 0; k < 16; k++) {
            const uint8_t *e = q + 48 * k + 3 * l;
            const uint32_t v = e[0] | (uint32_t)e[1] << 8 | (uint32_t)e[2] << 16;
            x.qs[2 * k] = (uint8_t)(v >> 2);
            x.qs[2 * k + 1] = (uint8_t)(v >> 13);
            x.qh[k] = (uint8_t)((v >> 10 & 7) | (v & 1) << 3 | (v >> 21 & 7) << 4 | (v >> 1 & 1) << 7);
        }
        for (int k = 0; k < 4; k++) {
            x.scales[2 * k] = (uint8_t)sc[16 * k + l];
            x.scales[2 * k + 1] = (uint8_t)(sc[16 * k + l] >> 8);
        }
        pl_dequantize_row(PL_IQ1_M, &x, out + b * QK_K, QK_K);
    }
}

/* iq2_s -> PL_PACK_IQ2SX_X16: the low index byte, sign byte, qh and scales
 * byte of each row, as in the file, reordered by group / sub-block. */
void pl_iq2sx_pack_panel(const char *src, size_t row_bytes, int64_t K, int nr, uint8_t *out) {
    const int64_t nb = K / QK_K;
    uint16_t *dv = (uint16_t *)(out + nb * PL_IQ2SX_CODES);
    memset(out, 0, pl_iq2sx_panel_bytes(K));
    for (int64_t b = 0; b < nb; b++) {
        uint8_t *q = out + b * PL_IQ2SX_CODES, *sg = q + 512, *qh = q + 1024, *sc = q + 1152;
        for (int r = 0; r < nr; r++) {
            const block_iq2_s *x = (const block_iq2_s *)(src + r * row_bytes) + b;
            dv[b * PL_KQX_ROWS + r] = x->d;
            for (int g = 0; g < 32; g++) {
                q[16 * g + r] = x->qs[g];
                sg[16 * g + r] = x->qs[32 + g];
            }
            for (int s = 0; s < 8; s++) {
                qh[16 * s + r] = x->qh[s];
                sc[16 * s + r] = x->scales[s];
            }
        }
    }
}

void pl_iq2sx_get_row(const uint8_t *data, int64_t K, int64_t r, float *out) {
    const int64_t nb = K / QK_K;
    const int l = (int)(r % PL_KQX_ROWS);
    const uint8_t *panel = data + (size_t)(r / PL_KQX_ROWS) * pl_iq2sx_panel_bytes(K);
    const uint16_t *dv = (const uint16_t *)(panel + nb * PL_IQ2SX_CODES);
    for (int64_t b = 0; b < nb; b++) {
        const uint8_t *q = panel + b * PL_IQ2SX_CODES, *sg = q + 512, *qh = q + 1024, *sc = q + 1152;
        block_iq2_s x;
        x.d = dv[b * PL_KQX_ROWS + l];
        for (int g = 0; g < 32; g++) {
            x.qs[g] = q[16 * g + l];
            x.qs[32 + g] = sg[16 * g + l];
        }
        for (int s = 0; s < 8; s++) {
            x.qh[s] = qh[16 * s + l];
            x.scales[s] = sc[16 * s + l];
        }
        pl_dequantize_row(PL_IQ2_S, &x, out + b * QK_K, QK_K);
    }
}
