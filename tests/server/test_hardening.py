"""Hostile-input regressions of `pocketllm serve`'s request layer (issue 22):
huge prompts, clients that hang up mid-stream, and body error messages."""
import json
import os
import socket
import threading
import time

import requests

from conftest import BIN


def _sanitized():
    with open(BIN, "rb") as f:
        return b"__asan_init" in f.read()


def _status_kib(pid, key):
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith(key + ":"):
                return int(line.split()[1])
    return 0


def _reset_peak(pid):
    """Resets VmHWM (Linux >= 4.0); returns False where that is not allowed."""
    try:
        with open(f"/proc/{pid}/clear_refs", "w") as f:
            f.write("5")
        return True
    except OSError:
        return False


def test_huge_prompts_bounded_memory(make_server):
    """16 concurrent 8 MB prompts (completions and chat) are refused without
    tokenizing them: the server's peak stays within 200 MiB of idle and it
    returns close to idle afterwards. Before the fix each one became ~4M
    tokens first (1.1 GB peak, ~700 MB kept)."""
    s = make_server("--parallel", "4", "--metrics")
    assert s.post("/v1/completions", {"prompt": "warm up", "max_tokens": 2}).status_code == 200
    time.sleep(0.5)
    idle = s.rss_kib()
    have_peak = _reset_peak(s.proc.pid)
    big = "ab " * (8_000_000 // 3)
    results = []
    lock = threading.Lock()

    def send(i):
        if i % 2:
            route, body = "/v1/completions", {"prompt": big, "max_tokens": 4}
        else:
            route, body = "/v1/chat/completions", {"messages": [{"role": "user", "content": big}], "max_tokens": 4}
        r = requests.post(s.url + route, data=json.dumps(body), headers={"Content-Type": "application/json"},
                          timeout=300)
        with lock:
            results.append((r.status_code, r.json()["error"]))

    peak_sampled = [idle]
    done = threading.Event()

    def sample():
        while not done.is_set():
            peak_sampled.append(s.rss_kib())
            time.sleep(0.005)

    sampler = threading.Thread(target=sample)
    sampler.start()
    threads = [threading.Thread(target=send, args=(i,)) for i in range(16)]
    t0 = time.time()
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    dt = time.time() - t0
    done.set()
    sampler.join()
    peak = _status_kib(s.proc.pid, "VmHWM") if have_peak else max(peak_sampled)
    assert len(results) == 16
    for code, err in results:
        assert code == 400 and err["code"] == "context_length_exceeded", (code, err)
    # Back to near idle (freed memory is given back within a second or so).
    deadline = time.time() + 5
    after = s.rss_kib()
    while time.time() < deadline and after - idle > 32 * 1024:
        time.sleep(0.1)
        after = s.rss_kib()
    print(f"\n16 x 8 MB prompts refused in {dt:.2f} s; RSS idle {idle / 1024:.0f} MiB, peak "
          f"{peak / 1024:.0f} MiB (+{(peak - idle) / 1024:.0f}), after {after / 1024:.0f} MiB")
    if not _sanitized():  # ASan's quarantine keeps freed memory by design
        assert peak - idle < 200 * 1024, f"peak {peak} KiB vs idle {idle} KiB"
        assert after - idle < 32 * 1024, f"after {after} KiB vs idle {idle} KiB"
    # Still serving, and a prompt that fits is still accepted.
    assert s.post("/v1/completions", {"prompt": "x", "max_tokens": 2}).status_code == 200


def _raw_post(port, path, body_bytes):
    sock = socket.create_connection(("127.0.0.1", port), timeout=30)
    sock.sendall(b"POST %s HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nConnection: close\r\n"
                 b"Content-Length: %d\r\n\r\n%s" % (path.encode(), len(body_bytes), body_bytes))
    data = b""
    while True:
        chunk = sock.recv(65536)
        if not chunk:
            break
        data += chunk
    sock.close()
    head, _, body = data.partition(b"\r\n\r\n")
    return int(head.split()[1]), json.loads(body)


def test_body_error_messages_are_for_clients(server):
    """jansson's own texts named its flags ("... without JSON_ALLOW_NUL")."""
    cases = [
        (b'{"prompt": "a\\u0000b"}', "NUL"),
        (b'{"prompt\\u0000": "ab"}', "NUL"),
        (b'{"prompt": "a\x00b"}', "control character"),
        (b'{"prompt": "\xff"}', "UTF-8"),
        (b"[" * 5000, "nested too deeply"),
    ]
    for raw, want in cases:
        for path in ("/v1/completions", "/v1/chat/completions", "/tokenize"):
            code, body = _raw_post(server.port, path, raw)
            msg = body["error"]["message"]
            assert code == 400 and body["error"]["code"] == "invalid_json", (path, raw[:40], body)
            assert "JSON_" not in msg and want in msg, (path, raw[:40], msg)


def _drop_after_first_chunk(s):
    """A chat stream; reads the first event (the role chunk, sent even while
    the request waits in the queue) and hangs up. Returns the status."""
    body = {"messages": [{"role": "user", "content": "tell me a story"}], "max_tokens": 64, "stream": True}
    with requests.post(s.url + "/v1/chat/completions", json=body, stream=True, timeout=120) as r:
        if r.status_code != 200:
            return r.status_code
        for line in r.iter_lines():
            if line:
                break
    return 200


def test_hung_up_streams_free_queue_places(make_server):
    """--parallel 1 --queue 3 and never more than 4 clients at once: one that
    sends long prompts (each prefill is one long forward step) and three that
    open streams, hang up after the first chunk and come back 0.3 s later.
    No request may be refused as busy: a hung-up client's queue place must be
    free well before it comes back. Before the fix a cancelled request kept
    its place until the scheduler's next step, after the long prefill (58
    of 132 refused); and a slot freed mid-step did not count as room until
    the step ended (1 in ~125 refused)."""
    s = make_server("--parallel", "1", "--queue", "3", "--ctx", "4096", "--batch", "4096", "--metrics")
    words = " ".join(f"w{i % 97}" for i in range(1400))  # ~3-4k tokens
    stop_at = time.time() + float(os.environ.get("POCKETLLM_DROP_SECONDS", "12"))
    codes = []
    lock = threading.Lock()
    long_steps = []

    def worker():
        while time.time() < stop_at:
            t0 = time.time()
            r = s.post("/v1/completions", {"prompt": words, "max_tokens": 2, "temperature": 0}, timeout=300)
            with lock:
                codes.append(("long", r.status_code))
                long_steps.append(time.time() - t0)

    def dropper():
        while time.time() < stop_at:
            code = _drop_after_first_chunk(s)
            with lock:
                codes.append(("drop", code))
            # The server notices a hang-up by polling the socket every 0.1 s
            # from the connection's thread; under ASan on a loaded 2-core
            # machine that thread can be late by more than 0.3 s (seen once
            # in CI-like runs), which says nothing about the queue.
            time.sleep(1.5 if _sanitized() else 0.3)

    threads = [threading.Thread(target=worker)] + [threading.Thread(target=dropper) for _ in range(3)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=600)
    m = s.metrics()
    busy = [c for c in codes if c[1] == 503]
    print(f"\n{len(codes)} requests ({sum(1 for c in codes if c[0] == 'drop')} hung up), {len(busy)} refused busy; "
          f"long requests took {min(long_steps):.2f}-{max(long_steps):.2f} s; "
          f"rejected_total {m['requests_rejected_total']:.0f}, cancelled_total {m['requests_cancelled_total']:.0f}")
    assert not busy, busy[:5]
    assert all(c[1] == 200 for c in codes), codes
    assert m["requests_rejected_total"] == 0
    deadline = time.time() + 10
    while time.time() < deadline and (m["slots_busy"] or m["queue_depth"]):
        time.sleep(0.05)
        m = s.metrics()
    assert m["slots_busy"] == 0 and m["queue_depth"] == 0, m
