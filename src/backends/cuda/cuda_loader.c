/*
 * The library side of the CUDA backend: finds and dlopen()s the module
 * (libpocketllm-cuda.so) the first time a `cuda` context is created, checks
 * that it was built from the same headers, and forwards kernels and device
 * ops into it. Nothing here includes a CUDA header or links a CUDA library,
 * so the library builds and runs without the toolkit; see cuda_module.h for
 * the contract and README.md in this directory for the design.
 *
 * Introspection never loads the module: the kernel table below is generated
 * from cuda_table.h, and the probe only looks at the filesystem.
 */
#include "backends/cuda/cuda_module.h"
#include "backends/cuda/cuda_table.h"
#include "core/status.h"
#include <dlfcn.h>
#include <limits.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

bool pl_probe_cuda(char *detail, size_t cap);   /* backends/declared.c: device nodes + driver library */

/* ---- finding the module ------------------------------------------------------ */

static bool file_exists(const char *p) {
    struct stat st;
    return stat(p, &st) == 0 && S_ISREG(st.st_mode);
}

/* dir of path into out (without the trailing slash); false if no slash. */
static bool dir_of(const char *path, char *out, size_t cap) {
    const char *slash = strrchr(path, '/');
    if (!slash) return false;
    size_t n = (size_t)(slash - path);
    if (n == 0) n = 1; /* "/" */
    if (n >= cap) return false;
    memcpy(out, path, n);
    out[n] = 0;
    return true;
}

/* Tries dir/FILE and dir/../lib/FILE. The first candidate ever formed is
 * kept in first (for the "not found" message). */
static bool try_dir(const char *dir, char *path, size_t cap, char *first, size_t first_cap) {
    static const char *const rel[] = {"", "/../lib"};
    for (size_t i = 0; i < sizeof rel / sizeof rel[0]; i++) {
        char cand[PATH_MAX];
        int n = snprintf(cand, sizeof cand, "%s%s/%s", dir, rel[i], PL_CUDA_MODULE_FILE);
        if (n < 0 || (size_t)n >= sizeof cand) continue;
        if (!first[0]) snprintf(first, first_cap, "%s", cand);
        if (file_exists(cand)) {
            char real[PATH_MAX];
            snprintf(path, cap, "%s", realpath(cand, real) ? real : cand);
            return true;
        }
    }
    return false;
}

bool pl_cuda_module_path(char *path, size_t cap) {
    char first[PATH_MAX] = "";
    const char *env = getenv(PL_CUDA_MODULE_ENV);
    if (env && *env) {
        snprintf(path, cap, "%s", env);
        return file_exists(env);
    }
    /* The object holding this code: libpocketllm.so, or the executable when
     * it links the static library (then dladdr may give argv[0], which is
     * why /proc/self/exe is tried too). */
    Dl_info info;
    char dir[PATH_MAX];
    if (dladdr((void *)&pl_cuda_module_path, &info) && info.dli_fname && info.dli_fname[0]) {
        char real[PATH_MAX];
        const char *obj = realpath(info.dli_fname, real) ? real : info.dli_fname;
        if (dir_of(obj, dir, sizeof dir) && try_dir(dir, path, cap, first, sizeof first)) return true;
    }
    char exe[PATH_MAX];
    ssize_t n = readlink("/proc/self/exe", exe, sizeof exe - 1);
    if (n > 0) {
        exe[n] = 0;
        if (dir_of(exe, dir, sizeof dir) && try_dir(dir, path, cap, first, sizeof first)) return true;
    }
    snprintf(path, cap, "%s", first[0] ? first : PL_CUDA_MODULE_FILE);
    return false;
}

/* ---- loading ---------------------------------------------------------------- */

static const pl_cuda_kernel_key expected_kernels[] = {
#define PL_CUDA_KEY_(op, t) {(int32_t)(op), (int32_t)(t)},
    PL_CUDA_KERNELS(PL_CUDA_KEY_)
#undef PL_CUDA_KEY_
};
#define N_EXPECTED (sizeof expected_kernels / sizeof expected_kernels[0])

static pthread_once_t load_once = PTHREAD_ONCE_INIT;
static const pl_cuda_module *loaded;
static pl_status load_status = PL_ERR_INTERNAL;
static char load_error[PATH_MAX + 2048] = "cuda: the module was never loaded";

