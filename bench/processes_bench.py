"""Cost of per-process utilization (--processes) and of the SM-share energy split, in process.

python bench/processes_bench.py [--rounds 200]

For 8 and 64 GPUs of the C NVML double, each with 4 compute processes in 4 pods and 6 driver
samples per process per poll: CPU time of one ProcessMonitor poll with per-process utilization and
without it (every GPU answering NOT_SUPPORTED, as before this feature: the memory list only), the
NVML C calls per GPU per poll, and the pod energy listener per sample splitting by SM share and
evenly, as a share of one core at a 1 s interval.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from dataclasses import replace
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.common import emit
from tests.doubles.nvml import FakeGpu, FakeNvml, ProcessSample
from tests.helpers import Rig
from warptd.config import load_settings
from warptd.k8s.containers import BUNDLES, ContainerOwners
from warptd.k8s.energy import PodEnergy
from warptd.k8s.podresources import Owner
from warptd.k8s.shares import SmShares
from warptd.processes.nvml import ProcessMonitor

PER_GPU, WINDOWS = 4, 6
UTILIZATION = ("nvmlDeviceGetProcessesUtilizationInfo", "nvmlDeviceGetProcessUtilization")


def _pid(gpu: int, n: int) -> int:
    return 10_000 + gpu * PER_GPU + n


def _uid(pid: int) -> str:
    return f"{pid:08x}-0000-4000-8000-{pid:012x}"


def fixture_host(root: Path, gpus: int) -> Path:
    """A procfs with each process's stat and cgroup, and a containerd bundle per container."""
    procfs = root / "proc"
    for gpu in range(gpus):
        for n in range(PER_GPU):
            pid = _pid(gpu, n)
            (procfs / str(pid)).mkdir(parents=True)
            fields = ["S", *["0"] * 18, "4242", *["0"] * 30]
            (procfs / str(pid) / "stat").write_text(f"{pid} (python3) {' '.join(fields)}\n")
            (procfs / str(pid) / "cgroup").write_text(f"0::/kubepods/burstable/pod{_uid(pid)}/{pid:064x}\n")
            bundle = procfs / "1" / "root" / BUNDLES[0].format(id=f"{pid:064x}")
            bundle.parent.mkdir(parents=True)
            annotations = {
                "io.kubernetes.cri.sandbox-namespace": "ml",
                "io.kubernetes.cri.sandbox-name": f"job-{pid}",
                "io.kubernetes.cri.container-name": "main",
                "io.kubernetes.cri.sandbox-uid": _uid(pid),
            }
            bundle.write_text(json.dumps({"annotations": annotations}))
    return procfs


def script_samples(fake: FakeNvml, t_us: int) -> int:
    """The next poll's driver samples: WINDOWS per process per GPU, shares varying by process."""
    for gpu in fake.gpus:
        samples = []
        for _ in range(WINDOWS):
            t_us += 166_667
            samples += [ProcessSample(t_us, _pid(gpu.index, n), 10 + 20 * n, 5) for n in range(PER_GPU)]
        gpu.process_samples = samples
    return t_us


def poll_cost(gpus: int, rounds: int, utilization: bool) -> dict[str, object]:
    with tempfile.TemporaryDirectory(prefix="warptd-processes-") as tmp:
        procfs = fixture_host(Path(tmp), gpus)
        fake = FakeNvml([FakeGpu(index=i) for i in range(gpus)])
        for gpu in fake.gpus:
            gpu.processes = [(_pid(gpu.index, n), 2**30) for n in range(PER_GPU)]
            gpu.unsupported = set() if utilization else set(UTILIZATION)
        with fake.installed():
            monitor = ProcessMonitor(procfs)
            t_us = script_samples(fake, 0)
            monitor.poll()  # warm: handles, cgroups, the unsupported GPUs asked once
            calls, cpu = fake.total_calls(), 0.0
            for _ in range(rounds):
                t_us = script_samples(fake, t_us)
                started = time.process_time()
                monitor.poll()
                cpu += time.process_time() - started
            calls = (fake.total_calls() - calls) / rounds / gpus
            monitor.stop()
        fake.close()
    return {
        "GPUs": gpus,
        "per-process utilization": "on" if utilization else "off (before)",
        "poll ms": 1e3 * cpu / rounds,
        "NVML calls per GPU per poll": calls,
        "share of a core % at 1 s": 100 * cpu / rounds,
    }


def listener_cost(gpus: int, rounds: int) -> list[dict[str, object]]:
    """The pod energy listener with each GPU shared by its 4 processes' pods, per split method."""
    rows = []
    with tempfile.TemporaryDirectory(prefix="warptd-processes-") as tmp:
        procfs = fixture_host(Path(tmp), gpus)
        fake = FakeNvml([FakeGpu(index=i, live=True) for i in range(gpus)])
        for gpu in fake.gpus:
            gpu.processes = [(_pid(gpu.index, n), 2**30) for n in range(PER_GPU)]
        settings = load_settings(listen="127.0.0.1:0", backends=["nvidia"], sysfs=Path(tmp))
        with fake.installed():
            rig = Rig(settings)
            monitor = ProcessMonitor(procfs, interval=3600)  # polled once: the shares stay fresh

            class Owners:  # the kubelet's answer, without gRPC: each GPU held by its 4 pods
                def owners(self, info):
                    pids = [_pid(info.index, n) for n in range(PER_GPU)]
                    return tuple(Owner("ml", f"job-{pid}", "main") for pid in pids)

            script_samples(fake, 0)
            monitor.poll()
            rig.tick()
            state = rig.snapshot.get("nvidia")
            sm_use = SmShares(monitor, ContainerOwners((procfs / "1" / "root",))).by_owner
            # the same readings with energy rising by 1 J per sample, so every sample is split
            series = [
                [replace(d, energy_joules=(d.energy_joules or 0) + k) for d in state.devices]
                for k in range(rounds + 1)
            ]
            for method, use in (("sm_share", sm_use), ("even", None)):
                energy = PodEnergy(Owners(), rig.snapshot, sm_use=use)  # type: ignore[arg-type]
                energy.on_sample("nvidia", series[0], None)
                started = time.process_time()
                for devices in series[1:]:
                    energy.on_sample("nvidia", devices, None)
                cpu = (time.process_time() - started) / rounds
                split = {m: j for (_, _, _, m), j in energy.split_joules().items()}
                assert set(split) == {method}, split
                rows.append({"GPUs": gpus, "split": method, "listener ms/sample": 1e3 * cpu})
            monitor.stop()
            rig.close()
        fake.close()
    return rows


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--rounds", type=int, default=200)
    args = parser.parse_args()
    rows = [poll_cost(gpus, args.rounds, on) for gpus in (8, 64) for on in (False, True)]
    emit(rows, f"ProcessMonitor.poll, {PER_GPU} processes per GPU, {WINDOWS} samples each per poll")
    emit(listener_cost(8, args.rounds) + listener_cost(64, args.rounds // 4), "pod energy listener")
    return 0


if __name__ == "__main__":
    sys.exit(main())
