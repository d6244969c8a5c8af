"""The amd and amdsmi backends against the amdsmi double (tests/doubles/amdsmi.py); no GPU or ROCm needed."""

from __future__ import annotations

import time

import pytest
import structlog.testing

from tests.backends.amd import test_backend as amd_backend
from tests.doubles.amdsmi import (
    FakeAmdsmi,
    FakeGpu,
    FakeProcess,
    amdsmi,
    wrapper,
)
from tests.e2e import test_workloads as e2e_workloads
from tests.e2e.test_processes import GIB, HOST, Proc
from tests.e2e.test_workloads import SERVICE, SLURM_V1, SLURM_V2, Node
from tests.processes.holders import JOB_A, JOB_B
from warptd.processes.amd import AmdProcessMonitor
from warptd.workloads.energy import WorkloadEnergy

node = e2e_workloads.node  # a fixture node (procfs, cgroupfs), a fixture

fake = amd_backend.fake  # the amdsmi double: GPU 0 and a Navi card, a fixture


pytestmark = pytest.mark.rig("amd", doubles=["fake"])


def test_violation_status_double_sleeps_and_answers_integer_percentages(fake):
    """The double as amd_smi.cc: two table reads 100 ms apart, integer percentages of those 100 ms."""
    gpu = fake.gpus[0]
    gpu.throttling.add("ppt_residency_acc")
    amdsmi.amdsmi_init()
    try:
        handle = amdsmi.amdsmi_get_processor_handles()[0]
        started = time.monotonic()
        status = amdsmi.amdsmi_get_violation_status(handle)
        assert time.monotonic() - started >= 0.1
        assert status["per_ppt_pwr"] == 100 and status["active_ppt_pwr"] is True
        assert status["per_socket_thrm"] == 0 and status["acc_counter"] == gpu.accumulation_counter
        navi = amdsmi.amdsmi_get_processor_handles()[1]
        with pytest.raises(amdsmi.AmdSmiLibraryException):
            amdsmi.amdsmi_get_violation_status(navi)  # no accumulators: NOT_SUPPORTED
    finally:
        amdsmi.amdsmi_shut_down()


def test_double_rejects_a_wrong_call(fake):
    amdsmi.amdsmi_init()
    handle = amdsmi.amdsmi_get_processor_handles()[0]
    assert isinstance(handle, wrapper.amdsmi_processor_handle)
    with pytest.raises(TypeError):
        amdsmi.amdsmi_get_power_info(handle, 0)  # one argument too many
    with pytest.raises(AssertionError, match="does not implement"):
        amdsmi.amdsmi_get_gpu_fan_rpms(handle, 0)
    with pytest.raises(amdsmi.AmdSmiParameterException):
        amdsmi.amdsmi_get_power_info(0)  # the package's own handle check runs
    assert amdsmi.amdsmi_get_power_info(handle)["current_socket_power"] == 480
    amdsmi.amdsmi_shut_down()


AMD_LIST = "amdsmi_get_gpu_process_list"


@pytest.fixture
def proc(tmp_path):
    proc = Proc(tmp_path / "proc")
    proc.add(1003, HOST)
    return proc


def test_amd_a_refused_device_is_asked_once_and_the_others_listed(proc):
    fake = FakeAmdsmi([FakeGpu(index=0), FakeGpu(index=1)])
    fake.gpus[0].unsupported = {AMD_LIST}
    fake.gpus[1].processes = [FakeProcess(1003, vram_bytes=GIB)]
    with fake.installed():
        monitor = AmdProcessMonitor(proc.root)
        try:
            for _ in range(3):
                monitor.poll()
            assert fake.calls(AMD_LIST) == 1 + 3
            calls = fake.calls(AMD_LIST)
            (listed,) = monitor.devices().values()
            assert (listed.index, dict(listed.memory_by_pid)) == (1, {1003: GIB})
            assert fake.calls(AMD_LIST) == calls  # reading the lists calls nothing
        finally:
            monitor.stop()
        assert fake.initialised == 0


# -- energy per workload: amdsmi's process list feeding the workload split, with the energy the real
# ``amd`` backend reads from the same double; both advance on the double's firmware clock ----------
SECONDS = 10.0


