"""Runs the real warptd daemon with N simulated GPUs from the NVML double (for benchmarks and load tests).

python bench/double_daemon.py N [warptd args...]

The double is the stand-in libnvidia-ml.so.1 (tests/doubles/nvml_double.c): this script writes its
state file, then becomes the daemon (exec), so the process measured is warptd alone, loading the
library through LD_LIBRARY_PATH as it would load the driver's.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from tests.doubles.nvml import FakeGpu, FakeNvml

ROOT = Path(__file__).resolve().parents[1]


def run(count: int, args: list[str]) -> None:
    fake = FakeNvml([FakeGpu(index=i, live=True) for i in range(count)], keep=True)
    environment = {**os.environ, **fake.environment()}
    environment["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT), environment.get("PYTHONPATH")]))
    os.execve(sys.executable, [sys.executable, "-m", "warptd", *args], environment)


if __name__ == "__main__":
    run(int(sys.argv[1]), sys.argv[2:])
