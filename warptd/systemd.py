"""sd_notify without libsystemd: READY=1 after the first sample, WATCHDOG=1 while healthy.

Does nothing unless systemd (or a test) sets ``NOTIFY_SOCKET``; ``WATCHDOG_USEC`` sets the
watchdog period, pinged at half of it.
"""

from __future__ import annotations

import os
import socket
import threading
from collections.abc import Callable

import structlog

log = structlog.get_logger("warptd.systemd")


class Notifier:
    """Sends datagrams to ``$NOTIFY_SOCKET`` (a path, or ``@name`` in the abstract namespace)."""

    def __init__(self, environ: dict[str, str] | None = None) -> None:
        env = os.environ if environ is None else environ
        address = env.get("NOTIFY_SOCKET", "")
        self.address = "\0" + address[1:] if address.startswith("@") else address
        usec = env.get("WATCHDOG_USEC", "")
        pid = env.get("WATCHDOG_PID", "")
        mine = not pid or pid == str(os.getpid())
        self.watchdog_s = int(usec) / 1e6 if usec.isdigit() and int(usec) > 0 and mine else None
        self._stop = threading.Event()

    @property
    def enabled(self) -> bool:
        return bool(self.address)

    def notify(self, message: str) -> bool:
        if not self.enabled:
            return False
        try:
            with socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM) as sock:
                sock.sendto(message.encode(), self.address)
            return True
        except OSError as exc:
            log.warning("sd_notify_failed", error=str(exc))
            return False

    def ready(self, status: str) -> None:
        self.notify(f"READY=1\nSTATUS={status}")

    def start_watchdog(self, healthy: Callable[[], bool]) -> None:
        """Ping every half period while ``healthy()``; a wedged daemon stops pinging and is restarted."""
        if not self.enabled or self.watchdog_s is None:
            return
        period = self.watchdog_s / 2

        def loop() -> None:
            while not self._stop.wait(period):
                if healthy():
                    self.notify("WATCHDOG=1")

        threading.Thread(target=loop, name="warptd-watchdog", daemon=True).start()

    def stopping(self) -> None:
        self._stop.set()
        self.notify("STOPPING=1")
