"""The snapshot as plain JSON, for ``warptd sample --json`` and the stress results."""

from __future__ import annotations

import dataclasses
from typing import Any

from warptd.metrics import catalog
from warptd.metrics.spec import DEVICE_LABELS
from warptd.models import LabelledValues
from warptd.sampling.snapshot import DeviceSample, Snapshot


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
            entry["devices"] = [device_json(s) for s in state.devices]
        else:
            entry["domains"] = [dataclasses.asdict(d) for d in state.domains]
        out[state.name] = entry
    return out


def device_json(sample: DeviceSample) -> dict[str, Any]:
    """One device's reading and totals; a labelled metric is a list of its series, each its own
    labels by name (as ``/metrics`` names them) and ``value``: ``{"pipe": "tensor", "value": 0.4}``."""
    reading = dataclasses.asdict(sample.reading)
    return {
        **reading,
        "gauges": labelled_json(sample.reading.gauges),
        "counters": labelled_json(sample.reading.counters),
        "energy_joules": sample.energy_joules,
        "throttle_seconds": sample.throttle_seconds,
        "counter_totals": labelled_json(sample.counters),
    }


def labelled_json(values_by_metric: dict[str, LabelledValues]) -> dict[str, list[dict[str, Any]]]:
    """``{metric: {(label values...): value}}`` as ``{metric: [{label: value..., "value": v}]}``,
    named by the metric's own labels in the catalog (those after the device's)."""
    out: dict[str, list[dict[str, Any]]] = {}
    for name, values in values_by_metric.items():
        names = catalog.BY_NAME[name].labels[len(DEVICE_LABELS) :]
        out[name] = [{**dict(zip(names, labels, strict=True)), "value": v} for labels, v in values.items()]
    return out
