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
from warptd.errors import BackendUnavailableError, ErrorKind
from warptd.models import DeviceReading, GPUInfo

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
        self._sync_lock = threading.Lock()  # one reader opens the device objects again after a reopen
        #: One device object per GPU that NVML counts, as of NVML initialisation ``_generation``.
        self.gpus: tuple[Gpu, ...] = self._open_gpus(())

    @property
    def devices(self) -> tuple[Gpu, ...]:  # type: ignore[override]
        """One device object per GPU NVML counts (:attr:`gpus`)."""
        return self.gpus

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
                return gpu.identity.known.uuid if gpu.identity.known is not None else None
            try:
                return gpu.identity.uuid()
            finally:
                gpu.lock.release()

    def read_device(self, index: int, *, power_only: bool = False) -> DeviceReading:
        """One GPU's reading by its plan, under its own lock and a share of the session's: the other
        GPUs are read meanwhile, from other threads, however long this one's calls take. An edge
        (:meth:`anchor`) is kept on the backend, not the device objects, so an NVML reopen at that
        read keeps it."""
        with self._session.lock:
            self._sync_generation()
            if self._absent(index):
                if index < len(self.gpus):
                    self.gpus[index].cadence.forget()  # back up, it reads everything at once
                return DeviceReading(index=index, up=False)
            plan = self.plan(index, power_only)
            gpu = self.gpus[index]
            with gpu.lock:
                return gpu.read(plan)

    def power_parts(self, index: int) -> tuple[str, ...]:
        """The parts GPU ``index`` measures the power of apart (module, memory), as far as known."""
        return self.gpus[index].power.parts() if index < len(self.gpus) else ()

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
                devices = [gpu.identity.known or info for gpu, info in zip(self.gpus, devices, strict=True)]
            else:
                for gpu, info in zip(self.gpus, devices, strict=True):
                    gpu.identity.known = info
        self._mig_on = any(info.aliases for info in devices)
        return devices

    @staticmethod
    def _info(gpu: Gpu, driver: str | None) -> GPUInfo:
        if not gpu.lock.acquire(blocking=False):
            return gpu.identity.known or GPUInfo(index=gpu.index, model="NVIDIA GPU")
        try:
            return gpu.identity.info(driver, gpu.memory)
        finally:
            gpu.lock.release()

    def worker_device(self, info: GPUInfo) -> tuple[str, dict[str, str]]:
        """CUDA orders GPUs fastest-first and honours CUDA_VISIBLE_DEVICES, NVML does neither:
        pin the worker to this GPU by UUID so the GPU that runs is the one measured."""
        if not info.uuid:
            return f"cuda:{info.index}", {"CUDA_DEVICE_ORDER": "PCI_BUS_ID"}
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
