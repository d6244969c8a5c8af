"""Cost of the AMD process monitor's poll (--workloads on AMD GPUs), warptd's side, in process.

python bench/workloads_amd_bench.py [--rounds 200]

The amdsmi double under the real amdsmi package, 64 compute processes each in its own workload (the
fixture node of bench/workloads_bench.py): on 8 MI300X (8 a GPU), and on one MI300X in CPX mode (8
partitions, 8 a partition, plus one process on every partition). Measured as CPU time of this
process: the monitor's poll (one amdsmi_get_gpu_process_list a handle, the package's conversion,
the start time of each pid from /proc, the merge of a GPU's partitions, the GFX time ratios), and
the tracker's poll over it with the placements cached. The library's own walk of /proc/PID/fdinfo
is not in it: the double answers from memory (no AMD GPU here to measure it on).
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.common import emit
from bench.workloads_bench import GPUS, PER_GPU, _pid, fixture_node
from tests.doubles.amdsmi import FakeAmdsmi, FakeGpu, FakeProcess
from warptd.processes.amd import AmdProcessMonitor
from warptd.workloads.energy import WorkloadEnergy


def _layouts() -> dict[str, FakeAmdsmi]:
    whole = FakeAmdsmi([FakeGpu(index=i) for i in range(GPUS)])
    partitioned = FakeAmdsmi.partitioned(1, GPUS)
    for fake in (whole, partitioned):
        for gpu in fake.gpus:
            gpu.processes = [
                FakeProcess(_pid(gpu.index, n), gfx_busy=0.05 * (n + 1), cu_occupancy=n)
                for n in range(PER_GPU)
            ]
    everywhere = partitioned.gpus[0].processes[0]  # a process on every partition, listed by each
    for gpu in partitioned.gpus[1:]:
        gpu.processes.append(everywhere)
    return {f"{GPUS} MI300X": whole, f"1 MI300X in {GPUS} partitions": partitioned}


def measure(rounds: int) -> list[dict[str, object]]:
    rows: list[dict[str, object]] = []
    with tempfile.TemporaryDirectory(prefix="warptd-workloads-amd-") as tmp:
        procfs, cgroupfs = fixture_node(Path(tmp))
        for layout, fake in _layouts().items():
            with fake.installed():
                monitor = AmdProcessMonitor(procfs, interval=3600)  # polled here, so its lists stay fresh
                tracker = WorkloadEnergy([monitor], procfs, cgroupfs, interval=lambda: 3600)
                monitor.poll()
                tracker.poll()  # warm: GFX baselines, placements cached
                cpu = 0.0
                for _ in range(rounds):
                    fake.advance(1.0)
                    started = time.process_time()
                    monitor.poll()
                    cpu += time.process_time() - started
                rows.append({"what": f"AMD process monitor poll, {layout}", "ms": 1e3 * cpu / rounds})
                started = time.process_time()
                for _ in range(rounds):
                    tracker.poll()
                cpu = time.process_time() - started
                rows.append({"what": f"tracker poll over it, {layout}", "ms": 1e3 * cpu / rounds})
                assert len(tracker.views()) == GPUS * PER_GPU, len(tracker.views())
                monitor.stop()
    for row in rows:
        row["share of a core % at 1 s"] = float(row["ms"]) / 10  # type: ignore[arg-type]
    return rows


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--rounds", type=int, default=200)
    args = parser.parse_args()
    emit(measure(args.rounds), f"AMD process monitor, {GPUS * PER_GPU} processes")
    return 0


if __name__ == "__main__":
    sys.exit(main())
