"""MIG devices as devices of their own (backend nvidia_mig), through the real pynvml over the NVML double."""

from __future__ import annotations

from warptd.registry import load_backends


def test_without_mig_on_anywhere_the_backend_does_not_load(settings, fake_nvml):
    settings.backends = ["nvidia", "nvidia_mig"]
    loaded = load_backends(settings)
    try:
        assert [b.name for b in loaded.accelerators] == ["nvidia"]
        assert "nvidia_mig" in loaded.unavailable
    finally:
        loaded.shutdown()
