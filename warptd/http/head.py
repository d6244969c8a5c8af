"""What h11 leaves to the server in a request head: which versions are served, framing that must not
be trusted, the request target's forms, and h11's errors told without echoing the client's bytes."""

from __future__ import annotations

import re
from dataclasses import dataclass
from urllib.parse import urlsplit

import h11

from warptd.http.app import HttpError

#: The versions served; h11 parses any ``HTTP/N.N`` (HTTP/2.0 included) as if it were 1.1.
VERSIONS = frozenset({b"1.0", b"1.1"})
_SCHEME = re.compile(r"^[A-Za-z][A-Za-z0-9+.-]*://")
#: h11 ends some messages with the offending bytes' repr: ``illegal header line: bytearray(b'…')``.
_ECHOED = re.compile(r":?\s*(?:bytearray\(|b['\"]).*\Z", re.S)


@dataclass(frozen=True, slots=True)
class Target:
    path: str
    query: str
    authority: str | None = None  # the host an absolute-form target names


def split_target(target: str) -> Target:
    """The request target's path and query (RFC 9112 §3.2): origin form (``/a?b``, ``//a`` a path
    too), absolute form (``http://host/a``, whose host replaces the Host header's), or ``*``
    (OPTIONS). Anything else (a CONNECT's authority form, a bare word, another scheme) is 400."""
    if target.startswith("/"):
        path, _, query = target.partition("?")
        return Target(path, query)
    if target == "*":
        return Target(target, "")
    if _SCHEME.match(target):
        url = urlsplit(target)
        if url.scheme.lower() not in ("http", "https") or not url.hostname or "@" in url.netloc:
            raise HttpError(400, "the request target must be a path or an http(s) URL with a host")
        return Target(url.path or "/", url.query, url.netloc)
    raise HttpError(400, "the request target must be a path or an http(s) URL with a host")


def check_framing(headers: dict[str, str], version: bytes) -> None:
    """400 for a body framed two ways (RFC 9112 §6.1): Content-Length beside Transfer-Encoding, which
    a proxy that trusts the length reads as another request than this server does (request
    smuggling), or Transfer-Encoding in HTTP/1.0, which has none. The error closes the connection."""
    if "transfer-encoding" not in headers:
        return
    if "content-length" in headers:
        raise HttpError(400, "Content-Length and Transfer-Encoding together: the body's length is ambiguous")
    if version == b"1.0":
        raise HttpError(400, "Transfer-Encoding in an HTTP/1.0 request")


def protocol_problem(exc: h11.RemoteProtocolError) -> str:
    """h11's message without the client's bytes it may end with (a Python repr in a 400's body)."""
    return _ECHOED.sub("", str(exc)).strip() or "malformed request"
