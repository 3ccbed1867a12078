/* The time budget of a serve step (see server_budget.h). */
#include "server_budget.h"
#include <math.h>

/* Weight of a new sample: about the last 8 steps count, so a change of load
 * (a sequence joining, another process taking a core) is followed within a
 * second of decoding, while one noisy step moves the estimate by 1/8. */
#define EST_ALPHA 0.125
/* A step with few prompt tokens says little about their cost (its time is
 * mostly the decode part and noise): its sample weighs np / (np + 8) of a
 * full one. */
#define PROMPT_WEIGHT_TOKENS 8.0

/* A sample above this multiple of the estimate is taken at that multiple:
 * a step stalled by the OS (a preempted thread on a shared machine) would
 * otherwise move the estimate by its whole stall, and a step with a few
 * prompt tokens divides such a stall among them only. A real slowdown
 * still shows within a few steps. */
#define SAMPLE_CLAMP 4.0

/* A step this much slower than its predicted decode part is past the
 * weight-read floor, whatever the row estimate predicted (noise on a step
 * under the floor stays below it). */
#define PAST_FLOOR 1.25

/* With slack_seqs S (serve's default 3), the slack of the default target,
 * (factor - 1) x the decode step, is what a step with prompt tokens may add
 * to the wait of each of S decoding sequences; it is shared among the
 * sequences it delays: one sequence decoding gets S times the slack, 2 S get
 * half of it.
 * A prompt arriving beside one stream (2 clients) is let in about as fast as
 * the stream's tokens allow, while beside many streams, each of whose tokens
 * it delays, it goes in smaller chunks. Measured (bench/RESULTS.md, one
 * interleaved run against llama-server): a fixed 1.5 x left TTFT p95 at 2
 * clients behind llama-server's, a fixed 2.5 x put ITL p95 at 4 clients
 * behind it; this rule is 2.5 x with one decoding sequence and 1.5 x with
 * three. An explicit --max-step-ms is the target whatever the count;
 * slack_seqs 0 keeps factor x the decode step whatever the count. */

static bool pos_finite(double x) { return x > 0 && isfinite(x); }

static double ewma(double est, double sample, double alpha) {
    if (!(est > 0)) return sample;
    if (sample > SAMPLE_CLAMP * est) sample = SAMPLE_CLAMP * est;
    return est + alpha * (sample - est);
}

/* The roofline's seconds per row (server_budget.h): dt / rows is an upper
 * bound on it from any step, the value itself from a step past the floor.
 * Called before the decode estimate takes this step. */
static void observe_row(pl_srv_step_est *e, int n_decode, int n_prompt, double dt) {
    int n = n_decode + n_prompt;
    double s = dt / n;
    if (!pos_finite(e->row_s)) {
        /* The first estimate: from a step with prompt tokens (a decode
         * step's time / rows is the weight read, far above the row cost). */
        if (n_prompt > 0) {
            e->row_s = s;
            e->n_row = 1;
        }
        return;
    }
    if (n_decode == 0) return; /* prefill alone: hundreds of rows, a rate the small steps do not get */
    double floor_t = pl_srv_step_decode_time(e, n_decode);
    if (!(floor_t > 0)) return;
    bool past = e->row_s * n >= floor_t || dt > PAST_FLOOR * floor_t;
    if (!past && !(s < e->row_s)) return; /* under the floor: a bound the estimate already meets */
    /* The first few samples weigh 1/2, 1/3, ...: the first estimate may be
     * a large prefill's rate, and a chunk made from it overshoots until
     * the estimate has moved. */
    double a = 1.0 / (double)(e->n_row + 1);
    double next = ewma(e->row_s, s, a > EST_ALPHA ? a : EST_ALPHA);
    /* Far too large an estimate (a first step stalled by the OS) gives
     * one-token chunks whose steps sit under the floor: each such sample
     * halves it at least, rather than taking it down by 1/8 a step. */
    if (s < e->row_s / SAMPLE_CLAMP && next > 0.5 * e->row_s) next = 0.5 * e->row_s;
    e->row_s = next;
    e->n_row++;
}

