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
    double prompt_s;      /* seconds per prompt token added to a step */
    uint64_t n_decode;    /* samples taken into each estimate */
    uint64_t n_prompt;
} pl_srv_step_est;

typedef struct pl_srv_budget_cfg {
    int n_batch;          /* tokens per step with nobody decoding (a full chunk) */
    int cap;              /* hard cap on a step's tokens while decoding, decode tokens included (<= n_batch) */
    bool timed;           /* false: cap is the budget (an explicit --max-num-batched-tokens alone) */
    double max_step_s;    /* target step time while decoding; <= 0: factor x the predicted decode step */
    double factor;        /* see max_step_s (> 1) */
    int fallback;         /* step tokens while decoding before both costs are measured */
} pl_srv_budget_cfg;

/* Learns from one step that ran n_decode decode tokens and n_prompt prompt
 * tokens in dt seconds. Steps whose time is not a positive finite number are
 * ignored, as are steps with prompt tokens whose decode part cannot be told
 * apart yet (decoders but no decode estimate). */
void pl_srv_step_observe(pl_srv_step_est *e, int n_decode, int n_prompt, double dt);

/* Predicted time of the decode part of a step with n_decode decoders (0
 * while unknown). */
double pl_srv_step_decode_time(const pl_srv_step_est *e, int n_decode);

/* Prompt tokens to add to a step that holds n_decode decode tokens: with
 * nobody decoding, a full chunk (n_batch); else what keeps the predicted
 * step time within the target, at least 1 (a prompt always advances) and at
 * most cap - n_decode (cap itself when not timed, as before). */
int pl_srv_step_prompt_budget(const pl_srv_step_est *e, const pl_srv_budget_cfg *c, int n_decode);

#endif
