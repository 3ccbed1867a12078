#!/usr/bin/env bash
# The CUDA backend's check on a machine with an NVIDIA GPU, in one prepared
# run (under 8 minutes on an H200). Without a GPU it says so and exits 0.
#
#   scripts/gpu-check.sh               the check; prints a summary table last
#   scripts/gpu-check.sh --quick       skip the Qwen3-1.7B benchmarks
#   scripts/gpu-check.sh --fetch-deps  on a machine with apt (the dev box): download
#                                      the .debs of jansson, libmicrohttpd, pkgconf
#                                      (and libmicrohttpd's runtime closure) into
#                                      .gpu-deps/, for GPU images that lack them
#
# What it does, each step timed, its output in the log ($OUT/gpu-check.log
# when $OUT is set, else $WORK/gpu-check.log; WORK=${PL_GPU_CHECK_WORK:-/tmp/pl-gpu-check}):
#   1. GPU: nvidia-smi or /dev/nvidia0, and the compute capability (the module
#      is built for that one architecture, to build fast).
#   2. source: this tree; if docs/cuda-integration.patch is not applied yet, a
#      copy of the tree with it applied (git apply, else patch), so the engine
#      path (golden, bench) can be checked before the patch is merged.
#   3. deps: jansson, libmicrohttpd and pkg-config from the system, else from
#      .gpu-deps/*.deb (extracted under $WORK, with .pc files of our own).
#   4. build: cmake -DPL_CUDA=ON -DPL_CUDA_ARCHS=<sm> Release; pocketllm,
#      test_cuda, test_ops, test_golden and the module.
#   5. test_cuda: every (op, dtype) of the cuda table against ref on the GPU,
#      graph capture/replay, device-side input checks, tiny model vs cpu.
#   6. test_ops: cuda in the cross-backend harness (needs the patch).
#   7. test_golden on cuda, for every fixture whose weights cuda supports
#      (f32, f16, bf16, q8_0, q6_K, q4_K_M; qwen3 and qwen2; needs the patch).
#   8. test_cuda --bandwidth (copy bandwidths) and --perf (Qwen3-0.6B/1.7B
#      matmuls and attention per op family, decode captured as a graph).
#   9. pocketllm synth Qwen3-0.6B and -1.7B, f16 and q4_K, then
#      pocketllm bench --device cuda -p 512 -n 128 -r 3 on each (needs the patch).
#  10. the summary: one line per step, the bandwidths, the bench table.
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
    -h|--help) sed -n '2,35p' "$0"; exit 0 ;;
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
# step NAME TIMEOUT CMD...: runs CMD with its output in the log; records the result.
step() {
  local name=$1 limit=$2; shift 2
  local t0 rc
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
  SUMMARY+=("$(printf '%-28s %-14s %4ss  %s' "$name" "$res" "$dt" "$note")")
  echo "gpu-check: $name: $res (${dt}s) $note"
  if [ "$res" != ok ]; then echo "---- last lines of $name:"; tail -25 "$WORK/step.out"; echo "----"; fi
  return $rc
}
skip() { SUMMARY+=("$(printf '%-28s %-14s %4s   %s' "$1" "skipped" "-" "$2")"); echo "gpu-check: $1: skipped ($2)"; }

log "gpu-check: $GPU_NAME, sm_$SM; work dir $WORK; log $LOG"
nvidia-smi >>"$LOG" 2>&1

# ---- 2. source (with the integration patch) ------------------------------------------------
SRC=$ROOT
PATCHED=0
PATCH="$ROOT/docs/cuda-integration.patch"
if grep -q "&pl_backend_cuda," "$ROOT/src/kernels/abi.c" 2>/dev/null; then
  PATCHED=1
  log "gpu-check: the integration patch is already in the tree"
elif [ -f "$PATCH" ]; then
  SRC="$WORK/src"
  rm -rf "$SRC" && mkdir -p "$SRC"
  (cd "$ROOT" && tar --exclude='./build*' --exclude='./.git' --exclude='./.gpu-deps' -cf - .) | (cd "$SRC" && tar xf -)
  if (cd "$SRC" && { git apply "$PATCH" 2>>"$LOG" || patch -p1 -s <"$PATCH" >>"$LOG" 2>&1; }) &&
     grep -q "&pl_backend_cuda," "$SRC/src/kernels/abi.c"; then
    PATCHED=1
    log "gpu-check: checking a copy of the tree with docs/cuda-integration.patch applied ($SRC)"
  else
    log "gpu-check: docs/cuda-integration.patch does not apply: checking the kernels only"
    rm -rf "$SRC"; SRC=$ROOT
  fi
fi

# ---- 3. deps ------------------------------------------------------------------------------
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

# ---- 4. build ------------------------------------------------------------------------------
B="$WORK/build"
GEN=()
command -v ninja >/dev/null && GEN=(-G Ninja)
rm -rf "$B"
step "configure" 120 cmake -S "$SRC" -B "$B" "${GEN[@]}" -DCMAKE_BUILD_TYPE=Release -DPL_CUDA=ON \
  -DPL_CUDA_ARCHS="$SM" "${CMAKE_EXTRA[@]}" || { printf '%s\n' "${SUMMARY[@]}"; exit 1; }
