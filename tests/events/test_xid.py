"""``--compat dcgm-exporter``: dcgm-exporter's default series from the NVML double, checked against
dcgm-exporter's own files (tests/data/dcgm-exporter, Apache-2.0 copies): its default-counters CSV and
NVIDIA's Grafana dashboard, in a real Prometheus."""

from __future__ import annotations

import re
import time
from pathlib import Path

import pynvml
import pytest
import yaml
from prometheus_client import CollectorRegistry

from tests.dcgm import compat_rig
from tests.doubles.nvml import FakeGpu, FakeNvml
from tests.helpers import parse, select, value, wait_until
from warptd.events.collector import XidCollector
from warptd.events.xid import ALERTED_XIDS, open_xid_monitor
from warptd.exporter.text import render_text
from warptd.processes.collector import ProcessesCollector


def test_xid_errors_is_the_code_of_the_last_xid(settings, fake_nvml):
    monitor = open_xid_monitor(timeout_ms=100)
    assert monitor is not None
    monitor.start()
    rig = compat_rig(settings, "nvidia", xid=monitor)
    try:
        samples = rig.tick()
        assert value(samples, "DCGM_FI_DEV_XID_ERRORS", gpu="1", err_code="0") == 0  # none yet
        fake_nvml.gpus[1].events += [(pynvml.nvmlEventTypeXidCriticalError, 31)]
        fake_nvml.gpus[1].events += [(pynvml.nvmlEventTypeXidCriticalError, 79)]
        assert wait_until(lambda: any(d.last_code == 79 for d in monitor.devices()), timeout=5, interval=0.05)
        samples = rig.tick()
    finally:
        rig.close()
        monitor.stop()
    assert value(samples, "DCGM_FI_DEV_XID_ERRORS", gpu="1", err_code="79") == 79
    assert value(samples, "DCGM_FI_DEV_XID_ERRORS", gpu="0", err_code="0") == 0


@pytest.mark.rig("nvidia", doubles=["fake_nvml"])
def test_xid_and_processes_survive_a_refused_handle(settings, tmp_path):
    from warptd.events.xid import open_xid_monitor
    from warptd.processes.nvml import open_process_monitor

    fake = FakeNvml(gpus=2)
    fake.gpus[0].handle_error = pynvml.NVML_ERROR_UNKNOWN
    with fake.installed():
        fake.gpus[1].processes = [(4242, 2**30)]
        xid = open_xid_monitor(timeout_ms=100)
        processes = open_process_monitor(tmp_path)
        assert xid is not None and [d.index for d in xid.devices()] == [1]
        assert processes is not None
        processes.poll()
        assert [(p.index, p.pid) for p in processes.processes()] == [(1, 4242)]
        xid.stop()
        processes.stop()
    fake.close()


XID = pynvml.nvmlEventTypeXidCriticalError


DBE = pynvml.nvmlEventTypeDoubleBitEccError


ALERTS = Path(__file__).parents[2] / "deploy" / "prometheus" / "alerts.yml"


def exposition(xid=None, processes=None) -> bytes:
    registry = CollectorRegistry(auto_describe=False)
    if xid is not None:
        registry.register(XidCollector(xid))
    if processes is not None:
        registry.register(ProcessesCollector(processes))
    return render_text(registry.collect())


@pytest.fixture
def monitor(fake_nvml):
    changes = []
    monitor = open_xid_monitor(on_change=lambda: changes.append(1), timeout_ms=100)
    assert monitor is not None
    monitor.start()
    monitor.changes = changes
    yield monitor
    monitor.stop()


def xid_count(monitor, index: int, xid: int) -> int:
    return next(d for d in monitor.devices() if d.index == index).counts.get(xid, 0)


