"""A bin-pack file group rewritten by pyarrow instead of Spark, where that is a plain copy
(issue 30: a compaction as fast as raw pyarrow's read-and-write).

Spark's Iceberg writer is row-based and writes one file per task: a 300-file group of 1.9 M
rows took 4.5 s in one Spark task, against 1.2 s for pyarrow's read-all-and-write
(docs/performance.md, B4). A group qualifies (`inputs` says why one does not) when
copying its files' columns is all a rewrite does: local Parquet files, no delete file
applying, each already in the output spec and the group's one partition, their Parquet
schemas the table's current schema exactly (the same names, field ids and types, of the
primitive types below), a table before format v3 (row lineage is Iceberg-Java's to keep).
Then the files are streamed row group by row group into `pq.ParquetWriter`s (the table's
codec and level, a file rolled at the group's max output size, memory bounded by one row
group), each new file given Iceberg's own metrics (`ParquetUtil.fileMetrics`, the table's
MetricsConfig) and the group's partition, and handed to the group (`setOutputFiles`): the
commit manager, staging branch, validation and publish are the Spark path's.

The inputs' checksum is DuckDB's (`sums`: row count and the sum of `hash()` over each row's
columns and their NULL flags), read by DuckDB's own Parquet reader while pyarrow copies the
files; each output is summed the same way as soon as it is closed (`hash_written`), while
the other files are copied and Iceberg commits, so both sides of the comparison are one
C++ hasher reading the files on disk, independent of the pyarrow reader and writer that
made them (`Observed.hasher`). Validation then checks the committed files are exactly those
hashed, unchanged since (lakewarden.spark.validation), or reads them itself.
"""

from __future__ import annotations

import contextlib
import os
import threading
import time
import uuid
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

from lakewarden.formats.digest import row_hash
from lakewarden.spark.java import each

# The checksum both sides of an Arrow-rewritten group's validation use.
HASHER = "duckdb"

# Iceberg's codec names to pyarrow's (Iceberg's "lz4" is Hadoop's framing: left to Spark).
CODECS = {"zstd": "zstd", "snappy": "snappy", "gzip": "gzip", "uncompressed": "none"}
ROW_GROUP_BYTES_DEFAULT = 128 << 20  # write.parquet.row-group-size-bytes
# A row group is written once it holds the table's row-group size (as its inputs' bytes per
# row estimate its size in the file) or this much in memory, whichever comes first.
MAX_BUFFER_BYTES = 64 << 20


def _arrow_type(iceberg_type: str) -> Any:
    """The Arrow type pyarrow reads an Iceberg primitive's Parquet column as; None for a
    type this path has not been tested with (its groups go to Spark)."""
    import pyarrow as pa

    simple = {
        "boolean": pa.bool_(),
        "int": pa.int32(),
        "long": pa.int64(),
        "float": pa.float32(),
        "double": pa.float64(),
        "date": pa.date32(),
        "string": pa.string(),
        "binary": pa.binary(),
        "timestamp": pa.timestamp("us"),
        "timestamptz": pa.timestamp("us", tz="UTC"),
    }
    if iceberg_type in simple:
        return simple[iceberg_type]
    if iceberg_type.startswith("decimal("):
        precision, scale = (int(x) for x in iceberg_type[8:-1].split(","))
        return pa.decimal128(precision, scale)
    return None


def local_path(location: str) -> str | None:
    """A file's path on this machine's file system, or None (an object store's, HDFS)."""
    if location.startswith("file:"):
        return "/" + location.removeprefix("file:").lstrip("/")
    return location if location.startswith("/") else None


@dataclass(frozen=True)
class Layout:
    """The table's current schema as the Arrow schema its files must have (field ids in
    the fields' metadata, as pyarrow reads and writes them), and its write properties."""

    schema: Any  # pa.Schema
    compression: str
    level: int | None
    row_group_bytes: int


