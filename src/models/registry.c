#include "models/arch.h"
#include <string.h>

extern const pl_arch pl_arch_qwen3, pl_arch_qwen2, pl_arch_llama, pl_arch_toy;
extern const pl_arch pl_arch_qwen3moe;
extern const pl_arch pl_arch_gemma3;

static const pl_arch *const pl_arch_list[] = {&pl_arch_qwen3, &pl_arch_qwen3moe, &pl_arch_qwen2, &pl_arch_llama,
                                              &pl_arch_gemma3, &pl_arch_toy, NULL};

const pl_arch *const *pl_archs(void) { return pl_arch_list; }

const pl_arch *pl_arch_find(const char *name) {
    for (int i = 0; pl_arch_list[i]; i++)
        if (!strcmp(pl_arch_list[i]->name, name)) return pl_arch_list[i];
    return NULL;
}