step "build" 420 cmake --build "$B" -j "$(nproc)" --target pocketllm_cli test_cuda test_ops test_golden pocketllm_cuda ||
  { printf '%s\n' "${SUMMARY[@]}"; exit 1; }
BIN="$B/bin"
FIX="$SRC/tests/fixtures"
"$BIN/pocketllm" devices >>"$LOG" 2>&1

# ---- 5-7. tests ------------------------------------------------------------------------------
step "test_cuda (ops vs ref)" 240 "$BIN/test_cuda"
if [ $PATCHED = 1 ]; then
  step "test_ops (all backends)" 300 "$BIN/test_ops"
  fixtures=()
  for f in tiny-qwen3-f32 tiny-qwen3-f16 tiny-qwen3-bf16 tiny-qwen3-q8_0 tiny-qwen3-q6_k tiny-qwen3-q4_k_m \
           tiny-qwen3-untied-f16 tiny-qwen3-untied-q4_k_m tiny-qwen2-f16 tiny-qwen2-q4_k_m; do
    [ -f "$FIX/models/$f.gguf" ] && [ -f "$FIX/golden/$f.json" ] && fixtures+=("$f")
  done
  if [ ${#fixtures[@]} -gt 0 ]; then
    export BIN
    step "test_golden cuda (${#fixtures[@]} models)" 300 bash -c \
      'rc=0; for f in "$@"; do PL_GOLDEN_DEVICES=cuda "$BIN/test_golden" "$f" || rc=1; done; exit $rc' golden "${fixtures[@]}"
    grep -E "^tiny-" "$WORK/step.out" | sed 's/^/  /' >"$WORK/golden.txt"
  else
    skip "test_golden cuda" "no fixture models in this tree"
  fi
else
  skip "test_ops (all backends)" "needs docs/cuda-integration.patch"
  skip "test_golden cuda" "needs docs/cuda-integration.patch"
fi

# ---- 8. bandwidth and op timings -----------------------------------------------------------------
if step "bandwidth" 120 "$BIN/test_cuda" --bandwidth; then
  BW_LINE=$(awk '/host->device pinned/{h=$3} /device->host pinned/{d=$3} /device copy/{c=$4} /device read/{r=$4}
    END{printf "h2d pinned %s, d2h pinned %s, device copy %s, device read %s GB/s", h, d, c, r}' "$WORK/step.out")
fi
if step "op timings (--perf)" 240 "$BIN/test_cuda" --perf; then
  mapfile -t PERF_LINES < <(grep -E "^  (0\.6b|1\.7b)" "$WORK/step.out")
fi

# ---- 9. end-to-end bench -------------------------------------------------------------------------
if [ $PATCHED = 1 ] && [ -f "$FIX/models/qwen3-vocab.gguf" ]; then
  presets=(0.6b)
  [ $QUICK = 1 ] || presets+=(1.7b)
  for p in "${presets[@]}"; do
    for t in f16 q4_K; do
      m="$WORK/qwen3-$p-$t.gguf"
      if [ ! -f "$m" ]; then
        step "synth $p $t" 180 "$BIN/pocketllm" synth --preset "$p" --type "$t" --vocab "$FIX/models/qwen3-vocab.gguf" \
          --out "$m" || continue
      fi
      if step "bench $p $t" 180 "$BIN/pocketllm" bench -m "$m" --device cuda -p 512 -n 128 -r 3 --json; then
        row=$(python3 - "$WORK/step.out" "$p" "$t" <<'PY'
import json, sys
txt = open(sys.argv[1]).read()
res = json.loads(txt[txt.index('[\n'):])
d = {r["test"]: r for r in res}
pp, tg = d.get("pp512", {}), d.get("tg128", {})
print("| %-5s | %-5s | %6.2f GiB | %9.1f | %8.1f | %7.1f |" % (sys.argv[2], sys.argv[3], (pp or tg)["model_bytes"] / 2**30,
      pp.get("tok_s", 0), tg.get("tok_s", 0), tg.get("gb_s", 0)))
PY
        ) && BENCH_ROWS+=("$row")
      fi
      rm -f "$m"   # the disk is small; the next run synthesizes again
    done
  done
else
  skip "bench" "needs docs/cuda-integration.patch and tests/fixtures/models/qwen3-vocab.gguf"
fi

# ---- 10. summary -------------------------------------------------------------------------------
T_ALL=$(( $(date +%s) - T_START ))
{
  echo
  echo "================ gpu-check summary: $GPU_NAME, sm_$SM, ${T_ALL}s ================"
  echo "source: $SRC ($([ $PATCHED = 1 ] && echo 'with' || echo 'WITHOUT') the integration patch); full log: $LOG"
  printf '%-28s %-14s %5s  %s\n' "step" "result" "time" "detail"
  printf '%s\n' "${SUMMARY[@]}"
  [ -s "$WORK/golden.txt" ] && { echo "golden on cuda:"; cat "$WORK/golden.txt"; }
  [ -n "$BW_LINE" ] && echo "bandwidth: $BW_LINE"
  if [ ${#PERF_LINES[@]} -gt 0 ]; then echo "op timings:"; printf '%s\n' "${PERF_LINES[@]}"; fi
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
