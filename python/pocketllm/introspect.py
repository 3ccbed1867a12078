"""What this build and this machine can do, read from the library's own
dispatch tables (pocketllm.h's introspection calls): the same facts, in the
same shapes, as ``pocketllm backends|devices|architectures|ops --json``.

    import pocketllm
    [d["name"] for d in pocketllm.devices() if d["usable"]]   # ['ref', 'cpu']
    pocketllm.ops()[0]["implemented"]["cpu"]                  # dtypes with kernels

Nothing here loads a model, opens a runtime library or starts a driver.
"""
from __future__ import annotations

from . import native

__all__ = ["backends", "devices", "architectures", "ops"]


def backends() -> list[dict]:
    """Every backend, in preference order: {"name", "summary", "status"
    ("implemented" or "declared"), "awaits" (declared ones only), "ops":
    {op: [dtypes its kernels take]}}."""
    out = []
    for b in native.backends():
        d = {"name": b["name"], "summary": b["summary"],
             "status": "implemented" if b["implemented"] else "declared"}
        if b["awaits"] is not None:
            d["awaits"] = b["awaits"]
        d["ops"] = b["ops"]
        out.append(d)
    return out


def devices() -> list[dict]:
    """Each backend's device probe (filesystem and CPUID only): {"name",
    "available", "implemented", "usable", "detail", "awaits" (declared ones
    only)}. usable = available and implemented."""
    out = []
    for i, b in enumerate(native.backends()):
        available, detail = native.device_probe(i)
        d = {"name": b["name"], "available": available, "implemented": b["implemented"],
             "usable": available and b["implemented"], "detail": detail}
        if b["awaits"] is not None:
            d["awaits"] = b["awaits"]
        out.append(d)
    return out


def architectures() -> list[dict]:
    """The model architectures this build constructs: {"name", "summary",
    "keys": the GGUF keys each reads, "{arch}" expanded}."""
    return native.architectures()


def ops(op: str | None = None, device: str | None = None) -> list[dict]:
    """Op schemas with the dtypes each backend implements: {"name",
    "summary", "inputs": [{"name", "dtypes"}], "output_dtypes",
    "kernel_selected_by", "shape_rule", "params", "implemented": {backend:
    [dtypes]}}. op / device keep one op or one backend (ValueError for an
    unknown name)."""
    from .errors import InvalidArgumentError
    if op is not None and native.op_index(op) < 0:
        raise InvalidArgumentError(f"unknown op '{op}'")
    if device is not None and native.backend_index(device) < 0:
        raise InvalidArgumentError(f"unknown backend '{device}'")
    backs = native.backends()
    out = []
    for i in range(native.op_count()):
        info = native.op_info(i)
        if op is not None and info["name"] != op:
            continue
        inputs = []
        for k in range(info["n_inputs"]):
            name, dtypes = native.op_operand(i, k)
            inputs.append({"name": name, "dtypes": dtypes})
        out.append({
            "name": info["name"], "summary": info["summary"], "inputs": inputs,
            "output_dtypes": native.op_operand(i, -1)[1],
            "kernel_selected_by": native.op_operand(i, info["key_input"])[0],
            "shape_rule": info["shape_rule"], "params": info["params"],
            "implemented": {b["name"]: b["ops"].get(info["name"], []) for b in backs
                            if device is None or b["name"] == device},
        })
    return out
