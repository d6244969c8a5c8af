"""``warptd doctor`` (issue 33): on the node it runs on, is warptd right, and what does it cost? Over the
C NVML double under the real nvidia-ml-py: a GPU answering as the real H200 did (its driver, its
missing NVLinks and engine counts, the CPU it charged per call), and the host CPU alone."""

from __future__ import annotations

from collections.abc import Iterator

import pynvml
import pytest

from tests.doubles.nvml import FakeGpu, FakeNvml
from warptd.cli import main
from warptd.doctor.report import DoctorReport

NVLINK = ("warptd_device_nvlink_bytes_total", "warptd_device_nvlink_errors_total")


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


def _price(device, read: str):
    return next(price for price in device.prices if price.read.startswith(read))


@pytest.mark.slow
@pytest.mark.parametrize(
    ("driver_version", "branch", "durations", "smoothing"),
    [
        ("575.57.08", "R575, R580 to 580.65", (251, 252, 253), 0),
        ("580.65.06", "R575, R580 to 580.65", (251, 252, 253), 0),
        ("580.159.04", "580.82 on (R590, R595, R610 too)", (269, 270, 271), 0),
        # Which header a build took, the version does not tell; both ranges answer SUCCESS here (a GPU
        # with power smoothing), and only the durations are 64-bit.
        ("580.76.05", "580.66 to 580.81", (251, 252, 253), 1),
    ],
)
def test_the_numbering_chosen_why_and_the_duration_ids_that_answered(
    doctor, driver_version, branch, durations, smoothing
):
    gpu = FakeGpu.h200()
    gpu.power_smoothing = smoothing
    code, report = doctor([gpu], driver_version, "--json")
    assert code == 0
    numbering = _nvidia(report).numbering
    assert numbering.branch == branch
    if smoothing:
        assert numbering.why.startswith("ambiguous: both ranges asked, the 64-bit one kept")
        assert numbering.asked["sw_thermal_slowdown"] == (251, 269)
    else:
        assert numbering.why == f"driver {driver_version} is in {branch}"
    answered = _nvidia(report).devices[0].durations
    reasons = ("sw_thermal_slowdown", "hw_thermal_slowdown", "hw_power_brake_slowdown")
    assert tuple(answered[reason] for reason in reasons) == durations
    assert _nvidia(report).driver == driver_version


@pytest.mark.slow
def test_an_h200_says_why_it_has_no_link_series_and_an_h100_exports_its_links(doctor):
    h200 = FakeGpu.h200(0, unsupported_fields={94})  # PCIe replays: nvmlDeviceGetPcieReplayCounter instead
    code, report = doctor(
        [h200, FakeGpu(1)], "580.159.04", "--json", "--metrics-exclude", "warptd_device_pcie_b*"
    )
    assert code == 0
    h200, h100 = _nvidia(report).devices
    links = [entry for entry in h200.absent if set(entry.families) == set(NVLINK)]
    assert len(links) == 1
    assert links[0].reason.startswith("no NVLink: field 91 Not Supported")
    assert "nvmlDeviceGetNvLinkState(link 0) Not Supported" in links[0].reason
    assert not set(NVLINK) & set(h200.series)
    assert not any(set(NVLINK) & set(entry.families) for entry in h100.absent)
    assert h100.series["warptd_device_nvlink_errors_total"] == 4  # every link's summed, by kind
    assert h100.series["warptd_device_nvlink_bytes_total"] == 2
    assert "warptd_device_nvlink_link_errors_total" not in h100.series  # per link: opt-in
    engines = next(e for e in h200.absent if "warptd_device_decoder_utilization_ratio" in e.families)
    assert "no count" in engines.reason and "shows once it reports activity" in engines.reason
    # a field the GPU lacks: absent where nothing stands in for it, not where a call does
    retired = next(e for e in h200.absent if "warptd_device_retired_pages" in e.families)
    assert retired.reason == "fields 29, 30 not supported by this GPU or driver"
    assert not any("warptd_device_pcie_replays_total" in entry.families for entry in h200.absent)
    assert h200.series["warptd_device_pcie_replays_total"] == 1
    # the selection: its families neither exported nor reported absent; the default's reasons kept
    excluded = {entry.family: entry.reason for entry in report.excluded}
    assert excluded["warptd_device_pcie_bytes_total"].startswith("left out by --metrics-exclude")
    assert excluded["warptd_device_sm_occupancy_ratio"].startswith("left out by default")
    assert "warptd_device_pcie_bytes_total" not in h200.series
    assert h200.series["warptd_device_sm_active_ratio"] == 1  # GPM: two samples a second apart
    assert sum(h200.series.values()) == sum(h100.series.values()) - 6  # the NVLink totals


