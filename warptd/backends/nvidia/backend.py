"""NVIDIA GPUs through NVML (nvidia-ml-py), one :class:`~warptd.backends.nvidia.gpu.Gpu` per GPU.

NVML reports mW, mJ, MHz, ns and percent; the device objects convert. The backend lists the GPUs,
opens their device objects on the shared :mod:`~warptd.backends.nvidia.session`, and opens them
again (one assignment) when NVML was reopened or a refused handle came back. Each GPU is read under
its own lock and a share of the session's, so one GPU's hung call holds up no other GPU's read.
"""

from __future__ import annotations

import threading
from collections.abc import Sequence
from typing import TYPE_CHECKING, ClassVar

from warptd.backends.nvidia import fields
from warptd.backends.nvidia.api import NvmlApi
from warptd.backends.nvidia.base import NvmlBackend
from warptd.backends.nvidia.gpu import Gpu, GpuContext
from warptd.backends.nvidia.sample import CLOCKS, PSTATE, REASONS, TEMPERATURE
from warptd.errors import BackendUnavailableError, ErrorKind
from warptd.models import DeviceReading, GPUInfo, LabelledValues, MemoryUsage, Utilization

if TYPE_CHECKING:
    from warptd.backends.checkup import BackendCheckup, CheckupPlan
    from warptd.config import Settings


