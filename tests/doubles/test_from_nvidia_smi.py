"""nvidia-smi text as NVML answers: what each real capture states, with nvml.h's codes, units and types."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.doubles import from_nvidia_smi, nvidia_smi
from warptd.capture import schema

ROOT = Path(__file__).parents[2]
SOURCES = ROOT / "tests" / "captures" / "nvidia-smi"
MIB = 2**20


def convert(name: str) -> schema.Capture:
    path = SOURCES / f"linux-x86_64__{name}.txt"
    return from_nvidia_smi.convert(nvidia_smi.parse(path), SOURCES.glob("*.txt"))


def answer(state: schema.GpuState, function: str, *args: object, device: str = schema.GPU) -> schema.Call:
    found = state.call(function, *args, device=device)
    assert found is not None, f"{function}{args} on {device}"
    return found


def test_h100_mig_answers_its_layout_memory_and_clock_events_as_nvml_would() -> None:
    capture = convert("nvidia-h100-mig__590.48.01")
    assert capture.node.driver_version == "590.48.01"
    assert capture.node.absent == ("nvmlDeviceGetGpuUptime_v1",)  # not exported by 590.48.01
    idle = capture.gpus[0].states[schema.IDLE]
    assert answer(idle, "nvmlDeviceGetMigMode").value == [1, 1]
    assert answer(idle, "nvmlDeviceGetUtilizationRates").ret == schema.NOT_SUPPORTED  # under MIG
    memory = answer(idle, "nvmlDeviceGetMemoryInfo_v2").value
    assert memory == {"version": 0x02000028, "total": 81559 * MIB, "reserved": 479 * MIB,
                      "free": 81022 * MIB, "used": 59 * MIB}  # fmt: skip
    assert answer(idle, "nvmlDeviceGetMemoryInfo").value["used"] == (59 + 479) * MIB  # v1 holds reserved
    layout = [
        (answer(idle, "nvmlDeviceGetGpuInstanceId", device=f"mig:{i}").value,
         answer(idle, "nvmlDeviceGetComputeInstanceId", device=f"mig:{i}").value,
         answer(idle, "nvmlDeviceGetName", device=f"mig:{i}").value)
        for i in range(4)
    ]  # fmt: skip
    assert layout == [
        (2, 0, "NVIDIA H100 80GB HBM3 MIG 3g.40gb"),
        (3, 0, "NVIDIA H100 80GB HBM3 MIG 2g.20gb"),
        (9, 0, "NVIDIA H100 80GB HBM3 MIG 1g.10gb"),
        (10, 0, "NVIDIA H100 80GB HBM3 MIG 1g.10gb"),
    ]
    mig_memory = answer(idle, "nvmlDeviceGetMemoryInfo_v2", device="mig:0").value
    assert (mig_memory["total"], mig_memory["used"]) == (40448 * MIB, 26 * MIB)
    assert idle.call("nvmlDeviceGetNvLinkState", 0) is None  # nvidia-smi does not ask under MIG
    assert answer(idle, "nvmlDeviceGetSupportedClocksEventReasons").value == 0x1FF
    assert answer(idle, "nvmlDeviceGetCurrentClocksEventReasons").value == 1  # GPU idle
    assert answer(idle, "nvmlDeviceGetClockInfo", 1).value == 345  # SM clock, MHz
    fields = {(f.id, f.scope): f for f in idle.fields}
    assert fields[186, 0].value == 70_720 and fields[185, 0].value == 71_150  # mW, the CSV's instant
    assert fields[185, 2].value == 44_000 and fields[186, 2].ret == schema.NOT_SUPPORTED  # the memory's
    assert fields[185, 1].ret == schema.NOT_SUPPORTED  # no Grace Hopper module
    assert (fields[269, 0].value, fields[269, 0].type) == (0, "NVML_VALUE_TYPE_UNSIGNED_LONG_LONG")
    assert all(fields[i, 0].ret == schema.NOT_SUPPORTED for i in range(251, 269))  # no power smoothing
    assert fields[142, 0].ret == schema.NOT_SUPPORTED  # "Remapped Rows: N/A"
    assert fields[3, 0].value == 0 and fields[82, 0].value == 48
    assert not fields[83, 0].known  # the energy counter: nvidia-smi never shows it
    assert "GPU 0: field 83" in capture.unknowns()
    loaded = capture.gpus[0].states[schema.LOADED]
    # power.draw of the CSV, the 1 s average, as its power.draw.average at the same instant
    assert answer(loaded, "nvmlDeviceGetPowerUsage").value == 433_780
    assert [(p.pid, p.device) for p in loaded.processes] and loaded.load


def test_a_turing_geforce_lacks_ecc_gpm_and_the_average_and_has_a_fan() -> None:
    capture = convert("nvidia-geforce-rtx-2080-super__610.57.04")
    assert capture.node.driver_version == "610.57.04"
    assert capture.node.calls[schema.IDLE][2].value == 13030  # CUDA 13.3
    loaded = capture.gpus[0].states[schema.LOADED]
    gpm = answer(loaded, "nvmlGpmQueryDeviceSupport")
    assert gpm.value == {"version": 1, "isSupportedDevice": 0}
    assert capture.source_of(gpm).id == from_nvidia_smi.HEADER
    assert answer(loaded, "nvmlDeviceGetFanSpeed_v2", 0).value == 38
    assert answer(loaded, "nvmlDeviceGetPowerUsage").value == 98_140  # instantaneous before Ampere
    assert answer(loaded, "nvmlDeviceGetMigMode").ret == schema.NOT_SUPPORTED
    assert answer(loaded, "nvmlDeviceGetRemappedRows").ret == schema.NOT_SUPPORTED
    assert answer(loaded, "nvmlDeviceGetEncoderUtilization").value == [100, None]  # period not shown
    assert answer(loaded, "nvmlDeviceGetPerformanceState").value == 2
    fields = {(f.id, f.scope): f for f in loaded.fields}
    assert fields[185, 0].ret == schema.NOT_SUPPORTED and fields[186, 0].value == 98_140
    assert all(fields[i, 0].ret == schema.NOT_SUPPORTED for i in (1, 3, 4, 5, 6, 82))
    assert fields[74, 0].value == 15_820_333_506_000  # SW power capping, ns
    assert [(p.pid, p.name, p.used_memory) for p in loaded.processes] == [
        (28511, "ffmpeg", 230 * MIB),
        (28512, "ffmpeg", 370 * MIB),
    ]  # fmt: skip: the graphics processes are no compute processes


def test_nvlink_presence_and_a_driver_without_a_symbol_list_takes_its_twins() -> None:
    h200 = convert("nvidia-h200__590.48.01")  # recorded without symbols; the H100 of 590.48.01 has them
    assert h200.node.absent == ("nvmlDeviceGetGpuUptime_v1",)
    assert from_nvidia_smi.SYMBOLS in {source.id for source in h200.header.sources}
    idle = h200.gpus[0].states[schema.IDLE]
    assert [answer(idle, "nvmlDeviceGetNvLinkState", link).value for link in range(18)] == [1] * 18
    assert idle.field(91).value == 18
    l40s = convert("nvidia-l40s__595.80")
    idle = l40s.gpus[0].states[schema.IDLE]
    assert answer(idle, "nvmlDeviceGetNvLinkState", 0).ret == schema.NOT_SUPPORTED
    assert answer(idle, "nvmlDeviceGetRemappedRows").value == [0, 0, 0, 0]
    assert idle.field(82).ret == schema.NOT_SUPPORTED  # GDDR6: no memory temperature
    assert l40s.node.absent == ()  # 595: no symbol list recorded, none assumed missing
    assert any("not recorded" in note for note in l40s.header.notes)


def test_prices_and_refresh_periods_are_the_h200s_named_in_the_header() -> None:
    capture = convert("nvidia-h200__610.43.02")
    gpu = capture.gpus[0]
    energy = gpu.price("nvmlDeviceGetFieldValues", 83)
    assert energy is not None and energy.cpu_seconds == pytest.approx(2.9e-3)
    assert capture.source_of(energy).kind == "notes"
    assert gpu.refresh_of("energy").seconds == 0.1
    assert "real-h200.md" in capture.source_of(energy).detail


@pytest.mark.slow
def test_the_command_writes_a_capture_that_reads_back_the_same(tmp_path: Path) -> None:
    out = tmp_path / "l40s.json"
    source = SOURCES / "linux-x86_64__nvidia-l40s__595.80.txt"
    result = subprocess.run(
        [sys.executable, "-m", "tests.doubles.from_nvidia_smi", str(source), "-o", str(out)],
        cwd=ROOT, capture_output=True, text=True, timeout=60, check=False,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    assert f"wrote {out}" in result.stdout
    assert schema.Capture.read(out).dumps() == out.read_text() == convert("nvidia-l40s__595.80").dumps()


def test_a_windows_capture_is_refused_with_why(tmp_path: Path) -> None:
    windows = tmp_path / "windows-x86_64__nvidia-geforce-rtx-2080-super__610.57.04.txt"
    shutil.copy(SOURCES / "linux-x86_64__nvidia-geforce-rtx-2080-super__610.57.04.txt", windows)
    with pytest.raises(from_nvidia_smi.ConvertError, match="only Linux"):
        from_nvidia_smi.convert(nvidia_smi.parse(windows))


def test_the_corpus_is_what_its_sources_translate_to() -> None:
    """Each committed capture is the converter's output of its source (a change to either shows here:
    regenerate with ``python -m tests.doubles.from_nvidia_smi --corpus`` and review)."""
    built = from_nvidia_smi.corpus()
    assert len(built) == 12
    for path, capture in built.items():
        assert path.exists(), f"{path.name} is not in the corpus"
        assert path.read_text() == capture.dumps(), f"{path.name} is not what its source translates to"
