"""The device nodes (``/dev/…``) each accelerator of a backend is used through, read from sysfs.

Each class device (``<sysfs>/class/<class>/<name>``) links to the PCI device it belongs to
(``device``), and its ``uevent`` names its node the way devtmpfs and udev create it
(``DEVNAME=dri/renderD128``, ``DEVNAME=tenstorrent/0``, ``DEVNAME=accel/accel0``). What differs
between vendors is only data, a :class:`~warptd.backends.vendor.NodeRule` each vendor package declares
for its backend (checked against each vendor's own code or documentation: see docs/workloads.md):
which classes hold the nodes, which node names open the device for work (not the control nodes
monitoring tools open), and where else to look.
"""

from __future__ import annotations

import contextlib
import os
import re
from collections.abc import Iterable
from pathlib import Path

from warptd.backends.vendor import NodeRule
from warptd.files import read_text
from warptd.models import GPUInfo, pci_address


def device_key(info: GPUInfo) -> str:
    """How energy and process lists name a device: its uuid, else its index (a DRM card without one)."""
    return info.uuid or str(info.index)


def device_nodes(sysfs: Path, rule: NodeRule, infos: Iterable[GPUInfo]) -> dict[str, frozenset[str]]:
    """Each device's key -> the ``/dev`` paths it is used through (empty where none was found)."""
    infos = list(infos)
    by_function = _class_nodes(sysfs, rule)
    found: dict[str, frozenset[str]] = {}
    for info in infos:
        address = pci_address(info.pci_bus_id)
        nodes: set[str] = set()
        if address:
            slot = address.rpartition(".")[0]
            for function, names in by_function.items():
                if function == address or (rule.whole_slot and function.rpartition(".")[0] == slot):
                    nodes |= names
            if rule.vfio_group:
                nodes |= _vfio_groups(sysfs, address, slot if rule.whole_slot else None)
        found[device_key(info)] = frozenset(nodes)
    if rule.board_key:
        boards: dict[object, set[str]] = {}
        for info in infos:
            board = (info.extra_metrics or {}).get(rule.board_key)
            if board is not None:
                boards.setdefault(board, set()).update(found[device_key(info)])
        for info in infos:
            board = (info.extra_metrics or {}).get(rule.board_key)
            if not pci_address(info.pci_bus_id) and board is not None:
                found[device_key(info)] = frozenset(boards[board])
    return found


def _class_nodes(sysfs: Path, rule: NodeRule) -> dict[str, set[str]]:
    """PCI address -> the nodes of the rule's classes whose ``device`` link leads to it."""
    found: dict[str, set[str]] = {}
    for kind in rule.classes:
        try:
            entries = sorted((sysfs / "class" / kind).iterdir())
        except OSError:
            continue
        for entry in entries:
            name = _devname(entry / "uevent")
            if name is None or not re.fullmatch(rule.names, name):
                continue
            try:
                address = pci_address(os.path.basename(os.path.realpath(entry / "device", strict=True)))
            except OSError:
                continue
            if address:
                found.setdefault(address, set()).add(f"/dev/{name}")
    return found


def _vfio_groups(sysfs: Path, address: str, slot: str | None) -> set[str]:
    """``/dev/vfio/<group>`` of the function (or of every function of ``slot``)."""
    devices = sysfs / "bus" / "pci" / "devices"
    functions = sorted(devices.glob(f"{slot}.*")) if slot else [devices / address]
    nodes = set()
    for function in functions:
        with contextlib.suppress(OSError):  # no IOMMU group: not passed through VFIO
            nodes.add(f"/dev/vfio/{os.path.basename(os.readlink(function / 'iommu_group'))}")
    return nodes


def _devname(uevent: Path) -> str | None:
    """The node name the kernel gives a class device (``DEVNAME=`` of its uevent)."""
    try:
        text = read_text(uevent)
    except OSError:
        return None
    for line in text.splitlines():
        if line.startswith("DEVNAME="):
            return line.removeprefix("DEVNAME=").strip() or None
    return None
