"""What health and explain read of a Delta table: the files of its newest version (delta-rs'
add actions: size, records, partition values; its deletion vectors), its clustering columns
(liquid clustering: the log's `delta.clustering` domain metadata) and its log (versions,
commit files kept, the last checkpoint and how old it is, the files past
`delta.logRetentionDuration`: `formats.delta.log_files`) and who else optimizes it (its
recent commits' commitInfo: `catalogs.foreign.detect_delta`). Python only, no JVM."""

from __future__ import annotations

import json
from bisect import bisect_left
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import unquote

import pyarrow as pa
from pyarrow import fs as pafs

from lakewarden.catalogs.foreign import DELTA_WINDOW, ForeignMaintainer, detect_delta
from lakewarden.formats.delta.log_files import LogFiles, clustering_columns, list_log
from lakewarden.formats.delta.timeline import DeltaTimeline
from lakewarden.metadata import DataFile

# Delta's own declared target file size (Spark's OPTIMIZE and auto compaction, delta-rs'
# optimize honour it); without it, lakewarden's policy gives the target.
TARGET_FILE_SIZE = "delta.targetFileSize"


@dataclass
class PartitionFacts:
    """One partition's live files."""

    files: int = 0
    bytes: int = 0
    records: int = 0
    small_files: int = 0
    files_without_stats: int = 0  # add actions with no `stats` (the writer collected none)


@dataclass
class DeltaFacts:
    """A Delta table at its newest version."""

    path: str
    version: int
    min_reader_version: int
    min_writer_version: int
    reader_features: list[str]
    writer_features: list[str]
    partition_columns: list[str]
    configuration: dict[str, str]
    target_file_size: int  # bytes: `delta.targetFileSize`, else the policy's target
    small_file_threshold: int  # bytes: a live file under this is small
    commit_files: int  # commit files (`%020d.json`) still in the log
    oldest_version_in_log: int | None
    checkpoint_version: int | None  # `_last_checkpoint`'s version; None: never checkpointed
    checkpoint_at_ms: int | None  # when that checkpoint was written (its file's time)
    file_sizes: list[int] = field(default_factory=list)
    partitions: dict[str, PartitionFacts] = field(default_factory=dict)
    deletion_vector_files: int = 0
    deleted_rows: int = 0  # rows hidden by deletion vectors (still in the files)
    # What the planners read and health does not show: each partition's values (column ->
    # typed value, for an OPTIMIZE's WHERE) and live files (with each column's min/max
    # from the writer's stats, for files per lookup), by partition key.
    partition_values: dict[str, dict[str, Any]] = field(default_factory=dict)
    partition_files: dict[str, list[DataFile]] = field(default_factory=dict)
    columns: list[str] = field(default_factory=list)  # the table's top-level columns
    # Liquid clustering's columns (`CLUSTER BY`); []: the table is not clustered.
    clustering_columns: list[str] = field(default_factory=list)
    log: LogFiles | None = None  # the log's files and their times (None: not listed)
    # Another optimizer seen in the recent commits (`catalogs.foreign.detect_delta`), by
    # the command of lakewarden's it would fight: compaction, optimize, vacuum.
    other_optimizers: dict[str, ForeignMaintainer] = field(default_factory=dict)

    @property
    def files(self) -> int:
        return len(self.file_sizes)

    @property
    def small_files(self) -> int:
        return sum(1 for s in self.file_sizes if s < self.small_file_threshold)

    @property
    def files_without_stats(self) -> int:
        """Live files whose add action has no statistics (no data skipping on them)."""
        return sum(p.files_without_stats for p in self.partitions.values())

    @property
    def versions_since_checkpoint(self) -> int:
        """Versions a reader replays from JSON on top of the last checkpoint (all of them
        when there is none)."""
        last = self.checkpoint_version if self.checkpoint_version is not None else -1
        return self.version - last

    def checkpoint_age_s(self, now_ms: int) -> float | None:
        if self.checkpoint_at_ms is None:
            return None
        return max(0.0, (now_ms - self.checkpoint_at_ms) / 1000)

    def summary(self, now_ms: int) -> dict[str, Any]:
        """The facts as plain data (the health endpoint's `facts`)."""
        return {
            "format": "delta",
            "version": self.version,
            "protocol": {
                "min_reader_version": self.min_reader_version,
                "min_writer_version": self.min_writer_version,
                "reader_features": self.reader_features,
                "writer_features": self.writer_features,
            },
            "partition_columns": self.partition_columns,
            "files": self.files,
            "bytes": sum(self.file_sizes),
            "records": sum(p.records for p in self.partitions.values()),
            "target_file_size": self.target_file_size,
            "small_file_threshold": self.small_file_threshold,
            "small_files": self.small_files,
            "deletion_vector_files": self.deletion_vector_files,
            "deleted_rows": self.deleted_rows,
            "files_without_stats": self.files_without_stats,
            "commit_files": self.commit_files,
            "oldest_version_in_log": self.oldest_version_in_log,
            "checkpoint_version": self.checkpoint_version,
            "versions_since_checkpoint": self.versions_since_checkpoint,
            "checkpoint_age_s": self.checkpoint_age_s(now_ms),
            "auto_optimize": {k: v for k, v in self.configuration.items() if "autoOptimize" in k},
            "clustering_columns": self.clustering_columns,
            "other_optimizers": {k: vars(v) for k, v in sorted(self.other_optimizers.items())},
            **(self.log.summary(now_ms, self.version) if self.log is not None else {}),
            "partitions": {k: vars(v) for k, v in sorted(self.partitions.items())},
        }


