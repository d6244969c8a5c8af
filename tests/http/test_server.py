"""Basic auth under a flood of wrong passwords (issue 39, finding 4): credentials that passed before
are known on the loop at once, bcrypt runs a few at a time in threads of its own, one address holds
a bounded share of it, and a refusal is held back at no cost, first to go when room is needed."""

from __future__ import annotations

import base64
import http.client
import socket
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager

import bcrypt
import pytest

from tests.helpers import wait_until
from warptd.http import server as server_module
from warptd.http import webconfig
from warptd.http.app import Response, Router
from warptd.http.connection import Phase
from warptd.http.limits import HttpLimits
from warptd.http.server import CHECKS_AT_ONCE, CHECKS_PER_CLIENT, WarptdHTTPServer
from warptd.http.webconfig import BasicAuth

HASH = bcrypt.hashpw(b"secret", bcrypt.gensalt(4)).decode()


def basic(user: str, password: str) -> dict[str, str]:
    return {"Authorization": "Basic " + base64.b64encode(f"{user}:{password}".encode()).decode()}


RIGHT = basic("prometheus", "secret")


def ask(port: int, headers: dict[str, str], source: str = "127.0.0.1", timeout: float = 10) -> int:
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=timeout, source_address=(source, 0))
    try:
        conn.request("GET", "/metrics", headers=headers)
        response = conn.getresponse()
        response.read()
        return response.status
    finally:
        conn.close()


@contextmanager
def serving(limits: HttpLimits | None = None) -> Iterator[WarptdHTTPServer]:
    router = Router()
    router.add("GET", "/metrics", lambda _: Response(200, b"up 1\n", "text/plain"))
    server = WarptdHTTPServer(
        "127.0.0.1", 0, router, limits=limits, basic_auth=BasicAuth({"prometheus": HASH})
    )
    server.start()
    try:
        yield server
    finally:
        server.server_close()


class HeldChecks:
    """bcrypt checks that wait until released, counting how many run at once."""

    def __init__(self) -> None:
        self.release, self.lock = threading.Event(), threading.Lock()
        self.running = self.most = self.calls = 0
        self._real = webconfig._checkpw

    def __call__(self, password: str, hashed: bytes) -> bool:
        with self.lock:
            self.running += 1
            self.calls += 1
            self.most = max(self.most, self.running)
        self.release.wait(10)
        with self.lock:
            self.running -= 1
        return self._real(password, hashed)


@contextmanager
def guessing(port: int, count: int, source: str = "127.0.0.1") -> Iterator[list[int]]:
    """``count`` clients each asking once with a wrong password; yields their statuses so far."""
    statuses: list[int] = []
    threads = [
        threading.Thread(
            target=lambda i=i: statuses.append(ask(port, basic("prometheus", f"guess{i}"), source)),
            daemon=True,
        )
        for i in range(count)
    ]
    for thread in threads:
        thread.start()
    try:
        yield statuses
    finally:
        for thread in threads:
            thread.join(timeout=15)


@pytest.mark.slow
def test_known_credentials_never_wait_behind_password_checks(monkeypatch):
    """Every request, the cached correct ones included, waited for a slot behind the ~50 ms bcrypt
    checks: 60 guessing threads held authenticated scrapes at p99 2.2 s."""
    monkeypatch.setattr(server_module, "REFUSAL_DELAY_S", 0.0)
    with serving(HttpLimits(max_requests=2, header_timeout=2.0)) as server:
        assert ask(server.port, RIGHT) == 200  # checked once by bcrypt, known from then on
        held = HeldChecks()
        monkeypatch.setattr(webconfig, "_checkpw", held)
        with guessing(server.port, 6) as statuses:
            assert wait_until(lambda: held.running == CHECKS_AT_ONCE, timeout=5)
            time.sleep(0.2)  # the others are queued behind
            for _ in range(5):
                started = time.monotonic()
                assert ask(server.port, RIGHT) == 200
                assert time.monotonic() - started < 1.0
            assert held.most == CHECKS_AT_ONCE  # bcrypt never takes more threads (CPUs) than that
            held.release.set()
        assert statuses == [401] * 6
        assert held.calls == 6  # the known credentials never reached bcrypt


