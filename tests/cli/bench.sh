#!/usr/bin/env bash
# pocketllm bench: the --json contract (one object per test with test, tok_s,
# tok_s_std, threads and gb_s / gflop_s), the -d / --n-depth tests
# ("pp16 @ d40", n_depth), and bad values refused with a message.
set -u
BIN=$1 FIX=$2
M=$FIX/models/tiny-qwen3-q4_k_m.gguf
fail=0 pass=0
ok() { pass=$((pass+1)); }
bad() { echo "FAIL: $*"; fail=$((fail+1)); }

plain=$("$BIN" bench -m "$M" -p 16 -n 4 -r 2 --threads 1 --json 2>&1) || bad "bench: $plain"
deep=$("$BIN" bench -m "$M" -p 16 -n 4 -r 2 --threads 1 -d 40 --json 2>&1) || bad "bench -d: $deep"
long=$("$BIN" bench -m "$M" -p 0 -n 4 -r 1 --threads 1 --n-depth 200 --json 2>&1) || bad "bench --n-depth: $long"

python3 - "$plain" "$deep" "$long" <<'PY' && ok || bad "bench --json shape"
import json, sys
plain, deep, long = (json.loads(a) for a in sys.argv[1:4])
assert [o["test"] for o in plain] == ["pp16", "tg4"], plain
assert [o["test"] for o in deep] == ["pp16 @ d40", "tg4 @ d40"], deep
assert [o["test"] for o in long] == ["tg4 @ d200"], long
for o in plain + deep + long:
    for k in ("tok_s", "tok_s_std", "threads", "model_bytes", "n_depth"):
        assert k in o, (k, o)
    assert o["tok_s"] > 0 and o["threads"] == 1, o
    assert ("gflop_s" in o) == o["test"].startswith("pp") and ("gb_s" in o) == o["test"].startswith("tg"), o
assert all(o["n_depth"] == 0 for o in plain) and all(o["n_depth"] == 40 for o in deep), (plain, deep)
# decode bytes per token = weights + the cache read so far (depth + n/2 rows)
per_tok = lambda o: o["bytes_per_token"] - o["model_bytes"]
kv0, kv40, kv200 = per_tok(plain[1]), per_tok(deep[1]), per_tok(long[0])
assert kv0 > 0 and kv40 > kv0 and kv200 > kv40, (kv0, kv40, kv200)
assert abs((kv200 - kv0) / (kv40 - kv0) - 200 / 40) < 1e-6, (kv0, kv40, kv200)
assert abs(plain[1]["gb_s"] - plain[1]["tok_s"] * plain[1]["bytes_per_token"] / 1e9) <= 1e-3 * plain[1]["gb_s"] + 1e-3
PY

# a file name with a quote and a backslash stays valid JSON
T=$(mktemp -d); trap 'rm -rf "$T"' EXIT
cp "$M" "$T/a\"b\\c.gguf"
out=$("$BIN" bench -m "$T/a\"b\\c.gguf" -p 0 -n 2 -r 1 --threads 1 --json 2>&1)
if python3 -c 'import json,sys; assert json.loads(sys.argv[1])[0]["model"] == "a\"b\\c.gguf"' "$out"; then ok; else bad "quoted name: $out"; fi

# the depth is part of the context the model is planned for: a budget that
# holds the model at -d 0 refuses it at a depth whose cache does not fit
if "$BIN" bench -m "$M" -p 0 -n 4 -r 1 --threads 1 --memory 64M >/dev/null 2>&1; then ok; else bad "bench --memory 64M at depth 0"; fi
out=$("$BIN" bench -m "$M" -p 0 -n 4 -r 1 --threads 1 --memory 64M -d 1000000 2>&1); rc=$?
if [ $rc -ne 0 ] && [ $rc -lt 128 ] && echo "$out" | grep -q "1000004-token context"; then ok; else bad "bench -d 1000000 --memory 64M: rc=$rc $out"; fi

for a in "-d -1" "-d x" "--n-depth 99999999" "-d"; do
  out=$("$BIN" bench -m "$M" -p 0 -n 1 $a 2>&1); rc=$?
  if [ $rc -ne 0 ] && [ $rc -lt 128 ] && [ -n "$out" ]; then ok; else bad "bench $a: rc=$rc $out"; fi
done

echo "bench: $pass passed, $fail failed"
[ $fail -eq 0 ]
