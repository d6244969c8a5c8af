"""Parsing expositions in tests, building a sampler without its schedule, running a fresh Python, reading a
setting's refusal."""

from __future__ import annotations

import contextlib
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

from prometheus_client.parser import text_string_to_metric_families

from warptd.config import Settings, SettingsError
from warptd.daemon import Daemon
from warptd.exporter.exposition import Exposition
from warptd.registry import load_backends
from warptd.sampling.sampler import Sampler
from warptd.sampling.snapshot import Snapshot


@dataclass(frozen=True)
class Sample:
    name: str
    labels: dict[str, str]
    value: float


def parse(text: str) -> list[Sample]:
    return [
        Sample(s.name, dict(s.labels), s.value)
        for family in text_string_to_metric_families(text)
        for s in family.samples
    ]


def select(samples: list[Sample], name: str, **labels: str) -> list[Sample]:
    return [s for s in samples if s.name == name and all(s.labels.get(k) == v for k, v in labels.items())]


def value(samples: list[Sample], name: str, **labels: str) -> float:
    found = select(samples, name, **labels)
    assert len(found) == 1, f"expected one {name}{labels}, found {found}"
    return found[0].value


class Rig:
    """Backends + sampler + exposition, ticked by hand (no scheduler, no HTTP)."""

    def __init__(self, settings: Settings, stale_after: float = 60.0) -> None:
        self.settings = settings
        self.loaded = load_backends(settings)
        self.snapshot = Snapshot(stale_after=stale_after)
        self.sampler = Sampler(settings, self.snapshot, self.loaded.accelerators, self.loaded.power)
        self.exposition = Exposition(self.snapshot, node=settings.node)

    def tick(self, *names: str) -> list[Sample]:
        # as the daemon does: a companion power backend is published with its accelerator backend
        for name in names or self.sampler.scheduled():
            self.sampler.tick(name)
        return self.scrape()

    def tick_gpm(self, *names: str) -> list[Sample]:
        """Tick once NVIDIA's GPM sources may take a sample again, as a window records every device
        (:func:`sample_gap` of a watched GPU from now, so after the last tick: a tick sooner keeps the
        last GPM period's values). Outside windows GPM samples at most once a second, which
        ``test_gpm_outside_windows_samples_at_most_once_a_second`` checks without this."""
        from warptd.backends.nvidia.gpm import sample_gap

        watched = set()
        for backend in names or self.sampler.scheduled():
            state = self.snapshot.get(backend)
            if state is not None and state.has_devices:
                watched |= {(backend, info.index) for info in state.devices_info}
        self.sampler.watch("tick_gpm", watched, set())
        time.sleep(sample_gap(self.settings, watched=True))
        return self.tick(*names)

    def scrape(self) -> list[Sample]:
        return parse(self.exposition.render(None, None)[0].decode())

    def close(self) -> None:
        self.sampler.stop()


def http(
    port: int, method: str, path: str, body: bytes | None = None, headers: dict[str, str] | None = None
) -> tuple[int, dict[str, str], bytes]:
    """One request to 127.0.0.1:port (loopback only), bounded by a 10 s timeout."""
    import http.client

    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
    try:
        conn.request(method, path, body=body, headers=headers or {})
        response = conn.getresponse()
        return response.status, {k.lower(): v for k, v in response.getheaders()}, response.read()
    finally:
        conn.close()


def raw(port: int, data: bytes, wait: float = 5.0) -> bytes:
    """Send ``data`` as it is to 127.0.0.1:port and read until the server closes (bounded by ``wait``)."""
    import socket as sockets

    with sockets.create_connection(("127.0.0.1", port), timeout=wait) as conn:
        conn.sendall(data)
        out = b""
        while chunk := conn.recv(65536):
            out += chunk
        return out


def ready(port: int) -> bool:
    """Whether the daemon on ``port`` answers /readyz with 200; False while nothing listens there yet."""
    try:
        return http(port, "GET", "/readyz")[0] == 200
    except OSError:
        return False


def wait_until(predicate, timeout: float = 10.0, interval: float = 0.05) -> bool:
    """Poll ``predicate`` until it is truthy or ``timeout`` seconds pass (bounded loop)."""
    import time

    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(interval)
    return bool(predicate())


@contextlib.contextmanager
def serving(settings: Settings) -> Iterator[Daemon]:
    """A real daemon started with ``settings``, once /readyz answers 200; stopped afterwards."""
    running = Daemon(settings)
    running.start()
    try:
        assert wait_until(lambda: http(running.port, "GET", "/readyz")[0] == 200)
        yield running
    finally:
        running.stop()


def run_python(code: str, timeout: float = 60.0) -> subprocess.CompletedProcess[str]:
    """``python -c code`` in a fresh interpreter from the checkout's root (what a command imports)."""
    return subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
        cwd=Path(__file__).parents[1],
    )


def settings_error(call: Callable[[], object]) -> str:
    """The message of the SettingsError ``call()`` raises, or "no error"."""
    try:
        call()
    except SettingsError as exc:
        return str(exc)
    return "no error"
