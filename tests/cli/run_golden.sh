#!/usr/bin/env bash
# `pocketllm run --json` reproduces llama.cpp's greedy tokens for every core
# fixture and prompt, on ref and cpu, by the comparison rule (only steps whose
# golden margin is decisive must match; a low-margin divergence ends a case).
set -euo pipefail
BIN=$1 FIX=$2
exec python3 "$(dirname "$0")/run_golden.py" "$BIN" "$FIX"
