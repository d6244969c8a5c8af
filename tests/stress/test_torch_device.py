"""Stress pieces without a worker: discovery, parameter checks, telemetry summaries, GPU plumbing."""

from __future__ import annotations

import pytest


def test_a_device_torch_does_not_know_is_unavailable_not_a_crash():
    """Tenstorrent's ``tt:N`` and TPU's ``xla:N`` without torch_xla: the workload says unavailable."""
    pytest.importorskip("torch")
    from warptd.stress import torch_device

    assert not torch_device.available("tt:0")
    assert torch_device.available("cpu")
