"""Energy per workload on AMD GPUs: amdsmi's process list (the amdsmi double under the real package)
feeding the workload split, with the energy the real ``amd`` backend reads from the same double.

The fixture /proc and cgroup layouts are tests/e2e/test_workloads.py's (its ``Node`` and cgroup lines).
Both the energy accumulator and each process's cumulative GFX time advance on the double's firmware
clock, so the scripted split is exact: a job busy 60 % of the time beside one busy 20 % takes 3/4."""

from __future__ import annotations

import pytest

from tests.conftest import assert_promtool_clean
from tests.doubles import test_amdsmi as doubles_amdsmi
from tests.doubles.amdsmi import FakeProcess
from tests.e2e import test_workloads as e2e_workloads
from tests.e2e.test_workloads import ENERGY
from tests.helpers import http, parse, select, serving, value, wait_until
from tests.processes.test_amd import two_jobs
from warptd.daemon import Daemon

node = e2e_workloads.node  # a fixture node (procfs, cgroupfs), a fixture


fake = doubles_amdsmi.fake  # the amdsmi double with one GPU, a fixture


@pytest.mark.slow
def test_the_daemon_opens_the_amd_source_with_workloads(fake, node, settings):
    two_jobs(node, fake, a=FakeProcess(1001, gfx_busy=0.5))
    settings.backends, settings.workloads = ["amd"], True
    settings.procfs, settings.cgroupfs = node.proc.root, node.cgroupfs
    with serving(settings) as daemon:
        (source,) = daemon.process_sources  # amd's
        assert daemon.workloads.sources == [source]

        def scraped() -> list:
            fake.advance(1.0)  # the GPU draws on, its firmware counting the energy
            return parse(http(daemon.port, "GET", "/metrics")[2].decode())

        assert wait_until(
            lambda: (
                select(scraped(), ENERGY, kind="slurm_job", workload="4242", source="accelerator")
                and value(scraped(), ENERGY, kind="slurm_job", workload="4242", source="accelerator") > 0
            ),
            timeout=10.0,
        )
        assert_promtool_clean(http(daemon.port, "GET", "/metrics")[2])


@pytest.mark.slow
def test_without_amdsmi_the_daemon_runs_with_no_amd_source(settings, node):
    settings.backends, settings.workloads = ["amd"], True
    settings.procfs, settings.cgroupfs = node.proc.root, node.cgroupfs
    daemon = Daemon(settings)  # import amdsmi fails here: no libamd_smi.so
    try:
        assert daemon.process_sources == []
        assert daemon.workloads is not None and daemon.workloads.sources == []
    finally:
        daemon.stop()
