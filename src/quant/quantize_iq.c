/*
 * Quantizers of the ladder's bottom rungs: IQ2_XXS, IQ2_XS, IQ1_S, IQ1_M
 * (codebook types, driven by an importance matrix) and TQ2_0 / TQ1_0
 * (ternary). Each follows GGML's quantize_row_<type>_impl step by step, with
 * the float operations in the same order, so the bytes equal llama-quantize's
 * for the same input and imatrix.
 *
 * The codebook types quantize groups of 8 weights to one entry of a grid of
 * 8-vectors whose coordinates take 3 values (magnitudes 1, 3, 5 for IQ2; -1,
 * 0, +1 plus a shared +-1/8 shift for IQ1). A search first picks, per
 * coordinate, the nearest of the 3 levels; when that 8-vector is not in the
 * grid, the closest grid entries ("neighbours": every entry at the smallest
 * few squared distances) are tried with the actual weighted error. The
 * neighbour lists are built once per grid (see grid_init) exactly as GGML's
 * iq2xs_init_impl orders them, because the search keeps the first of equally
 * good entries.
 */
#include "quant/quantize_rows.h"
#include "quant/blocks.h"
#include "quant/ggml_tables.h"
#include "core/fp16.h"
#include <float.h>
#include <math.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#define GROUP_MAX_EPS 1e-15f
#define GROUP_MAX_EPS_IQ1_M 1e-7f
#define GROUP_MAX_EPS_IQ1_S 1e-12f
#define IQ1S_BLOCK_SIZE 32
#define IQ1M_BLOCK_SIZE 16
#define KMAP_SIZE 43692   /* 2-bit codes of 8 levels in 0..2: max index 0xAAAA = 43690 */

static inline int imin(int a, int b) { return a < b ? a : b; }
static inline int imax(int a, int b) { return a > b ? a : b; }

static inline int nearest_int(float x) {
    const float v = x + 12582912.f;
    int32_t i;
    memcpy(&i, &v, sizeof i);
    return (i & 0x007fffff) - 0x00400000;
}

/* ---- grids, maps and neighbour lists --------------------------------------------*/

/* One grid as the quantizers see it: entry k has 8 coordinates 2 l + 1 with l
 * in 0..2 (l indexes the 3 levels); map[u] for the 2-bit code u of 8 levels is
 * the entry with exactly those levels, or -(o + 1) where neigh[o] is the count
 * of neighbour entries that follow it. */
typedef struct iq_grid {
    int n;
    int8_t (*pos)[8];
    int *map;
    uint16_t *neigh;
    bool ok;
} iq_grid;

enum { GRID_IQ2XXS, GRID_IQ2XS, GRID_IQ1S, GRID_COUNT };
static iq_grid g_grids[GRID_COUNT];
static pthread_once_t g_once[GRID_COUNT] = {PTHREAD_ONCE_INIT, PTHREAD_ONCE_INIT, PTHREAD_ONCE_INIT};

/* The level index (0..2) of byte b of a codebook entry: IQ2 grids store the
 * magnitudes 8, 25, 43; the IQ1 grid stores -1, 0, +1. */
static int level_of(int g, uint8_t b) {
    if (g == GRID_IQ1S) return (int)(int8_t)b + 1;
    return b == 8 ? 0 : b == 25 ? 1 : 2;
}

static void grid_init(int g) {
    iq_grid *G = &g_grids[g];
    const uint64_t *tab = g == GRID_IQ2XXS ? pl_iq2xxs_grid : g == GRID_IQ2XS ? pl_iq2xs_grid : pl_iq1s_grid;
    const int n = g == GRID_IQ2XXS ? 256 : g == GRID_IQ2XS ? 512 : PL_NGRID_IQ1S;
    /* How many distinct distances the neighbour lists span (GGML's nwant). */
    const int nwant = g == GRID_IQ1S ? 3 : 2;
    G->n = n;
    G->pos = malloc((size_t)n * sizeof *G->pos);
    G->map = malloc(KMAP_SIZE * sizeof *G->map);
    int *d2 = malloc((size_t)n * sizeof *d2);
    /* 3^8 codes; each off-grid one stores a count and at most n entries. In
     * practice the lists are short; grow as needed. */
    size_t cap = 1 << 16, used = 0;
    G->neigh = malloc(cap * sizeof *G->neigh);
    if (!G->pos || !G->map || !d2 || !G->neigh) goto fail;
    for (int i = 0; i < KMAP_SIZE; i++) G->map[i] = -1;
    for (int k = 0; k < n; k++) {
        int u = 0;
        for (int i = 0; i < 8; i++) {
            const int l = level_of(g, (uint8_t)(tab[k] >> (8 * i)));
            G->pos[k][i] = (int8_t)(2 * l + 1);
            u |= l << (2 * i);
        }
        G->map[u] = k;
    }
    /* Neighbours of every code whose 8 levels are all in 0..2 (only those can
     * be looked up) and which is not itself in the grid: the entries at the
     * nwant smallest squared distances, in order of (distance, index) -- the
     * order GGML's qsort of (d2, j) pairs produces. */
    for (int u = 0; u < KMAP_SIZE; u++) {
        if (G->map[u] >= 0) continue;
        int8_t pos[8];
        bool valid = true;
        for (int i = 0; i < 8; i++) {
            const int l = (u >> (2 * i)) & 3;
            if (l == 3) valid = false;
            pos[i] = (int8_t)(2 * l + 1);
        }
        if (!valid) continue;
        int levels[3], nlev = 0;
        for (int j = 0; j < n; j++) {
            int d = 0;
            for (int i = 0; i < 8; i++) d += (G->pos[j][i] - pos[i]) * (G->pos[j][i] - pos[i]);
            d2[j] = d;
            /* keep the nwant smallest distinct distances, ascending */
            int p = nlev;
            bool dup = false;
            for (int q = 0; q < nlev; q++) {
                if (levels[q] == d) { dup = true; break; }
                if (levels[q] > d) { p = q; break; }
            }
            if (dup || p >= nwant) continue;
            for (int q = (nlev < nwant ? nlev : nwant - 1); q > p; q--) levels[q] = levels[q - 1];
            levels[p] = d;
            if (nlev < nwant) nlev++;
        }
        size_t count = 0;
        for (int j = 0; j < n; j++)
            for (int q = 0; q < nlev; q++)
                if (d2[j] == levels[q]) count++;
        if (used + count + 1 > cap) {
            while (used + count + 1 > cap) cap *= 2;
            uint16_t *nn = realloc(G->neigh, cap * sizeof *nn);
            if (!nn) goto fail;
            G->neigh = nn;
        }
        G->map[u] = -(int)(used + 1);
        G->neigh[used++] = (uint16_t)count;
        for (int q = 0; q < nlev; q++)
            for (int j = 0; j < n; j++)
                if (d2[j] == levels[q]) G->neigh[used++] = (uint16_t)j;
    }
    free(d2);
    G->ok = true;
    return;
fail:
    free(d2);
    G->ok = false;
}

