"""A report read at a glance, checked in a real headless chromium: one colour per device in every
plot, small multiples instead of one chart of many lines, ticks that differ, energy bars labelled with
their joules (and carbon and cost), and a header that sums the recording up."""

from __future__ import annotations

import re

import pytest

from tests.browser import browse
from tests.plotted import plotted, traces, with_probe
from tests.recordings import busy_recording, sample_recording
from warptd.cli import main
from warptd.recording.glance import energy_source, status_text
from warptd.recording.palette import COLORS, assign, style
from warptd.recording.schema import Recording, TargetRecording

pytest.importorskip("plotly")

from warptd.recording.report import render_html


def drawn(recording: Recording, tmp_path) -> dict:
    """The report of ``recording`` as chromium drew it (no console error, no page error)."""
    page = tmp_path / "report.html"
    page.write_text(with_probe(render_html(recording)), encoding="utf-8")
    dom, console = browse(page.as_uri())
    assert console == [], console
    probe = plotted(dom)
    assert probe["errors"] == [], probe["errors"]
    return {"dom": dom, **probe}


def device_of(trace: dict, ids: list[str]) -> str | None:
    """The device a trace draws: its name, or the device its name starts with (``nvidia:0 power_cap``)."""
    first = trace["name"].split(" ")[0]
    return first if first in ids else None


@pytest.mark.slow
def test_every_device_keeps_one_colour_in_every_plot_and_panels_hold_one_line_per_device(tmp_path):
    recording = busy_recording()  # 12 GPUs and a package: more than the palette's ten colours
    ids = [t.id for t in recording.targets]
    plots = drawn(recording, tmp_path)["plots"]
    looks: dict[str | None, set[tuple[str, str | None]]] = {i: set() for i in ids}
    for plot in plots.values():
        for trace in plot["traces"]:
            looks.setdefault(device_of(trace, ids), set()).add((trace["color"], trace["dash"]))
    unnamed = looks.pop(None, None)
    colours = {i: {c for c, _ in seen} for i, seen in looks.items()}
    assert all(len(c) == 1 for c in colours.values()), colours  # lines and bars alike
    lines = {i: {(c, d) for c, d in seen if d is not None} for i, seen in looks.items()}
    assert all(len(line) == 1 for line in lines.values()), lines
    assert len({next(iter(line)) for line in lines.values() if line}) == len(ids)  # no two devices alike
    assert unnamed is None, "a trace that draws no one device (the energy bars are named by device)"
    for plot_id in ("plot-clocks", "plot-utilization"):
        readings: dict[str, list[str]] = {}
        for trace in plots[plot_id]["traces"]:
            readings.setdefault(trace["reading"], []).append(trace["name"])
        assert all(sorted(names) == sorted(set(names)) for names in readings.values())  # a line per device
        assert max(len(names) for names in readings.values()) <= len(ids)
    assert set(r for r in {t["reading"] for t in plots["plot-utilization"]["traces"]}) == {
        "utilization",
        "sm_active",
        "pipe_tensor",
        "dram_bandwidth",
    }
    usage, clocks = traces(plots, "plot-utilization"), traces(plots, "plot-clocks")
    for target in recording.targets[:-1]:
        for name in ("sm_active", "pipe_tensor", "dram_bandwidth"):
            assert usage[f"{target.id} {name}"] == [[p.t, p.activity[name]] for p in target.points]
        assert usage[f"{target.id} utilization"] == [[p.t, p.utilization_ratio] for p in target.points]
        for name in ("graphics", "memory", "sm", "video"):
            assert clocks[f"{target.id} {name}"] == [[p.t, p.clocks_hertz[name]] for p in target.points]


@pytest.mark.slow
def test_no_axis_repeats_a_tick_label_even_for_steady_readings(tmp_path):
    recording = sample_recording(count=10)
    for target in recording.targets:
        for point in target.points:
            point.clocks_hertz = {"memory": 2.6e9} if target.kind == "device" else {}
            point.temperature_celsius = 41.0 if target.kind == "device" else None
    plots = drawn(recording, tmp_path)["plots"]
    steady = [[p.t, 2.6e9] for p in recording.targets[0].points]
    assert traces(plots, "plot-clocks")["nvidia:0 memory"] == steady
    for plot_id, plot in plots.items():
        for panel in plot["ticks"]:
            for axis in ("x", "y"):
                assert len(panel[axis]) == len(set(panel[axis])), (plot_id, axis, panel[axis])
    clock_ticks = plots["plot-clocks"]["ticks"][0]["y"]
    assert len(clock_ticks) >= 3 and "2.6G" in clock_ticks


