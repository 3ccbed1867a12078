/*
 * --memory parsing and the "does not fit" advice (see cli_fit.h), on the
 * public fit planner (pl_fit).
 */
#include "cli_fit.h"
#include <ctype.h>
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

bool pl_cli_parse_bytes(const char *s, uint64_t *out) {
    if (!s || !*s) return false;
    errno = 0;
    char *end;
    const double v = strtod(s, &end);
    if (errno || end == s || !(v >= 0) || !isfinite(v)) return false;
    double mul = 1;
    char u[8] = {0};
    size_t k = 0;
    for (; *end && k < sizeof u - 1; end++) u[k++] = (char)toupper((unsigned char)*end);
    if (*end) return false;
    if (!k || !strcmp(u, "B")) mul = 1;
    else {
        const char *units = "KMGT";
        const char *pu = strchr(units, u[0]);
        if (!pu || !u[0]) return false;
        const int e = (int)(pu - units) + 1;
        const char *rest = u + 1;
        if (!*rest || !strcmp(rest, "IB")) mul = pow(1024.0, e);
        else if (!strcmp(rest, "B")) mul = pow(1000.0, e);
        else return false;
    }
    const double bytes = v * mul;
    if (bytes >= 1.8e19) return false;
    *out = (uint64_t)llround(bytes);
    return true;
}

pl_status pl_cli_parse_budget(const char *s, const char *device, uint64_t *out, char *msg, size_t cap) {
    if (s && !strcmp(s, "auto")) {
        const pl_status st = pl_device_free_memory(device, out);
        if (st != PL_OK) snprintf(msg, cap, "%s (--memory BYTES)", pl_last_error());
        return st;
    }
    if (!pl_cli_parse_bytes(s, out) || *out == 0) {
        snprintf(msg, cap, "'%s' is not a byte count (e.g. 4G, 4GiB, 4GB, 4294967296) or 'auto'", s ? s : "");
        return PL_ERR_INVALID_ARG;
    }
    return PL_OK;
}

void pl_cli_fit_advice(const char *model_path, const pl_model_params *mp, char *buf, size_t cap) {
    if (!cap) return;
    buf[0] = 0;
    pl_fit_params fp = pl_fit_default_params();
    fp.device = mp->device;
    fp.n_ctx = mp->n_ctx;
    fp.n_threads = mp->n_threads;
    fp.budget = mp->memory_budget;
    /* the types the command asked for are kept; none asked: the plan may
     * lower the cache (and then says how) */
    fp.cache_type_k = mp->cache_type_k;
    fp.cache_type_v = mp->cache_type_v;
    pl_fit_result *r = NULL;
    pl_fit_rung_info src, c, last;
    /* (pl_last_error still names the original failure for the caller: it is
     * printed before this is called) */
    if (pl_fit(model_path, &fp, &r) != PL_OK) return;
    const pl_fit_reason why = pl_fit_reason_of(r);
    if (why == PL_FIT_CANNOT_RUN || pl_fit_rung(r, 0, &src) != PL_OK ||
        pl_fit_rung(r, pl_fit_n_rungs(r) - 1, &last) != PL_OK) {
        pl_fit_free(r);
        return;
    }
    const double mib = 1048576.0;
    char kvs[64] = "";
    if (strcmp(src.cache_type_k, "f16") || strcmp(src.cache_type_v, "f16"))
        snprintf(kvs, sizeof kvs, ", KV cache %s/%s", src.cache_type_k, src.cache_type_v);
    int n = snprintf(buf, cap, "%s (%s%s) needs %.1f MiB on device '%s' with a %d-token context; the budget is %.1f MiB.",
                     pl_fit_model(r), src.name, kvs, src.plan.total / mib, pl_fit_device(r), (int)pl_fit_n_ctx(r),
                     pl_fit_budget(r) / mib);
    if (n < 0 || (size_t)n >= cap) goto done;
    if (why == PL_FIT_NONE_FITS) {
        snprintf(buf + n, cap - (size_t)n,
                 " No rung of the quantization ladder fits (the smallest, %s, needs %.1f MiB): use a device with more "
                 "memory or a shorter context (--ctx).",
                 last.name, last.plan.total / mib);
    } else if (why == PL_FIT_AS_IS && pl_fit_rung(r, 0, &c) == PL_OK &&
               (strcmp(c.cache_type_k, "f16") || strcmp(c.cache_type_v, "f16")) && !mp->cache_type_k &&
               !mp->cache_type_v) {
        snprintf(buf + n, cap - (size_t)n,
                 " 'pocketllm fit' keeps the weights as they are and lowers the KV cache (%.1f MiB): add "
                 "--cache-type-k %s --cache-type-v %s.",
                 c.plan.total / mib, c.cache_type_k, c.cache_type_v);
    } else if (why == PL_FIT_AS_IS) {
        snprintf(buf + n, cap - (size_t)n, " It should fit as is (see 'pocketllm fit').");
    } else if (pl_fit_rung(r, pl_fit_chosen(r), &c) == PL_OK) {
        char out_name[256];
        snprintf(out_name, sizeof out_name, "%s", model_path);
        char *dot = strrchr(out_name, '.');
        if (dot && !strcmp(dot, ".gguf")) *dot = 0;
        if (why == PL_FIT_QUANTIZE_IMATRIX)
            snprintf(buf + n, cap - (size_t)n,
                     " 'pocketllm fit' picks %s (%.1f MiB, %.2f bits per weight). Make it with:\n"
                     "  pocketllm imatrix --model %s --file CALIBRATION.txt -o imatrix.gguf\n"
                     "  pocketllm quantize %s %s-%s.gguf %s --imatrix imatrix.gguf",
                     c.name, c.plan.total / mib, c.bpw, model_path, model_path, out_name, c.name, c.name);
        else
            snprintf(buf + n, cap - (size_t)n,
                     " 'pocketllm fit' picks %s (%.1f MiB, %.2f bits per weight). Make it with:\n"
                     "  pocketllm quantize %s %s-%s.gguf %s",
                     c.name, c.plan.total / mib, c.bpw, model_path, out_name, c.name, c.name);
        n = (int)strlen(buf);
        if (n >= 0 && (size_t)n < cap && (strcmp(c.cache_type_k, "f16") || strcmp(c.cache_type_v, "f16")) &&
            !mp->cache_type_k && !mp->cache_type_v)
            snprintf(buf + n, cap - (size_t)n, "\n  and run it with --cache-type-k %s --cache-type-v %s",
                     c.cache_type_k, c.cache_type_v);
    }
done:
    pl_fit_free(r);
}
