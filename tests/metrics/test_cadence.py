"""Every shipped rule, panel and docs example takes rate() and increase() over at least 4 steps of the
counter it reads (docs/dashboard.md#rate-windows): the window of each range selector, at the defaults,
against the cadence the catalog gives the metric (warptd.metrics.cadence)."""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml

from warptd.config import Settings
from warptd.metrics import cadence, catalog

ROOT = Path(__file__).parents[2]
RULES = [
    *sorted((ROOT / "deploy" / "prometheus").glob("*.yml")),
    ROOT / "helm" / "warptd" / "files" / "alerts.yml",
]
DASHBOARDS = [
    *sorted((ROOT / "deploy" / "grafana").glob("*.json")),
    ROOT / "helm" / "warptd" / "files" / "warptd.json",
]
DOCS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
#: The data source's scrape interval Grafana assumes where a query sets no min step (its default, and
#: the shipped Prometheus configurations').
SCRAPE_S = 15.0
#: The shortest range a dashboard shows ($__range): Grafana's shortest quick range, the last 5 minutes.
SHORTEST_RANGE_S = 300.0
#: A range selector: a metric name, its matchers, and the window.
RANGE = re.compile(r"(?P<metric>[a-zA-Z_:][a-zA-Z0-9_:]*)\s*(?:\{[^}]*\})?\s*\[(?P<window>[^\]]+)\]")
#: The functions that take a range: an example in the docs is one of their calls.
RANGE_FUNCTION = re.compile(r"\b(?:rate|irate|increase|delta|idelta|deriv|resets|changes|\w+_over_time)\(")
UNITS = {"s": 1, "m": 60, "h": 3600, "d": 86400, "w": 604800}


def seconds(duration: str) -> float:
    """A PromQL duration (``15m``, ``1h30m``) in seconds."""
    parts = re.findall(r"(\d+)([smhdw])", duration)
    assert parts and "".join(n + u for n, u in parts) == duration, f"not a duration: {duration!r}"
    return sum(int(n) * UNITS[u] for n, u in parts)


def grafana_floor(window: str, panel: dict, target: dict) -> float:
    """The least a Grafana window variable takes in this panel and query: ``$__rate_interval`` is
    max($__interval + S, 4 S), S the query's min step else the data source's scrape interval, and
    $__interval at least the panel's min interval and the query's min step."""
    step = seconds(target["interval"]) if target.get("interval") else 0.0
    least_interval = max(step, seconds(panel["interval"]) if panel.get("interval") else 0.0)
    scrape = step or SCRAPE_S
    return {
        "$__rate_interval": max(least_interval + scrape, 4 * scrape),
        "$__range": SHORTEST_RANGE_S,
        "$__interval": least_interval,
    }[window]


def ranges(where: str, expr: str, floor=None) -> Iterator[tuple[str, str, str, float]]:
    """(where, metric, window, its least seconds) of every range selector of ``expr``."""
    for found in RANGE.finditer(expr):
        window = found["window"]
        assert ":" not in window, f"{where}: a subquery, which this test does not read: {expr}"
        least = floor(window) if window.startswith("$") else seconds(window)
        yield where, found["metric"], window, least


def shipped() -> Iterator[tuple[str, str, str, float]]:
    for path in RULES:
        document = yaml.safe_load(path.read_text())
        for group in (document or {}).get("groups", []):
            for rule in group["rules"]:
                name = rule.get("alert") or rule.get("record")
                yield from ranges(f"{path.relative_to(ROOT)} {name}", rule["expr"])
    for path in DASHBOARDS:
        dashboard = json.loads(path.read_text())
        for panel in dashboard["panels"]:
            for target in panel.get("targets", []):
                where = f"{path.relative_to(ROOT)} panel {panel['title']!r}"
                yield from ranges(where, target["expr"], lambda w, p=panel, t=target: grafana_floor(w, p, t))
    for path in DOCS:
        text = path.read_text()
        for block in re.findall(r"```.*?```|`[^`\n]+`", text, flags=re.DOTALL):
            if RANGE_FUNCTION.search(block):  # PromQL, not `pip install '.[amd]'`
                yield from ranges(f"{path.relative_to(ROOT)}", block, lambda w: grafana_floor(w, {}, {}))


@pytest.mark.parametrize(
    "settings",
    [Settings(), Settings(health_interval=30.0, energy_interval=30.0)],
    ids=["the defaults", "energy and health read every 30 s"],
)
def test_every_range_spans_four_steps_of_the_counter_it_reads(settings):
    """At the defaults, and at the 30 s reads this release moves the defaults to (the lead's change),
    which the shipped files are sized for."""
    checked, short = 0, []
    for where, metric, window, least in shipped():
        spec = catalog.BY_NAME.get(metric)
        assert spec is not None, f"{where}: {metric}[{window}] reads no metric of the catalog"
        need = cadence.shortest_window(spec, settings)
        checked += 1
        if least < need:
            short.append(f"{where}: {metric}[{window}] is {least:g} s, under 4 steps of {need / 4:g} s")
    assert not short, "\n".join(short)
    assert checked >= 40  # every rule, panel and example that takes a range was read


@pytest.mark.parametrize(
    ("expr", "least"),
    [
        ("rate(warptd_device_ecc_errors_total[$__rate_interval])", 60.0),  # 4 times a 15 s scrape
        ('increase(warptd_device_xid_errors_total{xid="48"}[15m]) > 0', 900.0),
        ("sum(increase(warptd_device_energy_joules_total[$__range]))", SHORTEST_RANGE_S),
    ],
)
def test_the_windows_read_as_grafana_and_prometheus_take_them(expr, least):
    [(_, _, _, found)] = ranges("example", expr, lambda w: grafana_floor(w, {}, {}))
    assert found == least


def test_a_min_step_of_one_health_read_makes_the_rate_interval_four_of_them():
    assert grafana_floor("$__rate_interval", {}, {"interval": "30s"}) == 120
    assert grafana_floor("$__rate_interval", {"interval": "2m"}, {}) == 135
