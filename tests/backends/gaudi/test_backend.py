"""The gaudi and hlml backends against the HLML double (tests/doubles/hlml.py); no Habana device needed."""

from __future__ import annotations

import os
import re
import sys
import time

import pyhlml
import pytest
import structlog

from tests.doubles.hlml import (
    AIP,
    BOARD,
    RC,
    SOC,
    THROTTLE_POWER,
    THROTTLE_THERMAL,
    FakeAip,
    FakeHlml,
    hlml_err,
)
from tests.helpers import Rig, select, value
from warptd.backends.gaudi.backend import GaudiBackend
from warptd.errors import BackendUnavailableError
from warptd.install import install_command
from warptd.registry import load_backends

DEV0 = {"backend": "gaudi", "device": "0"}


DEV1 = {"backend": "gaudi", "device": "1"}


DEV2 = {"backend": "gaudi", "device": "2"}


@pytest.fixture
def fake_hlml():
    fake = FakeHlml(aips=3)
    with fake.installed():
        yield fake


pytestmark = pytest.mark.rig("gaudi", doubles=["fake_hlml"])  # and its companion power backend, hlml


@pytest.fixture
def gaudi(fake_hlml, settings):
    backend = GaudiBackend(settings)
    yield backend
    backend.shutdown()


def test_values_in_base_units(rig, fake_hlml):
    aip = fake_hlml.aips[0]
    aip.throttle_reasons = THROTTLE_POWER
    samples = rig.tick()
    assert value(samples, "warptd_device_up", **DEV0) == 1
    assert value(samples, "warptd_device_memory_total_bytes", **DEV0) == 96 * 2**30
    assert value(samples, "warptd_device_memory_used_bytes", **DEV0) == 3 * 2**30
    assert value(samples, "warptd_device_memory_free_bytes", **DEV0) == 93 * 2**30
    assert value(samples, "warptd_device_utilization_ratio", **DEV0) == pytest.approx(0.45)
    assert value(samples, "warptd_device_power_watts", **DEV0) == pytest.approx(180.0)  # 180000 mW
    assert value(samples, "warptd_device_energy_joules_total", **DEV0) == pytest.approx(9000.0)  # 9e6 mJ
    assert value(samples, "warptd_device_temperature_celsius", sensor="aip", **DEV0) == 38
    assert value(samples, "warptd_device_temperature_celsius", sensor="board", **DEV0) == 30
    assert value(samples, "warptd_device_clock_hertz", clock="soc", **DEV0) == 1650e6
    assert value(samples, "warptd_device_throttle_active", reason="sw_power_cap", **DEV0) == 1
    assert value(samples, "warptd_device_throttle_active", reason="sw_thermal_slowdown", **DEV0) == 0
    # HLML has no memory-controller busy figure and only a default (not enforced) power limit
    assert not select(samples, "warptd_device_memory_utilization_ratio", **DEV0)
    assert not select(samples, "warptd_device_power_limit_watts", **DEV0)
    info = select(samples, "warptd_device_info", **DEV0)[0].labels
    assert info["uuid"] == aip.uuid
    assert info["model"] == "HL-225"
    assert info["driver_version"] == "1.19.0-fw-57.1.0"
    assert info["pci_bus_id"] == "0000:19:00.0"
    assert info["source"] == "hlml"
    assert all(s.labels["uuid"] == aip.uuid for s in samples if s.labels.get("device") == "0")


def test_several_devices_each_reported_handles_cached_and_not_aliased(rig, fake_hlml):
    # pyhlml hands out one shared c_void_p per lookup: without a copy every handle would be the last device
    for _ in range(3):
        samples = rig.tick()
    for i, dev in enumerate((DEV0, DEV1, DEV2)):
        assert value(samples, "warptd_device_power_watts", **dev) == 180 + 10 * i
        assert value(samples, "warptd_power_watts", source="hlml", domain=f"gpu{i}") == 180 + 10 * i
        info = select(samples, "warptd_device_info", **dev)[0].labels
        assert info["uuid"] == fake_hlml.aips[i].uuid
    assert fake_hlml.calls("hlmlDeviceGetHandleByIndex") == 3  # once per device, not per sample
    assert fake_hlml.calls("hlmlInit") == 1  # gaudi and hlml power share one session
    assert fake_hlml.calls("hlmlDeviceGetUUID") == 2 * 3  # cached by gaudi and by hlml, naming its domains
    rig.close()
    for backend in [*rig.loaded.accelerators, *rig.loaded.power]:
        backend.shutdown()
        backend.shutdown()  # idempotent
    assert fake_hlml.calls("hlmlShutdown") == 1 and not fake_hlml.initialised


