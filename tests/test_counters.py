"""Monotonic energy and throttle totals across wraps, resets and gaps."""

from __future__ import annotations

import time

import pytest

from warptd.models import CLOCK_EVENT_REASONS, DeviceReading
from warptd.sampling.counters import (
    CounterTotals,
    EnergyTracker,
    MonotonicCounter,
    ThrottleSeconds,
    ThrottleTracker,
)


def test_counter_starts_at_first_raw_value_and_adds_deltas():
    c = MonotonicCounter()
    assert c.update(100.0) == 0
    assert c.update(130.0) == 30
    assert c.total == 130


def test_counter_wrap_uses_range():
    c = MonotonicCounter(wrap_range=1000.0)
    c.update(900.0)
    assert c.update(50.0) == pytest.approx(150.0)  # (1000 - 900) + 50
    assert c.wraps == 1 and c.resets == 0
    assert c.total == pytest.approx(1050.0)


def test_counter_implausible_wrap_is_a_reset():
    c = MonotonicCounter(wrap_range=1000.0)
    c.update(400.0)
    assert c.update(10.0) == 10.0  # a 610 J "wrap" is over half the range: counter reset
    assert c.resets == 1


def test_counter_without_range_resets():
    c = MonotonicCounter()
    c.update(5000.0)
    assert c.update(20.0) == 20.0
    assert c.total == 5020.0
    assert c.resets == 1


def test_energy_tracker_derives_power_from_counter():
    t = EnergyTracker()
    assert t.update(0.0, None, 10.0) == (None, 10.0)
    assert t.update(2.0, None, 30.0) == (10.0, 30.0)  # 20 J over 2 s


def test_energy_tracker_keeps_total_while_counter_and_power_unreadable():
    t = EnergyTracker()
    t.update(0.0, None, 100.0)
    assert t.update(1.0, None, None) == (None, 100.0)
    assert t.update(2.0, None, 110.0) == (5.0, 110.0)  # 10 J over the 2 s since the last reading


def test_energy_tracker_integrates_power_trapezoid_and_skips_gaps():
    t = EnergyTracker()
    assert t.update(0.0, 100.0, None) == (100.0, 0.0)
    assert t.update(1.0, 200.0, None) == (200.0, 150.0)
    assert t.update(2.0, None, None) == (None, 150.0)  # gap: nothing integrated
    assert t.update(10.0, 100.0, None) == (100.0, 150.0)  # new interval starts here
    assert t.update(11.0, 100.0, None) == (100.0, 250.0)


def test_energy_tracker_without_any_source_is_none():
    assert EnergyTracker().update(0.0, None, None) == (None, None)


def test_throttle_tracker_counter_and_sampled():
    counted = ThrottleTracker()
    assert counted.update(0.0, False, 3.0) == 3.0
    assert counted.update(1.0, False, 1.0) == 4.0  # reset: +1
    sampled = ThrottleTracker()
    assert sampled.update(0.0, True, None) == 0.0
    assert sampled.update(1.5, True, None) == 1.5
    assert sampled.update(2.5, False, None) == 1.5


def test_throttle_counter_holds_its_total_when_one_read_fails():
    t = ThrottleTracker()
    t.update(0.0, False, 4.0)
    assert t.update(1.0, True, None) == 4.0  # not the sampled total, which would go backwards
    assert t.update(2.0, False, 5.0) == 5.0


def test_throttle_seconds_keep_the_totals_of_a_reading_that_changes_none():
    """Idle readings (nothing active, counters as before) hand back the last totals; a reason that
    turns active counts the time since the last reading, kept or not, as a tracker fed each would."""
    device, alone = ThrottleSeconds(), ThrottleTracker()
    idle, counted = {"hw_slowdown": False}, {"sw_power_cap": 2.0}
    first = device.update(0.0, idle, counted)
    assert first == {"hw_slowdown": 0.0, "sw_power_cap": 2.0}
    assert device.update(1.0, dict(idle), dict(counted)) is first  # kept, not recomputed
    assert device.update(2.0, idle, {"sw_power_cap": 2.5}) == {"hw_slowdown": 0.0, "sw_power_cap": 2.5}
    assert device.update(3.0, idle, {"sw_power_cap": 2.5})["hw_slowdown"] == 0.0  # kept
    for at, on in ((0.0, False), (1.0, False), (2.0, False), (3.0, False), (3.5, True), (4.5, True)):
        expected = alone.update(at, on, None)
    seconds = device.update(3.5, {"hw_slowdown": True}, {"sw_power_cap": 2.5})
    assert seconds["hw_slowdown"] == 0.5  # from the kept reading at 3.0, not the one at 2.0
    assert device.update(4.5, {"hw_slowdown": True}, {"sw_power_cap": 2.5})["hw_slowdown"] == expected == 1.5


