"""One connection on the event loop: pipelined requests take turns, a reset connection is answered no
further, framing that is ambiguous or a version that is not 1.x is refused and closed, a target's
own host counts, and h11's errors echo none of the client's bytes (issue 39, findings 1, 8, 10, 11)."""

from __future__ import annotations

import json
import logging
import socket
import struct
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager

import pytest

from tests.helpers import http, wait_until
from warptd.http.app import Request, Response, Router
from warptd.http.limits import HttpLimits
from warptd.http.server import WarptdHTTPServer


@contextmanager
def serving(router: Router, limits: HttpLimits | None = None) -> Iterator[WarptdHTTPServer]:
    server = WarptdHTTPServer("127.0.0.1", 0, router, limits=limits)
    server.start()
    try:
        yield server
    finally:
        server.server_close()


def exchange(port: int, data: bytes, wait: float = 5.0) -> bytes:
    """Send ``data`` and read until the server closes (bounded by ``wait``)."""
    with socket.create_connection(("127.0.0.1", port), timeout=wait) as conn:
        conn.sendall(data)
        out = b""
        try:
            while chunk := conn.recv(65536):
                out += chunk
        except TimeoutError:
            pass
        return out


def _get(path: str, *headers: str) -> bytes:
    lines = [f"GET {path} HTTP/1.1", "Host: localhost", *headers, "", ""]
    return "\r\n".join(lines).encode()


@pytest.mark.slow
def test_a_pipelining_client_takes_turns_with_a_scrape():
    """Each request it pipelined was answered on the loop without a pause: one read (64 KiB, ~2,300
    requests) held every other connection that long. Here each costs 1 ms of the loop's time."""
    started = threading.Event()
    served = [0]

    def costly(_: Request) -> Response:
        started.set()
        served[0] += 1
        time.sleep(0.001)  # the loop's own time: a cache reader's build (/devices), h11's parse
        return Response(200, b"{}")

    router = Router()
    router.add("GET", "/c", costly)
    router.add("GET", "/metrics", lambda _: Response(200, b"up 1\n", "text/plain"))
    with serving(router) as server:
        flood = socket.create_connection(("127.0.0.1", server.port), timeout=10)
        try:
            flood.sendall(b"GET /c HTTP/1.1\r\nHost: x\r\n\r\n" * 3000)  # 84 KiB; its answers unread
            assert started.wait(5)
            begun = time.monotonic()
            assert http(server.port, "GET", "/metrics")[0] == 200
            waited = time.monotonic() - begun
            assert served[0] < 1500  # the scrape did not wait for the pipeline to run dry
        finally:
            flood.close()
    assert waited < 1.0  # it waited ~2.3 s behind the pipeline


@pytest.mark.slow
def test_requests_pipelined_on_a_reset_connection_are_not_answered(caplog):
    """20 x 5,000 such requests were all handled, and asyncio logged one warning a write past the
    fifth (29,005 lines of 'socket.send() raised exception.' on stderr in 3 s)."""
    served = [0]

    def tiny(_: Request) -> Response:
        served[0] += 1
        return Response(200, b"{}")

    router = Router()
    router.add("GET", "/t", tiny)
    caplog.set_level(logging.WARNING, logger="asyncio")
    with serving(router) as server:
        for _ in range(3):
            earlier = served[0]
            conn = socket.create_connection(("127.0.0.1", server.port), timeout=5)
            conn.sendall(b"GET /t HTTP/1.1\r\nHost: x\r\n\r\n" * 3000)
            assert wait_until(lambda earlier=earlier: served[0] > earlier, timeout=5)  # being answered
            conn.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
            conn.close()  # a RST: every answer still owed is undeliverable
            at_reset = served[0]
            assert wait_until(lambda: server.connections == 0, timeout=5)
            time.sleep(0.1)
            assert served[0] - at_reset <= 2  # the one being answered, and the one whose write failed
    assert not [r for r in caplog.records if r.name == "asyncio"]


