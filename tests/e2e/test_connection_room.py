"""At the connection caps a scrape still has a place: idle keep-alive connections make room instead
of locking scrapes out, and one client address cannot take every slot. Real daemon on loopback;
caps lowered through the settings (the mechanism is the same at 4096/256: bench/idle_flood.py)."""

from __future__ import annotations

from collections.abc import Iterator
from http.client import HTTPConnection

import pytest

from tests.connection_flood import idle_keepalive, release, scrapes
from tests.helpers import http, wait_until
from warptd.daemon import Daemon
from warptd.http.limits import raise_nofile_limit


@pytest.fixture
def daemon(settings) -> Iterator[Daemon]:
    if raise_nofile_limit() < 2000:
        pytest.skip("RLIMIT_NOFILE too low for 900 sockets")
    settings.backends = ["cpu"]
    settings.http_max_connections = 256
    settings.http_max_client_connections = 64
    d = Daemon(settings)
    d.start()
    assert wait_until(lambda: http(d.port, "GET", "/readyz")[0] == 200)
    try:
        yield d
    finally:
        release()
        d.stop()


@pytest.mark.slow
def test_idle_keepalive_connections_from_one_address_leave_scrapes_served(settings):
    if raise_nofile_limit() < 2000:
        pytest.skip("RLIMIT_NOFILE too low for 900 sockets")
    settings.backends = ["cpu"]
    settings.http_max_connections = 256
    settings.http_max_client_connections = 256  # the total cap alone makes room here
    d = Daemon(settings)
    d.start()
    try:
        assert wait_until(lambda: http(d.port, "GET", "/readyz")[0] == 200)
        flood = idle_keepalive(d.port, 300, within_s=60)
        assert flood == {200: 300}  # each one answered: the older idle ones were closed instead
        assert d.server.connections <= 256
        assert scrapes(d.port, 20) == 20
        for path in ("/healthz", "/readyz"):
            assert http(d.port, "GET", path)[0] == 200
    finally:
        release()
        d.stop()


@pytest.mark.slow
def test_one_address_holds_at_most_its_share(daemon):
    others = [
        HTTPConnection("127.0.0.1", daemon.port, timeout=5, source_address=("127.0.0.3", 0))
        for _ in range(50)
    ]
    try:
        for conn in others:  # another host's keep-alive connections, open before the flood
            conn.request("GET", "/healthz")
            assert conn.getresponse().read()
        assert idle_keepalive(daemon.port, 300, source="127.0.0.2", within_s=60) == {200: 300}
        assert daemon.server.connections <= 64 + 50
        assert scrapes(daemon.port, 20) == 20
        for conn in others:  # none of them was closed to make room for the flood
            conn.request("GET", "/healthz")
            response = conn.getresponse()
            assert response.status == 200 and response.read()
            assert conn.sock is not None and not response.will_close
        assert daemon.server.evicted >= 300 - 64
    finally:
        for conn in others:
            conn.close()
