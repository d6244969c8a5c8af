"""One amdsmi handle and its identity: the UUID, and for a partition of a GPU ``<uuid>/<partition id>``.

The ``amd`` backend's devices and the AMD process monitor both name a handle by :func:`identify`, so
the energy a device reports and the processes listed on it meet under one key.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from types import ModuleType
from typing import Any

from warptd.backends.amd.values import integer, text
from warptd.models import pci_address

#: A guarded call: ``call(index, what, function, *arguments)``, None when it failed.
Call = Callable[..., Any]


class AmdHandle:
    """One handle amdsmi gave (a whole GPU, or a partition of one) and what names it."""

    def __init__(self, index: int, handle: Any, sdk: ModuleType, call: Call) -> None:
        self.index, self.handle = index, handle
        self._sdk, self._call = sdk, call
        #: The stable identity: the UUID, and for a partition of a GPU ``<uuid>/<partition id>``.
        self.identity: str | None = None
        #: ``amdsmi_get_gpu_kfd_info``'s ``current_partition_id`` where the GPU is partitioned, else None.
        self.partition: int | None = None
        self._address: str | None = None

    def get(self, what: str, fn_name: str, *args: object) -> Any:
        """One guarded call of ``amdsmi.<fn_name>(handle, *args)``; None where this amdsmi lacks it
        (enumeration info is recent) or it failed."""
        fn = getattr(self._sdk, fn_name, None)
        if fn is None:
            return None
        return self._call(self.index, what, fn, self.handle, *args)

    @property
    def primary(self) -> bool:
        """Whether this handle reports its GPU's socket-wide values (every unpartitioned GPU, and the
        first partition of a partitioned one): socket power and energy, XGMI traffic, ECC."""
        return not self.partition

    def address(self) -> str | None:
        """The PCI address, read once it answered. The partitions of one GPU are taken to share it, which
        public reports contradict (docs/hardware.md, "The shared BDF")."""
        if self._address is None:
            bdf = text(self.get("bdf", "amdsmi_get_gpu_device_bdf"))
            self._address = pci_address(bdf) or bdf if bdf else None
        return self._address

    def uuid(self) -> str | None:
        """The UUID as amdsmi reports it (the whole GPU's, for a partition on older amdsmi)."""
        return text(self.get("uuid", "amdsmi_get_gpu_device_uuid"))

    def reported_partition(self) -> int | None:
        """``amdsmi_get_gpu_kfd_info``'s ``current_partition_id``, where this amdsmi has it."""
        kfd = self.get("kfd", "amdsmi_get_gpu_kfd_info") or {}
        return integer(kfd.get("current_partition_id"))


def identify(handles: Sequence[AmdHandle], index: int) -> str | None:
    """Handle ``index``'s identity, read once it answered: the UUID; for a partition ``<uuid>/<partition
    id>``: older amdsmi gives every partition of a GPU its UUID, and all share its serial and PCI address."""
    handle = handles[index]
    if handle.identity is None:
        uuid = handle.uuid()
        if uuid is None:
            return None
        handle.partition = _partition(handles, index)
        handle.identity = uuid if handle.partition is None else f"{uuid}/{handle.partition}"
    return handle.identity


def _partition(handles: Sequence[AmdHandle], index: int) -> int | None:
    """The partition id of a handle that shares its PCI address with others, else None."""
    addresses = [other.address() for other in handles]
    address = addresses[index]
    if address is None or addresses.count(address) < 2:
        return None
    partition = handles[index].reported_partition()
    if partition is not None:
        return partition
    # an amdsmi without the partition id: the order among the handles at that address
    return addresses[:index].count(address)
