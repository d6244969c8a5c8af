"""``--compat dcgm-exporter``: dcgm-exporter's default series from the NVML double, checked against
dcgm-exporter's own files (tests/data/dcgm-exporter, Apache-2.0 copies): its default-counters CSV and
NVIDIA's Grafana dashboard, in a real Prometheus."""

from __future__ import annotations

import json
import re
import subprocess
import time
from pathlib import Path

import pytest
import yaml

from tests.conftest import promtool_check_metrics, require_tool
from tests.dcgm import GPM, advance_gpm, compat_rig, expected, identity, script
from tests.helpers import wait_until
from warptd.metrics import dcgm

ROOT = Path(__file__).parents[2]


DATA = ROOT / "tests" / "data" / "dcgm-exporter"


RULES = ROOT / "deploy" / "prometheus" / "dcgm-exporter-rules.yml"


@pytest.mark.slow
def test_promtool_accepts_the_recording_rules():
    result = subprocess.run(
        [require_tool("promtool"), "check", "rules", str(RULES)], capture_output=True, timeout=30, check=False
    )
    assert result.returncode == 0, result.stdout.decode() + result.stderr.decode()
    recorded = [rule["record"] for rule in yaml.safe_load(RULES.read_text())["groups"][0]["rules"]]
    derivable = [m.name for m in (*dcgm.COMPAT, *dcgm.RULES_ONLY) if m.name != "DCGM_FI_DEV_XID_ERRORS"]
    assert recorded == ["warptd:dcgm_identity", *derivable]  # every series but the last XID's code


def _promtool_findings(body: bytes) -> set[str]:
    result = promtool_check_metrics(body)
    return {line.strip() for line in (result.stdout + result.stderr).decode().splitlines() if line.strip()}


@pytest.mark.slow
def test_promtool_finds_nothing_but_what_dcgm_exporter_s_own_names_force(settings, fake_nvml):
    """warptd's series stay promtool-clean. The compat series repeat dcgm-exporter's contract, which
    promtool's lint rejects in three ways; exactly those are found, no other."""
    for gpu in fake_nvml.gpus:  # encoding and decoding: their engines show once active
        gpu.encoder_util = gpu.decoder_util = 10
    rig = compat_rig(settings, "nvidia")
    try:
        rig.tick()
        advance_gpm(fake_nvml)
        rig.tick_gpm()
        body = rig.exposition.render(None, None)[0]
    finally:
        rig.close()
    forced = set()
    served = set(re.findall(rb"^(DCGM_\w+)\{", body, re.MULTILINE))
    assert len(served) == len(dcgm.COMPAT) - 1  # all but the XID code (no XID monitor here)
    for metric in (metric for metric in dcgm.COMPAT if metric.name.encode() in served):
        if metric.type == "counter":
            forced.add(f'{metric.name} counter metrics should have "_total" suffix')
            if "_COUNTER" in metric.name:
                forced.add(f"{metric.name} metric name should not include type 'counter'")
        if "modelName" in dcgm.labels_of(metric, False):
            forced.add(f"{metric.name} label names should be written in 'snake_case' not 'camelCase'")
    assert _promtool_findings(body) == forced
    own = b"".join(block for block in re.split(rb"(?=# HELP )", body) if b"DCGM_" not in block)
    assert _promtool_findings(own) == set()


def dashboard() -> tuple[list[tuple[str, str]], list[tuple[str, str]]]:
    """(title, expr) of every panel query, and (name, selector) of every query variable."""
    dash = json.loads((DATA / "dcgm-exporter-dashboard.json").read_text())
    panels = [(p["title"], t["expr"]) for p in dash["panels"] for t in p.get("targets", [])]
    variables = []
    for var in dash["templating"]["list"]:
        if var["type"] == "query":
            query = var["query"] if isinstance(var["query"], str) else var["query"]["query"]
            found = re.fullmatch(r"label_values\((.+),\s*(\w+)\)", query)
            assert found, query
            variables.append((var["name"], f"count by ({found.group(2)}) ({found.group(1)})"))
    return panels, variables


@pytest.fixture
def dcgm_stack(settings, fake_nvml, tmp_path):
    from tests.e2e.test_prometheus_integration import scraped

    script(fake_nvml)
    settings.compat = "dcgm-exporter"
    settings.interval = 2.0  # a GPM period's ratios hold 2 s: a 1 s scrape sees them
    with scraped(settings, tmp_path) as stack:
        yield stack