def layout(jvm: Any, table: Any) -> Layout | str:
    """The table's Layout, or why no group of it is rewritten by Arrow."""
    import pyarrow as pa

    if int(jvm.org.apache.iceberg.TableUtil.formatVersion(table)) >= 3:
        return "a format v3 table (row lineage is kept by Iceberg's Spark writer)"
    props = table.properties()
    if str(props.getOrDefault("write.format.default", "parquet")).lower() != "parquet":
        return "the table writes a format other than Parquet"
    codec = str(props.getOrDefault("write.parquet.compression-codec", "zstd")).lower()
    if codec not in CODECS:
        return f"the table's Parquet codec {codec!r}"
    for key in props.keySet():
        if (
            str(key).startswith("write.parquet.bloom-filter-enabled")
            and str(props.get(key)).lower() == "true"
        ):
            return f"the table asks for Parquet bloom filters ({key}), which pyarrow does not write"
    level = props.get("write.parquet.compression-level")
    fields = []
    for column in table.schema().columns():
        kind = str(column.type().toString())
        arrow = _arrow_type(kind)
        if arrow is None:
            return f"column {column.name()!r} of type {kind}"
        fields.append(
            pa.field(
                str(column.name()),
                arrow,
                nullable=not bool(column.isRequired()),
                metadata={b"PARQUET:field_id": str(int(column.fieldId())).encode()},
            )
        )
    return Layout(
        pa.schema(fields),
        CODECS[codec],
        int(level) if level is not None and codec in ("zstd", "gzip") else None,
        int(props.getOrDefault("write.parquet.row-group-size-bytes", str(ROW_GROUP_BYTES_DEFAULT))),
    )


def _normal(arrow_type: Any) -> Any:
    """The type as `layout` names it: a file a pyarrow writer stored its Arrow schema in
    (pyiceberg's) reads back as that schema's large strings, or its time zone's name."""
    import pyarrow as pa

    if pa.types.is_large_string(arrow_type):
        return pa.string()
    if pa.types.is_large_binary(arrow_type):
        return pa.binary()
    if pa.types.is_timestamp(arrow_type) and arrow_type.tz in ("+00:00", "Etc/UTC", "Z"):
        return pa.timestamp(arrow_type.unit, tz="UTC")
    return arrow_type


def _field_id(field: Any) -> int | None:
    raw = (field.metadata or {}).get(b"PARQUET:field_id")
    return int(raw) if raw is not None else None


@dataclass(frozen=True)
class Input:
    """One file of a group the Arrow path copies."""

    location: str
    path: str  # on this machine
    records: int  # its manifest entry's record count


def simple(table: Any, start_id: int) -> bool:
    """Whether every file of snapshot `start_id` is in the table's one partition spec with
    no delete file in the snapshot: then `inputs` need not ask each file (a py4j call a
    question, 0.2 s on 300 files), as Iceberg's planner groups files by partition."""
    total = table.snapshot(start_id).summary().get("total-delete-files")
    return table.specs().size() == 1 and total is not None and int(total) == 0


def inputs(table: Any, group: Any, shape: Layout, simple: bool) -> list[Input] | str:
    """The group's files when it is a plain copy of them into one partition of the output
    spec, else why not (Spark rewrites it). Reads each file's Parquet footer; `simple`: the
    snapshot has no delete files and one spec (`simple`), so only the footers are checked."""
    import pyarrow.parquet as pq

    out_spec = int(table.specs().get(group.outputSpecId()).specId())
    first = None
    found: list[Input] = []
    for task in each(group.fileScanTasks()):
        f = task.file()
        location = str(f.location())
        if not simple:
            if not task.deletes().isEmpty():
                return f"delete files apply to {location}"
            if int(f.specId()) != out_spec:
                return f"{location} is in partition spec {f.specId()}, not the output's"
            if first is None:
                first = f.partition()
            elif not first.equals(f.partition()):
                return "the group's files are in more than one partition"
        path = local_path(location)
        if path is None:
            return f"{location} is not on a local file system"
        try:  # a file that is not Parquet fails here
            schema = pq.read_schema(path)
        except (OSError, ValueError) as exc:
            return f"{location} could not be read as Parquet: {exc}"
        if len(schema) != len(shape.schema) or any(
            got.name != want.name
            or _field_id(got) != _field_id(want)
            or _normal(got.type) != want.type
            for got, want in zip(schema, shape.schema, strict=True)
        ):
            return f"{location}'s Parquet schema is not the table's (evolved or name-mapped)"
        found.append(Input(location, path, int(f.recordCount())))
    return found


