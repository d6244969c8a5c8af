"""A running daemon re-reads a config file that holds secrets and no settings: its log says what is
wrong and holds none of it (issue 39, finding 7: config_reload_failed printed ``password`` in clear)."""

from __future__ import annotations

import signal

import pytest

from tests.e2e.test_e2e import _events, start_daemon
from tests.helpers import http, wait_until


@pytest.mark.slow
def test_a_reload_of_a_file_of_secrets_logs_what_is_wrong_and_none_of_them(tmp_path):
    config = tmp_path / "warptd.toml"
    config.write_text("interval = 0.5\n")
    proc, port = start_daemon("--backend", "cpu", "--config", str(config), "--sysfs", str(tmp_path))
    try:
        assert wait_until(lambda: http(port, "GET", "/readyz")[0] == 200)
        config.write_text('password = "hunter2"\n"root:$6$saltsalt" = 1\n[db]\ntoken = "tok-987"\n')
        proc.send_signal(signal.SIGHUP)
        events = _events(proc, "config_reload_failed")
        assert events[-1]["error"] == (
            f"invalid setting password: no such setting; db: no such setting; 1 key(s) in {config} that "
            "are no setting's name (is it warptd's config file?)"
        )
        logged = repr(events)
        assert not [secret for secret in ("hunter2", "tok-987", "saltsalt", "$6$") if secret in logged]
        assert http(port, "GET", "/healthz")[0] == 200
    finally:
        proc.kill()
        proc.wait(timeout=10)
