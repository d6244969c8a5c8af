"""The landing page: every endpoint with a line about it, and a live device table filled from /devices.

Self-contained (no external resources, works offline); the inline script and style are allowed by
their hashes in the Content-Security-Policy, and the script writes only ``textContent``.
"""

from __future__ import annotations

import base64
import hashlib
import html
from collections.abc import Iterable

from warptd.http.app import Endpoint

STYLE = """
body { font-family: system-ui, sans-serif; margin: 2em; max-width: 60em; }
table { border-collapse: collapse; }
th, td { border-bottom: 1px solid #ccc; padding: 0.3em 0.8em; text-align: left; }
td.num { text-align: right; font-variant-numeric: tabular-nums; }
code { background: #f4f4f4; padding: 0 0.2em; }
"""

SCRIPT = """
"use strict";
const rows = document.getElementById("device-rows");
const state = document.getElementById("device-state");
function cell(text, numeric) {
  const td = document.createElement("td");
  td.textContent = text;
  if (numeric) td.className = "num";
  return td;
}
function fixed(value, digits, unit) {
  return typeof value === "number" ? value.toFixed(digits) + " " + unit : "-";
}
function gib(bytes) {
  return typeof bytes === "number" ? (bytes / 2 ** 30).toFixed(1) : "?";
}
function row(backend, device) {
  const latest = device.latest || {};
  const tr = document.createElement("tr");
  const memory = typeof latest.memory_used_bytes === "number"
    ? gib(latest.memory_used_bytes) + " / " + gib(latest.memory_total_bytes) + " GiB" : "-";
  const util = typeof latest.utilization_ratio === "number" ? latest.utilization_ratio * 100 : null;
  tr.append(
    cell(backend + ":" + device.index),
    cell(device.model),
    cell(device.up === false ? "lost" : (device.latest ? "up" : "stale")),
    cell(fixed(latest.power_watts, 1, "W"), true),
    cell(fixed(latest.temperature_celsius, 0, "\\u00b0C")
      + (latest.temperature_sensor ? " (" + latest.temperature_sensor + ")" : ""), true),
    cell(fixed(util, 0, "%"), true),
    cell(memory, true),
  );
  return tr;
}
async function refresh() {
  try {
    const response = await fetch("/devices", {cache: "no-store"});
    if (!response.ok) throw new Error("HTTP " + response.status);
    const body = await response.json();
    const found = [];
    for (const backend of body.backends) {
      for (const device of backend.devices || []) found.push(row(backend.backend, device));
    }
    rows.replaceChildren(...found);
    state.textContent = found.length + " devices, updated " + new Date().toLocaleTimeString();
  } catch (error) {
    state.textContent = "cannot read /devices: " + error.message;
  }
}
refresh();
setInterval(refresh, 2000);
"""

PAGE = """<!doctype html>
<html lang="en"><head><meta charset="utf-8"><title>warptd</title>
<meta name="viewport" content="width=device-width, initial-scale=1">
<link rel="icon" href="data:,">
<style>{style}</style></head>
<body><h1>warptd {version}</h1>
<p>Vendor-agnostic accelerator telemetry for Prometheus. Backends: {backends}.</p>
<h2>Devices</h2>
<table id="devices"><thead><tr><th>device</th><th>model</th><th>state</th><th>power</th>
<th>temperature</th><th>utilization</th><th>memory</th></tr></thead>
<tbody id="device-rows"></tbody></table>
<p id="device-state">loading /devices</p>
<h2>Endpoints</h2>
<ul id="endpoints">
{endpoints}
</ul>
<script>{script}</script>
</body></html>
"""


def _hash(source: str) -> str:
    return "'sha256-" + base64.b64encode(hashlib.sha256(source.encode()).digest()).decode() + "'"


#: Only this page's own script and style run; it may fetch from this daemon only.
CONTENT_SECURITY_POLICY = (
    f"default-src 'none'; script-src {_hash(SCRIPT)}; style-src {_hash(STYLE)}; "
    "connect-src 'self'; img-src data:; base-uri 'none'; form-action 'none'; frame-ancestors 'none'"
)


def endpoint_lines(endpoints: Iterable[Endpoint]) -> list[str]:
    """One ``<li>`` per endpoint with its title; a GET without parameters is a link."""
    lines = []
    for declared in endpoints:
        name = html.escape(declared.path)
        target = f'<a href="{name}">{name}</a>' if declared.method == "GET" and "{" not in name else name
        lines.append(f"<li><code>{declared.method}</code> {target}: {html.escape(declared.title)}</li>")
    return lines


def render(version: str, backends: list[str], endpoints: Iterable[Endpoint]) -> bytes:
    """The page, with every inserted value escaped."""
    return PAGE.format(
        style=STYLE,
        script=SCRIPT,
        version=html.escape(version),
        backends=", ".join(html.escape(name) for name in backends) or "none",
        endpoints="\n".join(endpoint_lines(endpoints)),
    ).encode()
