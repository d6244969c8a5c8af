"""One NVML initialisation per process, shared by the ``nvidia`` and ``nvml`` backends.

Device handles are looked up once here and cached; per-sample code never calls
``nvmlDeviceGetHandleByIndex``.
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Iterator
from types import ModuleType
from typing import Any

import structlog

from warptd.backends.shared_session import SharedSession
from warptd.errors import BackendUnavailableError, ErrorKind
from warptd.install import install_command

log = structlog.get_logger("warptd.nvml")
#: How long a reopen waits for event waits in progress to return (they use a 1 s timeout).
WAIT_DRAIN_S = 5.0


class NvmlSession:
    """An initialised NVML with its cached device handles.

    ``handles[i]`` is None for a GPU that NVML counts but will not hand out (``NO_PERMISSION``,
    ``GPU_IS_LOST`` …): ``nvmlDeviceGetCount`` counts those too, and they read as down while the
    other GPUs are exported as usual; :attr:`refused` says why.
    """

    def __init__(self) -> None:
        try:
            import pynvml
        except ImportError as exc:
            raise BackendUnavailableError(
                f"nvidia-ml-py is not installed: {install_command('nvidia')}"
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
        self.handles: list[Any] = []
        #: Index -> the NVML error that refused its handle at the last enumeration.
        self.refused: dict[int, BaseException] = {}
        try:
            self._enumerate(pynvml.nvmlDeviceGetCount())
        except pynvml.NVMLError as exc:
            pynvml.nvmlShutdown()
            raise BackendUnavailableError(f"NVML device enumeration failed: {exc}") from exc
        #: Held while NVML is reopened and while a device is read, so no read meets a half-reset NVML.
        self.lock = threading.RLock()
        #: Bumped by every reopen and every recovered handle: per-device caches are stale then.
        self.generation = 0
        #: Bumped by every reopen only: event sets created before it were freed by its nvmlShutdown.
        self.initialisation = 0
        # Event waits run outside ``lock`` (they block for up to their timeout); a reopen waits for
        # them to return before it shuts NVML down, which frees every event set.
        self._waits = 0
        self._reopening = False
        self._waits_done = threading.Condition(threading.Lock())

    def _enumerate(self, count: int) -> bool:
        """Fetch every handle in place; one GPU refusing its handle leaves None at its index."""
        nvml, handles, refused = self.nvml, [], {}
        for index in range(count):
            try:
                handles.append(nvml.nvmlDeviceGetHandleByIndex(index))
            except nvml.NVMLError as exc:
                handles.append(None)
                refused[index] = exc
        if refused.keys() - self.refused.keys():
            log.warning("nvml_handles_refused", devices={i: str(refused[i]) for i in sorted(refused)})
        self.handles[:] = handles
        self.refused = refused
        return not refused

    def reopen(self) -> bool:
        """Shut NVML down and initialise it again, refreshing the handles in place for every user.

        Recovers from a driver reload, or an ``nvmlShutdown`` by other code in this process. A GPU
        whose handle cannot be had (still lost) keeps its index with a ``None`` handle, so it stays
        visible as down; the others are read as usual. Returns False when NVML did not come back:
        then every GPU keeps its index with no handle (down, not gone) until a later reopen.
        """
        nvml = self.nvml
        with self.lock:
            with self._waits_done:
                self._reopening = True
                self._waits_done.wait_for(lambda: self._waits == 0, timeout=WAIT_DRAIN_S)
            try:
                with contextlib.suppress(nvml.NVMLError):
                    nvml.nvmlShutdown()
                try:
                    nvml.nvmlInit()
                    self._enumerate(nvml.nvmlDeviceGetCount())
                    back = True
                except nvml.NVMLError as exc:
                    self.refused = dict.fromkeys(range(len(self.handles)), exc)
                    self.handles[:] = [None] * len(self.handles)
                    back = False
                self.generation += 1
                self.initialisation += 1
            finally:
                with self._waits_done:
                    self._reopening = False
            return back

    def retry_refused(self) -> bool:
        """Ask again for the handles NVML refused, leaving the others as they are; True when one came."""
        nvml = self.nvml
        with self.lock:
            got = False
            for index in sorted(self.refused):
                try:
                    self.handles[index] = nvml.nvmlDeviceGetHandleByIndex(index)
                except nvml.NVMLError as exc:
                    self.refused[index] = exc
                else:
                    del self.refused[index]
                    got = True
            if got:
                log.info("nvml_handles_recovered", refused_left=sorted(self.refused))
                self.generation += 1  # users re-read identities and re-register events
            return got

    @contextlib.contextmanager
    def event_wait(self, generation: int) -> Iterator[bool]:
        """Hold off a reopen while an event set of ``generation`` is waited on. Yields False (wait
        not allowed) while a reopen is pending or has happened since: re-register first."""
        with self._waits_done:
            allowed = not self._reopening and generation == self.generation
            if allowed:
                self._waits += 1
        try:
            yield allowed
        finally:
            if allowed:
                with self._waits_done:
                    self._waits -= 1
                    self._waits_done.notify_all()

    def classify(self, exc: BaseException) -> ErrorKind:  # noqa: PLR0911 - one answer per NVML kind
        """Map an NVML exception onto an error kind. A function the driver lacks (older driver) or has
        retired (``DEPRECATED``, CUDA 13+) is not supported: asked once, then absent."""
        nvml = self.nvml
        mismatch = getattr(nvml, "NVMLLibraryMismatchError", None)  # nvidia-ml-py >= 12.550
        if mismatch is not None and isinstance(exc, mismatch):
            return ErrorKind.NOT_SUPPORTED  # an unversioned function this driver does not have
        if not isinstance(exc, nvml.NVMLError):
            return ErrorKind.UNEXPECTED
        value = exc.value
        if value in (
            nvml.NVML_ERROR_NOT_SUPPORTED,
            nvml.NVML_ERROR_FUNCTION_NOT_FOUND,
            getattr(nvml, "NVML_ERROR_DEPRECATED", 26),
            getattr(nvml, "NVML_ERROR_ARGUMENT_VERSION_MISMATCH", 25),  # this struct version: not here
        ):
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
