"""`pocketllm serve` behind a load balancer, issue 17: /health and /slots
states, /metrics in Prometheus text format (parsed with prometheus_client),
the SIGTERM drain, and nginx (deploy/nginx.conf) in front of three replicas.
"""
import concurrent.futures as cf
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import tempfile
import threading
import time

import pytest
import requests

from conftest import Server

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..")
LONG_GEN = {"prompt": "Once upon a time", "max_tokens": 1000, "temperature": 0}  # ~1 s here, ~40 s under ASan


def slots(s):
    r = requests.get(s.url + "/slots", timeout=10)
    assert r.status_code == 200, r.text
    return r.json()


def wait_for(cond, timeout=20):
    deadline = time.time() + timeout
    while time.time() < deadline:
        if cond():
            return True
        time.sleep(0.01)
    return False


def families(s):
    from prometheus_client.parser import text_string_to_metric_families
    r = requests.get(s.url + "/metrics", timeout=10)
    assert r.status_code == 200
    assert r.headers["Content-Type"].startswith("text/plain")
    return {f.name: f for f in text_string_to_metric_families(r.text)}


def value(fams, family, sample=None, **labels):
    for smp in fams[family].samples:
        if smp.name == (sample or family) and all(smp.labels.get(k) == v for k, v in labels.items()):
            return smp.value
    raise AssertionError(f"{sample or family} {labels} missing")


def test_slots_and_health_states(make_server):
    s = make_server("--parallel", "1", "--queue", "0", "--health-queue-full-503")
    j = slots(s)
    assert j["queue_depth"] == 0 and [x["state"] for x in j["slots"]] == ["idle"]
    assert j["slots"][0]["cached_tokens"] == 0
    r = s.post("/v1/completions", {"prompt": "Hello there", "max_tokens": 5, "temperature": 0,
                                   "return_tokens": True})
    n_prompt = r.json()["usage"]["prompt_tokens"]
    n_gen = r.json()["usage"]["completion_tokens"]
    # The slot keeps the prompt and the generated tokens fed back (all but the last).
    assert slots(s)["slots"][0] == {"id": 0, "state": "idle", "cached_tokens": n_prompt + n_gen - 1,
                                    "n_ctx": slots(s)["slots"][0]["n_ctx"]}
    assert requests.get(s.url + "/health", timeout=10).status_code == 200
    # One long request: the only slot is busy and no request may wait, so
    # /health says 503 (queue_full) and balancers send traffic elsewhere.
    t = threading.Thread(target=lambda: s.post("/v1/completions", LONG_GEN))
    t.start()
    try:
        assert wait_for(lambda: slots(s)["slots"][0]["state"] == "busy")
        r = requests.get(s.url + "/health", timeout=10)
        assert r.status_code == 503 and r.json()["error"]["code"] == "queue_full"
    finally:
        t.join()
    assert requests.get(s.url + "/health", timeout=10).status_code == 200


def test_metrics_prometheus_format(make_server):
    s = make_server("--parallel", "2", "--metrics")
    for _ in range(2):
        assert s.post("/v1/completions", {"prompt": "The capital of France is", "max_tokens": 6,
                                          "temperature": 0}).status_code == 200
    assert s.post("/v1/completions", {"prompt": 5}).status_code == 400
    f = families(s)
    # what the Gateway API inference extension's endpoint picker reads
    for name in ("vllm:num_requests_waiting", "vllm:num_requests_running", "vllm:gpu_cache_usage_perc",
                 "vllm:kv_cache_usage_perc", "llamacpp:kv_cache_usage_ratio", "llamacpp:requests_deferred",
                 "pocketllm:num_requests_waiting", "pocketllm:kv_cache_usage_ratio"):
        assert f[name].type == "gauge", name
    assert value(f, "vllm:num_requests_waiting") == 0
    assert 0 <= value(f, "vllm:gpu_cache_usage_perc") <= 1
    assert value(f, "pocketllm:generation_tokens", "pocketllm:generation_tokens_total") == 12
    assert value(f, "pocketllm:prompt_tokens", "pocketllm:prompt_tokens_total") > 0
    # the second identical prompt reused the first one's cache
    assert value(f, "pocketllm:prompt_cache_hits", "pocketllm:prompt_cache_hits_total") == 1
    ttft = f["pocketllm:time_to_first_token_seconds"]
    assert ttft.type == "histogram"
    assert value(f, "pocketllm:time_to_first_token_seconds", "pocketllm:time_to_first_token_seconds_count") == 2
    assert value(f, "pocketllm:inter_token_latency_seconds", "pocketllm:inter_token_latency_seconds_count") == 10
    assert value(f, "pocketllm:errors", "pocketllm:errors_total", status="400") == 1
    # the names that were there before stay
    assert value(f, "pocketllm_requests", "pocketllm_requests_total") == 2
    # KV-cache usage while a long request runs
    t = threading.Thread(target=lambda: s.post("/v1/completions", LONG_GEN))
    t.start()
    try:
        seen = []

        def running():
            f = families(s)
            seen.append((value(f, "vllm:num_requests_running"), value(f, "vllm:kv_cache_usage_perc")))
            return seen[-1][0] == 1 and seen[-1][1] > 0
        assert wait_for(running), seen[-5:]
        assert all(0 <= kv <= 1 for _, kv in seen)
    finally:
        t.join()


