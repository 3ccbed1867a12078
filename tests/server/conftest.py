"""Fixtures for the `pocketllm serve` tests.

The tests start real servers (loopback only, port chosen by the server with
--port 0) on the tiny fixture model. Paths come from the environment, set by
tests/cli/server.sh:
  POCKETLLM_BIN       the pocketllm binary
  POCKETLLM_FIXTURES  tests/fixtures
"""
import json
import os
import re
import signal
import subprocess
import tempfile
import time

import pytest
import requests

BIN = os.environ.get("POCKETLLM_BIN", "build/bin/pocketllm")
FIX = os.environ.get("POCKETLLM_FIXTURES", os.path.join(os.path.dirname(__file__), "..", "fixtures"))
MODEL = os.path.join(FIX, "models", "tiny-qwen3-q4_k_m.gguf")


class Server:
    """One `pocketllm serve` process."""

    def __init__(self, *args, env=None, wait_ready=True, threads=2):
        self.args = [BIN, "serve", "--model", MODEL, "--host", "127.0.0.1", "--port", "0",
                     "--threads", str(threads), *args]
        self.log = tempfile.NamedTemporaryFile(prefix="pocketllm-serve-", suffix=".log", delete=False)
        full_env = dict(os.environ)
        full_env.update(env or {})
        self.proc = subprocess.Popen(self.args, stdout=subprocess.DEVNULL, stderr=self.log, env=full_env)
        self.port = None
        deadline = time.time() + 30
        while time.time() < deadline and self.port is None:
            m = re.search(r"listening on http://[^:]+:(\d+)", self.log_text())
            if m:
                self.port = int(m.group(1))
                break
            if self.proc.poll() is not None:
                raise RuntimeError("server exited early:\n" + self.log_text())
            time.sleep(0.02)
        if self.port is None:
            self.stop()
            raise RuntimeError("server did not start listening:\n" + self.log_text())
        self.url = f"http://127.0.0.1:{self.port}"
        if wait_ready:
            self.wait_ready()

    def wait_ready(self, timeout=60):
        deadline = time.time() + timeout
        while time.time() < deadline:
            try:
                if requests.get(self.url + "/health", timeout=5).status_code == 200:
                    return
            except requests.ConnectionError:
                pass
            if self.proc.poll() is not None:
                raise RuntimeError("server exited:\n" + self.log_text())
            time.sleep(0.05)
        raise RuntimeError("server not ready:\n" + self.log_text())

    def log_text(self):
        with open(self.log.name, "r", errors="replace") as f:
            return f.read()

    def rss_kib(self):
        with open(f"/proc/{self.proc.pid}/status") as f:
            for line in f:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1])
        return 0

    def metrics(self, headers=None):
        text = requests.get(self.url + "/metrics", timeout=10, headers=headers).text
        out = {}
        for line in text.splitlines():
            if line and not line.startswith("#"):
                k, v = line.split()
                out[k.replace("pocketllm_", "")] = float(v)
        return out

    def post(self, path, body, **kw):
        kw.setdefault("timeout", 120)
        return requests.post(self.url + path, json=body, **kw)

    def stop(self):
        """SIGTERM; the server must exit cleanly (status 0) within 30 s."""
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
                raise AssertionError("server did not exit on SIGTERM:\n" + self.log_text()[-4000:])
        rc = self.proc.returncode
        self.log.close()
        return rc


@pytest.fixture(scope="session")
def server():
    s = Server("--parallel", "4", "--metrics")
    yield s
    rc = s.stop()
    assert rc == 0, "server exited with %d:\n%s" % (rc, s.log_text()[-4000:])
    os.unlink(s.log.name)


@pytest.fixture
def make_server():
    """Starts extra servers with other options; stops them after the test."""
    started = []

    def make(*args, **kw):
        s = Server(*args, **kw)
        started.append(s)
        return s

    yield make
    for s in started:
        rc = s.stop()
        assert rc == 0, "server exited with %d:\n%s" % (rc, s.log_text()[-4000:])
        os.unlink(s.log.name)


def run_cli(prompt, max_tokens=24, model=MODEL):
    """`pocketllm run --json`: the reference for greedy output."""
    out = subprocess.run([BIN, "run", "--model", model, "--prompt", prompt, "--max-tokens", str(max_tokens),
                          "--threads", "2", "--json"], capture_output=True, text=True, timeout=120, check=True)
    return json.loads(out.stdout)


def sse_events(resp):
    """Parses a Server-Sent Events body: the list of `data:` payloads."""
    events = []
    for raw in resp.iter_lines():
        if not raw:
            continue
        line = raw.decode("utf-8")
        assert line.startswith("data: "), line
        events.append(line[6:])
    return events
