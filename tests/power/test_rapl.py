"""RAPL powercap through fixture sysfs trees: domains, wrap-around, unreadable energy_uj."""

from __future__ import annotations

import contextlib
import json
import re
import time

import pytest
from structlog.testing import capture_logs

from tests.helpers import Rig, select, value
from tests.sysfs_tree import AMD_RANGE_UJ, cpuinfo, unreadable
from warptd.errors import BackendUnavailableError
from warptd.power.rapl import MAX_DOMAIN_WATTS, READS_PER_WRAP, RaplPowerBackend

RANGE_UJ = 65_532_610_987  # AMD EPYC's max_energy_range_uj


@pytest.fixture
def two_sockets(sysfs):
    sysfs.rapl_zone("intel-rapl:0", "package-0", 10_000_000, RANGE_UJ)
    sysfs.rapl_zone("intel-rapl:0:0", "core", 4_000_000, RANGE_UJ)
    sysfs.rapl_zone("intel-rapl:0:1", "dram", 1_000_000, RANGE_UJ)
    sysfs.rapl_zone("intel-rapl:1", "package-1", 20_000_000, RANGE_UJ)
    sysfs.rapl_zone("intel-rapl:1:0", "uncore", 3_000_000, RANGE_UJ)
    sysfs.rapl_zone("intel-rapl:2", "psys", 50_000_000, RANGE_UJ)
    sysfs.rapl_zone("intel-rapl-mmio:0", "package-0", 10_000_000, RANGE_UJ)  # mirror: must be skipped
    return sysfs


pytestmark = pytest.mark.rig("rapl", doubles=["two_sockets"])


def test_domains_named_by_package(settings, two_sockets):
    backend = RaplPowerBackend(settings)
    assert [z.domain for z in backend.zones] == [
        "package-0",
        "core-0",
        "dram-0",
        "package-1",
        "uncore-1",
        "psys",
    ]


def test_energy_in_joules_and_power_from_deltas(rig, two_sockets):
    samples = rig.tick()
    assert value(samples, "warptd_energy_joules_total", source="rapl", domain="package-0") == pytest.approx(
        10.0
    )
    assert not select(samples, "warptd_power_watts", domain="package-0")  # no rate from one reading
    two_sockets.set_energy("intel-rapl:0", 10_000_000 + 50_000_000)  # +50 J
    time.sleep(0.5)
    samples = rig.tick()
    assert value(samples, "warptd_energy_joules_total", source="rapl", domain="package-0") == pytest.approx(
        60.0
    )
    watts = value(samples, "warptd_power_watts", source="rapl", domain="package-0")
    assert 50 / 1.0 < watts < 50 / 0.5 + 1


def test_wrap_around_stays_monotonic(rig, two_sockets):
    two_sockets.set_energy("intel-rapl:1", RANGE_UJ - 1_000_000)  # 1 J below the wrap
    samples = rig.tick()
    before = value(samples, "warptd_energy_joules_total", domain="package-1")
    two_sockets.set_energy("intel-rapl:1", 2_000_000)  # wrapped, +3 J in all
    samples = rig.tick()
    after = value(samples, "warptd_energy_joules_total", domain="package-1")
    assert after - before == pytest.approx(3.0)
    assert after > before


def test_unreadable_energy_is_reported_not_zero(settings, two_sockets):
    patch = unreadable(two_sockets.root / "class/powercap/intel-rapl:0/energy_uj")
    settings.backends = ["rapl"]
    rig = Rig(settings)
    with patch if patch is not None else contextlib.nullcontext(), capture_logs() as logs:
        samples = rig.tick()
    assert value(samples, "warptd_power_domain_up", source="rapl", domain="package-0") == 0
    assert not select(samples, "warptd_energy_joules_total", domain="package-0")
    assert not select(samples, "warptd_power_watts", domain="package-0")
    assert value(samples, "warptd_power_domain_up", source="rapl", domain="package-1") == 1
    assert value(samples, "warptd_sample_errors_total", backend="rapl", kind="permission") == 1
    warning = next(e for e in logs if e["event"] == "rapl_domain_unreadable")
    assert warning["domain"] == "package-0" and "readable by root only" in warning["reason"]
    rig.close()


def test_no_zones_means_unavailable(settings):
    with pytest.raises(BackendUnavailableError, match="no RAPL zones"):
        RaplPowerBackend(settings)


def test_energy_totals_survive_a_daemon_restart(settings, two_sockets, tmp_path):
    settings.backends = ["rapl"]
    settings.state_dir = tmp_path / "state"
    rig = Rig(settings)
    two_sockets.set_energy("intel-rapl:1", RANGE_UJ - 1_000_000)
    rig.tick()
    two_sockets.set_energy("intel-rapl:1", 2_000_000)  # wrapped: +3 J
    before = value(rig.tick(), "warptd_energy_joules_total", domain="package-1")
    rig.close()  # saves atomically
    saved = json.loads((tmp_path / "state" / "counters.json").read_text())
    assert saved["counters"]["rapl/package-1"]["total"] == pytest.approx(before)
    two_sockets.set_energy("intel-rapl:1", 7_000_000)  # +5 J while the daemon was down
    rig = Rig(settings)
    after = value(rig.tick(), "warptd_energy_joules_total", domain="package-1")
    assert after == pytest.approx(before + 5.0)  # not re-based on the raw 7 J
    rig.close()


