"""The read-only endpoints: /metrics, /healthz, /readyz, /devices and the landing page."""

from __future__ import annotations

from warptd import __version__
from warptd.exporter.exposition import Exposition
from warptd.http import landing
from warptd.http.app import Request, Response, Router, json_response
from warptd.http.devices_view import devices_view
from warptd.http.negotiation import accepts_gzip, preferred_media_type
from warptd.sampling.snapshot import Snapshot

_OPENMETRICS = "application/openmetrics-text"
#: What /metrics offers, text first: ``*/*`` (curl's) or an Accept that names neither gets text.
_FORMATS = ("text/plain", _OPENMETRICS)


def add_core_routes(
    router: Router, snapshot: Snapshot, exposition: Exposition, unavailable: dict[str, str] | None = None
) -> None:
    """Register the endpoints that only read the snapshot; ``unavailable``: why each skipped backend
    did not load, for /readyz when none did."""

    def metrics(request: Request) -> Response:
        # Negotiated here by q-values, then named to the exposition as the one format and coding it renders.
        openmetrics = preferred_media_type(request.header("accept"), _FORMATS) == _OPENMETRICS
        gzip = accepts_gzip(request.header("accept-encoding"))
        body, content_type, gzipped = exposition.render(
            _OPENMETRICS if openmetrics else None, "gzip" if gzip else None
        )
        headers = {"Vary": "Accept, Accept-Encoding"}  # a cache keeps one answer per format and coding
        if gzipped:
            headers["Content-Encoding"] = "gzip"
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
        return json_response(200, devices_view(snapshot))

    from warptd.http.openapi import openapi_document

    document = openapi_document()
    csp = {"Content-Security-Policy": landing.CONTENT_SECURITY_POLICY}

    def landing_page(_: Request) -> Response:
        page = landing.render(__version__, [s.name for s in snapshot.states()], document)
        return Response(200, page, "text/html; charset=utf-8", dict(csp))

    router.add("GET", "/metrics", metrics)
    router.add("GET", "/healthz", healthz)
    router.add("GET", "/readyz", readyz)
    router.add("GET", "/devices", devices)
    router.add("GET", "/", landing_page)


def add_openapi_route(router: Router) -> None:
    """``GET /openapi.json``, rendered once."""
    from warptd.http.openapi import openapi_document

    document = json_response(200, openapi_document())
    router.add("GET", "/openapi.json", lambda _: document)
