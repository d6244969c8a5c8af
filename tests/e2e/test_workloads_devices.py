"""Energy per workload on the accelerators whose SDK lists no processes (TPU, Tenstorrent, Gaudi, DRM
GPUs through sysfs): who holds each device from fixture /proc trees (fd links to the device's node,
DRM fdinfo) and sysfs class devices, each device's identity from the real backend over its double."""

from __future__ import annotations

import json
import os

import pytest
from prometheus_client import CollectorRegistry

from tests.conftest import assert_promtool_clean
from tests.helpers import parse, value
from tests.processes import holders
from tests.processes.holders import JOB_A, JOB_B, Holders, Rig, class_device
from tests.sysfs_tree import SysfsTree, drm_card
from warptd.exporter.text import render_text
from warptd.processes import device_files
from warptd.processes.collector import DeviceFilesCollector
from warptd.processes.device_nodes import device_key

files = holders.files  # the processes' open files, a fixture
node = holders.node  # a node running jobs A and B (processes 1001, 1002), a fixture
tenstorrent = holders.tenstorrent  # an n300 and a p150 listed by their backend, a fixture


@pytest.mark.slow
@pytest.mark.parametrize("refused", ["open", "readlink"])
def test_unreadable_fd_directories_are_skipped_and_counted(node, sysfs, tenstorrent, monkeypatch, refused):
    """Without CAP_SYS_PTRACE another user's process is refused: a daemon not running as root cannot
    open its fd directory (mode 0500, the process's owner), and root can list it but each readlink
    fails the kernel's ptrace access check (EACCES)."""
    files = Holders(node)
    files.open(1001, 5, "/dev/tenstorrent/1")
    files.open(1002, 5, "/dev/tenstorrent/1")
    other = str(node.proc.root / "1002" / "fd")
    real = getattr(os, refused)

    def no_ptrace(path, *args, **kwargs):
        where = os.readlink(f"/proc/self/fd/{kwargs['dir_fd']}") if "dir_fd" in kwargs else str(path)
        if where == other:
            raise PermissionError(13, "Permission denied", where)
        return real(path, *args, **kwargs)

    monkeypatch.setattr(device_files.os, refused, no_ptrace)
    rig = Rig(node, sysfs, {"tenstorrent": tenstorrent})
    rig.poll()
    assert rig.files.unreadable == 1
    registry = CollectorRegistry(auto_describe=False)
    registry.register(DeviceFilesCollector(rig.files))
    body = render_text(registry.collect())
    assert_promtool_clean(body)
    assert value(parse(body.decode()), "warptd_workload_unreadable_processes") == 1
    assert rig.holders("tenstorrent", device_key(tenstorrent[2])) == {1001}
    rig.joules("tenstorrent", {2: 30.0})
    assert rig.joules_of(JOB_A) == pytest.approx(30.0, rel=0.01)
    assert rig.tracker.view(*JOB_B) is None


@pytest.mark.slow
def test_a_daemon_with_workloads_attributes_a_drm_gpu_from_the_kernel(node, files, tmp_path):
    """End to end: --workloads on a real daemon with only the sysfs GPU backend (no NVML): its scanner
    thread finds the job on the render node and the sampler's energy goes to it."""
    from tests.helpers import http, wait_until
    from warptd.config import load_settings
    from warptd.daemon import Daemon

    sysfs = SysfsTree(tmp_path / "sys")
    energy = drm_card(sysfs, 0, "i915", "0000:00:02.0", {}, {"energy1_input": 5_000_000})
    class_device(sysfs, "drm", "renderD128", "dri/renderD128", energy)
    files.open(1001, 5, "/dev/dri/renderD128", "drm-driver:\ti915\ndrm-client-id:\t3\n")
    settings = load_settings(
        listen="127.0.0.1:0", backends=["hwmon"], interval=0.1, procfs=node.proc.root,
        cgroupfs=node.cgroupfs, sysfs=sysfs.root, workloads=True,
    )  # fmt: skip
    daemon = Daemon(settings)
    daemon.start()
    try:
        assert daemon.process_sources == [] and daemon.device_files is not None
        counter = energy / "hwmon" / "hwmon3" / "energy1_input"

        def attributed() -> bool:
            counter.write_text(f"{int(counter.read_text()) + 1_000_000}\n")
            status, _, body = http(daemon.port, "GET", "/workloads/slurm_job/4242")
            return status == 200 and json.loads(body)["accelerator_joules"] > 0

        assert wait_until(attributed, timeout=10.0, interval=0.05)
        job = json.loads(http(daemon.port, "GET", "/workloads/slurm_job/4242")[2])
        assert job["devices"][0]["device"] == "hwmon:0"
        metrics = parse(http(daemon.port, "GET", "/metrics")[2].decode())
        assert value(metrics, "warptd_workload_unreadable_processes") == 0
    finally:
        daemon.stop()
