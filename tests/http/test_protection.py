"""The stress token is compared as the bytes a client sent (issue 39, finding 11): headers are read
as Latin-1, so a UTF-8 token (as curl sends it) was re-encoded and could never match."""

from __future__ import annotations

import socket
import time

import pytest

from warptd.http.app import HttpError, Request, Response, Router
from warptd.http.protection import authorize, is_loopback
from warptd.http.server import WarptdHTTPServer
from warptd.http.stress_routes import StressApi
from warptd.stress.jobs import JobManager

TOKEN = "jeton-ключ-🔑"


def _request(header: str, value: bytes) -> Request:
    """A request as the connection builds it: each header value decoded from its bytes as Latin-1."""
    return Request("POST", "/windows", {}, {header: value.decode("latin-1")}, b"", "192.0.2.7")


@pytest.mark.parametrize("header", ["authorization", "x-stress-token"])
def test_a_utf8_token_matches(header):
    prefix = b"Bearer " if header == "authorization" else b""
    authorize(_request(header, prefix + TOKEN.encode()), TOKEN)
    for wrong in (TOKEN.encode("utf-16"), "jeton-ключ-".encode(), TOKEN.encode() + b"x"):
        with pytest.raises(HttpError) as refused:
            authorize(_request(header, prefix + wrong), TOKEN)
        assert refused.value.status == 401


def test_a_latin1_token_is_utf8_on_the_wire():
    """``café`` from a token file is UTF-8 (c3 a9) as curl and warptd.client send it, not Latin-1 (e9)."""
    authorize(_request("authorization", "Bearer café".encode()), "café")
    with pytest.raises(HttpError):
        authorize(_request("authorization", "Bearer café".encode("latin-1")), "café")


def test_over_the_wire():
    router = Router()

    def guarded(request: Request) -> Response:
        authorize(request, TOKEN)
        return Response(200, b"{}")

    router.add("POST", "/windows", guarded)
    server = WarptdHTTPServer("127.0.0.1", 0, router)
    server.start()
    try:
        for token, status in ((TOKEN.encode(), b"200"), (b"nope", b"401")):
            with socket.create_connection(("127.0.0.1", server.port), timeout=5) as conn:
                conn.sendall(
                    b"POST /windows HTTP/1.1\r\nHost: localhost\r\nContent-Length: 0\r\nConnection: close\r\n"
                    b"Authorization: Bearer " + token + b"\r\n\r\n"
                )
                assert conn.recv(4096).startswith(b"HTTP/1.1 " + status)
    finally:
        server.server_close()


def test_an_unterminated_string_of_escaped_quotes_is_checked_in_linear_time():
    """Each escaped quote of ``"\\"\\"…`` once started a scan to the body's end: 64 KiB took 34 s
    holding the GIL (every sampler and the HTTP loop stalled). Bounded far above the linear scan's
    milliseconds, far below the quadratic one's seconds."""
    from warptd.http.protection import check_json_shape

    for body in (b'"' + b'\\"' * 32_000, b'"' + b'\\"' * 32_000 + b"\\"):
        started = time.monotonic()
        check_json_shape(body)  # no brackets, no numbers: passes, and json.loads then says 400
        assert time.monotonic() - started < 2.0


def test_loopback_host_names():
    from warptd.http.protection import is_loopback_host

    for host in ("localhost:9465", "127.0.0.1", "127.0.0.1:9465", "[::1]:9465", "::1", "LOCALHOST"):
        assert is_loopback_host(host), host
    for host in ("evil.example", "10.0.0.1:9465", "[fe80::1]:9465", "localhost.evil.example"):
        assert not is_loopback_host(host), host


def test_remote_clients_need_a_token():
    router = Router()
    StressApi.add(router, JobManager([], {}), token=lambda: None)
    request = Request("POST", "/stress", {}, {}, b"{}", client="10.1.2.3")
    with pytest.raises(HttpError) as info:
        router.dispatch(request)
    assert info.value.status == 403 and "loopback" in info.value.message
    assert is_loopback("127.0.0.1") and is_loopback("::1") and is_loopback("::ffff:127.0.0.1")
    assert not is_loopback("10.1.2.3") and not is_loopback("::ffff:10.0.0.1")
