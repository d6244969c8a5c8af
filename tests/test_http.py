"""The real HTTP server on loopback: /metrics negotiation and gzip, health, devices, errors."""

from __future__ import annotations

import gzip
import json
import time

import pytest

from tests.conftest import assert_promtool_clean
from tests.helpers import http, parse, select, value, wait_until
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


def test_at_the_connection_cap_a_silent_connection_makes_room(settings):
    """Updated by issue 23: at the cap the connection doing least is closed, not the new one refused."""
    import socket as sockets

    from warptd.http.app import Response, Router
    from warptd.http.limits import HttpLimits
    from warptd.http.server import WarptdHTTPServer

    router = Router()
    router.add("GET", "/metrics", lambda _: Response(200, b"up 1\n", "text/plain"))
    server = WarptdHTTPServer("127.0.0.1", 0, router, limits=HttpLimits(max_connections=2))
    server.start()
    idle = [sockets.create_connection(("127.0.0.1", server.port), timeout=5) for _ in range(2)]
    try:
        assert wait_until(lambda: server.connections == 2, timeout=5)
        status, _, body = http(server.port, "GET", "/metrics")
        assert status == 200 and body == b"up 1\n"
        assert idle[0].recv(1) == b""  # the one silent longest was closed for it
        assert server.evicted == 1
    finally:
        for conn in idle:
            conn.close()
        server.shutdown()
        server.server_close()
    assert wait_until(lambda: server.connections == 0, timeout=5)  # slots come back


def test_connection_cap_answers_503_when_every_connection_is_being_handled(settings):
    import threading

    from warptd.http.app import Response, Router
    from warptd.http.connection import Phase
    from warptd.http.limits import HttpLimits
    from warptd.http.server import WarptdHTTPServer

    release = threading.Event()
    router = Router()
    router.add("GET", "/slow", lambda _: release.wait(10) and Response(200), offload=True)
    server = WarptdHTTPServer("127.0.0.1", 0, router, limits=HttpLimits(max_connections=2))
    server.start()
    handled = [threading.Thread(target=http, args=(server.port, "GET", "/slow")) for _ in range(2)]
    try:
        for thread in handled:
            thread.start()
        assert wait_until(
            lambda: server.connections == 2 and {c.phase for c in server._open} == {Phase.BUSY}, timeout=5
        )
        status, headers, body = http(server.port, "GET", "/metrics")
        assert (
            status == 503
            and headers["retry-after"] == "1"
            and json.loads(body)["error"].startswith("too many")
        )
    finally:
        release.set()
        for thread in handled:
            thread.join(timeout=10)
        server.shutdown()
        server.server_close()
    assert wait_until(lambda: server.connections == 0, timeout=5)


def test_a_response_being_sent_is_never_closed_to_make_room(settings):
    """A computed response (a scrape's, say) that its client is still taking is owed to it: at the cap
    with every connection sending, a new one is refused (503), not served by cutting another off."""
    import socket as sockets

    from warptd.http.app import Response, Router
    from warptd.http.connection import Phase
    from warptd.http.limits import HttpLimits
    from warptd.http.server import WarptdHTTPServer

    big = b"x" * (64 << 20)  # past loopback's socket buffers: sending waits for a reader
    router = Router()
    router.add("GET", "/big", lambda _: Response(200, big, "text/plain"))
    router.add("GET", "/metrics", lambda _: Response(200, b"up 1\n", "text/plain"))
    server = WarptdHTTPServer("127.0.0.1", 0, router, limits=HttpLimits(max_connections=2))
    server.start()
    readers = [sockets.create_connection(("127.0.0.1", server.port), timeout=5) for _ in range(2)]
    try:
        for conn in readers:
            conn.sendall(b"GET /big HTTP/1.1\r\nHost: localhost\r\n\r\n")  # and never read
        assert wait_until(lambda: {c.phase for c in server._open} == {Phase.SENDING}, timeout=10)
        status, _, _ = http(server.port, "GET", "/metrics")
        assert status == 503 and server.evicted == 0
        assert {c.phase for c in server._open} == {Phase.SENDING}  # both still being sent
    finally:
        for conn in readers:
            conn.close()
        server.shutdown()
        server.server_close()