static void init_iq2xxs(void) { grid_init(GRID_IQ2XXS); }
static void init_iq2xs(void) { grid_init(GRID_IQ2XS); }
static void init_iq1s(void) { grid_init(GRID_IQ1S); }

/* The grid (built on first use, thread-safely); NULL if out of memory. */
static const iq_grid *get_grid(int g) {
    static void (*const inits[GRID_COUNT])(void) = {init_iq2xxs, init_iq2xs, init_iq1s};
    pthread_once(&g_once[g], inits[g]);
    return g_grids[g].ok ? &g_grids[g] : NULL;
}

static inline const uint16_t *neighbours_of(const iq_grid *G, int u) { return G->neigh + (-G->map[u] - 1); }

/* The neighbour minimizing the weighted squared error at this scale (the
 * first on ties); writes its levels into L. */
static int iq2_find_best_neighbour(const iq_grid *G, const uint16_t *nb, const float *xval, const float *weight,
                                   float scale, int8_t *L) {
    const int num = nb[0];
    float best_d2 = FLT_MAX;
    int grid_index = nb[1];
    for (int j = 1; j <= num; j++) {
        const int8_t *pg = G->pos[nb[j]];
        float d2 = 0;
        for (int i = 0; i < 8; i++) {
            const float q = pg[i];
            const float diff = scale * q - xval[i];
            d2 += weight[i] * diff * diff;
        }
        if (d2 < best_d2) {
            best_d2 = d2;
            grid_index = nb[j];
        }
    }
    const int8_t *pg = G->pos[grid_index];
    for (int i = 0; i < 8; i++) L[i] = (int8_t)((pg[i] - 1) / 2);
    return grid_index;
}

/* Weighted fit of non-negative values to levels 0..nmax (make_qp_quants, as
 * in quantize_kq.c; a private copy keeps the two files independent). */
static float make_qp_quants(int n, int nmax, const float *x, uint8_t *L, const float *quant_weights) {
    float max = 0;
    for (int i = 0; i < n; i++) max = max > x[i] ? max : x[i];
    if (max < GROUP_MAX_EPS) {
        for (int i = 0; i < n; i++) L[i] = 0;
        return 0.f;
    }
    float iscale = nmax / max;
    for (int i = 0; i < n; i++) L[i] = (uint8_t)nearest_int(iscale * x[i]);
    float scale = 1 / iscale;
    float best_mse = 0;
    for (int i = 0; i < n; i++) {
        const float diff = x[i] - scale * L[i];
        best_mse += quant_weights[i] * diff * diff;
    }
    for (int is = -4; is <= 4; is++) {
        if (is == 0) continue;
        const float iscale_is = (0.1f * is + nmax) / max;
        const float scale_is = 1 / iscale_is;
        float mse = 0;
        for (int i = 0; i < n; i++) {
            const int l = imin(nmax, nearest_int(iscale_is * x[i]));
            const float diff = x[i] - scale_is * l;
            mse += quant_weights[i] * diff * diff;
        }
        if (mse < best_mse) {
            best_mse = mse;
            iscale = iscale_is;
        }
    }
    float sumlx = 0, suml2 = 0;
    for (int i = 0; i < n; i++) {
        const int l = imin(nmax, nearest_int(iscale * x[i]));
        L[i] = (uint8_t)l;
        const float w = quant_weights[i];
        sumlx += w * x[i] * l;
        suml2 += w * l * l;
    }
    for (int itry = 0; itry < 5; itry++) {
        int n_changed = 0;
        for (int i = 0; i < n; i++) {
            const float w = quant_weights[i];
            float slx = sumlx - w * x[i] * L[i];
            float sl2 = suml2 - w * L[i] * L[i];
            if (slx > 0 && sl2 > 0) {
                const int new_l = imin(nmax, nearest_int(x[i] * sl2 / slx));
                if (new_l != L[i]) {
                    slx += w * x[i] * new_l;
                    sl2 += w * new_l * new_l;
                    if (slx * slx * suml2 > sumlx * sumlx * sl2) {
                        L[i] = (uint8_t)new_l;
                        sumlx = slx;
                        suml2 = sl2;
                        n_changed++;
                    }
                }
            }
        }
        if (!n_changed) break;
    }
    return suml2 > 0.0f ? sumlx / suml2 : 0.0f;
}

