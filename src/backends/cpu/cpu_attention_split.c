/* Decode attention split over the cache positions: planning and the fixed-
 * order combine (see cpu_attention_split.h). */
#include <math.h>
#include <stdlib.h>
#include "backends/cpu/cpu_attention_split.h"

static int64_t pl_att_split_tok_nch(const pl_att_split *s, int64_t t) {
    const int32_t p = pl_att_i32(s->node->src[3], t);
    return pl_att_split_nch((int64_t)p + 1 - pl_att_lo(s->node, p), s->on);
}

pl_status pl_att_split_init(pl_att_split *s, const pl_node *node, int64_t units, bool on, void **mem) {
    memset(s, 0, sizeof *s);
    s->node = node;
    s->on = on;
    s->units = units;
    s->hd = node->src[0]->ne[0];
    s->n_head = node->src[0]->ne[1];
    s->slot_floats = (size_t)(s->n_head * (s->hd + 2));
    const int64_t n_tok = node->src[0]->ne[2];
    /* slots: the cap, or one token's chunks if more (a very long context) */
    int64_t most = 1;
    for (int64_t t = 0; t < n_tok; t++) {
        const int64_t c = pl_att_split_tok_nch(s, t);
        if (c > most) most = c;
    }
    const int64_t slots = most > PL_ATT_SPLIT_SLOTS ? most : PL_ATT_SPLIT_SLOTS;
    s->slot_cap = slots;
    const size_t pref = (size_t)(n_tok + 1) * sizeof(int64_t);
    const size_t bytes = 2 * pref + 64 + (most > 1 ? (size_t)slots * s->slot_floats * sizeof(float) : 0);
    char *m = malloc(bytes);
    if (!m) return pl_errorf(PL_ERR_NO_MEMORY, "attention (cpu): cannot allocate %zu bytes of split partials", bytes);
    s->task_pref = (int64_t *)m;
    s->slot_pref = (int64_t *)(m + pref);
    s->part = (float *)(((uintptr_t)(m + 2 * pref) + 63) & ~(uintptr_t)63);
    *mem = m;
    return PL_OK;
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
