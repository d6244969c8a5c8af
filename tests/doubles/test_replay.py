"""``python -m tests.doubles.replay``: the NVML double by hand, as docs/development.md shows it (issue 39,
finding 18): the GPUs asked for, seen by the real pynvml in the command it runs, its exit code kept."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from tests.doubles.replay import ReplayError, main, parse

ROOT = Path(__file__).parents[2]
#: What CMD sees: the GPUs through the real pynvml, and where the state file is.
PROBE = (
    "import json, os, pynvml\n"
    "pynvml.nvmlInit()\n"
    "names = [pynvml.nvmlDeviceGetName(pynvml.nvmlDeviceGetHandleByIndex(i))"
    " for i in range(pynvml.nvmlDeviceGetCount())]\n"
    "print(json.dumps({'names': names, 'driver': pynvml.nvmlSystemGetDriverVersion(),"
    " 'state': os.environ['WARPTD_NVML_DOUBLE_STATE']}))\n"
    "raise SystemExit(7)\n"
)


def _replay(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "tests.doubles.replay", *args],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


@pytest.mark.slow
def test_the_command_sees_the_gpus_asked_for_and_its_exit_code_is_kept():
    result = _replay("--gpus", "3", "--model", "h200", "h100", "--", sys.executable, "-c", PROBE)
    assert result.returncode == 7, result.stderr
    seen = json.loads(result.stdout)
    assert seen["names"] == ["NVIDIA H200", "NVIDIA H100 80GB HBM3", "NVIDIA H200"]
    assert seen["driver"] == "580.159.04"
    assert not Path(seen["state"]).exists()  # the simulated driver's state goes with the command


@pytest.mark.slow
def test_warptd_itself_lists_the_doubles_gpus(tmp_path):
    command = [sys.executable, "-m", "warptd", "list", "--json", "--sysfs", str(tmp_path)]
    result = _replay("--model", "h200", "--", *command)
    assert result.returncode == 0, result.stderr
    devices = [d for d in json.loads(result.stdout) if d["backend"] == "nvidia"]
    assert [d["model"] for d in devices] == ["NVIDIA H200"]


def test_options_stop_at_the_double_dash_and_the_command_keeps_its_own():
    replay = parse(["--gpus", "2", "--", "warptd", "doctor", "--gpus", "--model"])
    assert replay.command == ("warptd", "doctor", "--gpus", "--model")
    assert replay.models == ("h100", "h100")
    assert parse(["--model", "h200", "--", "true"]).models == ("h200",)  # one GPU per model given
    assert parse(["--", "true"]).models == ("h100", "h100")


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["warptd", "list"], "give the command after --"),
        (["--gpus", "2", "--"], "no command after --"),
        (["--gpus", "0", "--", "true"], "--gpus must be 1 to 64"),
    ],
)
def test_what_it_cannot_run_is_one_line(argv, message):
    with pytest.raises(ReplayError, match=message):
        parse(argv)


def test_an_unknown_model_is_refused_by_name(capsys):
    with pytest.raises(SystemExit) as exited:
        parse(["--model", "a100", "--", "true"])
    assert exited.value.code == 2
    assert "invalid choice: 'a100'" in capsys.readouterr().err


def test_a_capture_says_its_gpus_and_driver(tmp_path):
    capture = tmp_path / "capture.json"
    capture.write_text("{}")
    replay = parse([str(capture), "--state", "loaded", "--report", str(tmp_path / "r.json"), "--", "true"])
    assert (replay.capture, replay.state, replay.models) == (capture, "loaded", ())
    with pytest.raises(ReplayError, match="a capture says its GPUs and driver"):
        parse([str(capture), "--gpus", "2", "--", "true"])
    with pytest.raises(ReplayError, match="no capture file"):
        parse([str(tmp_path / "missing.json"), "--", "true"])
    with pytest.raises(ReplayError, match="--state and --report go with a capture"):
        parse(["--state", "loaded", "--", "true"])


def test_a_file_that_is_no_capture_is_one_line(tmp_path, capsys):
    capture = tmp_path / "capture.json"
    capture.write_text('{"header": {}}')
    assert main([str(capture), "--", "true"]) == 2
    said = capsys.readouterr().err
    assert said.startswith(f"replay: {capture} is not a capture: ") and said.count("\n") == 1
