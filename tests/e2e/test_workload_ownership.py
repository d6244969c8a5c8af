"""Issue 39's case on a real daemon (--workloads: its threads poll the NVML double, sample and serve over
loopback): a uid 1000 process whose cgroup is named after root's container is charged to its user,
never to root's container, in the JSON, on /metrics and in the CLI."""

from __future__ import annotations

import json
import time
from urllib.parse import quote

import pytest

from tests.e2e.test_processes import GIB
from tests.e2e.test_workloads import ENERGY, Node, workloads_daemon
from tests.helpers import http, parse, select, wait_until
from tests.processes.test_cgroup import MANAGER
from warptd.workloads.placement import user_name

ROOTS = "a" * 64
ALICES = f"user@1000.service/{ROOTS}"


@pytest.mark.slow
def test_root_s_container_is_charged_only_its_own_gpu(fake_nvml, tmp_path, capsys):
    from warptd.cli import main

    node = Node(tmp_path)
    node.add(2001, f"0::/system.slice/docker-{ROOTS}.scope\n", uid=0)
    node.add(2002, f"0::{MANAGER}/app.slice/{ROOTS}\n", uid=1000)
    node.add(2003, f"0::{MANAGER}/app.slice/jupyter.service\n", uid=1000)
    gpu0, gpu1 = fake_nvml.gpus
    gpu0.processes, gpu1.processes = [(2001, GIB)], [(2002, GIB), (2003, GIB)]
    gpu0.live, gpu1.live = True, True  # their counters run at their power: GPU 1 draws three times
    gpu0.power_mw, gpu1.power_mw = 100_000, 300_000
    daemon = workloads_daemon(node, tmp_path)

    def workload(kind: str, workload_id: str) -> dict | None:
        status, _, body = http(daemon.port, "GET", f"/workloads/{kind}/{quote(workload_id, safe='')}")
        return json.loads(body) if status == 200 else None

    def both_gpus_charged() -> bool:
        listed = json.loads(http(daemon.port, "GET", "/workloads")[2])["workloads"]
        return {d["device"] for view in listed for d in view["devices"]} == {"nvidia:0", "nvidia:1"}

    def totals() -> tuple[float, ...]:
        """GPU 0's energy as the daemon exports it, and what root's container and the user got."""
        samples = parse(http(daemon.port, "GET", "/metrics")[2].decode())
        found = [
            select(samples, "warptd_device_energy_joules_total", backend="nvidia", device="0"),
            *(
                select(samples, ENERGY, kind="container", workload=name, source="accelerator")
                for name in (ROOTS, ALICES)
            ),
        ]
        return tuple(sum(sample.value for sample in series) for series in found)

    try:
        assert wait_until(lambda: totals()[0] > 0, timeout=10.0)  # the first sample is in
        gpu0_before = totals()[0]  # GPU 0's counter before any workload's energy
        assert wait_until(both_gpus_charged, timeout=10.0, interval=0.05)
        time.sleep(2.0)  # a few hundred joules more on each GPU
        gpu0_total, roots_joules, alices_joules = totals()  # one scrape: the same samples for each
        gpu0_used = gpu0_total - gpu0_before
        assert 0 < roots_joules <= gpu0_used * 1.01 and alices_joules > 0  # never any of GPU 1's
        roots, alices = workload("container", ROOTS), workload("container", ALICES)
        assert roots is not None and alices is not None
        assert [d["device"] for d in roots["devices"]] == ["nvidia:0"] and roots["user"] == user_name(0)
        assert roots["accelerator_joules"] >= roots_joules  # read a little later
        assert [d["device"] for d in alices["devices"]] == ["nvidia:1"] and alices["user"] == user_name(1000)
        unit = workload("systemd_unit", "user@1000.service/jupyter.service")
        assert unit is not None and unit["user"] == user_name(1000)
        assert workload("systemd_unit", "jupyter.service") is None

        samples = parse(http(daemon.port, "GET", "/metrics")[2].decode())
        users = {s.labels["user"] for s in select(samples, ENERGY, kind="container", workload=ROOTS)}
        assert users == {user_name(0)}
        assert select(samples, ENERGY, kind="container", workload=ALICES, user=user_name(1000))

        url = f"http://127.0.0.1:{daemon.port}"
        assert main(["workload", "container", ALICES, "--url", url]) == 0
        printed = capsys.readouterr().out
        assert f"container {ALICES}" in printed and "nvidia:1" in printed and "nvidia:0" not in printed
    finally:
        daemon.stop()
