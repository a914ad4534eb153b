"""HDFS on the Python side: the file system pyiceberg (planning, health, the API's reads)
and `storage` (orphan listing, the storage clock) use for a table on `hdfs://`.

Spark needs nothing of this: it reaches HDFS through the Hadoop client in PySpark's jars.
Python uses `hdfs-native` (the `hdfs` extra), a native Rust client of HDFS's own RPC: no
JVM, no `libhdfs` and no Hadoop install, which pyarrow's `HadoopFileSystem` (pyiceberg's
default for `hdfs://`) needs; and unlike WebHDFS it needs no HTTP gateway open on the
NameNode and DataNodes. `HdfsFileIO` is pyiceberg's PyArrowFileIO with its HDFS file
system swapped for hdfs-native's (through pyarrow's fsspec adapter), so every other scheme
behaves as before and `storage` lists HDFS as it lists a disk.

One spelling of a client setting serves both sides: a catalog property `hadoop.X` is `X`
of the catalog's Hadoop configuration for Iceberg-Java in Spark, and of hdfs-native's
(which also reads `$HADOOP_CONF_DIR`'s core-site.xml and hdfs-site.xml).
"""

from __future__ import annotations

import functools
import io
import logging
import time
import urllib.parse
from datetime import UTC, datetime
from typing import Any

from pyarrow.fs import FileSystem, FSSpecHandler, PyFileSystem
from pyiceberg.io import PY_IO_IMPL, WAREHOUSE
from pyiceberg.io.pyarrow import PyArrowFileIO

log = logging.getLogger(__name__)

SCHEMES = ("hdfs", "viewfs")
FILE_IO = f"{__name__}.HdfsFileIO"
HADOOP_PREFIX = "hadoop."
# Registration asks the NameNode once: the client's default fails over 15 times with a
# backoff of up to 15 s, minutes before a down NameNode is reported.
PROBE_CONFIG = {"dfs.client.failover.max.attempts": "0"}
# A block read every DataNode failed (hdfs-native's DataTransferError, e.g. a DataNode too
# busy to answer in time) is tried again from where it started, as Java's DFSClient does
# (dfs.client.max.block.acquire.failures, 3); hdfs-native gives up at once.
READ_TRIES = 3
READ_RETRY_S = 0.5


class NameNodeUnreachable(RuntimeError):
    """The warehouse's NameNode did not answer (the message names it)."""


def on_hdfs(location: str | None) -> bool:
    return bool(location) and urllib.parse.urlsplit(location or "").scheme in SCHEMES


def client_config(properties: dict[str, str]) -> dict[str, str]:
    """hdfs-native's settings from a catalog's properties: each `hadoop.X` as `X`."""
    return {
        k[len(HADOOP_PREFIX) :]: v for k, v in properties.items() if k.startswith(HADOOP_PREFIX)
    }


def with_file_io(properties: dict[str, str]) -> dict[str, str]:
    """The catalog's pyiceberg properties, with `HdfsFileIO` as its FileIO when the
    warehouse is on HDFS and no FileIO is chosen (`py-io-impl`)."""
    if PY_IO_IMPL in properties or not on_hdfs(properties.get(WAREHOUSE)):
        return properties
    return {**properties, PY_IO_IMPL: FILE_IO}


@functools.cache
def _fsspec_class(scheme: str) -> Any:
    try:
        from hdfs_native import fsspec as native
    except ImportError as exc:
        raise ImportError(
            "a table on HDFS needs hdfs-native: pip install 'lakewarden[hdfs]'"
        ) from exc
    base = native.ViewfsFileSystem if scheme == "viewfs" else native.HdfsFileSystem

    class Uncached(base):  # type: ignore[misc, valid-type]
        """hdfs-native's fsspec file system, with each entry's `mtime` (UTC), the name
        pyarrow's adapter reads (without it `storage` would see no file's age), and out of
        fsspec's instance cache: fsspec clears that cache in a forked child, and a client
        freed there waits forever for its runtime's threads, which a fork does not copy.
        PySpark forks (and runs Python in the child) to start its JVM."""

        cachable = False

        def _open(self, path: str, mode: str = "rb", **kwargs: Any) -> Any:
            opened = super()._open(path, mode, **kwargs)
            if mode == "rb" and not isinstance(opened, io.BufferedReader):
                retrying_reads(opened)  # (a buffered one, for a block size asked for: as is)
            return opened

        def _convert_file_status(self, file_status: Any) -> dict[str, Any]:
            info: dict[str, Any] = super()._convert_file_status(file_status)
            info["mtime"] = datetime.fromtimestamp(file_status.modification_time / 1000, UTC)
            return info

    return Uncached


def retrying_reads(reader: Any, tries: int = READ_TRIES, pause_s: float = READ_RETRY_S) -> Any:
    """`reader` (an hdfs-native file) whose `read` is tried again from its starting offset
    when every DataNode failed the transfer; any other error, or the last try's, is
    raised."""
    read = reader.read

    def read_again(size: int = -1) -> bytes:
        start = reader.tell()
        for tries_left in reversed(range(tries)):
            try:
                data: bytes = read(size)
                return data
            except RuntimeError as exc:
                if tries_left == 0 or "DataTransferError" not in str(exc):
                    raise
                log.warning("HDFS read failed, trying again: %s", str(exc)[:200])
                time.sleep(pause_s)
                reader.seek(start)
        raise AssertionError("unreachable")

    reader.read = read_again
    return reader


def filesystem(scheme: str, netloc: str, config: dict[str, str]) -> FileSystem:
    """A pyarrow FileSystem on the HDFS at `scheme://netloc` (an empty netloc: fs.defaultFS
    of $HADOOP_CONF_DIR), through hdfs-native. Paths are the URI's path (`/warehouse/…`),
    as pyiceberg's `parse_location` gives them for HDFS."""
    host, _, port = netloc.partition(":")
    fs = _fsspec_class(scheme)(host or None, int(port) if port else None, **config)
    return PyFileSystem(FSSpecHandler(fs))


class HdfsFileIO(PyArrowFileIO):
    """pyiceberg's PyArrowFileIO whose `hdfs://` and `viewfs://` go through hdfs-native
    (`filesystem`); the catalog's `hadoop.*` properties are its client settings."""

    def _initialize_hdfs_fs(self, scheme: str, netloc: str | None) -> FileSystem:
        return filesystem(scheme, netloc or "", client_config(dict(self.properties)))


def check_namenode(properties: dict[str, str]) -> None:
    """NameNodeUnreachable unless the warehouse's NameNode answers a status call (asked
    once, no failover retries). Nothing to do for a warehouse elsewhere."""
    warehouse = properties.get(WAREHOUSE)
    if not on_hdfs(warehouse):
        return
    scheme, netloc, path = PyArrowFileIO.parse_location(warehouse or "")
    config = {**client_config(properties), **PROBE_CONFIG}
    try:
        filesystem(scheme, netloc, config).get_file_info(path or "/")
    except ImportError:
        raise
    except Exception as exc:
        raise NameNodeUnreachable(
            f"the NameNode of warehouse {warehouse} ({netloc or 'fs.defaultFS'}) did not "
            f"answer: {type(exc).__name__}: {exc}"
        ) from None
