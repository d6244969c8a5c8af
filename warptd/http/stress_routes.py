"""POST/GET/DELETE /stress: validated with pydantic, token- or loopback-protected, one job per device."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from pydantic import ConfigDict, Field, field_validator

from warptd.http.api import Api
from warptd.http.app import Answer, HttpError, Request, Response, endpoint, json_response
from warptd.http.pages import PageQuery
from warptd.http.reports import REPORT, report_response
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


@dataclass
class StressApi(Api):
    """``/stress``: start, list, show, cancel and report jobs, one job per device."""

    noun, refusals = "stress", (StressError,)
    off = "stress endpoints are disabled on this daemon (--no-stress)"

    manager: JobManager
    token: Callable[[], str | None]

    @endpoint(
        "POST /stress",
        {202: Answer("started; Location names the job", JobView)},
        errors=(409, 503),
        protected=True,
    )
    def start(self, request: Request, body: StressRequest) -> Response:
        """start a stress job"""
        # The default device too may be refused: a node without an accelerator has none.
        params = self.manager.parameters(body.test, body.device, body.duration_s, body.dtype, body.size)
        job = self.manager.start(params)
        return json_response(202, job.view(), headers={"Location": f"/stress/{job.id}"})

    @endpoint("GET /stress", {200: Answer("bounded history", JobList)}, lane="builds")  # a lock, then views
    def listing(self, request: Request, query: PageQuery) -> Response:
        """recent jobs, newest first (one page: limit, offset)"""
        jobs = self.manager.jobs.list()
        views = [job.view() for job in query.cut(jobs)]
        return json_response(200, JobList(jobs=views, total=len(jobs), next=query.next("/stress", len(jobs))))

    def _job(self, request: Request) -> Job:
        job = self.manager.jobs.get(request.params["job_id"])
        if job is None:
            raise HttpError(404, f"no stress job {request.params['job_id']!r}")
        return job

    @endpoint("GET /stress/{job_id}", {200: Answer("the job", JobView)}, errors=(404,), lane="builds")
    def show(self, request: Request) -> Response:
        """one job's status and result"""
        return json_response(200, self._job(request).view())

    @endpoint(
        "DELETE /stress/{job_id}", {200: Answer("cancelled", JobView)}, errors=(404, 409), protected=True
    )
    def cancel(self, request: Request) -> Response:
        """cancel a running job"""
        job = self._job(request)
        if not job.status.active:
            raise HttpError(409, f"stress job {job.id} already ended: {job.status}")
        self.manager.cancel(job.id)
        return json_response(200, job.view())

    @endpoint("GET /stress/{job_id}/report", {200: REPORT}, errors=(404, 409, 500, 503))
    def report(self, request: Request) -> Response:
        """an ended job's recording as a self-contained HTML report (report extra)"""
        job = self._job(request)
        if job.status.active:
            raise HttpError(
                409, f"stress job {job.id} is still {job.status}; its report is ready when it ends"
            )
        recording = job.recording
        if recording is None:  # it failed before its timed part
            raise HttpError(404, f"no recording for stress job {job.id}")
        return report_response(recording)
