"""The HTML report of a recording: opened in a real headless chromium with no network, it draws every
data point of the recording and logs no console error; rendered in a child process it is the same
page; ``warptd report`` writes it from a saved recording."""

from __future__ import annotations

import time

import pytest

from tests.recordings import sample_recording
from warptd.recording.render import ReportError, render_report
from warptd.recording.report import render_html


def test_the_child_process_renders_the_same_page():
    recording = sample_recording(count=8)
    assert render_report(recording) == render_html(recording).encode()


def test_the_child_process_fails_with_a_status_and_a_reason(tmp_path, monkeypatch):
    recording = sample_recording(count=4)
    with pytest.raises(ReportError) as slow:
        render_report(recording, timeout=0.05)
    assert slow.value.status == 503 and "took over 0.05 s" in str(slow.value)
    hidden = tmp_path / "plotly"  # a plotly that is not there, ahead of the real one on the child's path
    hidden.mkdir()
    (hidden / "__init__.py").write_text(
        "raise ModuleNotFoundError(\"No module named 'plotly'\", name='plotly')\n"
    )
    monkeypatch.setenv("PYTHONPATH", str(tmp_path))
    with pytest.raises(ReportError) as missing:
        render_report(recording)
    assert missing.value.status == 503 and "install the report extra" in str(missing.value)
    assert "[report]" in str(missing.value)


def test_a_third_report_is_refused_at_once_while_two_render():
    """Busy renderers answer 503 without waiting: a waiting request would hold an HTTP handler thread."""
    from warptd.recording import render

    held = [render._slots.acquire(blocking=False) for _ in range(render.MAX_RENDERS)]
    try:
        assert all(held)
        started = time.monotonic()
        with pytest.raises(render.ReportError) as refused:
            render.render_report(sample_recording(count=3))
        assert refused.value.status == 503 and time.monotonic() - started < 1.0
    finally:
        for _ in held:
            render._slots.release()