class NvidiaBackend(NvmlBackend):
    """NVIDIA GPUs; handles come from the shared NVML session, cached once."""

    name: ClassVar[str] = "nvidia"

    def __init__(self, settings: Settings) -> None:
        super().__init__(settings)
        try:
            self._api = NvmlApi(self._nvml, self.classify_error)
        except AttributeError as exc:  # an nvidia-ml-py too old for these constants
            self._lease.release()
            raise BackendUnavailableError(f"nvidia-ml-py too old: {exc}") from exc
        self._handles = self._session.handles
        self._mig_on = False  # some GPU has MIG on: its instances are re-listed at every rediscovery
        self._watched: frozenset[int] = frozenset()  # the GPUs a window records (:meth:`watch_devices`)
        self._anchored: set[int] = set()  # the GPUs whose next read is an edge (:meth:`anchor`)
        self._sync_lock = threading.Lock()  # one reader opens the device objects again after a reopen
        #: One device object per GPU that NVML counts, as of NVML initialisation ``_generation``.
        self.gpus: tuple[Gpu, ...] = self._open_gpus(())

    def _open_gpus(self, before: Sequence[Gpu]) -> tuple[Gpu, ...]:
        """A device object per GPU NVML lists now, with the field ids of the driver's branch (a reload
        may have brought another, which numbers the fields its own way); what is warptd's own (field
        totals, the last identity listed) carries over from ``before`` by index."""
        context = GpuContext(
            api=self._api,
            field_set=fields.FieldSet(fields.numbering(self.get_driver_version()), self.selection.reads),
            gpm=self._gpm,
            settings=lambda: self.settings,
            report=self.device_failed,
            read_costs=self.read_costs,
        )
        return tuple(
            Gpu(index, handle, context, before[index] if index < len(before) else None)
            for index, handle in enumerate(self._handles)
        )

    def needs_rediscovery(self) -> bool:
        """After a lost GPU or a reset NVML, while a handle is refused, and while MIG is on anywhere:
        MIG instances come and go at any time (mig-manager), and pods are allocated by their UUIDs."""
        return self._suspect or None in self._handles or self._mig_on

    def rediscover(self) -> bool:
        """Reopen NVML after a lost GPU or a reset NVML (stay suspect until NVML is back); else ask
        again for the handles NVML refused, without disturbing the GPUs that answer. True when the
        devices should be listed again (MIG on: their MIG UUIDs are re-read then)."""
        if self._suspect:
            gone = len(self._session.gone)
            # the GPM samples are freed while the NVML that made them is still up, once no read is on
            back = self._session.reopen(before=self._close_gpus)
            # suspect while NVML is not back or loses GPUs still; a GPU gone for good is not looked
            # for by reopening every time (it reads down under its index)
            self._suspect = not back or len(self._session.gone) > gone
            self._sync_generation()
            return back
        recovered = None in self._handles and self._session.retry_refused()
        self._sync_generation()
        return recovered or self._mig_on

    def _close_gpus(self) -> None:
        for gpu in self.gpus:
            gpu.close()
        self._gpm.reset()

    def _sync_generation(self) -> None:
        """After a reopen (by this or another backend on the session) the device objects are stale:
        they are opened again (by the first reader to see it: reads share the session)."""
        with self._sync_lock:
            if self._generation != self._session.generation:
                self._generation = self._session.generation
                self._close_gpus()  # the samples belonged to the NVML before the reopen
                self.gpus = self._open_gpus(self.gpus)

    def device_identity(self, index: int) -> str | None:
        with self._session.lock:
            self._sync_generation()
            if index >= len(self.gpus):
                return None
            gpu = self.gpus[index]
            if not gpu.lock.acquire(blocking=False):  # being read, perhaps hung: as last listed
                return gpu.known.uuid if gpu.known is not None else None
            try:
                return gpu.uuid()
            finally:
                gpu.lock.release()

    def read_device(self, index: int) -> DeviceReading:
        """One GPU's reading, under its own lock and a share of the session's: the other GPUs are
        read meanwhile, from other threads, however long this one's calls take."""
        with self._session.lock:
            self._sync_generation()
            if self._absent(index):
                if index < len(self.gpus):
                    self.gpus[index].cadence.forget()  # back up, it reads everything at once
                return DeviceReading(index=index, up=False)
            edge = index in self._anchored
            self._anchored.discard(index)
            gpu = self.gpus[index]
            with gpu.lock:
                return gpu.read(index in self._watched, edge)

    def anchor(self, indices: Sequence[int]) -> None:
        """Read these GPUs' energy counters and throttle times at their next read: an edge. Kept on
        the backend, not the device objects, so an NVML reopen at that read keeps it."""
        self._anchored.update(indices)

    def watch_devices(self, indices: frozenset[int]) -> None:
        """The GPUs windows record now: their GPM follows the windows' reads."""
        self._watched = indices

    def read_power(self, index: int) -> tuple[float | None, float | None] | None:
        with self._session.lock:
            self._sync_generation()
            if self._absent(index):
                return None
            gpu = self.gpus[index]
            with gpu.lock:
                return gpu.read_power()

    def power_parts(self, index: int) -> tuple[str, ...]:
        """The parts GPU ``index`` measures the power of apart (module, memory), as far as known."""
        return self.gpus[index].power_parts() if index < len(self.gpus) else ()

    def read_power_scopes(self, index: int) -> dict[str, float] | None:
        """W of the parts of GPU ``index`` NVML measures apart (module, memory), read now; None when
        the GPU is lost or absent."""
        with self._session.lock:
            self._sync_generation()
            if self._absent(index):
                return None
            gpu = self.gpus[index]
            with gpu.lock:
                return gpu.read_scopes()

    def begin_read(self, index: int, power_only: bool) -> None:
        """The read plan's batches (a power-only read has none of its own: see :meth:`Gpu.read_power`)."""
        self.gpus[index].begin()

    def read_values(self, index: int) -> DeviceReading:
        """The values after :meth:`begin_read`: the sample's calls in one pass where they can be,
        converted as the getters convert them."""
        return self.gpus[index].reading()

    def device_present(self, index: int) -> bool:
        """False for an index gone from the list, or a GPU whose handle NVML refused (retried by
        :meth:`rediscover`)."""
        if index < len(self._handles) and self._handles[index] is not None:
            return True
        if index >= len(self._handles):
            self._suspect = True  # NVML lost devices: reopen later
        return False

    def absence_kind(self, index: int) -> ErrorKind:
        refused = self._session.refused.get(index)
        return ErrorKind.DEVICE_LOST if refused is None else self.classify_error(refused)

    # -- discovery and identity -------------------------------------------------------------
    def is_available(self) -> bool:
        return self.get_device_count() > 0

    def get_device_count(self) -> int:
        return len(self._handles)

    def list_devices(self) -> list[GPUInfo]:
        """Every GPU's identity. If NVML went away while listing (reset under us: the reads fail),
        the identities known from before stand, rather than GPUs without UUIDs, until it is back;
        so does a GPU's that another thread is reading now (its call may hang)."""
        with self._session.lock:  # never beside a reopen
            self._sync_generation()
            suspect, driver = self._suspect, self.get_driver_version()
            devices = [self._info(gpu, driver) for gpu in self.gpus]
            if self._suspect and not suspect:
                devices = [gpu.known or info for gpu, info in zip(self.gpus, devices, strict=True)]
            else:
                for gpu, info in zip(self.gpus, devices, strict=True):
                    gpu.known = info
        self._mig_on = any(info.aliases for info in devices)
        return devices

    @staticmethod
    def _info(gpu: Gpu, driver: str | None) -> GPUInfo:
        if not gpu.lock.acquire(blocking=False):
            return gpu.known or GPUInfo(index=gpu.index, model="NVIDIA GPU")
        try:
            return gpu.info(driver)
        finally:
            gpu.lock.release()

    def get_pytorch_device_string(self, device_id: int) -> str:
        return f"cuda:{device_id}"

    def worker_device(self, info: GPUInfo) -> tuple[str, dict[str, str]]:
        """CUDA orders GPUs fastest-first and honours CUDA_VISIBLE_DEVICES, NVML does neither:
        pin the worker to this GPU by UUID so the GPU that runs is the one measured."""
        if not info.uuid:
            return self.get_pytorch_device_string(info.index), {"CUDA_DEVICE_ORDER": "PCI_BUS_ID"}
        return "cuda:0", {"CUDA_VISIBLE_DEVICES": info.uuid, "CUDA_DEVICE_ORDER": "PCI_BUS_ID"}

    def shutdown(self) -> None:
        with self._session.lock:
            for gpu in self.gpus:
                gpu.close()  # free the GPM samples while NVML is still up
        super().shutdown()

    def checkup(self, plan: CheckupPlan) -> BackendCheckup:
        """What ``warptd doctor`` asks of these GPUs (:mod:`~warptd.backends.nvidia.checkup`)."""
        from warptd.backends.nvidia.checkup import checkup

        with self._session.lock:
            self._sync_generation()
            return checkup(self, self._api, plan)

    # -- the getters: each GPU's own code, as its reading makes them ---------------------------
    def get_memory_usage(self, index: int) -> MemoryUsage | None:
        return self.gpus[index].memory()

    def get_utilization(self, index: int) -> Utilization | None:
        return self.gpus[index].utilization()

    def get_temperatures(self, index: int) -> dict[str, float]:
        gpu = self.gpus[index]
        return gpu.temperatures(gpu.calls.answer(TEMPERATURE))

    def get_power_usage(self, index: int) -> float | None:
        return self.gpus[index].power()

    def get_power_average(self, index: int) -> float | None:
        return self.gpus[index].power_average()

    def get_power_limit(self, index: int) -> float | None:
        """The enforced limit as of the last read of the slow values."""
        return self.gpus[index].health.power_limit

    def get_energy_counter(self, index: int) -> float | None:
        return self.gpus[index].energy()

    def get_clocks(self, index: int) -> dict[str, float]:
        gpu = self.gpus[index]
        return gpu.clocks([gpu.calls.answer(CLOCKS + n) for n in range(len(self._api.clocks))])

    def get_supported_throttle_reasons(self, index: int) -> list[str]:
        return self._api.reason_names(self.gpus[index].supported_mask()) or []

    def get_throttle_reasons(self, index: int) -> list[str] | None:
        gpu = self.gpus[index]
        return self._api.reason_names(gpu.calls.answer(REASONS))

    def get_throttle_counters(self, index: int) -> dict[str, float]:
        return self.gpus[index].throttle_counters()

    def get_gauges(self, index: int) -> dict[str, LabelledValues]:
        gpu = self.gpus[index]
        return gpu.gauges(gpu.calls.answer(PSTATE))

    def get_counters(self, index: int) -> dict[str, LabelledValues]:
        return self.gpus[index].counters()
