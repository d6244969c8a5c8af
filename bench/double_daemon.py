"""Runs the real warptd daemon with N simulated GPUs from the NVML double (for benchmarks and load tests).

python bench/double_daemon.py N [warptd args...]

The double is the stand-in libnvidia-ml.so.1 (tests/doubles/nvml_double.c): this script writes its
state file, then becomes the daemon (exec), so the process measured is warptd alone, loading the
library through LD_LIBRARY_PATH as it would load the driver's.

With ``NVML_DOUBLE_DRIVER=FILE`` the simulated driver outlives the daemon, as a real one does: the
first daemon started with it writes FILE, each later one loads that same driver, whose energy
counters ran on while no daemon was there (only a driver reload, ``FakeGpu.reload_driver``,
restarts them). Without it each daemon gets a new driver, its counters at their start values.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from tests.doubles.nvml import FakeGpu, FakeNvml, environment

ROOT = Path(__file__).resolve().parents[1]


def run(count: int, args: list[str]) -> None:
    driver = os.environ.get("NVML_DOUBLE_DRIVER")
    if not (driver and Path(driver).is_file()):  # a new driver, loaded now
        fake = FakeNvml([FakeGpu(index=i, live=True) for i in range(count)], keep=True)
        if driver:
            os.replace(fake.path, driver)
        driver = driver or fake.path
    variables = {**os.environ, **environment(driver)}
    variables["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT), variables.get("PYTHONPATH")]))
    os.execve(sys.executable, [sys.executable, "-m", "warptd", *args], variables)


if __name__ == "__main__":
    run(int(sys.argv[1]), sys.argv[2:])
