"""GET /workloads, GET /workloads/KIND/ID and GET /workloads/KIND/ID/recording: each workload's energy
per device and CPU, and one's recording (--workloads).

Protected as /windows and /stress are (loopback without a token, else the token), reads included:
the answers name users, Slurm jobs, services and containers of this node.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, ClassVar
from urllib.parse import unquote

from pydantic import ConfigDict, Field, ValidationError

from warptd.config import WORKLOAD_KINDS, WorkloadKind
from warptd.http.api import Api
from warptd.http.app import Answer, HttpError, Request, Response, endpoint, json_response
from warptd.http.pages import PageQuery
from warptd.models import WireModel
from warptd.recording.schema import Recording, WorkloadView, recording_json
from warptd.workloads.placement import MAX_ID_CHARS
from warptd.workloads.views import WorkloadList

if TYPE_CHECKING:  # loaded with --workloads only: the daemon builds them, these routes only call them
    from warptd.workloads.energy import WorkloadEnergy
    from warptd.workloads.history import WorkloadHistory


class WorkloadPath(WireModel):
    """The workload a path names: a kind warptd tracks, and an id of at most MAX_ID_CHARS."""

    model_config = ConfigDict(extra="forbid", frozen=True)
    errors: ClassVar[tuple[int, ...]] = (404, 414)

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


@dataclass
class WorkloadApi(Api):
    """``/workloads``: each workload's energy, and one's recording. A listing builds a model per
    workload (100 a page at most), a recording up to 2048 points: off the event loop, one at a time."""

    noun, lane, protected = "workload", "builds", True
    off = "workload endpoints are off on this daemon (start it with --workloads)"
    energy: WorkloadEnergy
    token: Callable[[], str | None]
    history: WorkloadHistory | None = None

    @endpoint(
        "GET /workloads",
        {200: Answer("running workloads, then those ended within the retention", WorkloadList)},
    )
    def listing(self, request: Request, query: PageQuery) -> Response:
        """energy per Slurm job, systemd unit, container and user (--workloads; one page: limit, offset)"""
        listed = self.energy.listing(query.offset, query.limit)
        return json_response(200, listed.model_copy(update={"next": query.next("/workloads", listed.total)}))

    def _view(self, params: WorkloadPath) -> WorkloadView:
        view = self.energy.view(params.kind, params.workload_id)
        if view is None:
            raise HttpError(
                404, f"no {params.kind} {params.workload_id!r} now, nor ended within --workload-retention"
            )
        return view

    @endpoint("GET /workloads/{kind}/{workload_id}", {200: Answer("the workload", WorkloadView)})
    def show(self, request: Request, params: WorkloadPath) -> Response:
        """one workload's energy per device and CPU, its devices, start and end"""
        return json_response(200, self._view(params))

    @endpoint(
        "GET /workloads/{kind}/{workload_id}/recording",
        {200: Answer("the workload's recording (kind workload)", Recording)},
    )
    def recording(self, request: Request, params: WorkloadPath) -> Response:
        """a workload's recording (--workloads): its devices' and CPU packages' readings with its share
        of their energy, while it runs and for --workload-retention after it ended"""
        view = self._view(params)
        if self.history is None:
            raise HttpError(404, "this daemon keeps no workload recordings (--workload-recording-memory 0)")
        return Response(200, recording_json(self.history.recording(view)))
