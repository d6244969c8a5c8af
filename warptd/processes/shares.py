"""How a device's energy is divided between those who hold it: one rule for pods and workloads.

Holders are whatever a feature splits between (a pod's container, a Slurm job, a service); ``None``
stands for processes of no known holder, whose share is counted as unattributed. The weights are
the holders' processes' SM use where the GPU reports it per process, else (where the caller gives
them) the device memory their processes hold, else the device is split evenly.
"""

from __future__ import annotations

from collections.abc import Hashable, Mapping
from dataclasses import dataclass, field
from typing import Literal, TypeVar

Holder = TypeVar("Holder", bound=Hashable)
#: How a split was decided: by SM use, by device memory held, or evenly.
Method = Literal["sm_share", "memory", "even"]
#: A process list older than this many intervals of its monitor tells nothing about the current sample.
FRESH_INTERVALS = 3.0


@dataclass(frozen=True)
class DeviceProcesses:
    """One device's processes in one poll: device memory per pid (None: the SDK cannot tell) and,
    where the device reports how busy each process kept it, a busy weight per pid (NVIDIA: the sum
    of its SM ratio samples; AMD: its GFX time over the poll period, else its CU occupancy)."""

    polled_at: float  # time.monotonic() of the poll
    index: int
    memory_by_pid: Mapping[int, int | None] = field(default_factory=dict)
    sm_by_pid: Mapping[int, float] | None = None


def split(
    holders: tuple[Holder, ...],
    used: Mapping[Holder | None, float] | None,
    memory: Mapping[Holder | None, float] | None = None,
) -> tuple[dict[Holder | None, float], Method]:
    """Each holder's fraction of a device's energy and how it was decided, the fractions summing to 1:
    by SM use where some process used the SMs and none of a holder not listed did, the share of
    processes of no known holder under ``None`` (where they used any); else, where ``memory`` is
    given, by device memory held, on the same terms; else evenly between ``holders``."""
    for weights, method in ((used, "sm_share"), (memory, "memory")):
        fractions = _by_weight(holders, weights)
        if fractions is not None:
            return fractions, method  # type: ignore[return-value]
    return dict.fromkeys(holders, 1.0 / len(holders)), "even"


def _by_weight(
    holders: tuple[Holder, ...], weights: Mapping[Holder | None, float] | None
) -> dict[Holder | None, float] | None:
    """Fractions in proportion to ``weights``, or None where they tell nothing (none, all zero, or a
    weight of someone who is not a holder)."""
    if weights is None:
        return None
    parts = {holder: weights.get(holder, 0.0) for holder in (*holders, None)}
    total = sum(parts.values())
    strangers = any(weight > 0 and holder not in parts for holder, weight in weights.items())
    if total <= 0 or strangers:
        return None
    return {h: weight / total for h, weight in parts.items() if h is not None or weight > 0}
