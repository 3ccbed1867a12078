"""Quantization and fit planning: what `pocketllm quantize` and `pocketllm
fit` do, through the library's public C API (pl_quantize_file, pl_fit,
pl_quant_mix ... in include/pocketllm.h).

    import pocketllm
    pocketllm.quant_types()                       # the mixes: Q8_0, Q4_K_M, ...
    pocketllm.quantize("m-f16.gguf", "m-q4.gguf", "Q4_K_M",
                       overrides={"ffn_down": "q6_K"})
    plan = pocketllm.fit("m-f16.gguf", memory=4 << 30)
    plan["plan"], plan["reason"]                  # "Q4_K_M", "quantize"
"""
from __future__ import annotations

import ctypes
import os
import threading
from ctypes import (CFUNCTYPE, POINTER, Structure, byref, c_bool, c_char_p, c_double, c_int, c_int32, c_int64,
                    c_uint64, c_void_p)

from . import native
from .errors import InvalidArgumentError


class QuantMixInfo(Structure):
    _fields_ = [("name", c_char_p), ("ftype", c_int32), ("base_type", c_char_p), ("base_bpw", c_double),
                ("needs_imatrix", c_bool), ("summary", c_char_p)]


class QuantTypeInfo(Structure):
    _fields_ = [("name", c_char_p), ("type", c_int32), ("block_size", c_int64), ("bpw", c_double),
                ("needs_imatrix", c_bool)]


class QuantOverride(Structure):
    _fields_ = [("pattern", c_char_p), ("type", c_char_p)]


class QuantizeStats(Structure):
    _fields_ = [("n_elements", c_uint64), ("bytes_in", c_uint64), ("bytes_out", c_uint64), ("file_size", c_uint64),
                ("n_tensors", c_int32), ("n_quantized", c_int32), ("n_fallback", c_int32)]


LOG_FN = CFUNCTYPE(None, c_void_p, c_char_p)


class QuantizeParams(Structure):
    _fields_ = [("type", c_char_p), ("imatrix_path", c_char_p), ("overrides", POINTER(QuantOverride)),
                ("n_overrides", c_int32), ("n_threads", c_int), ("log", LOG_FN), ("log_user", c_void_p),
                ("stats", POINTER(QuantizeStats))]


class FitParams(Structure):
    _fields_ = [("device", c_char_p), ("n_ctx", c_int), ("n_threads", c_int), ("budget", c_uint64),
                ("cache_type_k", c_char_p), ("cache_type_v", c_char_p)]


class FitRungInfo(Structure):
    _fields_ = [("name", c_char_p), ("ftype", c_int32), ("as_is", c_bool), ("needs_imatrix", c_bool),
                ("fits", c_bool), ("status", c_int), ("error", c_char_p), ("plan", native.MemoryPlan),
                ("n_params", c_uint64), ("bpw", c_double), ("cache_type_k", c_char_p),
                ("cache_type_v", c_char_p), ("max_ctx", c_int32)]


# pl_fit_reason, by value
FIT_REASONS = {0: "as_is", 1: "quantize", 2: "quantize_imatrix", 3: "none_fits", 4: "cannot_run"}

_S = native.STATUS
_DECLS = {
    "pl_quant_n_mixes": (c_int32, []),
    "pl_quant_mix": (_S, [c_int32, POINTER(QuantMixInfo)]),
    "pl_quant_n_types": (c_int32, []),
    "pl_quant_type": (_S, [c_int32, POINTER(QuantTypeInfo)]),
    "pl_quantize_default_params": (QuantizeParams, []),
    "pl_quantize_file": (_S, [c_char_p, c_char_p, POINTER(QuantizeParams)]),
    "pl_fit_default_params": (FitParams, []),
    "pl_fit": (_S, [c_char_p, POINTER(FitParams), POINTER(c_void_p)]),
    "pl_fit_preset": (_S, [c_char_p, c_char_p, POINTER(FitParams), POINTER(c_void_p)]),
    "pl_fit_free": (None, [c_void_p]),
    "pl_fit_model": (c_char_p, [c_void_p]),
    "pl_fit_device": (c_char_p, [c_void_p]),
    "pl_fit_n_ctx": (c_int32, [c_void_p]),
    "pl_fit_budget": (c_uint64, [c_void_p]),
    "pl_fit_budget_is_free_memory": (c_bool, [c_void_p]),
    "pl_fit_n_rungs": (c_int32, [c_void_p]),
    "pl_fit_rung": (_S, [c_void_p, c_int32, POINTER(FitRungInfo)]),
    "pl_fit_chosen": (c_int32, [c_void_p]),
    "pl_fit_reason_of": (c_int, [c_void_p]),
}

