#!/usr/bin/env bash
# CLI errors are one clear line on stderr and a non-zero exit status.
BIN=$1 FIX=$2
. "$(dirname "$0")/lib.bash"
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
expect_error "no-such.gguf" run --model "$tmp/no-such.gguf" --prompt hi
expect_error "unknown command" frobnicate
expect_error "unknown option" run --bogus
expect_error "--prompt is required" run --model "$FIX/models/tiny-qwen3-f16.gguf"
expect_error "bad --max-tokens" run --model x --prompt y --max-tokens -3
head -c 1000 "$FIX/models/tiny-qwen3-f16.gguf" > "$tmp/trunc.gguf"
expect_error "trunc.gguf" run --model "$tmp/trunc.gguf" --prompt hi
expect_error "device" run --model "$FIX/models/tiny-qwen3-f16.gguf" --prompt hi --device nosuch
expect_error "bad token id" detokenize --model "$FIX/models/qwen3-vocab.gguf" --ids 1,x
echo "errors: $pass passed, $fail failed"
[ $fail -eq 0 ]