def test_throttle_seconds_catch_up_only_the_reasons_the_kept_readings_had():
    """A reason missing from the kept readings (its call failed) counts from where it was last read,
    as a tracker fed every reading does."""
    device, alone = ThrottleSeconds(), ThrottleTracker()
    device.update(0.0, {"hw_slowdown": False, "sw_power_cap": False}, {})
    alone.update(0.0, False, None)
    for at in (1.0, 2.0):
        device.update(at, {"sw_power_cap": False}, {})  # hw_slowdown not read: kept from t=1 on
    assert device.update(3.0, {"hw_slowdown": True, "sw_power_cap": False}, {})["hw_slowdown"] == 3.0
    assert alone.update(3.0, True, None) == 3.0


def test_energy_gap_is_not_integrated():
    t = EnergyTracker()
    t.update(0.0, 100.0, None)
    t.gap()  # e.g. the device was lost, or the sample timed out
    assert t.update(1000.0, 100.0, None) == (100.0, 0.0)  # not +100 kJ


def test_late_counter_continues_from_the_integrated_total():
    t = EnergyTracker()
    t.update(0.0, 100.0, None)
    t.update(1.0, 100.0, None)  # 100 J integrated
    assert t.update(2.0, 100.0, 5_000_000.0)[1] == 100.0  # no jump to the raw counter
    assert t.update(3.0, 100.0, 5_000_150.0)[1] == 250.0


def test_wrap_plausibility_by_implied_power():
    c = MonotonicCounter(wrap_range=65_532.0)
    c.update(60_000.0)
    # 100 s at ~400 W wraps by 40 kJ: over half the range, but 400 W is plausible
    assert c.update(34_468.0, dt=100.0) == pytest.approx(40_000.0)
    assert c.wraps == 1
    c.update(30_000.0, dt=1.0)  # a 64.5 kJ "wrap" in 1 s is no wrap: a reset
    assert c.resets == 1


def test_a_reading_keeps_clock_events_out_of_its_throttle_fields():
    reading = DeviceReading(
        index=0,
        throttle_active={"gpu_idle": True, "applications_clocks_setting": False, "sw_power_cap": True},
        throttle_counter_seconds={"gpu_idle": 9.0, "sw_power_cap": 1.5},
    )
    assert reading.throttle_active == {"sw_power_cap": True}
    assert reading.throttle_counter_seconds == {"sw_power_cap": 1.5}
    assert reading.clock_events_active == {"gpu_idle": True, "applications_clocks_setting": False}
    assert set(reading.clock_events_active) <= CLOCK_EVENT_REASONS


# -- resuming an earlier run's total (--state-dir) -------------------------------------------------
def test_resume_on_the_same_boot_counts_a_lower_counter_as_a_wrap():
    t = EnergyTracker()
    t.resume_from(500.0, 900.0, same_boot=True)
    assert t.update(0.0, None, 50.0, wrap_range=1000.0) == (None, 650.0)  # 500 + (1000 - 900) + 50
    assert t.counter is not None and t.counter.wraps == 1
    assert t.update(2.0, None, 60.0, wrap_range=1000.0) == (5.0, 660.0)


def test_resume_on_the_same_boot_with_a_higher_counter_adds_the_difference():
    t = EnergyTracker()
    t.resume_from(500.0, 900.0, same_boot=True)
    assert t.update(0.0, None, 950.0, wrap_range=1000.0) == (None, 550.0)


@pytest.mark.parametrize(
    ("same_boot", "wrap_range"),
    [(False, 1000.0), (True, None)],
    ids=["boot-unknown", "no-wrap-range"],
)
def test_resume_with_a_lower_counter_is_a_reset_unless_a_wrap_is_known(same_boot, wrap_range):
    t = EnergyTracker()
    t.resume_from(500.0, 900.0, same_boot=same_boot, read_at=time.time() - 10.0, power=20.0)
    _, total = t.update(0.0, None, 50.0, wrap_range=wrap_range)
    assert total == pytest.approx(550.0)  # a reset: the new raw, within 20 W over the 10 s gap
    assert t.counter is not None and t.counter.wraps == 0


