"""Rejects impossible readings (negative power, utilization over 100 %, NaN) before they are exported.

A rejected value becomes absent, like an unsupported one, and is counted as
``warptd_sample_errors_total{kind="invalid_value"}``: a driver returning garbage is visible,
never graphed.
"""

from __future__ import annotations

import math
from dataclasses import replace
from typing import Any

from warptd.metrics.catalog import BY_NAME
from warptd.metrics.nvidia import FAN_SPEED
from warptd.metrics.spec import DEVICE_LABELS
from warptd.models import DeviceReading, LabelledValues, MemoryUsage, Utilization
from warptd.power.base import DomainReading

MAX_WATTS = 10_000.0  # no single accelerator, board or CPU package draws 10 kW
MAX_HERTZ = 20e9
TEMPERATURE_RANGE = (-60.0, 250.0)


def _ok(value: float | None, low: float, high: float) -> bool:
    return value is None or (
        isinstance(value, (int, float)) and math.isfinite(value) and low <= value <= high
    )


def _check(value: float | None, low: float, high: float, rejected: list[int]) -> float | None:
    if _ok(value, low, high):
        return value
    rejected[0] += 1
    return None


def _filtered(values: dict[str, float], low: float, high: float, rejected: list[int]) -> dict[str, float]:
    if not values or _all_within(values, low, high):
        return values  # the common case, checked in C-level passes
    kept = {k: v for k, v in values.items() if _ok(v, low, high)}
    rejected[0] += len(values) - len(kept)
    return kept


def _memory(memory: MemoryUsage | None, rejected: list[int]) -> MemoryUsage | None:
    if memory is None:
        return None
    reserved = memory.reserved or 0
    if min(memory.total, memory.used, memory.free, reserved) < 0 or memory.used + reserved > memory.total:
        rejected[0] += 1
        return None
    return memory


def _utilization(util: Utilization | None, rejected: list[int]) -> Utilization | None:
    if util is None or (_ok(util.compute, 0.0, 1.0) and _ok(util.memory, 0.0, 1.0)):
        return util
    return Utilization(_check(util.compute, 0.0, 1.0, rejected), _check(util.memory, 0.0, 1.0, rejected))


#: Ratios that may legitimately pass 1: NVML's fan speed is relative to a speed the fan may exceed.
_RATIOS_OVER_ONE = {FAN_SPEED.name: 2.0}
#: Per catalog metric: how many labels follow the device labels, and the highest plausible value.
_LIMITS: dict[str, tuple[int, float]] = {
    name: (
        len(spec.labels) - len(DEVICE_LABELS),
        _RATIOS_OVER_ONE.get(name, 1.0) if name.endswith("_ratio") else math.inf,
    )
    for name, spec in BY_NAME.items()
}


def _all_within(values: dict[Any, float], low: float, high: float) -> bool:
    """Every value a number in low..high, checked by C-level passes (a NaN or an infinity makes the
    sum non-finite); False also for no values or a non-number, which the per-value check then sorts out."""
    numbers = values.values()
    try:
        return math.isfinite(sum(numbers)) and min(numbers) >= low and max(numbers) <= high
    except (TypeError, ValueError):
        return False


def _labelled(
    values_by_metric: dict[str, LabelledValues], checked: dict[str, LabelledValues], rejected: list[int]
) -> dict[str, LabelledValues]:
    """Further gauges and counters: metrics of the catalog only, with their own labels, finite, never
    negative, and ``_ratio`` metrics within 0..1. Kept as given: a backend hands over each dict it
    reports and never changes it afterwards. Values as in the last reading's dict, ``checked``
    (health counters, mostly, and idle activity), are not checked again: that dict is kept instead,
    or the whole of ``checked`` where nothing changed (one C-level comparison); a reading with
    nothing rejected keeps its own, equal, dicts."""
    if values_by_metric is checked or values_by_metric == checked:
        return checked
    kept = {}
    for metric, values in values_by_metric.items():
        last = checked.get(metric)
        if last is values or last == values:  # as last time: checked then (a C-level comparison)
            kept[metric] = last
            continue
        limits = _LIMITS.get(metric)
        if limits is None or not set(map(len, values)) <= {limits[0]}:
            rejected[0] += len(values)  # a metric the exporter does not know, or not its labels
            continue
        high = limits[1]
        if _all_within(values, 0.0, high):
            kept[metric] = values  # the common case, checked in C-level passes
            continue
        kept[metric] = {labels: v for labels, v in values.items() if _ok(v, 0.0, high)}
        rejected[0] += len(values) - len(kept[metric])
    return kept


