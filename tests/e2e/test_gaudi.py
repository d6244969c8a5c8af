"""The gaudi and hlml backends against the HLML double (tests/doubles/hlml.py); no Habana device needed."""

from __future__ import annotations

import pytest

from tests.conftest import assert_promtool_clean
from tests.doubles.hlml import (
    THROTTLE_THERMAL,
    FakeHlml,
)


@pytest.fixture
def fake_hlml():
    fake = FakeHlml(aips=3)
    with fake.installed():
        yield fake


pytestmark = pytest.mark.rig("gaudi", doubles=["fake_hlml"])  # and its companion power backend, hlml


@pytest.mark.slow
def test_exposition_passes_promtool(rig, fake_hlml):
    fake_hlml.aips[1].throttle_reasons = THROTTLE_THERMAL
    rig.tick()
    body = rig.exposition.render(None, None)[0]
    assert_promtool_clean(body)
