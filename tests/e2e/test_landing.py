"""The landing page in a real headless chromium against a real daemon, /devices' latest readings,
and the exact Server header."""

from __future__ import annotations

import json
import re
import socket

import pytest

from tests.browser import browse
from tests.helpers import http, wait_until
from warptd import __version__
from warptd.daemon import Daemon

EVIL = '<img id="evil" src=x onerror="document.title=1">'


@pytest.fixture
def daemon(settings, fake_nvml, sysfs):
    sysfs.hwmon(0, "coretemp", {"Package id 0": 48000})
    fake_nvml.gpus[1].name = EVIL  # a hostile model string must stay text
    fake_nvml.gpus[1].power_mw, fake_nvml.gpus[1].temperature, fake_nvml.gpus[1].util_gpu = 250_500, 77, 90
    fake_nvml.gpus[0].temperature, fake_nvml.gpus[0].memory_temperature = 40, 50  # as an idle H200
    fake_nvml.next_refresh()  # the driver's power reading refreshes every 100 ms
    settings.backends = ["nvidia", "cpu"]
    d = Daemon(settings)
    d.start()
    assert wait_until(lambda: http(d.port, "GET", "/readyz")[0] == 200)
    yield d
    d.stop()


def _rows(dom: str) -> list[list[str]]:
    body = dom.split('<tbody id="device-rows">', 1)[1].split("</tbody>", 1)[0]
    return [re.findall(r"<td[^>]*>(.*?)</td>", row) for row in re.findall(r"<tr>(.*?)</tr>", body)]


@pytest.mark.slow
def test_landing_page_in_chromium_lists_endpoints_and_fills_the_device_table(daemon, fake_nvml):
    dom, console = browse(f"http://127.0.0.1:{daemon.port}/", budget_ms=3000)
    assert console == [], console
    for path, item in json.loads(http(daemon.port, "GET", "/openapi.json")[2])["paths"].items():
        for method in set(item) - {"parameters"}:
            assert re.search(f"<code>{method.upper()}</code> (<a [^>]+>)?{re.escape(path)}", dom), (
                method,
                path,
            )
    assert (
        '<a href="/openapi.json">/openapi.json</a>' in dom and "<code>DELETE</code> /stress/{job_id}" in dom
    )
    rows = {row[0]: row for row in _rows(dom)}
    assert set(rows) == {"nvidia:0", "nvidia:1", "cpu:0"}, rows
    first = fake_nvml.gpus[0]
    assert rows["nvidia:0"] == [
        "nvidia:0",
        first.name,
        "up",
        f"{first.power_mw / 1000:.1f} W",
        "40 °C (gpu)",  # the core, as nvidia-smi shows it, not the hotter memory
        f"{first.util_gpu} %",
        f"{first.memory_used / 2**30:.1f} / {first.memory_total / 2**30:.1f} GiB",
    ]
    assert rows["nvidia:1"][1:6] == [
        '&lt;img id="evil" src=x onerror="document.title=1"&gt;',
        "up",
        "250.5 W",
        "77 °C (gpu)",
        "90 %",
    ]
    assert 'id="evil"' not in dom.replace('&lt;img id="evil"', "")  # text, never an element
    assert "3 devices, updated" in dom


@pytest.mark.slow
def test_devices_carries_the_latest_reading_without_calling_the_sdk(daemon, fake_nvml):
    daemon.sampler.scheduler.pause()
    before = fake_nvml.total_calls()
    status, _, body = http(daemon.port, "GET", "/devices")
    assert status == 200 and fake_nvml.total_calls() == before
    backends = {b["backend"]: b for b in json.loads(body)["backends"]}
    latest = backends["nvidia"]["devices"][1]["latest"]
    assert latest["power_watts"] == pytest.approx(250.5) and latest["temperature_celsius"] == 77
    assert latest["utilization_ratio"] == pytest.approx(0.9)
    assert latest["memory_total_bytes"] == fake_nvml.gpus[1].memory_total
    assert backends["cpu"]["devices"][0]["latest"]["temperature_celsius"] == 48
    idle = backends["nvidia"]["devices"][0]["latest"]
    assert (idle["temperature_celsius"], idle["temperature_sensor"]) == (40, "gpu")  # not the hottest
    assert idle["temperatures_celsius"] == {"gpu": 40, "memory": 50}


@pytest.mark.slow
def test_landing_page_names_every_endpoint_and_only_runs_its_own_script(daemon):
    status, headers, body = http(daemon.port, "GET", "/")
    page = body.decode()
    assert status == 200 and headers["content-type"] == "text/html; charset=utf-8"
    for path in (
        "/metrics",
        "/healthz",
        "/readyz",
        "/devices",
        "/openapi.json",
        "/stress",
        "/stress/{job_id}",
    ):
        assert f"</code> {path}" in page or f'<a href="{path}">{path}</a>' in page, path
    policy = headers["content-security-policy"]
    assert (
        "default-src 'none'" in policy and "connect-src 'self'" in policy and "'unsafe-inline'" not in policy
    )
    assert not re.search(r"(src|href)=\"(https?:)?//", page)  # nothing from elsewhere: works offline


@pytest.mark.slow
def test_server_header_is_exact(daemon):
    """``Server: warptd/VERSION`` with nothing after it (BaseHTTPRequestHandler appended a space)."""
    with socket.create_connection(("127.0.0.1", daemon.port), timeout=5) as conn:
        conn.sendall(b"GET /healthz HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n")
        raw = b""
        while chunk := conn.recv(65536):
            raw += chunk
    head = raw.split(b"\r\n\r\n", 1)[0].decode().split("\r\n")
    assert [line for line in head if line.lower().startswith("server:")] == [f"Server: warptd/{__version__}"]
