"""Generates docs/metrics.md from the catalog: ``python -m warptd.metrics.docs > docs/metrics.md``."""

from __future__ import annotations

from warptd.metrics.catalog import EVERY, MetricSpec

_HEADER = """# warptd metrics

Generated from `warptd/metrics/catalog.py` by `python -m warptd.metrics.docs > docs/metrics.md`;
a test fails when this file is out of date.

Every device series carries `backend`, `device` (index within the backend) and `uuid` (empty
where the hardware has none). Values the hardware does not support are absent series, never 0.
A lost device keeps `warptd_device_up 0` and loses its value series; a stale backend
(`warptd_backend_up 0`) loses all its device and domain series. Process metrics (`process_*`)
come from prometheus_client.

| metric | type | labels | meaning |
|---|---|---|---|
"""


def _buckets(spec: MetricSpec) -> str:
    """A histogram's buckets, as its series carry them in ``le``."""
    if not spec.buckets:
        return ""
    return " Buckets (`le`): " + ", ".join(f"{b:g}" for b in spec.buckets) + ", +Inf."


def render_markdown() -> str:
    rows = [
        f"| `{spec.name}` | {spec.type} | {', '.join(f'`{label}`' for label in spec.labels)} | "
        f"{spec.help}{_buckets(spec)} |"
        for spec in EVERY
    ]
    return _HEADER + "\n".join(rows) + "\n"


if __name__ == "__main__":
    print(render_markdown(), end="")
