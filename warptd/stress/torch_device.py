"""torch helpers for workloads, shared by every test; torch is imported only when these run."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

DTYPES = ("float32", "tf32", "bfloat16", "float16")


def torch() -> Any:
    import torch as module

    return module


def resolve(device: str) -> Any:
    return torch().device(device)


def available(device: str) -> bool:
    """Whether torch can use this device string (``cpu``, ``cuda:1``, ``xpu:0`` …); False for a string
    torch does not know (``tt:0``), so the workload reports itself unavailable instead of crashing."""
    t = torch()
    try:
        dev = resolve(device)
    except RuntimeError:
        return False
    if dev.type == "cpu":
        return True
    module = getattr(t, dev.type, None)
    if module is None or not module.is_available():
        return False
    count = getattr(module, "device_count", lambda: 1)()
    return (dev.index or 0) < count


def synchronizer(device: str) -> Callable[[], None]:
    """A function that waits until queued work on ``device`` has finished (a no-op on CPU)."""
    t, dev = torch(), resolve(device)
    sync = getattr(getattr(t, dev.type, None), "synchronize", None) if dev.type != "cpu" else None
    if sync is None:
        return lambda: None
    return lambda: sync(dev)


def fastest_dtype(kind: str, compute_capability: str | None) -> str:
    """bfloat16 on GPUs that have it (NVIDIA from compute capability 8.0, every ROCm GPU), else
    float16; float32 on the CPU. Pure Python: the daemon picks it without torch."""
    if kind == "cpu":
        return "float32"
    major = (compute_capability or "").partition(".")[0]
    if kind == "cuda" and major.isdigit() and int(major) < 8:
        return "float16"
    return "bfloat16"


def torch_dtype(name: str) -> Any:
    """The tensor dtype for a workload dtype name; ``tf32`` is float32 tensors on TF32 cores."""
    return getattr(torch(), "float32" if name == "tf32" else name)
