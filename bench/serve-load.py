#!/usr/bin/env python3
"""Load test for an OpenAI-compatible server (pocketllm serve, llama-server).

K concurrent clients (default 1, 2, 4, 8) each replay multi-turn chats: every
turn sends the whole conversation so far plus a new user message, streamed,
and appends the reply. Reports per K: aggregate generated tok/s, TTFT p50/p95
and inter-token latency (ITL) p50/p95, from the client's side (SSE chunk
arrival times; one content chunk is taken as one token).

    bench/serve-load.py --url http://127.0.0.1:8080 [--clients 1,2,4,8] [--turns 4]
                        [--max-tokens 32] [--convs 2] [--extra '{"cache_prompt": false}']
                        [--long-prompt 2000 [--long-delay 1.0]]

--extra merges JSON into every request body (e.g. to turn the prompt cache
off for a with/without comparison). --long-prompt N adds, beside the K
clients, one that starts after --long-delay seconds and sends long prompts
(~N words of a document, each new: no cache can hold them) one after the
other until the others are done: the long-prompt-arrival scenario, where a
server that prefills a whole prompt in one step stalls every decoding
stream (their ITL p95/max show it; chunked prefill keeps it down). Its
requests are left out of tok/s, TTFT and ITL and reported as long_*.
Only the standard library is used.
"""
import argparse
import http.client
import json
import statistics
import sys
import threading
import time
import urllib.parse

SYSTEM = ("You are a helpful assistant for a bicycle shop. You know the opening hours (9 to 18, closed on "
          "Sundays), the brands sold (three city-bike brands, two mountain-bike brands) and the repair "
          "service (chains, brakes, tyres, wheels). Answer briefly and politely.")
QUESTIONS = ["Are you open on Saturday?", "Which brands do you sell?", "Can you fix a flat tyre today?",
             "How long does a brake repair take?", "Do you sell helmets?", "What about children's bikes?",
             "Can I pay by card?", "Thanks, see you soon."]


def pct(xs, p):
    if not xs:
        return float("nan")
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(round(p / 100 * (len(xs) - 1))))]


def stream_turn(url, body):
    """One streamed chat request: (TTFT s, [ITL s], tokens)."""
    u = urllib.parse.urlparse(url)
    conn = http.client.HTTPConnection(u.hostname, u.port or 80, timeout=600)
    t0 = time.perf_counter()
    conn.request("POST", "/v1/chat/completions", json.dumps(body), {"Content-Type": "application/json"})
    resp = conn.getresponse()
    if resp.status != 200:
        raise RuntimeError(f"HTTP {resp.status}: {resp.read()[:200]!r}")
    times, text = [], []
    for raw in resp:
        line = raw.decode("utf-8", "replace").strip()
        if not line.startswith("data: ") or line == "data: [DONE]":
            continue
        ev = json.loads(line[6:])
        for ch in ev.get("choices", []):
            d = ch.get("delta", {})
            piece = (d.get("content") or "") + (d.get("reasoning_content") or "")
            if piece:
                times.append(time.perf_counter())
                text.append(d.get("content") or "")
    conn.close()
    if not times:
        return None, [], 0, ""
    return times[0] - t0, [b - a for a, b in zip(times, times[1:])], len(times), "".join(text)


def client(url, args, cid, out, lock):
    for c in range(args.convs):
        msgs = [{"role": "system", "content": SYSTEM}]
        for t in range(args.turns):
            msgs.append({"role": "user", "content": QUESTIONS[(cid + c + t) % len(QUESTIONS)]})
            body = {"messages": msgs, "max_tokens": args.max_tokens, "temperature": 0, "stream": True,
                    **args.extra}
            try:
                ttft, itl, n, text = stream_turn(url, body)
            except (OSError, RuntimeError, ValueError) as e:
                with lock:
                    out["errors"].append(repr(e))
                return
            msgs.append({"role": "assistant", "content": text})
            with lock:
                out["tokens"] += n
                if ttft is not None:
                    out["ttft"].append(ttft)
                    out["ttft_by_turn"].setdefault(t, []).append(ttft)
                out["itl"].extend(itl)


WORDS = ("wheel chain saddle frame pedal brake gear tyre spoke valve rim hub crank lever cable bell lamp "
         "basket rack mudguard pump helmet lock bottle").split()