def test_vendor_extras_in_list_devices(gaudi, fake_hlml):
    backend = gaudi
    infos = backend.list_devices()
    assert [i.extra_metrics for i in infos[:2]] == [
        {"serial": "AM00004400", "module_id": 7, "power_default_limit_watts": 600.0},
        {"serial": "AM00004401", "module_id": 6, "power_default_limit_watts": 600.0},
    ]
    assert infos[0].memory_total_bytes == 96 * 2**30 and infos[0].memory_gb == 96.0
    assert backend.device_identity(2) == fake_hlml.aips[2].uuid


def test_not_supported_fields_are_absent_not_zero_and_asked_once(rig, fake_hlml):
    aip = fake_hlml.aips[1]
    aip.unsupported = {
        "hlmlDeviceGetPowerUsage",
        "hlmlDeviceGetUtilizationRates",
        "hlmlDeviceGetCurrentClocksThrottleReasons",
    }
    aip.energy_mj = None
    del aip.temperatures[BOARD]
    samples = rig.tick()
    for name in (
        "warptd_device_utilization_ratio",
        "warptd_device_energy_joules_total",
        "warptd_device_throttle_active",
    ):
        assert not select(samples, name, **DEV1), name
        assert select(samples, name, **DEV0), name
    assert not select(samples, "warptd_device_temperature_celsius", sensor="board", **DEV1)
    assert value(samples, "warptd_device_temperature_celsius", sensor="aip", **DEV1) == 38
    assert value(samples, "warptd_device_up", **DEV1) == 1
    assert value(samples, "warptd_sample_errors_total", backend="gaudi", kind="sdk_error") == 0
    assert value(samples, "warptd_power_domain_up", source="hlml", domain="gpu1") == 0  # nothing to read
    before = fake_hlml.calls("hlmlDeviceGetPowerUsage")
    samples = rig.tick("gaudi")
    assert fake_hlml.calls("hlmlDeviceGetPowerUsage") == before + 2  # devices 0 and 2 only
    assert not select(samples, "warptd_device_power_watts", **DEV1)


def test_device_lost_mid_run_drops_its_series_others_keep_updating(rig, fake_hlml):
    rig.tick()
    fake_hlml.aips[0].lost = True  # HLML_ERROR_AIP_IS_LOST
    fake_hlml.aips[1].power_mw = 250_000
    samples = rig.tick()
    assert value(samples, "warptd_device_up", **DEV0) == 0
    for name in ("warptd_device_power_watts", "warptd_device_memory_used_bytes", "warptd_device_clock_hertz"):
        assert not select(samples, name, **DEV0), name
    assert value(samples, "warptd_device_power_watts", **DEV1) == 250
    assert value(samples, "warptd_device_up", **DEV2) == 1
    assert value(samples, "warptd_backend_up", backend="gaudi") == 1
    assert value(samples, "warptd_sample_errors_total", backend="gaudi", kind="device_lost") == 1
    assert value(samples, "warptd_power_domain_up", source="hlml", domain="gpu0") == 0
    fake_hlml.aips[0].lost = False
    samples = rig.tick()
    assert value(samples, "warptd_device_up", **DEV0) == 1


def test_sdk_errors_are_counted_by_kind(rig, fake_hlml):
    aip = fake_hlml.aips[2]
    aip.raises["hlmlDeviceGetMemoryInfo"] = hlml_err(RC.HLML_ERROR_TIMEOUT)
    aip.raises["hlmlDeviceGetPowerUsage"] = hlml_err(RC.HLML_ERROR_UNKNOWN)
    samples = rig.tick("gaudi")
    assert value(samples, "warptd_device_up", **DEV2) == 1
    assert not select(samples, "warptd_device_memory_used_bytes", **DEV2)
    assert not select(samples, "warptd_device_power_watts", **DEV2)
    assert value(samples, "warptd_device_energy_joules_total", **DEV2) == 9000
    assert value(samples, "warptd_sample_errors_total", backend="gaudi", kind="timeout") == 1
    assert value(samples, "warptd_sample_errors_total", backend="gaudi", kind="sdk_error") == 1


