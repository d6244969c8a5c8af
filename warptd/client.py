"""A small client of the local daemon's energy windows, standard library only.

    with warptd.client.window("epoch-3", sync="torch") as w:
        train_one_epoch()
    print(w.recording["energy_joules"])

``url`` defaults to ``$WARPTD_URL`` or ``http://127.0.0.1:9465``; ``token`` to ``$WARPTD_STRESS_TOKEN``
(the daemon's token; not needed on loopback without one).
"""

from __future__ import annotations

import json
import os
import urllib.error
import urllib.request
from collections.abc import Iterator
from contextlib import AbstractContextManager, contextmanager
from dataclasses import dataclass, field
from typing import Any, Literal

DEFAULT_URL = "http://127.0.0.1:9465"
Sync = Literal["torch"] | None


class WindowClientError(RuntimeError):
    """The daemon refused (``status`` and its error message) or did not answer (``status`` None)."""

    def __init__(self, message: str, status: int | None = None) -> None:
        super().__init__(message)
        self.status = status


@dataclass
class WindowHandle:
    """An open window: its ``id``, the recording as opened, and once ended the final ``recording``."""

    id: str
    opened: dict[str, Any]
    recording: dict[str, Any] | None = field(default=None)


def _request(
    method: str,
    path: str,
    payload: dict[str, Any] | None,
    *,
    url: str | None,
    token: str | None,
    timeout: float,
) -> dict[str, Any]:
    base = (url or os.environ.get("WARPTD_URL") or DEFAULT_URL).rstrip("/")
    token = token or os.environ.get("WARPTD_STRESS_TOKEN")
    headers = {"Accept": "application/json"}
    body = None
    if payload is not None:
        body = json.dumps(payload).encode()
        headers["Content-Type"] = "application/json"
    if token:
        headers["Authorization"] = f"Bearer {token}"
    request = urllib.request.Request(base + path, data=body, headers=headers, method=method)
    try:
        with urllib.request.urlopen(request, timeout=timeout) as response:
            return json.loads(response.read())
    except urllib.error.HTTPError as exc:
        try:
            message = json.loads(exc.read()).get("error", exc.reason)
        except ValueError:
            message = exc.reason
        raise WindowClientError(f"warptd answered {exc.code}: {message}", exc.code) from None
    except (urllib.error.URLError, OSError) as exc:
        reason = getattr(exc, "reason", exc)
        raise WindowClientError(f"no warptd daemon answers at {base}: {reason}") from None


def begin_window(
    name: str,
    devices: list[str] | None = None,
    labels: dict[str, str] | None = None,
    *,
    url: str | None = None,
    token: str | None = None,
    timeout: float = 10.0,
) -> dict[str, Any]:
    """Open a window on the daemon; return its recording as opened (``["id"]`` names it)."""
    payload: dict[str, Any] = {"name": name, "labels": labels or {}}
    if devices:
        payload["devices"] = list(devices)
    return _request("POST", "/windows", payload, url=url, token=token, timeout=timeout)


def end_window(
    window_id: str, *, url: str | None = None, token: str | None = None, timeout: float = 10.0
) -> dict[str, Any]:
    """End a window; return its recording (the daemon's Recording schema, as a dict)."""
    return _request("POST", f"/windows/{window_id}/end", None, url=url, token=token, timeout=timeout)


class SyncUnavailableError(ModuleNotFoundError):
    """``sync`` names a library that is not installed here; the message says what to install."""


def check_sync(sync: Sync) -> None:
    """Refuse an unknown ``sync``, or ``"torch"`` without torch, before anything starts: at the call,
    with what to install, rather than as a traceback from inside the window."""
    if sync is None:
        return
    if sync != "torch":
        raise ValueError(f"unknown sync {sync!r}; use 'torch' or None")
    import importlib.util

    if importlib.util.find_spec("torch") is None:
        from warptd.install import install_command

        raise SyncUnavailableError(
            "sync='torch' needs torch, which is not installed here: install the stress extra "
            f"({install_command('stress')}) or torch itself (pip install torch)",
            name="torch",
        )


def synchronize(sync: Sync) -> None:
    """With ``sync="torch"``, wait for the queued CUDA work (where CUDA is available) so a window's
    edges are where the device work is, not where Python queued it."""
    check_sync(sync)
    if sync is None:
        return
    import torch

    if torch.cuda.is_available():
        torch.cuda.synchronize()


def window(
    name: str,
    devices: list[str] | None = None,
    labels: dict[str, str] | None = None,
    *,
    url: str | None = None,
    token: str | None = None,
    sync: Sync = None,
    timeout: float = 10.0,
) -> AbstractContextManager[WindowHandle]:
    """An energy window around the block; ends it even when the block raises. ``sync`` is checked
    here, at the call, so a missing torch is said before any window opens."""
    check_sync(sync)
    return _window(name, devices, labels, url=url, token=token, sync=sync, timeout=timeout)


@contextmanager
def _window(
    name: str,
    devices: list[str] | None,
    labels: dict[str, str] | None,
    *,
    url: str | None,
    token: str | None,
    sync: Sync,
    timeout: float,
) -> Iterator[WindowHandle]:
    synchronize(sync)
    opened = begin_window(name, devices, labels, url=url, token=token, timeout=timeout)
    handle = WindowHandle(opened["id"], opened)
    try:
        yield handle
    finally:
        synchronize(sync)
        handle.recording = end_window(handle.id, url=url, token=token, timeout=timeout)
