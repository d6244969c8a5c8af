"""``warptd stress`` runs the same machinery locally and prints a table or JSON."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("torch")
ROOT = Path(__file__).parents[2]


def _run(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [
            sys.executable,
            "-m",
            "warptd",
            "--backend",
            "cpu",
            "--interval",
            "0.2",
            "--log-level",
            "error",
            "stress",
            *args,
        ],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=ROOT,
        check=False,
    )


@pytest.mark.slow
def test_stress_cli_json():
    result = _run("--test", "matmul", "--device", "cpu:0", "--duration", "1", "--size", "256", "--json")
    assert result.returncode == 0, result.stderr
    view = json.loads(result.stdout)
    assert view["status"] == "succeeded" and view["workload"]["unit"] == "FLOP/s"
    assert view["telemetry"]["samples"] >= 2


@pytest.mark.slow
def test_stress_cli_table_and_progress():
    result = _run("--test", "memory", "--device", "cpu:0", "--duration", "2", "--size", "16")
    assert result.returncode == 0, result.stderr
    assert "throughput" in result.stdout and "B/s" in result.stdout and "succeeded" in result.stdout
    assert "/2 s" in result.stderr  # progress lines (no TTY: one every 2 s)


@pytest.mark.slow
def test_stress_cli_bad_input_exit_2():
    result = _run("--test", "matmul", "--device", "cpu:0", "--dtype", "tf32", "--duration", "1")
    assert result.returncode == 2 and "tf32" in result.stderr