@pytest.mark.slow
def test_one_address_holds_a_bounded_share_of_the_checks(monkeypatch):
    """Past CHECKS_PER_CLIENT checks under way, an address gets 429 (after the refusal delay), so its
    flood queues no further ahead of another client's first login."""
    monkeypatch.setattr(server_module, "REFUSAL_DELAY_S", 0.0)
    held = HeldChecks()
    monkeypatch.setattr(webconfig, "_checkpw", held)
    with serving() as server, guessing(server.port, CHECKS_PER_CLIENT) as statuses:
        assert wait_until(lambda: sum(server._checking.values()) == CHECKS_PER_CLIENT, timeout=5)
        assert ask(server.port, basic("prometheus", "one-more")) == 429
        first_login = threading.Thread(
            target=lambda: statuses.append(ask(server.port, RIGHT, source="127.0.0.2")), daemon=True
        )
        first_login.start()  # another address: queued, not refused
        assert wait_until(lambda: server._checking.get("127.0.0.2") == 1, timeout=5)
        held.release.set()
        first_login.join(timeout=10)
    assert sorted(statuses) == [200] + [401] * CHECKS_PER_CLIENT


@pytest.mark.slow
def test_a_refusal_is_held_back_and_its_connection_goes_first(monkeypatch):
    """A wrong password is answered after REFUSAL_DELAY_S, which slows a guesser to a try a second a
    connection; meanwhile its connection is the first closed when the cap needs room, before idle
    keep-alive ones. A request without credentials is challenged at once."""
    monkeypatch.setattr(server_module, "REFUSAL_DELAY_S", 0.6)
    with serving() as server:
        started = time.monotonic()
        assert ask(server.port, basic("prometheus", "wrong")) == 401
        assert time.monotonic() - started >= 0.6
        started = time.monotonic()
        assert ask(server.port, {}) == 401
        assert time.monotonic() - started < 0.5

    monkeypatch.setattr(server_module, "REFUSAL_DELAY_S", 30.0)
    with serving(HttpLimits(max_connections=2)) as server:
        keep = http.client.HTTPConnection("127.0.0.1", server.port, timeout=10)
        keep.request("GET", "/metrics", headers=RIGHT)
        assert keep.getresponse().read() == b"up 1\n"  # now idle, kept alive
        guesser = socket.create_connection(("127.0.0.1", server.port), timeout=10)
        guesser.sendall(
            b"GET /metrics HTTP/1.1\r\nHost: x\r\nAuthorization: "
            + basic("prometheus", "wrong")["Authorization"].encode()
            + b"\r\n\r\n"
        )
        assert wait_until(lambda: Phase.DELAYED in {c.phase for c in server._open}, timeout=5)
        assert ask(server.port, RIGHT) == 200  # at the cap: the held-back refusal made room
        assert guesser.recv(1024) == b""  # closed, owed nothing
        keep.request("GET", "/metrics", headers=RIGHT)
        assert keep.getresponse().status == 200  # the idle keep-alive connection stayed
        keep.close()
        guesser.close()


@pytest.mark.parametrize(
    ("header", "known"),
    [
        (RIGHT["Authorization"], None),  # not yet checked
        ("Bearer token", False),
        ("Basic !!!", False),
        ("Basic " + base64.b64encode(b"no-colon").decode(), False),
        ("Basic " + base64.b64encode(b"nobody:pw").decode(), None),  # bcrypt's cost, as for a user
    ],
)
def test_what_is_known_without_bcrypt(header, known):
    auth = BasicAuth({"prometheus": HASH})
    assert auth.known(header) is known
    auth.check(RIGHT["Authorization"])
    assert auth.known(RIGHT["Authorization"]) is True


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
