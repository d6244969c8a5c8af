"""When a GPU's per-process utilization is read (pure: the clock and the listed pids passed in)."""

from __future__ import annotations

from warptd.processes.cadence import DRIVER_WINDOW_S, UtilizationCadence

A, B = frozenset({1001}), frozenset({1001, 1002})


def reads(cadence: UtilizationCadence, polls: list[tuple[float, frozenset[int]]], period: float, pace: float):
    """The times of the polls that read, each read made as the monitor makes it."""
    made = []
    for now, pids in polls:
        if cadence.due(pids, now, period, pace):
            cadence.read(pids, now)
            made.append(round(now, 3))
    return made


def test_at_10_hz_a_steady_gpu_is_read_once_a_period_not_at_every_poll():
    polls = [(k / 10, A) for k in range(1, 51)]  # 5 s of polls at 10 Hz
    assert reads(UtilizationCadence(), polls, period=1.0, pace=0.1) == [0.1, 1.1, 2.1, 3.1, 4.1]
    # the first read's newcomer is followed up a window on, then every period
    assert reads(UtilizationCadence(), polls, period=2.0, pace=0.1) == [0.1, 1.1, 3.1]


def test_polls_as_far_apart_as_the_period_read_at_every_poll():
    polls = [(float(k), A) for k in range(1, 6)]
    assert reads(UtilizationCadence(), polls, period=1.0, pace=1.0) == [1.0, 2.0, 3.0, 4.0, 5.0]


def test_a_gpu_without_processes_is_never_read():
    polls = [(k / 10, frozenset()) for k in range(1, 30)]
    assert reads(UtilizationCadence(), polls, period=1.0, pace=0.1) == []


def test_a_newcomer_is_read_at_once_and_a_window_later_whatever_the_period():
    """Process 1002 is listed at 7.35 s: the read then closes the span of 1001 alone, the one a driver
    window later holds 1002's first samples; then every period again."""
    polls = [(k / 20, A if k < 147 else B) for k in range(1, 400)]  # 20 Hz, 1002 from 7.35 s
    made = reads(UtilizationCadence(), polls, period=5.0, pace=0.05)
    assert made == [0.05, 1.05, 6.05, 7.35, 7.35 + DRIVER_WINDOW_S, 13.35, 18.35]


def test_a_process_that_leaves_needs_no_read_but_comes_back_as_a_newcomer():
    cadence = UtilizationCadence()
    polls = [(1.0, B), (2.0, B), (2.5, A), (3.0, A), (3.5, B), (3.6, B)]
    assert reads(cadence, polls, period=5.0, pace=0.5) == [1.0, 2.0, 3.5]  # 1002 back (a reused pid)


def test_a_failed_read_is_asked_again_at_the_next_poll():
    cadence = UtilizationCadence()
    assert cadence.due(A, 1.0, 5.0, 0.1)  # not marked read: the read failed
    assert cadence.due(A, 1.1, 5.0, 0.1)
