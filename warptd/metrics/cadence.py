"""How often a metric family's values change on /metrics, in seconds, from its catalog cadence and the
settings; and the shortest range a rate() of it may take: :data:`RATE_STEPS` of its steps.

A counter read every 30 s steps every 30 s: over a window of ``w`` seconds its rate is off by up to
about 30/``w`` (the window sees one step more or less), and a window shorter than two steps may see no
step at all. docs/metrics.md and docs/dashboard.md state the rule; tests/deploy/test_rate_windows.py
holds every shipped rule, panel and example to it.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from warptd.config import Settings
    from warptd.metrics.spec import Cadence, MetricSpec

#: A GPM source is sampled at most once a second outside windows, whatever ``--interval``.
GPM_PERIOD_FLOOR_S = 1.0
#: The fewest steps of a counter a shipped rate window spans.
RATE_STEPS = 4
#: Each cadence as docs/metrics.md names it.
DESCRIBED: dict[str, str] = {
    "sample": "`--interval`",
    "gpm": "`--interval`, 1 s at least",
    "health": "`--health-interval`",
    "energy": "`--energy-interval` (an estimate between)",
    "pods": "`--pod-resources-interval`",
    "event": "when it happens",
}


def seconds(cadence: Cadence, settings: Settings) -> float:
    """Seconds between two changes of a family of this cadence under ``settings`` (0: an event's)."""
    interval = settings.interval
    return {
        "sample": interval,
        "gpm": max(interval, GPM_PERIOD_FLOOR_S),
        "health": max(interval, settings.health_interval),  # every sample reads them at --interval ≥ it
        "energy": max(interval, min(settings.energy_interval, settings.health_interval)),
        "pods": settings.pod_resources_interval,
        "event": 0.0,
    }[cadence]


def shortest_window(spec: MetricSpec, settings: Settings) -> float:
    """The shortest rate() window over ``spec`` (seconds) that spans :data:`RATE_STEPS` of its steps."""
    return RATE_STEPS * seconds(spec.cadence, settings)
