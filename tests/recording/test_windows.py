"""The window manager's memory (issue 39, finding 11): a fan-out of samples to every open window
keeps none of them after it, and an ended window kept with its points holds them in arrays of its
own. 64 windows held open 40 s and ended had left RSS 11 MiB over idle (bench/windows_memory_bench.py)."""

from __future__ import annotations

import sys
import time
from collections.abc import Iterable

import pytest

from tests.e2e import test_windows
from tests.e2e.test_windows import call, end_window, open_window
from warptd.http.app import HttpError, Request, Router
from warptd.http.window_routes import WindowApi
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


gpus, make_daemon = test_windows.gpus, test_windows.make_daemon  # the windows tests' fixtures


@pytest.mark.slow
def test_ended_windows_give_their_memory_back(make_daemon, monkeypatch):
    """Beyond the newest few, an ended window's series is released: the accounted bytes fall to
    the newest few's, and to nothing once those are gone too."""
    from warptd.recording import windows

    monkeypatch.setattr(windows, "HISTORY_WITH_POINTS", 2)
    daemon = make_daemon()
    budget = daemon.windows.budget
    ids = [open_window(daemon.port, name=f"w{i}", devices=["nvidia:0", "nvidia:1"])["id"] for i in range(5)]
    time.sleep(1.0)
    open_bytes = budget.used
    assert open_bytes > 5 * 2 * 5 * 8 * 5  # five windows, two GPUs, at least five points each
    for window_id in ids:
        end_window(daemon.port, window_id)
    recorders = list(daemon.windows.history.kept.values())
    assert len(recorders) == 2
    assert budget.used == sum(r.series_bytes for r in recorders) < open_bytes
    shown = [call(daemon.port, "GET", f"/windows/{i}")[1] for i in ids]
    assert [bool(s["targets"][0]["points"]) for s in shown] == [False, False, False, True, True]
    assert all(s["targets"][0]["samples"] >= 5 for s in shown)  # the summaries stay
    monkeypatch.setattr(windows, "HISTORY_WITH_POINTS", 0)
    end_window(daemon.port, open_window(daemon.port, name="last", devices=["nvidia:0"])["id"])
    assert budget.used == 0 and not daemon.windows.history.kept


def test_remote_clients_need_the_token():
    router = Router()
    WindowApi.add(router, WindowManager.__new__(WindowManager), token=lambda: None)
    remote = Request(
        "POST", "/windows", {}, {"content-type": "application/json"}, b'{"name": "a"}', "10.0.0.9"
    )
    with pytest.raises(HttpError) as refused:
        router.dispatch(remote)
    assert (
        refused.value.status == 403 and "window requests are accepted from loopback" in refused.value.message
    )
    router = Router()
    WindowApi.add(router, WindowManager.__new__(WindowManager), token=lambda: "s3cret")
    with pytest.raises(HttpError) as wrong:
        router.dispatch(
            Request("POST", "/windows/x/end", {}, {"authorization": "Bearer nope"}, b"", "10.0.0.9")
        )
    assert wrong.value.status == 401
