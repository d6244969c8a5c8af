"""Loading every backend at once, explicit selection, and third-party entry-point plugins."""

from __future__ import annotations

import sys
from importlib.metadata import EntryPoint
from typing import ClassVar

import pytest
import structlog
import structlog.testing

from tests.backends.amd import test_backend as amd_backend
from tests.doubles.amdsmi import FakeAmdsmi, wrapper
from tests.helpers import Rig, select, value
from tests.sysfs_tree import drm_card
from warptd import registry
from warptd.backends.amd.backend import AmdBackend
from warptd.backends.cpu.backend import CpuBackend
from warptd.backends.device import ValueDevice
from warptd.config import SettingsError
from warptd.errors import BackendUnavailableError
from warptd.models import GPUInfo, MemoryUsage, Utilization
from warptd.registry import load_backends


class PluginDevice(ValueDevice):
    """A third-party device: one method per value it has."""

    def memory(self) -> MemoryUsage | None:
        return MemoryUsage(total=16, used=4, free=12)

    def utilization(self) -> Utilization | None:
        return Utilization(compute=0.5)


class PluginBackend(CpuBackend):
    """A third-party backend, as a vendor package would ship it."""

    name: ClassVar[str] = "acme"

    def __init__(self, settings) -> None:
        super().__init__(settings)
        self.devices = (PluginDevice(0),)

    def list_devices(self) -> list[GPUInfo]:
        return [GPUInfo(index=0, model="ACME NPU", uuid="acme-0")]


class BrokenBackend(CpuBackend):
    def __init__(self, settings):
        raise ImportError("No module named 'acme_sdk'")


def _entry_points(monkeypatch, *eps: EntryPoint) -> None:
    def fake(group: str):
        return [ep for ep in eps if ep.group == group]

    monkeypatch.setattr(registry, "entry_points", fake)


def test_all_available_backends_load_together(settings, fake_nvml, sysfs):

    sysfs.rapl_zone("intel-rapl:0", "package-0", 1)
    drm_card(sysfs, 0, "amdgpu", "0000:03:00.0", {"gpu_busy_percent": 5}, {"power1_input": 30_000_000})
    loaded = registry.load_backends(settings)
    assert [b.name for b in loaded.accelerators] == ["nvidia", "hwmon", "cpu"]  # two GPU vendors at once
    assert [b.name for b in loaded.power] == ["rapl"]  # nvml: no part NVML measures apart here
    loaded.shutdown()


def test_selection_loads_named_backends_and_their_power_companions(settings, fake_nvml, sysfs):
    sysfs.rapl_zone("intel-rapl:0", "package-0", 1)
    fake_nvml.gpus[0].module_power_mw = 450_000  # a Grace Hopper: nvml has a domain to add
    settings.backends = ["nvidia"]
    loaded = registry.load_backends(settings)
    assert [b.name for b in loaded.accelerators] == ["nvidia"]
    assert [b.name for b in loaded.power] == ["nvml"]
    loaded.shutdown()
    settings.backends = ["rapl"]
    loaded = registry.load_backends(settings)
    assert [b.name for b in [*loaded.accelerators, *loaded.power]] == ["rapl"]


def test_unknown_backend_is_a_startup_error(settings):
    settings.backends = ["nvidai"]
    with pytest.raises(
        SettingsError,
        match=r"unknown backend.*nvidai.*known: amd, amdsmi, cpu, gaudi, hlml, hwmon, nvidia, nvidia_mig, "
        r"nvml, rapl, tenstorrent, tpu",
    ):
        registry.load_backends(settings)


def test_entry_point_plugin_is_loaded(settings, monkeypatch):
    _entry_points(
        monkeypatch,
        EntryPoint("acme", "tests.test_registry:PluginBackend", "warptd.backends"),
        EntryPoint("broken", "tests.test_registry:BrokenBackend", "warptd.backends"),
        EntryPoint("missing", "acme_not_installed.mod:Backend", "warptd.power_backends"),
    )
    loaded = registry.load_backends(settings)
    names = [b.name for b in loaded.accelerators]
    assert "acme" in names and "cpu" in names
    assert "acme_sdk" in loaded.unavailable["broken"]
    assert "acme_not_installed" in loaded.unavailable["missing"]


def test_strict_loading_refuses_a_named_backend_that_cannot_load(settings, monkeypatch):
    """The CLI's mode: a named backend that fails stops the start, after what did load is released."""
    _entry_points(monkeypatch, EntryPoint("broken", "tests.test_registry:BrokenBackend", "warptd.backends"))
    shut: list[str] = []
    monkeypatch.setattr(CpuBackend, "shutdown", lambda self: shut.append(self.name))
    settings.backends = ["cpu", "broken"]
    with pytest.raises(registry.BackendLoadError) as raised:
        registry.load_backends(settings, strict=True)
    assert str(raised.value) == "backend broken cannot load: No module named 'acme_sdk'"
    assert isinstance(raised.value, SettingsError) and shut == ["cpu"]
    settings.backends = ["cpu"]  # rapl, its companion, has no zone under this sysfs: skipped
    loaded = registry.load_backends(settings, strict=True)
    assert [b.name for b in loaded.accelerators] == ["cpu"] and "rapl" in loaded.unavailable
    settings.backends = None  # by default, a backend that cannot load is skipped
    loaded = registry.load_backends(settings, strict=True)
    assert "broken" in loaded.unavailable and "cpu" in [b.name for b in loaded.accelerators]


