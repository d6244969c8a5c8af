"""The sampler's scheduling under races and faults: reads published in the order made, one hung device
held apart while the backend's other devices are read."""

from __future__ import annotations

import threading
import time
from typing import ClassVar

import pynvml
import pytest

from tests.backends.nvidia import test_backend as nvidia_backend
from tests.backends.nvidia import test_session as nvidia_session
from tests.backends.nvidia.test_backend import ACTIVITY, mig
from tests.backends.tenstorrent import test_backend as tenstorrent
from tests.backends.tenstorrent.test_backend import VALUES
from tests.doubles.nvml import GIB, FakeMig, FakeNvml
from tests.helpers import Rig, parse, select, value, wait_until
from tests.sampling.test_snapshot import ScriptedBackend
from warptd.exporter.exposition import Exposition
from warptd.models import DeviceReading, GPUInfo
from warptd.sampling.sampler import Sampler
from warptd.sampling.snapshot import Snapshot

rediscover_now = nvidia_session.rediscover_now  # rediscovery due at the next tick, a fixture


def test_an_edge_read_is_published_before_the_read_queued_behind_it(settings, fake_nvml):
    """Issue 38 #1: the edge read (energy counter, throttle times) was published from its caller's
    thread, so a scheduled read queued behind it could publish first from the worker, and the edge's
    older sample was then dropped as late. Here the caller is slow to publish, as a busy thread is."""
    settings.backends = ["nvidia"]
    rig = Rig(settings)
    sampler = rig.sampler
    worker = sampler.reads.workers["nvidia"]
    published: list[tuple[float, int]] = []
    sampler.listeners.append(lambda name, devices, domains, at: published.append((at, len(devices or ()))))
    publish = sampler.publisher.publish

    def slow_off_the_worker(*args, **kwargs):
        if not threading.current_thread().name.startswith("warptd-nvidia"):
            time.sleep(0.3)  # the edge's caller, descheduled between its read and its publication
        publish(*args, **kwargs)

    sampler.publisher.publish = slow_off_the_worker
    sampler.tick("nvidia")
    published.clear()
    gate = threading.Event()
    worker.submit(lambda lane: gate.wait())  # busy: the edge read and the scheduled one queue up
    edge = threading.Thread(target=sampler.sample_watched, args=("nvidia", {0, 1}), kwargs={"edge": True})
    edge.start()
    assert wait_until(lambda: worker._queue.qsize() == 1, timeout=5)
    sampler.reads.hand_off("nvidia")  # the next scheduled tick, queued behind the edge read
    gate.set()
    edge.join(timeout=5)
    assert wait_until(lambda: len(published) == 2, timeout=5)
    (edge_at, edge_devices), (tick_at, tick_devices) = published
    assert edge_at < tick_at  # published in the order read
    assert edge_devices == 2 and tick_devices == 2  # neither dropped as older
    rig.close()


class GatedBackend(ScriptedBackend):
    """Three devices whose reads block while their gate is shut, and a set-up that may block too:
    any backend, not NVIDIA's, since holding a hung device apart is the sampler's."""

    name: ClassVar[str] = "gated"

    def __init__(self, settings) -> None:
        super().__init__(settings)
        self.gates = {i: threading.Event() for i in range(3)}
        self.setup = threading.Event()
        for gate in (*self.gates.values(), self.setup):
            gate.set()
        self.power = 100.0

    def begin_sample(self) -> None:
        self.setup.wait(30)

    def read_device(self, index: int) -> DeviceReading:
        self.gates[index].wait(30)
        return DeviceReading(index=index, power_watts=self.power + index)

    def get_device_count(self) -> int:
        return 3

    def list_devices(self) -> list[GPUInfo]:
        return [GPUInfo(index=i, model="Gated", uuid=f"G-{i}") for i in range(3)]


def _power(samples, device: str) -> list[float]:
    return [s.value for s in select(samples, "warptd_device_power_watts", backend="gated", device=device)]