@pytest.mark.slow
def test_energy_bars_say_their_joules_source_carbon_and_cost(tmp_path, capsys):
    recording = sample_recording(count=12)
    source, output = tmp_path / "run.json", tmp_path / "run.html"
    source.write_text(recording.model_dump_json())
    argv = ["report", str(source), "-o", str(output), "--carbon-intensity", "400", "--energy-price", "0.25"]
    assert main(argv) == 0
    capsys.readouterr()
    output.write_text(with_probe(output.read_text(encoding="utf-8")), encoding="utf-8")
    dom, console = browse(output.as_uri())
    assert console == []
    labels = plotted(dom)["plots"]["plot-energy"]["barText"]
    words = {"counter": "energy counter", "integrated": "integrated power"}
    expected = []
    for target in recording.targets:
        joules = target.energy_joules
        assert (joules is not None and joules >= 1000) or target.kind == "domain"
        shown = f"{joules:,.0f} J" if joules >= 1000 else f"{joules:,.1f} J"
        grams, cost = joules / 3.6e6 * 400, joules / 3.6e6 * 0.25
        expected.append([shown, words[target.energy_source], f"{grams:,.3g} g CO2e", f"cost {cost:,.4g}"])
    assert labels == expected
    totals = re.search(r'<p class="totals">(.*?)</p>', dom).group(1)
    total = recording.energy_joules
    assert f"<b>carbon</b>{total / 3.6e6 * 400:,.3g} g CO2e" in totals
    assert f"<b>cost</b>{total / 3.6e6 * 0.25:,.4g}" in totals


@pytest.mark.slow
def test_the_header_sums_up_duration_energy_power_and_throttling_per_device(tmp_path):
    recording = sample_recording()
    dom = drawn(recording, tmp_path)["dom"]
    totals = re.search(r'<p class="totals">(.*?)</p>', dom).group(1)
    assert f"<b>duration</b>{recording.duration_seconds:.1f} s" in totals
    assert f"<b>energy</b>{recording.energy_joules:,.0f} J" in totals
    table = dom.split('<table id="glance-devices">', 1)[1].split("</table>", 1)[0]
    rows = re.findall(r"<tr>(.*?)</tr>", table.split("<tbody>", 1)[1])
    styles = assign(t.id for t in recording.targets)
    for row, target in zip(rows, recording.targets, strict=True):
        assert f'style="background:{styles[target.id].color}"' in row  # the colour of its lines
        cells = [re.sub(r"<[^>]+>", "", cell) for cell in re.findall(r"<td[^>]*>(.*?)</td>", row)]
        assert cells[0] == target.id
        assert cells[2:4] == [f"{target.power_mean_watts:,.1f} W", f"{target.power_peak_watts:,.1f} W"]
    # The scripted power cap: samples 20-25, each holding until the next: 10 s to 13 s.
    assert re.sub(r"<[^>]+>", "", re.findall(r"<td[^>]*>(.*?)</td>", rows[0])[4]) == "3.0 s"


def test_a_window_ended_when_asked_says_ended_once():
    window = busy_recording(gpus=1, count=3)
    assert status_text(window) == "ended"
    assert "ended (ended)" not in render_html(window)
    exited = window.model_copy(update={"end_reason": "command_exited"})
    assert status_text(exited) == "ended: the command exited"
    assert status_text(window.model_copy(update={"status": "open", "end_reason": None})) == "open"


def test_palette_styles_stay_distinct_past_its_colours_and_follow_the_order_given():
    styles = [style(i) for i in range(60)]
    assert len({(s.color, s.dash) for s in styles}) == 60
    assert len({(s.color, s.pattern) for s in styles}) == 60
    assert [s.color for s in styles[:10]] == list(COLORS) and {s.dash for s in styles[:10]} == {"solid"}
    assigned = assign(["nvidia:1", "nvidia:0", "nvidia:1"])
    assert list(assigned) == ["nvidia:1", "nvidia:0"] and assigned["nvidia:1"] == style(0)


def test_an_energy_method_this_warptd_does_not_know_is_shown_by_its_name():
    """The recording may name methods newer than this report (power x duration): shown, never dropped."""
    known = TargetRecording(id="nvidia:0", kind="device", backend="nvidia", energy_source="integrated")
    assert energy_source(known) == "integrated power"
    newer = TargetRecording.model_construct(id="gaudi:0", energy_source="power_times_duration")
    assert energy_source(newer) == "power \N{MULTIPLICATION SIGN} duration"
    unknown = TargetRecording.model_construct(id="tpu:0", energy_source="vendor_estimate")
    assert energy_source(unknown) == "vendor estimate"
    assert energy_source(TargetRecording(id="cpu:0", kind="device", backend="cpu")) is None
