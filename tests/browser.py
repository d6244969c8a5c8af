"""A real headless chromium (Debian's) opening a page, for every test of a page a person opens."""

from __future__ import annotations

import subprocess
import tempfile

from tests.conftest import require_tool


def browse(url: str, budget_ms: int = 10_000) -> tuple[str, list[str]]:
    """The DOM after the page's scripts ran, and its console lines. Every host name but 127.0.0.1
    resolves nowhere, so a resource the page tried to fetch shows as a console error."""
    chromium = require_tool("chromium")
    with tempfile.TemporaryDirectory() as profile:
        result = subprocess.run(
            [
                chromium,
                "--headless",
                "--no-sandbox",
                "--disable-gpu",
                "--disable-background-networking",
                "--disable-component-update",
                "--no-first-run",
                "--host-resolver-rules=MAP * ~NOTFOUND, EXCLUDE 127.0.0.1",
                f"--user-data-dir={profile}",
                "--enable-logging=stderr",
                "--v=0",
                f"--virtual-time-budget={budget_ms}",
                "--dump-dom",
                url,
            ],
            capture_output=True,
            text=True,
            timeout=120,
            check=False,
        )
    assert result.returncode == 0, result.stderr[-3000:]
    console = [
        line
        for line in result.stderr.splitlines()
        if "CONSOLE" in line or "Content Security Policy" in line or "Failed to load" in line
    ]
    return result.stdout, console
