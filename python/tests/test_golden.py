"""Greedy generation through the Python API reproduces llama.cpp's tokens
(tests/fixtures/golden), by the comparison rule of PROVENANCE.md: the token
must match at every step whose golden margin is at least M; a divergence at
a step below M ends that case (the sequences legitimately parted)."""
import numpy as np
import pytest

import pocketllm
from conftest import GOLDEN, load_golden, margin_for, model_path

# Every golden generation fixture whose types the engine decodes; a type the
# build cannot run yet is reported as skipped, not passed.
CORE = ["tiny-qwen3-f32", "tiny-qwen3-f16", "tiny-qwen3-bf16", "tiny-qwen3-q8_0", "tiny-qwen3-q6_k",
        "tiny-qwen3-q4_k_m", "tiny-qwen3-untied-f16", "tiny-qwen3-untied-q4_k_m"]
EXTRA = sorted(p.stem for p in GOLDEN.glob("tiny-*.json") if not p.stem.endswith(".tok") and p.stem not in CORE)
# The C suite (tests/cli/run_golden.py) covers every model on both backends;
# here the cpu backend runs every model and the slower ref backend two.
REF_TOO = ["tiny-qwen3-f32", "tiny-qwen3-q4_k_m"]


def compare(golden_case, got_tokens, margin):
    """None if the generation agrees with the golden one by the rule, else a message."""
    for k, (want, step) in enumerate(zip(golden_case["greedy"], golden_case["steps"])):
        got = got_tokens[k] if k < len(got_tokens) else None
        if got == want:
            continue
        if step["margin"] >= margin:
            return f"step {k}: got {got}, want {want} (golden margin {step['margin']:.3f} >= {margin})"
        return None   # parted at a near-tie: stop comparing
    return None


def run_model(name, device):
    golden = load_golden(name)
    margin = margin_for(name)
    failures = []
    with pocketllm.Model(model_path(name), device=device, ctx=512) as m:
        assert m.n_vocab == golden["n_vocab"]
        for case in golden["cases"]:
            ids = m.tokenize(case["prompt"])
            assert ids == case["tokens"], f"prompt tokens of {case['prompt']!r}"
            # llama.cpp's golden runs generate 24 tokens whatever they are.
            c = m.generate(case["prompt"], max_tokens=len(case["greedy"]), temperature=0, ignore_eos=True)
            assert c.usage.prompt_tokens == len(case["tokens"])
            assert c.finish_reason in ("stop", "length")
            msg = compare(case, c.tokens, margin)
            if msg:
                failures.append(f"{case['prompt']!r}: {msg}; got {c.tokens}")
    assert not failures, "\n".join(failures)


@pytest.mark.parametrize("name,device", [(n, "cpu") for n in CORE] + [(n, "ref") for n in REF_TOO])
def test_greedy_matches_golden(name, device):
    run_model(name, device)


@pytest.mark.parametrize("name", EXTRA)
def test_greedy_matches_golden_other_types(name):
    try:
        run_model(name, "cpu")
    except pocketllm.UnsupportedError as e:
        pytest.skip(f"not supported by this build: {e}")


# Up to the first low-margin divergence the engine's logits for the golden
# top-20 ids are within this of llama.cpp's (PROVENANCE.md).
LOGIT_TOL = {"tiny-qwen3-f32": 0.1, "tiny-qwen3-f16": 0.1, "tiny-qwen3-untied-f16": 0.1, "tiny-qwen3-bf16": 0.25}


@pytest.mark.parametrize("name", sorted(LOGIT_TOL))
def test_logits_follow_golden_path(name):
    """Session.eval along the golden path: the top-20 logits of every step
    agree with llama.cpp's, and Model.logits(all_positions=True) agrees
    with the step-by-step session."""
    golden = load_golden(name)
    tol = LOGIT_TOL[name]
    with pocketllm.Model(model_path(name), ctx=512) as m:
        for case in golden["cases"]:
            worst = 0.0
            with m.session() as s:
                logits = s.eval(case["tokens"])
                path = list(case["tokens"])
                for want, step in zip(case["greedy"], case["steps"]):
                    ids = np.array([t for t, _ in step["top"]])
                    ref = np.array([v for _, v in step["top"]], dtype=np.float64)
                    worst = max(worst, float(np.max(np.abs(logits[ids] - ref))))
                    path.append(want)
                    logits = s.eval([want])
            assert worst <= tol, f"{case['prompt']!r}: top-20 logits differ by {worst:.4f} > {tol}"
        # all_positions gives the same last row as a plain prefill
        case = golden["cases"][0]
        last = m.logits(case["tokens"])
        every = m.logits(case["tokens"], all_positions=True)
        assert every.shape == (len(case["tokens"]), m.n_vocab)
        np.testing.assert_allclose(every[-1], last, atol=1e-3)
        assert int(np.argmax(last)) == case["greedy"][0] or case["steps"][0]["margin"] < margin_for(name)