@pytest.fixture
def gated(settings):
    settings.interval, settings.sample_timeout = 0.05, 0.3
    backend = GatedBackend(settings)
    snapshot = Snapshot(stale_after=settings.stale_after)
    sampler = Sampler(settings, snapshot, [backend], [])
    exposition = Exposition(snapshot)
    yield backend, sampler, lambda: parse(exposition.render(None, None)[0].decode())
    for gate in (*backend.gates.values(), backend.setup):
        gate.set()
    sampler.stop()


def test_a_device_whose_read_hangs_is_held_apart_and_the_others_stay_current(gated):
    """Issue 39 #3, in the sampling layer: a device's read that blocks is cut at --sample-timeout;
    the device reads down (counted under its index) while the backend's other devices are read every
    sample, and it is read again once its call returns."""
    backend, sampler, scrape = gated
    sampler.start()
    assert wait_until(lambda: (sampler.snapshot.get("gated").samples or 0) >= 2, timeout=5)
    backend.gates[1].clear()
    assert wait_until(lambda: sampler.reads.workers["gated"].held() == {1}, timeout=5)
    backend.power = 200.0  # read every sample: the others follow it
    assert wait_until(lambda: _power(scrape(), "2") == [202], timeout=5)
    samples = scrape()
    assert value(samples, "warptd_backend_up", backend="gated") == 1
    assert value(samples, "warptd_device_power_watts", backend="gated", device="0") == 200
    assert value(samples, "warptd_device_up", backend="gated", device="1") == 0
    assert not select(samples, "warptd_device_power_watts", backend="gated", device="1")
    hung = {"backend": "gated", "device": "1"}
    assert value(samples, "warptd_sample_errors_total", kind="timeout", **hung) == 1
    assert value(samples, "warptd_sample_errors_total", kind="hung", **hung) >= 1
    assert value(samples, "warptd_sample_errors_total", backend="gated", kind="timeout", device="") == 0
    backend.gates[1].set()
    assert wait_until(lambda: _power(scrape(), "1") == [201], timeout=5)
    assert value(scrape(), "warptd_sample_errors_total", kind="timeout", **hung) == 1


def test_a_backend_hung_outside_its_devices_reads_is_stale_as_a_whole(gated):
    """Where the read blocks outside any one device's read (its set-up), nothing is held apart: the
    backend is stale, its series dropped, and counted timeout, then hung per skipped sample."""
    backend, sampler, scrape = gated
    sampler.start()
    assert wait_until(lambda: (sampler.snapshot.get("gated").samples or 0) >= 2, timeout=5)
    backend.setup.clear()
    assert wait_until(lambda: value(scrape(), "warptd_backend_up", backend="gated") == 0, timeout=5)
    assert wait_until(
        lambda: value(scrape(), "warptd_sample_errors_total", backend="gated", kind="hung", device="") >= 1,
        timeout=5,
    )
    samples = scrape()
    assert not select(samples, "warptd_device_up", backend="gated")
    assert value(samples, "warptd_sample_errors_total", backend="gated", kind="timeout", device="") == 1
    assert sampler.reads.workers["gated"].held() == frozenset()
    backend.setup.set()
    assert wait_until(lambda: value(scrape(), "warptd_backend_up", backend="gated") == 1, timeout=5)


DEV0 = {"backend": "nvidia", "device": "0"}


DEV1 = {"backend": "nvidia", "device": "1"}


@pytest.mark.rig("nvidia", doubles=["fake_nvml"])
def test_nvml_shut_down_under_the_daemon_recovers(rig, fake_nvml, rediscover_now):
    rig.tick()
    pynvml.nvmlShutdown()  # other code in the process drops NVML's last reference
    samples = rig.tick("nvidia")
    assert value(samples, "warptd_device_up", **DEV0) == 0  # unreadable, not frozen or zero
    assert not select(samples, "warptd_device_power_watts", **DEV0)
    samples = rig.tick("nvidia")  # reopened NVML before reading
    assert value(samples, "warptd_device_up", **DEV0) == 1
    assert value(samples, "warptd_device_power_watts", **DEV1) == 120
    assert value(samples, "warptd_backend_up", backend="nvidia") == 1


