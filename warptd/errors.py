"""Error kinds counted in ``warptd_sample_errors_total{kind}``."""

from enum import StrEnum


class ErrorKind(StrEnum):
    """Why a read failed; ``not_supported`` is not an error and is never counted."""

    NOT_SUPPORTED = "not_supported"
    DEVICE_LOST = "device_lost"
    PERMISSION = "permission"
    INVALID_VALUE = "invalid_value"
    SDK_ERROR = "sdk_error"
    TIMEOUT = "timeout"
    HUNG = "hung"
    UNEXPECTED = "unexpected"


class BackendUnavailableError(Exception):
    """Raised by a backend constructor when its SDK or hardware is absent; the registry logs the reason."""