def _busy_at(prom, gpu: int) -> float | None:
    """The time of the last scrape that saw GPU ``gpu``'s tensor activity (one GPM period holds it)."""
    now = time.time()
    reply = prom.api(
        "query_range",
        query=f'DCGM_FI_PROF_PIPE_TENSOR_ACTIVE{{gpu="{gpu}"}} > 0',
        start=f"{now - 60:.3f}",
        end=f"{now:.3f}",
        step="0.5",
    )
    result = reply["data"]["result"] if reply["status"] == "success" else []
    return float(result[0]["values"][-1][0]) if result else None


@pytest.mark.slow
def test_nvidia_s_dashboard_gets_data_and_the_double_s_values(dcgm_stack, fake_nvml):
    """Every panel query and variable of NVIDIA's dashboard returns data; each per-GPU panel's values
    are the double's in dcgm-exporter's units (SM clock in Hz, as the panel multiplies MHz by 1e6)."""
    _, prom = dcgm_stack
    panels, variables = dashboard()
    assert len(panels) == 8 and len(variables) == 2
    # a first GPM period seen (two samples), so the next one holds the activity below
    assert wait_until(
        lambda: prom.has("count(DCGM_FI_PROF_PIPE_TENSOR_ACTIVE) == 2"), timeout=30, interval=0.5
    )
    for gpu in fake_nvml.gpus:  # one busy GPM period: its ratios hold until the next GPM sample
        gpu.advance_gpm(cycles=10**9, activity={metric: f[gpu.index] for metric, f in GPM.items()})
    busy: dict[int, float] = {}
    for index in (0, 1):
        assert wait_until(lambda i=index: _busy_at(prom, i) is not None, timeout=30, interval=0.5)
        busy[index] = _busy_at(prom, index)
    for name, selector in variables:
        reply = prom.query(selector)
        assert reply["status"] == "success" and reply["data"]["result"], (name, selector)
    [instance] = {r["metric"]["instance"] for r in prom.query(variables[0][1])["data"]["result"]}
    for title, expr in panels:
        query = expr.replace("$instance", instance).replace("$gpu", ".*")
        for index, at in busy.items():
            reply = prom.api("query", query=query, time=f"{at:.3f}")
            assert reply["status"] == "success" and reply["data"]["result"], (title, query)
            if re.match(r"\s*(avg|sum)\(", expr):
                continue
            name = re.match(r"\s*(\w+)", expr).group(1)  # a per-GPU panel: GPU ``index`` is the double's
            scale = 1e6 if "* 1000000" in expr else 1
            got = {r["metric"]["gpu"]: float(r["value"][1]) for r in reply["data"]["result"]}
            assert got[str(index)] == pytest.approx(expected(fake_nvml, index)[name] * scale, rel=1e-6), title
    total = prom.query(dict(panels)["GPU Power Total"].replace("$instance", ".*").replace("$gpu", ".*"))
    assert float(total["data"]["result"][0]["value"][1]) == pytest.approx(312.0 + 313.0)


@pytest.mark.slow
def test_the_recording_rules_derive_dcgm_exporter_s_series_from_warptd_s(
    settings, fake_nvml, tmp_path, monkeypatch
):
    """Without --compat, the shipped rules give the same series, labels and values in Prometheus."""
    from tests.e2e import test_prometheus_integration as integration

    monkeypatch.setattr(integration, "ALERTS", RULES)  # the rule file the test Prometheus loads
    script(fake_nvml)
    settings.interval = 0.5
    with integration.scraped(settings, tmp_path) as (daemon, prom):
        assert wait_until(lambda: prom.has("DCGM_FI_PROF_PCIE_TX_BYTES"), timeout=60, interval=0.5)
        for index in (0, 1):
            labels = {**identity(fake_nvml, index, settings.node), "instance": f"127.0.0.1:{daemon.port}"}
            labels = {k: v for k, v in labels.items() if v}  # Prometheus stores no empty label
            for name, busy in expected(fake_nvml, index).items():
                # the double's GPM counters stand still here: every period is idle
                want = 0.0 if name.startswith("DCGM_FI_PROF_") else busy
                result = prom.query(f'{name}{{gpu="{index}"}}')["data"]["result"]
                assert len(result) == 1, (name, result)
                got = {k: v for k, v in result[0]["metric"].items() if k != "__name__"}
                assert got == {**labels, "job": "warptd"}, name
                assert float(result[0]["value"][1]) == pytest.approx(want, rel=1e-6), (name, index)
        assert not prom.has("DCGM_FI_DEV_XID_ERRORS")  # no warptd series holds the last XID's code