def test_energy_counter_reset_on_driver_reload_stays_monotonic(rig, fake_hlml):
    aip = fake_hlml.aips[0]
    samples = rig.tick()
    assert value(samples, "warptd_device_energy_joules_total", **DEV0) == 9000
    aip.energy_mj += 2_000_000
    samples = rig.tick()
    assert value(samples, "warptd_device_energy_joules_total", **DEV0) == 11000
    aip.energy_mj = 300_000  # driver reloaded: the mJ counter restarts from 0
    time.sleep(0.1)  # 300 J since the reload is plausible at 5000 W (no enforced limit) after 0.06 s
    samples = rig.tick()
    assert value(samples, "warptd_device_energy_joules_total", **DEV0) == 11300
    assert value(samples, "warptd_energy_joules_total", source="hlml", domain="gpu0") == 11300
    aip.energy_mj = 400_000
    samples = rig.tick()
    assert value(samples, "warptd_device_energy_joules_total", **DEV0) == 11400


def test_throttle_bits_map_onto_shared_reasons(rig, fake_hlml):
    fake_hlml.aips[0].throttle_reasons = THROTTLE_THERMAL
    fake_hlml.aips[1].throttle_reasons = THROTTLE_POWER | THROTTLE_THERMAL
    samples = rig.tick("gaudi")
    active = {
        (s.labels["device"], s.labels["reason"]): s.value
        for s in select(samples, "warptd_device_throttle_active", backend="gaudi")
    }
    assert active == {
        ("0", "sw_power_cap"): 0,
        ("0", "sw_thermal_slowdown"): 1,
        ("1", "sw_power_cap"): 1,
        ("1", "sw_thermal_slowdown"): 1,
        ("2", "sw_power_cap"): 0,
        ("2", "sw_thermal_slowdown"): 0,
    }


def test_device_without_a_handle_at_start_is_down_others_up(settings):
    fake = FakeHlml(aips=[FakeAip(index=0), FakeAip(index=1, lost=True)])
    settings.backends = ["gaudi"]
    with fake.installed():
        rig = Rig(settings)
        samples = rig.tick()
        assert value(samples, "warptd_device_up", **DEV0) == 1
        assert value(samples, "warptd_device_up", **DEV1) == 0
        assert value(samples, "warptd_power_domain_up", source="hlml", domain="gpu1") == 0
        assert select(samples, "warptd_device_info", model="Intel Gaudi", **DEV1)
        rig.close()


def test_absent_driver_with_the_real_package_is_a_log_line(settings, capsys):
    """This machine has no /usr/lib/habanalabs/libhlml.so: the real pyhlml raises HLMLError_Uninitialized."""
    if os.path.exists("/usr/lib/habanalabs/libhlml.so"):
        pytest.skip("a Habana driver is installed here")
    with pytest.raises(BackendUnavailableError, match=r"^libhlml\.so not found: no Habana driver$"):
        GaudiBackend(settings)
    settings.backends = ["gaudi"]
    with structlog.testing.capture_logs() as logs:
        loaded = load_backends(settings)
    assert loaded.accelerators == [] and loaded.power == []
    assert loaded.unavailable["gaudi"] == "libhlml.so not found: no Habana driver"
    assert loaded.unavailable["hlml"] == "libhlml.so not found: no Habana driver"
    assert {"event": "backend_unavailable", "backend": "gaudi", "kind": "accelerator"}.items() <= next(
        e for e in logs if e.get("backend") == "gaudi"
    ).items()
    assert capsys.readouterr().out == ""  # pyhlml's "Failed to load libhlml" print is swallowed


def test_missing_library_via_the_double_and_missing_package(settings, capsys, monkeypatch):
    fake = FakeHlml(aips=1)
    fake.library_missing = True
    settings.backends = ["gaudi", "cpu"]
    with fake.installed():
        rig = Rig(settings)
        assert [b.name for b in rig.loaded.accelerators] == ["cpu"]
        assert rig.loaded.unavailable["gaudi"] == "libhlml.so not found: no Habana driver"
        rig.close()
    assert "Failed to load" not in capsys.readouterr().out
    monkeypatch.setitem(sys.modules, "pyhlml", None)  # import pyhlml raises ImportError
    with pytest.raises(BackendUnavailableError, match=re.escape(install_command("gaudi"))):
        GaudiBackend(settings)


def test_double_rejects_a_wrong_call(fake_hlml):
    pyhlml.hlmlInit()
    handle = pyhlml.hlmlDeviceGetHandleByIndex(0)
    with pytest.raises(TypeError):
        pyhlml.hlmlDeviceGetTemperature(handle)  # the sensor argument is required
    with pytest.raises(AssertionError, match="does not implement"):
        pyhlml.hlmlDeviceGetFWOSVersion(handle)
    assert pyhlml.hlmlDeviceGetTemperature(handle, AIP) == 38
    assert pyhlml.hlmlDeviceGetClockInfo(handle, SOC) == 1650
    pyhlml.hlmlShutdown()
