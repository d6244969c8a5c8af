"""POST/GET/DELETE /windows: named energy windows, protected as /stress is (loopback or token); a
window opened with a lease is kept open by ``POST /windows/ID/renew``."""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Literal

from pydantic import ConfigDict, Field, field_validator

from warptd.config import WINDOW_NAME
from warptd.http.api import Api
from warptd.http.app import Answer, HttpError, Request, Response, endpoint, json_response
from warptd.http.pages import PageQuery
from warptd.http.reports import REPORT, report_response
from warptd.models import Page, WireModel
from warptd.recording.schema import Recording, recording_json
from warptd.recording.windows import WindowError, WindowManager

#: The longest lease a request may name at all; the daemon's --window-lease-max narrows it.
MAX_LEASE_S = 86400.0

_LABEL_NAME = r"^[A-Za-z_][A-Za-z0-9_]{0,63}$"
MAX_LABELS = 16
MAX_TARGETS = 256


class WindowRequest(WireModel):
    """The body of ``POST /windows``."""

    model_config = ConfigDict(extra="forbid", strict=True)

    name: str = Field(pattern=f"^{WINDOW_NAME.pattern}$", description="letters, digits, . _ : -; 1-64")
    devices: list[str] | None = Field(
        None,
        max_length=MAX_TARGETS,
        description="device (nvidia:0) or domain (rapl:package-0) ids; default every accelerator "
        "and the CPU packages",
    )
    labels: dict[str, str] = Field({}, max_length=MAX_LABELS, description="at most 16, values of 256 chars")
    lease_s: float | None = Field(
        None,
        gt=0,
        le=MAX_LEASE_S,
        allow_inf_nan=False,
        description="hold the window by a lease: it ends (end_reason lease_expired) unless renewed "
        "(POST /windows/ID/renew) within each lease_s seconds; within --window-lease-min and "
        "--window-lease-max (5-600 s by default). Without it, the window ends when asked or at "
        "--window-max-duration",
    )

    @field_validator("devices")
    @classmethod
    def _ids(cls, value: list[str] | None) -> list[str] | None:
        for item in value or ():
            if not 3 <= len(item) <= 128 or ":" not in item:
                raise ValueError(f"not a device or domain id: {item[:40]!r} (BACKEND:INDEX or SOURCE:DOMAIN)")
        return value

    @field_validator("labels")
    @classmethod
    def _labels(cls, value: dict[str, str]) -> dict[str, str]:
        for key, text in value.items():
            if not re.fullmatch(_LABEL_NAME, key):
                raise ValueError(f"label name {key[:40]!r} must match {_LABEL_NAME}")
            if len(text) > 256:
                raise ValueError(f"label {key} is over 256 characters")
        return value


class WindowLease(WireModel):
    """The answer to ``POST /windows/ID/renew``: the lease, renewed from now."""

    id: str = Field(description="The window.")
    status: Literal["open"] = Field("open", description="A renewed window is open.")
    lease_seconds: float = Field(description="The window's lease, renewed by this length from now.")
    lease_expires_at: float = Field(description="Unix time the lease lapses unless renewed again.")


class WindowList(Page):
    """Open windows, then ended ones, newest first; without their time series; one page of them."""

    windows: list[Recording]


#: ``DELETE /windows/ID`` and ``POST /windows/ID/end`` (for clients that cannot send DELETE) alike.
_END: dict[str, Any] = {"errors": (404, 409), "protected": True}


@dataclass
class WindowApi(Api):
    """``/windows``: open, list, show, end, renew and report energy windows. Reads build their answers
    (one at a time); the rest wait on locks, reads of the devices at the edges, or a report's renderer."""

    noun, refusals = "window", (WindowError,)
    off = "window endpoints are disabled on this daemon (--no-windows)"

    manager: WindowManager
    token: Callable[[], str | None]

    @endpoint("GET /windows", {200: Answer("the windows", WindowList)}, lane="builds")
    def listing(self, request: Request, query: PageQuery) -> Response:
        """open windows, then ended ones (bounded history), without time series (one page: limit, offset)"""
        # Written from each window's JSON as the manager keeps it.
        windows, total = self.manager.page(query.offset, query.limit)
        rest = Page(total=total, next=query.next("/windows", total)).model_dump_json().encode()
        return Response(200, b'{"windows":[' + b",".join(windows) + b"]," + rest[1:])  # rest: {"total":…}

    @endpoint(
        "POST /windows",
        {201: Answer("opened; Location names the window", Recording)},
        errors=(409, 429, 503),
        protected=True,
    )
    def begin(self, request: Request, body: WindowRequest) -> Response:
        """open an energy window"""
        recording = self.manager.open(body.name, body.devices, body.labels, body.lease_s)
        return Response(201, recording_json(recording), headers={"Location": f"/windows/{recording.id}"})

    def _window(self, request: Request) -> Recording:
        recording = self.manager.get(request.params["window_id"])
        if recording is None:
            raise HttpError(404, f"no window {request.params['window_id']!r}")
        return recording

    @endpoint(
        "GET /windows/{window_id}", {200: Answer("the window", Recording)}, errors=(404,), lane="builds"
    )
    def show(self, request: Request) -> Response:
        """one window: live while open, its recording once ended"""
        return Response(200, recording_json(self._window(request)))

    @endpoint("GET /windows/{window_id}/report", {200: REPORT}, errors=(404, 500, 503))
    def report(self, request: Request) -> Response:
        """a window's recording as a self-contained HTML report (report extra); while open, of what it
        recorded so far"""
        return report_response(self._window(request))

    @endpoint("DELETE /windows/{window_id}", {200: Answer("the ended window", Recording)}, **_END)
    @endpoint("POST /windows/{window_id}/end", {200: Answer("the ended window", Recording)}, **_END)
    def end(self, request: Request) -> Response:
        """end an open window; answers its recording"""
        return Response(200, recording_json(self.manager.end(request.params["window_id"])))

    @endpoint("POST /windows/{window_id}/renew", {200: Answer("renewed", WindowLease)}, **_END)
    def renew(self, request: Request) -> Response:
        """renew a leased window's lease by its lease_s from now (a client that stops renewing has its
        window ended, end_reason lease_expired)"""
        lease = self.manager.renew(request.params["window_id"])
        view = WindowLease(
            id=lease.window_id, lease_seconds=lease.lease_seconds, lease_expires_at=lease.expires_at
        )
        return json_response(200, view)
