"""The fleet path with real parts: 20 warptd nodes of 8 H200s each (NVML doubles, each node its own
process, port and ``--node``), a Prometheus in agent mode scraping them with the shipped
deploy/prometheus/agent.yml and remote-writing to a second Prometheus, which evaluates the shipped
deploy/prometheus/fleet-rules.yml. The receiver must answer the rules with the values the doubles were
given: power per node, a Slurm job's energy across the 3 nodes it ran on, the GPUs throttled longest.

Of the shipped agent configuration the test changes only what a test must: the store's URL, and a
1 s scrape interval, timeout and send deadline instead of 15 s, 5 s and 5 s, to finish in seconds.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml

from tests.conftest import require_tool
from tests.e2e.test_prometheus_integration import Prometheus
from tests.helpers import wait_until

ROOT = Path(__file__).parents[2]
AGENT = ROOT / "deploy" / "prometheus" / "agent.yml"
FLEET_RULES = ROOT / "deploy" / "prometheus" / "fleet-rules.yml"
NODES, GPUS = 20, 8
JOB, JOB_NODES = "4242", ("node-03", "node-08", "node-15")
OTHER_JOB, OTHER_NODE = "4243", "node-11"
#: (node, GPU) -> seconds its power cap holds its clocks down per second.
THROTTLED = {("node-05", 3): 0.8, ("node-12", 6): 0.4, ("node-17", 0): 0.2}


def name(node: int) -> str:
    return f"node-{node:02d}"


def power_w(node: int, gpu: int) -> float:
    """Each GPU's draw: distinct per node, so a sum over the wrong nodes shows."""
    return 250.0 + 10 * node + 5 * gpu


def node_power(node: str) -> float:
    return sum(power_w(int(node[-2:]), gpu) for gpu in range(GPUS))


def fleet_spec(directory: Path) -> dict:
    nodes = []
    for number in range(1, NODES + 1):
        node = {"name": name(number), "power_w": [power_w(number, gpu) for gpu in range(GPUS)]}
        node["throttled"] = {str(g): rate for (n, g), rate in THROTTLED.items() if n == name(number)}
        if name(number) in JOB_NODES:
            node["slurm_job"] = JOB
        elif name(number) == OTHER_NODE:
            node["slurm_job"] = OTHER_JOB
        nodes.append(node)
    return {"dir": str(directory), "interval": 1.0, "nodes": nodes}


def values(prom: Prometheus, expr: str, *keys: str) -> dict[tuple[str, ...], float]:
    """An instant query's results, by the values of ``keys``."""
    reply = prom.query(expr)
    assert reply["status"] == "success", (expr, reply.get("error"))
    return {
        tuple(r["metric"].get(k, "") for k in keys): float(r["value"][1]) for r in reply["data"]["result"]
    }


def one(prom: Prometheus, expr: str) -> float:
    found = values(prom, expr)
    assert len(found) == 1, (expr, found)
    return next(iter(found.values()))


@pytest.fixture
def fleet(tmp_path):
    """The nodes, the receiver and the agent; the nodes' ports by name."""
    require_tool("prometheus")
    nodes = tmp_path / "nodes"
    nodes.mkdir()
    spec = tmp_path / "fleet.json"
    spec.write_text(json.dumps(fleet_spec(nodes)))
    log = (tmp_path / "nodes.log").open("w")
    launcher = subprocess.Popen(
        [sys.executable, "-m", "tests.fleet_nodes", str(spec)], cwd=ROOT, stdout=log, stderr=subprocess.STDOUT
    )
    started = []
    try:
        receiver = Prometheus(
            tmp_path / "receiver",
            config={"global": {"evaluation_interval": "1s"}, "rule_files": [str(FLEET_RULES)]},
            flags=(
                f"--storage.tsdb.path={tmp_path / 'receiver' / 'tsdb'}",
                "--web.enable-remote-write-receiver",
            ),
        )
        started.append(receiver)
        ports = nodes.glob("*.port")
        assert wait_until(
            lambda: launcher.poll() is None and len(list(nodes.glob("*.port"))) == NODES,
            timeout=60,
            interval=0.2,
        ), (tmp_path / "nodes.log").read_text()[-3000:]
        ports = {path.stem: int(path.read_text()) for path in nodes.glob("*.port")}
        config = yaml.safe_load(AGENT.read_text())
        config["global"]["scrape_interval"] = "1s"
        config["scrape_configs"][0]["scrape_timeout"] = "1s"
        config["remote_write"][0]["url"] = f"http://127.0.0.1:{receiver.port}/api/v1/write"
        config["remote_write"][0]["queue_config"]["batch_send_deadline"] = "1s"
        targets = tmp_path / "agent" / "targets"
        targets.mkdir(parents=True)
        (targets / "warptd-fleet.json").write_text(
            json.dumps([{"targets": [f"127.0.0.1:{port}" for port in ports.values()]}])
        )
        agent = Prometheus(
            tmp_path / "agent",
            config=config,
            flags=("--enable-feature=agent", f"--storage.agent.path={tmp_path / 'agent' / 'wal'}"),
        )
        started.append(agent)
        yield receiver, ports, nodes
    finally:
        for prom in reversed(started):
            prom.stop()
        launcher.terminate()
        launcher.wait(timeout=30)
        log.close()