def partition_key(columns: list[str], row: dict[str, Any]) -> str:
    """A partition's name as Delta lays it out, `a=1/b=x`; "" when unpartitioned."""
    values = [row.get(f"partition.{c}") for c in columns]
    return "/".join(f"{c}={'' if v is None else v}" for c, v in zip(columns, values, strict=True))


def hidden_rows(table: Any) -> dict[str, int]:
    """Rows hidden by each file's deletion vector (the deleted rows of its keep-mask), by
    the file's name (its last path segment: a UUID's, unique in the table); delta-rs'
    add actions do not carry the vectors' cardinality."""
    return {
        file_name(batch["filepath"]): sum(1 for keep in batch["selection_vector"] or [] if not keep)
        for batch in pa.table(table.deletion_vectors()).to_pylist()
    }


def file_name(path: str) -> str:
    """A data file's name (its last path segment: a UUID's, unique in the table)."""
    return unquote(path).rsplit("/", 1)[-1]


def _data_file(row: dict[str, Any], size: int, hidden: dict[str, int]) -> DataFile:
    """An add action as the DataFile the planners read: the columns' min/max stats (files
    per lookup), the rows its deletion vector hides (a purge)."""
    bounds = {
        name[4:]: (value, row[f"max.{name[4:]}"])
        for name, value in row.items()
        if name.startswith("min.") and value is not None and row.get(f"max.{name[4:]}") is not None
    }
    records = int(row.get("num_records") or 0)
    # deleted_records: the rows its deletion vector hides (what a purge would drop)
    deleted = hidden.get(file_name(row["path"]), 0)
    return DataFile(row["path"], size, records, 0, (), bounds, float(deleted))


def last_checkpoint(timeline: DeltaTimeline) -> tuple[int | None, int | None]:
    """`_last_checkpoint`'s version and when its checkpoint file was written (ms), or
    (None, None) when the table was never checkpointed."""
    fs, log = timeline.fs, timeline.log
    try:
        with fs.open_input_stream(f"{log}/_last_checkpoint") as f:
            version = int(json.loads(f.read().decode())["version"])
    except (FileNotFoundError, OSError, ValueError, KeyError):
        return None, None
    written = [
        info.mtime_ns // 10**6
        for info in fs.get_file_info(pafs.FileSelector(log))
        if info.base_name.startswith(f"{version:020d}.checkpoint") and info.mtime_ns is not None
    ]
    return version, (max(written) if written else None)


@dataclass(frozen=True)
class FileRow:
    """One live file as the facts fold it: its partition's key and values, its size and
    records, and its description for the planners (`_data_file`). The same whether read
    from delta-rs' add actions in full or kept from an earlier plan (`delta.incremental`)."""

    key: str
    values: dict[str, Any]
    size: int
    records: int
    file: DataFile  # deleted_records: the rows its deletion vector hides
    has_vector: bool  # it has a deletion vector
    has_stats: bool = True  # its add action carries statistics (numRecords at least)


def file_rows(table: Any, bounds: bool = True) -> list[FileRow]:
    """Every live file of `table` (delta-rs' add actions), with the rows each deletion
    vector hides; without its columns' statistics unless `bounds` (a rewrite's selection
    reads none: three Python objects fewer per column and file)."""
    columns = list(table.metadata().partition_columns or [])
    has_vectors = "deletionVectors" in (table.protocol().reader_features or [])
    hidden = hidden_rows(table) if has_vectors else {}
    actions = pa.table(table.get_add_actions(flatten=True))
    if not bounds:
        stats = ("min.", "max.", "null_count.")
        actions = actions.select([c for c in actions.column_names if not c.startswith(stats)])
    rows = actions.to_pylist()
    return [file_row(columns, row, hidden) for row in rows]


def file_row(columns: list[str], row: dict[str, Any], hidden: dict[str, int]) -> FileRow:
    """`row` (a flattened add action) as a FileRow; `hidden`: the rows each file's deletion
    vector hides, by the file's name (`hidden_rows`)."""
    size = int(row["size_bytes"])
    return FileRow(
        partition_key(columns, row),
        {c: row.get(f"partition.{c}") for c in columns},
        size,
        int(row.get("num_records") or 0),
        _data_file(row, size, hidden),
        file_name(row["path"]) in hidden,
        # Delta's statistics always hold numRecords: without it, the writer collected none
        row.get("num_records") is not None,
    )


