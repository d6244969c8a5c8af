"""The publisher: what a published read changes, and the totals saved at stop."""

from __future__ import annotations

import threading
import time

from warptd.sampling.publish import Publisher
from warptd.sampling.snapshot import Snapshot


class _RecordedState:
    """A CounterState that notes when each backend's totals were recorded (and holds no file)."""

    def __init__(self) -> None:
        self.recorded: list[tuple[str, float]] = []
        self.save_errors = 0

    def resume(self, key: str, tracker: object) -> None:
        """Nothing was saved before."""

    def record(self, name: str, trackers: object, *, final: bool = False) -> None:
        list(trackers)  # type: ignore[call-overload]
        self.recorded.append((name, time.monotonic()))

    def write(self) -> bool:
        return True


def test_the_totals_saved_at_stop_wait_for_a_read_being_published():
    """Issue 38 #7: a total and its raw counter value are saved from one read, never from two, so the
    save takes each backend's entries under the lock its publishing holds."""
    state = _RecordedState()
    publisher = Publisher(Snapshot(stale_after=5.0), state, {"nvidia": object(), "amd": object()})  # type: ignore[arg-type]
    publishing = publisher._locks["nvidia"]
    publishing.acquire()  # a read of nvidia being published
    saver = threading.Thread(target=publisher.save_all)
    saver.start()
    time.sleep(0.3)
    assert [name for name, _ in state.recorded] in ([], ["amd"]), "saved while nvidia's read was published"
    released = time.monotonic()
    publishing.release()
    saver.join(timeout=5)
    assert not saver.is_alive()
    assert dict(state.recorded)["nvidia"] >= released