@pytest.mark.slow
def test_content_length_beside_transfer_encoding_is_refused_and_closed():
    """RFC 9112 §6.1: a proxy trusting the length would read the rest as another request (smuggling).
    It was answered by the chunked framing and the connection kept open for the next."""
    router = Router()
    router.add("POST", "/echo", lambda r: Response(200, r.body, "text/plain"))
    router.add("GET", "/next", lambda _: Response(200, b"smuggled", "text/plain"))
    with serving(router) as server:
        head = b"POST /echo HTTP/1.1\r\nHost: x\r\nContent-Length: 4\r\nTransfer-Encoding: chunked\r\n\r\n"
        reply = exchange(server.port, head + b"5\r\nhello\r\n0\r\n\r\n" + _get("/next"))
        assert reply.startswith(b"HTTP/1.1 400 ") and b"Connection: close" in reply
        assert b"smuggled" not in reply and reply.count(b"HTTP/1.1") == 1
        old = b"POST /echo HTTP/1.0\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n0\r\n\r\n"
        assert exchange(server.port, old).startswith(b"HTTP/1.1 400 ")  # HTTP/1.0 has no chunking
        chunked = b"POST /echo HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\nConnection: close\r\n\r\n"
        assert exchange(server.port, chunked + b"5\r\nhello\r\n0\r\n\r\n").endswith(b"hello")  # alone: fine


@pytest.mark.slow
def test_only_http_1_is_served():
    router = Router()
    router.add("GET", "/metrics", lambda _: Response(200, b"up 1\n", "text/plain"))
    with serving(router) as server:
        for line in (b"GET /metrics HTTP/2.0", b"GET /metrics HTTP/3.0", b"PRI * HTTP/2.0"):
            reply = exchange(server.port, line + b"\r\nHost: x\r\n\r\n")
            assert reply.startswith(b"HTTP/1.1 505 HTTP Version Not Supported\r\n"), reply[:60]
            assert b"up 1" not in reply
        assert exchange(server.port, b"GET /metrics HTTP/1.0\r\n\r\n").endswith(b"up 1\n")


@pytest.mark.slow
def test_an_absolute_form_target_names_the_host():
    """RFC 9112 §3.2.2: the host of ``POST http://evil.example/windows`` is evil.example, whatever
    Host says; it passed the loopback check with ``Host: localhost``."""
    seen: list[tuple[str, str, dict[str, list[str]]]] = []

    def record(request: Request) -> Response:
        seen.append((request.header("host"), request.path, request.query))
        return Response(200, b"{}")

    router = Router()
    router.add("GET", "/windows", record)
    router.add("GET", "//windows", record)
    with serving(router) as server:
        for target in (b"http://evil.example/windows?limit=2", b"HTTP://evil.example:80/windows?limit=2"):
            reply = exchange(
                server.port, b"GET " + target + b" HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n"
            )
            assert reply.startswith(b"HTTP/1.1 200 ")
        assert seen == [
            ("evil.example", "/windows", {"limit": ["2"]}),
            ("evil.example:80", "/windows", {"limit": ["2"]}),
        ]
        seen.clear()
        exchange(server.port, b"GET //windows HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n")
        assert seen == [("localhost", "//windows", {})]  # a path, not a host (urlsplit read it as one)
        for target in (
            b"ftp://evil.example/windows",
            b"http:///windows",
            b"http://u@evil.example/windows",
            b"windows",
        ):
            reply = exchange(server.port, b"GET " + target + b" HTTP/1.1\r\nHost: localhost\r\n\r\n")
            assert reply.startswith(b"HTTP/1.1 400 "), target


@pytest.mark.slow
def test_a_400_names_the_fault_without_the_clients_bytes():
    """h11's messages end with a repr of what it refused (``bytearray(b'...')``), echoed to the client."""
    router = Router()
    with serving(router) as server:
        for request, problem in (
            (b"GET / HTTP/1.1\r\nHost: x\r\nBad Header\r\n\r\n", "illegal header line"),
            (b"GET /\x00 HTTP/1.1\r\nHost: x\r\n\r\n", "illegal request line"),
            (b"<script> HTTP/1.1\r\n\r\n", "illegal request line"),
            (
                b"POST / HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n",
                "illegal chunk header",
            ),
        ):
            reply = exchange(server.port, request)
            assert reply.startswith(b"HTTP/1.1 400 "), reply[:40]
            body = json.loads(reply.split(b"\r\n\r\n", 1)[1])
            assert body == {"error": problem}


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
