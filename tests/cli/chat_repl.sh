#!/usr/bin/env bash
# `pocketllm run --chat` on a fixture model (random weights, so only the
# mechanics are checked; tests/cli/real_model.sh checks real answers):
# the single-turn prompt is the chat template's (Qwen3: enable_thinking=false
# unless --think), and the interactive chat keeps history, handles /clear,
# /help, unknown commands and /exit, and prints a tok/s line per reply.
set -euo pipefail
BIN=$1 FIX=$2
M="$FIX/models/tiny-qwen3-f32.gguf"
fail() { echo "FAIL: $*"; exit 1; }

ids() { "$BIN" run --model "$M" --max-tokens 2 --json "$@" | python3 -c 'import json,sys; print(json.load(sys.stdin)["prompt_tokens"])'; }
tok() { "$BIN" tokenize --model "$M" --prompt "$1" --json; echo; }

want=$(tok $'<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n<think>\n\n</think>\n\n')
got=$(ids --chat --prompt hi)
[[ "$got" == "$want" ]] || fail "--chat prompt $got, want $want (enable_thinking=false)"
want=$(tok $'<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n')
got=$(ids --chat --think --prompt hi)
[[ "$got" == "$want" ]] || fail "--chat --think prompt $got, want $want"
want=$(tok $'<|im_start|>system\nBe brief.<|im_end|>\n<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n<think>\n\n</think>\n\n')
got=$(ids --chat --system "Be brief." --prompt hi)
[[ "$got" == "$want" ]] || fail "--chat --system prompt $got, want $want"

out=$(printf 'hello\nmore \\\ntext\n/help\n/nope\n/clear\nhello\n/exit\nnever read\n' |
      "$BIN" run --model "$M" --chat --max-tokens 4 --ctx 256 2>&1) || fail "chat exited $?: $out"
n=$(grep -c '^\[4 tokens, .* tok/s | prompt' <<<"$out" || true)
[[ "$n" == 3 ]] || fail "expected 3 replies with a tok/s line, got $n: $out"
grep -q '(conversation cleared)' <<<"$out" || fail "/clear: $out"
grep -q 'unknown command /nope' <<<"$out" || fail "/nope: $out"
grep -q '^commands: /exit' <<<"$out" || fail "/help: $out"
# The second turn reuses the first one's cache: only its new tokens are prefilled.
second=$(grep '^\[4 tokens' <<<"$out" | sed -n 2p)
[[ "$second" =~ prompt\ ([0-9]+)\ tokens\ \(([0-9]+)\ new\) ]] || fail "second reply line: $second"
(( BASH_REMATCH[2] < BASH_REMATCH[1] )) || fail "the history was not reused: $second"
# After /clear the conversation starts over: the third prompt is as short as the first.
first=$(grep '^\[4 tokens' <<<"$out" | sed -n 1p | sed -E 's/.*prompt ([0-9]+) tokens.*/\1/')
third=$(grep '^\[4 tokens' <<<"$out" | sed -n 3p | sed -E 's/.*prompt ([0-9]+) tokens.*/\1/')
[[ "$third" == "$first" ]] || fail "after /clear the prompt has $third tokens, the first had $first"
# End of input ends the chat too.
printf 'hi\n' | "$BIN" run --model "$M" --chat --max-tokens 2 --ctx 256 >/dev/null 2>&1 || fail "EOF: exit $?"
"$BIN" run --model "$M" --chat --json >/dev/null 2>&1 && fail "--chat --json without --prompt should be refused"
echo "chat_repl: 9 passed, 0 failed"
