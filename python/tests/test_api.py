"""The Pythonic API: tokenizer, generation, streaming, sampling, logits,
sessions, lifetimes, errors (raised with the C library's message), and the
console entry point."""
import gc
import os
import subprocess
import sys
import threading

import numpy as np
import pytest

import pocketllm
from pocketllm import native
from conftest import load_golden, model_path


# ---- tokenizer -------------------------------------------------------------------


@pytest.mark.parametrize("golden,model", [("tiny-qwen3.tok", "tiny-qwen3-f16"), ("qwen3-vocab.tok", "qwen3-vocab")])
def test_tokenize_matches_golden(golden, model):
    g = load_golden(golden)
    with pocketllm.Model(model_path(model), vocab_only=True) as m:
        assert m.n_vocab == g["n_vocab"]
        for case in g["cases"]:
            ids = m.tokenize(case["prompt"], special=True)
            assert ids == case["tokens"], case["prompt"]
            # bytes in, same ids out; detokenize renders the text back
            assert m.tokenize(case["prompt"].encode()) == ids
            assert m.detokenize(ids) == case["prompt"], case["prompt"]


def test_tokenize_special_flag(tiny):
    text = "<|im_start|>user"
    with_special = tiny.tokenize(text, special=True)
    plain = tiny.tokenize(text, special=False)
    assert with_special[0] == 8193 and len(plain) > len(with_special)
    assert tiny.detokenize(with_special, special=False) == "user"
    assert tiny.detokenize(with_special, special=True) == text
    assert tiny.token_to_piece(8193, special=True) == b"<|im_start|>"
    assert tiny.token_to_piece(8193, special=False) == b""
    assert tiny.is_eog(8194) and not tiny.is_eog(100)
    assert tiny.tokenize("") == []
    assert tiny.tokenize("hi", add_bos=True)[0] == tiny.meta("tokenizer.ggml.bos_token_id")


# ---- generation ------------------------------------------------------------------


def test_generate_result(tiny):
    g = load_golden("tiny-qwen3-q4_k_m")["cases"][0]
    c = tiny.generate(g["prompt"], max_tokens=3)
    assert c.tokens == g["greedy"][:3]
    assert str(c) == c.text == tiny.detokenize(c.tokens, special=False)
    assert c.finish_reason == "length"
    assert c.usage.prompt_tokens == len(g["tokens"]) and c.usage.completion_tokens == 3
    assert c.usage.total_tokens == len(g["tokens"]) + 3
    assert c.usage.as_dict()["total_tokens"] == c.usage.total_tokens
    assert c.prompt_tokens == g["tokens"]
    # token ids as the prompt give the same
    assert tiny.generate(g["tokens"], max_tokens=3).tokens == c.tokens
    assert tiny.generate(g["prompt"], max_tokens=0).tokens == []


def test_stream_equals_generate(tiny):
    prompt = "你好，世界"
    c = tiny.generate(prompt, max_tokens=24)
    st = tiny.stream(prompt, max_tokens=24)
    pieces = list(st)
    assert "".join(pieces) == c.text == st.completion.text
    assert st.completion.tokens == c.tokens
    assert all(p for p in pieces)
    # every piece is whole UTF-8: re-encoding each and joining gives the text's bytes
    assert b"".join(p.encode("utf-8") for p in pieces) == c.text.encode("utf-8")


class _Scripted:
    """A stand-in sampler that picks a fixed token sequence."""

    def __init__(self, toks):
        self.toks = iter(toks)

    def sample(self, logits):
        return next(self.toks)

    def close(self):
        pass


def _scripted_stream(m, prompt, toks, stop=()):
    st = pocketllm.Stream(iter(()))
    s = m.session()
    st._owned = [s]
    st._gen = m._run(st, s, _Scripted(toks), m.tokenize(prompt), len(toks), list(stop), False)
    return st


def test_stream_never_splits_utf8(tiny):
    """Characters whose bytes span several tokens come out whole."""
    byte_tok = {tiny.token_to_piece(t): t for t in range(tiny.n_vocab) if len(tiny.token_to_piece(t)) == 1}
    e1, e2 = byte_tok[b"\xc3"], byte_tok[b"\xa9"]          # "é" = C3 A9
    a = tiny.tokenize("a")[0]
    assert tiny.detokenize([e1, e2]) == "é"
    st = _scripted_stream(tiny, "Hi", [e1, e2, a, e1, e2])
    assert list(st) == ["é", "a", "é"]
    assert st.completion.text == "éaé" and st.completion.tokens == [e1, e2, a, e1, e2]
    # a character still incomplete at the end becomes U+FFFD, once
    st = _scripted_stream(tiny, "Hi", [a, e1])
    assert list(st) == ["a", "\ufffd"]
    # a stop string is held back until it is known not to complete
    st = _scripted_stream(tiny, "Hi", [a, e1, e2, a], stop=["éb"])
    assert list(st) == ["a", "éa"] and st.completion.finish_reason == "length"
    st = _scripted_stream(tiny, "Hi", [a, e1, e2, a], stop=["éa"])
    assert list(st) == ["a"] and st.completion.finish_reason == "stop" and st.completion.text == "a"
    # real generations: pieces are whole characters and join to the text
    for case in load_golden("tiny-qwen3-q4_k_m")["cases"]:
        st = tiny.stream(case["prompt"], max_tokens=24)
        pieces = list(st)
        assert "".join(pieces) == st.completion.text
        assert all("\ud800" > p[-1:] or p[-1:] > "\udfff" for p in pieces)


