"""A group of endpoints declared on its methods (:func:`~warptd.http.endpoint.endpoint`) and mounted on
a router: each request passes its endpoint's protection, and its path, query and body are validated,
before its handler runs with them."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace
from typing import Any, ClassVar

from warptd.http.app import Handler, HttpError, Request, Response, Router
from warptd.http.endpoint import DECLARED, Endpoint
from warptd.http.protection import authorize, parse_body


def _no_token() -> str | None:
    return None


class Api:
    """Endpoints declared on the methods of a subclass. ``noun`` names its requests in errors
    (``invalid window request: …``, ``window requests are accepted from loopback clients only …``);
    ``off``, the 404 each endpoint answers on a daemon that runs without the group."""

    noun: ClassVar[str] = "stress"
    off: ClassVar[str | None] = None

    def __init__(self, token: Callable[[], str | None] = _no_token) -> None:
        self.token = token

    @classmethod
    def endpoints(cls) -> list[tuple[str, Endpoint]]:
        """Each endpoint declared, with its handler's name, in the order declared."""
        return [
            (name, replace(declared, off=cls.off))
            for name, member in vars(cls).items()
            for declared in getattr(member, DECLARED, ())
        ]

    def mount(self, router: Router) -> None:
        """Route each endpoint to its handler."""
        for name, declared in self.endpoints():
            router.route(declared, self._serve(declared, getattr(self, name)))

    @classmethod
    def mount_off(cls, router: Router) -> None:
        """Answer each endpoint with the group's 404, on the event loop (there is nothing to wait on)."""
        reason = cls.off or f"{cls.noun} endpoints are off on this daemon"

        def refuse(_: Request) -> Response:
            raise HttpError(404, reason)

        for _, declared in cls.endpoints():
            router.route(replace(declared, lane="loop"), refuse)

    def _serve(self, declared: Endpoint, handler: Callable[..., Response]) -> Handler:
        """``handler`` behind the endpoint's protection, given its validated ``params``, ``query`` and
        ``body`` by name."""
        if not (declared.protected or declared.params or declared.query or declared.body):
            return handler

        def serve(request: Request) -> Response:
            if declared.protected:
                authorize(request, self.token(), self.noun)
            given: dict[str, Any] = {}
            if declared.params is not None:
                given["params"] = declared.params.of(request)
            if declared.query is not None:
                given["query"] = declared.query.of(request)
            if declared.body is not None:
                empty = declared.body_optional and not request.body.strip()
                given["body"] = declared.body() if empty else parse_body(request, declared.body, self.noun)
            return handler(request, **given)

        return serve
