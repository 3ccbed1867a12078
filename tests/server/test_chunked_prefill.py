"""`pocketllm serve`: chunked prefill (issue 17).

While any sequence is decoding, a step holds at most --max-num-batched-tokens
tokens, so a long prompt that arrives is prefilled a chunk per step between
the running sequences' decode tokens. Two things must hold:
  - the chunking changes no token: greedy outputs of concurrent requests are
    the same with a tiny budget, a large one, and each request alone;
  - a decoding stream keeps producing tokens while a long prompt is admitted
    (checked by the order in which the two streams' events arrive, not by
    timing), which it does not when the whole prompt fits one step.
"""
import itertools
import json
import threading

import requests

from conftest import sse_events

LONG = ("The history of the bicycle begins in the early nineteenth century, when inventors in Europe "
        "built two-wheeled machines pushed along by the rider's feet. Pedals came later, then chains, "
        "pneumatic tyres and gears, and by the end of the century ")
PROMPTS = [
    LONG * 3 + "riding had become",
    "The capital of France is",
    LONG + "a bicycle",
    "def fib(n):\n    if n < 2:\n        return n\n    return",
    LONG * 6 + "so",
]


def complete(s, prompt, out, i, max_tokens=24):
    r = s.post("/v1/completions", {"prompt": prompt, "max_tokens": max_tokens, "temperature": 0,
                                   "return_tokens": True, "cache_prompt": False}, timeout=300)
    assert r.status_code == 200, r.text
    out[i] = r.json()["choices"][0]["tokens"]


def eos_bias(s):
    eos = s.post("/tokenize", {"content": "<|im_end|><|endoftext|>", "parse_special": True}).json()["tokens"]
    return {str(t): -100 for t in eos}


def concurrent(s):
    """The prompts at once, while another stream is decoding (so that every
    step is under the decode-time budget and each prompt is chunked)."""
    flowing, stop = threading.Event(), threading.Event()

    def background():
        body = {"prompt": "Once upon a time", "max_tokens": 3000, "temperature": 0, "stream": True,
                "logit_bias": eos_bias(s)}
        with requests.post(s.url + "/v1/completions", json=body, stream=True, timeout=300) as r:
            n = 0
            for line in r.iter_lines():
                n += bool(line)
                if n == 4:
                    flowing.set()
                if stop.is_set():
                    break

    bg = threading.Thread(target=background)
    bg.start()
    assert flowing.wait(60)
    out = [None] * len(PROMPTS)
    ts = [threading.Thread(target=complete, args=(s, p, out, i)) for i, p in enumerate(PROMPTS)]
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    stop.set()
    bg.join(120)
    assert all(o is not None for o in out), out
    return out


def test_chunked_outputs_identical(make_server):
    small = make_server("--parallel", "6", "--max-num-batched-tokens", "7")
    assert "(7 while decoding)" in small.log_text()
    alone = [None] * len(PROMPTS)
    for i, p in enumerate(PROMPTS):
        complete(small, p, alone, i)
    got_small = concurrent(small)
    big = make_server("--parallel", "6", "--max-num-batched-tokens", "4096", "--batch", "4096")
    got_big = concurrent(big)
    for i in range(len(PROMPTS)):
        assert got_small[i] == alone[i], f"prompt {i}: chunked concurrent output differs from alone"
        assert got_big[i] == alone[i], f"prompt {i}: unchunked concurrent output differs from alone"


def test_time_budget_outputs_identical(make_server):
    """The time budget (the default) picks each step's chunk from measured
    costs, so its splits vary from run to run: outputs must not. A 0.01 ms
    target is below any decode step, so each step while decoding carries a
    single prompt token (the most splits); the default target splits where
    the timings say. Both against each prompt alone, and the learned costs
    are on /metrics."""
    tight = make_server("--parallel", "6", "--max-step-ms", "0.01", "--metrics")
    assert "steps of 0.01 ms while decoding, at most" in tight.log_text()
    alone = [None] * len(PROMPTS)
    for i, p in enumerate(PROMPTS):
        complete(tight, p, alone, i)
    got_tight = concurrent(tight)
    m = tight.metrics()
    assert m["pocketllm:step_decode_seconds"] > 0, m
    assert m["pocketllm:step_prompt_seconds_per_token"] > 0, m
    auto = make_server("--parallel", "6")
    assert "steps of 1 + 0.5 x 3 / n decode steps while n decode" in auto.log_text()
    got_auto = concurrent(auto)
    for i in range(len(PROMPTS)):
        assert got_tight[i] == alone[i], f"prompt {i}: 1 ms time budget output differs from alone"
        assert got_auto[i] == alone[i], f"prompt {i}: default time budget output differs from alone"


