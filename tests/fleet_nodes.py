"""Many warptd nodes on one machine: ``python -m tests.fleet_nodes SPEC.json``.

Each node is a real daemon in a process of its own, with its own NVML double (8 H200s without NVLink
by default, UUIDs of its own), its own ``--node`` name and its own loopback port (written to
``DIR/NAME.port`` once it serves). This process imports warptd once, then forks one child per node,
so a node costs its daemon's threads and pages, not an interpreter's start. SIGTERM stops them all.

SPEC.json::

    {"dir": "/tmp/x", "interval": 1.0, "settings": {"metrics_include": ["*"]},  # every node's
     "nodes": [{"name": "node-01", "power_w": [300, ...],        # one per GPU
                "throttled": {"3": 0.8},                         # GPU -> seconds capped per second
                "slurm_job": "4242"}]}                           # its processes on every GPU

A node with a ``slurm_job`` runs ``--workloads`` over a fixture /proc and cgroup tree that put one
process per GPU in that job. Creating ``DIR/freeze`` holds every node's totals still: its GPUs
draw 0 W from then on and throttling stops, so totals read late equal totals read early.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import sys
import threading
import time
import traceback
from pathlib import Path

import pynvml

from tests.doubles.nvml import GIB, FakeGpu, FakeNvml, load
from tests.e2e.test_workloads import Node
from warptd.config import load_settings
from warptd.daemon import Daemon

#: Where a Slurm job's processes sit in the cgroup v2 tree (slurmstepd's layout).
SLURM_CGROUP = "0::/system.slice/slurmstepd.scope/job_{job}/step_0/user/task_0\n"
FIRST_PID = 4000


def uuid(node: int, gpu: int) -> str:
    """A UUID of this node's GPU: distinct across the fleet."""
    return f"GPU-{node:08x}-1111-2222-3333-{gpu:012x}"


def _run(spec: dict, number: int, directory: Path, interval: float, overrides: dict) -> None:
    """One node: its double, its daemon, and its throttle counters moved on in real time."""
    name = spec["name"]
    gpus = [
        FakeGpu.h200(i, uuid=uuid(number, i), power_mw=int(watts * 1000), live=True)
        for i, watts in enumerate(spec["power_w"])
    ]
    throttled = {int(gpu): rate for gpu, rate in spec.get("throttled", {}).items()}
    for gpu in throttled:
        gpus[gpu].current_reasons = pynvml.nvmlClocksEventReasonSwPowerCap
    fake = FakeNvml(gpus)
    root = directory / name
    (root / "sys").mkdir(parents=True)
    node = Node(root)
    job = spec.get("slurm_job")
    if job:
        for gpu in fake.gpus:
            pid = FIRST_PID + gpu.index
            node.add(pid, SLURM_CGROUP.format(job=job), uid=1000)
            gpu.processes = [(pid, 2 * GIB)]
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    with fake.installed():
        settings = load_settings(
            listen="127.0.0.1:0",
            node=name,
            backends=["nvidia"],
            interval=interval,
            health_interval=interval,  # the throttle counters move within a test's seconds
            sysfs=root / "sys",
            procfs=node.proc.root,
            cgroupfs=node.cgroupfs,
            workloads=bool(job),
            log_level="warning",
            **overrides,
        )
        daemon = Daemon(settings)
        daemon.start()
        (directory / f"{name}.port").write_text(str(daemon.port))
        started, frozen = time.monotonic(), False
        while not stop.wait(0.2):
            if not frozen and (directory / "freeze").exists():
                frozen = True
                for gpu in fake.gpus:  # banks the energy drawn so far, then draws none
                    gpu.power_mw, gpu.current_reasons = 0, 0
            if not frozen:
                for gpu, rate in throttled.items():
                    ran = time.monotonic() - started
                    fake.gpus[gpu].violation_ns[pynvml.NVML_PERF_POLICY_POWER] = int(ran * rate * 1e9)
        daemon.stop()


def main(path: str) -> int:
    spec = json.loads(Path(path).read_text())
    directory, interval = Path(spec["dir"]), float(spec.get("interval", 1.0))
    load()  # compile and load the double once, before the children share it
    children = []
    for number, node in enumerate(spec["nodes"], start=1):
        pid = os.fork()
        if pid == 0:
            code = 0
            try:
                _run(node, number, directory, interval, spec.get("settings", {}))
            except BaseException:
                traceback.print_exc()
                code = 1
            finally:
                os._exit(code)
        children.append(pid)

    def forward(signum: int, _: object) -> None:
        for child in children:
            with contextlib.suppress(ProcessLookupError):
                os.kill(child, signum)

    signal.signal(signal.SIGTERM, forward)
    signal.signal(signal.SIGINT, forward)
    failed = 0
    for child in children:
        _, status = os.waitpid(child, 0)
        failed |= os.waitstatus_to_exitcode(status) != 0
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1]))
