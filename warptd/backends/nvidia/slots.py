"""Which index each GPU keeps across NVML enumerations: NVML numbers the GPUs it sees now, so when one
leaves the bus the ones after it move down; warptd's index (``device``) stays with the GPU.

A GPU keeps its slot by UUID; a new UUID at the PCI address of a GPU gone takes that GPU's slot (a
replacement board); any other new GPU takes a slot never identified, else a new one at the end. A GPU
NVML lists but will not hand out (no handle, so no identity) takes its own position's slot where that
is free. A slot whose GPU is not listed now stays, empty: that GPU reads as down, never another
in its place.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class Identity:
    """What tells a GPU from another across enumerations."""

    uuid: str | None
    pci_bus_id: str | None


def place(known: Sequence[Identity | None], found: Sequence[Identity | None]) -> list[int | None]:
    """For each slot, the position in ``found`` (NVML's enumeration now; None: no identity) of the
    GPU now at it, None where it is gone. ``known``: each slot's identity as last enumerated (None:
    never identified). As many slots as before, or more."""
    slots: list[int | None] = [None] * len(known)
    left = list(range(len(found)))

    def take(slot: int, position: int) -> None:
        slots[slot] = position
        left.remove(position)

    by_uuid = {ident.uuid: slot for slot, ident in enumerate(known) if ident is not None and ident.uuid}
    for position, ident in enumerate(found):
        slot = by_uuid.get(ident.uuid) if ident is not None and ident.uuid else None
        if slot is not None and slots[slot] is None:
            take(slot, position)
    by_address = {
        ident.pci_bus_id: slot
        for slot, ident in enumerate(known)
        if ident is not None and ident.pci_bus_id and slots[slot] is None
    }
    for position in list(left):
        ident = found[position]
        slot = by_address.pop(ident.pci_bus_id, None) if ident is not None and ident.pci_bus_id else None
        if slot is not None:
            take(slot, position)
    for position in list(left):
        if found[position] is None and position < len(slots) and slots[position] is None:
            take(position, position)  # no identity: its own position, where free
    for position in list(left):
        free = next((s for s, p in enumerate(slots) if p is None and known[s] is None), None)
        if free is None:
            slots.append(None)
            free = len(slots) - 1
        take(free, position)
    return slots