/* Makes each run of 8 non-negative (xval = |x|) with an even number of sign
 * flips -- the 7 stored sign bits imply the 8th by parity -- by giving back
 * the sign of the least important element (its xval becomes negative).
 * Returns the 7 sign bits. */
static uint8_t fold_signs(const float *xb, const float *weight, float *xval) {
    int nflip = 0;
    uint8_t s = 0;
    for (int i = 0; i < 8; i++) {
        if (xb[i] >= 0) xval[i] = xb[i];
        else {
            xval[i] = -xb[i];
            nflip++;
            s = (uint8_t)(s | (1 << i));
        }
    }
    if (nflip % 2) {
        int imn = 0;
        float mn = weight[imn] * xb[imn] * xb[imn];
        for (int i = 1; i < 8; i++) {
            const float ax = weight[i] * xb[i] * xb[i];
            if (ax < mn) {
                mn = ax;
                imn = i;
            }
        }
        xval[imn] = -xval[imn];
        s = (uint8_t)(s ^ (1 << imn));
    }
    return (uint8_t)(s & 127);
}

static void put_u32le(uint8_t *p, uint32_t v) {
    p[0] = (uint8_t)v; p[1] = (uint8_t)(v >> 8); p[2] = (uint8_t)(v >> 16); p[3] = (uint8_t)(v >> 24);
}
static void put_u16le(uint8_t *p, uint16_t v) { p[0] = (uint8_t)v; p[1] = (uint8_t)(v >> 8); }

/* ---- IQ2_XXS: 8 groups of 32, one 4-bit scale per group --------------------------*/

void pl_quantize_row_iq2_xxs_w(const float *x, void *vy, int64_t n, const float *quant_weights) {
    const iq_grid *G = get_grid(GRID_IQ2XXS);
    block_iq2_xxs *y = vy;
    const int kMaxQ = 3;
    float scales[QK_K / 32], weight[32], xval[32], waux[32];
    int8_t L[32], Laux[32];
    uint8_t block_signs[4];
    uint32_t q2[2 * (QK_K / 32)];
    for (int64_t ibl = 0; ibl < n / QK_K; ibl++) {
        memset(&y[ibl], 0, sizeof y[ibl]);
        if (!G) continue; /* out of memory at init: a zero block decodes to zeros */
        memset(q2, 0, sizeof q2);
        float max_scale = 0;
        const float *xbl = x + QK_K * ibl;
        float sumx2 = 0;
        for (int i = 0; i < QK_K; i++) sumx2 += xbl[i] * xbl[i];
        const float sigma2 = sumx2 / QK_K;
        for (int ib = 0; ib < QK_K / 32; ib++) {
            const float *xb = xbl + 32 * ib;
            const float *qw = quant_weights + QK_K * ibl + 32 * ib;
            for (int i = 0; i < 32; i++) weight[i] = qw[i] * sqrtf(sigma2 + xb[i] * xb[i]);
            for (int i = 0; i < 32; i++) waux[i] = sqrtf(weight[i]);
            for (int k = 0; k < 4; k++) block_signs[k] = fold_signs(xb + 8 * k, weight + 8 * k, xval + 8 * k);
            float max = xval[0];
            for (int i = 1; i < 32; i++) max = max > xval[i] ? max : xval[i];
            if (max < GROUP_MAX_EPS) {
                scales[ib] = 0;
                continue;
            }
            float scale = make_qp_quants(32, kMaxQ + 1, xval, (uint8_t *)L, weight);
            const float eff_max = scale * kMaxQ;
            if (eff_max <= 0) {
                scales[ib] = 0;
                continue;
            }
            float best = 0;
            for (int is = -6; is <= 6; is++) {
                const float id = (2 * kMaxQ - 1 + is * 0.1f) / eff_max;
                const float this_scale = 1 / id;
                for (int k = 0; k < 4; k++) {
                    int u = 0;
                    for (int i = 0; i < 8; i++) {
                        const int l = nearest_int(0.5f * (id * xval[8 * k + i] - 1));
                        Laux[8 * k + i] = (int8_t)imax(0, imin(kMaxQ - 1, l));
                        u |= Laux[8 * k + i] << (2 * i);
                    }
                    if (G->map[u] < 0)
                        iq2_find_best_neighbour(G, neighbours_of(G, u), xval + 8 * k, waux + 8 * k, this_scale, Laux + 8 * k);
                }
                float sumqx = 0, sumq2 = 0;
                for (int i = 0; i < 32; i++) {
                    const float w = weight[i];
                    const float q = 2 * Laux[i] + 1;
                    sumqx += w * xval[i] * q;
                    sumq2 += w * q * q;
                }
                if (sumq2 > 0 && sumqx * sumqx > best * sumq2) {
                    scale = sumqx / sumq2;
                    best = scale * sumqx;
                    memcpy(L, Laux, 32);
                }
            }
            if (scale > 0) {
                const float id = 1 / scale;
                for (int k = 0; k < 4; k++) {
                    int u = 0;
                    for (int i = 0; i < 8; i++) {
                        int l = nearest_int(0.5f * (id * xval[8 * k + i] - 1));
                        l = imax(0, imin(kMaxQ - 1, l));
                        u |= l << (2 * i);
                    }
                    int gi = G->map[u];
                    if (gi < 0) gi = iq2_find_best_neighbour(G, neighbours_of(G, u), xval + 8 * k, waux + 8 * k, scale, L + 8 * k);
                    for (int i = 0; i < 8; i++) L[8 * k + i] = (int8_t)((G->pos[gi][i] - 1) / 2);
                }
                float sumqx = 0, sumq2 = 0;
                for (int i = 0; i < 32; i++) {
                    const float w = weight[i];
                    const float q = 2 * L[i] + 1;
                    sumqx += w * xval[i] * q;
                    sumq2 += w * q * q;
                }
                if (sumq2 > 0) scale = sumqx / sumq2;
            }
            if (scale < 0) {
                /* GGML: cannot happen, but keep the scale non-negative */
                scale = -scale;
                for (int k = 0; k < 4; k++) block_signs[k] = (uint8_t)(~block_signs[k] & 127);
            }
            for (int k = 0; k < 4; k++) {
                int u = 0;
                for (int i = 0; i < 8; i++) u |= L[8 * k + i] << (2 * i);
                const int gi = G->map[u] >= 0 ? G->map[u] : 0; /* always on the grid by now */
                q2[2 * ib + 0] |= (uint32_t)gi << (8 * k);
                q2[2 * ib + 1] |= (uint32_t)block_signs[k] << (7 * k);
            }
            scales[ib] = scale;
            max_scale = max_scale > scale ? max_scale : scale;
        }
        if (!max_scale) continue;
        const float d = max_scale / 31;
        y[ibl].d = pl_f32_to_f16(d);
        const float id = 1 / d;
        for (int ib = 0; ib < QK_K / 32; ib++) {
            int l = nearest_int(0.5f * (id * scales[ib] - 1));
            l = imax(0, imin(15, l));
            q2[2 * ib + 1] |= (uint32_t)l << 28;
        }
        uint8_t *qs = (uint8_t *)y[ibl].qs;
        for (int k = 0; k < 2 * (QK_K / 32); k++) put_u32le(qs + 4 * k, q2[k]);
    }
}

