"""`pocketllm serve --cache-ram N` (issue 17): evicted prompt prefixes are kept
in host memory and restored by copy.

Every case compares greedy token ids with the same request run with
`cache_prompt: false` (which prefills everything), and checks the reported
cached tokens and the /metrics counters against prefixes computed here from
/tokenize. A server without --cache-ram runs the same sequence as a control:
it must reuse nothing, or the checks could not tell a restore from luck.
"""
import re
import subprocess

import pytest
import requests

from conftest import BIN, MODEL

A = ("The history of the bicycle begins in the early nineteenth century, when inventors in Europe "
     "built two-wheeled machines pushed along by the rider's feet. Pedals came later, then chains, "
     "pneumatic tyres and gears, and by the end of the century riding had become a popular pastime. ")
B = ("Bread is one of the oldest prepared foods: flour and water, a little salt and yeast, kneaded, "
     "left to rise and baked. Every region has its own loaves, from flat breads cooked on stones "
     "to tall crusty ones baked in wood-fired ovens. ")


def tokenize(s, text):
    return s.post("/tokenize", {"content": text}).json()["tokens"]


def complete(s, prompt, cache=True, max_tokens=12):
    r = s.post("/v1/completions", {"prompt": prompt, "max_tokens": max_tokens, "temperature": 0,
                                   "return_tokens": True, "cache_prompt": cache})
    assert r.status_code == 200, r.text
    j = r.json()
    return j["choices"][0]["tokens"], j["usage"]["prompt_tokens_details"]["cached_tokens"]


def metric(s, name):
    from prometheus_client.parser import text_string_to_metric_families
    for fam in text_string_to_metric_families(requests.get(s.url + "/metrics", timeout=10).text):
        for smp in fam.samples:
            if smp.name == name:
                return smp.value
    raise AssertionError(name + " missing")


def lcp(a, b):
    n = 0
    while n < len(a) and n < len(b) and a[n] == b[n]:
        n += 1
    return n


def test_evicted_prefix_is_restored_identically(make_server):
    s = make_server("--parallel", "1", "--cache-ram", "16", "--metrics")
    ref = make_server("--parallel", "1", "--no-prompt-cache")   # prefills everything, every time
    assert "cache-ram: up to 16 MiB" in s.log_text()
    pa, pb = A * 3, B * 3
    pc = A * 2 + "Meanwhile, in the cities, trams and omnibuses"
    na = len(tokenize(s, pa))
    ref_a, ref_c = complete(ref, pa)[0], complete(ref, pc)[0]
    # A in the slot, then B takes the slot: A's rows go to host memory.
    complete(s, pa)
    complete(s, pb)
    assert metric(s, "pocketllm:prompt_cache_ram_saved_total") == 1
    got, cached = complete(s, pa)
    assert got == ref_a
    assert cached == na - 1
    assert metric(s, "pocketllm:prompt_cache_ram_hits_total") == 1
    assert metric(s, "pocketllm:prompt_cache_ram_tokens_total") == na - 1
    # B comes back (restored; A goes out again), then a prompt sharing only
    # part of A: that part is restored.
    _, cached = complete(s, pb)
    assert cached == len(tokenize(s, pb)) - 1
    got, cached = complete(s, pc)
    assert got == ref_c
    assert cached == lcp(tokenize(s, pa), tokenize(s, pc)) > 0
    assert metric(s, "pocketllm:prompt_cache_ram_hits_total") == 3
    slots = requests.get(s.url + "/slots", timeout=10).json()
    assert slots["cache_ram"]["capacity_bytes"] == 16 << 20
    assert 0 < slots["cache_ram"]["bytes"] <= 16 << 20
    assert metric(s, "pocketllm:prompt_cache_ram_bytes") == slots["cache_ram"]["bytes"]


def test_without_cache_ram_nothing_is_restored(make_server):
    # The control for the test above: the same sequence reuses nothing.
    s = make_server("--parallel", "1", "--metrics")
    complete(s, A * 3)
    complete(s, B * 3)
    _, cached = complete(s, A * 3)
    assert cached == 0
    assert metric(s, "pocketllm:prompt_cache_ram_hits_total") == 0
    assert "cache_ram" not in requests.get(s.url + "/slots", timeout=10).json()


