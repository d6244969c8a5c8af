"""What ``warptd doctor`` found (``--json`` prints it): frozen models over each backend's checkup."""

from __future__ import annotations

from warptd.backends.checkup import BackendCheckup, Frozen


class Excluded(Frozen):
    """A metric family the selection leaves out, and why."""

    family: str
    reason: str


class DoctorReport(Frozen):
    """What ``warptd doctor --json`` prints."""

    node: str
    seconds: float  # how long the doctor took
    quick: bool
    intervals: tuple[str, ...]  # the --interval values expected CPU is given at
    #: The cadences the reads were priced at (the settings'): how often slow values and energy are read.
    health_interval: float = 10.0
    energy_interval: float = 1.0
    backends: tuple[BackendCheckup, ...]
    unavailable: dict[str, str]  # the backends that did not load, and why
    excluded: tuple[Excluded, ...]
    other_series: int  # series of no device: the backends' own, process_*
    cpu_per_second: dict[str, float]  # the node's reads, CPU seconds a second, by --interval
    disagreements: int