void pl_srv_step_observe(pl_srv_step_est *e, int n_decode, int n_prompt, double dt) {
    if (!e || !(dt > 0) || !isfinite(dt) || n_decode < 0 || n_prompt < 0 || n_decode + n_prompt == 0) return;
    observe_row(e, n_decode, n_prompt, dt);
    if (n_prompt == 0) {
        e->decode_s = ewma(e->decode_s, dt, EST_ALPHA);
        e->decode_n = e->decode_n > 0 ? e->decode_n + EST_ALPHA * (n_decode - e->decode_n) : n_decode;
        e->n_decode++;
        return;
    }
    double dec = 0;
    if (n_decode > 0) {
        dec = pl_srv_step_decode_time(e, n_decode);
        if (!(dec > 0)) return;
    }
    /* Noise can make the step shorter than its predicted decode part; the
     * sample is then 0, and the estimate only shrinks by its weight (an
     * estimate too low gives a large chunk, whose step corrects it). */
    double sample = (dt - dec) / n_prompt;
    if (sample < 0) sample = 0;
    if (!(e->prompt_s > 0)) {
        if (sample > 0) { e->prompt_s = sample; e->n_prompt++; }
        return;
    }
    double w = EST_ALPHA * n_prompt / (n_prompt + PROMPT_WEIGHT_TOKENS);
    e->prompt_s = ewma(e->prompt_s, sample, w);
    e->n_prompt++;
}

double pl_srv_step_decode_time(const pl_srv_step_est *e, int n_decode) {
    if (!e || !(e->decode_s > 0) || !isfinite(e->decode_s) || n_decode <= 0) return 0;
    double ref = e->decode_n >= 1 && isfinite(e->decode_n) ? e->decode_n : 1;
    return n_decode > ref ? e->decode_s * (n_decode / ref) : e->decode_s;
}

double pl_srv_step_time(const pl_srv_step_est *e, pl_srv_step_cost c, int n_decode, int n_prompt) {
    if (!e || n_decode < 0 || n_prompt < 0 || n_decode + n_prompt == 0) return 0;
    if (c == PL_SRV_COST_LINEAR) {
        double dec = pl_srv_step_decode_time(e, n_decode);
        if (n_decode > 0 && !(dec > 0)) return 0;
        if (n_prompt == 0) return dec;
        return pos_finite(e->prompt_s) ? dec + n_prompt * e->prompt_s : 0;
    }
    double floor_t = n_decode > 0 ? pl_srv_step_decode_time(e, n_decode) : pos_finite(e->decode_s) ? e->decode_s : 0;
    if (n_prompt == 0) return floor_t;
    if (!pos_finite(e->row_s)) return 0;
    double rows = e->row_s * (n_decode + n_prompt);
    return rows > floor_t ? rows : floor_t;
}

double pl_srv_step_target(const pl_srv_budget_cfg *c, double t_decode, int n_decode) {
    if (!c || !pos_finite(t_decode)) return 0;
    if (pos_finite(c->max_step_s)) return c->max_step_s;
    double slack = c->factor > 1 && isfinite(c->factor) ? c->factor - 1 : 0;
    if (pos_finite(c->slack_seqs)) slack *= c->slack_seqs / (n_decode > 1 ? n_decode : 1);
    return t_decode * (1 + slack);
}

int pl_srv_step_prompt_budget(const pl_srv_step_est *e, const pl_srv_budget_cfg *c, int n_decode) {
    int n_batch = c->n_batch > 0 ? c->n_batch : 1;
    if (n_decode <= 0) return n_batch;
    int cap = c->cap > 0 && c->cap < n_batch ? c->cap : n_batch;
    int room = cap - n_decode;
    if (room < 1) room = 1;
    if (!c->timed) return room;
    double t_decode = pl_srv_step_decode_time(e, n_decode);
    bool linear = c->cost == PL_SRV_COST_LINEAR;
    bool known = pos_finite(t_decode) && pos_finite(linear ? e->prompt_s : e->row_s);
    if (!known) {
        int k = (c->fallback > 0 ? c->fallback : 1) - n_decode;
        return k < 1 ? 1 : k > room ? room : k;
    }
    double target = pl_srv_step_target(c, t_decode, n_decode);
    double k;
    if (linear)
        k = floor((target - t_decode) / e->prompt_s);
    else
        /* max(t_decode, rows x row_s) <= target: below the decode step no
         * row fits (1, as the linear rule gives); else the free rows under
         * the floor and what the slack buys, decode rows included. */
        k = target < t_decode ? 1 : floor(target / e->row_s) - n_decode;
    if (!(k >= 1)) return 1;               /* NaN too */
    return k >= room ? room : (int)k;
}
