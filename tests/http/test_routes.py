"""/metrics negotiates its format and coding by q-values, and says what it varies by (issue 39,
finding 11): ``gzip;q=0`` got gzip, ``application/openmetrics-text;q=0`` OpenMetrics, and no Vary."""

from __future__ import annotations

import gzip

import pytest

from tests.helpers import http, wait_until
from warptd.daemon import Daemon

pytestmark = pytest.mark.slow  # a daemon each


@pytest.fixture
def daemon(settings, fake_nvml):
    d = Daemon(settings)
    d.start()
    assert wait_until(lambda: http(d.port, "GET", "/readyz")[0] == 200)
    yield d
    d.stop()


@pytest.mark.parametrize(
    ("accept", "accept_encoding", "openmetrics", "gzipped"),
    [
        ("application/openmetrics-text;q=0, text/plain", "gzip;q=0, identity", False, False),
        ("text/plain;q=0.1, application/openmetrics-text;q=0.9", "identity;q=0.5, gzip", True, True),
        ("*/*", "", False, False),
        ("application/json", "br", False, False),  # neither offered: text, as client_golang answers
    ],
)
def test_metrics_by_weight(daemon, accept, accept_encoding, openmetrics, gzipped):
    status, headers, body = http(
        daemon.port, "GET", "/metrics", headers={"Accept": accept, "Accept-Encoding": accept_encoding}
    )
    assert status == 200
    assert headers["vary"] == "Accept, Accept-Encoding"  # a cache keeps one answer per format and coding
    assert headers["content-type"].startswith(
        "application/openmetrics-text" if openmetrics else "text/plain; version=0.0.4"
    )
    assert ("content-encoding" in headers) is gzipped
    text = (gzip.decompress(body) if gzipped else body).decode()
    assert text.endswith("# EOF\n") is openmetrics
    assert "warptd_device_up{" in text