def sums(paths: list[str], columns: list[str], threads: int | None = None) -> tuple[int, int]:
    """(rows, checksum) of the Parquet files at `paths` read by DuckDB: the sum of DuckDB's
    `hash()` over each row's `columns`, each with its NULL flag (a NULL moved to its
    neighbour column changes the row's hash), as an exact integer. `threads`: DuckDB's
    (1: all its work on the calling thread, whose `time.thread_time()` then counts it)."""
    if not paths:
        return 0, 0
    ((rows, total),) = _query(paths, columns, per_file=False, threads=threads)
    return int(rows), int(total or 0)


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
    assert path is not None  # inputs() checked the group's files are local
    stat = _stat(path)
    rows, checksum = sums([path], columns, threads=1)
    if _stat(path) != stat:  # written to while read: its sums are of no one file
        raise RuntimeError(f"{location} changed while it was summed")
    return Written(location, size, rows, checksum, stat)


# DuckDB's in-memory databases, one per `threads` setting, each query on a cursor of its own:
# a new database costs ~14 ms of CPU (B16's 30 groups opened 60), a cursor ~0.2 ms.
_DATABASES: dict[int | None, Any] = {}
_OPENING = threading.Lock()


def _cursor(threads: int | None) -> Any:
    import duckdb

    with _OPENING:
        database = _DATABASES.get(threads)
        if database is None:
            database = duckdb.connect(config={"threads": threads} if threads else {})
            _DATABASES[threads] = database
    return database.cursor()  # a connection of its own: one per thread, as DuckDB asks


def _query(
    paths: list[str], columns: list[str], per_file: bool, threads: int | None = None
) -> list[tuple[Any, ...]]:
    hashed = row_hash(columns)
    con = _cursor(threads)
    try:
        if per_file:
            sql = (
                f"SELECT filename, count(*), sum({hashed}::HUGEINT) "
                "FROM read_parquet(?, filename = true) GROUP BY filename"
            )
        else:
            sql = f"SELECT count(*), sum({hashed}::HUGEINT) FROM read_parquet(?)"
        return con.execute(sql, [list(paths)]).fetchall()
    finally:
        con.close()


class _Output:
    """The output file being written: rolled by `rewrite` at the group's max size."""

    def __init__(self, jvm: Any, table: Any, spec: Any, partition: Any, shape: Layout) -> None:
        import pyarrow as pa
        import pyarrow.parquet as pq

        name = f"00000-0-lakewarden-{uuid.uuid4()}.parquet"
        self.location = str(table.locationProvider().newDataLocation(spec, partition, name))
        path = local_path(self.location)
        assert path is not None  # inputs() checked the group's files are local
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
class Rewritten:
    """What `rewrite` wrote, and the CPU its two threads spent (`time.thread_time()`: this
    process's driver CPU, which no Spark task metric counts)."""

    locations: list[str]
    read_cpu_s: float  # the calling thread: reading, slicing, Iceberg's metrics over py4j
    write_cpu_s: float  # the writer thread: encoding and compressing


