"""The ctypes bridge over libpocketllm's public C API (include/pocketllm.h).

This module is the one place where Python meets C: it finds and loads the
shared library, declares argtypes/restype for every function it uses, turns
each non-zero pl_status into the matching PocketLLMError subclass carrying
pl_last_error()'s message, and owns every buffer handed to or received from
C (C-allocated results are copied and released with pl_free).

The library is loaded lazily, on the first call that needs it, from (in
this order):
  1. $POCKETLLM_LIB: the path of libpocketllm.so, or a directory holding it;
  2. the copy installed inside this package by ``pip install``;
  3. the project's build tree, when this package runs from a source
     checkout (python/pocketllm -> <repo>/build/lib/libpocketllm.so).

The CUDA backend's module (libpocketllm-cuda.so) is looked for by the
library itself, next to libpocketllm.so or the CLI binary, or at
$PL_CUDA_MODULE. The pocketllm-cuda distribution (the [cuda] extra) installs
it into its own package, so use_cuda_module() points PL_CUDA_MODULE there.
"""
from __future__ import annotations

import ctypes
import os
import threading
from ctypes import (POINTER, Structure, byref, c_bool, c_char, c_char_p, c_double, c_float, c_int,
                    c_int32, c_int64, c_size_t, c_uint32, c_uint64, c_void_p)
from pathlib import Path

import numpy as np

from .errors import InvalidArgumentError, LibraryNotFoundError, error_for_status

LIB_NAME = "libpocketllm.so"
BIN_NAME = "pocketllm"
CUDA_MODULE_NAME = "libpocketllm-cuda.so"
CUDA_MODULE_ENV = "PL_CUDA_MODULE"
_HERE = Path(__file__).resolve().parent

# ---- locating the library and the CLI ----------------------------------------


def _source_checkout_root() -> Path | None:
    """<repo> when this package is <repo>/python/pocketllm of a checkout."""
    root = _HERE.parent.parent
    if _HERE.parent.name == "python" and (root / "CMakeLists.txt").is_file() and (root / "include" / "pocketllm.h").is_file():
        return root
    return None


def library_candidates() -> list[Path]:
    """Where the library is looked for, in order."""
    env = os.environ.get("POCKETLLM_LIB")
    if env:
        p = Path(env)
        return [p / LIB_NAME if p.is_dir() else p]
    out = [_HERE / LIB_NAME]
    root = _source_checkout_root()
    if root is not None:
        out.append(root / "build" / "lib" / LIB_NAME)
    return out


def find_library() -> Path:
    """The path of libpocketllm.so, or LibraryNotFoundError saying where it
    was looked for and how to provide it."""
    tried = library_candidates()
    for p in tried:
        if p.is_file():
            return p.resolve()
    if os.environ.get("POCKETLLM_LIB"):
        raise LibraryNotFoundError(
            f"POCKETLLM_LIB is set to {os.environ['POCKETLLM_LIB']!r}, but there is no {LIB_NAME} there")
    raise LibraryNotFoundError(
        f"cannot find {LIB_NAME} (looked in: {', '.join(str(p) for p in tried)}). Install the package with "
        f"'pip install <repo>/python' (which builds the library), build the project with CMake "
        f"('cmake -S . -B build && cmake --build build'), or set POCKETLLM_LIB to the library's path")


def find_cli() -> Path:
    """The path of the pocketllm command-line binary (bundled next to the
    library by the wheel, or in the build tree beside lib/)."""
    tried: list[Path] = []
    env = os.environ.get("POCKETLLM_BIN")
    if env:
        tried.append(Path(env))
    tried.append(_HERE / "bin" / BIN_NAME)
    try:
        lib = find_library()
        tried.append(lib.resolve().parent.parent / "bin" / BIN_NAME)
    except LibraryNotFoundError:
        pass
    root = _source_checkout_root()
    if root is not None:
        tried.append(root / "build" / "bin" / BIN_NAME)
    for p in tried:
        if p.is_file() and os.access(p, os.X_OK):
            return p
    raise LibraryNotFoundError(
        f"cannot find the {BIN_NAME} binary (looked in: {', '.join(str(p) for p in tried)}); "
        f"set POCKETLLM_BIN to its path")


def use_cuda_module(search_dirs: list[Path], env=None) -> Path | None:
    """Point PL_CUDA_MODULE (in `env`, default os.environ) at the module of
    the installed pocketllm-cuda distribution, when the variable is unset and
    no libpocketllm-cuda.so sits in `search_dirs` (where the library looks
    itself: a build tree's module matches its library, so it wins). Returns
    the path set, or None. Imports pocketllm_cuda, which loads nothing: the
    library dlopen()s the module only for a cuda model."""
    env = os.environ if env is None else env
    if env.get(CUDA_MODULE_ENV) or any((d / CUDA_MODULE_NAME).is_file() for d in search_dirs):
        return None
    try:
        import pocketllm_cuda
    except ImportError:
        return None
    path = Path(pocketllm_cuda.module_path())
    if not path.is_file():
        return None
    env[CUDA_MODULE_ENV] = str(path)
    return path