def test_sigterm_drains_running_requests(make_server):
    # A drain timeout far above what the two requests take, even in a
    # sanitizer build (make asan), where they run for tens of seconds.
    s = Server("--parallel", "2", "--metrics", "--drain-timeout", "600")
    results = []

    def run():
        r = s.post("/v1/completions", LONG_GEN)
        results.append((r.status_code, r.json()))

    threads = [threading.Thread(target=run) for _ in range(2)]
    for t in threads:
        t.start()
    assert wait_for(lambda: slots(s)["slots_busy"] == 2)
    s.proc.send_signal(signal.SIGTERM)
    assert wait_for(lambda: "SIGTERM: draining" in s.log_text(), 5)
    # New work and the health check are refused while the old work finishes.
    r = requests.get(s.url + "/health", timeout=10)
    assert r.status_code == 503 and r.json()["error"]["code"] == "shutting_down"
    r = s.post("/v1/completions", {"prompt": "hi", "max_tokens": 2})
    assert r.status_code == 503 and r.json()["error"]["code"] == "shutting_down"
    assert s.proc.poll() is None
    for t in threads:
        t.join()
    assert [c for c, _ in results] == [200, 200]
    assert all(j["usage"]["completion_tokens"] == LONG_GEN["max_tokens"] or j["choices"][0]["finish_reason"] == "stop"
               for _, j in results)
    assert s.proc.wait(timeout=30) == 0
    assert "drain: done" in s.log_text()
    os.unlink(s.log.name)


def test_sigterm_drain_timeout(make_server):
    s = Server("--parallel", "1", "--drain-timeout", "1")
    t = threading.Thread(target=lambda: s.post("/v1/completions", {**LONG_GEN, "max_tokens": 4000}))
    t.start()
    assert wait_for(lambda: slots(s)["slots_busy"] == 1)
    t0 = time.time()
    s.proc.send_signal(signal.SIGTERM)
    assert s.proc.wait(timeout=20) == 0
    assert time.time() - t0 < 5
    t.join()
    assert "still running" in s.log_text() or "drain: done" in s.log_text()
    os.unlink(s.log.name)


# ---- nginx in front of three replicas ------------------------------------------------

def free_port():
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def nginx_conf(ports, listen, tmp):
    """deploy/nginx.conf with the test's addresses: the shipped file is what is tested."""
    with open(os.path.join(ROOT, "deploy", "nginx.conf")) as f:
        text = f.read()
    servers = "".join(f"        server 127.0.0.1:{p} max_fails=3 fail_timeout=5s;\n" for p in ports)
    text, n = re.subn(r"(        server 127\.0\.0\.1:\d+ [^\n]*\n)+", servers, text)
    assert n == 1
    text = text.replace("listen 8080;", f"listen 127.0.0.1:{listen};")
    text = text.replace("worker_processes auto;", "worker_processes 1;")
    text = text.replace("http {", "http {\n    access_log off;\n" + "".join(
        f"    {d}_temp_path {tmp}/{d};\n" for d in ("client_body", "proxy", "fastcgi", "uwsgi", "scgi")), 1)
    return text


NGINX = shutil.which("nginx") or ("/usr/sbin/nginx" if os.path.exists("/usr/sbin/nginx") else None)


