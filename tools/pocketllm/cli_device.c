/* --device, checked before a model is loaded: a backend whose probe says
 * its device is not on this machine (cuda without a GPU or driver, or a
 * build without the CUDA module) is refused here in one line, before the
 * command prints "loading ..." or reads the model file. The probe only looks
 * at the filesystem; everything else (a driver too old, a GPU the module has
 * no code for, a model that does not fit) is found by pl_model_load. */
#include "cli.h"
#include "pocketllm.h"

int pl_cli_check_device(const char *cmd, const char *device) {
    int32_t b = pl_backend_index(device && *device ? device : "cpu");
    pl_backend_info info;
    if (b < 0 || pl_backend_get(b, &info) != PL_OK)
        return pl_cli_error("%s: unknown device '%s' (see 'pocketllm devices')", cmd, device);
    /* a declared backend (no kernels yet) is left to pl_model_load, which
     * says what it awaits */
    char detail[512] = "";
    bool available = true;
    if (info.implemented && pl_device_probe(b, &available, detail, sizeof detail) == PL_OK && !available)
        return pl_cli_error("%s: device '%s' is not available on this machine: %s (see 'pocketllm devices')", cmd,
                            info.name, detail);
    return 0;
}
