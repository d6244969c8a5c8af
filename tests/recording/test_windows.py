"""The window manager's memory (issue 39, finding 11): a fan-out of samples to every open window
keeps none of them after it, and an ended window kept with its points holds them in arrays of its
own. 64 windows held open 40 s and ended had left RSS 11 MiB over idle (bench/windows_memory_bench.py)."""

from __future__ import annotations

import sys
from collections.abc import Iterable

from warptd.models import DeviceReading, Utilization
from warptd.recording.recorder import Recorder, Target
from warptd.recording.series import ARRAY_HEADER_BYTES
from warptd.recording.windows import Window, WindowManager
from warptd.sampling.snapshot import DeviceSample, Snapshot

GPU = Target("device", "nvidia", "0")


class Sampling:
    def watch(self, owner: str, devices: set[tuple[str, int]], power: set[str]) -> None: ...
    def unwatch(self, owner: str) -> None: ...
    def read_edges(self, devices: Iterable[tuple[str, int]], power: Iterable[str] = ()) -> None: ...


def sample(n: int) -> DeviceSample:
    reading = DeviceReading(
        index=0,
        power_watts=100.0 + n,
        energy_counter_joules=float(n),
        utilization=Utilization(compute=0.5),
        temperatures_celsius={"gpu": 50.0},
        clocks_hertz={"sm": 1.4e9},
    )
    return DeviceSample(reading, energy_joules=float(n))


def manager_with(windows: int) -> WindowManager:
    manager = WindowManager(Snapshot(stale_after=60.0), Sampling(), {"nvidia"})
    for i in range(windows):
        recorder = Recorder([GPU], kind="window", name=f"w{i}", recording_id=f"w{i}")
        recorder.start()
        manager._open[recorder.id] = Window(recorder)
    return manager


def test_a_fan_out_keeps_no_sample_after_it():
    """A sample handed to every window is digested once, from a per-thread cache that kept the last
    256 samples (with their readings) until it next filled: after the windows ended, for good."""
    manager = manager_with(3)
    given = sample(1)
    unused = sys.getrefcount(given)
    manager.on_sample("nvidia", [given], None, at=1000.0)
    assert [w.recorder.recording_now().targets[0].samples for w in manager._open.values()] == [1, 1, 1]
    assert sys.getrefcount(given) == unused


def test_an_ended_window_keeps_its_points_in_arrays_of_their_exact_size():
    manager = manager_with(1)
    for n in range(75):
        manager.on_sample("nvidia", [sample(n)], None, at=1000.0 + n / 10)
    ended = manager.end("w0")
    assert len(ended.targets[0].points) == 75
    store = manager.history.kept["w0"]._states[("device", "nvidia", "0")].series
    arrays = [*(c for s in store._segments for c in s.chunks), store._throttle]
    assert all(sys.getsizeof(a) == ARRAY_HEADER_BYTES + a.itemsize * len(a) for a in arrays)
    assert manager.get("w0").targets[0].points == ended.targets[0].points
