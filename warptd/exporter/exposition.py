"""Renders /metrics once per snapshot change and serves the cached bytes to every scrape."""

from __future__ import annotations

import gzip
import threading
from dataclasses import dataclass

from prometheus_client import CollectorRegistry, ProcessCollector
from prometheus_client.openmetrics.exposition import CONTENT_TYPE_LATEST as OPENMETRICS_CONTENT_TYPE

from warptd.exporter.collector import PodLabels, SnapshotCollector
from warptd.exporter.text import render_openmetrics, render_text
from warptd.metrics.selection import EVERYTHING, MetricSelection
from warptd.sampling.snapshot import Snapshot

#: The format render_text writes; prometheus_client >= 0.24 would announce version=1.0.0 instead.
TEXT_CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"


@dataclass(slots=True)
class Rendered:
    key: tuple[object, ...]
    body: bytes
    gzipped: bytes | None = None  # compressed on the first scrape that asks for gzip


class Exposition:
    """A registry of the snapshot collector plus process self-metrics, with a render cache.

    The cache key is the snapshot generation and each backend's freshness, so a backend turning
    stale drops its series on the next scrape even when nothing else changed. Families ``selection``
    does not export are dropped here, whichever collector made them, before the body is cached.
    """

    def __init__(
        self,
        snapshot: Snapshot,
        node: str = "",
        pod_labels: PodLabels | None = None,
        selection: MetricSelection = EVERYTHING,
        process_metrics: bool = True,
    ) -> None:
        """``process_metrics``: this process's ``process_*`` series (a daemon's; not a one-shot
        command's)."""
        self.snapshot = snapshot
        self.selection = selection
        self.registry = CollectorRegistry(auto_describe=False)
        self.registry.register(SnapshotCollector(snapshot, node, pod_labels))
        if process_metrics:
            ProcessCollector(namespace="", registry=self.registry)
        self._cache: dict[str, Rendered] = {}
        self._lock = threading.Lock()

    def render(self, accept: str | None, accept_encoding: str | None) -> tuple[bytes, str, bool]:
        """Return (body, content type, gzipped) for a scrape with these request headers."""
        openmetrics = "application/openmetrics-text" in (accept or "")
        content_type = OPENMETRICS_CONTENT_TYPE if openmetrics else TEXT_CONTENT_TYPE
        key = (self.snapshot.generation, self.snapshot.freshness())
        use_gzip = "gzip" in (accept_encoding or "")
        with self._lock:
            cached = self._cache.get(content_type)
            if cached is None or cached.key != key:
                metrics = (mf for mf in self.registry.collect() if self.selection.exports(mf.name, mf.type))
                body = render_openmetrics(metrics) if openmetrics else render_text(metrics)
                cached = self._cache[content_type] = Rendered(key, body)
            if use_gzip and cached.gzipped is None:
                cached.gzipped = gzip.compress(cached.body, compresslevel=5)
            return (cached.gzipped if use_gzip else cached.body), content_type, use_gzip
