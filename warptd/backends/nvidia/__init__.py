"""NVIDIA GPUs and their MIG devices through NVML (nvidia-ml-py): one device object per GPU, the power
NVML measures apart (``nvml``), each GPU's processes and its XID events.

``NvidiaBackend`` is re-exported lazily, so that importing :mod:`.session` alone (the XID and process
monitors) does not load the backend.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from warptd.backends.vendor import Accelerator, Power, Vendor

if TYPE_CHECKING:
    from warptd.backends.nvidia.backend import NvidiaBackend

__all__ = ["VENDOR", "NvidiaBackend"]

VENDOR = Vendor(
    accelerators=(
        Accelerator(
            "nvidia",
            "warptd.backends.nvidia.backend:NvidiaBackend",
            processes="warptd.processes.nvml:open_processes",
            events="warptd.events.xid:open_events",
        ),
        Accelerator("nvidia_mig", "warptd.backends.nvidia.mig:NvidiaMigBackend"),
    ),
    power=(Power("nvml", companion="nvidia", target="warptd.power.nvml:NvmlPowerBackend"),),
    rank=10,
)


def __getattr__(name: str) -> Any:
    if name == "NvidiaBackend":
        from warptd.backends.nvidia.backend import NvidiaBackend

        return NvidiaBackend
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