def _power_within(reading: DeviceReading) -> bool:
    """The common case in one expression: every power value absent or in range, the energy counter
    finite (NaN fails every comparison). False sends each value through :func:`_check`."""
    watts, average, limit, energy = (
        reading.power_watts,
        reading.power_average_watts,
        reading.power_limit_watts,
        reading.energy_counter_joules,
    )
    try:
        return (
            (watts is None or 0.0 <= watts <= MAX_WATTS)
            and (average is None or 0.0 <= average <= MAX_WATTS)
            and (limit is None or 0.0 <= limit <= MAX_WATTS)
            and (energy is None or 0.0 <= energy < math.inf)
        )
    except TypeError:  # not a number: sorted out value by value
        return False


def sanitize_device(
    reading: DeviceReading, previous: DeviceReading | None = None
) -> tuple[DeviceReading, int]:
    """``reading`` without its impossible values, and how many were dropped: the same object where none
    was (a backend that hands over what it kept still matches the last reading by identity), else a
    new reading. ``previous``: the device's last reading, whose values need no second check where the
    backend handed over the same object again (it keeps what it made while its answers stand still)
    or equal further values."""
    rejected = [0]
    memory, utilization = reading.memory, reading.utilization
    if previous is None or memory is not previous.memory:
        memory = _memory(memory, rejected)
    if previous is None or utilization is not previous.utilization:
        utilization = _utilization(utilization, rejected)
    power = reading.power_watts, reading.power_average_watts, reading.power_limit_watts
    energy = reading.energy_counter_joules
    if not _power_within(reading):
        power = tuple(_check(watts, 0.0, MAX_WATTS, rejected) for watts in power)
        energy = _check(energy, 0.0, math.inf, rejected)
    temperatures, clocks = reading.temperatures_celsius, reading.clocks_hertz
    if previous is None or temperatures is not previous.temperatures_celsius:
        temperatures = _filtered(temperatures, *TEMPERATURE_RANGE, rejected)
    if previous is None or clocks is not previous.clocks_hertz:
        clocks = _filtered(clocks, 0.0, MAX_HERTZ, rejected)
    throttle_counted = _filtered(reading.throttle_counter_seconds, 0.0, math.inf, rejected)
    scopes = reading.power_scopes_watts
    if scopes and (previous is None or scopes is not previous.power_scopes_watts):
        scopes = _filtered(scopes, 0.0, MAX_WATTS, rejected)
    gauges = _labelled(reading.gauges, previous.gauges if previous else {}, rejected)
    counters = _labelled(reading.counters, previous.counters if previous else {}, rejected)
    if not rejected[0]:
        return reading, 0
    return replace(
        reading,
        memory=memory,
        utilization=utilization,
        power_watts=power[0],
        power_average_watts=power[1],
        power_limit_watts=power[2],
        energy_counter_joules=energy,
        temperatures_celsius=temperatures,
        clocks_hertz=clocks,
        throttle_counter_seconds=throttle_counted,
        power_scopes_watts=scopes,
        gauges=gauges,
        counters=counters,
    ), rejected[0]


def sanitize_domain(reading: DomainReading) -> tuple[DomainReading, int]:
    """``reading`` without impossible power or energy, and how many values were dropped: the same
    object where none was, else a new reading."""
    rejected = [0]
    power = _check(reading.power_watts, 0.0, MAX_WATTS * 10, rejected)
    energy = _check(reading.energy_counter_joules, 0.0, math.inf, rejected)
    if not rejected[0]:
        return reading, 0
    return replace(reading, power_watts=power, energy_counter_joules=energy), rejected[0]
