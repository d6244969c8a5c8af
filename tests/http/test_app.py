"""The real HTTP server on loopback: /metrics negotiation and gzip, health, devices, errors."""

from __future__ import annotations

import json
import sys
import threading
import time

import pytest

from tests.e2e.test_workloads import monitor, node
from tests.helpers import http, raw, wait_until
from tests.http import recorded_job
from tests.http.recorded_job import answer, request, run_job
from warptd.http.app import HttpError, Request, Router
from warptd.http.stress_routes import StressApi
from warptd.http.workload_routes import WorkloadApi
from warptd.stress.jobs import JobManager

recorded = recorded_job.recorded  # the workload API's router over a rig with history, a fixture


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


def test_requests_waiting_for_a_slot_are_bounded_so_the_connection_cap_can_always_make_room(settings):
    """At most 1 + QUEUED_PER_SLOT requests per slot are past their head: beyond, 503 at once, so
    at a connection cap there is always a connection to close for a scrape (issue 23)."""
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


@pytest.mark.slow
def test_head_body_and_idle_timeouts_close_connections(small_server):
    import time

    started = time.monotonic()
    assert raw(small_server.port, b"GET /metr") == b""  # half a head: closed, no response
    assert 0.4 < time.monotonic() - started < 3
    reply = raw(small_server.port, b"POST /echo HTTP/1.1\r\nHost: x\r\nContent-Length: 10\r\n\r\nabc")
    assert reply.startswith(b"HTTP/1.1 408 ") and b'"error"' in reply
    started = time.monotonic()  # a full request, then idle: answered, then closed by the idle limit
    reply = raw(small_server.port, b"GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n")
    assert reply.startswith(b"HTTP/1.1 200 ") and reply.endswith(b"up 1\n")
    assert 0.4 < time.monotonic() - started < 3


def test_oversized_head_is_431_and_chunked_body_is_read(small_server):
    reply = raw(small_server.port, b"GET /metrics HTTP/1.1\r\nHost: x\r\nX-Big: " + b"a" * 4096 + b"\r\n\r\n")
    assert reply.startswith(b"HTTP/1.1 431 ") and b'"error"' in reply
    chunked = b"POST /echo HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\nConnection: close\r\n\r\n"
    reply = raw(small_server.port, chunked + b"5\r\nhello\r\n0\r\n\r\n")
    assert reply.startswith(b"HTTP/1.1 200 ") and reply.endswith(b"hello")


def test_routes_that_build_run_one_at_a_time_and_scrapes_never_wait_for_them():
    """A route that builds its answer holds the GIL throughout, and the loop serving the scrapes
    waits its turn behind each: 40 at once (max_requests) took a scrape to seconds."""
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


def test_report_route_says_stress_is_disabled_without_a_manager():
    router = Router()
    StressApi.add(router, None, lambda: None)
    request = Request("GET", "/stress/abc/report", {}, {}, b"", "127.0.0.1")
    with pytest.raises(HttpError) as refused:
        router.dispatch(request)
    assert refused.value.status == 404 and "--no-stress" in refused.value.message


@pytest.mark.parametrize(
    ("headers", "body", "status", "message"),
    [
        ({"origin": "http://evil.example", "host": "127.0.0.1:9465"}, b"{}", 403, "cross-origin"),
        ({"host": "rebind.evil.example:9465", "content-type": "application/json"}, b"{}", 403, "Host"),
        ({"host": "localhost:9465", "content-type": "text/plain"}, b"{}", 415, "application/json"),
    ],
)
def test_browser_and_dns_rebinding_requests_are_refused(headers, body, status, message):
    router = Router()
    StressApi.add(router, JobManager([], {}), token=lambda: None)
    with pytest.raises(HttpError) as info:
        router.dispatch(Request("POST", "/stress", {}, headers, body, client="127.0.0.1"))
    assert info.value.status == status and message in info.value.message


def test_token_in_x_stress_token_when_authorization_carries_basic_auth():
    router = Router()
    StressApi.add(router, JobManager([], {}), token=lambda: "tok")
    headers = {"authorization": "Basic cHJvbWV0aGV1czp4", "x-stress-token": "tok"}
    with pytest.raises(HttpError) as info:
        router.dispatch(Request("POST", "/stress", {}, headers, b"", client="10.0.0.9"))
    assert info.value.status == 422  # past authentication: no such device in this empty manager
    headers["x-stress-token"] = "nope"
    with pytest.raises(HttpError) as info:
        router.dispatch(Request("POST", "/stress", {}, headers, b"", client="10.0.0.9"))
    assert info.value.status == 401


__all__ = ["monitor", "node"]


def test_the_recording_routes_refuse_bad_input_with_json_errors(recorded, node):
    rig, history, router = recorded
    run_job(rig, node, history)
    for path, status, words in (
        ("/workloads/pod/4242/recording", 404, "no workload kind"),
        ("/workloads/slurm_job/" + "9" * 300 + "/recording", 414, "at most 256"),
        ("/workloads/slurm_job/4243/recording", 404, "no slurm_job '4243'"),
    ):
        got, body = answer(router, path)
        assert got == status and words in body["error"], (path, body)
    with pytest.raises(HttpError) as refused:  # protected as the other /workloads routes
        router.dispatch(request("/workloads/slurm_job/4242/recording", origin="http://evil.example"))
    assert refused.value.status == 403
    off = Router()
    WorkloadApi.add(off, None, lambda: None)
    got, body = answer(off, "/workloads/slurm_job/4242/recording")
    assert got == 404 and "--workloads" in body["error"]


def test_the_endpoints_say_when_workloads_are_off():
    from warptd.http.app import HttpError, Request, Router
    from warptd.http.workload_routes import WorkloadApi

    router = Router()
    WorkloadApi.add(router, None, lambda: None)
    for path in ("/workloads", "/workloads/slurm_job/4242"):
        with pytest.raises(HttpError) as raised:
            router.dispatch(Request("GET", path, {}, {"host": "localhost"}, b"", "127.0.0.1"))
        assert raised.value.status == 404 and "--workloads" in raised.value.message
