"""A small client of the local daemon's energy windows, standard library only.

    with warptd.client.window("epoch-3", sync="torch") as w:
        train_one_epoch()
    print(w.recording["energy_joules"])

``url`` defaults to ``$WARPTD_URL`` or ``http://127.0.0.1:9465``; ``token`` to ``$WARPTD_STRESS_TOKEN``
(the daemon's token; not needed on loopback without one). ``window`` holds its window by a lease that
a background thread renews, so a process that dies (even by SIGKILL) leaves no window open for long.
"""

from __future__ import annotations

import json
import os
import threading
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Iterator
from contextlib import AbstractContextManager, contextmanager
from dataclasses import dataclass, field
from typing import Any, Literal

DEFAULT_URL = "http://127.0.0.1:9465"
#: The lease ``window`` holds its window by: a dead client's window ends 20-30 s after its death.
DEFAULT_LEASE_S = 30.0
#: Renewals per lease: one lost or hung renewal still leaves the lease held (see :class:`LeaseKeeper`).
RENEWALS_PER_LEASE = 3
#: A renewal gives up after this share of a period, so a hung daemon cannot hold the next try back.
RENEWAL_TIMEOUT_PERIODS = 0.5
#: After a failed renewal the next try comes this share of a period later, not a whole period.
RETRY_PERIODS = 0.25
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
    #: Keeps the lease while the block runs; None when the window has no lease.
    keeper: LeaseKeeper | None = field(default=None, repr=False)


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
    headers: dict[str, str | bytes] = {"Accept": "application/json"}
    body = None
    if payload is not None:
        body = json.dumps(payload).encode()
        headers["Content-Type"] = "application/json"
    if token:
        headers["Authorization"] = b"Bearer " + token.encode()  # UTF-8, as the daemon reads it
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
    lease_s: float | None = None,
    url: str | None = None,
    token: str | None = None,
    timeout: float = 10.0,
) -> dict[str, Any]:
    """Open a window on the daemon; return its recording as opened (``["id"]`` names it). With
    ``lease_s`` the daemon ends it unless :func:`renew_window` is called within each ``lease_s``
    (:class:`LeaseKeeper` does that on a thread)."""
    payload: dict[str, Any] = {"name": name, "labels": labels or {}}
    if devices:
        payload["devices"] = list(devices)
    if lease_s is not None:
        payload["lease_s"] = lease_s
    return _request("POST", "/windows", payload, url=url, token=token, timeout=timeout)


def renew_window(
    window_id: str, *, url: str | None = None, token: str | None = None, timeout: float = 10.0
) -> dict[str, Any]:
    """Renew a leased window's lease from now; answers ``{"id", "lease_seconds", "lease_expires_at"}``."""
    return _request("POST", f"/windows/{window_id}/renew", None, url=url, token=token, timeout=timeout)


class LeaseKeeper:
    """Renews a window's lease on a daemon thread every ``lease_s / 3`` until :meth:`stop`: while
    this process lives, its window stays open; once it dies, the daemon ends the window.

    Tries are scheduled on the monotonic clock from each try's start; each request waits at most
    half a period per socket operation and a failed one is retried a quarter period later, so a
    renewal that hangs still leaves two more tries before the lease lapses."""

    def __init__(
        self, window_id: str, lease_s: float, *, url: str | None = None, token: str | None = None
    ) -> None:
        self.window_id = window_id
        self.period = lease_s / RENEWALS_PER_LEASE
        self.request_timeout = self.period * RENEWAL_TIMEOUT_PERIODS
        self.retry_s = self.period * RETRY_PERIODS
        self.renewals = 0
        #: The refusal that stopped the renewals (the window ended, or its lease lapsed), if any.
        self.error: WindowClientError | None = None
        self._url, self._token = url, token
        self._stopped = threading.Event()
        self._thread = threading.Thread(target=self._run, name=f"warptd-lease-{window_id}", daemon=True)

    def start(self) -> LeaseKeeper:
        self._thread.start()
        return self

    def _run(self) -> None:
        next_try = time.monotonic() + self.period
        while not self._stopped.wait(max(0.0, next_try - time.monotonic())):
            started = time.monotonic()
            try:
                renew_window(self.window_id, url=self._url, token=self._token, timeout=self.request_timeout)
            except WindowClientError as exc:
                if exc.status in (404, 409):  # ended or lapsed: nothing left to renew
                    self.error = exc
                    return
                # no answer this time: try again soon, while the lease still has time left
                next_try = min(started + self.period, time.monotonic() + self.retry_s)
                continue
            self.renewals += 1
            next_try = started + self.period

    def stop(self) -> None:
        """Stop renewing (the window stays open until ended or its lease lapses)."""
        self._stopped.set()
        if self._thread.is_alive() and self._thread is not threading.current_thread():
            self._thread.join(timeout=self.request_timeout + 1.0)