/* ---- IQ2_XS: 16 groups of 16, one 4-bit scale per group --------------------------*/

void pl_quantize_row_iq2_xs_w(const float *x, void *vy, int64_t n, const float *quant_weights) {
    const iq_grid *G = get_grid(GRID_IQ2XS);
    block_iq2_xs *y = vy;
    const int kMaxQ = 3;
    float scales[QK_K / 16], weight[16], xval[16], waux[16];
    int8_t L[16], Laux[16];
    bool is_on_grid[2], is_on_grid_aux[2];
    uint8_t block_signs[2];
    uint16_t q2[2 * (QK_K / 16)];
    for (int64_t ibl = 0; ibl < n / QK_K; ibl++) {
        memset(&y[ibl], 0, sizeof y[ibl]);
        if (!G) continue;
        memset(q2, 0, sizeof q2);
        float max_scale = 0;
        const float *xbl = x + QK_K * ibl;
        float sumx2 = 0;
        for (int i = 0; i < QK_K; i++) sumx2 += xbl[i] * xbl[i];
        const float sigma2 = sumx2 / QK_K;
        for (int ib = 0; ib < QK_K / 16; ib++) {
            const float *xb = xbl + 16 * ib;
            const float *qw = quant_weights + QK_K * ibl + 16 * ib;
            for (int i = 0; i < 16; i++) weight[i] = qw[i] * sqrtf(sigma2 + xb[i] * xb[i]);
            for (int i = 0; i < 16; i++) waux[i] = sqrtf(weight[i]);
            for (int k = 0; k < 2; k++) block_signs[k] = fold_signs(xb + 8 * k, weight + 8 * k, xval + 8 * k);
            float max = xval[0];
            for (int i = 1; i < 16; i++) max = max > xval[i] ? max : xval[i];
            memset(L, 0, 16);
            if (max < GROUP_MAX_EPS) {
                scales[ib] = 0;
                continue;
            }
            float best = 0;
            float scale = max / (2 * kMaxQ - 1);
            is_on_grid[0] = is_on_grid[1] = true;
            for (int is = -9; is <= 9; is++) {
                const float id = (2 * kMaxQ - 1 + is * 0.1f) / max;
                const float this_scale = 1 / id;
                for (int k = 0; k < 2; k++) {
                    int u = 0;
                    for (int i = 0; i < 8; i++) {
                        const int l = nearest_int(0.5f * (id * xval[8 * k + i] - 1));
                        Laux[8 * k + i] = (int8_t)imax(0, imin(kMaxQ - 1, l));
                        u |= Laux[8 * k + i] << (2 * i);
                    }
                    is_on_grid_aux[k] = true;
                    if (G->map[u] < 0) {
                        is_on_grid_aux[k] = false;
                        iq2_find_best_neighbour(G, neighbours_of(G, u), xval + 8 * k, waux + 8 * k, this_scale, Laux + 8 * k);
                    }
                }
                float sumqx = 0, sumq2 = 0;
                for (int i = 0; i < 16; i++) {
                    const float w = weight[i];
                    const float q = 2 * Laux[i] + 1;
                    sumqx += w * xval[i] * q;
                    sumq2 += w * q * q;
                }
                if (sumq2 > 0 && sumqx * sumqx > best * sumq2) {
                    scale = sumqx / sumq2;
                    best = scale * sumqx;
                    memcpy(L, Laux, 16);
                    is_on_grid[0] = is_on_grid_aux[0];
                    is_on_grid[1] = is_on_grid_aux[1];
                }
            }
            int n_not_ongrid = !is_on_grid[0] + !is_on_grid[1];
            if (n_not_ongrid > 0 && scale > 0) {
                const float id = 1 / scale;
                for (int k = 0; k < 2; k++) {
                    if (is_on_grid[k]) continue;
                    int u = 0;
                    for (int i = 0; i < 8; i++) {
                        int l = nearest_int(0.5f * (id * xval[8 * k + i] - 1));
                        l = imax(0, imin(kMaxQ - 1, l));
                        u |= l << (2 * i);
                        L[8 * k + i] = (int8_t)l;
                    }
                    if (G->map[u] < 0)
                        iq2_find_best_neighbour(G, neighbours_of(G, u), xval + 8 * k, waux + 8 * k, scale, L + 8 * k);
                }
                float sumqx = 0, sumq2 = 0;
                for (int i = 0; i < 16; i++) {
                    const float w = weight[i];
                    const float q = 2 * L[i] + 1;
                    sumqx += w * xval[i] * q;
                    sumq2 += w * q * q;
                }
                if (sumq2 > 0) scale = sumqx / sumq2;
            }
            if (scale < 0) {
                scale = -scale;
                for (int k = 0; k < 2; k++) block_signs[k] = (uint8_t)(~block_signs[k] & 127);
            }
            for (int k = 0; k < 2; k++) {
                int u = 0;
                for (int i = 0; i < 8; i++) u |= L[8 * k + i] << (2 * i);
                const int gi = G->map[u] >= 0 ? G->map[u] : 0;
                q2[2 * ib + k] = (uint16_t)(gi | (block_signs[k] << 9));
            }
            scales[ib] = scale;
            max_scale = max_scale > scale ? max_scale : scale;
        }
        if (!max_scale) continue;
        const float d = max_scale / 31;
        y[ibl].d = pl_f32_to_f16(d);
        const float id = 1 / d;
        for (int ib = 0; ib < QK_K / 16; ib++) {
            int l = nearest_int(0.5f * (id * scales[ib] - 1));
            l = imax(0, imin(15, l));
            if (ib % 2 == 0) y[ibl].scales[ib / 2] = (uint8_t)l;
            else y[ibl].scales[ib / 2] = (uint8_t)(y[ibl].scales[ib / 2] | (l << 4));
        }
        uint8_t *qs = (uint8_t *)y[ibl].qs;
        for (int k = 0; k < 2 * (QK_K / 16); k++) put_u16le(qs + 2 * k, q2[k]);
    }
}

