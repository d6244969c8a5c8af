"""CPU of one sample of the host backends (``cpu``, ``rapl``) on this machine's real /proc and /sys, by
kind of read (the backends' own ``read_costs``), for this tree and another checkout side by side.

    python bench/host_reads_bench.py [--samples 2000] [--old DIR] [--sysfs /sys] [--cpus N]

Each tree runs in a child process (so each imports its own warptd) that reads the ``cpu`` backend's
device, and the ``rapl`` domains where this machine has powercap zones, ``--samples`` times at the
defaults (``--interval 1``, ``--health-interval 10``: one sample in ten is a health sample), and prints
the median thread CPU of a sample and, where the tree has them, its reads' CPU by kind. A checkout
from before ``read_costs`` prints the sample's CPU only. ``--cpus N`` reads a copy of /proc whose
``cpuinfo`` lists N CPUs (this machine's first block, renumbered), for warptd and psutil alike
(``psutil.PROCFS_PATH``): a file the kernel does not generate, so its own cost is left out.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from common import ROOT, emit

_CHILD = """
import json, statistics, sys, time
from pathlib import Path
from warptd.config import load_settings
from warptd.backends.cpu.backend import CpuBackend

samples, sysfs, procfs = int(sys.argv[1]), Path(sys.argv[2]), Path(sys.argv[3])
import psutil
psutil.PROCFS_PATH = str(procfs)
settings = load_settings(sysfs=sysfs, procfs=procfs, interval=1.0, health_interval=10.0)
backends = [CpuBackend(settings)]
try:
    from warptd.power.rapl import RaplPowerBackend
    backends.append(RaplPowerBackend(settings))
except Exception:
    pass
clock = [0.0]
import warptd.backends.cadence as cadence  # one sample a second, as the daemon at its defaults
cadence.time = type("T", (), {"monotonic": staticmethod(lambda: clock[0])})

def one():
    for backend in backends:
        backend.read_device(0) if hasattr(backend, "read_device") else backend.read_domains()

one()
times = []
for _ in range(samples):
    clock[0] += 1.0
    started = time.thread_time()
    one()
    times.append(time.thread_time() - started)
kinds = {}
for backend in backends:
    costs = getattr(backend, "read_costs", None)
    for kind, cost in (costs.totals() if costs else {}).items():
        kinds[f"{backend.name}:{kind}"] = round(cost.cpu_seconds / cost.reads * 1e6, 1)
print(json.dumps({"sample_us": round(statistics.median(times) * 1e6, 1),
                  "mean_us": round(statistics.fmean(times) * 1e6, 1), "kinds_us_per_read": kinds,
                  "backends": [b.name for b in backends]}))
"""


def measure(root: Path, samples: int, sysfs: Path, procfs: Path) -> dict[str, object]:
    result = subprocess.run(
        [sys.executable, "-c", _CHILD, str(samples), str(sysfs), str(procfs)],
        capture_output=True,
        text=True,
        check=True,
        cwd=root,
    )
    return json.loads(result.stdout.strip().splitlines()[-1])


def fake_procfs(cpus: int, root: Path) -> Path:
    """A copy of /proc's stat and meminfo, and a ``cpuinfo`` of ``cpus`` CPUs."""
    root.mkdir(parents=True, exist_ok=True)
    for name in ("stat", "meminfo"):
        (root / name).write_bytes(Path("/proc", name).read_bytes())
    first = Path("/proc/cpuinfo").read_text().split("\n\n")[0]
    blocks = [first.replace("processor\t: 0", f"processor\t: {n}", 1) for n in range(cpus)]
    (root / "cpuinfo").write_text("\n\n".join(blocks) + "\n\n")
    return root


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--samples", type=int, default=2000)
    parser.add_argument("--old", type=Path, help="another checkout to measure side by side")
    parser.add_argument("--sysfs", type=Path, default=Path("/sys"))
    parser.add_argument("--cpus", type=int, help="read a copy of /proc listing this many CPUs")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        procfs = fake_procfs(args.cpus, Path(tmp)) if args.cpus else Path("/proc")
        run(args, procfs)


def run(args: argparse.Namespace, procfs: Path) -> None:
    trees = {"this tree": ROOT, **({str(args.old): args.old.resolve()} if args.old else {})}
    rows = []
    for name, root in trees.items():
        row = measure(root, args.samples, args.sysfs, procfs)
        rows.append(
            {
                "tree": name,
                "backends": "+".join(row["backends"]),
                "cpu_us_per_sample_median": row["sample_us"],
                "cpu_us_per_sample_mean": row["mean_us"],
                "by_kind_us_per_read": " ".join(f"{k}={v}" for k, v in row["kinds_us_per_read"].items()),
            }
        )
    cpus = f"{args.cpus} CPUs in a copy of /proc" if args.cpus else "/proc"
    emit(rows, f"host backends: CPU of one sample on this machine, {cpus} (thread CPU)")


if __name__ == "__main__":
    main()