def test_time_budget_keeps_a_stream_flowing(make_server):
    # A target below any decode step: B's ~1600-token prompt gets one token a
    # step beside A's decode token, so A keeps streaming (compare the budget-8
    # test below). The target must stay below the decode step on every
    # machine: this fixture's decode step is under 1 ms on ours, so a 1 ms
    # target gave B ~13 prompt tokens a step and A's count in the window
    # (106-128) sat at the threshold; at 0.01 ms each step takes the
    # one-token floor.
    s = make_server("--parallel", "2", "--ctx", "2048", "--batch", "2048", "--max-step-ms", "0.01")
    n, n_b = interleaving(s)
    assert n_b > 1200, n_b
    assert n >= 120, f"only {n} tokens of the decoding stream during a {n_b}-token prefill"


def interleaving(s):
    """A streams a long generation; once it is flowing, B sends a long prompt.
    Returns how many of A's tokens arrived between B's request and B's first
    token (events numbered in arrival order across both streams)."""
    bias = eos_bias(s)
    clock = itertools.count()
    lock = threading.Lock()
    a_events, b = [], {}
    a_flowing = threading.Event()

    def tick():
        with lock:
            return next(clock)

    def stream_a():
        # logprobs: each chunk lists its tokens (a chunk may carry several
        # when the client reads late), so tokens are counted, not chunks.
        body = {"prompt": "Once upon a time", "max_tokens": 1500, "temperature": 0, "stream": True,
                "logit_bias": bias, "logprobs": 0}
        with requests.post(s.url + "/v1/completions", json=body, stream=True, timeout=300) as r:
            assert r.status_code == 200
            for line in r.iter_lines():
                if not line or line == b"data: [DONE]":
                    continue
                lp = json.loads(line[6:])["choices"][0]["logprobs"]
                a_events.append((tick(), len(lp["tokens"]) if lp else 0))
                if sum(k for _, k in a_events) >= 8:
                    a_flowing.set()
                if "b_first" in b:
                    break  # hang up: the server cancels A

    ta = threading.Thread(target=stream_a)
    ta.start()
    assert a_flowing.wait(60), "stream A produced no tokens"
    body = {"prompt": LONG * 22, "max_tokens": 2, "temperature": 0, "stream": True}
    b["sent"] = tick()
    with requests.post(s.url + "/v1/completions", json=body, stream=True, timeout=300) as r:
        assert r.status_code == 200, r.text
        for line in r.iter_lines():
            if line and line != b"data: [DONE]":
                b.setdefault("b_first", tick())
        # The whole body read: B is done.
    ta.join(timeout=120)
    assert "b_first" in b
    n_b = len(s.post("/tokenize", {"content": LONG * 22}).json()["tokens"])
    n = sum(k for e, k in a_events if b["sent"] < e < b["b_first"])
    print(f"\n{n} of A's tokens during a {n_b}-token prefill")
    return n, n_b


def test_decoding_stream_flows_while_long_prompt_is_admitted(make_server):
    # Budget 8 with A decoding: B's prompt (~1600 tokens) takes ~230 steps,
    # each carrying one of A's tokens.
    s = make_server("--parallel", "2", "--ctx", "2048", "--batch", "2048", "--max-num-batched-tokens", "8")
    n, n_b = interleaving(s)
    assert n_b > 1200, n_b
    assert n >= 120, f"only {n} tokens of the decoding stream during a {n_b}-token prefill"
    # Control: a budget that holds the whole prompt prefills it in one step,
    # and A waits for it. A's tokens in the window are then only those of the
    # time B's request took to reach the scheduler (~30 on an idle machine,
    # over 130 on a loaded one), which the chunked run counts too: the
    # difference is the ~230 steps that carried one of A's tokens each.
    c = make_server("--parallel", "2", "--ctx", "2048", "--batch", "2048", "--max-num-batched-tokens", "2048")
    n_c, _ = interleaving(c)
    assert n - n_c >= 100, f"{n} tokens of A during the chunked prefill, {n_c} during an unchunked one"
