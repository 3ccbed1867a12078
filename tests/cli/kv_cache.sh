#!/usr/bin/env bash
# --cache-type-k / --cache-type-v: run reproduces llama.cpp's greedy tokens
# with q8_0 / q4_0 caches (goldens in fixtures/golden/kv, comparison rule as
# test_golden's kv fixtures), the rotation switch changes the result, bench
# reports the types, and bad types are one clear error before any load.
set -uo pipefail
BIN=$1 FIX=$2
python3 "$(dirname "$0")/kv_cache.py" "$BIN" "$FIX" || exit 1
. "$(dirname "$0")/lib.bash"
M=$FIX/models/tiny-qwen3-f16.gguf
# a typo stops the command before the model is opened (the model path does not exist)
expect_error "unknown --cache-type-k 'q5_0'" run --model /nonexistent.gguf --prompt hi --cache-type-k q5_0
expect_error "unknown --cache-type-v 'f32'" run --model /nonexistent.gguf --prompt hi -ctv f32
expect_error "unknown --cache-type-k 'Q8_0'" bench --model /nonexistent.gguf -ctk Q8_0
expect_error "unknown --cache-type-v 'bf16'" serve --model /nonexistent.gguf --port 0 --cache-type-v bf16
expect_error "option --cache-type-k needs a value" run --model "$M" --prompt hi --cache-type-k
# bench: the types in the JSON objects
out=$("$BIN" bench --model "$M" -p 16 -n 4 -r 1 -ctk q8_0 -ctv q4_0 --json 2>/dev/null)
if [[ "$out" == *'"type_k": "q8_0", "type_v": "q4_0"'* ]]; then ok; else bad "bench --json: $out"; fi
# fit: the cache type is part of the plan, and run --memory refuses exactly as it says
python3 - "$BIN" "$FIX/models" <<'PY' && ok || bad "fit with cache types"
import json, subprocess, sys
b, models = sys.argv[1], sys.argv[2]
fit = lambda m, *a: json.loads(subprocess.check_output([b, "fit", "--model", m, "--threads", "2", "--json", *a]))
run = lambda m, *a: subprocess.run([b, "run", "-m", m, "-p", "Hi", "-n", "1", "--threads", "2", *a],
                                   capture_output=True, text=True)
# a quantized file's own rung: with a budget that holds it with a q8_0 cache but not with f16,
# the plan keeps the weights and lowers the cache
m = f"{models}/tiny-qwen3-q4_k_m.gguf"
f16 = fit(m, "--memory", "1G", "--ctx", "512", "-ctk", "f16", "-ctv", "f16")["rungs"][0]
q8 = fit(m, "--memory", "1G", "--ctx", "512", "-ctk", "q8_0", "-ctv", "q8_0")["rungs"][0]
assert (f16["cache_type_k"], q8["cache_type_k"]) == ("f16", "q8_0")
assert q8["kv_cache"] * 64 == f16["kv_cache"] * 34 and q8["total"] < f16["total"], (q8, f16)
d = fit(m, "--memory", str(q8["total"]), "--ctx", "512")
assert d["plan"] == "Q4_K_M" and d["rungs"][0]["as_is"], d["plan"]
assert (d["plan_cache_type_k"], d["plan_cache_type_v"]) == ("q8_0", "q8_0"), d
r = run(m, "--ctx", "512", "--memory", str(q8["total"]))   # the default f16 cache does not fit
assert r.returncode == 1 and "add --cache-type-k q8_0 --cache-type-v q8_0" in r.stderr, r.stderr
assert run(m, "--ctx", "512", "--memory", str(q8["total"]), "-ctk", "q8_0", "-ctv", "q8_0").returncode == 0
# max_ctx: the longest context the budget holds at that rung; one more token is refused
for ct in ("f16", "q8_0", "q4_0"):
    d = fit(m, "--memory", "12M", "--ctx", "512", "-ctk", ct, "-ctv", ct)
    n = d["rungs"][0]["max_ctx"]
    assert 512 < n < 40960, (ct, n)
    ok = run(m, "--ctx", str(n), "--memory", "12M", "-ctk", ct, "-ctv", ct)
    assert ok.returncode == 0, (ct, n, ok.stderr)
    no = run(m, "--ctx", str(n + 1), "--memory", "12M", "-ctk", ct, "-ctv", ct)
    assert no.returncode == 1 and "needs" in no.stderr, (ct, n, no.stderr)
PY
echo "kv_cache errors: $pass passed, $fail failed"
[ $fail -eq 0 ]
