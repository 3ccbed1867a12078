/*
 * The time budget of a serve step (chunked prefill, issue 17).
 *
 * While sequences decode, every step is one inter-token latency for each of
 * them, so the prompt tokens added to a step are chosen to keep the step's
 * predicted time within a target. The prediction comes from exponentially
 * weighted estimates, learned from the steps actually run: the time of a
 * decode-only step and how many sequences it decoded, and seconds per prompt
 * token (what a step with prompt tokens took beyond its predicted decode
 * part). Pure functions of the estimates: no clock, no locks
 * (tests/test_server_budget.c).
 *
 * The decode part of a step with n decoders is the decode-only step time
 * scaled up when n is above the decoders it was measured with, never down:
 * a decode step is bound by reading the weights, so on a CPU 2 rows cost
 * what 8 do (measured: 4 decode rows and up to 4 prompt rows, one cost). A
 * per-sequence cost scaled down for the fewer decoders of a step whose
 * other slots are in prefill put the rest of the weight read on the prompt
 * tokens, a few of them: their cost came out several times too high, the
 * next chunk smaller, its per-token share of the error larger, down to one
 * token a step. Erring the other way is stable: too large a chunk divides
 * the error among more tokens.
 *
 * The cost of the prompt tokens themselves is the same roofline (the
 * default, PL_SRV_COST_ROOFLINE): a step of n rows (decode and prompt
 * tokens together) takes about max(weight read, n x compute per row). Its
 * time is flat up to the knee, weight read / compute per row (~8 rows for a
 * 1.5B Q4_K_M on 2 cores), and linear past it. So the step may hold
 * target / row_s rows in all: the rows that are free under the flat part
 * first, then as many as the slack buys. The old linear rule
 * (PL_SRV_COST_LINEAR: decode part + prompt tokens x prompt_s, prompt_s
 * learned from what a step took beyond its decode part) charges the free
 * rows as if they were past the knee: a prompt arriving beside one decoding
 * sequence got ~3 tokens a step where ~8 cost the same (TTFT p95 at K = 2).
 *
 * row_s is learned from the steps with decoders only: every step's dt / n
 * is an upper bound on it (dt = max(floor, n row_s) >= n row_s), and it is
 * row_s itself when the step is past the floor. So a step predicted past
 * the knee, or one clearly slower than its decode part, moves the estimate
 * to its dt / n; a step under the floor can only lower it (its dt / n is
 * the weight read divided among few rows). Too small an estimate gives a
 * chunk past the target, whose step raises it; too large a one gives a step
 * under the floor or the target, whose dt / n lowers it. Prefill steps with
 * nobody decoding (hundreds of rows, a more efficient per-row rate) give
 * only the first estimate, an upper bound on the small steps' rate.
 */
#ifndef PL_SERVER_BUDGET_H
#define PL_SERVER_BUDGET_H
#include <stdbool.h>
#include <stdint.h>

/* Learned step costs. 0 = no estimate yet (a cost is never measured as 0:
 * such samples are dropped). */
typedef struct pl_srv_step_est {
    double decode_s;      /* seconds of a decode-only step */
    double decode_n;      /* sequences decoded in those steps */
    double prompt_s;      /* seconds per prompt token added to a step (the linear rule) */
    double row_s;         /* seconds per row of a step past the weight-read floor (the roofline) */
    uint64_t n_decode;    /* samples taken into each estimate */
    uint64_t n_prompt;
    uint64_t n_row;
} pl_srv_step_est;

/* How the prompt tokens' part of a step is predicted (see above). */
typedef enum pl_srv_step_cost {
    PL_SRV_COST_ROOFLINE = 0, /* step = max(decode part, rows x row_s) */
    PL_SRV_COST_LINEAR = 1,   /* step = decode part + prompt tokens x prompt_s (before the roofline) */
} pl_srv_step_cost;

typedef struct pl_srv_budget_cfg {
    int n_batch;          /* tokens per step with nobody decoding (a full chunk) */
    int cap;              /* hard cap on a step's tokens while decoding, decode tokens included (<= n_batch) */
    bool timed;           /* false: cap is the budget (an explicit --max-num-batched-tokens alone) */
    double max_step_s;    /* target step time while decoding; <= 0: from factor (pl_srv_step_target) */
    double factor;        /* see max_step_s and pl_srv_step_target (> 1) */
    double slack_seqs;    /* > 0: factor's slack is shared among the decoders (pl_srv_step_target); 0: not */
    int fallback;         /* step tokens while decoding before both costs are measured */
    pl_srv_step_cost cost; /* the prompt tokens' cost model (0: the roofline) */
} pl_srv_budget_cfg;

/* Learns from one step that ran n_decode decode tokens and n_prompt prompt
 * tokens in dt seconds: every estimate, whichever rule the budget uses.
 * Steps whose time is not a positive finite number are ignored; so is, for
 * prompt_s, a step with prompt tokens whose decode part cannot be told
 * apart yet (decoders but no decode estimate), and, for row_s once it has
 * a first estimate, a step with decoders before the decode step is measured
 * and any step with nobody decoding. */
void pl_srv_step_observe(pl_srv_step_est *e, int n_decode, int n_prompt, double dt);

/* Predicted time of the decode part of a step with n_decode decoders (0
 * while unknown). */
double pl_srv_step_decode_time(const pl_srv_step_est *e, int n_decode);

/* Predicted time of a step with n_decode decode and n_prompt prompt tokens
 * under the cost model c (0 while unknown). */
double pl_srv_step_time(const pl_srv_step_est *e, pl_srv_step_cost c, int n_decode, int n_prompt);

/* The target time of a step that holds n_decode decode tokens, given the
 * predicted decode step t_decode: c->max_step_s when set, else the decode
 * step plus (factor - 1) x t_decode, times slack_seqs / n_decode when
 * slack_seqs > 0 (the slack shared among the sequences the step delays; see
 * server_budget.c). 0 while unknown. */
#define PL_SRV_SLACK_SEQS 3 /* serve's slack_seqs */
double pl_srv_step_target(const pl_srv_budget_cfg *c, double t_decode, int n_decode);

/* Prompt tokens to add to a step that holds n_decode decode tokens: with
 * nobody decoding, a full chunk (n_batch); else what keeps the predicted
 * step time within the target, at least 1 (a prompt always advances) and at
 * most cap - n_decode (cap itself when not timed, as before). Under the
 * roofline a target at or above the decode step buys the rows free under
 * the floor too; a target below it gets 1, as under the linear rule. */
int pl_srv_step_prompt_budget(const pl_srv_step_est *e, const pl_srv_budget_cfg *c, int n_decode);

#endif
