"""Masking what fingerprints a machine or a user in a capture, keeping each identifier's shape.

GPU and MIG UUIDs, serials and board part numbers are found where the capture holds them, then every
occurrence of each, in any text of the file, is replaced by a mask of the same shape: a hex digit by a
hex digit, a digit by a digit, a letter by a letter of the same case, anything else kept (``GPU-8e0a…``
stays a UUID of the same layout). The hostname, process names and command lines, which may be common
words, are masked alike where the capture holds them only (a process named ``capture`` leaves the
word elsewhere alone). The mask of an identifier is drawn from a key made for this file, so one
identifier masks the same throughout it, and two files mask it differently.
"""

from __future__ import annotations

import hashlib
import hmac
import secrets
import string
from collections.abc import Callable
from typing import Any

from warptd.capture import schema

_HEX = frozenset("0123456789abcdefABCDEF")
_HEXADECIMAL: frozenset[str] = frozenset({"gpu_uuid", "mig_uuid"})
#: Identifiers distinct enough to be masked in any text they occur in (a MIG UUID naming its GPU's).
_EVERYWHERE: frozenset[str] = frozenset({"gpu_uuid", "mig_uuid", "serial", "board_part_number"})
#: Shorter text is left as it is: a process named "sh" masks to another two letters, and every "sh" in
#: the file with it (a command line's paths included).
_SHORTEST = 3
#: The calls answering an identifier, and its kind (a UUID on a MIG device's handle is a MIG UUID).
_NAMING: dict[str, schema.MaskKind] = {
    "nvmlDeviceGetUUID": "gpu_uuid",
    "nvmlDeviceGetSerial": "serial",
    "nvmlDeviceGetBoardPartNumber": "board_part_number",
}


class Masker:
    """Masks of one file: the same identifier masks the same; ``found`` counts what was masked, by kind."""

    def __init__(self, key: bytes | None = None) -> None:
        self._key = key or secrets.token_bytes(32)
        self.masks: dict[str, str] = {}
        self._everywhere: dict[str, bool] = {}
        self.found: dict[schema.MaskKind, set[str]] = {}

    def add(self, kind: schema.MaskKind, identifier: str | None) -> None:
        """Mask ``identifier`` (of ``kind``): a UUID, serial or part number wherever it occurs, the
        others where the capture holds them."""
        if not identifier or len(identifier) < _SHORTEST:
            return
        self.found.setdefault(kind, set()).add(identifier)
        if identifier not in self.masks:
            self.masks[identifier] = self._shaped(identifier, hexadecimal=kind in _HEXADECIMAL)
        if kind in _EVERYWHERE:
            self._everywhere[identifier] = True

    def _shaped(self, identifier: str, hexadecimal: bool) -> str:
        stream = hmac.new(self._key, identifier.encode(), hashlib.sha512).digest()
        while len(stream) < len(identifier):
            stream += hashlib.sha512(stream).digest()
        masked = []
        for char, byte in zip(identifier, stream, strict=False):
            if hexadecimal:  # hex digits masked, the rest (GPU-, MIG-, dashes) kept
                digits = "0123456789ABCDEF" if char.isupper() else string.hexdigits[:16]
                masked.append(digits[byte % 16] if char in _HEX else char)
            elif char.isdigit():
                masked.append(string.digits[byte % 10])
            elif char.isascii() and char.isalpha():
                letters = string.ascii_uppercase if char.isupper() else string.ascii_lowercase
                masked.append(letters[byte % 26])
            else:
                masked.append(char)
        return "".join(masked)

    def text(self, value: str) -> str:
        """``value`` with every identifier found anywhere in it masked (the longest first)."""
        for identifier in sorted(self.masks, key=len, reverse=True):
            if identifier in value and self._everywhere.get(identifier):
                value = value.replace(identifier, self.masks[identifier])
        return value

    def whole(self, value: str | None) -> str | None:
        """``value`` masked where it is one of the identifiers, else as it is."""
        return self.masks.get(value, value) if value is not None else None


def mask(capture: schema.Capture, masker: Masker | None = None) -> tuple[schema.Capture, dict[str, int]]:
    """``capture`` with its identifiers masked, and how many of each kind were."""
    masker = masker or Masker()
    _collect(capture, masker)
    if not masker.masks:
        return capture, {}
    dumped = _walk(capture.model_dump(mode="json"), masker.text)
    dumped["node"]["hostname"] = masker.whole(dumped["node"].get("hostname"))
    for gpu in dumped["gpus"]:
        for state in gpu["states"].values():
            for process in state.get("processes", ()):
                process["name"] = masker.whole(process.get("name"))
                if process.get("cmdline") is not None:
                    process["cmdline"] = [masker.whole(part) for part in process["cmdline"]]
    kinds = tuple(sorted(masker.found))
    dumped["header"]["masked"] = list(kinds)
    return schema.Capture.model_validate(dumped), {kind: len(masker.found[kind]) for kind in kinds}


def _collect(capture: schema.Capture, masker: Masker) -> None:
    """Every identifier the capture holds, by kind."""
    masker.add("hostname", capture.node.hostname)
    for gpu in capture.gpus:
        masker.add("gpu_uuid", gpu.identity.uuid)
        masker.add("serial", gpu.identity.serial)
        masker.add("board_part_number", gpu.identity.board_part_number)
        for state in gpu.states.values():
            for call in state.calls:
                kind = _NAMING.get(call.function)
                if kind == "gpu_uuid" and call.device != schema.GPU:
                    kind = "mig_uuid"
                if kind is not None and isinstance(call.value, str):
                    masker.add(kind, call.value)
            for process in state.processes:
                masker.add("process_name", process.name)
                for part in process.cmdline or ():
                    masker.add("process_cmdline", part)


def _walk(value: Any, text: Callable[[str], str]) -> Any:
    if isinstance(value, str):
        return text(value)
    if isinstance(value, list):
        return [_walk(item, text) for item in value]
    if isinstance(value, dict):
        return {key: _walk(item, text) for key, item in value.items()}
    return value