def _boot(procfs, boot_id):
    (procfs / "sys/kernel/random").mkdir(parents=True, exist_ok=True)
    (procfs / "sys/kernel/random/boot_id").write_text(f"{boot_id}\n")


def test_a_restart_on_the_same_boot_counts_a_lower_counter_as_a_wrap(settings, two_sockets, procfs, tmp_path):
    _boot(procfs, "0f6c1b2e-boot-a")
    settings.backends = ["rapl"]
    settings.state_dir = tmp_path / "state"
    rig = Rig(settings)
    two_sockets.set_energy("intel-rapl:1", RANGE_UJ - 1_000_000)  # 1 J below the wrap
    before = value(rig.tick(), "warptd_energy_joules_total", domain="package-1")
    rig.close()
    saved = json.loads((tmp_path / "state" / "counters.json").read_text())
    assert saved["boot_id"] == "0f6c1b2e-boot-a"  # from --procfs
    two_sockets.set_energy("intel-rapl:1", 2_000_000)  # wrapped while the daemon was down: +3 J
    rig = Rig(settings)
    after = value(rig.tick(), "warptd_energy_joules_total", domain="package-1")
    assert after == pytest.approx(before + 3.0)  # not a reset (+2 J)
    rig.close()


def test_a_restart_after_a_reboot_counts_the_counter_from_the_boot(settings, two_sockets, procfs, tmp_path):
    _boot(procfs, "0f6c1b2e-boot-a")
    settings.backends = ["rapl"]
    settings.state_dir = tmp_path / "state"
    rig = Rig(settings)
    two_sockets.set_energy("intel-rapl:1", 5_000_000)
    before = value(rig.tick(), "warptd_energy_joules_total", domain="package-1")
    rig.close()
    saved = settings.state_dir / "counters.json"
    document = json.loads(saved.read_text())
    for entry in document["counters"].values():  # read an hour before, at 50 W
        entry["at"], entry["power"] = time.time() - 3600, 50.0
    saved.write_text(json.dumps(document))
    _boot(procfs, "77d0a9c4-boot-b")  # rebooted: the counter restarted from 0
    two_sockets.set_energy("intel-rapl:1", 9_000_000)
    rig = Rig(settings)
    after = value(rig.tick(), "warptd_energy_joules_total", domain="package-1")
    assert after == pytest.approx(before + 9.0)  # all 9 J are new, not 9 - 5
    rig.close()


def test_a_corrupt_state_file_is_ignored(settings, two_sockets, tmp_path):
    (tmp_path / "state").mkdir()
    (tmp_path / "state" / "counters.json").write_text("{not json")
    settings.backends = ["rapl"]
    settings.state_dir = tmp_path / "state"
    with capture_logs() as logs:
        rig = Rig(settings)
    assert any(e["event"] == "state_file_ignored" for e in logs)
    assert value(rig.tick(), "warptd_energy_joules_total", domain="package-0") == pytest.approx(10.0)
    rig.close()


@pytest.mark.parametrize(
    "content", ["[]", '{"version": 1, "counters": {"rapl/package-0": 5}}', '{"version": 2}']
)
def test_a_state_file_of_the_wrong_shape_is_ignored(settings, two_sockets, tmp_path, content):
    (tmp_path / "state").mkdir()
    (tmp_path / "state" / "counters.json").write_text(content)
    settings.backends = ["rapl"]
    settings.state_dir = tmp_path / "state"
    with capture_logs() as logs:
        rig = Rig(settings)
    assert {"state_file_ignored", "state_entry_refused"} & {e["event"] for e in logs}  # file or entry
    rig.close()


NODE_POWER = re.compile(r"package-.*|dram-.*")  # the README's and dashboard's domain=~ (anchored, as PromQL)


def test_multi_die_subzones_carry_socket_and_die(settings, sysfs):
    sysfs.rapl_multi_die(sockets=2, dies=2)
    domains = [z.domain for z in RaplPowerBackend(settings).zones]
    assert domains == [
        f"{kind}-{socket}-die-{die}"
        for socket in (0, 1)
        for die in (0, 1)
        for kind in ("package", "dram", "core")
    ]


def test_a_name_the_kernel_repeats_still_gives_unique_domains(settings, sysfs):
    sysfs.rapl_zone("intel-rapl:0", "package-0", 1)
    sysfs.rapl_zone("intel-rapl:1", "psys", 2)
    sysfs.rapl_zone("intel-rapl:2", "psys", 3)
    domains = [z.domain for z in RaplPowerBackend(settings).zones]
    assert domains == ["package-0", "psys", "psys-intel-rapl:2"]


