"""tests/probe/probe.py --smoke, its fast classes (corrupt GGUF files,
tokenizer fuzz, malformed HTTP, disconnects): no crash, no hang. The soak
and slow-client classes are covered by test_load.py and
test_slow_clients.py."""
import os
import subprocess
import sys

from conftest import BIN, MODEL

PROBE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "probe", "probe.py")


def test_probe_smoke():
    p = subprocess.run([sys.executable, PROBE, "--bin", BIN, "--model", MODEL, "--smoke",
                        "--only", "gguf,tokenizer,http,disconnect"], capture_output=True, text=True, timeout=300)
    print("\n" + p.stdout)
    assert p.returncode == 0, p.stdout + p.stderr[-2000:]
