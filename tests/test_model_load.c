/*
 * Model-level validation: files that are valid GGUF but whose contents do not
 * make a model (shapes against hyperparameters, missing tensors, unknown
 * architecture, bad tokenizer arrays, memory budget), and the forward API's
 * argument checks. Each case is a rewritten copy of the tiny f32 fixture and
 * must fail with its own message, never crash.
 */
#include "testutil.h"
#include "pocketllm.h"
#include "gguf/gguf.h"
#include "gguf/gguf_write.h"
#include "gguf_rewrite.h"
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

typedef pl_rewrite_edit_fn edit_fn;

static const char *SRC = "models/tiny-qwen3-f32.gguf";  /* the llama cases switch it */
static char tmp_path[256];

/* Same bytes reinterpreted as f16 with a doubled row: a norm in f16. */
static void write_as_f16(pl_gguf_writer *w, const pl_gguf_tensor *t) {
    int64_t ne[4] = {t->ne[0] * 2, t->ne[1], t->ne[2], t->ne[3]};
    pl_gguf_writer_add_tensor(w, t->name, PL_F16, t->n_dims, ne, t->data, t->size);
}

/* Copies SRC into tmp_path, skipping KV `drop_key` and tensor `drop_tensor`,
 * then lets edit add or override things; retype_tensor is written as f16. */
static void rewrite(const char *drop_key, const char *drop_tensor, edit_fn edit, const char *retype_tensor) {
    pl_rewrite_fixture(SRC, tmp_path, drop_key, drop_tensor, edit, retype_tensor, write_as_f16);
}

static void set_embd_255(pl_gguf_writer *w, const pl_gguf *g) {
    pl_gguf_writer_remove_key(w, "qwen3.embedding_length");
    pl_gguf_writer_add_u32(w, "qwen3.embedding_length", 255);
}
static void set_heads_3(pl_gguf_writer *w, const pl_gguf *g) {
    pl_gguf_writer_remove_key(w, "qwen3.attention.head_count");
    pl_gguf_writer_add_u32(w, "qwen3.attention.head_count", 3);
}
static void set_layers_3(pl_gguf_writer *w, const pl_gguf *g) {
    pl_gguf_writer_remove_key(w, "qwen3.block_count");
    pl_gguf_writer_add_u32(w, "qwen3.block_count", 3);
}
static void set_layers_huge(pl_gguf_writer *w, const pl_gguf *g) {
    pl_gguf_writer_remove_key(w, "qwen3.block_count");
    pl_gguf_writer_add_u32(w, "qwen3.block_count", 4000000000u);
}
static void set_arch_foo(pl_gguf_writer *w, const pl_gguf *g) {
    pl_gguf_writer_remove_key(w, "general.architecture");
    pl_gguf_writer_add_str(w, "general.architecture", "foo");
}
static void set_embd_string(pl_gguf_writer *w, const pl_gguf *g) {
    pl_gguf_writer_remove_key(w, "qwen3.embedding_length");
    pl_gguf_writer_add_str(w, "qwen3.embedding_length", "256");
}
static void set_types_short(pl_gguf_writer *w, const pl_gguf *g) {
    pl_gguf_writer_remove_key(w, "tokenizer.ggml.token_type");
    int32_t types[10] = {1, 1, 1, 1, 1, 1, 1, 1, 1, 1};
    pl_gguf_writer_add_arr(w, "tokenizer.ggml.token_type", PL_GGUF_INT32, types, 10);
}
static void set_bos_oob(pl_gguf_writer *w, const pl_gguf *g) {
    pl_gguf_writer_remove_key(w, "tokenizer.ggml.bos_token_id");
    pl_gguf_writer_add_u32(w, "tokenizer.ggml.bos_token_id", 999999);
}
static void set_eps_bad(pl_gguf_writer *w, const pl_gguf *g) {
    pl_gguf_writer_remove_key(w, "qwen3.attention.layer_norm_rms_epsilon");
    pl_gguf_writer_add_f32(w, "qwen3.attention.layer_norm_rms_epsilon", -1.0f);
}

