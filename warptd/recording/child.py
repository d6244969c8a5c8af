"""How ``warptd profile`` runs CMD: in a process group of its own, signals forwarded to that group,
and (Linux) with SIGTERM sent to CMD when ``profile`` dies without a chance to forward anything.

A SIGKILL of ``profile`` runs none of its code, so nothing can be forwarded then; on Linux CMD is
started with ``PR_SET_PDEATHSIG`` = SIGTERM, so the kernel signals it when ``profile`` dies. That
reaches CMD itself, not what CMD started: its own children are on their own.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import signal
import subprocess
import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from types import FrameType

FORWARDED = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)
#: The signal CMD gets when ``profile`` dies (Linux): it may still clean up, as on a forwarded TERM.
PARENT_DEATH_SIGNAL = signal.SIGTERM
_PR_SET_PDEATHSIG = 1  # <linux/prctl.h>


def exit_code(returncode: int) -> int:
    """A child's exit status as a shell reports it: 128+N when signal N killed it."""
    return 128 - returncode if returncode < 0 else returncode


def _die_with_parent() -> Callable[[], None] | None:
    """A pre-exec hook asking the kernel to send :data:`PARENT_DEATH_SIGNAL` to the child when this
    process dies; None where there is no ``prctl`` (not Linux). Resolved here, in the parent, so the
    forked child only makes two system calls."""
    if not sys.platform.startswith("linux"):
        return None
    try:
        prctl = ctypes.CDLL(None, use_errno=True).prctl
    except (OSError, AttributeError):
        return None
    prctl.argtypes = [ctypes.c_int, ctypes.c_ulong, ctypes.c_ulong, ctypes.c_ulong, ctypes.c_ulong]
    parent = os.getpid()

    def hook() -> None:
        prctl(_PR_SET_PDEATHSIG, int(PARENT_DEATH_SIGNAL), 0, 0, 0)
        if os.getppid() != parent:  # the parent died before the request took hold
            os.kill(os.getpid(), PARENT_DEATH_SIGNAL)

    return hook


def spawn(command: list[str]) -> subprocess.Popen[bytes]:
    """Start CMD in a new session (so its own process group), dying with this process on Linux.

    Called from the main thread: the kernel's parent-death signal follows the thread that forked.
    """
    return subprocess.Popen(command, start_new_session=True, preexec_fn=_die_with_parent())  # noqa: PLW1509


@contextmanager
def forwarding(child: subprocess.Popen[bytes]) -> Iterator[None]:
    """While the child runs, INT, TERM and HUP sent to us go to its process group (CMD and what it
    started) instead of ending us."""

    def forward(signum: int, _: FrameType | None) -> None:
        if child.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(child.pid, signum)

    previous = {sig: signal.signal(sig, forward) for sig in FORWARDED}
    try:
        yield
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
