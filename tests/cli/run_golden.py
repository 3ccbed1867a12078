import json, subprocess, sys

BIN, FIX = sys.argv[1], sys.argv[2]
MODELS = {"tiny-qwen3-f32": 0.1, "tiny-qwen3-f16": 0.1, "tiny-qwen3-bf16": 0.5, "tiny-qwen3-q8_0": 1.0,
          "tiny-qwen3-q6_k": 1.0, "tiny-qwen3-q4_k_m": 1.0, "tiny-qwen3-untied-f16": 0.1,
          "tiny-qwen3-untied-q4_k_m": 1.0}
# Under ASan (a Debug build, ~20x slower) check a subset: the Release run
# covers every model and prompt.
sanitized = b"libasan" in subprocess.run(["ldd", BIN], capture_output=True).stdout
if sanitized:
    MODELS = {k: MODELS[k] for k in ("tiny-qwen3-f16", "tiny-qwen3-q4_k_m")}
failed = passed = 0
for name, margin in MODELS.items():
    golden = json.load(open(f"{FIX}/golden/{name}.json"))
    for dev in ("ref", "cpu"):
        for case in golden["cases"][:2] if sanitized else golden["cases"]:
            out = subprocess.run([BIN, "run", "--model", f"{FIX}/models/{name}.gguf", "--prompt", case["prompt"],
                                  "--max-tokens", "24", "--device", dev, "--ctx", "512", "--json"],
                                 capture_output=True, text=True)
            if out.returncode != 0:
                print(f"FAIL {name} {dev} {case['prompt']!r}: exit {out.returncode}: {out.stderr.strip()}")
                failed += 1
                continue
            res = json.loads(out.stdout)
            ok = res["prompt_tokens"] == case["tokens"]
            for k, (want, step) in enumerate(zip(case["greedy"], case["steps"])):
                got = res["tokens"][k] if k < len(res["tokens"]) else None
                if got == want:
                    continue
                if step["margin"] >= margin:
                    ok = False
                break
            if ok:
                passed += 1
            else:
                failed += 1
                print(f"FAIL {name} {dev} {case['prompt']!r}: got {res['tokens']} want {case['greedy']}")
print(f"run_golden: {passed} passed, {failed} failed")
sys.exit(1 if failed else 0)
