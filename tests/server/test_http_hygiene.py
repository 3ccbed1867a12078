"""HTTP-layer hardening of `pocketllm serve` (issue 22), over raw sockets:
ambiguous body framing is refused, absurd Content-Lengths are answered at
once, garbage and trickled requests cannot hold a connection, the log cannot
be forged through the URL, the API key is compared over the whole header,
connection limits answer 503 instead of dropping.

Each test fails on the server before the fix (checked against that build)."""
import re
import socket
import time

import pytest

from conftest import Server


def raw(port, data, timeout=5.0, src="127.0.0.1"):
    """Sends `data` on a fresh connection and reads until the server closes
    it or `timeout` passes. Returns (status or None, bytes, closed)."""
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.bind((src, 0))
    sock.settimeout(timeout)
    sock.connect(("127.0.0.1", port))
    out = b""
    closed = False
    try:
        sock.sendall(data)
        deadline = time.time() + timeout
        while time.time() < deadline:
            sock.settimeout(max(0.01, deadline - time.time()))
            try:
                b = sock.recv(65536)
            except socket.timeout:
                break
            except ConnectionResetError:
                closed = True
                break
            if not b:
                closed = True
                break
            out += b
    finally:
        sock.close()
    m = re.match(rb"HTTP/1\.[01] (\d{3})", out)
    return (int(m.group(1)) if m else None), out, closed


BODY = b'{"content": "hello"}'


@pytest.fixture(scope="module")
def srv():
    s = Server("--request-timeout", "2", "--timeout", "60", "--api-key", "KEY")
    yield s
    assert s.stop() == 0, s.log_text()[-4000:]


def test_sane_request_still_works(srv):
    st, out, _ = raw(srv.port, b"POST /tokenize HTTP/1.1\r\nHost: x\r\nContent-Length: %d\r\n"
                               b"Connection: close\r\n\r\n%s" % (len(BODY), BODY))
    assert st == 200, out


@pytest.mark.parametrize("headers", [
    # Two different lengths: a proxy may frame by one, MHD by the other.
    b"Content-Length: %d\r\nContent-Length: 5\r\n" % len(BODY),
    b"Content-Length: 5\r\nContent-Length: %d\r\n" % len(BODY),
    # Chunked and a length at once.
    b"Transfer-Encoding: chunked\r\nContent-Length: %d\r\n" % len(BODY),
    b"Content-Length: %d\r\nTransfer-Encoding: chunked\r\n" % len(BODY),
    # A coding MHD does not frame by (it would read no body at all).
    b"Transfer-Encoding: gzip, chunked\r\n",
    b"Transfer-Encoding: chunked\r\nTransfer-Encoding: chunked\r\n",
], ids=["cl-cl", "cl-cl-2", "te-cl", "cl-te", "te-gzip", "te-te"])
def test_ambiguous_framing_is_400_and_closes(srv, headers):
    req = b"POST /tokenize HTTP/1.1\r\nHost: x\r\n" + headers + b"\r\n"
    if b"chunked" in headers:
        req += b"%x\r\n%s\r\n0\r\n\r\n" % (len(BODY), BODY)
    else:
        req += BODY
    # A smuggled second request after the body must never be answered.
    req += b"GET /health HTTP/1.1\r\nHost: x\r\n\r\n"
    st, out, closed = raw(srv.port, req, timeout=4)
    assert st == 400, out
    assert b"bad_framing" in out
    assert out.count(b"HTTP/1.1 ") == 1, out
    assert closed


def test_huge_content_length_is_413_at_once(srv):
    t0 = time.time()
    st, out, closed = raw(srv.port, b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer KEY\r\n"
                                    b"Content-Length: 9223372036854775807\r\n\r\n{", timeout=1.5)
    assert st == 413, out
    assert time.time() - t0 < 1.5
    assert b"request_too_large" in out


def test_garbage_request_line_does_not_hold_the_socket(srv):
    # --request-timeout 2 (idle timeout 60): closed, answered or not, well
    # before the idle timeout.
    for junk in (b"GARBAGE\r\n\r\n", b"\x16\x03\x01\x02\x00\x01\x00\x01\xfc\x03\x03" + b"\x00" * 64,
                 b"GET\r\n\r\n", b"GET / HTTP/9.9\r\n\r\n"):
        t0 = time.time()
        st, out, closed = raw(srv.port, junk, timeout=6)
        assert closed and time.time() - t0 < 5, (junk, out)
        assert st is None or st >= 400, (junk, out)


