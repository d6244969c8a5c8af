"""A group of endpoints declared on its methods (:func:`~warptd.http.app.endpoint`), mounted on a
router: a request passes its endpoint's protection, and its path, query and body are validated, before
the handler runs with them."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace
from typing import Any, ClassVar, get_type_hints

from warptd.http.app import DECLARED, Endpoint, Handler, HttpError, Lane, Request, Response, Router
from warptd.http.protection import authorize, parse_body

#: A handler's arguments the router validates from the request: path parameters, query, body.
_PARAMETERS, _VALIDATED = ("params", "query"), ("params", "query", "body")


class Api:
    """Endpoints declared on the methods of a subclass (a dataclass of what they serve, with the
    ``token`` where they are protected). ``noun`` names its requests in errors (``invalid window
    request: …``); ``lane`` and ``protected``, its endpoints' unless they say theirs; ``off``, the 404
    each endpoint answers on a daemon that runs without the group; ``refusals``, the exceptions whose
    ``status`` and message a handler answers."""

    noun: ClassVar[str] = "stress"
    lane: ClassVar[Lane] = "waits"
    protected: ClassVar[bool] = False
    off: ClassVar[str | None] = None
    refusals: ClassVar[tuple[type[Exception], ...]] = ()
    token: Callable[[], str | None]
    router: Router  #: the one it is mounted on

    @classmethod
    def endpoints(cls) -> list[tuple[str, Endpoint]]:
        """Each endpoint declared, with its handler's name, in the order declared."""
        found = []
        for name, handler in vars(cls).items():
            for declared in getattr(handler, DECLARED, ()):
                models = {k: v for k, v in get_type_hints(handler).items() if k in _VALIDATED}
                summary = " ".join((handler.__doc__ or "").split())
                told = {"lane": declared.lane or cls.lane, "off": cls.off, "summary": summary}
                told["protected"] = cls.protected if declared.protected is None else declared.protected
                found.append((name, replace(declared, **told, **models)))
        return found

    @classmethod
    def add(cls, router: Router, subject: Any, *more: Any, **named: Any) -> None:
        """Mount the group made of ``subject`` (a manager) and the rest; its 404s where ``subject`` is
        None (the daemon runs without it)."""
        cls.mount_off(router) if subject is None else cls(subject, *more, **named).mount(router)

    def mount(self, router: Router) -> None:
        """Route each endpoint to its handler."""
        self.router = router
        for name, declared in self.endpoints():
            router.route(declared, self._serve(declared, getattr(self, name)))

    @classmethod
    def mount_off(cls, router: Router) -> None:
        """Answer each endpoint with the group's 404, on the event loop (there is nothing to wait on)."""

        def refuse(_: Request) -> Response:
            raise HttpError(404, cls.off or "off")

        for _, declared in cls.endpoints():
            router.route(replace(declared, lane="loop"), refuse)

    def _serve(self, declared: Endpoint, handler: Callable[..., Response]) -> Handler:
        """``handler`` behind the endpoint's protection, given its validated arguments by name."""
        if not (declared.protected or declared.params or declared.query or declared.body or self.refusals):
            return handler

        def serve(request: Request) -> Response:
            if declared.protected:
                authorize(request, self.token(), self.noun)
            given = {name: model.of(request) for name in _PARAMETERS if (model := getattr(declared, name))}
            if declared.body is not None:
                empty = declared.body_optional and not request.body.strip()
                given["body"] = declared.body() if empty else parse_body(request, declared.body, self.noun)
            try:
                return handler(request, **given)
            except self.refusals as exc:
                raise HttpError(exc.status, str(exc)) from None  # type: ignore[attr-defined]

        return serve
