"""Cost of pod attribution with 8 GPUs and 100 allocated pods, measured side by side in one run.

python bench/pods_bench.py [--window 30] [--scrapes 200]

1. In process: CPU time of one PodResources List + mapping (real gRPC on a unix socket) and of the
   per-pod energy listener per sample, as a share of one core at the default 10 s / 1 s periods.
2. Two daemons with the same 8 simulated GPUs, one with attribution and one without: CPU over the
   same window, and /metrics latency of interleaved scrapes.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.common import cpu_seconds, emit, free_port, get, pct, start_warptd_double, stop
from tests.doubles.nvml import FakeGpu, FakeNvml
from tests.helpers import Rig
from tests.kubelet import FakeKubelet
from warptd.config import load_settings
from warptd.k8s.attribution import PodAttribution
from warptd.k8s.energy import PodEnergy
from warptd.k8s.podresources import PodResourcesClient

GPUS, PODS = 8, 100


def uuids() -> list[str]:
    return [FakeGpu(index=i).uuid for i in range(GPUS)]


def allocate(kubelet: FakeKubelet) -> None:
    """100 pods, each holding one of the 8 GPUs (time-sliced: ~12 pods per GPU), plus a CPU-only pod."""
    ids = uuids()
    kubelet.pods = {("ml", f"job-{p}", "main"): {"nvidia.com/gpu": [ids[p % GPUS]]} for p in range(PODS)}
    kubelet.pods[("web", "nginx", "nginx")] = {"example.com/nic": ["0000:81:00.0"]}


def in_process(socket: Path, rounds: int = 200) -> dict[str, object]:
    fake = FakeNvml([FakeGpu(index=i, live=True) for i in range(GPUS)])
    settings = load_settings(listen="127.0.0.1:0", backends=["nvidia"], sysfs=socket.parent)
    with fake.installed():
        rig = Rig(settings)
        pods = PodAttribution(PodResourcesClient(socket), interval=10)
        energy = PodEnergy(pods, rig.snapshot)
        pods.poll_once()
        started = time.process_time()
        for _ in range(rounds):
            pods.poll_once()
        poll = (time.process_time() - started) / rounds
        assert pods.state.up and len(pods.state.owners_by_id) == GPUS + 1
        rig.tick()
        state = rig.snapshot.get("nvidia")
        started = time.process_time()
        for _ in range(rounds):
            energy.on_sample("nvidia", state.devices, None)
        listener = (time.process_time() - started) / rounds
        pods.stop()
        rig.close()
    return {
        "List+map ms (incl. the fake kubelet's own CPU)": poll * 1e3,
        "energy listener ms/sample": listener * 1e3,
        "share of a core % (10 s poll, 1 s samples)": 100 * (poll / 10 + listener / 1),
        "pods with energy": len(energy.totals()),
    }


def side_by_side(socket: Path, window: float, scrapes: int) -> list[dict[str, object]]:
    ports = {"without attribution": free_port(), "with attribution": free_port()}
    flags = {"without attribution": "--no-pod-attribution", "with attribution": f"--kubelet-socket={socket}"}
    procs = {name: start_warptd_double(GPUS, ports[name], flag)[0] for name, flag in flags.items()}
    try:
        deadline = time.monotonic() + 10
        while get(ports["with attribution"])[1].count(b"warptd_device_allocation_info{") != PODS:
            assert time.monotonic() < deadline, "attribution is not running"
            time.sleep(0.1)
        before = {name: cpu_seconds(p.pid) for name, p in procs.items()}
        time.sleep(window)
        cpu = {name: (cpu_seconds(p.pid) - before[name]) / window for name, p in procs.items()}
        lat: dict[str, list[float]] = {name: [] for name in procs}
        for _ in range(scrapes):  # interleaved, so both see the same machine
            for name, port in ports.items():
                started = time.perf_counter()
                get(port)
                lat[name].append(time.perf_counter() - started)
    finally:
        for proc in procs.values():
            stop(proc)
    return [
        {
            "daemon": name,
            "CPU % of a core": 100 * cpu[name],
            "p50 ms": 1e3 * pct(lat[name], 50),
            "p99 ms": 1e3 * pct(lat[name], 99),
        }
        for name in procs
    ]


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--window", type=float, default=30.0, help="CPU window, seconds")
    parser.add_argument("--scrapes", type=int, default=200)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="warptd-pods-") as tmp:
        kubelet = FakeKubelet(Path(tmp) / "kubelet.sock").start()
        allocate(kubelet)
        try:
            emit([in_process(kubelet.socket)], f"pod attribution in process: {GPUS} GPUs, {PODS} pods")
            rows = side_by_side(kubelet.socket, args.window, args.scrapes)
            emit(rows, f"two daemons side by side: {GPUS} GPUs, {PODS} pods, {args.window:.0f} s window")
            base, pods = rows
            print(
                f"attribution adds {pods['CPU % of a core'] - base['CPU % of a core']:+.2f} % of a core; "
                f"p50 ratio {pods['p50 ms'] / base['p50 ms']:.2f}"
            )
        finally:
            kubelet.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