# ---- C structs ----------------------------------------------------------------


class ModelParams(Structure):
    _fields_ = [("device", c_char_p), ("n_threads", c_int), ("n_ctx", c_int), ("n_seq", c_int),
                ("n_batch", c_int), ("memory_budget", c_uint64), ("vocab_only", c_bool),
                ("n_outputs", c_int32), ("batch_invariant", c_bool),
                ("cache_type_k", c_char_p), ("cache_type_v", c_char_p)]


class MemoryPlan(Structure):
    _fields_ = [("weights", c_uint64), ("kv_cache", c_uint64), ("scratch", c_uint64), ("total", c_uint64)]


class Batch(Structure):
    _fields_ = [("n", c_int32), ("tokens", POINTER(c_int32)), ("pos", POINTER(c_int32)),
                ("seq", POINTER(c_int32)), ("want_logits", POINTER(c_bool))]


class SamplerParams(Structure):
    _fields_ = [("temperature", c_float), ("top_k", c_int32), ("top_p", c_float), ("min_p", c_float),
                ("seed", c_uint64)]


class TensorInfo(Structure):
    _fields_ = [("name", c_char_p), ("type", c_int32), ("type_name", c_char_p), ("n_dims", c_int32),
                ("ne", c_int64 * 4), ("offset", c_uint64), ("size", c_uint64)]


class TokenLogprob(Structure):
    _fields_ = [("token", c_int32), ("logprob", c_float)]


# ---- declarations -------------------------------------------------------------

STATUS = "status"  # marker: returns pl_status, checked automatically
_p = c_void_p
_cstr_out = POINTER(c_char_p)
_ptr_out = POINTER(c_void_p)

# name: (restype, argtypes). Every function of pocketllm.h the package uses.
_DECLS: dict[str, tuple] = {
    "pl_status_str": (c_char_p, [c_int]),
    "pl_last_error": (c_char_p, []),
    "pl_version": (c_char_p, []),
    # model
    "pl_model_default_params": (ModelParams, []),
    "pl_model_load": (STATUS, [c_char_p, POINTER(ModelParams), _ptr_out]),
    "pl_model_free": (None, [_p]),
    "pl_model_memory_plan": (MemoryPlan, [_p]),
    "pl_model_n_vocab": (c_int32, [_p]),
    "pl_model_n_params": (c_uint64, [_p]),
    "pl_model_weight_bytes": (c_uint64, [_p]),
    "pl_model_n_threads": (c_int, [_p]),
    "pl_model_n_ctx": (c_int32, [_p]),
    "pl_model_arch": (c_char_p, [_p]),
    "pl_model_device": (c_char_p, [_p]),
    "pl_model_meta_str": (c_char_p, [_p, c_char_p]),
    # tokenizer
    "pl_tokenize": (STATUS, [_p, c_char_p, c_size_t, c_bool, POINTER(c_bool), POINTER(POINTER(c_int32)),
                             POINTER(c_size_t)]),
    "pl_token_to_piece": (STATUS, [_p, c_int32, c_bool, POINTER(c_char), c_size_t, POINTER(c_size_t)]),
    "pl_detokenize": (STATUS, [_p, POINTER(c_int32), c_size_t, c_bool, POINTER(c_void_p), POINTER(c_size_t)]),
    "pl_token_is_eog": (c_bool, [_p, c_int32]),
    "pl_chat_apply_template": (STATUS, [_p, c_char_p, c_char_p, POINTER(c_void_p), POINTER(c_size_t)]),
    "pl_free": (None, [c_void_p]),
    # sessions and decoding
    "pl_session_create": (STATUS, [_p, _ptr_out]),
    "pl_session_free": (None, [_p]),
    "pl_session_pos": (c_int32, [_p]),
    "pl_session_reset": (None, [_p]),
    "pl_session_eval": (STATUS, [_p, POINTER(c_int32), c_size_t, POINTER(c_float)]),
    "pl_model_forward": (STATUS, [_p, POINTER(Batch), POINTER(c_float)]),
    "pl_model_kv_truncate": (None, [_p, c_int32, c_int32]),
    # sampling
    "pl_sampler_default_params": (SamplerParams, []),
    "pl_sampler_create": (STATUS, [POINTER(SamplerParams), c_int32, _ptr_out]),
    "pl_sampler_free": (None, [_p]),
    "pl_sampler_sample": (c_int32, [_p, POINTER(c_float)]),
    "pl_sampler_set_penalties": (STATUS, [_p, c_float, c_int32, c_float, c_float]),
    "pl_sampler_set_logit_bias": (STATUS, [_p, POINTER(c_int32), POINTER(c_float), c_size_t]),
    "pl_sampler_add_history": (STATUS, [_p, POINTER(c_int32), c_size_t]),
    "pl_logprobs": (STATUS, [POINTER(c_float), c_int32, c_int32, POINTER(c_float), POINTER(TokenLogprob), c_int32]),
    # inspecting a GGUF file
    "pl_inspect_open": (STATUS, [c_char_p, _ptr_out]),
    "pl_inspect_close": (None, [_p]),
    "pl_inspect_version": (c_uint32, [_p]),
    "pl_inspect_alignment": (c_uint64, [_p]),
    "pl_inspect_data_offset": (c_uint64, [_p]),
    "pl_inspect_n_meta": (c_int64, [_p]),
    "pl_inspect_meta_key": (STATUS, [_p, c_int64, POINTER(c_void_p), POINTER(c_size_t)]),
    "pl_inspect_meta_type": (STATUS, [_p, c_char_p, POINTER(c_int), POINTER(c_int), POINTER(c_uint64)]),
    "pl_inspect_meta_i64": (STATUS, [_p, c_char_p, c_int64, POINTER(c_int64)]),
    "pl_inspect_meta_f64": (STATUS, [_p, c_char_p, c_int64, POINTER(c_double)]),
    "pl_inspect_meta_str": (STATUS, [_p, c_char_p, c_int64, POINTER(c_void_p), POINTER(c_size_t)]),
    "pl_inspect_n_tensors": (c_int64, [_p]),
    "pl_inspect_tensor": (STATUS, [_p, c_int64, POINTER(TensorInfo)]),
    "pl_inspect_dequantize": (STATUS, [_p, c_int64, c_int64, c_int64, POINTER(c_float)]),
}

