"""Generates docs/metrics.md from the catalog: ``python -m warptd.metrics.docs > docs/metrics.md``."""

from __future__ import annotations

from warptd.metrics.catalog import EVERY, MetricSpec
from warptd.metrics.selection import DEFAULT_EXCLUDE
from warptd.metrics.series_counts import MODELS, SERIES_PER_GPU

_HEADER = """# warptd metrics

Generated from `warptd/metrics/catalog.py` by `python -m warptd.metrics.docs > docs/metrics.md`;
a test fails when this file is out of date.

Every device series carries `backend`, `device` (index within the backend) and `uuid` (empty
where the hardware has none). Values the hardware does not support are absent series, never 0.
A lost device keeps `warptd_device_up 0` and loses its value series; a stale backend
(`warptd_backend_up 0`) loses all its device and domain series. Process metrics (`process_*`)
come from prometheus_client.

Families the default leaves out are marked *opt-in*: `--metrics-include NAME` exports one
([below](#families-you-choose)).

| metric | type | labels | meaning |
|---|---|---|---|
"""
_CHOOSING = """
## Families you choose

`--metrics-exclude GLOB` leaves families out and `--metrics-include GLOB` brings them back
([configuration.md](configuration.md)). The default leaves out per-instance detail beside a family
it keeps, so that a GPU costs a fleet's Prometheus at most 60 series: an H200 without NVLink. A GPU
with NVLinks adds its links' series (108 on an H100 SXM's 18 links); leave out
`warptd_device_nvlink_errors_total` or `warptd_device_nvlink_bytes_total` where NVLink health or
traffic is watched elsewhere.

Series per GPU, from `python bench/series_bench.py --write` (8 GPUs of each kind in the NVML double,
every family exported; 0: none on that GPU), for each family a GPU's series belong to. The double
answers as the real H200 did: GPM rates of 0 for 18 NVLinks and the media engines the GPU lacks, and
none of those is exported (hardware that is not there has no series: docs/hardware.md). An idle media
engine NVML gives no count of (MIG off) shows once it reports activity: 0 here, up to 15 on an H200
decoding (7 NVDEC, 7 NVJPG, 1 OFA).

"""
_READS = """
**What is not read.** Where a read serves only families left out, it is not made. On the backends
read through the common getters (CPU, hwmon, Gaudi, TPU, Tenstorrent): temperatures without
`warptd_device_temperature_celsius`, clocks without `warptd_device_clock_hertz` (the CPU's: cpufreq
each sample, else `/proc/cpuinfo` at the health cadence), the hardware throttle-duration counters
without `warptd_device_throttle_seconds_total`, and the throttle reasons without it,
`warptd_device_throttle_active` and `warptd_device_clock_event_active`. Without
`warptd_device_xid_errors_total` and `warptd_device_last_xid_timestamp_seconds` the XID event thread
does not start, and without the three `warptd_pod_energy_*` families no device's energy is split
between pods. On NVIDIA GPUs: no GPM sample at all without any GPM family (and only the metrics of
those exported: the default asks no media engine nor SM occupancy), no duration field without
`warptd_device_throttle_seconds_total`, and the health fields, fans and media engines of the
families exported only. A value not read is absent from `/devices` and recordings too. What the
dcgm-exporter compat series (`--compat dcgm-exporter`) are made of is read whatever the selection
exports.
"""


def _choosing() -> str:
    """The fleet section: each per-GPU family's series on the GPUs measured, and the default's list."""
    header = "| family | default | " + " | ".join(MODELS) + " |\n|---|---|" + "---|" * len(MODELS) + "\n"
    rows = []
    for spec in EVERY:
        counts = SERIES_PER_GPU.get(spec.name)
        if counts is None:
            continue
        default = f"opt-in: {DEFAULT_EXCLUDE[spec.name]}" if spec.name in DEFAULT_EXCLUDE else "yes"
        rows.append(f"| `{spec.name}` | {default} | " + " | ".join(map(str, counts)) + " |")
    totals = [sum(c[i] for c in SERIES_PER_GPU.values()) for i in range(len(MODELS))]
    kept = [
        sum(c[i] for n, c in SERIES_PER_GPU.items() if n not in DEFAULT_EXCLUDE) for i in range(len(MODELS))
    ]
    rows.append("| **every family** | | " + " | ".join(map(str, totals)) + " |")
    rows.append("| **the default** | | " + " | ".join(map(str, kept)) + " |")
    return _CHOOSING + header + "\n".join(rows) + "\n" + _READS


def _buckets(spec: MetricSpec) -> str:
    """A histogram's buckets, as its series carry them in ``le``."""
    if not spec.buckets:
        return ""
    return " Buckets (`le`): " + ", ".join(f"{b:g}" for b in spec.buckets) + ", +Inf."


def render_markdown() -> str:
    rows = [
        f"| `{spec.name}` | {spec.type} | {', '.join(f'`{label}`' for label in spec.labels)} | "
        f"{'*opt-in.* ' if spec.name in DEFAULT_EXCLUDE else ''}{spec.help}{_buckets(spec)} |"
        for spec in EVERY
    ]
    return _HEADER + "\n".join(rows) + "\n" + _choosing()


if __name__ == "__main__":
    print(render_markdown(), end="")