def test_stop_strings(tiny):
    full = tiny.generate("Hello, my name is", max_tokens=16).text
    assert len(full) > 6
    stop = full[3:6]
    c = tiny.generate("Hello, my name is", max_tokens=16, stop=[stop, "\x00never"])
    assert c.finish_reason == "stop"
    assert c.text == full[:full.index(stop)]
    st = tiny.stream("Hello, my name is", max_tokens=16, stop=stop)
    pieces = list(st)
    assert "".join(pieces) == c.text and st.completion.finish_reason == "stop"
    assert all(stop not in p for p in pieces)
    # a stop string that never appears changes nothing
    assert tiny.generate("Hello, my name is", max_tokens=16, stop="\x01\x02").text == full


def test_sampling_is_seeded(tiny):
    kw = dict(max_tokens=12, temperature=0.9, top_k=50, top_p=0.95, min_p=0.0)
    a = tiny.generate("Once upon a time", seed=7, **kw)
    b = tiny.generate("Once upon a time", seed=7, **kw)
    assert a.tokens == b.tokens
    others = {tuple(tiny.generate("Once upon a time", seed=s, **kw).tokens) for s in range(8, 14)}
    assert len(others | {tuple(a.tokens)}) > 1
    # the same draws as the C sampler fed the same logits
    with tiny.session() as s, tiny.sampler(temperature=0.9, top_k=50, top_p=0.95, min_p=0.0, seed=7) as smp:
        logits = s.eval(tiny.tokenize("Once upon a time"))
        toks = []
        for _ in range(12):
            t = smp.sample(logits)
            toks.append(t)
            logits = s.eval([t])
    assert toks == a.tokens


def test_max_tokens_none_stops_at_context():
    with pocketllm.Model(model_path("tiny-qwen3-q8_0"), ctx=16) as m:
        ids = m.tokenize("The capital of France is")
        c = m.generate(ids, max_tokens=None, ignore_eos=True)
        assert c.finish_reason == "length"
        assert len(ids) + len(c.tokens) == 17   # the last sampled token is never fed back


def test_logits(tiny_f32):
    case = load_golden("tiny-qwen3-f32")["cases"][1]
    last = tiny_f32.logits(case["tokens"])
    assert last.shape == (tiny_f32.n_vocab,) and last.dtype == np.float32
    assert int(np.argmax(last)) == case["greedy"][0]
    top = case["steps"][0]["top"]
    np.testing.assert_allclose(last[[t for t, _ in top]], [v for _, v in top], atol=0.1)
    every = tiny_f32.logits(case["tokens"], all_positions=True)
    assert every.shape == (len(case["tokens"]), tiny_f32.n_vocab)
    np.testing.assert_allclose(every[-1], last, atol=1e-4)
    assert np.array_equal(tiny_f32.logits(case["prompt"]), last)


def test_session_api(tiny):
    ids = tiny.tokenize("The capital of France is")
    with tiny.session() as s:
        assert s.pos == 0
        a = s.eval(ids)
        assert s.pos == len(ids)
        assert s.eval([5], logits=False) is None and s.pos == len(ids) + 1
        s.reset()
        assert s.pos == 0
        buf = np.zeros(tiny.n_vocab, dtype=np.float32)
        assert s.eval(ids, buf) is buf
        np.testing.assert_array_equal(a, buf)


