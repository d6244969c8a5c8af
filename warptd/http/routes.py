"""The read-only endpoints: /metrics, /healthz, /readyz, /devices, the landing page and /openapi.json."""

from __future__ import annotations

from pydantic import Field

from warptd import __version__
from warptd.exporter.exposition import Exposition
from warptd.http import landing
from warptd.http.api import Api
from warptd.http.app import Request, Response, Router, json_response
from warptd.http.devices_view import DevicesView, devices_view
from warptd.http.endpoint import Answer, endpoint
from warptd.http.negotiation import accepts_gzip, preferred_media_type
from warptd.http.openapi import openapi_document
from warptd.models import WireModel
from warptd.sampling.snapshot import Snapshot

_OPENMETRICS = "application/openmetrics-text"
#: What /metrics offers, text first: ``*/*`` (curl's) or an Accept that names neither gets text.
_FORMATS = ("text/plain", _OPENMETRICS)


class ProbeStatus(WireModel):
    """What /healthz and /readyz answer."""

    status: str = Field(description="ok, ready, or why not ready")
    pending: list[str] | None = Field(None, description="backends still waiting for their first sample")
    unavailable: dict[str, str] | None = Field(None, description="why each backend did not load")


class CoreApi(Api):
    """The endpoints that only read the snapshot and the cached exposition, on the event loop;
    ``unavailable``: why each skipped backend did not load, for /readyz when none did."""

    def __init__(
        self, router: Router, snapshot: Snapshot, exposition: Exposition, unavailable: dict[str, str] | None
    ) -> None:
        super().__init__()
        self.router, self.snapshot, self.exposition = router, snapshot, exposition
        self.unavailable = unavailable

    @endpoint(
        "GET",
        "/metrics",
        "Prometheus exposition (text or OpenMetrics by Accept; gzip)",
        answers={200: Answer("the latest snapshot", media="text/plain")},
        description="the format `Accept` weighs higher by its q-values (text where it names neither, or "
        "`*/*`); gzip when `Accept-Encoding` weighs gzip (or `*`) above 0 and not below `identity` "
        "(`gzip;q=0` is no gzip); every answer says `Vary: Accept, Accept-Encoding`",
    )
    def metrics(self, request: Request) -> Response:
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

    @endpoint("GET", "/healthz", "200 while the process serves", answers={200: Answer("alive", ProbeStatus)})
    def healthz(self, _: Request) -> Response:
        return json_response(200, {"status": "ok"})

    @endpoint(
        "GET",
        "/readyz",
        "200 once every backend has sampled once, 503 before",
        answers={
            200: Answer("ready", ProbeStatus),
            503: Answer("waiting for a first sample, or no backend loaded", ProbeStatus),
        },
        description="and 503 (with each backend's reason) while no backend is loaded",
    )
    def readyz(self, _: Request) -> Response:
        if not self.snapshot.states():  # serving nothing is not ready
            unavailable = dict(self.unavailable or {})
            return json_response(503, {"status": "no backend loaded", "unavailable": unavailable})
        pending = self.snapshot.pending()
        if pending:
            return json_response(503, {"status": "waiting for first sample", "pending": pending})
        return json_response(200, {"status": "ready"})

    @endpoint(
        "GET",
        "/devices",
        "every backend's devices: identity and latest reading (from the last sample)",
        answers={200: Answer("backends and devices", DevicesView)},
        description="power, temperatures, utilization, memory; no SDK call. `temperature_celsius` is the "
        "backend's primary sensor, named in `temperature_sensor`: NVIDIA's `gpu`, the core nvidia-smi "
        "shows, not the often hotter memory, which is with every other sensor in `temperatures_celsius`; "
        "each backend's `kind` is `accelerator`, `cpu` (the host CPU) or `power` (power domains)",
    )
    def devices(self, _: Request) -> Response:
        return json_response(200, devices_view(self.snapshot))

    @endpoint(
        "GET",
        "/",
        "this list, and a live device table",
        answers={200: Answer("the landing page", media="text/html")},
        description="for a browser: every endpoint with a line about it; the table's temperature is "
        "/devices' primary sensor, named (`40 °C (gpu)`); self-contained, works offline",
    )
    def landing_page(self, _: Request) -> Response:
        names = [s.name for s in self.snapshot.states()]
        page = landing.render(__version__, names, self.router.endpoints)
        policy = {"Content-Security-Policy": landing.CONTENT_SECURITY_POLICY}
        return Response(200, page, "text/html; charset=utf-8", policy)


def add_core_routes(
    router: Router, snapshot: Snapshot, exposition: Exposition, unavailable: dict[str, str] | None = None
) -> None:
    """Mount the endpoints that only read the snapshot; the landing page lists every endpoint the
    router holds when asked."""
    CoreApi(router, snapshot, exposition, unavailable).mount(router)


class OpenApi(Api):
    """``GET /openapi.json``, rendered once from every endpoint the router holds, its own included:
    mounted last."""

    def __init__(self, router: Router) -> None:
        super().__init__()
        endpoints = [*router.endpoints, *(declared for _, declared in self.endpoints())]
        self.answer = json_response(200, openapi_document(endpoints))

    @endpoint(
        "GET",
        "/openapi.json",
        "OpenAPI 3.1 description of this API",
        answers={200: Answer("OpenAPI 3.1")},
        description="schemathesis-tested",
    )
    def openapi(self, _: Request) -> Response:
        return self.answer


def add_openapi_route(router: Router) -> None:
    """Mount ``GET /openapi.json``, after every other endpoint."""
    OpenApi(router).mount(router)
