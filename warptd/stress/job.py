"""A stress job as the daemon tracks it, and as the API shows it."""

from __future__ import annotations

import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from enum import StrEnum
from typing import Any

from warptd.models import WireModel
from warptd.recording.schema import Recording
from warptd.stress.base import DeviceRef, WorkloadResult
from warptd.stress.telemetry import RunTelemetry, TelemetryRecorder, summarize


class JobStatus(StrEnum):
    """``starting`` until the worker begins the timed part (torch import, allocation, warm-up),
    then ``running``, then one of the final three."""

    STARTING = "starting"
    RUNNING = "running"
    SUCCEEDED = "succeeded"
    FAILED = "failed"
    CANCELLED = "cancelled"

    @property
    def active(self) -> bool:
        """The worker exists and holds the device."""
        return self in (JobStatus.STARTING, JobStatus.RUNNING)


class StressError(Exception):
    """Refused before anything started; ``status`` is the HTTP code that fits."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status


class StressParameters(WireModel):
    test: str
    device: str
    duration_s: float
    dtype: str | None = None
    size: int | None = None


class Efficiency(WireModel):
    value: float
    unit: str


class JobView(WireModel):
    """A job as the API returns it."""

    id: str
    status: JobStatus
    params: StressParameters
    created_at: datetime
    started_at: datetime | None = None
    ended_at: datetime | None = None
    error: str | None = None
    progress: dict[str, float] | None = None
    workload: WorkloadResult | None = None
    telemetry: RunTelemetry | None = None
    efficiency: Efficiency | None = None
    #: The run as a recording (the same schema as windows and profiles), with the throughput.
    recording: Recording | None = None


@dataclass
class Job:
    id: str
    params: StressParameters
    device: DeviceRef
    created_at: datetime = field(default_factory=lambda: datetime.now(UTC))
    status: JobStatus = JobStatus.STARTING
    started_at: datetime | None = None
    ended_at: datetime | None = None
    error: str | None = None
    progress: dict[str, float] | None = None
    workload: WorkloadResult | None = None
    telemetry: RunTelemetry | None = None
    recording: Recording | None = None
    recorder: TelemetryRecorder | None = field(default_factory=TelemetryRecorder)
    process: Any = None
    cancel_requested: bool = False
    done: threading.Event = field(default_factory=threading.Event)

    def view(self) -> JobView:
        recorder = self.recorder
        telemetry = self.telemetry or (recorder.summary() if recorder is not None else None)
        recording = self.recording
        if recording is None and recorder is not None and self.started_at is not None:
            recording = recorder.recording_view()
        derived = {"telemetry": telemetry, "efficiency": self.efficiency(), "recording": recording}
        kept = {name: getattr(self, name) for name in JobView.model_fields if name not in derived}
        return JobView(**kept, **derived)

    def conclude(
        self, result: dict[str, Any] | None, error: str | None, carbon: Callable[[Recording], Recording]
    ) -> None:
        """End the job as its worker ended: cancelled where asked, succeeded with its ``result``, else
        failed with ``error``; its run's recording finished (``carbon`` adds carbon and cost), and the
        recorder let go, so that the bounded history keeps the result, not the recorder."""
        self.ended_at = datetime.now(UTC)
        if self.cancel_requested:
            self.status = JobStatus.CANCELLED
        elif result is not None:
            try:
                self.status, self.workload = JobStatus.SUCCEEDED, WorkloadResult(**result)
            except (TypeError, ValueError) as exc:
                self.status, self.error = JobStatus.FAILED, f"malformed result from the worker: {exc}"
        else:
            self.status, self.error = JobStatus.FAILED, error
        recorder = self.recorder
        if recorder is None:
            return
        if self.workload is not None:
            recorder.recorder.workload = {
                "throughput": self.workload.throughput,
                "unit": self.workload.unit,
                "work": self.workload.work,
                "work_unit": self.workload.work_unit,
            }
        self.recording = carbon(recorder.finish(str(self.status), self.error))
        self.telemetry = summarize(self.recording)
        self.recorder = None

    def efficiency(self) -> Efficiency | None:
        energy = self.telemetry.energy_joules if self.telemetry else None
        if self.workload is None or not energy or energy <= 0:
            return None
        return Efficiency(value=self.workload.work / energy, unit=f"{self.workload.work_unit}/J")
