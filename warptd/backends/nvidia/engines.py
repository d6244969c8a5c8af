"""Which media engines and NVLinks a GPU has, so that hardware it lacks gets no series; and each kind
of engine's average over every engine of it, as the driver gives it.

GPM answers 0 with SUCCESS for every engine and link id it numbers, present or not (a real H200: all
18 links' rates while its NVLinks answer NOT_SUPPORTED, 4 NVENC, an 8th NVDEC and NVJPG, a second OFA),
and ``nvmlDeviceGetEncoderUtilization`` answers 0 on a GPU without an encoder. NVML gives engine counts
in two places, both for MIG only: a GPU instance profile (``nvmlDeviceGetGpuInstanceProfileInfo``:
decoderCount, jpegCount, ofaCount, encoderCount; the largest profile is the whole GPU, and nvml.h says
the call answers NOT_SUPPORTED where MIG mode is off) and ``nvmlDeviceGetAttributes_v2`` (shared engine
counts, "currently only supports MIG device handles"). Without a count nothing is guessed: an engine is
shown once it has reported activity, which no absent engine does, so with MIG off the engines shown
are not every engine the GPU has and an average over them is not the GPU's.

The GPU's own average per kind comes from the driver: ``nvmlDeviceGet{Encoder,Decoder,Jpg,Ofa}Utilization``
(the last two from R525 and in nvidia-ml-py 12+; all four NOT_SUPPORTED on a MIG-enabled GPU, nvml.h).
It covers every engine of the kind: one NVDEC of a GH200's seven busy reads about 14 % (NVIDIA/DALI
issue 6387), one of a TU106's three 33 % (keylase/nvidia-patch issue 310). It is exported as it is, once
above 0 where the GPU's engines are not counted (the driver answers 0 for a kind the GPU lacks).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from warptd.backends.nvidia.guard import DeviceGuard
from warptd.metrics import nvidia
from warptd.metrics.spec import MetricSpec, Row
from warptd.models import LabelledValues

#: An engine as the series label it (GPM's ``engine`` label) -> the profile's count of it.
PROFILE_COUNTS = {"nvdec": "decoderCount", "nvjpg": "jpegCount", "ofa": "ofaCount", "nvenc": "encoderCount"}
#: The family of each kind of engine's average over every engine of it the GPU has.
MEDIA_UTILIZATION: dict[str, MetricSpec] = {
    "nvenc": nvidia.ENCODER_UTILIZATION,
    "nvdec": nvidia.DECODER_UTILIZATION,
    "nvjpg": nvidia.JPEG_UTILIZATION,
    "ofa": nvidia.OFA_UTILIZATION,
}
#: Each kind's row of NVIDIA's table: the call answering its average ([percent, sampling period in µs]).
AVERAGES: dict[str, Row] = {engine: nvidia.row_of(spec) for engine, spec in MEDIA_UTILIZATION.items()}
#: NVML_GPU_INSTANCE_PROFILE_1_SLICE (0) to _1_SLICE_REV1 (7): the ids every MIG driver numbers (R470
#: on), the whole GPU's among them (7_SLICE = 4 on Hopper and Blackwell, 8_SLICE = 5, 6_SLICE = 6); a
#: later id an older driver does not know would answer INVALID_ARGUMENT, an error counted each time.
_PROFILES = range(8)


def engine_counts(nvml: Any, guard: DeviceGuard, handle: Any) -> dict[str, int] | None:
    """The GPU's engines by kind, from the largest GPU instance profile NVML answers (the whole GPU);
    None where none answers (MIG off, a GPU without MIG, an older driver): unknown."""
    best: Any = None
    for profile in _PROFILES:
        what = f"instance_profile_{profile}"
        info = guard.call(what, nvml.nvmlDeviceGetGpuInstanceProfileInfo, handle, profile)
        if info is not None and (best is None or info.sliceCount > best.sliceCount):
            best = info
    if best is None:
        return None
    return {engine: int(getattr(best, count)) for engine, count in PROFILE_COUNTS.items()}


class Presence:
    """One GPU's engines and links: present (True), absent (False) or unknown (None: shown once seen
    active). ``links``: the NVLinks it has (field 91, else the links whose state answers)."""

    __slots__ = ("counts", "links", "seen")

    def __init__(self, counts: Mapping[str, int] | None, links: int) -> None:
        self.counts = counts
        self.links = links
        self.seen: set[tuple[str, ...]] = set()  # engines of unknown presence that reported activity

    def engine(self, engine: str, index: int) -> bool | None:
        """Whether the GPU has engine ``index`` of this kind (``nvdec``, …); None: unknown."""
        if self.counts is None or engine not in self.counts:
            return None
        return index < self.counts[engine]

    def link(self, link: int) -> bool:
        return link < self.links

    def shown(self, key: tuple[str, ...], present: bool | None, value: float) -> bool:
        """Whether a value of an engine whose presence is ``present`` is exported: a present one
        always; one of unknown presence once it has reported activity (and from then on)."""
        if present is not None:
            return present
        if value > 0:
            self.seen.add(key)
            return True
        return key in self.seen


def averages(
    get: Callable[[str, str], Any], presence: Presence | None, reads: Callable[[str], bool]
) -> tuple[dict[str, LabelledValues], list[str]]:
    """Each kind's average (:data:`AVERAGES`) the GPU has (by ``presence``) and some output ``reads``,
    through ``get(what, function name)``; and the families whose call answered nothing now."""
    gauges: dict[str, LabelledValues] = {}
    unanswered = []
    for engine, row in AVERAGES.items():
        present = presence.engine(engine, 0) if presence is not None else None
        name = row.metric.name
        if present is False or not reads(name):
            continue
        answer = get(name, row.source.name)
        if answer is None:
            unanswered.append(name)
            continue
        ratio = row.convert(answer[0])
        if presence is None or presence.shown((engine,), present, ratio):
            gauges[name] = {(): ratio}
    return gauges, unanswered
