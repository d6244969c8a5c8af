"""Fast exposition writers for the Prometheus text (0.0.4) and OpenMetrics formats.

prometheus_client's generic writers re-validate every label name of every sample, which costs
~80 ms per scrape at 64 GPUs. These produce the same bytes (a test checks it) without that work.
"""

from __future__ import annotations

from collections.abc import Iterable

from prometheus_client.metrics_core import Metric
from prometheus_client.utils import floatToGoString

_TEXT_TYPES = {
    "counter": "counter",
    "gauge": "gauge",
    "histogram": "histogram",
    "unknown": "untyped",
    "untyped": "untyped",
}


def _escape_help(text: str) -> str:
    return text.replace("\\", r"\\").replace("\n", r"\n")


def _escape_value(text: str) -> str:
    if "\\" not in text and "\n" not in text and '"' not in text:
        return text
    return text.replace("\\", r"\\").replace("\n", r"\n").replace('"', r"\"")


def _sample_lines(metric: Metric, out: list[str]) -> None:
    for sample in metric.samples:
        if sample.labels:
            labels = ",".join(f'{k}="{_escape_value(v)}"' for k, v in sorted(sample.labels.items()))
            out.append(f"{sample.name}{{{labels}}} {floatToGoString(sample.value)}\n")
        else:
            out.append(f"{sample.name} {floatToGoString(sample.value)}\n")


def _bare_counter(metric: Metric) -> bool:
    """A counter whose samples carry its name without ``_total`` (dcgm-exporter's, under --compat)."""
    return metric.type == "counter" and bool(metric.samples) and metric.samples[0].name == metric.name


def render_text(metrics: Iterable[Metric]) -> bytes:
    """Prometheus text format 0.0.4."""
    out: list[str] = []
    for metric in metrics:
        kind = _TEXT_TYPES.get(metric.type)
        if kind is None:
            raise ValueError(f"unsupported metric type {metric.type} for {metric.name}")
        name = (
            f"{metric.name}_total" if metric.type == "counter" and not _bare_counter(metric) else metric.name
        )
        out.append(f"# HELP {name} {_escape_help(metric.documentation)}\n# TYPE {name} {kind}\n")
        _sample_lines(metric, out)
    return "".join(out).encode()


def render_openmetrics(metrics: Iterable[Metric]) -> bytes:
    """OpenMetrics 1.0 text format."""
    out: list[str] = []
    for metric in metrics:
        if metric.type not in _TEXT_TYPES:
            raise ValueError(f"unsupported metric type {metric.type} for {metric.name}")
        name = metric.name
        # OpenMetrics has no counter without _total samples: such a family is typed unknown there.
        kind = "unknown" if _bare_counter(metric) else metric.type
        out.append(f"# HELP {name} {_escape_value(metric.documentation)}\n# TYPE {name} {kind}\n")
        if metric.unit:
            out.append(f"# UNIT {metric.name} {metric.unit}\n")
        _sample_lines(metric, out)
    out.append("# EOF\n")
    return "".join(out).encode()
