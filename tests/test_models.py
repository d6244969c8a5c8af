"""The gaudi and hlml backends against the HLML double (tests/doubles/hlml.py); no Habana device needed."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
import yaml

from tests.backends.gaudi import test_backend as gaudi_backend
from warptd.models import CLOCK_EVENT_REASONS, GPUInfo

fake_hlml = gaudi_backend.fake_hlml  # the HLML double with three Gaudis, a fixture
gaudi = gaudi_backend.gaudi  # the Gaudi backend over that double, a fixture


pytestmark = pytest.mark.rig("gaudi", doubles=["fake_hlml"])  # and its companion power backend, hlml


def test_pytorch_device_and_worker_pinned_by_module_id(gaudi, fake_hlml):
    backend = gaudi
    assert backend.worker_device(GPUInfo(index=2, model="Intel Gaudi"))[0] == "hpu:2"  # torch's own index
    info = backend.list_devices()[1]
    assert backend.worker_device(info) == ("hpu:0", {"HABANA_VISIBLE_MODULES": "6"})
    fake_hlml.aips[2].unsupported = {"hlmlDeviceGetModuleID"}
    assert backend.worker_device(backend.list_devices()[2]) == ("hpu:2", {})  # no module id: unpinned


ROOT = Path(__file__).parents[1]


DASHBOARD = ROOT / "deploy" / "grafana" / "warptd.json"


ALERTS = ROOT / "deploy" / "prometheus" / "alerts.yml"


VARIABLES = {"$__rate_interval": "30s", "$__range": "5m", "$__interval": "5s"}


def substitute(expr: str) -> str:
    for var, value in VARIABLES.items():
        expr = expr.replace(var, value)
    return re.sub(r"\$\w+", ".*", expr)


def dashboard_queries() -> list[tuple[str, str]]:
    dash = json.loads(DASHBOARD.read_text())
    queries = [(p["title"], t["expr"]) for p in dash["panels"] for t in p.get("targets", [])]
    queries += [(f"annotation {a['name']}", a["expr"]) for a in dash["annotations"]["list"]]
    for var in dash["templating"]["list"]:
        if var["type"] == "query":
            selector = re.fullmatch(r"label_values\((.+),\s*(\w+)\)", var["query"]["query"])
            assert selector, var["query"]
            queries.append((f"variable {var['name']}", selector.group(1)))
    return [(title, substitute(expr)) for title, expr in queries]


def rule_queries() -> list[tuple[str, str]]:
    groups = yaml.safe_load(ALERTS.read_text())["groups"]
    return [(rule["alert"], rule["expr"]) for group in groups for rule in group["rules"]]


def test_throttle_queries_leave_out_no_reason_by_hand():
    """Throttle series carry only throttling, so no dashboard or alert query excludes idle or set
    clocks itself; a query that names such a reason reads warptd_device_clock_event_active."""
    for title, expr in [*dashboard_queries(), *rule_queries()]:
        if any(reason in expr for reason in CLOCK_EVENT_REASONS):
            assert "warptd_device_clock_event_active" in expr and "throttle" not in expr, (title, expr)
