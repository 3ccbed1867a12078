/* --device, checked before a model is loaded: a backend whose probe says
 * its device is not on this machine (cuda without a GPU or driver, or a
 * build without the CUDA module) is refused here in one line, before the
 * command prints "loading ..." or reads the model file. The probe only looks
 * at the filesystem; everything else (a driver too old, a GPU the module has
 * no code for, a model that does not fit) is found by pl_model_load. */
#include "cli.h"
#include "kernels/abi.h"
#include "pocketllm.h"

int pl_cli_check_device(const char *cmd, const char *device) {
    const pl_backend *b = pl_backend_find(device && *device ? device : "cpu");
    if (!b) return pl_cli_error("%s: unknown device '%s' (see 'pocketllm devices')", cmd, device);
    char detail[512] = "";
    if (b->ctx_create && b->probe && !b->probe(detail, sizeof detail))
        return pl_cli_error("%s: device '%s' is not available on this machine: %s (see 'pocketllm devices')", cmd,
                            b->name, detail);
    return 0;
}
