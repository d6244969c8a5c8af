"""The OpenAPI 3.1 description of the HTTP API, built from the same pydantic models that validate it."""

from __future__ import annotations

from typing import Any

from pydantic.json_schema import models_json_schema

from warptd import __version__
from warptd.config import WORKLOAD_KINDS
from warptd.http.devices_view import DevicesView
from warptd.http.pages import PARAMETERS as PAGE
from warptd.http.stress_routes import JobList, StressRequest
from warptd.http.window_routes import WindowLease, WindowList, WindowRequest
from warptd.http.workload_routes import MAX_ID_CHARS
from warptd.models import WireModel
from warptd.recording.schema import Recording
from warptd.stress.job import JobView
from warptd.workloads.views import WorkloadList, WorkloadView

_REF = "#/components/schemas/{model}"


class ErrorBody(WireModel):
    """Every 4xx/5xx answer: a message naming the problem, plus details for some errors."""

    error: str


def _json(schema: str, description: str) -> dict[str, Any]:
    return {
        "description": description,
        "content": {"application/json": {"schema": {"$ref": _REF.format(model=schema)}}},
    }


def _errors(*codes: int) -> dict[str, Any]:
    texts = {
        400: "malformed request",
        401: "missing or wrong bearer token",
        403: "not allowed from this client",
        404: "no such job, window or workload, no recording for it, or the endpoints are disabled",
        405: "method not allowed",
        408: "body not received in time",
        409: "device busy, job or window already ended (the message names how), a window without a "
        "lease or whose lease lapsed (renew), or (report) job still running",
        411: "chunked body",
        413: "body over 64 KiB",
        414: f"workload id over {MAX_ID_CHARS} characters",
        415: "body is not application/json",
        422: "invalid parameters, or an unknown device",
        429: "too many windows open (--window-max-open)",
        500: "the report renderer failed",
        503: "torch or plotly missing, shutting down, or reports busy",
    }
    return {str(code): _json("ErrorBody", texts[code]) for code in codes}


def _plain(media: str, description: str) -> dict[str, Any]:
    return {"description": description, "content": {media: {"schema": {"type": "string"}}}}


def _status(description: str, *extra: int) -> dict[str, Any]:
    schema = {"type": "object", "properties": {"status": {"type": "string"}}, "required": ["status"]}
    return {"description": description, "content": {"application/json": {"schema": schema}}}


