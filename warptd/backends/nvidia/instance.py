"""Which initialisation of a GPU by the driver this is (:class:`~warptd.models.DriverInstance`): what a
restart of warptd compares with the one its saved totals were counted under.

NVML has one call that tells it, ``nvmlDeviceGetGpuUptime_v1`` (nvml.h of CUDA 13.5: "Number of
seconds the GPU has been up since it was initialized by the driver"; it "resets to zero on a host
reboot, driver unload/reload, or a GPU reset"), which nvidia-ml-py 13.615 does not wrap: it is called
through nvidia-ml-py's own function lookup. No driver seen has it yet: the R610 drivers 610.43.02 and
610.57.04 (CUDA 13.3) export no such symbol, nor do 580.173.02 and 590.48.01 (their symbol lists in
``tests/captures/nvidia-smi/``). Where it is missing, the inode numbers of sysfs nodes,
which the kernel allocates anew for each node it creates (kernfs ids, cyclic), tell a reload of the
nvidia module and a rebind of the GPU: ``/sys/module/nvidia`` and the GPU's ``driver`` link.
"""

from __future__ import annotations

import ctypes
import os
import time
from pathlib import Path
from typing import Any

from warptd.backends.nvidia.calls import pointer
from warptd.backends.nvidia.guard import DeviceGuard
from warptd.models import DriverInstance, pci_address


class _GpuUptime(ctypes.Structure):
    """nvmlGpuUptime_v1_t."""

    _fields_ = (("uptime", ctypes.c_uint),)


def driver_instance(
    nvml: Any, guard: DeviceGuard, handle: Any, bus_id: str | None, sysfs: Path
) -> DriverInstance:
    """The driver's current initialisation of the GPU at ``handle`` (PCI ``bus_id``), as far as the
    driver's NVML and ``sysfs`` tell it."""
    return DriverInstance(up_since=_up_since(nvml, guard, handle), sysfs=_sysfs_nodes(bus_id, sysfs))


def _up_since(nvml: Any, guard: DeviceGuard, handle: Any) -> float | None:
    """CLOCK_BOOTTIME seconds when the driver initialised the GPU; None without the call (a driver
    without it, R610 included, answers FUNCTION_NOT_FOUND, once: not asked again)."""

    def uptime() -> int | None:
        function = pointer(nvml, "nvmlDeviceGetGpuUptime_v1")
        if function is None:
            return None
        answer = _GpuUptime()
        code = function(handle, ctypes.byref(answer))
        if code:
            raise nvml.NVMLError(code)
        return int(answer.uptime)

    seconds = guard.call("gpu_uptime", uptime)
    return None if seconds is None else time.clock_gettime(time.CLOCK_BOOTTIME) - seconds


def _sysfs_nodes(bus_id: str | None, sysfs: Path) -> str | None:
    """``module:link``: the inode numbers of the nvidia module's sysfs node and of the GPU's driver link,
    each new when the kernel makes it again; None where either is missing."""
    address = pci_address(bus_id)
    if address is None:
        return None
    try:
        module = os.lstat(sysfs / "module" / "nvidia").st_ino
        link = os.lstat(sysfs / "bus" / "pci" / "devices" / address / "driver").st_ino
    except OSError:
        return None
    return f"{module}:{link}"
