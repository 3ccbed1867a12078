/*
 * The model quantizer behind `pocketllm quantize` and `pocketllm fit
 * --check` (see quant/quantize_model.h).
 */
#include "quant/quantize_model.h"
#include "quant/quantize_mix.h"
#include "quant/quantize_rows.h"
#include "quant/imatrix.h"
#include "quant/quant.h"
#include "core/status.h"
#include "core/threadpool.h"
#include "gguf/gguf.h"
#include "gguf/gguf_write.h"
#include <math.h>
#include <regex.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

/* Rows quantized per work item: about llama.cpp's chunk of 16K elements, so
 * threads share a tensor evenly without contending. Results do not depend
 * on it (rows are independent). */
#define CHUNK_ELEMENTS (32 * 512)

typedef struct q_tensor {
    const pl_gguf_tensor *src;
    pl_mix_tensor mix;
    const float *imatrix;     /* ne0 * ne2 weights, or NULL */
} q_tensor;

typedef struct q_ctx {
    pl_threadpool *pool;
    float **bufs;             /* per thread: CHUNK rows of f32 */
    int64_t buf_elems;
    const pl_quantize_params *p;
    int64_t done, total;
} q_ctx;

/* Progress text to the caller's log callback (pieces of lines, as printed). */
__attribute__((format(printf, 2, 3))) static void q_log(const pl_quantize_params *p, const char *fmt, ...) {
    if (!p->log) return;
    char buf[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(buf, sizeof buf, fmt, ap);
    va_end(ap);
    p->log(p->log_user, buf);
}

typedef struct q_job {
    const q_tensor *t;
    char *dst;
    int64_t rows, rows_per_chunk;
    q_ctx *ctx;
    atomic_int st;            /* first failure of any thread (pl_status) */
} q_job;

static void quantize_chunks(void *arg, int ith, int nth) {
    q_job *j = arg;
    const q_tensor *t = j->t;
    const int64_t ne0 = t->src->ne[0], ne1 = t->src->ne[1];
    const size_t in_row = pl_dtype_row_size(t->src->dtype, ne0);
    const size_t out_row = pl_dtype_row_size(t->mix.target, ne0);
    float *buf = j->ctx->bufs[ith];
    /* chunks never straddle two matrices (experts have their own imatrix) */
    const int64_t per_mat = (ne1 + j->rows_per_chunk - 1) / j->rows_per_chunk;
    const int64_t n_chunks = per_mat * (j->rows / ne1);
    for (int64_t c = ith; c < n_chunks; c += nth) {
        const int64_t mat = c / per_mat;
        const int64_t r0 = mat * ne1 + (c % per_mat) * j->rows_per_chunk;
        int64_t nr = (mat + 1) * ne1 - r0;
        if (nr > j->rows_per_chunk) nr = j->rows_per_chunk;
        const char *in = (const char *)t->src->data + (size_t)r0 * in_row;
        const float *x = (const float *)in;
        if (t->src->dtype != PL_F32) {
            for (int64_t r = 0; r < nr; r++) pl_dequantize_row(t->src->dtype, in + (size_t)r * in_row, buf + r * ne0, ne0);
            x = buf;
        }
        const float *im = t->imatrix ? t->imatrix + mat * ne0 : NULL;
        pl_status st = pl_quantize_rows(t->mix.target, x, j->dst + (size_t)r0 * out_row, nr, ne0, im);
        if (st != PL_OK) atomic_store(&j->st, (int)st);
    }
}

/* The fill callback gets one of these per tensor. */
typedef struct q_fill {
    q_tensor *t;
    q_ctx *ctx;
} q_fill;

static pl_status fill_cb(void *user, const char *name, void *dst, uint64_t size) {
    q_fill *f = user;
    const q_tensor *t = f->t;
    q_ctx *ctx = f->ctx;
    (void)name;
    const int64_t ne0 = t->src->ne[0];
    const int64_t rows = t->src->ne[1] * t->src->ne[2] * t->src->ne[3];
    const pl_quantize_params *p = ctx->p;
    ctx->done++;
    q_log(p, "[%4lld/%4lld] %-36s - [%5lld, %5lld], type = %6s, ", (long long)ctx->done, (long long)ctx->total,
          t->src->name, (long long)ne0, (long long)t->src->ne[1], pl_dtype_name(t->src->dtype));
    if (t->mix.target == t->src->dtype) {
        /* same type: the bytes are copied unchanged */
        memcpy(dst, t->src->data, (size_t)size);
        q_log(p, "size = %8.3f MiB\n", (double)size / 1048576.0);
        return PL_OK;
    }
    q_log(p, "converting to %s .. ", pl_dtype_name(t->mix.target));
    int64_t rpc = CHUNK_ELEMENTS / ne0;
    if (rpc < 1) rpc = 1;
    if (rpc * ne0 > ctx->buf_elems) rpc = ctx->buf_elems / ne0;
    q_job job = {t, dst, rows, rpc, ctx, PL_OK};
    pl_threadpool_run(ctx->pool, quantize_chunks, &job);
    /* (the workers' messages stay in their threads: name the tensor here) */
    if (atomic_load(&job.st) != PL_OK)
        return pl_errorf((pl_status)atomic_load(&job.st), "cannot quantize %s to %s", t->src->name,
                         pl_dtype_name(t->mix.target));
    q_log(p, "size = %8.2f MiB -> %8.2f MiB\n", (double)t->src->size / 1048576.0, (double)size / 1048576.0);
    return PL_OK;
}

static bool key_is(pl_gguf_str k, const char *s) { return k.len == strlen(s) && !memcmp(k.ptr, s, k.len); }

/* Sets a u32 the way gguf_set_val_u32 does: an existing key moves to the end. */
static pl_status set_u32_last(pl_gguf_writer *w, const char *key, uint32_t v) {
    pl_gguf_writer_remove_key(w, key); /* PL_ERR_NOT_FOUND is fine */
    return pl_gguf_writer_add_u32(w, key, v);
}

static pl_status set_str_last(pl_gguf_writer *w, const char *key, const char *v) {
    pl_gguf_writer_remove_key(w, key);
    return pl_gguf_writer_add_str(w, key, v);
}

/* llama-quantize's --tensor-type: after the mix's rules, a tensor the mix
 * quantizes whose name matches an override's pattern gets its type (the
 * last match wins). A type whose blocks do not divide the row length is an
 * error, not a silent fallback. */
static pl_status apply_overrides(const pl_quantize_params *p, pl_mix_tensor *mix, int64_t n) {
    for (int32_t k = 0; k < p->n_overrides; k++) {
        const pl_quant_override *o = &p->overrides[k];
        pl_dtype dt;
        if (!o->pattern || !o->type)
            return pl_errorf(PL_ERR_INVALID_ARG, "tensor type override %d: pattern and type are required", (int)k);
        if (!pl_dtype_from_name(o->type, &dt) || (dt != PL_F32 && dt != PL_F16 && dt != PL_BF16 &&
                                                 !pl_quantize_rows_supported(dt)))
            return pl_errorf(PL_ERR_INVALID_ARG, "tensor type override '%s': cannot quantize to type '%s'", o->pattern,
                             o->type);
        regex_t re;
        if (regcomp(&re, o->pattern, REG_EXTENDED | REG_NOSUB))
            return pl_errorf(PL_ERR_INVALID_ARG, "tensor type override: bad regular expression '%s'", o->pattern);
        pl_status st = PL_OK;
        for (int64_t i = 0; i < n && st == PL_OK; i++) {
            if (!pl_mix_allows_quantization(mix[i].name, mix[i].n_dims)) continue;
            if (regexec(&re, mix[i].name, 0, NULL, 0)) continue;
            if (!pl_dtype_row_size(dt, mix[i].ne[0]))
                st = pl_errorf(PL_ERR_INVALID_ARG, "tensor type override '%s': %s has rows of %lld, not a multiple of %s's blocks",
                               o->pattern, mix[i].name, (long long)mix[i].ne[0], pl_dtype_name(dt));
            mix[i].target = dt;
            mix[i].fallback = false;
        }
        regfree(&re);
        if (st != PL_OK) return st;
    }
    return PL_OK;
}

pl_quantize_params pl_quantize_default_params(void) {
    pl_quantize_params p;
    memset(&p, 0, sizeof p);
    p.type = "Q8_0";
    return p;
}

pl_status pl_quantize_file(const char *in_path, const char *out_path, const pl_quantize_params *p) {
    if (!in_path || !out_path || !p) return pl_errorf(PL_ERR_INVALID_ARG, "pl_quantize_file: NULL argument");
    const pl_ftype_info *ft = p->type ? pl_ftype_find(p->type) : NULL;
    if (!ft) return pl_errorf(PL_ERR_INVALID_ARG, "unknown quantization type '%s'", p->type ? p->type : "");
    if (p->n_overrides < 0 || (p->n_overrides && !p->overrides))
        return pl_errorf(PL_ERR_INVALID_ARG, "pl_quantize_file: bad overrides");
    pl_gguf *g = NULL;
    pl_imatrix *im = NULL;
    pl_gguf_writer *w = NULL;
    q_tensor *ts = NULL;
    q_fill *fills = NULL;
    q_ctx ctx = {0};
    ctx.p = p;
    /* the input stays mapped while the output is written: never the same file */
    struct stat si, so;
    if (stat(in_path, &si) == 0 && stat(out_path, &so) == 0 && si.st_dev == so.st_dev && si.st_ino == so.st_ino)
        return pl_errorf(PL_ERR_INVALID_ARG, "%s: the output would overwrite the input", out_path);
    pl_status st = pl_gguf_open(in_path, &g);
    if (st != PL_OK) return st;
    const int64_t n = pl_gguf_n_tensors(g);
    pl_mix_model mm;
    st = pl_mix_model_of(g, &mm);
    if (st != PL_OK) goto done;
    if (p->imatrix_path) {
        st = pl_imatrix_load(p->imatrix_path, &im);
        if (st != PL_OK) goto done;
        for (int i = 0; i < pl_imatrix_n_entries(im); i++) {
            int64_t nv = 0;
            const float *v = pl_imatrix_weights(im, pl_imatrix_entry_name(im, i), &nv);
            for (int64_t j = 0; v && j < nv; j++)
                if (!isfinite(v[j])) {
                    st = pl_errorf(PL_ERR_FORMAT, "%s: imatrix contains non-finite values", p->imatrix_path);
                    goto done;
                }
        }
    }

    /* the tensor table in llama.cpp's order, with the mix's types */
    ts = calloc((size_t)(n ? n : 1), sizeof *ts);
    fills = calloc((size_t)(n ? n : 1), sizeof *fills);
    pl_mix_tensor *mix = calloc((size_t)(n ? n : 1), sizeof *mix);
    if (!ts || !fills || !mix) {
        free(mix);
        st = pl_errorf(PL_ERR_NO_MEMORY, "out of memory");
        goto done;
    }
    for (int64_t i = 0; i < n; i++) {
        const pl_gguf_tensor *t = pl_gguf_tensor_at(g, i);
        mix[i] = (pl_mix_tensor){t->name, (int)t->n_dims, {t->ne[0], t->ne[1], t->ne[2], t->ne[3]}, t->dtype, t->dtype, false};
    }
    qsort(mix, (size_t)n, sizeof *mix, pl_mix_compare);
    pl_mix_plan(ft, &mm, im != NULL, mix, n);
    st = apply_overrides(p, mix, n);
    if (st != PL_OK) {
        free(mix);
        goto done;
    }
    for (int64_t i = 0; i < n; i++) {
        ts[i].src = pl_gguf_find_tensor(g, mix[i].name);
        ts[i].mix = mix[i];
        ts[i].mix.name = ts[i].src->name;
    }
    free(mix);

    int64_t max_ne0 = 1;
    for (int64_t i = 0; i < n && st == PL_OK; i++) {
        q_tensor *t = &ts[i];
        const pl_dtype tgt = t->mix.target, cur = t->src->dtype;
        if (t->src->ne[0] > max_ne0) max_ne0 = t->src->ne[0];
        if (tgt == cur) continue;
        if (!pl_quantize_rows_supported(tgt))
            st = pl_errorf(PL_ERR_UNSUPPORTED, "%s: no quantizer for type %s (needed for %s)", in_path,
                           pl_dtype_name(tgt), t->src->name);
        else if (!pl_can_dequantize(cur))
            st = pl_errorf(PL_ERR_UNSUPPORTED, "%s: cannot convert tensor %s from type %s", in_path, t->src->name,
                           pl_dtype_name(cur));
        if (st != PL_OK) break;
        if (im) {
            int64_t nv = 0;
            const float *v = pl_imatrix_weights(im, t->src->name, &nv);
            if (v && nv == t->src->ne[0] * t->src->ne[2]) t->imatrix = v;
            else if (v && strcmp(t->src->name, "token_embd.weight"))
                st = pl_errorf(PL_ERR_FORMAT, "imatrix size %lld is different from tensor size %lld for %s",
                               (long long)nv, (long long)(t->src->ne[0] * t->src->ne[2]), t->src->name);
        }
        if (st == PL_OK && !t->imatrix && pl_mix_requires_imatrix(t->src->name, tgt))
            st = pl_errorf(PL_ERR_INVALID_ARG,
                           "%s needs an importance matrix for tensor %s (type %s)",
                           ft->name, t->src->name, pl_dtype_name(tgt));
    }
    if (st != PL_OK) goto done;

    /* metadata: the input's keys in order, then the keys llama-quantize sets */
    st = pl_gguf_writer_create(&w);
    if (st != PL_OK) goto done;
    for (int64_t i = 0; i < pl_gguf_n_kv(g) && st == PL_OK; i++) {
        pl_gguf_str k = pl_gguf_kv_key(g, i);
        if (key_is(k, "split.no") || key_is(k, "split.count") || key_is(k, "split.tensors.count")) continue;
        st = pl_gguf_writer_copy_kv(w, g, i);
    }
    if (st == PL_OK) st = set_u32_last(w, "general.quantization_version", 2);
    if (st == PL_OK) st = set_u32_last(w, "general.file_type", (uint32_t)ft->ftype);
    if (st == PL_OK && im) {
        char path127[128];
        snprintf(path127, sizeof path127, "%s", p->imatrix_path);
        st = set_str_last(w, "quantize.imatrix.file", path127);
        if (st == PL_OK && *pl_imatrix_dataset(im)) {
            char ds[128];
            snprintf(ds, sizeof ds, "%s", pl_imatrix_dataset(im));
            st = set_str_last(w, "quantize.imatrix.dataset", ds);
        }
        if (st == PL_OK) st = set_u32_last(w, "quantize.imatrix.entries_count", (uint32_t)pl_imatrix_n_entries(im));
        if (st == PL_OK && pl_imatrix_chunk_count(im) > 0)
            st = set_u32_last(w, "quantize.imatrix.chunks_count", pl_imatrix_chunk_count(im));
    }
    if (st != PL_OK) goto done;

    st = pl_threadpool_create(p->n_threads > 0 ? p->n_threads : pl_cpu_count(), &ctx.pool);
    if (st != PL_OK) goto done;
    const int nth = pl_threadpool_size(ctx.pool);
    ctx.buf_elems = max_ne0 > CHUNK_ELEMENTS ? max_ne0 : CHUNK_ELEMENTS;
    ctx.bufs = calloc((size_t)nth, sizeof *ctx.bufs);
    if (!ctx.bufs) {
        st = pl_errorf(PL_ERR_NO_MEMORY, "out of memory");
        goto done;
    }
    for (int i = 0; i < nth; i++) {
        ctx.bufs[i] = malloc((size_t)ctx.buf_elems * sizeof(float));
        if (!ctx.bufs[i]) {
            st = pl_errorf(PL_ERR_NO_MEMORY, "out of memory");
            goto done;
        }
    }
    ctx.total = n;
    pl_quantize_stats s = {0};
    for (int64_t i = 0; i < n && st == PL_OK; i++) {
        q_tensor *t = &ts[i];
        fills[i] = (q_fill){t, &ctx};
        st = pl_gguf_writer_add_tensor_fill(w, t->src->name, t->mix.target, t->src->n_dims, t->src->ne, fill_cb, &fills[i]);
        const int64_t ne = t->src->ne[0] * t->src->ne[1] * t->src->ne[2] * t->src->ne[3];
        s.n_elements += (uint64_t)ne;
        s.bytes_in += t->src->size;
        s.bytes_out += pl_dtype_row_size(t->mix.target, t->src->ne[0]) * (uint64_t)(ne / t->src->ne[0]);
        s.n_quantized += t->mix.target != t->src->dtype;
        s.n_fallback += t->mix.fallback;
    }
    s.n_tensors = (int)n;
    if (st == PL_OK) st = pl_gguf_writer_write_file(w, out_path);
    if (st == PL_OK) pl_gguf_writer_file_size(w, &s.file_size);
    if (st == PL_OK) {
        q_log(p, "model size  = %8.2f MiB (%.2f BPW)\n", s.bytes_in / 1048576.0, s.bytes_in * 8.0 / (double)s.n_elements);
        q_log(p, "quant size  = %8.2f MiB (%.2f BPW)\n", s.bytes_out / 1048576.0, s.bytes_out * 8.0 / (double)s.n_elements);
        if (s.n_fallback) q_log(p, "%d of %d tensor(s) required fallback quantization\n", s.n_fallback, s.n_tensors);
    }
    if (st == PL_OK && p->stats) *p->stats = s;
done:
    if (ctx.bufs)
        for (int i = 0; ctx.pool && i < pl_threadpool_size(ctx.pool); i++) free(ctx.bufs[i]);
    free(ctx.bufs);
    pl_threadpool_free(ctx.pool);
    pl_gguf_writer_free(w);
    free(ts);
    free(fills);
    pl_imatrix_free(im);
    pl_gguf_close(g);
    return st;
}
