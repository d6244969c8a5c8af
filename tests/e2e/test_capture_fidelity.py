"""Issue 40's capture fidelity: ``warptd capture`` over the priced NVML double, replayed, gives the same
``/metrics`` as the daemon over that double (the same series and labels, steady values equal, energy
rates within 2 %); and the replay answers every call and field the daemon and ``warptd doctor`` make
from the capture, none from the double's model, so a call or field warptd starts to read that the
capture does not record fails here."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.doubles.nvml import GIB, FakeGpu, FakeMig, FakeNvml
from tests.helpers import Sample, http, parse, wait_until
from warptd.capture import schema

pytestmark = pytest.mark.slow

ROOT = Path(__file__).parents[2]
#: Every family read, processes listed: every read the daemon can make is made.
DAEMON = ("--backend", "nvidia", "--backend", "nvidia_mig", "--interval", "0.5", "--energy-interval", "1")
DAEMON += ("--processes",)
DAEMON += ("--metrics-include", "*", "--listen", "127.0.0.1:0", "--log-format", "json")
#: What moves with time or with warptd's own work, whether or not it moved between two scrapes: when
#: a counter was read, the CPU of reads.
_MOVING = ("_timestamp_seconds", "_cpu_seconds_total")
#: Between the two scrapes whose energy totals give each GPU's rate.
RATE_SPAN_S = 6.0


def _source() -> FakeNvml:
    """An H100 SXM moving PCIe and NVLink traffic at 310 W, an H100 cut into two MIG devices, an H200."""
    h100 = FakeGpu(0, live=True, power_mw=310_000, util_gpu=87)
    h100.gpm_traffic(pcie=(2.0e8, 1.0e8), nvlink={0: (3.0e8, 4.0e8), 5: (1.0e8, 0.5e8)})
    h100.advance_gpm(activity={2: 0.5, 3: 0.25})
    mig = FakeGpu(1, live=True, power_mw=150_000)
    mig.mig_devices = [
        FakeMig(
            "MIG-aaaaaaaa-bbbb-cccc-dddd-eeeeeeeeeeee",
            1,
            0,
            "NVIDIA H100 80GB HBM3 MIG 3g.40gb",
            40 * GIB,
            GIB,
        ),
        FakeMig(
            "MIG-11111111-2222-3333-4444-555555555555", 2, 0, "NVIDIA H100 80GB HBM3 MIG 3g.40gb", 40 * GIB
        ),
    ]
    h200 = FakeGpu.h200(2, live=True)
    h200.ecc_aggregate[0] = 3
    return FakeNvml([h100, mig, h200], "580.159.04", keep=True)


class _Daemon:
    """``warptd serve`` (through ``prefix``: the replay runner, or nothing) with its port from its log."""

    def __init__(self, tmp_path: Path, name: str, environment: dict[str, str], prefix: tuple[str, ...] = ()):
        self.log = tmp_path / f"{name}.log"
        command = [*prefix, sys.executable, "-m", "warptd", "serve", *DAEMON, "--sysfs", str(tmp_path)]
        self.proc = subprocess.Popen(
            command, cwd=ROOT, env=environment, stdout=subprocess.DEVNULL, stderr=self.log.open("w")
        )
        self.port = 0
        assert wait_until(self._ready, timeout=60), self.log.read_text()[-3000:]

    def _ready(self) -> bool:
        for line in self.log.read_text().splitlines():
            if '"warptd_started"' in line:
                self.port = int(line.split('"listen": "')[1].split('"')[0].rpartition(":")[2])
        return bool(self.port) and http(self.port, "GET", "/readyz")[0] == 200

    def scrape(self) -> list[Sample]:
        return parse(http(self.port, "GET", "/metrics")[2].decode())


def _run(tmp_path: Path, name: str, environment: dict[str, str], prefix: tuple[str, ...] = ()) -> dict:
    """Scrape a daemon twice ``RATE_SPAN_S`` apart (after its first slow values): the samples of each."""
    daemon = _Daemon(tmp_path, name, environment, prefix)
    try:
        time.sleep(2.0)  # a GPM period, the first health read
        first = daemon.scrape()
        time.sleep(RATE_SPAN_S)
        second = daemon.scrape()
    finally:
        daemon.proc.send_signal(signal.SIGTERM)
        daemon.proc.wait(timeout=30)
    return {"first": first, "second": second, "log": daemon.log}


def _command(
    command: list[str], environment: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        command, cwd=ROOT, env=environment, capture_output=True, text=True, timeout=120, check=False
    )


def _warptd(*args: str) -> list[str]:
    return [sys.executable, "-m", "warptd", *args]


def _replay(capture: Path, report: Path) -> tuple[str, ...]:
    """The replay runner over ``capture``, reporting what its model answered to ``report``."""
    return (sys.executable, "-m", "tests.doubles.replay", str(capture), "--report", str(report), "--")


def _key(sample: Sample) -> tuple[str, tuple[tuple[str, str], ...]]:
    return sample.name, tuple(sorted(sample.labels.items()))


def _device_series(samples: list[Sample]) -> dict:
    """The series of the GPUs and MIG devices: warptd's own (self-metrics, processes) aside."""
    return {_key(s): s.value for s in samples if s.labels.get("backend", "").startswith("nvidia")}


