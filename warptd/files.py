"""Reading a file that someone else on the node can shape (``/proc``, cgroup trees, tokens, state and
config files): a regular file only, opened without blocking, at most ``limit`` bytes, UTF-8 text.

``open()`` on a FIFO waits for a writer and ``read()`` of ``/dev/zero`` never ends; a 200 MB file
would be read whole. Each is refused here with a :class:`RefusedFile`, an ``OSError``, so a caller
that already treats an unreadable file as gone treats these alike.
"""

from __future__ import annotations

import errno
import os
import stat
from pathlib import Path

#: The most any such file may hold, unless the caller says otherwise: a /proc or cgroup file of a
#: process holds a few KiB, a config file some lines.
MAX_BYTES = 1 << 20
_CHUNK = 64 * 1024


class RefusedFile(OSError):
    """Not a regular file, over its size limit, or (as text) not UTF-8."""


def read_bytes(path: Path | str, limit: int = MAX_BYTES) -> bytes:
    """The file's content; :class:`RefusedFile` unless it is a regular file of at most ``limit``
    bytes. ``O_NONBLOCK``: opening a FIFO or a device never waits."""
    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_NOCTTY | os.O_CLOEXEC)
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            raise RefusedFile(errno.EINVAL, "not a regular file", str(path))
        chunks, size = [], 0
        while True:  # /proc and cgroup files say size 0: read to the end, one byte past the limit at most
            chunk = os.read(fd, min(_CHUNK, limit + 1 - size))
            if not chunk:
                return b"".join(chunks)
            size += len(chunk)
            if size > limit:
                raise RefusedFile(errno.EFBIG, f"over {limit} bytes", str(path))
            chunks.append(chunk)
    finally:
        os.close(fd)


def read_text(path: Path | str, limit: int = MAX_BYTES) -> str:
    """The file as UTF-8 text (as :func:`read_bytes`); :class:`RefusedFile` where it is not UTF-8."""
    data = read_bytes(path, limit)
    try:
        return data.decode()
    except UnicodeDecodeError as exc:
        raise RefusedFile(errno.EILSEQ, f"not UTF-8 (byte {exc.start})", str(path)) from None
