/* Unit tests of the serve step's time budget (tools/pocketllm/server_budget.c):
 * synthetic step timings in, prompt tokens per step out. The estimates are
 * checked against the costs the timings were made from; the chosen chunk
 * against the target, the hard cap and the floor of one token, including
 * the first steps (no estimate) and timings that are 0, negative or NaN. */
#include "testutil.h"
#include "../tools/pocketllm/server_budget.c"
#include <stdlib.h>

static pl_srv_budget_cfg cfg_auto(void) {
    pl_srv_budget_cfg c = {.n_batch = 512, .cap = 512, .timed = true, .max_step_s = 0, .factor = 1.5,
                           .fallback = 128};
    return c;
}

static bool near(double a, double b) { return fabs(a - b) <= 1e-9 * (fabs(b) + 1e-12); }

/* Nobody decoding: a full chunk, whatever is known. */
static void check_alone(void) {
    pl_srv_budget_cfg c = cfg_auto();
    pl_srv_step_est none = {0}, some = {.decode_s = 0.02, .prompt_s = 0.003}, bad = {.decode_s = NAN, .prompt_s = -1};
    CHECK(pl_srv_step_prompt_budget(&none, &c, 0) == 512, "alone, no estimate");
    CHECK(pl_srv_step_prompt_budget(&some, &c, 0) == 512, "alone, estimates");
    CHECK(pl_srv_step_prompt_budget(&bad, &c, 0) == 512, "alone, broken estimates");
    CHECK(pl_srv_step_prompt_budget(NULL, &c, 0) == 512, "alone, no estimate struct");
    c.cap = 16; /* the cap binds while decoding only, as --max-num-batched-tokens always did */
    CHECK(pl_srv_step_prompt_budget(&some, &c, 0) == 512, "alone, capped while decoding");
    c.timed = false;
    CHECK(pl_srv_step_prompt_budget(&some, &c, 0) == 512, "alone, fixed budget");
}

/* Before both costs are measured: the fallback count, decode tokens included. */
static void check_first_steps(void) {
    pl_srv_budget_cfg c = cfg_auto();
    pl_srv_step_est e = {0};
    CHECK(pl_srv_step_prompt_budget(&e, &c, 4) == 124, "no estimate: %d", pl_srv_step_prompt_budget(&e, &c, 4));
    e.decode_s = 0.02; /* decode known, prompt not */
    CHECK(pl_srv_step_prompt_budget(&e, &c, 4) == 124, "decode estimate only");
    e = (pl_srv_step_est){.prompt_s = 0.003};
    CHECK(pl_srv_step_prompt_budget(&e, &c, 4) == 124, "prompt estimate only");
    CHECK(pl_srv_step_prompt_budget(&e, &c, 200) == 1, "fallback below the decode tokens: still 1");
    c.cap = 64;
    CHECK(pl_srv_step_prompt_budget(&e, &c, 4) == 60, "fallback above the cap: %d", pl_srv_step_prompt_budget(&e, &c, 4));
}

/* The old fixed budget: cap minus the decode tokens, at least 1. */
static void check_fixed(void) {
    pl_srv_budget_cfg c = cfg_auto();
    c.timed = false;
    c.cap = 7;
    pl_srv_step_est e = {.decode_s = 0.02, .prompt_s = 0.003};
    CHECK(pl_srv_step_prompt_budget(&e, &c, 1) == 6, "fixed 7, 1 decoding");
    CHECK(pl_srv_step_prompt_budget(&e, &c, 7) == 1, "fixed 7, 7 decoding");
    CHECK(pl_srv_step_prompt_budget(&e, &c, 9) == 1, "fixed 7, 9 decoding");
    c.cap = 1000; /* above --batch: --batch bounds it */
    CHECK(pl_srv_step_prompt_budget(&e, &c, 2) == 510, "cap above n_batch");
}

