"""Generates docs/metrics.md from the catalog: ``python -m warptd.metrics.docs > docs/metrics.md``; and
the fleet figures of docs/deploy.md (``python -m warptd.metrics.docs fleet``, pasted between its
markers) from the same measured series counts."""

from __future__ import annotations

import math
import re
import sys
from collections.abc import Callable

from warptd.metrics import cadence, nvidia
from warptd.metrics.catalog import EVERY, MetricSpec
from warptd.metrics.selection import DEFAULT_EXCLUDE
from warptd.metrics.series_counts import GPUS_PER_NODE, MODELS, NODE_SERIES, SERIES_PER_GPU

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

The *read* column says how often a family's values change on `/metrics`: every sample
(`--interval`), every GPM period (`--interval`, 1 s at least), every read of the slow values
(`--health-interval`), every kubelet poll, or when it happens. A counter steps at that cadence, so
every shipped rule, panel and example takes `rate()` or `increase()` over at least 4 of its steps
(`--health-interval`'s 30 s: 2 minutes); over a window of `w` seconds a counter read every `c`
seconds is off by up to about `c`/`w` (one step more or less in the window). Set a longer
`--health-interval` and lengthen your own windows with it ([dashboard.md](dashboard.md#rate-windows)).

| metric | type | labels | read | meaning |
|---|---|---|---|---|
"""
_CHOOSING = """
## Families you choose

`--metrics-exclude GLOB` leaves families out and `--metrics-include GLOB` brings them back
([configuration.md](configuration.md)). The default leaves out per-instance detail beside a family
it keeps, so that a GPU costs a fleet's Prometheus at most 60 series on every GPU the NVML double
models, NVLink included, and each MIG device as many again at most: NVLink errors and bytes per
link are opt-in, their sums over the GPU's links stay. An XID that happens adds its code's series
(beyond the nine the shipped alerts watch) and `warptd_device_last_xid_timestamp_seconds`.

Series per GPU, from `python bench/series_bench.py --write` (8 GPUs of each kind in the NVML double,
every family exported, every media engine busy; 0: none on that GPU), for each family a GPU's series
belong to. The double answers as the real H200 did: GPM rates of 0 for 18 NVLinks and the media
engines the GPU lacks, and none of those is exported (hardware that is not there has no series:
docs/hardware.md). With MIG off NVML gives no count of the media engines: an engine shows once it
reports activity, and each kind's average over all of them
(`warptd_device_{encoder,decoder,jpeg,ofa}_utilization_ratio`, the driver's) once that kind has been
busy; an idle GPU shows up to 3 series fewer on these two models.

"""
_READS = """
**What is not read.** Where a read serves only families left out, it is not made. On the backends
whose devices read one value a method (CPU, hwmon, Gaudi, TPU, Tenstorrent): temperatures without
`warptd_device_temperature_celsius`, clocks without `warptd_device_clock_hertz` (the CPU's: cpufreq
each sample, else `/proc/cpuinfo` at the health cadence), the hardware throttle-duration counters
without `warptd_device_throttle_seconds_total`, and the throttle reasons without it,
`warptd_device_throttle_active` and `warptd_device_clock_event_active`. Without
`warptd_device_xid_errors_total` and `warptd_device_last_xid_timestamp_seconds` the XID event thread
does not start, and without the three `warptd_pod_energy_*` families no device's energy is split
between pods. On NVIDIA GPUs: no GPM sample at all without any GPM family (and only the metrics of
those exported: the default asks no media engine nor SM occupancy), no duration field without
`warptd_device_throttle_seconds_total`, and the health fields, fans and media engines of the
families exported only. Each link's NVLink fields and calls are read where either their per-link
family or its sum over links is exported (the default: the sums; leave out
`warptd_device_nvlink_*` for neither). A value not read is absent from `/devices` and recordings
too. What the dcgm-exporter compat series (`--compat dcgm-exporter`) are made of is read whatever
the selection exports.
"""


def _default(counts: dict[str, tuple[int, ...]]) -> list[int]:
    """Series per GPU (or per node) of the families the default exports, on each model."""
    return [sum(c[i] for n, c in counts.items() if n not in DEFAULT_EXCLUDE) for i in range(len(MODELS))]


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
    kept = _default(SERIES_PER_GPU)
    rows.append("| **every family** | | " + " | ".join(map(str, totals)) + " |")
    rows.append("| **the default** | | " + " | ".join(map(str, kept)) + " |")
    return _CHOOSING + header + "\n".join(rows) + "\n" + _READS


def _buckets(spec: MetricSpec) -> str:
    """A histogram's buckets, as its series carry them in ``le``."""
    if not spec.buckets:
        return ""
    return " Buckets (`le`): " + ", ".join(f"{b:g}" for b in spec.buckets) + ", +Inf."


_NVIDIA_READS = """
## What NVIDIA's table reads

Each family below is filled from rows of `warptd/metrics/nvidia.py`: NVML field ids of
`nvmlDeviceGetFieldValues` (one alone by its `NVML_FI_*` name in nvml.h), GPM metrics
(`NVML_GPM_METRIC_*`) or the calls named, each in the unit it answers in (the family's own where
none is given) and converted to the family's base unit. What every backend reads through its device
object (power, memory, clocks, temperatures, energy) is in [telemetry.md](telemetry.md).

| metric | read |
|---|---|
"""


def _ranges(numbers: list[int]) -> str:
    """``[32, 33, 34, 39]`` as ``32-34, 39``."""
    spans: list[list[int]] = []
    for n in sorted(set(numbers)):
        if spans and n == spans[-1][1] + 1:
            spans[-1][1] = n
        else:
            spans.append([n, n])
    return ", ".join(f"{a}" if a == b else f"{a}-{b}" for a, b in spans)


def _names(names: list[str]) -> list[str]:
    """Names that differ only in one number (an engine's, a link's) as one: ``NVDEC_{0-7}``."""
    numbered: dict[str, list[int]] = {}
    for name in names:
        numbers = re.findall(r"\d+", name)
        key = re.sub(r"\d+", "{}", name) if len(numbers) == 1 else name
        numbered.setdefault(key, []).extend(map(int, numbers if key != name else []))
    return [
        key.replace("{}", "{" + _ranges(ns) + "}") if len(set(ns)) > 1 else key.format(*ns[:1])
        for key, ns in numbered.items()
    ]


def _sources(rows: list[nvidia.Row]) -> str:
    """What a family's rows read, by unit: field ids, GPM metrics and calls (with their arguments)."""
    fields: dict[str, dict[int, str]] = {}
    named: dict[str, dict[str, list[str]]] = {}
    for row in rows:
        if isinstance(row.source, nvidia.Field):
            fields.setdefault(row.unit, {})[row.source.id] = row.source.name
        else:
            arguments = named.setdefault(row.unit, {}).setdefault(row.source.name, [])
            arguments.extend([row.source.argument] if getattr(row.source, "argument", "") else [])
    parts = []
    for unit, ids in fields.items():
        one = next(iter(ids.items()))
        read = f"`{one[1]}` ({one[0]})" if len(ids) == 1 else f"fields {_ranges(list(ids))}"
        parts.append(read + (f" in {unit}" if unit else ""))
    for unit, calls in named.items():
        reads = [f"`{name}`" for name in _names([name for name, given in calls.items() if not given])]
        reads += [f"`{name}` ({', '.join(dict.fromkeys(given))})" for name, given in calls.items() if given]
        parts.append(", ".join(reads) + (f" in {unit}" if unit else ""))
    return "; ".join(parts)


def _nvidia_reads() -> str:
    """The table of what each family of NVIDIA's rows is read from."""
    by_family: dict[MetricSpec, list[nvidia.Row]] = {}
    for row in nvidia.ROWS:
        by_family.setdefault(row.metric, []).append(row)
    lines = [f"| `{spec.name}` | {_sources(rows)} |" for spec, rows in by_family.items()]
    return _NVIDIA_READS + "\n".join(lines) + "\n"


def render_markdown() -> str:
    rows = [
        f"| `{spec.name}` | {spec.type} | {', '.join(f'`{label}`' for label in spec.labels)} | "
        f"{cadence.DESCRIBED[spec.cadence]} | "
        f"{'*opt-in.* ' if spec.name in DEFAULT_EXCLUDE else ''}{spec.help}{_buckets(spec)} |"
        for spec in EVERY
    ]
    return _HEADER + "\n".join(rows) + "\n" + _choosing() + _nvidia_reads()


# -- docs/deploy.md's fleet figures ---------------------------------------------------------------------
FLEET_BEGIN = "<!-- fleet-figures: generated by python -m warptd.metrics.docs fleet -->"
FLEET_END = "<!-- end fleet-figures -->"
#: The scrape intervals and fleet sizes the figures are given for.
SCRAPES_S = (15, 60)
FLEETS = (1_000, 10_000)
#: deploy/prometheus/agent.yml's sizing: nodes per agent, its scrape interval, the slowest round trip to
#: the store it keeps up at, and the headroom to catch up after an outage (samples sent twice as fast
#: as they come).
AGENT_NODES, AGENT_SCRAPE_S, STORE_ROUND_TRIP_S, CATCH_UP = 1_000, 15, 1.0, 2
_SELECTIONS = ("default", "every")
Figures = dict[str, dict[str, dict[str, int]]]


def fleet_figures() -> Figures:
    """Per model and selection ("default", "every"): series per GPU, a node's own, and per node."""
    figures: Figures = {}
    for i, model in enumerate(MODELS):
        gpu = {"default": _default(SERIES_PER_GPU)[i], "every": sum(c[i] for c in SERIES_PER_GPU.values())}
        figures[model] = {}
        for j, which in enumerate(_SELECTIONS):
            own = sum(counts[i][j] for counts in NODE_SERIES.values())
            figures[model][which] = {"gpu": gpu[which], "own": own, "node": GPUS_PER_NODE * gpu[which] + own}
    return figures


def agent_samples_per_s() -> dict[str, float]:
    """What deploy/prometheus/agent.yml is sized for: the samples a second its nodes send at its scrape
    interval, with the default and with every family, of the largest node measured."""
    nodes = fleet_figures().values()
    return {
        which: max(node[which]["node"] for node in nodes) * AGENT_NODES / AGENT_SCRAPE_S
        for which in _SELECTIONS
    }


def shards_needed(samples_per_s: float, max_samples_per_send: int) -> int:
    """Remote-write shards that send ``samples_per_s`` :data:`CATCH_UP` times over, one request of
    ``max_samples_per_send`` in flight each, at :data:`STORE_ROUND_TRIP_S` a request."""
    return math.ceil(CATCH_UP * samples_per_s * STORE_ROUND_TRIP_S / max_samples_per_send)


def about(n: float) -> str:
    """``n`` to three significant figures, as the docs say it: 34,700; 1.63 M."""
    rounded = float(f"{n:.3g}")
    return f"{rounded / 1e6:.3g} M" if rounded >= 1e6 else f"{round(rounded):,}"


_FLEET_TEXT = """
The default's figures, and in brackets every family's (`--metrics-include '*'`), from the series
`bench/series_bench.py` measured with every media engine busy ([metrics.md](metrics.md#families-you-choose)
has them by family). A node's own series are the NVIDIA backend's (its sample health, errors by
kind, the energy-window histogram, stress runs, build info, `process_*`); the host CPU backend adds
its device and RAPL domains. An agent scraping {nodes} such nodes every {scrape} s sends about
{default} samples a second with the default, {every} with every family.
"""


def render_fleet() -> str:
    """docs/deploy.md's figures, between :data:`FLEET_BEGIN` and :data:`FLEET_END`."""
    figures = fleet_figures()

    def row(label: str, cell: Callable[[dict[str, int]], str]) -> str:
        cells = [f"{cell(figures[m]['default'])} ({cell(figures[m]['every'])})" for m in MODELS]
        return f"| {label} | " + " | ".join(cells) + " |"

    rows = [
        f"| per node of {GPUS_PER_NODE} GPUs | " + " | ".join(MODELS) + " |",
        "|---|" + "---|" * len(MODELS),
        row("series per GPU", lambda f: str(f["gpu"])),
        row("a node's own series", lambda f: str(f["own"])),
        row("series per node", lambda f: f"{f['node']:,}"),
    ]
    for s in SCRAPES_S:
        rows.append(row(f"samples/s per node at a {s} s scrape", lambda f, s=s: f"{f['node'] / s:.1f}"))
    for n in FLEETS:
        rows.append(row(f"series of {n:,} nodes", lambda f, n=n: about(n * f["node"])))
    agent = agent_samples_per_s()
    text = _FLEET_TEXT.format(
        nodes=f"{AGENT_NODES:,}",
        scrape=AGENT_SCRAPE_S,
        default=about(agent["default"]),
        every=about(agent["every"]),
    )
    return f"{FLEET_BEGIN}\n" + "\n".join(rows) + f"\n{text}{FLEET_END}\n"


if __name__ == "__main__":
    which = sys.argv[1] if len(sys.argv) > 1 else "markdown"
    print({"markdown": render_markdown, "fleet": render_fleet}[which](), end="")
