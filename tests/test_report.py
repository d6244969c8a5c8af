"""The HTML report of a recording: opened in a real headless chromium with no network, it draws every
data point of the recording and logs no console error; rendered in a child process it is the same
page; ``warptd report`` writes it from a saved recording."""

from __future__ import annotations

import html
import json
import re
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.browser import browse
from tests.helpers import http, wait_until
from tests.plotted import plotted, traces, with_probe
from tests.recordings import HOSTILE, finished_job, sample_recording
from warptd.cli import main
from warptd.daemon import Daemon
from warptd.http.app import HttpError, Request, Router
from warptd.http.stress_routes import StressApi
from warptd.recording.glance import throttle_intervals
from warptd.recording.render import ReportError, render_report
from warptd.recording.schema import Point, Recording

pytest.importorskip("plotly")

from plotly.offline import get_plotlyjs

from warptd.recording.report import render_html


def expected_series(recording: Recording, value) -> dict[str, list[list[float]]]:
    """What a time-series plot must hold: each target's (t, value) where the value is present."""
    series = {}
    for target in recording.targets:
        points = [[p.t, value(p)] for p in target.points if value(p) is not None]
        if points:
            series[target.id] = points
    return series


def assert_draws_the_recording(dom: str, console: list[str], recording: Recording) -> None:
    assert console == [], console
    probe = plotted(dom)
    assert probe["errors"] == [], probe["errors"]
    plots = probe["plots"]
    assert set(plots) == {f"plot-{name}" for name in ("power", "temperature", "clocks", "utilization")} | {
        "plot-throttle",
        "plot-energy",
    }
    for plot in plots.values():
        assert plot["drawn"] == len(plot["traces"]) > 0  # one SVG trace group per trace
    assert traces(plots, "plot-power") == expected_series(recording, lambda p: p.power_watts)
    # The RAPL domain has no temperature sensor: no trace for it, not a line at 0.
    assert traces(plots, "plot-temperature") == expected_series(recording, lambda p: p.temperature_celsius)
    assert "rapl:package-0" not in traces(plots, "plot-temperature")
    clocks = traces(plots, "plot-clocks")
    assert clocks["nvidia:0 sm"] == [[p.t, p.clocks_hertz["sm"]] for p in recording.targets[0].points]
    assert set(clocks) == {"nvidia:0 sm", "nvidia:0 memory", "nvidia:1 sm", "nvidia:1 memory"}
    usage = traces(plots, "plot-utilization")
    gpu = recording.targets[0]
    assert usage["nvidia:0 utilization"] == [[p.t, p.utilization_ratio] for p in gpu.points]
    assert usage["nvidia:0 sm_active"] == [[p.t, p.activity["sm_active"]] for p in gpu.points]
    # The scripted power cap holds from sample 20 (10 s) until sample 26 (13 s): one bar, base 10, 3 s long.
    assert traces(plots, "plot-throttle") == {"nvidia:0 power_cap": [[10.0, 3.0, 0]]}
    energy = traces(plots, "plot-energy")  # a bar per device, in its colour
    assert {name: bars[0][1] for name, bars in energy.items()} == pytest.approx(
        {t.id: t.energy_joules for t in recording.targets}
    )
    assert 'id="evil"' not in dom.replace(html.escape(HOSTILE, quote=False), "")  # text, never an element


@pytest.mark.slow
def test_report_in_chromium_draws_every_point_offline_without_console_errors(tmp_path):
    recording = sample_recording()
    page = tmp_path / "report.html"
    page.write_text(with_probe(render_html(recording)), encoding="utf-8")
    dom, console = browse(page.as_uri())
    assert_draws_the_recording(dom, console, recording)
    summary = dom.split('<table id="summary">', 1)[1].split("</table>", 1)[0]
    body = summary.split("<tbody>", 1)[1]
    rows = [re.findall(r"<td[^>]*>(.*?)</td>", row) for row in re.findall(r"<tr>(.*?)</tr>", body)]
    assert [row[0] for row in rows] == ["nvidia:0", "nvidia:1", "rapl:package-0"]
    gpu = recording.targets[0]
    assert rows[0][3:8] == [
        "40",
        f"{gpu.energy_joules:,.1f} J",
        "energy counter",
        f"{gpu.power_mean_watts:,.1f} W",
        f"{gpu.power_peak_watts:,.1f} W",
    ]
    assert rows[1][1] == html.escape(HOSTILE, quote=False)  # the hostile model is shown as text
    assert rows[2][8] == "\N{EN DASH}"  # no temperature on a RAPL domain: a dash, not 0


def test_the_page_loads_nothing_from_anywhere():
    page = render_html(sample_recording())
    assert not re.search(r"<(script|img|iframe)[^>]*\bsrc\s*=", page, re.I)
    assert not re.search(r"<link\b", page, re.I)
    assert not re.search(r"@import|url\(\s*['\"]?https?:", page, re.I)
    assert page.count("Plotly.newPlot(") == 6  # one call per figure
    assert page.count(get_plotlyjs()[:500]) == 1  # plotly.js inlined once