def test_resume_after_a_reboot_adds_the_whole_counter_where_the_power_around_the_gap_allows():
    # After a reboot the state file's raw values are dropped: the counter counts from the boot.
    for energy in (50.0, 950.0):
        t = EnergyTracker()
        t.resume_from(500.0, None, same_boot=False, read_at=time.time() - 60.0, power=30.0)
        assert t.update(0.0, 40.0, energy, wrap_range=1000.0) == (40.0, 500.0 + energy)  # under 35 W x 60 s


# -- a reset or restored counter adds at most the ceiling times the time (issue 23) --------------
def test_a_reset_counter_adds_at_most_the_power_limit_times_the_time():
    t = EnergyTracker()
    t.update(0.0, None, 2_000_000.0, limit_watts=700.0)
    _, total = t.update(1.2, None, 1_000_000.0, limit_watts=700.0)  # "reloaded" at 1 MJ
    assert total == pytest.approx(2_000_000.0 + 700.0 * 1.2)
    assert t.dropped_joules == pytest.approx(1_000_000.0 - 840.0)
    assert t.counter is not None and t.counter.resets == 1
    _, total = t.update(2.2, None, 1_000_300.0, limit_watts=700.0)  # counts on from the new raw
    assert total == pytest.approx(2_000_840.0 + 300.0)


def test_a_plausible_reset_keeps_its_whole_reading_and_no_limit_means_5000_w():
    t = EnergyTracker()
    t.update(0.0, None, 9_000.0, limit_watts=700.0)
    assert t.update(1.0, None, 500.0, limit_watts=700.0)[1] == pytest.approx(9_500.0)
    assert t.dropped_joules == 0.0
    domain = EnergyTracker()
    domain.update(0.0, None, 90_000.0)
    assert domain.update(2.0, None, 60_000.0)[1] == pytest.approx(100_000.0)  # 5000 W x 2 s
    assert domain.dropped_joules == pytest.approx(50_000.0)


def test_a_counter_that_ran_on_adds_at_most_the_power_limit_times_the_time_since_its_reading():
    t = EnergyTracker()
    t.resume_from(500.0, 2_000_000.0, same_boot=True, read_at=time.time() - 1.2, power=150.0)
    _, total = t.update(0.0, 150.0, 3_000_000.0, limit_watts=700.0)  # higher: the difference, bounded
    assert 500.0 + 700.0 * 1.2 <= total <= 500.0 + 700.0 * 1.5  # the 1.2 s, and this test's own
    assert t.dropped_joules == pytest.approx(500.0 + 1_000_000.0 - total)


# -- a counter that restarted during a restart's gap: the power around it, never the limit (issue 34)
@pytest.mark.parametrize(
    ("raw", "same_boot", "before", "after", "watts"),
    [
        (2_000_000.0, True, 150.0, 170.0, 160.0),  # a reset (driver reload): both sides
        (None, False, 150.0, 170.0, 160.0),  # a reboot
        (2_000_000.0, True, None, 170.0, 170.0),  # a state file without the power: the side known
        (2_000_000.0, True, 150.0, None, 150.0),  # RAPL's first reading has no power yet
        (2_000_000.0, True, None, None, 0.0),  # neither: nothing can be known, all dropped
    ],
    ids=["reset", "reboot", "after-only", "before-only", "neither"],
)
def test_a_counter_that_restarted_in_the_gap_adds_the_power_around_it_times_the_gap(
    raw, same_boot, before, after, watts
):
    """Restarted 3 s after its last reading at 100-170 W, a GPU whose counter now says 1 MJ (the
    double's counter restarted whenever it was loaded) once gained 700 W x the gap: ~1,040 W."""
    t = EnergyTracker()
    t.resume_from(500.0, raw, same_boot=same_boot, read_at=time.time() - 3.0, power=before)
    power, total = t.update(0.0, after, 1_000_000.0, limit_watts=700.0)
    assert power == after
    assert 500.0 + watts * 3.0 <= total <= 500.0 + watts * 3.3  # the 3 s, and this test's own
    assert t.dropped_joules == pytest.approx(500.0 + 1_000_000.0 - total)
    assert t.snapshot()["power"] == after  # the next restart's side before its gap


