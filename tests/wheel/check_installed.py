"""Checks an installed pocketllm wheel (run by check-wheel.sh with the
Python of a fresh venv whose PATH holds no compiler, cmake or pkg-config):
the CLI and the Python API from the installed package reproduce llama.cpp's
golden tokens, `pocketllm serve` answers a chat request, and `--device cuda`
without a GPU fails in one line.

    python check_installed.py FIXTURES_DIR

Golden comparison (tests/fixtures/PROVENANCE.md, as python/tests/
test_golden.py): the token must match at every step whose golden margin is
at least the file's M; a divergence below M ends the case."""
import json
import os
import re
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

FIX = Path(sys.argv[1]).resolve()
NAME = "tiny-qwen3-q4_k_m"
MODEL = str(FIX / "models" / f"{NAME}.gguf")
MARGIN = 1.0  # quantized files
GOLDEN = json.loads((FIX / "golden" / f"{NAME}.json").read_text())
failures = []


def check(ok, what):
    print(("ok   " if ok else "FAIL ") + what, flush=True)
    if not ok:
        failures.append(what)


def compare(case, got):
    """None when `got` agrees with the golden case by the rule, else a message."""
    for k, (want, step) in enumerate(zip(case["greedy"], case["steps"])):
        g = got[k] if k < len(got) else None
        if g == want:
            continue
        if step["margin"] >= MARGIN:
            return f"step {k}: got {g}, want {want} (golden margin {step['margin']:.3f})"
        return None
    return None


def cli(*args, **kw):
    return subprocess.run(["pocketllm", *args], capture_output=True, text=True, timeout=300, **kw)


# ---- where things come from -------------------------------------------------
import pocketllm  # noqa: E402
from pocketllm import native  # noqa: E402

site = Path(pocketllm.__file__).resolve().parent
check(native.library_path().parent == site, f"the library is the installed copy ({native.library_path()})")
check(native.find_cli().parent == site / "bin", f"the CLI is the installed copy ({native.find_cli()})")

# ---- pocketllm devices --------------------------------------------------------
r = cli("devices")
check(r.returncode == 0 and re.search(r"^cpu\s+yes\s+yes", r.stdout, re.M) is not None,
      f"pocketllm devices lists cpu as available (exit {r.returncode})")

# ---- pocketllm run on the tiny fixture, golden tokens -----------------------------
for case in GOLDEN["cases"][:2]:
    r = cli("run", "--model", MODEL, "--prompt", case["prompt"], "--max-tokens", str(len(case["greedy"])),
            "--ctx", "512", "--json")
    if r.returncode != 0:
        check(False, f"pocketllm run {case['prompt']!r}: exit {r.returncode}: {r.stderr.strip()}")
        continue
    res = json.loads(r.stdout)
    msg = compare(case, res["tokens"])
    check(res["prompt_tokens"] == case["tokens"] and msg is None,
          f"pocketllm run {case['prompt']!r} matches the golden tokens{': ' + msg if msg else ''}")

# The same wheel on a CPU without AVX2: PL_CPU_FEATURES=none makes the runtime
# dispatch (src/core/cpu_features.c) take the portable kernels.
case = GOLDEN["cases"][0]
r = cli("devices", env={**os.environ, "PL_CPU_FEATURES": "none"})
check(re.search(r"^cpu\s+yes\s+yes\s+cpu: none\b", r.stdout, re.M) is not None,
      "PL_CPU_FEATURES=none: pocketllm devices shows the cpu backend without SIMD features")
r = cli("run", "--model", MODEL, "--prompt", case["prompt"], "--max-tokens", str(len(case["greedy"])),
        "--ctx", "512", "--json", env={**os.environ, "PL_CPU_FEATURES": "none"})
msg = compare(case, json.loads(r.stdout)["tokens"]) if r.returncode == 0 else f"exit {r.returncode}: {r.stderr}"
check(msg is None, f"pocketllm run on the portable (non-AVX2) kernels matches the golden tokens{': ' + msg if msg else ''}")

# ---- the Python API, golden tokens -------------------------------------------------
with pocketllm.Model(MODEL, ctx=512) as m:
    for case in GOLDEN["cases"][:2]:
        c = m.generate(case["prompt"], max_tokens=len(case["greedy"]), temperature=0, ignore_eos=True)
        msg = compare(case, c.tokens)
        check(c.usage.prompt_tokens == len(case["tokens"]) and msg is None,
              f"Model.generate {case['prompt']!r} matches the golden tokens{': ' + msg if msg else ''}")

# ---- --device cuda without a GPU: one line ------------------------------------------
if not os.path.exists("/dev/nvidia0"):
    r = cli("run", "--model", MODEL, "--prompt", "hi", "--max-tokens", "2", "--device", "cuda")
    lines = r.stderr.strip().splitlines()
    check(r.returncode != 0 and len(lines) == 1 and "cuda" in lines[0],
          f"--device cuda without a GPU fails in one line (exit {r.returncode}: {r.stderr.strip()!r})")

# ---- pocketllm serve answers one chat request ----------------------------------------
log = tempfile.NamedTemporaryFile(prefix="pocketllm-wheel-serve-", suffix=".log", delete=False)
srv = subprocess.Popen(["pocketllm", "serve", "--model", MODEL, "--host", "127.0.0.1", "--port", "0",
                        "--threads", "2"], stdout=subprocess.DEVNULL, stderr=log)
try:
    port, deadline = None, time.time() + 60
    while port is None and time.time() < deadline and srv.poll() is None:
        m = re.search(r"listening on http://[^:]+:(\d+)", Path(log.name).read_text(errors="replace"))
        port = int(m.group(1)) if m else None
        time.sleep(0.05)
    body = None
    if port is not None:
        url = f"http://127.0.0.1:{port}"
        while time.time() < deadline:  # /health turns 200 once the model is loaded
            try:
                if urllib.request.urlopen(url + "/health", timeout=5).status == 200:
                    break
            except OSError:
                time.sleep(0.05)
        req = urllib.request.Request(
            url + "/v1/chat/completions", headers={"Content-Type": "application/json"},
            data=json.dumps({"model": NAME, "messages": [{"role": "user", "content": "Hello!"}],
                             "max_tokens": 8, "temperature": 0}).encode())
        with urllib.request.urlopen(req, timeout=120) as resp:
            body = json.loads(resp.read())
    choice = (body or {}).get("choices", [{}])[0]
    check(body is not None and choice.get("message", {}).get("role") == "assistant"
          and isinstance(choice["message"].get("content"), str) and body["usage"]["completion_tokens"] > 0,
          f"pocketllm serve answers a chat request ({json.dumps(body)[:200] if body else Path(log.name).read_text()[-500:]})")
finally:
    srv.terminate()
    try:
        srv.wait(timeout=30)
    except subprocess.TimeoutExpired:
        srv.kill()
    os.unlink(log.name)

print(f"check_installed: {len(failures)} failed")
sys.exit(1 if failures else 0)