/* ---- IQ1_S / IQ1_M ------------------------------------------------------------------*/

/* (value, original index) pairs sorted by value with the C library's qsort,
 * laid out as GGML's float pairs so that the same qsort orders ties the same
 * way. */
typedef struct iq1_pair {
    float x;
    int32_t i;
} iq1_pair;

static int iq1_sort_helper(const void *left, const void *right) {
    const float l = ((const iq1_pair *)left)->x, r = ((const iq1_pair *)right)->x;
    return l < r ? -1 : l > r ? 1 : 0;
}

/* The neighbour minimizing the weighted squared error when level l maps to
 * xg[l] (the IQ1 levels with their shift); writes its levels into L. */
static int iq1_find_best_neighbour2(const iq_grid *G, const uint16_t *nb, const float *xval, const float *weight,
                                    float scale, const float *xg, int8_t *L) {
    const int num = nb[0];
    float best_score = FLT_MAX;
    int grid_index = -1;
    for (int j = 1; j <= num; j++) {
        const int8_t *pg = G->pos[nb[j]];
        float d2 = 0;
        for (int i = 0; i < 8; i++) {
            const float q = xg[(pg[i] - 1) / 2];
            const float w = weight[i];
            const float diff = scale * q - xval[i];
            d2 += w * diff * diff;
        }
        if (d2 < best_score) {
            best_score = d2;
            grid_index = nb[j];
        }
    }
    if (grid_index < 0) grid_index = nb[1]; /* only for NaN input */
    const int8_t *pg = G->pos[grid_index];
    for (int i = 0; i < 8; i++) L[i] = (int8_t)((pg[i] - 1) / 2);
    return grid_index;
}

