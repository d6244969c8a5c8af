"""What a recording takes from one device sample, derived once however many recordings take it."""

from __future__ import annotations

import sys
import threading
from dataclasses import dataclass

from warptd.models import DeviceReading
from warptd.recording.series import Layout, layout_of
from warptd.sampling.snapshot import DeviceSample

#: Activity ratio gauges a backend may export (``warptd_device_<name>_ratio``), by their short name.
ACTIVITY_METRICS = (
    "sm_active",
    "sm_occupancy",
    "dram_bandwidth",
    "pipe_active",
    "engine_active",
    "encoder_utilization",
    "decoder_utilization",
)


def activity_ratios(reading: DeviceReading) -> dict[str, float]:
    """The activity ratios in a reading's gauges (NVIDIA GPM and the like): ``sm_active``, and one
    per label value for labelled ones (``pipe_active_tensor``)."""
    gauges = reading.gauges
    ratios: dict[str, float] = {}
    for short in ACTIVITY_METRICS:
        for labels, value in gauges.get(f"warptd_device_{short}_ratio", {}).items():
            if value is not None:
                ratios[sys.intern("_".join((short, *labels)))] = float(value)  # one string per key
    return ratios


@dataclass(frozen=True, slots=True)
class SampleDigest:
    """What a recording takes from one device sample, derived once however many recordings take it."""

    power: float | None
    energy: float | None
    counted: float | None  # the counter's own total, where this sample read it
    hottest: float | None
    compute: float | None
    counter: bool
    layout: Layout  # the clock domains and activity ratios this sample has, in ``keyed``'s order
    keyed: tuple[float, ...]  # the clocks' values, then the activity ratios'
    activity: tuple[float, ...]
    active: tuple[str, ...]
    throttle_seconds: dict[str, float]

    @classmethod
    def of(cls, sample: DeviceSample) -> SampleDigest:
        reading = sample.reading
        clocks = {k: float(v) for k, v in reading.clocks_hertz.items() if v is not None}
        activity = activity_ratios(reading)
        return cls(
            power=reading.power_watts,
            energy=sample.energy_joules,
            counted=sample.energy_counted_joules,
            hottest=max(reading.temperatures_celsius.values(), default=None),
            compute=reading.utilization.compute if reading.utilization else None,
            counter=reading.energy_counter_joules is not None,
            layout=layout_of(tuple(clocks), tuple(activity)),
            keyed=(*clocks.values(), *activity.values()),
            activity=tuple(activity.values()),
            active=tuple(sorted(r for r, on in reading.throttle_active.items() if on)),
            throttle_seconds={r: s for r, s in sample.throttle_seconds.items() if s is not None},
        )


_digests = threading.local()


def digest(sample: DeviceSample) -> SampleDigest:
    """The digest of a (frozen) sample, from a small per-thread cache: 64 windows on one GPU hand
    the same sample to 64 recorders, which derive its activity ratios and throttle reasons once."""
    cache: dict[int, tuple[DeviceSample, SampleDigest]] | None = getattr(_digests, "cache", None)
    if cache is None:
        cache = _digests.cache = {}
    hit = cache.get(id(sample))
    if hit is not None and hit[0] is sample:
        return hit[1]
    if len(cache) >= 256:
        cache.clear()
    made = SampleDigest.of(sample)
    cache[id(sample)] = (sample, made)  # the sample is held, so its id is not reused meanwhile
    return made


def forget_digests() -> None:
    """Let go of the samples this thread's digest cache holds, once a fan-out to many recorders is
    done. Held until the cache next filled, the last 256 samples of a 10 Hz run (their readings
    scattered over the sampler thread's heap) kept about 1 MiB of it after every window ended."""
    cache: dict[int, tuple[DeviceSample, SampleDigest]] | None = getattr(_digests, "cache", None)
    if cache:
        cache.clear()
