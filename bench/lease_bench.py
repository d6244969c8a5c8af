"""A dead client's window: how long from ``warptd profile``'s SIGKILL to its window's ``lease_expired``.

    python bench/lease_bench.py [--gpus 8] [--kill-after 2] [--lease SECONDS]

The real daemon runs in its own process over 8 GPUs of the C-level NVML double; ``warptd profile
--url … -- sleep 120`` records through it (a window on every GPU, held by profile's lease: 30 s by
default, renewed every 10 s) and is killed with SIGKILL ``--kill-after`` seconds after its window
opened. Printed: seconds from the kill to the window's end and its end_reason, seconds until the
orphaned ``sleep`` was gone (PR_SET_PDEATHSIG), and the daemon's CPU while the window was open and
once it ended.
"""

from __future__ import annotations

import argparse
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from common import ROOT, cpu_seconds, emit, free_port, http_json, start_warptd_double, stop

from tests.pids import alive, children

#: Longest wait for the window to end: the longest lease the daemon allows, and some.
GIVE_UP_S = 700.0


def cpu_percent(pid: int, span: float) -> float:
    before, started = cpu_seconds(pid), time.monotonic()
    time.sleep(span)
    return 100 * (cpu_seconds(pid) - before) / (time.monotonic() - started)


def open_window(port: int) -> dict | None:
    return next((w for w in http_json(port, "GET", "/windows")["windows"] if w["status"] == "open"), None)


def wait_for(predicate, timeout: float, poll: float = 0.02):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        found = predicate()
        if found:
            return found
        time.sleep(poll)
    raise RuntimeError(f"not within {timeout} s")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--gpus", type=int, default=8)
    parser.add_argument("--kill-after", type=float, default=2.0)
    parser.add_argument("--lease", type=float, default=None, help="profile's --lease (default its own, 30 s)")
    args = parser.parse_args()
    port = free_port()
    daemon, _ = start_warptd_double(args.gpus, port)
    profile = None
    try:
        command = [sys.executable, "-m", "warptd", "profile", "--url", f"http://127.0.0.1:{port}"]
        if args.lease is not None:
            command += ["--lease", str(args.lease)]
        env = {**os.environ, "PYTHONPATH": str(ROOT)}
        profile = subprocess.Popen(
            [*command, "--", "sleep", "120"], cwd=ROOT, env=env, stderr=subprocess.DEVNULL
        )
        window = wait_for(lambda: open_window(port), timeout=30)
        sleeper = wait_for(lambda: children(profile.pid), timeout=10)[0]
        time.sleep(max(0.0, args.kill_after - 1.0))
        cpu_open = cpu_percent(daemon.pid, 1.0)
        profile.send_signal(signal.SIGKILL)
        killed = time.monotonic()
        profile.wait()
        sleep_gone = None
        while time.monotonic() - killed < GIVE_UP_S:
            if sleep_gone is None and not alive(sleeper):
                sleep_gone = time.monotonic() - killed
            shown = http_json(port, "GET", f"/windows/{window['id']}")
            if shown["status"] == "ended":
                break
            time.sleep(0.02)
        ended = time.monotonic() - killed
        cpu_after = cpu_percent(daemon.pid, 5.0)
        if sleep_gone is None and not alive(sleeper):
            sleep_gone = time.monotonic() - killed
        emit(
            [
                {
                    "gpus": args.gpus,
                    "lease_seconds": shown["lease_seconds"],
                    "killed_after_open_s": args.kill_after,
                    "kill_to_window_end_s": round(ended, 2),
                    "end_reason": shown["end_reason"],
                    "kill_to_command_gone_s": None if sleep_gone is None else round(sleep_gone, 3),
                    "daemon_cpu_percent_window_open": round(cpu_open, 2),
                    "daemon_cpu_percent_after_end": round(cpu_after, 2),
                }
            ],
            "a SIGKILLed profile's window",
        )
        if alive(sleeper):
            os.kill(sleeper, signal.SIGKILL)
    finally:
        if profile is not None and profile.poll() is None:
            profile.kill()
        stop(daemon)


if __name__ == "__main__":
    main()
