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

The copy and the checksums are format-neutral (`lakewarden.parquet_copy`, shared with
Delta's native compaction): the inputs' checksum is DuckDB's (`sums`), read while pyarrow
copies the files; each output is summed the same way as soon as it is closed
(`hash_written`), while the other files are copied and Iceberg commits, so both sides of
the comparison are one C++ hasher reading the files on disk, independent of the pyarrow
reader and writer that made them (`Observed.hasher`). Validation then checks the committed
files are exactly those hashed, unchanged since (lakewarden.spark.validation), or reads
them itself.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Any

from lakewarden import parquet_copy
from lakewarden.parquet_copy import (
    HASHER,
    Layout,
    Written,
    file_sums,
    hash_written,
    local_path,
    sums,
)
from lakewarden.spark.java import each

__all__ = [
    "HASHER",
    "Input",
    "Layout",
    "Written",
    "file_sums",
    "hash_written",
    "inputs",
    "layout",
    "local_path",
    "sums",
]

# Iceberg's codec names to pyarrow's (Iceberg's "lz4" is Hadoop's framing: left to Spark).
CODECS = {"zstd": "zstd", "snappy": "snappy", "gzip": "gzip", "uncompressed": "none"}
ROW_GROUP_BYTES_DEFAULT = 128 << 20  # write.parquet.row-group-size-bytes


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


@dataclass(frozen=True)
class Rewritten:
    """What `rewrite` wrote, and the CPU the copy's threads spent (`time.thread_time()`:
    this process's driver CPU, which no Spark task metric counts)."""

    locations: list[str]
    read_cpu_s: float  # reading, slicing (the calling and read-ahead threads), Iceberg's metrics
    write_cpu_s: float  # the writer thread: encoding and compressing


def rewrite(
    jvm: Any,
    table: Any,
    group: Any,
    shape: Layout,
    files: list[Input],
    closed: Callable[[str, int], None] | None = None,
    read_all: Callable[[], None] | None = None,
) -> Rewritten:
    """Copy the group's files into new files of at most its max output size
    (`parquet_copy.copy`, row groups of `parquet_copy.group_rows`), registered on the group
    (`setOutputFiles`) with Iceberg's metrics. `closed(location, size)` is called on the
    writer thread as each file is closed (before the next is written), `read_all()` once
    every input has been read. A failure removes the files written."""
    iceberg = jvm.org.apache.iceberg
    spec = table.specs().get(group.outputSpecId())
    partition = group.fileScanTasks().get(0).file().partition()

    def new_location() -> str:
        name = f"00000-0-lakewarden-{uuid.uuid4()}.parquet"
        return str(table.locationProvider().newDataLocation(spec, partition, name))

    shape = replace(shape, row_group_rows=parquet_copy.group_rows([f.records for f in files]))
    copied = parquet_copy.copy(
        [f.path for f in files],
        shape,
        int(group.maxOutputFileSize()),
        new_location,
        closed,
        read_all=read_all,
    )
    written = copied.files
    registering = time.thread_time()
    try:
        config = iceberg.MetricsConfig.forTable(table)
        added = jvm.java.util.HashSet()
        for location, size in written:
            metrics = iceberg.parquet.ParquetUtil.fileMetrics(
                table.io().newInputFile(location), config
            )
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
    except BaseException:
        parquet_copy.remove([location for location, _ in written])
        raise
    return Rewritten(
        [location for location, _ in written],
        copied.read_cpu_s + time.thread_time() - registering,
        copied.write_cpu_s,
    )