void pl_quantize_row_iq1_s_w(const float *x, void *vy, int64_t n, const float *quant_weights) {
    const iq_grid *G = get_grid(GRID_IQ1S);
    block_iq1_s *y = vy;
    enum { bs = IQ1S_BLOCK_SIZE };
    const float x_p[3] = {-1 + PL_IQ1S_DELTA, PL_IQ1S_DELTA, 1 + PL_IQ1S_DELTA};
    const float x_m[3] = {-1 - PL_IQ1S_DELTA, -PL_IQ1S_DELTA, 1 - PL_IQ1S_DELTA};
    float scales[QK_K / bs], weight[bs], sumx[bs + 1], sumw[bs + 1];
    iq1_pair pairs[bs];
    int8_t L[bs], shifts[QK_K / bs];
    uint16_t index[bs / 8], qh[QK_K / bs];
    for (int64_t ibl = 0; ibl < n / QK_K; ibl++) {
        memset(&y[ibl], 0, sizeof y[ibl]);
        memset(qh, 0, sizeof qh);
        if (!G) continue;
        float max_scale = 0;
        const float *xbl = x + QK_K * ibl;
        float sumx2 = 0;
        for (int i = 0; i < QK_K; i++) sumx2 += xbl[i] * xbl[i];
        const float sigma2 = 2 * sumx2 / QK_K;
        for (int ib = 0; ib < QK_K / bs; ib++) {
            const float *xb = xbl + bs * ib;
            const float *qw = quant_weights + QK_K * ibl + bs * ib;
            for (int i = 0; i < bs; i++) weight[i] = qw[i] * sqrtf(sigma2 + xb[i] * xb[i]);
            float max = fabsf(xb[0]);
            for (int i = 1; i < bs; i++) max = max > fabsf(xb[i]) ? max : fabsf(xb[i]);
            if (max < GROUP_MAX_EPS_IQ1_S) {
                scales[ib] = 0;
                shifts[ib] = 1;
                continue;
            }
            /* With 3 levels the weighted least-squares optimum is found
             * exactly: sort, then try every pair of split points (i1, i2)
             * using prefix sums of w x and w. */
            for (int j = 0; j < bs; j++) pairs[j] = (iq1_pair){xb[j], j};
            qsort(pairs, bs, sizeof pairs[0], iq1_sort_helper);
            sumx[0] = sumw[0] = 0;
            for (int j = 0; j < bs; j++) {
                const int i = pairs[j].i;
                sumx[j + 1] = sumx[j] + weight[i] * xb[i];
                sumw[j + 1] = sumw[j] + weight[i];
            }
            float best_score = -FLT_MAX, scale = max;
            int besti1 = -1, besti2 = -1, best_shift = 0;
            for (int i1 = 0; i1 <= bs; i1++) {
                for (int i2 = i1; i2 <= bs; i2++) {
                    float sumqx = (sumx[i1] - sumx[0]) * x_p[0] + (sumx[i2] - sumx[i1]) * x_p[1] + (sumx[bs] - sumx[i2]) * x_p[2];
                    float sumq2 = (sumw[i1] - sumw[0]) * x_p[0] * x_p[0] + (sumw[i2] - sumw[i1]) * x_p[1] * x_p[1] +
                                  (sumw[bs] - sumw[i2]) * x_p[2] * x_p[2];
                    if (sumq2 > 0 && sumqx * sumqx > best_score * sumq2) {
                        scale = sumqx / sumq2;
                        best_score = scale * sumqx;
                        besti1 = i1; besti2 = i2; best_shift = 1;
                    }
                    sumqx = (sumx[i1] - sumx[0]) * x_m[0] + (sumx[i2] - sumx[i1]) * x_m[1] + (sumx[bs] - sumx[i2]) * x_m[2];
                    sumq2 = (sumw[i1] - sumw[0]) * x_m[0] * x_m[0] + (sumw[i2] - sumw[i1]) * x_m[1] * x_m[1] +
                            (sumw[bs] - sumw[i2]) * x_m[2] * x_m[2];
                    if (sumq2 > 0 && sumqx * sumqx > best_score * sumq2) {
                        scale = sumqx / sumq2;
                        best_score = scale * sumqx;
                        besti1 = i1; besti2 = i2; best_shift = -1;
                    }
                }
            }
            if (besti1 < 0 || besti2 < 0 || best_shift == 0) {
                scales[ib] = 0;
                shifts[ib] = 1;
                continue;
            }
            for (int j = 0; j < besti1; j++) L[pairs[j].i] = 0;
            for (int j = besti1; j < besti2; j++) L[pairs[j].i] = 1;
            for (int j = besti2; j < bs; j++) L[pairs[j].i] = 2;
            if (scale < 0) {
                for (int j = 0; j < bs; j++) L[j] = (int8_t)(2 - L[j]);
                scale = -scale;
                best_shift = -best_shift;
            }
            bool all_on_grid = true;
            const float *xx = best_shift == 1 ? x_p : x_m;
            for (int k = 0; k < bs / 8; k++) {
                int u = 0;
                for (int j = 0; j < 8; j++) u |= L[8 * k + j] << (2 * j);
                int gi = G->map[u];
                if (gi < 0) {
                    all_on_grid = false;
                    gi = iq1_find_best_neighbour2(G, neighbours_of(G, u), xb + 8 * k, weight + 8 * k, scale, xx, L + 8 * k);
                }
                index[k] = (uint16_t)gi;
            }
            if (!all_on_grid) {
                float sumqx = 0, sumq2 = 0;
                for (int k = 0; k < bs / 8; k++) {
                    const int8_t *pg = G->pos[index[k]];
                    for (int j = 0; j < 8; j++) {
                        const float w = weight[8 * k + j];
                        const float q = xx[(pg[j] - 1) / 2];
                        sumqx += w * q * xb[8 * k + j];
                        sumq2 += w * q * q;
                    }
                }
                if (sumqx > 0 && sumq2 > 0) scale = sumqx / sumq2;
            }
            uint16_t h = 0;
            for (int k = 0; k < bs / 8; k++) {
                y[ibl].qs[(bs / 8) * ib + k] = (uint8_t)(index[k] & 255);
                h = (uint16_t)(h | ((index[k] >> 8) << (3 * k)));
            }
            qh[ib] = h;
            scales[ib] = scale;
            shifts[ib] = (int8_t)best_shift;
            max_scale = max_scale > scale ? max_scale : scale;
        }
        if (max_scale) {
            const float d = max_scale / 15;
            y[ibl].d = pl_f32_to_f16(d * 1.125f); /* GGML's fudge factor */
            const float id = 1 / d;
            for (int ib = 0; ib < QK_K / bs; ib++) {
                int l = nearest_int(0.5f * (id * scales[ib] - 1));
                l = imax(0, imin(7, l));
                if (shifts[ib] == -1) l |= 8;
                qh[ib] = (uint16_t)(qh[ib] | (l << 12));
            }
        }
        for (int ib = 0; ib < QK_K / bs; ib++) put_u16le((uint8_t *)&y[ibl].qh[ib], qh[ib]);
    }
}