/* llama (src/models/llama.c): what it does not support yet is refused by name. */
static void set_rope_yarn(pl_gguf_writer *w, const pl_gguf *g) {
    (void)g;
    pl_gguf_writer_add_str(w, "llama.rope.scaling.type", "yarn");
}
static void set_rope_linear(pl_gguf_writer *w, const pl_gguf *g) {
    (void)g;
    pl_gguf_writer_add_str(w, "llama.rope.scaling.type", "linear");
    pl_gguf_writer_add_f32(w, "llama.rope.scaling.factor", 2.0f);
}
/* llama3 frequency factors: F32 [n_rot/2] = [32] for tiny-llama (head_dim 64) */
static float g_rope_freqs[64];
static void add_rope_freqs(pl_gguf_writer *w, const pl_gguf *g) {
    (void)g;
    for (int i = 0; i < 32; i++) g_rope_freqs[i] = 1.0f + (float)i;
    pl_gguf_writer_add_tensor(w, "rope_freqs.weight", PL_F32, 1, (int64_t[]){32, 1, 1, 1}, g_rope_freqs,
                              32 * sizeof(float));
}
static void add_rope_freqs_long(pl_gguf_writer *w, const pl_gguf *g) {
    (void)g;
    for (int i = 0; i < 64; i++) g_rope_freqs[i] = 1.0f;
    pl_gguf_writer_add_tensor(w, "rope_freqs.weight", PL_F32, 1, (int64_t[]){64, 1, 1, 1}, g_rope_freqs,
                              sizeof g_rope_freqs);
}
static void add_rope_freqs_f16(pl_gguf_writer *w, const pl_gguf *g) {
    (void)g;
    memset(g_rope_freqs, 0x3c, sizeof g_rope_freqs);   /* f16 0x3c3c ~ 1.06 */
    pl_gguf_writer_add_tensor(w, "rope_freqs.weight", PL_F16, 1, (int64_t[]){32, 1, 1, 1}, g_rope_freqs,
                              32 * 2);
}
static void add_rope_freqs_zero(pl_gguf_writer *w, const pl_gguf *g) {
    (void)g;
    for (int i = 0; i < 32; i++) g_rope_freqs[i] = i == 7 ? 0.0f : 1.0f;
    pl_gguf_writer_add_tensor(w, "rope_freqs.weight", PL_F32, 1, (int64_t[]){32, 1, 1, 1}, g_rope_freqs,
                              32 * sizeof(float));
}
static float g_bias[256];
static void add_q_bias_only(pl_gguf_writer *w, const pl_gguf *g) {
    (void)g;
    pl_gguf_writer_add_tensor(w, "blk.0.attn_q.bias", PL_F32, 1, (int64_t[]){256, 1, 1, 1}, g_bias, sizeof g_bias);
}

/* qwen3moe (src/models/qwen3moe.c): expert counts that disagree with each
 * other or with the tensors are refused, naming the key or tensor. */
static void set_moe_u32(pl_gguf_writer *w, const char *key, uint32_t v) {
    pl_gguf_writer_remove_key(w, key);
    pl_gguf_writer_add_u32(w, key, v);
}
static void moe_used_9(pl_gguf_writer *w, const pl_gguf *g) { (void)g; set_moe_u32(w, "qwen3moe.expert_used_count", 9); }
static void moe_used_0(pl_gguf_writer *w, const pl_gguf *g) { (void)g; set_moe_u32(w, "qwen3moe.expert_used_count", 0); }
static void moe_count_4(pl_gguf_writer *w, const pl_gguf *g) { (void)g; set_moe_u32(w, "qwen3moe.expert_count", 4); }
static void moe_count_16(pl_gguf_writer *w, const pl_gguf *g) { (void)g; set_moe_u32(w, "qwen3moe.expert_count", 16); }
static void moe_ff_64(pl_gguf_writer *w, const pl_gguf *g) {
    (void)g;
    set_moe_u32(w, "qwen3moe.expert_feed_forward_length", 64);
}
/* no expert_feed_forward_length: llama.cpp derives feed_forward_length / expert_used_count */
static void moe_ff_derived(pl_gguf_writer *w, const pl_gguf *g) {
    (void)g;
    set_moe_u32(w, "qwen3moe.feed_forward_length", 256);   /* 256 / 2 used = the fixture's 128 */
}
static void moe_w_scale(pl_gguf_writer *w, const pl_gguf *g) {
    (void)g;
    pl_gguf_writer_add_f32(w, "qwen3moe.expert_weights_scale", 2.5f);
}
/* blk.1.ffn_down_exps with its first 4 of 8 experts only */
static void moe_down_4(pl_gguf_writer *w, const pl_gguf *g) {
    const pl_gguf_tensor *t = pl_gguf_find_tensor(g, "blk.1.ffn_down_exps.weight");
    if (!t) return;
    int64_t ne[4] = {t->ne[0], t->ne[1], 4, 1};
    pl_gguf_writer_add_tensor(w, t->name, t->dtype, 3, ne, t->data, t->size / 2);
}
/* blk.0.ffn_up_exps as [2 E, Fx / 2, X]: the same bytes, a wrong shape */
static void moe_up_reshaped(pl_gguf_writer *w, const pl_gguf *g) {
    const pl_gguf_tensor *t = pl_gguf_find_tensor(g, "blk.0.ffn_up_exps.weight");
    if (!t) return;
    int64_t ne[4] = {t->ne[0] * 2, t->ne[1] / 2, t->ne[2], 1};
    pl_gguf_writer_add_tensor(w, t->name, t->dtype, 3, ne, t->data, t->size);
}