def rewrite(
    jvm: Any,
    table: Any,
    group: Any,
    shape: Layout,
    files: list[Input],
    closed: Callable[[str, int], None] | None = None,
) -> Rewritten:
    """Copy the group's files into new files of at most its max output size (estimated from
    the inputs' bytes per row), registered on the group (`setOutputFiles`) with Iceberg's
    metrics. `closed(location, size)` is called on the writer thread as each file is
    closed (before the next is written). A failure removes the files written."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    reading = time.thread_time()
    write_cpu = [0.0]  # the writer thread's, added up by that one thread
    iceberg = jvm.org.apache.iceberg
    spec = table.specs().get(group.outputSpecId())
    partition = group.fileScanTasks().get(0).file().partition()
    limit = max(1, int(group.maxOutputFileSize()))
    written: list[tuple[str, int]] = []
    out: _Output | None = None
    buffered: list[Any] = []
    buffered_bytes = 0  # in memory (Arrow's)
    buffered_estimate = 0  # in the file (the inputs' bytes per row)
    # One thread writes (encodes and compresses) a row group while this one reads the next:
    # at most one row group waits, so memory holds about three (MAX_BUFFER_BYTES each).
    writing = ThreadPoolExecutor(max_workers=1)
    pending: Future[Any] | None = None

    def timed(work: Callable[[], Any]) -> None:
        started = time.thread_time()
        try:
            work()
        finally:
            write_cpu[0] += time.thread_time() - started

    def later(work: Callable[[], Any]) -> None:
        nonlocal pending
        if pending is not None:
            pending.result()
        pending = writing.submit(timed, work)

    def flush() -> None:
        nonlocal buffered, buffered_bytes, buffered_estimate
        if buffered and out is not None:
            rows, target = pa.concat_tables(buffered), out
            later(lambda: target.writer.write_table(rows, row_group_size=rows.num_rows))
        buffered, buffered_bytes, buffered_estimate = [], 0, 0

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

    try:
        for input_file in files:
            source = pq.ParquetFile(input_file.path)
            per_row = os.path.getsize(input_file.path) / max(1, source.metadata.num_rows)
            for i in range(source.num_row_groups):
                rows = source.read_row_group(i)
                if rows.schema.equals(shape.schema):
                    rows = pa.Table.from_arrays(rows.columns, schema=shape.schema)
                else:  # large strings, a time zone's other name: cast (no value changes)
                    rows = rows.cast(shape.schema)
                while rows.num_rows:
                    if out is None:
                        out = _Output(jvm, table, spec, partition, shape)
                    room = limit - out.estimate
                    fit = min(rows.num_rows, max(1, int(room / per_row)))
                    buffered.append(rows.slice(0, fit))
                    buffered_bytes += buffered[-1].nbytes
                    buffered_estimate += int(fit * per_row)
                    out.estimate += int(fit * per_row)
                    rows = rows.slice(fit)
                    if (
                        buffered_estimate >= shape.row_group_bytes
                        or buffered_bytes >= MAX_BUFFER_BYTES
                    ):
                        flush()
                    if out.estimate >= limit:
                        roll()
        roll()
        later(lambda: None)  # the last write done (or its error raised)
    except BaseException:
        writing.shutdown(wait=True)
        if out is not None:
            written.append((out.location, 0))
            with contextlib.suppress(Exception):
                out.close()
        for location, _ in written:
            path = local_path(location)
            if path is not None and os.path.exists(path):
                os.remove(path)
        raise
    finally:
        writing.shutdown(wait=True)
    config = iceberg.MetricsConfig.forTable(table)
    added = jvm.java.util.HashSet()
    for location, size in written:
        metrics = iceberg.parquet.ParquetUtil.fileMetrics(table.io().newInputFile(location), config)
        added.add(
            iceberg.DataFiles.builder(spec)
            .withPath(location)
            .withFormat("PARQUET")
            .withPartition(partition)
            .withFileSizeInBytes(size)
            .withMetrics(metrics)
            .build()
        )
    group.setOutputFiles(added)
    return Rewritten(
        [location for location, _ in written], time.thread_time() - reading, write_cpu[0]
    )
