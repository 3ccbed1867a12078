#!/usr/bin/env bash
# The quantization ladder end to end: quantize f16 -> every rung (the files
# must be byte-identical with llama-quantize's fixtures, load and generate);
# imatrix + perplexity run; fit's JSON shape, its arithmetic (a rung's planned
# weights equal the quantized file's) and its decisions for the Qwen3 presets
# at 8/4/2/1 GiB; run/bench refuse a model over --memory and name the rung;
# fit --check stops at the first rung that fails the cases.
set -u
BIN=$(cd "$(dirname "$1")" && pwd)/$(basename "$1")
FIX=$(cd "$2" && pwd)
M=$FIX/models
L=$FIX/ladder
T=$(mktemp -d)
trap 'rm -rf "$T"' EXIT
fail=0 pass=0
ok() { pass=$((pass+1)); }
bad() { echo "FAIL: $*"; fail=$((fail+1)); }

# ---- quantize: every rung, byte-identical with llama.cpp's files ----------
for t in q8_0 q6_k q4_k_m q2_k tq2_0 tq1_0; do
  if "$BIN" quantize "$M/tiny-qwen3-f16.gguf" "$T/$t.gguf" "$t" --threads 2 --quiet 2>/dev/null &&
     cmp -s "$T/$t.gguf" "$M/tiny-qwen3-$t.gguf"; then ok; else bad "quantize $t differs from llama-quantize's"; fi
done
# The IQ types need the imatrix; llama-quantize recorded its path as given,
# so run from the models directory with the same relative name.
for t in iq2_xs iq2_xxs iq1_m iq1_s; do
  if (cd "$M" && "$BIN" quantize tiny-qwen3-f16.gguf "$T/$t.gguf" "$t" --imatrix tiny-imatrix.gguf --threads 2 --quiet 2>/dev/null) &&
     cmp -s "$T/$t.gguf" "$M/tiny-qwen3-$t.gguf"; then ok; else bad "quantize $t differs from llama-quantize's"; fi
done
if "$BIN" quantize "$M/tiny-qwen3-f16.gguf" "$T/x.gguf" IQ2_XXS 2>"$T/err"; then bad "IQ2_XXS without imatrix"
elif grep -q "imatrix" "$T/err"; then ok; else bad "IQ2_XXS error does not mention the imatrix"; fi
# requantizing from q8_0, and to bf16
"$BIN" quantize "$M/tiny-qwen3-q8_0.gguf" "$T/re.gguf" Q4_K_M --quiet 2>/dev/null && ok || bad "requantize q8_0 -> Q4_K_M"
"$BIN" quantize "$M/tiny-qwen3-f32.gguf" "$T/bf16.gguf" BF16 --quiet 2>/dev/null && ok || bad "f32 -> BF16"
# every output loads and generates
for f in q8_0 q6_k q4_k_m q2_k iq2_xs iq2_xxs iq1_m iq1_s tq2_0 tq1_0 re bf16; do
  if "$BIN" run -m "$T/$f.gguf" -p "Hello" -n 4 --json 2>/dev/null | python3 -c 'import json,sys; d=json.load(sys.stdin); assert d["text"] is not None'; then ok
  else bad "run $f"; fi
done

# ---- imatrix and perplexity ----------------------------------------------
if "$BIN" imatrix -m "$M/tiny-qwen3-f16.gguf" -f "$L/calib.txt" --ctx 128 -o "$T/im.gguf" 2>/dev/null &&
   "$BIN" quantize "$M/tiny-qwen3-f16.gguf" "$T/own-iq2.gguf" IQ2_XXS --imatrix "$T/im.gguf" --quiet 2>/dev/null &&
   "$BIN" run -m "$T/own-iq2.gguf" -p Hi -n 2 >/dev/null 2>&1; then ok; else bad "imatrix -> IQ2_XXS"; fi
python3 - "$T/im.gguf" <<'PY' && ok || bad "imatrix file layout"
import struct, sys
d = open(sys.argv[1], "rb").read()
assert d[:4] == b"GGUF" and struct.unpack_from("<I", d, 4)[0] == 3
n_t, n_kv = struct.unpack_from("<QQ", d, 8)
assert n_t == 28 and n_kv == 4, (n_t, n_kv)
for key in (b"general.type", b"imatrix.datasets", b"imatrix.chunk_count", b"imatrix.chunk_size",
            b"blk.0.attn_q.weight.in_sum2", b"blk.1.ffn_down.weight.counts"):
    assert key in d, key
PY
out=$("$BIN" perplexity -m "$M/tiny-qwen3-f16.gguf" -f "$L/calib.txt" --ctx 128 2>/dev/null)
if echo "$out" | grep -Eq '^Final estimate: PPL = [0-9.]+ \+/- [0-9.]+$'; then ok; else bad "perplexity output: $out"; fi
"$BIN" perplexity -m "$M/tiny-qwen3-f16.gguf" -f "$L/calib.txt" --ctx 128 --chunks 2 --json 2>/dev/null |
  python3 -c 'import json,sys; d=json.load(sys.stdin); assert d["n_chunks"]==2 and d["n_scored"]==2*63 and d["ppl"]>1' && ok || bad "perplexity --json"