static void expect_load_error(const char *what, pl_status want, const char *phrase) {
    pl_expect_load_error(tmp_path, what, want, phrase);
}

static void api_checks(void) {
    pl_model *m = NULL;
    pl_model_params p = pl_model_default_params();
    p.device = "ref";
    p.n_ctx = 16;
    pl_status st = pl_model_load(pl_fixture(SRC), &p, &m);
    CHECK(st == PL_OK, "load: %s", pl_last_error());
    if (st != PL_OK) return;
    float *logits = malloc((size_t)pl_model_n_vocab(m) * sizeof(float));
    int32_t tok = 99999999, pos = 0, seq = 0;
    bool want = true;
    pl_batch b = {1, &tok, &pos, &seq, &want};
    CHECK(pl_model_forward(m, &b, logits) == PL_ERR_INVALID_ARG, "token out of range accepted");
    tok = 5;
    seq = 7;
    CHECK(pl_model_forward(m, &b, logits) == PL_ERR_INVALID_ARG, "slot out of range accepted");
    seq = 0;
    pos = 16;
    CHECK(pl_model_forward(m, &b, logits) == PL_ERR_CONTEXT_FULL, "position past context accepted");
    pos = -1;
    CHECK(pl_model_forward(m, &b, logits) == PL_ERR_CONTEXT_FULL, "negative position accepted");
    b.n = 0;
    CHECK(pl_model_forward(m, &b, logits) == PL_ERR_INVALID_ARG, "empty batch accepted");

    pl_session *s = NULL, *s2 = NULL;
    CHECK(pl_session_create(m, &s) == PL_OK, "session");
    CHECK(pl_session_create(m, &s2) == PL_ERR_INVALID_ARG, "second session on a 1-slot model");
    int32_t ids[17];
    for (int i = 0; i < 17; i++) ids[i] = i + 1;
    CHECK(pl_session_eval(s, ids, 17, logits) == PL_ERR_CONTEXT_FULL, "17 tokens in a 16-token context");
    CHECK(pl_session_eval(s, ids, 16, logits) == PL_OK, "16 tokens: %s", pl_last_error());
    CHECK(pl_session_eval(s, ids, 1, logits) == PL_ERR_CONTEXT_FULL, "token past a full context");
    pl_session_free(s);
    free(logits);
    pl_model_free(m);

    /* The memory plan is checked against the budget before allocating. */
    p.memory_budget = 1 << 20;
    st = pl_model_load(pl_fixture(SRC), &p, &m);
    CHECK(st == PL_ERR_DOES_NOT_FIT, "1 MiB budget accepted (%d)", st);
    CHECK(strstr(pl_last_error(), "budget") != NULL, "budget message: %s", pl_last_error());
    printf("  %-28s -> %s\n", "1 MiB budget", pl_last_error());
}

