"""Shared fixtures. The tests use the library that pocketllm.native finds
(POCKETLLM_LIB, the installed package's copy, or <repo>/build/lib) and the
fixtures in $POCKETLLM_FIXTURES (default <repo>/tests/fixtures)."""
import json
import os
from pathlib import Path

import pytest

FIXTURES = Path(os.environ.get("POCKETLLM_FIXTURES") or Path(__file__).resolve().parents[2] / "tests" / "fixtures")
MODELS = FIXTURES / "models"
GOLDEN = FIXTURES / "golden"

# Golden comparison margins (tests/fixtures/PROVENANCE.md): tokens must match
# at steps whose golden top1-top2 margin is at least M.
MARGIN = {"f32": 0.1, "f16": 0.1, "bf16": 0.5}
QUANT_MARGIN = 1.0


def margin_for(name: str) -> float:
    return MARGIN.get(name.rsplit("-", 1)[-1], QUANT_MARGIN)


def load_golden(name: str) -> dict:
    return json.loads((GOLDEN / f"{name}.json").read_text())


def model_path(name: str) -> str:
    return str(MODELS / f"{name}.gguf")


@pytest.fixture(scope="session")
def fixtures_dir() -> Path:
    if not MODELS.is_dir():
        pytest.fail(f"fixtures not found at {FIXTURES} (set POCKETLLM_FIXTURES)")
    return FIXTURES


@pytest.fixture(scope="session")
def tiny(fixtures_dir):
    """The tiny q4_k_m Qwen3 model on the cpu backend, shared by API tests."""
    import pocketllm
    m = pocketllm.Model(model_path("tiny-qwen3-q4_k_m"), ctx=512)
    yield m
    m.close()


@pytest.fixture(scope="session")
def tiny_f32(fixtures_dir):
    import pocketllm
    m = pocketllm.Model(model_path("tiny-qwen3-f32"), ctx=512)
    yield m
    m.close()
