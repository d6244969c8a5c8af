"""TPU chips as device objects: found under ``--sysfs`` with tpu-info's own vendor id and chip table,
each read from the values the libtpu runtime gave every chip this sample."""

from __future__ import annotations

import os
import re
from collections.abc import Callable
from pathlib import Path
from types import ModuleType
from typing import Any

from warptd.backends.device import ValueDevice
from warptd.models import MemoryUsage, Utilization, pci_address
from warptd.sysfs import read_text

_NUMBER = re.compile(r"(\d+)")
#: This sample's runtime values: tpu-info's MetricName member -> device id -> value.
RuntimeValues = dict[str, dict[int, float]]


class TpuChip(ValueDevice):
    """One chip: its PCI functions (``bus/pci/devices/<addr>``, function 0 first) and device node;
    ``runtime()`` gives the runtime's values of this sample, for every chip (``chips`` of them)."""

    def __init__(self, kind: Any, functions: list[Path], node: str | None, driver: str | None) -> None:
        super().__init__(0)
        self.kind = kind  # tpu_info.device.TpuChip
        self.functions, self.node, self.driver = functions, node, driver
        self.first_core = 0  # the runtime's device id of this chip's first core
        self.chips = 1
        self.runtime: Callable[[], RuntimeValues] = dict

    @property
    def address(self) -> str:
        return pci_address(self.functions[0].name) or self.functions[0].name

    @property
    def cores(self) -> range:
        return range(self.first_core, self.first_core + self.kind.value.devices_per_chip)

    def present(self) -> bool:
        """Whether every PCI function is still there (not unbound)."""
        return all(function.exists() for function in self.functions)

    def _per_chip(self, metric: str) -> list[float] | None:
        """This chip's values: one per core where the runtime reports per core, else one."""
        by_id = self.runtime().get(metric)
        if not by_id:
            return None
        ids = self.cores if len(by_id) > self.chips else range(self.index, self.index + 1)
        found = [by_id[i] for i in ids if i in by_id]
        return found if len(found) == len(ids) else None

    def memory(self) -> MemoryUsage | None:
        """HBM total and used over the chip's cores, bytes (only while a workload runs)."""
        total = self._per_chip("TOTAL_MEMORY")
        used = self._per_chip("MEMORY_USAGE")
        if not total or used is None or sum(total) <= 0:
            return None
        return MemoryUsage(total=int(sum(total)), used=int(sum(used)), free=int(sum(total) - sum(used)))

    def utilization(self) -> Utilization | None:
        """The duty cycle and HBM bandwidth use over the chip's cores, 0..1 (the runtime: percent)."""
        duty = self._per_chip("DUTY_CYCLE_PCT")
        hbm = self._per_chip("HBM_BW_UTIL")
        if duty is None and hbm is None:
            return None
        return Utilization(
            compute=sum(duty) / len(duty) / 100 if duty else None,
            memory=sum(hbm) / len(hbm) / 100 if hbm else None,
        )


def discover(sysfs: Path, device: ModuleType, runtime: Callable[[], RuntimeValues]) -> list[TpuChip]:
    """TPU chips under ``sysfs``/bus/pci/devices, grouped and ordered as tpu-info's ``get_chips``.

    tpu-info's own functions read the real /sys; this reads ``--sysfs`` with its constants instead.
    """
    functions: dict[str, list[Path]] = {}
    kinds: dict[str, Any] = {}
    for path in sorted((sysfs / "bus" / "pci" / "devices").glob("*")):
        try:
            if read_text(path / "vendor") != device.GOOGLE_PCI_VENDOR_ID:
                continue
            subsystem = path / "subsystem_device"  # tells v2 from v3 only
            kind = device.TpuChip.from_pci_device_id(
                read_text(path / "device"), read_text(subsystem) if subsystem.exists() else ""
            )
        except OSError:
            continue
        if kind is None:
            continue  # gVNIC and other Google devices
        base, _, _ = path.name.rpartition(".")  # domain:bus:device; the function is the core
        functions.setdefault(base, []).append(path)
        kinds[base] = kind
    chips = []
    for base, paths in functions.items():
        paths.sort(key=_function)
        chips.append(TpuChip(kinds[base], paths, _node(paths[0]), _driver(paths[0])))
    chips.sort(key=lambda chip: (chip.node is None, _natural(chip.node or ""), chip.address))
    first_core = 0
    for position, chip in enumerate(chips):
        chip.index, chip.chips, chip.runtime = position, len(chips), runtime
        chip.node = chip.node or device.chip_path(chip.kind, position)
        chip.first_core = first_core
        first_core += chip.kind.value.devices_per_chip
    return chips


def _function(path: Path) -> int:
    return int(path.name.rpartition(".")[2] or "0", 16)


def _node(path: Path) -> str | None:
    """``/dev/accelN`` (the accel class device under the PCI device), else tpu-info's vfio group node."""
    accel = sorted((path / "accel").glob("accel*"), key=lambda p: _natural(p.name))
    if accel:
        return f"/dev/{accel[0].name}"
    try:
        return f"/dev/vfio/{os.path.basename(os.readlink(path / 'iommu_group'))}"
    except OSError:
        return None


def _driver(path: Path) -> str | None:
    try:
        return os.path.basename(os.readlink(path / "driver"))
    except OSError:
        return None


def _natural(text: str) -> list[Any]:
    """Sort key that puts ``/dev/vfio/2`` before ``/dev/vfio/10``."""
    return [int(part) if part.isdigit() else part for part in _NUMBER.split(text)]
