"""GET /workloads and GET /workloads/KIND/ID: each workload's energy per device and CPU (--workloads).

Protected as /windows and /stress are (loopback without a token, else the token), reads included:
the answers name users, Slurm jobs, services and containers of this node.
"""

from __future__ import annotations

from collections.abc import Callable
from urllib.parse import unquote

from warptd.config import WORKLOAD_KINDS
from warptd.http.app import HttpError, Request, Response, Router, json_response
from warptd.http.protection import authorize
from warptd.workloads.energy import WorkloadEnergy

#: The longest workload id asked for (a container id is 64 hex, a unit name at most 255 bytes).
MAX_ID_CHARS = 256


def _disabled(_: Request) -> Response:
    raise HttpError(404, "workload endpoints are off on this daemon (start it with --workloads)")


def add_workload_routes(
    router: Router, energy: WorkloadEnergy | None, token: Callable[[], str | None]
) -> None:
    """Register /workloads; with ``energy=None`` (no ``--workloads``) each call is a 404 saying so."""
    if energy is None:
        router.add("GET", "/workloads", _disabled)
        router.add("GET", "/workloads/{kind}/{workload_id}", _disabled)
        return

    def listing(request: Request) -> Response:
        authorize(request, token(), "workload")
        return json_response(200, energy.listing())

    def show(request: Request) -> Response:
        authorize(request, token(), "workload")
        kind, workload_id = request.params["kind"], unquote(request.params["workload_id"])
        if kind not in WORKLOAD_KINDS:
            raise HttpError(404, f"no workload kind {kind[:40]!r}; kinds: {', '.join(WORKLOAD_KINDS)}")
        if len(workload_id) > MAX_ID_CHARS:
            raise HttpError(414, f"a workload id is at most {MAX_ID_CHARS} characters")
        view = energy.view(kind, workload_id)
        if view is None:
            raise HttpError(404, f"no {kind} {workload_id!r} now, nor ended within --workload-retention")
        return json_response(200, view)

    # A listing builds a model per workload (up to --workload-max): off the event loop.
    router.add("GET", "/workloads", listing, offload=True)
    router.add("GET", "/workloads/{kind}/{workload_id}", show, offload=True)
