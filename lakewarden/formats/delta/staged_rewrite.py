"""A Delta compaction the arrow path refuses (deletion vectors, column mapping, nested
columns, writer features delta-rs does not commit), a Z-order, or a liquid clustering,
rewritten by Spark with Delta's own reader and writer, checked by DuckDB before anything is
visible, and committed by Delta's own transaction (issue 30, goal 5: readers never see a
bad rewrite).

Delta's `OPTIMIZE` commits as it ends, so a check after it leaves the table wrong until
its RESTORE lands. This module does what `OptimizeTableCommand` (delta-spark 3.3.3) does,
in its steps, with the check between the write and the commit:

1. `DeltaLog.forTable(...).update()` is the snapshot read; its add actions are chosen as
   OPTIMIZE and `native_rewrite` choose them: in each planned partition the files under
   the plan's minimum size, packed in order of size into bins of at most the target size,
   a bin of two or more files rewritten. A purge (the plan's `purge_partitions`: what
   REORG … APPLY (PURGE) rewrites) adds every file with a deletion vector there, a bin of
   one kept: written without its deleted rows, in the same commit (an Optimize, as Delta's
   own OPTIMIZE purges a file past its deleted-rows ratio). A Z-order (the plan's
   `zorder` columns) takes every file of each planned partition as one bin, even a single
   file (Delta's `ZOrderStrategy`: `maxBinSize` Long.MaxValue, every multi-dimensional bin
   kept). A clustering plan (a table with liquid clustering) takes what Delta's own
   `ClusteringStrategy` prepares (`_Clustering`: files not yet in a ZCUBE of the target
   size), packed in its order into bins of at most its `maxBinSize`.
2. `startTransaction(None, Some(snapshot))`; each bin is read by
   `deltaLog.createDataFrame(snapshot, bin, actionTypeOpt = Some("Optimize"))` (Delta's
   file index over exactly those files: deletion vectors applied, physical column names
   mapped), on a table with row tracking its rows' ids and commit versions added as the
   materialized columns (`RowTracking.preserveRowTrackingColumns`), and written by
   `txn.writeFiles(df.coalesce(1), None, isOptimize = true, Nil)`, which writes new
   Parquet files (physical column names, statistics) into the table's directory and
   commits nothing. A Z-order's bin is first range-partitioned on its
   Z-order curve by Delta's own `MultiDimClustering.cluster(df, max(1, bin bytes / target
   size), columns, "zorder")` and written as those partitions, without the coalesce; a
   clustering's on the strategy's curve (Hilbert) by the table's clustering columns, its
   written files tagged by the strategy (the bin's new ZCUBE id, the clustering provider).
3. DuckDB reads the inputs (deletion vectors applied: the rows delta-rs'
   `deletion_vectors()` at the read version keeps) and the written files, partition by
   partition: rows and the checksum over the data columns' physical names (`check`), and
   with row tracking over each row's id and commit version (`RowTracking`: the materialized
   values, else the add's baseRowId + position and defaultRowCommitVersion; a written
   file's add has none yet, so a row it does not materialize fails). A mismatch deletes
   the written files, commits nothing, raises `RewriteMismatch`.
4. A match commits the transaction: each input's own `removeWithTimestamp(now, false)`
   (its deletion vector kept in the remove), each written file's add with `dataChange`
   false (`Action.fromJson`), `DeltaOperations.Optimize` as the operation (its `zOrderBy`
   the Z-order's columns, as `DESCRIBE HISTORY` shows OPTIMIZE … ZORDER BY; its
   `clusterBy` a clustered table's clustering columns), the inputs
   tracked as read (`trackFilesRead`): Delta's conflict checker fails the commit when
   another writer removed one since (`Conflict`), on any storage's LogStore. Its
   commitInfo's `userMetadata` is the job's mark (the marked session is the active one),
   its tags Delta's `RowTracking.addPreservedRowTrackingTagIfNotSet`'s, its
   operationMetrics OPTIMIZE's (`optimize_metrics`, registered on the transaction).

Tables on the local file system (DuckDB reads the files), on S3 and on HDFS (pyarrow's
file system reads them, hdfs-native's for HDFS; DuckDB hashes the Arrow tables). Delta's
OPTIMIZE, checked after its commit and undone by RESTORE, still runs a Z-order on a column
Delta refuses (no statistics), a compaction of a clustered table (OPTIMIZE clusters it),
and a clustered table without clustering columns.
"""

from __future__ import annotations

import contextlib
import json
import os
import time
from collections import deque
from collections.abc import Callable, Iterator, Mapping
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any
from urllib.parse import unquote, urlsplit

