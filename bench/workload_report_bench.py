"""Memory and cost of the workloads' recordings (``GET /workloads/KIND/ID/recording``), in process.

python bench/workload_report_bench.py [--workloads 10] [--hours 1]

Each workload holds 8 GPUs and has a CPU share; every second (1 Hz, as ``--interval 1``) each GPU is
sampled with what the NVML double gives an H100 (power, energy counter, utilization, two
temperatures, four clocks, 14 GPM activity ratios) and a RAPL package with it. Measured:

- bytes per workload after ``--hours`` of samples: its series as the history charges them, and every
  byte Python allocated for it (tracemalloc: recorders, summaries, series);
- the history listener's CPU time per sample of 8 GPUs and a package, for these workloads and for
  1000 workloads of one GPU each (the cap, --workload-max);
- building one workload's recording (what the endpoint answers).
"""

from __future__ import annotations

import argparse
import sys
import time
import tracemalloc
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.common import emit
from warptd.models import DeviceReading, Utilization
from warptd.power.base import DomainPower, PowerSource
from warptd.recording.schema import Recording
from warptd.sampling.snapshot import DeviceSample
from warptd.workloads.history import WorkloadHistory
from warptd.workloads.placement import WorkloadKey
from warptd.workloads.tracked import Workload

GPUS = 8
PIPES = ("tensor", "fp64", "fp32", "fp16", "int")
ENGINES = ("nvlink_rx", "nvlink_tx", "pcie_rx", "pcie_tx", "nvdec", "nvjpg")


def _reading(index: int, second: int) -> DeviceSample:
    gauges = {
        "warptd_device_sm_active_ratio": {(): 0.7},
        "warptd_device_sm_occupancy_ratio": {(): 0.4},
        "warptd_device_dram_bandwidth_ratio": {(): 0.3},
        "warptd_device_pipe_active_ratio": {(p,): 0.1 for p in PIPES},
        "warptd_device_engine_active_ratio": {(e,): 0.05 for e in ENGINES},
    }
    reading = DeviceReading(
        index=index,
        uuid=f"GPU-{index:08x}",
        power_watts=400.0 + second % 7,
        energy_counter_joules=400.0 * second,
        utilization=Utilization(compute=0.9, memory=0.4),
        temperatures_celsius={"gpu": 60.0 + second % 5, "memory": 70.0},
        clocks_hertz={"sm": 1.98e9, "memory": 2.6e9, "graphics": 1.98e9, "video": 1.7e9},
        gauges=gauges,
    )
    return DeviceSample(reading, energy_joules=400.0 * second)


def _feed(
    history: WorkloadHistory,
    workloads: dict[WorkloadKey, Workload],
    seconds: int,
    per_gpu: int,
    first: int = 1,
) -> float:
    """``seconds`` samples of every GPU and the package from second ``first``; each workload takes a
    share of its GPUs' energy. Returns the listener's CPU seconds."""
    spent = 0.0
    for second in range(first, first + seconds):
        for workload in workloads.values():
            for device in workload.devices or {f"nvidia:{i}": None for i in range(GPUS)}:
                workload.add_device(device, "", 400.0 / per_gpu)
            workload.add_cpu(1.0)
        samples = [_reading(i, second) for i in range(GPUS)]
        package = [DomainPower("package-0", PowerSource.RAPL, 200.0, 200.0 * second)]
        started = time.process_time()
        history.after_sample("nvidia", samples, None, float(second), workloads)
        history.after_sample("rapl", None, package, float(second), workloads)
        spent += time.process_time() - started
    return spent


def _workloads(count: int, devices: list[list[int]]) -> dict[WorkloadKey, Workload]:
    made = {}
    for n in range(count):
        key = WorkloadKey("slurm_job", str(n))
        workload = made[key] = Workload(key, "alice", started_at=0.0, seen=0.0, cpu_joules=0.0)
        for index in devices[n]:
            workload.add_device(f"nvidia:{index}", "", 0.0)
    return made


def memory(count: int, hours: float) -> dict[str, object]:
    """Bytes per workload of ``count`` 8-GPU workloads after ``hours`` at 1 Hz (tracemalloc on)."""
    seconds = round(hours * 3600)
    tracemalloc.start()
    before = tracemalloc.get_traced_memory()[0]
    history = WorkloadHistory(clock=lambda: 0.0, memory_bytes=2**40)  # unbounded here: each one's own bytes
    workloads = _workloads(count, [list(range(GPUS))] * count)
    history.after_poll(workloads)
    _feed(history, workloads, seconds, per_gpu=count)
    allocated = tracemalloc.get_traced_memory()[0] - before
    tracemalloc.stop()
    some = next(iter(workloads.values()))
    started = time.perf_counter()
    body = history.recording(some.view()).model_dump_json()
    built = time.perf_counter() - started
    return {
        "workloads": f"{count} x 8 GPUs + package, {hours:g} h at 1 Hz",
        "series_kib_each": round(history.budget.used / count / 1024, 1),
        "python_kib_each": round(allocated / count / 1024, 1),
        "points_each": sum(len(t.points) for t in Recording.model_validate_json(body).targets),
        "recording_json_kib": round(len(body) / 1024, 1),
        "recording_ms": round(1e3 * built, 1),
    }


def listener_cost(count: int, gpus_each: int, seconds: int = 300) -> dict[str, object]:
    """The listener's CPU time per sample (8 GPUs and a package) with ``count`` workloads of
    ``gpus_each`` GPUs, past their first points (every row kept) and past their point limit."""
    history = WorkloadHistory(clock=lambda: 0.0)
    devices = [[(n + i) % GPUS for i in range(gpus_each)] for n in range(count)]
    workloads = _workloads(count, devices)
    history.after_poll(workloads)
    per_gpu = max(1, count * gpus_each // GPUS)
    spent = _feed(history, workloads, seconds, per_gpu)
    return {
        "workloads": f"{count} x {gpus_each} GPU(s) + package",
        "listener_ms_per_sample": round(1e3 * spent / seconds, 3),
        "series_mib": round(history.budget.used / 2**20, 2),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--workloads", type=int, default=10)
    parser.add_argument("--hours", type=float, default=1.0)
    args = parser.parse_args()
    emit([memory(args.workloads, args.hours)], "a workload's recording: memory and size")
    rows = [listener_cost(count, each) for count, each in ((1, 8), (args.workloads, 8), (1000, 1))]
    emit(rows, "the history listener, per sample")


if __name__ == "__main__":
    main()
