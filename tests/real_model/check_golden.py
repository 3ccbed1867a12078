#!/usr/bin/env python3
"""A real, trained model against llama.cpp's golden for it (issue 18).

    check_golden.py NAME POCKETLLM MODEL.gguf GOLDEN.json

What GOLDEN.json holds is checked, each part only if present:
  - "tokenizer": [{"text", "tokens"}]: `pocketllm tokenize` gives llama.cpp's ids;
  - "cases": [{"prompt", "tokens", "greedy", "margins"}]: prompt ids equal and
    greedy tokens equal llama.cpp's up to the first step whose top-1 margin is
    below MARGIN (two correct engines may part at a near-tie on quantized
    weights; such a step must be reached, not skipped), or to end-of-generation;
  - "perplexity", "perplexity_window": {"file", "ctx", "chunks", "llama_cpp"}:
    `pocketllm perplexity` within PPL_TOL of llama-perplexity's.
Prints one line per check and "NAME: P passed, F failed"; exits 1 on a failure.
"""
import json, os, subprocess, sys

MARGIN, PPL_TOL = 0.5, 0.01
NAME, BIN, MODEL, GOLDEN = sys.argv[1:5]
HERE = os.path.dirname(os.path.abspath(GOLDEN))
g = json.load(open(GOLDEN))
passed = failed = 0


def result(ok, what):
    global passed, failed
    passed += ok
    failed += not ok
    print(("ok   " if ok else "FAIL ") + what, flush=True)


if "tokenizer" in g:
    bad = []
    for t in g["tokenizer"]:
        r = subprocess.run([BIN, "tokenize", "--model", MODEL, "--prompt", t["text"]], capture_output=True, text=True)
        if r.returncode != 0 or json.loads(r.stdout) != t["tokens"]:
            bad.append(f"{t['text']!r}: {r.stdout.strip()[:200] or r.stderr.strip()[-200:]} vs llama.cpp {t['tokens']}")
    result(not bad, f"tokenizer: {len(g['tokenizer']) - len(bad)}/{len(g['tokenizer'])} strings as llama.cpp"
           + "".join("\n     " + b for b in bad))

for c in g.get("cases", []):
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

for key in ("perplexity", "perplexity_window"):
    p = g.get(key)
    if not p:
        continue
    r = subprocess.run([BIN, "perplexity", "--model", MODEL, "--file", os.path.join(HERE, p["file"]), "--ctx",
                        str(p["ctx"]), "--chunks", str(p["chunks"]), "--threads", "2", "--json"],
                       capture_output=True, text=True)
    if r.returncode != 0:
        result(False, f"{key}: exit {r.returncode}: {r.stderr.strip()[-300:]}")
        continue
    ppl = json.loads(r.stdout)["ppl"]
    rel = ppl / p["llama_cpp"] - 1
    result(abs(rel) <= PPL_TOL, f"perplexity (ctx {p['ctx']}, {p['chunks']} chunks): {ppl:.4f} vs llama.cpp "
                                f"{p['llama_cpp']:.4f} ({100 * rel:+.2f}%)")

print(f"{NAME}: {passed} passed, {failed} failed")
sys.exit(1 if failed else 0)
