"""The HTTP server's resource limits, and raising the open-file limit the connection cap needs."""

from __future__ import annotations

import ctypes
import resource
import sys
from typing import ClassVar

import structlog

from warptd.config import SettingsView

log = structlog.get_logger("warptd.http")

#: Request bodies (POST /stress) larger than this are refused with 413 before they are read.
MAX_BODY_BYTES = 64 * 1024


class HttpLimits(SettingsView, prefix="http_"):
    """Bounds on what one client can hold (docs/security.md): the ``http_*`` settings."""

    header_timeout: float
    body_timeout: float
    idle_timeout: float
    max_connections: int
    max_client_connections: int
    max_requests: int
    backlog: int
    max_header_bytes: int
    max_response_bytes: int
    max_body_bytes: ClassVar[int] = MAX_BODY_BYTES


#: Allocations from this size up get pages of their own, returned to the system when freed.
MMAP_THRESHOLD_BYTES = 1 << 20
_M_MMAP_THRESHOLD = -3  # mallopt() parameter, from glibc's malloc.h


def return_large_buffers() -> bool:
    """Pin glibc's mmap threshold at 1 MiB. Left dynamic, glibc raises it after the first large free,
    so the multi-megabyte bodies of reports then stay in the heap: +26 MiB RSS over 20 reports,
    against +10 MiB pinned (tests/report_probe.py). False where the C library is not glibc."""
    try:
        libc = ctypes.CDLL("libc.so.6")
        return bool(libc.mallopt(_M_MMAP_THRESHOLD, MMAP_THRESHOLD_BYTES))
    except (OSError, AttributeError):
        return False


#: glibc heaps ("arenas") the daemon's threads share. glibc gives each thread that allocates while
#: another holds a heap one of its own, up to 8 a core; threads that hand the GIL to each other do
#: not need them, and each heap keeps its own freed pages between the few it cannot give back.
HEAP_ARENAS = 2
_M_ARENA_MAX = -8  # mallopt() parameter, from glibc's malloc.h


def share_heap_arenas() -> bool:
    """Hold glibc to ``HEAP_ARENAS`` heaps for the whole process, before its threads start: 64 windows
    on 8 GPUs, ended, left 0.5-1 MiB less RSS behind (bench/windows_memory_bench.py). False where the
    C library is not glibc."""
    try:
        return bool(ctypes.CDLL("libc.so.6").mallopt(_M_ARENA_MAX, HEAP_ARENAS))
    except (OSError, AttributeError):
        return False


#: How long a thread running Python keeps the GIL while another waits for it (CPython's default is
#: 5 ms). The event loop serving scrapes waits its turn behind each busy handler thread, several
#: times a scrape: at 5 ms a turn, two threads building a large answer held a scrape's p99 at 90 ms.
SWITCH_INTERVAL_S = 0.001


def favour_the_event_loop() -> None:
    """Shorten the GIL's switch interval to ``SWITCH_INTERVAL_S``, for the whole process: what a
    thread gives up is a few more switches a second, only while two threads want to run at once."""
    sys.setswitchinterval(SWITCH_INTERVAL_S)


def raise_nofile_limit() -> int:
    """Raise the soft RLIMIT_NOFILE to the hard limit, as Go programs do at start; returns the soft limit."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft != hard:
        try:
            resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
            soft = hard
        except (ValueError, OSError) as exc:
            log.warning("nofile_limit_not_raised", soft=soft, hard=hard, error=str(exc))
    return soft
