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
    c.cost = PL_SRV_COST_LINEAR;
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
    c.cost = PL_SRV_COST_LINEAR;
    c.factor = NAN;
    CHECK(pl_srv_step_prompt_budget(&e, &c, 4) == 1, "NaN factor");
    c.factor = 1.5;
    c.max_step_s = INFINITY;
    CHECK(pl_srv_step_prompt_budget(&e, &c, 4) == 13, "infinite target: the auto one");
}

/* serve's default target: the slack shared among the decoding sequences
 * (slack_seqs 3: 2.5 x the decode step beside one, 1.5 x beside three,
 * 1.25 x beside six); an explicit target and a broken factor as before. */
static void check_shared_slack(void) {
    pl_srv_budget_cfg c = cfg_auto();
    CHECK(near(pl_srv_step_target(&c, 0.08, 1), 0.12) && near(pl_srv_step_target(&c, 0.08, 6), 0.12),
          "slack_seqs 0: factor x the decode step whatever the count");
    c.slack_seqs = 3;
    CHECK(near(pl_srv_step_target(&c, 0.08, 1), 0.2), "1 decoding: %g", pl_srv_step_target(&c, 0.08, 1));
    CHECK(near(pl_srv_step_target(&c, 0.08, 0), 0.2), "0 decoding: as 1");
    CHECK(near(pl_srv_step_target(&c, 0.08, 3), 0.12), "3 decoding: %g", pl_srv_step_target(&c, 0.08, 3));
    CHECK(near(pl_srv_step_target(&c, 0.08, 6), 0.1), "6 decoding: %g", pl_srv_step_target(&c, 0.08, 6));
    CHECK(pl_srv_step_target(&c, 0, 1) == 0 && pl_srv_step_target(&c, NAN, 1) == 0, "unknown decode step");
    c.max_step_s = 0.3;
    CHECK(near(pl_srv_step_target(&c, 0.08, 1), 0.3) && near(pl_srv_step_target(&c, 0.08, 6), 0.3),
          "an explicit target whatever the count");
    c.max_step_s = 0;
    c.factor = NAN;
    CHECK(near(pl_srv_step_target(&c, 0.08, 1), 0.08), "NaN factor: no slack");
    /* The chunk follows: beside one sequence (decode step 45 ms, 6 ms a
     * prompt token, linear rule) 2.5 x buys 11 tokens where 1.5 x bought 3;
     * beside six, 1.25 x of the same step buys 1. */
    c = cfg_auto();
    c.cost = PL_SRV_COST_LINEAR;
    c.slack_seqs = 3;
    pl_srv_step_est e = {.decode_s = 0.045, .decode_n = 6, .prompt_s = 0.006, .n_decode = 9, .n_prompt = 9};
    CHECK(pl_srv_step_prompt_budget(&e, &c, 1) == 11, "1 decoding: %d", pl_srv_step_prompt_budget(&e, &c, 1));
    CHECK(pl_srv_step_prompt_budget(&e, &c, 6) == 1, "6 decoding: %d", pl_srv_step_prompt_budget(&e, &c, 6));
    c.slack_seqs = 0;
    CHECK(pl_srv_step_prompt_budget(&e, &c, 1) == 3, "fixed 1.5 x, 1 decoding: %d", pl_srv_step_prompt_budget(&e, &c, 1));
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
    c.cost = PL_SRV_COST_LINEAR;
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
        c.slack_seqs = vals[rand() % nv];
        c.timed = rand() % 4 != 0;
        c.cost = rand() % 2 ? PL_SRV_COST_LINEAR : PL_SRV_COST_ROOFLINE;
        e.row_s = vals[rand() % nv];
        int nd = rand() % 40;
        int k = pl_srv_step_prompt_budget(&e, &c, nd);
        int cap = c.cap < c.n_batch ? c.cap : c.n_batch;
        int hi = nd == 0 ? c.n_batch : cap - nd > 1 ? cap - nd : 1;
        CHECK(k >= 1 && k <= hi && (nd > 0 || k == c.n_batch), "decode %g prompt %g cap %d target %g nd %d: %d",
              e.decode_s, e.prompt_s, c.cap, c.max_step_s, nd, k);
    }
}

