/*
 * The architecture declarations (src/models/arch_table.h) against the two
 * things derived from them: for every architecture, a file written by
 * walking its table (as synth and fit's presets do) loads, and the same file
 * with any one required tensor left out, or with its first dimension wrong,
 * is refused with a message naming that tensor -- so the binder enforces
 * every row the writer emits, and neither can drift from the other. Also the
 * tables' own invariants (one %d per per-layer name, slots in range and not
 * shared, every key under "{arch}.").
 */
#include "testutil.h"
#include "pocketllm.h"
#include "gguf/gguf.h"
#include "gguf/gguf_write.h"
#include "models/arch_table.h"
#include <stdio.h>
#include <string.h>
#include <unistd.h>

static void check_table(const pl_arch *a) {
    CHECK(a->tensors && a->hparams, "%s has no tables", a->name);
    if (!a->tensors || !a->hparams) return;
    bool layer_used[PL_LAYER_SLOTS] = {0}, global_used[PL_GLOBAL_SLOTS] = {0}, has_embd = false;
    for (const pl_tensor_decl *d = a->tensors; d->name; d++) {
        const bool per_layer = d->flags & PL_TD_LAYER;
        const char *pct = strchr(d->name, '%');
        if (per_layer)
            CHECK(pct && !strncmp(pct, "%d", 2) && !strchr(pct + 1, '%'), "%s: '%s' needs exactly one %%d", a->name,
                  d->name);
        else CHECK(!pct, "%s: global '%s' has a %%", a->name, d->name);
        CHECK(d->n_dims >= 1 && d->n_dims <= 3, "%s: '%s' has %d dims", a->name, d->name, d->n_dims);
        const int cap = per_layer ? PL_LAYER_SLOTS : PL_GLOBAL_SLOTS;
        CHECK(d->slot >= 0 && d->slot < cap, "%s: '%s' slot %d out of range", a->name, d->name, d->slot);
        if (d->slot < 0 || d->slot >= cap) continue;
        bool *used = per_layer ? &layer_used[d->slot] : &global_used[d->slot];
        CHECK(!*used, "%s: slot %d of '%s' is shared", a->name, d->slot, d->name);
        *used = true;
        if (!per_layer && d->slot == PL_GW_TOK_EMBD) has_embd = d->role == PL_TR_EMBD;
    }
    CHECK(has_embd, "%s: no token embedding in globals[PL_GW_TOK_EMBD]", a->name);
    for (const pl_hparam_decl *k = a->hparams; k->key; k++)
        CHECK(!strncmp(k->key, "{arch}.", 7), "%s: key '%s' is not under {arch}.", a->name, k->key);
}

/* ---- writing a file from the table, with one tensor dropped or misshapen ----*/

typedef struct writer {
    pl_gguf_writer *w;
    const char *drop;     /* name of the tensor to leave out, or NULL */
    const char *widen;    /* name of the tensor whose ne[0] is doubled, or NULL */
} writer;

static pl_status zero_fill(void *user, const char *name, void *dst, uint64_t size) {
    (void)user, (void)name, (void)dst, (void)size;   /* the writer hands a zeroed buffer */
    return PL_OK;
}

static void add_tensor(void *user, const pl_tensor_decl *d, const char *name, const int64_t ne[3]) {
    writer *wr = user;
    if (wr->drop && !strcmp(name, wr->drop)) return;
    int64_t shape[3] = {ne[0], ne[1], ne[2]};
    if (wr->widen && !strcmp(name, wr->widen)) shape[0] *= 2;
    pl_gguf_writer_add_tensor_fill(wr->w, name, PL_F32, (uint32_t)d->n_dims, shape, zero_fill, NULL);
}

static void add_key(void *user, const char *key, bool is_float, int64_t i, float f) {
    if (is_float) pl_gguf_writer_add_f32(user, key, f);
    else pl_gguf_writer_add_u32(user, key, (uint32_t)i);
}

static bool write_file(const pl_arch *a, const pl_hparams *hp, const pl_gguf *vocab, const char *drop,
                       const char *widen, const char *path) {
    writer wr = {NULL, drop, widen};
    if (pl_gguf_writer_create(&wr.w) != PL_OK) return false;
    pl_gguf_writer_add_str(wr.w, "general.architecture", a->name);
    pl_arch_each_hparam(a, hp, add_key, wr.w);
    for (int64_t i = 0; i < pl_gguf_n_kv(vocab); i++) {
        pl_gguf_str k = pl_gguf_kv_key(vocab, i);
        if (k.len > 10 && !memcmp(k.ptr, "tokenizer.", 10)) pl_gguf_writer_copy_kv(wr.w, vocab, i);
    }
    pl_arch_each_tensor(a, hp, NULL, add_tensor, &wr);   /* required tensors only: tied, no extras */
    const bool ok = pl_gguf_writer_write_file(wr.w, path) == PL_OK;
    pl_gguf_writer_free(wr.w);
    return ok;
}