def openapi_document() -> dict[str, Any]:
    _, top = models_json_schema(
        [
            (StressRequest, "validation"),
            (JobView, "serialization"),
            (JobList, "serialization"),
            (ErrorBody, "serialization"),
            (DevicesView, "serialization"),
            (WindowRequest, "validation"),
            (Recording, "serialization"),
            (WindowList, "serialization"),
            (WindowLease, "serialization"),
            (WorkloadList, "serialization"),
            (WorkloadView, "serialization"),
        ],
        ref_template=_REF,
    )
    job_id = [{"name": "job_id", "in": "path", "required": True, "schema": {"type": "string"}}]
    window_id = [{"name": "window_id", "in": "path", "required": True, "schema": {"type": "string"}}]
    workload = [
        {
            "name": "kind",
            "in": "path",
            "required": True,
            "schema": {"type": "string", "enum": list(WORKLOAD_KINDS)},
        },
        {
            "name": "workload_id",
            "in": "path",
            "required": True,
            "schema": {"type": "string", "maxLength": MAX_ID_CHARS},
        },
    ]
    window_end = {
        "summary": "end an open window; answers its recording",
        "security": [{}, {"bearer": []}],
        "responses": {"200": _json("Recording", "the ended window"), **_errors(401, 403, 404, 409)},
    }
    return {
        "openapi": "3.1.0",
        "info": {
            "title": "warptd",
            "version": __version__,
            "description": "Accelerator telemetry for Prometheus, stress runs and energy windows on demand.",
        },
        "paths": {
            "/metrics": {
                "get": {
                    "summary": "Prometheus exposition (text or OpenMetrics by Accept; gzip)",
                    "responses": {"200": _plain("text/plain", "the latest snapshot")},
                }
            },
            "/healthz": {
                "get": {"summary": "200 while the process serves", "responses": {"200": _status("alive")}}
            },
            "/readyz": {
                "get": {
                    "summary": "200 once every backend has sampled once, 503 before",
                    "responses": {
                        "200": _status("ready"),
                        "503": _status("waiting for a first sample, or no backend loaded"),
                    },
                }
            },
            "/devices": {
                "get": {
                    "summary": "every backend's devices: identity and latest reading (from the last sample)",
                    "responses": {"200": _json("DevicesView", "backends and devices")},
                }
            },
            "/": {
                "get": {
                    "summary": "this list, and a live device table",
                    "responses": {"200": _plain("text/html", "the landing page")},
                }
            },
            "/openapi.json": {
                "get": {
                    "summary": "OpenAPI 3.1 description of this API",
                    "responses": {
                        "200": {
                            "description": "OpenAPI 3.1",
                            "content": {"application/json": {"schema": {"type": "object"}}},
                        }
                    },
                }
            },
            "/stress": {
                "post": {
                    "summary": "start a stress job (loopback only without a token)",
                    "security": [{}, {"bearer": []}],
                    "requestBody": {
                        "required": False,
                        "content": {
                            "application/json": {"schema": {"$ref": _REF.format(model="StressRequest")}}
                        },
                    },
                    "responses": {
                        "202": _json("JobView", "started; Location names the job"),
                        **_errors(400, 401, 403, 404, 409, 413, 415, 422, 503),
                    },
                },
                "get": {
                    "summary": "recent jobs, newest first (one page: limit, offset)",
                    "parameters": PAGE,
                    "responses": {"200": _json("JobList", "bounded history"), **_errors(404, 422)},
                },
            },
            "/stress/{job_id}": {
                "parameters": job_id,
                "get": {
                    "summary": "one job's status and result",
                    "responses": {"200": _json("JobView", "the job"), **_errors(404)},
                },
                "delete": {
                    "summary": "cancel a running job",
                    "security": [{}, {"bearer": []}],
                    "responses": {"200": _json("JobView", "cancelled"), **_errors(401, 403, 404, 409)},
                },
            },
            "/stress/{job_id}/report": {
                "parameters": job_id,
                "get": {
                    "summary": "an ended job's recording as a self-contained HTML report (report extra)",
                    "responses": {
                        "200": _plain("text/html", "the report: plots and summary, works offline"),
                        **_errors(404, 409, 500, 503),
                    },
                },
            },
            "/windows": {
                "post": {
                    "summary": "open an energy window (loopback only without a token)",
                    "security": [{}, {"bearer": []}],
                    "requestBody": {
                        "required": True,
                        "content": {
                            "application/json": {"schema": {"$ref": _REF.format(model="WindowRequest")}}
                        },
                    },
                    "responses": {
                        "201": _json("Recording", "opened; Location names the window"),
                        **_errors(400, 401, 403, 404, 413, 415, 422, 429, 503),
                    },
                },
                "get": {
                    "summary": "open windows, then ended ones (bounded history), without time series "
                    "(one page: limit, offset)",
                    "parameters": PAGE,
                    "responses": {"200": _json("WindowList", "the windows"), **_errors(404, 422)},
                },
            },
            "/windows/{window_id}": {
                "parameters": window_id,
                "get": {
                    "summary": "one window: live while open, its recording once ended",
                    "responses": {"200": _json("Recording", "the window"), **_errors(404)},
                },
                "delete": window_end,
            },
            "/windows/{window_id}/end": {"parameters": window_id, "post": window_end},
            "/windows/{window_id}/renew": {
                "parameters": window_id,
                "post": {
                    "summary": "renew a leased window's lease by its lease_s from now (a client that "
                    "stops renewing has its window ended, end_reason lease_expired)",
                    "security": [{}, {"bearer": []}],
                    "responses": {
                        "200": _json("WindowLease", "renewed"),
                        **_errors(401, 403, 404, 409),
                    },
                },
            },
            "/workloads/{kind}/{workload_id}/recording": {
                "parameters": workload,
                "get": {
                    "summary": "a workload's recording (--workloads): its devices' and CPU packages' "
                    "readings with its share of their energy, while it runs and for --workload-retention "
                    "after it ended (loopback only without a token)",
                    "security": [{}, {"bearer": []}],
                    "responses": {
                        "200": _json("Recording", "the workload's recording (kind workload)"),
                        **_errors(401, 403, 404, 414),
                    },
                },
            },
            "/windows/{window_id}/report": {
                "parameters": window_id,
                "get": {
                    "summary": "a window's recording as a self-contained HTML report (report extra); "
                    "while open, of what it recorded so far",
                    "responses": {
                        "200": _plain("text/html", "the report: plots and summary, works offline"),
                        **_errors(404, 500, 503),
                    },
                },
            },
            "/workloads": {
                "get": {
                    "summary": "energy per Slurm job, systemd unit, container and user (--workloads; "
                    "loopback only without a token; one page: limit, offset)",
                    "security": [{}, {"bearer": []}],
                    "parameters": PAGE,
                    "responses": {
                        "200": _json(
                            "WorkloadList", "running workloads, then those ended within the retention"
                        ),
                        **_errors(401, 403, 404, 422),
                    },
                }
            },
            "/workloads/{kind}/{workload_id}": {
                "parameters": workload,
                "get": {
                    "summary": "one workload's energy per device and CPU, its devices, start and end",
                    "security": [{}, {"bearer": []}],
                    "responses": {
                        "200": _json("WorkloadView", "the workload"),
                        **_errors(401, 403, 404, 414),
                    },
                },
            },
        },
        "components": {
            "schemas": top["$defs"],
            "securitySchemes": {"bearer": {"type": "http", "scheme": "bearer"}},
        },
    }