def test_requests_waiting_for_a_slot_are_bounded_so_the_connection_cap_can_always_make_room(settings):
    """At most 1 + QUEUED_PER_SLOT requests per slot are past their head: beyond, 503 at once, so
    at a connection cap there is always a connection to close for a scrape (issue 23)."""
    import threading
    import time

    from warptd.http.app import Response, Router
    from warptd.http.connection import Phase
    from warptd.http.limits import HttpLimits
    from warptd.http.server import QUEUED_PER_SLOT, WarptdHTTPServer

    release = threading.Event()
    router = Router()
    router.add("GET", "/slow", lambda _: release.wait(10) and Response(200), offload=True)
    router.add("GET", "/metrics", lambda _: Response(200, b"up 1\n", "text/plain"))
    limits = HttpLimits(max_requests=1, max_connections=1 + QUEUED_PER_SLOT + 1)
    server = WarptdHTTPServer("127.0.0.1", 0, router, limits=limits)
    server.start()
    held = 1 + QUEUED_PER_SLOT  # one running, the rest waiting for its slot
    handled = [threading.Thread(target=http, args=(server.port, "GET", "/slow")) for _ in range(held)]
    try:
        for thread in handled:
            thread.start()
        assert wait_until(
            lambda: server.connections == held and {c.phase for c in server._open} == {Phase.BUSY}, timeout=5
        )
        started = time.monotonic()
        status, _, body = http(server.port, "GET", "/slow")
        assert status == 503 and json.loads(body)["error"] == "too many concurrent requests"
        assert time.monotonic() - started < limits.header_timeout / 2  # at once, not after waiting
        assert http(server.port, "GET", "/metrics")[0] == 200  # the cap's free place
    finally:
        release.set()
        for thread in handled:
            thread.join(timeout=10)
        server.shutdown()
        server.server_close()


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


def test_ipv4_fallback_when_ipv6_is_missing(monkeypatch):
    import socket as sockets

    from warptd.http.app import Router
    from warptd.http.server import WarptdHTTPServer

    monkeypatch.setattr(sockets, "has_ipv6", False)
    server = WarptdHTTPServer("", 0, Router())
    try:
        assert server.address_family == sockets.AF_INET and server.server_address[0] == "0.0.0.0"
    finally:
        server.server_close()


@pytest.mark.slow
def test_unknown_methods_are_json_405_not_501(daemon):
    for method in ("TRACE", "QUERY", "PROPFIND"):
        status, headers, body = http(daemon.port, method, "/metrics")
        assert status == 405 and headers["content-type"] == "application/json" and "GET" in headers["allow"]
        assert json.loads(body)["error"].startswith(f"method {method} not allowed")


@pytest.fixture
def small_server():
    """A bare server with short limits and one route."""
    from warptd.http.app import Response, Router
    from warptd.http.limits import HttpLimits
    from warptd.http.server import WarptdHTTPServer

    router = Router()
    router.add("GET", "/metrics", lambda _: Response(200, b"up 1\n", "text/plain"))
    router.add("POST", "/echo", lambda r: Response(200, r.body, "text/plain"))
    limits = HttpLimits(header_timeout=0.5, body_timeout=0.5, idle_timeout=0.5, max_header_bytes=2048)
    server = WarptdHTTPServer("127.0.0.1", 0, router, limits=limits)
    server.start()
    yield server
    server.server_close()


def _raw(port: int, data: bytes, wait: float = 5.0) -> bytes:
    """Send ``data`` and read until the server closes (bounded by ``wait``)."""
    import socket as sockets

    with sockets.create_connection(("127.0.0.1", port), timeout=wait) as conn:
        conn.sendall(data)
        out = b""
        while chunk := conn.recv(65536):
            out += chunk
        return out


@pytest.mark.slow
def test_head_body_and_idle_timeouts_close_connections(small_server):
    import time

    started = time.monotonic()
    assert _raw(small_server.port, b"GET /metr") == b""  # half a head: closed, no response
    assert 0.4 < time.monotonic() - started < 3
    reply = _raw(small_server.port, b"POST /echo HTTP/1.1\r\nHost: x\r\nContent-Length: 10\r\n\r\nabc")
    assert reply.startswith(b"HTTP/1.1 408 ") and b'"error"' in reply
    started = time.monotonic()  # a full request, then idle: answered, then closed by the idle limit
    reply = _raw(small_server.port, b"GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n")
    assert reply.startswith(b"HTTP/1.1 200 ") and reply.endswith(b"up 1\n")
    assert 0.4 < time.monotonic() - started < 3