# Functions a library may lack (newer additions); everything else is required.
_OPTIONAL = {name for name in _DECLS if name.startswith("pl_inspect_")} | {
    "pl_sampler_set_penalties", "pl_sampler_set_logit_bias", "pl_sampler_add_history", "pl_logprobs"}

# Introspection, the chat-template handle, session rewind and slot lengths
# (pocketllm.h, issue 19): optional, so an older library still loads.


class BackendInfo(Structure):
    _fields_ = [("name", c_char_p), ("summary", c_char_p), ("awaits", c_char_p), ("implemented", c_bool)]


class ArchInfo(Structure):
    _fields_ = [("name", c_char_p), ("summary", c_char_p), ("n_keys", c_int32)]


class OpInfo(Structure):
    _fields_ = [("name", c_char_p), ("summary", c_char_p), ("shape_rule", c_char_p), ("params", c_char_p),
                ("n_inputs", c_int32), ("key_input", c_int32)]


class ChatTemplateParams(Structure):
    _fields_ = [("messages", c_char_p), ("tools", c_char_p), ("add_generation_prompt", c_int),
                ("context", c_char_p), ("bos_token", c_char_p), ("eos_token", c_char_p),
                ("now", POINTER(c_int64))]


_API_DECLS: dict[str, tuple] = {
    "pl_backend_count": (c_int32, []),
    "pl_backend_get": (STATUS, [c_int32, POINTER(BackendInfo)]),
    "pl_backend_index": (c_int32, [c_char_p]),
    "pl_backend_op_dtypes": (STATUS, [c_int32, c_int32, POINTER(c_char_p), c_size_t, POINTER(c_size_t)]),
    "pl_device_probe": (STATUS, [c_int32, POINTER(c_bool), POINTER(c_char), c_size_t]),
    "pl_arch_count": (c_int32, []),
    "pl_arch_get": (STATUS, [c_int32, POINTER(ArchInfo)]),
    "pl_arch_key": (STATUS, [c_int32, c_int32, POINTER(c_char), c_size_t, POINTER(c_size_t)]),
    "pl_op_count": (c_int32, []),
    "pl_op_get": (STATUS, [c_int32, POINTER(OpInfo)]),
    "pl_op_index": (c_int32, [c_char_p]),
    "pl_op_operand": (STATUS, [c_int32, c_int32, POINTER(c_char_p), POINTER(c_char_p), c_size_t,
                               POINTER(c_size_t)]),
    "pl_chat_template_parse": (STATUS, [c_char_p, c_size_t, _ptr_out]),
    "pl_chat_template_from_model": (STATUS, [_p, _ptr_out]),
    "pl_chat_template_free": (None, [_p]),
    "pl_chat_template_default_params": (ChatTemplateParams, []),
    "pl_chat_template_apply": (STATUS, [_p, POINTER(ChatTemplateParams), POINTER(c_void_p), POINTER(c_size_t)]),
    "pl_session_rewind": (STATUS, [_p, c_int32]),
    "pl_model_kv_len": (c_int32, [_p, c_int32]),
    "pl_model_kv_pos_bytes": (c_size_t, [_p]),
    "pl_model_kv_read": (STATUS, [_p, c_int32, c_int32, c_int32, c_void_p, c_size_t]),
    "pl_model_kv_write": (STATUS, [_p, c_int32, c_int32, c_int32, c_void_p, c_size_t]),
}
_DECLS.update(_API_DECLS)
_OPTIONAL |= set(_API_DECLS)

