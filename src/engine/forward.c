/*
 * The forward pass over a batch of tokens that may belong to different
 * sequences. Each token carries its own position and KV-cache slot; the batch
 * is cut into sub-batches of at most n_batch tokens and n_logits_max logits
 * rows, each run through one graph on the model's backend.
 */
#include "engine/model.h"
#include "core/status.h"
#include <stdlib.h>
#include <string.h>

pl_status pl_model_build_graph(pl_model *m, pl_graph *g, int n, int n_out, pl_tensor **logits);

static pl_status run_chunk(pl_model *m, const pl_batch *b, int start, int n, float **logits_out) {
    int n_out = 0;
    for (int i = 0; i < n; i++) {
        m->in_ids[i] = b->tokens[start + i];
        m->in_pos[i] = b->pos[start + i];
        m->in_seq[i] = b->seq ? b->seq[start + i] : 0;
        if (b->want_logits && b->want_logits[start + i]) m->in_out[n_out++] = i;
    }
    bool discard = n_out == 0;
    if (discard) m->in_out[n_out++] = n - 1; /* the graph always has one output row */

    pl_tensor *logits;
    PL_TRY(pl_model_build_graph(m, &m->graph, n, n_out, &logits));
    PL_TRY(pl_graph_apply_plan(&m->graph, &m->planned, m->scratch, m->scratch_size));
    if (m->dev) {
        /* A per-node observer (pl_model_set_observer) reads activations on
         * the host; on a device they are device pointers. Refuse instead of
         * crashing. */
        if (m->ctx->on_node)
            return pl_errorf(PL_ERR_UNSUPPORTED,
                             "a per-node observer reads activations on the host and cannot run on device '%s' "
                             "(use the cpu device)",
                             m->backend->name);
        /* ids | pos | seq | out in one copy (the graph's inputs point at inputs_dev) */
        PL_TRY(m->dev->upload(m->ctx, m->inputs_dev, m->in_ids, 4 * (size_t)m->n_batch * sizeof(int32_t)));
    }
    PL_TRY(pl_graph_execute(&m->graph, m->ctx));
    if (!discard && *logits_out) {
        size_t row = (size_t)m->hp.n_vocab;
        if (m->dev) {
            /* logits [n_vocab, n_out] are contiguous: one copy, which waits
             * for the graph and reports errors the kernels found */
            if (logits->nb[1] != row * sizeof(float))
                return pl_errorf(PL_ERR_INTERNAL, "logits are not contiguous on the device");
            PL_TRY(m->dev->download(m->ctx, *logits_out, logits->data, (size_t)n_out * row * sizeof(float)));
        } else {
            for (int r = 0; r < n_out; r++)
                memcpy(*logits_out + (size_t)r * row, (const char *)logits->data + (size_t)r * logits->nb[1],
                       row * sizeof(float));
        }
        *logits_out += (size_t)n_out * row;
    } else if (m->dev) {
        PL_TRY(m->dev->synchronize(m->ctx));   /* no logits: still report this chunk's device errors here */
    }
    return PL_OK;
}

PL_API pl_status pl_model_forward(pl_model *m, const pl_batch *b, float *logits) {
    if (!m || !b || !b->tokens || !b->pos || b->n <= 0)
        return pl_errorf(PL_ERR_INVALID_ARG, "empty or malformed batch");
    if (!m->ctx) return pl_errorf(PL_ERR_INVALID_ARG, "model was loaded vocab-only");
    const int32_t n_vocab = (int32_t)m->hp.n_vocab;
    for (int i = 0; i < b->n; i++) {
        int32_t seq = b->seq ? b->seq[i] : 0;
        if (b->tokens[i] < 0 || b->tokens[i] >= n_vocab)
            return pl_errorf(PL_ERR_INVALID_ARG, "token id %d out of range (vocabulary has %d)", b->tokens[i], n_vocab);
        if (seq < 0 || seq >= m->n_seq)
            return pl_errorf(PL_ERR_INVALID_ARG, "sequence slot %d out of range (%d slots)", seq, m->n_seq);
        if (b->pos[i] < 0 || b->pos[i] >= m->n_ctx)
            return pl_errorf(PL_ERR_CONTEXT_FULL, "position %d is outside the context of %d tokens", b->pos[i], m->n_ctx);
    }
    /* Every token must land at most one position past what its slot holds
     * (batch order counts): attention reads rows 0..pos of the slot, and a
     * gap would be rows holding nothing or a forgotten sequence. Checked on
     * a copy of the lengths so a refused batch changes nothing. */
    int32_t len_small[16], *len = m->n_seq <= 16 ? len_small : malloc((size_t)m->n_seq * sizeof *len);
    if (!len) return pl_errorf(PL_ERR_NO_MEMORY, "out of memory");
    memcpy(len, m->kv_len, (size_t)m->n_seq * sizeof *len);
    pl_status st = PL_OK;
    for (int i = 0; i < b->n && st == PL_OK; i++) {
        int32_t seq = b->seq ? b->seq[i] : 0;
        if (b->pos[i] > len[seq])
            st = pl_errorf(PL_ERR_INVALID_ARG,
                           "position %d of slot %d leaves a gap: the slot's cache holds %d positions, so the next "
                           "token goes at position %d at most", b->pos[i], seq, len[seq], len[seq]);
        len[seq] = b->pos[i] + 1;
    }
    if (len != len_small) free(len);
    if (st != PL_OK) return st;
    int start = 0;
    float *out = logits;
    while (start < b->n) {
        int n = 0, n_out = 0;
        while (start + n < b->n && n < m->n_batch) {
            bool want = b->want_logits && b->want_logits[start + n];
            if (want && n_out == m->n_logits_max) break;
            n_out += want;
            n++;
        }
        PL_TRY(run_chunk(m, b, start, n, &out));
        /* the chunk's rows are written: its tokens now end their slots */
        for (int i = start; i < start + n; i++) m->kv_len[b->seq ? b->seq[i] : 0] = b->pos[i] + 1;
        start += n;
    }
    return PL_OK;
}

PL_API void pl_model_kv_truncate(pl_model *m, int32_t seq, int32_t pos) {
    /* The rows themselves stay: attention never reads past a slot's length,
     * and they are rewritten before the length grows over them again. */
    if (!m || !m->kv_len || seq < 0 || seq >= m->n_seq) return;
    if (pos < 0) pos = 0;
    if (pos < m->kv_len[seq]) m->kv_len[seq] = pos;
}

PL_API int32_t pl_model_kv_len(const pl_model *m, int32_t seq) {
    if (!m || !m->kv_len || seq < 0 || seq >= m->n_seq) return -1;
    return m->kv_len[seq];
}
