"""How often a metric family's values change on /metrics, in seconds, from its catalog cadence and the
settings; and the shortest range a rate() of it may take: :data:`RATE_STEPS` of its steps.

A counter read every 30 s steps every 30 s: over a window of ``w`` seconds its rate is off by up to
about 30/``w`` (the window sees one step more or less), and a window shorter than two steps may see no
step at all. docs/metrics.md and docs/dashboard.md state the rule; tests/deploy/test_rate_windows.py
holds every shipped rule, panel and example to it.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

from warptd.metrics.spec import Cadence

if TYPE_CHECKING:
    from warptd.config import Settings
    from warptd.metrics.spec import MetricSpec

#: A GPM source is sampled at most once a second outside windows, whatever ``--interval``.
GPM_PERIOD_FLOOR_S = 1.0
#: The fewest steps of a counter a shipped rate window spans.
RATE_STEPS = 4
#: Each cadence as docs/metrics.md names it.
DESCRIBED: dict[Cadence, str] = {
    Cadence.SAMPLE: "`--interval`",
    Cadence.GPM: "`--interval`, 1 s at least",
    Cadence.HEALTH: "`--health-interval`",
    Cadence.ENERGY: "`--energy-interval` (an estimate between)",
    Cadence.PODS: "`--pod-resources-interval`",
    Cadence.EVENT: "when it happens",
}


def seconds(cadence: Cadence, settings: Settings) -> float:
    """Seconds between two changes of a family of this cadence under ``settings`` (0: an event's)."""
    interval = settings.interval
    return {
        Cadence.SAMPLE: interval,
        Cadence.GPM: max(interval, GPM_PERIOD_FLOOR_S),
        Cadence.HEALTH: max(interval, settings.health_interval),  # every sample reads them at --interval ≥ it
        Cadence.ENERGY: max(interval, min(settings.energy_interval, settings.health_interval)),
        Cadence.PODS: settings.pod_resources_interval,
        Cadence.EVENT: 0.0,
    }[cadence]


#: The period of a device's own reads of a cadence's values (:class:`~warptd.backends.cadence.DeviceCadence`),
#: by the settings and whether a window watches the device: the health values every
#: ``--health-interval``; the energy counter every ``--energy-interval``, and every
#: ``--window-energy-interval`` where shorter while a window watches the device.
PERIODS: dict[Cadence, Callable[[Settings, bool], float]] = {
    Cadence.HEALTH: lambda settings, watched: settings.health_interval,
    Cadence.ENERGY: lambda settings, watched: (
        min(settings.energy_interval, settings.window_energy_interval)
        if watched
        else settings.energy_interval
    ),
}


def shortest_window(spec: MetricSpec, settings: Settings) -> float:
    """The shortest rate() window over ``spec`` (seconds) that spans :data:`RATE_STEPS` of its steps."""
    return RATE_STEPS * seconds(spec.cadence, settings)
