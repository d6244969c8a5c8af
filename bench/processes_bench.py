"""Cost of per-process utilization (--processes, --workloads): daemons side by side, then in process.

python bench/processes_bench.py [--seconds 20] [--rounds 2] [--old DIR] [--rounds-in-process 200]

1. Daemons side by side over one set of 8 H200 doubles priced like the real driver (each
   per-process utilization call 2.1 ms of CPU burned in the calling thread, as the driver's
   system time is; ``shared/notes/real-h200.md``), at 1 Hz and at 10 Hz: a plain daemon,
   ``--processes``, ``--workloads`` and both, their CPU (utime + stime) over the same windows
   (medians of ``--rounds``) and each one's ratio to the plain daemon at its rate. Two scenes, one
   after the other: ``idle``, no process on any GPU (the double answers NOT_FOUND, as the H200 was
   timed); ``busy``, 4 processes per GPU, each its own workload (Slurm job, container, service,
   user; fixture ``--procfs`` and ``--cgroupfs``), each keeping the SMs busy at its own percent in
   every driver window (the double samples live, a window every 1/6 s, keeping 100), with also
   ``--process-utilization-interval 5`` at 10 Hz. ``--old DIR`` runs another checkout's daemon
   beside (plain and with both features, at each rate; ``git archive main | tar -x -C DIR``) over
   the same priced double. The daemons run without their XID thread (``--no-xid-events``).
2. In process, for 8 and 64 GPUs of the double, each with 4 compute processes in 4 pods and 6
   driver samples per process per poll: CPU time of one ProcessMonitor poll reading per-process
   utilization at every poll (``--interval 1``), without it (every GPU answering NOT_SUPPORTED: the
   memory list only), and polled at 10 Hz (a read every tenth poll), the NVML C calls per GPU per
   poll; and the pod energy listener per sample splitting by SM share and evenly.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import replace
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.common import ROOT, cpu_seconds, emit, free_port, stop, wait_http
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
GPUS = 8
#: The daemons of each scene and rate: name -> flags beside ``--interval``.
FEATURES = {
    "plain": (),
    "processes": ("--processes",),
    "workloads": ("--workloads",),
    "processes+workloads": ("--processes", "--workloads"),
}
WINDOW_US = 166_667  # the driver's per-process sampling window in the busy scene


def _workload_cgroup(pid: int) -> tuple[str, str]:
    """The busy scene's processes, each its own workload, the four kinds in turn: its
    /proc/PID/cgroup line and the cgroup whose cpu.stat the split reads."""
    kind = pid % 4
    if kind == 0:
        job = f"/system.slice/slurmstepd.scope/job_{pid}"
        return f"0::{job}/step_0/user/task_0\n", job
    if kind == 1:
        return f"0::/system.slice/docker-{pid:064x}.scope\n", f"/system.slice/docker-{pid:064x}.scope"
    if kind == 2:
        return f"0::/system.slice/svc-{pid}.service\n", f"/system.slice/svc-{pid}.service"
    return f"0::/user.slice/user-{pid}.slice/session-1.scope\n", f"/user.slice/user-{pid}.slice"


def busy_node(root: Path, fake: FakeNvml) -> tuple[Path, Path]:
    """A fixture procfs and cgroupfs for PER_GPU processes on each GPU, and the double's GPUs listing
    them with their SM percents, sampled live."""
    procfs, cgroupfs = root / "proc", root / "cgroup"
    procfs.mkdir(parents=True)
    (procfs / "stat").write_text("cpu  100 0 200 100000 0 0 0 0 0 0\n")
    for gpu in fake.gpus:
        listed = []
        for n in range(PER_GPU):
            pid = _pid(gpu.index, n)
            line, cpu = _workload_cgroup(pid)
            directory = procfs / str(pid)
            directory.mkdir()
            fields = ["S", *["0"] * 18, "4242", *["0"] * 30]
            (directory / "stat").write_text(f"{pid} (python3) {' '.join(fields)}\n")
            (directory / "cgroup").write_text(line)
            (directory / "status").write_text(f"Name:\tpython3\nUid:\t{pid}\t{pid}\t{pid}\t{pid}\n")
            stat = cgroupfs / cpu.lstrip("/") / "cpu.stat"
            stat.parent.mkdir(parents=True, exist_ok=True)
            stat.write_text(f"usage_usec {pid}\nuser_usec 0\nsystem_usec 0\n")
            listed.append((pid, 2**30, 10 + 20 * n))
        gpu.processes = listed
        gpu.process_window_us = WINDOW_US
    return procfs, cgroupfs


def daemon_command(
    port: int, interval: str, flags: tuple[str, ...], node: tuple[Path, Path] | None
) -> list[str]:
    paths = [] if node is None else ["--procfs", str(node[0]), "--cgroupfs", str(node[1])]
    return [sys.executable, "-m", "warptd", "serve", "--backend", "nvidia", "--listen", f"127.0.0.1:{port}",
            "--log-level", "warning", "--no-xid-events", "--interval", interval, *flags, *paths]  # fmt: skip


def scene(
    name: str, seconds: float, rounds: int, old: Path | None
) -> tuple[list[dict[str, object]], list[dict[str, object]]]:
    """One scene's daemons side by side: their CPU, and each one's ratio to the plain daemon at its rate."""
    fake = FakeNvml([FakeGpu.h200(i, live=True) for i in range(GPUS)], driver_version="580.159.04")
    with tempfile.TemporaryDirectory(prefix="warptd-processes-") as tmp:
        node = busy_node(Path(tmp), fake) if name == "busy" else None
        commands: dict[str, tuple[list[str], Path]] = {}
        for rate, interval in (("1hz", "1"), ("10hz", "0.1")):
            for feature, flags in FEATURES.items():
                commands[f"{feature}_{rate}"] = (daemon_command(free_port(), interval, flags, node), ROOT)
                if old is not None and feature in ("plain", "processes+workloads"):
                    commands[f"old_{feature}_{rate}"] = (
                        daemon_command(free_port(), interval, flags, node),
                        old,
                    )
        if name == "busy":
            flags = (*FEATURES["processes+workloads"], "--process-utilization-interval", "5")
            commands["processes+workloads_5s_10hz"] = (daemon_command(free_port(), "0.1", flags, node), ROOT)
        environment = {**os.environ, **fake.environment()}
        procs = {
            daemon: subprocess.Popen(
                command,
                env={**environment, "PYTHONPATH": str(tree)},
                cwd=tree,  # python -m puts the working directory first
                stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL,
            )
            for daemon, (command, tree) in commands.items()
        }
        try:
            for command, _ in commands.values():
                wait_http(int(command[command.index("--listen") + 1].rsplit(":", 1)[1]), "/readyz")
            time.sleep(5)  # past start-up: the first reads, placements cached
            percents: dict[str, list[float]] = {daemon: [] for daemon in procs}
            for _ in range(rounds):
                before = {daemon: cpu_seconds(proc.pid) for daemon, proc in procs.items()}
                started = time.monotonic()
                time.sleep(seconds)
                elapsed = time.monotonic() - started
                for daemon, proc in procs.items():
                    percents[daemon].append(100 * (cpu_seconds(proc.pid) - before[daemon]) / elapsed)
        finally:
            for proc in procs.values():
                stop(proc)
    fake.close()
    median = {daemon: statistics.median(values) for daemon, values in percents.items()}
    cpu_rows = [
        {"scene": name, "daemon": daemon, "cpu_percent_of_core": value} for daemon, value in median.items()
    ]
    ratio_rows = []
    for daemon, value in median.items():
        tree = "old_" if daemon.startswith("old_") else ""
        feature, rate = daemon.removeprefix(tree).rsplit("_", 1)
        if feature != "plain":
            target = " (target <= 1.5)" if daemon == "processes+workloads_10hz" else ""
            ratio = f"{daemon} / {tree}plain_{rate}{target}"
            ratio_rows.append({"scene": name, "ratio": ratio, "value": value / median[f"{tree}plain_{rate}"]})
    return cpu_rows, ratio_rows


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


def poll_cost(gpus: int, rounds: int, utilization: bool, interval: float = 1.0) -> dict[str, object]:
    """One monitor's polls at ``interval`` (a clock of its own, moved on by it at each poll)."""
    with tempfile.TemporaryDirectory(prefix="warptd-processes-") as tmp:
        procfs = fixture_host(Path(tmp), gpus)
        fake = FakeNvml([FakeGpu(index=i) for i in range(gpus)])
        for gpu in fake.gpus:
            gpu.processes = [(_pid(gpu.index, n), 2**30) for n in range(PER_GPU)]
            gpu.unsupported = set() if utilization else set(UTILIZATION)
        now = [0.0]
        with fake.installed():
            monitor = ProcessMonitor(procfs, interval=interval, clock=lambda: now[0])
            t_us = script_samples(fake, 0)
            monitor.poll()  # warm: handles, cgroups, the unsupported GPUs asked once
            calls, cpu = fake.total_calls(), 0.0
            for poll in range(rounds):
                now[0] += interval
                if poll % round(1 / min(interval, 1.0)) == 0:  # the driver's samples of a second
                    t_us = script_samples(fake, t_us)
                started = time.process_time()
                monitor.poll()
                cpu += time.process_time() - started
            calls = (fake.total_calls() - calls) / rounds / gpus
            monitor.stop()
        fake.close()
    return {
        "GPUs": gpus,
        "per-process utilization": "on" if utilization else "off (memory only)",
        "interval s": interval,
        "poll ms": 1e3 * cpu / rounds,
        "NVML calls per GPU per poll": calls,
        "share of a core %": 100 * cpu / rounds / interval,
    }


