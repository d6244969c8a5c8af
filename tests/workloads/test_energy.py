"""Energy per workload (--workloads) through the tracker: the NVML double (real pynvml structs)
reporting pids, memory and SM samples, fixture /proc and cgroup trees for each layout, and RAPL
domains as the sampler hands them over. Each workload's share of the devices' and the CPU packages'
energy, ended jobs, the kinds and the cap, the listeners; and whose energy is whose: a user who
names their own cgroups after root's container or a system unit is charged as themselves, and
users' units of one name are apart from each other and from the system's."""

from __future__ import annotations

import os
import threading
from collections.abc import Mapping

import pytest

from tests.e2e import test_workloads as e2e_workloads
from tests.e2e.test_processes import GIB
from tests.e2e.test_workloads import CID, ENERGY, SLURM_V1, USER, Rig, layouts
from tests.helpers import select, value
from warptd.models import DeviceReading
from warptd.sampling.snapshot import DeviceSample
from warptd.sampling.tracks import DeviceTrack
from warptd.workloads.placement import CpuCgroup, WorkloadKey, user_name

monitor = e2e_workloads.monitor  # the NVML process monitor on the fixture node, a fixture
node = e2e_workloads.node  # a fixture node (procfs, cgroupfs), a fixture

rig = e2e_workloads.rig  # the workload tracker on the fixture node, counters at their baselines, a fixture

ROOTS = "a" * 64  # root's container: its id is in /proc/PID/cgroup, which every user can read
MANAGER = "/user.slice/user-{uid}.slice/user@{uid}.service"
UNATTRIBUTED = "warptd_workload_energy_unattributed_joules_total"
DROPPED = "warptd_workloads_dropped_total"
TICK_US = 1e6 / os.sysconf("SC_CLK_TCK")
USER_SERVICE = "0::/user.slice/user-1000.slice/user@1000.service/app.slice/jupyter.service\n"
V1_JOB = "/slurm/uid_1000/job_4242"
V2_JOB = "/system.slice/slurmstepd.scope/job_4243"
JUPYTER = "/user.slice/user-1000.slice/user@1000.service/app.slice/jupyter.service"
USER_1000 = ("user", user_name(1000))
#: A user's own unit: named under its manager, so that it merges with no other user's or the system's.
JUPYTER_UNIT = ("systemd_unit", "user@1000.service/jupyter.service")


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


def test_each_workload_gets_its_scripted_share_and_the_parts_sum_to_the_device(rig, node, fake_nvml):
    layouts(node, fake_nvml)
    rig.poll({0: {1001: 60, 1002: 20, 1009: 20}})
    rig.device_joules(100.0, 80.0)
    rig.poll({0: {1001: 30, 1002: 10, 1009: 10}})
    rig.device_joules(50.0, 40.0)
    expected = {
        ("slurm_job", "4242"): (90.0, "nvidia:0"),  # SM 60 % of 150 J
        ("slurm_job", "4243"): (30.0, "nvidia:0"),
        ("systemd_unit", "ollama.service"): (30.0, "nvidia:1"),  # by memory held: 1 of 4 GiB of 120 J
        ("container", CID): (60.0, "nvidia:1"),
        ("user", user_name(1000)): (30.0, "nvidia:1"),
    }
    for (kind, workload_id), (joules, device) in expected.items():
        view = rig.workload(kind, workload_id)
        assert view.accelerator_joules == pytest.approx(joules, rel=0.01), (kind, workload_id)
        assert [d.device for d in view.devices] == [device]
    job = rig.workload("slurm_job", "4242")
    assert (job.user, job.steps, job.ended_at) == (user_name(1000), ["0"], None)
    assert rig.workload("slurm_job", "4243").user == user_name(1001)
    unattributed = rig.tracker.unattributed()["accelerator"]
    assert unattributed == pytest.approx(30.0, rel=0.01)  # the unreadable pid's SM share
    attributed = sum(view.accelerator_joules for view in rig.tracker.views())
    assert attributed + unattributed == pytest.approx(150.0 + 120.0, rel=1e-9)


def test_even_split_where_neither_sm_nor_memory_tells(rig, node, fake_nvml):
    layouts(node, fake_nvml)
    fake_nvml.gpus[1].processes = [(1003, None), (1004, None), (1005, None)]  # memory not available
    rig.poll()
    rig.device_joules(0.0, 90.0)
    for kind, workload_id in (
        ("systemd_unit", "ollama.service"),
        ("container", CID),
        ("user", user_name(1000)),
    ):
        assert rig.workload(kind, workload_id).accelerator_joules == pytest.approx(30.0, rel=1e-9)


