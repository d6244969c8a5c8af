"""NVIDIA MIG devices as devices of their own (backend ``nvidia_mig``), beside their GPUs (``nvidia``).

With MIG on, a GPU is cut into GPU instances, each with compute instances; NVML names each (GPU
instance, compute instance) pair a MIG device, with a ``MIG-…`` UUID that NVIDIA's device plugin
hands to pods. Each becomes a device with that UUID: its memory slice (through the MIG handle), GPM
activity of its GPU instance (``nvmlGpmMigSampleGet`` on the parent GPU) and
``warptd_device_mig_info`` naming its parent. A MIG device has no power sensor, utilization,
temperature or clocks: those series are absent (the parent GPU has them). The list is read again at
every rediscovery, as mig-manager creates and destroys instances while the daemon runs.
"""

from __future__ import annotations

from collections.abc import Hashable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, ClassVar

from warptd.backends.base import AcceleratorBackend
from warptd.backends.device import ReadPlan, ValueDevice
from warptd.backends.nvidia import session as nvml_session
from warptd.backends.nvidia.base import NvmlBackend
from warptd.backends.nvidia.engines import Presence
from warptd.backends.nvidia.gpm import GpmSources
from warptd.backends.nvidia.guard import Guard, IndexGuard
from warptd.backends.nvidia.sample import memory_versions
from warptd.metrics import catalog
from warptd.models import DeviceReading, GPUInfo, LabelledValues, MemoryUsage

if TYPE_CHECKING:
    from warptd.config import Settings


def mig_device_handles(guard: Guard, nvml: Any, handle: Any) -> list[Any]:
    """The handles of a GPU's MIG devices; none with MIG off or on a GPU without MIG."""
    mode = guard.call("mig_mode", nvml.nvmlDeviceGetMigMode, handle)
    if not mode or not mode[0]:
        return []
    handles = []
    for slot in range(guard.call("mig_count", nvml.nvmlDeviceGetMaxMigDeviceCount, handle) or 0):
        try:
            handles.append(nvml.nvmlDeviceGetMigDeviceHandleByIndex(handle, slot))
        except nvml.NVMLError as exc:
            if exc.value != nvml.NVML_ERROR_NOT_FOUND:  # NOT_FOUND: no MIG device in this slot
                guard.failed("mig_device", exc)
    return handles


@dataclass(frozen=True, slots=True)
class MigDevice:
    """One MIG device: its handle, identity and where it lives (parent GPU index and handle)."""

    handle: Any
    uuid: str
    name: str | None
    gpu_instance: int
    compute_instance: int
    parent: int
    parent_handle: Any
    parent_uuid: str

    @property
    def profile(self) -> str:
        """The profile in NVML's MIG device name (``NVIDIA H100 80GB HBM3 MIG 1g.10gb`` -> ``1g.10gb``)."""
        return (self.name or "").partition(" MIG ")[2]

    @property
    def gpm_source(self) -> Hashable:
        """GPM samples a GPU instance: compute instances of one GPU instance share its counters."""
        return ("gpu_instance", self.parent, self.gpu_instance)


class MigSlice(ValueDevice):
    """The reads of one MIG device: its memory slice (through its own handle) and its GPU instance's GPM
    activity (one sample per GPU instance a tick: ``sampled``, the instances sampled this tick). No
    power, utilization, temperature or clocks: the parent GPU has them."""

    def __init__(
        self,
        index: int,
        mig: MigDevice,
        *,
        nvml: Any,
        backend: AcceleratorBackend,
        sources: GpmSources,
        sampled: set[Hashable],
    ) -> None:
        super().__init__(index)
        self.mig, self._nvml, self._backend = mig, nvml, backend
        self._sources, self._sampled = sources, sampled

    def begin(self, plan: ReadPlan) -> None:
        """One GPM sample per GPU instance per tick (its compute instances share it), at the windows'
        pace while one records the device."""
        mig = self.mig
        source = mig.gpm_source
        if plan.power_only or source in self._sampled:
            return
        self._sampled.add(source)
        parent, guard = mig.parent_handle, IndexGuard(self._backend, self.index)
        if self._sources.supported(("gpu", mig.parent), guard, parent):
            self._sources.sample(
                source,
                guard,
                "gpm_mig_sample",
                "nvmlGpmMigSampleGet",
                parent,
                mig.gpu_instance,
                costs=self._backend.read_costs,
                watched=plan.watched,
            )

    def memory(self) -> MemoryUsage | None:
        """The slice's memory, bytes."""
        return self._backend.call_versions(self.index, *memory_versions(self._nvml, self.mig.handle))

    def gauges(self) -> dict[str, LabelledValues]:
        """``warptd_device_mig_info`` naming its parent and profile, and its GPU instance's GPM activity."""
        mig = self.mig
        identity = (mig.parent_uuid, str(mig.gpu_instance), str(mig.compute_instance), mig.profile)
        return {catalog.MIG_INFO.name: {identity: 1.0}, **self._sources.gauges(mig.gpm_source)}

    def counters(self) -> dict[str, LabelledValues]:
        """Its GPU instance's integrated PCIe and NVLink bytes."""
        return self._sources.counters(self.mig.gpm_source)


