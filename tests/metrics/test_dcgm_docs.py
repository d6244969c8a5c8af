"""``--compat dcgm-exporter``: dcgm-exporter's default series from the NVML double, checked against
dcgm-exporter's own files (tests/data/dcgm-exporter, Apache-2.0 copies): its default-counters CSV and
NVIDIA's Grafana dashboard, in a real Prometheus."""

from __future__ import annotations

from pathlib import Path

from warptd.metrics.dcgm_docs import TABLE_BEGIN, TABLE_END, render_rules, render_table

ROOT = Path(__file__).parents[2]


GUIDE = ROOT / "docs" / "migrating-from-dcgm-exporter.md"


RULES = ROOT / "deploy" / "prometheus" / "dcgm-exporter-rules.yml"


def test_the_guide_s_table_and_the_shipped_rules_are_generated_from_the_table():
    guide = GUIDE.read_text()
    start, end = guide.index(TABLE_BEGIN), guide.index(TABLE_END) + len(TABLE_END) + 1
    assert guide[start:end] == render_table(), "run python -m warptd.metrics.dcgm_docs table"
    assert RULES.read_text() == render_rules(), "run python -m warptd.metrics.dcgm_docs rules"