"$BIN" perplexity -m "$M/tiny-qwen3-f16.gguf" -f "$L/calib.txt" --ctx 4096 >/dev/null 2>&1 && bad "perplexity on too short a text" || ok

# ---- fit: JSON shape and arithmetic --------------------------------------
"$BIN" fit --model "$M/tiny-qwen3-f16.gguf" --memory 1G --ctx 512 --threads 2 --json >"$T/fit.json" && ok || bad "fit --json"
python3 - "$T/fit.json" "$BIN" "$T" "$M" <<'PY' && ok || bad "fit arithmetic"
import json, subprocess, sys
d = json.load(open(sys.argv[1]))
b, tmp, models = sys.argv[2], sys.argv[3], sys.argv[4]
names = [r["name"] for r in d["rungs"]]
assert names == ["F16", "Q8_0", "Q6_K", "Q4_K_M", "Q2_K", "IQ2_XS", "IQ2_XXS", "IQ1_M", "IQ1_S", "TQ2_0", "TQ1_0"], names
assert d["rungs"][0]["as_is"] and d["plan"] == "F16" and d["budget"] == 1 << 30 and d["budget_source"] == "given"
for r in d["rungs"]:
    assert r["total"] == r["weights"] + r["kv_cache"] + r["scratch"] and r["fits"] == (r["total"] <= d["budget"])
# a rung's planned bytes are exactly those of the quantized file, as is
files = {"Q8_0": "q8_0", "Q6_K": "q6_k", "Q4_K_M": "q4_k_m", "Q2_K": "q2_k", "IQ2_XS": "iq2_xs",
         "IQ2_XXS": "iq2_xxs", "IQ1_M": "iq1_m", "IQ1_S": "iq1_s", "TQ2_0": "tq2_0", "TQ1_0": "tq1_0"}
for r in d["rungs"][1:]:
    q = json.loads(subprocess.check_output([b, "fit", "--model", f"{models}/tiny-qwen3-{files[r['name']]}.gguf",
                                            "--memory", "1G", "--ctx", "512", "--threads", "2", "--json"]))
    a = q["rungs"][0]
    assert a["as_is"] and a["name"] == r["name"], (a["name"], r["name"])
    assert (a["weights"], a["total"]) == (r["weights"], r["total"]), (r["name"], a, r)
    # and the ladder continues below the file's own rung
    assert [x["name"] for x in q["rungs"][1:]] == names[names.index(r["name"]) + 1:]
PY
# the plan is the highest rung that fits, and pl_model_load agrees at the boundary
python3 - "$BIN" "$M" <<'PY' && ok || bad "fit boundary vs load"
import json, subprocess, sys
b, models = sys.argv[1], sys.argv[2]
m = f"{models}/tiny-qwen3-f16.gguf"
d = json.loads(subprocess.check_output([b, "fit", "--model", m, "--memory", "1G", "--ctx", "512", "--json"]))
need = d["rungs"][0]["total"]
run = lambda mem: subprocess.run([b, "run", "-m", m, "-p", "Hi", "-n", "1", "--ctx", "512", "--memory", str(mem)],
                                 capture_output=True, text=True)
assert run(need).returncode == 0
r = run(need - 1)
assert r.returncode == 1 and "needs" in r.stderr, r.stderr
q6 = next(x for x in d["rungs"] if x["name"] == "Q6_K")
d2 = json.loads(subprocess.check_output([b, "fit", "--model", m, "--memory", str(q6["total"]), "--ctx", "512", "--json"]))
assert d2["plan"] == "Q6_K", d2["plan"]
PY

# ---- fit decisions for the Qwen3 presets (4096-token context) ------------
# rung totals (MiB): 1.7b BF16 3786, Q8_0 with a q8_0 KV cache 2029, Q2_K with
# q8_0 1034 (the cpu's prepared q3_K blocks are 5% larger than the file's),
# IQ2_XS 882; 4b Q8_0 4725 Q6_K 3796, Q2_K with q8_0 1966 (IQ1_S 1649 > 1 GiB);
# 8b Q6_K 7080 Q2_K 3795 (IQ1_S 2683 > 2 GiB). At a weight rung the planner
# lowers the cache to q8_0 before the weights (engine/fit.c: kv_choices),
# except on a 16-bit file's own rung.
python3 - "$BIN" "$M/qwen3-vocab.gguf" <<'PY' && ok || bad "preset decisions"
import json, subprocess, sys
b, vocab = sys.argv[1], sys.argv[2]
want = {"1.7b": ["BF16", "BF16", "Q8_0", "IQ2_XS"], "4b": ["Q8_0", "Q6_K", "Q2_K", None],
        "8b": ["Q6_K", "Q2_K", None, None]}
