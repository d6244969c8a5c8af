"""One NVML initialisation per process, shared by the ``nvidia`` and ``nvml`` backends.

Device handles are looked up once here and cached; per-sample code never calls
``nvmlDeviceGetHandleByIndex``.
"""

from __future__ import annotations

import contextlib
import threading
from types import ModuleType
from typing import Any

from warptd.backends.shared_session import SharedSession
from warptd.errors import BackendUnavailableError, ErrorKind


class NvmlSession:
    """An initialised NVML with its cached device handles."""

    def __init__(self) -> None:
        try:
            import pynvml
        except ImportError as exc:
            raise BackendUnavailableError(
                "nvidia-ml-py is not installed: pip install 'warptd[nvidia]'"
            ) from exc
        self.nvml: ModuleType = pynvml
        try:
            pynvml.nvmlInit()
        except pynvml.NVMLError_LibraryNotFound as exc:
            raise BackendUnavailableError(
                "libnvidia-ml.so.1 not found: no NVIDIA driver on this host"
            ) from exc
        except pynvml.NVMLError as exc:
            raise BackendUnavailableError(f"nvmlInit failed: {exc}") from exc
        try:
            count = pynvml.nvmlDeviceGetCount()
            self.handles: list[Any] = [pynvml.nvmlDeviceGetHandleByIndex(i) for i in range(count)]
        except pynvml.NVMLError as exc:
            pynvml.nvmlShutdown()
            raise BackendUnavailableError(f"NVML device enumeration failed: {exc}") from exc
        #: Held while NVML is reopened and while a device is read, so no read meets a half-reset NVML.
        self.lock = threading.RLock()
        #: Bumped by every reopen: per-device caches of every backend on this session are stale then.
        self.generation = 0

    def reopen(self) -> bool:
        """Shut NVML down and initialise it again, refreshing the handles in place for every user.

        Recovers from a driver reload, or an ``nvmlShutdown`` by other code in this process. A GPU
        whose handle cannot be had (still lost) keeps its index with a ``None`` handle, so it stays
        visible as down; the others are read as usual. Returns True when NVML came back and every
        device it counts has a handle.
        """
        nvml = self.nvml
        with self.lock:
            with contextlib.suppress(nvml.NVMLError):
                nvml.nvmlShutdown()
            handles, complete = [], True
            try:
                nvml.nvmlInit()
                count = nvml.nvmlDeviceGetCount()
            except nvml.NVMLError:
                count, complete = 0, False
            for index in range(count):
                try:
                    handles.append(nvml.nvmlDeviceGetHandleByIndex(index))
                except nvml.NVMLError:
                    handles.append(None)
                    complete = False
            self.handles[:] = handles
            self.generation += 1
            return complete

    def classify(self, exc: BaseException) -> ErrorKind:
        """Map an NVML exception onto an error kind."""
        nvml = self.nvml
        if not isinstance(exc, nvml.NVMLError):
            return ErrorKind.UNEXPECTED
        value = exc.value
        if value in (nvml.NVML_ERROR_NOT_SUPPORTED, nvml.NVML_ERROR_FUNCTION_NOT_FOUND):
            return ErrorKind.NOT_SUPPORTED
        if value in (nvml.NVML_ERROR_GPU_IS_LOST, nvml.NVML_ERROR_RESET_REQUIRED):
            return ErrorKind.DEVICE_LOST
        if value == nvml.NVML_ERROR_NO_PERMISSION:
            return ErrorKind.PERMISSION
        if value == nvml.NVML_ERROR_TIMEOUT:
            return ErrorKind.TIMEOUT
        return ErrorKind.SDK_ERROR

    def close(self) -> None:
        with contextlib.suppress(self.nvml.NVMLError):
            self.nvml.nvmlShutdown()


_shared: SharedSession[NvmlSession] = SharedSession(NvmlSession, NvmlSession.close)
#: A user's idempotent hold (a ``Lease``) on the process-wide session; NVML starts on first use.
lease = _shared.lease


def text(value: str | bytes) -> str:
    """NVML strings are bytes in older nvidia-ml-py releases and str in newer ones."""
    return value.decode(errors="replace") if isinstance(value, bytes) else value
