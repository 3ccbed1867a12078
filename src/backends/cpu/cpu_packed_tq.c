/* Load-time packing of ternary weights (tq2_0, tq1_0) into the 2-bit panel
 * layout PL_PACK_TQ_X16 (cpu_internal.h), and the row decoder get_rows uses
 * on a prepared table. Portable C: cpu_repack.c calls it from its pack task.
 *
 * Both types reduce to the same numbers per block of 256: a f16 scale d and
 * 256 trits t in 0..2, the weight (t - 1) * d. The packing is a pure
 * reordering of those (tq1_0's base-3 bytes expanded), so the kernels compute
 * with exactly the numbers of the file.
 */
#include <string.h>
#include "backends/cpu/cpu_internal.h"
#include "core/fp16.h"

/* Trit k (0 = most significant) of a tq1_0 byte, as quant/dequant_iq.c and
 * GGML: multiplying by 3^k (mod 256) moves it to the top, then * 3 >> 8. */
static inline uint8_t pl_tq1_trit(uint8_t byte, int k) {
    static const uint8_t pow3[5] = {1, 3, 9, 27, 81};
    const uint8_t q = (uint8_t)(byte * pow3[k]);
    return (uint8_t)(((uint16_t)q * 3) >> 8);
}

/* The 256 trits of one block, in element order (quant/blocks.h). */
static void pl_tq_block_trits(pl_dtype dt, const void *blk, uint8_t t[QK_K], uint16_t *d) {
    if (dt == PL_TQ2_0) {
        const block_tq2_0 *b = blk;
        for (int h = 0; h < 2; h++)
            for (int l = 0; l < 4; l++)
                for (int m = 0; m < 32; m++) t[128 * h + 32 * l + m] = (b->qs[32 * h + m] >> (2 * l)) & 3;
        *d = b->d;
    } else {
        const block_tq1_0 *b = blk;
        int n = 0;
        /* qs[0..31]: 5 x 32 elements; qs[32..47]: 5 x 16; qh[0..3]: 4 x 4 */
        for (int k = 0; k < 5; k++)
            for (int m = 0; m < 32; m++) t[n++] = pl_tq1_trit(b->qs[m], k);
        for (int k = 0; k < 5; k++)
            for (int m = 0; m < 16; m++) t[n++] = pl_tq1_trit(b->qs[32 + m], k);
        for (int k = 0; k < 4; k++)
            for (int j = 0; j < 4; j++) t[n++] = pl_tq1_trit(b->qh[j], k);
        *d = b->d;
    }
}

/* One panel: nr (<= 16) rows of row_bytes from src. Rows past nr (a padded
 * last panel) get d = 0 and trits 0; their results are never stored. */
void pl_tqx_pack_panel(pl_dtype dt, const char *src, size_t row_bytes, int64_t K, int nr, uint8_t *out) {
    const int64_t nb = K / QK_K;
    const size_t bsz = dt == PL_TQ2_0 ? sizeof(block_tq2_0) : sizeof(block_tq1_0);
    uint16_t *scales = (uint16_t *)(out + nb * 1024);
    memset(out, 0, pl_tqx_panel_bytes(K));
    for (int64_t b = 0; b < nb; b++) {
        uint8_t *codes = out + b * 1024;
        for (int r = 0; r < nr; r++) {
            uint8_t t[QK_K];
            uint16_t d;
            pl_tq_block_trits(dt, src + r * row_bytes + (size_t)b * bsz, t, &d);
            scales[b * PL_KQX_ROWS + r] = d;
            for (int v = 0; v < 16; v++)
                for (int e = 0; e < 4; e++)
                    codes[64 * v + 4 * r + e] = (uint8_t)(t[16 * v + e] | t[16 * v + 4 + e] << 2 |
                                                          t[16 * v + 8 + e] << 4 | t[16 * v + 12 + e] << 6);
        }
    }
}

