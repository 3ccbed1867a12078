#!/usr/bin/env bash
# Grammar-constrained decoding (issue 16): constrained vs unconstrained
# decode tok/s and schema compile time, PocketLLM beside llama.cpp.
#
#   bench/grammar.sh [MODEL] [SCHEMA.json]
#
# MODEL defaults to scripts/get-default-model.sh's; SCHEMA to
# tests/schemas/39_event.json. Greedy decoding (env TEMP for sampling), N tokens (env N, default 48),
# ROUNDS rounds (default 2), the four runs of a round interleaved so machine
# noise hits both engines and both modes alike. llama.cpp runs only if
# LLAMA_CPP_BIN (a folder with llama-completion; default
# ../shared/reference/llama.cpp-d32676d/bin) works. Prints one line per run
# and the mean ratios.
set -euo pipefail
here="$(cd "$(dirname "$0")/.." && pwd)"
model="${1:-$("$here/scripts/get-default-model.sh")}"
schema="${2:-$here/tests/schemas/39_event.json}"
N="${N:-48}"
ROUNDS="${ROUNDS:-2}"
TEMP="${TEMP:-0}"   # 0: greedy (the argmax fast path); e.g. TEMP=1 masks every step
PL="${PL:-$here/build/bin/pocketllm}"
prompt="${PROMPT:-Write one log event as JSON:}"
refbin="$(cd "${LLAMA_CPP_BIN:-$here/../shared/reference/llama.cpp-d32676d/bin}" 2>/dev/null && pwd || echo /nonexistent)"
tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT

# The reference folder may hold its .so symlinks as small text files naming
# the target: rebuild them as real links in a private folder.
ref=""
if [ -x "$refbin/llama-completion" ]; then
  mkdir -p "$tmp/lib"
  for f in "$refbin"/*.so*; do
    b="$(basename "$f")"
    t="$b"
    while [ "$(stat -c %s "$refbin/$t")" -lt 64 ]; do t="$(cat "$refbin/$t")"; done
    ln -sf "$refbin/$t" "$tmp/lib/$b"
  done
  if LD_LIBRARY_PATH="$tmp/lib" "$refbin/llama-completion" --version >/dev/null 2>&1; then ref=1; fi
fi

pl_run() { # mode -> "tok/s compile_ms"
  local extra=() out
  [ "$1" = constrained ] && extra=(--json-schema "$schema")
  out="$("$PL" run -m "$model" -p "$prompt" -n "$N" --temp "$TEMP" "${extra[@]}" 2>&1 >/dev/null)"
  local tps ms
  tps="$(sed -n 's/.*generated [0-9]* tokens, \([0-9.]*\) tok\/s.*/\1/p' <<<"$out")"
  ms="$(sed -n 's/^grammar ready (\([0-9.]*\) ms).*/\1/p' <<<"$out")"
  echo "${tps:-0} ${ms:--}"
}
ref_run() {
  local extra=() out
  [ "$1" = constrained ] && extra=(--json-schema "$(cat "$schema")")
  out="$(LD_LIBRARY_PATH="$tmp/lib" "$refbin/llama-completion" -m "$model" -p "$prompt" -n "$N" --temp "$TEMP" -no-cnv \
         -t "$(nproc)" "${extra[@]}" </dev/null 2>&1 >/dev/null || true)"
  local tps
  tps="$(sed -n 's/.*eval time = .*runs *( *[0-9.]* ms per token, *\([0-9.]*\) tokens per second).*/\1/p' <<<"$out" | tail -1)"
  echo "${tps:-0} -"
}

declare -A sum cnt
for r in $(seq 1 "$ROUNDS"); do
  order=(pl:free pl:constrained ref:free ref:constrained)
  [ $((r % 2)) -eq 0 ] && order=(ref:constrained ref:free pl:constrained pl:free)
  for e in "${order[@]}"; do
    eng="${e%%:*}" mode="${e##*:}"
    [ "$eng" = ref ] && [ -z "$ref" ] && continue
    read -r tps ms < <("${eng}_run" "$mode")
    echo "round $r $eng $mode: $tps tok/s${ms:+ (grammar build $ms ms)}"
    sum[$e]=$(awk -v a="${sum[$e]:-0}" -v b="$tps" 'BEGIN{print a+b}')
    cnt[$e]=$(( ${cnt[$e]:-0} + 1 ))
  done
done
mean() { awk -v a="${sum[$1]:-0}" -v n="${cnt[$1]:-1}" 'BEGIN{printf "%.2f", a/n}'; }
echo "pocketllm: unconstrained $(mean pl:free) tok/s, constrained $(mean pl:constrained) tok/s, ratio" \
  "$(awk -v a="$(mean pl:constrained)" -v b="$(mean pl:free)" 'BEGIN{printf "%.3f", (b > 0 ? a / b : 0)}')"
if [ -n "$ref" ]; then
  echo "llama.cpp: unconstrained $(mean ref:free) tok/s, constrained $(mean ref:constrained) tok/s, ratio" \
    "$(awk -v a="$(mean ref:constrained)" -v b="$(mean ref:free)" 'BEGIN{printf "%.3f", (b > 0 ? a / b : 0)}')"
else
  echo "llama.cpp: not run ($refbin/llama-completion unusable)"
fi