@dataclass
class PartitionFiles:
    """One partition's live files, folded once (`group`): what `read_facts` adds up per
    plan without a pass over every file (`delta.incremental` keeps these between plans)."""

    key: str
    values: dict[str, Any]
    rows: dict[str, FileRow]  # by path
    files: list[DataFile] = field(default_factory=list)
    sizes: list[int] = field(default_factory=list)
    sorted_sizes: list[int] = field(default_factory=list)
    bytes: int = 0
    records: int = 0
    vector_files: int = 0
    deleted_rows: int = 0
    no_stats_files: int = 0

    def fold(self) -> PartitionFiles:
        rows = [self.rows[p] for p in sorted(self.rows)]  # one order, however read
        self.files = [r.file for r in rows]
        self.sizes = [r.size for r in rows]
        self.sorted_sizes = sorted(self.sizes)
        self.bytes = sum(self.sizes)
        self.records = sum(r.records for r in rows)
        self.vector_files = sum(1 for r in rows if r.has_vector)
        self.deleted_rows = sum(int(r.file.deleted_records) for r in rows)
        self.no_stats_files = sum(1 for r in rows if not r.has_stats)
        return self


def group(rows: list[FileRow]) -> dict[str, PartitionFiles]:
    """Live files by partition key, each partition folded."""
    out: dict[str, PartitionFiles] = {}
    for row in rows:
        part = out.get(row.key)
        if part is None:
            part = out[row.key] = PartitionFiles(row.key, row.values, {})
        part.rows[row.file.path] = row
    return {k: p.fold() for k, p in out.items()}


@dataclass(frozen=True)
class Snapshot:
    """What `read_facts` reads of a table besides its files: delta-rs' table (its protocol,
    metadata and schema), the version and the recent commits' commitInfo (newest first,
    each with its `version`, as `DeltaTable.history`)."""

    table: Any
    version: int
    history: list[dict[str, Any]]

    @classmethod
    def of(cls, table: Any) -> Snapshot:
        return cls(table, table.version(), list(table.history(DELTA_WINDOW)))


def read_facts(
    timeline: DeltaTimeline,
    *,
    target_file_size: int,
    small_file_ratio: float,
    files: Callable[[DeltaTimeline], tuple[Snapshot, dict[str, PartitionFiles]]] | None = None,
) -> DeltaFacts:
    """The table's facts now: delta-rs for the protocol, the files and deletion vectors;
    the log's listing for its length and checkpoint. The target is the table's own
    `delta.targetFileSize` if it declares one, else `target_file_size` (the policy's).
    `files`: where the table and its live files come from (`delta.incremental`'s cache,
    for a plan); by default delta-rs reads them in full."""
    if files is None:
        table = timeline.open_table()
        snapshot, parts = Snapshot.of(table), group(file_rows(table))
    else:
        snapshot, parts = files(timeline)
    table = snapshot.table
    protocol = table.protocol()
    metadata = table.metadata()
    config = dict(metadata.configuration or {})
    target = int(config.get(TARGET_FILE_SIZE) or target_file_size)
    versions = timeline.versions()
    checkpoint, checkpoint_at = last_checkpoint(timeline)
    writer_features = sorted(protocol.writer_features or [])
    columns = list(metadata.partition_columns or [])
    facts = DeltaFacts(
        path=timeline.path,
        version=snapshot.version,
        min_reader_version=protocol.min_reader_version,
        min_writer_version=protocol.min_writer_version,
        reader_features=sorted(protocol.reader_features or []),
        writer_features=writer_features,
        partition_columns=columns,
        configuration=config,
        target_file_size=target,
        small_file_threshold=int(target * small_file_ratio),
        commit_files=len(versions),
        oldest_version_in_log=versions[0] if versions else None,
        checkpoint_version=checkpoint,
        checkpoint_at_ms=checkpoint_at,
        columns=[f.name for f in table.schema().fields],
        clustering_columns=clustering_columns(timeline, checkpoint)
        if "clustering" in writer_features
        else [],
        log=list_log(timeline, config),
        other_optimizers=detect_delta(snapshot.history),
    )
    for key, part in sorted(parts.items()):  # one order, however read
        facts.deletion_vector_files += part.vector_files
        facts.deleted_rows += part.deleted_rows
        facts.partitions[key] = PartitionFacts(
            files=len(part.sizes),
            bytes=part.bytes,
            records=part.records,
            small_files=bisect_left(part.sorted_sizes, facts.small_file_threshold),
            files_without_stats=part.no_stats_files,
        )
        facts.partition_values[key] = part.values
        facts.partition_files[key] = list(part.files)
        facts.file_sizes.extend(part.sizes)
    return facts
