/*
 * Copying a slot's KV-cache rows out to the host and back (pl_model_kv_read,
 * pl_model_kv_write): what a host-side prompt cache (`serve --cache-ram`)
 * keeps of an evicted prefix and restores instead of prefilling it again.
 *
 * In the cache, layer l's K (then V) tensor is [kv_dim, n_ctx, n_seq]: a
 * slot's positions are consecutive rows (row_k / row_v bytes; quantized rows
 * are whole blocks). The buffer handed out is position-major instead:
 *   for p in pos..pos+n-1: for l in layers: K row (row_k), V row (row_v)
 * so the first m positions of a saved range are themselves a saved range of
 * m positions, and a caller can restore any prefix of what it kept. The rows
 * are copied as stored (RoPE applied, rotated for quantized caches): they are
 * valid only at the positions they came from, in a model with the same cache
 * types, which is what a prefix cache needs.
 */
#include "engine/model.h"
#include "core/status.h"
#include <stdlib.h>
#include <string.h>

static void row_sizes(const pl_model *m, size_t *rk, size_t *rv) {
    const int64_t kv_dim = m->hp.n_head_kv * m->hp.head_dim;
    *rk = pl_dtype_row_size(m->kv_dtype, kv_dim);
    *rv = pl_dtype_row_size(m->kv_dtype_v, kv_dim);
}

PL_API size_t pl_model_kv_pos_bytes(const pl_model *m) {
    if (!m || !m->k_cache) return 0;
    size_t rk, rv;
    row_sizes(m, &rk, &rv);
    return (size_t)m->hp.n_layer * (rk + rv);
}

/* Common checks; *need = the buffer size for n positions. */
static pl_status check(const pl_model *m, const char *what, int32_t seq, int32_t pos, int32_t n, size_t size,
                       size_t *need) {
    if (!m || !m->ctx || !m->kv_len || !m->kv_mem)
        return pl_errorf(PL_ERR_INVALID_ARG, "%s: the model has no KV cache (loaded vocab-only?)", what);
    if (seq < 0 || seq >= m->n_seq)
        return pl_errorf(PL_ERR_INVALID_ARG, "%s: sequence slot %d out of range (%d slots)", what, seq, m->n_seq);
    if (pos < 0 || n < 0 || (int64_t)pos + n > m->n_ctx)
        return pl_errorf(PL_ERR_INVALID_ARG, "%s: positions %d..%lld are outside the context of %d", what, pos,
                         (long long)pos + n - 1, m->n_ctx);
    *need = (size_t)n * pl_model_kv_pos_bytes(m);
    if (size < *need)
        return pl_errorf(PL_ERR_INVALID_ARG, "%s: buffer of %zu bytes, %d positions need %zu", what, size, n, *need);
    return PL_OK;
}

/* Moves n rows of one layer's K or V tensor between the cache (slot seq,
 * positions pos..) and the position-major buffer (stride bytes per
 * position, this tensor's rows at offset off). On a device the rows go
 * through a host staging copy, one transfer per tensor. */
static pl_status move_rows(pl_model *m, const pl_tensor *t, size_t row, int32_t seq, int32_t pos, int32_t n,
                           char *buf, size_t stride, size_t off, bool to_cache, void *stage) {
    char *cache = (char *)t->data + ((size_t)seq * (size_t)m->n_ctx + (size_t)pos) * row;
    char *rows = m->dev ? stage : cache;
    if (m->dev && !to_cache) PL_TRY(m->dev->download(m->ctx, rows, cache, (size_t)n * row));
    for (int32_t p = 0; p < n; p++) {
        char *b = buf + (size_t)p * stride + off;
        if (to_cache) memcpy(rows + (size_t)p * row, b, row);
        else memcpy(b, rows + (size_t)p * row, row);
    }
    if (m->dev && to_cache) PL_TRY(m->dev->upload(m->ctx, cache, rows, (size_t)n * row));
    return PL_OK;
}

static pl_status kv_copy(pl_model *m, int32_t seq, int32_t pos, int32_t n, char *buf, bool to_cache) {
    size_t rk, rv;
    row_sizes(m, &rk, &rv);
    const size_t stride = pl_model_kv_pos_bytes(m);
    void *stage = NULL;
    if (m->dev && n > 0) {
        stage = malloc((size_t)n * (rk > rv ? rk : rv));
        if (!stage) return pl_errorf(PL_ERR_NO_MEMORY, "out of memory staging %d KV positions", n);
    }
    pl_status st = PL_OK;
    for (int64_t l = 0; l < m->hp.n_layer && st == PL_OK && n > 0; l++) {
        size_t off = (size_t)l * (rk + rv);
        st = move_rows(m, &m->k_cache[l], rk, seq, pos, n, buf, stride, off, to_cache, stage);
        if (st == PL_OK) st = move_rows(m, &m->v_cache[l], rv, seq, pos, n, buf, stride, off + rk, to_cache, stage);
    }
    free(stage);
    return st;
}

PL_API pl_status pl_model_kv_read(pl_model *m, int32_t seq, int32_t pos, int32_t n, void *buf, size_t size) {
    size_t need;
    PL_TRY(check(m, "pl_model_kv_read", seq, pos, n, size, &need));
    if ((int64_t)pos + n > m->kv_len[seq])
        return pl_errorf(PL_ERR_INVALID_ARG,
                         "pl_model_kv_read: positions %d..%lld of slot %d, but its cache holds %d positions", pos,
                         (long long)pos + n - 1, seq, m->kv_len[seq]);
    if (n > 0 && !buf) return pl_errorf(PL_ERR_INVALID_ARG, "pl_model_kv_read: no buffer");
    return kv_copy(m, seq, pos, n, buf, false);
}

PL_API pl_status pl_model_kv_write(pl_model *m, int32_t seq, int32_t pos, int32_t n, const void *buf, size_t size) {
    size_t need;
    PL_TRY(check(m, "pl_model_kv_write", seq, pos, n, size, &need));
    if (pos > m->kv_len[seq])
        return pl_errorf(PL_ERR_INVALID_ARG,
                         "pl_model_kv_write: position %d of slot %d leaves a gap: its cache holds %d positions", pos,
                         seq, m->kv_len[seq]);
    if (n > 0 && !buf) return pl_errorf(PL_ERR_INVALID_ARG, "pl_model_kv_write: no buffer");
    /* Half-written rows are no cache: the slot ends at pos until the copy
     * is through, and stays there if it fails. */
    m->kv_len[seq] = pos;
    PL_TRY(kv_copy(m, seq, pos, n, (char *)buf, true));
    m->kv_len[seq] = pos + n;
    return PL_OK;
}