@pytest.mark.rig("nvidia", doubles=["fake_nvml"])
def test_a_reopen_opens_each_gpu_afresh_keeping_only_its_totals_and_identity(rig, fake_nvml, rediscover_now):
    """A reopened NVML gets new device objects in one go: a call one GPU lacked under the old NVML is
    asked again (a reload may bring it), the other GPU is not disturbed by it; the field latency total
    (warptd's own) and the identity last listed carry over."""
    backend, encoder = rig.loaded.accelerators[0], "nvmlDeviceGetEncoderUtilization"
    for gpu in fake_nvml.gpus:
        gpu.encoder_util = 20  # encoding: an encoder NVML gives no count of shows once active
    fake_nvml.gpus[1].unsupported.add(encoder)
    samples = rig.tick("nvidia")
    assert not select(samples, "warptd_device_encoder_utilization_ratio", **DEV1)
    assert select(samples, "warptd_device_encoder_utilization_ratio", **DEV0)
    before = backend.gpus
    assert "warptd_device_encoder_utilization_ratio" in before[1].guard.unsupported
    assert "warptd_device_encoder_utilization_ratio" not in before[0].guard.unsupported
    totals, latency = (
        before[0].batch.totals,
        value(samples, "warptd_device_nvml_field_latency_seconds_total", **DEV0),
    )
    fake_nvml.gpus[1].unsupported.discard(encoder)  # the driver reloaded with it
    pynvml.nvmlShutdown()
    rig.tick("nvidia")
    samples = rig.tick("nvidia")  # reopened NVML before reading
    assert all(new is not old for new, old in zip(backend.gpus, before, strict=True))
    assert backend.gpus[0].batch.totals is totals
    assert backend.gpus[1].identity.known == before[1].identity.known
    assert value(samples, "warptd_device_encoder_utilization_ratio", **DEV1) >= 0
    assert value(samples, "warptd_device_nvml_field_latency_seconds_total", **DEV0) >= latency


@pytest.mark.rig("nvidia", doubles=["fake_nvml"])
def test_gpu_disappears_and_comes_back_with_a_new_uuid(rig, fake_nvml, rediscover_now):
    first = rig.tick("nvidia")
    old_uuid = fake_nvml.gpus[1].uuid
    replaced = fake_nvml.gpus.pop(1)  # falls off the bus
    samples = rig.tick("nvidia")
    assert value(samples, "warptd_device_up", backend="nvidia", device="1", uuid=old_uuid) == 0
    samples = rig.tick("nvidia")  # re-enumerated: one GPU left; the gone one stays down (issue 39 #3)
    assert value(samples, "warptd_device_up", backend="nvidia", device="1", uuid=old_uuid) == 0
    assert value(samples, "warptd_device_up", **DEV0) == 1
    replaced.uuid = "GPU-replacement-0000"
    fake_nvml.gpus.append(replaced)  # a replacement board in the same slot
    pynvml.nvmlShutdown()  # e.g. the driver was reloaded for it
    rig.tick("nvidia")
    samples = rig.tick("nvidia")
    assert value(samples, "warptd_device_up", backend="nvidia", device="1", uuid="GPU-replacement-0000") == 1
    assert not select(samples, "warptd_device_up", uuid=old_uuid)
    energy = value(samples, "warptd_device_energy_joules_total", backend="nvidia", device="1")
    assert energy == 5000  # a new device's counter starts at its own raw value
    assert select(first, "warptd_device_info", uuid=old_uuid)
    info = select(samples, "warptd_device_info", backend="nvidia", device="1")[0].labels
    assert info["uuid"] == "GPU-replacement-0000"


@pytest.mark.rig("nvidia", doubles=["fake_nvml"])
def test_one_lost_gpu_does_not_drop_the_others_and_is_retried(settings, rediscover_now):
    fake = FakeNvml(gpus=3)
    settings.backends = ["nvidia"]
    with fake.installed():
        rig = Rig(settings)
        rig.tick()
        uuids = [g.uuid for g in fake.gpus]
        fake.gpus[2].energy_mj += 1_000_000
        fake.gpus[1].lost = True
        rig.tick("nvidia")  # GPU 1 lost: suspect
        samples = rig.tick()  # reopened: GPU 1 has no handle, GPUs 0 and 2 stay readable
        up = {s.labels["uuid"]: s.value for s in select(samples, "warptd_device_up", backend="nvidia")}
        assert up == {uuids[0]: 1, uuids[1]: 0, uuids[2]: 1}  # the lost GPU stays visible as down
        assert value(samples, "warptd_device_energy_joules_total", backend="nvidia", uuid=uuids[2]) == 6000
        fake.gpus[1].lost = False  # back on the bus: the next rediscovery finds it
        rig.tick("nvidia")
        samples = rig.tick("nvidia")
        up = {s.labels["uuid"]: s.value for s in select(samples, "warptd_device_up", backend="nvidia")}
        assert up == {u: 1 for u in uuids}
        rig.close()


