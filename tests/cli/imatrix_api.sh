#!/usr/bin/env bash
# The tools built on the public API write what the library wrote before:
# `imatrix` (collected in tools/ on the per-node observer) gives the bytes of
# the file the in-library collector wrote (fixtures/quant/tiny-untied-
# imatrix-ref.gguf, on the portable ref backend); `quantize --tensor-type`
# parses and applies overrides.
set -u
BIN=$(cd "$(dirname "$1")" && pwd)/$(basename "$1")
FIX=$(cd "$2" && pwd)
M=$FIX/models
T=$(mktemp -d)
trap 'rm -rf "$T"' EXIT
fail=0 pass=0
ok() { pass=$((pass+1)); }
bad() { echo "FAIL: $*"; fail=$((fail+1)); }

for th in 1 2; do
  # (the file records the text's path as given: run from the fixtures)
  if (cd "$FIX" && "$BIN" imatrix -m models/tiny-qwen3-untied-f16.gguf -f ladder/calib.txt --ctx 64 --chunks 3 \
        --device ref --process-output --threads $th -o "$T/im.gguf" 2>"$T/err") &&
     cmp -s "$T/im.gguf" "$FIX/quant/tiny-untied-imatrix-ref.gguf"; then ok
  else bad "imatrix ($th threads) differs from the library collector's file"; cat "$T/err"; fi
done

if "$BIN" quantize "$M/tiny-qwen3-f16.gguf" "$T/o.gguf" Q8_0 --tensor-type 'ffn_down=q4_K' --tensor-type 'attn_v=f16' \
     --quiet 2>"$T/err" && grep -q "15 converted\|converted" "$T/err"; then ok; else bad "quantize --tensor-type"; cat "$T/err"; fi
if cmp -s "$T/o.gguf" "$M/tiny-qwen3-q8_0.gguf"; then bad "--tensor-type changed nothing"; else ok; fi
"$BIN" quantize "$M/tiny-qwen3-f16.gguf" "$T/o.gguf" Q8_0 --tensor-type 'ffn_down' 2>"$T/err" && bad "PATTERN without =TYPE accepted" ||
  { grep -q "PATTERN=TYPE" "$T/err" && ok || bad "--tensor-type error: $(cat "$T/err")"; }
"$BIN" quantize "$M/tiny-qwen3-f16.gguf" "$T/o.gguf" Q8_0 --tensor-type 'ffn=q9_9' 2>"$T/err" && bad "bad type accepted" ||
  { grep -q "q9_9" "$T/err" && ok || bad "bad override type error: $(cat "$T/err")"; }
# an IQ type through an override needs the imatrix: the CLI adds how to make one
"$BIN" quantize "$M/tiny-qwen3-f16.gguf" "$T/o.gguf" Q8_0 --tensor-type 'ffn_up=iq2_xxs' 2>"$T/err" && bad "iq2 override without imatrix" ||
  { grep -q "pocketllm imatrix" "$T/err" && ok || bad "iq2 override error: $(cat "$T/err")"; }

echo "imatrix_api: $pass passed, $fail failed"
[ "$fail" -eq 0 ]
