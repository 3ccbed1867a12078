"""Issue 16: logprobs, penalties and logit_bias on /v1/chat/completions and
/v1/completions (official openai client and raw HTTP), the library's
log-probabilities against a log-softmax computed here with numpy, the
Python package's options, and NaN logits failing a request with a 500."""
import json
import math
import os
import struct
import subprocess
import sys
import tempfile

import numpy as np
import openai
import pytest
import requests

from conftest import BIN, FIX, MODEL, run_cli, sse_events

GREEDY = {"temperature": 0}


def client(server):
    return openai.OpenAI(base_url=server.url + "/v1", api_key="none", max_retries=0, timeout=120)


def n_vocab(server):
    return requests.get(server.url + "/v1/models", timeout=10).json()["data"][0]["meta"]["n_vocab"]


def pocketllm_pkg():
    """The Python package of this checkout, on this build's library."""
    root = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
    lib = os.path.join(os.path.dirname(os.path.abspath(BIN)), "..", "lib", "libpocketllm.so")
    if not os.path.exists(lib):
        pytest.skip("no shared library next to the binary")
    if "libasan" in subprocess.run(["ldd", lib], capture_output=True, text=True).stdout:
        pytest.skip("ASan build: the library cannot be loaded into this Python")
    os.environ["POCKETLLM_LIB"] = os.path.abspath(lib)
    sys.path.insert(0, os.path.join(root, "python"))
    import pocketllm
    return pocketllm


def log_softmax(x):
    x = x.astype(np.float64)
    m = x.max()
    return x - m - math.log(np.exp(x - m).sum())


# ---- logprobs ----------------------------------------------------------------------

def test_chat_logprobs_shape(server):
    r = client(server).chat.completions.create(model="m", messages=[{"role": "user", "content": "Hello"}],
                                               max_tokens=8, logprobs=True, top_logprobs=3, **GREEDY)
    c = r.choices[0]
    content = c.logprobs.content
    assert len(content) >= 1
    for e in content:
        assert e.logprob <= 0
        assert len(e.top_logprobs) == 3
        lps = [t.logprob for t in e.top_logprobs]
        assert lps == sorted(lps, reverse=True)
        # greedy without penalties: the chosen token is the most likely one
        assert e.token == e.top_logprobs[0].token and abs(e.logprob - lps[0]) < 1e-6
        assert bytes(e.bytes).decode("utf-8", "replace") == e.token or "\ufffd" in e.token
    # logprobs: true alone gives no alternatives
    r = client(server).chat.completions.create(model="m", messages=[{"role": "user", "content": "Hello"}],
                                               max_tokens=4, logprobs=True, **GREEDY)
    assert all(e.top_logprobs == [] for e in r.choices[0].logprobs.content)
    # not asked: null, as before
    r = client(server).chat.completions.create(model="m", messages=[{"role": "user", "content": "Hello"}],
                                               max_tokens=4, **GREEDY)
    assert r.choices[0].logprobs is None


def test_completion_logprobs_match_log_softmax(server):
    """The first token's logprobs are the log-softmax of the model's raw
    logits for the prompt (computed here from the Python package's logits),
    and every token's agree with `pocketllm run --json --logprobs`."""
    prompt = "The capital of France is"
    r = client(server).completions.create(model="m", prompt=prompt, max_tokens=6, logprobs=5, **GREEDY)
    lp = r.choices[0].logprobs
    assert len(lp.tokens) == len(lp.token_logprobs) == len(lp.top_logprobs) == len(lp.text_offset)
    assert "".join(lp.tokens) == r.choices[0].text
    assert lp.text_offset[0] == 0 and lp.text_offset == sorted(lp.text_offset)
    pl = pocketllm_pkg()
    with pl.Model(MODEL, threads=2) as m:
        ids = m.tokenize(prompt)
        ref = log_softmax(m.logits(ids))
        best = int(np.argmax(ref))
        assert m.token_to_piece(best).decode("utf-8", "replace") == lp.tokens[0]
        assert abs(lp.token_logprobs[0] - ref[best]) < 2e-3, (lp.token_logprobs[0], ref[best])
        order = np.argsort(-ref, kind="stable")[:5]
        want = [m.token_to_piece(int(t), special=True).decode("utf-8", "replace") for t in order]
        assert list(lp.top_logprobs[0].keys()) == want
        for k, t in zip(want, order):
            assert abs(lp.top_logprobs[0][k] - ref[t]) < 2e-3
    out = subprocess.run([BIN, "run", "--model", MODEL, "--prompt", prompt, "--max-tokens", "6", "--threads", "2",
                          "--json", "--logprobs", "5"], capture_output=True, text=True, timeout=120, check=True)
    cli = json.loads(out.stdout)
    assert [e["text"] for e in cli["logprobs"]] == lp.tokens
    for e, x in zip(cli["logprobs"], lp.token_logprobs):
        assert abs(e["logprob"] - x) < 2e-3
        assert len(e["top_logprobs"]) == 5