#: One GPU of the default kind, alone (``fake`` above has a Navi beside it).
@pytest.fixture
def one_gpu():
    fake = FakeAmdsmi([FakeGpu(index=0)])
    with fake.installed():
        yield fake
        assert fake.initialised == 0, "the amdsmi session leaked"


class AmdRig:
    """The real ``amd`` backend sampled by hand, its samples handed to the workload tracker as the
    daemon's sampler does, and the AMD process monitor and the tracker polled by hand."""

    def __init__(self, fake: FakeAmdsmi, node: Node, make_rig) -> None:
        self.fake, self.node = fake, node
        self.rig = make_rig("amd")
        backend = self.rig.loaded.accelerators[0]
        self.monitor = AmdProcessMonitor(node.proc.root, identity=backend.device_identity)
        self.tracker = WorkloadEnergy([self.monitor], node.proc.root, node.cgroupfs)
        self.rig.sampler.listeners.append(self.tracker.on_sample)
        self.joules = 0.0

    def period(self, seconds: float = SECONDS) -> None:
        """The GPUs run for ``seconds``; then both polls see who held them, then a sample hands the
        energy of the period over (the shares of the latest poll apply to it)."""
        before = self.energy()
        self.fake.advance(seconds)
        self.monitor.poll()
        self.tracker.poll()
        self.rig.tick("amd")
        self.joules += self.energy() - before

    def baseline(self) -> None:
        """The first polls and sample: the GFX counters' and the energy counter's baselines."""
        self.monitor.poll()
        self.tracker.poll()
        self.rig.tick("amd")

    def energy(self) -> float:
        return self.fake.gpus[0].energy_accumulator * 2.0**-16

    def joules_of(self, kind: str, workload_id: str) -> float:
        view = self.tracker.view(kind, workload_id)
        return 0.0 if view is None else view.accelerator_joules

    def unattributed(self) -> float:
        return self.tracker.unattributed().get("accelerator", 0.0)

    def close(self) -> None:
        self.monitor.stop()


@pytest.fixture
def amd(one_gpu, node, make_rig):
    rig = AmdRig(one_gpu, node, make_rig)
    rig.baseline()
    yield rig
    rig.close()


def two_jobs(node: Node, fake: FakeAmdsmi, **processes: FakeProcess) -> list[FakeProcess]:
    """Job 4242 (cgroup v1) as pid 1001 and job 4243 (cgroup v2) as pid 1002 on GPU 0."""
    node.add(1001, SLURM_V1, uid=0)
    node.add(1002, SLURM_V2, uid=1001)
    listed = [processes.get("a", FakeProcess(1001)), processes.get("b", FakeProcess(1002))]
    fake.gpus[0].processes = listed
    return listed


def test_two_slurm_jobs_on_one_mi300x_split_by_their_gfx_time(amd, node, one_gpu):
    two_jobs(
        node,
        one_gpu,
        a=FakeProcess(1001, vram_bytes=GIB, gfx_busy=0.6),
        b=FakeProcess(1002, vram_bytes=GIB, gfx_busy=0.2),
    )
    amd.period()  # first seen: no GFX baseline yet, so by memory held (1:1)
    amd.period()
    amd.period()
    first = amd.joules / 3  # 480 W for 10 s: 4800 J a period
    assert first == pytest.approx(4800.0, rel=1e-3)
    assert amd.joules_of(*JOB_A) == pytest.approx(first / 2 + 2 * first * 0.75, rel=0.01)
    assert amd.joules_of(*JOB_B) == pytest.approx(first / 2 + 2 * first * 0.25, rel=0.01)
    attributed = amd.joules_of(*JOB_A) + amd.joules_of(*JOB_B)
    assert attributed + amd.unattributed() == pytest.approx(amd.joules, rel=1e-9)
    assert amd.unattributed() == pytest.approx(0.0, abs=1e-6)
    uuid = amd.rig.loaded.accelerators[0].device_identity(0)
    assert list(amd.monitor.devices()) == [uuid]  # the key the backend's samples carry
    assert [d.device for d in amd.tracker.view(*JOB_A).devices] == ["amd:0"]


