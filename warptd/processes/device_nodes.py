"""The device nodes (``/dev/…``) each accelerator of a backend is used through, read from sysfs.

Each class device (``<sysfs>/class/<class>/<name>``) links to the PCI device it belongs to
(``device``), and its ``uevent`` names its node the way devtmpfs and udev create it
(``DEVNAME=dri/renderD128``, ``DEVNAME=tenstorrent/0``, ``DEVNAME=accel/accel0``). What differs
between vendors is only data, a :class:`NodeRule`: which classes hold the nodes, which node names
open the device for work (not the control nodes monitoring tools open), and where else to look.
"""

from __future__ import annotations

import contextlib
import os
import re
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

from warptd.files import read_text
from warptd.models import GPUInfo, pci_address


@dataclass(frozen=True)
class NodeRule:
    """How one backend's devices map to the device nodes a process opens to use them."""

    #: sysfs classes (``<sysfs>/class/<class>``) whose devices are the nodes.
    classes: tuple[str, ...]
    #: The ``DEVNAME`` values (regular expression, whole name) that open the device for work.
    names: str
    #: Also ``/dev/vfio/<iommu group>`` of each function (a device passed to userspace through VFIO).
    vfio_group: bool = False
    #: Every PCI function of the device's slot, not only the one the backend names (a TPU chip: one
    #: function per core).
    whole_slot: bool = False
    #: A device without a PCI address of its own (reached through another) takes the nodes of the
    #: devices whose ``extra_metrics`` hold the same value under this key.
    board_key: str = ""
    #: The node's open files carry DRM client usage stats in ``/proc/PID/fdinfo``.
    fdinfo: bool = False


#: Checked against each vendor's own code or documentation (see docs/workloads.md).
RULES: dict[str, NodeRule] = {
    # tpu-info's get_chip_owners: /dev/accelN (v2-v4, class accel) or /dev/vfio/<group> (v5e and newer).
    "tpu": NodeRule(
        ("accel", "vfio-dev"), r"accel\d+|vfio/devices/vfio\d+", vfio_group=True, whole_slot=True
    ),
    # tt-kmd: class "tenstorrent", device "tenstorrent/%d"; an n300's second chip is reached through
    # the first one's node.
    "tenstorrent": NodeRule(("tenstorrent",), r"tenstorrent/\d+", board_key="board_id"),
    # habanalabs: /dev/accel/accelN (accel subsystem) or /dev/hlN (before it); the accel_controlDN and
    # hl_controlDN nodes are for monitoring (hl-smi, HLML) and hold no compute context.
    "gaudi": NodeRule(("accel", "habanalabs"), r"accel/accel\d+|hl\d+"),
    # DRM GPUs served through sysfs (amdgpu, i915, xe): the primary and render nodes.
    "hwmon": NodeRule(("drm",), r"dri/card\d+|dri/renderD\d+", fdinfo=True),
}


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
