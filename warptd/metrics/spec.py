"""The metric contract's types: a family (:class:`MetricSpec`), how often its values change
(:class:`Cadence`), its dcgm-exporter twin, and a vendor's :class:`Row`: what is read, how it converts,
the series it becomes. A vendor's rows form one table (:mod:`warptd.metrics.nvidia`)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from enum import StrEnum
from typing import Literal

DEVICE_LABELS = ("backend", "device", "uuid")
DOMAIN_LABELS = ("source", "domain")


class Cadence(StrEnum):
    """How often a family's values change on /metrics (:mod:`warptd.metrics.cadence` gives the seconds):
    each sample, each GPM period, each read of the values that change on events (the health reads),
    each read of the energy counter, each kubelet poll, or when an event happens (XIDs, stress jobs,
    windows). Its value is the name docs and tests use."""

    SAMPLE = "sample"
    GPM = "gpm"
    HEALTH = "health"
    ENERGY = "energy"
    PODS = "pods"
    EVENT = "event"


@dataclass(frozen=True, slots=True)
class Twin:
    """dcgm-exporter's series ``name`` (:mod:`warptd.metrics.dcgm`): this family's series whose own labels
    are ``labels``, times ``scale``. A ``fallback`` twin is read only where the others are absent."""

    name: str
    scale: float = 1.0
    labels: tuple[str, ...] = ()
    fallback: bool = False


@dataclass(frozen=True, slots=True)
class MetricSpec:
    """Name as exposed (counters end in ``_total``), type, help text, label names, and how often its
    values change (its ``cadence``: a rate over less than 4 of its steps is not a rate of it)."""

    name: str
    type: Literal["gauge", "counter", "histogram"]
    help: str
    labels: tuple[str, ...]
    #: A histogram's bucket upper bounds (``+Inf`` is implied).
    buckets: tuple[float, ...] = ()
    cadence: Cadence = Cadence.SAMPLE
    #: Why the default leaves the family out (docs/metrics.md says it); empty where the default has it.
    opt_in: str = ""
    #: The dcgm-exporter series made of it (``--compat dcgm-exporter``).
    dcgm: tuple[Twin, ...] = ()

    @property
    def family(self) -> str:
        """The name prometheus_client wants: counters without their ``_total`` suffix."""
        return self.name.removesuffix("_total") if self.type == "counter" else self.name


def device(
    name: str,
    type_: Literal["gauge", "counter"],
    help_: str,
    *labels: str,
    cadence: Cadence = Cadence.SAMPLE,
    opt_in: str = "",
    dcgm: tuple[Twin, ...] = (),
) -> MetricSpec:
    """A per-device family: the device's labels, then ``labels``."""
    return MetricSpec(
        name, type_, help_, (*DEVICE_LABELS, *labels), cadence=cadence, opt_in=opt_in, dcgm=dcgm
    )


@dataclass(frozen=True, slots=True)
class Sum:
    """A per-device family that is another's series summed over one label (``over``): a GPU's NVLink
    errors, every link's. Made from each instance's monotonic total, the last one kept where a read
    misses it, so the sum never goes down (warptd.sampling.counters.CounterTotals)."""

    total: MetricSpec
    of: MetricSpec
    over: str

    def series(self, instances: Mapping[tuple[str, ...], float]) -> dict[tuple[str, ...], float]:
        """The sum's series from ``instances`` (the label values of ``of`` after the device's)."""
        position = self.of.labels.index(self.over) - len(DEVICE_LABELS)
        sums: dict[tuple[str, ...], float] = {}
        for labels, value in instances.items():
            key = labels[:position] + labels[position + 1 :]
            sums[key] = sums.get(key, 0.0) + value
        return sums


# -- rows: what a vendor reads -----------------------------------------------------------------------
@dataclass(frozen=True, slots=True)
class Field:
    """A field value the SDK answers by id in a batch (NVML's ``nvmlDeviceGetFieldValues``), as its
    header names it; ``link``: the NVLink it is asked of (its scope id), None for the device's."""

    id: int
    name: str
    link: int | None = None

    @property
    def key(self) -> tuple[int, int]:
        """(field id, scope id), as a batch asks it."""
        return self.id, self.link or 0


@dataclass(frozen=True, slots=True)
class Call:
    """A named SDK call (``argument``: which of its answers, where it has several)."""

    name: str
    argument: str = ""


@dataclass(frozen=True, slots=True)
class Entry:
    """An entry of a table the SDK answers whole, by its name (an NVML GPM metric's constant, a field of
    AMD's GPU metrics table)."""

    name: str


#: A source's unit -> (factor, divisor): ``value * factor / divisor`` is in its family's base unit (a
#: quotient kept one, so a percent reads as the exact ratio). A throughput (MiB/s) is integrated over
#: the period between two reads into its counter.
CONVERSIONS: dict[str, tuple[float, float]] = {
    "": (1.0, 1.0),
    "percent": (1.0, 100.0),
    "KiB": (1024.0, 1.0),
    "MiB/s": (2.0**20, 1.0),
    "µs": (1.0, 1e6),
}


@dataclass(frozen=True, slots=True)
class Row:
    """One metric a vendor reads: ``source``, whose value is in ``unit`` (:data:`CONVERSIONS`), becomes
    the series ``metric{labels}`` in the family's base unit; ``labels`` are the family's own label
    values (after the device's; none where the source numbers its instances, a fan, a link)."""

    source: Field | Call | Entry
    metric: MetricSpec
    labels: tuple[str, ...] = ()
    unit: str = ""

    @property
    def conversion(self) -> tuple[float, float]:
        """(factor, divisor) of :attr:`unit`."""
        return CONVERSIONS[self.unit]

    def convert(self, value: float) -> float:
        """``value`` as read, in the family's base unit."""
        factor, divisor = CONVERSIONS[self.unit]
        return value * factor / divisor


def families(rows: tuple[Row, ...], sums: tuple[Sum, ...] = ()) -> tuple[MetricSpec, ...]:
    """The families ``rows`` fill, in the order of their first row, each sum right before what it sums."""
    found: dict[MetricSpec, None] = {}
    for row in rows:
        if row.metric not in found:
            found.update(dict.fromkeys(total.total for total in sums if total.of is row.metric))
            found[row.metric] = None
    return tuple(found)