def test_multi_die_end_to_end_has_no_duplicate_series_and_sums_right(make_rig, sysfs):
    energies = sysfs.rapl_multi_die(sockets=2, dies=2)
    rig = make_rig("rapl")
    samples = rig.tick()
    keys = [(s.name, tuple(sorted(s.labels.items()))) for s in samples]
    assert len(keys) == len(set(keys)), "duplicate series"
    rapl = select(samples, "warptd_energy_joules_total", source="rapl")
    assert len(rapl) == len(energies) == 12
    by_domain = {s.labels["domain"]: s.value for s in rapl}
    assert by_domain["dram-0-die-1"] == pytest.approx(energies["intel-rapl:1:0"] * 1e-6)
    assert by_domain["dram-1-die-0"] == pytest.approx(energies["intel-rapl:2:0"] * 1e-6)
    node = sum(v for d, v in by_domain.items() if NODE_POWER.fullmatch(d))
    packages_and_drams = sum(e for zone, e in energies.items() if zone.count(":") == 1 or zone.endswith(":0"))
    assert node == pytest.approx(packages_and_drams * 1e-6)  # each die counted once, core never
    # One die's DRAM moves: only its own series does (a shared tracker would see phantom resets).
    sysfs.set_energy("intel-rapl:1:0", energies["intel-rapl:1:0"] + 5_000_000)
    later = {
        s.labels["domain"]: s.value for s in select(rig.tick(), "warptd_energy_joules_total", source="rapl")
    }
    assert later["dram-0-die-1"] == pytest.approx(by_domain["dram-0-die-1"] + 5.0)
    assert {d: v for d, v in later.items() if d != "dram-0-die-1"} == pytest.approx(
        {d: v for d, v in by_domain.items() if d != "dram-0-die-1"}
    )


@pytest.mark.parametrize("vendor", ["AuthenticAMD", "HygonGenuine"])
def test_amd_core_zone_is_not_exported(make_rig, sysfs, procfs, vendor):
    sysfs.rapl_amd(sockets=2)
    cpuinfo(procfs, vendor)
    with capture_logs() as logs:
        rig = make_rig("rapl")
    samples = rig.tick()
    domains = {s.labels["domain"] for s in select(samples, "warptd_power_domain_up", source="rapl")}
    assert domains == {"package-0", "package-1"}
    assert value(samples, "warptd_energy_joules_total", domain="package-1") == pytest.approx(20.0)
    skipped = [e for e in logs if e["event"] == "rapl_domains_skipped"]
    assert len(skipped) == 1 and skipped[0]["log_level"] == "debug"
    assert skipped[0]["domains"] == ["core-0", "core-1"] and "one core" in skipped[0]["reason"]


@pytest.mark.parametrize("vendor", ["GenuineIntel", None])
def test_core_zone_is_kept_elsewhere(settings, sysfs, procfs, vendor):
    sysfs.rapl_amd(sockets=1)  # the same layout on an Intel CPU (or without a cpuinfo): all cores
    if vendor is not None:
        cpuinfo(procfs, vendor)
    assert [z.domain for z in RaplPowerBackend(settings).zones] == ["package-0", "core-0"]


def test_max_interval_comes_from_the_smallest_range(settings, sysfs):
    sysfs.rapl_zone("intel-rapl:0", "package-0", 1)  # Intel's 262 kJ
    assert RaplPowerBackend(settings).max_interval == pytest.approx(262_143.328850 / 4000)
    sysfs.rapl_zone("intel-rapl:1", "package-1", 1, AMD_RANGE_UJ)
    backend = RaplPowerBackend(settings)
    assert backend.max_interval == pytest.approx(65_532.610987 / 4000)  # 16.4 s
    # at MAX_DOMAIN_WATTS a zone wraps once per READS_PER_WRAP reads, at most
    assert backend.max_interval * MAX_DOMAIN_WATTS * READS_PER_WRAP <= AMD_RANGE_UJ * 1e-6


def test_max_interval_without_ranges_or_with_a_tiny_one(settings, sysfs):
    sysfs.rapl_zone("intel-rapl:0", "package-0", 1)
    (sysfs.root / "class/powercap/intel-rapl:0/max_energy_range_uj").unlink()
    assert RaplPowerBackend(settings).max_interval is None
    sysfs.rapl_zone("intel-rapl:1", "package-1", 1, 1000)  # 1 mJ: garbled, never a busy loop
    assert RaplPowerBackend(settings).max_interval == 1.0


def test_each_zone_read_is_charged_as_energy_and_exported(settings, two_sockets):
    settings.backends = ["rapl"]
    rig = Rig(settings)
    rig.tick()
    samples = rig.tick()
    zones = 6  # the mmio mirror is not read
    assert value(samples, "warptd_backend_reads_total", backend="rapl", read="energy") == 2 * zones
    assert value(samples, "warptd_backend_read_cpu_seconds_total", backend="rapl", read="energy") > 0
    rig.close()
