"""AMD GPUs and their partitions through amdsmi (ROCm's amd-smi-lib): one device object per handle."""

from __future__ import annotations

from warptd.backends.amd.backend import AmdBackend

__all__ = ["AmdBackend"]
