"""The request target's forms (RFC 9112 §3.2) and h11's errors without the client's bytes."""

from __future__ import annotations

import h11
import pytest

from warptd.http.app import HttpError
from warptd.http.head import Target, protocol_problem, split_target


@pytest.mark.parametrize(
    ("target", "split"),
    [
        ("/metrics", Target("/metrics", "")),
        ("/windows?limit=2&offset=4", Target("/windows", "limit=2&offset=4")),
        ("//evil.example/windows", Target("//evil.example/windows", "")),  # a path
        ("/a?b?c", Target("/a", "b?c")),
        ("*", Target("*", "")),
        ("http://evil.example/windows", Target("/windows", "", "evil.example")),
        ("https://[::1]:9465/windows?x=1", Target("/windows", "x=1", "[::1]:9465")),
        ("http://localhost", Target("/", "", "localhost")),
    ],
)
def test_the_forms_of_a_target(target, split):
    assert split_target(target) == split


@pytest.mark.parametrize(
    "target",
    ["ftp://evil.example/x", "http:///windows", "http://user@localhost/", "metrics", "localhost:9465", ""],
)
def test_other_targets_are_400(target):
    with pytest.raises(HttpError) as refused:
        split_target(target)
    assert refused.value.status == 400


def test_h11s_messages_lose_the_bytes_they_echo():
    connection = h11.Connection(h11.SERVER)
    connection.receive_data(b"GET / HTTP/1.1\r\nHost: x\r\n<img src=x> \xff\r\n\r\n")
    with pytest.raises(h11.RemoteProtocolError) as refused:
        connection.next_event()
    assert "bytearray(" in str(refused.value)
    assert protocol_problem(refused.value) == "illegal header line"
    assert protocol_problem(h11.RemoteProtocolError("Missing mandatory Host: header", 400)) == (
        "Missing mandatory Host: header"
    )
    assert protocol_problem(h11.RemoteProtocolError("", 400)) == "malformed request"