_ready = False
_lock = threading.Lock()


def _lib():
    """The library with this module's functions declared (once)."""
    global _ready
    lib = native.lib()
    if _ready:
        return lib
    with _lock:
        for name, (restype, argtypes) in _DECLS.items():
            fn = native._need(name)
            fn.argtypes = argtypes
            if restype is _S:
                fn.restype = c_int
                fn.errcheck = native._errcheck
            else:
                fn.restype = restype
        _ready = True
    return lib


def _str(b: bytes | None) -> str:
    return b.decode("utf-8", "replace") if b else ""


def quant_types() -> list[dict]:
    """The quantization mixes pocketllm can make (llama.cpp's file types),
    highest precision first: name, ftype (general.file_type), base_type (the
    default tensor type), bits_per_weight (of base_type), needs_imatrix,
    summary."""
    lib = _lib()
    out = []
    for i in range(lib.pl_quant_n_mixes()):
        mi = QuantMixInfo()
        lib.pl_quant_mix(i, byref(mi))
        out.append({"name": _str(mi.name), "ftype": mi.ftype, "base_type": _str(mi.base_type),
                    "bits_per_weight": mi.base_bpw, "needs_imatrix": bool(mi.needs_imatrix),
                    "summary": _str(mi.summary)})
    return out


def tensor_types() -> list[dict]:
    """The tensor types a per-tensor override may name (GGML's names)."""
    lib = _lib()
    out = []
    for i in range(lib.pl_quant_n_types()):
        ti = QuantTypeInfo()
        lib.pl_quant_type(i, byref(ti))
        out.append({"name": _str(ti.name), "type": ti.type, "block_size": ti.block_size, "bits_per_weight": ti.bpw,
                    "needs_imatrix": bool(ti.needs_imatrix)})
    return out


def quantize(src: str | os.PathLike, dst: str | os.PathLike, type: str, *, imatrix: str | os.PathLike | None = None,
             overrides: dict[str, str] | list[tuple[str, str]] | None = None, threads: int = 0,
             log=None) -> dict:
    """Writes src requantized to the mix `type` ("Q4_K_M", ...) at dst,
    byte-identical to `pocketllm quantize` (and llama-quantize). overrides:
    {regex: tensor type} (llama-quantize's --tensor-type; the last match
    wins). log: a callable receiving the progress text. Returns the totals:
    n_tensors, n_quantized, n_fallback, n_elements, bytes_in, bytes_out,
    file_size."""
    lib = _lib()
    items = list(overrides.items()) if isinstance(overrides, dict) else list(overrides or [])
    keep = [(str(p).encode(), str(t).encode()) for p, t in items]
    arr = (QuantOverride * max(1, len(keep)))(*[QuantOverride(p, t) for p, t in keep])
    stats = QuantizeStats()
    p = lib.pl_quantize_default_params()
    p.type = str(type).encode()
    im = os.fsencode(imatrix) if imatrix is not None else None
    p.imatrix_path = im
    p.overrides = arr if keep else None
    p.n_overrides = len(keep)
    p.n_threads = int(threads)
    p.stats = ctypes.pointer(stats)
    cb = LOG_FN(lambda _user, text: log(text.decode("utf-8", "replace"))) if log is not None else LOG_FN()
    p.log = cb
    lib.pl_quantize_file(os.fsencode(src), os.fsencode(dst), byref(p))
    return {f: getattr(stats, f) for f, _ in QuantizeStats._fields_}


