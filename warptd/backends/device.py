"""A device is a small contract: one object per device that reads itself by a plan into one frozen
:class:`~warptd.models.DeviceReading` (:class:`Device`). :class:`ValueDevice` is the shape most
devices take, as Zeus's GPU objects do: one method per value, its unit in its docstring, and a
reading built from them, asking only what the plan wants.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Protocol

from warptd.metrics import catalog as m
from warptd.models import DeviceReading, LabelledValues, MemoryUsage, Utilization

#: A backend's guarded SDK call, ``call(index, what, function, *arguments)``: None where it failed
#: (counted once, by the backend) or the device does not support it (``AcceleratorBackend.call``).
Call = Callable[..., Any]


@dataclass(frozen=True, slots=True)
class ReadPlan:
    """What one read of a device asks of it. ``reads(*families)``: whether some output wants any of
    these families (a value serving none is not read); ``power_only``: power and the energy counter
    alone (a power backend over the devices' own readings); ``edge``: every counter exactly, whatever
    its cadence (a window, profile, stress job or workload recording begins or ends at this read);
    ``watched``: a window records the device, so what follows the windows is read at their pace."""

    reads: Callable[..., bool]
    power_only: bool = False
    edge: bool = False
    watched: bool = False

    def wants(self, *families: str) -> bool:
        """Whether this read reads a value that serves these families."""
        return not self.power_only and self.reads(*families)


class Device(Protocol):
    """One device of a backend: its index among the backend's devices, and one read by a plan."""

    index: int

    def read(self, plan: ReadPlan) -> DeviceReading:
        """Every value ``plan`` asks for, in base units: absent or unsupported values are None or
        missing keys, never 0."""
        ...


class ValueDevice:
    """A device that reads each value with a method of its own; a value it lacks answers None (or
    nothing). :meth:`begin` batches what a read shares (one SDK call for many values)."""

    def __init__(self, index: int) -> None:
        self.index = index

    def begin(self, plan: ReadPlan) -> None:
        """Before this read's values: read what they share (a telemetry table, a batch of fields)."""

    def memory(self) -> MemoryUsage | None:
        """Device memory: total, used and free, in bytes."""
        return None

    def utilization(self) -> Utilization | None:
        """Compute and memory-controller busy ratios, 0..1."""
        return None

    def power(self) -> float | None:
        """The most instantaneous power draw the device reports, in W (never 0 for unknown)."""
        return None

    def power_average(self) -> float | None:
        """The driver's own averaged power, in W, where it keeps one beside the instantaneous."""
        return None

    def power_limit(self) -> float | None:
        """The enforced power limit, in W."""
        return None

    def energy(self) -> float | None:
        """The hardware energy counter as read, in J: it may reset or wrap (the sampler handles it)."""
        return None

    def temperatures(self) -> dict[str, float]:
        """Temperatures by sensor (``gpu``, ``edge``, ``memory`` …), in °C; the first is the primary."""
        return {}

    def clocks(self) -> dict[str, float]:
        """Current clocks by domain (``graphics``, ``sm``, ``memory`` …), in Hz."""
        return {}

    def throttle(self) -> dict[str, bool]:
        """Each clock-event reason the device can report, by whether it is active now (none: unknown)."""
        return {}

    def throttle_counters(self) -> dict[str, float]:
        """Cumulative time in each throttle reason, in s, as the hardware counts it (it may reset)."""
        return {}

    def gauges(self) -> dict[str, LabelledValues]:
        """Further gauges by catalog family, then by the values of the family's own labels. The dicts
        belong to the reading once handed over: never change them afterwards."""
        return {}

    def counters(self) -> dict[str, LabelledValues]:
        """Further cumulative counters as read (they may reset), keyed like :meth:`gauges`."""
        return {}

    def read(self, plan: ReadPlan) -> DeviceReading:
        """The values ``plan`` asks for, after :meth:`begin`: power and energy alone on a power-only
        read; temperatures, clocks and throttling only where an output wants their families."""
        self.begin(plan)
        if plan.power_only:
            return DeviceReading(
                index=self.index, power_watts=self.power(), energy_counter_joules=self.energy()
            )
        wants = plan.wants
        throttling = m.THROTTLE_ACTIVE.name, m.CLOCK_EVENT_ACTIVE.name, m.THROTTLE_SECONDS.name
        throttle = self.throttle() if wants(*throttling) else {}
        return DeviceReading(
            index=self.index,
            memory=self.memory(),
            utilization=self.utilization(),
            power_watts=self.power(),
            power_average_watts=self.power_average(),
            power_limit_watts=self.power_limit(),
            energy_counter_joules=self.energy(),
            temperatures_celsius=self.temperatures() if wants(m.TEMPERATURE.name) else {},
            clocks_hertz=self.clocks() if wants(m.CLOCK.name) else {},
            throttle_active=throttle,
            throttle_counter_seconds=self.throttle_counters() if wants(m.THROTTLE_SECONDS.name) else {},
            gauges=self.gauges(),
            counters=self.counters(),
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
