/*
 * Tokenizer built from a GGUF vocabulary (tokenizer.ggml.*).
 *
 * Implemented: byte-level BPE (tokenizer.ggml.model = "gpt2") with the
 * "qwen2" pre-tokenizer. The pre-tokenizer is selected through a table
 * (pl_pretok_kind) so llama3 / SentencePiece-style ones can be added.
 */
#ifndef PL_TOKENIZER_TOKENIZER_H
#define PL_TOKENIZER_TOKENIZER_H
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include "pocketllm.h"
#include "gguf/gguf.h"

typedef struct pl_vocab pl_vocab;

/* GGUF token types (tokenizer.ggml.token_type). */
enum {
    PL_TOKEN_TYPE_UNDEFINED = 0, PL_TOKEN_TYPE_NORMAL = 1, PL_TOKEN_TYPE_UNKNOWN = 2,
    PL_TOKEN_TYPE_CONTROL = 3, PL_TOKEN_TYPE_USER_DEFINED = 4, PL_TOKEN_TYPE_UNUSED = 5,
    PL_TOKEN_TYPE_BYTE = 6,
};

/* Builds the vocabulary. Validates array lengths (tokens / token_type /
 * scores / merges), special-token ids (bos/eos/eot/pad/... in range), and
 * rejects unknown tokenizer models or pre-tokenizers with a message. */
pl_status pl_vocab_load(const pl_gguf *g, pl_vocab **out);
void pl_vocab_free(pl_vocab *v);

int32_t pl_vocab_n_tokens(const pl_vocab *v);
int32_t pl_vocab_bos(const pl_vocab *v);        /* -1 if none */
int32_t pl_vocab_eos(const pl_vocab *v);        /* -1 if none */
bool pl_vocab_add_bos(const pl_vocab *v);       /* tokenizer.ggml.add_bos_token */
bool pl_vocab_space_prefix(const pl_vocab *v);  /* SentencePiece adds a leading space: detokenize drops it */
/* End of generation: eos, eot, and the control tokens llama.cpp treats as
 * such (<|im_end|>, <|endoftext|>, <|eot_id|>, ...). */
bool pl_vocab_is_eog(const pl_vocab *v, int32_t id);
int pl_vocab_token_type(const pl_vocab *v, int32_t id);
/* The token's text as stored in the vocabulary (for byte-level BPE: the
 * GPT-2 byte-to-unicode mapped form). NUL-terminated. */
const char *pl_vocab_token_text(const pl_vocab *v, int32_t id);
/* Looks a token up by its stored text; -1 if absent. */
int32_t pl_vocab_find(const pl_vocab *v, const char *text, size_t len);

/* Tokenizes len bytes of text (need not be valid UTF-8: invalid bytes are
 * handled the way llama.cpp does). parse_special: occurrences of control and
 * user-defined tokens' text become those tokens. Does not add BOS.
 * *ids is malloc'd. An input byte that no token can represent (a vocabulary
 * without that byte's token and no merge covering it) fails the call with
 * PL_ERR_INVALID_ARG and a message naming the byte and its offset, instead
 * of llama.cpp's silent drop. */
pl_status pl_vocab_tokenize(const pl_vocab *v, const char *text, size_t len,
                            bool parse_special, int32_t **ids, size_t *n_ids);

/* Raw bytes of one token (byte-level decoding applied). Control tokens give
 * their text only when special is true, else nothing. Writes at most cap
 * bytes, always sets *len to the full length; returns PL_ERR_INVALID_ARG for
 * an out-of-range id or a too-small buffer. */
pl_status pl_vocab_piece(const pl_vocab *v, int32_t id, bool special,
                         char *buf, size_t cap, size_t *len);

/* UTF-8 helper for streaming: the length of the longest prefix of buf that
 * does not end inside an incomplete (but so far valid) UTF-8 sequence. Bytes
 * that can never become valid UTF-8 are not held back. */
size_t pl_utf8_complete_prefix(const char *buf, size_t len);

#endif