def test_the_power_around_the_gap_never_bounds_above_the_limit():
    t = EnergyTracker()
    t.resume_from(500.0, None, read_at=time.time() - 2.0, power=4000.0)  # a state file's claim
    _, total = t.update(0.0, 4000.0, 1_000_000.0, limit_watts=700.0)
    assert 500.0 + 700.0 * 2.0 <= total <= 500.0 + 700.0 * 2.3


def test_the_daemon_drops_a_restored_jump_and_says_so(settings, tmp_path, fake_nvml):
    """The attack of issue 23: restarted with --state-dir, a GPU's driver counter found below its
    saved value (a reload) once added its whole 1 MJ reading; now at most 700 W times the time."""
    import time

    from structlog.testing import capture_logs

    from tests.helpers import Rig, select, value

    settings.backends = ["nvidia"]
    settings.state_dir = tmp_path / "state"
    for gpu in fake_nvml.gpus:
        gpu.energy_mj = 2_000_000_000  # 2 MJ since the driver loaded
    rig = Rig(settings)
    read_at = time.monotonic()  # at most the reading's time
    samples = rig.tick()
    before = value(samples, "warptd_device_energy_joules_total", device="0")
    rig.close()  # saves the totals
    for gpu in fake_nvml.gpus:
        gpu.energy_mj = 1_000_000_000  # the driver reloaded: its counter restarted
    with capture_logs() as logs:
        rig = Rig(settings)
        samples = rig.tick()
    elapsed = time.monotonic() - read_at
    try:
        added = value(samples, "warptd_device_energy_joules_total", device="0") - before
        assert 0 < added <= 700.0 * elapsed  # not 1 MJ
        dropped = value(samples, "warptd_energy_dropped_joules_total", backend="nvidia")
        assert dropped >= 2 * (1_000_000.0 - 700.0 * elapsed)  # both GPUs
        assert len([e for e in logs if e["event"] == "energy_jump_dropped"]) == 2
        assert select(samples, "warptd_energy_dropped_joules_total")  # in the catalog
    finally:
        rig.close()


@pytest.mark.parametrize("same_boot", [True, False], ids=["same-boot", "after-a-reboot"])
def test_a_counter_from_a_file_without_reading_times_is_bounded_by_its_saved_at(tmp_path, procfs, same_boot):
    """Entries saved before reading times were kept have no ``at``: the document's ``saved_at`` is
    their reading's time, so the first restart after an upgrade adds no 1 MJ either."""
    import json
    import time

    from warptd.sampling.state import CounterState

    (procfs / "sys/kernel/random").mkdir(parents=True)
    (procfs / "sys/kernel/random/boot_id").write_text("boot-a\n")
    state_dir = tmp_path / "state"
    state_dir.mkdir()
    document = {
        "version": 1,
        "boot_id": "boot-a" if same_boot else "boot-before",
        "saved_at": time.time() - 1.2,
        "counters": {"nvidia/0": {"total": 500.0, "raw": 2_000_000.0}},  # no "at": an earlier version
    }
    (state_dir / "counters.json").write_text(json.dumps(document))
    t = EnergyTracker()
    CounterState(state_dir, procfs).resume("nvidia/0", t)
    _, total = t.update(0.0, 300.0, 3_000_000.0, limit_watts=700.0)
    watts = 700.0 if same_boot else 300.0  # ran on: bounded by the limit; rebooted: the power measured
    assert 500.0 + watts * 1.2 <= total <= 500.0 + watts * 1.5
    assert t.dropped_joules == pytest.approx(500.0 + (1_000_000.0 if same_boot else 3_000_000.0) - total)


def test_a_restored_reading_from_the_future_is_bounded_by_the_time_since_boot(monkeypatch):
    """A wall clock stepped back since the save puts the reading in the future: not everything
    is dropped, the uptime bounds what the counter can have counted, and a line says so."""
    import time

    from structlog.testing import capture_logs

    from warptd.sampling import counters

    monkeypatch.setattr(counters, "uptime", lambda: 2.0)
    t = EnergyTracker()
    t.resume_from(500.0, 2_000_000.0, same_boot=True, read_at=time.time() + 3600.0)
    with capture_logs() as logs:
        _, total = t.update(0.0, None, 3_000_000.0, limit_watts=700.0)
    assert total == pytest.approx(500.0 + 700.0 * 2.0)
    assert t.dropped_joules == pytest.approx(1_000_000.0 - 1400.0)
    (line,) = [e for e in logs if e["event"] == "energy_restore_clock_behind"]
    assert line["behind_s"] == pytest.approx(3600.0, abs=5.0) and line["bounded_by_s"] == 2.0
    again = EnergyTracker()  # a real uptime: a bound, never negative
    again.resume_from(500.0, 2_000_000.0, same_boot=True, read_at=time.time() + 3600.0)
    monkeypatch.undo()
    assert again.update(0.0, None, 2_000_100.0, limit_watts=700.0)[1] == pytest.approx(600.0)


