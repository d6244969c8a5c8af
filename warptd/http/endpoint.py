"""An endpoint declared once, beside its handler: method, path, lane, protection, the models of its
path, query, body and answers. The router dispatches from it; /openapi.json, the landing page and
docs/http.md are written from it."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, ClassVar, Literal, Protocol, TypeVar

from pydantic import BaseModel

if TYPE_CHECKING:
    from warptd.http.app import Request

#: Where a request runs: on the event loop (cache readers), or in the thread pool, among the routes
#: that wait (on a lock, a child process, a device) or among those that build their answer in Python.
Lane = Literal["loop", "waits", "builds"]
#: The attribute of a handler that holds its declarations (one handler may serve several endpoints).
DECLARED = "__endpoints__"
Fn = TypeVar("Fn", bound=Callable[..., Any])


class Parameters(Protocol):
    """A model of a request's path or query parameters: ``of`` validates them from the request,
    raising an HttpError of one of ``errors``."""

    errors: ClassVar[tuple[int, ...]]

    @classmethod
    def of(cls, request: Request) -> Any: ...

    @classmethod
    def model_json_schema(cls, *args: Any, **kwargs: Any) -> dict[str, Any]: ...


@dataclass(frozen=True, slots=True)
class Answer:
    """One answer an endpoint gives: what it means, and its body's model (JSON) or media type."""

    description: str
    model: type[BaseModel] | None = None
    media: str = "application/json"


@dataclass(frozen=True, slots=True)
class Endpoint:
    """One method on one path, as its handler's group declares it."""

    method: str
    path: str
    summary: str = ""
    answers: Mapping[int, Answer] = field(default_factory=dict)
    #: Error statuses its handler answers itself, besides those its protection, models and group bring.
    errors: tuple[int, ...] = ()
    lane: Lane = "loop"
    #: Loopback clients only where no token is configured, else the token (whatever starts work).
    protected: bool = False
    params: type[Parameters] | None = None
    query: type[Parameters] | None = None
    body: type[BaseModel] | None = None
    #: An empty body stands for the body model's defaults.
    body_optional: bool = False
    #: More than the summary, in Markdown: docs/http.md's line, the OpenAPI description.
    description: str = ""
    #: The page of docs/ that tells more (``stress.md``), linked from docs/http.md.
    guide: str = ""
    #: The 404's message on a daemon that runs without the endpoint's group (None: never off).
    off: str | None = None

    @property
    def title(self) -> str:
        """The summary, and who may call it where not anyone."""
        return self.summary + (" (loopback only without a token)" if self.protected else "")


def endpoint(method: str, path: str, summary: str, **declared: Any) -> Callable[[Fn], Fn]:
    """Declare the decorated method of an :class:`~warptd.http.api.Api` as ``method path`` (the
    :class:`Endpoint`'s other fields by name); stacked, one handler serves several endpoints."""
    declaration = Endpoint(method, path, summary, **declared)

    def declare(handler: Fn) -> Fn:
        handler.__dict__.setdefault(DECLARED, []).insert(0, declaration)  # decorators run bottom-up
        return handler

    return declare
