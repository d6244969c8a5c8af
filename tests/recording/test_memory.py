"""Windows' memory in bytes: compact series, the --window-memory bound, summaries-only listings,
and ended windows giving their memory back (as the budget accounts it; RSS is the benchmark's)."""

from __future__ import annotations

from tests.e2e import test_windows
from tests.e2e.test_windows import call, end_window, open_window
from tests.helpers import wait_until
from tests.samples import GPUS, feed
from warptd.config import Settings
from warptd.power.base import DomainPower, PowerSource
from warptd.recording.memory import FLOOR_POINTS, HISTORY_SHARE, SeriesBudget, floor_bytes
from warptd.recording.recorder import Recorder, Target

gpus, make_daemon = test_windows.gpus, test_windows.make_daemon  # the windows tests' fixtures


def test_the_bound_is_in_bytes_and_enforced():
    """64 windows on 8 GPUs under a 1 MiB bound: the series stay under it, every window keeps an
    even series and its summaries stay exact."""
    capacity = 2**20
    budget = SeriesBudget(lambda: capacity)
    recorders = []
    for i in range(64):
        recorder = Recorder(GPUS, kind="window", name=f"w{i}", edges=True, on_grow=budget.update)
        assert budget.admit(recorder, len(GPUS)) is (floor_bytes(8) * (i + 1) <= capacity)
        recorder.start()
        recorders.append(recorder)
    admitted = recorders[: capacity // floor_bytes(8)]
    for recorder in admitted:
        feed(recorder, 400)
    assert budget.used <= capacity
    assert sum(r.series_bytes for r in admitted) == budget.used
    for recorder in admitted:
        gpu = recorder.recording_now().targets[0]
        assert gpu.samples == 400 and len(gpu.points) >= 8
        steps = {round(b.t - a.t, 6) for a, b in zip(gpu.points, gpu.points[1:], strict=False)}
        assert len(steps) == 1


def test_ended_series_go_first_then_the_largest_open_one_thins():
    budget = SeriesBudget(lambda: 100_000)
    ended = Recorder(GPUS[:2], kind="window", name="old", on_grow=budget.update)
    live = Recorder(GPUS[:2], kind="window", name="new", on_grow=budget.update)
    for recorder in (ended, live):
        assert budget.admit(recorder, 2)
        recorder.start()
    feed(ended, 40)
    ended.stop()
    budget.ended(ended)
    kept = ended.series_bytes
    assert 0 < kept <= 100_000 // HISTORY_SHARE  # ended series take an eighth of the bound at most
    feed(live, 340)
    assert ended.series_bytes < kept  # dropped before the open window lost a point
    assert len(live.recording_now().targets[0].points) == 340
    feed(live, 600, start=340)
    assert budget.used <= 100_000 and len(live.recording_now().targets[0].points) < 940
    assert ended.recording_now().targets[0].samples == 40  # the summary stays


def test_opening_beyond_the_memory_bound_is_refused(make_daemon):
    daemon = make_daemon(window_memory="64KiB")
    fits = 64 * 2**10 // floor_bytes(1)
    ids = [open_window(daemon.port, name=f"w{i}", devices=["nvidia:0"])["id"] for i in range(fits)]
    status, body = call(daemon.port, "POST", "/windows", {"name": "more", "devices": ["nvidia:0"]})
    assert status == 429 and "--window-memory" in body["error"]
    assert daemon.windows.open_count == fits
    end_window(daemon.port, ids[0])
    open_window(daemon.port, name="again", devices=["nvidia:0"])  # room again


def test_the_listing_carries_summaries_only(make_daemon):
    daemon = make_daemon()
    opened = open_window(daemon.port, name="live", devices=["nvidia:0"])
    assert wait_until(
        lambda: len(call(daemon.port, "GET", f"/windows/{opened['id']}")[1]["targets"][0]["points"]) >= 3
    )
    listed = daemon.windows.list()
    assert [t.points for w in listed for t in w.targets] == [[]]
    assert listed[0].targets[0].samples >= 3


def test_floor_points_fit_the_default_bound():
    """The default bound lets --window-max-open (64) windows on 8 GPUs open, each promised
    FLOOR_POINTS points a GPU."""
    assert 64 * floor_bytes(8) <= Settings().window_memory
    assert FLOOR_POINTS >= 64


def test_default_windows_on_8_gpus_and_2_sockets_all_open_under_the_default_bound():
    """A default window covers the RAPL packages too: each domain is reserved at its own row size
    (5 values), so --window-max-open (64) such windows fit the default --window-memory."""
    settings = Settings()
    budget = SeriesBudget(lambda: settings.window_memory)
    members = [Fake(0) for _ in range(settings.window_max_open)]
    assert all(budget.admit(m, 8, 2) for m in members)
    assert floor_bytes(0, 1) == FLOOR_POINTS * (5 * 8 + 4)  # a domain row: 5 values, a throttle index


def test_a_domain_is_reserved_at_the_bytes_its_rows_take():
    recorder = Recorder([Target("domain", "rapl", "package-0")], kind="window", name="w")
    recorder.start()
    for n in range(FLOOR_POINTS):
        domain = DomainPower("package-0", PowerSource.RAPL, power_watts=80.0, energy_joules=float(n))
        recorder.add_domain(recorder.targets[0], domain, 1000.0 + n / 10)
    assert len(recorder.recording_now().targets[0].points) == FLOOR_POINTS
    assert floor_bytes(0, 1) <= recorder.series_bytes <= floor_bytes(0, 1) + 1024  # and the arrays' headers


class Fake:
    """A charged member whose bytes the test sets; thinning halves them down to ``least``."""

    def __init__(self, nbytes: int, least: int = 0) -> None:
        self.series_bytes, self.least = nbytes, least

    def thin_series(self) -> bool:
        if self.series_bytes // 2 < self.least or self.series_bytes < 2:
            return False
        self.series_bytes //= 2
        return True

    def drop_series(self) -> None:
        self.series_bytes = 0


def test_bytes_thinned_away_count_toward_the_heap_trim(monkeypatch):
    budget = SeriesBudget(lambda: 4 * 2**20)
    trims = []
    monkeypatch.setattr(budget, "_trim_soon", lambda: trims.append(1))
    member = Fake(0)
    assert budget.admit(member, 1)
    member.series_bytes = 6 * 2**20
    budget.update(member)  # thinned to 3 MiB: 3 MiB given up while the window stays open
    assert budget.used == 3 * 2**20 and trims


def test_the_newest_ended_series_is_thinned_to_an_eighth_of_the_bound(monkeypatch):
    capacity = 8 * 2**20
    budget = SeriesBudget(lambda: capacity)
    monkeypatch.setattr(budget, "_trim_soon", lambda: None)
    member = Fake(0)
    assert budget.admit(member, 8)
    member.series_bytes = 3 * 2**20
    budget.update(member)
    budget.ended(member)
    assert 0 < member.series_bytes <= capacity // HISTORY_SHARE  # thinned, not dropped
    assert budget.used == member.series_bytes


def test_enforcing_thins_another_window_when_the_largest_cannot_be():
    budget = SeriesBudget(lambda: 2**20)
    stuck, thinnable = Fake(0, least=2**19 + 2**18), Fake(0)
    assert budget.admit(stuck, 1) and budget.admit(thinnable, 1)
    stuck.series_bytes = 2**19 + 2**18
    budget.update(stuck)
    thinnable.series_bytes = 2**19
    budget.update(thinnable)
    assert budget.used <= 2**20 and thinnable.series_bytes == 2**18
