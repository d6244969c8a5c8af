"""The gaudi and hlml backends against the HLML double (tests/doubles/hlml.py); no Habana device needed."""

from __future__ import annotations

import pytest

from tests.backends.gaudi import test_backend as gaudi_backend
from tests.conftest import assert_promtool_clean
from tests.doubles.hlml import (
    THROTTLE_THERMAL,
)

fake_hlml = gaudi_backend.fake_hlml  # the HLML double with three Gaudis, a fixture


pytestmark = pytest.mark.rig("gaudi", doubles=["fake_hlml"])  # and its companion power backend, hlml


@pytest.mark.slow
def test_exposition_passes_promtool(rig, fake_hlml):
    fake_hlml.aips[1].throttle_reasons = THROTTLE_THERMAL
    rig.tick()
    body = rig.exposition.render(None, None)[0]
    assert_promtool_clean(body)
