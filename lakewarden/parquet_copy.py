"""Parquet files copied into bigger ones by pyarrow, and their rows checksummed by DuckDB: the
format-neutral core of the Arrow rewrites (Iceberg's bin-pack groups,
`lakewarden.spark.arrow_rewrite`; Delta's compactions, `lakewarden.formats.delta.native_rewrite`).

`copy` streams the inputs row group by row group into `pq.ParquetWriter`s (the table's codec
and level, a file rolled at the output size, memory bounded by about three row groups).

The checksum (`sums`: row count and the sum of DuckDB's `hash()` over each row's columns and
their NULL flags) is read by DuckDB's own Parquet reader: both sides of a rewrite's
comparison are one C++ hasher reading the files, independent of the pyarrow reader and
writer that made them.
"""

from __future__ import annotations

import contextlib
import itertools
import os
import threading
import time
from collections import deque
from collections.abc import Callable, Iterator
from concurrent.futures import Executor, Future, ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

from lakewarden.formats.digest import cursor, row_hash

# The checksum both sides of an Arrow rewrite's validation use.
HASHER = "duckdb"
# A row group is written once it holds the table's row-group size (as its inputs' bytes per
# row estimate its size in the file) or this much in memory, whichever comes first.
MAX_BUFFER_BYTES = 64 << 20
READ_AHEAD = 2  # input files read ahead of the copy, each at most MAX_BUFFER_BYTES
# Inputs this small are copied on the caller's thread: starting and handing work to the
# reader and writer threads costs more than it saves (a tiny compaction's few milliseconds).
INLINE_BYTES = 4 << 20


class Inline(Executor):
    """An executor that runs each task as it is submitted, on the caller's thread."""

    def submit(self, fn: Callable[..., Any], /, *args: Any, **kwargs: Any) -> Future[Any]:
        done: Future[Any] = Future()
        try:
            done.set_result(fn(*args, **kwargs))
        except BaseException as exc:
            done.set_exception(exc)
        return done


def local_path(location: str) -> str | None:
    """A file's path on this machine's file system, or None (an object store's, HDFS)."""
    if location.startswith("file:"):
        return "/" + location.removeprefix("file:").lstrip("/")
    return location if location.startswith("/") else None


@dataclass(frozen=True)
class Layout:
    """The Arrow schema the written files have (an input's rows are cast to it), and the
    table's write properties."""

    schema: Any  # pa.Schema
    compression: str
    level: int | None
    row_group_bytes: int
    # at most this many rows in a row group (None: only row_group_bytes caps it)
    row_group_rows: int | None = None


# The most rows in a row group written (delta-rs' WriterProperties' default). A copy of
# more is written in row groups of equal rows (`group_rows`): the first is written while
# the rest is read (one group of everything would wait for every read), and the written
# file can be read back by two threads.
ROW_GROUP_ROWS = 1 << 20


