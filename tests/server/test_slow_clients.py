"""Slow-client flood (issue 22): 200 sockets trickling one byte per second
(100 sending their headers that way, 100 sending whole headers and then a
body that way) from other loopback addresses, for 20 s, while a normal
client times small completions. At least 99% of the normal requests must
succeed and their p95 latency must stay within 2x of the same requests
against the idle server, measured first in the same run.

The server runs with its default limits: what ships is what is tested.
Before the fix, MHD's ~104-connection limit dropped every new connection
and a trickle reset the idle timeout forever, so almost no normal request
got through."""
import multiprocessing
import select
import socket
import threading
import time

import requests

N_TRICKLE = 200
ATTACK_S = 20.0
IDLE_N = 100
BODY = {"prompt": "Hello", "max_tokens": 4, "temperature": 0}


class Trickler(threading.Thread):
    """Keeps N sockets open, each sending one byte per second; a socket the
    server closes is replaced at once."""

    def __init__(self, port, n):
        super().__init__(daemon=True)
        self.port = port
        self.n = n
        self.stop = threading.Event()
        self.stats = {"connects": 0, "closed_by_server": 0, "answers_503": 0, "other_answers": 0,
                      "connect_errors": 0}
        hdr = b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
        # Headers one byte at a time, never finished.
        self.slow_headers = hdr + b"X-Padding: " + b"a" * 4096
        # Whole headers at once, then the body one byte at a time.
        self.head_then_body = hdr + b"Content-Length: 100000\r\n\r\n"

    def _open(self, i):
        sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        # Header tricklers from 127.0.0.2, body tricklers from 127.0.0.3: the
        # per-address limit applies to them, not to the normal client.
        sock.bind(("127.0.0.2" if i % 2 == 0 else "127.0.0.3", 0))
        sock.settimeout(2)
        try:
            sock.connect(("127.0.0.1", self.port))
            if i % 2:
                sock.sendall(self.head_then_body)
        except OSError:
            self.stats["connect_errors"] += 1
            sock.close()
            return None
        sock.setblocking(False)
        self.stats["connects"] += 1
        return [sock, 0]

    def run(self):
        conns = [self._open(i) for i in range(self.n)]
        next_tick = time.time()
        while not self.stop.is_set():
            now = time.time()
            if now >= next_tick:
                next_tick = now + 1.0
                for i, c in enumerate(conns):
                    if c is None:
                        conns[i] = self._open(i)
                        continue
                    sock, k = c
                    byte = self.slow_headers[k % len(self.slow_headers):][:1] if i % 2 == 0 else b"x"
                    try:
                        sock.send(byte)
                        c[1] += 1
                    except (BlockingIOError, InterruptedError):
                        pass
                    except OSError:
                        sock.close()
                        self.stats["closed_by_server"] += 1
                        conns[i] = self._open(i)
            live = [c[0] for c in conns if c]
            ready = select.select(live, [], [], max(0.0, min(0.2, next_tick - time.time())))[0] if live else []
            for sock in ready:
                i = next(j for j, c in enumerate(conns) if c and c[0] is sock)
                try:
                    data = sock.recv(65536)
                except (BlockingIOError, InterruptedError):
                    continue
                except OSError:
                    data = b""
                if data.startswith(b"HTTP/1.1 503"):
                    self.stats["answers_503"] += 1
                elif data:
                    self.stats["other_answers"] += 1
                sock.close()
                self.stats["closed_by_server"] += 1
                conns[i] = None  # reopened at the next tick
        for c in conns:
            if c:
                c[0].close()


def _trickle_process(port, n, stop, q):
    t = Trickler(port, n)
    t.start()
    stop.wait()
    t.stop.set()
    t.join(timeout=10)
    q.put(t.stats)


def _timed_requests(url, until=None, count=None):
    lat, fails = [], []
    n = 0
    while (until is None or time.time() < until) and (count is None or n < count):
        n += 1
        t0 = time.time()
        try:
            # A fresh connection each time: accepting must keep working too.
            r = requests.post(url + "/v1/completions", json=BODY, timeout=10, headers={"Connection": "close"})
            if r.status_code == 200:
                lat.append(time.time() - t0)
            else:
                fails.append(f"{r.status_code} {r.text[:120]}")
        except requests.RequestException as e:
            fails.append(repr(e))
    return lat, fails


def _p95(xs):
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(0.95 * len(xs)))] if xs else float("inf")


def test_slow_client_flood(make_server):
    s = make_server()
    _timed_requests(s.url, count=5)  # warm-up
    idle_lat, idle_fail = _timed_requests(s.url, count=IDLE_N)
    assert not idle_fail, idle_fail[:5]
    p95_idle = _p95(idle_lat)

    # The attacker runs in its own process: in this one its once-a-second
    # burst of 200 sends and reconnects would hold the GIL and delay the
    # timed client, which is the test's own noise, not the server's.
    mp = multiprocessing.get_context("fork")
    stop, q = mp.Event(), mp.Queue()
    proc = mp.Process(target=_trickle_process, args=(s.port, N_TRICKLE, stop, q), daemon=True)
    proc.start()
    time.sleep(1.5)  # every trickler connected and sending
    lat, fails = _timed_requests(s.url, until=time.time() + ATTACK_S)
    stop.set()
    stats = q.get(timeout=30)
    proc.join(timeout=10)
    # The idle baseline again, after the flood: on a shared 2-core machine
    # (ctest -j2 runs another test beside this one) a single short idle
    # window can fall in a quiet moment; the larger of the two windows is
    # the idle server in the same conditions as the flood.
    time.sleep(0.5)
    idle2_lat, idle2_fail = _timed_requests(s.url, count=IDLE_N)
    assert not idle2_fail, idle2_fail[:5]
    p95_idle = max(p95_idle, _p95(idle2_lat))
    total = len(lat) + len(fails)
    p95 = _p95(lat)
    print(f"\nslow clients: {N_TRICKLE} trickling sockets for {ATTACK_S:.0f} s, trickler {stats}; "
          f"normal requests: idle p95 {p95_idle * 1e3:.1f} ms ({len(idle_lat)}), under attack "
          f"{len(lat)}/{total} ok, p95 {p95 * 1e3:.1f} ms ({p95 / p95_idle:.2f}x idle)")
    assert total > 0
    assert len(lat) >= 0.99 * total, fails[:5]
    assert p95 <= 2.0 * p95_idle, (p95, p95_idle)
    # The flood really was held off by the deadlines and limits, not ignored.
    assert stats["closed_by_server"] > 0
    # And the server still serves afterwards.
    assert s.post("/v1/completions", BODY).status_code == 200
