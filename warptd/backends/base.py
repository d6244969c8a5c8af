"""The AcceleratorBackend ABC: what every GPU/NPU/CPU backend implements, in base units."""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable, Hashable, Sequence
from typing import TYPE_CHECKING, ClassVar, TypeVar

from warptd.backends.guard import GuardedSDK
from warptd.config import with_live_settings
from warptd.errors import ErrorKind
from warptd.metrics import catalog as m
from warptd.models import DeviceReading, GPUInfo, LabelledValues, MemoryUsage, Utilization

if TYPE_CHECKING:
    from warptd.config import Settings

T = TypeVar("T")


class AcceleratorBackend(GuardedSDK, ABC):
    """One vendor's devices.

    The constructor initialises the SDK and raises ``BackendUnavailableError`` (or any exception)
    when it is absent. Getters never raise: an unsupported or failing value is ``None`` (or an empty
    dict), read through :meth:`call` so that errors are counted once, in one place.
    Powers are watts, energies joules, clocks hertz, memory bytes, ratios 0..1, temperatures °C.
    """

    name: ClassVar[str]
    #: What the readings come from (``nvml``, ``amdsmi``, ``sysfs`` …): ``warptd_device_info{source}``.
    source: ClassVar[str]
    #: True for real accelerators; the stress API prefers these over the host CPU.
    is_accelerator: ClassVar[bool] = True
    #: True for a backend that may see devices an SDK backend also serves (sysfs): the SDK's copy wins.
    fallback: ClassVar[bool] = False
    #: The longest the sampler may wait between two reads (s), whatever ``--interval`` says; None: no limit.
    max_interval: float | None = None

    def __init__(self, settings: Settings) -> None:
        super().__init__()
        self.settings = settings
        #: The metric families some output wants: a read that serves only others is not made.
        self.selection = settings.metric_selection
        self._lost_now: set[int] = set()

    def reconfigure(self, settings: Settings) -> None:
        """A reload: take the settings read while sampling (``--health-interval`` …) from ``settings``."""
        self.settings = with_live_settings(self.settings, settings)

    # -- discovery and identity -------------------------------------------------------------
    @abstractmethod
    def is_available(self) -> bool:
        """True when at least one device is accessible."""

    @abstractmethod
    def get_device_count(self) -> int:
        """Number of devices this backend serves."""

    @abstractmethod
    def list_devices(self) -> list[GPUInfo]:
        """Identity of every device; read once at start, not per sample."""

    @abstractmethod
    def get_driver_version(self) -> str | None:
        """Vendor driver (or kernel) version."""

    @abstractmethod
    def get_pytorch_device_string(self, device_id: int) -> str:
        """The torch device that runs stress workloads on this device, e.g. ``cuda:0``."""

    # -- telemetry --------------------------------------------------------------------------
    @abstractmethod
    def get_memory_usage(self, index: int) -> MemoryUsage | None:
        """Total/used/free device memory in bytes."""

    @abstractmethod
    def get_utilization(self, index: int) -> Utilization | None:
        """Compute and memory-controller busy ratios (0..1)."""

    @abstractmethod
    def get_temperatures(self, index: int) -> dict[str, float]:
        """Temperatures in °C by sensor name (``gpu``, ``memory``, ``package-0`` …)."""

    @abstractmethod
    def get_power_usage(self, index: int) -> float | None:
        """The most instantaneous power draw the device reports, in watts."""

    def get_power_average(self, index: int) -> float | None:
        """The driver's own averaged power in watts, where it keeps one beside the instantaneous."""
        return None

    def get_temperature(self, index: int) -> float | None:
        """The primary sensor's temperature in °C (the first that :meth:`get_temperatures` lists)."""
        return next(iter(self.get_temperatures(index).values()), None)

    def get_power_limit(self, index: int) -> float | None:
        """Enforced power limit in watts."""
        return None

    def get_energy_counter(self, index: int) -> float | None:
        """Hardware energy counter in joules, as read (it may reset); None where the device has none."""
        return None

    def get_clocks(self, index: int) -> dict[str, float]:
        """Current clocks in hertz by domain (``sm``, ``memory`` …)."""
        return {}

    def get_supported_throttle_reasons(self, index: int) -> list[str]:
        """Every throttle reason the device can report; each becomes a 0/1 series (those of
        :data:`~warptd.models.CLOCK_EVENT_REASONS`, idle or clocks set, as clock events, not throttling)."""
        return []

    def get_throttle_reasons(self, index: int) -> list[str] | None:
        """Throttle reasons active now; None when unknown (then no throttle series are exported)."""
        return None

    def get_throttle_counters(self, index: int) -> dict[str, float]:
        """Cumulative hardware violation time in seconds by reason, where the SDK keeps one."""
        return {}

    def get_gauges(self, index: int) -> dict[str, LabelledValues]:
        """Further gauges by catalog metric name (``warptd_device_sm_active_ratio``), then label values.
        The dicts handed over belong to the reading: never change them afterwards (return new ones, or
        the same ones again unchanged)."""
        return {}

    def get_counters(self, index: int) -> dict[str, LabelledValues]:
        """Further cumulative counters as read (they may reset), keyed like :meth:`get_gauges`; the
        sampler makes them monotonic (``warptd_device_ecc_errors_total``)."""
        return {}

    def device_identity(self, index: int) -> str | None:
        """A stable id (the UUID) of device ``index``: totals follow the device, not its index."""
        return None

    def begin_sample(self) -> None:
        """Called once before each sample's :meth:`read_device` calls: read host-wide data here."""

    def anchor(self, indices: Sequence[int]) -> None:
        """Read these devices' counters exactly at their next read, whatever their own cadence (the
        energy counter, throttle times): a window, profile, stress job or workload recording begins or
        ends there. Called on the backend's worker, right before that read (``Reader.read(edge=True)``).
        A backend that reads every counter each sample has nothing to do."""

    def watch_devices(self, indices: frozenset[int]) -> None:
        """The devices open windows, profiles and stress jobs record now (each change of the set): a
        backend may read them at the windows' pace where it reads others more slowly."""

    def begin_read(self, index: int, power_only: bool) -> None:
        """Called at the start of each read of one device: batch the device's values here (one SDK
        call for many), ``power_only`` for :meth:`read_power`."""

    def needs_rediscovery(self) -> bool:
        """True when devices may have gone or come back (a lost device, a reset SDK)."""
        return False

    def rediscover(self) -> bool:
        """Re-enumerate the devices; True when the caller should re-read :meth:`list_devices`."""
        return False

    def worker_device(self, info: GPUInfo) -> tuple[str, dict[str, str]]:
        """The torch device a stress worker uses for this device, and environment to set first."""
        return self.get_pytorch_device_string(info.index), {}

    def release_devices(self, pci_bus_ids: set[str]) -> set[str]:
        """Stop serving the devices at these :func:`~warptd.models.pci_address` es (an SDK backend
        serves them) and return the addresses released. Only ``fallback`` backends are asked."""
        raise NotImplementedError(f"{type(self).__name__} is a fallback backend without release_devices")

    def shutdown(self) -> None:
        """Release the SDK."""

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

    def read_power(self, index: int) -> tuple[float | None, float | None] | None:
        """Power (W) and energy counter (J) of one device; None when the device is lost."""
        if self._absent(index):
            return None
        self._lost_now.discard(index)
        self.begin_read(index, power_only=True)
        power, energy = self.get_power_usage(index), self.get_energy_counter(index)
        return None if index in self._lost_now else (power, energy)

    def read_device(self, index: int) -> DeviceReading:
        """Read every value of one device. A device that is absent or reported itself lost comes back
        ``up=False``."""
        if self._absent(index):
            return DeviceReading(index=index, up=False)
        self._lost_now.discard(index)
        self.begin_read(index, power_only=False)
        reading = self.read_values(index)
        if index in self._lost_now:
            return DeviceReading(index=index, up=False)
        return reading

    def read_values(self, index: int) -> DeviceReading:
        """The values of one device after :meth:`begin_read`, through the getters; a backend may make
        its calls in one pass instead, converted by the same code. A getter whose families no output
        wants (:attr:`selection`) is not called."""
        reads = self.selection.reads
        throttle = (
            throttle_states(self.get_supported_throttle_reasons(index), self.get_throttle_reasons(index))
            if reads(m.THROTTLE_ACTIVE.name, m.CLOCK_EVENT_ACTIVE.name, m.THROTTLE_SECONDS.name)
            else {}
        )
        return DeviceReading(
            index=index,
            memory=self.get_memory_usage(index),
            utilization=self.get_utilization(index),
            power_watts=self.get_power_usage(index),
            power_average_watts=self.get_power_average(index),
            power_limit_watts=self.get_power_limit(index),
            energy_counter_joules=self.get_energy_counter(index),
            temperatures_celsius=self.get_temperatures(index) if reads(m.TEMPERATURE.name) else {},
            clocks_hertz=self.get_clocks(index) if reads(m.CLOCK.name) else {},
            throttle_active=throttle,
            throttle_counter_seconds=self.get_throttle_counters(index)
            if reads(m.THROTTLE_SECONDS.name)
            else {},
            gauges=self.get_gauges(index),
            counters=self.get_counters(index),
        )


def throttle_states(supported: list[str], active: list[str] | None) -> dict[str, bool]:
    """Each reason the device can report mapped to whether it is active (only the active ones where
    it does not say what it can report); none when the active ones could not be read."""
    if active is None:
        return {}
    if not supported:
        return dict.fromkeys(sorted(active), True)
    on = set(active)
    return {reason: reason in on for reason in supported}