_lib = None
_lib_path: Path | None = None
_lib_lock = threading.Lock()


def last_error() -> str:
    msg = _lib.pl_last_error() if _lib is not None else None
    return msg.decode("utf-8", "replace") if msg else ""


def _errcheck(result, func, args):
    if result != 0:
        raise error_for_status(result, last_error() or _status_str(result))
    return result


def _status_str(st: int) -> str:
    s = _lib.pl_status_str(st)
    return s.decode() if s else f"status {st}"


def _load():
    global _lib, _lib_path
    with _lib_lock:
        if _lib is not None:
            return _lib
        path = find_library()
        use_cuda_module([path.parent, path.parent.parent / "lib"])
        try:
            lib = ctypes.CDLL(str(path))
        except OSError as e:
            raise LibraryNotFoundError(f"cannot load {path}: {e}") from None
        missing = []
        for name, (restype, argtypes) in _DECLS.items():
            try:
                fn = getattr(lib, name)
            except AttributeError:
                if name not in _OPTIONAL:
                    missing.append(name)
                continue
            fn.argtypes = argtypes
            if restype is STATUS:
                fn.restype = c_int
                fn.errcheck = _errcheck
            else:
                fn.restype = restype
        if missing:
            raise LibraryNotFoundError(f"{path} is not a compatible libpocketllm: it lacks {', '.join(missing)}")
        _lib_path = path
        _lib = lib
        return lib


def lib():
    """The loaded library (loading it on first use)."""
    return _lib if _lib is not None else _load()


def library_path() -> Path:
    lib()
    return _lib_path


def has(name: str) -> bool:
    """True if the loaded library exports the C function ``name``."""
    return hasattr(lib(), name)


def version() -> str:
    return lib().pl_version().decode()


def _s(b: bytes | None) -> str | None:
    return None if b is None else b.decode("utf-8", "replace")


def _ids_array(ids) -> tuple[np.ndarray, object]:
    """A contiguous int32 copy of ids and a ctypes pointer to it."""
    a = np.ascontiguousarray(np.asarray(ids, dtype=np.int64).reshape(-1))
    if a.size and (a.min() < -2**31 or a.max() >= 2**31):
        raise InvalidArgumentError("token id out of the int32 range")
    a = a.astype(np.int32)
    return a, a.ctypes.data_as(POINTER(c_int32))


def _f32_ptr(a: np.ndarray):
    return a.ctypes.data_as(POINTER(c_float))


# ---- model --------------------------------------------------------------------


def model_load(path: str, device: str | None = None, n_threads: int = 0, n_ctx: int = 0, n_seq: int = 0,
               n_batch: int = 0, memory_budget: int = 0, vocab_only: bool = False,
               cache_type_k: str | None = None, cache_type_v: str | None = None) -> int:
    L = lib()
    p = L.pl_model_default_params()
    dev = device.encode() if device else None
    p.device = dev
    ctk = cache_type_k.encode() if cache_type_k else None   # kept alive until the call returns
    ctv = cache_type_v.encode() if cache_type_v else None
    p.cache_type_k = ctk
    p.cache_type_v = ctv
    p.n_threads = int(n_threads)
    p.n_ctx = int(n_ctx)
    p.n_seq = int(n_seq)
    p.n_batch = int(n_batch)
    p.memory_budget = int(memory_budget)
    p.vocab_only = bool(vocab_only)
    out = c_void_p()
    L.pl_model_load(os.fsencode(path), byref(p), byref(out))
    return out.value


def model_free(m: int) -> None:
    lib().pl_model_free(m)


def model_info(m: int) -> dict:
    L = lib()
    plan = L.pl_model_memory_plan(m)
    return {
        "n_vocab": L.pl_model_n_vocab(m),
        "n_ctx": L.pl_model_n_ctx(m),
        "n_threads": L.pl_model_n_threads(m),
        "n_params": L.pl_model_n_params(m),
        "weight_bytes": L.pl_model_weight_bytes(m),
        "arch": _s(L.pl_model_arch(m)),
        "device": _s(L.pl_model_device(m)),
        "memory_plan": {"weights": plan.weights, "kv_cache": plan.kv_cache, "scratch": plan.scratch,
                        "total": plan.total},
    }