@pytest.mark.parametrize(
    ("a", "b"),
    [
        # ROCm compute queues bypass the DRM scheduler, so fdinfo's GFX time stays 0: CU occupancy tells
        (
            FakeProcess(1001, vram_bytes=GIB, cu_occupancy=60),
            FakeProcess(1002, vram_bytes=GIB, cu_occupancy=20),
        ),
        # neither GFX time nor occupancy: by VRAM held
        (FakeProcess(1001, vram_bytes=3 * GIB), FakeProcess(1002, vram_bytes=GIB)),
    ],
    ids=["cu_occupancy", "memory"],
)
def test_without_gfx_time_by_cu_occupancy_else_by_memory(amd, node, one_gpu, a, b):
    two_jobs(node, one_gpu, a=a, b=b)
    amd.period()
    amd.period()
    assert amd.joules_of(*JOB_A) == pytest.approx(amd.joules * 0.75, rel=0.01)
    assert amd.joules_of(*JOB_B) == pytest.approx(amd.joules * 0.25, rel=0.01)


@pytest.mark.parametrize(
    "refusal",
    [
        "no_perm",  # another user's process and warptd not root: the package raises for the whole list
        "out_of_resources",  # more processes than the package makes room for (1024)
    ],
)
def test_a_refused_process_list_leaves_the_energy_unattributed(amd, node, one_gpu, refusal):
    processes = two_jobs(node, one_gpu, a=FakeProcess(1001, gfx_busy=0.5), b=FakeProcess(1002, gfx_busy=0.5))
    amd.period()
    before = amd.joules_of(*JOB_A), amd.joules_of(*JOB_B)
    if refusal == "no_perm":
        processes[1].readable = False
    else:
        one_gpu.gpus[0].processes = [*processes, *(FakeProcess(5000 + i) for i in range(1024))]
    with structlog.testing.capture_logs() as logs:
        amd.period()
        amd.period()
    assert (amd.joules_of(*JOB_A), amd.joules_of(*JOB_B)) == before  # not split, not zeroed
    assert amd.unattributed() == pytest.approx(2 * 4800.0, rel=1e-3)
    assert amd.monitor.devices() == {}
    told = [(entry["event"], entry["log_level"]) for entry in logs if entry["event"].startswith("processes_")]
    if refusal == "no_perm":  # told once as a warning (run as root), then quietly at each poll
        assert told == [("processes_denied", "warning"), ("processes_failed", "debug")]
    else:
        assert told == [("processes_failed", "debug")] * 2
    processes[1].readable = True
    one_gpu.gpus[0].processes = processes
    amd.period()  # the list answers again: attributed again
    assert amd.joules_of(*JOB_A) > before[0]


def test_a_device_that_answered_again_is_warned_about_at_its_next_refusal(amd, node, one_gpu):
    """A refusal for want of permission is told once while it lasts; once the device answers again
    (the other user's process gone, say), a later refusal is a new one and warned about again."""
    processes = two_jobs(node, one_gpu, a=FakeProcess(1001, gfx_busy=0.5), b=FakeProcess(1002, gfx_busy=0.5))
    amd.period()
    with structlog.testing.capture_logs() as logs:
        for readable in (False, False, True, False):
            processes[1].readable = readable
            amd.period()
    told = [(entry["event"], entry["log_level"]) for entry in logs if entry["event"].startswith("processes_")]
    assert told == [
        ("processes_denied", "warning"),
        ("processes_failed", "debug"),
        ("processes_denied", "warning"),
    ]


def test_an_unreadable_process_listed_without_a_name_does_not_give_its_gfx_share_away(amd, node, one_gpu):
    """ROCm 6.2.0's CHANGELOG: another user's process is listed as "N/A" with 0 ns of GFX time."""
    one_gpu.unreadable_listed = True
    two_jobs(
        node,
        one_gpu,
        a=FakeProcess(1001, vram_bytes=GIB, gfx_busy=0.6),
        b=FakeProcess(1002, vram_bytes=GIB, gfx_busy=0.6, readable=False),
    )
    amd.period()
    amd.period()  # by GFX time job 4242 would take it all: by memory held instead, 1:1
    assert amd.joules_of(*JOB_A) == pytest.approx(amd.joules / 2, rel=0.01)
    assert amd.joules_of(*JOB_B) == pytest.approx(amd.joules / 2, rel=0.01)


def test_a_process_list_not_supported_is_asked_once(amd, node, one_gpu):
    two_jobs(node, one_gpu)
    one_gpu.gpus[0].unsupported = {AMD_LIST}
    calls = one_gpu.calls(AMD_LIST)
    amd.period()
    amd.period()
    assert one_gpu.calls(AMD_LIST) == calls + 1
    assert amd.unattributed() == pytest.approx(amd.joules, rel=1e-9)