/* Learning from steps made with known costs, then the chunk from them. */
static void check_learned(void) {
    const double dec = 0.02, tok = 0.003; /* s per decoding sequence (a compute-bound decode), s per prompt token */
    pl_srv_step_est e = {0};
    pl_srv_step_observe(&e, 4, 0, 4 * dec);
    CHECK(near(e.decode_s, 4 * dec) && e.decode_n == 4 && e.n_decode == 1, "first decode sample taken as is: %g",
          e.decode_s);
    pl_srv_step_observe(&e, 0, 100, 100 * tok);
    CHECK(near(e.prompt_s, tok) && e.n_prompt == 1, "first prompt sample taken as is: %g", e.prompt_s);
    pl_srv_step_observe(&e, 4, 10, 4 * dec + 10 * tok);
    CHECK(near(e.prompt_s, tok), "mixed step: the decode part is taken off: %g", e.prompt_s);

    pl_srv_budget_cfg c = cfg_auto();
    /* Auto: the step may take 1.5 x the 80 ms decode step: 40 ms of prompt tokens. */
    int want = (int)floor((1.5 * 4 * dec - 4 * dec) / tok);
    CHECK(want == 13, "test arithmetic: %d", want);
    CHECK(pl_srv_step_prompt_budget(&e, &c, 4) == want, "auto, 4 decoding: %d", pl_srv_step_prompt_budget(&e, &c, 4));
    /* Twice the decoders: twice the decode step, and twice its slack. */
    want = (int)floor((1.5 * 8 * dec - 8 * dec) / tok);
    CHECK(pl_srv_step_prompt_budget(&e, &c, 8) == want, "auto, 8 decoding: %d, want %d",
          pl_srv_step_prompt_budget(&e, &c, 8), want);
    /* A fixed target. */
    c.max_step_s = 0.2;
    want = (int)floor((0.2 - 4 * dec) / tok);
    CHECK(pl_srv_step_prompt_budget(&e, &c, 4) == want, "200 ms, 4 decoding: %d, want %d",
          pl_srv_step_prompt_budget(&e, &c, 4), want);
    /* A target the decode step alone exceeds: prompts still advance. */
    c.max_step_s = 0.05;
    CHECK(pl_srv_step_prompt_budget(&e, &c, 4) == 1, "target below the decode step");
    /* A target with room for more than the cap: the cap. */
    c.max_step_s = 100;
    CHECK(pl_srv_step_prompt_budget(&e, &c, 4) == 508, "huge target, n_batch cap");
    c.cap = 32;
    CHECK(pl_srv_step_prompt_budget(&e, &c, 4) == 28, "huge target, explicit cap");
    CHECK(pl_srv_step_prompt_budget(&e, &c, 40) == 1, "more decoders than the cap");
    /* A broken factor or target falls back to no slack, never to NaN. */
    c = cfg_auto();
    c.factor = NAN;
    CHECK(pl_srv_step_prompt_budget(&e, &c, 4) == 1, "NaN factor");
    c.factor = 1.5;
    c.max_step_s = INFINITY;
    CHECK(pl_srv_step_prompt_budget(&e, &c, 4) == 13, "infinite target: the auto one");
}

/* Timings that say nothing leave the estimates alone. */
static void check_bad_timings(void) {
    pl_srv_step_est e = {0};
    pl_srv_step_observe(&e, 4, 0, 0);
    pl_srv_step_observe(&e, 4, 0, -0.1);
    pl_srv_step_observe(&e, 4, 0, NAN);
    pl_srv_step_observe(&e, 4, 0, INFINITY);
    pl_srv_step_observe(&e, 0, 0, 0.1);
    pl_srv_step_observe(&e, -1, 3, 0.1);
    pl_srv_step_observe(NULL, 4, 0, 0.1);
    CHECK(e.decode_s == 0 && e.prompt_s == 0 && e.n_decode == 0 && e.n_prompt == 0, "bad timings were learned");
    /* Prompt tokens beside decoders before any decode-only step: the
     * prompt's share cannot be told apart. */
    pl_srv_step_observe(&e, 4, 10, 0.1);
    CHECK(e.prompt_s == 0 && e.n_prompt == 0, "mixed step learned without a decode estimate: %g", e.prompt_s);
    /* A mixed step faster than its decode part: the estimate shrinks by the
     * sample's weight, and stays a positive cost. */
    pl_srv_step_observe(&e, 4, 0, 0.08);
    pl_srv_step_observe(&e, 0, 50, 0.15);
    double before = e.prompt_s;
    pl_srv_step_observe(&e, 4, 2, 0.07);
    CHECK(e.prompt_s < before && e.prompt_s > 0.5 * before, "noisy short step: %g from %g", e.prompt_s, before);
    pl_srv_step_observe(&e, 4, 0, NAN);
    CHECK(near(e.decode_s, 0.08), "NaN decode step changed the estimate: %g", e.decode_s);
}

/* One stalled step moves an estimate by a bounded amount; a lasting
 * slowdown is followed. */
static void check_outliers(void) {
    pl_srv_step_est e = {0};
    pl_srv_step_observe(&e, 4, 0, 0.08);
    pl_srv_step_observe(&e, 0, 100, 0.3);
    pl_srv_step_observe(&e, 4, 0, 8.0); /* a 100x stall */
    CHECK(e.decode_s > 0.08 && e.decode_s <= 0.08 * (1 + EST_ALPHA * (SAMPLE_CLAMP - 1)) + 1e-12,
          "decode after a stall: %g", e.decode_s);
    pl_srv_step_observe(&e, 4, 2, e.decode_s + 1.0); /* 0.5 s per prompt token, 166x */
    CHECK(e.prompt_s > 0.003 && e.prompt_s <= 0.003 * (1 + EST_ALPHA * (SAMPLE_CLAMP - 1)) + 1e-12,
          "prompt after a stall: %g", e.prompt_s);
    for (int i = 0; i < 60; i++) {
        pl_srv_step_observe(&e, 4, 0, 0.24);              /* the machine is 3x slower now */
        pl_srv_step_observe(&e, 4, 20, 0.24 + 20 * 0.009);
    }
    CHECK(fabs(e.decode_s - 0.24) < 0.012, "decode after a lasting slowdown: %g", e.decode_s);
    CHECK(fabs(e.prompt_s - 0.009) < 0.001, "prompt after a lasting slowdown: %g", e.prompt_s);
}

