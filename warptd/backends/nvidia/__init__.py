"""NVIDIA GPUs and their MIG devices through NVML (nvidia-ml-py): one device object per GPU.

``NvidiaBackend`` is re-exported lazily, so that importing :mod:`.session` alone (the XID and process
monitors) does not load the backend.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from warptd.backends.nvidia.backend import NvidiaBackend

__all__ = ["NvidiaBackend"]


def __getattr__(name: str) -> Any:
    if name == "NvidiaBackend":
        from warptd.backends.nvidia.backend import NvidiaBackend

        return NvidiaBackend
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