def test_forward_batch():
    """pl_model_forward: two sequences in one batch give each sequence's own logits."""
    with pocketllm.Model(model_path("tiny-qwen3-f32"), ctx=64, sequences=2) as m:
        a = m.tokenize("The capital of France is")
        b = m.tokenize("Hello, my name is")
        want_a, want_b = m.logits(a), m.logits(b)
        out = m.forward(a + b, list(range(len(a))) + list(range(len(b))), [0] * len(a) + [1] * len(b),
                        [False] * (len(a) - 1) + [True] + [False] * (len(b) - 1) + [True])
        assert out.shape == (2, m.n_vocab)
        np.testing.assert_allclose(out[0], want_a, atol=1e-3)
        np.testing.assert_allclose(out[1], want_b, atol=1e-3)
        last = m.forward(a, list(range(len(a))), 0)
        np.testing.assert_allclose(last[0], want_a, atol=1e-3)
        with pytest.raises(pocketllm.InvalidArgumentError) as e:
            m.forward([1], [0], 5)
        check_c_error(e, pocketllm.InvalidArgumentError, "slot")


def test_model_properties(tiny):
    assert tiny.arch == "qwen3" and tiny.device == "cpu" and tiny.n_ctx == 512
    plan = tiny.memory_plan
    assert plan["total"] == plan["weights"] + plan["kv_cache"] + plan["scratch"] > 0
    assert tiny.n_params > 0 and tiny.info["n_threads"] >= 1
    assert tiny.meta("general.architecture") == "qwen3"
    assert tiny.meta("qwen3.block_count") == 2
    assert tiny.meta("no.such.key", 5) == 5
    assert isinstance(tiny.meta("tokenizer.ggml.tokens"), list)
    assert "tiny-qwen3-q4_k_m" in repr(tiny)
    assert pocketllm.library_version() == native.version()


def test_default_ctx_and_threads():
    with pocketllm.Model(model_path("tiny-qwen3-q8_0"), device="ref", threads=1, ctx=None) as m:
        assert m.device == "ref" and m.info["n_threads"] == 1
        assert 0 < m.n_ctx <= 4096


# ---- lifetimes -------------------------------------------------------------------


def test_close_and_context_manager():
    m = pocketllm.Model(model_path("tiny-qwen3-q8_0"), ctx=64)
    st = m.stream("Hello", max_tokens=4)
    next(st)
    m.close()
    assert m.closed and "closed" in repr(m)
    m.close()   # idempotent
    with pytest.raises(pocketllm.InvalidArgumentError, match="closed"):
        m.tokenize("x")
    with pytest.raises(pocketllm.InvalidArgumentError):
        list(st)   # its session was closed with the model
    with pocketllm.Model(model_path("tiny-qwen3-q8_0"), ctx=64) as m2:
        assert m2.generate("Hi", max_tokens=1).tokens
    assert m2.closed


def test_slots_are_released():
    with pocketllm.Model(model_path("tiny-qwen3-q8_0"), ctx=64) as m:
        st = m.stream("Hello", max_tokens=4)
        with pytest.raises(pocketllm.InvalidArgumentError, match="slots"):
            m.session()   # one slot, held by the stream
        st.close()
        with m.session():
            pass
        # an abandoned stream gives its slot back when collected
        st = m.stream("Hello", max_tokens=4)
        next(st)
        del st
        gc.collect()
        assert m.generate("Hello", max_tokens=2).tokens
    with pocketllm.Model(model_path("tiny-qwen3-q8_0"), ctx=64, sequences=2) as m:
        with m.session() as a, m.session() as b:
            np.testing.assert_array_equal(a.eval([1, 2, 3]), b.eval([1, 2, 3]))


def test_del_is_safe():
    m = pocketllm.Model(model_path("tiny-qwen3-q8_0"), ctx=64, sequences=2)
    s = m.session()
    st = m.stream("Hi", max_tokens=2)
    del m
    gc.collect()
    del s, st
    gc.collect()
    # a half-built Model (load failed) is also safe to collect
    with pytest.raises(pocketllm.PocketLLMError):
        pocketllm.Model("/nonexistent.gguf")
    gc.collect()


def test_threads_share_a_model():
    with pocketllm.Model(model_path("tiny-qwen3-q8_0"), ctx=64, sequences=4) as m:
        want = m.generate("Hello", max_tokens=6).tokens
        out, errs = [], []

        def work():
            try:
                out.append(m.generate("Hello", max_tokens=6).tokens)
            except Exception as e:  # pragma: no cover
                errs.append(e)

        ts = [threading.Thread(target=work) for _ in range(4)]
        for t in ts:
            t.start()
        for t in ts:
            t.join()
        assert not errs and out == [want] * 4


# ---- errors ----------------------------------------------------------------------


def check_c_error(excinfo, cls, fragment):
    e = excinfo.value
    assert isinstance(e, cls) and isinstance(e, pocketllm.PocketLLMError)
    assert e.status == cls.status
    assert str(e) == native.last_error(), "the message is pl_last_error()'s"
    assert fragment in str(e)


