/* Public tokenizer entry points over the model's vocabulary. */
#include "engine/model.h"
#include "core/status.h"
#include <stdlib.h>
#include <string.h>

PL_API void pl_free(void *p) { free(p); }

PL_API pl_status pl_tokenize(const pl_model *m, const char *text, size_t len, bool parse_special,
                             const bool *add_bos, int32_t **ids, size_t *n_ids) {
    *ids = NULL;
    *n_ids = 0;
    if (!m || (!text && len)) return pl_errorf(PL_ERR_INVALID_ARG, "bad arguments");
    int32_t *body = NULL;
    size_t n = 0;
    PL_TRY(pl_vocab_tokenize(m->vocab, text ? text : "", len, parse_special, &body, &n));
    bool bos = add_bos ? *add_bos : pl_vocab_add_bos(m->vocab);
    int32_t bos_id = pl_vocab_bos(m->vocab);
    if (bos && bos_id >= 0) {
        int32_t *all = malloc((n + 1) * sizeof *all);
        if (!all) { free(body); return pl_errorf(PL_ERR_NO_MEMORY, "out of memory"); }
        all[0] = bos_id;
        if (n) memcpy(all + 1, body, n * sizeof *all);
        free(body);
        body = all;
        n++;
    }
    *ids = body;
    *n_ids = n;
    return PL_OK;
}

PL_API pl_status pl_token_to_piece(const pl_model *m, int32_t id, bool special, char *buf, size_t cap,
                                   size_t *len) {
    return pl_vocab_piece(m->vocab, id, special, buf, cap, len);
}

PL_API pl_status pl_detokenize(const pl_model *m, const int32_t *ids, size_t n, bool special, char **text,
                               size_t *len) {
    *text = NULL;
    *len = 0;
    size_t cap = 64, used = 0;
    char *out = malloc(cap);
    if (!out) return pl_errorf(PL_ERR_NO_MEMORY, "out of memory");
    for (size_t i = 0; i < n; i++) {
        size_t need = 0;
        pl_status st = pl_vocab_piece(m->vocab, ids[i], special, out + used, cap - used - 1, &need);
        if (st != PL_OK && need > 0 && need + used + 1 > cap) {
            while (cap < used + need + 1) cap *= 2;
            char *grown = realloc(out, cap);
            if (!grown) { free(out); return pl_errorf(PL_ERR_NO_MEMORY, "out of memory"); }
            out = grown;
            st = pl_vocab_piece(m->vocab, ids[i], special, out + used, cap - used - 1, &need);
        }
        if (st != PL_OK) { free(out); return st; }
        if (i == 0 && need > 0 && out[0] == ' ' && pl_vocab_space_prefix(m->vocab)) {
            /* SentencePiece: tokenizing added this space (llama.cpp's
             * detokenize strips it from the first piece) */
            memmove(out, out + 1, need - 1);
            need--;
        }
        used += need;
    }
    out[used] = 0;
    *text = out;
    *len = used;
    return PL_OK;
}

PL_API bool pl_token_is_eog(const pl_model *m, int32_t id) { return pl_vocab_is_eog(m->vocab, id); }
