/* SentencePiece encoding of one raw fragment (spm.c), appended to a growable
 * id array. Private to src/tokenizer. */
#ifndef PL_TOKENIZER_SPM_H
#define PL_TOKENIZER_SPM_H
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include "core/status.h"
#include "tokenizer/tokenizer.h"

pl_status pl_spm_encode(const pl_vocab *v, const char *raw, size_t len, bool space_prefix, int32_t **out,
                        size_t *n_out, size_t *cap_out);

#endif
