"""``warptd report A.json B.json``: two recordings side by side with ratios B/A, checked in a real
headless chromium with two recordings whose ratios are known."""

from __future__ import annotations

import re

import pytest

from tests.browser import browse
from tests.plotted import plotted, with_probe
from tests.recordings import sample_recording
from warptd.cli import main
from warptd.recording.compare import compare
from warptd.recording.schema import Recording


def after_the_change() -> Recording:
    """Run A's devices, changed by known factors: nvidia:0 used 0.8 of A's energy at 0.64 of its mean
    power over 1.25 of the time and was throttled 5 s (A: 3 s); nvidia:1 is gone, nvidia:2 is new."""
    before = sample_recording()
    gpu, _, package = before.targets
    points = [
        p.model_copy(update={"throttle_active": ["power_cap"] if 20 <= i < 30 else []})
        for i, p in enumerate(gpu.points)
    ]
    faster = gpu.model_copy(
        update={
            "energy_joules": gpu.energy_joules * 0.8,
            "power_mean_watts": gpu.power_mean_watts * 0.64,
            "points": points,
        }
    )
    new = package.model_copy(update={"id": "nvidia:2", "kind": "device", "backend": "nvidia"})
    targets = [faster, package, new]
    return before.model_copy(
        update={
            "id": "b0b0b0b0b0b0",
            "name": "matmul after the change",
            "duration_seconds": before.duration_seconds * 1.25,
            "interval_seconds": before.interval_seconds,
            "targets": targets,
            "energy_joules": 1.5 * before.energy_joules,
        }
    )


def cells(dom: str, table: str) -> list[list[str]]:
    """The text of each body row's cells of the table with id ``table``."""
    body = dom.split(f'<table id="{table}">', 1)[1].split("</table>", 1)[0].split("<tbody>", 1)[1]
    return [
        [re.sub(r"<[^>]+>", "", cell) for cell in re.findall(r"<td[^>]*>(.*?)</td>", row)]
        for row in re.findall(r"<tr>(.*?)</tr>", body)
    ]


@pytest.mark.slow
def test_two_recordings_side_by_side_with_their_ratios_in_chromium(tmp_path, capsys):
    a, b = sample_recording(), after_the_change()
    paths = [tmp_path / "a.json", tmp_path / "b.json"]
    for path, recording in zip(paths, (a, b), strict=True):
        path.write_text(recording.model_dump_json())
    output = tmp_path / "diff.html"
    assert main(["report", str(paths[0]), str(paths[1]), "-o", str(output)]) == 0
    assert "diff.html" in capsys.readouterr().out
    page = output.read_text(encoding="utf-8")
    assert not re.search(r"<(script|img|iframe)[^>]*\bsrc\s*=|<link\b", page, re.I)  # self-contained
    output.write_text(with_probe(page), encoding="utf-8")
    dom, console = browse(output.as_uri())
    assert console == [], console
    probe = plotted(dom)
    assert probe["errors"] == []

    totals = {row[0]: row[1:] for row in cells(dom, "compare-totals")}
    assert totals["duration"] == ["20 s", "25 s", "1.25"]
    assert totals["energy"][2] == "1.50"
    assert "carbon" not in totals  # neither run has a carbon figure: no row of dashes
    assert re.search(r'<p id="unmatched">only in A: nvidia:1; only in B: nvidia:2</p>', dom)

    rows = {row[0]: row[1:] for row in cells(dom, "compare-devices")}
    assert list(rows) == ["nvidia:0", "nvidia:1", "rapl:package-0", "nvidia:2"]
    gpu = a.targets[0]
    energy, time, power, throttled = (rows["nvidia:0"][i : i + 3] for i in range(0, 12, 3))
    assert energy == [f"{gpu.energy_joules:,.1f} J", f"{gpu.energy_joules * 0.8:,.1f} J", "0.80"]
    assert time == ["20 s", "25 s", "1.25"]
    assert power[2] == "0.64"
    assert throttled == ["3 s", "5 s", "1.67"]  # power cap from 10 s to 13 s, then to 15 s
    assert rows["nvidia:1"][1::3] == ["\N{EN DASH}"] * 4 and rows["nvidia:1"][2::3] == ["\N{EN DASH}"] * 4
    assert rows["nvidia:2"][0::3] == ["\N{EN DASH}"] * 4
    assert rows["rapl:package-0"][2::3] == ["1.00", "1.25", "1.00", "\N{EN DASH}"]  # A throttled 0 s

    # Every bar is the recordings' own figure, each device in one colour in every panel.
    bars: dict[tuple[str, str, str], float | None] = {}
    colours: dict[str, set[str]] = {}
    for trace in probe["plots"]["plot-compare"]["traces"]:
        for (_, value, _), device in zip(trace["points"], trace["at"], strict=True):
            bars[(trace["reading"], trace["name"], device)] = value
            colours.setdefault(device, set()).add(trace["color"])
    comparison = compare(a, b)
    for device in comparison.devices:
        for name in ("energy", "time", "mean power", "throttled"):
            pair = device.measure(name)
            for side, value in (("A", pair.a), ("B", pair.b)):
                if value is None:
                    assert (name, side, device.id) not in bars or bars[(name, side, device.id)] is None
                else:
                    assert bars[(name, side, device.id)] == pytest.approx(value)
    assert all(len(c) == 1 for c in colours.values()) and len({c.pop() for c in colours.values()}) == 4