def test_xid_79_counted_on_its_gpu_only(monitor, fake_nvml):
    gpu0, gpu1 = fake_nvml.gpus
    before = time.time()
    gpu0.events.append((DBE, 0))  # logged, not counted: the driver reports it as XID 48 as well
    gpu1.events.append((XID, 79))
    assert wait_until(lambda: xid_count(monitor, 1, 79) == 1, timeout=5)
    after = time.time()
    samples = parse(exposition(monitor).decode())
    dev1 = {"backend": "nvidia", "device": "1", "uuid": gpu1.uuid}
    assert value(samples, "warptd_device_xid_errors_total", xid="79", **dev1) == 1
    assert before <= value(samples, "warptd_device_last_xid_timestamp_seconds", **dev1) <= after
    # GPU 0: every alerted XID present at 0 (so increase() sees a first error), no last-XID time
    for xid in ALERTED_XIDS:
        assert value(samples, "warptd_device_xid_errors_total", device="0", uuid=gpu0.uuid, xid=str(xid)) == 0
    assert not select(samples, "warptd_device_last_xid_timestamp_seconds", device="0")
    assert monitor.changes == [1]
    # both GPUs registered for XID and double-bit ECC events, in one set
    registered = list(fake_nvml.event_sets.values())
    assert registered == [{gpu0.uuid: XID | DBE, gpu1.uuid: XID | DBE}]


def test_repeated_and_unalerted_xids_are_counted_by_code(monitor, fake_nvml):
    fake_nvml.gpus[0].events += [(XID, 13), (XID, 13), (XID, 31), (XID, 79)]
    assert wait_until(lambda: xid_count(monitor, 0, 79) == 1, timeout=5)
    samples = parse(exposition(monitor).decode())
    counted = {
        s.labels["xid"]: s.value for s in select(samples, "warptd_device_xid_errors_total", device="0")
    }
    assert counted == {**{str(x): 0 for x in ALERTED_XIDS}, "13": 2, "31": 1, "79": 1}


def test_no_gpu_with_events_means_no_monitor():
    fake = FakeNvml([FakeGpu(index=0, supported_events=0), FakeGpu(index=1, supported_events=0)])
    with fake.installed():
        assert open_xid_monitor() is None
        assert fake.calls("nvmlDeviceRegisterEvents") == 0
        assert fake.event_sets == {}  # the set was freed
        assert fake.initialised == 0  # and NVML released


def test_a_gpu_that_cannot_register_is_skipped():
    fake = FakeNvml([FakeGpu(index=0, unsupported={"nvmlDeviceRegisterEvents"}), FakeGpu(index=1)])
    with fake.installed():
        monitor = open_xid_monitor(timeout_ms=100)
        monitor.start()
        try:
            assert [d.index for d in monitor.devices()] == [1]
            fake.gpus[1].events.append((XID, 48))
            assert wait_until(lambda: xid_count(monitor, 1, 48) == 1, timeout=5)
            assert not select(
                parse(exposition(monitor).decode()), "warptd_device_xid_errors_total", device="0"
            )
        finally:
            monitor.stop()


def test_nvml_absent_means_no_monitor():
    fake = FakeNvml(2)
    fake.library_missing = True
    with fake.installed():
        assert open_xid_monitor() is None
    assert open_xid_monitor() is None  # the real nvidia-ml-py on this machine: no driver


@pytest.mark.slow
def test_stop_returns_within_two_seconds_and_frees_the_set(fake_nvml):
    monitor = open_xid_monitor()  # the daemon's 1 s wait
    monitor.start()
    time.sleep(0.2)  # inside a wait
    started = time.monotonic()
    monitor.stop()
    assert time.monotonic() - started < 2
    assert not monitor._thread.is_alive()
    assert fake_nvml.event_sets == {}
    assert fake_nvml.initialised == 0
    monitor.stop()  # idempotent


def test_reopened_nvml_is_registered_again_and_counts_survive(monitor, fake_nvml):
    fake_nvml.gpus[1].events.append((XID, 94))
    assert wait_until(lambda: xid_count(monitor, 1, 94) == 1, timeout=5)
    old_sets = set(fake_nvml.event_sets)
    assert monitor._session.reopen()  # as the nvidia backend does after a GPU was lost
    assert wait_until(lambda: fake_nvml.event_sets and set(fake_nvml.event_sets) != old_sets, timeout=5)
    assert len(fake_nvml.event_sets) == 1  # the old set was freed
    fake_nvml.gpus[1].events.append((XID, 94))
    assert wait_until(lambda: xid_count(monitor, 1, 94) == 2, timeout=5)


