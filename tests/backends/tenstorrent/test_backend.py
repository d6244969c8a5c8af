"""The tenstorrent backend against the pyluwen double (tests/doubles/pyluwen.py); no chip needed."""

from __future__ import annotations

import re
import sys
import time
from pathlib import Path

import pyluwen
import pytest
from structlog.testing import capture_logs

from tests.doubles.pyluwen import (
    TELEMETRY_FIELDS,
    FakeChip,
    FakeLuwen,
    PanicException,
    blackhole_words,
)
from tests.helpers import select, value
from warptd.backends.tenstorrent.backend import TenstorrentBackend
from warptd.errors import BackendUnavailableError, ErrorKind
from warptd.install import install_command
from warptd.registry import load_backends

N300 = 0x0100014111712034


P150 = 0x0000004310234567


DEV = [{"backend": "tenstorrent", "device": str(i)} for i in range(3)]


VALUES = ("warptd_device_power_watts", "warptd_device_temperature_celsius", "warptd_device_clock_hertz")


def host() -> FakeLuwen:
    """An n300 (a local and a remote Wormhole on one board) and a p150 Blackhole."""
    return FakeLuwen(
        [
            FakeChip(board_id=N300, pci_interface=0),
            FakeChip(board_id=N300, remote=True),
            FakeChip(arch="blackhole", board_id=P150, pci_interface=1, words=blackhole_words()),
        ]
    )


@pytest.fixture
def fake_luwen(sysfs):
    sysfs.write("module/tenstorrent/version", "2.4.1")
    fake = host()
    with fake.installed():
        yield fake


pytestmark = pytest.mark.rig("tenstorrent", doubles=["fake_luwen"])


def test_values_in_base_units(rig):
    samples = rig.tick()
    for dev in DEV[:2]:  # Wormhole: the reading in the low half, the limit in the high half
        assert value(samples, "warptd_device_up", **dev) == 1
        assert value(samples, "warptd_device_power_watts", **dev) == 55
        assert value(samples, "warptd_device_power_limit_watts", **dev) == 150
        assert value(samples, "warptd_device_temperature_celsius", sensor="asic", **dev) == 42.5  # 0x2A8/16
        assert value(samples, "warptd_device_clock_hertz", clock="ai", **dev) == 500e6
    assert value(samples, "warptd_device_power_watts", **DEV[2]) == 95
    assert value(samples, "warptd_device_power_limit_watts", **DEV[2]) == 300  # tdp_limit_max
    assert value(samples, "warptd_device_temperature_celsius", sensor="asic", **DEV[2]) == 48.25
    assert value(samples, "warptd_device_clock_hertz", clock="ai", **DEV[2]) == 1350e6
    infos = {
        s.labels["device"]: s.labels for s in select(samples, "warptd_device_info", backend="tenstorrent")
    }
    assert infos["0"]["model"] == "Tenstorrent Wormhole" and infos["2"]["model"] == "Tenstorrent Blackhole"
    assert [infos[d]["uuid"] for d in "012"] == [f"{N300:016x}-0", f"{N300:016x}-1", f"{P150:016x}-0"]
    assert infos["0"]["pci_bus_id"] == "0000:3b:00.0" and infos["2"]["pci_bus_id"] == "0000:3c:00.0"
    assert infos["1"]["pci_bus_id"] == ""  # the remote chip of the n300 has no PCI function of its own
    assert {i["driver_version"] for i in infos.values()} == {"2.4.1"}
    assert {i["source"] for i in infos.values()} == {"pyluwen"}


