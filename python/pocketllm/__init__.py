"""PocketLLM: LLM inference on one device, from GGUF checkpoints.

    import pocketllm
    with pocketllm.Model("model.gguf") as m:
        print(m.generate("The capital of France is", max_tokens=8))
        for piece in m.stream("Once upon a time", max_tokens=32):
            print(piece, end="", flush=True)

Modules: pocketllm.native (the ctypes bridge to libpocketllm),
pocketllm.gguf (a pure-numpy GGUF reader), pocketllm.chat (chat templates),
pocketllm.quant (quantize, fit planning, the quantization types),
pocketllm.chat_template (ChatTemplate: the C renderer, parse once, render
many), pocketllm.introspect (backends, devices, architectures, ops),
pocketllm.errors (the exception hierarchy).
"""
from .errors import (ChatTemplateError, ContextFullError, DoesNotFitError, FileIOError, FormatError,
                     InternalError, InvalidArgumentError, LibraryNotFoundError, NotFoundError, OutOfMemoryError,
                     PocketLLMError, UnsupportedError)
from .model import Completion, Model, Sampler, Session, Stream, Usage
from .quant import fit, quant_types, quantize, tensor_types
from .chat_template import ChatTemplate
from .introspect import architectures, backends, devices, ops
from . import gguf

__version__ = "0.1.0"

__all__ = [
    "Model", "Session", "Sampler", "Completion", "Usage", "Stream", "gguf", "library_version",
    "quantize", "fit", "quant_types", "tensor_types",
    "PocketLLMError", "InvalidArgumentError", "FileIOError", "FormatError", "UnsupportedError",
    "OutOfMemoryError", "NotFoundError", "ContextFullError", "DoesNotFitError", "InternalError",
    "LibraryNotFoundError", "ChatTemplateError",
    "ChatTemplate", "backends", "devices", "architectures", "ops",
]


def library_version() -> str:
    """pl_version() of the loaded libpocketllm."""
    from . import native
    return native.version()
