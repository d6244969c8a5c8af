"""The bytes that responses not yet taken by their clients hold, across every connection: what
clients that ask and then do not read can make the daemon keep, bounded for all of them together."""

from __future__ import annotations

import asyncio


class ResponseBudget:
    """Bytes of responses written but not yet handed to the kernel (each connection's transport
    buffer), counted on the event loop's thread only. While they reach ``limit``, new work for the
    route pool waits (:meth:`room`); scrapes and probes never do."""

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self.held = 0
        self._freed = asyncio.Event()

    @property
    def full(self) -> bool:
        return self.held >= self.limit

    def charge(self, size: int) -> None:
        self.held += size

    def release(self, size: int) -> None:
        self.held -= size
        if not self.full:
            self._freed.set()

    async def room(self) -> None:
        """Return once what is held is under the limit (the caller bounds the wait)."""
        while self.full:
            self._freed.clear()
            await self._freed.wait()
