"""Stress pieces without a worker: discovery, parameter checks, telemetry summaries, GPU plumbing."""

from __future__ import annotations

from warptd.stress.jobs import JobManager


def test_the_default_test_is_the_one_that_runs_on_the_device():
    """An empty POST /stress on a Tenstorrent chip runs tt_matmul (Path B), elsewhere matmul."""
    from warptd.stress.base import DeviceRef

    refs = [
        DeviceRef(backend="tenstorrent", index=0, torch_device="tt:0", is_accelerator=True),
        DeviceRef(backend="cpu", index=0, torch_device="cpu", is_accelerator=False),
    ]
    manager = JobManager(refs, {})
    assert manager.parameters(None, None, 1.0, None, None).test == "tt_matmul"  # first accelerator
    assert manager.parameters(None, "cpu:0", 1.0, None, None).test == "matmul"
    assert manager.parameters("memory", "cpu:0", 1.0, None, None).test == "memory"  # as asked


def test_only_workloads_a_device_runs_are_offered():
    from warptd.stress.base import DeviceRef

    cpu = DeviceRef("cpu", 0, "cpu", False)
    tt = DeviceRef("tenstorrent", 0, "tt:0", True)
    assert "tt_matmul" not in JobManager([cpu], {}).catalog.usable_tests()
    both = JobManager([cpu, tt], {})
    assert both.catalog.tests_for(tt) == ["tt_matmul"] and "tt_matmul" not in both.catalog.tests_for(cpu)
    assert {"matmul", "memory", "tt_matmul"} <= set(both.catalog.usable_tests())
