"""What every backend over the shared NVML session has in common: its lease, error classes, GPM
reader, the driver version, and noticing that NVML was reset or a GPU lost under it."""

from __future__ import annotations

from collections.abc import Hashable
from typing import TYPE_CHECKING, ClassVar

from warptd.backends.base import AcceleratorBackend
from warptd.backends.nvidia import session as nvml_session
from warptd.backends.nvidia.gpm import GpmReader, sample_gap
from warptd.errors import BackendUnavailableError, ErrorKind

if TYPE_CHECKING:
    from warptd.config import Settings


class NvmlBackend(AcceleratorBackend):
    """An accelerator backend leasing the process-wide NVML session (``nvidia``, ``nvidia_mig``)."""

    source: ClassVar[str] = "nvml"

    def __init__(self, settings: Settings) -> None:
        super().__init__(settings)
        self._lease = nvml_session.lease()
        self._session = self._lease.session
        self._nvml = self._session.nvml
        self._generation = self._session.generation
        self._suspect = False  # NVML reset or a GPU lost: reopen at the next rediscovery
        try:
            self._gpm = GpmReader(
                self._nvml,
                self.call,
                self._is_unsupported,
                gap=lambda: sample_gap(self.settings),
                reject=lambda n: self.count_error(ErrorKind.INVALID_VALUE, n),
            )
        except AttributeError as exc:  # an nvidia-ml-py without the GPM structs
            self._lease.release()
            raise BackendUnavailableError(f"nvidia-ml-py too old: {exc}") from exc

    def classify_error(self, exc: BaseException) -> ErrorKind:
        return self._session.classify(exc)

    def _is_unsupported(self, exc: BaseException) -> bool:
        return self.classify_error(exc) is ErrorKind.NOT_SUPPORTED

    def on_error(self, key: Hashable, kind: ErrorKind, exc: BaseException) -> None:
        nvml = self._nvml
        if isinstance(exc, nvml.NVMLError) and exc.value == nvml.NVML_ERROR_UNINITIALIZED:
            # NVML was shut down under us: nothing of this device is readable until it is reopened.
            if isinstance(key, tuple):
                self._lost_now.add(key[1])
            self._suspect = True
        elif kind is ErrorKind.DEVICE_LOST:
            self._suspect = True
        super().on_error(key, kind, exc)

    def get_driver_version(self) -> str | None:
        version = self.guarded("driver", self._nvml.nvmlSystemGetDriverVersion)
        return nvml_session.text(version) if version is not None else None

    def shutdown(self) -> None:
        with self._session.lock:
            self._gpm.reset()  # free the GPM samples while NVML is still up
        self._lease.release()
