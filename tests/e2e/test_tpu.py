"""The tpu backend against a real gRPC libtpu metrics server on loopback and fixture sysfs trees."""

from __future__ import annotations

import pytest

from tests.backends.tpu.test_backend import libtpu, runtime, three_chips  # noqa: F401 (the rig's doubles)
from tests.conftest import assert_promtool_clean

pytestmark = pytest.mark.rig("tpu", doubles=["three_chips", "runtime"])


@pytest.mark.slow
def test_exposition_passes_promtool(rig):
    rig.tick()
    body = rig.exposition.render(None, None)[0]
    assert b'warptd_device_memory_used_bytes{backend="tpu"' in body
    assert_promtool_clean(body)
