"""A GPU's health values, read at the health cadence (:mod:`~warptd.backends.cadence`) by the primary
partition: ECC errors, PCIe replays and whether a bad page waits for retirement."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from warptd.backends.amd.values import number, one
from warptd.models import LabelledValues

#: ``amdsmi_get_gpu_total_ecc_count`` keys by the ``kind`` exported (deferred errors are not: hardware.md).
_ECC_KINDS = {"corrected": "correctable_count", "uncorrected": "uncorrectable_count"}
#: ``amdsmi_memory_page_status_t``'s PENDING (RESERVED 0, PENDING 1, UNRESERVABLE 2 in amdsmi.h), where
#: the package does not name it.
_PAGE_PENDING = 1

#: One guarded amdsmi call about the device: ``get(what, function name, *arguments)``, None on failure.
Get = Callable[..., Any]


@dataclass(frozen=True, slots=True)
class Health:
    """The health values as last read: counters by catalog metric name, and the pending-retirement gauge."""

    counters: dict[str, LabelledValues] = field(default_factory=dict)
    retirement_pending: float | None = None


def read_health(get: Get, wrapper: object) -> Health:
    """Read the health values once (``wrapper``: ``amdsmi.amdsmi_wrapper``, for the page status codes)."""
    ecc = get("ecc", "amdsmi_get_gpu_total_ecc_count") or {}
    errors: LabelledValues = {}
    for kind, key in _ECC_KINDS.items():
        errors |= one(number(ecc.get(key)), kind)
    replays = number(get("pcie_replays", "amdsmi_get_gpu_pci_replay_counter"))
    counters = {"warptd_device_ecc_errors_total": errors, "warptd_device_pcie_replays_total": one(replays)}
    return Health(counters, _retirement_pending(get, wrapper))


def _retirement_pending(get: Get, wrapper: object) -> float | None:
    """1 while a bad page waits for retirement (it is reserved at the next driver load), else 0."""
    pages = get("bad_pages", "amdsmi_get_gpu_bad_page_info")
    if pages is None:
        return None
    if not isinstance(pages, list):  # some releases answer "No bad pages found." instead of []
        return 0.0
    pending = getattr(wrapper, "AMDSMI_MEM_PAGE_STATUS_PENDING", _PAGE_PENDING)
    return float(any(isinstance(page, dict) and page.get("status") == pending for page in pages))
