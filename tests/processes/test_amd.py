"""The amd and amdsmi backends against the amdsmi double (tests/doubles/amdsmi.py); no GPU or ROCm needed."""

from __future__ import annotations

import time

import pytest

from tests.doubles.amdsmi import (
    TT,
    U16,
    FakeAmdsmi,
    FakeGpu,
    FakeProcess,
    amdsmi,
    wrapper,
)
from tests.e2e.test_processes import GIB, HOST, Proc
from warptd.processes.amd import AmdProcessMonitor


@pytest.fixture
def fake() -> FakeAmdsmi:
    navi = FakeGpu(
        index=1,
        market_name="AMD Radeon RX 7900 XTX",
        vram_total_mb=24_560,
        vram_used_mb=1_024,
        current_socket_power=U16,  # Navi fills the average only
        average_socket_power=212,
        power_cap_uw=300_000_000,
        temperatures={TT.EDGE: 55, TT.HOTSPOT: 61, TT.VRAM: 58},
        metrics={"vcn_activity": [10, 250]},  # two VCNs, no XGMI; 250 % is out of range: "N/A"
        fan_speed=102,  # of 255
        pcie_replays=0,
        has_residency=False,  # no throttle residency accumulators: violation status NOT_SUPPORTED
    )
    # a consumer card without ECC, so without bad pages
    navi.unsupported = {
        "amdsmi_get_gpu_total_ecc_count",
        "amdsmi_get_gpu_bad_page_info",
    }
    fake = FakeAmdsmi([FakeGpu(index=0), navi])
    with fake.installed():
        yield fake
        assert fake.initialised == 0, "a backend was not shut down: the shared amdsmi session leaked"


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
