"""pocketllm.quantize / fit / quant_types: the library's public API gives
what the CLI gives (the same file bytes, the same plan as `pocketllm fit
--json`)."""
import json
import subprocess

import pytest

import pocketllm
from pocketllm import native
from conftest import model_path


def cli(*args, cwd=None):
    return subprocess.run([str(native.find_cli()), *args], capture_output=True, text=True, cwd=cwd)


def test_quant_types(fixtures_dir):
    types = pocketllm.quant_types()
    by = {t["name"]: t for t in types}
    assert types[0]["name"] == "F32" and "Q4_K_M" in by and "TQ1_0" in by
    assert by["Q4_K_M"]["base_type"] == "q4_K" and by["Q4_K_M"]["bits_per_weight"] == 4.5
    assert by["Q4_K_M"]["ftype"] == 15 and not by["Q4_K_M"]["needs_imatrix"]
    assert by["IQ2_XXS"]["needs_imatrix"] and by["Q8_0"]["bits_per_weight"] == 8.5
    tt = {t["name"]: t for t in pocketllm.tensor_types()}
    assert tt["q8_0"]["block_size"] == 32 and tt["q6_K"]["block_size"] == 256 and tt["iq1_s"]["needs_imatrix"]


@pytest.mark.parametrize("mix,overrides", [("Q4_K_M", None), ("Q8_0", {"ffn_down": "q6_K", r"blk\.1\.attn_v": "f16"})])
def test_quantize_matches_cli(fixtures_dir, tmp_path, mix, overrides):
    src = model_path("tiny-qwen3-f16")
    py_out, cli_out = tmp_path / "py.gguf", tmp_path / "cli.gguf"
    text = []
    stats = pocketllm.quantize(src, py_out, mix, overrides=overrides, threads=2, log=text.append)
    args = ["quantize", src, str(cli_out), mix, "--threads", "2", "--quiet"]
    for pat, typ in (overrides or {}).items():
        args += ["--tensor-type", f"{pat}={typ}"]
    r = cli(*args)
    assert r.returncode == 0, r.stderr
    assert py_out.read_bytes() == cli_out.read_bytes()
    assert stats["n_tensors"] == 24 and 0 < stats["n_quantized"] < 24 and stats["file_size"] == py_out.stat().st_size
    assert "converting to" in "".join(text)
    if mix == "Q4_K_M":  # and the CLI's is llama-quantize's (tests/cli/ladder.sh)
        assert py_out.read_bytes() == (fixtures_dir / "models" / "tiny-qwen3-q4_k_m.gguf").read_bytes()
    else:
        with pocketllm.gguf.GGUFFile(py_out) as f:
            types = {t.name: t.type.name for t in f.tensors}
        assert types["blk.0.ffn_down.weight"] == "Q6_K" and types["blk.1.attn_v.weight"] == "F16"
        assert types["blk.0.attn_v.weight"] == "Q8_0" and types["blk.0.attn_norm.weight"] == "F32"


def test_quantize_with_imatrix_matches_fixture(fixtures_dir, tmp_path, monkeypatch):
    # llama-quantize recorded the imatrix path as given: the same relative name
    monkeypatch.chdir(fixtures_dir / "models")
    out = tmp_path / "iq2.gguf"
    pocketllm.quantize("tiny-qwen3-f16.gguf", out, "IQ2_XXS", imatrix="tiny-imatrix.gguf", threads=2)
    assert out.read_bytes() == (fixtures_dir / "models" / "tiny-qwen3-iq2_xxs.gguf").read_bytes()


def test_quantize_errors(fixtures_dir, tmp_path):
    src = model_path("tiny-qwen3-f16")
    with pytest.raises(pocketllm.InvalidArgumentError):
        pocketllm.quantize(src, tmp_path / "x.gguf", "Q9_X")
    with pytest.raises(pocketllm.InvalidArgumentError, match="importance matrix"):
        pocketllm.quantize(src, tmp_path / "x.gguf", "IQ2_XXS")
    with pytest.raises(pocketllm.InvalidArgumentError, match="q9_9"):
        pocketllm.quantize(src, tmp_path / "x.gguf", "Q8_0", overrides=[("ffn", "q9_9")])
    with pytest.raises(pocketllm.FileIOError):
        pocketllm.quantize(str(tmp_path / "missing.gguf"), tmp_path / "x.gguf", "Q8_0")


def _comparable(plan):
    """The --json fields, bpw as the CLI prints it (4 decimals)."""
    out = {k: v for k, v in plan.items() if k not in ("chosen", "reason")}
    out["rungs"] = [{k: (round(v, 4) if k == "bpw" else v) for k, v in g.items()} for g in plan["rungs"]]
    return out


@pytest.mark.parametrize("memory", [1 << 30, 12_700_000, 3_000_000])
def test_fit_matches_cli_json(fixtures_dir, memory):
    src = model_path("tiny-qwen3-f16")
    plan = pocketllm.fit(src, memory=memory, threads=2)
    r = cli("fit", "--model", src, "--memory", str(memory), "--threads", "2", "--json")
    assert r.returncode in (0, 3), r.stderr
    assert _comparable(plan) == json.loads(r.stdout)
    chosen = plan["chosen"]
    if chosen < 0:
        assert plan["reason"] == "none_fits" and plan["plan"] is None and r.returncode == 3
    elif chosen == 0:
        assert plan["reason"] == "as_is"
    else:
        g = plan["rungs"][chosen]
        assert g["fits"] and not plan["rungs"][chosen - 1]["fits"]
        assert plan["reason"] == ("quantize_imatrix" if g["needs_imatrix"] else "quantize")


def test_fit_preset_matches_cli(fixtures_dir):
    vocab = model_path("qwen3-vocab")
    plan = pocketllm.fit(preset="1.7b", vocab=vocab, memory=2 << 30, threads=2)
    r = cli("fit", "--preset", "1.7b", "--vocab", vocab, "--memory", "2G", "--threads", "2", "--json")
    assert _comparable(plan) == json.loads(r.stdout)
    assert plan["model"] == "qwen3-1.7b (preset)" and plan["reason"] in ("quantize", "quantize_imatrix")


def test_fit_errors(fixtures_dir):
    with pytest.raises(pocketllm.FileIOError):
        pocketllm.fit("/nonexistent.gguf", memory=1 << 30)
    with pytest.raises(pocketllm.InvalidArgumentError):
        pocketllm.fit(preset="0.6b", memory=1 << 30)  # no vocab
    with pytest.raises(pocketllm.InvalidArgumentError):
        pocketllm.fit()


def test_model_fit(fixtures_dir):
    src = model_path("tiny-qwen3-f16")
    with pocketllm.Model(src, ctx=256, threads=2) as m:
        plan = m.fit(memory=m.memory_plan["total"])
        assert plan == pocketllm.fit(src, memory=m.memory_plan["total"], n_ctx=256, threads=2)
        # the loaded model's own plan is rung 0's, and it fits a budget of exactly its size
        assert plan["n_ctx"] == 256 and plan["rungs"][0]["total"] == m.memory_plan["total"]
        assert plan["reason"] == "as_is" and plan["plan"] == plan["rungs"][0]["name"]
        assert m.fit(memory=1000)["reason"] == "none_fits"