@pytest.mark.slow
def test_each_read_costs_what_the_driver_charged_and_the_plan_makes_it_as_often_as_it_says(doctor):
    code, report = doctor([FakeGpu.h200(live=True)], "580.159.04", "--json")
    assert code == 0
    device = _nvidia(report).devices[0]
    energy_call = _price(device, "nvmlDeviceGetTotalEnergyConsumption")
    assert 2.9e-3 <= energy_call.cpu_seconds < 6e-3  # the H200's 2.9 ms, burned in the calling thread
    assert 2.9e-3 <= _price(device, "fields energy").cpu_seconds < 6e-3
    assert 2.9e-3 + 3 * 0.58e-3 <= _price(device, "fields edge").cpu_seconds < 9e-3
    assert _price(device, "fields power:").cpu_seconds < 0.3e-3  # 7 µs of power fields
    assert _price(device, "nvmlDeviceGetMemoryInfo_v2").cpu_seconds < 0.3e-3
    assert _price(device, "GPM").charged_as == "gpm"
    # how often the plan makes each read, by --interval (the energy counter and health every 30 s, together)
    rates = {
        read: _price(device, read).per_second
        for read in ("fields power:", "fields energy", "fields full", "nvmlDeviceGetUtilizationRates", "GPM")
    }
    assert rates["fields power:"] == pytest.approx({"1": 1 - 1 / 30, "0.1": 10 - 1 / 30})
    assert rates["fields energy"] == pytest.approx({"1": 0.0, "0.1": 0.0})  # the health batch reads it
    assert rates["fields full"] == pytest.approx({"1": 1 / 30, "0.1": 1 / 30})
    assert rates["nvmlDeviceGetUtilizationRates"] == pytest.approx({"1": 1.0, "0.1": 10.0})
    assert rates["GPM"] == pytest.approx({"1": 1.0, "0.1": 1.0})
    assert energy_call.per_second == {"1": 0.0, "0.1": 0.0}  # field 83 reads the counter
    expected = sum(p.cpu_seconds * p.per_second["1"] for p in device.prices)
    assert report.cpu_per_second["1"] == pytest.approx(expected, rel=0.05)  # the CPU backend: ~0
    assert 2.9e-3 / 30 < expected < 0.005
    # the energy counter changes every 100 ms, as the H200's
    energy = next(r for r in _nvidia(report).refresh if r.value.startswith("energy counter"))
    assert energy.median_seconds == pytest.approx(0.1, abs=0.03)


@pytest.mark.slow
def test_sm_activity_on_a_gpu_utilization_calls_idle_disagrees_and_a_busy_gpu_is_skipped(doctor):
    idle, busy = FakeGpu.h200(0, util_gpu=0), FakeGpu.h200(1, util_gpu=35)
    for gpu in (idle, busy):
        gpu.answer_gpm_metric(pynvml.NVML_GPM_METRIC_SM_UTIL, 40.0)  # GPM: SM active 40 %
    code, table = doctor([idle, busy], "580.159.04")
    assert code == 1
    assert "DISAGREE, device 0: SM active 40.0%, utilization 0 %" in table
    assert "Not compared on 1: the GPU is busy (utilization 35% during the GPM pair)" in table
    assert "Field ids: driver 580.159.04 is in 580.82 on (R590, R595, R610 too)." in table


@pytest.mark.slow
def test_the_cpu_backend_alone_is_priced_from_its_own_samples(doctor):
    code, report = doctor(None, "", "--json")
    assert code == 0 and [b.backend for b in report.backends] == ["cpu"]
    cpu = report.backends[0]
    prices = {price.read: price for price in cpu.prices}
    assert {"times", "memory"} <= set(prices)
    assert prices["times"].cadence == "each sample"
    assert prices["times"].per_second == pytest.approx({"1": 1.0, "0.1": 10.0})
    assert 0 < prices["times"].cpu_seconds < 0.01
    assert cpu.devices[0].series["warptd_device_up"] == 1
    assert report.cpu_per_second["1"] == pytest.approx(
        sum(p.cpu_seconds * p.per_second["1"] for p in cpu.prices)
    )
    assert cpu.agreements == () and cpu.numbering is None
