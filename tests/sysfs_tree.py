"""Builds fixture sysfs trees (powercap RAPL zones, hwmon chips) under a temporary root."""

from __future__ import annotations

import os
from pathlib import Path
from unittest import mock

from warptd import sysfs

#: AMD EPYC's max_energy_range_uj: a 32-bit counter of 2^-16 J units.
AMD_RANGE_UJ = 65_532_610_987


def cpuinfo(procfs: Path, vendor: str, cpus: int = 2, megahertz: list[float] | None = None) -> None:
    """``<procfs>/cpuinfo`` of an x86 machine whose CPUs are from ``vendor`` (``AuthenticAMD`` …), each
    at its ``megahertz`` (``cpu MHz``) where given."""
    procfs.mkdir(parents=True, exist_ok=True)
    clocks = megahertz or [None] * cpus
    blocks = (
        f"processor\t: {n}\nvendor_id\t: {vendor}\ncpu family\t: 25\n"
        + (f"cpu MHz\t\t: {mhz:.3f}\n" if mhz is not None else "")
        for n, mhz in enumerate(clocks)
    )
    (procfs / "cpuinfo").write_text("\n".join(blocks))


class SysfsTree:
    """A fake ``/sys`` with helpers that write the files the kernel would expose."""

    def __init__(self, root: Path) -> None:
        self.root = root
        root.mkdir(parents=True, exist_ok=True)

    def write(self, relative: str, value: object) -> Path:
        path = self.root / relative
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(f"{value}\n")
        return path

    def rapl_zone(self, zone: str, name: str, energy_uj: int, max_range_uj: int = 262_143_328_850) -> Path:
        base = f"class/powercap/{zone}"
        self.write(f"{base}/name", name)
        self.write(f"{base}/max_energy_range_uj", max_range_uj)
        return self.write(f"{base}/energy_uj", energy_uj)

    def rapl_multi_die(self, sockets: int = 2, dies: int = 2) -> dict[str, int]:
        """The layout of a multi-die part (e.g. Cascade Lake-AP, 2 sockets x 2 dies): one top-level
        zone per die, ``intel-rapl:N`` named ``package-S-die-D``, each with subzones ``dram`` (:0)
        and ``core`` (:1). Returns the energy_uj written (all different) by zone directory."""
        energies = {}
        for socket in range(sockets):
            for die in range(dies):
                n = socket * dies + die
                names = {"": f"package-{socket}-die-{die}", ":0": "dram", ":1": "core"}
                for offset, (sub, name) in enumerate(names.items()):
                    zone = f"intel-rapl:{n}{sub}"
                    energies[zone] = 1_000_000 * (10 * n + 10 + offset)
                    self.rapl_zone(zone, name, energies[zone])
        return energies

    def rapl_amd(self, sockets: int = 1) -> None:
        """The layout AMD EPYC exposes: ``intel-rapl:N`` named ``package-N`` with one subzone
        ``core`` (one core's counter), no dram, all wrapping at 65.5 kJ."""
        for n in range(sockets):
            self.rapl_zone(f"intel-rapl:{n}", f"package-{n}", 10_000_000 * (n + 1), AMD_RANGE_UJ)
            self.rapl_zone(f"intel-rapl:{n}:0", "core", 1_000_000 * (n + 1), AMD_RANGE_UJ)

    def set_energy(self, zone: str, energy_uj: int) -> None:
        self.write(f"class/powercap/{zone}/energy_uj", energy_uj)

    def cpufreq_policy(self, number: int, khz: int, cpus: list[int]) -> Path:
        """``devices/system/cpu/cpufreq/policyN`` serving ``cpus``, now at ``khz``; returns the
        ``scaling_cur_freq`` file."""
        base = f"devices/system/cpu/cpufreq/policy{number}"
        self.write(f"{base}/affected_cpus", " ".join(map(str, cpus)))
        return self.write(f"{base}/scaling_cur_freq", khz)

    def hwmon(self, index: int, name: str, temps: dict[str, int | None]) -> Path:
        """A hwmon chip; ``temps`` maps labels (or None for unlabeled) to millidegrees."""
        base = f"class/hwmon/hwmon{index}"
        self.write(f"{base}/name", name)
        for n, (label, millideg) in enumerate(temps.items(), start=1):
            self.write(f"{base}/temp{n}_input", millideg)
            if label and not label.startswith("temp"):
                self.write(f"{base}/temp{n}_label", label)
        return self.root / base


def unreadable(path: Path) -> mock._patch | None:
    """Make ``path`` unreadable like a root-only sysfs file: chmod 000, or as root (who bypasses
    file modes) a patched read raising the same ``PermissionError`` the kernel would give."""
    path.chmod(0)
    if os.geteuid() != 0:
        return None
    real_read_text = sysfs.read_text

    def read_text(read: Path) -> str:
        if read == path:
            raise PermissionError(13, "Permission denied", str(path))
        return real_read_text(read)

    return mock.patch.object(sysfs, "read_text", read_text)


def drm_card(  # noqa: PLR0917 - a fixture builder
    tree: SysfsTree,
    number: int,
    driver: str,
    pci: str,
    attrs: dict[str, object],
    hwmon: dict[str, object],
) -> Path:
    """``class/drm/cardN`` whose ``device`` links to a PCI device bound to ``driver``, with attributes
    (``mem_info_vram_total``, ``gpu_busy_percent`` …) and one hwmon chip with the given files."""
    device = tree.root / "devices" / "pci0000:00" / pci
    device.mkdir(parents=True, exist_ok=True)
    drivers = tree.root / "bus" / "pci" / "drivers" / driver
    drivers.mkdir(parents=True, exist_ok=True)
    (device / "driver").symlink_to(drivers)
    for name, value in attrs.items():
        (device / name).write_text(f"{value}\n")
    chip = device / "hwmon" / f"hwmon{number + 3}"
    chip.mkdir(parents=True)
    (chip / "name").write_text(f"{driver}\n")
    for name, value in hwmon.items():
        (chip / name).write_text(f"{value}\n")
    card = tree.root / "class" / "drm" / f"card{number}"
    card.mkdir(parents=True)
    (card / "device").symlink_to(device)
    connector = tree.root / "class" / "drm" / f"card{number}-DP-1"  # a connector, not a device
    connector.mkdir()
    return device
