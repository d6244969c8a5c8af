"""One HTTP/1.1 connection on the event loop: h11 parses, warptd bounds time and size, a thread pool
runs the router (and bcrypt), so a slow or silent client costs a coroutine, never a thread."""

from __future__ import annotations

import asyncio
import contextlib
import email.utils
import enum
import http
import socket
import time
from collections.abc import Awaitable, Callable
from urllib.parse import parse_qs

import h11
import structlog

from warptd import __version__
from warptd.http.app import HttpError, Request, Response, json_response
from warptd.http.budget import ResponseBudget
from warptd.http.head import VERSIONS, check_framing, protocol_problem, split_target
from warptd.http.limits import HttpLimits

log = structlog.get_logger("warptd.http")
_SERVER = f"warptd/{__version__}".encode()
_READ_CHUNK = 64 * 1024

#: Runs the request through basic auth and the router, off the event loop.
Dispatch = Callable[[Request], Awaitable[Response]]


class _Closed(Exception):
    """The client hung up, or took too long before its request was read: close without a response."""


_date_cache: tuple[int, bytes] = (0, b"")


def _reason(status: int) -> bytes:
    """The standard reason phrase (``OK``, ``Not Found``); clients and proxies that log it get one."""
    try:
        return http.HTTPStatus(status).phrase.encode("ascii")
    except ValueError:
        return b""


def _date() -> bytes:
    """The Date header, formatted once a second."""
    global _date_cache
    now = int(time.time())
    if _date_cache[0] != now:
        _date_cache = (now, email.utils.formatdate(now, usegmt=True).encode())
    return _date_cache[1]


class Phase(enum.IntEnum):
    """Where a connection is; the lower, the sooner the server closes it to make room at a cap."""

    DELAYED = 0  # a refusal held back before it is sent (a wrong password's): owed nothing
    IDLE = 1  # a keep-alive connection waiting for its next request
    HEAD = 2  # waiting for (the rest of) a request head
    BODY = 3  # reading a request body
    SENDING = 4  # a response the client has not taken yet: never closed to make room
    BUSY = 5  # its request is being handled: never closed to make room


async def closed(writer: asyncio.StreamWriter) -> None:
    """Close ``writer`` and take what its closing carries (a reset connection's error, which asyncio
    would otherwise log as never retrieved once the connection is gone), a second at most."""
    writer.close()
    with contextlib.suppress(Exception):
        await asyncio.wait_for(writer.wait_closed(), timeout=1.0)


