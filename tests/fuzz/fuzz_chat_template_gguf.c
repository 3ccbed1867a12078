/* libFuzzer target: the chat-template renderer fed whole GGUF metadata. The
 * input is a GGUF file (seeds: small files holding real templates, see
 * tests/fuzz/make_chat_template_gguf_seeds.py). It is opened from memory and
 * its template loaded the way run --chat and serve load it
 * (pl_chat_template_from_gguf); bos_token / eos_token come from the file's
 * tokenizer the way pl_chat_apply_template takes them (the vocabulary's
 * pieces), or, when the file has no loadable tokenizer, from
 * tokenizer.ggml.tokens at the bos/eos ids as the CLI reads them. Then a few
 * fixed conversations are rendered. Everything must fail cleanly or
 * succeed within the renderer's limits; a violated invariant traps:
 *   - the template handed out lies inside the input;
 *   - a template with a NUL byte is refused, others parse or fail with a
 *     message;
 *   - a rendered text is NUL-terminated at its length. */
#include "chat/chat_template.h"
#include "core/status.h"
#include "gguf/gguf.h"
#include "tokenizer/tokenizer.h"
#include <jansson.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#define REQUIRE(c) do { if (!(c)) __builtin_trap(); } while (0)

static const char *const conversations[] = {
    "[{\"role\": \"user\", \"content\": \"hi\"}]",
    "[{\"role\": \"system\", \"content\": \"be brief\"}, {\"role\": \"user\", \"content\": \"hi <|im_end|>\"},"
    " {\"role\": \"assistant\", \"content\": \"<think>\\nhm\\n</think>\\n\\nhello\"},"
    " {\"role\": \"user\", \"content\": \"again \\u00e9\\u4e2d\"}]",
    "[{\"role\": \"user\", \"content\": \"weather?\"}, {\"role\": \"assistant\", \"content\": \"\","
    " \"tool_calls\": [{\"type\": \"function\", \"function\": {\"name\": \"get\", \"arguments\": {\"city\": \"Paris\"}}}]},"
    " {\"role\": \"tool\", \"content\": \"sunny\"}]",
};

static const char tools[] =
    "[{\"type\": \"function\", \"function\": {\"name\": \"get\", \"description\": \"weather\","
    " \"parameters\": {\"type\": \"object\", \"properties\": {\"city\": {\"type\": \"string\"}}}}}]";

/* A token's text: the vocabulary's piece (control tokens as text), else the
 * raw string of tokenizer.ggml.tokens. "" when there is none. */
static json_t *token_text(const pl_gguf *g, const pl_vocab *v, const char *key) {
    int64_t id;
    if (pl_gguf_get_i64(g, key, &id) != PL_OK || id < 0 || id > INT32_MAX) return json_string("");
    if (v) {
        char buf[256];
        size_t len = 0;
        if (pl_vocab_piece(v, (int32_t)id, true, buf, sizeof buf, &len) == PL_OK && len <= sizeof buf)
            return json_stringn(buf, len);
        return json_string("");
    }
    pl_gguf_str s;
    if (pl_gguf_arr_str(g, "tokenizer.ggml.tokens", (uint64_t)id, &s) != PL_OK || s.len > 256) return json_string("");
    json_t *j = json_stringn(s.ptr, s.len);   /* NULL for invalid UTF-8 */
    return j ? j : json_string("");
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    pl_gguf *g = NULL;
    if (pl_gguf_open_memory(data, size, "fuzz", &g) != PL_OK) return 0;
    const char *text = NULL;
    size_t len = 0;
    pl_chat_template *t = NULL;
    pl_status st = pl_chat_template_from_gguf(g, &text, &len, &t);
    if (text) {
        REQUIRE((const uint8_t *)text >= data && (const uint8_t *)text + len <= data + size);
        if (memchr(text, 0, len)) REQUIRE(st == PL_ERR_FORMAT);
    }
    REQUIRE((st == PL_OK) == (t != NULL));
    if (st != PL_OK) REQUIRE(pl_last_error()[0] != 0);
    if (!t) {
        pl_gguf_close(g);
        return 0;
    }
    pl_vocab *v = NULL;
    if (pl_vocab_load(g, &v) != PL_OK) v = NULL;
    json_t *bos = token_text(g, v, "tokenizer.ggml.bos_token_id");
    json_t *eos = token_text(g, v, "tokenizer.ggml.eos_token_id");
    pl_chat_template_options opts = {0};
    opts.max_output = 1 << 20;
    opts.max_iterations = 100000;
    opts.max_steps = 1000000;
    opts.max_alloc = 64 << 20;
    for (size_t i = 0; i < sizeof conversations / sizeof conversations[0]; i++) {
        json_t *ctx = json_object();
        json_object_set_new(ctx, "messages", json_loads(conversations[i], 0, NULL));
        json_object_set_new(ctx, "add_generation_prompt", json_boolean(i != 1));
        json_object_set_new(ctx, "enable_thinking", json_boolean(i == 1));
        json_object_set(ctx, "bos_token", bos);
        json_object_set(ctx, "eos_token", eos);
        if (i == 2) json_object_set_new(ctx, "tools", json_loads(tools, 0, NULL));
        char *out = NULL;
        size_t n = 0;
        if (pl_chat_template_render(t, ctx, &opts, &out, &n) == PL_OK) {
            REQUIRE(out && out[n] == 0);
            free(out);
        } else {
            REQUIRE(!out && pl_last_error()[0] != 0);
        }
        json_decref(ctx);
    }
    json_decref(bos);
    json_decref(eos);
    pl_vocab_free(v);
    pl_chat_template_free(t);
    pl_gguf_close(g);
    return 0;
}
