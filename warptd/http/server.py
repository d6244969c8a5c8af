"""The HTTP server: one asyncio event loop on its own thread accepts and reads every connection;
routes run in a bounded thread pool. ``host=''`` listens on every IPv4 and IPv6 address."""

from __future__ import annotations

import asyncio
import contextlib
import ipaddress
import os
import socket
import ssl
import threading
from collections.abc import Iterable

import structlog

from warptd.http.app import Request, Response, Router, json_response
from warptd.http.budget import ResponseBudget
from warptd.http.connection import Connection, Phase, closed
from warptd.http.limits import HttpLimits
from warptd.http.webconfig import BasicAuth
from warptd.http.workers import Workers

log = structlog.get_logger("warptd.http")
_BUSY_BODY = b'{"error":"too many concurrent connections"}\n'
_BUSY = (
    b"HTTP/1.1 503 Service Unavailable\r\nContent-Type: application/json\r\nConnection: close\r\n"
    b"Retry-After: 1\r\nContent-Length: %d\r\n\r\n%s" % (len(_BUSY_BODY), _BUSY_BODY)
)
#: Requests that may wait for a pool slot, per slot of ``max_requests``; beyond, 503 at once.
QUEUED_PER_SLOT = 4
#: Routes that build their answer in Python (listings, recordings: ``builds``) run one at a time.
#: Each holds the GIL while it builds, and the event loop serving the scrapes waits its turn behind
#: every such thread: 40 at once (``max_requests``) took a scrape's median to 682 ms and its p99 to
#: 1.3 s, 2 at once its p99 to 36-73 ms (bench/slow_clients.py), one to 25.
BUILDS_AT_ONCE = 1
#: bcrypt checks (~50 ms of CPU each, at cost 10) that run at once: half the CPUs, 1 to 4. More
#: would only share the same cores, and take them from the event loop serving the scrapes.
CHECKS_AT_ONCE = min(4, max(1, len(os.sched_getaffinity(0)) // 2 if hasattr(os, "sched_getaffinity") else 1))
#: How much lower than the rest of the daemon the bcrypt threads run (nice 10 from the daemon's):
#: a flood of wrong passwords spends the CPU that the event loop and the samplers leave.
CHECKS_NICE = 10
#: bcrypt checks one client address may have waiting or running; beyond, 429 at once. A flood of
#: wrong passwords from one address so never queues ahead of other clients' first logins.
CHECKS_PER_CLIENT = 8
#: Seconds a refusal of credentials (a wrong password, or too many checks at once) waits before it
#: is sent, as login(1) waits: each guesser's connection then tries once a second at most. It waits
#: on the event loop at no cost, and is the first connection closed when another needs room.
REFUSAL_DELAY_S = 1.0
_AUTH_CHALLENGE = {"WWW-Authenticate": 'Basic realm="warptd", charset="UTF-8"', "Connection": "close"}


class WarptdHTTPServer:
    """Binds at construction (so ``port`` is known); ``start()`` serves on a ``warptd-http`` thread."""

    def __init__(
        self,
        host: str,
        port: int,
        router: Router,
        *,
        limits: HttpLimits | None = None,
        tls: ssl.SSLContext | None = None,
        basic_auth: BasicAuth | None = None,
    ) -> None:
        self.router, self.tls, self.basic_auth = router, tls, basic_auth
        self.limits = limits or HttpLimits()
        self._open: set[Connection] = set()  # TLS: once the handshake is done
        self._by_client: dict[str, set[Connection]] = {}  # client_key -> its open connections
        self.evicted = 0  #: connections closed to make room for a new one
        self.socket = _bind(host, port)
        self.socket.listen(self.limits.backlog)  # connections queue from here on, served once started
        self.address_family = self.socket.family
        self.server_address = self.socket.getsockname()
        self._pool = Workers(self.limits.max_requests + BUILDS_AT_ONCE)
        self._checkers = Workers(CHECKS_AT_ONCE, name="warptd-bcrypt", nice=CHECKS_NICE)
        self._loop: asyncio.AbstractEventLoop | None = None
        self._tasks: set[asyncio.Task[None]] = set()
        #: The threads' lanes: routes that wait, routes that build, bcrypt checks; each its own, so
        #: that a scrape never waits behind a route, nor an authenticated one behind a password check.
        self._lanes = {
            "waits": asyncio.Semaphore(self.limits.max_requests),
            "builds": asyncio.Semaphore(BUILDS_AT_ONCE),
            "checks": asyncio.Semaphore(CHECKS_AT_ONCE),
        }
        self._queued = 0  # requests waiting for a slot, in any lane
        self._checking: dict[str, int] = {}  # client_key -> its bcrypt checks waiting or running
        self.budget = ResponseBudget(self.limits.max_response_bytes)
        self._thread: threading.Thread | None = None
        self._stopped = threading.Event()

    @property
    def port(self) -> int:
        return self.server_address[1]

    @property
    def connections(self) -> int:
        """Open connections (TLS: once the handshake is done)."""
        return len(self._open)

    def start(self) -> threading.Thread:
        """Serve until :meth:`shutdown`; returns once the socket is listening."""
        started = threading.Event()
        self._thread = threading.Thread(target=self._run, args=(started,), name="warptd-http", daemon=True)
        self._thread.start()
        started.wait(timeout=10)
        return self._thread

    def _run(self, started: threading.Event) -> None:
        loop = self._loop = asyncio.new_event_loop()
        asyncio.set_event_loop(loop)
        try:
            server = loop.run_until_complete(
                asyncio.start_server(
                    self._accept,
                    sock=self.socket,
                    backlog=self.limits.backlog,
                    ssl=self.tls,
                    ssl_handshake_timeout=self.limits.header_timeout if self.tls else None,
                    limit=self.limits.max_header_bytes,
                )
            )
            started.set()
            loop.run_forever()
            server.close()
            loop.run_until_complete(self._close_connections())
        finally:
            started.set()
            loop.close()

    async def _close_connections(self) -> None:
        for task in list(self._tasks):
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)

    async def _accept(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        connection = Connection(reader, writer, self.limits, self._dispatch, self.budget)
        key = client_key(connection.client)
        if not self._make_room(key):
            with contextlib.suppress(OSError):
                writer.write(_BUSY)
            await closed(writer)
            return
        task = asyncio.current_task()
        self._open.add(connection)
        self._by_client.setdefault(key, set()).add(connection)
        if task is not None:
            self._tasks.add(task)
        try:
            await connection.serve()
        finally:
            self._forget(connection, key)
            self._tasks.discard(task)  # type: ignore[arg-type]

    def _make_room(self, key: str) -> bool:
        """Room for one more connection from ``key``: at the client's cap, then at the total cap, the
        connection doing least is closed (the longest-idle keep-alive one first, then the one
        waiting longest for a head, then for a body). False only when every connection in the way
        is handling a request or sending its response (owed to its client; the send timeout
        bounds it)."""
        same = self._by_client.get(key, ())
        if len(same) >= self.limits.max_client_connections and not self._evict(same, key, "client"):
            return False
        return len(self._open) < self.limits.max_connections or self._evict(self._open, key, "total")

    def _evict(self, candidates: Iterable[Connection], key: str, cap: str) -> bool:
        victim = min(
            (c for c in candidates if c.phase < Phase.SENDING),
            key=lambda c: (c.phase, c.since),
            default=None,
        )
        if victim is None:
            log.warning("http_connection_refused", client=key, cap=cap, connections=len(self._open))
            return False
        self._forget(victim, client_key(victim.client))
        victim.evict()
        self.evicted += 1
        log.debug("http_connection_evicted", client=victim.client, phase=victim.phase.name, cap=cap)
        return True

    def _forget(self, connection: Connection, key: str) -> None:
        if connection not in self._open:
            return  # already evicted
        self._open.discard(connection)
        same = self._by_client.get(key)
        if same is not None:
            same.discard(connection)
            if not same:
                del self._by_client[key]

    async def _dispatch(self, request: Request) -> Response:
        """Under basic auth, credentials that passed before are known on the loop at once; others
        are checked by bcrypt in a lane of their own (:meth:`_check`). Then cache readers (/metrics
        …) run inline on the loop. In the thread pool, each lane apart: the endpoints declared in
        the ``waits`` lane, ``max_requests`` at once; those in the ``builds`` lane, ``BUILDS_AT_ONCE``
        at once; a route only while the responses not yet taken hold less than the budget
        (``max_response_bytes``)."""
        auth = self.basic_auth
        if auth is not None:
            known = auth.known(request.header("authorization"))
            verdict = await self._check(request) if known is None else known
            if isinstance(verdict, Response):
                return verdict
            if not verdict:
                refusal = json_response(401, {"error": "authentication required"}, headers=_AUTH_CHALLENGE)
                if known is None:  # credentials that bcrypt refused: held back; none sent: at once
                    refusal.delay_s = REFUSAL_DELAY_S
                return refusal
        where = self.router.lane(request)
        if where == "loop":
            return self._handle(request)
        busy = await self._slot(where, budgeted=True)
        if busy is not None:
            return busy
        try:
            assert self._loop is not None
            return await self._loop.run_in_executor(self._pool, self._handle, request)
        finally:
            self._lanes[where].release()

    async def _check(self, request: Request) -> bool | Response:
        """bcrypt's verdict on the credentials, ``CHECKS_AT_ONCE`` at once in threads of their own;
        429 for a client address that has ``CHECKS_PER_CLIENT`` checks under way already."""
        key = client_key(request.client)
        if self._checking.get(key, 0) >= CHECKS_PER_CLIENT:
            refusal = json_response(
                429,
                {"error": "too many password checks from this address at once"},
                headers={"Retry-After": "1", "Connection": "close"},
            )
            refusal.delay_s = REFUSAL_DELAY_S
            return refusal
        self._checking[key] = self._checking.get(key, 0) + 1
        try:
            busy = await self._slot("checks", budgeted=False)
            if busy is not None:
                return busy
            try:
                assert self._loop is not None and self.basic_auth is not None
                header = request.header("authorization")
                return await self._loop.run_in_executor(self._checkers, self.basic_auth.check, header)
            finally:
                self._lanes["checks"].release()
        finally:
            self._checking[key] -= 1
            if not self._checking[key]:
                del self._checking[key]

    async def _slot(self, lane_name: str, budgeted: bool) -> Response | None:
        """Acquire a slot of the lane (``budgeted``: only while the budget has room), or a 503. Up to
        ``QUEUED_PER_SLOT * max_requests`` requests wait, up to ``header_timeout``; any more get 503
        at once. So at most ``(1 + QUEUED_PER_SLOT) * max_requests + BUILDS_AT_ONCE +
        CHECKS_AT_ONCE`` connections are ever past their request and out of reach of the connection
        caps' eviction."""
        lane = self._lanes[lane_name]
        waits = lane.locked() or (budgeted and self.budget.full)
        if waits and self._queued >= QUEUED_PER_SLOT * self.limits.max_requests:
            return _busy("too many concurrent requests")
        self._queued += 1
        try:
            async with asyncio.timeout(self.limits.header_timeout):
                while True:  # the budget checked again with the slot held: others filled it meanwhile
                    if budgeted:
                        await self.budget.room()
                    await lane.acquire()
                    if not (budgeted and self.budget.full):
                        return None
                    lane.release()
        except TimeoutError:
            if budgeted and self.budget.full:
                return _busy("responses not yet taken by their clients hold the whole budget")
            return _busy("too many concurrent requests")
        finally:
            self._queued -= 1

    def _handle(self, request: Request) -> Response:
        log.debug("http_request", client=request.client, method=request.method, path=request.path)
        return self.router.dispatch(request)

    def shutdown(self) -> None:
        """Stop accepting and close every connection; returns once the loop thread has ended."""
        if self._stopped.is_set():
            return
        self._stopped.set()
        loop, thread = self._loop, self._thread
        if loop is not None and thread is not None and thread.is_alive():
            with contextlib.suppress(RuntimeError):  # the loop already closed
                loop.call_soon_threadsafe(loop.stop)
            thread.join(timeout=10)
        self._pool.shutdown(wait=False, cancel_futures=True)
        self._checkers.shutdown(wait=False, cancel_futures=True)

    def server_close(self) -> None:
        self.shutdown()
        self.socket.close()


def _busy(reason: str) -> Response:
    return json_response(503, {"error": reason}, headers={"Retry-After": "1"})


def client_key(address: str) -> str:
    """Whose connection this is, for the per-client cap: the IPv4 address, or an IPv6 address's
    /64 (one host usually holds a whole /64)."""
    try:
        ip = ipaddress.ip_address(address)
    except ValueError:
        return address
    if isinstance(ip, ipaddress.IPv6Address):
        if ip.ipv4_mapped is not None:
            return str(ip.ipv4_mapped)
        return str(ipaddress.IPv6Network((ip, 64), strict=False))
    return str(ip)


def _bind(host: str, port: int) -> socket.socket:
    """A listening-ready socket; an empty host is dual-stack, or every IPv4 address without IPv6."""
    if host == "" and not socket.has_ipv6:
        host = "0.0.0.0"
    if host in ("", "::") or ":" in host:
        try:
            sock = socket.socket(socket.AF_INET6, socket.SOCK_STREAM, socket.IPPROTO_TCP)
        except OSError:
            if host != "":
                raise
            return _bind("0.0.0.0", port)  # an empty host on a kernel booted with ipv6.disable=1
        try:
            sock.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 0)
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            sock.bind((host or "::", port))
        except OSError:
            sock.close()
            if host != "":
                raise
            return _bind("0.0.0.0", port)
        return sock
    # IPPROTO_TCP, not 0: asyncio sets TCP_NODELAY only on sockets that name it.
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM, socket.IPPROTO_TCP)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind((host, port))
    except OSError:
        sock.close()
        raise
    return sock
