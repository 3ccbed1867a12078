/*
 * Presentation of fit planning for the CLI (cli_fit.c): --memory parsing and
 * the advice printed when a model does not fit. The library returns numbers
 * and reason codes (pl_fit, pocketllm.h); the wording is the tools'.
 */
#ifndef PL_TOOLS_CLI_FIT_H
#define PL_TOOLS_CLI_FIT_H
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include "pocketllm.h"

/* Parses a byte count: "123", "1.5e9", "512M", "8G"/"8GiB" (powers of 1024),
 * "8GB" (powers of 1000). */
bool pl_cli_parse_bytes(const char *s, uint64_t *out);

/* A --memory value: a byte count as above, or "auto" (the device's free
 * memory). On failure msg (cap bytes) receives the reason. */
pl_status pl_cli_parse_budget(const char *s, const char *device, uint64_t *out, char *msg, size_t cap);

/* A one-paragraph message for a model that did not fit (run/bench print it
 * after PL_ERR_DOES_NOT_FIT): what it needs, the rung the ladder picks for
 * this budget and the commands that make it. Writes "" when the plan itself
 * fails. Always NUL-terminates buf. */
void pl_cli_fit_advice(const char *model_path, const pl_model_params *mp, char *buf, size_t cap);

#endif
