"""The read-only endpoints: /metrics, /healthz, /readyz, /devices and the landing page."""

from __future__ import annotations

import html

from warptd import __version__
from warptd.exporter.exposition import Exposition
from warptd.http.app import Request, Response, Router, json_response
from warptd.sampling.snapshot import Snapshot

_LANDING = """<!doctype html>
<html><head><meta charset="utf-8"><title>warptd</title></head>
<body><h1>warptd {version}</h1>
<p>Vendor-agnostic accelerator telemetry for Prometheus. Backends: {backends}.</p>
<ul>
<li><a href="/metrics">/metrics</a> (Prometheus text or OpenMetrics, gzip)</li>
<li><a href="/devices">/devices</a> (JSON device list)</li>
<li><a href="/healthz">/healthz</a>, <a href="/readyz">/readyz</a></li>
</ul></body></html>
"""


def add_core_routes(
    router: Router, snapshot: Snapshot, exposition: Exposition, unavailable: dict[str, str] | None = None
) -> None:
    """Register the endpoints that only read the snapshot; ``unavailable``: why each skipped backend
    did not load, for /readyz when none did."""

    def metrics(request: Request) -> Response:
        body, content_type, gzipped = exposition.render(
            request.header("accept"), request.header("accept-encoding")
        )
        headers = {"Content-Encoding": "gzip", "Vary": "Accept-Encoding"} if gzipped else {}
        return Response(200, body, content_type, headers)

    def healthz(_: Request) -> Response:
        return json_response(200, {"status": "ok"})

    def readyz(_: Request) -> Response:
        if not snapshot.states():  # serving nothing is not ready
            return json_response(503, {"status": "no backend loaded", "unavailable": dict(unavailable or {})})
        pending = snapshot.pending()
        if pending:
            return json_response(503, {"status": "waiting for first sample", "pending": pending})
        return json_response(200, {"status": "ready"})

    def devices(_: Request) -> Response:
        backends = []
        for state in snapshot.states():
            entry: dict[str, object] = {
                "backend": state.name,
                "kind": state.kind,
                "up": snapshot.is_fresh(state),
            }
            if state.kind == "accelerator":
                up = {s.reading.index: s.reading.up for s in state.devices}
                entry["devices"] = [
                    {**info.model_dump(mode="json"), "up": up.get(info.index)} for info in state.devices_info
                ]
            else:
                entry["domains"] = [d.domain for d in state.domains]
            backends.append(entry)
        return json_response(200, {"backends": backends})

    def landing(_: Request) -> Response:
        names = ", ".join(html.escape(s.name) for s in snapshot.states()) or "none"
        page = _LANDING.format(version=__version__, backends=names).encode()
        return Response(200, page, "text/html; charset=utf-8")

    router.add("GET", "/metrics", metrics)
    router.add("GET", "/healthz", healthz)
    router.add("GET", "/readyz", readyz)
    router.add("GET", "/devices", devices)
    router.add("GET", "/", landing)


def add_openapi_route(router: Router) -> None:
    """``GET /openapi.json``, rendered once."""
    from warptd.http.openapi import openapi_document

    document = json_response(200, openapi_document())
    router.add("GET", "/openapi.json", lambda _: document)