def test_identity_and_static_extras(settings, fake_luwen):
    backend = TenstorrentBackend(settings)
    local, remote, blackhole = backend.list_devices()
    assert local.extra_metrics == {
        "arch": "wormhole",
        "remote": False,
        "board_id": f"{N300:016x}",
        "pci_interface_id": 0,
        "fw_bundle_version": "80.17.0.0",
        "arc_fw_version": "2.29.0",
        "eth_fw_version": "6.14.0",
        "m3_app_fw_version": "5.9.0.0",
        "m3_bl_fw_version": "1.0.0.0",
        "tdc_limit_amps": 170,
        "aiclk_max_hz": 1000e6,
    }
    assert remote.extra_metrics["remote"] is True and "pci_interface_id" not in remote.extra_metrics
    assert blackhole.extra_metrics["arc_fw_version"] == "0.70.0.0"  # four bytes on Blackhole
    assert blackhole.extra_metrics["tdc_limit_amps"] == 350
    assert blackhole.extra_metrics["aiclk_max_hz"] == 1400e6
    assert "tt_flash_version" not in blackhole.extra_metrics  # unset word: no key, not "0.0.0.0"
    assert local.memory_total_bytes is None and local.memory_gb is None  # pyluwen has no GDDR size
    assert [backend.device_identity(i) for i in range(3)] == [d.uuid for d in (local, remote, blackhole)]
    assert fake_luwen.calls("detect_chips") == 1
    backend.shutdown()
    backend.shutdown()


def test_chip_objects_are_detected_once_and_telemetry_read_once_per_sample(rig, fake_luwen):
    for _ in range(4):
        rig.tick()
    assert fake_luwen.calls("detect_chips") == 1
    assert len(fake_luwen.handed) == 3
    telemetry_reads = fake_luwen.calls("get_telemetry", 0)
    rig.tick()
    assert fake_luwen.calls("get_telemetry", 0) == telemetry_reads + 1  # power, limit, temperature, clock


def test_no_memory_utilization_or_energy_counter_absent_not_zero(rig):
    samples = rig.tick()
    for name in (
        "warptd_device_memory_total_bytes",
        "warptd_device_memory_used_bytes",
        "warptd_device_utilization_ratio",
        "warptd_device_memory_utilization_ratio",
        "warptd_device_throttle_active",
    ):
        assert not select(samples, name, backend="tenstorrent"), name
    assert rig.loaded.accelerators[0].devices[0].energy() is None


def test_energy_integrated_from_power(rig, fake_luwen):
    fake_luwen.chips[2].words["tdp"] = 200
    rig.tick()
    time.sleep(0.25)
    samples = rig.tick()
    joules = value(samples, "warptd_device_energy_joules_total", **DEV[2])
    assert 200 * 0.2 < joules < 200 * 0.6
    fake_luwen.chips[2].words["tdp"] = 100
    time.sleep(0.1)
    later = value(rig.tick(), "warptd_device_energy_joules_total", **DEV[2])
    assert later > joules


def test_unset_words_are_absent_series_not_zero(rig, fake_luwen):
    fake_luwen.chips[2].unset = {"tdp_limit_max", "asic_temperature"}  # firmware without these tags
    fake_luwen.chips[0].words["aiclk"] = 0  # a zero word is unset too
    samples = rig.tick()
    assert not select(samples, "warptd_device_power_limit_watts", **DEV[2])
    assert not select(samples, "warptd_device_temperature_celsius", **DEV[2])
    assert not select(samples, "warptd_device_clock_hertz", **DEV[0])
    assert value(samples, "warptd_device_power_watts", **DEV[2]) == 95
    assert value(samples, "warptd_device_up", **DEV[2]) == 1
    assert value(samples, "warptd_sample_errors_total", backend="tenstorrent", kind="sdk_error") == 0


def test_telemetry_not_supported_is_asked_once(rig, fake_luwen):
    rig.tick()
    fake_luwen.chips[1].raises = Exception("Unsupported fw version, got 0x00020a00")
    samples = rig.tick()
    assert value(samples, "warptd_device_up", **DEV[1]) == 1  # supported-nothing is not down
    for name in VALUES:
        assert not select(samples, name, **DEV[1]), name
        assert select(samples, name, **DEV[0]), name
    assert value(samples, "warptd_sample_errors_total", backend="tenstorrent", kind="sdk_error") == 0
    before = fake_luwen.calls("get_telemetry", 1)
    rig.tick()
    rig.tick()
    assert fake_luwen.calls("get_telemetry", 1) == before


def test_another_board_in_the_slot_is_a_lost_chip(settings, fake_luwen):
    backend = TenstorrentBackend(settings)
    fake_luwen.chips[0].board_id = 0x0100014111719999
    assert backend.read_device(0).up is False
    assert backend.needs_rediscovery()
    assert backend.take_errors() == {ErrorKind.DEVICE_LOST: 1}


