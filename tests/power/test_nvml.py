"""The nvml power backend (module and memory power scopes) over the NVML double; no GPU needed."""

from __future__ import annotations


def test_without_a_scope_the_nvml_power_backend_does_not_load_and_says_why(settings, fake_nvml):
    from warptd.registry import load_backends

    settings.backends = ["nvidia"]
    loaded = load_backends(settings)
    try:
        assert [b.name for b in loaded.power] == []  # the GPUs' power: the device series alone
        assert "module or memory power scope" in loaded.unavailable["nvml"]
    finally:
        loaded.shutdown()
