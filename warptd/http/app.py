"""Request/response types, the declaration of an endpoint (once, on its handler: the router dispatches
from it, /openapi.json, the landing page and docs/http.md are written from it), and a router with JSON
errors (404, 405 with Allow, 413, 4xx from handlers)."""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, Literal, TypeVar

from pydantic import BaseModel


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


#: Where a request runs: on the event loop (cache readers), or in the thread pool, among the routes
#: that wait (on a lock, a child process, a device) or among those that build their answer in Python.
Lane = Literal["loop", "waits", "builds"]
#: The attribute of a handler that holds its declarations (one handler may serve several endpoints).
DECLARED = "__endpoints__"
Fn = TypeVar("Fn", bound=Callable[..., Any])


@dataclass(frozen=True, slots=True)
class Answer:
    """One answer an endpoint gives: what it means, and its body's model (JSON) or media type."""

    description: str
    model: type[BaseModel] | None = None
    media: str = "application/json"


@dataclass(frozen=True, slots=True)
class Endpoint:
    """One method on one path. Its summary is its handler's docstring; the models of its path
    parameters, query and body, the types of its handler's ``params``, ``query`` and ``body``;
    ``errors``, the statuses its handler refuses with, besides its protection's, models' and group's."""

    method: str
    path: str
    answers: Mapping[int, Answer] = field(default_factory=dict)
    errors: tuple[int, ...] = ()
    #: None: its group's (off the event loop unless the group only reads caches, as /metrics does).
    lane: Lane | None = None
    #: Loopback clients only where no token is configured, else the token (whatever starts work);
    #: None: as its group is.
    protected: bool | None = None
    summary: str = ""
    params: Any = None  # a model with ``of(request)`` and its ``errors``: WorkloadPath, PageQuery
    query: Any = None
    body: type[BaseModel] | None = None
    #: The 404's message on a daemon that runs without the endpoint's group (None: never off).
    off: str | None = None

    @property
    def body_optional(self) -> bool:
        """A body may be left out where its model has a default for every field."""
        return not any(info.is_required() for info in self.body.model_fields.values()) if self.body else False

    @property
    def title(self) -> str:
        """The summary, and who may call it where not anyone."""
        return self.summary + (" (loopback only without a token)" if self.protected else "")


def endpoint(route: str, answers: Mapping[int, Answer], **declared: Any) -> Callable[[Fn], Fn]:
    """Declare the decorated method of an :class:`~warptd.http.api.Api` as ``route`` (``POST /stress``),
    the :class:`Endpoint`'s other fields by name; stacked, one handler serves several endpoints."""
    method, path = route.split(" ")
    declaration = Endpoint(method, path, answers, **declared)

    def declare(handler: Fn) -> Fn:
        handler.__dict__.setdefault(DECLARED, []).insert(0, declaration)  # decorators run bottom-up
        return handler

    return declare


class Router:
    """Routes ``(method, path pattern)`` to handlers, each under its :class:`Endpoint`; ``{name}`` in a
    pattern captures one segment."""

    def __init__(self) -> None:
        #: Each path's pattern, and the endpoint and handler of each of its methods.
        self._routes: dict[str, tuple[re.Pattern[str], dict[str, tuple[Endpoint, Handler]]]] = {}

    def route(self, endpoint: Endpoint, handler: Handler) -> None:
        """Dispatch ``endpoint`` to ``handler``, in the endpoint's lane."""
        regex = re.compile("^" + re.sub(r"\{(\w+)\}", r"(?P<\1>[^/]+)", endpoint.path) + "$")
        self._routes.setdefault(regex.pattern, (regex, {}))[1][endpoint.method] = (endpoint, handler)

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
        return [endpoint for _, methods in self._routes.values() for endpoint, _ in methods.values()]

    def _path(self, path: str) -> tuple[re.Match[str], dict[str, tuple[Endpoint, Handler]]] | None:
        """The path's match and the endpoints of its methods; None for a path no endpoint has."""
        for regex, methods in self._routes.values():
            if match := regex.match(path):
                return match, methods
        return None

    def lane(self, request: Request) -> Lane:
        """Where the handler this request reaches runs (``loop`` for an unknown path or method)."""
        _, methods = self._path(request.path) or (None, {})
        routed = methods.get(request.method, methods.get("GET"))
        return (routed[0].lane or "waits") if routed is not None else "loop"

    def dispatch(self, request: Request) -> Response:
        found = self._path(request.path)
        if found is None:
            raise HttpError(404, f"no such endpoint: {request.path}")
        match, methods = found
        routed = methods.get(request.method) or (methods.get("GET") if request.method == "HEAD" else None)
        if routed is None:
            allow = ", ".join(sorted({*methods, "HEAD"} if "GET" in methods else methods))
            raise HttpError(405, f"method {request.method} not allowed on {request.path}", {"Allow": allow})
        request.params = match.groupdict()
        return routed[1](request)
