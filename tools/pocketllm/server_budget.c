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

static double ewma(double est, double sample, double alpha) {
    if (!(est > 0)) return sample;
    if (sample > SAMPLE_CLAMP * est) sample = SAMPLE_CLAMP * est;
    return est + alpha * (sample - est);
}

void pl_srv_step_observe(pl_srv_step_est *e, int n_decode, int n_prompt, double dt) {
    if (!e || !(dt > 0) || !isfinite(dt) || n_decode < 0 || n_prompt < 0 || n_decode + n_prompt == 0) return;
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

int pl_srv_step_prompt_budget(const pl_srv_step_est *e, const pl_srv_budget_cfg *c, int n_decode) {
    int n_batch = c->n_batch > 0 ? c->n_batch : 1;
    if (n_decode <= 0) return n_batch;
    int cap = c->cap > 0 && c->cap < n_batch ? c->cap : n_batch;
    int room = cap - n_decode;
    if (room < 1) room = 1;
    if (!c->timed) return room;
    double t_decode = pl_srv_step_decode_time(e, n_decode);
    bool known = t_decode > 0 && isfinite(t_decode) && e->prompt_s > 0 && isfinite(e->prompt_s);
    if (!known) {
        int k = (c->fallback > 0 ? c->fallback : 1) - n_decode;
        return k < 1 ? 1 : k > room ? room : k;
    }
    double factor = c->factor > 1 && isfinite(c->factor) ? c->factor : 1;
    double target = c->max_step_s > 0 && isfinite(c->max_step_s) ? c->max_step_s : factor * t_decode;
    double k = floor((target - t_decode) / e->prompt_s);
    if (!(k >= 1)) return 1;               /* NaN too */
    return k >= room ? room : (int)k;
}
