"""What every endpoint that starts or ends work shares (/stress, /windows): who may call it, and
JSON bodies validated by pydantic with one 4xx per kind of mistake."""

from __future__ import annotations

import hmac
import ipaddress
import json
import re
from typing import TypeVar

from pydantic import BaseModel, ValidationError

from warptd.config import plain_message
from warptd.http.app import HttpError, Request

Body = TypeVar("Body", bound=BaseModel)
_LOOPBACK_NAMES = {"localhost", "localhost.", "ip6-localhost"}
#: Deepest nesting a body may have (ours need 2: an object holding a list or an object).
MAX_JSON_DEPTH = 16
#: Longest number a body may hold, in characters (a float's 17 digits, sign, point and exponent fit).
MAX_JSON_NUMBER_CHARS = 32
#: A JSON string, or an unterminated one up to the end: every match that starts at a quote succeeds,
#: so the scan is linear (a pattern that can fail there makes each escaped quote of
#: ``b'"' + b'\\"' * n`` start a scan to the end: 34 s for 64 KiB, holding the GIL).
_STRING = re.compile(rb'"(?:[^"\\]|\\.|\\\Z)*(?:"|\Z)', re.S)
_NOT_BRACKETS = bytes(set(range(256)) - set(b"[]{}"))
_EMPTY_PAIR = re.compile(rb"\[\]|\{\}")
_LONG_NUMBER = re.compile(rb"[-+0-9.eE]{%d,}" % (MAX_JSON_NUMBER_CHARS + 1))


def _host_name(host_header: str) -> str:
    host = host_header.strip().lower()
    if host.startswith("["):
        return host[1 : host.find("]")] if "]" in host else host
    return host.rsplit(":", 1)[0] if host.count(":") == 1 else host


def is_loopback_host(host_header: str) -> bool:
    """A Host header naming this machine's loopback (a DNS-rebinding page names its own domain)."""
    name = _host_name(host_header)
    return name in _LOOPBACK_NAMES or is_loopback(name)


def is_loopback(address: str) -> bool:
    try:
        ip = ipaddress.ip_address(address)
    except ValueError:
        return False
    if isinstance(ip, ipaddress.IPv6Address) and ip.ipv4_mapped is not None:
        ip = ip.ipv4_mapped
    return ip.is_loopback


def header_bytes(value: str) -> bytes:
    """A header value's bytes as sent (headers are read as Latin-1, which keeps every byte), to
    compare with a UTF-8 secret: a token outside Latin-1, sent as UTF-8 as curl sends it, matches."""
    return value.encode("latin-1")


def validation_error(exc: ValidationError, what: str) -> HttpError:
    """A 422 naming every field that failed, e.g. ``invalid stress request: dtype: must be one of …``."""
    problems = [
        {"field": ".".join(str(p) for p in e["loc"]) or "body", "message": plain_message(e)}
        for e in exc.errors()
    ]
    summary = "; ".join(f"{p['field']}: {p['message']}" for p in problems)
    return HttpError(422, f"invalid {what} request: {summary}", problems=problems)


def authorize(request: Request, token: str | None, what: str = "stress") -> None:
    """Only deliberate API clients may start or end work: loopback without a token, else the token."""
    # A browser on this host could otherwise start work with a "simple" cross-origin POST, or a
    # DNS-rebinding page could; no legitimate client of this API sends Origin.
    if request.header("origin"):
        raise HttpError(403, "browser cross-origin requests are refused")
    if token is None:
        if not is_loopback(request.client):
            raise HttpError(
                403, f"{what} requests are accepted from loopback clients only unless a token is configured"
            )
        # HTTP/1.0 may omit Host: no Host is no proof of a local client, as a foreign one is not.
        if not is_loopback_host(request.header("host")):
            raise HttpError(403, "without a token, the Host header must name localhost")
        return
    # With basic auth on the listener, Authorization carries the user: the token goes in X-Stress-Token.
    scheme, _, given = request.header("authorization").partition(" ")
    if request.header("x-stress-token"):
        scheme, given = "bearer", request.header("x-stress-token")
    if scheme.lower() != "bearer" or not hmac.compare_digest(header_bytes(given.strip()), token.encode()):
        raise HttpError(401, "missing or wrong bearer token", {"WWW-Authenticate": 'Bearer realm="warptd"'})


def parse_body(request: Request, model: type[Body], what: str) -> Body:
    """The JSON body as ``model``: 415 (not JSON), 400 (not UTF-8, malformed, not an object) or 422
    otherwise. JSON between systems is UTF-8 (RFC 8259 §8.1): ``json.loads`` of bytes would also take
    UTF-16 and UTF-32, which no other endpoint, nor a proxy's checks, reads as this one would."""
    if request.header("content-type").split(";")[0].strip().lower() != "application/json":
        raise HttpError(415, "send the body as Content-Type: application/json")
    try:
        text = request.body.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise HttpError(400, f"the body is not UTF-8 (byte {exc.start}): JSON is UTF-8 (RFC 8259)") from None
    check_json_shape(request.body)
    try:
        raw = json.loads(text)
    except ValueError as exc:
        raise HttpError(400, f"malformed JSON body: {exc}") from None
    if not isinstance(raw, dict):
        raise HttpError(400, "the body must be a JSON object")
    try:
        return model.model_validate(raw)
    except ValidationError as exc:
        raise validation_error(exc, what) from None


def check_json_shape(body: bytes) -> None:
    """400 for a body nested deeper than ``MAX_JSON_DEPTH`` (or with unbalanced brackets) or holding
    a number longer than ``MAX_JSON_NUMBER_CHARS``, found before parsing: the parser recurses once
    per level (30,000 ``[`` raise RecursionError) and turns every digit of a number into an int."""
    outside_strings = _STRING.sub(b'""', body)
    if _LONG_NUMBER.search(outside_strings):
        raise HttpError(400, f"malformed JSON body: a number over {MAX_JSON_NUMBER_CHARS} characters")
    brackets = outside_strings.translate(None, _NOT_BRACKETS)
    for _ in range(MAX_JSON_DEPTH):  # each pass takes off the innermost level (in C, not per byte)
        if not brackets:
            break
        brackets = _EMPTY_PAIR.sub(b"", brackets)
    if brackets:  # deeper than the passes, or brackets that never close (30,000 "[")
        raise HttpError(
            400, f"malformed JSON body: brackets unbalanced or nested deeper than {MAX_JSON_DEPTH} levels"
        )
