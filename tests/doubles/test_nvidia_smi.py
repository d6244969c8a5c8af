"""The nvidia-smi parser over the real captures kept in tests/captures/nvidia-smi/."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.doubles import nvidia_smi
from tests.doubles.nvidia_smi import DEPRECATED, MIB, NOT_SUPPORTED, Failure

SOURCES = Path(__file__).parents[1] / "captures" / "nvidia-smi"


def capture(name: str) -> nvidia_smi.SmiCapture:
    return nvidia_smi.parse(SOURCES / f"linux-x86_64__{name}.txt")


def test_every_capture_parses_with_its_versions_and_states() -> None:
    found = {each.path.name: each for each in nvidia_smi.captures(SOURCES)}
    assert len(found) == 11
    for name, each in found.items():
        assert name.endswith(f"__{each.driver_version}.txt")
        assert each.system == "linux"
        assert "idle" in each.states
        assert each.cuda_version.startswith("13.")
        for state in each.states.values():
            assert len(state.gpus) == 1
            assert len(state.dmon) == 5
            assert isinstance(state.gpus[0].memory.total, int)
    # h200-more's are idle only; the symbols come with the 580, 590 and 610 drivers of 6 files.
    assert sorted(name for name, each in found.items() if "load" not in each.states) == [
        "linux-x86_64__nvidia-h200-mig__580.173.02.txt",
        "linux-x86_64__nvidia-h200__580.173.02.txt",
        "linux-x86_64__nvidia-h200__610.43.02.txt",
    ]
    assert sum(each.symbols is not None for each in found.values()) == 6


def test_r610_states_the_driver_as_its_kmd_version_and_nests_the_power_limits() -> None:
    smi = capture("nvidia-geforce-rtx-2080-super__610.57.04")
    assert (smi.driver_version, smi.cuda_version, smi.nvml_version) == ("610.57.04", "13.3", "610.57")
    gpu = smi.states["load"].gpus[0]
    assert gpu.power.limit == gpu.power.default == 250.0
    assert (gpu.power.minimum, gpu.power.maximum, gpu.power.enforced) == (105.0, 350.0, 250.0)
    assert gpu.power.average is NOT_SUPPORTED  # Turing: no 1 s average
    assert gpu.power.instant == gpu.power.usage == 98.14  # the CSV's instant, as power.draw's
    assert gpu.fans_percent == (38,)
    assert gpu.pstate == 2
    assert gpu.compute_capability == "7.5"
    assert gpu.ecc.current is NOT_SUPPORTED and gpu.ecc.totals["corrected_volatile"] is NOT_SUPPORTED
    assert gpu.remapped_rows is NOT_SUPPORTED
    assert gpu.temperatures["memory"] is NOT_SUPPORTED
    assert gpu.temperatures["target"] == 84
    assert gpu.applications_clocks["graphics"] is DEPRECATED
    assert [(p.kind, p.name, p.used_memory) for p in gpu.processes][-1] == ("C", "ffmpeg", 370 * MIB)
    assert "nvmlDeviceGetRemappedRows_v2" in (smi.symbols or ())


def test_h100_mig_states_its_devices_their_instances_and_no_nvlink() -> None:
    smi = capture("nvidia-h100-mig__590.48.01")
    gpu = smi.states["idle"].gpus[0]
    assert gpu.mig_current is True
    assert [(d.gpu_instance, d.compute_instance, d.profile) for d in gpu.mig_devices] == [
        (2, 0, "3g.40gb"), (3, 0, "2g.20gb"), (9, 0, "1g.10gb"), (10, 0, "1g.10gb")
    ]  # fmt: skip
    first = gpu.mig_devices[0]
    assert first.memory == nvidia_smi.Memory(40448 * MIB, 0, 26 * MIB, 40423 * MIB)
    assert first.engines == {"copy": 3, "encoder": 0, "decoder": 3, "ofa": 0, "jpeg": 3}
    assert first.uuid == "MIG-00000000-0000-0000-0000-000000000000"
    assert gpu.utilization["gpu"] is NOT_SUPPORTED  # the whole GPU's utilization, under MIG
    assert gpu.memory == nvidia_smi.Memory(81559 * MIB, 479 * MIB, 59 * MIB, 81022 * MIB)
    assert (gpu.power.average, gpu.power.instant, gpu.power.limit) == (71.15, 70.72, 700.0)  # the CSV's
    assert gpu.memory_power.average == 44.0 and gpu.memory_power.instant is NOT_SUPPORTED
    assert gpu.module_power.average is NOT_SUPPORTED
    assert gpu.clock_events.supported == 0x1FF and gpu.clock_events.active == 1
    assert gpu.clock_events.states["gpu_idle"] is True
    assert gpu.clock_events.states["hw_power_brake_slowdown"] is False
    assert gpu.clock_events.counters_us["sw_power_cap"] == 0
    assert gpu.remapped_rows is NOT_SUPPORTED
    assert gpu.pcie.replays == 9 and gpu.pcie.gen_max == 5
    assert gpu.persistence_mode is True and gpu.compute_mode == "Default"
    assert smi.nvlink[0].links is NOT_SUPPORTED
    assert "MIG mode" in smi.nvlink[0].message


def test_h200_mig_keeps_two_compute_instances_of_one_gpu_instance_apart() -> None:
    gpu = capture("nvidia-h200-mig__590.48.01").states["load"].gpus[0]
    found = [(d.gpu_instance, d.compute_instance, d.profile, d.multiprocessors) for d in gpu.mig_devices]
    assert found[:2] == [
        (2, 0, "1c.3g.71gb", 16), (2, 1, "2c.3g.71gb", 32)
    ]  # fmt: skip


def test_nvlink_links_and_a_gpu_without_them() -> None:
    h200 = capture("nvidia-h200__610.43.02")
    assert h200.nvlink[0].links == (26.562,) * 18
    l40s = capture("nvidia-l40s__595.80")
    assert l40s.nvlink[0].links is NOT_SUPPORTED
    assert l40s.nvlink[0].message == "Device does not have or support Nvlink"
    gpu = l40s.states["idle"].gpus[0]
    assert isinstance(gpu.remapped_rows, nvidia_smi.RemappedRows)
    assert gpu.remapped_rows.histogram["max"] == 192
    assert gpu.remapped_rows.pending is False
    assert gpu.clock_events.counters_us["sw_power_cap"] == 200_740_215
    assert l40s.states["idle"].dmon[0].values["mtemp"] is NOT_SUPPORTED
    assert l40s.states["idle"].dmon[0].values["pwr"] == 66


def test_failures_stand_for_their_return_codes() -> None:
    assert nvidia_smi.failure("[N/A]") is NOT_SUPPORTED
    assert nvidia_smi.failure("[Not Supported]") is NOT_SUPPORTED
    assert nvidia_smi.failure("N/A") is NOT_SUPPORTED
    assert nvidia_smi.failure("Requested functionality has been deprecated") == Failure(26)
    assert DEPRECATED.name == "NVML_ERROR_DEPRECATED" and NOT_SUPPORTED.name == "NVML_ERROR_NOT_SUPPORTED"
    assert nvidia_smi.failure("700.00 W") is None
    assert nvidia_smi.number("700.00 W", "W") == 700.0
    with pytest.raises(ValueError, match="expected MHz"):
        nvidia_smi.number("700.00 W", "MHz")  # a unit that changed fails, never misread
