"""A report read at a glance, checked in a real headless chromium: one colour per device in every
plot, small multiples instead of one chart of many lines, ticks that differ, energy bars labelled with
their joules (and carbon and cost), and a header that sums the recording up."""

from __future__ import annotations

import re

import pytest

from tests.plotted import drawn
from tests.recordings import sample_recording
from warptd.recording.palette import COLORS, assign, style


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


def test_palette_styles_stay_distinct_past_its_colours_and_follow_the_order_given():
    styles = [style(i) for i in range(60)]
    assert len({(s.color, s.dash) for s in styles}) == 60
    assert len({(s.color, s.pattern) for s in styles}) == 60
    assert [s.color for s in styles[:10]] == list(COLORS) and {s.dash for s in styles[:10]} == {"solid"}
    assigned = assign(["nvidia:1", "nvidia:0", "nvidia:1"])
    assert list(assigned) == ["nvidia:1", "nvidia:0"] and assigned["nvidia:1"] == style(0)
