"""The real HTTP server on loopback: /metrics negotiation and gzip, health, devices, errors."""

from __future__ import annotations

import json
import sys
import threading
import time

import pytest

from tests.e2e.test_processes import GIB
from tests.e2e.test_workloads import SLURM_V1, Node, Rig, monitor, node
from tests.helpers import http, wait_until
from tests.workloads.test_energy import TICK_US, V1_JOB
from warptd.http.app import HttpError, Request, Router
from warptd.http.stress_routes import StressApi
from warptd.http.workload_routes import WorkloadApi
from warptd.models import DeviceReading, Utilization
from warptd.power.base import DomainPower, PowerSource
from warptd.sampling.snapshot import DeviceSample
from warptd.stress.jobs import JobManager
from warptd.workloads.history import WorkloadHistory
from warptd.workloads.placement import CpuCgroup


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


CID = "c" * 64


JOB_TASK_1 = SLURM_V1.replace("task_0", "task_1")


CONTAINER = f"0::/system.slice/docker-{CID}.scope\n"


def request(path: str, **headers: str) -> Request:
    return Request("GET", path, {}, {"host": "localhost", **headers}, b"", "127.0.0.1")


def answer(router: Router, path: str) -> tuple[int, dict]:
    """The route's status and JSON body (an error's too), as the server would send them."""
    try:
        response = router.dispatch(request(path))
    except HttpError as exc:
        response = exc.response()
    return response.status, json.loads(response.body)


class Job:
    """Job 4242 (pids 1001 on GPU 0, 1002 on GPU 1) beside a container (pid 1004) on GPU 0, stepped
    a second at a time with scripted power, SM samples and CPU time, as the sampler hands them over."""

    def __init__(self, node: Node, rig: Rig, history: WorkloadHistory) -> None:
        self.node, self.rig, self.history = node, rig, history
        self.cgroup = CpuCgroup(V1_JOB, "cpu,cpuacct")
        self.cpu_us = 0.0
        self.step_count = 0
        node.add(1001, SLURM_V1, uid=0)
        node.add(1002, JOB_TASK_1, uid=0)
        node.add(1004, CONTAINER, uid=0)
        node.cpu(self.cgroup, 0)
        gpu0, gpu1 = rig.gpus
        gpu0.processes = [(1001, 2 * GIB), (1004, GIB)]
        gpu1.processes = [(1002, GIB)]

    def step(self, watts: tuple[float, float], sm: dict[int, dict[int, int]], package_watts: float) -> None:
        """One second: both polls (the job's CPU time 0.5 s of 4 s of node time), then a sample of
        each GPU at ``watts`` and of the CPU package."""
        self.step_count += 1
        self.rig.clock.now += 1.0
        self.cpu_us += 0.5e6
        self.node.cpu(self.cgroup, self.cpu_us)
        self.node.tick(round(4e6 / TICK_US))
        self.rig.poll(sm)
        samples = []
        for index, power in enumerate(watts):
            self.rig.energy[index] += power
            reading = DeviceReading(
                index=index,
                uuid=self.rig.gpus[index].uuid,
                power_watts=power,
                energy_counter_joules=self.rig.energy[index],
                utilization=Utilization(compute=min(1.0, power / 400)),
                temperatures_celsius={"gpu": 40 + power / 20 + self.step_count / 10},
                clocks_hertz={"sm": 1.4e9 + 1e6 * self.step_count},
            )
            samples.append(DeviceSample(reading, energy_joules=self.rig.energy[index]))
        self.rig.tracker.on_sample("nvidia", samples, None, self.rig.clock.now)
        self.rig.package += package_watts
        domain = DomainPower("package-0", PowerSource.RAPL, package_watts, self.rig.package)
        self.rig.tracker.on_sample("rapl", None, [domain], self.rig.clock.now)

    def end(self) -> None:
        """The job's processes and cgroup go; the container stays on GPU 0."""
        self.node.remove(1001)
        self.node.remove(1002)
        self.node.gone(self.cgroup)
        gpu0, gpu1 = self.rig.gpus
        gpu0.processes, gpu1.processes = [(1004, GIB)], []
        self.rig.clock.now += 1.0
        self.rig.poll({0: {1004: 30}})


def run_job(rig: Rig, node: Node, history: WorkloadHistory) -> Job:
    job = Job(node, rig, history)
    rig.poll({0: {1001: 60, 1004: 20}, 1: {1002: 50}})  # found; the counters' baselines follow
    for second in range(40):
        ramp = min(1.0, second / 10)
        job.step((100 + 200 * ramp, 80 + 150 * ramp), {0: {1001: 60, 1004: 20}, 1: {1002: 50}}, 50.0)
    job.end()
    return job


@pytest.fixture
def recorded(node, monitor, fake_nvml):
    rig = Rig(node, monitor, fake_nvml.gpus)
    history = WorkloadHistory(clock=rig.clock, wall=lambda: 1_780_000_000.0 + rig.clock.now)
    rig.tracker.listeners.append(history)
    rig.device_joules(0.0, 0.0)
    rig.package_joules(0.0)
    router = Router()
    WorkloadApi.add(router, rig.tracker, lambda: None, history)
    return rig, history, router


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
