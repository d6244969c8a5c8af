"""One NVML initialisation per process, shared by the ``nvidia`` and ``nvml`` backends.

Device handles are looked up once here and cached; per-sample code never calls
``nvmlDeviceGetHandleByIndex``.
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Callable, Iterator
from types import ModuleType
from typing import Any

import structlog

from warptd.backends.nvidia.slots import Identity, place
from warptd.backends.session_lock import SessionLock
from warptd.backends.shared_session import SharedSession
from warptd.errors import BackendUnavailableError, ErrorKind
from warptd.install import install_command

log = structlog.get_logger("warptd.nvml")
#: How long a reopen waits for event waits in progress to return (they use a 1 s timeout).
WAIT_DRAIN_S = 5.0
#: How long a reopen waits for the reads in progress to let go of the session (a read takes
#: milliseconds; one that hangs never lets go, and the reopen is tried again later).
REOPEN_WAIT_S = 0.25


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
        #: Index -> the NVML error that refused its handle at the last enumeration (``GPU_IS_LOST``
        #: for a GPU NVML no longer lists: its index stays, down).
        self.refused: dict[int, BaseException] = {}
        #: Index -> the GPU's identity as last enumerated, and its position in NVML's list now (None:
        #: not listed now): :mod:`~warptd.backends.nvidia.slots`.
        self._identities: list[Identity | None] = []
        self._positions: list[int | None] = []
        try:
            self._enumerate(pynvml.nvmlDeviceGetCount())
        except pynvml.NVMLError as exc:
            pynvml.nvmlShutdown()
            raise BackendUnavailableError(f"NVML device enumeration failed: {exc}") from exc
        #: Shared by the reads of devices (one device's hung call does not stop the others'), held
        #: alone while NVML is reopened, so no read meets a half-reset NVML.
        self.lock = SessionLock()
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
        """Fetch every handle in place, each GPU at the index it had (by UUID: a GPU gone leaves its
        index empty rather than the next GPU taking it); one GPU refusing its handle, or gone, leaves
        None at its index."""
        nvml, listed, identities, errors = self.nvml, [], [], {}
        for position in range(count):
            try:
                handle = nvml.nvmlDeviceGetHandleByIndex(position)
            except nvml.NVMLError as exc:
                listed.append(None)
                identities.append(None)
                errors[position] = exc
                continue
            listed.append(handle)
            identities.append(self._identity(handle))
        positions = place(self._identities, identities)
        handles, refused = [], {}
        for index, position in enumerate(positions):
            handles.append(listed[position] if position is not None else None)
            if position is None:
                refused[index] = nvml.NVMLError(nvml.NVML_ERROR_GPU_IS_LOST)
            elif position in errors:
                refused[index] = errors[position]
        known = [*self._identities, *[None] * (len(positions) - len(self._identities))]
        self._identities = [
            (identities[position] or known[index]) if position is not None else known[index]
            for index, position in enumerate(positions)
        ]
        if refused.keys() - self.refused.keys():
            log.warning("nvml_handles_refused", devices={i: str(refused[i]) for i in sorted(refused)})
        moved = {i: p for i, p in enumerate(positions) if p is not None and p != i}
        if moved:
            log.info("nvml_indices_kept", gone=sorted(self.gone_of(positions)), moved=moved)
        self.handles[:] = handles
        self.refused = refused
        self._positions = positions
        return not refused

    def _identity(self, handle: Any) -> Identity | None:
        """A GPU's UUID and PCI address (None where it answers neither now)."""
        nvml = self.nvml
        try:
            uuid: str | None = text(nvml.nvmlDeviceGetUUID(handle))
        except nvml.NVMLError:
            uuid = None
        try:
            address: str | None = text(nvml.nvmlDeviceGetPciInfo(handle).busId)
        except nvml.NVMLError:
            address = None
        return Identity(uuid, address) if uuid or address else None

    @staticmethod
    def gone_of(positions: list[int | None]) -> set[int]:
        return {index for index, position in enumerate(positions) if position is None}

    @property
    def gone(self) -> set[int]:
        """Indices of GPUs NVML does not list now: down until a reopen lists them again."""
        return self.gone_of(self._positions)

    def reopen(self, before: Callable[[], None] | None = None) -> bool:
        """Shut NVML down and initialise it again, refreshing the handles in place for every user;
        ``before`` runs first, once no read is in progress (free what the old NVML made).

        Recovers from a driver reload, or an ``nvmlShutdown`` by other code in this process. A GPU
        whose handle cannot be had (still lost, or no longer listed) keeps its index with a ``None``
        handle, so it stays visible as down; the others are read as usual. Returns False when NVML
        did not come back: then every GPU keeps its index with no handle (down, not gone) until a
        later reopen. Also False, changing nothing, when a read did not let go of the session within
        :data:`REOPEN_WAIT_S` (a call that hangs): tried again at the next rediscovery.
        """
        nvml = self.nvml
        with self.lock.exclusive(REOPEN_WAIT_S) as alone:
            if not alone:
                log.warning(
                    "nvml_reopen_deferred",
                    reason="a read of a GPU has not returned",
                    readers=self.lock.readers(),
                )
                return False
            if before is not None:
                before()
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
                    self._positions = [None] * len(self.handles)
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
        with self.lock.exclusive(REOPEN_WAIT_S) as alone:
            if not alone:
                return False
            got = False
            for index in sorted(self.refused):
                position = self._positions[index] if index < len(self._positions) else None
                if position is None:
                    continue  # not listed now: only a reopen may list it again
                try:
                    self.handles[index] = nvml.nvmlDeviceGetHandleByIndex(position)
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
