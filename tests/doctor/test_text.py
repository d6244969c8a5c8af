"""``warptd doctor`` as a person reads it (issue 39, finding 17): the two answers first in plain words,
every line within the terminal's width (80 at most, 80 on a pipe), no read-plan jargon, the right doc
named. Over the C NVML double under the real nvidia-ml-py: an H200 beside an H100 with 18 NVLinks."""

from __future__ import annotations

import fcntl
import os
import pty
import struct
import subprocess
import sys
import termios
from pathlib import Path

import pytest

from tests.doubles.nvml import FakeGpu, FakeNvml
from warptd.cli import main
from warptd.doctor.report import DoctorReport
from warptd.doctor.text import render, text_width

ROOT = Path(__file__).parents[2]
#: What the table spoke before: the read plan's own words, and a doc that does not hold the reasons.
JARGON = ("CHARGED", "fields power:", "every sample but these two", "/s @1 s", "configuration.md", "SERIES:")


@pytest.fixture(scope="module")
def report(tmp_path_factory) -> DoctorReport:
    """One doctor run over two GPUs, one of them disagreeing (its energy call 500 J off field 83)."""
    gpus = [FakeGpu.h200(0, util_gpu=0), FakeGpu(1)]
    gpus[1].energy_call_offset_mj = 500_000
    fake = FakeNvml(gpus, driver_version="580.159.04")
    empty = str(tmp_path_factory.mktemp("node"))
    argv = ["doctor", "--quick", "--json", "--backend", "nvidia", "--sysfs", empty, "--procfs", empty]
    import contextlib
    import io

    out = io.StringIO()
    try:
        with fake.installed(), contextlib.redirect_stdout(out):
            assert main(argv) == 1
    finally:
        fake.close()
    return DoctorReport.model_validate_json(out.getvalue())


@pytest.mark.slow
def test_it_leads_with_the_two_answers_in_plain_words(report):
    lines = render(report).splitlines()
    assert lines[0].startswith("warptd doctor, node ")
    right = next(i for i, line in enumerate(lines) if line.startswith("Is warptd right here? "))
    cost = next(i for i, line in enumerate(lines) if line.startswith("What does it cost here? "))
    assert right == 2 and cost > right and "" not in lines[right : cost - 1]  # one paragraph each, in turn
    answer = " ".join(lines[right:cost]).split()
    assert " ".join(answer).startswith(
        "Is warptd right here? No. What it reads two ways disagrees: the energy counter on device 1."
    )
    costs = " ".join(" ".join(lines[cost : cost + 8]).split())
    assert "Its reads take " in costs and "of one CPU core at --interval 1 (the default)" in costs
    assert "Prometheus gets 51 series for each NVIDIA H200, 57 for each NVIDIA H100 80GB HBM3" in costs
    assert "docs/hardware.md#warptd-doctor" in " ".join(lines[cost : cost + 12])


def test_no_read_plan_jargon_and_the_selection_points_to_metrics_md(report):
    text = render(report)
    for jargon in JARGON:
        assert jargon not in text, jargon
    assert "docs/metrics.md#families-you-choose" in " ".join(text.split())


@pytest.mark.parametrize("width", [80, 60, 40])
def test_every_line_fits_the_width(report, width):
    lines = render(report, width).splitlines()
    assert max(len(line) for line in lines) <= width, [line for line in lines if len(line) > width]


def _pty(columns: int) -> tuple[int, int]:
    """A pseudo-terminal of ``columns`` columns: (its controlling side, the side a program writes to)."""
    controller, terminal = pty.openpty()
    fcntl.ioctl(terminal, termios.TIOCSWINSZ, struct.pack("HHHH", 24, columns, 0, 0))
    return controller, terminal


@pytest.mark.parametrize(("columns", "width"), [(60, 60), (120, 80), (30, 40)])
def test_the_width_is_the_terminals_at_most_80_and_80_on_a_pipe(monkeypatch, columns, width):
    monkeypatch.delenv("COLUMNS", raising=False)
    controller, terminal = _pty(columns)
    with os.fdopen(terminal, "w") as stream:
        assert text_width(stream) == width
    os.close(controller)
    read, write = os.pipe()
    with os.fdopen(write, "w") as piped:
        monkeypatch.setenv("COLUMNS", "200")  # a pipe is read as it is, whatever the shell says
        assert text_width(piped) == 80
    os.close(read)


@pytest.mark.slow
@pytest.mark.parametrize("columns", [None, 64])
def test_warptd_doctor_as_a_person_runs_it_fits_their_terminal_or_80_columns_on_a_pipe(tmp_path, columns):
    """The real command in its own process: on a pipe, and on a 64-column terminal."""
    fake = FakeNvml([FakeGpu.h200(0), FakeGpu(1)], driver_version="580.159.04")
    env = {k: v for k, v in os.environ.items() if k != "COLUMNS"}
    command = [
        sys.executable,
        "-m",
        "warptd",
        "doctor",
        "--quick",
        "--backend",
        "nvidia",
        "--sysfs",
        str(tmp_path),
    ]
    try:
        if columns is None:
            done = subprocess.run(
                command,
                env={**env, **fake.environment()},
                cwd=ROOT,
                capture_output=True,
                timeout=120,
                check=False,
            )
            out, limit = done.stdout.decode(), 80
        else:
            controller, terminal = _pty(columns)
            process = subprocess.Popen(
                command,
                env={**env, **fake.environment()},
                cwd=ROOT,
                stdout=terminal,
                stderr=subprocess.DEVNULL,
            )
            os.close(terminal)
            chunks = []
            while True:
                try:
                    chunk = os.read(controller, 65536)
                except OSError:  # the terminal closed: the doctor is done
                    break
                if not chunk:
                    break
                chunks.append(chunk)
            process.wait(timeout=120)
            os.close(controller)
            out, limit = b"".join(chunks).decode().replace("\r\n", "\n"), columns
    finally:
        fake.close()
    lines = out.splitlines()
    assert lines[0].startswith("warptd doctor, node ") and lines[2].startswith("Is warptd right here? Yes")
    assert max(len(line) for line in lines) <= limit, [line for line in lines if len(line) > limit]