/* ---- The roofline (the default cost model) ---------------------------
 * True costs of the synthetic machine: a step of n rows takes
 * max(ROOF_W, n x ROOF_C), the weight read up to the knee (7.5 rows), the
 * compute past it: a 1.5B Q4_K_M on 2 cores, ~45 ms and ~6 ms a row. */
#define ROOF_W 0.045
#define ROOF_C 0.006
static double roof(int n) { return n * ROOF_C > ROOF_W ? n * ROOF_C : ROOF_W; }

/* The chunk the true costs give: the most prompt rows whose step stays
 * within factor x the decode-only step. */
static int roof_best(int nd, double factor) {
    int k = 1;
    while (roof(nd + k + 1) <= factor * roof(nd) * (1 + 1e-12)) k++;
    return k;
}

/* Learns from steps made by the true costs, one decode-only step in three
 * (as when a slot's prompt arrives beside nd decoding sequences) and one
 * prompt prefilled alone in ten (nobody decoding: a new turn), the chunk
 * chosen by the budget under cost model m; returns the last chunk. */
static int roof_run(pl_srv_step_est *e, pl_srv_step_cost m, int nd, int steps, unsigned seed) {
    pl_srv_budget_cfg c = cfg_auto();
    c.cost = m;
    srand(seed);
    int k = 0;
    for (int step = 0; step < steps; step++) {
        double noise = 1 + 0.04 * ((double)rand() / RAND_MAX - 0.5);
        if (step % 10 == 5) pl_srv_step_observe(e, 0, 60, roof(60) * noise); /* a prompt alone */
        else if (step % 3 == 0) pl_srv_step_observe(e, nd, 0, roof(nd) * noise);
        else {
            k = pl_srv_step_prompt_budget(e, &c, nd);
            CHECK(k >= 1 && k <= c.cap - nd, "step %d: chunk %d out of bounds", step, k);
            pl_srv_step_observe(e, nd, k, roof(nd + k) * noise);
        }
    }
    return k;
}

/* The flat region: one sequence decoding, a prompt arriving. 1.5 x 45 ms
 * buys 11 rows (66 ms); the linear rule charged each prompt token its
 * compute beyond the decode step and gave 3 (22.5 ms / 6 ms), though the
 * first 6 cost nothing. */
static void check_roof_flat(void) {
    CHECK(roof_best(1, 1.5) == 10, "test arithmetic: %d", roof_best(1, 1.5));
    /* Estimates as the costs: the chunk is exact. */
    pl_srv_step_est e = {.decode_s = ROOF_W, .decode_n = 1, .row_s = ROOF_C, .prompt_s = ROOF_C,
                         .n_decode = 9, .n_row = 9, .n_prompt = 9};
    pl_srv_budget_cfg c = cfg_auto();
    CHECK(pl_srv_step_prompt_budget(&e, &c, 1) == 10, "roofline, 1 decoding: %d", pl_srv_step_prompt_budget(&e, &c, 1));
    CHECK(near(pl_srv_step_time(&e, PL_SRV_COST_ROOFLINE, 1, 5), ROOF_W), "6 rows under the floor: %g",
          pl_srv_step_time(&e, PL_SRV_COST_ROOFLINE, 1, 5));
    CHECK(near(pl_srv_step_time(&e, PL_SRV_COST_ROOFLINE, 1, 10), 11 * ROOF_C), "11 rows: past the knee");
    CHECK(near(pl_srv_step_time(&e, PL_SRV_COST_LINEAR, 1, 5), ROOF_W + 5 * ROOF_C), "the linear rule's 6 rows");
    c.cost = PL_SRV_COST_LINEAR;
    CHECK(pl_srv_step_prompt_budget(&e, &c, 1) == 3, "linear, 1 decoding: %d", pl_srv_step_prompt_budget(&e, &c, 1));
    /* A target equal to the decode step: the free rows only. */
    c = cfg_auto();
    c.max_step_s = ROOF_W;
    CHECK(pl_srv_step_prompt_budget(&e, &c, 1) == 6, "target = decode step: the free rows: %d",
          pl_srv_step_prompt_budget(&e, &c, 1));
    /* A target below the decode step: one token, as before. */
    c.max_step_s = 0.001;
    CHECK(pl_srv_step_prompt_budget(&e, &c, 1) == 1, "target below the decode step");
    /* The hard cap still binds. */
    c = cfg_auto();
    c.cap = 8;
    CHECK(pl_srv_step_prompt_budget(&e, &c, 1) == 7, "roofline under --max-num-batched-tokens 8: %d",
          pl_srv_step_prompt_budget(&e, &c, 1));

    /* Learned from the steps run, from nothing but the first prefill (alone,
     * 60 rows: its rate is the row cost): the same chunk. */
    pl_srv_step_est r = {0};
    pl_srv_step_observe(&r, 0, 60, roof(60));
    CHECK(near(r.row_s, ROOF_C) && r.n_row == 1, "first row estimate from a lone prefill: %g", r.row_s);
    int k = roof_run(&r, PL_SRV_COST_ROOFLINE, 1, 300, 5);
    CHECK(k >= 9 && k <= 10, "roofline, learned, 1 decoding: chunk %d, want 10", k);
    CHECK(fabs(r.row_s - ROOF_C) < 0.1 * ROOF_C, "row estimate %g, true %g", r.row_s, ROOF_C);
    CHECK(roof(1 + k) <= 1.5 * ROOF_W * 1.05, "step of %g s over the target %g", roof(1 + k), 1.5 * ROOF_W);
}

