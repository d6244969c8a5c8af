"""Window metrics: how many are open, and the energy of the ended ones (by allowed name; a histogram)."""

from __future__ import annotations

import bisect
import threading
from collections.abc import Iterator

from prometheus_client.core import Metric
from prometheus_client.registry import Collector

from warptd.metrics import catalog as m
from warptd.metrics.families import Families
from warptd.recording.schema import Recording
from warptd.recording.windows import WindowManager


class WindowEnergy:
    """Totals of ended windows: per allowed name, and bucket counts of every window's energy."""

    def __init__(self, allowed_names: list[str] | None) -> None:
        self.by_name = dict.fromkeys(allowed_names or (), 0.0)  # pre-set: rate() works from the start
        self.counts = [0] * (len(m.WINDOW_ENERGY_HISTOGRAM.buckets) + 1)
        self.total = 0.0
        self._lock = threading.Lock()

    def on_end(self, recording: Recording) -> None:
        """Count an ended window; one without any energy figure is not counted at all."""
        energy = recording.energy_joules
        if energy is None:
            return
        with self._lock:
            if recording.name in self.by_name:
                self.by_name[recording.name] += energy
            self.counts[bisect.bisect_left(m.WINDOW_ENERGY_HISTOGRAM.buckets, energy)] += 1
            self.total += energy

    def view(self) -> tuple[dict[str, float], list[int], float]:
        with self._lock:
            return dict(self.by_name), list(self.counts), self.total


class WindowCollector(Collector):
    def __init__(self, manager: WindowManager, energy: WindowEnergy) -> None:
        self.manager, self.energy = manager, energy

    def collect(self) -> Iterator[Metric]:
        families = Families(m.WINDOWS)
        families.add(m.WINDOWS_OPEN, [], self.manager.open_count)
        by_name, counts, total = self.energy.view()
        for name, joules in sorted(by_name.items()):
            families.add(m.WINDOW_ENERGY, [name], joules)
        families.add_histogram(m.WINDOW_ENERGY_HISTOGRAM, [], counts, total)
        yield from families.nonempty()