def group_rows(records: list[int]) -> int:
    """Rows in each row group of a copy of files of `records` rows: as few groups of at
    most ROW_GROUP_ROWS as hold them, each as big (ROW_GROUP_ROWS when a count is unknown,
    0 or less)."""
    total = sum(records)
    if total <= 0 or any(r <= 0 for r in records):
        return ROW_GROUP_ROWS
    return -(-total // -(-total // ROW_GROUP_ROWS))


def sums(
    paths: list[str],
    columns: list[str],
    threads: int | None = None,
    rows: tuple[int, int] | None = None,
) -> tuple[int, int]:
    """(rows, checksum) of the Parquet files at `paths` read by DuckDB: the sum of DuckDB's
    `hash()` over each row's `columns`, each with its NULL flag (`formats.digest.row_hash`:
    a NULL moved to its neighbour column changes the row's hash), as an exact integer.
    `threads`: DuckDB's (1: all its work on the calling thread, whose `time.thread_time()`
    then counts it). `rows` (start, stop): only the rows at those positions in the file
    (DuckDB's `file_row_number`; the row groups outside are skipped): pieces of a file
    that cover its positions sum to the file's sums."""
    if not paths:
        return 0, 0
    ((count, total),) = _query(paths, columns, per_file=False, threads=threads, rows=rows)
    return int(count), int(total or 0)


def file_sums(
    paths: list[str], columns: list[str], threads: int | None = None
) -> dict[str, tuple[int, int]]:
    """{path: (rows, checksum)} of each Parquet file, as `sums` sums them."""
    if not paths:
        return {}
    found = _query(paths, columns, per_file=True, threads=threads)
    return {str(p): (int(n), int(h or 0)) for p, n, h in found}


@dataclass(frozen=True)
class Written:
    """An output file as the rewrite wrote it and DuckDB then summed it from disk."""

    location: str
    size: int  # bytes, as the writer closed it
    rows: int  # DuckDB's count
    checksum: int
    stat: tuple[int, int, int]  # (size, mtime in ns, inode) of the file DuckDB read

    def unchanged(self) -> bool:
        """Whether the file on disk is still the one summed (a file rewritten or replaced
        since has another mtime or inode)."""
        path = local_path(self.location)
        try:
            return path is not None and _stat(path) == self.stat
        except OSError:
            return False


def _stat(path: str) -> tuple[int, int, int]:
    st = os.stat(path)
    return st.st_size, st.st_mtime_ns, st.st_ino


def hash_written(location: str, size: int, columns: list[str]) -> Written:
    """The closed output file at `location` summed by DuckDB on this thread (`sums`)."""
    path = local_path(location)
    assert path is not None  # the callers copy local files only
    stat = _stat(path)
    rows, checksum = sums([path], columns, threads=1)
    if _stat(path) != stat:  # written to while read: its sums are of no one file
        raise RuntimeError(f"{location} changed while it was summed")
    return Written(location, size, rows, checksum, stat)


def _query(
    paths: list[str],
    columns: list[str],
    per_file: bool,
    threads: int | None = None,
    rows: tuple[int, int] | None = None,
) -> list[tuple[Any, ...]]:
    hashed = row_hash(columns)
    con = cursor(threads)
    params: list[Any] = [list(paths)]
    try:
        if per_file:
            sql = (
                f"SELECT filename, count(*), sum({hashed}::HUGEINT) "
                "FROM read_parquet(?, filename = true) GROUP BY filename"
            )
        elif rows is not None:
            sql = (
                f"SELECT count(*), sum({hashed}::HUGEINT) "
                "FROM read_parquet(?, file_row_number = true) "
                "WHERE file_row_number >= ? AND file_row_number < ?"
            )
            params += list(rows)
        else:
            sql = f"SELECT count(*), sum({hashed}::HUGEINT) FROM read_parquet(?)"
        return con.execute(sql, params).fetchall()
    finally:
        con.close()


class _Output:
    """The output file being written: rolled by `copy` at the output size."""

    def __init__(self, location: str, shape: Layout) -> None:
        import pyarrow as pa
        import pyarrow.parquet as pq

        self.location = location
        path = local_path(location)
        assert path is not None  # the callers copy local files only
        os.makedirs(os.path.dirname(path), exist_ok=True)
        self.sink = pa.OSFile(path, "wb")
        self.writer = pq.ParquetWriter(
            self.sink,
            shape.schema,
            compression=shape.compression,
            compression_level=shape.level,
            store_schema=False,
        )
        self.estimate = 0  # bytes, from the inputs' compressed size per row

    def close(self) -> int:
        self.writer.close()
        size = int(self.sink.tell())
        self.sink.close()
        return size


@dataclass(frozen=True)
class Copied:
    """What `copy` wrote, and the CPU its threads spent (`time.thread_time()`)."""

    files: list[tuple[str, int]]  # (location, size) of each file written
    read_cpu_s: float  # the calling thread's and the read-ahead threads'
    write_cpu_s: float  # the writer's: encoding and compressing
    elsewhere_cpu_s: float  # what of both ran on threads other than the caller's


class ThreadCpu:
    """CPU seconds added up from several threads."""

    def __init__(self) -> None:
        self.seconds = 0.0
        self._lock = threading.Lock()

    def timed(self, work: Callable[..., Any], *args: Any) -> Any:
        started = time.thread_time()
        try:
            return work(*args)
        finally:
            spent = time.thread_time() - started
            with self._lock:
                self.seconds += spent


def copy(
    paths: list[str],
    shape: Layout,
    limit: int,
    new_location: Callable[[], str],
    closed: Callable[[str, int], None] | None = None,
    read_all: Callable[[], None] | None = None,
    checked: Callable[[str, Any], None] | None = None,
) -> Copied:
    """Copy the Parquet files at `paths` (local) into new files at `new_location()` of at
    most `limit` bytes each (estimated from the inputs' bytes per row), their rows cast to
    `shape.schema` (by name: an input may hold more columns, e.g. a Delta writer's
    partition columns, and they are left out). `closed(location, size)` is called on the
    writer thread as each file is closed (before the next is written); `read_all()` on
    this thread once every input has been read, while the last rows are being written
    (work handed to another thread there takes the core the reads no longer need; its
    CPU is not counted in `read_cpu_s`). `checked(path, schema)` is given each input's
    Arrow schema as it is opened, before its rows are copied (on a reading thread: it
    raises to refuse the file). A failure removes the files written and raises."""
    import pyarrow as pa

    started = time.thread_time()
    read_ahead, write = ThreadCpu(), ThreadCpu()

    limit = max(1, int(limit))
    names = list(shape.schema.names)
    written: list[tuple[str, int]] = []
    out: _Output | None = None
    buffered: list[Any] = []
    buffered_bytes = 0  # in memory (Arrow's)
    buffered_estimate = 0  # in the file (the inputs' bytes per row)
    buffered_rows = 0
    group_rows = shape.row_group_rows or (1 << 62)
    callbacks_cpu = 0.0  # read_all's, on this thread
    # One thread writes (encodes and compresses) a row group while this one reads the next:
    # at most one row group waits, so memory holds about three (MAX_BUFFER_BYTES each).
    small = sum(os.path.getsize(p) for p in paths) <= INLINE_BYTES
    writing: Executor = Inline() if small else ThreadPoolExecutor(max_workers=1)
    pending: Future[Any] | None = None

    def later(work: Any) -> None:
        nonlocal pending
        if pending is not None:
            pending.result()
        pending = writing.submit(write.timed, work)

    def flush() -> None:
        nonlocal buffered, buffered_bytes, buffered_estimate, buffered_rows
        if buffered and out is not None:
            rows, target = pa.concat_tables(buffered), out
            later(lambda: target.writer.write_table(rows, row_group_size=rows.num_rows))
        buffered, buffered_bytes, buffered_estimate, buffered_rows = [], 0, 0, 0

    def roll() -> None:
        nonlocal out
        flush()
        if out is not None:
            done = out

            def close() -> None:
                size = done.close()
                written.append((done.location, size))
                if closed is not None:
                    closed(done.location, size)

            later(close)
        out = None

    reading: Executor = Inline() if small else ThreadPoolExecutor(max_workers=READ_AHEAD)
    try:
        for rows, per_row in _row_groups(paths, names, reading, read_ahead, checked):
            if rows.schema.equals(shape.schema):
                rows = pa.Table.from_arrays(rows.columns, schema=shape.schema)
            else:  # large strings, a time zone's other name, a column's order: cast
                rows = rows.select(names).cast(shape.schema)
            while rows.num_rows:
                if out is None:
                    out = _Output(new_location(), shape)
                room = limit - out.estimate
                fit = min(rows.num_rows, max(1, int(room / per_row)), group_rows - buffered_rows)
                buffered.append(rows.slice(0, fit))
                buffered_bytes += buffered[-1].nbytes
                buffered_estimate += int(fit * per_row)
                buffered_rows += fit
                out.estimate += int(fit * per_row)
                rows = rows.slice(fit)
                if (
                    buffered_estimate >= shape.row_group_bytes
                    or buffered_bytes >= MAX_BUFFER_BYTES
                    or buffered_rows >= group_rows
                ):
                    flush()
                if out.estimate >= limit:
                    roll()
        if read_all is not None:
            called = time.thread_time()
            read_all()
            callbacks_cpu = time.thread_time() - called
        roll()
        later(lambda: None)  # the last write done (or its error raised)
    except BaseException:
        reading.shutdown(wait=True, cancel_futures=True)
        writing.shutdown(wait=True)
        if out is not None:
            written.append((out.location, 0))
            with contextlib.suppress(Exception):
                out.close()
        remove([location for location, _ in written])
        raise
    finally:
        reading.shutdown(wait=True, cancel_futures=True)
        writing.shutdown(wait=True)
    caller = time.thread_time() - started - callbacks_cpu
    elsewhere = read_ahead.seconds + write.seconds
    if small:  # the read-ahead and the writes ran on this thread: counted in `caller` too
        caller, elsewhere = caller - elsewhere, 0.0
    return Copied(written, caller + read_ahead.seconds, write.seconds, elsewhere)


def _row_groups(
    paths: list[str],
    names: list[str],
    reading: Executor,
    cpu: ThreadCpu,
    checked: Callable[[str, Any], None] | None = None,
) -> Iterator[tuple[Any, float]]:
    """Each input's row groups (only `names`) with its file's bytes per row, in order. A
    file under MAX_BUFFER_BYTES is read whole by `reading`, READ_AHEAD files ahead (small
    files are most of a compaction's inputs, and one at a time leaves a core idle), each
    on its reading thread alone (Arrow's pool per column of a small file costs more in
    hand-offs than it gains); a bigger one row group by row group here (memory bounded by
    one, its columns decoded by Arrow's pool)."""
    import pyarrow.parquet as pq

    def opened(path: str) -> Any:
        source = pq.ParquetFile(path)
        if checked is not None:
            checked(path, source.schema_arrow)
        return source

    def whole(path: str) -> list[tuple[Any, float]] | None:
        size = os.path.getsize(path)
        if size > MAX_BUFFER_BYTES:
            return None
        source = opened(path)
        per_row = size / max(1, source.metadata.num_rows)
        return [
            (source.read_row_group(i, columns=names, use_threads=False), per_row)
            for i in range(source.num_row_groups)
        ]

    ahead: deque[tuple[str, Future[list[tuple[Any, float]] | None]]] = deque()
    queued = iter(paths)
    for path in itertools.islice(queued, READ_AHEAD):
        ahead.append((path, reading.submit(cpu.timed, whole, path)))
    while ahead:
        path, future = ahead.popleft()
        following = next(queued, None)
        if following is not None:
            ahead.append((following, reading.submit(cpu.timed, whole, following)))
        groups = future.result()
        if groups is not None:
            yield from groups
            continue
        source = opened(path)
        per_row = os.path.getsize(path) / max(1, source.metadata.num_rows)
        for i in range(source.num_row_groups):
            yield source.read_row_group(i, columns=names), per_row


def remove(locations: list[str]) -> None:
    """Delete the local files at `locations` (a rewrite's outputs never committed)."""
    for location in locations:
        path = local_path(location)
        if path is not None and os.path.exists(path):
            os.remove(path)
