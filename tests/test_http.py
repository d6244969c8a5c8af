"""The real HTTP server on loopback: /metrics negotiation and gzip, health, devices, errors."""

from __future__ import annotations


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


# -- heavy reads: what they may hold and how long a scrape waits behind them (issue 34) ------------