/* Row r of a prepared ternary weight, as pl_dequantize_row_tq2_0 / tq1_0
 * compute it: (float)(t - 1) * d. */
void pl_tqx_get_row(const uint8_t *data, int64_t K, int64_t r, float *out) {
    const int64_t nb = K / QK_K;
    const int l = (int)(r % PL_KQX_ROWS);
    const uint8_t *panel = data + (size_t)(r / PL_KQX_ROWS) * pl_tqx_panel_bytes(K);
    const uint16_t *scales = (const uint16_t *)(panel + nb * 1024);
    for (int64_t b = 0; b < nb; b++, out += QK_K) {
        const float d = pl_f16_to_f32(scales[b * PL_KQX_ROWS + l]);
        const uint8_t *codes = panel + b * 1024;
        for (int k = 0; k < QK_K; k++) {
            const int t = (codes[64 * (k / 16) + 4 * l + k % 4] >> (2 * ((k / 4) % 4))) & 3;
            out[k] = (float)(t - 1) * d;
        }
    }
}

/* ---- tq1_0 in the lookup code (PL_PACK_TQ1_X16 where pl_cpu_tq1_lut4()) ----
 *
 * The bytes of vectors u = 0..11 of a block are re-encoded at load: one byte
 * for the same 5 trits, a bijection of the 243 trit tuples onto 243 of the
 * 256 byte values (same size, nothing expanded). With trit k = chunk 5u + k
 * and u4 = t0 + 3 t1 + 9 t2 + 27 t3 (0..80):
 *     code = 64 * (u4 & 3) + 21 * t4 + (u4 >> 2)        (u4 >> 2 <= 20)
 * so the low 6 bits alone give t4 (one vpermb on a 64-entry table) and the
 * whole byte gives t0..t3 as 2-bit fields (one 256-entry lookup: two
 * vpermi2b and a blend) that 4 ANDs separate: 3 permutes per 5 trits where
 * ggml's code takes 10. The last vector (u = 12, chunks 60..63) holds t0..t3
 * as 2-bit fields directly. The 13 unused codes decode to 0. */
uint8_t pl_tq1c_encode(const uint8_t t[5]) {
    const int u4 = t[0] + 3 * t[1] + 9 * t[2] + 27 * t[3];
    return (uint8_t)(64 * (u4 & 3) + 21 * t[4] + (u4 >> 2));
}

/* pl_tq1c_fields[code] = t0 | t1 << 2 | t2 << 4 | t3 << 6 and
 * pl_tq1c_t4[code & 63] = t4 of the code above, written out by a script from
 * that definition (test_cpu_backend checks all 243 tuples through them). */