from lakewarden import parquet_copy
from lakewarden.formats import warehouse
from lakewarden.formats.base import ATTEMPT_KEY, TASK_KEY
from lakewarden.formats.delta.jobs import conflict_of
from lakewarden.formats.delta.native_rewrite import (
    PARTITION_TYPES,
    Conflict,
    Ineligible,
    nothing_to_compact,
    record_check,
    rounded,
)
from lakewarden.formats.delta.optimize_metrics import optimize_metrics
from lakewarden.formats.delta.timeline import DeltaTimeline
from lakewarden.formats.digest import cursor, quoted, row_hash
from lakewarden.hdfs import on_hdfs
from lakewarden.object_store import filesystem, on_s3, reader_options, s3a_path
from lakewarden.spark.sql import partition_predicate

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

PHYSICAL_NAME = "delta.columnMapping.physicalName"
# Delta refuses ZORDER BY a column it collects no statistics on, unless this is off
ZORDER_STATS_CHECK = "spark.databricks.delta.optimize.zorder.checkStatsCollection.enabled"
# Delta's MaterializedRowId's and MaterializedRowCommitVersion's MATERIALIZED_COLUMN_NAME_PROP
MATERIALIZED_ROW_ID = "delta.rowTracking.materializedRowIdColumnName"
MATERIALIZED_COMMIT_VERSION = "delta.rowTracking.materializedRowCommitVersionColumnName"
_TIMESTAMPS = frozenset({"timestamp", "timestamp_ntz"})


@dataclass(frozen=True)
class ParquetInput:
    """A Parquet file as the check reads it: its rows but those its deletion vector
    deletes (`deleted`: row positions); on a table with row tracking, its add action's
    `baseRowId` and `defaultRowCommitVersion` (None: a written file's, not committed yet,
    whose materialized columns must hold every row's)."""

    local: str
    deleted: tuple[int, ...] = ()
    base_row_id: int | None = None
    default_row_commit_version: int | None = None
    size: int | None = None  # bytes (its add's), bounding how many are read at once


@dataclass(frozen=True)
class RowTracking:
    """A table with row tracking's materialized columns, as the files name them: a row's id
    is its file's materialized row id, else its add's baseRowId plus its position in the
    file; its commit version the materialized one, else the add's defaultRowCommitVersion
    (Delta's `_metadata.row_id`, `_metadata.row_commit_version`). The check hashes both."""

    row_id: str
    row_commit_version: str


@dataclass
class Bin:
    """Files of one partition rewritten into one: their add actions (the log's JSON), and
    the written files' once written."""

    key: tuple[tuple[str, str | None], ...]
    adds: list[dict[str, Any]]
    written: list[dict[str, Any]] = field(default_factory=list)


@dataclass(frozen=True)
class Column:
    """A data column as the Parquet files name it, and whether it is a timestamp (hashed
    as its microseconds: INT96 and TIMESTAMP_MICROS files alike)."""

    physical: str
    timestamp: bool = False


def ineligible(plan: Mapping[str, Any], path: str) -> str | None:
    """Why the plan alone rules this path out (OPTIMIZE then runs it), else None."""
    if not plan.get("optimize", True) and plan.get("purge_partitions") is None:
        return "the plan has neither a bin-pack nor a purge"
    if parquet_copy.local_path(path) is None and not on_s3(path) and not on_hdfs(path):
        return f"{path} is not on a local file system, S3 or HDFS (the check reads those)"
    return None


def _physical(metadata: Mapping[str, Any]) -> dict[str, str]:
    """{column: its name in the files and the log's partitionValues} (column mapping's
    physical names; a column's own name without it)."""
    mapped = (metadata.get("configuration") or {}).get("delta.columnMapping.mode", "none")
    out = {}
    for f in json.loads(metadata["schemaString"])["fields"]:
        name = (f.get("metadata") or {}).get(PHYSICAL_NAME) if mapped != "none" else None
        out[f["name"]] = str(name or f["name"])
    return out


def _columns(metadata: Mapping[str, Any]) -> list[Column]:
    """The table's data columns (no partition columns) as the files name them."""
    parts = set(metadata.get("partitionColumns") or [])
    physical = _physical(metadata)
    return [
        Column(
            physical[f["name"]], f["type"] in _TIMESTAMPS if isinstance(f["type"], str) else False
        )
        for f in json.loads(metadata["schemaString"])["fields"]
        if f["name"] not in parts
    ]