@pytest.mark.rig("nvidia", doubles=["fake_nvml"])
def test_a_refused_handle_reads_as_down_and_the_others_export(settings, rediscover_now):
    """nvmlDeviceGetCount counts a GPU whose handle is then refused: that GPU is down, not the backend."""
    fake = FakeNvml(gpus=3)
    fake.gpus[1].handle_error = pynvml.NVML_ERROR_NO_PERMISSION
    settings.backends = ["nvidia"]
    with fake.installed():
        rig = Rig(settings)
        assert [b.name for b in rig.loaded.accelerators] == ["nvidia"]
        samples = rig.tick()
        up = {s.labels["device"]: s.value for s in select(samples, "warptd_device_up", backend="nvidia")}
        assert up == {"0": 1, "1": 0, "2": 1}
        assert value(samples, "warptd_device_power_watts", backend="nvidia", device="2") == 120
        assert value(samples, "warptd_sample_errors_total", backend="nvidia", kind="permission") >= 1
        fake.gpus[1].handle_error = 0  # e.g. the device node's permissions were fixed
        rig.tick("nvidia")  # asked again for the refused handle only: no reopen
        samples = rig.tick("nvidia")
        assert value(samples, "warptd_device_up", backend="nvidia", device="1", uuid=fake.gpus[1].uuid) == 1
        assert fake.calls("nvmlInitWithFlags") == 1
        rig.close()
    fake.close()


@pytest.mark.rig("nvidia", doubles=["fake_nvml"])
def test_a_failed_reopen_keeps_the_gpus_down_and_is_retried(rig, fake_nvml, rediscover_now):
    """A driver that does not come back at once: GPUs read down (not gone), and NVML is reopened later."""
    rig.tick()
    fake_nvml.state.init_error = pynvml.NVML_ERROR_DRIVER_NOT_LOADED
    pynvml.nvmlShutdown()  # e.g. the driver is being reloaded
    for _ in range(3):  # unreadable, then reopens that fail
        samples = rig.tick("nvidia")
        up = {s.labels["device"]: s.value for s in select(samples, "warptd_device_up", backend="nvidia")}
        assert up == {"0": 0, "1": 0}
    fake_nvml.state.init_error = 0  # the driver is back
    rig.tick("nvidia")
    samples = rig.tick("nvidia")
    assert value(samples, "warptd_device_up", **DEV0) == 1
    assert value(samples, "warptd_device_power_watts", **DEV1) == 120


@pytest.mark.rig("nvidia", doubles=["fake_nvml"])
def test_mig_instances_created_after_start_are_listed(make_rig, fake_nvml, rediscover_now):
    """With MIG on, instances come and go (mig-manager): every rediscovery re-reads their UUIDs."""
    gpu = fake_nvml.gpus[0]
    gpu.mig_uuids = ["MIG-11111111-2222-5333-8444-555555555555"]
    rig = make_rig("nvidia")
    rig.tick()
    assert rig.snapshot.get("nvidia").devices_info[0].aliases == gpu.mig_uuids
    assert rig.snapshot.get("nvidia").devices_info[1].aliases is None  # MIG off there
    gpu.mig_uuids = [*gpu.mig_uuids, "MIG-66666666-7777-5888-9999-000000000000"]
    rig.tick("nvidia")
    assert rig.snapshot.get("nvidia").devices_info[0].aliases == gpu.mig_uuids
    assert fake_nvml.calls("nvmlInitWithFlags") == 1  # re-listed, never reopened


