"""What every backend over the shared NVML session has in common: its lease, error classes, GPM
context, the driver version, and noticing that NVML was reset or a GPU lost under it."""

from __future__ import annotations

from collections.abc import Hashable
from typing import TYPE_CHECKING, ClassVar

import structlog

from warptd.backends.base import AcceleratorBackend
from warptd.backends.nvidia import session as nvml_session
from warptd.backends.nvidia.gpm import GpmContext, sample_gap
from warptd.errors import BackendUnavailableError, ErrorKind

if TYPE_CHECKING:
    from warptd.backends.nvidia.guard import DeviceGuard
    from warptd.config import Settings

log = structlog.get_logger("warptd.backend")


class NvmlBackend(AcceleratorBackend):
    """An accelerator backend leasing the process-wide NVML session (``nvidia``, ``nvidia_mig``)."""

    source: ClassVar[str] = "nvml"
    sdk: ClassVar[str | None] = "nvidia-ml-py"

    def __init__(self, settings: Settings) -> None:
        super().__init__(settings)
        self._lease = nvml_session.lease()
        self._session = self._lease.session
        self._nvml = self._session.nvml
        self._generation = self._session.generation
        self._suspect = False  # NVML reset or a GPU lost: reopen at the next rediscovery
        try:
            self._gpm = GpmContext(
                self._nvml,
                self._is_unsupported,
                gap=lambda watched: sample_gap(self.settings, watched),
                reject=lambda n: self.count_error(ErrorKind.INVALID_VALUE, n),
                reads=self.selection.reads,
            )
        except AttributeError as exc:  # an nvidia-ml-py without the GPM structs
            self._lease.release()
            raise BackendUnavailableError(f"nvidia-ml-py too old: {exc}") from exc

    def classify_error(self, exc: BaseException) -> ErrorKind:
        return self._session.classify(exc)

    def _is_unsupported(self, exc: BaseException) -> bool:
        return self.classify_error(exc) is ErrorKind.NOT_SUPPORTED

    def _lost(self, exc: BaseException, kind: ErrorKind) -> bool:
        """Whether a failure means the device is unreadable until NVML is reopened: NVML was shut
        down under us, or the GPU is lost (either makes the backend suspect)."""
        nvml = self._nvml
        uninitialised = isinstance(exc, nvml.NVMLError) and exc.value == nvml.NVML_ERROR_UNINITIALIZED
        if uninitialised or kind is ErrorKind.DEVICE_LOST:
            self._suspect = True
        return uninitialised

    def on_error(self, key: Hashable, kind: ErrorKind, exc: BaseException) -> None:
        if self._lost(exc, kind) and isinstance(key, tuple):
            self._lost_now.add(key[1])
        super().on_error(key, kind, exc)

    def device_failed(self, guard: DeviceGuard, what: str, exc: BaseException) -> None:
        """One failed call of a device object: counted as :meth:`on_error` counts the backend's own."""
        kind = self.classify_error(exc)
        if self._lost(exc, kind) or kind is ErrorKind.DEVICE_LOST:
            guard.lost = True
        if kind is ErrorKind.NOT_SUPPORTED:
            guard.refuse(what)
            return
        self.count_error(kind)
        log.debug(
            "sdk_call_failed",
            backend=self.name,
            key=str((what, guard.index)),
            kind=str(kind),
            error=repr(exc),
        )

    def get_driver_version(self) -> str | None:
        version = self.guarded("driver", self._nvml.nvmlSystemGetDriverVersion)
        return nvml_session.text(version) if version is not None else None

    def shutdown(self) -> None:
        with self._session.lock:
            self._gpm.reset()  # free the GPM samples while NVML is still up
        self._lease.release()