def _hash_sql(
    columns: list[Column],
    present: set[str],
    source: str,
    by_file: bool,
    tracking: RowTracking | None = None,
) -> str:
    """DuckDB's (rows, checksum) over `source` (rows with their `file_row_number`, and
    `filename` when `by_file`) with the rows in the registered `deleted` (`pos`, and
    `filename` when `by_file`) left out; a column the files lack (added to the table after
    they were written) is NULL, as Delta reads it. With `tracking`, each row's id and commit
    version are hashed too, its file's `base_row_id` and `default_row_commit_version` from
    the registered `tracked` (by `filename` when `by_file`, else its one row)."""

    def read(physical: str) -> str:
        return f"r.{quoted(physical)}" if physical in present else "NULL"

    projected = []
    for c in columns:
        name = quoted(c.physical)
        if c.physical in present and c.timestamp:
            projected.append(f"epoch_us(r.{name}) AS {name}")
        else:
            projected.append(f"{read(c.physical)} AS {name}")
    hashed = [c.physical for c in columns]
    joined = ""
    if tracking is not None:
        row_id, version = tracking.row_id, tracking.row_commit_version
        projected += [
            f"coalesce({read(row_id)}, t.base_row_id + r.file_row_number) AS {quoted(row_id)}",
            f"coalesce({read(version)}, t.default_row_commit_version) AS {quoted(version)}",
        ]
        hashed += [row_id, version]
        joined = " JOIN tracked t ON t.filename = r.filename" if by_file else ", tracked t"
    same = "d.filename = r.filename AND " if by_file else ""
    inner = (
        f"SELECT {', '.join(projected)} FROM {source} r{joined} WHERE NOT EXISTS "
        f"(SELECT 1 FROM deleted d WHERE {same}d.pos = r.file_row_number)"
    )
    return f"SELECT count(*), sum({row_hash(hashed)}::HUGEINT) FROM ({inner})"


def _tracked(files: list[ParquetInput]) -> Any:
    """The files' base row ids and default commit versions, by file (`_hash_sql`'s
    `tracked`)."""
    import pyarrow as pa

    return pa.table(
        {
            "filename": pa.array([f.local for f in files], pa.string()),
            "base_row_id": pa.array([f.base_row_id for f in files], pa.int64()),
            "default_row_commit_version": pa.array(
                [f.default_row_commit_version for f in files], pa.int64()
            ),
        }
    )


def sums(
    files: list[ParquetInput],
    columns: list[Column],
    fs: Any = None,
    tracking: RowTracking | None = None,
) -> tuple[int, int]:
    """(rows, checksum) of `files`, each without its deleted rows: local files read by
    DuckDB's Parquet reader, all in one scan (a file lacking a column the others have reads
    it as NULL: `union_by_name`; 300 small files were read 5.8x faster so than one query
    each); `fs` (pyarrow's file system: an object store's, HDFS), by pyarrow, READERS files
    at once, and hashed by DuckDB over their Arrow tables, up to CHUNK_BYTES of them in one
    query (`_chunks`). `tracking`: the rows' ids and commit versions are hashed too
    (`_hash_sql`)."""
    if not files:
        return 0, 0
    con = cursor(1)
    try:
        if fs is None:
            paths = [f.local for f in files]
            con.register("deleted", _deleted(files))
            if tracking is not None:
                con.register("tracked", _tracked(files))
            source = (
                "read_parquet(?, filename = true, file_row_number = true, union_by_name = true)"
            )
            present = {
                str(d[0])
                for d in con.execute(
                    "SELECT * FROM read_parquet(?, union_by_name = true) LIMIT 0", [paths]
                ).description
            }
            sql = _hash_sql(columns, present, source, True, tracking)
            ((n, h),) = con.execute(sql, [paths]).fetchall()
            return int(n), int(h or 0)
        rows = total = 0
        for chunk, table in _chunks(files, fs):
            con.register("deleted", _deleted(chunk))
            if tracking is not None:
                con.register("tracked", _tracked(chunk))
            con.register("source", table)
            sql = _hash_sql(columns, set(table.column_names), "source", True, tracking)
            ((n, h),) = con.execute(sql).fetchall()
            con.unregister("source")
            rows, total = rows + int(n), total + int(h or 0)
        return rows, total
    finally:
        con.close()


# Files read at once from an object store or HDFS (each read waits on its requests), and
# how much of them one query hashes (memory holds about this much, plus READERS files).
READERS = 8
CHUNK_BYTES = 256 << 20
# ...as long as the files being read hold at most this many bytes (a file of unknown size
# counts as this big: read alone)
READ_AHEAD_BYTES = 64 << 20


def _deleted(files: list[ParquetInput]) -> Any:
    """The files' deleted rows by file (`_hash_sql`'s `deleted`)."""
    import pyarrow as pa

    return pa.table(
        {
            "filename": pa.array([f.local for f in files for _ in f.deleted], pa.string()),
            "pos": pa.array([p for f in files for p in f.deleted], pa.int64()),
        }
    )


