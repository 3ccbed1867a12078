/*
 * The per-node observer (pl_model_set_observer) on a mixture of experts: every
 * expert-indexed matmul (qwen3moe's ffn_{gate,up,down}_exps) is reported as
 * "matmul_id" with its weight, its input rows and the routed expert ids
 * (what `pocketllm imatrix` sums per expert). Checked independently of the
 * engine: the ids are the top-k of the router logits recomputed here from the
 * router's input (the ffn_gate_inp matmul's rows) and its f32 weight read
 * from the file; gate_exps reads exactly those rows; gate, up and down of a
 * layer share the routing; other nodes report no ids. On ref and cpu.
 */
#include "testutil.h"
#include "pocketllm.h"
#include "gguf/gguf.h"
#include <math.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

enum { N_TOK = 20, N_EMBD = 256, N_EXPERT = 8, K = 2, N_LAYER = 2, N_FF_EXP = 128 };

typedef struct moe_seen {
    const float *router[N_LAYER];          /* ffn_gate_inp weight [N_EMBD, N_EXPERT] (from the file) */
    float h[N_LAYER][N_TOK][N_EMBD];       /* the router matmul's input rows */
    bool have_h[N_LAYER];
    int32_t ids[N_LAYER][3][N_TOK][K];     /* gate, up, down */
    int n_matmul_id, n_other_with_ids, bad_shape, bad_ids, bad_topk, bad_rows;
} moe_seen;

static int layer_of(const char *w) { return (int)strtol(w + 4, NULL, 10); }

static void observe(void *user, const pl_node_info *nd) {
    moe_seen *s = user;
    if (!strcmp(nd->op, "matmul")) {
        if (nd->ids || nd->n_expert) s->n_other_with_ids++;
        if (nd->weight && strstr(nd->weight, "ffn_gate_inp") && nd->input && nd->ne[1] == N_TOK) {
            const int l = layer_of(nd->weight);
            for (int t = 0; t < N_TOK; t++)
                memcpy(s->h[l][t], (const char *)nd->input + t * nd->nb[1], N_EMBD * sizeof(float));
            s->have_h[l] = true;
        }
        return;
    }
    if (strcmp(nd->op, "matmul_id")) {
        if (nd->ids || nd->n_expert || nd->weight || nd->input) s->n_other_with_ids++;
        return;
    }
    s->n_matmul_id++;
    if (!nd->weight || !nd->input || !nd->ids || strncmp(nd->weight, "blk.", 4)) {
        s->bad_shape++;
        return;
    }
    const int l = layer_of(nd->weight);
    const int which = strstr(nd->weight, "ffn_gate_exps") ? 0 : strstr(nd->weight, "ffn_up_exps") ? 1
                      : strstr(nd->weight, "ffn_down_exps") ? 2 : -1;
    /* input [cols, 1 (gate/up: h shared by the slots) or K (down), N_TOK]; ids [K, N_TOK] */
    const int64_t cols = which == 2 ? N_FF_EXP : N_EMBD, n_x = which == 2 ? K : 1;
    if (l < 0 || l >= N_LAYER || which < 0 || nd->n_expert != N_EXPERT || nd->ne[0] != cols || nd->ne[1] != n_x ||
        nd->ne[2] != N_TOK || nd->ne[3] != 1 || nd->ids_ne[0] != K || nd->ids_ne[1] != N_TOK ||
        nd->ids_nb[0] != sizeof(int32_t)) {
        s->bad_shape++;
        return;
    }
    for (int t = 0; t < N_TOK; t++)
        for (int j = 0; j < K; j++) {
            const int32_t e = *(const int32_t *)((const char *)nd->ids + j * nd->ids_nb[0] + t * nd->ids_nb[1]);
            if (e < 0 || e >= N_EXPERT) s->bad_ids++;
            s->ids[l][which][t][j] = e;
        }
    if (which != 0 || !s->have_h[l]) return;
    for (int t = 0; t < N_TOK; t++) {
        /* gate_exps reads the router's rows */
        const float *x = (const float *)((const char *)nd->input + t * nd->nb[2]);
        if (memcmp(x, s->h[l][t], N_EMBD * sizeof(float))) s->bad_rows++;
        /* the routed experts are the router's top K (softmax keeps the order) */
        double logit[N_EXPERT];
        for (int e = 0; e < N_EXPERT; e++) {
            double acc = 0;
            for (int i = 0; i < N_EMBD; i++) acc += (double)s->router[l][e * N_EMBD + i] * s->h[l][t][i];
            logit[e] = acc;
        }
        const int32_t *id = s->ids[l][0][t];
        if (id[0] == id[1]) s->bad_topk++;
        for (int e = 0; e < N_EXPERT; e++) {
            if (e == id[0] || e == id[1]) continue;
            for (int j = 0; j < K; j++)
                if (logit[e] > logit[id[j]] + 1e-4) s->bad_topk++;
        }
        if (logit[id[1]] > logit[id[0]] + 1e-4) s->bad_topk++;
    }
}

