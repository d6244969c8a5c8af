"""``warptd doctor``'s paths that must agree, on a healthy node whose load changes (issue 38, finding 4):
field 185 and ``nvmlDeviceGetPowerUsage`` during a ramp (the driver refreshes them every 100 and 50 ms,
as the double now does), and GPM SM activity against utilization when a job ends right after the GPM
pair. Over the C NVML double under the real nvidia-ml-py, as ``warptd doctor --quick --json``."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator

import pynvml
import pytest

from tests.doctor import test_report as doctor_report
from tests.doubles.nvml import FakeGpu, FakeNvml
from warptd.backends.nvidia import checkup
from warptd.backends.nvidia.checkup import ACTIVITY_PAIR, AVERAGE_SHARE, ENERGY_PAIR, POWER_PAIR
from warptd.cli import main
from warptd.doctor.report import DoctorReport

LOW_MW, HIGH_MW = 100_000, 700_000


def _doctor(fake: FakeNvml, tmp_path, capsys) -> tuple[int, DoctorReport]:
    with fake.installed():
        paths = ["--sysfs", str(tmp_path), "--procfs", str(tmp_path)]
        code = main(["doctor", "--quick", "--json", "--backend", "nvidia", *paths])
    return code, DoctorReport.model_validate_json(capsys.readouterr().out)


def _pairs(report: DoctorReport, pair: str) -> list:
    nvidia = next(backend for backend in report.backends if backend.backend == "nvidia")
    return [agreement for agreement in nvidia.agreements if agreement.pair == pair]


@pytest.fixture
def ramping() -> Iterator[FakeNvml]:
    """8 H200s whose load steps between 100 and 700 W every second: their 1 s average power is always
    ramping, at 600 W/s, up or down."""
    fake = FakeNvml([FakeGpu.h200(i, power_mw=LOW_MW, live=True) for i in range(8)], "580.159.04")
    stop = threading.Event()

    def steps() -> None:
        high = False
        while not stop.wait(1.0):
            high = not high
            for gpu in fake.gpus:
                gpu.power_mw = HIGH_MW if high else LOW_MW

    stepping = threading.Thread(target=steps, daemon=True)
    stepping.start()
    yield fake
    stop.set()
    stepping.join()
    fake.close()


@pytest.mark.slow
def test_a_ramping_load_is_no_disagreement_of_field_185_and_the_call(ramping, tmp_path, capsys):
    time.sleep(1.1)  # the average ramps from here on
    code, report = _doctor(ramping, tmp_path, capsys)
    power = _pairs(report, POWER_PAIR)
    assert [a.status for a in power] == ["agree"] * 8, [a.detail for a in power if a.status != "agree"]
    assert code == 0 and report.disagreements == 0
    assert any("more allowed" in a.detail for a in power)  # the ramp was seen, and allowed for
    # ... and the double does make the two differ by more than a steady load may: the call read right
    # after its 50 ms refresh, the field still holding the one 50 ms older
    differences = []
    with ramping.installed():
        pynvml.nvmlInit()
        try:
            handle = pynvml.nvmlDeviceGetHandleByIndex(0)
            for _ in range(5):  # at a few phases of the ramp: its turns (each step) flatten it
                ramping.next_refresh()
                time.sleep(0.05)
                (field,) = pynvml.nvmlDeviceGetFieldValues(handle, [pynvml.NVML_FI_DEV_POWER_AVERAGE])
                differences.append(abs(pynvml.nvmlDeviceGetPowerUsage(handle) - field.value.uiVal))
                time.sleep(0.13)
        finally:
            pynvml.nvmlShutdown()
    assert max(differences) > AVERAGE_SHARE * HIGH_MW + 1000, differences


@pytest.mark.slow
def test_a_job_ending_right_after_the_gpm_pair_is_no_disagreement(tmp_path, capsys, monkeypatch):
    """The job runs (utilization 35 %, SM active 40 %) through the doctor's GPM pairs and ends as they
    end: utilization then reads 0 while the pair still says 40 %. Not comparable: skipped, not 1."""
    gpus = [FakeGpu.h200(i, util_gpu=35) for i in range(2)]
    for gpu in gpus:
        gpu.answer_gpm_metric(pynvml.NVML_GPM_METRIC_SM_UTIL, 40.0)
    fake = FakeNvml(gpus, "580.159.04")
    measured = checkup._gpm

    def then_the_job_ends(*args, **kwargs):
        results = measured(*args, **kwargs)
        for gpu in gpus:
            gpu.util_gpu = 0
            gpu.answer_gpm_metric(pynvml.NVML_GPM_METRIC_SM_UTIL, None)
        return results

    monkeypatch.setattr(checkup, "_gpm", then_the_job_ends)
    try:
        code, report = _doctor(fake, tmp_path, capsys)
    finally:
        fake.close()
    activity = _pairs(report, ACTIVITY_PAIR)
    assert [a.status for a in activity] == ["skipped", "skipped"], [a.detail for a in activity]
    assert all("busy (utilization 35% during the GPM pair)" in a.detail for a in activity)
    assert code == 0 and report.disagreements == 0


@pytest.mark.slow
def test_sm_activity_on_a_gpu_idle_before_during_and_after_the_pair_still_disagrees(tmp_path, capsys):
    """What the check is for stays caught: GPM says 40 % while utilization reads 0 throughout."""
    gpu = FakeGpu.h200(0, util_gpu=0)
    gpu.answer_gpm_metric(pynvml.NVML_GPM_METRIC_SM_UTIL, 40.0)
    fake = FakeNvml([gpu], "580.159.04")
    try:
        code, report = _doctor(fake, tmp_path, capsys)
    finally:
        fake.close()
    (activity,) = _pairs(report, ACTIVITY_PAIR)
    assert activity.status == "disagree" and code == 1
    assert activity.detail == "SM active 40.0%, utilization 0 % from the pair to a second after it"


doctor = doctor_report.doctor  # `warptd doctor --quick` over NVML doubles, a fixture


@pytest.mark.slow
def test_paths_that_agree_exit_0_and_an_energy_call_off_its_field_exits_1(doctor):
    gpus = [FakeGpu.h200(0, util_gpu=0), FakeGpu.h200(1, util_gpu=0)]
    gpus[1].energy_call_offset_mj = 500_000  # the call answers 500 J beyond field 83
    code, report = doctor(gpus, "580.159.04", "--json")
    assert code == 1 and report.disagreements == 1
    energy = _pairs(report, ENERGY_PAIR)
    assert [a.status for a in energy] == ["agree", "disagree"]
    assert "500.000 J apart" in energy[1].detail
    assert [a.status for a in _pairs(report, POWER_PAIR)] == ["agree", "agree"]
    assert [a.status for a in _pairs(report, ACTIVITY_PAIR)] == ["agree", "agree"]  # both idle: ~0
    code, table = doctor([FakeGpu.h200(0)], "580.159.04")
    assert code == 0 and "Is warptd right here? Yes, as far as it can tell." in table