def test_plugin_cannot_hijack_a_builtin_name(settings, monkeypatch):
    _entry_points(monkeypatch, EntryPoint("cpu", "tests.test_registry:PluginBackend", "warptd.backends"))
    settings.backends = ["cpu"]
    loaded = registry.load_backends(settings)
    assert type(loaded.accelerators[0]) is CpuBackend


def test_a_non_backend_class_is_refused(settings, monkeypatch):
    _entry_points(monkeypatch, EntryPoint("weird", "warptd.models:GPUInfo", "warptd.backends"))
    loaded = registry.load_backends(settings)
    assert "not a AcceleratorBackend" in loaded.unavailable["weird"]


def test_builtins_are_listed_once_in_the_registry():
    """The package declares no entry points of its own: plugins use them, built-ins are each vendor
    package's declaration alone (its ``VENDOR``)."""
    import tomllib
    from pathlib import Path

    project = tomllib.loads((Path(__file__).parents[1] / "pyproject.toml").read_text())["project"]
    assert not set(project.get("entry-points", {})) & {*registry.GROUPS.values(), registry.VENDORS}
    names = [c.name for c in registry.discover() if c.origin == "builtin"]
    vendors = registry.builtin_vendors()
    assert names == [b.name for vendor in vendors for b in (*vendor.accelerators, *vendor.power)]
    packages = {p.parent.name for p in (Path(registry.__file__).parent / "backends").glob("*/__init__.py")}
    assert len(vendors) == len(packages) == 7  # every backend package declares its vendor


class CrashingBackend(PluginBackend):
    """A plugin with a bug outside its guarded SDK calls."""

    name: ClassVar[str] = "crashy"

    def read_device(self, index: int):
        raise TypeError("unsupported operand type(s) for +: 'NoneType' and 'int'")


def test_a_backend_that_raises_unexpectedly_is_marked_stale_alone(settings, monkeypatch):

    _entry_points(monkeypatch, EntryPoint("crashy", "tests.test_registry:CrashingBackend", "warptd.backends"))
    settings.backends = ["crashy", "cpu"]
    rig = Rig(settings)
    rig.tick()
    samples = rig.tick()
    assert value(samples, "warptd_backend_up", backend="crashy") == 0
    assert value(samples, "warptd_sample_errors_total", backend="crashy", kind="unexpected") == 2
    assert not select(samples, "warptd_device_up", backend="crashy")
    assert value(samples, "warptd_backend_up", backend="cpu") == 1
    rig.close()


def test_a_device_an_sdk_backend_serves_is_released_by_the_sysfs_fallback(settings, sysfs, fake_nvml):
    """De-duplication is by PCI address, whatever its spelling (NVML's 8-digit domain vs sysfs')."""
    from tests.sysfs_tree import drm_card

    drm_card(sysfs, 0, "amdgpu", "0000:18:00.0", {"device": "0x74a1"}, {"power1_input": 100_000_000})
    drm_card(sysfs, 1, "amdgpu", "0000:03:00.0", {"device": "0x744c"}, {"power1_input": 90_000_000})
    assert fake_nvml.gpus[0].uuid  # the NVML double puts GPU 0 at 00000000:18:00.0
    settings.backends = ["nvidia", "hwmon"]
    rig = Rig(settings)
    samples = rig.tick()
    infos = select(samples, "warptd_device_info")
    at_18 = [s.labels for s in infos if s.labels["pci_bus_id"].endswith("18:00.0")]
    assert [(i["backend"], i["source"]) for i in at_18] == [("nvidia", "nvml")]  # exported once, by the SDK
    hwmon = [s.labels for s in infos if s.labels["backend"] == "hwmon"]
    assert [(i["pci_bus_id"], i["source"]) for i in hwmon] == [("0000:03:00.0", "sysfs")]
    rig.close()


def test_a_fallback_left_without_devices_is_unavailable_with_the_reason(settings, sysfs, fake_nvml):

    drm_card(sysfs, 0, "amdgpu", "0000:19:00.0", {"device": "0x74a1"}, {"power1_input": 100_000_000})
    settings.backends = ["nvidia", "hwmon"]
    loaded = registry.load_backends(settings)
    try:
        assert [b.name for b in loaded.accelerators] == ["nvidia"]
        assert loaded.unavailable["hwmon"] == "every device is served by an SDK backend"
    finally:
        loaded.shutdown()