void pl_quantize_row_iq1_m_w(const float *x, void *vy, int64_t n, const float *quant_weights) {
    const iq_grid *G = get_grid(GRID_IQ1S);
    block_iq1_m *y = vy;
    enum { bs = IQ1M_BLOCK_SIZE };
    const float x_p[3] = {-1 + PL_IQ1M_DELTA, PL_IQ1M_DELTA, 1 + PL_IQ1M_DELTA};
    const float x_m[3] = {-1 - PL_IQ1M_DELTA, -PL_IQ1M_DELTA, 1 - PL_IQ1M_DELTA};
    const uint8_t masks[4] = {0x00, 0x80, 0x08, 0x88};
    float scales[QK_K / bs], weight[bs], sumqx[4], sumq2[4];
    iq1_pair pairs[bs];
    int8_t L[bs], shifts[QK_K / bs];
    uint16_t index[bs / 8];
    const float *xx;
    for (int64_t ibl = 0; ibl < n / QK_K; ibl++) {
        memset(&y[ibl], 0, sizeof y[ibl]);
        if (!G) continue;
        float max_scale = 0;
        const float *xbl = x + QK_K * ibl;
        float sumx2 = 0;
        for (int i = 0; i < QK_K; i++) sumx2 += xbl[i] * xbl[i];
        const float sigma2 = 2 * sumx2 / QK_K;
        for (int ib = 0; ib < QK_K / bs; ib++) {
            const float *xb = xbl + bs * ib;
            if (quant_weights) {
                const float *qw = quant_weights + QK_K * ibl + bs * ib;
                for (int i = 0; i < bs; i++) weight[i] = qw[i] * sqrtf(sigma2 + xb[i] * xb[i]);
            } else {
                for (int i = 0; i < bs; i++) weight[i] = xb[i] * xb[i];
            }
            float max = fabsf(xb[0]);
            for (int i = 1; i < bs; i++) max = max > fabsf(xb[i]) ? max : fabsf(xb[i]);
            if (max < GROUP_MAX_EPS_IQ1_M) {
                scales[ib] = 0;
                shifts[ib] = 0;
                continue;
            }
            for (int j = 0; j < bs; j++) pairs[j] = (iq1_pair){xb[j], j};
            qsort(pairs, bs, sizeof pairs[0], iq1_sort_helper);
            float best_score = -FLT_MAX, scale = max;
            int besti1 = -1, besti2 = -1, best_k = -1;
            /* k: shifts of the two runs of 8 -- 0: +,+  1: +,-  2: -,+  3: -,- */
            for (int i1 = 0; i1 <= bs; i1++) {
                for (int i2 = i1; i2 <= bs; i2++) {
                    memset(sumqx, 0, sizeof sumqx);
                    memset(sumq2, 0, sizeof sumq2);
                    for (int j = 0; j < bs; j++) {
                        const int lv = j < i1 ? 0 : j < i2 ? 1 : 2;
                        const int i = pairs[j].i;
                        const float p = x_p[lv], m = x_m[lv];
                        if (i < bs / 2) {
                            sumqx[0] += weight[i] * p * xb[i];
                            sumqx[1] += weight[i] * p * xb[i];
                            sumqx[2] += weight[i] * m * xb[i];
                            sumqx[3] += weight[i] * m * xb[i];
                            sumq2[0] += weight[i] * p * p;
                            sumq2[1] += weight[i] * p * p;
                            sumq2[2] += weight[i] * m * m;
                            sumq2[3] += weight[i] * m * m;
                        } else {
                            sumqx[0] += weight[i] * p * xb[i];
                            sumqx[2] += weight[i] * p * xb[i];
                            sumqx[1] += weight[i] * m * xb[i];
                            sumqx[3] += weight[i] * m * xb[i];
                            sumq2[0] += weight[i] * p * p;
                            sumq2[2] += weight[i] * p * p;
                            sumq2[1] += weight[i] * m * m;
                            sumq2[3] += weight[i] * m * m;
                        }
                    }
                    for (int k = 0; k < 4; k++) {
                        if (sumq2[k] > 0 && sumqx[k] * sumqx[k] > best_score * sumq2[k]) {
                            scale = sumqx[k] / sumq2[k];
                            best_score = scale * sumqx[k];
                            besti1 = i1; besti2 = i2; best_k = k;
                        }
                    }
                }
            }
            if (besti1 < 0 || besti2 < 0 || best_k < 0) {
                scales[ib] = 0;
                shifts[ib] = 0;
                continue;
            }
            for (int j = 0; j < besti1; j++) L[pairs[j].i] = 0;
            for (int j = besti1; j < besti2; j++) L[pairs[j].i] = 1;
            for (int j = besti2; j < bs; j++) L[pairs[j].i] = 2;
            if (scale < 0) {
                for (int j = 0; j < bs; j++) L[j] = (int8_t)(2 - L[j]);
                scale = -scale;
                best_k = 3 - best_k;
            }
            bool all_on_grid = true;
            for (int k = 0; k < bs / 8; k++) {
                xx = (k == 0 ? best_k < 2 : best_k % 2 == 0) ? x_p : x_m;
                int u = 0;
                for (int j = 0; j < 8; j++) u |= L[8 * k + j] << (2 * j);
                int gi = G->map[u];
                if (gi < 0) {
                    all_on_grid = false;
                    gi = iq1_find_best_neighbour2(G, neighbours_of(G, u), xb + 8 * k, weight + 8 * k, scale, xx, L + 8 * k);
                }
                index[k] = (uint16_t)gi;
            }
            if (!all_on_grid) {
                float sqx = 0, sq2 = 0;
                for (int k = 0; k < bs / 8; k++) {
                    xx = (k == 0 ? best_k < 2 : best_k % 2 == 0) ? x_p : x_m;
                    const int8_t *pg = G->pos[index[k]];
                    for (int j = 0; j < 8; j++) {
                        const float w = weight[8 * k + j];
                        const float q = xx[(pg[j] - 1) / 2];
                        sqx += w * q * xb[8 * k + j];
                        sq2 += w * q * q;
                    }
                }
                if (sqx > 0 && sq2 > 0) scale = sqx / sq2;
            }
            y[ibl].qs[2 * ib + 0] = (uint8_t)(index[0] & 255);
            y[ibl].qs[2 * ib + 1] = (uint8_t)(index[1] & 255);
            y[ibl].qh[ib] = (uint8_t)((index[0] >> 8) | ((index[1] >> 8) << 4));
            scales[ib] = scale;
            shifts[ib] = (int8_t)best_k;
            max_scale = max_scale > scale ? max_scale : scale;
        }
        if (!max_scale) continue;
        uint16_t sc[4] = {0, 0, 0, 0};
        float d = max_scale / 15;
        const float id = 1 / d;
        float sumqx_f = 0, sumq2_f = 0;
        /* The super-block scale is refitted by least squares over the final
         * levels, sub-block scales and shifts. */
        for (int ib = 0; ib < QK_K / bs; ib++) {
            int l = nearest_int(0.5f * (id * scales[ib] - 1));
            l = imax(0, imin(7, l));
            sc[ib / 4] = (uint16_t)(sc[ib / 4] | (l << (3 * (ib % 4))));
            y[ibl].qh[ib] = (uint8_t)(y[ibl].qh[ib] | masks[shifts[ib]]);
            const float *xb = xbl + bs * ib;
            if (quant_weights) {
                const float *qw = quant_weights + QK_K * ibl + bs * ib;
                for (int i = 0; i < bs; i++) weight[i] = qw[i] * sqrtf(sigma2 + xb[i] * xb[i]);
            } else {
                for (int i = 0; i < bs; i++) weight[i] = xb[i] * xb[i];
            }
            for (int k = 0; k < bs / 8; k++) {
                xx = (k == 0 ? shifts[ib] < 2 : shifts[ib] % 2 == 0) ? x_p : x_m;
                const int gi = y[ibl].qs[2 * ib + k] + ((y[ibl].qh[ib] << (8 - 4 * k)) & 0x700);
                const int8_t *pg = G->pos[gi];
                for (int j = 0; j < 8; j++) {
                    const float w = weight[8 * k + j];
                    const float q = xx[(pg[j] - 1) / 2] * (2 * l + 1);
                    sumqx_f += w * q * xb[8 * k + j];
                    sumq2_f += w * q * q;
                }
            }
        }
        if (sumq2_f > 0) d = sumqx_f / sumq2_f;
        const uint16_t s = pl_f32_to_f16(d * 1.1125f); /* GGML's fudge factor */
        sc[0] = (uint16_t)(sc[0] | ((s & 0x000f) << 12));
        sc[1] = (uint16_t)(sc[1] | ((s & 0x00f0) << 8));
        sc[2] = (uint16_t)(sc[2] | ((s & 0x0f00) << 4));
        sc[3] = (uint16_t)(sc[3] | (s & 0xf000));
        for (int k = 0; k < 4; k++) put_u16le(y[ibl].scales + 2 * k, sc[k]);
    }
}

