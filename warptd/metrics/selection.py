"""Which metric families warptd exports and reads: ``--metrics-exclude``/``--metrics-include`` globs
over the catalog's names, on top of a default sized for fleets (docs/configuration.md).

A family is exported when it matches an include glob, else unless it matches an exclude glob or
:data:`DEFAULT_EXCLUDE`. The exposition drops the others; a reader skips a read that serves only
families :meth:`MetricSelection.reads` says no to.
"""

from __future__ import annotations

import fnmatch
import functools
import re
from dataclasses import dataclass

from warptd.metrics import catalog as m

#: Families left out of the default, each with why (its catalog entry's ``opt_in``; docs/metrics.md and
#: docs/configuration.md show it): detail beside a family the default keeps. ``--metrics-include NAME``
#: brings one back.
DEFAULT_EXCLUDE: dict[str, str] = {spec.name: spec.opt_in for spec in m.EVERY if spec.opt_in}
#: A glob: the characters of a metric name and fnmatch's ``* ? [seq] [!seq]``.
_GLOB = re.compile(r"[A-Za-z0-9_:*?\[\]!-]{1,200}")
#: Each family by its prometheus_client name and type (a counter's name there lacks ``_total``, and
#: warptd_window_energy_joules is both a counter's and a histogram's).
_BY_FAMILY: dict[tuple[str, str], m.MetricSpec] = {(spec.family, spec.type): spec for spec in m.EVERY}


def matching(glob: str) -> frozenset[str]:
    """The catalog's families that ``glob`` matches, by name as docs/metrics.md lists them (a counter's
    with ``_total``), case-sensitively."""
    return frozenset(spec.name for spec in m.EVERY if fnmatch.fnmatchcase(spec.name, glob))


def check_glob(glob: str) -> str:
    """``glob`` stripped, or a one-line ``ValueError`` where it is malformed or matches no family."""
    glob = glob.strip()
    if not _GLOB.fullmatch(glob):
        raise ValueError(
            f"not a metric name glob: {glob[:60]!r} (letters, digits, _ : and * ? [...], e.g. "
            "'warptd_device_clock_*')"
        )
    if not _brackets_closed(glob):
        raise ValueError(f"unclosed '[' in {glob!r}")
    if not matching(glob):
        raise ValueError(f"{glob!r} matches no metric family (docs/metrics.md lists them)")
    return glob


def _brackets_closed(glob: str) -> bool:
    """Every ``[`` has its ``]`` (fnmatch would read an unclosed one as a literal, silently)."""
    depth = 0
    for char in glob:
        if char == "[":
            if depth:
                return False
            depth = 1
        elif char == "]" and depth:
            depth = 0
    return depth == 0


@dataclass(frozen=True, slots=True)
class MetricSelection:
    """The families exported (``wants``) and those read (``reads``: the exported ones, those an exported
    sum is made of, and the sources of the dcgm-exporter compat series when ``--compat`` serves them)."""

    exported: frozenset[str]
    read: frozenset[str]

    def wants(self, name: str) -> bool:
        """Whether the family named ``name`` (as exposed: ``…_total`` for a counter) is exported."""
        return name in self.exported

    def reads(self, *names: str) -> bool:
        """Whether any of these families is wanted by some output: a read that serves only families
        this says no to is skipped."""
        return any(name in self.read for name in names)

    def exports(self, family: str, type_: str) -> bool:
        """Whether a prometheus_client family (its name, a counter's without ``_total``, and type) is
        exported; one outside the catalog (``process_*``, the compat series) is not the selection's."""
        spec = _BY_FAMILY.get((family, type_))
        return spec is None or spec.name in self.exported


@functools.lru_cache(maxsize=32)
def select(
    exclude: tuple[str, ...] = (), include: tuple[str, ...] = (), compat: bool = False
) -> MetricSelection:
    """The selection of these (checked) globs: included, else not excluded and not excluded by default."""
    included = frozenset().union(*map(matching, include))
    excluded = frozenset(DEFAULT_EXCLUDE).union(*map(matching, exclude))
    exported = frozenset(spec.name for spec in m.EVERY if spec.name in included or spec.name not in excluded)
    read = exported | _summed_sources(exported) | (_compat_sources() if compat else frozenset())
    return MetricSelection(exported, read)


def _summed_sources(exported: frozenset[str]) -> frozenset[str]:
    """The per-instance families an exported sum is made of (a GPU's NVLink totals: each link's)."""
    return frozenset(total.of.name for total in m.SUMS if total.total.name in exported)


def _compat_sources() -> frozenset[str]:
    """What the dcgm-exporter compat series are made of: read for ``--compat`` whatever warptd exports
    (its table loads only then)."""
    from warptd.metrics.dcgm import COMPAT

    return frozenset(source.spec.name for metric in COMPAT for source in metric.sources)


#: Every family, exported and read: for code that builds an exposition without settings.
EVERYTHING = MetricSelection(frozenset(s.name for s in m.EVERY), frozenset(s.name for s in m.EVERY))
