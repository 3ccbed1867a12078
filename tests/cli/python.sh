#!/usr/bin/env bash
# The Python package (python/): its pytest suite, run against this build
# tree's library and binary (no install needed): greedy generation equals
# the goldens, the pure-Python GGUF reader and dequantizer agree with the C
# ones on every fixture, the API, chat templates, errors.
# Skips (exit 0, saying so) only when numpy or pytest is missing; run
# scripts/setup-deps.sh to install them.
set -uo pipefail
BIN=$1 FIX=$2
root=$(cd "$(dirname "$0")/../.." && pwd)
lib=$(cd "$(dirname "$BIN")/../lib" 2>/dev/null && pwd)/libpocketllm.so
if ! python3 -c 'import numpy, pytest' 2>/dev/null; then
  echo "python: SKIPPED: python packages numpy and pytest are not importable" \
       "(install them with scripts/setup-deps.sh or: python3 -m pip install numpy pytest jinja2)"
  exit 0
fi
if [ ! -f "$lib" ]; then
  echo "python: FAIL: no shared library at $lib (build the 'pocketllm' target)"
  exit 1
fi
# An ASan-instrumented library can only be loaded into Python with the ASan
# runtime preloaded (and Python's own allocations are not ours to leak-check).
asan_rt=$(ldd "$lib" 2>/dev/null | awk '/libasan/ {print $3}')
if [ -n "$asan_rt" ]; then
  export LD_PRELOAD="$asan_rt${LD_PRELOAD:+:$LD_PRELOAD}" ASAN_OPTIONS="detect_leaks=0${ASAN_OPTIONS:+:$ASAN_OPTIONS}"
fi
export POCKETLLM_LIB=$lib POCKETLLM_BIN=$BIN POCKETLLM_FIXTURES=$FIX
export PYTHONPATH="$root/python${PYTHONPATH:+:$PYTHONPATH}" PYTHONDONTWRITEBYTECODE=1
cd "$root/python" || exit 1
# -p no:cacheprovider: write nothing into the source tree.
exec python3 -m pytest -q -p no:cacheprovider -rs --durations=5 tests
