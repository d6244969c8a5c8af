"""Content negotiation by q-values: ``q=0`` refuses, the highest weight wins (issue 39, finding 11)."""

from __future__ import annotations

import pytest

from warptd.http.negotiation import accepts_gzip, preferred_media_type

FORMATS = ("text/plain", "application/openmetrics-text")
#: What Prometheus 3 sends (scrape_protocols' default, without protobuf).
PROMETHEUS = (
    "application/openmetrics-text;version=1.0.0;escaping=allow-utf-8;q=0.5,"
    "application/openmetrics-text;version=0.0.1;q=0.4,text/plain;version=1.0.0;escaping=allow-utf-8;q=0.3,"
    "text/plain;version=0.0.4;q=0.2,*/*;q=0.1"
)


@pytest.mark.parametrize(
    ("accept", "chosen"),
    [
        ("", "text/plain"),
        ("*/*", "text/plain"),  # curl: the first offer
        (PROMETHEUS, "application/openmetrics-text"),
        ("application/openmetrics-text; version=1.0.0", "application/openmetrics-text"),
        ("application/openmetrics-text;q=0, text/plain", "text/plain"),  # was OpenMetrics
        ("application/openmetrics-text;q=0", None),
        ("text/plain;q=0, */*", "application/openmetrics-text"),
        ("application/openmetrics-text, text/plain", "application/openmetrics-text"),  # listed first
        ("text/plain, application/openmetrics-text", "text/plain"),
        ("text/plain;q=0.2, application/*;q=0.9", "application/openmetrics-text"),
        ("application/json", None),
        ("TEXT/PLAIN;Q=0, application/openmetrics-text;q=0.1", "application/openmetrics-text"),
        ("text/plain;q=bogus, application/openmetrics-text;q=0.1", "application/openmetrics-text"),
        (",,;", None),
    ],
)
def test_the_preferred_media_type(accept, chosen):
    assert preferred_media_type(accept, FORMATS) == chosen


@pytest.mark.parametrize(
    ("accept_encoding", "gzip"),
    [
        ("", False),
        ("gzip", True),
        ("gzip, deflate, br, zstd", True),
        ("gzip;q=0, identity", False),  # was gzip
        ("gzip;q=0", False),
        ("*", True),
        ("*;q=0", False),
        ("*;q=0, gzip;q=0.5", True),
        ("identity;q=1, gzip;q=0.5", False),
        ("identity;q=0.5, gzip", True),
        ("identity;q=0, gzip;q=0.1", True),
        ("GZIP", True),
        ("x-gzip", True),
        ("gzip;q=nonsense", False),
        ("deflate", False),
    ],
)
def test_gzip_by_weight(accept_encoding, gzip):
    assert accepts_gzip(accept_encoding) is gzip
