"""The HTML report of a recording: opened in a real headless chromium with no network, it draws every
data point of the recording and logs no console error; rendered in a child process it is the same
page; ``warptd report`` writes it from a saved recording."""

from __future__ import annotations

import html
import json
import re

import pytest
from plotly.offline import get_plotlyjs

from tests.browser import browse
from tests.plotted import plotted, traces, with_probe
from tests.recordings import HOSTILE, sample_recording
from warptd.recording.report import render_html
from warptd.recording.schema import Recording


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