@pytest.mark.slow
def test_reopen_never_frees_a_set_while_it_is_waited_on(fake_nvml):
    """A reopen (after a lost GPU) shuts NVML down, which frees every event set: it must wait for a
    wait in progress and let none start, else the driver is asked to wait on freed memory."""
    monitor = open_xid_monitor(timeout_ms=200)
    monitor.start()
    try:
        for _ in range(5):
            time.sleep(0.05)  # inside a wait
            assert monitor._session.reopen()
        fake_nvml.gpus[0].events.append((XID, 79))
        assert wait_until(lambda: xid_count(monitor, 0, 79) == 1, timeout=5)
    finally:
        monitor.stop()
    assert fake_nvml.use_after_free == 0
    assert fake_nvml.event_sets == {}


def test_a_recovered_handle_is_registered_and_the_old_set_freed():
    """A refused handle that comes back (no reopen) re-registers: the old set is still NVML's to free."""
    fake = FakeNvml(gpus=2)
    fake.gpus[1].handle_error = pynvml.NVML_ERROR_NO_PERMISSION
    with fake.installed():
        monitor = open_xid_monitor(timeout_ms=100)
        monitor.start()
        try:
            assert [d.index for d in monitor.devices()] == [0]
            fake.gpus[1].handle_error = 0
            assert monitor._session.retry_refused()
            assert wait_until(lambda: [d.index for d in monitor.devices()] == [0, 1], timeout=5)
            assert list(fake.event_sets.values()) == [{g.uuid: XID | DBE for g in fake.gpus}]
        finally:
            monitor.stop()
        assert fake.event_sets == {} and fake.use_after_free == 0
    fake.close()


def test_a_registration_that_failed_is_tried_again(monkeypatch):
    """Right after a reset a GPU may refuse RegisterEvents: it is asked again, not left out for good;
    a GPU that cannot deliver events at all is not asked again."""
    from warptd.events import xid

    monkeypatch.setattr(xid, "RETRY_REGISTER_S", 0.2)
    fake = FakeNvml(gpus=3)
    fake.gpus[1].raises["nvmlDeviceRegisterEvents"] = pynvml.NVML_ERROR_UNKNOWN
    fake.gpus[2].supported_events = 0
    with fake.installed():
        monitor = open_xid_monitor(timeout_ms=50)
        monitor.start()
        try:
            assert [d.index for d in monitor.devices()] == [0]
            del fake.gpus[1].raises["nvmlDeviceRegisterEvents"]
            assert wait_until(lambda: [d.index for d in monitor.devices()] == [0, 1], timeout=5)
            calls = fake.calls("nvmlDeviceGetSupportedEventTypes")
            time.sleep(0.5)
            assert fake.calls("nvmlDeviceGetSupportedEventTypes") == calls  # complete: no more retries
        finally:
            monitor.stop()
        assert fake.use_after_free == 0
    fake.close()


def test_a_lost_gpu_does_not_end_the_thread(monitor, fake_nvml):
    fake_nvml.gpus[1].events.append((XID, 79))
    fake_nvml.gpus[1].lost = True  # fell off the bus: every wait now answers GPU_IS_LOST
    assert wait_until(lambda: xid_count(monitor, 1, 79) == 1, timeout=5)
    time.sleep(0.3)
    assert monitor._thread.is_alive()
    fake_nvml.gpus[1].lost = False
    fake_nvml.gpus[0].events.append((XID, 74))
    assert wait_until(lambda: xid_count(monitor, 0, 74) == 1, timeout=5)


def test_alert_rules_watch_exactly_the_preset_xids():
    rules = [r for g in yaml.safe_load(ALERTS.read_text())["groups"] for r in g["rules"]]
    watched = set()
    for rule in rules:
        for codes in re.findall(r'warptd_device_xid_errors_total\{xid=~?"([0-9|]+)"', rule["expr"]):
            watched |= {int(c) for c in codes.split("|")}
    assert watched == set(ALERTED_XIDS)