def fit(model: str | os.PathLike | None = None, *, preset: str | None = None, vocab: str | os.PathLike | None = None,
        device: str = "cpu", memory: int | None = None, n_ctx: int = 0, threads: int = 0,
        cache_type_k: str | None = None, cache_type_v: str | None = None) -> dict:
    """Plans every rung of the quantization ladder for a model file (or a
    Qwen3 preset "0.6b".."8b" with a vocab-only GGUF) on one device and
    budget (memory: bytes; None = the device's free memory). Returns the
    shape of `pocketllm fit --json` -- model, device, n_ctx, budget,
    budget_source, rungs (name, as_is, needs_imatrix, fits, and weights /
    kv_cache / scratch / total / bpw, or error), plan (the chosen rung's name
    or None) -- plus "chosen" (its index or -1) and "reason" ("as_is",
    "quantize", "quantize_imatrix", "none_fits", "cannot_run"). Each plannable
    rung also has cache_type_k / cache_type_v (the KV cache types of its plan)
    and max_ctx (the longest context the budget holds there); with a plan,
    plan_cache_type_k / plan_cache_type_v. cache_type_k / cache_type_v fix the
    cache types of every rung (None, both: f16, or q8_0 where that makes a
    rung fit, before the weights are lowered)."""
    if (model is None) == (preset is None):
        raise InvalidArgumentError("give exactly one of model or preset")
    if memory is not None and int(memory) <= 0:
        raise InvalidArgumentError("memory must be a positive byte count")
    lib = _lib()
    fp = lib.pl_fit_default_params()
    dev = device.encode() if device else None
    fp.device = dev
    fp.n_ctx = int(n_ctx)
    fp.n_threads = int(threads)
    fp.budget = int(memory or 0)
    ctk = cache_type_k.encode() if cache_type_k else None   # alive until the call returns
    ctv = cache_type_v.encode() if cache_type_v else None
    fp.cache_type_k = ctk
    fp.cache_type_v = ctv
    r = c_void_p()
    if preset is not None:
        lib.pl_fit_preset(preset.encode(), os.fsencode(vocab) if vocab is not None else None, byref(fp), byref(r))
    else:
        lib.pl_fit(os.fsencode(model), byref(fp), byref(r))
    try:
        rungs = []
        for i in range(lib.pl_fit_n_rungs(r)):
            g = FitRungInfo()
            lib.pl_fit_rung(r, i, byref(g))
            d = {"name": _str(g.name), "as_is": bool(g.as_is), "needs_imatrix": bool(g.needs_imatrix)}
            if g.status != 0:
                d.update({"fits": False, "error": _str(g.error)})
            else:
                d.update({"weights": g.plan.weights, "kv_cache": g.plan.kv_cache, "scratch": g.plan.scratch,
                          "total": g.plan.total, "bpw": g.bpw, "fits": bool(g.fits),
                          "cache_type_k": _str(g.cache_type_k), "cache_type_v": _str(g.cache_type_v),
                          "max_ctx": g.max_ctx})
            rungs.append(d)
        chosen = lib.pl_fit_chosen(r)
        kv = ({"plan_cache_type_k": rungs[chosen]["cache_type_k"], "plan_cache_type_v": rungs[chosen]["cache_type_v"]}
              if chosen >= 0 else {})
        return {**kv, "model": _str(lib.pl_fit_model(r)), "device": _str(lib.pl_fit_device(r)), "n_ctx": lib.pl_fit_n_ctx(r),
                "budget": lib.pl_fit_budget(r),
                "budget_source": "free_memory" if lib.pl_fit_budget_is_free_memory(r) else "given",
                "rungs": rungs, "plan": rungs[chosen]["name"] if chosen >= 0 else None, "chosen": chosen,
                "reason": FIT_REASONS.get(lib.pl_fit_reason_of(r), "unknown")}
    finally:
        lib.pl_fit_free(r)
