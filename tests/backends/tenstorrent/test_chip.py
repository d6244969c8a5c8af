"""The tenstorrent backend against the pyluwen double (tests/doubles/pyluwen.py); no chip needed."""

from __future__ import annotations

import pytest

from tests.doubles.pyluwen import (
    ALL_ONES,
    FakeTelemetry,
)
from warptd.backends.tenstorrent.chip import asic_celsius, limit

pytestmark = pytest.mark.rig("tenstorrent", doubles=["fake_luwen"])


def test_decoding_of_raw_words():
    assert asic_celsius("Blackhole", round(-2.5 * 65536) & ALL_ONES) == -2.5  # signed 16.16
    assert asic_celsius("Wormhole", 0xFFFF_0190) == 25.0  # only the low half, in 1/16 °C
    assert asic_celsius("Wormhole", ALL_ONES) is None and asic_celsius("Wormhole", 0) is None
    assert asic_celsius("", 0x190) is None  # an architecture this module does not know
    wormhole = FakeTelemetry(tdp=0x0000_0037)  # no limit in the high half
    assert limit("Wormhole", wormhole, "tdp") is None
    assert limit("Blackhole", FakeTelemetry(tdp_limit_max=ALL_ONES), "tdp") is None
