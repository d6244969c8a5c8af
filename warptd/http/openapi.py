"""The OpenAPI 3.1 description of the HTTP API, written from the endpoints' declarations and the
pydantic models that validate their requests and answers."""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from typing import Any

from pydantic import BaseModel
from pydantic.json_schema import JsonSchemaMode, models_json_schema

from warptd import __version__
from warptd.http.endpoint import Answer, Endpoint, Parameters
from warptd.http.limits import MAX_BODY_BYTES
from warptd.http.workload_routes import MAX_ID_CHARS
from warptd.models import WireModel

_REF = "#/components/schemas/{model}"
_PATH_PARAMETER = re.compile(r"\{(\w+)\}")
#: What each error status means, wherever an endpoint answers it.
ERRORS = {
    400: "malformed request",
    401: "missing or wrong bearer token",
    403: "not allowed from this client",
    404: "no such job, window or workload, no recording for it, or the endpoints are disabled",
    405: "method not allowed",
    408: "body not received in time",
    409: "device busy, job or window already ended (the message names how), a window without a "
    "lease or whose lease lapsed (renew), or (report) job still running",
    411: "chunked body",
    413: f"body over {MAX_BODY_BYTES // 1024} KiB",
    414: f"workload id over {MAX_ID_CHARS} characters",
    415: "body is not application/json",
    422: "invalid parameters, or an unknown device",
    429: "too many windows open (--window-max-open)",
    500: "the report renderer failed",
    503: "torch or plotly missing, shutting down, or reports busy",
}
#: The errors a protected endpoint answers (the token, the client), and one that takes a body.
PROTECTION_ERRORS, BODY_ERRORS = (401, 403), (400, 413, 415, 422)


class ErrorBody(WireModel):
    """Every 4xx/5xx answer: a message naming the problem, plus details for some errors."""

    error: str


def errors(declared: Endpoint) -> list[int]:
    """Every error status the endpoint answers: its handler's, its protection's, its models', and the
    404 of a group that can be off."""
    codes = {*declared.errors, *(PROTECTION_ERRORS if declared.protected else ())}
    codes |= {*(BODY_ERRORS if declared.body else ())}
    for model in (declared.params, declared.query):
        codes |= {*(model.errors if model else ())}
    return sorted(codes | ({404} if declared.off else set()))


def _schema(model: type[BaseModel]) -> dict[str, str]:
    return {"$ref": _REF.format(model=model.__name__)}


def _content(answer: Answer) -> dict[str, Any]:
    if answer.model is not None:
        schema: dict[str, Any] = _schema(answer.model)
    else:
        schema = {"type": "string"} if answer.media != "application/json" else {"type": "object"}
    return {"description": answer.description, "content": {answer.media: {"schema": schema}}}


def _parameters(where: str, names: Sequence[str], model: type[Parameters] | None) -> list[dict[str, Any]]:
    """``names`` as OpenAPI parameters ``in`` path or query, each schema from ``model`` (a string
    where there is none); required unless the model gives a default."""
    fields = model.model_json_schema()["properties"] if model is not None else {}
    listed = []
    for name in names:
        schema = {k: v for k, v in fields.get(name, {"type": "string"}).items() if k != "title"}
        parameter = {"name": name, "in": where, "required": "default" not in schema, "schema": schema}
        if "description" in schema:
            parameter["description"] = schema.pop("description")
        listed.append(parameter)
    return listed


def _operation(declared: Endpoint) -> dict[str, Any]:
    operation: dict[str, Any] = {"summary": declared.title}
    if declared.description:
        operation["description"] = declared.description
    if declared.protected:
        operation["security"] = [{}, {"bearer": []}]
    if declared.query is not None:
        names = list(declared.query.model_json_schema()["properties"])
        operation["parameters"] = _parameters("query", names, declared.query)
    if declared.body is not None:
        content = {"application/json": {"schema": _schema(declared.body)}}
        operation["requestBody"] = {"required": not declared.body_optional, "content": content}
    answers = {str(code): _content(answer) for code, answer in declared.answers.items()}
    failures = {str(code): _content(Answer(ERRORS[code], ErrorBody)) for code in errors(declared)}
    operation["responses"] = {**answers, **failures}
    return operation


def _models(endpoints: Iterable[Endpoint]) -> list[tuple[type[BaseModel], JsonSchemaMode]]:
    """Each model a request or an answer names, once, as it validates or as it serialises."""
    named: dict[type[BaseModel], JsonSchemaMode] = {ErrorBody: "serialization"}
    for declared in endpoints:
        if declared.body is not None:
            named[declared.body] = "validation"
        for answer in declared.answers.values():
            if answer.model is not None:
                named.setdefault(answer.model, "serialization")
    return list(named.items())


def openapi_document(endpoints: Sequence[Endpoint]) -> dict[str, Any]:
    """The document of ``endpoints``: a path's parameters on its path item, each method its operation."""
    _, top = models_json_schema(_models(endpoints), ref_template=_REF)
    paths: dict[str, dict[str, Any]] = {}
    for declared in endpoints:
        item = paths.setdefault(declared.path, {})
        names = _PATH_PARAMETER.findall(declared.path)
        if names and (declared.params is not None or "parameters" not in item):
            item["parameters"] = _parameters("path", names, declared.params)
        item[declared.method.lower()] = _operation(declared)
    return {
        "openapi": "3.1.0",
        "info": {
            "title": "warptd",
            "version": __version__,
            "description": "Accelerator telemetry for Prometheus, stress runs and energy windows on demand.",
        },
        "paths": paths,
        "components": {
            "schemas": top["$defs"],
            "securitySchemes": {"bearer": {"type": "http", "scheme": "bearer"}},
        },
    }
