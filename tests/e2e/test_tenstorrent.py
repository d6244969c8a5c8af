"""The tenstorrent backend against the pyluwen double (tests/doubles/pyluwen.py); no chip needed."""

from __future__ import annotations

import pytest

from tests.backends.tenstorrent.test_backend import fake_luwen  # noqa: F401 (the rig's double)
from tests.conftest import assert_promtool_clean

pytestmark = pytest.mark.rig("tenstorrent", doubles=["fake_luwen"])


@pytest.mark.slow
def test_exposition_passes_promtool(rig):
    rig.tick()
    body = rig.exposition.render(None, None)[0]
    assert_promtool_clean(body)
