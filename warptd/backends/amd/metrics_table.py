"""One GPU's metrics table (``amdsmi_get_gpu_metrics_info``), read once per full read: throttle
seconds from its residency accumulators, media-engine activity and XGMI traffic."""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any

from warptd.backends.amd.values import integer, number, per_instance
from warptd.models import LabelledValues

#: GPU metrics table throttle residency accumulators (MI300 and newer) by throttle reason, counted in
#: the firmware cycles of its ``accumulation_counter``: PPT is the power cap, socket thermal the
#: firmware's thermal limit, PROCHOT the hardware one. ``amdsmi_get_violation_status`` makes its
#: ``per_*`` percentages from the same fields, but sleeps 100 ms between two table reads to do so.
_RESIDENCIES = {
    "sw_power_cap": "ppt_residency_acc",
    "sw_thermal_slowdown": "socket_thm_residency_acc",
    "hw_thermal_slowdown": "prochot_residency_acc",
    "vr_thermal": "vr_thm_residency_acc",
    "hbm_thermal": "hbm_thm_residency_acc",
}
#: Media-engine activity arrays of the GPU metrics table (% per instance) by the engine label exported.
_ENGINES = {"vcn": "vcn_activity", "jpeg": "jpeg_activity"}
#: XGMI per-link accumulators of the GPU metrics table (KB) by direction, from this GPU's side.
_XGMI = {"rx": "xgmi_read_data_acc", "tx": "xgmi_write_data_acc"}
#: amdsmi's KB, like its MB, is binary (the kernel header says "KiloBytes").
_KB = 1024


@dataclass(slots=True)
class ResidencySeconds:
    """Seconds a firmware controller was active, from a residency accumulator that counts the firmware
    cycles it was active in, beside a cycle counter of every cycle and a clock (s) read with them:
    each interval between two readings adds Δresidency / Δcycles * Δclock. No wait between two reads
    of one call (amdsmi's violation status sleeps 100 ms for its percentage): the interval is the
    time between two samples. A cycle counter that went back (a reset) or stood still counts nothing
    and, standing still, keeps its earlier reading as the base."""

    seconds: float = 0.0
    #: Whether the controller was active in the last interval that counted cycles.
    active: bool = False
    previous: tuple[int, int, float] | None = None

    def update(self, residency: int, cycles: int, clock: float) -> float:
        """Feed one reading; return the seconds counted since the first."""
        previous = self.previous
        if previous is not None:
            d_residency, d_cycles, d_clock = (
                residency - previous[0],
                cycles - previous[1],
                clock - previous[2],
            )
            if d_cycles == 0:
                return self.seconds  # the firmware has not counted since: the earlier base stays
            if d_cycles > 0 and d_residency >= 0 and d_clock > 0:
                self.active = d_residency > 0
                self.seconds += min(d_residency / d_cycles, 1.0) * d_clock
            else:
                self.active = False
        self.previous = (residency, cycles, clock)
        return self.seconds


class MetricsTable:
    """One device's latest metrics table and the throttle seconds counted from every table read so far.
    An empty table (unsupported, or failing this read) counts nothing and reports no throttle state."""

    __slots__ = ("fields", "residency")

    def __init__(self) -> None:
        #: This read's table; empty where there is none.
        self.fields: dict[str, Any] = {}
        #: Throttle seconds by reason, for each residency accumulator the GPU has filled.
        self.residency: dict[str, ResidencySeconds] = {}

    def update(self, fields: dict[str, Any]) -> None:
        """Take this read's table and count its throttle residencies."""
        self.fields = fields
        self._count_residency()

    def _count_residency(self) -> None:
        """Throttle seconds from this read's table: the residency accumulators over the cycle counter,
        timed by the table's ``system_clock_counter`` (ns). No table, or none of them: nothing counted."""
        table = self.fields
        cycles = integer(table.get("accumulation_counter"))
        if cycles is None:
            return
        stamp = number(table.get("system_clock_counter"))
        clock = stamp / 1e9 if stamp is not None else time.monotonic()
        for reason, key in _RESIDENCIES.items():
            residency = integer(table.get(key))
            if residency is not None:
                self.residency.setdefault(reason, ResidencySeconds()).update(residency, cycles, clock)

    def supported_throttle_reasons(self) -> list[str]:
        """The reasons whose residency accumulator the GPU has filled so far."""
        return list(self.residency)

    def throttle_reasons(self) -> list[str] | None:
        """The reasons active over the last interval; None without a table this read (unknown, not "none
        active") or without residencies."""
        if not self.residency or not self.fields:
            return None
        return [reason for reason, counted in self.residency.items() if counted.active]

    def throttle_counters(self) -> dict[str, float]:
        """Throttle seconds by reason; none without a table this read (the sampler holds the totals)."""
        if not self.fields:
            return {}
        return {reason: counted.seconds for reason, counted in self.residency.items()}

    def engine_activity(self) -> LabelledValues:
        """Media-engine busy ratios by (engine, instance)."""
        return {
            (engine, instance): percent / 100
            for engine, key in _ENGINES.items()
            for instance, percent in per_instance(self.fields.get(key)).items()
        }

    def xgmi_bytes(self) -> LabelledValues:
        """XGMI bytes by (link, direction), as the accumulators read (they reset at a driver reload)."""
        return {
            (link, direction): count
            for direction, key in _XGMI.items()
            for link, count in per_instance(self.fields.get(key), _KB).items()
        }
