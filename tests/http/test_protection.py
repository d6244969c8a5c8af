"""The stress token is compared as the bytes a client sent (issue 39, finding 11): headers are read
as Latin-1, so a UTF-8 token (as curl sends it) was re-encoded and could never match."""

from __future__ import annotations

import socket

import pytest

from warptd.http.app import HttpError, Request, Response, Router
from warptd.http.protection import authorize
from warptd.http.server import WarptdHTTPServer

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
