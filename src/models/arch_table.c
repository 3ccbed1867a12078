/* The table-driven parts of an architecture (models/arch_table.h). */
#include "models/arch_table.h"
#include "core/status.h"
#include <stdio.h>
#include <string.h>
#include <strings.h>

int64_t pl_dim_value(const pl_hparams *hp, pl_dim d) {
    switch (d) {
    case PL_DIM_1: return 1;
    case PL_DIM_E: return hp->n_embd;
    case PL_DIM_V: return hp->n_vocab;
    case PL_DIM_F: return hp->n_ff;
    case PL_DIM_D: return hp->head_dim;
    case PL_DIM_HD: return hp->n_head * hp->head_dim;
    case PL_DIM_GD: return hp->n_head_kv * hp->head_dim;
    case PL_DIM_X: return hp->n_expert;
    case PL_DIM_FX: return hp->n_ff_exp;
    case PL_DIM_ROT_HALF: return hp->n_rot / 2;
    }
    return 0;
}

static uint64_t allowed_dtypes(pl_tensor_role r) {
    /* vectors are F32 as converted; 0 = any dtype the backend multiplies */
    return r == PL_TR_NORM || r == PL_TR_BIAS || r == PL_TR_FACTORS ? PL_DTMASK(PL_F32) : 0;
}

static pl_status bind_one(pl_model *m, const pl_tensor_decl *d, pl_tensor **dst, int layer) {
    int64_t ne[3];
    for (int i = 0; i < 3; i++) ne[i] = i < d->n_dims ? pl_dim_value(&m->hp, d->ne[i]) : 1;
    const bool required = !(d->flags & (PL_TD_OPTIONAL | PL_TD_TIED));
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wformat-nonliteral"
    return pl_model_bind(m, dst, required, allowed_dtypes(d->role), d->n_dims, ne, d->name, layer);
#pragma GCC diagnostic pop
}

pl_status pl_arch_bind_tensors(pl_model *m, const pl_tensor_decl *table) {
    for (const pl_tensor_decl *d = table; d->name; d++) {
        if (d->flags & PL_TD_LAYER) continue;
        PL_TRY(bind_one(m, d, &m->globals[d->slot], 0));
        if ((d->flags & PL_TD_TIED) && !m->globals[d->slot]) m->globals[d->slot] = m->globals[PL_GW_TOK_EMBD];
    }
    for (int64_t l = 0; l < m->hp.n_layer; l++)
        for (const pl_tensor_decl *d = table; d->name; d++)
            if (d->flags & PL_TD_LAYER) PL_TRY(bind_one(m, d, &m->layers[l].t[d->slot], (int)l));
    return PL_OK;
}

static void visit_one(const pl_tensor_decl *d, const pl_hparams *hp, int layer,
                      bool (*keep)(void *, const pl_tensor_decl *), pl_tensor_visit_fn visit, void *user) {
    if (d->flags & PL_TD_UNWRITTEN) return;
    if ((d->flags & (PL_TD_OPTIONAL | PL_TD_TIED)) && !(keep && keep(user, d))) return;
    char name[128];
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wformat-nonliteral"
    snprintf(name, sizeof name, d->name, layer);
#pragma GCC diagnostic pop
    int64_t ne[3];
    for (int i = 0; i < 3; i++) ne[i] = i < d->n_dims ? pl_dim_value(hp, d->ne[i]) : 1;
    visit(user, d, name, ne);
}

void pl_arch_each_tensor(const pl_arch *a, const pl_hparams *hp, bool (*keep)(void *user, const pl_tensor_decl *d),
                         pl_tensor_visit_fn visit, void *user) {
    for (const pl_tensor_decl *d = a->tensors; d->name; d++)
        if (!(d->flags & (PL_TD_LAYER | PL_TD_TAIL))) visit_one(d, hp, 0, keep, visit, user);
    for (int64_t l = 0; l < hp->n_layer; l++)
        for (const pl_tensor_decl *d = a->tensors; d->name; d++)
            if (d->flags & PL_TD_LAYER) visit_one(d, hp, (int)l, keep, visit, user);
    for (const pl_tensor_decl *d = a->tensors; d->name; d++)
        if ((d->flags & PL_TD_TAIL) && !(d->flags & PL_TD_LAYER)) visit_one(d, hp, 0, keep, visit, user);
}

void pl_arch_preset_hparams(const pl_arch_preset *p, int64_t n_vocab, pl_hparams *hp) {
    memset(hp, 0, sizeof *hp);
    hp->n_vocab = n_vocab;
    hp->n_ctx_train = 40960;
    hp->n_embd = p->n_embd;
    hp->n_layer = p->n_layer;
    hp->n_ff = p->n_ff;
    hp->n_head = p->n_head;
    hp->n_head_kv = p->n_head_kv;
    hp->head_dim = p->head_dim;
    hp->n_rot = p->head_dim;
    hp->rms_eps = 1e-6f;
    hp->rope_base = 1000000.0f;
    hp->n_expert = p->n_expert;
    hp->n_expert_used = p->n_expert_used;
    hp->n_ff_exp = p->n_ff_exp;
}

const pl_arch *pl_arch_find_preset(const char *name, const pl_arch_preset **out) {
    for (const pl_arch *const *a = pl_archs(); *a; a++)
        for (const pl_arch_preset *p = (*a)->presets; p && p->name; p++)
            if (!strcasecmp(name, p->name)) {
                *out = p;
                return *a;
            }
    return NULL;
}

void pl_arch_each_hparam(const pl_arch *a, const pl_hparams *hp, pl_hparam_visit_fn visit, void *user) {
    for (const pl_hparam_decl *k = a->hparams; k && k->key; k++) {
        if (k->offset == PL_HK_NOT_WRITTEN) continue;
        char key[160];
        const char *p = strstr(k->key, "{arch}");
        if (p) snprintf(key, sizeof key, "%.*s%s%s", (int)(p - k->key), k->key, a->name, p + 6);
        else snprintf(key, sizeof key, "%s", k->key);
        const char *field = (const char *)hp + k->offset;
        int64_t i = 0;
        float f = 0;
        if (k->type == PL_HK_F32) memcpy(&f, field, sizeof f);
        else memcpy(&i, field, sizeof i);
        if (k->write_nonzero && i == 0 && f == 0) continue;
        visit(user, key, k->type == PL_HK_F32, i, f);
    }
}

void pl_arch_preset_names(char *buf, size_t cap) {
    size_t len = 0;
    buf[0] = 0;
    for (const pl_arch *const *a = pl_archs(); *a; a++)
        for (const pl_arch_preset *p = (*a)->presets; p && p->name; p++) {
            const pl_arch_preset *first = NULL;
            if (pl_arch_find_preset(p->name, &first) != *a || first != p) continue;   /* offered earlier */
            if (len < cap) len += (size_t)snprintf(buf + len, cap - len, "%s%s", len ? ", " : "", p->name);
        }
}
