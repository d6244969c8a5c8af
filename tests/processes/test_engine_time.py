"""Energy per workload on AMD GPUs: amdsmi's process list (the amdsmi double under the real package)
feeding the workload split, with the energy the real ``amd`` backend reads from the same double.

The fixture /proc and cgroup layouts are tests/e2e/test_workloads.py's (its ``Node`` and cgroup lines).
Both the energy accumulator and each process's cumulative GFX time advance on the double's firmware
clock, so the scripted split is exact: a job busy 60 % of the time beside one busy 20 % takes 3/4."""

from __future__ import annotations

from warptd.processes.engine_time import EngineCount, EngineTime


def test_engine_time_needs_a_baseline_per_process():
    engine = EngineTime()
    assert engine.update(0, {1: EngineCount({"gfx": 0}, 7)}) is None  # first poll
    assert engine.update(1_000, {1: EngineCount({"gfx": 500}, 7)}) == {1: 0.5}
    assert (
        engine.update(2_000, {1: EngineCount({"gfx": 600}, 7), 2: EngineCount({"gfx": 0}, 8)}) is None
    )  # 2 is new
    assert (
        engine.update(3_000, {1: EngineCount({"gfx": 100}, 7), 2: EngineCount({"gfx": 0}, 8)}) is None
    )  # 1 went back
    assert (
        engine.update(4_000, {1: EngineCount({"gfx": 900}, 9), 2: EngineCount({"gfx": 10}, 8)}) is None
    )  # 1 reused
    assert engine.update(5_000, {1: EngineCount({"gfx": 1_000}, 9), 2: EngineCount({"gfx": 10}, 8)}) == {
        1: 0.1,
        2: 0.0,
    }
