"""XID events through the NVML double's event sets (tests/doubles/nvml.py), and the XID alert rules."""

from __future__ import annotations

import pynvml
import pytest
from prometheus_client import CollectorRegistry

from tests.conftest import assert_promtool_clean
from tests.helpers import wait_until
from warptd.events.collector import XidCollector
from warptd.events.xid import open_xid_monitor
from warptd.exporter.text import render_text
from warptd.processes.collector import ProcessesCollector

XID = pynvml.nvmlEventTypeXidCriticalError


def exposition(xid=None, processes=None) -> bytes:
    registry = CollectorRegistry(auto_describe=False)
    if xid is not None:
        registry.register(XidCollector(xid))
    if processes is not None:
        registry.register(ProcessesCollector(processes))
    return render_text(registry.collect())


@pytest.fixture
def monitor(fake_nvml):
    changes = []
    monitor = open_xid_monitor(on_change=lambda: changes.append(1), timeout_ms=100)
    assert monitor is not None
    monitor.start()
    monitor.changes = changes
    yield monitor
    monitor.stop()


def xid_count(monitor, index: int, xid: int) -> int:
    return next(d for d in monitor.devices() if d.index == index).counts.get(xid, 0)


@pytest.mark.slow
def test_exposition_is_promtool_clean(monitor, fake_nvml):
    fake_nvml.gpus[0].events.append((XID, 119))
    assert wait_until(lambda: xid_count(monitor, 0, 119) == 1, timeout=5)
    body = exposition(monitor)
    assert_promtool_clean(body)
