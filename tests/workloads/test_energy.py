"""Whose energy is whose, through the tracker (the NVML double's process lists, fixture /proc and cgroup
trees): a user who names their own cgroups after root's container or a system unit is charged as
themselves, and users' units of one name are apart from each other and from the system's."""

from __future__ import annotations

import pytest

from tests.e2e.test_processes import GIB
from tests.e2e.test_workloads import ENERGY, Node, Rig
from tests.helpers import value
from tests.test_workloads import TICK_US
from warptd.processes.nvml import ProcessMonitor
from warptd.workloads.placement import CpuCgroup, user_name

ROOTS = "a" * 64  # root's container: its id is in /proc/PID/cgroup, which every user can read
MANAGER = "/user.slice/user-{uid}.slice/user@{uid}.service"


@pytest.fixture
def rig(tmp_path, fake_nvml):
    node = Node(tmp_path)
    monitor = ProcessMonitor(node.proc.root)
    rig = Rig(node, monitor, fake_nvml.gpus)
    rig.device_joules(0.0, 0.0)  # the counters' baselines
    rig.package_joules(0.0)
    yield rig
    monitor.stop()


def test_a_user_naming_their_cgroup_after_root_s_container_is_charged_as_themselves(rig, fake_nvml):
    """Issue 39's case: root's docker-<id>.scope on GPU 0, a uid 1000 process on GPU 1 in
    ``…/user@1000.service/app.slice/<id>``. Root's container once got both GPUs' energy."""
    rig.node.add(2001, f"0::/system.slice/docker-{ROOTS}.scope\n", uid=0)
    rig.node.add(2002, f"0::{MANAGER.format(uid=1000)}/app.slice/{ROOTS}\n", uid=1000)
    rig.node.add(2003, f"0::{MANAGER.format(uid=1001)}/app.slice/docker-{ROOTS}.scope\n", uid=1001)
    gpu0, gpu1 = fake_nvml.gpus
    gpu0.processes, gpu1.processes = [(2001, GIB)], [(2002, GIB), (2003, 3 * GIB)]
    rig.poll()
    rig.device_joules(5100.0, 8500.0)
    root_s = rig.workload("container", ROOTS)
    assert root_s.accelerator_joules == pytest.approx(5100.0)
    assert [d.device for d in root_s.devices] == ["nvidia:0"] and root_s.user == user_name(0)
    for uid, joules in ((1000, 8500.0 / 4), (1001, 8500.0 * 3 / 4)):
        theirs = rig.workload("container", f"user@{uid}.service/{ROOTS}")
        assert theirs.user == user_name(uid) and [d.device for d in theirs.devices] == ["nvidia:1"]
        assert theirs.accelerator_joules == pytest.approx(joules)
        samples = rig.scrape()
        labels = {"kind": "container", "workload": f"user@{uid}.service/{ROOTS}", "user": user_name(uid)}
        assert value(samples, ENERGY, source="accelerator", **labels) == pytest.approx(joules)
    assert value(rig.scrape(), ENERGY, source="accelerator", kind="container", workload=ROOTS) == 5100.0


def test_users_units_of_one_name_are_apart_from_each_other_and_from_the_system_s(rig, fake_nvml):
    """Every user's ``jupyter.service`` once merged with the system's into one workload."""
    rig.node.add(3001, "0::/system.slice/jupyter.service\n", uid=997)
    for pid, uid in ((3002, 1000), (3003, 1001)):
        rig.node.add(pid, f"0::{MANAGER.format(uid=uid)}/app.slice/jupyter.service\n", uid=uid)
    fake_nvml.gpus[0].processes = [(3001, GIB), (3002, 2 * GIB), (3003, GIB)]
    fake_nvml.gpus[1].processes = []
    rig.poll()
    rig.device_joules(400.0, 0.0)
    expected = {
        "jupyter.service": (user_name(997), 100.0),
        "user@1000.service/jupyter.service": (user_name(1000), 200.0),
        "user@1001.service/jupyter.service": (user_name(1001), 100.0),
    }
    for unit, (user, joules) in expected.items():
        view = rig.workload("systemd_unit", unit)
        assert (view.user, view.accelerator_joules) == (user, pytest.approx(joules)), unit
    assert len(rig.tracker.views()) == 3


def test_a_user_s_container_takes_its_cpu_time_out_of_the_user_s(rig, fake_nvml):
    """A rootless container's cgroup is inside its user's slice: its CPU time is its own, and the
    user's share is the rest of the slice, so no CPU second counts twice."""
    slice_ = CpuCgroup("/user.slice/user-1000.slice")
    scope = f"{MANAGER.format(uid=1000)}/user.slice/libpod-{ROOTS}.scope"
    rig.node.add(4001, f"0::{scope}/container\n", uid=1000)
    rig.node.add(4002, "0::/user.slice/user-1000.slice/session-2.scope\n", uid=1000)
    fake_nvml.gpus[0].processes, fake_nvml.gpus[1].processes = [(4001, GIB)], [(4002, GIB)]
    for cgroup in (slice_, CpuCgroup(scope)):
        rig.node.cpu(cgroup, 1e6)
    rig.poll()
    rig.node.cpu(CpuCgroup(scope), 3e6)  # 2 s in the container, 1 s more elsewhere in the slice
    rig.node.cpu(slice_, 4e6)
    rig.node.tick(round(8e6 / TICK_US))
    rig.poll()
    rig.package_joules(80.0)
    assert rig.workload("container", f"user@1000.service/{ROOTS}").cpu_joules == pytest.approx(20.0, rel=0.01)
    assert rig.workload("user", user_name(1000)).cpu_joules == pytest.approx(10.0, rel=0.01)