@pytest.mark.parametrize(
    ("raised", "kind"),
    [
        (Exception("Timed out while waiting 1s for ARC to respond"), "timeout"),
        (Exception("Read 0xffffffff from ARC scratch[6]: you should reset the board."), "device_lost"),
        (Exception("Could not access chip telemetry, failing with ArcMsgError"), "sdk_error"),
        (
            Exception("Failed to open device /dev/tenstorrent/0: Permission denied (os error 13)"),
            "permission",
        ),
        (PanicException("called `Result::unwrap()` on an `Err` value"), "sdk_error"),
        (TypeError("a bug in warptd"), "unexpected"),
    ],
)
def test_sdk_errors_mid_run_are_counted_by_kind(rig, fake_luwen, raised, kind):
    rig.tick()
    fake_luwen.chips[0].raises = raised
    samples = rig.tick()  # a panic (a BaseException) must not escape the sampler
    assert value(samples, "warptd_sample_errors_total", backend="tenstorrent", kind=kind) == 1
    assert not select(samples, "warptd_device_power_watts", **DEV[0])
    assert value(samples, "warptd_device_power_watts", **DEV[2]) == 95
    assert value(samples, "warptd_device_up", **DEV[0]) == (0 if kind == "device_lost" else 1)


def test_the_real_package_raises_plain_exception_and_it_maps_to_device_lost(settings, fake_luwen):
    if Path("/dev/tenstorrent").exists():
        pytest.skip("a Tenstorrent device is present")
    with pytest.raises(Exception) as raised:  # pyluwen has no exception types
        pyluwen.PciChip(pci_interface=7)
    assert type(raised.value) is Exception
    backend = TenstorrentBackend(settings)
    assert backend.classify_error(raised.value) is ErrorKind.DEVICE_LOST


def test_absent_on_this_machine_is_a_log_line(settings):
    if Path("/dev/tenstorrent").exists():
        pytest.skip("a Tenstorrent device is present")
    settings.backends = ["tenstorrent"]
    with pytest.raises(BackendUnavailableError, match="no Tenstorrent chip found"):
        TenstorrentBackend(settings)  # the real pyluwen: detect_chips() returns []
    with capture_logs() as logs:
        loaded = load_backends(settings)
    assert loaded.accelerators == []
    assert loaded.unavailable["tenstorrent"] == "no Tenstorrent chip found"
    assert {"event": "backend_unavailable", "backend": "tenstorrent"}.items() <= next(
        e for e in logs if e.get("backend") == "tenstorrent"
    ).items()


def test_pyluwen_not_installed_is_unavailable(settings, monkeypatch):
    monkeypatch.setitem(sys.modules, "pyluwen", None)
    with pytest.raises(BackendUnavailableError, match=re.escape(install_command("tenstorrent"))):
        TenstorrentBackend(settings)


def test_pytorch_device_string(settings, fake_luwen):
    backend = TenstorrentBackend(settings)
    info = backend.list_devices()[2]
    assert backend.worker_device(info)[0] == "tt:2"
    assert backend.worker_device(info) == ("tt:2", {})


def test_double_is_the_real_api():
    assert set(TELEMETRY_FIELDS) >= {"tdp", "tdc", "vcore", "aiclk", "asic_temperature", "board_id_high"}
    fake = FakeLuwen([FakeChip()])
    with fake.installed():
        chip = pyluwen.detect_chips()[0]
        with pytest.raises(TypeError):
            chip.get_telemetry(1)  # one argument too many, as the extension would say
        with pytest.raises(TypeError):
            pyluwen.detect_chips(bogus=True)
        with pytest.raises(AttributeError):
            chip.as_gs  # noqa: B018 - pyluwen 0.10 has no Grayskull
        with pytest.raises(AttributeError):
            chip.get_telemetry().current  # noqa: B018 - not a Telemetry attribute
        with pytest.raises(AssertionError, match="does not implement"):
            pyluwen.pci_scan()
        with pytest.raises(AssertionError, match="does not implement"):
            chip.arc_msg(0x90)
