/*
 * Backends PocketLLM targets but has no kernels for yet (and the CUDA probe,
 * which the cuda backend's loader, backends/cuda/cuda_loader.c, uses). Each is listed,
 * never silently missing: it names the runtime it waits for, and its probe
 * says whether the device is present — by looking at the filesystem only, so
 * `pocketllm devices` works on a machine with a broken driver install.
 */
#include "kernels/abi.h"
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>

static bool path_exists(const char *p) {
    struct stat st;
    return stat(p, &st) == 0;
}

/* First existing path of a list, or NULL. */
static const char *first_existing(const char *const *paths) {
    for (int i = 0; paths[i]; i++)
        if (path_exists(paths[i])) return paths[i];
    return NULL;
}

static bool probe_paths(char *detail, size_t cap, const char *const *dev, const char *const *runtime,
                        const char *what) {
    const char *d = first_existing(dev);
    if (!d) {
        snprintf(detail, cap, "no %s", dev[0]);
        return false;
    }
    const char *r = runtime ? first_existing(runtime) : d;
    if (!r) {
        snprintf(detail, cap, "%s present, but no %s (%s)", d, runtime[0], what);
        return false;
    }
    snprintf(detail, cap, "%s, %s", d, r);
    return true;
}

bool pl_probe_cuda(char *detail, size_t cap) {
    static const char *const dev[] = {"/dev/nvidia0", "/dev/nvidiactl", NULL};
    static const char *const rt[] = {"/usr/lib/x86_64-linux-gnu/libcuda.so.1", "/usr/lib64/libcuda.so.1",
                                     "/usr/local/nvidia/lib64/libcuda.so.1", "/usr/lib/aarch64-linux-gnu/libcuda.so.1",
                                     "/usr/lib/wsl/lib/libcuda.so.1", NULL};
    return probe_paths(detail, cap, dev, rt, "the NVIDIA driver library");
}

static bool probe_ascend(char *detail, size_t cap) {
    static const char *const dev[] = {"/dev/davinci0", NULL};
    static const char *const rt[] = {"/usr/local/Ascend/ascend-toolkit", NULL};
    if (!path_exists("/usr/local/Ascend/ascend-toolkit") && !path_exists("/dev/davinci0")) {
        snprintf(detail, cap, "no /usr/local/Ascend/ascend-toolkit");
        return false;
    }
    return probe_paths(detail, cap, dev, rt, "CANN toolkit");
}

static bool probe_horizon(char *detail, size_t cap) {
    static const char *const dev[] = {"/dev/bpu", "/dev/bpu_core0", NULL};
    static const char *const rt[] = {"/usr/lib/libhbrt_bayes_aarch64.so", "/usr/hobot/lib/libhbucp.so",
                                     "/usr/lib/libdnn.so", NULL};
    return probe_paths(detail, cap, dev, rt, "Horizon BPU runtime");
}

static bool probe_qnn(char *detail, size_t cap) {
    static const char *const dev[] = {"/dev/adsprpc-smd", "/dev/fastrpc-cdsp", "/dev/fastrpc-adsp", NULL};
    static const char *const rt[] = {"/vendor/lib64/libQnnHtp.so", "/system/lib64/libQnnHtp.so", "/opt/qcom/aistack/qairt",
                                     NULL};
    return probe_paths(detail, cap, dev, rt, "Qualcomm QNN SDK");
}

static bool probe_mps(char *detail, size_t cap) {
    static const char *const dev[] = {"/System/Library/Frameworks/Metal.framework", NULL};
    return probe_paths(detail, cap, dev, NULL, "Metal");
}

const pl_backend pl_backend_ascend = {
    .name = "ascend", .summary = "Huawei Ascend 310B NPU",
    .awaits = "Huawei CANN (ascend-toolkit, AscendCL) and kernels written against it",
    .probe = probe_ascend};
const pl_backend pl_backend_horizon = {
    .name = "horizon", .summary = "Horizon Robotics Nash BPU (precompiled .hbm graphs)",
    .awaits = "the Horizon OpenExplorer toolchain (hb_compile to .hbm, libdnn/UCP runtime)",
    .probe = probe_horizon};
const pl_backend pl_backend_qnn = {
    .name = "qnn", .summary = "Qualcomm Hexagon NPU via QNN (the Android path)",
    .awaits = "the Qualcomm AI Engine Direct (QNN) SDK with the HTP backend",
    .probe = probe_qnn};
const pl_backend pl_backend_mps = {
    .name = "mps", .summary = "Apple GPUs via Metal",
    .awaits = "a macOS build with the Metal framework and Metal shading-language kernels",
    .probe = probe_mps};