def model_meta_str(m: int, key: str) -> str | None:
    """A string metadata value of the model's file, or None (absent, not a
    string, or longer than the C accessor's 64 KiB buffer)."""
    v = lib().pl_model_meta_str(m, key.encode())
    return None if v is None else v.decode("utf-8", "surrogateescape")


# ---- tokenizer ----------------------------------------------------------------


def tokenize(m: int, text: bytes, parse_special: bool, add_bos: bool | None) -> list[int]:
    L = lib()
    ids = POINTER(c_int32)()
    n = c_size_t()
    bos = None if add_bos is None else byref(c_bool(bool(add_bos)))
    L.pl_tokenize(m, text, len(text), bool(parse_special), bos, byref(ids), byref(n))
    try:
        return ids[:n.value] if n.value else []
    finally:
        L.pl_free(ctypes.cast(ids, c_void_p))


def token_to_piece(m: int, tok: int, special: bool) -> bytes:
    L = lib()
    buf = ctypes.create_string_buffer(64)
    n = c_size_t()
    try:
        L.pl_token_to_piece(m, int(tok), bool(special), buf, len(buf), byref(n))
    except InvalidArgumentError:
        if n.value <= len(buf):   # a bad id, not a short buffer
            raise
        buf = ctypes.create_string_buffer(n.value)
        L.pl_token_to_piece(m, int(tok), bool(special), buf, len(buf), byref(n))
    return buf.raw[:n.value]


def detokenize(m: int, ids, special: bool) -> bytes:
    L = lib()
    a, ptr = _ids_array(ids)
    text = c_void_p()
    n = c_size_t()
    L.pl_detokenize(m, ptr, a.size, bool(special), byref(text), byref(n))
    try:
        return ctypes.string_at(text, n.value) if n.value else b""
    finally:
        L.pl_free(text)


def chat_apply_template(m: int, template: str | None, context_json: str) -> str:
    """Renders a chat template with the C renderer (src/chat/)."""
    L = lib()
    text = c_void_p()
    n = c_size_t()
    L.pl_chat_apply_template(m, template.encode() if template is not None else None, context_json.encode(),
                             byref(text), byref(n))
    try:
        return ctypes.string_at(text, n.value).decode("utf-8", "replace") if n.value else ""
    finally:
        L.pl_free(text)


def token_is_eog(m: int, tok: int) -> bool:
    return bool(lib().pl_token_is_eog(m, int(tok)))


# ---- sessions, forward --------------------------------------------------------


def session_create(m: int) -> int:
    out = c_void_p()
    lib().pl_session_create(m, byref(out))
    return out.value


def session_free(s: int) -> None:
    lib().pl_session_free(s)


def session_pos(s: int) -> int:
    return lib().pl_session_pos(s)


def session_reset(s: int) -> None:
    lib().pl_session_reset(s)


def session_eval(s: int, ids, logits: np.ndarray | None) -> None:
    """Appends ids; if logits (a writable, contiguous float32 array of
    n_vocab) is given, it receives the logits after the last token."""
    a, ptr = _ids_array(ids)
    if logits is not None:
        _check_f32_out(logits, None)
    lib().pl_session_eval(s, ptr, a.size, None if logits is None else _f32_ptr(logits))


def _check_f32_out(a: np.ndarray, n: int | None) -> None:
    if a.dtype != np.float32 or not a.flags.c_contiguous or not a.flags.writeable:
        raise InvalidArgumentError("logits buffer must be a writable, contiguous float32 array")
    if n is not None and a.size < n:
        raise InvalidArgumentError(f"logits buffer holds {a.size} floats, {n} needed")


def model_forward(m: int, tokens, pos, seq, want_logits, logits: np.ndarray | None) -> None:
    """pl_model_forward over a batch (arrays of equal length); logits
    receives n_vocab floats per token whose want_logits is set."""
    t, tp = _ids_array(tokens)
    p, pp = _ids_array(pos)
    q, qp = _ids_array(seq)
    w = np.ascontiguousarray(np.asarray(want_logits, dtype=np.bool_).reshape(-1))
    if not (t.size == p.size == q.size == w.size):
        raise InvalidArgumentError("batch arrays differ in length")
    b = Batch(t.size, tp, pp, qp, w.ctypes.data_as(POINTER(c_bool)))
    if logits is not None:
        _check_f32_out(logits, None)
    lib().pl_model_forward(m, byref(b), None if logits is None else _f32_ptr(logits))


def model_kv_truncate(m: int, seq: int, pos: int) -> None:
    lib().pl_model_kv_truncate(m, int(seq), int(pos))


def _api(name: str):
    """The library, once it is known to export ``name`` (the newest calls
    are optional: an older library still loads without them)."""
    _need(name)
    return lib()