def test_oversized_head_is_431_and_chunked_body_is_read(small_server):
    reply = _raw(
        small_server.port, b"GET /metrics HTTP/1.1\r\nHost: x\r\nX-Big: " + b"a" * 4096 + b"\r\n\r\n"
    )
    assert reply.startswith(b"HTTP/1.1 431 ") and b'"error"' in reply
    chunked = b"POST /echo HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\nConnection: close\r\n\r\n"
    reply = _raw(small_server.port, chunked + b"5\r\nhello\r\n0\r\n\r\n")
    assert reply.startswith(b"HTTP/1.1 200 ") and reply.endswith(b"hello")


def test_http_settings_reach_the_server(monkeypatch):
    from warptd.config import SettingsError, load_settings
    from warptd.http.limits import HttpLimits

    monkeypatch.setenv("WARPTD_HTTP_MAX_REQUESTS", "7")
    monkeypatch.setenv("WARPTD_HTTP_HEADER_TIMEOUT", "2.5")
    limits = HttpLimits.of(load_settings())
    assert limits.max_requests == 7 and limits.header_timeout == 2.5 and limits.backlog == 1024
    with pytest.raises(SettingsError, match="http_backlog"):
        load_settings(http_backlog=5)  # the old default, too short for a burst


@pytest.mark.slow
def test_status_lines_carry_the_standard_reason_phrase(daemon):
    """``HTTP/1.1 200 OK``, not ``HTTP/1.1 200 ``: over a raw socket, as curl -v or a proxy sees it."""
    for method, path, line in (
        (b"GET", b"/healthz", b"HTTP/1.1 200 OK\r\n"),
        (b"GET", b"/no-such-page", b"HTTP/1.1 404 Not Found\r\n"),
        (b"TRACE", b"/metrics", b"HTTP/1.1 405 Method Not Allowed\r\n"),
    ):
        reply = _raw(daemon.port, method + b" " + path + b" HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
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


# -- heavy reads: what they may hold and how long a scrape waits behind them (issue 34) ------------
def test_routes_that_build_run_one_at_a_time_and_scrapes_never_wait_for_them():
    """A route that builds its answer holds the GIL throughout, and the loop serving the scrapes
    waits its turn behind each: 40 at once (max_requests) took a scrape to seconds."""
    import threading
    import time

    from warptd.http.app import Response, Router
    from warptd.http.server import BUILDS_AT_ONCE, WarptdHTTPServer

    release, lock = threading.Event(), threading.Lock()
    running, most = [0], [0]

    def slow(_: object) -> Response:
        with lock:
            running[0] += 1
            most[0] = max(most[0], running[0])
        release.wait(10)
        with lock:
            running[0] -= 1
        return Response(200, b"{}")

    router = Router()
    router.add("GET", "/slow", slow, builds=True)
    router.add("GET", "/waits", lambda _: release.wait(10) and Response(200, b"{}"), offload=True)
    router.add("GET", "/metrics", lambda _: Response(200, b"up 1\n", "text/plain"))
    server = WarptdHTTPServer("127.0.0.1", 0, router)
    server.start()
    answers: list[int] = []
    asking = [
        threading.Thread(target=lambda: answers.append(http(server.port, "GET", "/slow")[0]))
        for _ in range(8)
    ]
    try:
        for thread in asking:
            thread.start()
        assert wait_until(lambda: running[0] == BUILDS_AT_ONCE, timeout=5)
        time.sleep(0.2)  # the others had time to start, had they been let
        assert most[0] == BUILDS_AT_ONCE < 8
        started = time.monotonic()
        assert http(server.port, "GET", "/metrics")[0] == 200
        assert time.monotonic() - started < 1.0
        waiting = threading.Thread(target=lambda: answers.append(http(server.port, "GET", "/waits")[0]))
        waiting.start()  # a route that waits has a lane of its own
        assert wait_until(lambda: len([c for c in server._open if c.phase.name == "BUSY"]) == 9, timeout=5)
        asking.append(waiting)
    finally:
        release.set()
        for thread in asking:
            thread.join(timeout=10)
        server.server_close()
    assert answers == [200] * 9  # the rest waited their turn


def test_under_basic_auth_scrapes_have_their_own_lane():
    """Basic auth runs every request in the pool (bcrypt): a scrape then waits for a slot, which
    slow routes must not all hold."""
    import base64
    import threading

    import bcrypt

    from warptd.http.app import Response, Router
    from warptd.http.limits import HttpLimits
    from warptd.http.server import WarptdHTTPServer
    from warptd.http.webconfig import BasicAuth

    release = threading.Event()
    router = Router()
    router.add("GET", "/slow", lambda _: release.wait(10) and Response(200, b"{}"), offload=True)
    router.add("GET", "/metrics", lambda _: Response(200, b"up 1\n", "text/plain"))
    auth = BasicAuth({"prometheus": bcrypt.hashpw(b"secret", bcrypt.gensalt(4)).decode()})
    limits = HttpLimits(max_requests=2, header_timeout=2.0)
    server = WarptdHTTPServer("127.0.0.1", 0, router, limits=limits, basic_auth=auth)
    server.start()
    header = {"Authorization": "Basic " + base64.b64encode(b"prometheus:secret").decode()}
    asking = [
        threading.Thread(target=http, args=(server.port, "GET", "/slow", None, header)) for _ in range(4)
    ]
    try:
        for thread in asking:
            thread.start()
        assert wait_until(lambda: len([c for c in server._open if c.phase.name == "BUSY"]) == 4, timeout=5)
        assert http(server.port, "GET", "/metrics", None, header)[0] == 200  # not 503 after 2 s
    finally:
        release.set()
        for thread in asking:
            thread.join(timeout=10)
        server.server_close()


@pytest.mark.slow
def test_responses_not_taken_hold_at_most_the_budget_and_give_it_back_when_gone():
    """250 connections that each pipelined 8 GET /windows and read nothing took RSS from 200 to
    439 MiB: each held its answer. Now what all such answers hold is bounded; a connection whose
    answer is not taken is served no further; scrapes go on; the bytes come back once they close."""
    import socket as sockets

    from warptd.http.app import Response, Router
    from warptd.http.limits import HttpLimits
    from warptd.http.server import BUILDS_AT_ONCE, WarptdHTTPServer

    size = 1 << 20  # 8 a connection: past the 4 MiB the kernel's send buffer takes at most
    router = Router()
    router.add("GET", "/big", lambda _: Response(200, b"x" * size), builds=True)
    router.add("GET", "/metrics", lambda _: Response(200, b"up 1\n", "text/plain"))
    limits = HttpLimits(max_response_bytes=2 << 20, header_timeout=1.0, body_timeout=30.0)
    server = WarptdHTTPServer("127.0.0.1", 0, router, limits=limits)
    server.start()
    silent = []
    try:
        for _ in range(16):
            conn = sockets.socket()
            conn.setsockopt(sockets.SOL_SOCKET, sockets.SO_RCVBUF, 4096)  # and never read
            conn.connect(("127.0.0.1", server.port))
            conn.sendall(b"GET /big HTTP/1.1\r\nHost: localhost\r\n\r\n" * 8)
            silent.append(conn)
        assert wait_until(lambda: server.budget.full, timeout=10)
        time.sleep(0.5)  # what was let in before the budget filled has been written
        assert server.budget.held <= limits.max_response_bytes + BUILDS_AT_ONCE * size
        status, _, body = http(server.port, "GET", "/big")  # waits up to the header timeout
        assert status == 503 and "budget" in json.loads(body)["error"]
        started = time.monotonic()
        assert http(server.port, "GET", "/metrics")[0] == 200
        assert time.monotonic() - started < 1.0
    finally:
        for conn in silent:
            conn.close()
    try:
        assert wait_until(lambda: server.budget.held == 0, timeout=10)
        assert http(server.port, "GET", "/big")[0] == 200
    finally:
        server.server_close()


BODY = b"kept? " * 20_000  # one object: its references are counted


def test_a_connection_keeps_no_answer_while_its_next_request_waits():
    """A connection waiting to be handled held on to its last answer: 250 of them, 184 MiB."""
    import socket as sockets
    import sys
    import threading

    from warptd.http.app import Response, Router
    from warptd.http.server import WarptdHTTPServer

    slow, release = threading.Event(), threading.Event()
    router = Router()
    router.add("GET", "/body", lambda _: Response(200, BODY, "text/plain"), offload=True)
    router.add(
        "GET", "/slow", lambda _: (slow.set(), release.wait(10)) and Response(200, b"{}"), offload=True
    )
    server = WarptdHTTPServer("127.0.0.1", 0, router)
    server.start()
    unused = sys.getrefcount(BODY)
    conn = sockets.create_connection(("127.0.0.1", server.port), timeout=10)
    try:
        conn.sendall(
            b"GET /body HTTP/1.1\r\nHost: localhost\r\n\r\nGET /slow HTTP/1.1\r\nHost: localhost\r\n\r\n"
        )
        received = b""
        while len(received) < len(BODY):
            received += conn.recv(1 << 20)
        assert slow.wait(5)  # the next request is being handled: the answer before it is sent
        assert sys.getrefcount(BODY) == unused
    finally:
        release.set()
        conn.close()
        server.server_close()