@pytest.mark.slow
def test_the_receiver_answers_the_fleet_rules_with_the_doubles_values(fleet):
    receiver, ports, nodes = fleet
    node_of = {f"127.0.0.1:{port}": node for node, port in ports.items()}
    expected = {(node, "example-site"): node_power(node) for node in ports}

    # Power per node: every node's 8 GPUs summed, named by its own --node, under the agent's cluster.
    def powers() -> dict[tuple[str, ...], float]:
        return values(receiver, "node:warptd_device_power_watts:sum", "node", "cluster")

    assert wait_until(lambda: powers().keys() == expected.keys(), timeout=60, interval=0.5), powers()
    assert powers() == pytest.approx(expected, rel=1e-9)

    # The job's processes on its 3 nodes: their energy counted there at the GPUs' power.
    job = f'warptd_workload_energy_joules_total{{kind="slurm_job",workload="{JOB}",source="accelerator"}}'
    on_job_nodes = {(instance,) for instance, node in node_of.items() if node in JOB_NODES}
    assert wait_until(  # 12 s of it, for a rate over 10 s; on those nodes alone
        lambda: values(receiver, f"count_over_time({job}[1m]) >= 12", "instance").keys() == on_job_nodes,
        timeout=40,
        interval=0.5,
    )
    assert values(receiver, job, "instance").keys() == on_job_nodes
    drawn = sum(node_power(node) for node in JOB_NODES)
    assert one(receiver, f"sum(rate({job}[10s]))") == pytest.approx(drawn, rel=0.05)
    throttled = "fleet:warptd_device_throttle_seconds:topk10_increase1h"
    ranked = values(receiver, throttled, "node", "device")
    assert sorted(ranked, key=ranked.__getitem__, reverse=True) == [(n, str(g)) for n, g in THROTTLED]
    counters = {
        (node, gpu): f'warptd_device_throttle_seconds_total{{reason="sw_power_cap",'
        f'instance="127.0.0.1:{ports[node]}",device="{gpu}"}}'
        for node, gpu in THROTTLED
    }
    for key, rate in THROTTLED.items():  # each counts at its GPU's rate (the slope of the last 8 s:
        # 1 Hz samples of 20 busy daemons on 2 cores, whose timing a loaded machine moves by a few %)
        assert one(receiver, f"deriv({counters[key]}[8s])") == pytest.approx(rate, rel=0.1), key

    # Held still, every total read late equals what was read early: the rules against the raw series.
    (nodes / "freeze").touch()
    assert wait_until(lambda: set(powers().values()) == {0.0}, timeout=20, interval=0.5), powers()
    time.sleep(3)  # the workloads' split of the last samples, sent and evaluated
    rule = "slurm_job:warptd_workload_energy_joules:sum"
    jobs = values(receiver, rule, "workload", "source", "cluster")
    assert set(jobs) == {(JOB, "accelerator", "example-site"), (OTHER_JOB, "accelerator", "example-site")}
    per_node = values(
        receiver, 'warptd_workload_energy_joules_total{kind="slurm_job"}', "workload", "instance"
    )
    assert jobs[(JOB, "accelerator", "example-site")] == pytest.approx(
        sum(joules for (job_id, _), joules in per_node.items() if job_id == JOB), rel=1e-9
    )
    assert {node_of[i] for (job_id, i) in per_node if job_id == OTHER_JOB} == {OTHER_NODE}
    assert jobs[(OTHER_JOB, "accelerator", "example-site")] == pytest.approx(
        sum(joules for (job_id, _), joules in per_node.items() if job_id == OTHER_JOB), rel=1e-9
    )

    # The GPUs throttled longest: each GPU's seconds capped, ranked, as its own counter moved.
    ranked = values(receiver, throttled, "node", "device")
    assert sorted(ranked, key=ranked.__getitem__, reverse=True) == [(n, str(g)) for n, g in THROTTLED]
    for (node, gpu), rate in THROTTLED.items():
        counter = counters[(node, gpu)]
        moved = one(receiver, f"max_over_time({counter}[1h]) - min_over_time({counter}[1h])")
        assert moved > 10 * rate  # held for more than 10 s
        assert ranked[(node, str(gpu))] == pytest.approx(moved, rel=0.1)
