"""Cost of workload attribution (--workloads) per sample: 64 processes on 8 GPUs, in process.

python bench/workloads_bench.py [--rounds 200]

8 GPUs of the C NVML double, 8 compute processes each (64 in all), each process in its own
workload (Slurm v2 jobs, Docker containers, systemd services, users in turn), with a cpu.stat per
workload cgroup and 6 driver SM samples per process per poll. Measured, as CPU time of this process:

- the tracker's poll (every pid placed, who holds each device, each workload's CPU share) with the
  placements cached (steady state), and with every pid new (each poll a new process per pid: the
  worst case of PID churn, every /proc/PID/{stat,cgroup,status} read again);
- the sampler listener per sample: 8 GPUs' energy deltas split by SM share, and one RAPL package;
- for scale, the NVML process monitor's own poll, which --processes already pays.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.common import emit
from tests.doubles.nvml import FakeGpu, FakeNvml, ProcessSample
from warptd.models import DeviceReading
from warptd.power.base import DomainPower, PowerSource
from warptd.processes.nvml import ProcessMonitor
from warptd.sampling.snapshot import DeviceSample
from warptd.workloads.energy import WorkloadEnergy

GPUS, PER_GPU, WINDOWS = 8, 8, 6


def _pid(gpu: int, n: int) -> int:
    return 20_000 + gpu * PER_GPU + n


def _cgroup(pid: int) -> str:
    """Each process its own workload, the four kinds in turn."""
    kind = pid % 4
    if kind == 0:
        return f"0::/system.slice/slurmstepd.scope/job_{pid}/step_0/user/task_0\n"
    if kind == 1:
        return f"0::/system.slice/docker-{pid:064x}.scope\n"
    if kind == 2:
        return f"0::/system.slice/svc-{pid}.service\n"
    return f"0::/user.slice/user-{pid}.slice/session-1.scope\n"


def _cpu_path(pid: int) -> str:
    text = _cgroup(pid).removeprefix("0::").strip()
    if pid % 4 == 0:
        return text.split("/step_")[0]
    if pid % 4 == 3:
        return text.rsplit("/", 1)[0]
    return text


def write_process(procfs: Path, pid: int, started: int) -> None:
    directory = procfs / str(pid)
    directory.mkdir(parents=True, exist_ok=True)
    fields = ["S", *["0"] * 18, str(started), *["0"] * 30]
    (directory / "stat").write_text(f"{pid} (python3) {' '.join(fields)}\n")
    (directory / "cgroup").write_text(_cgroup(pid))
    (directory / "status").write_text(f"Name:\tpython3\nUid:\t{pid}\t{pid}\t{pid}\t{pid}\n")


def fixture_node(root: Path) -> tuple[Path, Path]:
    procfs, cgroupfs = root / "proc", root / "cgroup"
    procfs.mkdir(parents=True)
    (procfs / "stat").write_text("cpu  100 0 200 100000 0 0 0 0 0 0\n")
    for gpu in range(GPUS):
        for n in range(PER_GPU):
            pid = _pid(gpu, n)
            write_process(procfs, pid, 4242)
            stat = cgroupfs / _cpu_path(pid).lstrip("/") / "cpu.stat"
            stat.parent.mkdir(parents=True, exist_ok=True)
            stat.write_text(f"usage_usec {pid}\nuser_usec 0\nsystem_usec 0\n")
    return procfs, cgroupfs


def script_samples(fake: FakeNvml, t_us: int) -> int:
    for gpu in fake.gpus:
        samples = []
        for _ in range(WINDOWS):
            t_us += 166_667
            samples += [ProcessSample(t_us, _pid(gpu.index, n), 5 + 10 * n, 5) for n in range(PER_GPU)]
        gpu.process_samples = samples
    return t_us


def measure(rounds: int) -> list[dict[str, object]]:
    rows: list[dict[str, object]] = []
    with tempfile.TemporaryDirectory(prefix="warptd-workloads-") as tmp:
        procfs, cgroupfs = fixture_node(Path(tmp))
        fake = FakeNvml([FakeGpu(index=i) for i in range(GPUS)])
        for gpu in fake.gpus:
            gpu.processes = [(_pid(gpu.index, n), 2**30) for n in range(PER_GPU)]
        with fake.installed():
            monitor = ProcessMonitor(procfs, interval=3600)  # polled here, so its lists stay fresh
            tracker = WorkloadEnergy([monitor], procfs, cgroupfs, interval=lambda: 3600)
            t_us = script_samples(fake, 0)
            monitor.poll()
            tracker.poll()  # warm: placements cached, CPU baselines
            cpu = 0.0
            for _ in range(rounds):
                t_us = script_samples(fake, t_us)
                started = time.process_time()
                monitor.poll()
                cpu += time.process_time() - started
            rows.append({"what": "NVML process monitor poll (for scale)", "ms": 1e3 * cpu / rounds})
            started = time.process_time()
            for _ in range(rounds):
                tracker.poll()
            cpu = time.process_time() - started
            rows.append({"what": "tracker poll, placements cached", "ms": 1e3 * cpu / rounds})
            cpu = 0.0
            for round_ in range(rounds):
                for gpu in range(GPUS):  # every pid a new process: its start time changes
                    for n in range(PER_GPU):
                        write_process(procfs, _pid(gpu, n), 5000 + round_)
                started = time.process_time()
                tracker.poll()
                cpu += time.process_time() - started
            rows.append({"what": "tracker poll, every pid new", "ms": 1e3 * cpu / rounds})
            uuids = [gpu.uuid for gpu in fake.gpus]
            energy, started = 0.0, time.process_time()
            for _ in range(rounds):
                energy += 100.0
                samples = [
                    DeviceSample(DeviceReading(index=i, uuid=uuid), energy_joules=energy)
                    for i, uuid in enumerate(uuids)
                ]
                tracker.on_sample("nvidia", samples, None, time.monotonic())
                domains = [DomainPower("package-0", PowerSource.RAPL, None, energy)]
                tracker.on_sample("rapl", None, domains, time.monotonic())
            cpu = time.process_time() - started
            rows.append({"what": "listener, 8 GPUs + 1 RAPL package, per sample", "ms": 1e3 * cpu / rounds})
            views = tracker.views()
            assert len(views) == GPUS * PER_GPU, len(views)
            assert all(v.accelerator_joules > 0 for v in views)
            monitor.stop()
        fake.close()
    for row in rows:
        row["share of a core % at 1 s"] = float(row["ms"]) / 10  # type: ignore[arg-type]
    return rows


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--rounds", type=int, default=200)
    args = parser.parse_args()
    emit(measure(args.rounds), f"workload attribution, {GPUS * PER_GPU} processes on {GPUS} GPUs")
    return 0


if __name__ == "__main__":
    sys.exit(main())
