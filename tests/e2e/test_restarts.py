"""Energy totals across SIGKILL, restart and driver reload, with --state-dir (issue 39, finding 5):
no total exported ever goes down, and what this costs is bounded and counted. The simulated driver
outlives the daemons (bench/double_daemon.py, NVML_DOUBLE_DRIVER), as a real one does."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.doubles.nvml import reload_driver
from tests.helpers import http, parse, value, wait_until

pytestmark = pytest.mark.slow

ROOT = Path(__file__).parents[2]
GPUS = ("0", "1")
LIMIT_W, SAVE_EVERY_S = 700.0, 10.0  # the doubles' power limit; warptd.sampling.state's interval


class Daemon:
    """One daemon over the shared driver, its port read from its log."""

    def __init__(self, tmp_path: Path, name: str) -> None:
        self.log = tmp_path / f"{name}.log"
        args = [sys.executable, str(ROOT / "bench" / "double_daemon.py"), "2", "--backend", "nvidia"]
        args += ["--listen", "127.0.0.1:0", "--interval", "0.2", "--state-dir", str(tmp_path / "state")]
        env = {**os.environ, "NVML_DOUBLE_DRIVER": str(tmp_path / "driver.bin")}
        self.proc = subprocess.Popen(
            args, cwd=ROOT, env=env, stdout=subprocess.DEVNULL, stderr=self.log.open("w")
        )
        self.port = 0
        assert wait_until(self._ready, timeout=30), self.log.read_text()[-2000:]

    def _ready(self) -> bool:
        for line in self.log.read_text().splitlines():
            if '"warptd_started"' in line:
                self.port = int(line.split('"listen": "')[1].split('"')[0].rpartition(":")[2])
        return bool(self.port) and http(self.port, "GET", "/readyz")[0] == 200

    def scrape(self) -> list:
        return parse(http(self.port, "GET", "/metrics")[2].decode())

    def totals(self) -> dict[str, float]:
        samples = self.scrape()
        return {gpu: value(samples, "warptd_device_energy_joules_total", device=gpu) for gpu in GPUS}

    def kill(self) -> None:
        self.proc.send_signal(signal.SIGKILL)
        self.proc.wait(timeout=10)


def _exported_until_killed(daemon: Daemon, seconds: float) -> dict[str, float]:
    """Scrape for ``seconds``, then SIGKILL right after the last scrape: the highest totals exported."""
    highest = dict.fromkeys(GPUS, 0.0)
    deadline = time.monotonic() + seconds
    try:
        while True:
            for gpu, total in daemon.totals().items():
                assert total >= highest[gpu]
                highest[gpu] = total
            if time.monotonic() >= deadline:
                break
            time.sleep(0.2)
    finally:
        daemon.kill()
    return highest


def test_no_total_goes_back_through_sigkill_driver_reload_and_restart(tmp_path):
    """Killed 8 s after its last save, with 1 kJ a GPU exported since, then the driver reloaded: the
    state file held less than was exported, and the restarted daemon once exported less than before
    (7,330.7 J, then 6,660.8 J). It now starts at the most the run before promised before its next
    save, at most the power limit times the save interval over, and counts that."""
    first = Daemon(tmp_path, "first")
    exported = _exported_until_killed(first, seconds=SAVE_EVERY_S + 8.0)
    reload_driver(str(tmp_path / "driver.bin"))
    second = Daemon(tmp_path, "second")
    try:
        for _ in range(5):  # and it never goes back afterwards either
            totals = second.totals()
            for gpu in GPUS:
                assert totals[gpu] >= exported[gpu], (gpu, totals[gpu], exported[gpu])
                exported[gpu] = totals[gpu]
            time.sleep(0.2)
        samples = second.scrape()
        overcount = value(samples, "warptd_energy_restart_overcount_joules_total", backend="nvidia")
        # at most the promise, the whole limit for a save interval: a sum of floats may land an ulp over it
        assert 0 < overcount <= len(GPUS) * LIMIT_W * SAVE_EVERY_S * (1 + 1e-12)
        assert value(samples, "warptd_state_save_errors_total") == 0
    finally:
        second.kill()


def test_a_restart_without_a_reload_carries_on_and_adds_nothing(tmp_path):
    first = Daemon(tmp_path, "first")
    exported = _exported_until_killed(first, seconds=3.0)
    second = Daemon(tmp_path, "second")
    try:
        totals = second.totals()
        assert all(totals[gpu] >= exported[gpu] for gpu in GPUS), (totals, exported)
        watts = [(totals[gpu] - exported[gpu]) for gpu in GPUS]
        assert all(total < 120.0 * 30 for total in watts)  # the gap at 120 W, not a promise's 7 kJ
        samples = second.scrape()
        assert value(samples, "warptd_energy_restart_overcount_joules_total", backend="nvidia") == 0
    finally:
        second.kill()


def test_a_daemon_killed_within_seconds_of_starting_has_saved_its_totals(tmp_path):
    """The first save was 10 s after the start: a daemon dying sooner had saved nothing."""
    first = Daemon(tmp_path, "first")
    totals = first.totals()
    first.kill()
    saved = json.loads((tmp_path / "state" / "counters.json").read_text())["counters"]
    assert {key.split("/", 1)[0] for key in saved} >= {"nvidia"}
    for entry in saved.values():
        assert entry["promise"] >= entry["published"] >= entry["total"]
    assert len([key for key in saved if key.startswith("nvidia/")]) == len(totals)


def test_stale_temporary_files_go_and_a_failed_save_leaves_none_and_is_counted(tmp_path):
    """12 SIGKILLs during saves left 12 ``.counters.XXXX`` files for good, and nothing counted a save
    that failed (issue 39, finding 9)."""
    state = tmp_path / "state"
    state.mkdir()
    stale = state / ".counters.leftover"
    stale.write_text("{}")
    old = time.time() - 3600
    os.utime(stale, (old, old))
    daemon = Daemon(tmp_path, "first")
    try:
        assert not stale.exists()
        target = state / "counters.json"
        target.unlink()
        target.mkdir()  # the next save writes its temporary file, then cannot rename it over this
        assert wait_until(
            lambda: value(daemon.scrape(), "warptd_state_save_errors_total") > 0, timeout=2 * SAVE_EVERY_S + 5
        )
        assert not [leftover.name for leftover in state.glob(".counters.*")]
    finally:
        daemon.kill()