def test_streaming_logprobs_equal_non_streaming(server):
    msgs = [{"role": "user", "content": "Tell me a story"}]
    full = client(server).chat.completions.create(model="m", messages=msgs, max_tokens=12, logprobs=True,
                                                  top_logprobs=2, **GREEDY)
    want = [(e.token, round(e.logprob, 4)) for e in full.choices[0].logprobs.content]
    got, text = [], ""
    for ch in client(server).chat.completions.create(model="m", messages=msgs, max_tokens=12, logprobs=True,
                                                     top_logprobs=2, stream=True, **GREEDY):
        if not ch.choices:
            continue
        c = ch.choices[0]
        if c.delta.content:
            text += c.delta.content
            # a chunk with text carries the logprobs of its tokens
            assert c.logprobs is not None and c.logprobs.content
        if c.logprobs and c.logprobs.content:
            got += [(e.token, round(e.logprob, 4)) for e in c.logprobs.content]
            assert all(len(e.top_logprobs) == 2 for e in c.logprobs.content)
    assert got == want
    # completions
    full = client(server).completions.create(model="m", prompt="Once upon a time", max_tokens=10, logprobs=1,
                                             **GREEDY)
    toks, offs = [], []
    for ch in client(server).completions.create(model="m", prompt="Once upon a time", max_tokens=10, logprobs=1,
                                                stream=True, **GREEDY):
        if ch.choices and ch.choices[0].logprobs:
            toks += ch.choices[0].logprobs.tokens
            offs += ch.choices[0].logprobs.text_offset
    assert toks == full.choices[0].logprobs.tokens
    assert offs == full.choices[0].logprobs.text_offset


# ---- penalties and logit_bias ---------------------------------------------------------

def gen_tokens(server, extra, prompt="1, 2, 3, 4,", n=40):
    r = server.post("/v1/completions", {"prompt": prompt, "max_tokens": n, "return_tokens": True, **GREEDY, **extra})
    assert r.status_code == 200, r.text
    return r.json()["choices"][0]["tokens"]


def repeats(toks):
    return len(toks) - len(set(toks))


def test_penalties_reduce_repeats(server):
    base = gen_tokens(server, {})
    assert repeats(base) > 5, base  # the tiny model repeats itself a lot
    freq = gen_tokens(server, {"frequency_penalty": 2})
    pres = gen_tokens(server, {"presence_penalty": 2})
    rep = gen_tokens(server, {"repetition_penalty": 1.8})
    assert repeats(freq) < repeats(base), (freq, base)
    assert repeats(pres) < repeats(base), (pres, base)
    assert repeats(rep) < repeats(base), (rep, base)
    # negative frequency penalty rewards repeats: never fewer than without
    assert repeats(gen_tokens(server, {"frequency_penalty": -2})) >= repeats(base)
    # neutral values change nothing
    assert gen_tokens(server, {"frequency_penalty": 0, "presence_penalty": 0, "repetition_penalty": 1}) == base


def test_logit_bias_bans_and_forces(server):
    base = gen_tokens(server, {}, n=8)
    first = base[0]
    banned = gen_tokens(server, {"logit_bias": {str(first): -100}}, n=8)
    assert first not in banned, (first, banned)
    forced = gen_tokens(server, {"logit_bias": {"1000": 100}}, n=5)
    assert forced == [1000] * 5
    # sampling too
    r = server.post("/v1/chat/completions", {"messages": [{"role": "user", "content": "hi"}], "max_tokens": 4,
                                             "temperature": 1.0, "seed": 3, "logit_bias": {"1000": 100},
                                             "return_tokens": True})
    assert r.status_code == 200 and r.json()["choices"][0]["tokens"] == [1000] * 4, r.text
    # logprobs stay the raw model's: the forced token is not at probability 1
    r = client(server).completions.create(model="m", prompt="Hello", max_tokens=1, logprobs=1,
                                          logit_bias={"1000": 100}, **GREEDY)
    assert r.choices[0].logprobs.token_logprobs[0] < -0.5


