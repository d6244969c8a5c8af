"""How a MIG GPU's energy is split between the containers holding its MIG devices.

A MIG device has no power sensor: the GPU's energy is the board's. Each MIG device held by a
container weighs its GPU instance's SM activity (GPM, over its latest sample) times its compute
slices (the ``3`` of profile ``3g.40gb``): a busy 3g slice draws more than a busy 1g one. Where a
held MIG device has no GPM reading (pre-Hopper, a driver without GPM) or all held ones are idle,
the weight is the slice count alone. Without the ``nvidia_mig`` backend the split stays even.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Literal

from warptd.metrics import catalog, nvidia

if TYPE_CHECKING:
    from warptd.k8s.podresources import Owner
    from warptd.models import GPUInfo
    from warptd.sampling.snapshot import BackendState

#: The accelerator backend whose devices are MIG devices (warptd.backends.nvidia.mig).
MIG_BACKEND = "nvidia_mig"
Method = Literal["sm_activity", "slice_size"]


def compute_slices(profile: str) -> int:
    """Compute slices of a MIG profile: ``3g.40gb`` -> 3, ``1c.3g.40gb`` -> 1; 1 when unknown."""
    head = profile.partition(".")[0]
    return int(head[:-1]) if head[:-1].isdigit() and head[-1:] in ("g", "c") else 1


def mig_shares(
    gpu: GPUInfo,
    owners: tuple[Owner, ...],
    owners_of: Callable[[GPUInfo], tuple[Owner, ...]],
    mig_state: BackendState | None,
) -> tuple[dict[Owner, float], Method] | None:
    """Each owner's share of ``gpu``'s energy (summing to 1) and how it was weighed; None when the GPU
    has no held MIG device listed by the nvidia_mig backend, or some owner holds no MIG device of it."""
    if mig_state is None or not gpu.uuid:
        return None
    infos = {info.index: info for info in mig_state.devices_info}
    held: list[tuple[tuple[Owner, ...], float, float | None]] = []  # (owners, slices, SM activity)
    for sample in mig_state.devices:
        reading, info = sample.reading, infos.get(sample.reading.index)
        identity = next(iter(reading.gauges.get(catalog.MIG_INFO.name, {})), None)
        if info is None or identity is None or identity[0] != gpu.uuid:
            continue
        holders = owners_of(info)
        if holders:
            activity = reading.gauges.get(nvidia.SM_ACTIVE.name, {}).get(())
            held.append((holders, float(compute_slices(identity[3])), activity))
    if not held or {o for holders, _, _ in held for o in holders} != set(owners):
        return None
    method: Method = "sm_activity"
    weights = [slices * activity for _, slices, activity in held if activity is not None]
    if len(weights) < len(held) or sum(weights) <= 0:
        method, weights = "slice_size", [slices for _, slices, _ in held]
    total, shares = sum(weights), dict.fromkeys(owners, 0.0)
    for (holders, _, _), weight in zip(held, weights, strict=True):
        for owner in holders:
            shares[owner] += weight / total / len(holders)
    return shares, method
