"""A real Prometheus (Debian package, loopback) scrapes the daemon every second and answers every
PromQL expression of the shipped dashboard and alert rules. A renamed metric breaks this test.

Run once with the NVML double (plus CPU, NVML power, RAPL fixture, an amdgpu card read through sysfs,
an MI300X through the amdsmi double, a kubelet double allocating a GPU to a pod and finished stress
jobs), where
every query must return data, and once with the CPU backend alone, where every query must run and
return data whenever all the metrics it names are in that daemon's exposition."""

from __future__ import annotations

import json
import re
import socket
import subprocess
import urllib.parse
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest
import yaml

from tests.conftest import require_tool
from tests.doubles.amdsmi import FakeAmdsmi, FakeGpu
from tests.helpers import http, wait_until
from tests.kubelet import FakeKubelet
from tests.sysfs_tree import drm_card
from tests.test_models import ALERTS, dashboard_queries, rule_queries
from warptd.config import Settings
from warptd.daemon import Daemon

NAME = re.compile(r"\b(warptd_[a-z_]+|up)\b(?!\s*\()")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Prometheus:
    """A real Prometheus on loopback: by default scraping warptd at ``target_port`` with the shipped
    alert rules; else with ``config`` and ``flags`` (an agent, a remote-write receiver)."""

    def __init__(
        self, tmp: Path, target_port: int = 0, config: dict | None = None, flags: tuple[str, ...] = ()
    ) -> None:
        binary = require_tool("prometheus")
        self.port = free_port()
        tmp.mkdir(parents=True, exist_ok=True)
        path = tmp / "prometheus.yml"
        config = config or {
            "global": {"scrape_interval": "1s", "evaluation_interval": "1s"},
            "rule_files": [str(ALERTS)],
            "scrape_configs": [
                {"job_name": "warptd", "static_configs": [{"targets": [f"127.0.0.1:{target_port}"]}]}
            ],
        }
        path.write_text(yaml.safe_dump(config))
        self.proc = subprocess.Popen(
            [
                binary,
                f"--config.file={path}",
                *(flags or (f"--storage.tsdb.path={tmp / 'tsdb'}",)),
                f"--web.listen-address=127.0.0.1:{self.port}",
            ],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        assert wait_until(self._ready, timeout=30, interval=0.2), "prometheus did not become ready"

    def _ready(self) -> bool:
        try:
            return urllib.request.urlopen(f"http://127.0.0.1:{self.port}/-/ready", timeout=2).status == 200
        except OSError:
            return False

    def api(self, path: str, **params: str) -> dict:
        url = f"http://127.0.0.1:{self.port}/api/v1/{path}?{urllib.parse.urlencode(params)}"
        try:
            with urllib.request.urlopen(url, timeout=10) as response:
                return json.loads(response.read())
        except urllib.error.HTTPError as exc:  # 400 on a parse error: keep Prometheus' message
            return json.loads(exc.read())

    def query(self, expr: str) -> dict:
        return self.api("query", query=expr)

    def has(self, expr: str) -> bool:
        reply = self.query(expr)
        return reply["status"] == "success" and bool(reply["data"]["result"])

    def stop(self) -> None:
        self.proc.terminate()
        self.proc.wait(timeout=20)


@contextmanager
def scraped(settings: Settings, tmp_path: Path) -> Iterator[tuple[Daemon, Prometheus]]:
    """A daemon of ``settings`` and a real Prometheus scraping it, both stopped after."""
    daemon = Daemon(settings)
    daemon.start()
    try:
        prom = Prometheus(tmp_path, daemon.port)
        try:
            yield daemon, prom
        finally:
            prom.stop()
    finally:
        daemon.stop()


def _wait_for_data(prom: Prometheus) -> None:
    # rate()/increase() need a few scrapes; bounded wait (first data ~6 s after start).
    assert wait_until(
        lambda: prom.has("count_over_time(warptd_device_up[1m]) >= 5"), timeout=60, interval=0.5
    )
    assert wait_until(lambda: prom.has('up{job="warptd"} == 1'), timeout=10, interval=0.5)


def _wait_for_scrape_of_each_job(prom: Prometheus, ended: dict[str, float]) -> None:
    """Until Prometheus holds, for each stress test, the sample of its own run's end: a scrape that
    followed the job, not one that followed an earlier job (whose end timestamp is already there)."""
    for test, at in ended.items():
        selector = f'warptd_stress_last_end_timestamp_seconds{{test="{test}"}} >= {at - 0.001:.3f}'
        assert wait_until(lambda selector=selector: prom.has(selector), timeout=20, interval=0.5), selector


def _check_rules_healthy(prom: Prometheus) -> None:
    assert wait_until(
        lambda: all(r.get("health") == "ok" for g in prom.api("rules")["data"]["groups"] for r in g["rules"]),
        timeout=20,
        interval=0.5,
    ), prom.api("rules")


@pytest.fixture
def nvml_stack(settings, fake_nvml, sysfs, tmp_path):
    pytest.importorskip("torch")
    sysfs.rapl_zone("intel-rapl:0", "package-0", 10_000_000)
    sysfs.rapl_zone("intel-rapl:0:1", "dram", 2_000_000)
    sysfs.hwmon(0, "coretemp", {"Package id 0": 47000})
    drm_card(sysfs, 0, "amdgpu", "0000:03:00.0", {"gpu_busy_percent": 50}, {"power1_input": 90_000_000})
    kubelet = FakeKubelet(tmp_path / "kubelet.sock").start()
    kubelet.pods = {("ml", "train-0", "trainer"): {"nvidia.com/gpu": [fake_nvml.gpus[0].uuid]}}
    settings.interval = 0.5
    settings.kubelet_socket = kubelet.socket
    settings.metrics_include = ["*"]  # the dashboard also shows the families the default leaves out
    fake_nvml.gpus[1].retires_pages = 1  # a pre-Ampere GPU: retired pages instead of remapped rows
    # An MI300X beside the sysfs card: ECC, PCIe replay, XGMI and media-engine series from amdsmi.
    amd = FakeAmdsmi([FakeGpu(index=0, bdf=(0, 0xC3, 0, 0))])
    with amd.installed(), scraped(settings, tmp_path) as stack:
        yield stack
    kubelet.stop()


@pytest.mark.slow
def test_every_dashboard_and_alert_query_with_the_nvml_double(nvml_stack):
    daemon, prom = nvml_stack
    ended = {}
    for test, size in (("memory", 8), ("matmul", 64)):  # one after the other: one job per device
        payload = {"test": test, "device": "cpu:0", "duration_s": 1, "size": size}
        status, _, body = http(
            daemon.port, "POST", "/stress", json.dumps(payload).encode(), {"Content-Type": "application/json"}
        )
        assert status == 202
        job = daemon.stress.jobs.get(json.loads(body)["id"])
        assert job.done.wait(90) and job.ended_at is not None, job.error
        ended[test] = job.ended_at.timestamp()
    _wait_for_data(prom)
    _wait_for_scrape_of_each_job(prom, ended)
    missing = []
    for title, expr in dashboard_queries():
        reply = prom.query(expr)
        assert reply["status"] == "success", (title, expr, reply.get("error"))
        if not reply["data"]["result"]:
            missing.append((title, expr))
    assert not missing, f"dashboard queries without data: {missing}"
    for alert, expr in rule_queries():
        reply = prom.query(expr)
        assert reply["status"] == "success", (alert, reply.get("error"))
        for name in set(NAME.findall(expr)):
            selector = 'up{job="warptd"}' if name == "up" else name
            assert prom.has(selector), f"{alert} uses {name}, which warptd does not export"
    _check_rules_healthy(prom)


@pytest.mark.slow
def test_every_query_runs_with_the_cpu_backend(settings, tmp_path):
    settings.backends = ["cpu"]
    settings.interval = 0.5
    with scraped(settings, tmp_path) as (daemon, prom):
        _wait_for_data(prom)
        exported = set(NAME.findall(http(daemon.port, "GET", "/metrics")[2].decode())) | {"up"}
        expected_data = 0
        for title, expr in [*dashboard_queries(), *rule_queries()]:
            reply = prom.query(expr)
            assert reply["status"] == "success", (title, expr, reply.get("error"))
            names = set(NAME.findall(expr))
            if names <= exported and title in dict(dashboard_queries()):
                expected_data += 1
                assert reply["data"]["result"], f"{title}: no data for {expr}"
        assert expected_data >= 10  # utilization, memory, temperature-less CPU panels, health
        _check_rules_healthy(prom)


@pytest.mark.slow
def test_alerts_fire_in_the_real_prometheus_when_a_gpu_is_lost(nvml_stack, fake_nvml):
    """WarptdDeviceDown goes pending in the live server once the double loses a GPU."""
    _, prom = nvml_stack
    _wait_for_data(prom)
    fake_nvml.gpus[1].lost = True

    def pending() -> bool:
        alerts = prom.api("alerts")["data"]["alerts"]
        return any(
            a["labels"]["alertname"] == "WarptdDeviceDown" and a["labels"]["device"] == "1" for a in alerts
        )

    assert wait_until(pending, timeout=30, interval=0.5)


@pytest.mark.slow
def test_workload_energy_sums_to_the_nodes_in_the_real_prometheus(settings, fake_nvml, sysfs, tmp_path):
    """--workloads on a daemon scraped by Prometheus: per kind, the workloads' joules plus the
    unattributed ones add up to the GPUs' energy and to the CPU package's, over the same window."""
    import threading

    from tests.e2e.test_workloads import DOCKER, SLURM_V1, SLURM_V2, Node
    from tests.workloads.test_energy import TICK_US
    from warptd.workloads.placement import CpuCgroup

    node = Node(tmp_path / "node")
    node.add(1001, SLURM_V1, uid=0)
    node.add(1002, SLURM_V2, uid=1001)
    node.add(1003, DOCKER, uid=0)
    gpu0, gpu1 = fake_nvml.gpus
    gpu0.processes, gpu1.processes = [(1001, 2 * 2**30), (1002, 2**30)], [(1003, 2**30), (1009, 2**30)]
    for gpu in fake_nvml.gpus:
        gpu.live = True  # energy drawn at its power over real time
    cgroups = [
        CpuCgroup("/slurm/uid_1000/job_4242", "cpu,cpuacct"),
        CpuCgroup("/system.slice/slurmstepd.scope/job_4243"),
        CpuCgroup(f"/system.slice/docker-{'c' * 64}.scope"),
    ]
    package = sysfs.rapl_zone("intel-rapl:0", "package-0", 10_000_000)
    settings.backends, settings.interval = ["nvidia", "cpu"], 0.5
    settings.procfs, settings.cgroupfs, settings.workloads = node.proc.root, node.cgroupfs, True
    stop = threading.Event()

    def feed() -> None:  # the CPU goes on: RAPL 4 J, the jobs 0.1 and 0.05 s, the node 0.8 s per step
        step = 0
        while not stop.wait(0.2) and step < 1000:  # bounded: at most 200 s
            step += 1
            package.write_text(str(10_000_000 + step * 4_000_000))
            for cgroup, used in zip(cgroups, (1e5, 5e4, 0.0), strict=True):
                node.cpu(cgroup, step * used)
            node.tick(int(8e5 / TICK_US))

    feeder = threading.Thread(target=feed, name="feed-cpu", daemon=True)
    feeder.start()
    daemon = Daemon(settings)
    daemon.start()
    prom = Prometheus(tmp_path, daemon.port)
    try:
        window = "15s"

        def spent(expr: str) -> str:
            return f"(({expr}) - ({expr.replace('}', '} offset ' + window)}))"

        def parts(source: str) -> str:
            return spent(
                f'sum(sum by (kind) (warptd_workload_energy_joules_total{{source="{source}"}}))'
                f' + sum(warptd_workload_energy_unattributed_joules_total{{source="{source}"}})'
            )

        gpus = spent('sum(warptd_device_energy_joules_total{backend="nvidia"})')
        cpu = spent('sum(warptd_energy_joules_total{source="rapl",domain="package-0"})')
        has_window = "count_over_time(warptd_workloads_dropped_total[20s]) >= 18"  # scraped each second
        assert wait_until(lambda: prom.has(has_window), timeout=60, interval=0.5)
        for name, mine, node_total in (
            ("accelerator", parts("accelerator"), gpus),
            ("cpu", parts("cpu"), cpu),
        ):
            reply = prom.query(f"({mine}) / ({node_total})")
            assert reply["status"] == "success", (name, reply.get("error"))
            ratio = float(reply["data"]["result"][0]["value"][1])
            # a scrape may fall between a sample's publication and the listener: one sample at an edge
            assert ratio == pytest.approx(1.0, abs=0.05), name
        kinds = prom.query('sum by (kind) (warptd_workload_energy_joules_total{source="accelerator"}) > 0')
        assert {r["metric"]["kind"] for r in kinds["data"]["result"]} == {"slurm_job", "container"}
        jobs = prom.query('warptd_workload_energy_joules_total{kind="slurm_job",source="cpu"}')
        assert {r["metric"]["workload"] for r in jobs["data"]["result"]} == {"4242", "4243"}
        assert prom.has(
            'warptd_workload_energy_unattributed_joules_total{source="accelerator"} > 0'
        )  # pid 1009
    finally:
        stop.set()
        feeder.join(timeout=5)
        prom.stop()
        daemon.stop()
