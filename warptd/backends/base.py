"""The AcceleratorBackend ABC: what every GPU/NPU/CPU backend implements, in base units.

A backend identifies its devices (:meth:`~AcceleratorBackend.list_devices`) and holds one device
object per device (:attr:`~AcceleratorBackend.devices`), which reads itself by a plan
(:mod:`warptd.backends.device`). What it may do beyond that is a protocol of its own
(:mod:`warptd.backends.capabilities`), or declared by its vendor package (:mod:`warptd.backends.vendor`).
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable, Hashable, Sequence
from typing import TYPE_CHECKING, ClassVar, TypeVar

from warptd.backends.device import Device, ReadPlan
from warptd.backends.guard import GuardedSDK
from warptd.config import with_live_settings
from warptd.errors import ErrorKind
from warptd.models import DeviceReading, GPUInfo

if TYPE_CHECKING:
    from warptd.config import Settings

T = TypeVar("T")


class AcceleratorBackend(GuardedSDK, ABC):
    """One vendor's devices.

    The constructor initialises the SDK and raises ``BackendUnavailableError`` (or any exception)
    when it is absent. Device objects never raise: an unsupported or failing value is ``None`` (or an
    empty dict), read through :meth:`call` so that errors are counted once, in one place.
    Powers are watts, energies joules, clocks hertz, memory bytes, ratios 0..1, temperatures °C.
    """

    name: ClassVar[str]
    #: What the readings come from (``nvml``, ``amdsmi``, ``sysfs`` …): ``warptd_device_info{source}``.
    source: ClassVar[str]
    #: The distribution its SDK comes in (``nvidia-ml-py`` …), whose version ``warptd doctor`` reports.
    sdk: ClassVar[str | None] = None
    #: True for real accelerators; the stress API prefers these over the host CPU.
    is_accelerator: ClassVar[bool] = True
    #: The longest the sampler may wait between two reads (s), whatever ``--interval`` says; None: no limit.
    max_interval: float | None = None
    #: One device object per device, by index (set by the constructor).
    devices: Sequence[Device]

    def __init__(self, settings: Settings) -> None:
        super().__init__()
        self.settings = settings
        #: The metric families some output wants: a read that serves only others is not made.
        self.selection = settings.metric_selection
        self._lost_now: set[int] = set()
        self._anchored: set[int] = set()  # the devices whose next read is an edge (:meth:`anchor`)
        self._watched: frozenset[int] = frozenset()  # the devices windows record (:meth:`watch_devices`)

    def reconfigure(self, settings: Settings) -> None:
        """A reload: take the settings read while sampling (``--health-interval`` …) from ``settings``."""
        self.settings = with_live_settings(self.settings, settings)

    # -- discovery and identity -------------------------------------------------------------
    @abstractmethod
    def list_devices(self) -> list[GPUInfo]:
        """Identity of every device; read once at start (and after :meth:`rediscover`), not per sample."""

    def is_available(self) -> bool:
        """True when at least one device is accessible."""
        return self.get_device_count() > 0

    def get_device_count(self) -> int:
        """Number of devices this backend serves."""
        return len(self.devices)

    def get_driver_version(self) -> str | None:
        """Vendor driver (or kernel) version."""
        return None

    def device_identity(self, index: int) -> str | None:
        """A stable id (the UUID) of device ``index``: totals follow the device, not its index."""
        return None

    def needs_rediscovery(self) -> bool:
        """True when devices may have gone or come back (a lost device, a reset SDK)."""
        return False

    def rediscover(self) -> bool:
        """Re-enumerate the devices; True when the caller should re-read :meth:`list_devices`."""
        return False

    def shutdown(self) -> None:
        """Release the SDK."""

    # -- the plan of each read ----------------------------------------------------------------
    def begin_sample(self) -> None:
        """Called once before each sample's :meth:`read_device` calls: read host-wide data here."""

    def anchor(self, indices: Sequence[int]) -> None:
        """Read these devices' counters exactly at their next read, whatever their own cadence: a
        window, profile, stress job or workload recording begins or ends there (the plan's ``edge``).
        Called on the backend's worker, right before that read (``Reader.read(edge=True)``)."""
        self._anchored.update(indices)

    def watch_devices(self, indices: frozenset[int]) -> None:
        """The devices open windows, profiles and stress jobs record now (each change of the set): their
        plans say so (``watched``), so a device may read them at the windows' pace."""
        self._watched = indices

    def plan(self, index: int, power_only: bool = False) -> ReadPlan:
        """The plan of device ``index``'s read now (an anchored edge is taken by it)."""
        edge = index in self._anchored
        if edge:
            self._anchored.discard(index)
        return ReadPlan(self.selection.reads, power_only, edge, index in self._watched)

    def read_device(self, index: int, *, power_only: bool = False) -> DeviceReading:
        """One device's reading by its plan (``power_only``: power and energy alone). A device that is
        absent or reported itself lost comes back ``up=False``."""
        if self._absent(index):
            return DeviceReading(index=index, up=False)
        self._lost_now.discard(index)
        reading = self.devices[index].read(self.plan(index, power_only))
        if index in self._lost_now:
            return DeviceReading(index=index, up=False)
        return reading

    # -- shared machinery -------------------------------------------------------------------
    def call(self, index: int, what: str, fn: Callable[..., T], *args: object) -> T | None:
        """:meth:`guarded` SDK call for device ``index`` (inlined: a sample makes a dozen per device);
        once the device is lost this sample, skip the rest."""
        if index in self._lost_now:
            return None
        key = (what, index)
        if key in self._unsupported:
            return None
        try:
            return fn(*args)
        except Exception as exc:
            self.on_error(key, self.classify_error(exc), exc)
            return None

    def call_versions(
        self, index: int, *versions: tuple[str, Callable[..., T], tuple[object, ...]]
    ) -> T | None:
        """The first of several versions of one call that the SDK supports: a later one is asked only
        once the earlier answered "not supported" (an older driver without the newer function)."""
        for what, fn, args in versions:
            if (what, index) in self._unsupported:
                continue
            value = self.call(index, what, fn, *args)
            if value is not None or (what, index) not in self._unsupported:
                return value
        return None

    def on_error(self, key: Hashable, kind: ErrorKind, exc: BaseException) -> None:
        if kind is ErrorKind.DEVICE_LOST and isinstance(key, tuple):
            self._lost_now.add(key[1])
        super().on_error(key, kind, exc)

    def device_present(self, index: int) -> bool:
        """False for a device known to be gone without asking the SDK (no handle, its PCI directory
        removed): it is read as down and counted as ``device_lost``."""
        return True

    def absence_kind(self, index: int) -> ErrorKind:
        """How a read of an absent device is counted: ``device_lost`` unless the SDK said why."""
        return ErrorKind.DEVICE_LOST

    def _absent(self, index: int) -> bool:
        if self.device_present(index):
            return False
        self.count_error(self.absence_kind(index))
        return True
