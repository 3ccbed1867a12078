#!/usr/bin/env bash
# Builds the libFuzzer targets (tests/fuzz/fuzz_*.c) with clang and runs each
# one for a fixed time, seeded from tests/fuzz/seeds/<target>/. Exits non-zero
# if a target fails to build or any run finds a crash, leak, timeout or
# invariant violation; the input that triggered it is left in
# <build>/fuzz-artifacts/<target>/ (reproduce with: <build>/bin/<target> FILE).
#
# usage: scripts/run-fuzzers.sh [-t SECONDS] [target ...]
#   -t SECONDS   time per target (default: $FUZZ_SECONDS or 45)
#   target       e.g. fuzz_gguf (default: every tests/fuzz/fuzz_*.c)
# environment:
#   CC           the compiler (default clang; libFuzzer needs clang)
#   BUILD_DIR    build directory (default build-fuzz)
#   FUZZ_MAX_LEN largest input libFuzzer generates (default 65536)
#   JOBS         build parallelism (default 2)
set -euo pipefail

root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
seconds=${FUZZ_SECONDS:-45}
while getopts "t:h" opt; do
  case $opt in
    t) seconds=$OPTARG ;;
    h) sed -n '2,16p' "$0"; exit 0 ;;
    *) exit 2 ;;
  esac
done
shift $((OPTIND - 1))

cc=${CC:-clang}
build=${BUILD_DIR:-build-fuzz}
case $build in /*) ;; *) build=$root/$build ;; esac
max_len=${FUZZ_MAX_LEN:-65536}
jobs=${JOBS:-2}

if ! command -v "$cc" >/dev/null 2>&1; then
  echo "run-fuzzers: '$cc' not found (libFuzzer targets need clang; apt-get install clang)" >&2
  exit 1
fi

if [ $# -gt 0 ]; then
  targets=("$@")
else
  targets=()
  for src in "$root"/tests/fuzz/fuzz_*.c; do
    [ -e "$src" ] || continue
    name=$(basename "$src" .c)
    targets+=("$name")
  done
fi
if [ ${#targets[@]} -eq 0 ]; then
  echo "run-fuzzers: no fuzz targets in tests/fuzz/" >&2
  exit 1
fi

echo "run-fuzzers: building ${targets[*]} with $cc in $build"
CC=$cc cmake -S "$root" -B "$build" -DPL_FUZZ=ON -DCMAKE_BUILD_TYPE=Debug >/dev/null
cmake --build "$build" -j "$jobs" --target "${targets[@]}"

failed=()
for t in "${targets[@]}"; do
  bin=$build/bin/$t
  seeds=$root/tests/fuzz/seeds/$t
  corpus=$build/fuzz-corpus/$t        # scratch: new inputs go here, not into the repo
  artifacts=$build/fuzz-artifacts/$t
  mkdir -p "$corpus" "$artifacts"
  dirs=("$corpus")
  if [ -d "$seeds" ]; then dirs+=("$seeds"); else echo "run-fuzzers: warning: no seeds in $seeds"; fi
  log=$build/fuzz-$t.log
  echo "run-fuzzers: $t for ${seconds}s (max_len $max_len)"
  set +e
  "$bin" -max_total_time="$seconds" -max_len="$max_len" -timeout=10 -rss_limit_mb=2048 \
         -print_final_stats=1 -artifact_prefix="$artifacts/" "${dirs[@]}" >"$log" 2>&1
  rc=$?
  set -e
  execs=$(grep -o 'stat::number_of_executed_units: *[0-9]*' "$log" | grep -o '[0-9]*$' || true)
  if [ $rc -ne 0 ]; then
    echo "run-fuzzers: $t FAILED (exit $rc); last lines of $log:"
    tail -n 40 "$log"
    ls -l "$artifacts"
    failed+=("$t")
  else
    echo "run-fuzzers: $t ok, ${execs:-?} executions"
  fi
done

if [ ${#failed[@]} -gt 0 ]; then
  echo "run-fuzzers: FAILED: ${failed[*]}"
  exit 1
fi
echo "run-fuzzers: all ${#targets[@]} target(s) ran clean"
