"""Cost of finding who holds the devices without an SDK process list (--workloads on TPU, Tenstorrent,
Gaudi and sysfs DRM GPUs): the /proc/PID/fd scan, in process, on a fixture tree.

python bench/device_files_bench.py [--processes 2000] [--fds 50] [--rounds 10]

A fixture /proc of ``--processes`` processes with ``--fds`` open files each (links to /dev/null,
sockets, pipes and log files, as /proc shows them), 16 of them holding the render nodes of 8 DRM
GPUs (with fdinfo engine time and memory), and the 8 GPUs as sysfs class devices. Measured, as CPU
time of this process per poll:

- the bounded scan (the default budget, 256 pids a poll besides the holders) in its steady state,
  and the polls that first look at every pid;
- for comparison, every pid's fds read every poll (an unbounded budget), as tpu-info's scan does.
"""

from __future__ import annotations

import argparse
import math
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.common import emit
from warptd.models import GPUInfo
from warptd.processes.device_files import DeviceFiles
from warptd.registry import node_rules

GPUS, HOLDERS_PER_GPU, FIRST_PID = 8, 2, 10_000


def fixture(root: Path, processes: int, fds: int) -> tuple[Path, Path, list[GPUInfo]]:
    procfs, sysfs = root / "proc", root / "sys"
    infos = []
    for gpu in range(GPUS):
        address = f"0000:{0x10 + gpu:02x}:00.0"
        device = sysfs / "devices" / "pci0000:00" / address
        device.mkdir(parents=True)
        entry = sysfs / "class" / "drm" / f"renderD{128 + gpu}"
        entry.mkdir(parents=True)
        (entry / "device").symlink_to(device)
        (entry / "uevent").write_text(f"MAJOR=226\nMINOR={128 + gpu}\nDEVNAME=dri/renderD{128 + gpu}\n")
        infos.append(GPUInfo(index=gpu, model="AMD GPU", uuid=f"{gpu:016x}", pci_bus_id=address))
    for n in range(processes):
        pid = FIRST_PID + n
        directory = procfs / str(pid)
        (directory / "fd").mkdir(parents=True)
        fields = ["S", *["0"] * 18, "4242", *["0"] * 30]
        (directory / "stat").write_text(f"{pid} (python3) {' '.join(fields)}\n")
        targets = ("/dev/null", f"socket:[{pid}]", f"pipe:[{pid}]", f"/var/log/app-{n % 7}.log")
        for fd in range(fds):
            (directory / "fd" / str(fd)).symlink_to(targets[fd % len(targets)])
        if n < GPUS * HOLDERS_PER_GPU:
            gpu = n // HOLDERS_PER_GPU
            (directory / "fd" / str(fds)).symlink_to(f"/dev/dri/renderD{128 + gpu}")
            (directory / "fdinfo").mkdir()
            (directory / "fdinfo" / str(fds)).write_text(
                f"pos:\t0\nflags:\t02100002\ndrm-driver:\tamdgpu\ndrm-client-id:\t{pid}\n"
                f"drm-pdev:\t0000:{0x10 + gpu:02x}:00.0\ndrm-engine-gfx:\t{pid * 1000} ns\n"
                "drm-resident-vram:\t1024 KiB\n"
            )
    return procfs, sysfs, infos


def per_poll(files: DeviceFiles, rounds: int) -> tuple[float, float]:
    """CPU and wall ms per poll over ``rounds`` polls."""
    cpu, wall = time.process_time(), time.perf_counter()
    for _ in range(rounds):
        files.poll()
    return 1e3 * (time.process_time() - cpu) / rounds, 1e3 * (time.perf_counter() - wall) / rounds


def measure(processes: int, fds: int, rounds: int) -> list[dict[str, object]]:
    rows: list[dict[str, object]] = []
    with tempfile.TemporaryDirectory(prefix="warptd-device-files-") as tmp:
        procfs, sysfs, infos = fixture(Path(tmp), processes, fds)
        hwmon = {"hwmon": node_rules()["hwmon"]}
        bounded = DeviceFiles(procfs, sysfs, lambda _: infos, hwmon)
        first = math.ceil(processes / bounded.budget)
        cpu, wall = per_poll(bounded, first)
        what = f"bounded, first {first} polls (every pid once)"
        rows.append({"what": what, "cpu ms": cpu, "wall ms": wall})
        cpu, wall = per_poll(bounded, rounds)
        what = f"bounded ({bounded.budget} a poll), steady state"
        rows.append({"what": what, "cpu ms": cpu, "wall ms": wall})
        held = bounded.devices("hwmon")
        assert all(len(d.memory_by_pid) == HOLDERS_PER_GPU for d in held.values()), held
        full = DeviceFiles(procfs, sysfs, lambda _: infos, hwmon, budget=10**9)
        full.poll()
        cpu, wall = per_poll(full, rounds)
        rows.append({"what": "every pid every poll (unbounded)", "cpu ms": cpu, "wall ms": wall})
    for row in rows:
        row["share of a core % at 1 s"] = float(row["cpu ms"]) / 10  # type: ignore[arg-type]
    return rows


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--processes", type=int, default=2000)
    parser.add_argument("--fds", type=int, default=50)
    parser.add_argument("--rounds", type=int, default=10)
    args = parser.parse_args()
    rows = measure(args.processes, args.fds, args.rounds)
    emit(rows, f"device-file scan, {args.processes} processes x {args.fds} fds, {GPUS} DRM GPUs")
    return 0


if __name__ == "__main__":
    sys.exit(main())