int main(void) {
    snprintf(tmp_path, sizeof tmp_path, "/tmp/pl_test_model_%d.gguf", (int)getpid());
    rewrite("qwen3.embedding_length", NULL, set_embd_255, NULL);
    expect_load_error("embedding_length 255", PL_ERR_FORMAT, "but the hyperparameters say");
    rewrite("qwen3.attention.head_count", NULL, set_heads_3, NULL);
    expect_load_error("head_count 3", PL_ERR_FORMAT, "head_count");
    rewrite(NULL, NULL, set_layers_3, NULL);
    expect_load_error("block_count 3", PL_ERR_FORMAT, "missing tensor 'blk.2.");
    rewrite(NULL, NULL, set_layers_huge, NULL);
    expect_load_error("block_count 4e9", PL_ERR_FORMAT, "block_count");
    rewrite(NULL, "blk.1.ffn_up.weight", NULL, NULL);
    expect_load_error("missing ffn_up", PL_ERR_FORMAT, "missing tensor 'blk.1.ffn_up.weight'");
    rewrite("qwen3.block_count", NULL, NULL, NULL);
    expect_load_error("no block_count", PL_ERR_FORMAT, "missing hyperparameter 'qwen3.block_count'");
    rewrite(NULL, NULL, set_arch_foo, NULL);
    expect_load_error("architecture foo", PL_ERR_UNSUPPORTED, "architecture 'foo'");
    rewrite("general.architecture", NULL, NULL, NULL);
    expect_load_error("no architecture", PL_ERR_FORMAT, "general.architecture");
    rewrite(NULL, NULL, set_embd_string, NULL);
    expect_load_error("embedding_length string", PL_ERR_FORMAT, "embedding_length");
    rewrite(NULL, NULL, set_types_short, NULL);
    expect_load_error("token_type too short", PL_ERR_FORMAT, "token_type");
    rewrite(NULL, NULL, set_bos_oob, NULL);
    expect_load_error("bos id out of range", PL_ERR_FORMAT, "bos");
    rewrite(NULL, NULL, set_eps_bad, NULL);
    expect_load_error("negative rms epsilon", PL_ERR_FORMAT, "epsilon");
    rewrite(NULL, NULL, NULL, "blk.0.attn_norm.weight");
    expect_load_error("f16 norm with 2x row", PL_ERR_FORMAT, "attn_norm");
    rewrite(NULL, "token_embd.weight", NULL, NULL);
    expect_load_error("no token_embd", PL_ERR_FORMAT, "token_embd.weight");

    SRC = "models/tiny-llama-f16.gguf";
    rewrite(NULL, NULL, set_rope_yarn, NULL);
    expect_load_error("llama rope scaling yarn", PL_ERR_UNSUPPORTED, "llama.rope.scaling.type = 'yarn'");
    rewrite(NULL, NULL, add_rope_freqs_long, NULL);
    expect_load_error("llama3 rope_freqs [n_rot]", PL_ERR_FORMAT, "tensor 'rope_freqs.weight' has shape [64");
    rewrite(NULL, NULL, add_rope_freqs_f16, NULL);
    expect_load_error("llama3 rope_freqs f16", PL_ERR_UNSUPPORTED, "tensor 'rope_freqs.weight' has type f16");
    rewrite(NULL, NULL, add_rope_freqs_zero, NULL);
    expect_load_error("llama3 rope_freqs zero", PL_ERR_FORMAT, "rope_freqs.weight[7] = 0");
    rewrite(NULL, NULL, add_rope_freqs, NULL);
    {
        /* a well-formed rope_freqs.weight loads (its effect: tiny-llama3's goldens) */
        pl_model *m = NULL;
        pl_model_params p = pl_model_default_params();
        p.device = "ref";
        p.n_ctx = 64;
        pl_status st = pl_model_load(tmp_path, &p, &m);
        CHECK(st == PL_OK, "llama with rope_freqs.weight loads: %s", pl_last_error());
        pl_model_free(m);
    }
    rewrite(NULL, NULL, add_q_bias_only, NULL);
    expect_load_error("llama q bias without k/v", PL_ERR_FORMAT, "some of attn_q/k/v.bias");
    rewrite(NULL, "blk.1.attn_v.weight", NULL, NULL);
    expect_load_error("llama missing attn_v", PL_ERR_FORMAT, "missing tensor 'blk.1.attn_v.weight'");
    rewrite(NULL, NULL, set_rope_linear, NULL);
    {
        pl_model *m = NULL;
        pl_model_params p = pl_model_default_params();
        p.device = "ref";
        p.n_ctx = 64;
        pl_status st = pl_model_load(tmp_path, &p, &m);
        CHECK(st == PL_OK, "llama with linear rope scaling loads: %s", pl_last_error());
        pl_model_free(m);
    }
    SRC = "models/tiny-qwen3moe-f16.gguf";
    rewrite(NULL, NULL, moe_used_9, NULL);
    expect_load_error("moe used 9 of 8", PL_ERR_FORMAT, "qwen3moe.expert_used_count = 9");
    rewrite(NULL, NULL, moe_used_0, NULL);
    expect_load_error("moe used 0", PL_ERR_FORMAT, "qwen3moe.expert_used_count = 0");
    rewrite(NULL, NULL, moe_count_4, NULL);
    expect_load_error("moe count 4 vs tensors", PL_ERR_FORMAT, "'blk.0.ffn_gate_inp.weight' holds 8 experts");
    rewrite(NULL, NULL, moe_count_16, NULL);
    expect_load_error("moe count 16 vs tensors", PL_ERR_FORMAT, "qwen3moe.expert_count = 16");
    rewrite("qwen3moe.expert_count", NULL, NULL, NULL);
    expect_load_error("moe no expert_count", PL_ERR_FORMAT, "missing hyperparameter 'qwen3moe.expert_count'");
    rewrite(NULL, NULL, moe_ff_64, NULL);
    expect_load_error("moe expert ff 64", PL_ERR_FORMAT, "'blk.0.ffn_gate_exps.weight' has shape");
    rewrite(NULL, "blk.1.ffn_down_exps.weight", moe_down_4, NULL);
    expect_load_error("moe down with 4 experts", PL_ERR_FORMAT, "'blk.1.ffn_down_exps.weight' holds 4 experts");
    rewrite(NULL, "blk.0.ffn_up_exps.weight", moe_up_reshaped, NULL);
    expect_load_error("moe up of a wrong shape", PL_ERR_FORMAT, "'blk.0.ffn_up_exps.weight' has shape");
    rewrite("qwen3moe.expert_feed_forward_length", NULL, NULL, NULL);   /* derived: 768 / 2 */
    expect_load_error("moe expert ff derived 768/2", PL_ERR_FORMAT, "'blk.0.ffn_gate_exps.weight' has shape");
    rewrite(NULL, NULL, moe_w_scale, NULL);
    expect_load_error("moe expert_weights_scale", PL_ERR_UNSUPPORTED, "qwen3moe.expert_weights_scale = 2.5");
    rewrite("qwen3moe.expert_feed_forward_length", NULL, moe_ff_derived, NULL);
    {
        pl_model *m = NULL;
        pl_model_params p = pl_model_default_params();
        p.device = "ref";
        p.n_ctx = 64;
        pl_status st = pl_model_load(tmp_path, &p, &m);
        CHECK(st == PL_OK, "moe without expert_feed_forward_length, feed_forward_length 256 / 2 used: %s",
              pl_last_error());
        pl_model_free(m);
    }
    rewrite(NULL, "blk.1.ffn_gate_inp.weight", NULL, NULL);
    expect_load_error("moe no router", PL_ERR_FORMAT, "missing tensor 'blk.1.ffn_gate_inp.weight'");
    rewrite(NULL, NULL, NULL, NULL);
    {
        pl_model *m = NULL;
        pl_model_params p = pl_model_default_params();
        p.device = "ref";
        p.n_ctx = 64;
        pl_status st = pl_model_load(tmp_path, &p, &m);
        CHECK(st == PL_OK, "an unchanged copy of the moe fixture loads: %s", pl_last_error());
        pl_model_free(m);
    }
    SRC = "models/tiny-qwen3-f32.gguf";
    unlink(tmp_path);
    api_checks();
    return pl_test_summary("test_model_load");
}
