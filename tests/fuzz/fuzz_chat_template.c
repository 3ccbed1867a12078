/* libFuzzer target: the chat-template renderer. The input is split at the
 * first NUL byte into a template and a JSON context (default: a two-message
 * conversation); both are hostile. Parse and render must fail cleanly or
 * succeed, within the renderer's limits. */
#include "chat/chat_template.h"
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

static const char default_ctx[] =
    "{\"messages\": [{\"role\": \"system\", \"content\": \"be brief\"}, {\"role\": \"user\", \"content\": \"hi <|im_end|>\"}],"
    " \"add_generation_prompt\": true, \"bos_token\": \"<s>\", \"eos_token\": \"</s>\", \"tools\": [{\"name\": \"f\"}]}";

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    const uint8_t *nul = memchr(data, 0, size);
    size_t tlen = nul ? (size_t)(nul - data) : size;
    const char *ctx = default_ctx;
    size_t clen = sizeof default_ctx - 1;
    if (nul) {
        ctx = (const char *)nul + 1;
        clen = size - tlen - 1;
    }
    pl_chat_template *t = NULL;
    if (pl_chat_template_parse((const char *)data, tlen, &t) != PL_OK) return 0;
    pl_chat_template_options opts = {0};
    opts.max_output = 1 << 20;
    opts.max_iterations = 100000;
    opts.max_steps = 1000000;
    opts.max_alloc = 64 << 20;
    char *out = NULL;
    size_t n = 0;
    if (pl_chat_template_render_json(t, ctx, clen, &opts, &out, &n) == PL_OK) free(out);
    pl_chat_template_free(t);
    return 0;
}