@pytest.mark.rig("nvidia", doubles=["fake_nvml"], interval=0.1, health_interval=0.1, metrics_include=["*"])
@pytest.mark.slow
def test_samples_are_freed_at_shutdown_and_at_an_nvml_reopen(settings, monkeypatch):
    from warptd.sampling import sampler

    monkeypatch.setattr(sampler, "REDISCOVER_EVERY_S", 0.0)
    fake = FakeNvml(gpus=3)
    settings.backends = ["nvidia"]
    with fake.installed():
        live_before = fake.gpm_samples_live
        rig = Rig(settings)
        for _ in range(3):
            rig.tick()
        assert fake.gpm_samples_live - live_before == 6
        pynvml.nvmlShutdown()  # NVML reset under the daemon: the backend reopens it
        rig.tick("nvidia")
        fake.gpus[0].advance_gpm(activity=ACTIVITY)
        rig.tick_gpm("nvidia")
        fake.gpus[0].advance_gpm(activity=ACTIVITY)
        samples = rig.tick_gpm("nvidia")
        assert value(samples, "warptd_device_sm_active_ratio", **DEV0) == pytest.approx(0.5)
        assert fake.gpm_samples_live - live_before == 6  # the old ones freed, two new per GPU
        rig.close()
        assert fake.gpm_samples_live == live_before
        assert fake.calls("nvmlGpmSampleAlloc") == 12  # two per GPU, before and after the reopen
    fake.close()


SLICES = nvidia_backend.SLICES  # GPU 0's MIG slices in the double


fake = nvidia_backend.fake  # the NVML double: GPU 0 with MIG slices, GPU 1 without, a fixture


@pytest.mark.rig("nvidia", "nvidia_mig", doubles=["fake"])
def test_instances_appearing_and_disappearing_at_rediscovery(rig, fake, rediscover_now):
    gpu = fake.gpus[0]
    live_before = fake.gpm_samples_live
    rig.tick()
    rig.tick()
    third = FakeMig(
        "MIG-eeeeeeee-1111-5222-8333-444444444444", gpu_instance=5, name="NVIDIA H100 80GB HBM3 MIG 2g.20gb"
    )
    gpu.mig_devices = [*SLICES, third]  # mig-manager creates an instance
    samples = rig.tick()
    assert {s.labels["uuid"] for s in select(samples, "warptd_device_mig_info")} == {
        *(s.uuid for s in SLICES),
        third.uuid,
    }
    assert value(samples, "warptd_device_mig_info", uuid=third.uuid, profile="2g.20gb") == 1
    gpu.mig_devices = [third]  # and destroys the first two
    samples = rig.tick()
    assert [s.labels["uuid"] for s in select(samples, "warptd_device_mig_info")] == [third.uuid]
    assert value(samples, "warptd_device_memory_total_bytes", uuid=third.uuid, **mig(0)) == 10 * GIB
    assert fake.gpm_samples_live - live_before == 2 * (2 + 1)  # the two GPUs' and the one instance's
    gpu.mig_devices = []  # MIG devices all gone: no series left, the backend stays up
    samples = rig.tick()
    assert not select(samples, "warptd_device_mig_info")
    assert value(samples, "warptd_backend_up", backend="nvidia_mig") == 1


@pytest.mark.rig("nvidia", "nvidia_mig", doubles=["fake"])
def test_nvml_reset_under_the_daemon_is_reopened_once_and_the_slices_come_back(rig, fake, rediscover_now):
    rig.tick()
    pynvml.nvmlShutdown()  # other code in the process drops NVML's last reference
    samples = rig.tick()
    assert value(samples, "warptd_device_up", **mig(0)) == 0  # unreadable, not frozen
    assert not select(samples, "warptd_device_memory_total_bytes", **mig(0))
    for _ in range(2):
        samples = rig.tick()
    assert value(samples, "warptd_device_up", **mig(0)) == 1
    assert value(samples, "warptd_device_memory_total_bytes", **mig(0)) == 40 * GIB
    assert len(select(samples, "warptd_device_mig_info")) == 2
    assert fake.calls("nvmlInitWithFlags") == 2  # one reopen, shared by nvidia and nvidia_mig


