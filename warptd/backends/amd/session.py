"""The process-wide amdsmi session: importing the package, ``amdsmi_init``, the GPU handles, and the
error kind of each status code. ``amd`` and its ``amdsmi`` power backend share it."""

from __future__ import annotations

import contextlib
import io
from dataclasses import dataclass, field
from types import ModuleType
from typing import Any

from warptd.backends.shared_session import SharedSession
from warptd.errors import BackendUnavailableError, ErrorKind
from warptd.install import install_command

#: Status codes (``amdsmi_wrapper.AMDSMI_STATUS_*``) by the error kind they mean; the rest are SDK errors.
_STATUS_KINDS: dict[str, ErrorKind] = {
    "AMDSMI_STATUS_NOT_SUPPORTED": ErrorKind.NOT_SUPPORTED,
    "AMDSMI_STATUS_NOT_YET_IMPLEMENTED": ErrorKind.NOT_SUPPORTED,
    "AMDSMI_STATUS_NO_PERM": ErrorKind.PERMISSION,
    "AMDSMI_STATUS_TIMEOUT": ErrorKind.TIMEOUT,
    "AMDSMI_STATUS_NOT_FOUND": ErrorKind.DEVICE_LOST,
    "AMDSMI_STATUS_DRIVER_NOT_LOADED": ErrorKind.DEVICE_LOST,
    "AMDSMI_STATUS_AMDGPU_RESTART_ERR": ErrorKind.DEVICE_LOST,
}


@dataclass
class AmdsmiSession:
    """An initialised amdsmi: the module, the GPU handles, and the error kind of each status code."""

    sdk: ModuleType
    handles: list[Any]
    kinds: dict[int, ErrorKind] = field(default_factory=dict)

    def classify(self, exc: BaseException) -> ErrorKind | None:
        """The error kind of an exception amdsmi raised; None for one that is not amdsmi's."""
        sdk = self.sdk
        if isinstance(exc, sdk.AmdSmiLibraryException):
            return self.kinds.get(exc.err_code, ErrorKind.SDK_ERROR)
        if isinstance(exc, sdk.AmdSmiParameterException):
            return ErrorKind.UNEXPECTED  # a wrong argument type: our bug, not the GPU's
        if isinstance(exc, sdk.AmdSmiException):
            return ErrorKind.SDK_ERROR
        return None


def _import_amdsmi() -> ModuleType:
    """amdsmi prints to stdout and raises ``KeyError('libamd_smi.so')`` when the library is missing."""
    try:
        with contextlib.redirect_stdout(io.StringIO()):
            import amdsmi
    except ModuleNotFoundError as exc:
        if exc.name != "amdsmi":
            raise BackendUnavailableError(f"amdsmi import failed: {exc}") from exc
        raise BackendUnavailableError(f"amdsmi is not installed: {install_command('amd')}") from exc
    except Exception as exc:
        raise BackendUnavailableError("libamd_smi.so not found (install ROCm's amd-smi-lib)") from exc
    return amdsmi


def _open() -> AmdsmiSession:
    sdk = _import_amdsmi()
    try:
        sdk.amdsmi_init(sdk.AmdSmiInitFlags.INIT_AMD_GPUS)
    except Exception as exc:
        raise BackendUnavailableError(f"amdsmi_init failed: {one_line(exc)}") from exc
    try:
        handles = list(sdk.amdsmi_get_processor_handles())
    except Exception as exc:
        _close_sdk(sdk)
        raise BackendUnavailableError(f"amdsmi GPU enumeration failed: {one_line(exc)}") from exc
    wrapper = sdk.amdsmi_wrapper
    kinds = {getattr(wrapper, n): kind for n, kind in _STATUS_KINDS.items() if hasattr(wrapper, n)}
    return AmdsmiSession(sdk, handles, kinds)


def _close_sdk(sdk: ModuleType) -> None:
    with contextlib.suppress(Exception):
        sdk.amdsmi_shut_down()


def one_line(exc: BaseException) -> str:
    """AmdSmiLibraryException's text spans lines ("Error code:\\n\\t34 | …")."""
    return " ".join(str(exc).split()) or type(exc).__name__


#: amdsmi_init/amdsmi_shut_down are process-wide: one session for ``amd`` and its ``amdsmi`` power backend.
_shared: SharedSession[AmdsmiSession] = SharedSession(_open, lambda s: _close_sdk(s.sdk))
lease = _shared.lease