def long_client(url, args, done, out, lock):
    """Long prompts one after the other until done is set (after --long-delay)."""
    if done.wait(args.long_delay):
        return
    i = 0
    while not done.is_set():
        # A different first sentence each time: nothing of it is cached.
        words = [f"Document {i} of the stock list."] + [WORDS[(i * 7 + j * 13) % len(WORDS)]
                                                        for j in range(args.long_prompt)]
        body = {"messages": [{"role": "user", "content": " ".join(words) + "\nSummarize in one line."}],
                "max_tokens": 8, "temperature": 0, "stream": True, **args.extra}
        try:
            ttft, _, _, _ = stream_turn(url, body)
        except (OSError, RuntimeError, ValueError) as e:
            with lock:
                out["errors"].append("long: " + repr(e))
            return
        with lock:
            if ttft is not None:
                out["long_ttft"].append(ttft)
        i += 1


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--url", default="http://127.0.0.1:8080")
    ap.add_argument("--clients", default="1,2,4,8")
    ap.add_argument("--turns", type=int, default=4)
    ap.add_argument("--convs", type=int, default=2, help="conversations per client")
    ap.add_argument("--max-tokens", type=int, default=32)
    ap.add_argument("--extra", type=json.loads, default={})
    ap.add_argument("--json", action="store_true", help="one JSON object per K on stdout")
    ap.add_argument("--long-prompt", type=int, default=0, metavar="N",
                    help="one more client sending prompts of ~N words while the others chat (0: off)")
    ap.add_argument("--long-delay", type=float, default=1.0, help="seconds before the first long prompt")
    args = ap.parse_args()
    if not args.json:
        print(f"{'K':>3} {'tok/s':>8} {'TTFT p50':>9} {'TTFT p95':>9} {'ITL p50':>8} {'ITL p95':>8}  TTFT p50 by turn (ms)")
    for k in [int(x) for x in args.clients.split(",")]:
        out = {"tokens": 0, "ttft": [], "itl": [], "ttft_by_turn": {}, "errors": [], "long_ttft": []}
        lock = threading.Lock()
        th = [threading.Thread(target=client, args=(args.url, args, i, out, lock)) for i in range(k)]
        done = threading.Event()
        lt = threading.Thread(target=long_client, args=(args.url, args, done, out, lock)) if args.long_prompt else None
        t0 = time.perf_counter()
        for t in th:
            t.start()
        if lt:
            lt.start()
        for t in th:
            t.join()
        wall = time.perf_counter() - t0
        done.set()
        if lt:
            lt.join()
        by_turn = {t: statistics.median(v) * 1e3 for t, v in sorted(out["ttft_by_turn"].items())}
        row = {"clients": k, "tok_s": out["tokens"] / wall, "ttft_p50_ms": pct(out["ttft"], 50) * 1e3,
               "ttft_p95_ms": pct(out["ttft"], 95) * 1e3, "itl_p50_ms": pct(out["itl"], 50) * 1e3,
               "itl_p95_ms": pct(out["itl"], 95) * 1e3, "ttft_p50_ms_by_turn": by_turn}
        if args.long_prompt:
            row.update({"itl_max_ms": max(out["itl"], default=float("nan")) * 1e3,
                        "long_n": len(out["long_ttft"]), "long_ttft_p50_ms": pct(out["long_ttft"], 50) * 1e3})
        if out["errors"]:
            print(f"K={k}: {len(out['errors'])} conversation(s) failed, first: {out['errors'][0]}", file=sys.stderr)
        if args.json:
            print(json.dumps(row))
        else:
            turns = " ".join(f"{v:.1f}" for v in by_turn.values())
            print(f"{k:>3} {row['tok_s']:>8.1f} {row['ttft_p50_ms']:>9.1f} {row['ttft_p95_ms']:>9.1f} "
                  f"{row['itl_p50_ms']:>8.2f} {row['itl_p95_ms']:>8.2f}  {turns}")
            if args.long_prompt:
                print(f"    long prompts: {row['long_n']} sent, TTFT p50 {row['long_ttft_p50_ms']:.1f} ms; "
                      f"ITL max of the others {row['itl_max_ms']:.1f} ms")


if __name__ == "__main__":
    main()
