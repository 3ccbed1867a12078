"""The [cuda] extra: pip installs libpocketllm-cuda.so into the separate
pocketllm_cuda package, where the library (which looks next to itself and the
CLI binary) would not find it; pocketllm points PL_CUDA_MODULE at it, unless
the user set the variable or a module sits where the library looks itself."""
import os
import sys

import pytest

from pocketllm import cli, native


@pytest.fixture
def fake_cuda_dist(tmp_path, monkeypatch):
    """A stand-in for the installed pocketllm-cuda distribution (the real
    module needs nvcc to build); returns its module's path."""
    pkg = tmp_path / "site" / "pocketllm_cuda"
    pkg.mkdir(parents=True)
    (pkg / "__init__.py").write_text(
        "from pathlib import Path\n"
        "def module_path():\n"
        "    return Path(__file__).resolve().parent / 'libpocketllm-cuda.so'\n")
    (pkg / "libpocketllm-cuda.so").write_bytes(b"\x7fELF")
    monkeypatch.syspath_prepend(str(tmp_path / "site"))
    monkeypatch.delitem(sys.modules, "pocketllm_cuda", raising=False)
    return pkg / "libpocketllm-cuda.so"


def test_points_at_the_installed_module(fake_cuda_dist, tmp_path):
    env = {}
    got = native.use_cuda_module([tmp_path / "lib-dir"], env)
    assert got == fake_cuda_dist
    assert env == {"PL_CUDA_MODULE": str(fake_cuda_dist)}


def test_user_setting_wins(fake_cuda_dist, tmp_path):
    env = {"PL_CUDA_MODULE": "/opt/mine/libpocketllm-cuda.so"}
    assert native.use_cuda_module([tmp_path], env) is None
    assert env == {"PL_CUDA_MODULE": "/opt/mine/libpocketllm-cuda.so"}


def test_module_beside_the_library_wins(fake_cuda_dist, tmp_path):
    build_lib = tmp_path / "build" / "lib"
    build_lib.mkdir(parents=True)
    (build_lib / "libpocketllm-cuda.so").write_bytes(b"\x7fELF")
    env = {}
    assert native.use_cuda_module([build_lib], env) is None
    assert env == {}


def test_nothing_without_the_extra(tmp_path, monkeypatch):
    monkeypatch.setitem(sys.modules, "pocketllm_cuda", None)   # import fails
    env = {}
    assert native.use_cuda_module([tmp_path], env) is None
    assert env == {}


def test_cli_passes_it_to_the_binary(fake_cuda_dist, tmp_path, monkeypatch):
    """`pocketllm ...` (the console script) execs the C binary with
    PL_CUDA_MODULE set, so `--device cuda` finds the extra's module."""
    exe = tmp_path / "pkg" / "bin" / "pocketllm"
    exe.parent.mkdir(parents=True)
    exe.write_text("")
    monkeypatch.delenv("PL_CUDA_MODULE", raising=False)
    monkeypatch.setattr(cli, "find_cli", lambda: exe)
    seen = {}

    def fake_execv(path, argv):
        seen["env"] = os.environ.get("PL_CUDA_MODULE")
        seen["argv"] = argv
        raise OSError("not really")

    monkeypatch.setattr(os, "execv", fake_execv)
    assert cli.main(["devices"]) == 126
    assert seen == {"env": str(fake_cuda_dist), "argv": ["pocketllm", "devices"]}
