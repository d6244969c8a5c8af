"""Content negotiation by quality values (RFC 9110 §12.4.2): which of the offers an ``Accept`` or
``Accept-Encoding`` header prefers. Written here since none of warptd's dependencies weighs them:
prometheus-client looks for the name alone, so ``gzip;q=0`` (not gzip) read as gzip."""

from __future__ import annotations

from collections.abc import Sequence


def _weights(header: str) -> list[tuple[str, float]]:
    """Each listed name (lower-cased, parameters dropped) with its q (1 by default; 0 if unreadable)."""
    weighed = []
    for item in header.split(","):
        name, *parameters = (part.strip() for part in item.split(";"))
        if not name:
            continue
        q = 1.0
        for parameter in parameters:
            key, _, value = parameter.partition("=")
            if key.strip().lower() == "q":
                try:
                    q = min(max(float(value.strip()), 0.0), 1.0)
                except ValueError:
                    q = 0.0
        weighed.append((name.lower(), q))
    return weighed


def _media_quality(weights: list[tuple[str, float]], offer: str) -> tuple[float, int]:
    """The q that the most specific range matching ``offer`` gives it (``type/sub`` over ``type/*``
    over ``*/*``), and where that range is listed (0 first; -1 for none: q 0)."""
    kind = offer.split("/", 1)[0]
    specificity, q, position = -1, 0.0, -1
    for at, (name, weight) in enumerate(weights):
        rank = {offer: 2, f"{kind}/*": 1, "*/*": 0}.get(name, -1)
        if rank > specificity:
            specificity, q, position = rank, weight, at
    return q, position


def preferred_media_type(accept: str, offers: Sequence[str]) -> str | None:
    """The offer ``accept`` weighs highest, None when it accepts none. Between equals, the one whose
    range is listed first, then the first offer (``*/*`` gets the first): as client_golang chooses.
    No ``Accept`` takes the first offer."""
    if not accept.strip():
        return offers[0] if offers else None
    weights = _weights(accept)
    best: tuple[float, int, int] = (0.0, 0, 0)
    chosen = None
    for index, offer in enumerate(offers):
        q, position = _media_quality(weights, offer.lower())
        score = (q, -position, -index)
        if q > 0 and (chosen is None or score > best):
            best, chosen = score, offer
    return chosen


def accepts_gzip(accept_encoding: str) -> bool:
    """Whether to compress: gzip (or ``*``) weighed above 0 and not below identity. An unlisted
    identity stays acceptable (RFC 9110 §12.5.3), so it only wins where listed higher."""
    weights = dict(reversed(_weights(accept_encoding)))  # the first listing of a name counts
    wildcard = weights.get("*")
    gzip = weights.get("gzip", weights.get("x-gzip", wildcard))
    identity = weights.get("identity")
    return gzip is not None and gzip > 0 and (identity is None or gzip >= identity)
