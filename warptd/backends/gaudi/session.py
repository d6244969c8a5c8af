"""One initialised HLML per process, shared by the ``gaudi`` backend and its ``hlml`` power backend."""

from __future__ import annotations

import contextlib
import ctypes
import io
from typing import Any

from warptd.backends.shared_session import SharedSession
from warptd.errors import BackendUnavailableError
from warptd.install import install_command


def text(value: bytes | None) -> str | None:
    """HLML strings are NUL-trimmed ``bytes``; an empty one is no answer."""
    if value is None:
        return None
    return value.decode(errors="replace").strip() or None


class HlmlSession:
    """An initialised HLML with its device handles, looked up once.

    ``hlmlInit`` is not reference-counted (a second call replaces the library object, one
    ``hlmlShutdown`` ends it), so ``gaudi`` and ``hlml`` share this one through :data:`_shared`.
    """

    def __init__(self) -> None:
        try:
            import pyhlml
            from pyhlml import hlml_error, hlml_types
        except ImportError as exc:
            raise BackendUnavailableError(f"pyhlml is not installed: {install_command('gaudi')}") from exc
        self.hlml: Any = pyhlml
        self.types: Any = hlml_types
        self.error: type[Exception] = hlml_error.HLMLError
        try:
            with contextlib.redirect_stdout(io.StringIO()):  # pyhlml prints "Failed to load libhlml"
                pyhlml.hlmlInit()
        except self.error as exc:
            code = getattr(exc, "value", None)
            if code == hlml_types.HLML_RETURN.HLML_ERROR_UNINITIALIZED:  # pyhlml's answer to a failed dlopen
                raise BackendUnavailableError("libhlml.so not found: no Habana driver") from exc
            if code == hlml_types.HLML_RETURN.HLML_ERROR_DRIVER_NOT_LOADED:
                raise BackendUnavailableError("habanalabs kernel driver not loaded") from exc
            raise BackendUnavailableError(f"hlmlInit failed: {exc}") from exc
        try:
            count = pyhlml.hlmlDeviceGetCount()
        except self.error as exc:
            self.close()
            raise BackendUnavailableError(f"HLML device enumeration failed: {exc}") from exc
        #: None for a device HLML could not hand a handle for (lost at start): it stays visible as down.
        self.handles: list[ctypes.c_void_p | None] = [self._handle(i) for i in range(count)]

    def _handle(self, index: int) -> ctypes.c_void_p | None:
        """pyhlml returns one shared ``c_void_p`` that the next lookup overwrites: keep a copy."""
        try:
            return ctypes.c_void_p(self.hlml.hlmlDeviceGetHandleByIndex(index).value)
        except self.error:
            return None

    def close(self) -> None:
        with contextlib.suppress(self.error):
            self.hlml.hlmlShutdown()


_shared: SharedSession[HlmlSession] = SharedSession(HlmlSession, HlmlSession.close)
lease = _shared.lease