/* The linear region: 10 sequences decoding are past the knee (60 ms);
 * 1.5 x that buys 15 rows, 5 of them prompt tokens, as the linear rule
 * says too there. */
static void check_roof_linear(void) {
    CHECK(roof_best(10, 1.5) == 5, "test arithmetic: %d", roof_best(10, 1.5));
    pl_srv_step_est e = {0};
    pl_srv_step_observe(&e, 0, 100, roof(100));
    int k = roof_run(&e, PL_SRV_COST_ROOFLINE, 10, 300, 7);
    CHECK(k >= 4 && k <= 5, "roofline, learned, 10 decoding: chunk %d, want 5", k);
    CHECK(roof(10 + k) <= 1.5 * roof(10) * 1.05, "step of %g s over the target %g", roof(10 + k), 1.5 * roof(10));
    /* Decode-only steps past the knee teach the row cost too. */
    pl_srv_step_est d = {.row_s = 0.012, .n_row = 20, .decode_s = roof(12), .decode_n = 12, .n_decode = 20};
    for (int i = 0; i < 80; i++) pl_srv_step_observe(&d, 12, 0, roof(12));
    /* Under the knee a decode step's time / rows is the weight read's share:
     * not the row cost, and no bound the estimate breaks. */
    pl_srv_step_est u = d;
    for (int i = 0; i < 80; i++) pl_srv_step_observe(&u, 2, 0, roof(2));
    CHECK(near(u.row_s, d.row_s), "decode steps under the knee moved the row estimate: %g", u.row_s);
    CHECK(fabs(d.row_s - ROOF_C) < 0.02 * ROOF_C, "row estimate from decode steps past the knee: %g", d.row_s);
}

/* From wrong row estimates, 100x too small or too large, the chunk comes
 * back to what the true costs give, in both regions. */
static void check_roof_converges(void) {
    const double wrong[] = {ROOF_C / 100, ROOF_C * 100};
    const int nds[] = {1, 3, 10};
    for (int w = 0; w < 2; w++)
        for (int i = 0; i < 3; i++) {
            pl_srv_step_est e = {.decode_s = roof(nds[i]), .decode_n = nds[i], .row_s = wrong[w], .prompt_s = ROOF_C,
                                 .n_decode = 50, .n_prompt = 50, .n_row = 50};
            int k = roof_run(&e, PL_SRV_COST_ROOFLINE, nds[i], 600, 11 + i);
            int want = roof_best(nds[i], 1.5);
            CHECK(k >= want - 1 && k <= want, "from row_s %g, %d decoding: chunk %d, want %d", wrong[w], nds[i], k,
                  want);
        }
}