# -- the state file is not trusted (issue 34) -----------------------------------------------------
@pytest.mark.parametrize(
    ("entry", "reason"),
    [
        ({"total": float("nan"), "raw": 1.0}, "total is nan"),
        ({"total": -5e6, "raw": 1.0}, "total is -5000000.0"),
        ({"total": float("inf"), "raw": None}, "total is inf"),
        ({"total": True, "raw": 1.0}, "total is not a number"),
        ({"total": "12", "raw": 1.0}, "total is not a number"),
        ({"total": 1.0, "raw": float("nan")}, "raw is nan"),
        ({"total": 1.0, "raw": -3.0}, "raw is -3.0"),
        ({"total": 1.0, "raw": 1e30}, "more than 5000 W since boot"),  # this boot's counter
        ({"total": 1e30, "raw": 1.0, "since": 0.0}, "more than 5000 W over the"),
    ],
    ids=[
        "nan",
        "negative",
        "inf",
        "bool",
        "string",
        "raw-nan",
        "raw-negative",
        "raw-past-uptime",
        "total-past-since",
    ],
)
def test_a_saved_total_that_cannot_be_is_refused_with_a_warning_and_never_saved_again(
    tmp_path, procfs, entry, reason
):
    import json

    from structlog.testing import capture_logs

    from warptd.sampling.state import CounterState

    (procfs / "sys/kernel/random").mkdir(parents=True)
    (procfs / "sys/kernel/random/boot_id").write_text("boot-a\n")
    state_dir = tmp_path / "state"
    state_dir.mkdir()
    good = {"total": 500.0, "raw": 10.0, "at": 1.0}
    document = {
        "version": 1,
        "boot_id": "boot-a",
        "saved_at": 2.0,
        "counters": {"gpu/bad": entry, "gpu/good": good},
    }
    (state_dir / "counters.json").write_text(json.dumps(document))  # NaN and Infinity as Python writes them
    with capture_logs() as logs:
        state = CounterState(state_dir, procfs)
    assert set(state.saved) == {"gpu/good"}
    (warning,) = [e for e in logs if e["event"] == "state_entry_refused"]
    assert (
        warning["counter"] == "gpu/bad" and reason in warning["error"] and warning["log_level"] == "warning"
    )
    tracker = EnergyTracker()
    state.resume("gpu/bad", tracker)
    assert tracker.update(0.0, None, 20.0) == (None, 20.0)  # counts from its own counter, as new
    state.maybe_save(lambda: [("gpu/bad", tracker)], force=True)
    saved = json.loads((state_dir / "counters.json").read_text())["counters"]
    assert saved["gpu/bad"]["total"] == 20.0 and saved["gpu/good"]["total"] == 500.0
    assert saved["gpu/bad"]["since"] <= time.time()  # this boot: counting anew
    assert saved["gpu/good"]["since"] is None  # saved without one: kept so


def test_a_total_saved_with_its_start_is_bounded_by_it_and_one_without_is_not(tmp_path, procfs):
    """``since``: the boot a total began counting on, kept across saves; a file of an earlier
    version has none, and its totals (of many boots, maybe) are taken as they are."""
    import json

    from warptd.sampling.state import CounterState

    state_dir = tmp_path / "state"
    state_dir.mkdir()
    now = time.time()
    counters = {
        "old": {"total": 1e12, "raw": None},  # 5000 W for 6 years: no since, no bound
        "kept": {"total": 4.9e9, "raw": None, "since": now - 1e6},  # under 5000 W x 1e6 s
        "over": {"total": 5.1e9, "raw": None, "since": now - 1e6},
    }
    (state_dir / "counters.json").write_text(json.dumps({"version": 1, "counters": counters}))
    state = CounterState(state_dir, procfs)
    assert set(state.saved) == {"old", "kept"}
    state.maybe_save(lambda: [], force=True)
    saved = json.loads((state_dir / "counters.json").read_text())["counters"]
    assert saved["old"]["since"] is None and saved["kept"]["since"] == pytest.approx(now - 1e6)