def test_an_ended_job_keeps_its_total_for_the_retention_then_goes(rig, node, fake_nvml):
    layouts(node, fake_nvml)
    v1 = CpuCgroup("/slurm/uid_1000/job_4242", "cpu,cpuacct")
    node.cpu(v1, 0)
    rig.poll({0: {1001: 50, 1002: 50}})
    rig.device_joules(100.0, 0.0)
    node.remove(1001)  # job 4242 ends: its process and its cgroup go
    node.gone(v1)
    fake_nvml.gpus[0].processes = [(1002, GIB)]
    rig.clock.now += 1.0
    rig.poll({0: {1002: 50}})
    rig.device_joules(100.0, 0.0)
    job = rig.workload("slurm_job", "4242")
    assert job.accelerator_joules == pytest.approx(50.0, rel=0.01)
    assert job.ended_at is not None
    assert value(
        rig.scrape(), ENERGY, kind="slurm_job", workload="4242", source="accelerator"
    ) == pytest.approx(50.0, rel=0.01)
    rig.clock.now += 599.0  # 600 s after it was last seen: still there
    rig.poll({0: {1002: 50}})
    assert rig.workload("slurm_job", "4242") is not None
    rig.clock.now += 2.0
    rig.poll({0: {1002: 50}})
    assert rig.workload("slurm_job", "4242") is None
    assert not select(rig.scrape(), ENERGY, workload="4242")
    assert select(rig.scrape(), ENERGY, workload="4243")


def test_a_counter_reset_is_the_samplers_to_take_and_a_late_total_adds_nothing(node, monitor, fake_nvml):
    """The split gets warptd's totals, not the raw counter: a driver reload that sets GPU 0's counter
    back near 0 goes on counting (the track takes it), so no joule after it is lost. A lower total can
    only be an older read handed over late (a fast and a scheduled read crossing): it adds nothing and
    is no new baseline, else the joules up to the newer read would be counted twice."""
    rig = Rig(node, monitor, fake_nvml.gpus)
    node.add(1001, SLURM_V1, uid=0)
    gpu0, gpu1 = fake_nvml.gpus
    gpu0.processes, gpu1.processes = [(1001, GIB)], []
    rig.poll({0: {1001: 100}})
    track = DeviceTrack("nvidia", 0, gpu0.uuid)

    def read(raw: float, at: float) -> DeviceSample:
        sample = track.update(DeviceReading(index=0, uuid=gpu0.uuid, energy_counter_joules=raw), at)
        assert sample is not None
        return sample

    totals = []
    for raw in (0.0, 500.0, 20.0, 320.0):  # 20: the counter restarted (a GPU reset), then counted 300
        rig.clock.now += 1.0
        rig.poll({0: {1001: 100}})
        sample = read(raw, rig.clock.now)
        totals.append(sample.energy_joules)
        rig.tracker.on_sample("nvidia", [sample], None, rig.clock.now)
    assert totals == [0.0, 500.0, 520.0, 820.0]  # monotonic across the reset
    assert rig.workload("slurm_job", "4242").accelerator_joules == pytest.approx(820.0)
    late = read(400.0, rig.clock.now + 0.5)  # read before the next one, handed over after it
    rig.clock.now += 1.0
    rig.poll({0: {1001: 100}})
    newer = read(500.0, rig.clock.now)
    rig.tracker.on_sample("nvidia", [newer], None, rig.clock.now)
    rig.tracker.on_sample("nvidia", [late], None, rig.clock.now)
    assert (late.energy_joules, newer.energy_joules) == (900.0, 1000.0)
    assert rig.workload("slurm_job", "4242").accelerator_joules == pytest.approx(1000.0)
    rig.clock.now += 1.0
    rig.poll({0: {1001: 100}})
    rig.tracker.on_sample("nvidia", [read(600.0, rig.clock.now)], None, rig.clock.now)
    assert rig.workload("slurm_job", "4242").accelerator_joules == pytest.approx(1100.0)  # not 1200


class SlowListener:
    """A workload listener that holds the sampler's (or the poller's) thread until released, keeping
    what it was handed."""

    def __init__(self) -> None:
        self.entered, self.release = threading.Event(), threading.Event()
        self.handed: list[Mapping] = []

    def after_poll(self, workloads: Mapping) -> None:
        self._hold(workloads)

    def after_sample(self, backend, devices, domains, at, workloads: Mapping) -> None:
        self._hold(workloads)

    def _hold(self, workloads: Mapping) -> None:
        self.handed.append(workloads)
        self.entered.set()
        assert self.release.wait(timeout=10.0)


def _promptly(call, timeout: float = 2.0):
    """``call()`` on a thread, joined for at most ``timeout`` s: its result, or None if it waited."""
    got = []
    thread = threading.Thread(target=lambda: got.append(call()), daemon=True)
    thread.start()
    thread.join(timeout)
    return got[0] if got else None


