"""docs/http.md's table of endpoints is written from the declarations (warptd/http/openapi.py), and the
OpenAPI document written from them is valid OpenAPI 3.1, without a daemon."""

from __future__ import annotations

from pathlib import Path

import pytest

from warptd.http.openapi import BEGIN, END, endpoints, endpoints_markdown, openapi_document

HTTP_MD = Path(__file__).parents[2] / "docs" / "http.md"


def test_the_endpoint_table_of_http_md_is_current():
    text = HTTP_MD.read_text()
    begin, end = text.index(BEGIN), text.index(END) + len(END)
    assert text[begin:end] == endpoints_markdown(), (
        "run python -m warptd.http.openapi and paste it over the table of docs/http.md"
    )


def test_the_document_is_valid_openapi_3_1():
    """Against the OpenAPI 3.1 schema that schemathesis (which the live test runs) carries."""
    jsonschema = pytest.importorskip("jsonschema")
    definitions = pytest.importorskip("schemathesis.specs.openapi.definitions")
    document = openapi_document(endpoints())
    jsonschema.Draft202012Validator(definitions.OPENAPI_31).validate(document)
    for path, item in document["paths"].items():
        named = {parameter["name"] for parameter in item.get("parameters", ())}
        assert named == {part[1:-1] for part in path.split("/") if part.startswith("{")}, path


def test_every_endpoint_says_what_it_is_and_answers():
    for declared in endpoints():
        assert declared.summary and declared.answers, (declared.method, declared.path)
        assert declared.lane != "loop" or not (declared.protected or declared.body), declared.path
