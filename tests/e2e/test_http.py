"""The real HTTP server on loopback: /metrics negotiation and gzip, health, devices, errors."""

from __future__ import annotations

import gzip
import json

import pytest

from tests.conftest import assert_promtool_clean
from tests.helpers import http, parse, raw, select, value, wait_until
from tests.sysfs_tree import drm_card
from warptd.daemon import Daemon


@pytest.fixture
def daemon(settings, fake_nvml, sysfs):
    sysfs.rapl_zone("intel-rapl:0", "package-0", 1_000_000)
    sysfs.rapl_zone("intel-rapl:0:0", "core", 500_000)
    sysfs.hwmon(0, "coretemp", {"Package id 0": 48000})
    drm_card(sysfs, 0, "amdgpu", "0000:03:00.0", {"gpu_busy_percent": 50}, {"power1_input": 90_000_000})
    d = Daemon(settings)
    d.start()
    assert wait_until(lambda: http(d.port, "GET", "/readyz")[0] == 200)
    assert wait_until(lambda: all(s.samples >= 2 for s in d.snapshot.states()))
    yield d
    d.stop()


@pytest.mark.slow
def test_metrics_text_exposition(daemon):
    status, headers, body = http(daemon.port, "GET", "/metrics")
    assert status == 200
    assert headers["content-type"].startswith("text/plain; version=0.0.4")
    samples = parse(body.decode())
    assert value(samples, "warptd_device_up", backend="nvidia", device="1") == 1
    assert value(samples, "warptd_device_up", backend="cpu", device="0") == 1
    assert value(samples, "warptd_device_power_watts", backend="hwmon", device="0") == 90  # a 2nd GPU vendor
    assert value(samples, "warptd_backend_up", backend="rapl") == 1
    assert not select(samples, "warptd_power_watts", source="nvml")  # the GPUs' power: device series only
    assert select(samples, "process_resident_memory_bytes")
    assert value(samples, "warptd_build_info", version=__import__("warptd").__version__) == 1


@pytest.mark.slow
def test_metrics_openmetrics_and_gzip(daemon):
    status, headers, body = http(
        daemon.port,
        "GET",
        "/metrics",
        headers={"Accept": "application/openmetrics-text; version=1.0.0", "Accept-Encoding": "gzip"},
    )
    assert status == 200
    assert headers["content-type"].startswith("application/openmetrics-text")
    assert headers["content-encoding"] == "gzip"
    text = gzip.decompress(body).decode()
    assert text.endswith("# EOF\n")
    assert "warptd_device_energy_joules_total{" in text


@pytest.mark.slow
def test_promtool_finds_nothing(daemon):
    body = http(daemon.port, "GET", "/metrics")[2]
    assert_promtool_clean(body)


@pytest.mark.slow
def test_health_devices_landing(daemon, fake_nvml):
    assert http(daemon.port, "GET", "/healthz")[0] == 200
    status, _, body = http(daemon.port, "GET", "/devices")
    assert status == 200
    backends = {b["backend"]: b for b in json.loads(body)["backends"]}
    gpus = backends["nvidia"]["devices"]
    assert [g["uuid"] for g in gpus] == [g.uuid for g in fake_nvml.gpus]
    assert gpus[0]["up"] is True and gpus[0]["memory_total_bytes"] == fake_nvml.gpus[0].memory_total
    assert gpus[0]["aliases"] is None  # unknown: null, like every identity field the backend cannot read
    assert backends["rapl"]["domains"] == ["package-0", "core-0"]
    status, headers, body = http(daemon.port, "GET", "/")
    assert status == 200 and headers["content-type"].startswith("text/html") and b"/metrics" in body


@pytest.mark.slow
def test_scrapes_never_call_the_sdk(daemon, fake_nvml):
    daemon.sampler.scheduler.pause()
    before = fake_nvml.total_calls()
    for _ in range(20):
        assert http(daemon.port, "GET", "/metrics")[0] == 200
        assert http(daemon.port, "GET", "/devices")[0] == 200
    assert fake_nvml.total_calls() == before


@pytest.mark.slow
def test_errors_are_json(daemon):
    status, headers, body = http(daemon.port, "GET", "/nope")
    assert status == 404 and json.loads(body)["error"].startswith("no such endpoint")
    status, headers, body = http(daemon.port, "DELETE", "/metrics")
    assert status == 405 and "GET" in headers["allow"] and "error" in json.loads(body)
    status, _, body = http(daemon.port, "POST", "/metrics", body=b"x" * (64 * 1024 + 1))
    assert status == 413 and json.loads(body)["limit_bytes"] == 65536
    status, headers, body = http(daemon.port, "HEAD", "/metrics")
    assert status == 200 and body == b"" and int(headers["content-length"]) > 0


@pytest.mark.slow
def test_readyz_waits_for_first_sample(settings):
    settings.backends = ["cpu"]
    d = Daemon(settings)
    d.server.start()  # HTTP up, sampler not yet started
    try:
        status, _, body = http(d.port, "GET", "/readyz")
        assert status == 503 and json.loads(body)["pending"] == ["cpu"]
        d.sampler.start()
        assert wait_until(lambda: http(d.port, "GET", "/readyz")[0] == 200)
    finally:
        d.stop()


