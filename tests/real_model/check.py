"""Quality check of `pocketllm` on the real default model (run by
tests/cli/real_model.sh): usage  check.py POCKETLLM_BIN MODEL.gguf

1. Every case of cases.jsonl (greedy, chat cases through the model's chat
   template): the answer contains the expected substring, and the prompt ids
   and generated ids equal llama.cpp's (golden-<model>.json). A divergence is
   excused only at a step whose recorded margin (top1 - top2 logit gap) is
   below MARGIN, where two correct engines may part; the case then counts
   as agreeing up to that step.
2. The interactive chat (`run --chat` on stdin) keeps the conversation: the
   second question only makes sense with the first one in the history.
3. Perplexity of ppl.txt within PPL_TOL (relative) of llama-perplexity's.
With POCKETLLM_REAL_MODEL_QUICK set (sanitizer builds), only the cases in
QUICK and the chat are run.
Ends with 'real_model: N passed, M failed'.
"""
import json
import os
import subprocess
import sys
import time

MARGIN = 0.5
PPL_TOL = 0.02
HERE = os.path.dirname(os.path.abspath(__file__))
QUICK = ("capital-france", "arith-add", "code-add")
quick = bool(os.environ.get("POCKETLLM_REAL_MODEL_QUICK"))

BIN, MODEL = sys.argv[1], sys.argv[2]
cases = [json.loads(line) for line in open(os.path.join(HERE, "cases.jsonl")) if line.strip()]
if quick:
    cases = [c for c in cases if c["id"] in QUICK]
    print(f"quick mode (POCKETLLM_REAL_MODEL_QUICK): cases {', '.join(QUICK)} and the chat only")
gpath = os.path.join(HERE, "golden-" + os.path.splitext(os.path.basename(MODEL))[0] + ".json")
golden = json.load(open(gpath)) if os.path.exists(gpath) else None
if golden is None:
    print(f"note: no {os.path.basename(gpath)}: checking answers only, not token agreement with llama.cpp")
gcases = {c["id"]: c for c in golden["cases"]} if golden else {}

passed = failed = 0
agree_steps = total_steps = 0


def result(ok, what):
    global passed, failed
    if ok:
        passed += 1
    else:
        failed += 1
    print(("ok   " if ok else "FAIL ") + what, flush=True)


t_all = time.time()
for c in cases:
    args = [BIN, "run", "--model", MODEL, "--prompt", c["prompt"], "--max-tokens", str(c["max_tokens"]),
            "--ctx", "512", "--json"] + (["--chat"] if c["chat"] else [])
    t0 = time.time()
    r = subprocess.run(args, capture_output=True, text=True)
    dt = time.time() - t0
    if r.returncode != 0:
        result(False, f"{c['id']}: exit {r.returncode}: {r.stderr.strip()[-500:]}")
        continue
    out = json.loads(r.stdout)
    problems = []
    if c["expect"] not in out["text"]:
        problems.append(f"answer {out['text']!r} lacks {c['expect']!r}")
    g = gcases.get(c["id"])
    note = ""
    if g:
        if out["prompt_tokens"] != g["prompt_tokens"]:
            problems.append(f"prompt tokens {out['prompt_tokens']} differ from llama.cpp's {g['prompt_tokens']}")
        got, want, margins = out["tokens"], g["greedy"], g.get("margins") or [float("inf")] * len(g["greedy"])
        total_steps += len(want)
        for k, w in enumerate(want):
            if k < len(got) and got[k] == w:
                agree_steps += 1
                continue
            if margins[k] < MARGIN:
                note = f" (parted from llama.cpp at step {k}, a near-tie: margin {margins[k]})"
            else:
                problems.append(f"step {k}: token {got[k] if k < len(got) else None} where llama.cpp has {w} "
                                f"(margin {margins[k]}); got {got}, want {want}")
            break
        else:
            if len(got) != len(want):
                problems.append(f"{len(got)} tokens where llama.cpp has {len(want)}: got {got}, want {want}")
    result(not problems, f"{c['id']}: {out['text']!r} [{dt:.1f} s]{note}" + "".join("\n     " + p for p in problems))

# The interactive chat keeps its history.
t0 = time.time()
r = subprocess.run([BIN, "run", "--model", MODEL, "--chat", "--ctx", "512", "--max-tokens", "32"],
                   input="What is the capital of France?\nAnd of Italy?\n/exit\n", capture_output=True, text=True)
lines = [l for l in r.stdout.splitlines() if l.strip()]
ok = r.returncode == 0 and len(lines) == 2 and "Paris" in lines[0] and "Rome" in lines[1] and sum(l.startswith("[") and "tok/s" in l for l in r.stderr.splitlines()) == 2
result(ok, f"chat: two turns with history: {lines!r} [{time.time() - t0:.1f} s]"
       + ("" if ok else f"\n     exit {r.returncode}, stderr: {r.stderr.strip()[-500:]}"))

# Perplexity against llama.cpp's.
if golden and "perplexity" in golden and not quick:
    p = golden["perplexity"]
    t0 = time.time()
    r = subprocess.run([BIN, "perplexity", "--model", MODEL, "--file", os.path.join(HERE, p["file"]), "--ctx",
                        str(p["ctx"]), "--chunks", str(p["chunks"]), "--json"], capture_output=True, text=True)
    if r.returncode != 0:
        result(False, f"perplexity: exit {r.returncode}: {r.stderr.strip()[-500:]}")
    else:
        ppl = json.loads(r.stdout)["ppl"]
        rel = ppl / p["llama_cpp"] - 1
        result(abs(rel) <= PPL_TOL, f"perplexity (ctx {p['ctx']}, {p['chunks']} chunks): {ppl:.4f} vs llama.cpp "
               f"{p['llama_cpp']:.4f} ({rel * 100:+.2f}%, tolerance {PPL_TOL * 100:.0f}%) [{time.time() - t0:.1f} s]")

if total_steps:
    print(f"token agreement with llama.cpp: {agree_steps}/{total_steps} greedy steps")
print(f"total {time.time() - t_all:.0f} s")
print(f"real_model: {passed} passed, {failed} failed")
sys.exit(1 if failed else 0)
