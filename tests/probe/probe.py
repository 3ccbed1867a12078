#!/usr/bin/env python3
"""Robustness probe for pocketllm (issue 22): reruns the classes of the
original probe and prints, per class, attempts, crashes (a process killed by
a signal, or a sanitizer report), hangs (no answer or exit within the time
allowed) and 5xx answers.

    tests/probe/probe.py --bin build/bin/pocketllm \\
        --model tests/fixtures/models/tiny-qwen3-q4_k_m.gguf [--smoke] [--seed N] [--only gguf,http]

Classes:
  gguf        the model file mutated (truncations, bit flips, huge counts and
              lengths in the header, metadata and tensor infos) x the commands
              that load it (tokenize, run)
  tokenizer   random and adversarial text through `tokenize` and the server's
              /tokenize and /detokenize
  http        malformed HTTP over raw sockets: the framing, request-line,
              header, URL, body and API-key cases of issue 22 plus random
              mutations of valid requests
  disconnect  streams and pending requests dropped mid-way; slots must drain
  soak        16 clients, mixed requests, for a while
  slow        trickling sockets (headers and bodies) while a normal client
              is timed

A tool, not a test: it exits 1 when any class saw a crash or a hang, so it
can gate a run, but what counts as acceptable 5xx (503 under load) is read
from its table. --smoke runs every class small (tests/server/test_probe_smoke.py
runs it in CI)."""
import argparse
import json
import os
import random
import re
import select
import signal
import socket
import struct
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request

SAN_MARKERS = (b"AddressSanitizer", b"UndefinedBehaviorSanitizer", b"runtime error:", b"LeakSanitizer")


class Tally:
    def __init__(self, name):
        self.name = name
        self.attempts = self.crashes = self.hangs = self.err5xx = 0
        self.notes = []

    def note(self, msg):
        if len(self.notes) < 8:
            self.notes.append(msg)


# ---- processes ------------------------------------------------------------------

