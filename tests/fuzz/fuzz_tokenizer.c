/*
 * libFuzzer target for the tokenizer.
 *
 * The vocabulary is loaded once, from $PL_FUZZ_VOCAB or, by default,
 * tests/fixtures/models/tiny-qwen3-f16.gguf relative to the working directory
 * (else the same fixture next to this source file). For every input, with
 * parse_special on and off:
 *   1. pl_vocab_tokenize succeeds and every id is in range;
 *   2. detokenizing (control tokens rendered) gives back exactly what
 *      llama.cpp's UTF-8 decoding makes of the input: the input itself when
 *      it is valid UTF-8, otherwise each bad byte replaced by U+FFFD (the
 *      tiny vocabulary has every byte token and every merge result, so no
 *      byte is ever dropped);
 *   3. streaming the pieces through pl_utf8_complete_prefix never holds back
 *      more than 3 bytes and loses nothing.
 * An invariant violation traps, which libFuzzer reports as a crash.
 *
 * Build and run (from the repository root):
 *   CC=clang cmake -S . -B build-fuzz-tok -DPL_FUZZ=ON -DCMAKE_BUILD_TYPE=Debug
 *   cmake --build build-fuzz-tok --target fuzz_tokenizer
 *   build-fuzz-tok/bin/fuzz_tokenizer -max_total_time=120 tests/fuzz/seeds/fuzz_tokenizer
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tokenizer/tokenizer.h"

#define REQUIRE(c) do { if (!(c)) __builtin_trap(); } while (0)

static pl_gguf *g_file;
static pl_vocab *g_vocab;

static void load_once(void) {
    if (g_vocab) return;
    const char *path = getenv("PL_FUZZ_VOCAB");
    char beside[4096];
    if (!path || !*path) {
        path = "tests/fixtures/models/tiny-qwen3-f16.gguf";
        /* Not run from the repository root (scripts/run-fuzzers.sh may run
         * it from anywhere): fall back to the fixture next to this source
         * file, whose path the compiler recorded. */
        FILE *f = fopen(path, "rb");
        if (f) {
            fclose(f);
        } else {
            const char *slash = strrchr(__FILE__, '/');
            int n = slash ? (int)(slash - __FILE__) : 0;
            snprintf(beside, sizeof beside, "%.*s%s../fixtures/models/tiny-qwen3-f16.gguf", n, __FILE__, slash ? "/" : "");
            path = beside;
        }
    }
    if (pl_gguf_open(path, &g_file) != PL_OK || pl_vocab_load(g_file, &g_vocab) != PL_OK) {
        /* A harness set-up problem, not a finding: say so and stop. */
        fprintf(stderr, "fuzz_tokenizer: cannot load vocabulary '%s': %s\n"
                        "(run from the repository root or set PL_FUZZ_VOCAB)\n", path, pl_last_error());
        exit(2);
    }
}

/* llama.cpp's view of arbitrary bytes, re-encoded (see test_tokenizer.c):
 * complete 1-4 byte sequences up to U+10FFFF are kept (overlong forms
 * re-encoded canonically), every other byte becomes U+FFFD. */
static size_t sanitize(const uint8_t *s, size_t n, uint8_t *out) {
    size_t i = 0, o = 0;
    while (i < n) {
        unsigned c = s[i];
        int len = c < 0x80 ? 1 : c < 0xC0 ? 0 : c < 0xE0 ? 2 : c < 0xF0 ? 3 : c < 0xF8 ? 4 : 0;
        int ok = len > 0 && i + (size_t)len <= n;
        for (int k = 1; ok && k < len; k++) ok = (s[i + k] & 0xC0) == 0x80;
        uint32_t cp = 0;
        if (ok) {
            cp = len == 1 ? c : len == 2 ? (c & 0x1F) : len == 3 ? (c & 0x0F) : (c & 0x07);
            for (int k = 1; k < len; k++) cp = (cp << 6) | (s[i + k] & 0x3F);
            ok = cp <= 0x10FFFF;
        }
        if (!ok) {
            out[o++] = 0xEF; out[o++] = 0xBF; out[o++] = 0xBD;
            i++;
            continue;
        }
        if (cp < 0x80) out[o++] = (uint8_t)cp;
        else if (cp < 0x800) { out[o++] = (uint8_t)(0xC0 | (cp >> 6)); out[o++] = (uint8_t)(0x80 | (cp & 0x3F)); }
        else if (cp < 0x10000) {
            out[o++] = (uint8_t)(0xE0 | (cp >> 12));
            out[o++] = (uint8_t)(0x80 | ((cp >> 6) & 0x3F));
            out[o++] = (uint8_t)(0x80 | (cp & 0x3F));
        } else {
            out[o++] = (uint8_t)(0xF0 | (cp >> 18));
            out[o++] = (uint8_t)(0x80 | ((cp >> 12) & 0x3F));
            out[o++] = (uint8_t)(0x80 | ((cp >> 6) & 0x3F));
            out[o++] = (uint8_t)(0x80 | (cp & 0x3F));
        }
        i += (size_t)len;
    }
    return o;
}

static void check(const uint8_t *data, size_t size, bool parse_special, const uint8_t *want, size_t want_len) {
    int32_t *ids = NULL;
    size_t n = 0;
    REQUIRE(pl_vocab_tokenize(g_vocab, (const char *)data, size, parse_special, &ids, &n) == PL_OK);
    REQUIRE(ids != NULL);
    REQUIRE(size == 0 || n > 0);
    int32_t nv = pl_vocab_n_tokens(g_vocab);

    /* detokenize, streaming the bytes through pl_utf8_complete_prefix */
    uint8_t *full = malloc(want_len + 1);
    uint8_t *streamed = malloc(want_len + 1);
    REQUIRE(full && streamed);
    size_t full_len = 0, streamed_len = 0, pending_start = 0;
    char piece[512];
    for (size_t i = 0; i < n; i++) {
        REQUIRE(ids[i] >= 0 && ids[i] < nv);
        size_t len = 0;
        REQUIRE(pl_vocab_piece(g_vocab, ids[i], true, piece, sizeof piece, &len) == PL_OK);
        REQUIRE(full_len + len <= want_len);
        memcpy(full + full_len, piece, len);
        full_len += len;
        size_t pending = full_len - pending_start;
        size_t ready = pl_utf8_complete_prefix((const char *)full + pending_start, pending);
        REQUIRE(ready <= pending && pending - ready <= 3);
        memcpy(streamed + streamed_len, full + pending_start, ready);
        streamed_len += ready;
        pending_start += ready;
    }
    memcpy(streamed + streamed_len, full + pending_start, full_len - pending_start);
    streamed_len += full_len - pending_start;

    REQUIRE(full_len == want_len && memcmp(full, want, want_len) == 0);
    REQUIRE(streamed_len == full_len && memcmp(streamed, full, full_len) == 0);
    free(full);
    free(streamed);
    free(ids);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    load_once();
    uint8_t *want = malloc(3 * size + 1);
    REQUIRE(want);
    size_t want_len = sanitize(data, size, want);
    check(data, size, true, want, want_len);
    check(data, size, false, want, want_len);
    free(want);
    return 0;
}
