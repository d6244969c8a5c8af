"""Ended energy windows: each one's summary, and for the newest few their points too."""

from __future__ import annotations

import json
from collections import OrderedDict
from collections.abc import Callable

from warptd.recording.memory import SeriesBudget
from warptd.recording.recorder import Recorder
from warptd.recording.schema import Recording


class WindowHistory:
    """The newest ``limit()`` ended windows' summaries, as their JSON: one buffer each, not thousands of
    small objects that would pin the allocator's arenas after the points are freed. The newest
    ``with_points()`` of them keep their recorders' points too (compact, and charged to ``budget``).
    Not thread-safe: its window manager's lock guards it."""

    def __init__(
        self, limit: Callable[[], int], with_points: Callable[[], int], budget: SeriesBudget
    ) -> None:
        self._limit, self._with_points, self.budget = limit, with_points, budget
        self._ended: OrderedDict[str, bytes] = OrderedDict()
        #: The ended windows that keep their points, oldest first.
        self.kept: OrderedDict[str, Recorder] = OrderedDict()

    def add(self, recording: Recording, recorder: Recorder) -> None:
        """Keep an ended window's summary and, for a while, its recorder's points; the oldest go."""
        targets = [target.model_copy(update={"points": []}) for target in recording.targets]
        summary = recording.model_copy(update={"targets": targets})
        self._ended[recording.id] = summary.model_dump_json().encode()
        self.kept[recording.id] = recorder
        self.budget.ended(recorder)
        recorder.compact_series()  # kept among windows that come and go
        while len(self._ended) > self._limit():
            self._ended.popitem(last=False)
        for window_id in list(self.kept):
            if window_id not in self._ended or len(self.kept) > self._with_points():
                self.budget.release(self.kept.pop(window_id))

    def summary(self, window_id: str) -> bytes | None:
        """An ended window's summary as kept (its JSON), or None."""
        return self._ended.get(window_id)

    def recording(self, window_id: str, summary: bytes) -> Recording:
        """The ended window's recording from its ``summary``, with its points where it keeps them."""
        kept, recording = self.kept.get(window_id), Recording.model_validate_json(summary)
        return kept.with_points(recording) if kept is not None else recording

    def end_reason(self, window_id: str) -> str | None:
        """Why an ended window ended (its summary's ``end_reason``); None for one not in the history."""
        summary = self._ended.get(window_id)
        return None if summary is None else json.loads(summary).get("end_reason")

    def newest_first(self) -> list[bytes]:
        """Every summary kept, newest first."""
        return list(reversed(self._ended.values()))
