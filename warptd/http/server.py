"""The threading HTTP server: bounded bodies, socket timeouts, JSON errors, structured access logs."""

from __future__ import annotations

import contextlib
import json
import re
import socket
import ssl
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import parse_qs, urlsplit

import structlog

from warptd import __version__
from warptd.http.app import HttpError, Request, Response, Router, json_response
from warptd.http.webconfig import BasicAuth

log = structlog.get_logger("warptd.http")
MAX_BODY_BYTES = 64 * 1024
#: Connections served at once; beyond this a client gets 503 at once instead of a thread.
MAX_CONNECTIONS = 64
_DIGITS = re.compile(r"[0-9]+")
_BUSY_BODY = b'{"error":"too many concurrent connections"}\n'
_BUSY = (
    b"HTTP/1.1 503 Service Unavailable\r\nContent-Type: application/json\r\nConnection: close\r\n"
    b"Retry-After: 1\r\nContent-Length: %d\r\n\r\n%s" % (len(_BUSY_BODY), _BUSY_BODY)
)


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server_version = f"warptd/{__version__}"
    version_string = lambda self: self.server_version  # noqa: E731 - Server header: no trailing space
    timeout = 15  # seconds a client may idle mid-request before its socket is closed
    # Headers and body are two writes; with Nagle on, a keep-alive client (Prometheus) would wait
    # for the delayed ACK of the first: ~40 ms per scrape.
    disable_nagle_algorithm = True
    server: WarptdHTTPServer

    def setup(self) -> None:
        super().setup()  # sets the socket timeout, which bounds the TLS handshake too
        if isinstance(self.connection, ssl.SSLSocket):
            self.connection.do_handshake()  # here, in this connection's thread, not in accept()

    def _serve(self) -> None:
        auth = self.server.basic_auth
        if auth is not None and not auth.check(self.headers.get("Authorization", "")):
            self.close_connection = True
            challenge = {"WWW-Authenticate": 'Basic realm="warptd", charset="UTF-8"'}
            self._send(json_response(401, {"error": "authentication required"}, headers=challenge))
            return
        try:
            response = self.server.router.dispatch(self._request())
        except HttpError as exc:
            response = exc.response()
        except TimeoutError:
            self.close_connection = True
            response = json_response(408, {"error": "request body not received in time"})
        except Exception as exc:
            log.error("http_handler_failed", path=self.path, error=repr(exc))
            self.close_connection = True  # the connection state is unknown: never reuse it
            response = json_response(500, {"error": "internal error"})
        self._send(response)

    def _request(self) -> Request:
        url = urlsplit(self.path)
        headers = {k.lower(): v for k, v in self.headers.items()}
        lengths = self.headers.get_all("Content-Length") or ["0"]
        length_text = lengths[0].strip() or "0"
        if "chunked" in headers.get("transfer-encoding", "").lower():
            self.close_connection = True
            raise HttpError(411, "chunked bodies are not accepted; send Content-Length")
        if len(set(lengths)) > 1 or not _DIGITS.fullmatch(length_text):
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

    do_GET = do_POST = do_DELETE = do_PUT = do_PATCH = do_HEAD = do_OPTIONS = do_TRACE = do_CONNECT = _serve

    def __getattr__(self, name: str) -> object:
        """Any other method (QUERY, PROPFIND …) reaches the router too: 405 with Allow, not 501."""
        if name.startswith("do_") and name[3:].isalpha() and name[3:].isupper():
            return self._serve
        raise AttributeError(name)

    def send_error(self, code: int, message: str | None = None, explain: str | None = None) -> None:
        """Errors raised by the stdlib itself (bad request line, unknown method) are JSON too."""
        self.close_connection = True
        body = json.dumps({"error": message or self.responses.get(code, ("error",))[0]}).encode()
        self.send_response(code, message)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.send_header("Connection", "close")
        self.end_headers()
        if self.command != "HEAD" and code >= 200 and code not in (204, 304):
            self.wfile.write(body)

    def log_message(self, format: str, *args: object) -> None:
        log.debug("http_request", client=self.client_address[0], line=format % args)

    def log_request(self, code: int | str = "-", size: int | str = "-") -> None:
        log.debug("http_request", client=self.client_address[0], request=self.requestline, status=code)


class WarptdHTTPServer(ThreadingHTTPServer):
    """One thread per connection; ``host=''`` listens on every IPv4 and IPv6 address."""

    daemon_threads = True
    block_on_close = False

    def __init__(
        self,
        host: str,
        port: int,
        router: Router,
        *,
        max_connections: int = MAX_CONNECTIONS,
        tls: ssl.SSLContext | None = None,
        basic_auth: BasicAuth | None = None,
    ) -> None:
        self.router = router
        self.basic_auth = basic_auth
        self._slots = threading.BoundedSemaphore(max_connections)
        if host == "" and not socket.has_ipv6:
            host = "0.0.0.0"
        if host in ("", "::") or ":" in host:
            self.address_family = socket.AF_INET6
        try:
            super().__init__((host or "::", port), _Handler)
        except OSError:
            if host != "":
                raise
            # An empty host on a kernel booted with ipv6.disable=1: every IPv4 address instead.
            self.address_family = socket.AF_INET
            super().__init__(("0.0.0.0", port), _Handler)
        if tls is not None:
            self.socket = tls.wrap_socket(self.socket, server_side=True, do_handshake_on_connect=False)

    def server_bind(self) -> None:
        if self.address_family == socket.AF_INET6:
            self.socket.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 0)
        super().server_bind()

    def process_request(self, request: socket.socket, client_address: object) -> None:  # type: ignore[override]
        """Bounded: over ``max_connections`` the client is answered 503 without a thread."""
        if not self._slots.acquire(blocking=False):
            # Never write on this (accept) thread to a TLS socket: the write would first wait for
            # the client's handshake, with no time limit. Plain sockets get the 503, briefly.
            if not isinstance(request, ssl.SSLSocket):
                request.settimeout(0.5)
                with contextlib.suppress(OSError):
                    request.sendall(_BUSY)
            self.shutdown_request(request)
            return
        try:
            super().process_request(request, client_address)  # type: ignore[arg-type]
        except BaseException:
            self._slots.release()
            raise

    def process_request_thread(self, request: socket.socket, client_address: object) -> None:  # type: ignore[override]
        try:
            super().process_request_thread(request, client_address)  # type: ignore[arg-type]
        finally:
            self._slots.release()

    def handle_error(self, request: object, client_address: object) -> None:
        """A client that hangs up mid-response is routine: log it, don't print a traceback."""
        log.debug("http_connection_error", client=str(client_address))

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
