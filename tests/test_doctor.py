"""``warptd doctor`` (issue 33): on the node it runs on, is warptd right, and what does it cost? Over the
C NVML double under the real nvidia-ml-py: a GPU answering as the real H200 did (its driver, its
missing NVLinks and engine counts, the CPU it charged per call), and the host CPU alone."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.doubles.nvml import FakeGpu, FakeNvml
from warptd.backends.nvidia.checkup import ACTIVITY_PAIR, ENERGY_PAIR, POWER_PAIR
from warptd.cli import main
from warptd.doctor.report import DoctorReport


@pytest.fixture
def doctor(tmp_path, capsys) -> Iterator:
    """``doctor(gpus, driver_version, *flags)``: ``warptd doctor --quick`` over NVML doubles of these
    GPUs (none: the host CPU alone); its exit code, and its output (``--json``: the report, validated
    against its model)."""
    installed = []

    def run(gpus: list[FakeGpu] | None, driver_version: str = "580.159.04", *flags: str):
        backends = ["--backend", "nvidia"] if gpus else ["--backend", "cpu"]
        if gpus:
            fake = FakeNvml(gpus, driver_version=driver_version)
            installed.append((fake, fake.installed()))
            installed[-1][1].__enter__()
        paths = ["--sysfs", str(tmp_path), "--procfs", str(tmp_path)]
        code = main(["doctor", "--quick", *backends, *paths, *flags])
        out = capsys.readouterr().out
        return code, DoctorReport.model_validate_json(out) if "--json" in flags else out

    yield run
    for fake, context in installed:
        context.__exit__(None, None, None)
        fake.close()


def _nvidia(report: DoctorReport):
    return next(backend for backend in report.backends if backend.backend == "nvidia")


def _pairs(report: DoctorReport, pair: str) -> list:
    return [a for a in _nvidia(report).agreements if a.pair == pair]


# -- the field numbering and what answered -----------------------------------------------------------------


# -- what is absent, and why ---------------------------------------------------------------------------------


# -- what each read costs, and how often it is made ---------------------------------------------------


# -- paths that must agree ---------------------------------------------------------------------------------
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


# -- no GPU --------------------------------------------------------------------------------------------------
