"""A recording's HTML report as an HTTP response, for every route that serves one (stress, windows).

Endpoints that call this are declared in the ``waits`` lane: rendering runs a child process for about
a second, on a handler thread, never on the event loop that serves scrapes, at a lower CPU priority
than the daemon (``nice`` 10), so a scrape does not wait for a core behind it.
"""

from __future__ import annotations

import re
from typing import TYPE_CHECKING

from warptd.http.app import Answer, HttpError, Response

if TYPE_CHECKING:
    from warptd.recording.schema import Recording

#: The page runs its own inline scripts and styles (plotly) and loads nothing from anywhere.
CONTENT_SECURITY_POLICY = (
    "default-src 'none'; script-src 'unsafe-inline'; style-src 'unsafe-inline'; img-src data:; "
    "base-uri 'none'; form-action 'none'; frame-ancestors 'none'"
)

#: What an endpoint that serves a report answers.
REPORT = Answer("the report: plots and summary, works offline", media="text/html")


def report_response(recording: Recording) -> Response:
    """200 with the self-contained page, or the renderer's failure as a JSON error."""
    from warptd.recording.render import ReportError, render_report  # on the first report, not at start

    try:
        page = render_report(recording)
    except ReportError as exc:
        raise HttpError(exc.status, str(exc)) from None
    safe_id = re.sub(r"[^A-Za-z0-9_.-]", "_", recording.id)  # a header value, whatever the id holds
    filename = f"warptd-{recording.kind}-{safe_id}.html"
    headers = {
        "Content-Security-Policy": CONTENT_SECURITY_POLICY,
        "Content-Disposition": f'inline; filename="{filename}"',
    }
    return Response(200, page, "text/html; charset=utf-8", headers)
