"""The exception hierarchy: one class per C status code (pocketllm.h).

Every error raised by a call into libpocketllm is a PocketLLMError subclass
chosen by the C function's pl_status; its message is pl_last_error()'s.
Where a builtin exception fits, the class also derives from it, so callers
may catch either (``except ValueError`` catches an InvalidArgumentError).
This module is pure Python: it never loads the C library.
"""
from __future__ import annotations

__all__ = [
    "PocketLLMError", "InvalidArgumentError", "FileIOError", "FormatError", "UnsupportedError",
    "OutOfMemoryError", "NotFoundError", "ContextFullError", "DoesNotFitError", "InternalError",
    "LibraryNotFoundError", "ChatTemplateError", "error_for_status", "STATUS_NAMES",
]

# pl_status values (stable: part of the C ABI).
STATUS_NAMES = {
    0: "PL_OK",
    1: "PL_ERR_INVALID_ARG",
    2: "PL_ERR_IO",
    3: "PL_ERR_FORMAT",
    4: "PL_ERR_UNSUPPORTED",
    5: "PL_ERR_NO_MEMORY",
    6: "PL_ERR_NOT_FOUND",
    7: "PL_ERR_CONTEXT_FULL",
    8: "PL_ERR_DOES_NOT_FIT",
    9: "PL_ERR_INTERNAL",
}


class PocketLLMError(Exception):
    """Base class of every PocketLLM error. ``status`` is the C pl_status
    (an int, None for errors raised on the Python side only) and
    ``message`` the human-readable text (pl_last_error() for C errors)."""

    status: int | None = None

    def __init__(self, message: str = "", status: int | None = None):
        super().__init__(message)
        self.message = message
        if status is not None:
            self.status = status

    @property
    def status_name(self) -> str | None:
        return None if self.status is None else STATUS_NAMES.get(self.status, f"status {self.status}")

    def __str__(self) -> str:
        return self.message


class InvalidArgumentError(PocketLLMError, ValueError):
    """PL_ERR_INVALID_ARG: a caller passed something invalid."""
    status = 1


class FileIOError(PocketLLMError, OSError):
    """PL_ERR_IO: open/read/mmap failed."""
    status = 2


class FormatError(PocketLLMError, ValueError):
    """PL_ERR_FORMAT: a file is corrupt or not what it claims."""
    status = 3


class UnsupportedError(PocketLLMError):
    """PL_ERR_UNSUPPORTED: valid, but this build cannot do it."""
    status = 4


class OutOfMemoryError(PocketLLMError, MemoryError):
    """PL_ERR_NO_MEMORY: an allocation failed."""
    status = 5


class NotFoundError(PocketLLMError, LookupError):
    """PL_ERR_NOT_FOUND: a key, tensor or name does not exist."""
    status = 6


class ContextFullError(PocketLLMError):
    """PL_ERR_CONTEXT_FULL: the sequence would exceed the context size."""
    status = 7


class DoesNotFitError(PocketLLMError):
    """PL_ERR_DOES_NOT_FIT: the memory plan exceeds the device's budget."""
    status = 8


class InternalError(PocketLLMError):
    """PL_ERR_INTERNAL: a bug in PocketLLM; please report it."""
    status = 9


class LibraryNotFoundError(PocketLLMError, ImportError):
    """libpocketllm.so (or the pocketllm binary) could not be located."""


class ChatTemplateError(InvalidArgumentError):
    """A chat template failed to render (a raise_exception() in the
    template gives exactly its message), or no renderer is available."""


_BY_STATUS = {cls.status: cls for cls in (
    InvalidArgumentError, FileIOError, FormatError, UnsupportedError, OutOfMemoryError,
    NotFoundError, ContextFullError, DoesNotFitError, InternalError)}


def error_for_status(status: int, message: str) -> PocketLLMError:
    """The exception for a non-zero pl_status (an unknown value gives a
    plain PocketLLMError carrying it)."""
    cls = _BY_STATUS.get(int(status))
    if cls is None:
        return PocketLLMError(message, status=int(status))
    return cls(message)