static void load_fail(pl_status st, const char *fmt, const char *a, const char *b) {
    load_status = st;
    snprintf(load_error, sizeof load_error, fmt, a, b);
}

static void load_module(void) {
    char path[PATH_MAX];
    if (!pl_cuda_module_path(path, sizeof path)) {
        load_fail(PL_ERR_UNSUPPORTED,
                  "cuda: this build has no CUDA module (%s not found%s); configure with -DPL_CUDA=ON on a machine "
                  "with the CUDA toolkit, or point " PL_CUDA_MODULE_ENV " at the module",
                  path, getenv(PL_CUDA_MODULE_ENV) && *getenv(PL_CUDA_MODULE_ENV) ? " (from " PL_CUDA_MODULE_ENV ")" : "");
        return;
    }
    void *h = dlopen(path, RTLD_NOW | RTLD_LOCAL);
    if (!h) {
        const char *e = dlerror();
        load_fail(PL_ERR_UNSUPPORTED, "cuda: cannot load %s: %s", path, e ? e : "unknown dlopen error");
        return;
    }
    pl_cuda_module_init_fn init = NULL;
    void *sym = dlsym(h, PL_CUDA_MODULE_ENTRY);
    memcpy(&init, &sym, sizeof init); /* object pointer -> function pointer without a cast warning */
    if (!init) {
        load_fail(PL_ERR_UNSUPPORTED, "cuda: %s is not a PocketLLM CUDA module (no %s)", path, PL_CUDA_MODULE_ENTRY);
        dlclose(h);
        return;
    }
    static const pl_cuda_host_api host = {PL_CUDA_MODULE_ABI, PL_CUDA_LAYOUT_HERE, pl_errorf};
    const pl_cuda_module *m = NULL;
    pl_status st = init(&host, &m);
    if (st != PL_OK || !m) {
        load_fail(st != PL_OK ? st : PL_ERR_INTERNAL, "cuda: %s refused to initialise: %s", path, pl_last_error());
        dlclose(h);
        return;
    }
    const pl_cuda_layout here = PL_CUDA_LAYOUT_HERE;
    if (m->abi != PL_CUDA_MODULE_ABI || !pl_cuda_layout_equal(&m->layout, &here)) {
        load_fail(PL_ERR_UNSUPPORTED,
                  "cuda: %s was built from other headers than this library%s; rebuild both from one tree", path,
                  m->abi != PL_CUDA_MODULE_ABI ? " (module ABI version differs)" : " (struct layouts differ)");
        dlclose(h);
        return;
    }
    bool same = m->n_kernels == N_EXPECTED && m->kernels;
    for (size_t i = 0; same && i < N_EXPECTED; i++)
        same = m->kernels[i].op == expected_kernels[i].op && m->kernels[i].key == expected_kernels[i].key;
    if (!same || !m->ctx_create || !m->ctx_free || !m->run || !m->work_size || !m->device || !m->graph_execute) {
        load_fail(PL_ERR_UNSUPPORTED, "cuda: %s implements another kernel list than this library expects%s; rebuild both from one tree",
                  path, "");
        dlclose(h);
        return;
    }
    /* The module stays loaded for the life of the process (its static CUDA
     * runtime registers exit handlers; unloading it early is not safe). */
    loaded = m;
    load_status = PL_OK;
}

pl_status pl_cuda_load(const pl_cuda_module **out) {
    pthread_once(&load_once, load_module);
    if (out) *out = loaded;
    if (load_status != PL_OK) return pl_errorf(load_status, "%s", load_error);
    return PL_OK;
}

/* ---- the backend: kernels forwarding into the module -------------------------- */

static pl_status cuda_run(pl_exec_ctx *ctx, const pl_node *node) {
    if (!loaded) return pl_errorf(PL_ERR_INTERNAL, "cuda: a kernel ran before the module was loaded");
    return loaded->run(ctx, node);
}

static size_t cuda_work(const pl_node *node, int n_threads) {
    return loaded ? loaded->work_size(node, n_threads) : 0;
}

