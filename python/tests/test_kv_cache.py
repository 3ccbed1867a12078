"""Quantized KV caches through the Python API (Model(cache_type_k=...,
cache_type_v=...)): greedy generation reproduces llama.cpp run with the same
cache types (tests/fixtures/golden/kv, made with the reference's default
Hadamard rotation), by the rule of the C suite's kv fixtures (test_golden.c):
M = 0.25 for a q8_0 cache, 1.0 for q4_0, on f16 weights."""
import json

import pytest

import pocketllm
from conftest import GOLDEN, model_path
from test_golden import compare

KV_MARGIN = {"q8_0": 0.25, "q4_0": 1.0}


@pytest.mark.parametrize("name,ctype", [("tiny-qwen3-f16", "q8_0"), ("tiny-qwen3-f16", "q4_0"),
                                        ("tiny-qwen3-untied-f16", "q8_0"), ("tiny-qwen3-untied-f16", "q4_0")])
def test_greedy_matches_kv_golden(name, ctype):
    golden = json.loads((GOLDEN / "kv" / f"{name}-kv{ctype}.json").read_text())
    failures = []
    with pocketllm.Model(model_path(name), ctx=512, cache_type_k=ctype, cache_type_v=ctype) as m:
        for case in golden["cases"]:
            c = m.generate(case["prompt"], max_tokens=len(case["greedy"]), temperature=0, ignore_eos=True)
            msg = compare(case, c.tokens, KV_MARGIN[ctype])
            if msg:
                failures.append(f"{case['prompt']!r}: {msg}")
    assert not failures, "\n".join(failures)


def test_cache_type_changes_the_plan():
    """A q8_0 cache takes 34/64 of the f16 one's bytes, q4_0 18/64 (blocks of 32)."""
    sizes = {}
    for t in ("f16", "q8_0", "q4_0"):
        with pocketllm.Model(model_path("tiny-qwen3-f16"), ctx=512, cache_type_k=t, cache_type_v=t) as m:
            sizes[t] = m.info["memory_plan"]["kv_cache"]
    assert sizes["q8_0"] * 64 == sizes["f16"] * 34
    assert sizes["q4_0"] * 64 == sizes["f16"] * 18


@pytest.mark.parametrize("bad", ["q5_0", "F16", ""])
def test_unknown_cache_type(bad):
    with pytest.raises(pocketllm.InvalidArgumentError):
        pocketllm.Model(model_path("tiny-qwen3-f16"), ctx=64, cache_type_k=bad)


@pytest.mark.parametrize("ctype", [None, "q8_0", "q4_0"])
def test_fit_cache_types_match_cli(ctype):
    """pocketllm.fit with cache types gives `pocketllm fit --json -ctk -ctv`'s plan,
    with each rung's cache types and longest context."""
    import subprocess
    from test_quant_api import _comparable, cli
    src = model_path("tiny-qwen3-q4_k_m")
    kw = {"cache_type_k": ctype, "cache_type_v": ctype} if ctype else {}
    plan = pocketllm.fit(src, memory=12 << 20, n_ctx=512, threads=2, **kw)
    args = ["-ctk", ctype, "-ctv", ctype] if ctype else []
    r = cli("fit", "--model", src, "--memory", str(12 << 20), "--ctx", "512", "--threads", "2", "--json", *args)
    assert r.returncode in (0, 3), r.stderr
    assert _comparable(plan) == json.loads(r.stdout)
    for g in plan["rungs"]:
        if ctype:
            assert (g["cache_type_k"], g["cache_type_v"]) == (ctype, ctype)
        assert g["max_ctx"] >= 0


def test_kv_read_write_restores_a_slot():
    """Model.kv_read / kv_write (pl_model_kv_read / _write): a slot's rows
    copied into another slot that held other tokens decode bit-identically;
    a prefix of the bytes restores a prefix of the positions; bad sizes and
    gaps raise with the slot unchanged."""
    import numpy as np
    n = 30
    toks = [(i * 7919 + 13) % 5000 for i in range(n)]
    other = [(i * 104729 + 7) % 5000 for i in range(n)]
    with pocketllm.Model(model_path("tiny-qwen3-f16"), ctx=64, sequences=2) as m:
        m.forward(toks, list(range(n)), 0)
        rows = m.kv_read(0, 0, n)
        assert len(rows) % n == 0 and len(rows) > 0
        ref = m.forward([1], [n], 0)
        m.forward(other, list(range(n)), 1)
        stale = m.forward([1], [n], 1)
        m.kv_write(1, 0, rows)
        assert m.kv_len(1) == n
        assert m.kv_read(1, 0, n) == rows
        got = m.forward([1], [n], 1)
        assert np.array_equal(got, ref)
        assert not np.allclose(stale, ref)  # the slot really held something else
        # The first 10 positions' bytes are the rows of positions 0..9.
        per = len(rows) // n
        m.kv_truncate(1, 0)
        m.kv_write(1, 0, rows[:10 * per])
        assert m.kv_len(1) == 10 and m.kv_read(1, 0, 10) == rows[:10 * per]
        with pytest.raises(pocketllm.InvalidArgumentError, match="whole number"):
            m.kv_write(1, 0, rows[:per + 1])
        with pytest.raises(pocketllm.InvalidArgumentError, match="gap"):
            m.kv_write(1, 11, rows[:per])
        with pytest.raises(pocketllm.InvalidArgumentError):
            m.kv_read(1, 0, 11)
        assert m.kv_len(1) == 10