def _chunks(files: list[ParquetInput], fs: Any) -> Iterator[tuple[list[ParquetInput], Any]]:
    """`files` read by pyarrow through `fs`, in order, up to READERS at once while they
    hold at most READ_AHEAD_BYTES (a big file is read alone: memory stays bounded), each
    with its `filename` and `file_row_number` columns, yielded as one Arrow table per
    CHUNK_BYTES
    (a column a file lacks is NULL in its rows; files whose columns' types do not unify
    are yielded one by one)."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    def read(f: ParquetInput) -> Any:
        table = pq.read_table(f.local, filesystem=fs)
        n = table.num_rows
        return table.append_column("filename", pa.repeat(pa.scalar(f.local), n)).append_column(
            "file_row_number", pa.array(range(n), pa.int64())
        )

    def joined(chunk: list[ParquetInput], tables: list[Any]) -> Iterator[tuple[Any, Any]]:
        try:
            yield chunk, pa.concat_tables(tables, promote_options="default")
        except (pa.ArrowInvalid, pa.ArrowTypeError):
            yield from (([f], t) for f, t in zip(chunk, tables, strict=True))

    def bytes_of(f: ParquetInput) -> int:
        return READ_AHEAD_BYTES if f.size is None else f.size

    with ThreadPoolExecutor(max_workers=READERS) as pool:
        ahead: deque[tuple[ParquetInput, Future[Any]]] = deque()
        queued = deque(files)
        reading = 0  # bytes of the files in `ahead`

        def read_ahead() -> None:
            nonlocal reading
            while queued and len(ahead) < READERS:
                if ahead and reading + bytes_of(queued[0]) > READ_AHEAD_BYTES:
                    return
                f = queued.popleft()
                reading += bytes_of(f)
                ahead.append((f, pool.submit(read, f)))

        chunk: list[ParquetInput] = []
        tables: list[Any] = []
        size = 0
        read_ahead()
        while ahead:
            f, future = ahead.popleft()
            reading -= bytes_of(f)
            read_ahead()
            table = future.result()
            chunk.append(f)
            tables.append(table)
            size += table.nbytes
            if size >= CHUNK_BYTES:
                yield from joined(chunk, tables)
                chunk, tables, size = [], [], 0
        if chunk:
            yield from joined(chunk, tables)


def check(
    parts: Mapping[Any, tuple[list[ParquetInput], list[ParquetInput]]],
    columns: list[Column],
    fs: Any = None,
    tracking: RowTracking | None = None,
) -> tuple[list[str], int, int]:
    """Each partition's written files (its second list) against its inputs (its first):
    the partitions that differ, said; and the inputs' rows and checksum (`fs`, `tracking`:
    `sums`')."""
    wrong, rows, total = [], 0, 0
    for key, (inputs, outputs) in parts.items():
        want, got = sums(inputs, columns, fs, tracking), sums(outputs, columns, fs, tracking)
        rows, total = rows + want[0], total + want[1]
        if got != want:
            wrong.append(
                f"partition {_said(key)}: {want[0]} rows (checksum {want[1]}) in, "
                f"{got[0]} ({got[1]}) written"
            )
    return wrong, rows, total


def _said(key: Any) -> str:
    return ", ".join(f"{k}={v}" for k, v in key) if key else "(table)"


def _spelled(value: Any) -> str | None:
    if value is None:
        return None
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)


def choose(
    adds: list[dict[str, Any]],
    partition_columns: list[str],
    plan: Mapping[str, Any],
    physical: Mapping[str, str] | None = None,
) -> list[Bin]:
    """The bins of the plan's partitions: files under the minimum size, smallest first,
    packed up to the target size; a bin of two files or more. A purge's (the plan's
    `purge_partitions`; [] the whole table): every file with a deletion vector there too,
    its bin kept even alone (REORG … APPLY (PURGE) rewrites each such file without its
    deleted rows). A Z-order's (the plan has `zorder` columns): every file of a partition,
    one bin each. `physical`: a partition column's name in the add actions'
    partitionValues (column mapping's), by its name."""
    zorder = bool(plan.get("zorder"))
    target = int(plan["target_file_size_bytes"])
    small = int(plan.get("min_file_size_bytes") or target)
    optimize = zorder or bool(plan.get("optimize", True))

    def keys_of(partitions: Any) -> set[tuple[tuple[str, str | None], ...]] | None:
        return (
            {tuple((c, _spelled(v.get(c))) for c in partition_columns) for v in partitions}
            if partitions
            else None  # every partition
        )

    keys = keys_of(plan.get("partitions"))
    purge = plan.get("purge_partitions") if not zorder else None
    purged = keys_of(purge)

    def purging(key: tuple[tuple[str, str | None], ...]) -> bool:
        return purge is not None and (purged is None or key in purged)

    by_key: dict[tuple[tuple[str, str | None], ...], list[dict[str, Any]]] = {}
    for add in adds:
        values = add.get("partitionValues") or {}
        key = tuple((c, values.get((physical or {}).get(c, c))) for c in partition_columns)
        packed = optimize and (keys is None or key in keys)
        if (packed and (zorder or int(add["size"]) < small)) or (
            purging(key) and add.get("deletionVector")
        ):
            by_key.setdefault(key, []).append(add)
    ordered = sorted(by_key.items(), key=lambda kv: str(kv[0]))
    if zorder:
        return [Bin(k, sorted(fs, key=lambda a: (int(a["size"]), a["path"]))) for k, fs in ordered]
    bins = []
    for key, files in ordered:
        current: list[dict[str, Any]] = []
        size = 0
        for add in sorted(files, key=lambda a: (int(a["size"]), a["path"])):
            if current and size + int(add["size"]) > target:
                bins.append(Bin(key, current))
                current, size = [], 0
            current.append(add)
            size += int(add["size"])
        bins.append(Bin(key, current))
    return [
        b
        for b in bins
        if len(b.adds) >= 2 or (purging(b.key) and any(a.get("deletionVector") for a in b.adds))
    ]


