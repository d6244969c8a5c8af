"""What a fleet of warptd nodes costs its Prometheus: series per node, samples per second per node,
and the fleet's series at 1,000 and 10,000 nodes, for a plain serve and for every family.

    python bench/fleet_bench.py [--nodes 20] [--window 10]

Runs ``--nodes`` real daemons (8 H200s without NVLink each, one process per node forked by
tests/fleet_nodes.py) twice, a plain serve and ``--metrics-include '*'``, each scraped every second by
a Prometheus in agent mode with deploy/prometheus/agent.yml (remote-writing to a receiving
Prometheus). Series per node are counted from each node's /metrics; samples per second per node are
what the agent sent over ``--window`` seconds, divided by the nodes, and scaled to the 15 s and 60 s
scrape intervals (a sample per series per scrape). The nodes' CPU over the window is beside, and the
series per node docs/deploy.md gives for an H200 node (from warptd/metrics/series_counts.py: every
media engine busy, where these nodes' are idle: each kind's average absent, 3 series a GPU fewer).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

import yaml

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from common import ROOT, cpu_seconds, emit, free_port, get, stop, wait_http

from tests.fleet import series_per_gpu
from warptd.metrics.docs import fleet_figures

GPUS = 8


def _prometheus(directory: Path, config: dict, *flags: str) -> tuple[subprocess.Popen[bytes], int]:
    directory.mkdir(parents=True, exist_ok=True)
    (directory / "prometheus.yml").write_text(yaml.safe_dump(config))
    port = free_port()
    binary = shutil.which("prometheus") or "prometheus"
    args = [binary, f"--config.file={directory / 'prometheus.yml'}", f"--web.listen-address=127.0.0.1:{port}"]
    proc = subprocess.Popen([*args, *flags], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    wait_http(port, "/-/ready")
    return proc, port


def _sent(port: int) -> float:
    """Samples the agent has sent to the store so far."""
    text = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10).read().decode()
    return sum(
        float(line.rsplit(" ", 1)[1])
        for line in text.splitlines()
        if line.startswith("prometheus_remote_storage_samples_total{")
    )


def _children(pid: int) -> list[int]:
    return [
        int(c)
        for task in Path(f"/proc/{pid}/task").iterdir()
        for c in (task / "children").read_text().split()
    ]


def measure(nodes: int, window: float, include_all: bool, work: Path) -> dict[str, object]:
    directory = work / ("every" if include_all else "plain")
    (directory / "nodes").mkdir(parents=True)
    spec = {
        "dir": str(directory / "nodes"),
        "interval": 1.0,
        "settings": {"metrics_include": ["*"]} if include_all else {},
        "nodes": [{"name": f"node-{n:04d}", "power_w": [300.0] * GPUS} for n in range(1, nodes + 1)],
    }
    (directory / "fleet.json").write_text(json.dumps(spec))
    environment = {**os.environ, "PYTHONPATH": str(ROOT)}
    launcher = subprocess.Popen(
        [sys.executable, "-m", "tests.fleet_nodes", str(directory / "fleet.json")],
        cwd=ROOT,
        env=environment,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    started = []
    try:
        deadline = time.monotonic() + 120
        while len(list((directory / "nodes").glob("*.port"))) < nodes and time.monotonic() < deadline:
            time.sleep(0.2)
        ports = [int(p.read_text()) for p in (directory / "nodes").glob("*.port")]
        receiver = _prometheus(
            directory / "receiver",
            {"global": {"evaluation_interval": "15s"}},
            f"--storage.tsdb.path={directory / 'receiver' / 'tsdb'}",
            "--web.enable-remote-write-receiver",
        )
        started.append(receiver[0])
        config = yaml.safe_load((ROOT / "deploy" / "prometheus" / "agent.yml").read_text())
        config["global"]["scrape_interval"] = "1s"
        config["scrape_configs"][0]["scrape_timeout"] = "1s"
        config["remote_write"][0]["url"] = f"http://127.0.0.1:{receiver[1]}/api/v1/write"
        (directory / "agent" / "targets").mkdir(parents=True)
        targets = [{"targets": [f"127.0.0.1:{port}" for port in ports]}]
        (directory / "agent" / "targets" / "warptd-bench.json").write_text(json.dumps(targets))
        agent, agent_port = _prometheus(
            directory / "agent",
            config,
            "--enable-feature=agent",
            f"--storage.agent.path={directory / 'agent' / 'wal'}",
        )
        started.append(agent)
        time.sleep(8)  # first scrapes, first batches sent
        bodies = [get(port)[1].decode() for port in ports]
        per_node = sorted(sum(1 for line in body.splitlines() if line and line[0] != "#") for body in bodies)
        per_gpu = max(max(series_per_gpu(body).values()) for body in bodies)
        children = _children(launcher.pid)
        cpu0, sent0, t0 = sum(map(cpu_seconds, children)), _sent(agent_port), time.monotonic()
        time.sleep(window)
        elapsed = time.monotonic() - t0
        cpu = (sum(map(cpu_seconds, children)) - cpu0) / elapsed / nodes
        per_second = (_sent(agent_port) - sent0) / elapsed / nodes  # at a 1 s scrape
        median = per_node[len(per_node) // 2]
        return {
            "families": "every (--metrics-include '*')" if include_all else "plain serve (default)",
            "series_per_gpu": per_gpu,
            "series_per_node": median,
            "samples_per_s_per_node_at_1s": per_second,
            "samples_per_s_per_node_at_15s": per_second / 15,
            "samples_per_s_per_node_at_60s": per_second / 60,
            "fleet_series_1k_nodes": median * 1_000,
            "fleet_series_10k_nodes": median * 10_000,
            "node_cpu_pct_of_core": cpu * 100,
            "docs_series_per_node_busy": fleet_figures()["H200 PCIe, no NVLink"][
                "every" if include_all else "default"
            ]["node"],
        }
    finally:
        for proc in reversed(started):
            stop(proc)
        stop(launcher)


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--nodes", type=int, default=20)
    parser.add_argument("--window", type=float, default=10.0)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="warptd-fleet-bench-") as work:
        rows = [measure(args.nodes, args.window, include_all, Path(work)) for include_all in (False, True)]
    rows.append(
        {
            key: (
                rows[0][key] / rows[1][key] if isinstance(rows[0][key], (int, float)) else "ratio plain/every"
            )
            for key in rows[0]
        }
    )
    emit(rows, f"{args.nodes} nodes of {GPUS} H200s (no NVLink), scraped every 1 s by a Prometheus agent")


if __name__ == "__main__":
    main()
