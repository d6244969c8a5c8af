"""sd_notify: the daemon sends READY=1 after the first sample and pings the watchdog."""

from __future__ import annotations

import socket
import time

import pytest

from warptd.daemon import Daemon
from warptd.systemd import Notifier


@pytest.mark.slow
def test_ready_and_watchdog_over_a_real_notify_socket(settings, tmp_path, monkeypatch):
    path = tmp_path / "notify.sock"
    server = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    server.bind(str(path))
    server.settimeout(5)
    monkeypatch.setenv("NOTIFY_SOCKET", str(path))
    monkeypatch.setenv("WATCHDOG_USEC", "400000")  # 0.4 s: a ping every 0.2 s
    settings.backends = ["cpu"]
    daemon = Daemon(settings)
    daemon.start()
    try:
        messages: list[str] = []
        deadline = time.monotonic() + 5
        while time.monotonic() < deadline and sum("WATCHDOG=1" in m for m in messages) < 3:
            messages.append(server.recv(4096).decode())
        ready = [m for m in messages if m.startswith("READY=1")]
        assert len(ready) == 1 and "STATUS=serving 1 backends" in ready[0]
        assert daemon.snapshot.ready()  # READY only after the first sample
        assert sum("WATCHDOG=1" in m for m in messages) >= 3
    finally:
        daemon.stop()
    assert "STOPPING=1" in server.recv(4096).decode()
    server.close()


def test_no_socket_no_notifications():
    notifier = Notifier({})
    assert not notifier.enabled and notifier.notify("READY=1") is False


def test_abstract_socket_and_foreign_watchdog_pid():
    notifier = Notifier({"NOTIFY_SOCKET": "@warptd", "WATCHDOG_USEC": "1000000", "WATCHDOG_PID": "1"})
    assert notifier.address == "\0warptd" and notifier.watchdog_s is None
