"""A hostile node: what one process, one cgroup name or one file can do to warptd's reads.

Each case is a fixture /proc or cgroup tree, or a file, shaped by someone on the node, and what it
may change: its own process's attribution at most, never anyone else's, never a poll, a start or a
reload. A case that would block (a FIFO) runs on a thread bounded in time and is unblocked after."""

from __future__ import annotations

import pytest

from tests import hostile
from tests.e2e.test_processes import SYSTEMD_V2
from tests.hostile import READERS, bounded
from warptd import files

node_root = hostile.node_root  # a node's files with a process 7, a fixture


@pytest.mark.parametrize("reader", ["process cgroup", "workload placement", "token file"])
def test_a_file_over_the_limit_is_refused_unread(reader, node_root):
    where, read, unreadable = READERS[reader]
    target = node_root / where
    target.parent.mkdir(parents=True, exist_ok=True)
    # The cgroup of a process in a pod, repeated past the limit (a 200 MB one took RSS to 355 MiB).
    target.write_text("token\n" if reader == "token file" else SYSTEMD_V2)
    with target.open("a") as grown:
        grown.truncate(files.MAX_BYTES + 1)
    result = bounded(lambda: read(node_root))
    if reader == "token file":
        assert result == "invalid setting stress_token_file: over 65536 bytes"
    else:
        assert result == unreadable


def test_the_reader_itself(tmp_path):
    plain = tmp_path / "plain"
    plain.write_bytes(b"x" * 100)
    assert files.read_bytes(plain, limit=100) == b"x" * 100
    with pytest.raises(files.RefusedFile, match="over 99 bytes"):
        files.read_bytes(plain, limit=99)
    plain.write_bytes(b"caf\xc3\xa9 \xff")
    with pytest.raises(files.RefusedFile, match="not UTF-8") as refused:
        files.read_text(plain)
    assert isinstance(refused.value, OSError)
    with pytest.raises(files.RefusedFile, match="not a regular file"):
        files.read_bytes("/dev/zero")
    with pytest.raises(FileNotFoundError):
        files.read_bytes(tmp_path / "absent")