class _Files:
    """Where the table's files are, as the check reads them: local paths, or paths in
    pyarrow's file system (`fs`) for the table's object store, or for HDFS (hdfs-native,
    whose paths are without the NameNode's address)."""

    def __init__(self, path: str, storage: Mapping[str, str] | None) -> None:
        local = parquet_copy.local_path(path.rstrip("/"))
        self.fs: Any = None
        self.hdfs = on_hdfs(path)
        if local is not None:
            self.root = local
        elif self.hdfs:
            self.fs, self.root = warehouse.filesystem(path, storage)
        else:
            self.fs, self.root = filesystem(dict(storage or {}), path.rstrip("/"))

    def of(self, add: Mapping[str, Any]) -> str:
        """An add action's file (the log's path: URI-encoded, relative, or an absolute
        URI)."""
        return self.at(str(add["path"]))

    def at(self, uri: str) -> str:
        path = unquote(uri)
        if "://" not in path and not path.startswith("file:"):
            return f"{self.root}/{path}"
        local = parquet_copy.local_path(path)
        if local is not None:
            return local
        return urlsplit(path).path if self.hdfs else path.split("://", 1)[1]

    def remove(self, locations: list[str]) -> None:
        """The written files deleted, and the checksum files Hadoop's local file system
        wrote beside them (`.<name>.crc`)."""
        if self.fs is None:
            crc = [
                os.path.join(os.path.dirname(p), f".{os.path.basename(p)}.crc") for p in locations
            ]
            parquet_copy.remove([*locations, *crc])
            return
        for location in locations:
            with contextlib.suppress(FileNotFoundError):
                self.fs.delete_file(location)

    def drop_a_row(self, location: str) -> None:
        """Write the file again without its first row (the failpoint's damage; pyarrow
        keeps the columns' field ids)."""
        import pyarrow.parquet as pq

        table = pq.read_table(location, filesystem=self.fs)
        pq.write_table(table.slice(1), location, filesystem=self.fs)


def _deleted_rows(
    path: str, version: int, storage: Mapping[str, str] | None, files: _Files
) -> dict[str, Any]:
    """{file's location (`files`): the row positions its deletion vector deletes}, read by
    delta-rs at `version` (delta-kernel's decoding, not Spark's)."""
    import pyarrow as pa
    from deltalake import DeltaTable
    from deltalake.exceptions import DeltaError

    options = reader_options(storage or {}, path) or None
    try:
        vectors = pa.table(
            DeltaTable(path, version=version, storage_options=options).deletion_vectors()
        )
    except DeltaError as exc:
        why = f"delta-rs cannot read version {version}'s deletion vectors: {exc}"
        raise Ineligible(why) from exc
    out = {}
    for row in vectors.to_pylist():
        keep = row["selection_vector"]
        out[files.at(row["filepath"])] = tuple(i for i, kept in enumerate(keep) if not kept)
    return out


class _Delta:
    """Delta's classes in the session's JVM (py4j)."""

    def __init__(self, session: SparkSession) -> None:
        jvm: Any = session._jvm
        self.jvm = jvm
        self.jsession: Any = session._jsparkSession
        self.delta: Any = jvm.org.apache.spark.sql.delta
        self.utils: Any = jvm.org.apache.spark.api.python.PythonUtils

    def seq(self, items: list[Any]) -> Any:
        return self.utils.toSeq(items)

    def map(self, items: Mapping[str, Any]) -> Any:
        return self.utils.toScalaMap(dict(items))

    def option(self, value: Any) -> Any:
        return self.jvm.scala.Option.apply(value)

    def action(self, kind: str, body: Mapping[str, Any]) -> Any:
        return self.delta.actions.Action.fromJson(json.dumps({kind: body}))


