"""XID events through the NVML double's event sets (tests/doubles/nvml.py), and the XID alert rules."""

from __future__ import annotations

import pytest

from tests.conftest import assert_promtool_clean
from tests.events import test_xid as events_xid
from tests.events.test_xid import XID, exposition, xid_count
from tests.helpers import wait_until

monitor = events_xid.monitor  # the XID event monitor over the NVML double, a fixture


@pytest.mark.slow
def test_exposition_is_promtool_clean(monitor, fake_nvml):
    fake_nvml.gpus[0].events.append((XID, 119))
    assert wait_until(lambda: xid_count(monitor, 0, 119) == 1, timeout=5)
    body = exposition(monitor)
    assert_promtool_clean(body)
