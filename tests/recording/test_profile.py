"""``warptd profile`` as a user runs it, over the NVML double: where it records, said before CMD runs
(issue 39, finding 16), and ``--output NAME.json`` writing the recording, not HTML (finding 13)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.doubles.nvml import FakeGpu, FakeNvml
from tests.helpers import serving
from warptd.recording.profile import targets_text
from warptd.recording.schema import TargetRecording

ROOT = Path(__file__).parents[2]
#: The real CLI as a host without the report extra runs it.
WITHOUT_PLOTLY = (
    "import runpy, sys; sys.modules['plotly'] = None; sys.argv[0] = 'warptd'; "
    "runpy.run_module('warptd', run_name='__main__', alter_sys=True)"
)
#: CMD: says on stderr that it ran, so the order of profile's lines and CMD's shows.
SAYS_IT_RAN = [sys.executable, "-c", "import sys; print('CMD RAN', file=sys.stderr)"]
H100 = "NVIDIA H100 80GB HBM3"


@pytest.fixture
def gpus():
    fake = FakeNvml([FakeGpu(index=i, live=True) for i in range(3)])
    with fake.installed():
        yield fake
    fake.close()


def _profile(gpus: FakeNvml, *args: str, python: tuple[str, ...] = ("-m", "warptd")):
    command = [sys.executable, *python, "--backend", "nvidia", "--log-level", "error", "profile", *args]
    environment = {
        **os.environ,
        **gpus.environment(),
        "PYTHONPATH": str(ROOT),
        "WARPTD_LISTEN": "127.0.0.1:9",  # the default daemon's address: the discard port, no daemon
    }
    environment.pop("WARPTD_URL", None)
    return subprocess.run(
        command, env=environment, capture_output=True, text=True, timeout=60, cwd=ROOT, check=False
    )


@pytest.mark.slow
def test_without_a_daemon_it_says_it_samples_here_and_what_before_cmd_runs(gpus):
    result = _profile(gpus, "--", *SAYS_IT_RAN)
    assert result.returncode == 0, result.stderr
    lines = result.stderr.splitlines()
    said = (
        "warptd profile: sampling here (no daemon answers at http://127.0.0.1:9), every 0.1 s: "
        f"nvidia:0-2 ({H100})"
    )
    assert lines[:2] == [said, "CMD RAN"]
    local = _profile(gpus, "--local", "--device", "nvidia:1", "--", "true")
    assert (
        local.stderr.splitlines()[0]
        == f"warptd profile: sampling here (--local), every 0.1 s: nvidia:1 ({H100})"
    )


@pytest.mark.slow
def test_through_a_daemon_it_names_the_daemon_its_window_and_what_it_measures(gpus, settings):
    settings.backends = ["nvidia"]
    with serving(settings) as daemon:
        url = f"http://127.0.0.1:{daemon.port}"
        result = _profile(gpus, "--url", url, "--json", "--", *SAYS_IT_RAN)
    assert result.returncode == 0, result.stderr
    window = json.loads(result.stdout)["id"]
    lines = result.stderr.splitlines()
    assert lines[:2] == [
        f"warptd profile: recording through the daemon at {url} (its window {window}; --local samples "
        f"here), every 0.1 s: nvidia:0-2 ({H100})",
        "CMD RAN",
    ]


@pytest.mark.slow
def test_output_named_json_writes_the_recording_and_needs_no_report_extra(gpus, tmp_path):
    output = tmp_path / "r.json"
    result = _profile(gpus, "--local", "--output", str(output), "--", "true", python=("-c", WITHOUT_PLOTLY))
    assert result.returncode == 0, result.stderr
    recording = json.loads(output.read_text())  # JSON, not 4.9 MB of HTML
    assert recording["kind"] == "profile" and len(recording["targets"]) == 3
    assert sorted(p.name for p in tmp_path.iterdir()) == ["r.json"]
    assert f"warptd profile: saved the recording in {output}" in result.stderr


def _target(index: int, model: str | None = H100, backend: str = "nvidia") -> TargetRecording:
    return TargetRecording(id=f"{backend}:{index}", kind="device", backend=backend, model=model)


def test_targets_read_as_a_person_reads_them():
    gpus = [_target(i) for i in range(8)]
    packages = [TargetRecording(id=f"rapl:package-{i}", kind="domain", backend="rapl") for i in range(2)]
    assert targets_text([*gpus, *packages]) == f"nvidia:0-7 ({H100}), rapl:package-0, rapl:package-1"
    assert targets_text([_target(0), _target(2), _target(3)]) == f"nvidia:0, nvidia:2, nvidia:3 ({H100})"
    assert (
        targets_text([_target(0), _target(1, "NVIDIA H200")]) == f"nvidia:0 ({H100}), nvidia:1 (NVIDIA H200)"
    )
    assert targets_text([]) == "nothing"
