"""NVIDIA GPUs and their MIG devices through NVML (nvidia-ml-py): one device object per GPU, the power
NVML measures apart (``nvml``), each GPU's processes and its XID events."""

from warptd.backends.vendor import Accelerator, Power, Vendor

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
