"""The HTML report of a recording: opened in a real headless chromium with no network, it draws every
data point of the recording and logs no console error; rendered in a child process it is the same
page; ``warptd report`` writes it from a saved recording."""

from __future__ import annotations

import json
import re
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.browser import browse
from tests.helpers import http, wait_until
from tests.recordings import finished_job, sample_recording
from warptd.daemon import Daemon
from warptd.recording.report import render_html


def _on_a_terminal(command: list[str], timeout: float = 60) -> tuple[int, bytes, str]:
    """Run ``command`` with a real pty as its stdout, as a person's shell would: its exit code, what
    it showed on the terminal and its stderr."""
    import os
    import pty
    import select

    primary, secondary = pty.openpty()
    child = subprocess.Popen(command, stdout=secondary, stderr=subprocess.PIPE, text=True)
    os.close(secondary)
    shown, deadline = bytearray(), time.monotonic() + timeout
    try:
        while time.monotonic() < deadline:
            if not select.select([primary], [], [], 1)[0]:
                continue
            try:
                chunk = os.read(primary, 1 << 16)
            except OSError:  # EIO: the child closed the terminal
                break
            if not chunk:
                break
            shown += chunk
        return child.wait(timeout=max(1.0, deadline - time.monotonic())), bytes(shown), child.stderr.read()
    finally:
        os.close(primary)
        child.kill()
        child.stderr.close()


@pytest.mark.slow
def test_warptd_report_refuses_a_terminal_and_writes_to_a_pipe(tmp_path):
    """Without -o, megabytes of HTML are not for a terminal: one line saying how (exit 2, nothing on
    it); when stdout is a pipe or a file, the page goes there as before."""
    recording = sample_recording(count=5)
    source = tmp_path / "run.json"
    source.write_text(recording.model_dump_json())
    command = [sys.executable, "-m", "warptd", "report", str(source)]
    code, shown, error = _on_a_terminal(command)
    assert (code, shown[:200]) == (2, b"")
    assert error.count("\n") == 1 and "-o FILE" in error and "redirect" in error
    piped = subprocess.run(command, check=False, capture_output=True, text=True, timeout=60)
    assert piped.returncode == 0 and piped.stdout == render_html(recording) and piped.stderr == ""


@pytest.mark.slow
def test_report_module_stays_out_of_a_fresh_interpreter_until_rendering():
    """Importing what the daemon imports (routes, renderer) does not import plotly."""
    code = (
        "import sys; import warptd.daemon, warptd.http.reports, warptd.recording.render;"
        "assert 'plotly' not in sys.modules, 'plotly imported'; print('ok')"
    )
    result = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
        cwd=Path(__file__).parents[2],
    )
    assert result.stdout.strip() == "ok", result.stderr


@pytest.fixture
def daemon(settings):
    settings.backends = ["cpu"]
    d = Daemon(settings)
    d.start()
    assert wait_until(lambda: http(d.port, "GET", "/readyz")[0] == 200)
    yield d
    d.stop()


@pytest.mark.slow
def test_stress_report_over_http_is_the_page_and_errors_are_json(daemon):
    recording = sample_recording(count=12)
    job = finished_job(daemon.stress, recording)
    status, headers, body = http(daemon.port, "GET", f"/stress/{job.id}/report")
    assert status == 200 and headers["content-type"] == "text/html; charset=utf-8"
    assert body == render_html(recording).encode()
    assert "default-src 'none'" in headers["content-security-policy"]
    assert headers["content-disposition"] == f'inline; filename="warptd-stress-{job.id}.html"'
    status, headers, body = http(daemon.port, "GET", "/stress/ffffffffffff/report")
    assert (status, json.loads(body)) == (404, {"error": "no stress job 'ffffffffffff'"})
    bare = finished_job(daemon.stress, None)
    status, _, body = http(daemon.port, "GET", f"/stress/{bare.id}/report")
    assert (status, json.loads(body)) == (404, {"error": f"no recording for stress job {bare.id}"})
    running = finished_job(daemon.stress, sample_recording(count=3), status="running", job_id="running00000")
    status, _, body = http(daemon.port, "GET", f"/stress/{running.id}/report")
    assert status == 409 and "still running" in json.loads(body)["error"]
    running.done.set()  # nothing to wait for when the daemon stops


@pytest.mark.slow
def test_stress_report_served_by_the_daemon_draws_in_chromium_under_its_csp(daemon):
    job = finished_job(daemon.stress, sample_recording())  # with its power-cap episode
    dom, console = browse(f"http://127.0.0.1:{daemon.port}/stress/{job.id}/report")
    assert console == [], console  # a CSP violation or a failed load would be logged here
    plots = re.findall(r'<div id="plot-(\w+)" class="[^"]*js-plotly-plot', dom)
    assert plots == ["power", "temperature", "clocks", "utilization", "throttle", "energy"]
    assert dom.count('<div class="plot-container plotly"') == 6
    assert len(re.findall(r'<g class="trace (scatter|bars)', dom)) == 3 + 2 + 4 + 4 + 1 + 3


@pytest.mark.slow
def test_the_daemon_serves_reports_without_importing_plotly():
    """In a fresh interpreter (nothing the tests imported hides a leak): three reports of a
    600-sample recording, then plotly must not be in the daemon and its RSS must not have grown by
    a plotting library's worth."""
    result = subprocess.run(
        [sys.executable, "-m", "tests.report_probe"],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
        cwd=Path(__file__).parents[2],
    )
    assert result.returncode == 0, result.stderr[-3000:]
    measured = json.loads(result.stdout.strip().splitlines()[-1])
    assert measured["statuses"] == [200, 200, 200] and measured["report_bytes"] > 4_000_000
    assert measured["plotly_in_daemon"] is False
    # Three 5 MB reports (the client in the same process) add ~11 MiB with glibc's mmap threshold
    # pinned; unpinned, or with plotly imported here, it is 26 MiB or more.
    assert measured["rss_after_mib"] - measured["rss_before_mib"] < 22, measured
