"""Device identity and per-sample reading models shared by every backend."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, ClassVar, Literal

from pydantic import BaseModel, ConfigDict, Field

#: What a backend samples: accelerators' devices, the host CPU as a device, or power domains.
BackendKind = Literal["accelerator", "cpu", "power"]
#: What a device is: an accelerator, or the host CPU.
DeviceKind = Literal["accelerator", "cpu"]


def device_kind(is_accelerator: bool) -> DeviceKind:
    """The kind of a device backend's devices: the one backend that is no accelerator is the CPU's."""
    return "accelerator" if is_accelerator else "cpu"


class WireModel(BaseModel):
    """A request, answer or recording: pydantic builds its validator and serializer at first use, not
    at import, so a daemon that is never asked for one does not hold them (about 2 MiB for all)."""

    model_config = ConfigDict(defer_build=True)


class Page(WireModel):
    """One page of a listing: how many items it has in all, and the path of the page after this."""

    total: int = Field(0, description="Items in the whole listing (each page holds at most 100).")
    next: str | None = Field(None, description="Path of the next page (offset and limit), null on the last.")


class DriverInstance(BaseModel):
    """What tells one initialisation of a device by its driver from the next, on one boot: a driver
    reload or a GPU reset restarts the device's counters (NVML's energy counter counts "since the
    driver was last reloaded"). ``up_since``: CLOCK_BOOTTIME seconds when the driver initialised it
    (NVML's GPU uptime, in nvml.h from CUDA 13.5; no driver up to R610 exports it), which tells either
    way. ``sysfs``: the inode numbers of the driver module's and the device's driver link in sysfs, new
    at each module load or rebind, which tell only a change (not a GPU reset, nor a GPU torn down by its
    last client)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    up_since: float | None = None
    sysfs: str | None = None

    #: Seconds two readings of the same initialisation's start may differ by (the uptime is whole seconds).
    TOLERANCE_S: ClassVar[float] = 2.5

    def same_as(self, earlier: DriverInstance) -> bool | None:
        """Whether the driver has kept the device initialised since ``earlier`` (of this same boot):
        True or False where something tells, None where nothing does."""
        if self.up_since is not None and earlier.up_since is not None:
            return abs(self.up_since - earlier.up_since) <= self.TOLERANCE_S
        if self.sysfs is not None and earlier.sysfs is not None and self.sysfs != earlier.sysfs:
            return False
        return None


class GPUInfo(BaseModel):
    """Identity of one accelerator, as returned by ``AcceleratorBackend.list_devices()``."""

    model_config = ConfigDict(extra="forbid")

    index: int
    model: str
    memory_gb: float | None = None
    memory_total_bytes: int | None = None
    uuid: str | None = None
    compute_capability: str | None = None
    pcie_gen: int | None = None
    pci_bus_id: str | None = None
    driver_version: str | None = None
    extra_metrics: dict[str, Any] | None = None
    #: Other IDs device plugins may use for this device, e.g. the ``MIG-<uuid>`` of its MIG instances.
    aliases: list[str] | None = None
    #: The driver's current initialisation of the device, where something tells it (a reload restarts
    #: its counters: a restart of warptd carries totals across only the same one).
    driver_instance: DriverInstance | None = None

    @staticmethod
    def memory_fields(total_bytes: int | None) -> dict[str, Any]:
        """``memory_total_bytes`` and the design's ``memory_gb`` from one byte count."""
        if total_bytes is None:
            return {"memory_total_bytes": None, "memory_gb": None}
        return {"memory_total_bytes": total_bytes, "memory_gb": round(total_bytes / 2**30, 1)}


def pci_address(bus_id: str | None) -> str | None:
    """One spelling of a PCI address: NVML's ``00000000:18:00.0`` equals sysfs' ``0000:18:00.0``."""
    parts = (bus_id or "").strip().lower().split(":")
    if len(parts) == 2:  # no domain: "18:00.0"
        parts.insert(0, "0")
    if len(parts) != 3 or not all(parts):
        return None
    try:
        domain = int(parts[0], 16)
    except ValueError:
        return None
    return f"{domain:04x}:{parts[1]}:{parts[2]}"


#: Clock-event reasons that are not throttling: the clocks are low because the device is idle, or
#: because an administrator (application clocks) or the display set them. Backends report them with
#: the throttle reasons; :class:`DeviceReading` keeps them apart, so they are exported as
#: ``warptd_device_clock_event_active`` and never counted as throttled time.
CLOCK_EVENT_REASONS: frozenset[str] = frozenset(
    {"gpu_idle", "applications_clocks_setting", "display_clock_setting"}
)


#: Values of one metric by the values of its own labels (``()`` for a metric with none).
LabelledValues = dict[tuple[str, ...], float]


@dataclass(frozen=True, slots=True)
class MemoryUsage:
    """Device memory in bytes: ``used`` by allocations, as nvidia-smi shows it; ``reserved`` by the
    driver, where the SDK reports it apart (then ``total = reserved + used + free``)."""

    total: int
    used: int
    free: int
    reserved: int | None = None


@dataclass(frozen=True, slots=True)
class Utilization:
    """Busy fractions in 0..1: ``compute`` for the cores, ``memory`` for the memory controller."""

    compute: float | None = None
    memory: float | None = None


@dataclass(frozen=True, slots=True)
class DeviceReading:
    """Raw point-in-time values of one device, in base units; ``None`` or missing keys mean unsupported.

    Frozen, like the dicts it holds by convention: whoever hands a reading on (a backend, the checks,
    the sampler) makes a new one to change it (:func:`dataclasses.replace`), so a reading kept by a
    listener or compared by identity with the last one is never changed under it."""

    index: int
    uuid: str = ""
    up: bool = True
    memory: MemoryUsage | None = None
    utilization: Utilization | None = None
    # The most instantaneous power reading the device offers.
    power_watts: float | None = None
    # The driver's own running average (NVML: over 1 s on Ampere and newer), where it has one.
    power_average_watts: float | None = None
    power_limit_watts: float | None = None
    # Hardware energy counter in joules, as read: it may reset (driver reload) or wrap.
    energy_counter_joules: float | None = None
    # The power of parts of the device the SDK measures apart, by part (NVML's module and memory
    # power scopes); the power backend of its SDK exports them as domains.
    power_scopes_watts: dict[str, float] = field(default_factory=dict)
    temperatures_celsius: dict[str, float] = field(default_factory=dict)
    clocks_hertz: dict[str, float] = field(default_factory=dict)
    # Every throttle reason the device can report, mapped to whether it is active now. Given every
    # reason the backend knows, it keeps only real throttling: see __post_init__.
    throttle_active: dict[str, bool] = field(default_factory=dict)
    # Hardware violation counters in seconds, as read (cumulative, may reset); throttling reasons only.
    throttle_counter_seconds: dict[str, float] = field(default_factory=dict)
    # The CLOCK_EVENT_REASONS the device can report, mapped to whether each is active now.
    clock_events_active: dict[str, bool] = field(default_factory=dict)
    # Further gauges by catalog metric name, then by the values of the metric's own labels (those after
    # the device labels): {"warptd_device_pipe_active_ratio": {("tensor",): 0.4}}.
    gauges: dict[str, LabelledValues] = field(default_factory=dict)
    # Further cumulative hardware counters as read (they may reset, e.g. at a driver reload), keyed like
    # ``gauges``; the sampler makes them monotonic totals.
    counters: dict[str, LabelledValues] = field(default_factory=dict)
    # When the power and energy were read (monotonic), where the backend keeps it: a read of many
    # devices takes a while, and the energy between two readings is over the time between them.
    read_at: float | None = None

    @property
    def primary_temperature(self) -> tuple[str, float] | None:
        """The backend's primary sensor and its reading: the first it lists (NVIDIA's ``gpu``, the
        core nvidia-smi shows; AMD's ``edge``), the one to show where a single temperature is."""
        return next(iter(self.temperatures_celsius.items()), None)

    def __post_init__(self) -> None:
        """Move the clock-event reasons that are not throttling out of the throttle fields, once,
        here, whatever built the reading: no backend, exporter or summary has to leave them out. The
        one normalisation of a frozen reading, made while it is being built."""
        if not CLOCK_EVENT_REASONS.isdisjoint(self.throttle_active):
            throttle, events = {}, dict(self.clock_events_active)
            for reason, on in self.throttle_active.items():
                (events if reason in CLOCK_EVENT_REASONS else throttle)[reason] = on
            object.__setattr__(self, "throttle_active", throttle)
            object.__setattr__(self, "clock_events_active", events)
        if not CLOCK_EVENT_REASONS.isdisjoint(self.throttle_counter_seconds):
            counted = {r: s for r, s in self.throttle_counter_seconds.items() if r not in CLOCK_EVENT_REASONS}
            object.__setattr__(self, "throttle_counter_seconds", counted)
