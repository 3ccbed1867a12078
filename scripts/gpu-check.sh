#!/usr/bin/env bash
# The CUDA backend's check on a machine with an NVIDIA GPU, in one prepared
# run that finishes in under 8 minutes on an H200 (a deadline, GPU_CHECK_BUDGET
# seconds, default 450, skips what would not fit and says so). Without a GPU
# it says so and exits 0.
#
#   scripts/gpu-check.sh               the check; prints a summary table last
#   scripts/gpu-check.sh --quick       skip the Qwen3-1.7B benchmarks
#   scripts/gpu-check.sh --fetch-deps  on a machine with apt (the dev box): download
#                                      the .debs of jansson, libmicrohttpd, pkgconf
#                                      (and libmicrohttpd's runtime closure) into
#                                      .gpu-deps/, for GPU images that lack them
#
# Getting the tree onto a lent GPU (the `device` tool sends at most 64 MiB of
# tracked + untracked-not-ignored files; the fixtures make the tree ~95 MB):
#
#   scripts/gpu-check.sh --fetch-deps   # once, on the dev box (if the GPU image lacks them)
#   scripts/gpu-slim.sh on              # the largest fixtures stop travelling (kept on disk)
#   device run: scripts/gpu-check.sh    # golden fixtures left behind are skipped, by name
#   scripts/gpu-slim.sh off             # back to the branch you were on, all tracked again
#
# (scripts/gpu-slim.sh says exactly what it does; `status` shows the state.)
#
# What it does, each step timed, its output in the log ($OUT/gpu-check.log
# when $OUT is set, else $WORK/gpu-check.log; WORK=${PL_GPU_CHECK_WORK:-/tmp/pl-gpu-check}):
#   1. GPU: nvidia-smi or /dev/nvidia0, and the compute capability (the module
#      is built for that one architecture, to build fast).
#   2. deps: jansson, libmicrohttpd and pkg-config from the system, else from
#      .gpu-deps/*.deb (extracted under $WORK, with .pc files of our own).
#   3. build: cmake -DPL_CUDA=ON -DPL_CUDA_ARCHS=<sm> Release; pocketllm,
#      test_cuda, test_ops, test_golden and the module.
#   4. test_cuda: every (op, dtype) of the cuda table against ref on the GPU,
#      graph capture/replay, device-side input checks, a tiny model vs cpu, a
#      model too large for the GPU refused before loading.
#   5. test_ops with PL_OPS_BACKENDS=cuda: the cross-backend harness, cases
#      mirrored to device buffers.
#   6. test_golden on cuda (PL_GOLDEN_DEVICES=cuda): every fixture whose model
#      file is here (absent ones, e.g. after gpu-slim.sh, are listed as
#      skipped) and whose weight types cuda has kernels for (test_golden
#      names the others).
#   7. test_cuda --bandwidth (copy bandwidths).
#   8. pocketllm synth Qwen3-0.6B and -1.7B, q4_K and f16, then
#      pocketllm bench --device cuda -p 512 -n 128 -r 3 on each.
#   9. test_cuda --perf (matmul and attention timings per op family), if time is left.
#  10. the summary: one line per step, golden figures, bandwidths, the bench table.
set -uo pipefail

ROOT=$(cd "$(dirname "$0")/.." && pwd)
WORK=${PL_GPU_CHECK_WORK:-/tmp/pl-gpu-check}
QUICK=0
T_START=$(date +%s)

fetch_deps() {
  local dir="$ROOT/.gpu-deps"
  mkdir -p "$dir" && cd "$dir" || exit 1
  # libmicrohttpd links gnutls; its closure is fetched too, for images without it.
  apt-get download libjansson4 libjansson-dev libmicrohttpd12 libmicrohttpd-dev pkgconf pkgconf-bin libpkgconf3 \
    libgnutls30 libp11-kit0 libidn2-0 libunistring2 libtasn1-6 libnettle8 libhogweed6 libgmp10 libffi8 || exit 1
  echo "gpu-check: $(ls "$dir"/*.deb | wc -l) packages in $dir ($(du -sh "$dir" | cut -f1)); carry .gpu-deps to the GPU machine"
  exit 0
}

for a in "$@"; do
  case "$a" in
    --quick) QUICK=1 ;;
    --fetch-deps) fetch_deps ;;
    -h|--help) sed -n '2,45p' "$0"; exit 0 ;;
    *) echo "gpu-check: unknown option $a" >&2; exit 2 ;;
  esac
done

