"""AMD GPUs and their partitions through amdsmi (ROCm's amd-smi-lib): one device object per handle, its
power and energy as the ``amdsmi`` power backend, and each GPU's processes for ``--workloads``."""

from warptd.backends.vendor import Accelerator, Power, Vendor

VENDOR = Vendor(
    accelerators=(
        Accelerator(
            "amd", "warptd.backends.amd.backend:AmdBackend", processes="warptd.processes.amd:open_processes"
        ),
    ),
    power=(Power("amdsmi", companion="amd"),),
    rank=20,
)
