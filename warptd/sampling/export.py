"""The snapshot as plain JSON, for ``warptd sample --json`` and the stress results."""

from __future__ import annotations

import dataclasses
from typing import Any

from warptd.sampling.snapshot import Snapshot


def snapshot_json(snapshot: Snapshot) -> dict[str, Any]:
    """Every backend's latest samples, with health, in base units."""
    out: dict[str, Any] = {}
    for state in snapshot.states():
        entry: dict[str, Any] = {
            "kind": state.kind,
            "fresh": snapshot.is_fresh(state),
            "stale_reason": state.stale_reason,
            "last_sample_timestamp": state.last_success,
            "errors": {str(k): v for k, v in state.errors.items()},
        }
        if state.has_devices:
            entry["devices"] = [
                {
                    **dataclasses.asdict(s.reading),
                    "energy_joules": s.energy_joules,
                    "throttle_seconds": s.throttle_seconds,
                }
                for s in state.devices
            ]
        else:
            entry["domains"] = [dataclasses.asdict(d) for d in state.domains]
        out[state.name] = entry
    return out
