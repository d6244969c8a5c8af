"""Energy per workload (--workloads): fixture /proc and cgroup trees for each layout, the NVML double
(real pynvml structs) reporting their pids, memory and SM samples, and RAPL domains as the sampler
hands them over."""

from __future__ import annotations

from warptd.sampling.deltas import TotalDeltas


def test_one_delta_rule_for_every_total():
    """The split and the workloads' recordings take joules from totals with one helper: the first is
    the baseline, an unreadable one adds nothing, a lower one (late) adds nothing and is not kept."""
    deltas: TotalDeltas[str] = TotalDeltas()
    added = [deltas.delta("gpu", total) for total in (10.0, 15.0, None, 12.0, 18.0)]
    assert added == [0.0, 5.0, 0.0, 0.0, 3.0]
    assert deltas.delta("package", 4.0) == 0.0 and deltas.delta("package", 6.0) == 2.0