def begin_leased_window(
    name: str,
    devices: list[str] | None,
    labels: dict[str, str] | None,
    lease_s: float | None,
    *,
    url: str | None,
    token: str | None,
    timeout: float,
) -> tuple[dict[str, Any], LeaseKeeper | None]:
    """Open a window held by ``lease_s`` and start renewing it; a daemon older than leases (its 422
    names ``lease_s`` as an unknown field) gets a window without one, as before."""
    if lease_s is None:
        return begin_window(name, devices, labels, url=url, token=token, timeout=timeout), None
    try:
        opened = begin_window(name, devices, labels, lease_s=lease_s, url=url, token=token, timeout=timeout)
    except WindowClientError as exc:
        if exc.status != 422 or "lease_s: Extra inputs are not permitted" not in str(exc):
            raise
        return begin_window(name, devices, labels, url=url, token=token, timeout=timeout), None
    return opened, LeaseKeeper(opened["id"], lease_s, url=url, token=token).start()


def end_window(
    window_id: str, *, url: str | None = None, token: str | None = None, timeout: float = 10.0
) -> dict[str, Any]:
    """End a window; return its recording (the daemon's Recording schema, as a dict)."""
    return _request("POST", f"/windows/{window_id}/end", None, url=url, token=token, timeout=timeout)


def get_window(
    window_id: str, *, url: str | None = None, token: str | None = None, timeout: float = 10.0
) -> dict[str, Any]:
    """A window's recording, open or ended (the daemon keeps ended ones in its history)."""
    return _request("GET", f"/windows/{window_id}", None, url=url, token=token, timeout=timeout)


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
    lease_s: float | None = DEFAULT_LEASE_S,
) -> AbstractContextManager[WindowHandle]:
    """An energy window around the block; ends it even when the block raises. ``sync`` is checked
    here, at the call, so a missing torch is said before any window opens. The window is held by a
    ``lease_s`` lease renewed on a thread while the block runs (``lease_s=None``: no lease)."""
    check_sync(sync)
    return _window(name, devices, labels, url=url, token=token, sync=sync, timeout=timeout, lease_s=lease_s)


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
    lease_s: float | None,
) -> Iterator[WindowHandle]:
    synchronize(sync)
    opened, keeper = begin_leased_window(
        name, devices, labels, lease_s, url=url, token=token, timeout=timeout
    )
    handle = WindowHandle(opened["id"], opened, keeper=keeper)
    try:
        yield handle
    finally:
        try:  # a sync that raises (a sticky CUDA error) still stops the renewals and ends the window
            synchronize(sync)
        finally:
            try:
                if keeper is not None:
                    keeper.stop()
            finally:
                handle.recording = end_window(handle.id, url=url, token=token, timeout=timeout)


def get_workloads(
    *, url: str | None = None, token: str | None = None, timeout: float = 10.0
) -> dict[str, Any]:
    """Every workload the daemon tracks (``--workloads``), with the unattributed energy: the pages
    of the listing one after another (at most ``--workload-max`` workloads, 100 a page)."""
    listing = _request("GET", "/workloads?limit=100", None, url=url, token=token, timeout=timeout)
    following, pages = listing.get("next"), 1
    while following and pages <= _MAX_PAGES:
        page = _request("GET", following, None, url=url, token=token, timeout=timeout)
        listing["workloads"] += page["workloads"]
        following, pages = page.get("next"), pages + 1
    listing["next"] = None
    return listing


#: The pages of a listing followed: --workload-max's largest (100,000) at 100 a page.
_MAX_PAGES = 1000


def get_workload(
    kind: str, workload_id: str, *, url: str | None = None, token: str | None = None, timeout: float = 10.0
) -> dict[str, Any]:
    """One workload's energy per device and CPU, its devices, start and end (``--workloads``)."""
    return _request("GET", _workload_path(kind, workload_id), None, url=url, token=token, timeout=timeout)


def get_workload_recording(
    kind: str, workload_id: str, *, url: str | None = None, token: str | None = None, timeout: float = 30.0
) -> dict[str, Any]:
    """One workload's recording: its devices' readings with its share of their energy (``--workloads``)."""
    path = _workload_path(kind, workload_id) + "/recording"
    return _request("GET", path, None, url=url, token=token, timeout=timeout)


def _workload_path(kind: str, workload_id: str) -> str:
    return f"/workloads/{urllib.parse.quote(kind, safe='')}/{urllib.parse.quote(workload_id, safe='')}"
