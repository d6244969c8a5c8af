"""What the sampler tells the features that record its samples (windows, stress, pod energy, profiles)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Protocol

if TYPE_CHECKING:
    from warptd.power.base import DomainPower
    from warptd.sampling.snapshot import DeviceSample


class SampleListener(Protocol):
    """Called on the sampling worker after each published read of one backend.

    ``devices`` for an accelerator backend's read, ``domains`` for a power backend's, the other
    None; ``at`` is the monotonic time of the read. It must return quickly and never call an SDK.
    """

    def __call__(
        self,
        backend: str,
        devices: list[DeviceSample] | None,
        domains: list[DomainPower] | None,
        at: float,
        /,
    ) -> None: ...
