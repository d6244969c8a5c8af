"""Workloads that misbehave on purpose, run in the real spawned worker to prove the daemon survives."""

from __future__ import annotations

import os
import signal
import time
from typing import ClassVar

from warptd.stress.base import StressTest, TestCategory, WorkloadResult


class _Fault(StressTest):
    category: ClassVar[TestCategory] = TestCategory.CUSTOM
    description: ClassVar[str] = "fault injection"

    def is_available(self) -> bool:
        return True

    def validate_configuration(self) -> None:
        pass

    def setup(self) -> None:
        pass

    def teardown(self) -> None:
        pass


class RaisingTest(_Fault):
    name: ClassVar[str] = "raise"

    def execute_test(self, duration: float, iterations: int) -> WorkloadResult:
        raise RuntimeError("CUDA error: an illegal memory access was encountered (simulated)")


class SelfKillTest(_Fault):
    name: ClassVar[str] = "selfkill"

    def execute_test(self, duration: float, iterations: int) -> WorkloadResult:
        os.kill(os.getpid(), signal.SIGKILL)
        raise AssertionError("unreachable")


class HangTest(_Fault):
    name: ClassVar[str] = "hang"

    def execute_test(self, duration: float, iterations: int) -> WorkloadResult:
        if self.on_start:
            self.on_start()
        time.sleep(3600)
        raise AssertionError("unreachable")


class LingerTest(_Fault):
    """Succeeds at once, then takes 2 s to exit (as torch/CUDA teardown can) after closing the pipe."""

    name: ClassVar[str] = "linger"

    def execute_test(self, duration: float, iterations: int) -> WorkloadResult:
        import atexit

        if self.on_start:
            self.on_start()
        atexit.register(time.sleep, 2.0)
        return WorkloadResult(
            throughput=1.0, unit="B/s", work=1.0, work_unit="B", iterations=1, elapsed_s=1.0
        )