# ---- validation -----------------------------------------------------------------------

@pytest.mark.parametrize("route,extra,param", [
    ("chat", {"logprobs": True, "top_logprobs": 21}, "top_logprobs"),
    ("chat", {"top_logprobs": 2}, "top_logprobs"),
    ("chat", {"logprobs": False, "top_logprobs": 2}, "top_logprobs"),
    ("chat", {"logprobs": 3}, "logprobs"),
    ("compl", {"logprobs": 21}, "logprobs"),
    ("compl", {"logprobs": True}, "logprobs"),
    ("compl", {"top_logprobs": 2}, "top_logprobs"),
    ("chat", {"presence_penalty": 2.5}, "presence_penalty"),
    ("compl", {"frequency_penalty": -2.01}, "frequency_penalty"),
    ("chat", {"frequency_penalty": "1"}, "frequency_penalty"),
    ("chat", {"repetition_penalty": 0}, "repetition_penalty"),
    ("compl", {"repetition_penalty": -1}, "repetition_penalty"),
    ("chat", {"logit_bias": {"abc": 1}}, "logit_bias"),
    ("chat", {"logit_bias": {"1.5": 1}}, "logit_bias"),
    ("compl", {"logit_bias": {"-1": 1}}, "logit_bias"),
    ("compl", {"logit_bias": {"VOCAB": 1}}, "logit_bias"),
    ("chat", {"logit_bias": {"5": 100.5}}, "logit_bias"),
    ("chat", {"logit_bias": {"5": -101}}, "logit_bias"),
    ("chat", {"logit_bias": {"5": "x"}}, "logit_bias"),
    ("chat", {"logit_bias": [1, 2]}, "logit_bias"),
])
def test_validation_400(server, route, extra, param):
    if "logit_bias" in extra and "VOCAB" in extra["logit_bias"]:
        extra = {"logit_bias": {str(n_vocab(server)): 1}}
    body = {"max_tokens": 2, **extra}
    if route == "chat":
        path, body["messages"] = "/v1/chat/completions", [{"role": "user", "content": "hi"}]
    else:
        path, body["prompt"] = "/v1/completions", "hi"
    r = server.post(path, body)
    assert r.status_code == 400, r.text
    assert r.json()["error"]["param"] == param, r.text


def test_accepted_neutral_and_bounds(server):
    for extra in ({"logit_bias": {}}, {"logprobs": False}, {"logprobs": True, "top_logprobs": 20},
                  {"presence_penalty": -2, "frequency_penalty": 2}, {"logit_bias": {"0": -100, "7": 100}}):
        r = server.post("/v1/chat/completions", {"messages": [{"role": "user", "content": "hi"}], "max_tokens": 2,
                                                 **extra})
        assert r.status_code == 200, (extra, r.text)


# ---- the Python package --------------------------------------------------------------

def test_python_generate_options():
    pl = pocketllm_pkg()
    with pl.Model(MODEL, threads=2) as m:
        base = m.generate("1, 2, 3, 4,", max_tokens=30)
        freq = m.generate("1, 2, 3, 4,", max_tokens=30, frequency_penalty=2)
        assert repeats(freq.tokens) < repeats(base.tokens)
        forced = m.generate("hi", max_tokens=3, logit_bias={1000: 100})
        assert forced.tokens == [1000] * 3
        c = m.generate("The capital of France is", max_tokens=3, logprobs=4)
        assert base.logprobs is None and len(c.logprobs) == 3
        ref = log_softmax(m.logits("The capital of France is"))
        assert abs(c.logprobs[0]["logprob"] - ref.max()) < 1e-4
        assert [t["token"] for t in c.logprobs[0]["top_logprobs"]] == list(np.argsort(-ref, kind="stable")[:4])


# ---- NaN logits -----------------------------------------------------------------------

