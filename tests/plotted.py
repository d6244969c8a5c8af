"""What a report page drew in chromium: a probe script injected into a copy of the page (never
shipped) reads plotly's own data after it drew, and the texts the browser laid out."""

from __future__ import annotations

import html
import json
import re
from pathlib import Path

from tests.browser import browse
from warptd.recording.report import render_html
from warptd.recording.schema import Recording

#: Injected into a copy of the page by the test (never shipped): after plotly drew, it writes what
#: each plot computed for each trace (plotly's calcdata) and every page error into <pre id="plotted">.
PROBE = """<script>
window.__errors = [];
window.addEventListener("error", (e) => window.__errors.push(String(e.message)));
window.addEventListener("unhandledrejection", (e) => window.__errors.push(String(e.reason)));
const texts = (nodes) => Array.from(nodes, (n) => n.textContent);
window.addEventListener("load", () => setTimeout(() => {
  const plots = {};
  for (const gd of document.querySelectorAll(".js-plotly-plot")) {
    plots[gd.id] = {
      drawn: gd.querySelectorAll("g.trace").length,
      traces: (gd.calcdata || []).map((cd, i) => {
        const full = gd._fullData[i];
        const bar = full.type === "bar";
        return {
          name: full.name,
          reading: full.meta === undefined ? null : full.meta,
          color: bar ? full.marker.color : full.line.color,
          dash: bar ? null : full.line.dash,
          points: cd.map((pt) => bar ? [pt.b, pt.s, pt.p] : [pt.x, pt.y]),
          // A bar's category as named (its points give the category's position).
          at: bar ? cd.map((pt) => (full.orientation === "h" ? full.y : full.x)[pt.i]) : null,
        };
      }),
      // What the browser drew: each bar's text lines, and each panel's tick labels per axis.
      barText: Array.from(gd.querySelectorAll("g.trace.bars g.point"), (point) => {
        const lines = point.querySelectorAll("text.bartext tspan.line");
        return lines.length ? texts(lines) : texts(point.querySelectorAll("text.bartext"));
      }),
      ticks: Array.from(gd.querySelectorAll("g.cartesianlayer g.subplot"), (panel) => ({
        x: texts(panel.querySelectorAll(".xaxislayer-above text")),
        y: texts(panel.querySelectorAll(".yaxislayer-above text")),
      })),
    };
  }
  const out = document.createElement("pre");
  out.id = "plotted";
  out.textContent = JSON.stringify({plots, errors: window.__errors});
  document.body.appendChild(out);
}, 0));
</script>"""


def plotted(dom: str) -> dict:
    """The probe's findings: {plots: {div id: {drawn, traces: [{name, reading, color, dash, points, at}],
    barText: [[line, ...] per bar], ticks: [{x: [...], y: [...]} per panel]}}, errors}."""
    found = re.search(r'<pre id="plotted">(.*?)</pre>', dom, re.S)
    assert found, "the probe did not run: the page's scripts failed before load"
    return json.loads(html.unescape(found.group(1)))


def with_probe(page: str) -> str:
    return page.replace("</body>", PROBE + "\n</body>", 1)


def trace_name(trace: dict) -> str:
    """A trace's device, and in a panel of small multiples its reading: ``nvidia:0 sm_active``."""
    return trace["name"] + (f" {trace['reading']}" if trace["reading"] else "")


def traces(plots: dict, plot: str) -> dict[str, list[list[float]]]:
    return {trace_name(trace): trace["points"] for trace in plots[plot]["traces"]}


def drawn(recording: Recording, tmp_path: Path) -> dict:
    """The report of ``recording`` as chromium drew it (no console error, no page error)."""
    page = tmp_path / "report.html"
    page.write_text(with_probe(render_html(recording)), encoding="utf-8")
    dom, console = browse(page.as_uri())
    assert console == [], console
    probe = plotted(dom)
    assert probe["errors"] == [], probe["errors"]
    return {"dom": dom, **probe}
