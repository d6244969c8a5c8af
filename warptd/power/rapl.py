"""CPU package/core/uncore/DRAM/psys energy from Linux powercap (RAPL), in µJ, wrapping.

Each read of a zone's ``energy_uj`` is a fresh MSR read (no cache in the kernel), sent as an IPI to a CPU
of the package unless the reader runs there (``intel_rapl_msr.c``), or an MMIO read on TPMI parts. The
counter advances every millisecond or so, faster than any sample: every sample reads it, since the power
exported is its delta. Charged to ``read_costs`` as ``energy``, one read a zone.
"""

from __future__ import annotations

import re
from collections.abc import Hashable
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING, ClassVar

import structlog

from warptd.backends.costs import ReadKind, thread_time
from warptd.errors import BackendUnavailableError, ErrorKind
from warptd.power.base import DomainReading, PowerBackend, PowerSource
from warptd.sysfs import read_int, read_text

if TYPE_CHECKING:
    from warptd.config import Settings

log = structlog.get_logger("warptd.rapl")
# intel-rapl:0 is a package (or psys), intel-rapl:0:1 a subzone of it. intel-rapl-mmio mirrors
# the package counter on recent Intel parts and is skipped, so a package is never counted twice.
_ZONE = re.compile(r"^intel-rapl:(\d+)(?::(\d+))?$")
_UJ = 1e-6
#: The most one RAPL domain is assumed to draw when choosing how often to read it: twice the TDP of
#: the largest server packages (500 W: EPYC 9005, Xeon 6900P), so boosts above TDP stay below it.
#: (counters.MAX_PLAUSIBLE_WATTS, 5000 W, is the bound for telling a wrap from a reset instead.)
MAX_DOMAIN_WATTS = 1000.0
#: Reads per shortest wrap period at MAX_DOMAIN_WATTS: up to three late or failed samples in a row
#: (a timeout, a hung read) still leave at most one wrap between two readings, which is all a
#: counter can tell. On AMD's 65.5 kJ range that is a read every 16 s; on Intel's 262 kJ, 65 s.
READS_PER_WRAP = 4
#: Never read more often than this on account of the range, whatever a zone reports.
MIN_INTERVAL_S = 1.0
#: CPU vendors whose powercap zones the kernel fills from AMD's MSRs (Hygon's Dhyana is a Zen).
_AMD_VENDORS = frozenset({"AuthenticAMD", "HygonGenuine"})


@dataclass(frozen=True, slots=True)
class RaplZone:
    domain: str
    path: Path
    range_joules: float | None
    #: The kernel's name for the zone (``package-0``, ``core``, ``dram`` …).
    kind: str = ""


class RaplPowerBackend(PowerBackend):
    """Domains ``package-0``, ``core-0``, ``uncore-0``, ``dram-0``, ``psys`` from ``--sysfs``.

    On multi-die parts: ``package-0-die-1``, ``dram-0-die-1`` and so on. On AMD CPUs there is no
    ``core-N`` (see :func:`_without_amd_core`).
    """

    name: ClassVar[str] = "rapl"
    source: ClassVar[PowerSource] = PowerSource.RAPL

    def __init__(self, settings: Settings) -> None:
        super().__init__(settings)
        root = settings.sysfs / "class" / "powercap"
        self.zones = _discover(root)
        if _cpu_vendor(settings.procfs) in _AMD_VENDORS:
            self.zones = _without_amd_core(self.zones)
        self.max_interval = _max_interval(self.zones)
        if not self.zones:
            raise BackendUnavailableError(f"no RAPL zones under {root}")
        self._reported_unreadable: set[str] = set()
        #: Each zone with its ``energy_uj``, joined once.
        self._energy_files = [(zone, zone.path / "energy_uj") for zone in self.zones]

    def classify_error(self, exc: BaseException) -> ErrorKind:
        if isinstance(exc, ValueError):
            return ErrorKind.SDK_ERROR  # a garbled attribute
        return super().classify_error(exc)

    def is_available(self) -> bool:
        return bool(self.zones)

    def read_domains(self) -> list[DomainReading]:
        readings = []
        costs = self.read_costs
        for zone, energy_file in self._energy_files:
            started = thread_time()
            microjoules = self.guarded(zone, read_int, energy_file)
            costs.charge(ReadKind.ENERGY, started)
            if microjoules is None:
                readings.append(DomainReading(domain=zone.domain, readable=False))
                continue
            readings.append(
                DomainReading(
                    domain=zone.domain,
                    energy_counter_joules=microjoules * _UJ,
                    energy_range_joules=zone.range_joules,
                )
            )
        return readings

    def on_error(self, key: Hashable, kind: ErrorKind, exc: BaseException) -> None:
        """Count as usual, and say once per domain why it is unreadable."""
        super().on_error(key, kind, exc)
        if not isinstance(key, RaplZone) or key.domain in self._reported_unreadable:
            return
        self._reported_unreadable.add(key.domain)
        reason = (
            "energy_uj is readable by root only (Linux >= 5.10): run warptd as root, or grant read "
            "access with a udev rule / systemd-tmpfiles (see docs/hardware.md)"
            if kind is ErrorKind.PERMISSION
            else repr(exc)
        )
        log.warning("rapl_domain_unreadable", domain=key.domain, path=str(key.path), reason=reason)