def test_trickled_headers_hit_the_request_deadline(srv):
    """One header byte every 0.2 s keeps MHD's idle timer alive forever; the
    request deadline (2 s here) closes the connection anyway."""
    sock = socket.create_connection(("127.0.0.1", srv.port), timeout=10)
    req = b"GET /health HTTP/1.1\r\nHost: x\r\nX-Slow: " + b"a" * 200 + b"\r\n\r\n"
    t0 = time.time()
    closed_after = None
    for i, ch in enumerate(req):
        try:
            sock.sendall(bytes([ch]))
        except OSError:
            closed_after = time.time() - t0
            break
        time.sleep(0.2)
        sock.setblocking(False)
        try:
            b = sock.recv(4096)
            if not b:
                closed_after = time.time() - t0
                break
            pytest.fail(f"unexpected answer to a trickled request: {b!r}")
        except BlockingIOError:
            pass
        except OSError:
            closed_after = time.time() - t0
            break
        finally:
            sock.setblocking(True)
    sock.close()
    assert closed_after is not None and 1.5 < closed_after < 4.5, closed_after


def test_trickled_body_hits_the_request_deadline(srv):
    sock = socket.create_connection(("127.0.0.1", srv.port), timeout=10)
    sock.sendall(b"POST /tokenize HTTP/1.1\r\nHost: x\r\nContent-Length: 1000\r\n\r\n")
    t0 = time.time()
    closed_after = None
    while time.time() - t0 < 8:
        try:
            sock.sendall(b" ")
        except OSError:
            closed_after = time.time() - t0
            break
        time.sleep(0.2)
        sock.setblocking(False)
        try:
            b = sock.recv(4096)
            if not b:
                closed_after = time.time() - t0
                break
        except BlockingIOError:
            pass
        except OSError:
            closed_after = time.time() - t0
            break
        finally:
            sock.setblocking(True)
    sock.close()
    assert closed_after is not None and closed_after < 4.5, closed_after


def test_kept_alive_connection_still_served_after_request_timeout(srv):
    """The deadline is per request: a kept-alive connection that sends its
    next request after request_timeout (but within the idle timeout) is
    served."""
    sock = socket.create_connection(("127.0.0.1", srv.port), timeout=10)
    get = b"GET /health HTTP/1.1\r\nHost: x\r\n\r\n"
    sock.sendall(get)
    assert sock.recv(4096).startswith(b"HTTP/1.1 200")
    time.sleep(3)  # > --request-timeout 2
    sock.sendall(get)
    assert sock.recv(4096).startswith(b"HTTP/1.1 200")
    sock.close()


