"""Process-wide tunings the daemon makes at start: glibc's heaps shared by its threads."""

from __future__ import annotations

#: Threads that each allocate (outside Python's small-object allocator) while the others hold
#: memory, then the number of glibc heaps that malloc_info reports.
import subprocess
import sys

import pytest

from warptd.http.limits import HEAP_ARENAS

_HEAPS = """
import ctypes, os, re, sys, tempfile, threading
from warptd.http.limits import share_heap_arenas
if sys.argv[1] == "shared":
    assert share_heap_arenas()
held, start = [], threading.Barrier(8)
def allocate():
    start.wait()
    held.append([bytearray(4096) for _ in range(64)])
threads = [threading.Thread(target=allocate) for _ in range(8)]
for t in threads: t.start()
for t in threads: t.join()
libc = ctypes.CDLL("libc.so.6")
libc.fopen.restype = ctypes.c_void_p
libc.fopen.argtypes = [ctypes.c_char_p, ctypes.c_char_p]
libc.malloc_info.argtypes = [ctypes.c_int, ctypes.c_void_p]
libc.fclose.argtypes = [ctypes.c_void_p]
with tempfile.NamedTemporaryFile() as out:
    f = libc.fopen(out.name.encode(), b"w")
    libc.malloc_info(0, f)
    libc.fclose(f)
    print(len(re.findall(r'<heap nr=', open(out.name).read())))
"""


def _heaps(mode: str) -> int:
    result = subprocess.run(
        [sys.executable, "-c", _HEAPS, mode], check=False, capture_output=True, text=True, timeout=60
    )
    assert result.returncode == 0, result.stderr
    return int(result.stdout)


@pytest.mark.slow
def test_the_daemons_threads_share_two_heaps():
    """Each thread got a glibc heap of its own (up to 8 a core), each keeping freed pages between
    the few live allocations it cannot give back: 64 ended windows left 0.5-1 MiB more RSS so."""
    assert _heaps("shared") <= HEAP_ARENAS
    assert _heaps("default") > HEAP_ARENAS


def test_http_settings_reach_the_server(monkeypatch):
    from warptd.config import SettingsError, load_settings
    from warptd.http.limits import HttpLimits

    monkeypatch.setenv("WARPTD_HTTP_MAX_REQUESTS", "7")
    monkeypatch.setenv("WARPTD_HTTP_HEADER_TIMEOUT", "2.5")
    limits = HttpLimits.of(load_settings())
    assert limits.max_requests == 7 and limits.header_timeout == 2.5 and limits.backlog == 1024
    with pytest.raises(SettingsError, match="http_backlog"):
        load_settings(http_backlog=5)  # the old default, too short for a burst
