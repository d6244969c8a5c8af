"""Which devices and power domains a recording covers, from ids such as ``nvidia:0`` or ``rapl:package-0``."""

from __future__ import annotations

from warptd.recording.recorder import Target, is_top_level_domain
from warptd.sampling.snapshot import Snapshot


class UnknownTarget(ValueError):
    """An id that names no device or domain of this node; the message lists the known ones."""


def available_targets(snapshot: Snapshot) -> dict[str, Target]:
    """Every device of every accelerator backend and every domain sampled so far, by id."""
    found: dict[str, Target] = {}
    for state in snapshot.states():
        if state.has_devices:
            for info in state.devices_info:
                target = Target(
                    "device",
                    state.name,
                    str(info.index),
                    model=info.model,
                    uuid=info.uuid,
                    device_kind="cpu" if state.kind == "cpu" else "accelerator",
                )
                found[target.id] = target
        else:
            for domain in state.domains:
                target = Target("domain", state.name, domain.domain, source=str(domain.source))
                found[target.id] = target
    return found


def default_targets(snapshot: Snapshot, accelerator_backends: set[str]) -> list[Target]:
    """Every accelerator's devices (not the CPU's ``cpu:0``) plus the CPU package domains; on a node
    with neither, every device (the CPU's utilization and temperature, at least)."""
    known = available_targets(snapshot).values()
    chosen = [
        t
        for t in known
        if (t.kind == "device" and t.backend in accelerator_backends)
        or (t.kind == "domain" and is_top_level_domain(t.key))
    ]
    return chosen or [t for t in known if t.kind == "device"]


def select_targets(snapshot: Snapshot, ids: list[str] | None, accelerator_backends: set[str]) -> list[Target]:
    """The targets named by ``ids`` (each once, in order), or the defaults; raises UnknownTarget."""
    if not ids:
        return default_targets(snapshot, accelerator_backends)
    known = available_targets(snapshot)
    missing = [i for i in ids if i not in known]
    if missing:
        names = ", ".join(map(repr, missing))
        raise UnknownTarget(f"unknown device or domain {names}; available: {', '.join(known) or 'none'}")
    return [known[i] for i in dict.fromkeys(ids)]
