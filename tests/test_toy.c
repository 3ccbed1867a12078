/*
 * The whole engine against an independent oracle: the test writes a "toy"
 * checkpoint (random f32 weights, a 64-token vocabulary) with the GGUF
 * writer, then compares the engine's logits on ref and cpu, for a prompt and
 * a few decode steps, with a direct double-precision transformer written here
 * from the textbook definition.
 */
#include "testutil.h"
#include "pocketllm.h"
#include "gguf/gguf_write.h"
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

enum { E = 64, H = 4, D = E / H, F = 96, L = 2, V = 64, T = 7 };

static float tok_embd[V][E], out_norm[E];
static float attn_norm[L][E], wq[L][E][E], wk[L][E][E], wv[L][E][E], wo[L][E][E];
static float ffn_norm[L][E], wg[L][F][E], wu[L][F][E], wd[L][E][F];

static uint64_t rng = 88172645463325252ull;
static float frand(float a) {
    rng ^= rng << 13; rng ^= rng >> 7; rng ^= rng << 17;
    return a * (float)((rng >> 11) * 0x1.0p-53 * 2.0 - 1.0);
}
static void fill(float *p, size_t n, float a, float base) { for (size_t i = 0; i < n; i++) p[i] = base + frand(a); }

static void rmsnorm(double *out, const double *x, const float *w, int n) {
    double s = 0;
    for (int i = 0; i < n; i++) s += x[i] * x[i];
    double r = 1.0 / sqrt(s / n + 1e-6);
    for (int i = 0; i < n; i++) out[i] = x[i] * r * w[i];
}

static void matvec(double *out, const float *w, const double *x, int rows, int cols) {
    for (int r = 0; r < rows; r++) {
        double s = 0;
        for (int c = 0; c < cols; c++) s += (double)w[(size_t)r * cols + c] * x[c];
        out[r] = s;
    }
}

static void rope(double *v, int pos) { /* NeoX pairs (i, i + D/2) of every head */
    for (int h = 0; h < H; h++)
        for (int i = 0; i < D / 2; i++) {
            double th = pos * pow(10000.0, -2.0 * i / D);
            double a = v[h * D + i], b = v[h * D + i + D / 2];
            v[h * D + i] = a * cos(th) - b * sin(th);
            v[h * D + i + D / 2] = a * sin(th) + b * cos(th);
        }
}

/* Oracle: logits after each of the n tokens. */
static void oracle(const int *toks, int n, double logits[][V]) {
    static double kc[L][T][E], vc[L][T][E];
    for (int t = 0; t < n; t++) {
        double x[E], h[E], q[E], k[E], v[E], a[E], o[E], g[F], u[F], d[E];
        for (int i = 0; i < E; i++) x[i] = tok_embd[toks[t]][i];
        for (int l = 0; l < L; l++) {
            rmsnorm(h, x, attn_norm[l], E);
            matvec(q, &wq[l][0][0], h, E, E);
            matvec(k, &wk[l][0][0], h, E, E);
            matvec(v, &wv[l][0][0], h, E, E);
            rope(q, t);
            rope(k, t);
            memcpy(kc[l][t], k, sizeof k);
            memcpy(vc[l][t], v, sizeof v);
            for (int hh = 0; hh < H; hh++) {
                double s[T], mx = -1e300, z = 0;
                for (int j = 0; j <= t; j++) {
                    s[j] = 0;
                    for (int i = 0; i < D; i++) s[j] += q[hh * D + i] * kc[l][j][hh * D + i];
                    s[j] /= sqrt((double)D);
                    if (s[j] > mx) mx = s[j];
                }
                for (int j = 0; j <= t; j++) z += (s[j] = exp(s[j] - mx));
                for (int i = 0; i < D; i++) {
                    double acc = 0;
                    for (int j = 0; j <= t; j++) acc += s[j] / z * vc[l][j][hh * D + i];
                    a[hh * D + i] = acc;
                }
            }
            matvec(o, &wo[l][0][0], a, E, E);
            for (int i = 0; i < E; i++) x[i] += o[i];
            rmsnorm(h, x, ffn_norm[l], E);
            matvec(g, &wg[l][0][0], h, F, E);
            matvec(u, &wu[l][0][0], h, F, E);
            for (int i = 0; i < F; i++) g[i] = g[i] / (1 + exp(-g[i])) * u[i];
            matvec(d, &wd[l][0][0], g, E, F);
            for (int i = 0; i < E; i++) x[i] += d[i];
        }
        rmsnorm(h, x, out_norm, E);
        matvec(logits[t], &tok_embd[0][0], h, V, E);
    }
}