/* The decode part: scaled up for more decoders, never down. */
static void check_decode_time(void) {
    pl_srv_step_est e = {0};
    CHECK(pl_srv_step_decode_time(&e, 4) == 0, "unknown");
    pl_srv_step_observe(&e, 4, 0, 0.08);
    CHECK(near(pl_srv_step_decode_time(&e, 4), 0.08), "as measured");
    CHECK(near(pl_srv_step_decode_time(&e, 2), 0.08), "fewer decoders: not scaled down");
    CHECK(near(pl_srv_step_decode_time(&e, 8), 0.16), "more decoders: scaled up");
    CHECK(pl_srv_step_decode_time(&e, 0) == 0, "no decoders");
    e.decode_n = NAN;
    CHECK(near(pl_srv_step_decode_time(&e, 2), 0.16), "broken count: taken as 1");
}

/* From wrong estimates, steps made by true costs bring the chunk to what
 * those costs give. The decode step is bound by the weight read (the same
 * time for 3 or 4 decoders), and the steps with prompt tokens have one
 * decoder fewer than the decode-only ones (its slot is in prefill): a
 * per-sequence decode cost put a quarter of the weight read on the few
 * prompt tokens and shrank the chunk step after step to 1. */
static void check_converges(void) {
    const double mem = 0.06, tok = 0.004;
    pl_srv_step_est e = {.decode_s = 0.3, .decode_n = 4, .prompt_s = 0.0001, .n_decode = 1, .n_prompt = 1};
    pl_srv_budget_cfg c = cfg_auto();
    srand(17);
    int k = 0;
    for (int step = 0; step < 400; step++) {
        double noise = 1 + 0.02 * ((double)rand() / RAND_MAX - 0.5);
        if (step % 3 == 0) pl_srv_step_observe(&e, 4, 0, mem * noise);
        else {
            k = pl_srv_step_prompt_budget(&e, &c, 3);
            CHECK(k >= 1 && k <= c.cap - 3, "step %d: chunk %d out of bounds", step, k);
            pl_srv_step_observe(&e, 3, k, (mem + k * tok) * noise);
        }
    }
    CHECK(fabs(e.decode_s - mem) < 0.05 * mem, "decode estimate %g, true %g", e.decode_s, mem);
    CHECK(fabs(e.prompt_s - tok) < 0.15 * tok, "prompt estimate %g, true %g", e.prompt_s, tok);
    int want = (int)floor(0.5 * mem / tok); /* 7.5 -> 7 */
    CHECK(k >= want - 1 && k <= want + 1, "converged chunk %d, want %d", k, want);
    /* And its step stays within the target (1.5 x the decode step) by the true costs. */
    CHECK(mem + k * tok <= 1.5 * mem * 1.05, "step of %g s against a target of %g", mem + k * tok, 1.5 * mem);
}

/* Whatever the estimates, the chunk is within [1, cap - decoders] (or a full
 * chunk alone). */
static void check_bounds(void) {
    srand(3);
    const double vals[] = {0, -1, 1e-12, 1e-6, 0.001, 0.05, 3, 1e300, NAN, INFINITY, -INFINITY};
    const int nv = sizeof vals / sizeof vals[0];
    for (int i = 0; i < 2000; i++) {
        pl_srv_step_est e = {.decode_s = vals[rand() % nv], .decode_n = vals[rand() % nv],
                             .prompt_s = vals[rand() % nv]};
        pl_srv_budget_cfg c = cfg_auto();
        c.cap = 1 + rand() % 600;
        c.max_step_s = vals[rand() % nv];
        c.factor = 1 + vals[rand() % nv];
        c.timed = rand() % 4 != 0;
        int nd = rand() % 40;
        int k = pl_srv_step_prompt_budget(&e, &c, nd);
        int cap = c.cap < c.n_batch ? c.cap : c.n_batch;
        int hi = nd == 0 ? c.n_batch : cap - nd > 1 ? cap - nd : 1;
        CHECK(k >= 1 && k <= hi && (nd > 0 || k == c.n_batch), "decode %g prompt %g cap %d target %g nd %d: %d",
              e.decode_s, e.prompt_s, c.cap, c.max_step_s, nd, k);
    }
}

int main(void) {
    check_alone();
    check_first_steps();
    check_fixed();
    check_learned();
    check_bad_timings();
    check_decode_time();
    check_outliers();
    check_converges();
    check_bounds();
    return pl_test_summary("test_server_budget");
}