def session_rewind(s: int, pos: int) -> None:
    _need("pl_session_rewind")(s, int(pos))


def model_kv_len(m: int, seq: int) -> int:
    return _need("pl_model_kv_len")(m, int(seq))


def model_kv_read(m: int, seq: int, pos: int, n: int) -> bytes:
    pb = _need("pl_model_kv_pos_bytes")(m)
    size = max(int(n), 0) * pb
    buf = ctypes.create_string_buffer(size or 1)
    _need("pl_model_kv_read")(m, int(seq), int(pos), int(n), buf, size)
    return buf.raw[:size]


def model_kv_write(m: int, seq: int, pos: int, data: bytes) -> None:
    pb = _need("pl_model_kv_pos_bytes")(m)
    if not pb or len(data) % pb:
        raise InvalidArgumentError(f"kv_write: {len(data)} bytes is not a whole number of positions "
                                   f"({pb} bytes each)")
    buf = ctypes.create_string_buffer(bytes(data), len(data) or 1)
    _need("pl_model_kv_write")(m, int(seq), int(pos), len(data) // pb, buf, len(data))


# ---- introspection -------------------------------------------------------------


def _names(fn, *args) -> list[str]:
    """A list-of-names call (names, cap, *n): asks for the count, then the names."""
    n = c_size_t()
    fn(*args, None, 0, byref(n))
    arr = (c_char_p * max(n.value, 1))()
    fn(*args, arr, n.value, byref(n))
    return [_s(arr[i]) for i in range(n.value)]


def backends() -> list[dict]:
    """Every backend (preference order): name, summary, implemented, awaits,
    and the dtypes of its kernels per op."""
    L = _api("pl_backend_count")
    ops = [op_info(i)["name"] for i in range(L.pl_op_count())]
    out = []
    info = BackendInfo()
    for b in range(L.pl_backend_count()):
        L.pl_backend_get(b, byref(info))
        kernels = {}
        for i, op in enumerate(ops):
            names = _names(L.pl_backend_op_dtypes, b, i)
            if names:
                kernels[op] = names
        out.append({"name": _s(info.name), "summary": _s(info.summary), "implemented": bool(info.implemented),
                    "awaits": _s(info.awaits), "ops": kernels})
    return out


def device_probe(b: int) -> tuple[bool, str]:
    """(available, detail) of backend b's device probe."""
    L = _api("pl_device_probe")
    avail = c_bool()
    buf = ctypes.create_string_buffer(4096)
    L.pl_device_probe(int(b), byref(avail), buf, len(buf))
    return bool(avail.value), buf.value.decode("utf-8", "replace")


def backend_index(name: str) -> int:
    return _need("pl_backend_index")(name.encode())


def architectures() -> list[dict]:
    L = _api("pl_arch_count")
    out = []
    info = ArchInfo()
    for a in range(L.pl_arch_count()):
        L.pl_arch_get(a, byref(info))
        keys = []
        for k in range(info.n_keys):
            n = c_size_t()
            buf = ctypes.create_string_buffer(256)
            try:
                L.pl_arch_key(a, k, buf, len(buf), byref(n))
            except InvalidArgumentError:
                buf = ctypes.create_string_buffer(n.value + 1)
                L.pl_arch_key(a, k, buf, len(buf), byref(n))
            keys.append(buf.value.decode("utf-8", "replace"))
        out.append({"name": _s(info.name), "summary": _s(info.summary), "keys": keys})
    return out


def op_info(op: int) -> dict:
    L = _api("pl_op_get")
    info = OpInfo()
    L.pl_op_get(int(op), byref(info))
    return {"name": _s(info.name), "summary": _s(info.summary), "shape_rule": _s(info.shape_rule),
            "params": _s(info.params), "n_inputs": info.n_inputs, "key_input": info.key_input}


def op_operand(op: int, k: int) -> tuple[str, list[str]]:
    """(name, allowed dtypes) of input k of op (-1: the output)."""
    L = _api("pl_op_operand")
    name = c_char_p()
    n = c_size_t()
    L.pl_op_operand(int(op), int(k), byref(name), None, 0, byref(n))
    arr = (c_char_p * max(n.value, 1))()
    L.pl_op_operand(int(op), int(k), byref(name), arr, n.value, byref(n))
    return _s(name.value), [_s(arr[i]) for i in range(n.value)]


def op_count() -> int:
    return _need("pl_op_count")()


def op_index(name: str) -> int:
    return _need("pl_op_index")(name.encode())


# ---- chat-template handle -------------------------------------------------------


def chat_template_parse(text: str) -> int:
    b = text.encode("utf-8")
    out = c_void_p()
    _need("pl_chat_template_parse")(b, len(b), byref(out))
    return out.value


def chat_template_from_model(m: int) -> int:
    out = c_void_p()
    _need("pl_chat_template_from_model")(m, byref(out))
    return out.value


def chat_template_free(t: int) -> None:
    lib().pl_chat_template_free(t)


def chat_template_apply(t: int, messages: str | None, tools: str | None, add_generation_prompt: int,
                        context: str | None, bos_token: str | None, eos_token: str | None,
                        now: int | None) -> str:
    """pl_chat_template_apply; JSON texts in, the rendered text out."""
    L = _api("pl_chat_template_apply")
    enc = (lambda s: None if s is None else s.encode("utf-8"))
    p = L.pl_chat_template_default_params()
    p.messages, p.tools, p.context = enc(messages), enc(tools), enc(context)
    p.bos_token, p.eos_token = enc(bos_token), enc(eos_token)
    p.add_generation_prompt = int(add_generation_prompt)
    secs = c_int64(int(now)) if now is not None else None
    p.now = ctypes.pointer(secs) if secs is not None else None
    text = c_void_p()
    n = c_size_t()
    L.pl_chat_template_apply(t, byref(p), byref(text), byref(n))
    try:
        return ctypes.string_at(text, n.value).decode("utf-8", "replace") if n.value else ""
    finally:
        L.pl_free(text)


# ---- sampling -----------------------------------------------------------------


def sampler_default_params() -> dict:
    p = lib().pl_sampler_default_params()
    return {"temperature": p.temperature, "top_k": p.top_k, "top_p": p.top_p, "min_p": p.min_p, "seed": p.seed}


def sampler_create(n_vocab: int, temperature: float, top_k: int, top_p: float, min_p: float, seed: int) -> int:
    p = SamplerParams(float(temperature), int(top_k), float(top_p), float(min_p), int(seed) & (2**64 - 1))
    out = c_void_p()
    lib().pl_sampler_create(byref(p), int(n_vocab), byref(out))
    return out.value


def sampler_free(s: int) -> None:
    lib().pl_sampler_free(s)


def sampler_sample(s: int, logits: np.ndarray) -> int:
    """The sampled token. Raises FormatError when the logits hold NaN/+Inf
    (the C call returns -1: broken weights), never returns -1."""
    if logits.dtype != np.float32 or not logits.flags.c_contiguous:
        logits = np.ascontiguousarray(logits, dtype=np.float32)
    tok = int(lib().pl_sampler_sample(s, _f32_ptr(logits)))
    if tok < 0:
        raise error_for_status(3, last_error() or "the sampler refused the logits")  # PL_ERR_FORMAT
    return tok


def _need(name: str):
    fn = getattr(lib(), name, None)
    if fn is None:
        raise LibraryNotFoundError(f"{_lib_path} lacks {name} (an older build?)")
    return fn


def sampler_set_penalties(s: int, repeat_penalty: float, repeat_last_n: int, frequency_penalty: float,
                          presence_penalty: float) -> None:
    _need("pl_sampler_set_penalties")(s, float(repeat_penalty), int(repeat_last_n), float(frequency_penalty),
                                      float(presence_penalty))


def sampler_set_logit_bias(s: int, bias: dict) -> None:
    ids, ptr = _ids_array([int(k) for k in bias])
    vals = np.ascontiguousarray([float(v) for v in bias.values()], dtype=np.float32)
    _need("pl_sampler_set_logit_bias")(s, ptr, _f32_ptr(vals), ids.size)


def sampler_add_history(s: int, ids) -> None:
    arr, ptr = _ids_array(ids)
    _need("pl_sampler_add_history")(s, ptr, arr.size)


def logprobs(logits: np.ndarray, token: int, n_top: int) -> tuple[float, list[tuple[int, float]]]:
    """Log-softmax of a raw logits row: token's log-probability and the
    n_top most likely (token, logprob), most likely first."""
    if logits.dtype != np.float32 or not logits.flags.c_contiguous:
        logits = np.ascontiguousarray(logits, dtype=np.float32)
    lp = c_float()
    top = (TokenLogprob * max(1, int(n_top)))()
    _need("pl_logprobs")(_f32_ptr(logits), logits.size, int(token), byref(lp), top, int(n_top))
    return float(lp.value), [(int(top[i].token), float(top[i].logprob)) for i in range(int(n_top))]


# ---- inspecting a GGUF file ---------------------------------------------------

# GGUF value type ids (the spec's numbering, as pl_inspect_meta_type returns).
_GGUF_INT_TYPES = {0, 1, 2, 3, 4, 5, 10, 11}
_GGUF_FLOAT_TYPES = {6, 12}
_GGUF_BOOL, _GGUF_STRING, _GGUF_ARRAY = 7, 8, 9


class InspectFile:
    """A GGUF file opened by the C reader (pl_inspect_*): metadata, tensor
    table, and the C reference decoder. Mostly for tests and tools; the
    pure-Python reader is pocketllm.gguf."""

    def __init__(self, path):
        L = lib()
        if not hasattr(L, "pl_inspect_open"):
            raise LibraryNotFoundError(f"{_lib_path} lacks the pl_inspect_* API (an older build?)")
        out = c_void_p()
        L.pl_inspect_open(os.fsencode(os.fspath(path)), byref(out))
        self._h = out.value

    def close(self) -> None:
        h, self._h = getattr(self, "_h", None), None
        if h:
            lib().pl_inspect_close(h)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def __del__(self):
        try:
            self.close()
        except Exception:
            pass

    @property
    def handle(self) -> int:
        if not self._h:
            raise InvalidArgumentError("the file is closed")
        return self._h

    @property
    def version(self) -> int:
        return lib().pl_inspect_version(self.handle)

    @property
    def alignment(self) -> int:
        return lib().pl_inspect_alignment(self.handle)

    @property
    def data_offset(self) -> int:
        return lib().pl_inspect_data_offset(self.handle)

    def keys(self) -> list[str]:
        L, h = lib(), self.handle
        out = []
        ptr, n = c_void_p(), c_size_t()
        for i in range(L.pl_inspect_n_meta(h)):
            L.pl_inspect_meta_key(h, i, byref(ptr), byref(n))
            out.append(ctypes.string_at(ptr, n.value).decode("utf-8", "surrogateescape"))
        return out

    def meta_type(self, key: str) -> tuple[int, int, int]:
        """(type, element type or -1, count or 1) of a key's value."""
        t, et, n = c_int(), c_int(), c_uint64()
        lib().pl_inspect_meta_type(self.handle, key.encode("utf-8", "surrogateescape"), byref(t), byref(et), byref(n))
        return t.value, et.value, n.value

    def _str(self, k: bytes, i: int) -> str:
        ptr, n = c_void_p(), c_size_t()
        lib().pl_inspect_meta_str(self.handle, k, i, byref(ptr), byref(n))
        return ctypes.string_at(ptr, n.value).decode("utf-8", "surrogateescape") if n.value else ""

    def _num(self, k: bytes, i: int, t: int):
        if t in _GGUF_FLOAT_TYPES:
            d = c_double()
            lib().pl_inspect_meta_f64(self.handle, k, i, byref(d))
            return d.value
        v = c_int64()
        if t == 10:  # uint64 may exceed int64: read through the double only if needed
            try:
                lib().pl_inspect_meta_i64(self.handle, k, i, byref(v))
            except InvalidArgumentError:
                d = c_double()
                lib().pl_inspect_meta_f64(self.handle, k, i, byref(d))
                return int(d.value)
            return v.value
        lib().pl_inspect_meta_i64(self.handle, k, i, byref(v))
        return bool(v.value) if t == _GGUF_BOOL else v.value

    def get(self, key: str):
        """A value: int/float/bool/str, or a list for an array (one C call
        per element, so slow for a whole vocabulary)."""
        t, et, n = self.meta_type(key)
        k = key.encode("utf-8", "surrogateescape")
        if t == _GGUF_STRING:
            return self._str(k, -1)
        if t != _GGUF_ARRAY:
            return self._num(k, -1, t)
        if et == _GGUF_STRING:
            return [self._str(k, i) for i in range(n)]
        if et == _GGUF_ARRAY:
            raise InvalidArgumentError(f"key '{key}': nested arrays are not readable through the C API")
        return [self._num(k, i, et) for i in range(n)]

    def tensors(self) -> list[dict]:
        L, h = lib(), self.handle
        out = []
        info = TensorInfo()
        for i in range(L.pl_inspect_n_tensors(h)):
            L.pl_inspect_tensor(h, i, byref(info))
            out.append({"name": info.name.decode("utf-8", "surrogateescape"), "type": info.type,
                        "type_name": _s(info.type_name), "n_dims": info.n_dims,
                        "shape": tuple(info.ne[d] for d in range(info.n_dims)), "offset": info.offset,
                        "size": info.size})
        return out

    def dequantize(self, index: int, row0: int = 0, n_rows: int | None = None) -> np.ndarray:
        """Rows of tensor ``index`` decoded by the C reference decoder,
        as float32 [n_rows, ne[0]]."""
        L, h = lib(), self.handle
        info = TensorInfo()
        L.pl_inspect_tensor(h, int(index), byref(info))
        ne0 = info.ne[0]
        rows = info.ne[1] * info.ne[2] * info.ne[3]
        if n_rows is None:
            n_rows = rows - row0
        out = np.empty((max(n_rows, 0), ne0), dtype=np.float32)
        L.pl_inspect_dequantize(h, int(index), int(row0), int(n_rows), _f32_ptr(out))
        return out
