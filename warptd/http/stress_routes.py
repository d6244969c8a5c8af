"""POST/GET/DELETE /stress: validated with pydantic, token- or loopback-protected, one job per device."""

from __future__ import annotations

from collections.abc import Callable

from pydantic import ConfigDict, Field, ValidationError, field_validator

from warptd.http.app import HttpError, Request, Response, Router, json_response
from warptd.http.pages import PageQuery
from warptd.http.protection import authorize, is_loopback, is_loopback_host, parse_body, validation_error
from warptd.http.reports import report_response
from warptd.models import Page, WireModel
from warptd.stress.job import Job, JobView, StressError
from warptd.stress.jobs import JobManager
from warptd.stress.torch_device import DTYPES


class StressRequest(WireModel):
    """The body of ``POST /stress``; every field is optional, so an empty POST runs the defaults."""

    model_config = ConfigDict(extra="forbid", strict=True)

    test: str | None = Field(
        None, description="workload; default matmul, or the device's own (tt_matmul on Tenstorrent)"
    )
    device: str | None = Field(
        None, pattern=r"^[a-z0-9_.-]+:\d+$", description="BACKEND:INDEX, e.g. nvidia:0"
    )
    duration_s: float = Field(
        30.0, ge=1, allow_inf_nan=False, description="seconds; at most --stress-max-duration"
    )
    dtype: str | None = None
    size: int | None = Field(None, ge=1, description="matmul: matrix side; memory: MiB per buffer")

    @field_validator("dtype")
    @classmethod
    def _known_dtype(cls, value: str | None) -> str | None:
        if value is not None and value not in DTYPES:
            raise ValueError(f"must be one of {', '.join(DTYPES)}")
        return value


class JobList(Page):
    """Recent jobs, newest first: one page of them."""

    jobs: list[JobView]


def _validation_error(exc: ValidationError) -> HttpError:
    return validation_error(exc, "stress")


def parse_request(request: Request) -> StressRequest:
    """The JSON body as a :class:`StressRequest` (empty: the defaults); 415, 400 or 422 otherwise."""
    if not request.body.strip():
        return StressRequest()
    return parse_body(request, StressRequest, "stress")


def _disabled(_: Request) -> Response:
    raise HttpError(404, "stress endpoints are disabled on this daemon (--no-stress)")


__all__ = [
    "JobList",
    "StressRequest",
    "add_stress_routes",
    "authorize",
    "is_loopback",
    "is_loopback_host",
    "parse_request",
]


def add_stress_routes(router: Router, manager: JobManager | None, token: Callable[[], str | None]) -> None:
    """Register /stress; with ``manager=None`` (``--no-stress``) every /stress call is a 404 saying so."""
    if manager is None:
        for method, path in (
            ("GET", "/stress"),
            ("POST", "/stress"),
            ("GET", "/stress/{job_id}"),
            ("DELETE", "/stress/{job_id}"),
            ("GET", "/stress/{job_id}/report"),
        ):
            router.add(method, path, _disabled)
        return

    def start(request: Request) -> Response:
        authorize(request, token())
        body = parse_request(request)
        try:  # the default device too may be refused: a node without an accelerator has none
            params = manager.parameters(body.test, body.device, body.duration_s, body.dtype, body.size)
            job = manager.start(params)
        except StressError as exc:
            raise HttpError(exc.status, str(exc)) from None
        return json_response(202, job.view(), headers={"Location": f"/stress/{job.id}"})

    def listing(request: Request) -> Response:
        page, jobs = PageQuery.of(request), manager.list()
        views = [job.view() for job in page.cut(jobs)]
        return json_response(200, JobList(jobs=views, total=len(jobs), next=page.next("/stress", len(jobs))))

    def find(request: Request) -> Job:
        job = manager.get(request.params["job_id"])
        if job is None:
            raise HttpError(404, f"no stress job {request.params['job_id']!r}")
        return job

    def show(request: Request) -> Response:
        return json_response(200, find(request).view())

    def cancel(request: Request) -> Response:
        authorize(request, token())
        job = find(request)
        if not job.status.active:
            raise HttpError(409, f"stress job {job.id} already ended: {job.status}")
        manager.cancel(job.id)
        return json_response(200, job.view())

    def report(request: Request) -> Response:
        job = find(request)
        if job.status.active:
            raise HttpError(
                409, f"stress job {job.id} is still {job.status}; its report is ready when it ends"
            )
        recording = job.recording
        if recording is None:  # it failed before its timed part
            raise HttpError(404, f"no recording for stress job {job.id}")
        return report_response(recording)

    router.add("POST", "/stress", start, offload=True)  # spawns a process
    router.add("GET", "/stress", listing, builds=True)  # the job manager's lock, then the views
    router.add("GET", "/stress/{job_id}", show, builds=True)
    router.add("DELETE", "/stress/{job_id}", cancel, offload=True)
    router.add("GET", "/stress/{job_id}/report", report, offload=True)  # a child process renders it
