#!/usr/bin/env bash
# `pocketllm serve`: the Python tests in tests/server (official openai client
# and raw HTTP against real servers on loopback ports, tiny fixture model).
# POCKETLLM_LOAD_SECONDS sets the load test's length (default 60, max 120).
# Skips (exit 0, saying so) only when the Python packages are missing; run
# scripts/setup-deps.sh to install them.
set -uo pipefail
BIN=$1 FIX=$2
here=$(cd "$(dirname "$0")/../server" && pwd)
if ! python3 -c 'import openai, pytest, requests' 2>/dev/null; then
  echo "server: SKIPPED: python packages openai, pytest, requests are not importable" \
       "(install them with scripts/setup-deps.sh or: python3 -m pip install -r $here/requirements.txt)"
  exit 0
fi
export POCKETLLM_BIN=$BIN POCKETLLM_FIXTURES=$FIX PYTHONDONTWRITEBYTECODE=1
cd "$here" || exit 1
# -p no:cacheprovider: write nothing into the source tree.
exec python3 -m pytest -q -s -p no:cacheprovider --durations=5 .
