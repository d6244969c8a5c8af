"""docs/metrics.md is generated from the catalog and must be current."""

from pathlib import Path

from warptd.exporter.catalog import EVERY
from warptd.exporter.docs import render_markdown

DOC = Path(__file__).parents[1] / "docs" / "metrics.md"


def test_metrics_doc_is_current():
    assert DOC.read_text() == render_markdown(), "run: python -m warptd.exporter.docs > docs/metrics.md"


def test_catalog_follows_prometheus_naming():
    units = (
        "_bytes",
        "_ratio",
        "_watts",
        "_joules",
        "_celsius",
        "_hertz",
        "_seconds",
        "_info",
        "_up",
        "_active",
    )
    units += ("_running", "_per_second")
    for spec in EVERY:
        assert spec.name.startswith("warptd_"), spec.name
        if spec.type == "counter":
            assert spec.name.endswith("_total"), spec.name
        else:
            assert not spec.name.endswith("_total"), spec.name
            assert spec.name.endswith(units), f"{spec.name} has no base-unit suffix"
        assert "percent" not in spec.name