@pytest.mark.skipif(NGINX is None, reason="nginx is not installed (scripts/setup-deps.sh installs it)")
def test_nginx_three_replicas_drain_and_kill():
    reps = [Server("--parallel", "2", "--max-conns-per-ip", "0", threads=1) for _ in range(3)]
    tmp = tempfile.mkdtemp(prefix="pocketllm-nginx-")
    listen = free_port()
    conf = os.path.join(tmp, "nginx.conf")
    with open(conf, "w") as f:
        f.write(nginx_conf([r.port for r in reps], listen, tmp))
    ng = subprocess.Popen([NGINX, "-p", tmp, "-c", conf, "-g",
                           f"daemon off; pid {tmp}/nginx.pid; error_log {tmp}/error.log;"],
                          stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    url = f"http://127.0.0.1:{listen}"
    try:
        assert wait_for(lambda: _up(url), 10), open(os.path.join(tmp, "error.log")).read()
        prompts = ["The capital of France is", "Hello, my name is", "def fib(n):", "1, 2, 3, 4,"]
        done = []
        lock = threading.Lock()

        def one(i):
            r = requests.post(url + "/v1/completions", json={"prompt": prompts[i % 4], "max_tokens": 24,
                                                             "temperature": 0}, timeout=60)
            with lock:
                done.append(r.status_code)
            return r.status_code, r.text[:300]

        killed = {}
        # One long streamed request straight to replica 0, running when the
        # SIGTERM arrives, so that the drain always has work to finish (the
        # balanced requests are a few ms each: polling /slots for a busy slot
        # and then signalling raced with their end). End-of-text tokens are
        # banned so that it cannot stop early.
        r = requests.post(reps[0].url + "/tokenize", json={"content": "<|im_end|><|endoftext|>"}, timeout=10)
        eos_bias = {str(t): -100 for t in r.json()["tokens"]}
        long = {"started": threading.Event(), "done": False}

        def long_request():
            body = {"prompt": "Once upon a time", "max_tokens": 200, "temperature": 0, "stream": True,
                    "logit_bias": eos_bias, "stream_options": {"include_usage": True}}
            with requests.post(reps[0].url + "/v1/completions", json=body, stream=True, timeout=120) as lr:
                long["status"] = lr.status_code
                for line in lr.iter_lines():
                    if line == b"data: [DONE]":
                        long["done"] = True
                    elif line.startswith(b"data: "):
                        # a chunk may carry several tokens when the reader lags:
                        # the usage chunk counts them
                        j = json.loads(line[6:])
                        if j.get("usage"):
                            long["tokens"] = j["usage"]["completion_tokens"]
                        for c in j.get("choices", []):
                            if c.get("finish_reason"):
                                long["finish"] = c["finish_reason"]
                        long["started"].set()

        def terminator():
            # mid-load: once 60 requests are answered, drain replica 0
            wait_for(lambda: len(done) >= 60, 60)
            lt = threading.Thread(target=long_request)
            lt.start()
            long["started"].wait(30)
            reps[0].proc.send_signal(signal.SIGTERM)
            killed["at"] = len(done)
            lt.join(120)

        th = threading.Thread(target=terminator)
        th.start()
        with cf.ThreadPoolExecutor(8) as ex:
            res = list(ex.map(one, range(200)))
        th.join()
        bad = [r for r in res if r[0] != 200]
        assert not bad, bad[:5]
        assert killed["at"] < 190, "the replica was not stopped mid-load"
        assert reps[0].proc.wait(timeout=30) == 0
        log0 = reps[0].log_text()
        assert "drain: done" in log0 and "still running" not in log0
        m = re.search(r"SIGTERM: draining (\d+) request", log0)
        assert m and int(m.group(1)) > 0, log0[-2000:]
        # the long request was running at the SIGTERM and was finished in full
        assert long.get("status") == 200 and long["done"], long
        assert long.get("finish") == "length" and long.get("tokens") == 200, long
        # every request the drained replica had taken was answered 200
        after = log0.split("SIGTERM: draining", 1)[1]
        assert " -> 500" not in after and "closed early" not in after
        # SIGKILL a second replica: nginx keeps serving from the last one
        reps[1].proc.kill()
        reps[1].proc.wait()
        with cf.ThreadPoolExecutor(8) as ex:
            res = list(ex.map(one, range(40)))
        assert all(c == 200 for c, _ in res), [r for r in res if r[0] != 200][:5]
    finally:
        ng.terminate()
        ng.wait(timeout=10)
        for r in reps:
            if r.proc.poll() is None:
                r.stop()
        shutil.rmtree(tmp, ignore_errors=True)


def _up(url):
    try:
        return requests.get(url + "/health", timeout=2).status_code == 200
    except requests.ConnectionError:
        return False