@pytest.mark.parametrize("told", ["sample", "poll"])
def test_a_scrape_never_waits_for_the_listeners(rig, node, fake_nvml, told):
    """The split tells its listeners (each workload's recording: 46 ms at 1000 workloads) after it
    let go of its lock, with a frozen copy of the totals: a scrape reads them meanwhile."""
    node.add(1001, SLURM_V1, uid=0)
    fake_nvml.gpus[0].processes, fake_nvml.gpus[1].processes = [(1001, GIB)], []
    rig.poll({0: {1001: 100}})
    rig.device_joules(100.0, 0.0)
    slow = SlowListener()
    rig.tracker.listeners.append(slow)
    held = threading.Thread(
        target=(lambda: rig.device_joules(50.0, 0.0)) if told == "sample" else rig.poll, daemon=True
    )
    held.start()
    try:
        assert slow.entered.wait(timeout=5.0)
        totals = _promptly(rig.tracker.totals)
        assert totals is not None, "totals() waited for a listener"
        scraped = _promptly(rig.scrape)
        assert scraped is not None, "the collector waited for a listener"
        assert value(scraped, ENERGY, kind="slurm_job", workload="4242", source="accelerator") > 0
        handed = slow.handed[0][WorkloadKey("slurm_job", "4242")]
        assert handed.ended_at is None and handed.devices["nvidia:0"][1] == pytest.approx(
            150.0 if told == "sample" else 100.0
        )
    finally:
        slow.release.set()
        held.join(timeout=5.0)
    assert not held.is_alive()
    rig.tracker.listeners.remove(slow)
    rig.device_joules(30.0, 0.0)  # a copy: what the listener was handed does not change after
    assert handed.devices["nvidia:0"][1] == pytest.approx(150.0 if told == "sample" else 100.0)
    with pytest.raises(TypeError):
        handed.devices["nvidia:0"] = ("", 0.0)  # type: ignore[index]


def test_cpu_packages_split_by_cgroup_cpu_time_idle_unattributed(rig, node, fake_nvml):
    layouts(node, fake_nvml)
    node.add(1006, USER_SERVICE, uid=1000)  # a user's own service: its CPU time is in the user's slice too
    fake_nvml.gpus[1].processes = [*fake_nvml.gpus[1].processes, (1006, GIB)]
    cgroups = {
        ("slurm_job", "4242"): CpuCgroup(V1_JOB, "cpu,cpuacct"),  # cpuacct.usage, ns
        ("slurm_job", "4243"): CpuCgroup(V2_JOB),  # cpu.stat, µs
        USER_1000: CpuCgroup("/user.slice/user-1000.slice"),
        JUPYTER_UNIT: CpuCgroup(JUPYTER),
    }
    start = {key: 5e6 for key in cgroups}
    for key, cgroup in cgroups.items():
        node.cpu(cgroup, start[key])
    rig.poll()
    spent = {  # µs of CPU time in the period; the user's slice holds jupyter's second too
        ("slurm_job", "4242"): 2.0e6,
        ("slurm_job", "4243"): 1.0e6,
        ("user", user_name(1000)): 3.0e6,
        JUPYTER_UNIT: 1.0e6,
    }
    for key, cgroup in cgroups.items():
        node.cpu(cgroup, start[key] + spent[key])
    node_us = 8 * 1.25e6  # 8 CPUs over 1.25 s
    node.tick(round(node_us / TICK_US))
    rig.poll()
    rig.package_joules(50.0)
    own = {**spent, ("user", user_name(1000)): 2.0e6}
    for (kind, workload_id), used in own.items():
        assert rig.workload(kind, workload_id).cpu_joules == pytest.approx(50.0 * used / node_us, rel=0.01)
    assert rig.workload("container", CID).cpu_joules is None  # its cgroup has no cpu.stat here: absent
    unattributed = rig.tracker.unattributed()["cpu"]
    assert unattributed == pytest.approx(50.0 * (1 - 6.0e6 / node_us), rel=0.01)
    total = sum(view.cpu_joules or 0.0 for view in rig.tracker.views()) + unattributed
    assert total == pytest.approx(50.0, rel=1e-9)
    samples = rig.scrape()
    assert value(samples, ENERGY, kind="slurm_job", workload="4243", source="cpu") == pytest.approx(
        5.0, rel=0.01
    )
    assert value(samples, UNATTRIBUTED, source="cpu") == pytest.approx(unattributed)


