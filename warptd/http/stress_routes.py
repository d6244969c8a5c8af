"""POST/GET/DELETE /stress: validated with pydantic, token- or loopback-protected, one job per device."""

from __future__ import annotations

from collections.abc import Callable

from pydantic import ConfigDict, Field, field_validator

from warptd.http.api import Api
from warptd.http.app import HttpError, Request, Response, Router, json_response
from warptd.http.endpoint import Answer, endpoint
from warptd.http.pages import PageQuery
from warptd.http.protection import authorize, is_loopback, is_loopback_host
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


class StressApi(Api):
    """``/stress``: start, list, show, cancel and report jobs, one job per device."""

    noun = "stress"
    off = "stress endpoints are disabled on this daemon (--no-stress)"

    def __init__(self, manager: JobManager, token: Callable[[], str | None]) -> None:
        super().__init__(token)
        self.manager = manager

    @endpoint(
        "POST",
        "/stress",
        "start a stress job",
        lane="waits",  # spawns a process
        protected=True,
        body=StressRequest,
        body_optional=True,
        answers={202: Answer("started; Location names the job", JobView)},
        errors=(409, 503),
        guide="stress.md",
    )
    def start(self, request: Request, body: StressRequest) -> Response:
        try:  # the default device too may be refused: a node without an accelerator has none
            params = self.manager.parameters(body.test, body.device, body.duration_s, body.dtype, body.size)
            job = self.manager.start(params)
        except StressError as exc:
            raise HttpError(exc.status, str(exc)) from None
        return json_response(202, job.view(), headers={"Location": f"/stress/{job.id}"})

    @endpoint(
        "GET",
        "/stress",
        "recent jobs, newest first (one page: limit, offset)",
        lane="builds",  # the job manager's lock, then the views
        query=PageQuery,
        answers={200: Answer("bounded history", JobList)},
    )
    def listing(self, request: Request, query: PageQuery) -> Response:
        jobs = self.manager.list()
        views = [job.view() for job in query.cut(jobs)]
        return json_response(200, JobList(jobs=views, total=len(jobs), next=query.next("/stress", len(jobs))))

    def _job(self, request: Request) -> Job:
        job = self.manager.get(request.params["job_id"])
        if job is None:
            raise HttpError(404, f"no stress job {request.params['job_id']!r}")
        return job

    @endpoint(
        "GET",
        "/stress/{job_id}",
        "one job's status and result",
        lane="builds",
        answers={200: Answer("the job", JobView)},
        errors=(404,),
    )
    def show(self, request: Request) -> Response:
        return json_response(200, self._job(request).view())

    @endpoint(
        "DELETE",
        "/stress/{job_id}",
        "cancel a running job",
        lane="waits",
        protected=True,
        answers={200: Answer("cancelled", JobView)},
        errors=(404, 409),
    )
    def cancel(self, request: Request) -> Response:
        job = self._job(request)
        if not job.status.active:
            raise HttpError(409, f"stress job {job.id} already ended: {job.status}")
        self.manager.cancel(job.id)
        return json_response(200, job.view())

    @endpoint(
        "GET",
        "/stress/{job_id}/report",
        "an ended job's recording as a self-contained HTML report (report extra)",
        lane="waits",  # a child process renders it
        answers={200: Answer("the report: plots and summary, works offline", media="text/html")},
        errors=(404, 409, 500, 503),
        description="plots, summary; works offline",
        guide="reports.md",
    )
    def report(self, request: Request) -> Response:
        job = self._job(request)
        if job.status.active:
            raise HttpError(
                409, f"stress job {job.id} is still {job.status}; its report is ready when it ends"
            )
        recording = job.recording
        if recording is None:  # it failed before its timed part
            raise HttpError(404, f"no recording for stress job {job.id}")
        return report_response(recording)


def add_stress_routes(router: Router, manager: JobManager | None, token: Callable[[], str | None]) -> None:
    """Mount /stress; with ``manager=None`` (``--no-stress``) every /stress call is a 404 saying so."""
    if manager is None:
        StressApi.mount_off(router)
    else:
        StressApi(manager, token).mount(router)


__all__ = [
    "JobList",
    "StressApi",
    "StressRequest",
    "add_stress_routes",
    "authorize",
    "is_loopback",
    "is_loopback_host",
]