def _discover(root: Path) -> list[RaplZone]:
    zones = []
    entries = [(m, p) for p in root.glob("intel-rapl:*") if (m := _ZONE.match(p.name))]
    packages = {m.group(1): p for m, p in entries if m.group(2) is None}
    for match, path in sorted(entries, key=lambda e: (int(e[0].group(1)), int(e[0].group(2) or -1))):
        try:
            name = read_text(path / "name")
        except OSError:
            continue
        parent = packages.get(match.group(1)) if match.group(2) is not None else None
        zones.append(
            RaplZone(domain=_domain_name(name, parent), path=path, range_joules=_range(path), kind=name)
        )
    return _unique(zones)


def _domain_name(name: str, parent: Path | None) -> str:
    """``package-0`` and ``psys`` stay; a subzone takes its package's suffix: ``core-0``, ``dram-1``.

    On multi-die parts the kernel names packages ``package-N-die-M``; a subzone then carries both
    numbers (``dram-0-die-1``), so two dies' subzones never share a name.
    """
    if parent is None:
        return name
    try:
        parent_name = read_text(parent / "name")
    except OSError:
        parent_name = ""
    suffix = (
        parent_name.removeprefix("package-")
        if parent_name.startswith("package-")
        else parent.name.partition(":")[2]
    )
    return f"{name}-{suffix}"


def _unique(zones: list[RaplZone]) -> list[RaplZone]:
    """A name the kernel repeats anyway (two ``psys``) keeps its first holder; later ones add their
    zone directory (``psys-intel-rapl:3``), so no two zones ever share one series and one tracker."""
    seen: set[str] = set()
    unique = []
    for zone in zones:
        named = zone
        if zone.domain in seen:
            named = replace(zone, domain=f"{zone.domain}-{zone.path.name}")
            log.warning(
                "rapl_domain_name_repeated", domain=zone.domain, path=str(zone.path), renamed=named.domain
            )
        seen.add(named.domain)
        unique.append(named)
    return unique


def _cpu_vendor(procfs: Path) -> str | None:
    """``vendor_id`` of the first CPU in ``<procfs>/cpuinfo``; None when unreadable (not x86)."""
    try:
        for line in (procfs / "cpuinfo").read_text().splitlines():
            key, _, vendor = line.partition(":")
            if key.strip() == "vendor_id":
                return vendor.strip()
    except OSError:
        pass
    return None


def _without_amd_core(zones: list[RaplZone]) -> list[RaplZone]:
    """Drop the ``core`` subzones of an AMD (or Hygon) CPU.

    There the kernel reads ``core`` from MSR_AMD_CORE_ENERGY_STATUS of the package's lead CPU:
    one core's energy, not all cores' as on Intel. Exported as ``core-N`` it would be summed and
    compared as all cores, so it is skipped rather than relabelled: one arbitrary core says nothing
    about the package, and a new domain name would be one more exception for every query.
    The vendor decides because the kernel itself chooses AMD's MSRs by vendor; /proc/cpuinfo shows
    the host CPU's vendor in any container. The zone layout (package + core, no dram) and AMD's
    65.5 kJ range are only heuristics that an Intel part could match.
    """
    core = [z for z in zones if z.kind == "core" and z.path.name.count(":") == 2]
    if core:
        log.debug(
            "rapl_domains_skipped",
            domains=[z.domain for z in core],
            reason="on AMD the RAPL core counter is one core's (the package's lead CPU), not all cores'",
        )
    return [z for z in zones if z not in core]


def _max_interval(zones: list[RaplZone]) -> float | None:
    """Seconds between two reads that keep every zone to at most one wrap between readings."""
    ranges = [z.range_joules for z in zones if z.range_joules]
    if not ranges:
        return None
    return max(MIN_INTERVAL_S, min(ranges) / (MAX_DOMAIN_WATTS * READS_PER_WRAP))


def _range(path: Path) -> float | None:
    try:
        return read_int(path / "max_energy_range_uj") * _UJ
    except (OSError, ValueError):
        return None
