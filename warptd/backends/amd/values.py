"""amdsmi's answers as numbers and strings: its ``"N/A"`` and all-ones sentinels become None, so that a
value a GPU lacks is an absent series, never 0."""

from __future__ import annotations

from warptd.models import LabelledValues

#: All-ones values of uint16/32/64 fields that amdsmi passes through for "not reported".
_SENTINELS = frozenset({0xFFFF, 0xFFFFFFFF, 0xFFFFFFFFFFFFFFFF})


def number(value: object) -> float | None:
    """A reported number, or None for amdsmi's ``"N/A"`` and all-ones sentinels."""
    if isinstance(value, bool) or not isinstance(value, int | float) or value in _SENTINELS:
        return None
    return float(value)


def integer(value: object) -> int | None:
    """A reported number as an int, or None like :func:`number`."""
    reported = number(value)
    return int(reported) if reported is not None else None


def per_instance(values: object, scale: float = 1.0) -> dict[str, float]:
    """A metrics-table array by instance number (``"0"``…), leaving out the "N/A" entries."""
    numbers = [number(v) for v in values] if isinstance(values, list) else []
    return {str(i): n * scale for i, n in enumerate(numbers) if n is not None}


def one(value: float | None, *labels: str) -> LabelledValues:
    """One series with these label values, or none for an absent value."""
    return {labels: value} if value is not None else {}


def reported(metrics: dict[str, LabelledValues]) -> dict[str, LabelledValues]:
    """The metrics that have at least one series: a metric the GPU lacks is absent."""
    return {name: values for name, values in metrics.items() if values}


def text(value: object) -> str | None:
    """A reported string, or None for amdsmi's ``"N/A"`` and empty strings."""
    if not isinstance(value, str) or value.strip() in ("", "N/A"):
        return None
    return value.strip()