def test_error_missing_file(tmp_path):
    with pytest.raises(pocketllm.FileIOError) as e:
        pocketllm.Model(tmp_path / "nope.gguf")
    check_c_error(e, pocketllm.FileIOError, "nope.gguf")
    assert isinstance(e.value, OSError) and e.value.status_name == "PL_ERR_IO"


def test_error_not_gguf(tmp_path):
    p = tmp_path / "junk.gguf"
    p.write_bytes(b"this is not a gguf file at all" * 4)
    with pytest.raises(pocketllm.FormatError) as e:
        pocketllm.Model(p)
    check_c_error(e, pocketllm.FormatError, "junk.gguf")


def test_error_bad_device():
    with pytest.raises(pocketllm.UnsupportedError) as e:
        pocketllm.Model(model_path("tiny-qwen3-q8_0"), device="warp-drive")
    check_c_error(e, pocketllm.UnsupportedError, "warp-drive")


def test_error_vocab_only_file():
    with pytest.raises(pocketllm.PocketLLMError) as e:
        pocketllm.Model(model_path("qwen3-vocab"))
    assert str(e.value) == native.last_error() and str(e.value)
    with pocketllm.Model(model_path("qwen3-vocab"), vocab_only=True) as m:
        with pytest.raises(pocketllm.InvalidArgumentError) as e:
            m.generate("hi", max_tokens=1)
        check_c_error(e, pocketllm.InvalidArgumentError, "vocab-only")


def test_error_token_out_of_range(tiny):
    with pytest.raises(pocketllm.InvalidArgumentError) as e:
        tiny.logits([1, 999999])
    check_c_error(e, pocketllm.InvalidArgumentError, "999999")
    with pytest.raises(pocketllm.InvalidArgumentError):
        tiny.token_to_piece(10**6)
    with pytest.raises(pocketllm.InvalidArgumentError):
        tiny.detokenize([10**6])


def test_error_context_full():
    with pocketllm.Model(model_path("tiny-qwen3-q8_0"), ctx=8) as m:
        ids = m.tokenize("Once upon a time, in a land far away, there lived a")
        assert len(ids) > 8
        with pytest.raises(pocketllm.ContextFullError) as e:
            m.generate(ids, max_tokens=2)
        check_c_error(e, pocketllm.ContextFullError, "context")


def test_error_sampler_params(tiny):
    with pytest.raises(pocketllm.InvalidArgumentError) as e:
        tiny.generate("Hi", max_tokens=2, temperature=1.0, min_p=2.0)
    check_c_error(e, pocketllm.InvalidArgumentError, "sampler")


def test_error_memory_budget():
    with pytest.raises(pocketllm.DoesNotFitError) as e:
        pocketllm.Model(model_path("tiny-qwen3-q8_0"), memory_budget=1024)
    check_c_error(e, pocketllm.DoesNotFitError, "budget")


def test_python_side_errors(tiny):
    with pytest.raises(pocketllm.InvalidArgumentError, match="empty"):
        tiny.generate("")
    with pytest.raises(ValueError):
        tiny.generate("x", max_tokens=-1)
    with pytest.raises(pocketllm.InvalidArgumentError):
        pocketllm.Model(model_path("tiny-qwen3-q8_0"), ctx=-5)
    with pytest.raises(pocketllm.InvalidArgumentError):
        tiny.tokenize(123)


def test_library_not_found(tmp_path):
    code = ("import pocketllm\n"
            "try:\n    pocketllm.Model('x.gguf')\n"
            "except pocketllm.LibraryNotFoundError as e:\n    print('OK', e)\n")
    env = dict(os.environ, POCKETLLM_LIB=str(tmp_path / "nothing-here.so"))
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True)
    assert out.stdout.startswith("OK") and "POCKETLLM_LIB" in out.stdout, out.stderr


# ---- console entry point -----------------------------------------------------------


def test_cli_entry_point():
    """python -m pocketllm runs the same C command-line tool."""
    golden = load_golden("tiny-qwen3-q4_k_m")["cases"][0]
    out = subprocess.run([sys.executable, "-m", "pocketllm", "run", "--model", model_path("tiny-qwen3-q4_k_m"),
                          "--prompt", golden["prompt"], "--max-tokens", "4", "--json"],
                         capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    import json
    res = json.loads(out.stdout)
    assert res["prompt_tokens"] == golden["tokens"]
    with pocketllm.Model(model_path("tiny-qwen3-q4_k_m"), ctx=512) as m:
        assert res["tokens"] == m.generate(golden["prompt"], max_tokens=4).tokens
    bad = subprocess.run([sys.executable, "-m", "pocketllm", "run", "--model", "/nonexistent.gguf", "--prompt", "x"],
                         capture_output=True, text=True, timeout=60)
    assert bad.returncode != 0 and "nonexistent.gguf" in bad.stderr
