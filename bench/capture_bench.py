"""What ``warptd capture`` takes: its wall time and CPU, and the file's size per GPU, by GPU count and
model, over the priced NVML double (every call burns what the real H200 charged for it).

    python bench/capture_bench.py [--gpus 1 8] [--models h100 h200 mig]

Issue 40's targets: 90 s or less on 8 GPUs, under 1 MiB a GPU. ``mig``: H100s each cut into seven
MIG devices (the most calls and GPM instances a GPU makes).
"""

from __future__ import annotations

import argparse
import os
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from tests.doubles.nvml import GIB, FakeGpu, FakeMig, FakeNvml

ROOT = Path(__file__).resolve().parents[1]
TARGET_S, TARGET_BYTES = 90.0, 2**20


def _gpu(model: str, index: int) -> FakeGpu:
    if model == "h200":
        return FakeGpu.h200(index, live=True)
    gpu = FakeGpu(index, live=True)
    if model == "mig":
        gpu.mig_devices = [
            FakeMig(f"MIG-{index:08x}-0000-0000-0000-{slot:012x}", slot + 1, 0, "H100 MIG 1g.10gb", 10 * GIB)
            for slot in range(7)
        ]
    return gpu


def measure(model: str, count: int) -> tuple[float, float, int]:
    """Wall seconds, CPU seconds (the capture's process) and file bytes of one capture."""
    fake = FakeNvml([_gpu(model, i) for i in range(count)], "580.159.04", keep=True)
    with tempfile.TemporaryDirectory() as scratch:
        output = Path(scratch) / "capture.json"
        before = resource.getrusage(resource.RUSAGE_CHILDREN)
        started = time.monotonic()
        subprocess.run(
            [sys.executable, "-m", "warptd", "capture", "-o", str(output), "--sysfs", scratch],
            cwd=ROOT,
            env={**os.environ, **fake.environment()},
            check=True,
            capture_output=True,
        )
        wall = time.monotonic() - started
        after = resource.getrusage(resource.RUSAGE_CHILDREN)
        size = output.stat().st_size
    fake.close()
    cpu = (after.ru_utime + after.ru_stime) - (before.ru_utime + before.ru_stime)
    return wall, cpu, size


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--gpus", type=int, nargs="+", default=[1, 8])
    parser.add_argument(
        "--models", nargs="+", default=["h100", "h200", "mig"], choices=["h100", "h200", "mig"]
    )
    args = parser.parse_args()
    print("| model | GPUs | wall s | CPU s | KiB | KiB per GPU | within targets |")
    print("|---|---|---|---|---|---|---|")
    ok = True
    for model in args.models:
        for count in args.gpus:
            wall, cpu, size = measure(model, count)
            fits = wall <= TARGET_S * max(1, count / 8) and size / count < TARGET_BYTES
            ok &= fits
            print(
                f"| {model} | {count} | {wall:.1f} | {cpu:.1f} | {size / 1024:.0f} | "
                f"{size / count / 1024:.0f} | {'yes' if fits else 'NO'} |"
            )
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
