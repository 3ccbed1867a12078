/* --cache-type-k / --cache-type-v: the KV cache element types (cli.h). */
#include "cli.h"
#include <string.h>

const char pl_cli_cache_usage[] =
    "  --cache-type-k T, -ctk T   K cache type: f16 (default), q8_0 or q4_0 (llama.cpp's, with its\n"
    "                        Hadamard rotation of quantized caches; PL_ATTN_ROT_DISABLE=1 turns it off)\n"
    "  --cache-type-v T, -ctv T   V cache type: f16 (default), q8_0 or q4_0\n";

static bool known(const char *t) { return !strcmp(t, "f16") || !strcmp(t, "q8_0") || !strcmp(t, "q4_0"); }

bool pl_cli_cache_opt(int argc, char **argv, int *i, const char **k, const char **v, bool *bad) {
    const char *val = NULL, **to = NULL, *name = NULL;
    if (pl_cli_opt(argc, argv, i, "--cache-type-k", &val, bad) || pl_cli_opt(argc, argv, i, "-ctk", &val, bad))
        to = k, name = "--cache-type-k";
    else if (pl_cli_opt(argc, argv, i, "--cache-type-v", &val, bad) || pl_cli_opt(argc, argv, i, "-ctv", &val, bad))
        to = v, name = "--cache-type-v";
    else
        return false;
    if (*bad) return true;
    if (!known(val)) {
        pl_cli_error("unknown %s '%s' (use f16, q8_0 or q4_0)", name, val);
        *bad = true;
        return true;
    }
    *to = val;
    return true;
}
