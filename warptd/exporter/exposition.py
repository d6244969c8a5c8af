"""Renders /metrics once per snapshot change and serves the cached bytes to every scrape."""

from __future__ import annotations

import gzip
import threading
from dataclasses import dataclass

from prometheus_client import CollectorRegistry, ProcessCollector
from prometheus_client.exposition import choose_encoder

from warptd.exporter.collector import SnapshotCollector
from warptd.sampling.snapshot import Snapshot


@dataclass(frozen=True, slots=True)
class Rendered:
    key: tuple[object, ...]
    body: bytes
    gzipped: bytes


class Exposition:
    """A registry of the snapshot collector plus process self-metrics, with a render cache.

    The cache key is the snapshot generation and each backend's freshness, so a backend turning
    stale drops its series on the next scrape even when nothing else changed.
    """

    def __init__(self, snapshot: Snapshot, node: str = "") -> None:
        self.snapshot = snapshot
        self.registry = CollectorRegistry(auto_describe=False)
        self.registry.register(SnapshotCollector(snapshot, node))
        ProcessCollector(namespace="", registry=self.registry)
        self._cache: dict[str, Rendered] = {}
        self._lock = threading.Lock()

    def render(self, accept: str | None, accept_encoding: str | None) -> tuple[bytes, str, bool]:
        """Return (body, content type, gzipped) for a scrape with these request headers."""
        encoder, content_type = choose_encoder(accept or "")
        key = (self.snapshot.generation, self.snapshot.freshness())
        with self._lock:
            cached = self._cache.get(content_type)
            if cached is None or cached.key != key:
                body = encoder(self.registry)
                cached = self._cache[content_type] = Rendered(key, body, gzip.compress(body, compresslevel=5))
        use_gzip = "gzip" in (accept_encoding or "")
        return (cached.gzipped if use_gzip else cached.body), content_type, use_gzip
