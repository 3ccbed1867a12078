/*
 * The public fit planner (pocketllm.h): pl_fit / pl_fit_preset allocate the
 * result the planner fills (engine/fit.c), accessors read it. The reason code
 * replaces the advice text the library used to print: wording belongs to the
 * caller (tools/pocketllm/cli_fit.c writes the CLI's).
 */
#include "pocketllm.h"
#include "core/status.h"
#include "engine/fit.h"
#include <stdlib.h>
#include <string.h>

pl_fit_params pl_fit_default_params(void) {
    pl_fit_params p;
    memset(&p, 0, sizeof p);
    return p;
}

static pl_status run(const char *path, const char *preset, const char *vocab, const pl_fit_params *p,
                     pl_fit_result **out) {
    if (!out) return pl_errorf(PL_ERR_INVALID_ARG, "pl_fit: NULL result pointer");
    *out = NULL;
    const pl_fit_params d = pl_fit_default_params();
    if (!p) p = &d;
    pl_fit_result *r = calloc(1, sizeof *r);
    if (!r) return pl_errorf(PL_ERR_NO_MEMORY, "out of memory");
    pl_status st;
    if (preset) st = pl_fit_plan_preset(preset, vocab, p, r);
    else if (!path) st = pl_errorf(PL_ERR_INVALID_ARG, "pl_fit: NULL model path");
    else st = pl_fit_plan_file(path, p, r);
    if (st != PL_OK) {
        free(r);
        return st;
    }
    *out = r;
    return PL_OK;
}

pl_status pl_fit(const char *model_path, const pl_fit_params *p, pl_fit_result **out) {
    return run(model_path, NULL, NULL, p, out);
}

pl_status pl_fit_preset(const char *preset, const char *vocab_path, const pl_fit_params *p, pl_fit_result **out) {
    if (!preset) return pl_errorf(PL_ERR_INVALID_ARG, "pl_fit_preset: NULL preset");
    return run(NULL, preset, vocab_path, p, out);
}

void pl_fit_free(pl_fit_result *r) { free(r); }

const char *pl_fit_model(const pl_fit_result *r) { return r ? r->model : ""; }
const char *pl_fit_device(const pl_fit_result *r) { return r ? r->device : ""; }
int32_t pl_fit_n_ctx(const pl_fit_result *r) { return r ? r->n_ctx : 0; }
uint64_t pl_fit_budget(const pl_fit_result *r) { return r ? r->budget : 0; }
bool pl_fit_budget_is_free_memory(const pl_fit_result *r) { return r && r->budget_is_free_memory; }
int32_t pl_fit_n_rungs(const pl_fit_result *r) { return r ? r->n_rungs : 0; }
int32_t pl_fit_chosen(const pl_fit_result *r) { return r ? r->chosen : -1; }

pl_status pl_fit_rung(const pl_fit_result *r, int32_t i, pl_fit_rung_info *out) {
    if (!r || !out || i < 0 || i >= r->n_rungs)
        return pl_errorf(PL_ERR_INVALID_ARG, "no fit rung %d (0..%d)", (int)i, r ? r->n_rungs - 1 : -1);
    const pl_fit_rung_rec *g = &r->rungs[i];
    out->name = g->name;
    out->ftype = g->ftype;
    out->as_is = g->as_is;
    out->needs_imatrix = g->needs_imatrix;
    out->fits = g->fits;
    out->status = g->status;
    out->error = g->error;
    out->plan = g->plan;
    out->n_params = g->n_params;
    out->bpw = g->bpw;
    out->cache_type_k = g->cache_k ? g->cache_k : "f16";
    out->cache_type_v = g->cache_v ? g->cache_v : "f16";
    out->max_ctx = g->max_ctx;
    return PL_OK;
}

pl_fit_reason pl_fit_reason_of(const pl_fit_result *r) {
    if (!r || r->n_rungs == 0 || r->rungs[0].status != PL_OK) return PL_FIT_CANNOT_RUN;
    if (r->chosen < 0) return PL_FIT_NONE_FITS;
    if (r->chosen == 0) return PL_FIT_AS_IS;
    return r->rungs[r->chosen].needs_imatrix ? PL_FIT_QUANTIZE_IMATRIX : PL_FIT_QUANTIZE;
}