def test_kinds_and_the_cap(node, monitor, fake_nvml):
    layouts(node, fake_nvml)
    rig = Rig(node, monitor, fake_nvml.gpus, kinds={"slurm_job", "user"}, max_workloads=2)
    rig.device_joules(0.0, 0.0)
    rig.poll({0: {1001: 50, 1002: 50}})
    rig.device_joules(100.0, 40.0)
    # the service and the container are not chosen kinds: they count for their users (uid 0 here),
    # who are over the cap of two, as is the user of pid 1005
    assert {(v.kind, v.id) for v in rig.tracker.views()} == {("slurm_job", "4242"), ("slurm_job", "4243")}
    assert rig.tracker.dropped == 2
    assert rig.tracker.unattributed()["accelerator"] == pytest.approx(40.0)
    rig.poll({0: {1001: 50, 1002: 50}})
    assert rig.tracker.dropped == 2  # counted once per workload, not per poll
    assert value(rig.scrape(), DROPPED) == 2


def test_a_user_first_seen_outside_its_slice_takes_the_slice_for_cpu(rig, node, fake_nvml):
    node.add(1010, "0::/\n", uid=1000)  # e.g. started by a root-cgroup daemon, under the user's uid
    fake_nvml.gpus[0].processes = [(1010, GIB)]
    rig.poll()
    slice_ = CpuCgroup("/user.slice/user-1000.slice")
    node.cpu(slice_, 1e6)
    node.add(1011, USER, uid=1000)
    fake_nvml.gpus[0].processes = [(1010, GIB), (1011, GIB)]
    rig.poll()
    node.cpu(slice_, 2e6)
    node.tick(int(4e6 / TICK_US))
    rig.poll()
    rig.package_joules(40.0)
    assert rig.workload(*USER_1000).cpu_joules == pytest.approx(10.0, rel=0.01)


def test_a_slurm_job_on_no_device_is_found_in_the_cgroup_tree_for_its_cpu_share(rig, node, fake_nvml):
    v2 = CpuCgroup("/system.slice/slurmstepd.scope/job_5000")
    v1 = CpuCgroup("/slurm/uid_1003/job_5001", "cpu,cpuacct")
    node.cpu(v2, 0)
    node.cpu(v1, 0)
    task = node.cgroupfs / "system.slice/slurmstepd.scope/job_5000/step_0/user/task_0"
    task.mkdir(parents=True)
    (task / "cgroup.procs").write_text("2000\n")
    node.add(2000, "0::/system.slice/slurmstepd.scope/job_5000/step_0/user/task_0\n", uid=1002)
    (node.cgroupfs / "system.slice/slurmstepd.scope/job_x").mkdir()  # not a job: ignored
    rig.poll()
    assert {(v.id, v.user) for v in rig.tracker.views()} == {
        ("5000", user_name(1002)),
        ("5001", user_name(1003)),
    }
    node.cpu(v2, 1e6)
    node.cpu(v1, 3e6)
    node.tick(int(8e6 / TICK_US))
    rig.poll()
    rig.package_joules(80.0)
    assert rig.workload("slurm_job", "5000").cpu_joules == pytest.approx(10.0, rel=0.01)
    assert rig.workload("slurm_job", "5001").cpu_joules == pytest.approx(30.0, rel=0.01)
    assert rig.workload("slurm_job", "5000").devices == []
    node.gone(v2)
    rig.poll()
    assert rig.workload("slurm_job", "5000").ended_at is not None
    assert rig.workload("slurm_job", "5001").ended_at is None


def test_an_idle_device_and_a_stale_poll_are_unattributed(rig, node, fake_nvml):
    layouts(node, fake_nvml)
    fake_nvml.gpus[0].processes = []
    rig.poll()
    rig.device_joules(40.0, 0.0)  # nobody on GPU 0
    rig.clock.now += 10.0  # three intervals without a poll: who holds GPU 1 is not known any more
    rig.device_joules(0.0, 60.0)
    assert rig.tracker.unattributed()["accelerator"] == pytest.approx(100.0)
    assert rig.workload("container", CID).accelerator_joules == 0.0


def test_a_pid_reused_by_a_new_job_does_not_carry_energy_over(rig, node, fake_nvml):
    layouts(node, fake_nvml)
    rig.poll({0: {1001: 100}})
    rig.device_joules(100.0, 0.0)
    node.remove(1001)
    node.add(1001, SLURM_V1.replace("job_4242", "job_4250"), started=99999)  # the same pid, a new process
    rig.poll({0: {1001: 100}})
    rig.device_joules(30.0, 0.0)
    assert rig.workload("slurm_job", "4242").accelerator_joules == pytest.approx(100.0, rel=0.01)
    assert rig.workload("slurm_job", "4250").accelerator_joules == pytest.approx(30.0, rel=0.01)