class Connection:
    """Serves requests on one connection until it closes, a limit is hit or the server stops."""

    def __init__(
        self,
        reader: asyncio.StreamReader,
        writer: asyncio.StreamWriter,
        limits: HttpLimits,
        dispatch: Dispatch,
        budget: ResponseBudget,
    ) -> None:
        self.reader, self.writer, self.limits, self.dispatch = reader, writer, limits, dispatch
        self.budget = budget
        self.h11 = h11.Connection(h11.SERVER, max_incomplete_event_size=limits.max_header_bytes)
        peer = writer.get_extra_info("peername")
        self.client = str(peer[0]) if isinstance(peer, tuple) else ""
        self.loop = asyncio.get_running_loop()
        #: What the connection is doing, and since when (loop time): the server's eviction order.
        self.phase, self.since = Phase.HEAD, self.loop.time()
        self.evicted = False
        sock = writer.get_extra_info("socket")
        if sock is not None and sock.family in (socket.AF_INET, socket.AF_INET6):
            # Head and body can be two writes: with Nagle on, a keep-alive client (Prometheus)
            # would wait ~40 ms for the delayed ACK of the first.
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)

    async def serve(self) -> None:
        try:
            first = True
            while not self.lost:
                try:
                    request = await self._read_request(first)
                except HttpError as exc:  # 400, 408, 413, 505: the rest of the request is unread
                    await self._send_error(exc.response())
                    return
                first = False
                if request is None:
                    return
                self._enter(Phase.BUSY)
                # Not kept in a local: a body held while the next request waits for its turn is a
                # body per connection (250 connections pipelining GET /windows held 184 MiB so).
                await self._send(request.method, await self._respond(request))
                if self.h11.our_state is not h11.DONE or self.h11.their_state is not h11.DONE:
                    return
                self.h11.start_next_cycle()
                # One request a turn: a client that pipelines thousands, all parsed from one read and
                # answered on the loop, never awaits; without this the loop served it alone until its
                # pipeline ran dry (16 such clients held scrapes ~5 s). Its next request now waits
                # behind every other connection's step, a scrape's among them.
                await asyncio.sleep(0)
        except (_Closed, ConnectionError, TimeoutError):
            return
        except h11.RemoteProtocolError as exc:
            if self.evicted:
                return
            status = exc.error_status_hint if 400 <= exc.error_status_hint < 600 else 400
            await self._send_error(json_response(status, {"error": protocol_problem(exc)}))
        finally:
            await closed(self.writer)

    @property
    def lost(self) -> bool:
        """The client is gone (a RST, a failed write) or the connection was closed: requests it
        pipelined before are not answered, since nothing can be sent (20 clients x 5,000 answered
        so wrote 29,005 of asyncio's ``socket.send() raised exception.`` in 3 s)."""
        return self.writer.transport.is_closing()

    async def _read_request(self, first: bool) -> Request | None:
        """The next request with its body; None when the client closed between requests."""
        start = self.loop.time()
        wait = self.limits.header_timeout if first else self.limits.idle_timeout
        self._enter(Phase.HEAD if first else Phase.IDLE)
        event = await self._next_event(start + wait)
        if isinstance(event, h11.ConnectionClosed):
            return None
        if not first:
            self._enter(Phase.HEAD)
        head_until = (
            start + self.limits.header_timeout if first else self.loop.time() + self.limits.header_timeout
        )
        while event is h11.NEED_DATA:
            event = await self._next_event(head_until)
        if not isinstance(event, h11.Request):
            raise _Closed
        # h11 bounds only a head still incomplete; one that arrived whole in a read is measured here.
        head = len(event.method) + len(event.target) + sum(len(n) + len(v) + 4 for n, v in event.headers)
        if head > self.limits.max_header_bytes:
            raise HttpError(431, f"request head over {self.limits.max_header_bytes} bytes")
        if event.http_version not in VERSIONS:  # h11 reads any N.N: HTTP/2.0 is not 1.1
            raise HttpError(505, "only HTTP/1.0 and HTTP/1.1 are served")
        headers = {name.decode("latin-1"): value.decode("latin-1") for name, value in event.headers}
        check_framing(headers, event.http_version)
        target = split_target(event.target.decode("latin-1"))
        if target.authority is not None:  # absolute form: the target names the host (RFC 9112 §3.2.2)
            headers["host"] = target.authority
        length = headers.get("content-length")
        limit = self.limits.max_body_bytes
        if length is not None and int(length) > limit:
            raise HttpError(413, f"request body over {limit} bytes", limit_bytes=limit)
        self._enter(Phase.BODY)
        body = await self._read_body(limit)
        return Request(
            method=event.method.decode("latin-1"),
            path=target.path,
            query=parse_qs(target.query),
            headers=headers,
            body=body,
            client=self.client,
        )

    def evict(self) -> None:
        """Close to make room for another connection (never one handling or answering a request): at
        once, with a FIN, so a keep-alive client opens a new connection."""
        self.evicted = True
        self.writer.transport.close()

    def _enter(self, phase: Phase) -> None:
        self.phase, self.since = phase, self.loop.time()

    async def _read_body(self, limit: int) -> bytes:
        chunks, size = [], 0
        until = self.loop.time() + self.limits.body_timeout
        while True:
            try:
                event = await self._next_event(until)
            except _Closed:
                raise HttpError(408, "request body not received in time") from None
            if isinstance(event, h11.Data):
                size += len(event.data)
                if size > limit:  # a chunked body: counted as it arrives
                    raise HttpError(413, f"request body over {limit} bytes", limit_bytes=limit)
                chunks.append(event.data)
            elif isinstance(event, h11.EndOfMessage):
                return b"".join(chunks)
            elif isinstance(event, h11.ConnectionClosed):
                raise _Closed

    async def _next_event(self, until: float) -> h11.Event | type[h11.NEED_DATA]:
        """h11's next event, reading from the socket as needed until ``until`` (loop time)."""
        event = self.h11.next_event()
        if event is not h11.NEED_DATA:
            return event
        remaining = until - self.loop.time()
        if remaining <= 0:
            raise _Closed
        try:
            async with asyncio.timeout(remaining):
                data = await self.reader.read(_READ_CHUNK)
        except TimeoutError:
            raise _Closed from None
        self.h11.receive_data(data)
        return self.h11.next_event()

    async def _respond(self, request: Request) -> Response:
        try:
            return await self.dispatch(request)
        except HttpError as exc:
            return exc.response()
        except Exception as exc:
            log.error("http_handler_failed", path=request.path, error=repr(exc))
            return json_response(500, {"error": "internal error"}, headers={"Connection": "close"})

    async def _send(self, method: str, response: Response, close: bool = False) -> None:
        if response.delay_s:
            self._enter(Phase.DELAYED)
            await asyncio.sleep(response.delay_s)
        if self.lost:  # nowhere to send it
            return
        headers = [
            (b"Server", _SERVER),
            (b"Date", _date()),
            (b"Content-Type", response.content_type.encode("latin-1")),
            (b"Content-Length", str(len(response.body)).encode()),
        ]
        headers += [(k.encode("latin-1"), v.encode("latin-1")) for k, v in response.headers.items()]
        if close and "Connection" not in response.headers:
            headers.append((b"Connection", b"close"))
        head = self.h11.send(
            h11.Response(status_code=response.status, headers=headers, reason=_reason(response.status))
        )
        body = self.h11.send(h11.Data(data=response.body)) if method != "HEAD" and response.body else b""
        self.h11.send(h11.EndOfMessage())  # Content-Length framing: nothing more to write
        self.writer.write(head + body)  # one send: cheaper than two, even at 370 KiB (64 GPUs)
        # The transport keeps a copy of what the kernel did not take at once: nothing else need stay
        # while the client takes its time (the caller holds no reference either).
        del head, body, response
        unsent = self.writer.transport.get_write_buffer_size()
        if unsent:
            # Served no further until taken (its next request stays unread), within the body
            # timeout; meanwhile what is unsent is charged to the budget that bounds what all such
            # responses hold.
            self._enter(Phase.SENDING)
            self.budget.charge(unsent)
            try:
                async with asyncio.timeout(self.limits.body_timeout):
                    await self.writer.drain()
            finally:
                self.budget.release(unsent)

    async def _send_error(self, response: Response) -> None:
        """An error before or while reading the request: JSON, then close (the rest is unread)."""
        with contextlib.suppress(h11.LocalProtocolError, ConnectionError, TimeoutError):
            await self._send("GET", response, close=True)
