#!/usr/bin/env bash
# --cache-type-k / --cache-type-v: run reproduces llama.cpp's greedy tokens
# with q8_0 / q4_0 caches (goldens in fixtures/golden/kv, comparison rule as
# test_golden's kv fixtures), the rotation switch changes the result, bench
# reports the types, and bad types are one clear error before any load.
set -uo pipefail
BIN=$1 FIX=$2
python3 "$(dirname "$0")/kv_cache.py" "$BIN" "$FIX" || exit 1
fail=0 pass=0
expect_error() {  # expect_error "<substring of stderr>" args...
  local want=$1; shift
  local err rc
  err=$("$BIN" "$@" 2>&1 >/dev/null); rc=$?
  if [ $rc -ne 0 ] && [[ "$err" == *"$want"* ]] && [ "$(printf '%s\n' "$err" | grep -c .)" -le 2 ]; then
    pass=$((pass+1))
  else
    echo "FAIL: pocketllm $* -> rc=$rc stderr=[$err] (wanted '$want')"; fail=$((fail+1))
  fi
}
M=$FIX/models/tiny-qwen3-f16.gguf
# a typo stops the command before the model is opened (the model path does not exist)
expect_error "unknown --cache-type-k 'q5_0'" run --model /nonexistent.gguf --prompt hi --cache-type-k q5_0
expect_error "unknown --cache-type-v 'f32'" run --model /nonexistent.gguf --prompt hi -ctv f32
expect_error "unknown --cache-type-k 'Q8_0'" bench --model /nonexistent.gguf -ctk Q8_0
expect_error "unknown --cache-type-v 'bf16'" serve --model /nonexistent.gguf --port 0 --cache-type-v bf16
expect_error "option --cache-type-k needs a value" run --model "$M" --prompt hi --cache-type-k
# bench: the types in the JSON objects
out=$("$BIN" bench --model "$M" -p 16 -n 4 -r 1 -ctk q8_0 -ctv q4_0 --json 2>/dev/null)
if [[ "$out" == *'"type_k": "q8_0", "type_v": "q4_0"'* ]]; then pass=$((pass+1)); else echo "FAIL: bench --json: $out"; fail=$((fail+1)); fi
echo "kv_cache errors: $pass passed, $fail failed"
[ $fail -eq 0 ]
