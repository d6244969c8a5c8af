"""The daemon: the samplers and what their samples feed (telemetry.py), the HTTP server over them
(web.py), and the service that starts, reloads and stops them (service.py)."""

from __future__ import annotations

from warptd.daemon.service import Daemon

__all__ = ["Daemon"]