@pytest.mark.rig("nvidia", "nvidia_mig", doubles=["fake"])
def test_gpus_keep_their_identity_while_nvml_is_reset_under_the_daemon(rig, fake, rediscover_now):
    """With MIG on, the GPUs are listed again at every rediscovery; when that listing meets an NVML
    shut down under the daemon, the GPUs keep the UUIDs known from before rather than losing them."""
    samples = rig.tick()
    uuids = {
        s.labels["device"]: s.labels["uuid"] for s in select(samples, "warptd_device_info", backend="nvidia")
    }
    assert all(uuids.values())
    pynvml.nvmlShutdown()
    for _ in range(3):
        samples = rig.tick()
        infos = select(samples, "warptd_device_info", backend="nvidia")
        assert {s.labels["device"]: s.labels["uuid"] for s in infos} == uuids


def test_the_hand_off_executor_runs_jobs_on_the_scheduler_thread_and_survives_an_error(caplog):
    """A job that raises is logged as APScheduler logs it, and the next run still comes."""
    from datetime import UTC, datetime

    from apscheduler.schedulers.background import BackgroundScheduler

    from warptd.sampling.sampler import HandOffExecutor

    runs: list[str] = []

    def job() -> None:
        runs.append(threading.current_thread().name)
        if len(runs) == 1:
            raise RuntimeError("a bug in a tick")

    scheduler = BackgroundScheduler(executors={"default": HandOffExecutor()}, timezone=UTC)
    scheduler.add_job(job, "interval", seconds=0.05, next_run_time=datetime.now(UTC))
    scheduler.start()
    try:
        assert wait_until(lambda: len(runs) >= 3, timeout=5)
    finally:
        scheduler.shutdown(wait=True)
    assert len(set(runs)) == 1 and runs[0] != threading.current_thread().name  # the scheduler's own
    assert "a bug in a tick" in caplog.text


DEV, P150 = tenstorrent.DEV, tenstorrent.P150
fake_luwen = tenstorrent.fake_luwen  # the rig's double, a fixture


@pytest.mark.rig("tenstorrent", doubles=["fake_luwen"])
def test_chip_lost_mid_run_others_stay_up_and_it_comes_back(rig, fake_luwen, rediscover_now):
    rig.tick()
    fake_luwen.chips[2].lost = True  # off the bus: its telemetry reads back all-ones
    fake_luwen.chips[0].words["tdp"] = 150 << 16 | 80
    samples = rig.tick()
    assert value(samples, "warptd_device_up", **DEV[2]) == 0
    for name in VALUES:
        assert not select(samples, name, **DEV[2]), name  # not 65535 W from the all-ones word
    assert value(samples, "warptd_device_power_watts", **DEV[0]) == 80
    assert value(samples, "warptd_device_up", **DEV[1]) == 1
    assert value(samples, "warptd_backend_up", backend="tenstorrent") == 1
    assert value(samples, "warptd_sample_errors_total", backend="tenstorrent", kind="device_lost") == 1
    fake_luwen.chips[2].lost = False  # back (e.g. after tt-smi -r): the next tick re-detects the chips
    samples = rig.tick()
    assert fake_luwen.calls("detect_chips") == 2
    assert value(samples, "warptd_device_up", **DEV[2]) == 1
    assert value(samples, "warptd_device_power_watts", **DEV[2]) == 95


@pytest.mark.rig("tenstorrent", doubles=["fake_luwen"])
def test_chip_unplugged_is_dropped_after_rediscovery(rig, fake_luwen, rediscover_now):
    rig.tick()
    uuid = f"{P150:016x}-0"
    fake_luwen.chips[2].raises = Exception("Failed to read from device: No such device (os error 19)")
    fake_luwen.chips[2].absent = True
    samples = rig.tick()
    assert value(samples, "warptd_device_up", uuid=uuid) == 0
    samples = rig.tick()  # re-detected: two chips left
    assert not select(samples, "warptd_device_up", uuid=uuid)
    assert [value(samples, "warptd_device_up", **dev) for dev in DEV[:2]] == [1, 1]
    fake_luwen.chips[2].raises, fake_luwen.chips[2].absent = None, False  # plugged back in
    samples = rig.tick()  # fewer chips than before: detection is retried until it is back
    assert value(samples, "warptd_device_up", uuid=uuid) == 1
