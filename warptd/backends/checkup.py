"""What ``warptd doctor`` learns of one backend on the node it runs on: the SDK and driver versions, each
read's CPU and how often the read plan makes it, how often values change, and pairs of paths to one
value that must agree. Frozen models, so that the doctor's report holds them as they are.

A backend with a checkup of its own (:class:`ChecksItself`: the NVIDIA one, which prices each SDK call
and compares paths) answers it; any other backend is priced by :func:`sampled_prices`, from the CPU its
reads charge to ``read_costs`` (:mod:`warptd.backends.costs`) over a few samples.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from importlib import metadata
from typing import TYPE_CHECKING, Literal, Protocol, runtime_checkable

from pydantic import BaseModel, ConfigDict

from warptd.backends.costs import ReadCost, ReadCosts, thread_time

if TYPE_CHECKING:
    from warptd.config import Settings

#: Where an expected CPU is given: the default ``--interval`` and a fast one.
INTERVALS = (1.0, 0.1)
#: The cadence of a read every sample makes.
EACH_SAMPLE = "each sample"


def interval_key(interval: float) -> str:
    """An interval as the report keys it: ``1``, ``0.1``."""
    return f"{interval:g}"


class Frozen(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


class ReadPrice(Frozen):
    """One read: its median CPU (the reading thread's, ``time.thread_time``) and how often the plan makes
    it, in reads a second by ``--interval`` (``{"1": 0.9, "0.1": 0.9}``). ``read`` names it exactly (the
    SDK call, the field ids); ``what`` and ``cadence`` say it in plain words, for a person."""

    read: str
    what: str = ""
    charged_as: str | None = None  # its ``read`` label of warptd_backend_read_cpu_seconds_total
    cpu_seconds: float
    measured: int  # reads the median is of
    cadence: str
    per_second: dict[str, float]
    #: One of the calls every sample makes besides the field batch (the doctor's table sums them).
    per_sample_call: bool = False


class Refresh(Frozen):
    """How often one value changed while polled: the median gap between changes (None: fewer than two
    changes seen)."""

    value: str
    device: int
    median_seconds: float | None
    changes: int
    polled_seconds: float
    poll_seconds: float  # one poll every so often: the gaps' resolution


class Agreement(Frozen):
    """Two paths to one value, read on one device over what both cover; ``value``: the value both read,
    in plain words."""

    pair: str
    value: str = ""
    device: int
    status: Literal["agree", "disagree", "skipped"]
    detail: str


class Absent(Frozen):
    """Families of a device's that have no series, and why."""

    families: tuple[str, ...]
    reason: str


class DeviceCheckup(Frozen):
    """One device: its reads' prices (a backend pricing each device apart), the ids its clock-event
    durations answered at (NVIDIA), what is absent and why, and (the doctor's) its series by family."""

    index: int
    model: str
    uuid: str | None = None
    prices: tuple[ReadPrice, ...] = ()
    durations: dict[str, int] = {}
    absent: tuple[Absent, ...] = ()
    series: dict[str, int] = {}

    def cpu_per_second(self, interval: float) -> float:
        return cpu_per_second(self.prices, interval)


class NumberingCheck(Frozen):
    """The field ids a driver branch numbers, which one the driver's version gave, and why."""

    branch: str
    why: str
    asked: dict[str, tuple[int, ...]]  # clock event -> its duration ids asked


class BackendCheckup(Frozen):
    """One backend on this node."""

    backend: str
    source: str
    kind: str  # accelerator, host or power
    driver: str | None = None
    sdk: dict[str, str] = {}
    numbering: NumberingCheck | None = None
    prices: tuple[ReadPrice, ...] = ()  # reads priced for the backend as a whole
    devices: tuple[DeviceCheckup, ...] = ()
    refresh: tuple[Refresh, ...] = ()
    agreements: tuple[Agreement, ...] = ()
    notes: tuple[str, ...] = ()

    def cpu_per_second(self, interval: float) -> float:
        """The CPU a second its reads take at ``interval`` (s of CPU per s: 0.01 is 1 % of a core)."""
        devices = sum(device.cpu_per_second(interval) for device in self.devices)
        return cpu_per_second(self.prices, interval) + devices


def cpu_per_second(prices: Iterable[ReadPrice], interval: float) -> float:
    key = interval_key(interval)
    return sum(price.cpu_seconds * price.per_second.get(key, 0.0) for price in prices)


@dataclass(frozen=True, slots=True)
class CheckupPlan:
    """How much a checkup measures: each price is the median of ``calls`` reads, values are polled for
    ``poll_s`` one every ``poll_every_s``, and expected CPU is given at ``intervals``."""

    calls: int = 7
    poll_s: float = 1.0
    poll_every_s: float = 0.01
    gpm_pairs: int = 5
    intervals: tuple[float, ...] = INTERVALS

    @classmethod
    def quick(cls, intervals: tuple[float, ...] = INTERVALS) -> CheckupPlan:
        """A shorter checkup (tests): fewer reads, a third of a second of polling."""
        return cls(calls=3, poll_s=0.35, gpm_pairs=2, intervals=intervals)


@runtime_checkable
class ChecksItself(Protocol):
    """A backend that checks itself (prices each SDK call, compares paths): ``warptd doctor`` asks it
    rather than pricing its samples."""

    def checkup(self, plan: CheckupPlan) -> BackendCheckup: ...


def median_cpu(read: Callable[[], object], calls: int) -> float:
    """The median thread CPU of ``calls`` calls of ``read``."""
    spent = []
    for _ in range(calls):
        started = thread_time()
        read()
        spent.append(thread_time() - started)
    return statistics.median(spent)


def sdk_versions(distribution: str | None) -> dict[str, str]:
    """The installed version of the SDK package a backend reads through (its ``sdk``), where it has one."""
    if distribution is None:
        return {}
    try:
        return {distribution: metadata.version(distribution)}
    except metadata.PackageNotFoundError:
        return {}


def sampled_prices(
    costs: ReadCosts,
    sample: Callable[[], object],
    *,
    samples: int,
    settings: Settings,
    intervals: tuple[float, ...] = INTERVALS,
    max_interval: float | None = None,
) -> tuple[ReadPrice, ...]:
    """Each kind of read a backend charges to ``costs`` over ``samples`` calls of ``sample`` (one sample
    of every device or domain): its median CPU per read, and its reads a second at each interval. A
    kind read in the first sample only is one of the slow values, read every ``--health-interval``;
    the others are read each sample, as often as they were then. ``max_interval``: the backend's own
    cap on its interval (a counter that must not wrap unseen)."""
    deltas: list[dict[str, ReadCost]] = []
    before = costs.totals()
    for _ in range(samples):
        sample()
        after = costs.totals()
        deltas.append({kind: _less(cost, before.get(kind)) for kind, cost in after.items()})
        before = after
    prices = []
    for kind in sorted({kind for delta in deltas for kind, cost in delta.items() if cost.reads}):
        read = [delta[kind] for delta in deltas if kind in delta and delta[kind].reads]
        later = [delta[kind].reads if kind in delta else 0 for delta in deltas[1:]]
        slow = samples > 1 and not any(later)
        per_sample = read[0].reads if slow or not later else statistics.mean(later)
        per_second = {}
        for interval in intervals:
            every = min(interval, max_interval or math.inf)
            period = max(settings.health_interval, every) if slow else every
            per_second[interval_key(interval)] = per_sample / period
        prices.append(
            ReadPrice(
                read=kind,
                charged_as=kind,
                cpu_seconds=statistics.median(cost.cpu_seconds / cost.reads for cost in read),
                measured=sum(cost.reads for cost in read),
                cadence=f"every {settings.health_interval:g} s" if slow else EACH_SAMPLE,
                per_second=per_second,
            )
        )
    return tuple(prices)


def _less(cost: ReadCost, earlier: ReadCost | None) -> ReadCost:
    if earlier is None:
        return cost
    return ReadCost(cost.cpu_seconds - earlier.cpu_seconds, cost.reads - earlier.reads)
