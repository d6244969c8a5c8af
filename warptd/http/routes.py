"""The read-only endpoints: /metrics, /healthz, /readyz, /devices and the landing page (/openapi.json is
warptd.http.openapi's, mounted after every other)."""

from __future__ import annotations

from dataclasses import dataclass

from warptd import __version__
from warptd.exporter.exposition import Exposition
from warptd.http import landing
from warptd.http.api import Api
from warptd.http.app import Answer, Request, Response, endpoint, json_response
from warptd.http.devices_view import DevicesView, devices_view
from warptd.http.negotiation import accepts_gzip, preferred_media_type
from warptd.models import WireModel
from warptd.sampling.snapshot import Snapshot

_OPENMETRICS = "application/openmetrics-text"
#: What /metrics offers, text first: ``*/*`` (curl's) or an Accept that names neither gets text.
_FORMATS = ("text/plain", _OPENMETRICS)


class ProbeStatus(WireModel):
    """What /healthz and /readyz answer: ``ok``, ``ready`` or why not, with the backends pending or
    unavailable."""

    status: str
    pending: list[str] | None = None
    unavailable: dict[str, str] | None = None


@dataclass
class CoreApi(Api):
    """The endpoints that only read the snapshot and the cached exposition, on the event loop;
    ``unavailable``: why each skipped backend did not load, for /readyz when none did."""

    lane = "loop"
    snapshot: Snapshot
    exposition: Exposition
    unavailable: dict[str, str] | None = None

    @endpoint("GET /metrics", {200: Answer("the latest snapshot", media="text/plain")})
    def metrics(self, request: Request) -> Response:
        """Prometheus exposition (text or OpenMetrics by Accept; gzip)"""
        # Negotiated here by q-values, then named to the exposition as the one format and coding it renders.
        openmetrics = preferred_media_type(request.header("accept"), _FORMATS) == _OPENMETRICS
        gzip = accepts_gzip(request.header("accept-encoding"))
        body, content_type, gzipped = self.exposition.render(
            _OPENMETRICS if openmetrics else None, "gzip" if gzip else None
        )
        headers = {"Vary": "Accept, Accept-Encoding"}  # a cache keeps one answer per format and coding
        if gzipped:
            headers["Content-Encoding"] = "gzip"
        return Response(200, body, content_type, headers)

    @endpoint("GET /healthz", {200: Answer("alive", ProbeStatus)})
    def healthz(self, _: Request) -> Response:
        """200 while the process serves"""
        return json_response(200, {"status": "ok"})

    @endpoint(
        "GET /readyz",
        {
            200: Answer("ready", ProbeStatus),
            503: Answer("waiting for a first sample, or no backend loaded", ProbeStatus),
        },
    )
    def readyz(self, _: Request) -> Response:
        """200 once every backend has sampled once, 503 before, and 503 with each backend's reason while
        no backend is loaded"""
        if not self.snapshot.states():  # serving nothing is not ready
            unavailable = dict(self.unavailable or {})
            return json_response(503, {"status": "no backend loaded", "unavailable": unavailable})
        pending = self.snapshot.pending()
        if pending:
            return json_response(503, {"status": "waiting for first sample", "pending": pending})
        return json_response(200, {"status": "ready"})

    @endpoint("GET /devices", {200: Answer("backends and devices", DevicesView)})
    def devices(self, _: Request) -> Response:
        """every backend's devices: identity and latest reading (from the last sample)"""
        return json_response(200, devices_view(self.snapshot))

    @endpoint("GET /", {200: Answer("the landing page", media="text/html")})
    def landing_page(self, _: Request) -> Response:
        """this list, and a live device table"""
        page = landing.render(__version__, [s.name for s in self.snapshot.states()], self.router.endpoints)
        policy = {"Content-Security-Policy": landing.CONTENT_SECURITY_POLICY}
        return Response(200, page, "text/html; charset=utf-8", policy)