const uint8_t pl_tq1c_fields[256] __attribute__((aligned(64))) = {
    0x00, 0x05, 0x0a, 0x14, 0x19, 0x22, 0x28, 0x41, 0x46, 0x50, 0x55, 0x5a, 0x64, 0x69, 0x82, 0x88,
    0x91, 0x96, 0xa0, 0xa5, 0xaa, 0x00, 0x05, 0x0a, 0x14, 0x19, 0x22, 0x28, 0x41, 0x46, 0x50, 0x55,
    0x5a, 0x64, 0x69, 0x82, 0x88, 0x91, 0x96, 0xa0, 0xa5, 0xaa, 0x00, 0x05, 0x0a, 0x14, 0x19, 0x22,
    0x28, 0x41, 0x46, 0x50, 0x55, 0x5a, 0x64, 0x69, 0x82, 0x88, 0x91, 0x96, 0xa0, 0xa5, 0xaa, 0x00,
    0x01, 0x06, 0x10, 0x15, 0x1a, 0x24, 0x29, 0x42, 0x48, 0x51, 0x56, 0x60, 0x65, 0x6a, 0x84, 0x89,
    0x92, 0x98, 0xa1, 0xa6, 0x00, 0x01, 0x06, 0x10, 0x15, 0x1a, 0x24, 0x29, 0x42, 0x48, 0x51, 0x56,
    0x60, 0x65, 0x6a, 0x84, 0x89, 0x92, 0x98, 0xa1, 0xa6, 0x00, 0x01, 0x06, 0x10, 0x15, 0x1a, 0x24,
    0x29, 0x42, 0x48, 0x51, 0x56, 0x60, 0x65, 0x6a, 0x84, 0x89, 0x92, 0x98, 0xa1, 0xa6, 0x00, 0x00,
    0x02, 0x08, 0x11, 0x16, 0x20, 0x25, 0x2a, 0x44, 0x49, 0x52, 0x58, 0x61, 0x66, 0x80, 0x85, 0x8a,
    0x94, 0x99, 0xa2, 0xa8, 0x00, 0x02, 0x08, 0x11, 0x16, 0x20, 0x25, 0x2a, 0x44, 0x49, 0x52, 0x58,
    0x61, 0x66, 0x80, 0x85, 0x8a, 0x94, 0x99, 0xa2, 0xa8, 0x00, 0x02, 0x08, 0x11, 0x16, 0x20, 0x25,
    0x2a, 0x44, 0x49, 0x52, 0x58, 0x61, 0x66, 0x80, 0x85, 0x8a, 0x94, 0x99, 0xa2, 0xa8, 0x00, 0x00,
    0x04, 0x09, 0x12, 0x18, 0x21, 0x26, 0x40, 0x45, 0x4a, 0x54, 0x59, 0x62, 0x68, 0x81, 0x86, 0x90,
    0x95, 0x9a, 0xa4, 0xa9, 0x00, 0x04, 0x09, 0x12, 0x18, 0x21, 0x26, 0x40, 0x45, 0x4a, 0x54, 0x59,
    0x62, 0x68, 0x81, 0x86, 0x90, 0x95, 0x9a, 0xa4, 0xa9, 0x00, 0x04, 0x09, 0x12, 0x18, 0x21, 0x26,
    0x40, 0x45, 0x4a, 0x54, 0x59, 0x62, 0x68, 0x81, 0x86, 0x90, 0x95, 0x9a, 0xa4, 0xa9, 0x00, 0x00,
};
const uint8_t pl_tq1c_t4[64] __attribute__((aligned(64))) = {
    0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00,
    0x00, 0x00, 0x00, 0x00, 0x00, 0x01, 0x01, 0x01, 0x01, 0x01, 0x01, 0x01, 0x01, 0x01, 0x01, 0x01,
    0x01, 0x01, 0x01, 0x01, 0x01, 0x01, 0x01, 0x01, 0x01, 0x01, 0x02, 0x02, 0x02, 0x02, 0x02, 0x02,
    0x02, 0x02, 0x02, 0x02, 0x02, 0x02, 0x02, 0x02, 0x02, 0x02, 0x02, 0x02, 0x02, 0x02, 0x02, 0x00,
};

/* Trit c % 5 of chunk c of a byte of vector c / 5 in the lookup code. */
static inline int pl_tq1c_trit(uint8_t code, int c) {
    const int u = c / 5, k = c % 5;
    if (u == 12) return (code >> (2 * k)) & 3;
    return k == 4 ? pl_tq1c_t4[code & 63] : (pl_tq1c_fields[code] >> (2 * k)) & 3;
}

/* PL_CPU_TQ1DEC=0: ggml's byte code (the 10-lookup kernel) instead. The
 * packer, the kernels and get_rows all ask here: one process, one code. */
int pl_cpu_tq1_lut4_mode = -1;
bool pl_cpu_tq1_lut4(void) {
    static int cached = -1;
    if (pl_cpu_tq1_lut4_mode >= 0) return pl_cpu_tq1_lut4_mode > 0;
    if (cached < 0) cached = pl_cpu_switch("PL_CPU_TQ1DEC");
    return cached;
}

