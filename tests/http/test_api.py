"""An endpoint is one declaration beside its handler (issue 41): a new one is its group's method and
this test. The router dispatches from the declaration (lane, protection, path, query and body
validated), and /openapi.json, the landing page and docs/http.md are written from it."""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import ClassVar
from urllib.parse import parse_qs

import pytest
from pydantic import ConfigDict, Field

from tests.helpers import http
from warptd.http import landing
from warptd.http.api import Api
from warptd.http.app import Answer, HttpError, Request, Response, Router, endpoint, json_response
from warptd.http.openapi import add_openapi_route, openapi_document
from warptd.http.pages import PageQuery
from warptd.http.server import WarptdHTTPServer
from warptd.models import WireModel

TOKEN = "Bearer s3cret"


class Note(WireModel):
    """What ``POST /notes`` takes and answers."""

    model_config = ConfigDict(extra="forbid", strict=True)

    text: str = Field(max_length=16, description="at most 16 characters")


class NotePath(WireModel):
    """The note a path names: its number, 1 to 9."""

    errors: ClassVar[tuple[int, ...]] = (404,)
    number: int = Field(ge=1, le=9)

    @classmethod
    def of(cls, request: Request) -> NotePath:
        try:
            return cls(number=int(request.params["number"]))
        except ValueError:  # pydantic's ValidationError is one
            raise HttpError(404, "no such note") from None


@dataclass
class NoteApi(Api):
    """A group that a test declares: the whole of what a new endpoint writes."""

    noun = "note"
    off = "note endpoints are off on this daemon (--notes)"
    token: Callable[[], str | None] = lambda: None
    notes: list[str] = field(default_factory=list)

    @endpoint("POST /notes", {201: Answer("kept", Note)}, errors=(409,), protected=True)
    def keep(self, request: Request, body: Note) -> Response:
        """keep a note"""
        if body.text in self.notes:
            raise HttpError(409, "kept already")
        self.notes.append(body.text)
        return json_response(201, body)

    @endpoint("GET /notes", {200: Answer("a page of them")}, lane="builds")
    def listing(self, request: Request, query: PageQuery) -> Response:
        """the notes"""
        return json_response(200, {"notes": query.cut(self.notes)})

    @endpoint("GET /notes/{number}", {200: Answer("it", Note)})
    def show(self, request: Request, params: NotePath) -> Response:
        """one note"""
        if params.number > len(self.notes):
            raise HttpError(404, "no such note")
        return json_response(200, Note(text=self.notes[params.number - 1]))


def _request(
    method: str, path: str, body: bytes = b"", client: str = "127.0.0.1", query: str = "", **headers: str
) -> Request:
    """A request as the connection hands it on; ``headers`` by their lower-cased names, ``_`` for ``-``."""
    given = {"host": "localhost", "content-type": "application/json"}
    given.update({name.replace("_", "-"): value for name, value in headers.items()})
    return Request(method, path, parse_qs(query), given, body, client)


def test_a_declared_endpoint_is_served_over_loopback_and_described():
    router, notes = Router(), NoteApi()
    notes.mount(router)
    add_openapi_route(router)
    server = WarptdHTTPServer("127.0.0.1", 0, router)
    server.start()
    try:
        json_body = {"Content-Type": "application/json", "Host": "localhost"}
        assert http(server.port, "POST", "/notes", b'{"text": "hi"}', json_body)[0] == 201
        status, _, body = http(server.port, "GET", "/notes/1")
        assert status == 200 and json.loads(body) == {"text": "hi"}
        status, _, body = http(server.port, "GET", "/openapi.json")
    finally:
        server.server_close()
    document = json.loads(body)
    keep = document["paths"]["/notes"]["post"]
    assert keep["summary"] == "keep a note (loopback only without a token)"
    assert keep["requestBody"]["content"]["application/json"]["schema"] == {
        "$ref": "#/components/schemas/Note"
    }
    assert set(keep["responses"]) == {"201", "400", "401", "403", "404", "409", "413", "415", "422"}
    assert keep["security"] == [{}, {"bearer": []}]
    page = document["paths"]["/notes"]["get"]["parameters"]
    assert [(p["name"], p["in"], p["schema"]["maximum"]) for p in page] == [
        ("limit", "query", 100),
        ("offset", "query", 1_000_000),
    ]
    number = document["paths"]["/notes/{number}"]["parameters"]
    assert number == [
        {
            "name": "number",
            "in": "path",
            "required": True,
            "schema": {"type": "integer", "minimum": 1, "maximum": 9},
        }
    ]
    assert document["components"]["schemas"]["Note"]["additionalProperties"] is False


def test_the_router_checks_what_the_declaration_says_before_the_handler_runs():
    router, notes = Router(), NoteApi(lambda: "s3cret")

    notes.mount(router)
    assert [router.lane(_request(m, "/notes")) for m in ("POST", "GET", "HEAD")] == [
        "waits",
        "builds",
        "builds",
    ]
    assert router.lane(_request("GET", "/notes/1")) == "waits"  # off the event loop unless declared
    refusals = {
        401: _request("POST", "/notes", b'{"text": "hi"}', client="10.0.0.9"),  # no token
        403: _request("POST", "/notes", b'{"text": "hi"}', authorization=TOKEN, origin="http://evil.example"),
        415: _request("POST", "/notes", b'{"text": "hi"}', authorization=TOKEN, content_type="text/plain"),
        422: _request("GET", "/notes", query="limit=0"),
        404: _request("GET", "/notes/10"),
        405: _request("PUT", "/notes"),
    }
    for status, request in refusals.items():
        with pytest.raises(HttpError) as refused:
            router.dispatch(request)
        assert refused.value.status == status, (status, refused.value.message)
    assert notes.notes == []  # nothing reached a handler that changes anything
    kept = router.dispatch(_request("POST", "/notes", b'{"text": "hi"}', authorization=TOKEN))
    assert kept.status == 201 and notes.notes == ["hi"]
    with pytest.raises(HttpError) as refused:
        router.dispatch(_request("POST", "/notes", b'{"text": 1}', authorization=TOKEN))
    assert refused.value.status == 422 and refused.value.message.startswith("invalid note request: text:")


def test_a_group_that_is_off_answers_404_on_the_loop_and_is_still_described():
    router = Router()
    NoteApi.mount_off(router)
    for method, path in (("POST", "/notes"), ("GET", "/notes"), ("GET", "/notes/1")):
        assert router.lane(_request(method, path)) == "loop"
        with pytest.raises(HttpError) as refused:
            router.dispatch(_request(method, path, client="10.0.0.9"))  # off before any check
        assert (refused.value.status, refused.value.message) == (404, NoteApi.off)
    document = openapi_document(router.endpoints)
    assert "404" in document["paths"]["/notes"]["get"]["responses"]
    lines = landing.endpoint_lines(router.endpoints)
    assert lines[0] == "<li><code>POST</code> /notes: keep a note (loopback only without a token)</li>"
    assert lines[1] == '<li><code>GET</code> <a href="/notes">/notes</a>: the notes</li>'