/* ---- ternary ---------------------------------------------------------------------*/

/* One trit per element, t = round(x / amax) + 1 in 0..2, 5 trits per byte as
 * the top digits of a base-3 fraction (see quant/blocks.h). */
void pl_quantize_row_tq1_0(const float *x, void *vy, int64_t k) {
    block_tq1_0 *y = vy;
    const size_t nqs = sizeof y->qs, nqh = sizeof y->qh;
    for (int64_t i = 0; i < k / QK_K; i++) {
        float amax = 0.0f;
        for (int j = 0; j < QK_K; j++) amax = amax > fabsf(x[j]) ? amax : fabsf(x[j]);
        const float d = amax;
        const float id = d ? 1.0f / d : 0.0f;
        y[i].d = pl_f32_to_f16(d);
        for (size_t j = 0; j < nqs - nqs % 32; j += 32) {
            for (size_t m = 0; m < 32; m++) {
                unsigned q = 0;
                for (size_t nn = 0; nn < 5; nn++) q = q * 3 + (unsigned)(lroundf(x[m + nn * 32] * id) + 1);
                y[i].qs[j + m] = (uint8_t)(((uint16_t)(uint8_t)q * 256 + (243 - 1)) / 243);
            }
            x += 5 * 32;
        }
        for (size_t j = nqs - nqs % 32; j < nqs; j += 16) {
            for (size_t m = 0; m < 16; m++) {
                unsigned q = 0;
                for (size_t nn = 0; nn < 5; nn++) q = q * 3 + (unsigned)(lroundf(x[m + nn * 16] * id) + 1);
                y[i].qs[j + m] = (uint8_t)(((uint16_t)(uint8_t)q * 256 + (243 - 1)) / 243);
            }
            x += 5 * 16;
        }
        for (size_t j = 0; j < nqh; j++) {
            unsigned q = 0;
            for (size_t m = 0; m < 4; m++) q = q * 3 + (unsigned)(lroundf(x[j + m * nqh] * id) + 1);
            q *= 3; /* the first value becomes the most significant trit */
            y[i].qh[j] = (uint8_t)(((uint16_t)(uint8_t)q * 256 + (243 - 1)) / 243);
        }
        x += 4 * nqh;
    }
}

/* Two bits per element, q = round(x / amax) + 1 in 0..2. */
void pl_quantize_row_tq2_0(const float *x, void *vy, int64_t k) {
    block_tq2_0 *y = vy;
    for (int64_t i = 0; i < k / QK_K; i++) {
        float amax = 0.0f;
        for (int j = 0; j < QK_K; j++) amax = amax > fabsf(x[j]) ? amax : fabsf(x[j]);
        const float d = amax;
        const float id = d ? 1.0f / d : 0.0f;
        y[i].d = pl_f32_to_f16(d);
        for (size_t j = 0; j < sizeof y->qs; j += 32) {
            for (size_t m = 0; m < 32; m++) {
                unsigned q = 0;
                for (size_t nn = 0; nn < 4; nn++) q += (unsigned)((lroundf(x[m + nn * 32] * id) + 1) & 3) << (2 * nn);
                y[i].qs[j + m] = (uint8_t)q;
            }
            x += 4 * 32;
        }
    }
}