@pytest.mark.slow
def test_readyz_is_503_with_the_reasons_when_no_backend_loaded(settings):
    """Serving nothing is not ready: a readiness probe must not route to a daemon with no backend."""
    from warptd.registry import Loaded

    reason = "libnvidia-ml.so.1 not found: no NVIDIA driver on this host"
    d = Daemon(settings, Loaded(unavailable={"nvidia": reason}))
    d.start()
    try:
        status, _, body = http(d.port, "GET", "/readyz")
        assert status == 503
        assert json.loads(body) == {"status": "no backend loaded", "unavailable": {"nvidia": reason}}
        assert not d.snapshot.ready()
        assert http(d.port, "GET", "/healthz")[0] == 200  # alive, though
    finally:
        d.stop()


@pytest.mark.slow
def test_a_hung_gpu_reads_down_at_scrape_and_the_rest_is_served(settings, fake_nvml):
    """Updated by issue 39 #3: a GPU whose calls hang is held apart (down, named), not its backend."""
    settings.backends = ["nvidia", "cpu"]
    settings.sample_timeout = 0.2
    d = Daemon(settings)
    d.start()
    try:
        assert wait_until(lambda: http(d.port, "GET", "/readyz")[0] == 200)
        fake_nvml.gpus[0].hang.set()

        def gpu0_up() -> list[float]:
            samples = parse(http(d.port, "GET", "/metrics")[2].decode())
            return [s.value for s in select(samples, "warptd_device_up", backend="nvidia", device="0")]

        assert wait_until(lambda: gpu0_up() == [0])
        samples = parse(http(d.port, "GET", "/metrics")[2].decode())
        assert value(samples, "warptd_device_up", backend="nvidia", device="1") == 1
        assert value(samples, "warptd_backend_up", backend="nvidia") == 1
        assert value(samples, "warptd_backend_up", backend="cpu") == 1
        assert value(samples, "warptd_sample_errors_total", backend="nvidia", kind="timeout", device="0") == 1
    finally:
        fake_nvml.gpus[0].release.set()
        d.stop()


@pytest.mark.slow
def test_bad_content_length_is_400(daemon):
    import http.client

    conn = http.client.HTTPConnection("127.0.0.1", daemon.port, timeout=5)
    conn.putrequest("POST", "/stress")
    conn.putheader("Content-Length", "²")
    conn.endheaders()
    assert conn.getresponse().status == 400
    conn.close()
    conn = http.client.HTTPConnection("127.0.0.1", daemon.port, timeout=5)
    conn.putrequest("POST", "/stress")
    conn.putheader("Content-Length", "2")
    conn.putheader("Content-Length", "3")
    conn.endheaders()
    conn.send(b"{}")
    assert conn.getresponse().status == 400
    conn.close()


@pytest.mark.slow
def test_unknown_methods_are_json_405_not_501(daemon):
    for method in ("TRACE", "QUERY", "PROPFIND"):
        status, headers, body = http(daemon.port, method, "/metrics")
        assert status == 405 and headers["content-type"] == "application/json" and "GET" in headers["allow"]
        assert json.loads(body)["error"].startswith(f"method {method} not allowed")


@pytest.mark.slow
def test_status_lines_carry_the_standard_reason_phrase(daemon):
    """``HTTP/1.1 200 OK``, not ``HTTP/1.1 200 ``: over a raw socket, as curl -v or a proxy sees it."""
    for method, path, line in (
        (b"GET", b"/healthz", b"HTTP/1.1 200 OK\r\n"),
        (b"GET", b"/no-such-page", b"HTTP/1.1 404 Not Found\r\n"),
        (b"TRACE", b"/metrics", b"HTTP/1.1 405 Method Not Allowed\r\n"),
    ):
        reply = raw(daemon.port, method + b" " + path + b" HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
        assert reply.startswith(line), reply[:80]


@pytest.mark.slow
def test_the_cpu_backend_is_a_cpu_not_an_accelerator(daemon):
    """/devices, `warptd_backend_up` and a window's recording call the CPU a CPU."""
    backends = {
        b["backend"]: b["kind"] for b in json.loads(http(daemon.port, "GET", "/devices")[2])["backends"]
    }
    assert backends["cpu"] == "cpu" and backends["nvidia"] == "accelerator" and backends["rapl"] == "power"
    samples = parse(http(daemon.port, "GET", "/metrics")[2].decode())
    assert value(samples, "warptd_backend_up", backend="cpu", kind="cpu") == 1
    assert value(samples, "warptd_backend_up", backend="nvidia", kind="accelerator") == 1
    body = json.dumps({"name": "kinds", "devices": ["cpu:0", "nvidia:0", "rapl:package-0"]}).encode()
    status, _, opened = http(daemon.port, "POST", "/windows", body, {"Content-Type": "application/json"})
    assert status == 201, opened
    ended = http(daemon.port, "POST", f"/windows/{json.loads(opened)['id']}/end")[2]
    kinds = {t["id"]: (t["kind"], t["device_kind"]) for t in json.loads(ended)["targets"]}
    assert kinds == {
        "cpu:0": ("device", "cpu"),
        "nvidia:0": ("device", "accelerator"),
        "rapl:package-0": ("domain", None),
    }
