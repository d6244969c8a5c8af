"""Runs the real warptd daemon with N simulated GPUs from the NVML double (for benchmarks).

python bench/double_daemon.py N [warptd args...]
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from tests.doubles.nvml import FakeGpu, FakeNvml
from warptd.cli import main


def run(count: int, args: list[str]) -> int:
    fake = FakeNvml([FakeGpu(index=i, live=True) for i in range(count)], record_calls=False)
    with fake.installed():
        return main(args)


if __name__ == "__main__":
    sys.exit(run(int(sys.argv[1]), sys.argv[2:]))