def listener_cost(gpus: int, rounds: int) -> list[dict[str, object]]:
    """The pod energy listener with each GPU shared by its 4 processes' pods, per split method."""
    rows = []
    with tempfile.TemporaryDirectory(prefix="warptd-processes-") as tmp:
        procfs = fixture_host(Path(tmp), gpus)
        fake = FakeNvml([FakeGpu(index=i, live=True) for i in range(gpus)])
        for gpu in fake.gpus:
            gpu.processes = [(_pid(gpu.index, n), 2**30) for n in range(PER_GPU)]
        settings = load_settings(
            listen="127.0.0.1:0", backends=["nvidia"], sysfs=Path(tmp), sample_timeout=60
        )  # a shared machine: no sample given up on
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
    parser.add_argument("--seconds", type=float, default=20.0, help="each CPU window of the daemons")
    parser.add_argument("--rounds", type=int, default=2, help="CPU windows of the daemons (medians)")
    parser.add_argument("--old", type=Path, help="another checkout's daemon, run beside")
    parser.add_argument("--rounds-in-process", type=int, default=200)
    args = parser.parse_args()
    for name in ("idle", "busy"):
        cpu, ratios = scene(name, args.seconds, args.rounds, args.old)
        windows = f"{args.rounds} windows of {args.seconds:g} s (medians)"
        emit(cpu, f"CPU, {name}: {GPUS} priced H200 doubles, {windows}")
        emit(ratios, f"Ratios to the plain daemon at the same rate, {name}, side by side in the same windows")
    rounds = args.rounds_in_process
    rows = [
        poll_cost(gpus, rounds, on, interval)
        for gpus in (8, 64)
        for on, interval in ((False, 1.0), (True, 1.0), (True, 0.1))
    ]
    emit(rows, f"ProcessMonitor.poll, {PER_GPU} processes per GPU, {WINDOWS} samples each per second")
    emit(listener_cost(8, rounds) + listener_cost(64, rounds // 4), "pod energy listener")
    return 0


if __name__ == "__main__":
    sys.exit(main())
