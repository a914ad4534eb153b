"""lakewarden.hdfs without an HDFS: which catalogs get the HDFS FileIO, the `hadoop.*`
properties as client settings, a NameNode that does not answer named at once, and a fork
(PySpark's JVM start) after a client was made and dropped."""

from __future__ import annotations

import socket
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from lakewarden.hdfs import (
    FILE_IO,
    NameNodeUnreachable,
    check_namenode,
    client_config,
    with_file_io,
)

ROOT = Path(__file__).resolve().parents[2]


def test_an_hdfs_warehouse_gets_the_hdfs_file_io_unless_one_is_chosen() -> None:
    assert with_file_io({"warehouse": "hdfs://nn:8020/w"})["py-io-impl"] == FILE_IO
    assert with_file_io({"warehouse": "viewfs://cluster/w"})["py-io-impl"] == FILE_IO
    assert "py-io-impl" not in with_file_io({"warehouse": "file:///tmp/w"})
    assert "py-io-impl" not in with_file_io({"warehouse": "s3://bucket/w"})
    chosen = {"warehouse": "hdfs://nn/w", "py-io-impl": "x.Y"}
    assert with_file_io(chosen) == chosen


def test_hadoop_properties_are_the_clients_settings() -> None:
    props = {"uri": "u", "hadoop.dfs.client.failover.max.attempts": "1", "hadoopish": "no"}
    assert client_config(props) == {"dfs.client.failover.max.attempts": "1"}


def test_a_namenode_that_does_not_answer_is_named_at_once() -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]  # bound, not listening: refused
        warehouse = f"hdfs://127.0.0.1:{port}/warehouse"
        started = time.monotonic()
        with pytest.raises(NameNodeUnreachable, match=rf"warehouse {warehouse} \(127.0.0.1:"):
            check_namenode({"warehouse": warehouse})
    assert time.monotonic() - started < 5  # not the client's default failover retries
    check_namenode({"warehouse": "file:///tmp/w"})  # not on HDFS: nothing asked


def test_a_fork_after_a_client_was_dropped_does_not_hang() -> None:
    """fsspec empties its instance cache in a forked child; a cached hdfs-native client
    freed there waits forever for threads the fork did not copy. PySpark starts its JVM
    with such a fork (a preexec_fn): the scheduler hung at its Spark start."""
    script = textwrap.dedent(
        """
        import subprocess
        from lakewarden.hdfs import filesystem
        filesystem("hdfs", "127.0.0.1:1", {})  # made and dropped
        subprocess.run(["true"], preexec_fn=lambda: None, check=True)
        """
    )
    done = subprocess.run(
        [sys.executable, "-c", script], cwd=ROOT, timeout=30, capture_output=True, text=True
    )
    assert done.returncode == 0, done.stderr


class _FlakyReader:
    """An hdfs-native reader whose first reads fail as every DataNode failing does."""

    def __init__(self, data: bytes, failures: int, error: str = "DataTransferError(...)"):
        self.data, self.pos, self.failures, self.error = data, 0, failures, error

    def tell(self) -> int:
        return self.pos

    def seek(self, offset: int) -> None:
        self.pos = offset

    def read(self, size: int = -1) -> bytes:
        end = len(self.data) if size < 0 else self.pos + size
        if self.failures:
            self.failures -= 1
            self.pos += 1  # a failed transfer may have moved the position
            raise RuntimeError(f'{self.error}: "All DataNodes failed"')
        out, self.pos = self.data[self.pos : end], min(end, len(self.data))
        return out


def test_a_read_every_datanode_failed_is_tried_again_from_where_it_started() -> None:
    from lakewarden.hdfs import retrying_reads

    reader = retrying_reads(_FlakyReader(b"abcdef", failures=2), pause_s=0)
    assert reader.read(3) == b"abc" and reader.read() == b"def"


def test_a_read_that_keeps_failing_or_fails_otherwise_is_raised() -> None:
    import pytest

    from lakewarden.hdfs import retrying_reads

    with pytest.raises(RuntimeError, match="All DataNodes failed"):
        retrying_reads(_FlakyReader(b"abc", failures=3), pause_s=0).read()
    with pytest.raises(RuntimeError, match="FileNotFound"):
        retrying_reads(_FlakyReader(b"abc", failures=1, error="FileNotFound"), pause_s=0).read()
