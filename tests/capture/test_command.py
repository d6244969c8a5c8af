"""``warptd capture``'s refusals (one line, exit 2, nothing written) and, over the NVML double, what it
writes: one file, where it says, under 1 MiB a GPU, readable by the schema, masked unless asked."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.doubles.nvml import FakeGpu, FakeNvml
from warptd.capture import command, schema
from warptd.cli import main

ROOT = Path(__file__).parents[2]


@pytest.mark.parametrize(
    ("argv", "said"),
    [
        (["--backend", "cpu"], "a capture reads NVML alone (nvidia, nvidia_mig, nvml), not cpu"),
        (["-o", "."], ". is a directory: name the file to write"),
    ],
)
def test_what_it_cannot_do_is_one_line_and_writes_nothing(argv, said, capsys, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    assert main(["capture", *argv]) == 2
    assert capsys.readouterr().err.strip() == f"warptd: {said}"
    assert list(tmp_path.iterdir()) == []


def test_a_load_without_torch_is_refused_before_anything_runs(capsys, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(command, "torch_installed", lambda: False)
    assert main(["capture", "--load"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("warptd: --load runs the stress child, which needs torch: ") and "[stress]" in err
    assert list(tmp_path.iterdir()) == []


def test_without_an_nvidia_gpu_it_says_why(capsys, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    fake = FakeNvml(1)
    fake.library_missing = True
    with fake.installed():
        assert main(["capture", "--sysfs", str(tmp_path)]) == 2
    fake.close()
    err = capsys.readouterr().err
    assert err.startswith("warptd: no NVIDIA GPU to capture here: ") and "libnvidia-ml.so.1 not found" in err
    assert list(tmp_path.iterdir()) == []


def test_the_default_file_is_named_after_the_model_and_driver():
    assert command.default_output("580.159.04", "NVIDIA H200") == Path("capture-h200-580.159.04.json")
    assert command.default_output("595.80", "NVIDIA L40S") == Path("capture-l40s-595.80.json")
    assert command.default_output(None, None) == Path("capture-gpu-unknown.json")


@pytest.mark.slow
def test_it_writes_one_file_where_it_says_masked(tmp_path):
    fake = FakeNvml([FakeGpu.h200(0, live=True), FakeGpu(1, live=True)], "580.159.04", keep=True)
    try:
        done = subprocess.run(
            [sys.executable, "-m", "warptd", "capture", "--sysfs", str(tmp_path)],
            cwd=tmp_path,
            env={**os.environ, **fake.environment(), "PYTHONPATH": str(ROOT)},
            capture_output=True,
            text=True,
            timeout=120,
            check=False,
        )
    finally:
        fake.close()
    assert done.returncode == 0, done.stderr[-3000:]
    written = tmp_path / "capture-h200-580.159.04.json"
    assert [p.name for p in tmp_path.iterdir()] == [written.name]
    assert done.stdout.startswith(f"wrote {written.name} (")
    assert "masked, keeping their shape: 2 GPU UUIDs (--no-mask keeps them)" in done.stdout
    assert written.stat().st_size < 2 * 2**20
    capture = schema.Capture.read(written)
    assert [gpu.identity.name for gpu in capture.gpus] == ["NVIDIA H200", "NVIDIA H100 80GB HBM3"]
    assert capture.header.masked == ("gpu_uuid",) and "GPU-00000000-1111" not in written.read_text()
    assert capture.states == (schema.IDLE,) and capture.gpus[0].states[schema.IDLE].seconds >= 10
    assert capture.node.driver_version == "580.159.04" and capture.node.absent == ()
    h200 = capture.gpus[0]
    energy = h200.states[schema.IDLE].field(83)
    assert energy.ok and energy.rate == pytest.approx(120_000, rel=0.02)  # mJ/s at the double's 120 W
    assert h200.price("nvmlDeviceGetTotalEnergyConsumption").cpu_seconds >= 2.9e-3
    assert h200.price("nvmlDeviceGetFieldValues", field=83).cpu_seconds >= 2.9e-3
    assert h200.refresh_of("energy").seconds == pytest.approx(0.1, abs=0.02)
    assert h200.states[schema.IDLE].call("nvmlDeviceGetNvLinkState", 0).ret == schema.NOT_SUPPORTED