static void write_model(const char *path) {
    fill(&tok_embd[0][0], sizeof tok_embd / 4, 1.0f, 0);
    fill(out_norm, E, 0.1f, 1);
    fill(&attn_norm[0][0], sizeof attn_norm / 4, 0.1f, 1);
    fill(&ffn_norm[0][0], sizeof ffn_norm / 4, 0.1f, 1);
    float a = sqrtf(3.0f / E);
    fill(&wq[0][0][0], sizeof wq / 4, a * 2, 0);
    fill(&wk[0][0][0], sizeof wk / 4, a * 2, 0);
    fill(&wv[0][0][0], sizeof wv / 4, a, 0);
    fill(&wo[0][0][0], sizeof wo / 4, a, 0);
    fill(&wg[0][0][0], sizeof wg / 4, a, 0);
    fill(&wu[0][0][0], sizeof wu / 4, a, 0);
    fill(&wd[0][0][0], sizeof wd / 4, sqrtf(3.0f / F), 0);

    pl_gguf_writer *w;
    pl_gguf_writer_create(&w);
    pl_gguf_writer_add_str(w, "general.architecture", "toy");
    pl_gguf_writer_add_u32(w, "toy.embedding_length", E);
    pl_gguf_writer_add_u32(w, "toy.block_count", L);
    pl_gguf_writer_add_u32(w, "toy.feed_forward_length", F);
    pl_gguf_writer_add_u32(w, "toy.attention.head_count", H);
    pl_gguf_writer_add_str(w, "tokenizer.ggml.model", "gpt2");
    pl_gguf_writer_add_str(w, "tokenizer.ggml.pre", "qwen2");
    static char names[V][4];
    const char *ptrs[V];
    int32_t types[V];
    for (int i = 0; i < V; i++) {
        names[i][0] = (char)('0' + i); /* printable ASCII: its own GPT-2 byte symbol */
        ptrs[i] = names[i];
        types[i] = 1;
    }
    pl_gguf_writer_add_arr_str(w, "tokenizer.ggml.tokens", ptrs, V);
    pl_gguf_writer_add_arr(w, "tokenizer.ggml.token_type", PL_GGUF_INT32, types, V);
    pl_gguf_writer_add_arr_str(w, "tokenizer.ggml.merges", ptrs, 0);
    pl_gguf_writer_add_tensor(w, "token_embd.weight", PL_F32, 2, (int64_t[]){E, V}, tok_embd, sizeof tok_embd);
    char n[64];
    for (int l = 0; l < L; l++) {
#define T2(name, arr, a, b) snprintf(n, sizeof n, "blk.%d." name ".weight", l); \
        pl_gguf_writer_add_tensor(w, n, PL_F32, 2, (int64_t[]){a, b}, arr[l], sizeof arr[l])
        snprintf(n, sizeof n, "blk.%d.attn_norm.weight", l);
        pl_gguf_writer_add_tensor(w, n, PL_F32, 1, (int64_t[]){E}, attn_norm[l], sizeof attn_norm[l]);
        T2("attn_q", wq, E, E); T2("attn_k", wk, E, E); T2("attn_v", wv, E, E); T2("attn_output", wo, E, E);
        snprintf(n, sizeof n, "blk.%d.ffn_norm.weight", l);
        pl_gguf_writer_add_tensor(w, n, PL_F32, 1, (int64_t[]){E}, ffn_norm[l], sizeof ffn_norm[l]);
        T2("ffn_gate", wg, E, F); T2("ffn_up", wu, E, F); T2("ffn_down", wd, F, E);
#undef T2
    }
    pl_gguf_writer_add_tensor(w, "output_norm.weight", PL_F32, 1, (int64_t[]){E}, out_norm, sizeof out_norm);
    pl_status st = pl_gguf_writer_write_file(w, path);
    CHECK(st == PL_OK, "write: %s", pl_last_error());
    pl_gguf_writer_free(w);
}

int main(void) {
    char path[128];
    snprintf(path, sizeof path, "/tmp/pl_toy_%d.gguf", (int)getpid());
    write_model(path);
    static const int toks[T] = {3, 17, 42, 5, 63, 0, 29};
    static double want[T][V];
    oracle(toks, T, want);
    const char *devs[] = {"ref", "cpu"};
    for (int di = 0; di < 2; di++) {
        pl_model_params p = pl_model_default_params();
        p.device = devs[di];
        p.n_ctx = 32;
        pl_model *m = NULL;
        pl_status st = pl_model_load(path, &p, &m);
        CHECK(st == PL_OK, "load toy on %s: %s", devs[di], pl_last_error());
        if (st != PL_OK) continue;
        CHECK(!strcmp(pl_model_arch(m), "toy"), "arch");
        pl_session *s;
        pl_session_create(m, &s);
        float lg[V];
        double maxd = 0, maxv = 0;
        /* Prefill 4 tokens at once, then decode the rest one by one. */
        int32_t ids[T];
        for (int i = 0; i < T; i++) ids[i] = toks[i];
        st = pl_session_eval(s, ids, 4, lg);
        CHECK(st == PL_OK, "eval: %s", pl_last_error());
        for (int t = 3; t < T && st == PL_OK; t++) {
            if (t > 3) st = pl_session_eval(s, &ids[t], 1, lg);
            for (int i = 0; i < V; i++) {
                double dd = fabs(lg[i] - want[t][i]);
                if (!(dd <= maxd)) maxd = dd;
                if (fabs(want[t][i]) > maxv) maxv = fabs(want[t][i]);
            }
        }
        /* f16 KV cache: ~1e-3 relative. */
        CHECK(maxd < 2e-2 * (maxv > 1 ? maxv : 1), "%s: max |logit - oracle| %g (max |logit| %g)", devs[di], maxd, maxv);
        printf("toy on %s: max |logit - oracle| = %.2e (logits up to %.2f)\n", devs[di], maxd, maxv);
        pl_session_free(s);
        pl_model_free(m);
    }
    unlink(path);
    return pl_test_summary("test_toy");
}