static pl_status load(const char *path) {
    pl_model_params p = pl_model_default_params();
    p.device = "ref";
    p.n_ctx = 32;
    p.n_threads = 1;
    pl_model *m = NULL;
    pl_status st = pl_model_load(path, &p, &m);
    if (m) pl_model_free(m);
    return st;
}

/* Collects the names of the required tensors of the last layer and the globals. */
typedef struct names {
    char name[64][128];
    int n;
    int64_t n_layer;
} names;

static void collect(void *user, const pl_tensor_decl *d, const char *name, const int64_t ne[3]) {
    names *nm = user;
    (void)ne;
    char last[32];
    snprintf(last, sizeof last, ".%lld.", (long long)(nm->n_layer - 1));
    if ((d->flags & PL_TD_LAYER) && !strstr(name, last)) return;
    if (nm->n < 64) snprintf(nm->name[nm->n++], sizeof nm->name[0], "%s", name);
}

static void check_round_trip(const pl_arch *a, const pl_gguf *vocab, int64_t n_vocab, const char *path) {
    /* a tiny shape every architecture takes (toy: as many KV heads as heads, head size E/H) */
    const pl_arch_preset shape = {"test", 32, 2, 2, 2, 16, 48, true, 4, 2, 16};
    pl_hparams hp;
    pl_arch_preset_hparams(&shape, n_vocab, &hp);
    hp.n_swa = 4;   /* gemma3's window */
    CHECK(write_file(a, &hp, vocab, NULL, NULL, path), "%s: write", a->name);
    pl_status st = load(path);
    CHECK(st == PL_OK, "%s: a file written from its table does not load: %s", a->name, pl_last_error());
    if (st != PL_OK) return;
    names nm = {.n = 0, .n_layer = hp.n_layer};
    pl_arch_each_tensor(a, &hp, NULL, collect, &nm);
    CHECK(nm.n > 3, "%s: only %d tensors", a->name, nm.n);
    for (int i = 0; i < nm.n; i++) {
        char want[192];
        CHECK(write_file(a, &hp, vocab, nm.name[i], NULL, path), "%s: write without %s", a->name, nm.name[i]);
        st = load(path);
        snprintf(want, sizeof want, "missing tensor '%s'", nm.name[i]);
        CHECK(st != PL_OK && strstr(pl_last_error(), want), "%s without %s: status %d, '%s'", a->name, nm.name[i],
              (int)st, st != PL_OK ? pl_last_error() : "loaded");
        CHECK(write_file(a, &hp, vocab, NULL, nm.name[i], path), "%s: write widened %s", a->name, nm.name[i]);
        st = load(path);
        snprintf(want, sizeof want, "tensor '%s' has shape", nm.name[i]);
        CHECK(st != PL_OK && strstr(pl_last_error(), want), "%s with %s widened: status %d, '%s'", a->name,
              nm.name[i], (int)st, st != PL_OK ? pl_last_error() : "loaded");
    }
}

int main(void) {
    for (const pl_arch *const *a = pl_archs(); *a; a++) check_table(*a);

    pl_gguf *vocab = NULL;
    const pl_status vst = pl_gguf_open(pl_fixture("models/tiny-qwen3-f16.gguf"), &vocab);
    CHECK(vst == PL_OK, "open vocab: %s", pl_last_error());
    if (vst != PL_OK) return pl_test_summary("test_arch_table");
    pl_gguf_type et;
    uint64_t n_vocab = 0;
    const void *arr;
    CHECK(pl_gguf_get_arr(vocab, "tokenizer.ggml.tokens", &et, &n_vocab, &arr) == PL_OK, "vocab tokens");
    char path[64];
    snprintf(path, sizeof path, "/tmp/pl_test_arch_table_%d.gguf", (int)getpid());
    for (const pl_arch *const *a = pl_archs(); *a; a++)
        if ((*a)->synth || !strcmp((*a)->name, "toy")) check_round_trip(*a, vocab, (int64_t)n_vocab, path);
    unlink(path);
    pl_gguf_close(vocab);
    return pl_test_summary("test_arch_table");
}