def _energy_rates(run: dict) -> dict[str, float]:
    """Each GPU's energy total over its read timestamps between the two scrapes: W."""
    rates = {}
    for sample in run["second"]:
        if sample.name != "warptd_device_energy_joules_total":
            continue
        device = sample.labels["device"]
        stamps = [
            next(
                s.value
                for s in scrape
                if s.name == "warptd_device_energy_read_timestamp_seconds" and s.labels["device"] == device
            )
            for scrape in (run["first"], run["second"])
        ]
        first = next(s.value for s in run["first"] if _key(s) == _key(sample))
        rates[device] = (sample.value - first) / (stamps[1] - stamps[0])
    return rates


def test_a_capture_replayed_gives_the_daemon_the_same_metrics(tmp_path):
    source = _source()
    environment = {**os.environ, **source.environment()}
    try:
        direct = _run(tmp_path, "direct", environment)
        capture = tmp_path / "capture.json"
        made = _command(
            [*_warptd("capture", "--no-mask", "-o", str(capture), "--sysfs", str(tmp_path))], environment
        )
        assert made.returncode == 0, made.stderr[-3000:]
        assert f"wrote {capture}" in made.stdout
    finally:
        source.close()
    assert capture.stat().st_size < 3 * 2**20  # under 1 MiB a GPU
    report = tmp_path / "report.json"
    replayed = _run(tmp_path, "replayed", dict(os.environ), _replay(capture, report))
    # the replay answered everything the daemon asked from the capture
    said = json.loads(report.read_text())
    assert said == {"unknown": [], "modelled": [], "not_reproduced": []}, said
    # the same series and labels
    before, after = _device_series(direct["second"]), _device_series(replayed["second"])
    assert sorted(set(before) ^ set(after)) == []
    # steady values (those that stood still on the double between the scrapes) equal
    steady = {
        key: v
        for key, v in _device_series(direct["first"]).items()
        if before.get(key) == v and not key[0].endswith(_MOVING)
    }
    differ = {key: (v, after[key]) for key, v in steady.items() if after[key] != v}
    assert len(steady) > 200 and not differ, differ
    # energy at the same rate, within 2 %
    rates, again = _energy_rates(direct), _energy_rates(replayed)
    assert rates.keys() == again.keys() == {"0", "1", "2"}
    for device, watts in rates.items():
        assert again[device] == pytest.approx(watts, rel=0.02), (device, watts, again[device])
    assert rates["0"] == pytest.approx(310, rel=0.02)


def test_the_doctor_over_a_replay_asks_nothing_the_capture_lacks(tmp_path):
    source = _source()
    capture = tmp_path / "capture.json"
    try:
        made = _command(
            _warptd("capture", "-o", str(capture), "--sysfs", str(tmp_path)),
            {**os.environ, **source.environment()},
        )
    finally:
        source.close()
    assert made.returncode == 0, made.stderr[-3000:]
    assert "masked, keeping their shape: 3 GPU UUIDs, 2 MIG UUIDs" in made.stdout
    loaded = schema.Capture.read(capture)
    assert loaded.header.masked and "MIG-aaaaaaaa" not in capture.read_text()
    report = tmp_path / "report.json"
    doctor = _command(
        [*_replay(capture, report), *_warptd("doctor", "--json", "--quick", "--sysfs", str(tmp_path))]
    )
    assert doctor.returncode == 0, doctor.stderr[-3000:]
    assert json.loads(report.read_text()) == {"unknown": [], "modelled": [], "not_reproduced": []}
    checked = json.loads(doctor.stdout)
    nvidia = next(b for b in checked["backends"] if b["backend"] == "nvidia")
    assert [d["uuid"] for d in nvidia["devices"]] == [gpu.identity.uuid for gpu in loaded.gpus]
    assert nvidia["sdk"]["NVML"] == loaded.node.nvml_version