def test_least_recently_used_prefix_goes_first(make_server):
    s = make_server("--parallel", "1", "--cache-ram", "1", "--metrics")
    ref = make_server("--parallel", "1", "--no-prompt-cache")
    m = re.search(r"cache-ram: up to 1 MiB .*\((\d+) bytes per token: (\d+) tokens\)", s.log_text())
    assert m, s.log_text()
    cap_tok = int(m.group(2))
    n_ctx = requests.get(s.url + "/slots", timeout=10).json()["slots"][0]["n_ctx"]
    # Four prompts of ~40% of the store each: the third save evicts the first.
    prompts = []
    for i in range(4):
        p = f"Story number {i}. "
        while len(tokenize(s, p)) < cap_tok * 0.4:
            p += A if i % 2 else B
        prompts.append(p)
    assert len(tokenize(s, prompts[0])) + 16 < n_ctx, "the fixture's store holds more than a context"
    refs = [complete(ref, p)[0] for p in prompts]
    for p in prompts:                          # 0, 1, 2 leave the slot in turn and are kept
        complete(s, p)
    assert metric(s, "pocketllm:prompt_cache_ram_saved_total") == 3
    assert metric(s, "pocketllm:prompt_cache_ram_evictions_total") == 1
    assert metric(s, "pocketllm:prompt_cache_ram_entries") == 2
    assert metric(s, "pocketllm:prompt_cache_ram_bytes") <= 1 << 20
    got, cached = complete(s, prompts[2])       # kept: restored
    assert got == refs[2]
    assert cached == len(tokenize(s, prompts[2])) - 1
    got, cached = complete(s, prompts[0])       # the oldest: dropped (shares only "Story number ")
    assert got == refs[0]
    assert cached < 8


def test_client_vanishing_during_restore_frees_the_slot(make_server):
    import socket
    import time
    s = make_server("--parallel", "1", "--cache-ram", "16", "--metrics")
    ref = make_server("--parallel", "1", "--no-prompt-cache")
    pa, pb = A * 3, B * 3
    complete(s, pa)
    complete(s, pb)                            # A kept in host memory
    # A streamed request for A (restored at admission), and the client hangs
    # up at once.
    body = ('{"prompt": %s, "max_tokens": 200, "stream": true, "temperature": 0}' % __import__("json").dumps(pa))
    c = socket.create_connection(("127.0.0.1", s.port))
    c.sendall(("POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
               "Content-Length: %d\r\n\r\n%s" % (len(body.encode()), body)).encode())
    got = b""
    while b"data:" not in got:                 # a token came: admitted, restored (headers may come first)
        chunk = c.recv(4096)
        assert chunk, got
        got += chunk
    c.close()
    deadline = time.time() + 30
    while time.time() < deadline:
        if all(x["state"] == "idle" for x in requests.get(s.url + "/slots", timeout=10).json()["slots"]):
            break
        time.sleep(0.05)
    assert all(x["state"] == "idle" for x in requests.get(s.url + "/slots", timeout=10).json()["slots"])
    assert metric(s, "pocketllm:prompt_cache_ram_hits_total") == 1
    # The slot works, and what it keeps is still right.
    got, _ = complete(s, pa)
    assert got == complete(ref, pa)[0]


@pytest.mark.parametrize("args,msg", [
    (["--cache-ram", "-1"], "bad --cache-ram"),
    (["--cache-ram", "lots"], "bad --cache-ram"),
    (["--cache-ram", "8", "--no-prompt-cache"], "needs the prompt cache"),
    (["--cache-ram", "16000000"], "of memory available"),
])
def test_bad_cache_ram(args, msg):
    p = subprocess.run([BIN, "serve", "--model", MODEL, "--port", "0", *args], capture_output=True, text=True,
                       timeout=60)
    assert p.returncode != 0
    assert msg in p.stderr, p.stderr
