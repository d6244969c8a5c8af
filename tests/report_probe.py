"""The daemon's memory before and after serving reports, and whether plotly entered it.

Run alone: ``python -m tests.report_probe`` prints one JSON line (RSS in MiB); tests/test_report.py
runs it in a fresh interpreter, so nothing the test process imported can hide a leak.
"""

from __future__ import annotations

import json
import sys
import tempfile
import time

import psutil

from tests.helpers import http, wait_until
from tests.recordings import finished_job, sample_recording
from warptd.config import load_settings
from warptd.daemon import Daemon


def measure(reports: int = 3, points: int = 600) -> dict[str, object]:
    """Serve ``reports`` reports of a ``points``-sample recording: RSS before and after, seconds each."""
    with tempfile.TemporaryDirectory() as sysfs:
        settings = load_settings(
            listen="127.0.0.1:0", backends=["cpu"], sysfs=sysfs, interval=0.2, log_level="error"
        )
        daemon = Daemon(settings)
        daemon.start()
        try:
            assert wait_until(lambda: http(daemon.port, "GET", "/readyz")[0] == 200)
            job = finished_job(daemon.stress, sample_recording(count=points))
            process = psutil.Process()
            before = process.memory_info().rss
            seconds, statuses, size = [], [], 0
            for _ in range(reports):
                started = time.monotonic()
                status, _, body = http(daemon.port, "GET", f"/stress/{job.id}/report")
                seconds.append(round(time.monotonic() - started, 2))
                statuses.append(status)
                size = len(body)
            after = process.memory_info().rss
        finally:
            daemon.stop()
    return {
        "statuses": statuses,
        "report_bytes": size,
        "seconds_per_report": seconds,
        "rss_before_mib": round(before / 2**20, 1),
        "rss_after_mib": round(after / 2**20, 1),
        "plotly_in_daemon": any(name.split(".")[0] == "plotly" for name in sys.modules),
    }


if __name__ == "__main__":
    print(json.dumps(measure()))