# ---- 1. a GPU? -------------------------------------------------------------------------
if ! command -v nvidia-smi >/dev/null 2>&1 && [ ! -e /dev/nvidia0 ]; then
  echo "gpu-check: no GPU on this machine (no nvidia-smi, no /dev/nvidia0): nothing to check."
  echo "gpu-check: here, the CUDA backend is covered by ctest (test_cuda, cuda_module_exports) without a GPU."
  exit 0
fi
GPU_NAME=$(nvidia-smi --query-gpu=name,driver_version --format=csv,noheader 2>/dev/null | head -1)
SM=$(nvidia-smi --query-gpu=compute_cap --format=csv,noheader 2>/dev/null | head -1 | tr -d ' .')
[ -n "$SM" ] || SM=90
if ! command -v nvcc >/dev/null 2>&1; then
  for d in /usr/local/cuda/bin /usr/local/cuda-*/bin; do [ -x "$d/nvcc" ] && export PATH="$d:$PATH" && break; done
fi

mkdir -p "$WORK"
LOG=${OUT:+$OUT/gpu-check.log}
LOG=${LOG:-$WORK/gpu-check.log}
: >"$LOG"
SUMMARY=()
BENCH_ROWS=()
BW_LINE=""
PERF_LINES=()

log() { echo "$*" | tee -a "$LOG"; }
# The deadline: the whole run must end within 8 minutes on an H200 (the lent
# machine's 15 minutes include its start and the transfers).
BUDGET=${GPU_CHECK_BUDGET:-450}
left() { echo $(( BUDGET - ($(date +%s) - T_START) )); }
# step NAME TIMEOUT CMD...: runs CMD with its output in the log; records the
# result. The timeout is cut to what is left of the budget; a step that would
# get under 15 s is not started.
step() {
  local name=$1 limit=$2; shift 2
  local t0 rc l
  l=$(left)
  if [ "$l" -lt 15 ]; then
    SUMMARY+=("$(printf '%-30s %-14s %4s   %s' "$name" "skipped" "-" "no time left (GPU_CHECK_BUDGET=${BUDGET}s)")")
    echo "gpu-check: $name: skipped (no time left)"
    return 125
  fi
  [ "$limit" -gt "$l" ] && limit=$l
  t0=$(date +%s)
  echo "==== $name: $*" >>"$LOG"
  timeout "$limit" "$@" >"$WORK/step.out" 2>&1
  rc=$?
  cat "$WORK/step.out" >>"$LOG"
  local dt=$(( $(date +%s) - t0 ))
  local res=ok
  if [ $rc -eq 124 ]; then res="TIMEOUT(${limit}s)"; elif [ $rc -ne 0 ]; then res="FAIL(rc=$rc)"; fi
  local note
  note=$(grep -E "passed, [0-9]+ failed" "$WORK/step.out" | tail -1)
  SUMMARY+=("$(printf '%-30s %-14s %4ss  %s' "$name" "$res" "$dt" "$note")")
  echo "gpu-check: $name: $res (${dt}s) $note"
  if [ "$res" != ok ]; then echo "---- last lines of $name:"; tail -25 "$WORK/step.out"; echo "----"; fi
  return $rc
}
skip() { SUMMARY+=("$(printf '%-30s %-14s %4s   %s' "$1" "skipped" "-" "$2")"); echo "gpu-check: $1: skipped ($2)"; }

log "gpu-check: $GPU_NAME, sm_$SM; work dir $WORK; log $LOG"
nvidia-smi >>"$LOG" 2>&1

SRC=$ROOT