def test_a_restarted_daemon_over_the_same_driver_counts_the_gap_at_the_power_drawn(tmp_path):
    """SIGKILL, 3 s down, restart: each GPU gained ~4,600 J over 4.4 s (1,040 W on a node drawing
    100-170 W), partly because the double's counter restarted with each daemon, which no driver's
    does. The driver now outlives the daemon (bench/double_daemon.py, NVML_DOUBLE_DRIVER): the
    counter ran on at the 120 W drawn, and nothing is claimed beyond it."""
    import os
    import signal
    import subprocess
    import sys
    from pathlib import Path

    from tests.helpers import http, parse, value, wait_until

    root = Path(__file__).parents[1]
    env = {**os.environ, "NVML_DOUBLE_DRIVER": str(tmp_path / "driver.bin")}

    def start(port_file: Path) -> subprocess.Popen[bytes]:
        args = [sys.executable, str(root / "bench" / "double_daemon.py"), "2", "--backend", "nvidia"]
        args += ["--listen", "127.0.0.1:0", "--interval", "0.2", "--state-dir", str(tmp_path / "state")]
        return subprocess.Popen(
            args, cwd=root, env=env, stdout=subprocess.DEVNULL, stderr=port_file.open("w")
        )

    def scrape(port_file: Path) -> tuple[float, float, float]:
        """(when, GPU 0's energy total, joules dropped) once the daemon has sampled."""
        port = {}

        def listening() -> bool:
            for line in port_file.read_text().splitlines():
                if '"warptd_started"' in line:
                    port["n"] = int(line.split('"listen": "')[1].split('"')[0].rpartition(":")[2])
            return "n" in port and http(port["n"], "GET", "/readyz")[0] == 200

        assert wait_until(listening, timeout=30)
        samples = parse(http(port["n"], "GET", "/metrics")[2].decode())
        energy = value(samples, "warptd_device_energy_joules_total", device="0")
        return (
            time.monotonic(),
            energy,
            value(samples, "warptd_energy_dropped_joules_total", backend="nvidia"),
        )

    first = start(tmp_path / "first.log")
    try:
        at, before, _ = scrape(tmp_path / "first.log")
    finally:
        first.send_signal(signal.SIGTERM)  # saves the totals
        first.wait(timeout=10)
    time.sleep(2.0)
    second = start(tmp_path / "second.log")
    try:
        then, after, dropped = scrape(tmp_path / "second.log")
    finally:
        second.kill()
        second.wait(timeout=10)
    watts = (after - before) / (then - at)  # each scrape's reading is at most 0.2 s old
    assert 80.0 <= watts <= 160.0, f"{watts:.0f} W over {then - at:.1f} s"
    assert dropped == 0.0


def test_a_sum_over_links_adds_each_links_total_and_keeps_a_link_a_read_misses():
    """catalog.SUMS (issue 39 #14): the GPU's NVLink errors are every link's monotonic total summed;
    a link absent from one read keeps its last total, and one link's counter reset adds nothing."""
    links, total = "warptd_device_nvlink_link_errors_total", "warptd_device_nvlink_errors_total"
    totals = CounterTotals()
    first = totals.update({links: {("0", "replay"): 5.0, ("1", "replay"): 2.0, ("0", "crc_flit"): 1.0}})
    assert first[total] == {("replay",): 7.0, ("crc_flit",): 1.0}
    missing = totals.update({links: {("0", "replay"): 6.0, ("0", "crc_flit"): 1.0}})
    assert missing[total] == {("replay",): 8.0, ("crc_flit",): 1.0}  # link 1's 2 kept
    reset = totals.update({links: {("0", "replay"): 0.0, ("1", "replay"): 3.0, ("0", "crc_flit"): 1.0}})
    assert reset[total] == {("replay",): 9.0, ("crc_flit",): 1.0}  # link 0 restarted: +0; link 1: +1
    assert totals.update({"warptd_device_ecc_errors_total": {("corrected",): 1.0}}).keys() == {
        "warptd_device_ecc_errors_total"
    }  # no links read now: no sum made of nothing
