"""POST/GET/DELETE /stress: validated with pydantic, token- or loopback-protected, one job per device."""

from __future__ import annotations

import hmac
import ipaddress
import json
from collections.abc import Callable

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from warptd.config import plain_message
from warptd.http.app import HttpError, Request, Response, Router, json_response
from warptd.http.reports import report_response
from warptd.recording.schema import Recording
from warptd.stress.jobs import Job, JobManager, StressError
from warptd.stress.torch_device import DTYPES


class StressRequest(BaseModel):
    """The body of ``POST /stress``; every field is optional, so an empty POST runs the defaults."""

    model_config = ConfigDict(extra="forbid", strict=True)

    test: str | None = Field(
        None, description="workload; default matmul, or the device's own (tt_matmul on Tenstorrent)"
    )
    device: str | None = Field(
        None, pattern=r"^[a-z0-9_.-]+:\d+$", description="BACKEND:INDEX, e.g. nvidia:0"
    )
    duration_s: float = Field(30.0, ge=1, description="seconds; at most --stress-max-duration")
    dtype: str | None = None
    size: int | None = Field(None, ge=1, description="matmul: matrix side; memory: MiB per buffer")

    @field_validator("dtype")
    @classmethod
    def _known_dtype(cls, value: str | None) -> str | None:
        if value is not None and value not in DTYPES:
            raise ValueError(f"must be one of {', '.join(DTYPES)}")
        return value


_LOOPBACK_NAMES = {"localhost", "localhost.", "ip6-localhost"}


def _host_name(host_header: str) -> str:
    host = host_header.strip().lower()
    if host.startswith("["):
        return host[1 : host.find("]")] if "]" in host else host
    return host.rsplit(":", 1)[0] if host.count(":") == 1 else host


def is_loopback_host(host_header: str) -> bool:
    """A Host header naming this machine's loopback (a DNS-rebinding page names its own domain)."""
    name = _host_name(host_header)
    return name in _LOOPBACK_NAMES or is_loopback(name)


def is_loopback(address: str) -> bool:
    try:
        ip = ipaddress.ip_address(address)
    except ValueError:
        return False
    if isinstance(ip, ipaddress.IPv6Address) and ip.ipv4_mapped is not None:
        ip = ip.ipv4_mapped
    return ip.is_loopback


def _validation_error(exc: ValidationError) -> HttpError:
    problems = [
        {"field": ".".join(str(p) for p in e["loc"]) or "body", "message": plain_message(e)}
        for e in exc.errors()
    ]
    summary = "; ".join(f"{p['field']}: {p['message']}" for p in problems)
    return HttpError(422, f"invalid stress request: {summary}", problems=problems)


def authorize(request: Request, token: str | None) -> None:
    """Only deliberate API clients may start or cancel work."""
    # A browser on this host could otherwise start work with a "simple" cross-origin POST, or a
    # DNS-rebinding page could; no legitimate client of this API sends Origin.
    if request.header("origin"):
        raise HttpError(403, "browser cross-origin requests are refused")
    if token is None:
        if not is_loopback(request.client):
            raise HttpError(
                403, "stress requests are accepted from loopback clients only unless a token is configured"
            )
        if not is_loopback_host(request.header("host", "localhost")):
            raise HttpError(403, "without a token, the Host header must name localhost")
        return
    # With basic auth on the listener, Authorization carries the user: the token goes in X-Stress-Token.
    scheme, _, given = request.header("authorization").partition(" ")
    if request.header("x-stress-token"):
        scheme, given = "bearer", request.header("x-stress-token")
    if scheme.lower() != "bearer" or not hmac.compare_digest(given.strip().encode(), token.encode()):
        raise HttpError(401, "missing or wrong bearer token", {"WWW-Authenticate": 'Bearer realm="warptd"'})


def parse_request(request: Request) -> StressRequest:
    """The JSON body as a :class:`StressRequest`: 415, 400 or 422 with the reason otherwise."""
    if not request.body.strip():
        return StressRequest()
    if request.header("content-type").split(";")[0].strip().lower() != "application/json":
        raise HttpError(415, "send the body as Content-Type: application/json")
    try:
        raw = json.loads(request.body)
    except (ValueError, UnicodeDecodeError) as exc:
        raise HttpError(400, f"malformed JSON body: {exc}") from None
    if not isinstance(raw, dict):
        raise HttpError(400, "the body must be a JSON object")
    try:
        return StressRequest.model_validate(raw)
    except ValidationError as exc:
        raise _validation_error(exc) from None


def job_recording(job: Job) -> Recording | None:
    """The recording a finished job carries, where jobs carry one (``Job.recording``), else None."""
    recording = getattr(job, "recording", None)
    return recording if isinstance(recording, Recording) else None


def _disabled(_: Request) -> Response:
    raise HttpError(404, "stress endpoints are disabled on this daemon (--no-stress)")


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
        params = manager.parameters(body.test, body.device, body.duration_s, body.dtype, body.size)
        try:
            job = manager.start(params)
        except StressError as exc:
            raise HttpError(exc.status, str(exc)) from None
        return json_response(202, job.view(), headers={"Location": f"/stress/{job.id}"})

    def listing(_: Request) -> Response:
        return json_response(200, {"jobs": [job.view() for job in manager.list()]})

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
        recording = job_recording(job)
        if recording is None:
            raise HttpError(404, f"no recording for stress job {job.id}")
        return report_response(recording)

    router.add("POST", "/stress", start, offload=True)  # spawns a process
    router.add("GET", "/stress", listing, offload=True)  # the job manager's lock
    router.add("GET", "/stress/{job_id}", show, offload=True)
    router.add("DELETE", "/stress/{job_id}", cancel, offload=True)
    router.add("GET", "/stress/{job_id}/report", report, offload=True)  # a child process renders it