# ---- 2. deps ------------------------------------------------------------------------------
CMAKE_EXTRA=()
if ! { command -v pkg-config >/dev/null && pkg-config --exists jansson libmicrohttpd; } 2>/dev/null; then
  if ls "$ROOT"/.gpu-deps/*.deb >/dev/null 2>&1; then
    D="$WORK/deps"
    rm -rf "$D" && mkdir -p "$D/pc"
    for f in "$ROOT"/.gpu-deps/*.deb; do dpkg-deb -x "$f" "$D" 2>>"$LOG" || (cd "$D" && ar p "$f" data.tar.xz | tar xJ); done
    LIBD="$D/usr/lib/x86_64-linux-gnu"
    # The packaged .pc files say prefix=/usr and name gnutls: ours point here.
    for p in "jansson 2.14 jansson" "libmicrohttpd 0.9.75 microhttpd"; do
      set -- $p
      printf 'Name: %s\nDescription: %s\nVersion: %s\nLibs: -L%s -l%s\nCflags: -I%s\n' "$1" "$1" "$2" "$LIBD" "$3" \
        "$D/usr/include" >"$D/pc/$1.pc"
    done
    export PKG_CONFIG_PATH="$D/pc${PKG_CONFIG_PATH:+:$PKG_CONFIG_PATH}"
    export LD_LIBRARY_PATH="$LIBD${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
    export LIBRARY_PATH="$LIBD${LIBRARY_PATH:+:$LIBRARY_PATH}"
    if ! command -v pkg-config >/dev/null; then
      CMAKE_EXTRA+=("-DPKG_CONFIG_EXECUTABLE=$D/usr/bin/pkgconf")
    fi
    CMAKE_EXTRA+=("-DCMAKE_EXE_LINKER_FLAGS=-Wl,-rpath-link,$LIBD")
    log "gpu-check: jansson / libmicrohttpd / pkgconf from .gpu-deps ($D)"
  else
    log "gpu-check: jansson and libmicrohttpd are missing and there is no .gpu-deps/: run"
    log "  scripts/gpu-check.sh --fetch-deps   on the dev machine, and carry .gpu-deps here"
    exit 1
  fi
fi

# ---- 3. build ------------------------------------------------------------------------------
# PL_GPU_CHECK_BUILD=DIR builds (incrementally) in DIR: a rerun on a warm
# machine, or a dry run of this script against an existing build.
B=${PL_GPU_CHECK_BUILD:-$WORK/build}
GEN=()
if [ -f "$B/CMakeCache.txt" ] && ! grep -qx "CMAKE_HOME_DIRECTORY:INTERNAL=$SRC" "$B/CMakeCache.txt"; then
  rm -rf "$B"   # a build of another tree
fi
[ -f "$B/CMakeCache.txt" ] || { command -v ninja >/dev/null && GEN=(-G Ninja); }
step "configure" 120 cmake -S "$SRC" -B "$B" "${GEN[@]}" -DCMAKE_BUILD_TYPE=Release -DPL_CUDA=ON \
  -DPL_CUDA_ARCHS="$SM" "${CMAKE_EXTRA[@]}" || { printf '%s\n' "${SUMMARY[@]}"; exit 1; }
step "build" 420 cmake --build "$B" -j "$(nproc)" --target pocketllm_cli test_cuda test_ops test_golden pocketllm_cuda ||
  { printf '%s\n' "${SUMMARY[@]}"; exit 1; }
BIN="$B/bin"
FIX="$SRC/tests/fixtures"
"$BIN/pocketllm" devices >>"$LOG" 2>&1

# ---- 4-6. tests ------------------------------------------------------------------------------
# On a GPU machine cuda must not be skipped: "not available here" is a failure.
not_skipped() {
  if grep -q "not available here" "$WORK/step.out"; then
    SUMMARY+=("$(printf '%-30s %-14s %4s   %s' "$1" "FAIL" "-" "cuda was skipped as not available on a GPU machine")")
    echo "gpu-check: $1: FAIL (cuda skipped: $(grep -m1 "not available here" "$WORK/step.out"))"
  fi
}
step "test_cuda (ops vs ref)" 240 "$BIN/test_cuda"
step "test_ops (cuda vs ref)" 240 env PL_OPS_BACKENDS=cuda "$BIN/test_ops"
not_skipped "test_ops (cuda vs ref)"
# Golden fixtures: every one test_golden knows; those whose model file is not
# here (gpu-slim.sh leaves the largest behind) are skipped by name.
ABSENT=()
for f in tiny-qwen3-f32 tiny-qwen3-f16 tiny-qwen3-bf16 tiny-qwen3-q8_0 tiny-qwen3-q6_k tiny-qwen3-q4_k_m \
         tiny-qwen3-untied-f16 tiny-qwen3-untied-q4_k_m tiny-qwen2-f16 tiny-qwen2-q4_k_m tiny-qwen3-q2_k \
         tiny-qwen3-iq2_xxs tiny-qwen3-iq2_xs tiny-qwen3-iq1_s tiny-qwen3-iq1_m tiny-qwen3-tq2_0 tiny-qwen3-tq1_0; do
  [ -f "$FIX/models/$f.gguf" ] || ABSENT+=("$f")
done
[ ${#ABSENT[@]} -gt 0 ] && log "gpu-check: golden fixtures absent here (gpu-slim.sh?), skipped: ${ABSENT[*]}"
step "test_golden (cuda)" 240 env PL_GOLDEN_DEVICES=cuda PL_GOLDEN_SKIP_MISSING=1 "$BIN/test_golden"
not_skipped "test_golden (cuda)"
grep -E "^tiny-" "$WORK/step.out" | sed 's/^/  /' >"$WORK/golden.txt"

# ---- 7. bandwidth ------------------------------------------------------------------------------
if step "bandwidth" 90 "$BIN/test_cuda" --bandwidth; then
  BW_LINE=$(awk '/host->device pinned/{h=$3} /device->host pinned/{d=$3} /device copy/{c=$4} /device read/{r=$4}
    END{printf "h2d pinned %s, d2h pinned %s, device copy %s, device read %s GB/s", h, d, c, r}' "$WORK/step.out")
fi

# ---- 8. end-to-end bench -------------------------------------------------------------------------
if [ -f "$FIX/models/qwen3-vocab.gguf" ]; then
  presets=(0.6b)
  [ $QUICK = 1 ] || presets+=(1.7b)
  for p in "${presets[@]}"; do
    for t in q4_K f16; do
      m="$WORK/qwen3-$p-$t.gguf"
      if [ ! -f "$m" ]; then
        step "synth $p $t" 150 "$BIN/pocketllm" synth --preset "$p" --type "$t" --vocab "$FIX/models/qwen3-vocab.gguf" \
          --out "$m" || { rm -f "$m"; continue; }
      fi
      if step "bench $p $t" 150 "$BIN/pocketllm" bench -m "$m" --device cuda -p 512 -n 128 -r 3 --json; then
        row=$(python3 - "$WORK/step.out" "$p" "$t" <<'PY'
import json, sys
txt = open(sys.argv[1]).read()
res = json.loads(txt[txt.index('[\n'):])
d = {r["test"]: r for r in res}
pp, tg = d.get("pp512", {}), d.get("tg128", {})
print("| %-5s | %-5s | %6.2f GiB | %9.1f | %9.1f | %7.1f |" % (sys.argv[2], sys.argv[3], (pp or tg)["model_bytes"] / 2**30,
      pp.get("tok_s", 0), tg.get("tok_s", 0), tg.get("gb_s", 0)))
PY
        ) && BENCH_ROWS+=("$row")
      fi
      rm -f "$m"   # the disk is small; the next run synthesizes again
    done
  done
else
  skip "bench" "no tests/fixtures/models/qwen3-vocab.gguf"
fi

# ---- 9. op timings, with what time is left ----------------------------------------------------------
if step "op timings (--perf)" 150 "$BIN/test_cuda" --perf; then
  mapfile -t PERF_LINES < <(grep -E "^  (0\.6b|1\.7b)" "$WORK/step.out")
fi

# ---- 10. summary -------------------------------------------------------------------------------
T_ALL=$(( $(date +%s) - T_START ))
{
  echo
  echo "================ gpu-check summary: $GPU_NAME, sm_$SM, ${T_ALL}s ================"
  echo "source: $SRC ($(git -C "$SRC" rev-parse --short HEAD 2>/dev/null || echo 'no git')); full log: $LOG"
  [ -n "$BW_LINE" ] && echo "bandwidth: $BW_LINE"
  if [ ${#PERF_LINES[@]} -gt 0 ]; then echo "op timings:"; printf '%s\n' "${PERF_LINES[@]}"; fi
  [ -s "$WORK/golden.txt" ] && { echo "golden on cuda:"; cat "$WORK/golden.txt"; }
  [ ${#ABSENT[@]} -gt 0 ] && echo "golden fixtures absent (skipped): ${ABSENT[*]}"
  printf '%-30s %-14s %5s  %s\n' "step" "result" "time" "detail"
  printf '%s\n' "${SUMMARY[@]}"
  if [ ${#BENCH_ROWS[@]} -gt 0 ]; then
    echo "pocketllm bench --device cuda (synthetic Qwen3 weights, -r 3):"
    echo "| model | type  | size       | pp512 t/s | tg128 t/s | tg GB/s |"
    echo "| ----- | ----- | ---------- | --------- | --------- | ------- |"
    printf '%s\n' "${BENCH_ROWS[@]}"
  fi
} | tee -a "$LOG" >"$WORK/summary.txt"
cat "$WORK/summary.txt"
[ -n "${OUT:-}" ] && cp "$WORK/summary.txt" "$OUT/gpu-check-summary.txt"
if printf '%s\n' "${SUMMARY[@]}" | grep -qE " (FAIL|TIMEOUT)"; then exit 1; fi
exit 0
