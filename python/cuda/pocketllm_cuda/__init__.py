"""The CUDA backend's module of PocketLLM, libpocketllm-cuda.so (the CUDA
runtime linked in statically; the NVIDIA driver's libcuda.so.1 is opened on
first use), shipped apart from the pocketllm wheel so that the base install
carries no GPU code. Installed by ``pip install "pocketllm[cuda]"``.

Importing this package loads nothing: pocketllm reads module_path() and
points PL_CUDA_MODULE at it, and libpocketllm dlopen()s the module only when
a model is loaded with device="cuda" (``--device cuda``)."""
from pathlib import Path

MODULE_FILE = "libpocketllm-cuda.so"
__version__ = "0.1.0"


def module_path() -> Path:
    """The path of libpocketllm-cuda.so inside this package."""
    return Path(__file__).resolve().parent / MODULE_FILE
