"""POST/GET/DELETE /stress: validated with pydantic, token- or loopback-protected, one job per device."""

from __future__ import annotations

import hmac
import ipaddress
import json
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from warptd.http.app import HttpError, Request, Response, Router, json_response
from warptd.stress.jobs import JobManager, JobStatus, StressError, StressParameters


class StressRequest(BaseModel):
    """The body of ``POST /stress``; every field is optional, so an empty POST runs the defaults."""

    model_config = ConfigDict(extra="forbid", strict=True)

    test: str = "matmul"
    device: str | None = Field(
        None, pattern=r"^[a-z0-9_.-]+:\d+$", description="BACKEND:INDEX, e.g. nvidia:0"
    )
    duration_s: float = Field(30.0, ge=1, description="seconds; at most --stress-max-duration")
    dtype: Literal["float32", "tf32", "bfloat16", "float16"] | None = None
    size: int | None = Field(None, ge=1, description="matmul: matrix side; memory: MiB per buffer")


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
        {"field": ".".join(str(p) for p in e["loc"]) or "body", "message": e["msg"]} for e in exc.errors()
    ]
    summary = "; ".join(f"{p['field']}: {p['message']}" for p in problems)
    return HttpError(422, f"invalid stress request: {summary}", problems=problems)


def add_stress_routes(router: Router, manager: JobManager | None, token: str | None) -> None:
    """Register /stress; with ``manager=None`` (``--no-stress``) every /stress call is a 404 saying so."""
    if manager is None:

        def disabled(_: Request) -> Response:
            raise HttpError(404, "stress endpoints are disabled on this daemon (--no-stress)")

        for method in ("GET", "POST"):
            router.add(method, "/stress", disabled)
        for method in ("GET", "DELETE"):
            router.add(method, "/stress/{job_id}", disabled)
        return

    def authorize(request: Request) -> None:
        if token is None:
            if not is_loopback(request.client):
                raise HttpError(
                    403,
                    "stress requests are accepted from loopback clients only unless a token is configured",
                )
            return
        scheme, _, given = request.header("authorization").partition(" ")
        if scheme.lower() != "bearer" or not hmac.compare_digest(given.strip().encode(), token.encode()):
            raise HttpError(
                401, "missing or wrong bearer token", {"WWW-Authenticate": 'Bearer realm="warptd"'}
            )

    def start(request: Request) -> Response:
        authorize(request)
        try:
            raw = json.loads(request.body) if request.body.strip() else {}
        except (ValueError, UnicodeDecodeError) as exc:
            raise HttpError(400, f"malformed JSON body: {exc}") from None
        if not isinstance(raw, dict):
            raise HttpError(400, "the body must be a JSON object")
        try:
            body = StressRequest.model_validate(raw)
        except ValidationError as exc:
            raise _validation_error(exc) from None
        params = StressParameters(
            test=body.test,
            device=body.device or manager.default_device(),
            duration_s=body.duration_s,
            dtype=body.dtype,
            size=body.size,
        )
        try:
            job = manager.start(params)
        except StressError as exc:
            raise HttpError(exc.status, str(exc)) from None
        return json_response(202, job.view(), headers={"Location": f"/stress/{job.id}"})

    def listing(_: Request) -> Response:
        return json_response(200, {"jobs": [job.view() for job in manager.list()]})

    def _job(request: Request):  # noqa: ANN202 - a Job
        job = manager.get(request.params["job_id"])
        if job is None:
            raise HttpError(404, f"no stress job {request.params['job_id']!r}")
        return job

    def show(request: Request) -> Response:
        return json_response(200, _job(request).view())

    def cancel(request: Request) -> Response:
        authorize(request)
        job = _job(request)
        if job.status is not JobStatus.RUNNING:
            raise HttpError(409, f"stress job {job.id} already ended: {job.status}")
        manager.cancel(job.id)
        return json_response(200, job.view())

    router.add("POST", "/stress", start)
    router.add("GET", "/stress", listing)
    router.add("GET", "/stress/{job_id}", show)
    router.add("DELETE", "/stress/{job_id}", cancel)
