"""Who a GPU is: its UUID (asked once), what ``warptd list`` shows of it, the driver's initialisation of
it, and the ``MIG-…`` UUIDs of its MIG devices; the last identity listed carries over an NVML reopen."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

from warptd.backends.nvidia.api import GpuHandle
from warptd.backends.nvidia.instance import driver_instance
from warptd.backends.nvidia.mig import mig_device_handles
from warptd.backends.nvidia.session import text
from warptd.models import DriverInstance, GPUInfo, MemoryUsage

if TYPE_CHECKING:
    from warptd.config import Settings

MODEL = "NVIDIA GPU"


class GpuIdentity:
    """GPU ``index`` (its handle None: NVML refused it) as last listed (``known``), asked through its
    guard."""

    __slots__ = ("_gpu", "_index", "_settings", "_uuid", "known")

    def __init__(
        self, index: int, gpu: GpuHandle, settings: Callable[[], Settings], known: GPUInfo | None = None
    ) -> None:
        self._index, self._gpu, self._settings = index, gpu, settings
        self.known = known  # the last identity listed
        self._uuid: str | None = None

    @property
    def compute_capability(self) -> str | None:
        """As last listed (``8.6``), None before."""
        return self.known.compute_capability if self.known is not None else None

    def uuid(self) -> str | None:
        """The GPU's UUID, asked once; the last one listed while NVML refuses its handle."""
        if self._gpu.handle is None:
            return self.known.uuid if self.known else None
        if self._uuid is None:
            uuid = self._gpu.get("uuid", "nvmlDeviceGetUUID")
            if uuid is None:
                return None
            self._uuid = text(uuid)
        return self._uuid

    def info(self, driver: str | None, memory: Callable[[], MemoryUsage | None]) -> GPUInfo:
        """The GPU's identity now (the last one listed where NVML refused its handle); ``memory()`` reads
        its memory now, for its size."""
        if self._gpu.handle is None:  # lost at the last reopen: keep its identity, so it shows as down
            return self.known or GPUInfo(index=self._index, model=MODEL)
        nvml, guard, handle = self._gpu.api.nvml, self._gpu.guard, self._gpu.handle
        name = guard.call("name", nvml.nvmlDeviceGetName, handle)
        uuid = guard.call("uuid", nvml.nvmlDeviceGetUUID, handle)
        cc = guard.call("cc", nvml.nvmlDeviceGetCudaComputeCapability, handle)
        pci = guard.call("pci", nvml.nvmlDeviceGetPciInfo, handle)
        bus_id = text(pci.busId) if pci is not None else None
        size = memory()
        return GPUInfo(
            index=self._index,
            model=text(name) if name is not None else MODEL,
            **GPUInfo.memory_fields(size.total if size else None),
            uuid=text(uuid) if uuid is not None else None,
            compute_capability=f"{cc[0]}.{cc[1]}" if cc is not None else None,
            pcie_gen=guard.call("pcie_gen", nvml.nvmlDeviceGetMaxPcieLinkGeneration, handle),
            pci_bus_id=bus_id,
            driver_version=driver,
            aliases=self._mig_uuids(),
            driver_instance=self._driver_instance(bus_id),
        )

    def _driver_instance(self, bus_id: str | None) -> DriverInstance:
        """The driver's current initialisation of the GPU, the one known before while it is the same
        (its start, from whole seconds of uptime, varies by a second from one reading to the next)."""
        gpu = self._gpu
        now = driver_instance(gpu.api.nvml, gpu.guard, gpu.handle, bus_id, self._settings().sysfs)
        known = self.known.driver_instance if self.known is not None else None
        return known if known is not None and now.same_as(known) and now.sysfs == known.sysfs else now

    def _mig_uuids(self) -> list[str] | None:
        """The ``MIG-…`` UUIDs of the GPU's MIG devices: the IDs NVIDIA's device plugin gives pods that
        hold a MIG slice, so their allocation and energy are matched to this GPU."""
        gpu, uuids = self._gpu, []
        nvml = gpu.api.nvml
        for mig in mig_device_handles(gpu.guard, nvml, gpu.handle):
            uuid = gpu.guard.call("mig_uuid", nvml.nvmlDeviceGetUUID, mig)
            if uuid is not None:
                uuids.append(text(uuid))
        return uuids or None