static void test_device(const char *device, pl_gguf *g) {
    pl_model_params mp = pl_model_default_params();
    mp.device = device;
    mp.n_ctx = 64;
    mp.n_batch = 32;
    mp.n_outputs = 32;
    mp.n_threads = 2;
    pl_model *m = NULL;
    CHECK(pl_model_load(pl_fixture("models/tiny-qwen3moe-f16.gguf"), &mp, &m) == PL_OK, "%s", pl_last_error());
    if (!m) return;
    moe_seen *s = calloc(1, sizeof *s);
    char name[64];
    for (int l = 0; l < N_LAYER; l++) {
        snprintf(name, sizeof name, "blk.%d.ffn_gate_inp.weight", l);
        const pl_gguf_tensor *r = pl_gguf_find_tensor(g, name);
        CHECK(r && r->dtype == PL_F32 && r->ne[0] == N_EMBD && r->ne[1] == N_EXPERT, "%s", name);
        s->router[l] = r ? r->data : NULL;
    }
    int32_t tok[N_TOK], pos[N_TOK];
    bool want[N_TOK];
    for (int i = 0; i < N_TOK; i++) {
        tok[i] = 50 + 37 * i;
        pos[i] = i;
        want[i] = true;
    }
    float *logits = malloc((size_t)N_TOK * (size_t)pl_model_n_vocab(m) * sizeof *logits);
    pl_batch b = {N_TOK, tok, pos, NULL, want};
    if (s->router[0] && s->router[1]) {
        CHECK(pl_model_set_observer(m, observe, s) == PL_OK, "set");
        CHECK(pl_model_forward(m, &b, logits) == PL_OK, "%s", pl_last_error());
        CHECK(s->n_matmul_id == 3 * N_LAYER, "%s: %d matmul_id nodes", device, s->n_matmul_id);
        CHECK(s->have_h[0] && s->have_h[1], "%s: router inputs seen", device);
        CHECK(!s->bad_shape && !s->bad_ids, "%s: %d bad shapes, %d bad ids", device, s->bad_shape, s->bad_ids);
        CHECK(!s->n_other_with_ids, "%s: %d other nodes report expert fields", device, s->n_other_with_ids);
        CHECK(!s->bad_rows, "%s: %d gate_exps rows differ from the router's input", device, s->bad_rows);
        CHECK(!s->bad_topk, "%s: %d routed ids are not the router's top %d", device, s->bad_topk, K);
        int same = 1;
        for (int l = 0; l < N_LAYER; l++)
            same &= !memcmp(s->ids[l][0], s->ids[l][1], sizeof s->ids[l][0]) &&
                    !memcmp(s->ids[l][0], s->ids[l][2], sizeof s->ids[l][0]);
        CHECK(same, "%s: gate, up and down of a layer report the same routing", device);
    }
    pl_model_set_observer(m, NULL, NULL);
    free(logits);
    free(s);
    pl_model_free(m);
}

int main(void) {
    pl_gguf *g = NULL;
    CHECK(pl_gguf_open(pl_fixture("models/tiny-qwen3moe-f16.gguf"), &g) == PL_OK, "%s", pl_last_error());
    if (g) {
        test_device("ref", g);
        test_device("cpu", g);
        pl_gguf_close(g);
    }
    return pl_test_summary("test_observer_moe");
}