/* Timings that say nothing leave the row estimate alone; a stall moves it
 * by a bounded amount; prefills alone after the first, and steps with
 * decoders before the decode step is known, do not move it. */
static void check_roof_bad_timings(void) {
    pl_srv_step_est e = {0};
    pl_srv_step_observe(&e, 1, 0, 0.045); /* a decode step's time per row is the weight read: not taken */
    CHECK(e.row_s == 0 && e.n_row == 0, "row estimate from a decode-only step: %g", e.row_s);
    pl_srv_budget_cfg c = cfg_auto();
    CHECK(pl_srv_step_prompt_budget(&e, &c, 1) == 127, "no row estimate: the fallback: %d",
          pl_srv_step_prompt_budget(&e, &c, 1));
    pl_srv_step_observe(&e, 0, 40, 0);
    pl_srv_step_observe(&e, 0, 40, -1);
    pl_srv_step_observe(&e, 0, 40, NAN);
    pl_srv_step_observe(&e, 1, 40, INFINITY);
    CHECK(e.row_s == 0 && e.n_row == 0, "row estimate from a bad timing: %g", e.row_s);
    pl_srv_step_observe(&e, 0, 40, 40 * ROOF_C);
    CHECK(near(e.row_s, ROOF_C), "first row estimate: %g", e.row_s);
    pl_srv_step_observe(&e, 0, 512, 512 * ROOF_C / 3); /* a large prefill's better rate */
    CHECK(near(e.row_s, ROOF_C), "a later prefill alone moved it: %g", e.row_s);
    pl_srv_step_est f = {.row_s = ROOF_C, .n_row = 1};
    pl_srv_step_observe(&f, 1, 40, 40 * ROOF_C / 3);
    CHECK(near(f.row_s, ROOF_C), "a mixed step without a decode estimate moved it: %g", f.row_s);
    /* Settled estimates, then a 100x stall of a mixed step. */
    int k = roof_run(&e, PL_SRV_COST_ROOFLINE, 1, 120, 13);
    double before = e.row_s;
    pl_srv_step_observe(&e, 1, k, 100 * roof(1 + k));
    CHECK(e.row_s > before && e.row_s <= before * (1 + EST_ALPHA * (SAMPLE_CLAMP - 1)) + 1e-12,
          "row estimate after a stall: %g from %g", e.row_s, before);
    for (int i = 0; i < 3; i++) pl_srv_step_observe(&e, 1, k, 0);
    pl_srv_step_observe(&e, 1, k, NAN);
    pl_srv_step_observe(&e, 1, k, -INFINITY);
    double kept = e.row_s;
    CHECK(isfinite(kept) && kept > 0, "row estimate after zero/NaN timings: %g", kept);
    /* A huge estimate gives one token; 10^5 x too large (a first step
     * stalled by the OS) is unlearned within the run. */
    pl_srv_step_est h = {.decode_s = ROOF_W, .decode_n = 1, .n_decode = 5, .row_s = 1e300, .n_row = 1};
    CHECK(pl_srv_step_prompt_budget(&h, &c, 1) == 1, "huge row estimate: %d", pl_srv_step_prompt_budget(&h, &c, 1));
    h.row_s = 1e5 * ROOF_C;
    k = roof_run(&h, PL_SRV_COST_ROOFLINE, 1, 300, 17);
    CHECK(k >= 9 && k <= 10, "after a huge row estimate: chunk %d", k);
    /* An estimate of 0 or NaN is no estimate: the fallback. */
    h.row_s = NAN;
    CHECK(pl_srv_step_prompt_budget(&h, &c, 1) == 127, "NaN row estimate: %d", pl_srv_step_prompt_budget(&h, &c, 1));
    CHECK(pl_srv_step_time(&h, PL_SRV_COST_ROOFLINE, 1, 4) == 0, "NaN row estimate: no prediction");
}

int main(void) {
    check_roof_flat();
    check_roof_linear();
    check_roof_converges();
    check_roof_bad_timings();
    check_alone();
    check_first_steps();
    check_fixed();
    check_learned();
    check_shared_slack();
    check_bad_timings();
    check_decode_time();
    check_outliers();
    check_converges();
    check_bounds();
    return pl_test_summary("test_server_budget");
}