def test_a_reused_pid_does_not_carry_its_gfx_time_over(amd, node, one_gpu):
    old, _ = two_jobs(
        node,
        one_gpu,
        a=FakeProcess(1001, vram_bytes=GIB, gfx_busy=0.3),
        b=FakeProcess(1002, vram_bytes=3 * GIB, gfx_busy=0.5),
    )
    amd.period()
    amd.period()
    job_a = amd.joules_of(*JOB_A)
    node.remove(1001)  # job 4242 ends; job 4250's process gets its pid, with a GFX count of its own
    node.add(1001, SLURM_V1.replace("job_4242", "job_4250"), uid=0, started=99_999)
    reused = FakeProcess(1001, vram_bytes=GIB, gfx_busy=0.9)
    one_gpu.gpus[0].processes = [reused, one_gpu.gpus[0].processes[1]]
    amd.period()  # 9 s of GFX time against the old process's 6: no baseline, so by memory (1 of 4 GiB)
    assert reused.gfx_ns > old.gfx_ns  # a counter that did not go back: only the start time tells
    assert amd.joules_of(*JOB_A) == job_a
    assert amd.joules_of("slurm_job", "4250") == pytest.approx(4800.0 * 0.25, rel=0.01)
    amd.period()  # now by GFX time: 0.9 against 0.5
    assert amd.joules_of("slurm_job", "4250") == pytest.approx(4800.0 * (0.25 + 0.9 / 1.4), rel=0.01)
    assert amd.joules_of(*JOB_A) == job_a


@pytest.fixture
def partitioned():
    fake = FakeAmdsmi.partitioned(1, 2)  # one MI300X in two compute partitions
    with fake.installed():
        yield fake


def test_the_partitions_of_a_gpu_are_split_together_under_the_partition_reporting_its_energy(
    partitioned, node, make_rig
):
    node.add(1001, SLURM_V1, uid=0)
    node.add(1002, SLURM_V2, uid=1001)
    node.add(1003, SERVICE, uid=0)
    both = FakeProcess(1003, gfx_busy=0.4)  # on both partitions: listed by each, counted once
    first, second = partitioned.gpus
    first.processes = [FakeProcess(1001, gfx_busy=0.2), both]
    second.processes = [FakeProcess(1002, gfx_busy=0.2), both]
    rig = AmdRig(partitioned, node, make_rig)
    try:
        rig.baseline()
        for _ in range(2):
            rig.period()
        identity = rig.rig.loaded.accelerators[0].device_identity(0)
        assert identity.endswith("/0")
        assert list(rig.monitor.devices()) == [identity]
        assert rig.joules == pytest.approx(2 * 4800.0, rel=1e-3)  # the socket's, on the first partition
        assert rig.joules_of(*JOB_A) == pytest.approx(rig.joules * 0.25, rel=0.01)
        assert rig.joules_of(*JOB_B) == pytest.approx(rig.joules * 0.25, rel=0.01)  # on the other partition
        assert rig.joules_of("systemd_unit", "ollama.service") == pytest.approx(rig.joules * 0.5, rel=0.01)
    finally:
        rig.close()


def test_processes_are_filed_under_the_identity_the_backend_kept(partitioned, node, make_rig):
    """Partition 1's PCI address fails while the backend discovers its devices, so it kept partition 0
    as a whole GPU (its bare UUID) and names its samples so: the processes go where the energy does,
    not under the ``<uuid>/0`` the monitor would tell once the address answers."""
    node.add(1001, SLURM_V1, uid=0)
    partitioned.gpus[0].processes = [FakeProcess(1001)]
    partitioned.gpus[1].raises = {"amdsmi_get_gpu_device_bdf": wrapper.AMDSMI_STATUS_BUSY}
    rig = AmdRig(partitioned, node, make_rig)
    try:
        partitioned.gpus[1].raises = {}
        rig.baseline()
        rig.period()
        assert list(rig.monitor.devices()) == [partitioned.gpus[0].uuid]
        assert rig.joules_of(*JOB_A) == pytest.approx(4800.0, rel=1e-3)
    finally:
        rig.close()
