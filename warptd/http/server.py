"""The threading HTTP server: bounded bodies, socket timeouts, JSON errors, structured access logs."""

from __future__ import annotations

import socket
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import parse_qs, urlsplit

import structlog

from warptd import __version__
from warptd.http.app import HttpError, Request, Response, Router, json_response

log = structlog.get_logger("warptd.http")
MAX_BODY_BYTES = 64 * 1024


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server_version = f"warptd/{__version__}"
    sys_version = ""
    timeout = 15  # seconds a client may idle mid-request before its socket is closed
    server: WarptdHTTPServer

    def _serve(self) -> None:
        try:
            response = self.server.router.dispatch(self._request())
        except HttpError as exc:
            response = exc.response()
        except Exception as exc:
            log.error("http_handler_failed", path=self.path, error=repr(exc))
            response = json_response(500, {"error": "internal error"})
        self._send(response)

    def _request(self) -> Request:
        url = urlsplit(self.path)
        headers = {k.lower(): v for k, v in self.headers.items()}
        length_text = headers.get("content-length", "0") or "0"
        if "chunked" in headers.get("transfer-encoding", "").lower():
            self.close_connection = True
            raise HttpError(411, "chunked bodies are not accepted; send Content-Length")
        if not length_text.isdigit():
            self.close_connection = True
            raise HttpError(400, "invalid Content-Length")
        length = int(length_text)
        if length > MAX_BODY_BYTES:
            self.close_connection = True  # the unread body must not be parsed as a next request
            raise HttpError(413, f"request body over {MAX_BODY_BYTES} bytes", limit_bytes=MAX_BODY_BYTES)
        body = self.rfile.read(length) if length else b""
        return Request(
            method=self.command,
            path=url.path,
            query=parse_qs(url.query),
            headers=headers,
            body=body,
            client=self.client_address[0],
        )

    def _send(self, response: Response) -> None:
        self.send_response(response.status)
        self.send_header("Content-Type", response.content_type)
        self.send_header("Content-Length", str(len(response.body)))
        for name, value in response.headers.items():
            self.send_header(name, value)
        if self.close_connection:
            self.send_header("Connection", "close")
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(response.body)

    do_GET = do_POST = do_DELETE = do_PUT = do_PATCH = do_HEAD = do_OPTIONS = _serve

    def log_message(self, format: str, *args: object) -> None:
        log.debug("http_request", client=self.client_address[0], line=format % args)

    def log_request(self, code: int | str = "-", size: int | str = "-") -> None:
        log.debug("http_request", client=self.client_address[0], request=self.requestline, status=code)


class WarptdHTTPServer(ThreadingHTTPServer):
    """One thread per connection; ``host=''`` listens on every IPv4 and IPv6 address."""

    daemon_threads = True
    block_on_close = False

    def __init__(self, host: str, port: int, router: Router) -> None:
        self.router = router
        if host in ("", "::") or ":" in host:
            self.address_family = socket.AF_INET6
            host = host or "::"
        super().__init__((host, port), _Handler)

    def server_bind(self) -> None:
        if self.address_family == socket.AF_INET6:
            self.socket.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 0)
        super().server_bind()

    @property
    def port(self) -> int:
        return self.server_address[1]

    def start(self) -> threading.Thread:
        thread = threading.Thread(
            target=self.serve_forever, kwargs={"poll_interval": 0.2}, name="warptd-http"
        )
        thread.daemon = True
        thread.start()
        return thread