_ACME_VENDOR = """
from warptd.backends.vendor import Accelerator, Power, Vendor

VENDOR = Vendor(
    accelerators=(Accelerator("acme", "acme_warptd.backend:AcmeBackend"),),
    power=(Power("acme_power", companion="acme"),),
)
"""
_ACME_BACKEND = '''
from warptd.backends.base import AcceleratorBackend
from warptd.backends.device import ValueDevice
from warptd.models import GPUInfo


class AcmeDevice(ValueDevice):
    def power(self):
        """W."""
        return 42.0

    def temperatures(self):
        """°C."""
        return {"asic": 51.0}


class AcmeBackend(AcceleratorBackend):
    name = "acme"
    source = "acme-sdk"

    def __init__(self, settings):
        super().__init__(settings)
        self.devices = [AcmeDevice(0)]

    def list_devices(self):
        return [GPUInfo(index=0, model="ACME NPU", uuid="acme-0")]
'''


def test_a_vendor_package_of_its_own_is_on_metrics_without_any_other_file(settings, monkeypatch, tmp_path):
    """A new vendor is its package (a ``VENDOR`` and a backend with a device object) and its entry
    point: the daemon serves its device and its power backend over the devices, and a backend that
    runs no stress workload (no ``worker_device``) offers no device to stress."""
    from tests.helpers import parse
    from warptd.daemon import Daemon
    from warptd.http.app import Request
    from warptd.stress.setup import make_job_manager

    package = tmp_path / "acme_warptd"
    package.mkdir()
    (package / "__init__.py").write_text(_ACME_VENDOR)
    (package / "backend.py").write_text(_ACME_BACKEND)
    monkeypatch.syspath_prepend(str(tmp_path))
    _entry_points(monkeypatch, EntryPoint("acme", "acme_warptd:VENDOR", registry.VENDORS))
    settings.backends = ["acme"]
    daemon = Daemon(settings)
    try:
        assert [b.name for b in [*daemon.loaded.accelerators, *daemon.loaded.power]] == ["acme", "acme_power"]
        daemon.sampler.sample_all()
        response = daemon.router.dispatch(
            Request("GET", "/metrics", {}, {"host": "localhost"}, b"", "127.0.0.1")
        )
        samples = parse(bytes(response.body).decode())
        assert value(samples, "warptd_device_power_watts", backend="acme", device="0") == 42.0
        assert value(samples, "warptd_device_temperature_celsius", backend="acme", sensor="asic") == 51.0
        assert value(samples, "warptd_power_watts", source="acme_power", domain="gpu0") == 42.0
        assert make_job_manager(settings, daemon.loaded, daemon.snapshot).catalog.devices == {}
    finally:
        daemon.stop()


fake = amd_backend.fake  # the amdsmi double: GPU 0 and a Navi card, a fixture


@pytest.mark.rig("amd", doubles=["fake"])
def test_init_failure_is_a_log_line(settings):
    fake = FakeAmdsmi(gpus=1)
    fake.init_status = wrapper.AMDSMI_STATUS_DRIVER_NOT_LOADED
    settings.backends = ["amd", "cpu"]
    with fake.installed(), structlog.testing.capture_logs() as logs:
        loaded = load_backends(settings)
    assert [b.name for b in loaded.accelerators] == ["cpu"]
    assert loaded.unavailable["amd"].startswith("amdsmi_init failed: Error code: 34 | ")
    assert "\n" not in loaded.unavailable["amd"]
    assert any(e["event"] == "backend_unavailable" and e["backend"] == "amdsmi" for e in logs)
    loaded.shutdown()


@pytest.mark.rig("amd", doubles=["fake"])
def test_no_gpus_is_unavailable_and_shuts_amdsmi_down(settings):
    fake = FakeAmdsmi(gpus=[])
    settings.backends = ["amd"]
    with fake.installed():
        loaded = load_backends(settings)
    assert loaded.unavailable["amd"] == "no devices found"
    assert fake.initialised == 0


@pytest.mark.rig("amd", doubles=["fake"])
def test_missing_library_is_a_log_line_not_an_error(settings, capsys):
    """This machine's real state: amdsmi installed, libamd_smi.so absent. The double is not installed."""
    assert "amdsmi" not in sys.modules  # the double's import does not leak
    settings.backends = ["amd", "cpu"]
    with structlog.testing.capture_logs() as logs:
        loaded = load_backends(settings)
    assert [b.name for b in loaded.accelerators] == ["cpu"]
    reason = "libamd_smi.so not found (install ROCm's amd-smi-lib)"
    assert loaded.unavailable["amd"] == reason
    assert loaded.unavailable["amdsmi"] == reason
    logged = {e["backend"]: e["reason"] for e in logs if e["event"] == "backend_unavailable"}
    assert logged["amd"] == reason
    assert capsys.readouterr().out == ""  # the package's print() did not reach stdout
    loaded.shutdown()
    with pytest.raises(BackendUnavailableError, match=r"libamd_smi\.so"):
        AmdBackend(settings)