def run_cmd(tally, argv, timeout, what):
    tally.attempts += 1
    try:
        p = subprocess.run(argv, capture_output=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        tally.hangs += 1
        tally.note(f"hang: {what}")
        return None
    if p.returncode < 0 or any(m in p.stderr for m in SAN_MARKERS):
        tally.crashes += 1
        sig = -p.returncode if p.returncode < 0 else 0
        tally.note(f"crash (signal {sig}): {what}: {p.stderr[-300:]!r}")
    return p


class Server:
    def __init__(self, binary, model, *extra):
        self.log = tempfile.NamedTemporaryFile(prefix="pocketllm-probe-", suffix=".log", delete=False)
        self.proc = subprocess.Popen([binary, "serve", "--model", model, "--host", "127.0.0.1", "--port", "0",
                                      "--threads", "2", "--metrics", *extra],
                                     stdout=subprocess.DEVNULL, stderr=self.log)
        self.port = None
        deadline = time.time() + 30
        while time.time() < deadline and self.port is None:
            m = re.search(r"listening on http://[^:]+:(\d+)", open(self.log.name, errors="replace").read())
            if m:
                self.port = int(m.group(1))
            elif self.proc.poll() is not None:
                raise RuntimeError("server exited early:\n" + open(self.log.name, errors="replace").read())
            else:
                time.sleep(0.02)
        while time.time() < deadline:
            try:
                if self.get("/health")[0] == 200:
                    return
            except OSError:
                pass
            time.sleep(0.05)
        raise RuntimeError("server not ready")

    def alive(self):
        return self.proc.poll() is None

    def request(self, method, path, body=None, timeout=30, headers=None):
        data = json.dumps(body).encode() if body is not None else None
        req = urllib.request.Request(f"http://127.0.0.1:{self.port}{path}", data=data, method=method,
                                     headers={"Content-Type": "application/json", **(headers or {})})
        try:
            with urllib.request.urlopen(req, timeout=timeout) as r:
                return r.status, r.read()
        except urllib.error.HTTPError as e:
            return e.code, e.read()

    def get(self, path, timeout=10):
        return self.request("GET", path, timeout=timeout)

    def post(self, path, body, timeout=60):
        return self.request("POST", path, body, timeout=timeout)

    def metrics(self):
        out = {}
        for line in self.get("/metrics")[1].decode().splitlines():
            if line and not line.startswith("#"):
                k, v = line.split()
                out[k.replace("pocketllm_", "")] = float(v)
        return out

    def stop(self):
        if self.alive():
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
                return "hang on SIGTERM"
        rc = self.proc.returncode
        log = open(self.log.name, "rb").read()
        self.log.close()
        os.unlink(self.log.name)
        if rc < 0 or any(m in log for m in SAN_MARKERS):
            return f"exit {rc}: {log[-400:]!r}"
        return None


def check_server(tally, srv):
    """A server that died counts as a crash; the caller restarts it."""
    if srv.alive():
        return True
    tally.crashes += 1
    tally.note(f"server died: exit {srv.proc.returncode}: {open(srv.log.name, 'rb').read()[-400:]!r}")
    return False


# ---- gguf -----------------------------------------------------------------------

GGUF_SCALAR = {0: 1, 1: 1, 2: 2, 3: 2, 4: 4, 5: 4, 6: 4, 7: 1, 10: 8, 11: 8, 12: 8}
GGUF_STRING, GGUF_ARRAY = 8, 9


def gguf_fields(data):
    """Offsets of every count and length field of a GGUF file's header,
    metadata and tensor infos: [(offset, size, what)]."""
    fields = [(8, 8, "n_tensors"), (16, 8, "n_kv")]
    n_tensors, n_kv = struct.unpack_from("<QQ", data, 8)
    off = 24

    def string(off, what):
        fields.append((off, 8, what))
        n = struct.unpack_from("<Q", data, off)[0]
        return off + 8 + n

    def value(off, t, what):
        if t in GGUF_SCALAR:
            return off + GGUF_SCALAR[t]
        if t == GGUF_STRING:
            return string(off, what + " string length")
        if t == GGUF_ARRAY:
            fields.append((off, 4, what + " array type"))
            at = struct.unpack_from("<I", data, off)[0]
            fields.append((off + 4, 8, what + " array count"))
            n = struct.unpack_from("<Q", data, off + 4)[0]
            off += 12
            if at in GGUF_SCALAR:
                return off + n * GGUF_SCALAR[at]
            for i in range(n):
                off = value(off, at, f"{what}[{i}]")
            return off
        raise ValueError(f"type {t}")

    for k in range(n_kv):
        klen = struct.unpack_from("<Q", data, off)[0]
        key = data[off + 8:off + 8 + klen].decode(errors="replace")
        off = string(off, f"key {k} length")
        fields.append((off, 4, f"{key} type"))
        t = struct.unpack_from("<I", data, off)[0]
        off = value(off + 4, t, key)
    for i in range(n_tensors):
        off = string(off, f"tensor {i} name length")
        fields.append((off, 4, f"tensor {i} n_dims"))
        nd = struct.unpack_from("<I", data, off)[0]
        off += 4
        for d in range(nd):
            fields.append((off, 8, f"tensor {i} dim {d}"))
            off += 8
        fields.append((off, 4, f"tensor {i} type"))
        fields.append((off + 4, 8, f"tensor {i} offset"))
        off += 12
    return fields, off


def gguf_mutants(data, rnd, n):
    fields, meta_end = gguf_fields(data)
    out = []
    # Truncations: inside the header, the metadata, the tensor infos, the data.
    for cut in [0, 3, 4, 8, 12, 20, 24, 30, meta_end // 4, meta_end // 2, meta_end - 1, meta_end,
                meta_end + 1, len(data) // 2, len(data) - 1]:
        out.append((f"truncated at {cut}", data[:cut]))
    # Huge and odd values in every kind of count/length field.
    huge = [(1 << 64) - 1, 1 << 63, (1 << 32) + 1, 1 << 31, len(data), 0]
    # Half on the structural fields (counts, key and name lengths, types,
    # tensor dims and offsets), half on array elements (vocabulary strings).
    elems = [f for f in fields if "[" in f[2]]
    struct_f = [f for f in fields if "[" not in f[2]]
    picks = rnd.sample(struct_f, min(len(struct_f), n - n // 2)) + rnd.sample(elems, min(len(elems), n // 2))
    for off, size, what in picks:
        v = rnd.choice(huge)
        b = bytearray(data)
        b[off:off + size] = (v & ((1 << (8 * size)) - 1)).to_bytes(size, "little")
        out.append((f"{what} = {v}", bytes(b)))
    # Bit flips: in the metadata region mostly, some anywhere.
    for i in range(n):
        b = bytearray(data)
        for _ in range(rnd.randint(1, 4)):
            pos = rnd.randrange(meta_end if i % 4 else len(b))
            b[pos] ^= 1 << rnd.randrange(8)
        out.append((f"bit flips #{i}", bytes(b)))
    return out


def probe_gguf(args, rnd):
    t = Tally("gguf")
    data = open(args.model, "rb").read()
    n = 6 if args.smoke else 60
    with tempfile.TemporaryDirectory(prefix="pocketllm-probe-") as d:
        path = os.path.join(d, "m.gguf")
        for what, blob in gguf_mutants(data, rnd, n):
            with open(path, "wb") as f:
                f.write(blob)
            run_cmd(t, [args.bin, "tokenize", "--model", path, "--prompt", "hello world"], 20, f"tokenize [{what}]")
            run_cmd(t, [args.bin, "run", "--model", path, "--prompt", "hi", "--max-tokens", "2", "--threads", "1"],
                    30, f"run [{what}]")
    return t


# ---- tokenizer ----------------------------------------------------------------------

SPECIALS = ["<|im_start|>", "<|im_end|>", "<|endoftext|>", "<think>", "</think>", "<|im_start", "|>", "<|"]


def fuzz_text(rnd):
    kind = rnd.randrange(6)
    if kind == 0:
        # Any code point, lone surrogates included (sent as U+FFFD).
        return "".join(chr(rnd.randint(1, 0x10FFFF)) for _ in range(rnd.randint(1, 64))).encode(
            "utf-8", "surrogatepass").decode("utf-8", "replace")
    if kind == 1:
        return "".join(rnd.choice(SPECIALS + ["a", " ", "\n", "é", "🙂"]) for _ in range(rnd.randint(1, 40)))
    if kind == 2:
        return rnd.choice(["a", " ", "\n", "ab", "🙂", "\t"]) * rnd.randint(1, 20000)
    if kind == 3:
        return bytes(rnd.randrange(1, 256) for _ in range(rnd.randint(1, 200))).decode("latin-1")
    if kind == 4:
        return "".join(chr(rnd.choice([0x300, 0x301, 0x200d, 0xfe0f, 0x1f3fb, 0x202e, 0xfeff]))
                       for _ in range(rnd.randint(1, 100)))
    return " ".join("".join(chr(rnd.randint(0x20, 0x7e)) for _ in range(rnd.randint(1, 12)))
                    for _ in range(rnd.randint(1, 50)))


def probe_tokenizer(args, rnd):
    t = Tally("tokenizer")
    n_cli, n_srv = (5, 40) if args.smoke else (60, 600)
    for _ in range(n_cli):
        text = fuzz_text(rnd).replace("\0", "")
        run_cmd(t, [args.bin, "tokenize", "--model", args.model, "--prompt", text], 20, f"tokenize {text[:40]!r}")
    srv = Server(args.bin, args.model)
    try:
        for i in range(n_srv):
            t.attempts += 1
            try:
                if i % 3 == 2:
                    ids = [rnd.choice([0, 1, rnd.randrange(9000), -1, 1 << 40, 2 ** 31 - 1]) for _ in
                           range(rnd.randint(0, 30))]
                    st, _ = srv.post("/detokenize", {"tokens": ids}, timeout=20)
                else:
                    st, _ = srv.post("/tokenize", {"content": fuzz_text(rnd), "parse_special": rnd.random() < 0.5},
                                     timeout=20)
                if st >= 500:
                    t.err5xx += 1
                    t.note(f"{st} on request {i}")
            except socket.timeout:
                t.hangs += 1
            except OSError as e:
                t.note(f"request {i}: {e!r}")
            if not check_server(t, srv):
                srv = Server(args.bin, args.model)
    finally:
        err = srv.stop()
        if err:
            t.crashes += 1
            t.note(err)
    return t


# ---- http -----------------------------------------------------------------------

def raw_exchange(port, data, timeout):
    """(status or None, answered-or-closed within timeout)."""
    s = socket.create_connection(("127.0.0.1", port), timeout=timeout)
    out = b""
    done = False
    try:
        try:
            s.sendall(data)
        except OSError:
            return None, True
        deadline = time.time() + timeout
        while time.time() < deadline:
            s.settimeout(max(0.01, deadline - time.time()))
            try:
                b = s.recv(65536)
            except socket.timeout:
                break
            except OSError:
                done = True
                break
            if not b:
                done = True
                break
            out += b
            if re.match(rb"HTTP/1\.[01] \d{3}", out) and b"\r\n\r\n" in out:
                done = True  # answered; keep-alive connections may stay open
                break
    finally:
        s.close()
    m = re.match(rb"HTTP/1\.[01] (\d{3})", out)
    return (int(m.group(1)) if m else None), done


def http_cases():
    body = b'{"prompt": "hi", "max_tokens": 2}'
    cl = b"Content-Length: %d\r\n" % len(body)
    post = b"POST /v1/completions HTTP/1.1\r\nHost: x\r\n"
    return [
        ("cl+cl conflict", post + cl + b"Content-Length: 3\r\n\r\n" + body),
        ("te+cl", post + b"Transfer-Encoding: chunked\r\n" + cl + b"\r\n21\r\n" + body + b"\r\n0\r\n\r\n"),
        ("te gzip", post + b"Transfer-Encoding: gzip\r\n\r\n" + body),
        ("te x2", post + b"Transfer-Encoding: chunked\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n"),
        ("cl not a number", post + b"Content-Length: 12abc\r\n\r\n" + body),
        ("cl negative", post + b"Content-Length: -1\r\n\r\n" + body),
        ("cl 2^63-1", post + b"Content-Length: 9223372036854775807\r\n\r\n{"),
        ("cl 2^64", post + b"Content-Length: 18446744073709551616\r\n\r\n{"),
        ("chunk size huge", post + b"Transfer-Encoding: chunked\r\n\r\nffffffffffffffff\r\n{"),
        ("chunk size junk", post + b"Transfer-Encoding: chunked\r\n\r\nzz\r\n{}\r\n0\r\n\r\n"),
        ("obs-fold", b"GET /health HTTP/1.1\r\nHost: x\r\n folded\r\n\r\n"),
        ("obs-fold after header", b"GET /health HTTP/1.1\r\nHost: x\r\nX-A: 1\r\n  more\r\n\r\n"),
        ("bare LF", b"GET /health HTTP/1.1\nHost: x\n\n"),
        ("bare CR", b"GET /health HTTP/1.1\rHost: x\r\r"),
        ("garbage line", b"GARBAGE\r\n\r\n"),
        ("garbage no newline", b"\x16\x03\x01\x00\xa5\x01\x00\x00\xa1\x03\x03" + bytes(range(64))),
        ("empty line only", b"\r\n\r\n"),
        ("method only", b"GET\r\n\r\n"),
        ("http/9.9", b"GET / HTTP/9.9\r\n\r\n"),
        ("http/0.9", b"GET /\r\n\r\n"),
        ("no host 1.1", b"GET /health HTTP/1.1\r\n\r\n"),
        ("space in url", b"GET /he alth HTTP/1.1\r\nHost: x\r\n\r\n"),
        ("url %0a %1b", b"GET /x%0aFORGED%1b[31m HTTP/1.1\r\nHost: x\r\n\r\n"),
        ("url %00", b"GET /health%00x HTTP/1.1\r\nHost: x\r\n\r\n"),
        ("url 64 KiB", b"GET /" + b"a" * 65536 + b" HTTP/1.1\r\nHost: x\r\n\r\n"),
        ("header 64 KiB", b"GET /health HTTP/1.1\r\nHost: x\r\nX-Big: " + b"a" * 65536 + b"\r\n\r\n"),
        ("10000 headers", b"GET /health HTTP/1.1\r\nHost: x\r\n" + b"X-A: 1\r\n" * 10000 + b"\r\n"),
        ("header no colon", b"GET /health HTTP/1.1\r\nHost: x\r\nNoColon\r\n\r\n"),
        ("header space before colon", b"GET /health HTTP/1.1\r\nHost: x\r\nX-A : 1\r\n\r\n"),
        ("nul in header", b"GET /v1/models HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer K\x00junk\r\n\r\n"),
        ("expect 100", post + cl + b"Expect: 100-continue\r\n\r\n" + body),
        ("expect junk", post + cl + b"Expect: 999-nonsense\r\n\r\n" + body),
        ("json truncated", post + b"Content-Length: 10\r\n\r\n{\"prompt\":"),
        ("json bomb depth", post + b"Content-Length: 20000\r\n\r\n" + b"[" * 20000),
        ("pipelined x3", (b"GET /health HTTP/1.1\r\nHost: x\r\n\r\n") * 3),
        ("smuggle after body", post + cl + b"\r\n" + body + b"GET /health HTTP/1.1\r\nHost: x\r\n\r\n"),
        ("absolute uri", b"GET http://x/health HTTP/1.1\r\nHost: x\r\n\r\n"),
        ("asterisk", b"OPTIONS * HTTP/1.1\r\nHost: x\r\n\r\n"),
        ("unknown method", b"BREW /health HTTP/1.1\r\nHost: x\r\n\r\n"),
        ("lowercase method", b"get /health HTTP/1.1\r\nHost: x\r\n\r\n"),
    ]


def mutate(rnd, data):
    b = bytearray(data)
    for _ in range(rnd.randint(1, 6)):
        op = rnd.randrange(4)
        pos = rnd.randrange(len(b) + 1)
        if op == 0 and b:
            b[min(pos, len(b) - 1)] = rnd.randrange(256)
        elif op == 1:
            b[pos:pos] = bytes(rnd.choice([b"\r", b"\n", b"\0", b" ", b":", b"\r\n", b"%", b"\xff"]))
        elif op == 2 and b:
            del b[pos:pos + rnd.randint(1, 8)]
        else:
            b[pos:pos] = bytes(rnd.randrange(256) for _ in range(rnd.randint(1, 16)))
    return bytes(b)


def probe_http(args, rnd):
    t = Tally("http")
    req_timeout = 3
    srv = Server(args.bin, args.model, "--request-timeout", str(req_timeout), "--api-key", "K")
    allowed = req_timeout + 3  # every connection must be answered or closed by then
    cases = http_cases()
    base = [c[1] for c in cases] + [
        b"POST /tokenize HTTP/1.1\r\nHost: x\r\nContent-Length: 17\r\n\r\n{\"content\": \"hi\"}",
        b"GET /v1/models HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer K\r\n\r\n"]
    n_mut = 20 if args.smoke else 400
    work = cases + [(f"mutant {i}", mutate(rnd, rnd.choice(base))) for i in range(n_mut)]

    def one(item):
        name, data = item
        try:
            st, done = raw_exchange(srv.port, data, allowed)
        except OSError as e:
            return name, None, True, repr(e)
        return name, st, done, None

    results = []
    lock = threading.Lock()
    it = iter(work)

    def worker():
        while True:
            with lock:
                item = next(it, None)
            if item is None:
                return
            r = one(item)
            with lock:
                results.append(r)

    threads = [threading.Thread(target=worker) for _ in range(8)]
    for th in threads:
        th.start()
    for th in threads:
        th.join()
    for name, st, done, err in results:
        t.attempts += 1
        if not done:
            t.hangs += 1
            t.note(f"not answered or closed within {allowed} s: {name}")
        if st and st >= 500 and st not in (503, 505):
            t.err5xx += 1
            t.note(f"{st}: {name}")
    check_server(t, srv)
    if srv.alive():
        if srv.get("/health")[0] != 200:
            t.note("unhealthy afterwards")
        log = open(srv.log.name, "rb").read()
        if b"\x1b" in log or re.search(rb"^FORGED", log, re.M):
            t.note("client bytes reached the log unescaped")
            t.crashes += 1
    err = srv.stop()
    if err:
        t.crashes += 1
        t.note(err)
    return t


# ---- disconnect -------------------------------------------------------------------

def probe_disconnect(args, rnd):
    t = Tally("disconnect")
    srv = Server(args.bin, args.model, "--parallel", "2", "--queue", "32")
    n = 10 if args.smoke else 120
    body = json.dumps({"prompt": "Once upon a time", "max_tokens": 200, "stream": True}).encode()
    for i in range(n):
        t.attempts += 1
        s = socket.create_connection(("127.0.0.1", srv.port), timeout=10)
        route = rnd.choice([b"/v1/completions", b"/v1/chat/completions"])
        b = body if route.endswith(b"/completions") and b"chat" not in route else json.dumps(
            {"messages": [{"role": "user", "content": "hi"}], "max_tokens": 200,
             "stream": rnd.random() < 0.7}).encode()
        req = b"POST %s HTTP/1.1\r\nHost: x\r\nContent-Length: %d\r\n\r\n%s" % (route, len(b), b)
        mode = rnd.randrange(3)
        if mode == 0:
            s.sendall(req[:rnd.randrange(1, len(req))])  # mid-request
        else:
            s.sendall(req)
            if mode == 2:
                try:
                    s.recv(rnd.randint(1, 2048))  # mid-response
                except OSError:
                    pass
        time.sleep(rnd.uniform(0, 0.05))
        if rnd.random() < 0.5:
            s.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))  # RST
        s.close()
        if not check_server(t, srv):
            srv = Server(args.bin, args.model, "--parallel", "2", "--queue", "32")
    deadline = time.time() + 15
    m = {}
    while time.time() < deadline:
        m = srv.metrics()
        if m.get("slots_busy", 1) == 0 and m.get("queue_depth", 1) == 0:
            break
        time.sleep(0.1)
    if m.get("slots_busy", 1) or m.get("queue_depth", 1):
        t.hangs += 1
        t.note(f"slots did not drain: {m}")
    err = srv.stop()
    if err:
        t.crashes += 1
        t.note(err)
    return t


# ---- soak ---------------------------------------------------------------------------

def probe_soak(args, rnd):
    t = Tally("soak")
    srv = Server(args.bin, args.model, "--parallel", "4", "--queue", "64")
    stop_at = time.time() + (4 if args.smoke else args.soak_seconds)
    lock = threading.Lock()

    def client(seed):
        r = random.Random(seed)
        while time.time() < stop_at:
            kind = r.randrange(4)
            try:
                if kind == 0:
                    st, _ = srv.post("/v1/completions", {"prompt": fuzz_text(r)[:200], "max_tokens": r.randint(1, 32)})
                elif kind == 1:
                    st, _ = srv.post("/v1/chat/completions", {"messages": [{"role": "user", "content": "hi"}],
                                                              "max_tokens": r.randint(1, 32), "stream": True})
                elif kind == 2:
                    st, _ = srv.post("/tokenize", {"content": fuzz_text(r)})
                else:
                    st, _ = srv.get(r.choice(["/health", "/v1/models", "/metrics"]))
                with lock:
                    t.attempts += 1
                    if st >= 500:
                        t.err5xx += 1
                        t.note(f"{st} (kind {kind})")
            except socket.timeout:
                with lock:
                    t.attempts += 1
                    t.hangs += 1
            except OSError as e:
                with lock:
                    t.attempts += 1
                    t.note(repr(e)[:120])

    threads = [threading.Thread(target=client, args=(rnd.random(),)) for _ in range(16)]
    for th in threads:
        th.start()
    for th in threads:
        th.join()
    check_server(t, srv)
    err = srv.stop()
    if err:
        t.crashes += 1
        t.note(err)
    return t


# ---- slow -------------------------------------------------------------------------

def probe_slow(args, rnd):
    t = Tally("slow")
    srv = Server(args.bin, args.model)
    n_socks = 40 if args.smoke else 200
    seconds = 4 if args.smoke else 20
    stop = threading.Event()
    hdr = b"POST /v1/completions HTTP/1.1\r\nHost: x\r\n"

    def opener(i):
        s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        s.bind((f"127.0.0.{2 + i % 2}", 0))
        s.settimeout(2)
        try:
            s.connect(("127.0.0.1", srv.port))
            if i % 2:
                s.sendall(hdr + b"Content-Length: 100000\r\n\r\n")
        except OSError:
            s.close()
            return None
        s.setblocking(False)
        return s

    def trickle():
        socks = [opener(i) for i in range(n_socks)]
        while not stop.is_set():
            for i, s in enumerate(socks):
                if s is None:
                    socks[i] = opener(i)
                    continue
                try:
                    s.send(b"a")
                    if s in select.select([s], [], [], 0)[0] and not s.recv(4096):
                        raise OSError
                except (BlockingIOError, InterruptedError):
                    pass
                except OSError:
                    s.close()
                    socks[i] = opener(i)
            stop.wait(1.0)
        for s in socks:
            if s:
                s.close()

    th = threading.Thread(target=trickle)
    th.start()
    time.sleep(1)
    lat = []
    end = time.time() + seconds
    while time.time() < end:
        t.attempts += 1
        t0 = time.time()
        try:
            st, _ = srv.post("/v1/completions", {"prompt": "Hello", "max_tokens": 4}, timeout=10)
            if st == 200:
                lat.append(time.time() - t0)
            elif st >= 500:
                t.err5xx += 1
        except socket.timeout:
            t.hangs += 1
        except OSError as e:
            t.note(repr(e)[:120])
    stop.set()
    th.join()
    lat.sort()
    if lat:
        t.note(f"{len(lat)}/{t.attempts} normal requests ok, p95 {lat[int(0.95 * (len(lat) - 1))] * 1e3:.1f} ms "
               f"with {n_socks} trickling sockets")
    if len(lat) < 0.99 * t.attempts:
        t.note("fewer than 99% of normal requests succeeded")
        t.hangs += t.attempts - len(lat) - t.err5xx - t.hangs
    check_server(t, srv)
    err = srv.stop()
    if err:
        t.crashes += 1
        t.note(err)
    return t


CLASSES = {"gguf": probe_gguf, "tokenizer": probe_tokenizer, "http": probe_http, "disconnect": probe_disconnect,
           "soak": probe_soak, "slow": probe_slow}


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--bin", default="build/bin/pocketllm")
    ap.add_argument("--model", default=os.path.join(os.path.dirname(__file__), "..", "fixtures", "models",
                                                    "tiny-qwen3-q4_k_m.gguf"))
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--smoke", action="store_true", help="every class, small")
    ap.add_argument("--only", default=",".join(CLASSES), help="comma-separated classes")
    ap.add_argument("--soak-seconds", type=float, default=30)
    args = ap.parse_args()
    rows = []
    for name in args.only.split(","):
        t0 = time.time()
        tally = CLASSES[name](args, random.Random(f"{args.seed}-{name}"))
        rows.append((tally, time.time() - t0))
        print(f"{name}: done in {rows[-1][1]:.1f} s", file=sys.stderr, flush=True)
    print(f"{'class':<12}{'attempts':>9}{'crashes':>9}{'hangs':>7}{'5xx':>6}{'seconds':>9}")
    for tally, dt in rows:
        print(f"{tally.name:<12}{tally.attempts:>9}{tally.crashes:>9}{tally.hangs:>7}{tally.err5xx:>6}{dt:>9.1f}")
    for tally, _ in rows:
        for n in tally.notes:
            print(f"  {tally.name}: {n}")
    bad = any(t.crashes or t.hangs for t, _ in rows)
    sys.exit(1 if bad else 0)


if __name__ == "__main__":
    main()