def test_absent_readings_leave_gaps_and_empty_sections_say_so():
    recording = sample_recording(count=6)
    for target in recording.targets:
        target.energy_joules = None
        for point in target.points:
            point.throttle_active, point.clocks_hertz = [], {}
    recording.targets[0].points[2].power_watts = None
    page = render_html(recording)
    assert "No throttle reason was active." in page and "No clock readings" in page
    assert "No energy figure" in page and 'id="plot-energy"' not in page
    power = json.loads(re.search(r'Plotly.newPlot\(\s*"plot-power",\s*(\[.*?\]),\s*\{', page, re.S).group(1))
    assert power[0]["x"] == [0.0, 0.5, 1.5, 2.0, 2.5]  # t=1.0 had no reading: left out, not 0


def test_throttle_spans_merge_and_the_last_sample_lasts_one_interval():
    points = [Point(t=t, throttle_active=r) for t, r in [(0, ["a"]), (1, ["a"]), (2, []), (3, ["a"])]]
    assert throttle_intervals(points, "a", tail=0.5) == [(0, 2), (3, 3.5)]
    assert throttle_intervals(points, "b", tail=0.5) == []


def test_the_child_process_renders_the_same_page():
    recording = sample_recording(count=8)
    assert render_report(recording) == render_html(recording).encode()


def test_the_child_process_fails_with_a_status_and_a_reason(tmp_path, monkeypatch):
    recording = sample_recording(count=4)
    with pytest.raises(ReportError) as slow:
        render_report(recording, timeout=0.05)
    assert slow.value.status == 503 and "took over 0.05 s" in str(slow.value)
    hidden = tmp_path / "plotly"  # a plotly that is not there, ahead of the real one on the child's path
    hidden.mkdir()
    (hidden / "__init__.py").write_text(
        "raise ModuleNotFoundError(\"No module named 'plotly'\", name='plotly')\n"
    )
    monkeypatch.setenv("PYTHONPATH", str(tmp_path))
    with pytest.raises(ReportError) as missing:
        render_report(recording)
    assert missing.value.status == 503 and "install the report extra" in str(missing.value)
    assert "[report]" in str(missing.value)


def test_warptd_report_writes_the_page_and_refuses_a_non_recording(tmp_path, capsys):
    recording = sample_recording(count=5)
    source = tmp_path / "run.json"
    source.write_text(recording.model_dump_json())
    assert main(["report", str(source), "-o", str(tmp_path / "run.html")]) == 0
    assert (tmp_path / "run.html").read_text(encoding="utf-8") == render_html(recording)
    assert "run.html" in capsys.readouterr().out
    broken = tmp_path / "broken.json"
    broken.write_text(json.dumps({**recording.model_dump(mode="json"), "duration_seconds": "long"}))
    assert main(["report", str(broken)]) == 2
    assert capsys.readouterr().err == (
        f"warptd report: {broken}: not a recording: duration_seconds: "
        "Input should be a valid number, unable to parse string as a number\n"
    )
    assert main(["report", str(tmp_path / "absent.json")]) == 2
    assert "cannot read" in capsys.readouterr().err


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


def test_report_help_names_its_arguments(capsys):
    with pytest.raises(SystemExit):
        main(["report", "--help"])
    text = capsys.readouterr().out
    assert "RECORDING.json" in text and "--output" in text and "--backend" not in text


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
        cwd=Path(__file__).parents[1],
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


def test_report_route_says_stress_is_disabled_without_a_manager():
    router = Router()
    StressApi.add(router, None, lambda: None)
    request = Request("GET", "/stress/abc/report", {}, {}, b"", "127.0.0.1")
    with pytest.raises(HttpError) as refused:
        router.dispatch(request)
    assert refused.value.status == 404 and "--no-stress" in refused.value.message


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
        cwd=Path(__file__).parents[1],
    )
    assert result.returncode == 0, result.stderr[-3000:]
    measured = json.loads(result.stdout.strip().splitlines()[-1])
    assert measured["statuses"] == [200, 200, 200] and measured["report_bytes"] > 4_000_000
    assert measured["plotly_in_daemon"] is False
    # Three 5 MB reports (the client in the same process) add ~11 MiB with glibc's mmap threshold
    # pinned; unpinned, or with plotly imported here, it is 26 MiB or more.
    assert measured["rss_after_mib"] - measured["rss_before_mib"] < 22, measured


def test_a_third_report_is_refused_at_once_while_two_render():
    """Busy renderers answer 503 without waiting: a waiting request would hold an HTTP handler thread."""
    from warptd.recording import render

    held = [render._slots.acquire(blocking=False) for _ in range(render.MAX_RENDERS)]
    try:
        assert all(held)
        started = time.monotonic()
        with pytest.raises(render.ReportError) as refused:
            render.render_report(sample_recording(count=3))
        assert refused.value.status == 503 and time.monotonic() - started < 1.0
    finally:
        for _ in held:
            render._slots.release()