def nan_model(path):
    """tiny-qwen3-f32 with one NaN in output_norm.weight: every logit NaN
    (tests/cli/silent_wrong.sh's nan-norm, walking the GGUF header)."""
    b = bytearray(open(os.path.join(FIX, "models", "tiny-qwen3-f32.gguf"), "rb").read())
    p = 24
    n_tensors, n_kv = struct.unpack_from("<QQ", b, 8)
    sizes = {0: 1, 1: 1, 2: 2, 3: 2, 4: 4, 5: 4, 6: 4, 7: 1, 10: 8, 11: 8, 12: 8}

    def rstr(p):
        n, = struct.unpack_from("<Q", b, p)
        return bytes(b[p + 8:p + 8 + n]), p + 8 + n
    align = 32
    for _ in range(n_kv):
        key, p = rstr(p)
        t, = struct.unpack_from("<I", b, p)
        p += 4
        if t == 9:
            et, n = struct.unpack_from("<IQ", b, p)
            p += 12
            for _ in range(n):
                if et == 8:
                    _, p = rstr(p)
                else:
                    p += sizes[et]
        elif t == 8:
            _, p = rstr(p)
        else:
            if key == b"general.alignment":
                align, = struct.unpack_from("<I", b, p)
            p += sizes[t]
    tensors = {}
    for _ in range(n_tensors):
        name, p = rstr(p)
        nd, = struct.unpack_from("<I", b, p)
        p += 4 + 8 * nd
        typ, off = struct.unpack_from("<IQ", b, p)
        p += 12
        tensors[name] = (typ, off)
    data = (p + align - 1) // align * align
    typ, off = tensors[b"output_norm.weight"]
    assert typ == 0
    struct.pack_into("<f", b, data + off + 4 * 17, float("nan"))
    open(path, "wb").write(b)


def test_nan_logits_fail_with_500(make_server, tmp_path):
    path = str(tmp_path / "nan.gguf")
    nan_model(path)
    s = make_server("--model", path)
    for body in ({"prompt": "Hello", "max_tokens": 4, **GREEDY}, {"prompt": "Hello", "max_tokens": 4, "temperature": 0.8}):
        r = s.post("/v1/completions", body)
        assert r.status_code == 500, r.text
        assert "NaN/Inf logits" in r.json()["error"]["message"], r.text
    r = s.post("/v1/chat/completions", {"messages": [{"role": "user", "content": "hi"}], "max_tokens": 4,
                                        "stream": True}, stream=True)
    events = sse_events(r)
    assert any("NaN/Inf logits" in e for e in events), events
    assert "[DONE]" not in events
    # the server keeps serving
    assert s.post("/v1/completions", {"prompt": "Hello", "max_tokens": 2}).status_code == 500


def test_python_sampler_raises_on_nan():
    pl = pocketllm_pkg()
    s = pl.Sampler(16)
    row = np.zeros(16, dtype=np.float32)
    row[3] = np.nan
    with pytest.raises(pl.PocketLLMError, match="NaN/Inf logits"):
        s.sample(row)
    row[3] = 1
    assert s.sample(row) == 3


def test_chat_repl_reports_nan(tmp_path):
    """`run --chat` (the interactive chat) names the NaN/Inf logits instead of
    feeding token -1 on to the model."""
    path = str(tmp_path / "nan.gguf")
    nan_model(path)
    out = subprocess.run([BIN, "run", "--model", path, "--chat", "--threads", "2", "--max-tokens", "4"],
                         input="hi\n/exit\n", capture_output=True, text=True, timeout=120)
    assert "NaN/Inf logits" in out.stderr, out.stderr
    assert "out of range" not in out.stderr, out.stderr


def test_run_flags():
    """`pocketllm run` takes the same options; --json keeps its keys and adds
    "logprobs" only when asked."""
    def run(*extra, n=40, prompt="1, 2, 3, 4,"):
        out = subprocess.run([BIN, "run", "--model", MODEL, "--prompt", prompt, "--max-tokens", str(n), "--threads",
                              "2", "--json", *extra], capture_output=True, text=True, timeout=120)
        assert out.returncode == 0, out.stderr
        return json.loads(out.stdout)
    base = run()
    assert "logprobs" not in base
    assert repeats(run("--frequency-penalty", "2")["tokens"]) < repeats(base["tokens"])
    assert repeats(run("--presence-penalty", "2")["tokens"]) < repeats(base["tokens"])
    assert repeats(run("--repeat-penalty", "1.8")["tokens"]) < repeats(base["tokens"])
    assert run("--logit-bias", "1000=100", "--logit-bias", "7=1", n=3)["tokens"] == [1000] * 3
    assert base["tokens"][0] not in run("--logit-bias", f"{base['tokens'][0]}=-100", n=8)["tokens"]
    for bad in (["--logit-bias", "5"], ["--logit-bias", "99999999=1"], ["--frequency-penalty", "3"],
                ["--logprobs", "21"], ["--repeat-penalty", "0"]):
        out = subprocess.run([BIN, "run", "--model", MODEL, "--prompt", "hi", "--json", *bad], capture_output=True,
                             text=True, timeout=120)
        assert out.returncode == 1 and out.stdout == "", (bad, out.stderr)
