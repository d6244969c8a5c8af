"""The running service: the telemetry and its HTTP server, started and stopped together, reloaded on
SIGHUP, and told to systemd."""

from __future__ import annotations

import gc
import signal
import threading
import time
from collections.abc import Callable
from types import FrameType

import structlog

from warptd import __version__
from warptd.config import RELOADABLE, Settings, SettingsError
from warptd.daemon.telemetry import Telemetry
from warptd.daemon.web import make_router, make_server
from warptd.logs import configure_logging
from warptd.registry import Loaded, load_backends
from warptd.systemd import Notifier

log = structlog.get_logger("warptd")


class Daemon(Telemetry):
    """The running service. ``start()`` returns once the HTTP server listens; ``stop()`` is idempotent."""

    def __init__(
        self, settings: Settings, loaded: Loaded | None = None, reload: Callable[[], Settings] | None = None
    ) -> None:
        super().__init__(settings, loaded if loaded is not None else load_backends(settings))
        self._reload = reload
        self._token = settings.stress_token_value()
        self.router = make_router(self, lambda: self._token)
        self.server = make_server(settings, self.router)
        self.notifier = Notifier()
        self._http_thread: threading.Thread | None = None
        self._stopped = threading.Event()
        self._stop_lock = threading.Lock()

    @property
    def port(self) -> int:
        return self.server.port

    def start(self) -> None:
        super().start()
        self._http_thread = self.server.start()
        # What start-up built lives as long as the process: out of the cyclic GC's full passes, which
        # otherwise walk it all (~20 ms at 70k objects) while a scrape waits.
        gc.freeze()
        threading.Thread(target=self._announce_ready, name="warptd-ready", daemon=True).start()
        self.notifier.start_watchdog(self.healthy)
        log.info(
            "warptd_started",
            url=self.url,
            version=__version__,
            listen=f"{self.settings.listen_address[0] or '*'}:{self.port}",
            backends=sorted(self.sampler.backends),
            interval_s=self.settings.interval,
        )

    @property
    def url(self) -> str:
        """Where the metrics are served, as a URL to paste (``localhost`` when every address listens)."""
        host = self.settings.listen_address[0] or "localhost"
        host = f"[{host}]" if ":" in host else host
        return f"{'https' if self.server.tls else 'http'}://{host}:{self.port}/metrics"

    def healthy(self) -> bool:
        """Alive for the watchdog: the HTTP thread serves and the scheduler runs."""
        http_alive = self._http_thread is not None and self._http_thread.is_alive()
        return http_alive and self.sampler.scheduler.running and not self._stopped.is_set()

    def _announce_ready(self) -> None:
        """READY=1 once every backend finished its first sample (bounded by one timeout); at once
        when none loaded (the process is up; /readyz says 503 and why)."""
        deadline = time.monotonic() + self.settings.interval + self.settings.sample_timeout + 5
        while self.snapshot.pending() and time.monotonic() < deadline and not self._stopped.is_set():
            time.sleep(0.05)
        if not self._stopped.is_set():
            self.notifier.ready(f"serving {len(self.sampler.backends)} backends on port {self.port}")

    def stop(self) -> None:
        with self._stop_lock:
            if self._stopped.is_set():
                return
            self.notifier.stopping()
            self.server.shutdown()  # first: no request can start a job from here on
            self.server.server_close()
            super().stop()
            self._stopped.set()
        log.info("warptd_stopped")

    def run(self) -> int:
        """Serve until SIGTERM or SIGINT."""

        def on_signal(signum: int, _: FrameType | None) -> None:
            log.info("signal_received", signal=signal.Signals(signum).name)
            threading.Thread(target=self.stop, name="warptd-stop").start()

        signal.signal(signal.SIGTERM, on_signal)
        signal.signal(signal.SIGINT, on_signal)
        signal.signal(
            signal.SIGHUP, lambda *_: threading.Thread(target=self.reload, name="warptd-reload").start()
        )
        self.start()
        while not self._stopped.wait(timeout=1.0):
            pass
        return 0

    def reload(self) -> None:
        """SIGHUP: re-read flags, environment and the config file; apply what can change live.

        A bad file changes nothing. Settings that shape the process (listen, backends, sysfs,
        stress on/off) are reported as needing a restart.
        """
        if self._reload is None:
            return
        try:
            new = self._reload()
            token = new.stress_token_value()
        except SettingsError as exc:
            log.error("config_reload_failed", error=str(exc))
            return
        old = self.settings
        changed = sorted(k for k in type(old).model_fields if getattr(old, k) != getattr(new, k))
        restart = [k for k in changed if k not in RELOADABLE]
        configure_logging(new.log_level, new.log_format)
        self.apply(new)
        self._token = token
        log.info("config_reloaded", changed=changed, needs_restart=restart, interval_s=new.interval)