/* tq1_0 -> PL_PACK_TQ1_X16 (compact, 5 trits per byte as in the file):
 * byte 4r + e of vector u holds the trits of element e of chunks 5u + k
 * (k = 0..4; the last vector of a block, u = 12, has chunks 60..63 and a
 * zero fifth trit), encoded as tq1_0 encodes them: v = sum t_k 3^(4-k),
 * byte = ceil(v * 256 / 243), trit k = top trit of byte * 3^k (mod 256). */
void pl_tq1x_pack_panel(const char *src, size_t row_bytes, int64_t K, int nr, uint8_t *out) {
    const int64_t nb = K / QK_K;
    uint16_t *scales = (uint16_t *)(out + nb * PL_TQ1X_BLOCK);
    const bool lut4 = pl_cpu_tq1_lut4();
    memset(out, 0, pl_tq1x_panel_bytes(K));
    for (int64_t b = 0; b < nb; b++) {
        uint8_t *codes = out + b * PL_TQ1X_BLOCK;
        for (int r = 0; r < nr; r++) {
            uint8_t t[QK_K];
            uint16_t d;
            pl_tq_block_trits(PL_TQ1_0, src + r * row_bytes + (size_t)b * sizeof(block_tq1_0), t, &d);
            scales[b * PL_KQX_ROWS + r] = d;
            for (int u = 0; u < 13; u++)
                for (int e = 0; e < 4; e++) {
                    if (lut4) {
                        uint8_t tu[5] = {0, 0, 0, 0, 0};
                        for (int k = 0; k < 5 && 5 * u + k < QK_K / 4; k++) tu[k] = t[4 * (5 * u + k) + e];
                        codes[64 * u + 4 * r + e] =
                            u < 12 ? pl_tq1c_encode(tu) : (uint8_t)(tu[0] | tu[1] << 2 | tu[2] << 4 | tu[3] << 6);
                        continue;
                    }
                    int v = 0;
                    for (int k = 0; k < 5; k++) {
                        const int c = 5 * u + k;
                        v = 3 * v + (c < QK_K / 4 ? t[4 * c + e] : 0);
                    }
                    codes[64 * u + 4 * r + e] = (uint8_t)((v * 256 + 242) / 243);
                }
        }
    }
}

void pl_tq1x_get_row(const uint8_t *data, int64_t K, int64_t r, float *out) {
    const int64_t nb = K / QK_K;
    const int l = (int)(r % PL_KQX_ROWS);
    const uint8_t *panel = data + (size_t)(r / PL_KQX_ROWS) * pl_tq1x_panel_bytes(K);
    const uint16_t *scales = (const uint16_t *)(panel + nb * PL_TQ1X_BLOCK);
    const bool lut4 = pl_cpu_tq1_lut4();
    for (int64_t b = 0; b < nb; b++, out += QK_K) {
        const float d = pl_f16_to_f32(scales[b * PL_KQX_ROWS + l]);
        const uint8_t *codes = panel + b * PL_TQ1X_BLOCK;
        for (int k = 0; k < QK_K; k++) {
            const int c = k / 4;
            const uint8_t byte = codes[64 * (c / 5) + 4 * l + k % 4];
            const int t = lut4 ? pl_tq1c_trit(byte, c) : pl_tq1_trit(byte, c % 5);
            out[k] = (float)(t - 1) * d;
        }
    }
}

/* PL_CPU_TQ1X=0: tq1_0 expanded to the 2-bit layout even where VBMI is
 * there (before/after runs). */
bool pl_cpu_tq1_compact(void) {
    static int cached = -1;
    if (cached < 0) cached = pl_cpu_has_vbmi() && pl_cpu_switch("PL_CPU_TQ1X");
    return cached;
}

bool pl_cpu_has_vbmi(void) {
#if PL_CPU_HAVE_AVX2_BUILD && defined(__GNUC__)
    static int cached = -1;
    if (cached < 0) cached = __builtin_cpu_supports("avx512vbmi") ? 1 : 0;
    return cached;
#else
    return false;
#endif
}
