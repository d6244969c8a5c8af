"""The limits the HTTP server and the windows hold are views of the settings, never copies."""

from __future__ import annotations

from dataclasses import FrozenInstanceError, fields
from typing import ClassVar

import pytest

from warptd.config import Settings, SettingsView, load_settings
from warptd.http.limits import MAX_BODY_BYTES, HttpLimits
from warptd.recording.windows import WindowLimits


@pytest.mark.parametrize(("view", "prefix"), [(HttpLimits, "http_"), (WindowLimits, "window_")])
def test_a_views_defaults_are_its_settings_defaults(view, prefix):
    defaults = view()
    for field in fields(view):
        assert getattr(defaults, field.name) == Settings.model_fields[prefix + field.name].default


def test_a_view_reads_the_settings_it_names(monkeypatch):
    monkeypatch.setenv("WARPTD_HTTP_MAX_REQUESTS", "7")
    settings = load_settings(http_max_response_bytes="1MiB", window_lease_min=0.5, window_memory="64MiB")
    http, windows = HttpLimits.of(settings), WindowLimits.of(settings)
    assert (http.max_requests, http.max_response_bytes, http.backlog) == (7, 2**20, 1024)
    assert (windows.lease_min, windows.memory, windows.max_open) == (0.5, 64 * 2**20, 64)
    assert HttpLimits.max_body_bytes == MAX_BODY_BYTES  # the view's own constant, no setting
    assert HttpLimits(max_connections=2).max_connections == 2  # tests shape one by hand
    with pytest.raises(FrozenInstanceError):
        http.max_requests = 8  # type: ignore[misc]


def test_a_view_of_a_setting_that_does_not_exist_fails_where_it_is_declared():
    with pytest.raises(KeyError, match="http_header_timout"):

        class _Typo(SettingsView, prefix="http_"):
            header_timout: float

    class _Own(SettingsView, prefix="http_"):
        backlog: int
        unit: ClassVar[str] = "connections"

    assert _Own().backlog == 1024 and [f.name for f in fields(_Own)] == ["backlog"]
