/* Decode attention split over the cache positions: planning and the fixed-
 * order combine (see cpu_attention_split.h). */
#include <math.h>
#include "backends/cpu/cpu_attention_split.h"

static int64_t pl_att_split_tok_nch(const pl_att_split *s, int64_t t) {
    const int32_t p = pl_att_i32(s->node->src[3], t);
    return pl_att_split_nch((int64_t)p + 1 - pl_att_lo(s->node, p), s->on);
}

/* Partial slots a round may hold for node: the cap, or one token's chunks
 * if more (a very long context); a token's positions are at most the
 * cache's ne[1] (the op checks every position against it), so its chunks
 * at most pl_att_split_nch(ne[1]): a bound from the shapes alone. None when
 * no token can take two chunks. The cap only groups the tokens into rounds;
 * each token's partials and combine are its own, so the bound changes no
 * result. */
static int64_t pl_att_split_slots(const pl_node *node, bool on) {
    const int64_t most = pl_att_split_nch(node->src[1]->ne[1], on);
    if (most < 2) return 0;
    return most > PL_ATT_SPLIT_SLOTS ? most : PL_ATT_SPLIT_SLOTS;
}

/* The prefix arrays ([n_tok + 1] int64 each), whole cache lines. */
static size_t pl_att_split_pref_bytes(const pl_node *node) {
    return ((size_t)(node->src[0]->ne[2] + 1) * sizeof(int64_t) + 63) & ~(size_t)63;
}

size_t pl_att_split_bytes(const pl_node *node, bool on) {
    const size_t slot_floats = (size_t)(node->src[0]->ne[1] * (node->src[0]->ne[0] + 2));
    return 2 * pl_att_split_pref_bytes(node) + (size_t)pl_att_split_slots(node, on) * slot_floats * sizeof(float);
}

void pl_att_split_init(pl_att_split *s, const pl_node *node, int64_t units, bool on, void *mem) {
    memset(s, 0, sizeof *s);
    s->node = node;
    s->on = on;
    s->units = units;
    s->hd = node->src[0]->ne[0];
    s->n_head = node->src[0]->ne[1];
    s->slot_floats = (size_t)(s->n_head * (s->hd + 2));
    const int64_t slots = pl_att_split_slots(node, on);
    s->slot_cap = slots > 0 ? slots : PL_ATT_SPLIT_SLOTS;   /* no slots: every token one chunk, none taken */
    const size_t pref = pl_att_split_pref_bytes(node);
    s->task_pref = (int64_t *)mem;
    s->slot_pref = (int64_t *)((char *)mem + pref);
    s->part = slots > 0 ? (float *)((char *)mem + 2 * pref) : NULL;
}

void pl_att_split_round(pl_att_split *s, int64_t t0) {
    const int64_t n_tok = s->node->src[0]->ne[2];
    const int64_t cap = s->slot_cap;
    int64_t tasks = 0, slots = 0, t = t0;
    for (; t < n_tok; t++) {
        const int64_t c = pl_att_split_tok_nch(s, t);
        const int64_t need = c > 1 ? c : 0;
        if (t > t0 && slots + need > cap) break;
        s->task_pref[t - t0] = tasks;
        s->slot_pref[t - t0] = slots;
        tasks += c * s->units;
        slots += need;
    }
    s->task_pref[t - t0] = tasks;
    s->slot_pref[t - t0] = slots;
    s->t0 = t0;
    s->t1 = t;
    s->n_tasks = tasks;
}

void pl_att_split_task(const pl_att_split *s, int64_t id, int64_t *t, int64_t *u, int64_t *c, int64_t *nch,
                       float **slot) {
    int64_t lo = 0, hi = s->t1 - s->t0;   /* largest i with task_pref[i] <= id */
    while (hi - lo > 1) {
        const int64_t mid = (lo + hi) / 2;
        if (s->task_pref[mid] <= id) lo = mid;
        else hi = mid;
    }
    const int64_t local = id - s->task_pref[lo];
    const int64_t n = (s->task_pref[lo + 1] - s->task_pref[lo]) / s->units;
    *t = s->t0 + lo;
    *nch = n;
    *c = local / s->units;   /* chunk-major: a token's units of one chunk are neighbours */
    *u = local % s->units;
    *slot = n > 1 ? s->part + (size_t)(s->slot_pref[lo] + *c) * s->slot_floats : NULL;
}

void pl_att_split_combine(const pl_att_split *s) {
    const pl_tensor *dst = s->node->dst;
    const int64_t H = s->n_head, hd = s->hd;
    for (int64_t t = s->t0; t < s->t1; t++) {
        const int64_t i = t - s->t0, n = s->slot_pref[i + 1] - s->slot_pref[i];
        if (n < 2) continue;
        const float *base = s->part + (size_t)s->slot_pref[i] * s->slot_floats;
        float *out = (float *)((char *)dst->data + t * dst->nb[1]);
        for (int64_t h = 0; h < H; h++) {
            float mx = -INFINITY;
            for (int64_t c = 0; c < n; c++) {
                const float m = base[(size_t)c * s->slot_floats + (size_t)(H * hd + h)];
                if (m > mx) mx = m;
            }
            float *o = out + h * hd;
            for (int64_t d = 0; d < hd; d++) o[d] = 0.0f;
            float L = 0.0f;
            for (int64_t c = 0; c < n; c++) {
                const float *sl = base + (size_t)c * s->slot_floats;
                const float m = sl[H * hd + h], l = sl[H * hd + H + h];
                const float w = m == -INFINITY ? 0.0f : expf(m - mx);
                L += w * l;
                const float *a = sl + h * hd;
                for (int64_t d = 0; d < hd; d++) o[d] += w * a[d];
            }
            const float inv = L == 0.0f ? 0.0f : 1.0f / L;
            for (int64_t d = 0; d < hd; d++) o[d] *= inv;
        }
    }
}