static const pl_kernel cuda_kernels[] = {
#define PL_CUDA_KERNEL_(op, t) {op, t, cuda_run, cuda_work},
    PL_CUDA_KERNELS(PL_CUDA_KERNEL_)
#undef PL_CUDA_KERNEL_
};

static pl_status cuda_ctx_create(int n_threads, pl_exec_ctx **out) {
    if (!out) return pl_errorf(PL_ERR_INVALID_ARG, "cuda: out is NULL");
    *out = NULL;
    const pl_cuda_module *m;
    PL_TRY(pl_cuda_load(&m));
    PL_TRY(m->ctx_create(n_threads, out));
    (*out)->backend = &pl_backend_cuda;
    return PL_OK;
}

static void cuda_ctx_free(pl_exec_ctx *ctx) {
    if (ctx && loaded) loaded->ctx_free(ctx);
}

/* Device nodes and driver library (declared.c's probe), and the module file:
 * stat() only, no library is opened. */
static bool cuda_probe(char *detail, size_t cap) {
    char dev[512], path[PATH_MAX];
    bool have_dev = pl_probe_cuda(dev, sizeof dev);
    bool have_mod = pl_cuda_module_path(path, sizeof path);
    if (!have_dev) {
        snprintf(detail, cap, "%s", dev);
        return false;
    }
    if (!have_mod) {
        snprintf(detail, cap, "%s, but no %s (configure with -DPL_CUDA=ON)", dev, PL_CUDA_MODULE_FILE);
        return false;
    }
    snprintf(detail, cap, "%s, module %s", dev, path);
    return true;
}

/* ---- device ops: forwarding (a context exists, so the module is loaded) ------- */

#define FWD_MODULE(ctx)                                                                            \
    do {                                                                                           \
        if (!loaded || !(ctx)) return pl_errorf(PL_ERR_INVALID_ARG, "cuda: no CUDA context");      \
    } while (0)

static pl_status fwd_mem_info(pl_exec_ctx *ctx, uint64_t *free_b, uint64_t *total_b, char *desc, size_t cap) {
    FWD_MODULE(ctx);
    return loaded->device->mem_info(ctx, free_b, total_b, desc, cap);
}
static pl_status fwd_alloc(pl_exec_ctx *ctx, pl_buffer_kind kind, size_t size, void **out) {
    FWD_MODULE(ctx);
    return loaded->device->buffer_alloc(ctx, kind, size, out);
}
static void fwd_free(pl_exec_ctx *ctx, void *p) {
    if (loaded && ctx) loaded->device->buffer_free(ctx, p);
}
static pl_status fwd_upload(pl_exec_ctx *ctx, void *dst, const void *src, size_t n) {
    FWD_MODULE(ctx);
    return loaded->device->upload(ctx, dst, src, n);
}
static pl_status fwd_download(pl_exec_ctx *ctx, void *dst, const void *src, size_t n) {
    FWD_MODULE(ctx);
    return loaded->device->download(ctx, dst, src, n);
}
static pl_status fwd_sync(pl_exec_ctx *ctx) {
    FWD_MODULE(ctx);
    return loaded->device->synchronize(ctx);
}
pl_status pl_cuda_graph_execute(pl_exec_ctx *ctx, const struct pl_graph *g) {
    FWD_MODULE(ctx);
    return loaded->graph_execute(ctx, g);
}

static const pl_device_ops cuda_device_ops = {
    fwd_mem_info, fwd_alloc, fwd_free, fwd_upload, fwd_download, fwd_sync,
};

const pl_backend pl_backend_cuda = {
    .name = "cuda",
    .summary = "NVIDIA GPUs, sm_75 and newer (CUDA C kernels in libpocketllm-cuda.so, loaded on first use)",
    .kernels = cuda_kernels,
    .n_kernels = sizeof cuda_kernels / sizeof cuda_kernels[0],
    .ctx_create = cuda_ctx_create,
    .ctx_free = cuda_ctx_free,
    .awaits = NULL,
    .probe = cuda_probe,
    /* Device memory: the engine puts the whole model in buffers from here
     * (engine/model.c). Whole-graph execution: decode steps are replayed as
     * CUDA graphs (pl_graph_execute calls this when no observer is set). */
    .device = &cuda_device_ops,
    .graph_execute = pl_cuda_graph_execute,
};
