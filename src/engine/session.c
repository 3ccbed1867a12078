/* A session: one sequence, one KV-cache slot, its position. */
#include "engine/model.h"
#include "core/status.h"
#include <math.h>
#include <stdlib.h>
#include <string.h>

struct pl_session {
    pl_model *model;
    int32_t slot;
    int32_t pos;
};

PL_API pl_status pl_session_create(pl_model *m, pl_session **out) {
    *out = NULL;
    if (!m || !m->ctx) return pl_errorf(PL_ERR_INVALID_ARG, "model was loaded vocab-only");
    int slot = -1;
    for (int i = 0; i < m->n_seq; i++)
        if (!m->slot_used[i]) { slot = i; break; }
    if (slot < 0) return pl_errorf(PL_ERR_INVALID_ARG, "all %d KV-cache slots are in use", m->n_seq);
    pl_session *s = calloc(1, sizeof *s);
    if (!s) return pl_errorf(PL_ERR_NO_MEMORY, "out of memory");
    s->model = m;
    s->slot = slot;
    m->slot_used[slot] = true;
    pl_model_kv_truncate(m, slot, 0);   /* whatever a previous user left there is not ours */
    *out = s;
    return PL_OK;
}

PL_API void pl_session_free(pl_session *s) {
    if (!s) return;
    s->model->slot_used[s->slot] = false;
    free(s);
}

PL_API int32_t pl_session_pos(const pl_session *s) { return s->pos; }
PL_API void pl_session_reset(pl_session *s) {
    s->pos = 0;
    pl_model_kv_truncate(s->model, s->slot, 0);
}

PL_API pl_status pl_session_rewind(pl_session *s, int32_t pos) {
    if (!s) return pl_errorf(PL_ERR_INVALID_ARG, "pl_session_rewind: no session");
    if (pos < 0 || pos > s->pos)
        return pl_errorf(PL_ERR_INVALID_ARG, "cannot rewind to position %d: the sequence holds %d tokens", pos, s->pos);
    s->pos = pos;
    pl_model_kv_truncate(s->model, s->slot, pos);
    return PL_OK;
}

/* Logits that are NaN or +-Inf mean the model's arithmetic broke (corrupt or
 * badly quantized weights); sampling them silently picked token 0. Checked
 * here so that every caller of pl_session_eval (run, Python) gets an error
 * that names the position, before anything is sampled. The test is on the
 * exponent bits, OR-ed over the row without branches, so the compiler
 * vectorizes it: one pass over n_vocab floats that were just written (tens
 * of microseconds for 152k logits, next to milliseconds for the forward). */
static pl_status check_logits(const float *logits, int32_t n_vocab, int32_t pos) {
    uint32_t all = 0;
    for (int32_t i = 0; i < n_vocab; i++) {
        uint32_t u;
        memcpy(&u, &logits[i], 4);
        all |= (u & 0x7F800000u) == 0x7F800000u;
    }
    if (!all) return PL_OK;
    int32_t id = 0;
    while (isfinite(logits[id])) id++;
    return pl_errorf(PL_ERR_FORMAT,
                     "the model produced NaN/Inf logits at token %d of the sequence (token id %d has logit %s)"
                     " -- corrupt or badly quantized weights?", pos, id,
                     isnan(logits[id]) ? "nan" : logits[id] > 0 ? "inf" : "-inf");
}

PL_API pl_status pl_session_eval(pl_session *s, const int32_t *ids, size_t n, float *logits) {
    if (!s || (!ids && n)) return pl_errorf(PL_ERR_INVALID_ARG, "bad arguments");
    if (n == 0) return PL_OK;
    pl_model *m = s->model;
    if (n > (size_t)m->n_ctx || (size_t)s->pos + n > (size_t)m->n_ctx)
        return pl_errorf(PL_ERR_CONTEXT_FULL, "%zu more tokens would exceed the context of %d (at position %d)", n,
                         m->n_ctx, s->pos);
    int32_t *pos = malloc(n * sizeof *pos);
    int32_t *seq = malloc(n * sizeof *seq);
    bool *want = calloc(n, sizeof *want);
    if (!pos || !seq || !want) {
        free(pos); free(seq); free(want);
        return pl_errorf(PL_ERR_NO_MEMORY, "out of memory");
    }
    for (size_t i = 0; i < n; i++) {
        pos[i] = s->pos + (int32_t)i;
        seq[i] = s->slot;
    }
    want[n - 1] = logits != NULL;
    pl_batch b = {(int32_t)n, ids, pos, seq, want};
    pl_status st = pl_model_forward(m, &b, logits);
    free(pos); free(seq); free(want);
    if (st != PL_OK) return st;
    s->pos += (int32_t)n;
    if (logits) return check_logits(logits, (int32_t)m->hp.n_vocab, s->pos - 1);
    return PL_OK;
}