for p, plans in want.items():
    for gib, plan in zip([8, 4, 2, 1], plans):
        r = subprocess.run([b, "fit", "--preset", p, "--vocab", vocab, "--memory", f"{gib}G", "--threads", "2",
                            "--json"], capture_output=True, text=True)
        d = json.loads(r.stdout)
        assert d["plan"] == plan, (p, gib, d["plan"], plan)
        assert r.returncode == (0 if plan else 3)
        fitting = [x["name"] for x in d["rungs"] if x["fits"]]
        assert (fitting[0] if fitting else None) == plan, (p, gib, fitting)
        # weights shrink down the ladder until the ternary rungs (totals need not: each rung
        # carries the cache type it fits with, f16 where it can)
        tot = [x["weights"] for x in d["rungs"]][:9]
        assert tot == sorted(tot, reverse=True), (p, tot)
        # a 16-bit file's own rung keeps the f16 cache (Q8_0 weights come first)
        for x in d["rungs"]:
            if x["cache_type_k"] == "q8_0":
                assert not x["as_is"], (p, gib, x)
PY

# ---- run / bench refuse a model over the budget, naming the rung ---------
out=$("$BIN" run -m "$M/tiny-qwen3-f16.gguf" -p Hi -n 2 --ctx 512 --memory 9M 2>&1); rc=$?
if [ $rc -ne 0 ] && echo "$out" | grep -q "picks Q6_K" && echo "$out" | grep -q "pocketllm quantize .*tiny-qwen3-f16.gguf .* Q6_K"; then ok
else bad "run --memory refusal: rc=$rc $out"; fi
# 8.1 MiB: Q2_K with a q8_0 cache needs 8.10 MiB on the cpu (its q3_K tensors
# prepared in 1856-byte blocks), with an f16 cache 8.2 MiB; Q4_K_M 8.5 MiB.
out=$("$BIN" run -m "$M/tiny-qwen3-f16.gguf" -p Hi -n 2 --ctx 512 --memory 8.1M 2>&1); rc=$?
if [ $rc -ne 0 ] && echo "$out" | grep -q "picks Q2_K" && echo "$out" | grep -q "run it with --cache-type-k q8_0 --cache-type-v q8_0"; then ok
else bad "run --memory refusal (a q8_0 cache before a lower rung): $out"; fi
# with the cache type fixed, the plan keeps it: then the IQ rung it was before
out=$("$BIN" run -m "$M/tiny-qwen3-f16.gguf" -p Hi -n 2 --ctx 512 --memory 8.1M -ctk f16 -ctv f16 2>&1); rc=$?
if [ $rc -ne 0 ] && echo "$out" | grep -q "picks IQ2_XS" && echo "$out" | grep -q "pocketllm imatrix"; then ok
else bad "run --memory refusal (IQ rung): $out"; fi
out=$("$BIN" bench -m "$M/tiny-qwen3-f16.gguf" -p 512 -n 8 -r 1 --memory 9M 2>&1); rc=$?
if [ $rc -ne 0 ] && echo "$out" | grep -q "picks"; then ok; else bad "bench --memory refusal: $out"; fi
out=$("$BIN" run -m "$M/tiny-qwen3-f16.gguf" -p Hi -n 2 --ctx 512 --memory 2M 2>&1); rc=$?
if [ $rc -ne 0 ] && echo "$out" | grep -q "No rung"; then ok; else bad "run: nothing fits: $out"; fi
"$BIN" run -m "$M/tiny-qwen3-f16.gguf" -p Hi -n 2 --memory 12Q >/dev/null 2>&1 && bad "bad --memory accepted" || ok

# ---- fit --check ----------------------------------------------------------
# The case passes down to Q4_K_M and fails at Q2_K on the tiny model.
q4=$(python3 -c 'import json,sys; d=json.load(open(sys.argv[1])); print(next(r["total"] for r in d["rungs"] if r["name"]=="Q4_K_M"))' "$T/fit.json")
q2=$(python3 -c 'import json,sys; d=json.load(open(sys.argv[1])); print(next(r["total"] for r in d["rungs"] if r["name"]=="Q2_K"))' "$T/fit.json")
"$BIN" fit --model "$M/tiny-qwen3-f16.gguf" --ctx 512 --memory "$q4" --check "$L/cases.jsonl" --json 2>/dev/null |
  python3 -c 'import json,sys; d=json.load(sys.stdin); r={x["name"]:x for x in d["rungs"]}; assert d["plan"]=="Q4_K_M" and r["Q4_K_M"]["check"]=="pass", d' && ok || bad "fit --check passes Q4_K_M"
"$BIN" fit --model "$M/tiny-qwen3-f16.gguf" --ctx 512 --memory "$q2" --check "$L/cases.jsonl" --json >"$T/c.json" 2>/dev/null
rc=$?
python3 -c 'import json,sys; d=json.load(open(sys.argv[1])); r={x["name"]:x for x in d["rungs"]}; assert d["plan"] is None and r["Q2_K"]["check"]=="fail" and "check" not in r["IQ2_XS"], d' "$T/c.json" &&
  [ $rc -eq 3 ] && ok || bad "fit --check stops at the failing Q2_K (rc=$rc)"

echo "ladder: $pass passed, $fail failed"
[ $fail -eq 0 ]