class NvidiaMigBackend(NvmlBackend):
    """The MIG devices of the node's MIG-enabled GPUs, over the shared NVML session."""

    name: ClassVar[str] = "nvidia_mig"

    def __init__(self, settings: Settings) -> None:
        super().__init__(settings)
        self._sampled: set[Hashable] = set()  # GPU instances sampled this tick
        # by GPU instance; NVLink is the parent GPU's, its engines shown once active
        self._sources = GpmSources(self._gpm, Presence(counts=None, links=0))
        with self._session.lock:
            self._generation = self._session.generation
            self._mig_gpus = self._mig_enabled_gpus()
            self.devices = self._slices(self._enumerate())

    def _slices(self, found: list[MigDevice]) -> list[MigSlice]:
        return [
            MigSlice(index, mig, nvml=self._nvml, backend=self, sources=self._sources, sampled=self._sampled)
            for index, mig in enumerate(found)
        ]

    # -- discovery -------------------------------------------------------------------------------
    def _mig_enabled_gpus(self) -> int:
        """How many GPUs have MIG mode on now: the backend is available while one does."""
        nvml, count = self._nvml, 0
        for index, handle in enumerate(self._session.handles):
            if handle is not None:
                mode = self.guarded(("mig_mode_probe", index), nvml.nvmlDeviceGetMigMode, handle)
                count += bool(mode and mode[0])
        return count

    def _enumerate(self) -> list[MigDevice]:
        """Every MIG device of every GPU with MIG on, GPU by GPU, in NVML's slot order."""
        nvml, found = self._nvml, []
        self._lost_now.clear()  # read indexes, not GPU indexes: they must not hide a GPU here
        for parent, handle in enumerate(self._session.handles):
            if handle is None:
                continue
            handles = mig_device_handles(IndexGuard(self, parent), nvml, handle)
            parent_uuid = (
                self.call(parent, "parent_uuid", nvml.nvmlDeviceGetUUID, handle) if handles else None
            )
            for mig in handles:
                uuid = self.call(parent, "mig_uuid", nvml.nvmlDeviceGetUUID, mig)
                gpu_instance = self.call(parent, "gpu_instance", nvml.nvmlDeviceGetGpuInstanceId, mig)
                compute_instance = self.call(
                    parent, "compute_instance", nvml.nvmlDeviceGetComputeInstanceId, mig
                )
                if uuid is None or gpu_instance is None or compute_instance is None or parent_uuid is None:
                    continue  # not identifiable now: listed at a later rediscovery
                name = self.call(parent, "mig_name", nvml.nvmlDeviceGetName, mig)
                found.append(
                    MigDevice(
                        handle=mig,
                        uuid=nvml_session.text(uuid),
                        name=nvml_session.text(name) if name is not None else None,
                        gpu_instance=gpu_instance,
                        compute_instance=compute_instance,
                        parent=parent,
                        parent_handle=handle,
                        parent_uuid=nvml_session.text(parent_uuid),
                    )
                )
        self._lost_now.clear()
        return found

    def _failures(self) -> int:
        """Errors counted so far and not yet taken by the sampler (not "not supported" answers)."""
        with self._errors_lock:
            return sum(self._errors.values())

    def is_available(self) -> bool:
        """While a GPU has MIG mode on (with or without instances yet)."""
        return self._mig_gpus > 0

    def needs_rediscovery(self) -> bool:
        """Always: MIG instances come and go at any time (mig-manager), and pods hold them by UUID."""
        return True

    def rediscover(self) -> bool:
        """List the MIG devices again (reopening NVML first after a lost GPU or a reset NVML); True
        when the list changed. GPM samples of GPU instances gone are freed."""
        with self._session.lock:
            if self._suspect:
                if self._generation == self._session.generation:  # not reopened since (by nvidia)
                    # free the GPM samples while the NVML that made them is up, once no read is on
                    self._session.reopen(before=self._sources.reset)
                self._suspect = False  # a GPU still lost shows again at its next read
            if self._generation != self._session.generation:
                self._generation = self._session.generation
                self._sources.reset()  # the samples belonged to the NVML before the reopen
                self._unsupported.clear()
            before, failed = [device.mig.uuid for device in self.devices], self._failures()
            found = self._enumerate()
            if self._failures() > failed:
                return False  # NVML failing (reset, GPU lost): keep the list, whose reads show down
            self.devices = self._slices(found)
            sources = {mig.gpm_source for mig in found}
            for key in self._sources.opened():
                if key not in sources:
                    self._sources.forget(key)
            changed = [mig.uuid for mig in found] != before
            if changed:  # what an index answered belonged to the device that had it before
                self._unsupported.clear()
            return changed

    def list_devices(self) -> list[GPUInfo]:
        with self._session.lock:  # never beside a reopen (by this backend or nvidia)
            driver = self.get_driver_version()
            devices = []
            for device in self.devices:
                memory = device.memory() if self.device_present(device.index) else None
                devices.append(
                    GPUInfo(
                        index=device.index,
                        model=device.mig.name or "NVIDIA MIG device",
                        **GPUInfo.memory_fields(memory.total if memory else None),
                        uuid=device.mig.uuid,
                        driver_version=driver,
                    )
                )
        return devices

    def device_identity(self, index: int) -> str | None:
        return self.devices[index].mig.uuid if index < len(self.devices) else None

    def device_present(self, index: int) -> bool:
        return index < len(self.devices) and self._session.generation == self._generation

    def worker_device(self, info: GPUInfo) -> tuple[str, dict[str, str]]:
        """CUDA sees a MIG device only through CUDA_VISIBLE_DEVICES=MIG-<uuid>, as device 0."""
        return "cuda:0", {"CUDA_VISIBLE_DEVICES": info.uuid or ""}

    # -- telemetry --------------------------------------------------------------------------------
    def begin_sample(self) -> None:
        self._sampled.clear()

    def read_device(self, index: int, *, power_only: bool = False) -> DeviceReading:
        with self._session.lock:
            return super().read_device(index, power_only=power_only)

    def shutdown(self) -> None:
        with self._session.lock:
            self._sources.reset()  # free the GPM samples while NVML is still up
        super().shutdown()
