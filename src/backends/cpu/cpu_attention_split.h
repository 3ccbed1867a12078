/* Decode attention split over the cache positions (cpu backend).
 *
 * One decode token's attention is one task of the position-major online
 * path (all KV heads at once), so at depth it ran on one core. Here a
 * token's positions lo..p (lo: 0, or the window start) are cut into chunks
 * of PL_ATT_CHUNK positions counted from lo. Each chunk is its own task and
 * leaves a partial per query row: the running maximum M, the sum L of
 * exp(s - M), and the unnormalised V accumulator A[hd]. The partials are
 * then combined in chunk order (pl_att_split_combine):
 *   M* = max_c M_c,  w_c = exp(M_c - M*),  out = (sum_c w_c A_c) / (sum_c w_c L_c).
 * The chunking depends only on the token's own position (and window), never
 * on the thread count or on the other tokens of the batch, so a token's
 * result is the same bits on any number of threads and in any batch (the
 * server's batch invariance). A token with at most PL_ATT_CHUNK positions
 * takes one chunk and no combine: exactly the unsplit path's steps
 * (llama.cpp's decode numerics, which the goldens check).
 *
 * Rounds: the partials of many tokens (batch-invariant prefill through the
 * decode path) are bounded by processing the tokens in rounds of at most
 * PL_ATT_SPLIT_SLOTS partial slots; a slot holds one chunk of one token,
 * all heads: [n_head][hd] A, then [n_head] M, then [n_head] L (floats).
 */
#ifndef PL_CPU_ATTENTION_SPLIT_H
#define PL_CPU_ATTENTION_SPLIT_H

#include <stdint.h>
#include <string.h>
#include "graph/graph.h"
#include "core/status.h"

#define PL_ATT_CHUNK 512          /* positions per chunk; a multiple of the 64-position pieces */
#define PL_ATT_SPLIT_SLOTS 256    /* partial slots per round, at most (unless one token needs more) */

/* -1: follow PL_CPU_ATT_SPLIT (default on); 0 / 1: off / on (tests). */
extern int pl_cpu_att_split_mode;
/* -1: follow PL_CPU_ATT_ZMM (default on where AVX-512 is); 0 / 1: the blocked
 * path's scores and V recurrence by the AVX2 / the zmm kernels (tests). */
extern int pl_cpu_att_zmm_mode;

static inline int32_t pl_att_i32(const pl_tensor *t, int64_t i) {
    int32_t v;
    memcpy(&v, (const char *)t->data + i * (int64_t)t->nb[0], sizeof v);
    return v;
}

/* The first cache position token position p attends to: 0, or with a
 * sliding window (iparams[4] > 0) p - window + 1. */
static inline int64_t pl_att_lo(const pl_node *node, int32_t p) {
    const int w = node->iparams[4];
    return w > 0 && p - w + 1 > 0 ? (int64_t)p - w + 1 : 0;
}

/* Chunks of a token with n positions (1 when n <= PL_ATT_CHUNK). */
static inline int64_t pl_att_split_nch(int64_t n, bool on) {
    return on && n > PL_ATT_CHUNK ? (n + PL_ATT_CHUNK - 1) / PL_ATT_CHUNK : 1;
}

typedef struct pl_att_split {
    const pl_node *node;
    bool on;                 /* false: one chunk per token (PL_CPU_ATT_SPLIT=0) */
    int64_t units;           /* tasks per chunk of a token (blocks of KV heads) */
    int64_t n_head, hd;
    size_t slot_floats;      /* n_head * (hd + 2) */
    int64_t t0, t1;          /* the round's tokens */
    int64_t *task_pref;      /* [n_tok + 1]: first task of token t0 + i, relative to the round */
    int64_t *slot_pref;      /* [n_tok + 1]: first slot of token t0 + i (tokens of one chunk take none) */
    float *part;             /* slot_cap slots */
    int64_t slot_cap;        /* PL_ATT_SPLIT_SLOTS, or one token's chunks if more */
    int64_t n_tasks;
} pl_att_split;

/* Bytes of the split's memory for node: the prefix arrays and (when a
 * token can take two chunks) the partial slots, from the shapes alone, so
 * the planned work of an attention node holds them (pl_cpu_work_attention,
 * with on = true: the most). A multiple of 64. */
size_t pl_att_split_bytes(const pl_node *node, bool on);

/* Lays the prefix arrays and the partial slots for node's tokens out in
 * mem: pl_att_split_bytes(node, on) bytes, 64-byte aligned (planned
 * scratch; the split allocates nothing). O(1). */
void pl_att_split_init(pl_att_split *s, const pl_node *node, int64_t units, bool on, void *mem);

/* The next round from token t0: sets t1, the prefixes and n_tasks. */
void pl_att_split_round(pl_att_split *s, int64_t t0);

/* Task id of the round -> token t, unit u, chunk c of nch; *slot: the
 * chunk's partial slot, or NULL when the token has one chunk. */
void pl_att_split_task(const pl_att_split *s, int64_t id, int64_t *t, int64_t *u, int64_t *c, int64_t *nch,
                       float **slot);

/* Combines the partials of every split token of the round into dst, in
 * chunk order (see the top). Heads h of token t: dst row t, h * hd. */
void pl_att_split_combine(const pl_att_split *s);

#endif