def test_url_cannot_forge_log_lines(srv):
    raw(srv.port, b"GET /x%0aFORGED-LINE%1b[31mred HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
    time.sleep(0.3)
    log = open(srv.log.name, "rb").read()
    assert b"\x1b" not in log
    assert not re.search(rb"^FORGED-LINE", log, re.M), log[-2000:]
    assert b"/x\\x0aFORGED-LINE\\x1b[31mred" in log


def test_api_key_compared_over_the_whole_header(srv):
    def auth(value):
        st, out, _ = raw(srv.port, b"GET /v1/models HTTP/1.1\r\nHost: x\r\nAuthorization: " + value +
                         b"\r\nConnection: close\r\n\r\n")
        return st
    assert auth(b"Bearer KEY") == 200
    assert auth(b"Bearer KE") == 401
    assert auth(b"Bearer KEYX") == 401
    # "Bearer KEY\0junk": libmicrohttpd 0.9.75 stores header values as C
    # strings (their length is strlen), so the handler is given "Bearer KEY"
    # and cannot tell; see the comment in authorized().


def _idle_conns(n, src, port):
    socks = []
    for _ in range(n):
        sk = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        sk.bind((src, 0))
        sk.connect(("127.0.0.1", port))
        socks.append(sk)
    time.sleep(0.3)  # let the server register them
    return socks


def test_per_ip_limit_answers_503(make_server):
    s = make_server("--max-conns-per-ip", "3")
    held = _idle_conns(3, "127.0.0.2", s.port)
    try:
        st, out, closed = raw(s.port, b"GET /health HTTP/1.1\r\nHost: x\r\n\r\n", src="127.0.0.2")
        assert st == 503, out
        assert re.search(rb"\r\nRetry-After: \d+\r\n", out, re.I), out
        assert b"too_many_connections" in out and closed
        # Another address is not affected.
        st, out, _ = raw(s.port, b"GET /health HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
        assert st == 200, out
    finally:
        for sk in held:
            sk.close()
    time.sleep(0.3)
    st, out, _ = raw(s.port, b"GET /health HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n", src="127.0.0.2")
    assert st == 200, out


def test_total_limit_answers_503_not_drop(make_server):
    s = make_server("--max-conns", "4", "--max-conns-per-ip", "0")
    held = _idle_conns(4, "127.0.0.3", s.port)
    try:
        st, out, _ = raw(s.port, b"GET /health HTTP/1.1\r\nHost: x\r\n\r\n")
        assert st == 503, out
    finally:
        for sk in held:
            sk.close()


def test_strict_parsing(srv):
    """MHD_OPTION_STRICT_FOR_CLIENT=1: a folded line with nothing to fold onto
    and an HTTP/1.1 request without Host are refused."""
    st, out, _ = raw(srv.port, b"GET /health HTTP/1.1\r\nHost: x\r\n folded\r\nConnection: close\r\n\r\n")
    assert st == 400, out
    st, out, _ = raw(srv.port, b"GET /health HTTP/1.1\r\nConnection: close\r\n\r\n")
    assert st == 400, out


def test_bare_lf_and_obs_fold_pinned(srv):
    """Not a regression test: pins what libmicrohttpd 0.9.75 does with
    bare-LF line ends (read as CRLF) and obsolete folding after a header
    (joined to that header's value), which the handler cannot see (it is
    given parsed headers) and even strict mode accepts. A change in MHD shows
    up here."""
    st, out, _ = raw(srv.port, b"GET /health HTTP/1.1\nHost: x\nConnection: close\n\n")
    assert st == 200, out
    st, out, _ = raw(srv.port, b"GET /health HTTP/1.1\r\nHost: x\r\nX-A: 1\r\n  folded\r\nConnection: close\r\n\r\n")
    assert st == 200, out


def test_generation_time_is_not_request_time(make_server):
    """Guard, not a regression test: the request deadline stops once the
    request is in, so a stream, and a request queued behind it, may outlast
    it. (Fails if the deadline kept running: checked.)"""
    import json
    import threading
    s = make_server("--request-timeout", "1", "--parallel", "1")
    body = json.dumps({"prompt": "hi", "max_tokens": 3000, "stream": True}).encode()
    t0 = time.time()
    sock = socket.create_connection(("127.0.0.1", s.port), timeout=60)
    sock.sendall(b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Length: %d\r\n\r\n%s" % (len(body), body))
    # A second generation queued behind the stream (one slot).
    body2 = json.dumps({"prompt": "hi", "max_tokens": 4}).encode()
    queued = []
    q = threading.Thread(target=lambda: queued.append(raw(
        s.port, b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Length: %d\r\nConnection: close\r\n\r\n%s"
        % (len(body2), body2), timeout=120)))
    q.start()
    got = b""
    closed = False
    # Read for 2 s (twice the deadline) or to the end of the stream.
    while time.time() - t0 < 2.0 and b"data: [DONE]" not in got:
        b = sock.recv(65536)
        if not b:
            closed = True
            break
        got += b
    elapsed = time.time() - t0
    sock.close()  # cancels the rest: the queued request gets the slot
    q.join()
    assert not closed, (elapsed, got[-300:])
    assert got.startswith(b"HTTP/1.1 200") and b"data: " in got
    st2, out2, _ = queued[0]
    assert st2 == 200, out2
    if b"data: [DONE]" in got and elapsed < 1.2:
        pytest.skip(f"the stream took only {elapsed:.2f} s: too fast to outlast --request-timeout 1")