def compact(
    session: SparkSession,
    path: str,
    plan: Mapping[str, Any],
    before_commit: Callable[[], None],
    *,
    storage: Mapping[str, str] | None = None,
    corrupt: bool = False,
) -> dict[str, Any]:
    """Rewrite the plan's bins with Spark, check them, commit them in one Delta transaction
    at the version read, in `session` (a `jobs.marked_session`: its userMetadata is the
    job's mark). `before_commit` is asked right before the commit (the policy's last look,
    a cancel, a timeout). The run's metrics; nothing committed when it raises (a mismatch:
    `RewriteMismatch` with the metrics; another writer's removal of an input: `Conflict`;
    a table this path does not take, before anything is written: `Ineligible`).
    `corrupt`: test-only (the `corrupt-rewrite` failpoint), the first written file loses a
    row before the check. The plan's `zorder` columns make it a Z-order (`choose`)."""
    zorder = [str(c) for c in plan.get("zorder") or []]
    why = ineligible(plan, path)
    if why is not None:
        raise Ineligible(why)
    files = _Files(path, storage)
    d = _Delta(session)
    none = d.option(None)
    seconds: dict[str, float] = {}
    started = time.perf_counter()
    delta_log = d.delta.DeltaLog.forTable(d.jsession, s3a_path(path))
    snapshot = delta_log.update(False, none, none)
    version = int(snapshot.version())
    metadata = json.loads(snapshot.metadata().json())["metaData"]
    protocol = json.loads(snapshot.protocol().json())["protocol"]
    config = metadata.get("configuration") or {}
    tracking = _row_tracking(d, snapshot, config)
    clustered = "clustering" in (protocol.get("writerFeatures") or [])
    if clustered != bool(plan.get("clustering")):
        raise Ineligible(
            "a clustered table (OPTIMIZE clusters it)"
            if clustered
            else "a clustering plan on a table without liquid clustering"
        )
    clustering = _Clustering(d, snapshot) if clustered else None
    if clustering is not None and not clustering.columns:
        raise Ineligible("a clustered table without clustering columns (OPTIMIZE bin-packs it)")
    partition_columns = list(metadata.get("partitionColumns") or [])
    types = {f["name"]: f["type"] for f in json.loads(metadata["schemaString"])["fields"]}
    for c in partition_columns:
        if types.get(c) not in PARTITION_TYPES:
            raise Ineligible(f"partition column {c!r} of type {types.get(c)}")
    if zorder:
        why = _zorder_refused(session, snapshot, metadata, zorder)
        if why is not None:
            raise Ineligible(why)
    adds = [json.loads(j) for j in snapshot.allFiles().toJSON().collectAsList()]
    if tracking is not None and any(
        a.get("baseRowId") is None or a.get("defaultRowCommitVersion") is None for a in adds
    ):
        raise Ineligible("row tracking with a file without its baseRowId or its commit version")
    if clustering is not None:
        bins = clustering.bins(d, adds)
    else:
        bins = choose(adds, partition_columns, plan, _physical(metadata))
    seconds["plan"] = time.perf_counter() - started
    engine: dict[str, Any] = {"checked": "before the commit", "bins": len(bins)}
    if tracking is not None:
        engine["row_tracking"] = "the rows' ids and commit versions kept, and checked"
    if plan.get("purge_partitions") is not None:  # rewritten without their deleted rows
        engine["purged_files"] = sum(1 for b in bins for a in b.adds if a.get("deletionVector"))
    metrics: dict[str, Any] = {"staged": engine, "read_version": version}
    if not bins:
        done = nothing_to_compact(metrics, engine, seconds)
        if zorder:
            done["note"] = "no file in the planned partitions"
        elif clustering is not None:
            done["note"] = "every file is in a ZCUBE of the target size already"
        return done
    with_vectors = any(a.get("deletionVector") for b in bins for a in b.adds)
    deleted = _deleted_rows(path, version, storage, files) if with_vectors else {}
    columns = _columns(metadata)

    txn = delta_log.startTransaction(none, d.option(snapshot))
    chosen = {id(a): d.action("add", a) for b in bins for a in b.adds}
    committed = False
    active = d.jvm.org.apache.spark.sql.SparkSession.getActiveSession()
    # the transaction reads its userMetadata (the job's mark) from the active session
    d.jvm.org.apache.spark.sql.SparkSession.setActiveSession(d.jsession)
    try:
        writing = time.perf_counter()
        for b in bins:
            frame = delta_log.createDataFrame(
                snapshot, d.seq([chosen[id(a)] for a in b.adds]), False, d.option("Optimize")
            )
            # the rows' ids and commit versions written to the materialized columns (a
            # table without row tracking: the frame as it was)
            frame = d.delta.RowTracking.preserveRowTrackingColumns(frame, snapshot)
            if zorder or clustering is not None:
                # OptimizeExecutor.runOptimizeBinJob's multi-dimensional clustering
                size = sum(int(a["size"]) for a in b.adds)
                approx = max(1, size // int(plan["target_file_size_bytes"]))
                # a Scala object's companion of a trait: no static forwarder, its MODULE$
                curves = getattr(getattr(d.delta.skipping, "MultiDimClustering$"), "MODULE$")
                by, curve = (
                    (clustering.columns, clustering.strategy.curve())
                    if clustering is not None
                    else (zorder, "zorder")
                )
                frame = curves.cluster(frame, approx, d.seq(by), curve)
            else:
                frame = frame.coalesce(1)
            written = txn.writeFiles(frame, none, True, d.seq([]))
            out = [written.apply(i) for i in range(written.size())]
            kinds = [json.loads(w.json()) for w in out]
            if any("add" not in w for w in kinds):  # OPTIMIZE refuses it too
                raise RuntimeError(f"Delta's write gave other actions than adds: {kinds}")
            if clustering is not None:  # the bin's new ZCUBE id, the clustering provider
                info = clustering.strategy.initNewBin()
                out = [clustering.strategy.tagAddFile(w, info) for w in out]
            b.written = [json.loads(w.json())["add"] for w in out]
        seconds["write"] = time.perf_counter() - writing
        if corrupt:
            files.drop_a_row(files.of(bins[0].written[0]))
        checking = time.perf_counter()
        parts: dict[Any, tuple[list[ParquetInput], list[ParquetInput]]] = {}
        for b in bins:
            ins, outs = parts.setdefault(b.key, ([], []))
            for a in b.adds:
                location = files.of(a)
                ins.append(
                    ParquetInput(
                        location,
                        deleted.get(location, ()),
                        a.get("baseRowId"),
                        a.get("defaultRowCommitVersion"),
                        int(a["size"]),
                    )
                )
            outs.extend(ParquetInput(files.of(w), size=int(w["size"])) for w in b.written)
        wrong, rows, checksum = check(parts, columns, files.fs, tracking)
        seconds["validate"] = time.perf_counter() - checking
        record_check(metrics, wrong, rows, checksum, len(parts), seconds["validate"])
        now = int(time.time() * 1000)
        actions = [chosen[id(a)].removeWithTimestamp(now, False) for b in bins for a in b.adds]
        actions += [d.action("add", {**w, "dataChange": False}) for b in bins for w in b.written]
        txn.trackFilesRead(d.seq(list(chosen.values())))
        _register_metrics(d, txn, bins)
        predicate = []
        named = _rewritten_partitions(plan)
        if named:
            where = partition_predicate(named)
            predicate = [d.jvm.org.apache.spark.sql.functions.expr(where).expr()]
        cluster_by = d.option(d.seq(clustering.columns)) if clustering is not None else none
        operation = getattr(d.delta, "DeltaOperations$Optimize")(
            d.seq(predicate), d.seq(zorder), False, cluster_by, False
        )
        # the commit's `delta.rowTracking.preserved` tag, on a table with row tracking
        # (private[delta]: no static forwarder, its object's MODULE$)
        row_tracking = getattr(getattr(d.delta, "RowTracking$"), "MODULE$")
        tags = row_tracking.addPreservedRowTrackingTagIfNotSet(snapshot, d.map({}))
        before_commit()
        committing = time.perf_counter()
        committed = True  # from here on, the commit may have landed
        try:
            txn.commit(d.seq(actions), operation, tags)
        except Exception as exc:
            conflict = conflict_of(exc)
            if conflict is not None:
                said = next((ln for ln in str(exc).splitlines() if conflict in ln), conflict)
                raise Conflict(said.strip()[:500]) from exc
            raise
        seconds["commit"] = time.perf_counter() - committing
    except BaseException:
        if not committed or not _landed(path, storage, session):
            files.remove([files.of(w) for b in bins for w in b.written])
        raise
    finally:
        if active.isDefined():
            d.jvm.org.apache.spark.sql.SparkSession.setActiveSession(active.get())
        else:
            d.jvm.org.apache.spark.sql.SparkSession.clearActiveSession()
    engine["seconds"] = rounded(seconds)
    mark = _mark(session)
    commit = DeltaTimeline(path, storage).find_job_commits(int(mark[TASK_KEY]), version)
    assert commit is not None  # the transaction returned: it committed
    metrics.update(
        committed_version=int(commit.id),
        operation=commit.operation,
        files_removed=sum(len(b.adds) for b in bins),
        files_added=sum(len(b.written) for b in bins),
        bytes_removed=sum(int(a["size"]) for b in bins for a in b.adds),
        bytes_added=sum(int(w["size"]) for b in bins for w in b.written),
    )
    return metrics


def _register_metrics(d: _Delta, txn: Any, bins: list[Bin]) -> None:
    """The commit's operationMetrics as Delta's OPTIMIZE records them (`optimize_metrics`):
    SQL metrics registered on the transaction, which keeps those its operation names."""
    values = optimize_metrics(
        [w for b in bins for w in b.written], [a for b in bins for a in b.adds]
    )
    create = d.jvm.org.apache.spark.sql.execution.metric.SQLMetrics.createMetric
    context = d.jsession.sparkContext()
    registered = {}
    for name, value in values.items():
        metric = create(context, name)
        metric.set(value)
        registered[name] = metric
    txn.registerSQLMetrics(d.jsession, d.map(registered))


def _row_tracking(d: _Delta, snapshot: Any, config: Mapping[str, str]) -> RowTracking | None:
    """A table with row tracking enabled (Delta's `RowTracking.isEnabled`): its materialized
    columns' names; else None."""
    if not d.delta.RowTracking.isEnabled(snapshot.protocol(), snapshot.metadata()):
        return None
    row_id, version = config.get(MATERIALIZED_ROW_ID), config.get(MATERIALIZED_COMMIT_VERSION)
    if not row_id or not version:
        raise Ineligible("row tracking without its materialized columns' names")
    return RowTracking(row_id, version)


def _rewritten_partitions(plan: Mapping[str, Any]) -> list[dict[str, Any]] | None:
    """The partitions the plan's bin-pack and purge rewrite (the commit's predicate, as
    DESCRIBE HISTORY shows it), or None: the whole table."""
    purge = plan.get("purge_partitions")
    packed = plan.get("partitions") if plan.get("zorder") or plan.get("optimize", True) else []
    if purge == [] or (packed is not None and not packed and purge is None):
        return None
    named = list(packed or []) + [p for p in purge or [] if p not in (packed or [])]
    return named or None


class _Clustering:
    """A clustered table's OPTIMIZE as Delta's own `ClusteringStrategy` (liquid clustering)
    does it: the files (`prepareFilesPerPartition`: those not in a ZCUBE of the target
    size yet, by ZCUBE), packed in that order into bins of at most `maxBinSize` (each bin a
    new ZCUBE, kept whatever its files), the curve (Hilbert; Z-order on one column), and
    the written files' tags (`tagAddFile`: the bin's ZCUBE id, the clustering provider)."""

    def __init__(self, d: _Delta, snapshot: Any) -> None:
        info = d.delta.skipping.clustering.ClusteringColumnInfo
        names = info.extractLogicalNames(snapshot)
        self.columns = [str(names.apply(i)) for i in range(names.size())]
        none = d.option(None)
        context = d.delta.commands.DeltaOptimizeContext(none, none, none, none, False)
        self.strategy = d.delta.commands.ClusteringStrategy(
            d.jsession, d.seq(self.columns), context
        )

    def bins(self, d: _Delta, adds: list[dict[str, Any]]) -> list[Bin]:
        """`OptimizeExecutor.groupFilesIntoBins` on an unpartitioned table."""
        chosen = self.strategy.prepareFilesPerPartition(d.seq([d.action("add", a) for a in adds]))
        limit = int(self.strategy.maxBinSize())
        bins: list[Bin] = []
        current: list[dict[str, Any]] = []
        size = 0
        for i in range(chosen.size()):
            add = json.loads(chosen.apply(i).json())["add"]
            if current and size + int(add["size"]) > limit:
                bins.append(Bin((), current))
                current, size = [], 0
            current.append(add)
            size += int(add["size"])
        return [*bins, Bin((), current)] if current else bins


def _zorder_refused(
    session: SparkSession, snapshot: Any, metadata: Mapping[str, Any], zorder: list[str]
) -> str | None:
    """Why Delta's ZORDER BY would refuse these columns (`validateZorderByColumns`: a
    partition column, not a column, no statistics collected on it), else None: OPTIMIZE
    then runs the job and fails with Delta's own error."""
    parts = set(metadata.get("partitionColumns") or [])
    names = {f["name"] for f in json.loads(metadata["schemaString"])["fields"]}
    check = session.conf.get(ZORDER_STATS_CHECK, "true") or "true"
    with_stats = set(snapshot.statCollectionLogicalSchema().fieldNames())
    for c in zorder:
        if c in parts or c not in names:
            return f"Z-order column {c!r} is a partition column or no top-level column"
        if check.lower() == "true" and c not in with_stats:
            return f"Z-order column {c!r} has no statistics collected"
    return None


def _mark(session: SparkSession) -> dict[str, str]:
    from lakewarden.formats.delta.jobs import USER_METADATA

    return dict(json.loads(session.conf.get(USER_METADATA) or "{}"))


def _landed(path: str, storage: Mapping[str, str] | None, session: SparkSession) -> bool:
    """Whether the commit landed after all (a failure after Delta wrote the version, e.g.
    in a post-commit hook): then the table references the written files. Unknown: as if
    it landed (a file left behind is VACUUM's, a deleted live file is a loss)."""
    try:
        mark = _mark(session)
        found = DeltaTimeline(path, storage).find_job_commits(int(mark[TASK_KEY]))
    except Exception:
        return True
    return found is not None and found.summary.get(ATTEMPT_KEY) == mark.get(ATTEMPT_KEY)
