"""Request/response types and a router with JSON errors (404, 405 with Allow, 413, 4xx from handlers)."""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from pydantic import BaseModel

from warptd.http.endpoint import Endpoint, Lane


@dataclass(slots=True)
class Request:
    method: str
    path: str
    query: dict[str, list[str]]
    headers: dict[str, str]  # lower-cased names
    body: bytes
    client: str
    params: dict[str, str] = field(default_factory=dict)

    def header(self, name: str, default: str = "") -> str:
        return self.headers.get(name.lower(), default)


@dataclass(slots=True)
class Response:
    status: int
    body: bytes = b""
    content_type: str = "application/json"
    headers: dict[str, str] = field(default_factory=dict)
    #: Seconds to hold the answer back (a refusal that slows a guesser down); the connection is
    #: meanwhile the first closed when another needs room.
    delay_s: float = 0.0


class HttpError(Exception):
    """Raised by a handler to answer ``status`` with ``{"error": message, ...detail}``."""

    def __init__(
        self, status: int, message: str, headers: dict[str, str] | None = None, **detail: Any
    ) -> None:
        super().__init__(message)
        self.status, self.message, self.headers, self.detail = status, message, headers or {}, detail

    def response(self) -> Response:
        return json_response(self.status, {"error": self.message, **self.detail}, headers=self.headers)


def json_response(status: int, payload: Any, headers: dict[str, str] | None = None) -> Response:
    if isinstance(payload, BaseModel):
        body = payload.model_dump_json().encode()
    else:
        body = json.dumps(payload, default=_default, separators=(",", ":")).encode()
    return Response(status, body, "application/json", headers or {})


def _default(value: Any) -> Any:
    if isinstance(value, BaseModel):
        return value.model_dump(mode="json")
    raise TypeError(f"not JSON serialisable: {type(value).__name__}")


Handler = Callable[[Request], Response]


class Router:
    """Routes ``(method, path pattern)`` to handlers, each under its :class:`Endpoint`; ``{name}`` in a
    pattern captures one segment."""

    def __init__(self) -> None:
        self._routes: list[tuple[re.Pattern[str], dict[str, tuple[Endpoint, Handler]]]] = []

    def route(self, endpoint: Endpoint, handler: Handler) -> None:
        """Dispatch ``endpoint`` to ``handler``, in the endpoint's lane."""
        regex = re.compile("^" + re.sub(r"\{(\w+)\}", r"(?P<\1>[^/]+)", endpoint.path) + "$")
        for existing, methods in self._routes:
            if existing.pattern == regex.pattern:
                methods[endpoint.method] = (endpoint, handler)
                return
        self._routes.append((regex, {endpoint.method: (endpoint, handler)}))

    def add(
        self, method: str, pattern: str, handler: Handler, *, offload: bool = False, builds: bool = False
    ) -> None:
        """An endpoint without a declaration (tests, benches). ``offload``: the handler may block, so it
        runs in the ``waits`` lane; ``builds``: it builds its answer in Python, in the ``builds`` lane."""
        lane: Lane = "builds" if builds else "waits" if offload else "loop"
        self.route(Endpoint(method, pattern, lane=lane), handler)

    @property
    def endpoints(self) -> list[Endpoint]:
        """Every endpoint routed, in the order routed, path by path."""
        return [endpoint for _, methods in self._routes for endpoint, _ in methods.values()]

    def lane(self, request: Request) -> Lane:
        """Where the handler this request reaches runs (``loop`` for an unknown path or method)."""
        for regex, methods in self._routes:
            if regex.match(request.path):
                routed = methods.get(request.method, methods.get("GET"))
                return routed[0].lane if routed is not None else "loop"
        return "loop"

    def dispatch(self, request: Request) -> Response:
        for regex, methods in self._routes:
            match = regex.match(request.path)
            if match is None:
                continue
            routed = methods.get(request.method) or (methods.get("GET") if request.method == "HEAD" else None)
            if routed is None:
                allow = ", ".join(sorted({*methods, "HEAD"} if "GET" in methods else methods))
                raise HttpError(
                    405, f"method {request.method} not allowed on {request.path}", {"Allow": allow}
                )
            request.params = match.groupdict()
            return routed[1](request)
        raise HttpError(404, f"no such endpoint: {request.path}")
