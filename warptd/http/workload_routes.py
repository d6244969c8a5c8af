"""GET /workloads, GET /workloads/KIND/ID and GET /workloads/KIND/ID/recording: each workload's energy
per device and CPU, and one's recording (--workloads).

Protected as /windows and /stress are (loopback without a token, else the token), reads included:
the answers name users, Slurm jobs, services and containers of this node.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING
from urllib.parse import unquote

from pydantic import ConfigDict, Field, ValidationError

from warptd.config import WORKLOAD_KINDS, WorkloadKind
from warptd.http.app import HttpError, Request, Response, Router, json_response
from warptd.http.pages import PageQuery
from warptd.http.protection import authorize
from warptd.models import WireModel
from warptd.recording.schema import recording_json

if TYPE_CHECKING:  # loaded with --workloads only: the daemon builds them, these routes only call them
    from warptd.recording.schema import WorkloadView
    from warptd.workloads.energy import WorkloadEnergy
    from warptd.workloads.history import WorkloadHistory

#: The longest workload id asked for (a container id is 64 hex, a unit name at most 255 bytes).
MAX_ID_CHARS = 256
ROUTES = ("/workloads", "/workloads/{kind}/{workload_id}", "/workloads/{kind}/{workload_id}/recording")


class WorkloadPath(WireModel):
    """The workload a path names: a kind warptd tracks, and an id of at most MAX_ID_CHARS."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    kind: WorkloadKind
    workload_id: str = Field(min_length=1, max_length=MAX_ID_CHARS)

    @classmethod
    def of(cls, request: Request) -> WorkloadPath:
        """The request's path parameters, validated; 404 for an unknown kind or an empty id (no
        workload has one), 414 for a huge id."""
        kind, workload_id = request.params["kind"], unquote(request.params["workload_id"])
        try:
            return cls(kind=kind, workload_id=workload_id)  # type: ignore[arg-type]
        except ValidationError as exc:
            if any(error["loc"] == ("kind",) for error in exc.errors()):
                raise HttpError(
                    404, f"no workload kind {kind[:40]!r}; kinds: {', '.join(WORKLOAD_KINDS)}"
                ) from None
            if not workload_id:
                raise HttpError(404, f"no such workload: the {kind} id is empty") from None
            raise HttpError(414, f"a workload id is at most {MAX_ID_CHARS} characters") from None


def _disabled(_: Request) -> Response:
    raise HttpError(404, "workload endpoints are off on this daemon (start it with --workloads)")


def add_workload_routes(
    router: Router,
    energy: WorkloadEnergy | None,
    token: Callable[[], str | None],
    history: WorkloadHistory | None = None,
) -> None:
    """Register /workloads; with ``energy=None`` (no ``--workloads``) each call is a 404 saying so.
    Without ``history`` a workload's recording has its identity and energy but no readings."""
    if energy is None:
        for route in ROUTES:
            router.add("GET", route, _disabled)
        return

    def listing(request: Request) -> Response:
        authorize(request, token(), "workload")
        page = PageQuery.of(request)
        listed = energy.listing(page.offset, page.limit)
        return json_response(200, listed.model_copy(update={"next": page.next("/workloads", listed.total)}))

    def find(request: Request) -> WorkloadView:
        """The workload the path names; 404 for an unknown kind or workload, 414 for a huge id."""
        authorize(request, token(), "workload")
        path = WorkloadPath.of(request)
        view = energy.view(path.kind, path.workload_id)
        if view is None:
            raise HttpError(
                404, f"no {path.kind} {path.workload_id!r} now, nor ended within --workload-retention"
            )
        return view

    def show(request: Request) -> Response:
        return json_response(200, find(request))

    def recording(request: Request) -> Response:
        """The workload's recording (at most WORKLOAD_POINTS points), for warptd workload --report."""
        view = find(request)
        if history is None:
            raise HttpError(404, "this daemon keeps no workload recordings (--workload-recording-memory 0)")
        return Response(200, recording_json(history.recording(view)))

    # A listing builds a model per workload (100 a page at most), a recording up to 2048 points:
    # off the event loop, one at a time.
    router.add("GET", ROUTES[0], listing, builds=True)
    router.add("GET", ROUTES[1], show, builds=True)
    router.add("GET", ROUTES[2], recording, builds=True)
