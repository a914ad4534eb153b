"""Delta compactions the arrow path refuses, rewritten by Spark and checked before they
commit (`formats.delta.staged_rewrite`, issue 30 goal 5).

The check's power (`staged_rewrite.check`, DuckDB over the Parquet files, deletion vectors
applied) is shown without a JVM: issue 30's mutations of a rewrite, each caught, and on a
table with row tracking those and a rewrite that renumbers rows or drops their ids. The rest
runs in the shared Delta-family writer's JVM (`spark_writers`, the `staged` step): a table
with deletion vectors and column mapping (a renamed column, a struct, a timestamp)
compacted and read back by delta-rs and DuckDB's Delta extension; a corrupted rewrite
refused with nothing committed and its files deleted; another writer's DELETE of an input
between the write and the commit failing Delta's conflict check; a Z-order (Delta's curve,
its history's `zOrderBy`) checked the same way (a corrupted one: `test_delta_kinds.py`); a
liquid clustering (Delta's `ClusteringStrategy`), a corrupted one never seen by a reader;
a table with row tracking, its rows' ids and commit versions kept (Spark's `_metadata`)."""

from __future__ import annotations

import json
import os
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from deltalake import DeltaTable
from duckdb_delta import digest as duckdb_digest
from helpers import read_throughout
from pyarrow import fs as pafs
from spark_writer import SparkWriters

from lakewarden.formats import warehouse
from lakewarden.formats.base import JobMarker, marker_of
from lakewarden.formats.delta import staged_rewrite
from lakewarden.formats.delta.staged_rewrite import (
    Column,
    ParquetInput,
    RowTracking,
    check,
    sums,
)
from lakewarden.formats.delta.timeline import DeltaTimeline
from lakewarden.formats.delta.validation import digest as delta_rs_digest
from lakewarden.formats.digest import Digest
from lakewarden.health.files_per_lookup import files_per_lookup
from lakewarden.metadata import DataFile
from lakewarden.spark.local_hdfs import LocalHdfs

COLUMNS = [Column("col-id"), Column("col-v"), Column("col-w"), Column("col-ts", timestamp=True)]


def _rows(start: int, n: int = 10) -> pa.Table:
    """Rows as a column-mapped file names them: `col-w` NULL on odd ids."""
    ids = list(range(start, start + n))
    return pa.table(
        {
            "col-id": pa.array(ids, pa.int64()),
            "col-v": [f"v{i}" for i in ids],
            "col-w": [None if i % 2 else f"w{i}" for i in ids],
            "col-ts": pa.array([i * 1_000_000 for i in ids], pa.timestamp("us", "UTC")),
        }
    )


def _write(path: Path, table: pa.Table) -> str:
    pq.write_table(table, path)
    return str(path)


def _set(table: pa.Table, column: str, values: list[Any]) -> pa.Table:
    at = table.schema.get_field_index(column)
    return table.set_column(at, table.schema.field(at), pa.array(values, table[column].type))


def _value_moved(t: pa.Table) -> pa.Table:
    v = t["col-v"].to_pylist()
    return _set(t, "col-v", [v[1], v[0], *v[2:]])


def _null_moved(t: pa.Table) -> pa.Table:
    v, w = t["col-v"].to_pylist(), t["col-w"].to_pylist()
    assert w[1] is None
    v[1], w[1] = None, v[1]
    return _set(_set(t, "col-v", v), "col-w", w)


# Issue 30's mutations of a rewrite: each turns the correct outputs of partitions d1 (three
# inputs, the second with a deletion vector hiding rows 0 and 5) and d2 (two inputs) into
# what a broken rewrite writes. d1's correct output holds the inputs' live rows.
MUTATIONS: dict[str, Callable[[dict[str, list[pa.Table]]], dict[str, list[pa.Table]]]] = {
    "a file dropped": lambda o: {**o, "d1": [o["d1"][0].slice(0, 10)]},
    "a file doubled": lambda o: {**o, "d1": [o["d1"][0], o["d1"][0].slice(0, 10)]},
    "a row dropped in a partition with deletes": lambda o: {**o, "d1": [o["d1"][0].slice(1)]},
    "a deleted row written back": lambda o: {**o, "d1": [o["d1"][0], _rows(100, 1)]},
    "a value changed": lambda o: {
        **o,
        "d1": [_set(o["d1"][0], "col-v", ["changed", *o["d1"][0]["col-v"].to_pylist()[1:]])],
    },
    "a value moved between rows": lambda o: {**o, "d1": [_value_moved(o["d1"][0])]},
    "a NULL moved to its neighbour column": lambda o: {**o, "d1": [_null_moved(o["d1"][0])]},
    "a partition's rows moved to another": lambda o: {"d1": [], "d2": [*o["d2"], *o["d1"]]},
}


TRACKING = RowTracking("_row-id-col-1", "_row-commit-version-col-1")
# A table with row tracking: each input's add action's (baseRowId, defaultRowCommitVersion)
LINEAGE = {("d1", 0): (0, 1), ("d1", 1): (10, 2), ("d1", 2): (20, 3), ("d2", 0): (30, 4)}
LINEAGE[("d2", 1)] = (40, 5)


def _updated(t: pa.Table) -> pa.Table:
    """A file as an UPDATE writes it: its rows' ids materialized (even rows; NULL: the
    file's baseRowId + position), their commit versions not (the file's default)."""
    ids = [7000 + i if i % 2 == 0 else None for i in range(t.num_rows)]
    return t.append_column(TRACKING.row_id, pa.array(ids, pa.int64())).append_column(
        TRACKING.row_commit_version, pa.nulls(t.num_rows, pa.int64())
    )


def _materialized(t: pa.Table, base: int, version: int) -> pa.Table:
    """`t` with every row's id and commit version materialized, as a rewrite writes them."""
    n = t.num_rows
    ids = t[TRACKING.row_id].to_pylist() if TRACKING.row_id in t.column_names else [None] * n
    versions = [None] * n
    if TRACKING.row_commit_version in t.column_names:
        versions = t[TRACKING.row_commit_version].to_pylist()
    t = t.drop([c for c in (TRACKING.row_id, TRACKING.row_commit_version) if c in t.column_names])
    return t.append_column(
        TRACKING.row_id, pa.array([base + i if m is None else m for i, m in enumerate(ids)])
    ).append_column(
        TRACKING.row_commit_version, pa.array([version if v is None else v for v in versions])
    )


def _partitions(tmp: Path, change: Callable[[Any], Any], tracking: bool = False) -> dict[Any, Any]:
    inputs = {
        "d1": [_rows(0), _rows(100), _rows(200)],
        "d2": [_rows(1000), _updated(_rows(1010)) if tracking else _rows(1010)],
    }
    deleted = {("d1", 1): (0, 5)}  # a deletion vector on d1's second file
    lineage = LINEAGE if tracking else {}

    def written(day: str, n: int, t: pa.Table) -> pa.Table:  # its rows in a rewrite's file
        t = _materialized(t, *lineage[(day, n)]) if tracking else t
        return t.filter(pa.array([i not in deleted.get((day, n), ()) for i in range(len(t))]))

    live = {
        day: pa.concat_tables(written(day, n, t) for n, t in enumerate(tables))
        for day, tables in inputs.items()
    }
    outputs = change({day: [t] for day, t in live.items()})
    parts: dict[Any, Any] = {}
    for day, tables in inputs.items():
        ins = [
            ParquetInput(
                _write(tmp / f"{day}-in{n}.parquet", t),
                deleted.get((day, n), ()),
                *lineage.get((day, n), (None, None)),
            )
            for n, t in enumerate(tables)
        ]
        outs = [
            ParquetInput(_write(tmp / f"{day}-out{n}.parquet", t))
            for n, t in enumerate(outputs[day])
        ]
        parts[(("day", day),)] = (ins, outs)
    return parts


def test_a_correct_rewrite_passes_with_deletion_vectors_applied(tmp_path: Path) -> None:
    wrong, rows, _ = check(_partitions(tmp_path, lambda o: o), COLUMNS)
    assert wrong == [] and rows == 28 + 20


def test_an_output_without_a_column_added_later_reads_it_as_null(tmp_path: Path) -> None:
    """A file written before a column was added lacks it: Delta reads NULLs there."""
    old = _write(tmp_path / "old.parquet", _rows(0).drop(["col-w"]))
    new = _write(tmp_path / "new.parquet", _set(_rows(0), "col-w", [None] * 10))
    key = (("day", "d1"),)
    assert check({key: ([ParquetInput(old)], [ParquetInput(new)])}, COLUMNS)[0] == []


@pytest.mark.parametrize("mutation", sorted(MUTATIONS))
def test_every_mutation_is_caught(tmp_path: Path, mutation: str) -> None:
    wrong, _, _ = check(_partitions(tmp_path, MUTATIONS[mutation]), COLUMNS)
    assert wrong and all(w.startswith("partition day=d") for w in wrong), wrong


def _row_id_set(t: pa.Table, at: int, value: int | None) -> pa.Table:
    ids = t[TRACKING.row_id].to_pylist()
    ids[at] = value
    return _set(t, TRACKING.row_id, ids)


def _renumbered(t: pa.Table) -> pa.Table:
    ids = t[TRACKING.row_id].to_pylist()
    return _set(t, TRACKING.row_id, [ids[1], ids[0], *ids[2:]])


def _version_dropped(t: pa.Table) -> pa.Table:
    versions = t[TRACKING.row_commit_version].to_pylist()
    return _set(t, TRACKING.row_commit_version, [None, *versions[1:]])


# A table with row tracking: what a rewrite that loses the rows' ids writes (same values)
LINEAGE_MUTATIONS: dict[str, Callable[[dict[str, list[pa.Table]]], dict[str, list[pa.Table]]]] = {
    "rows renumbered": lambda o: {**o, "d1": [_renumbered(o["d1"][0])]},
    "a materialized row id dropped (NULL)": lambda o: {
        **o,
        "d1": [_row_id_set(o["d1"][0], 0, None)],
    },
    "an updated row's id replaced by its position's": lambda o: {
        **o,
        "d2": [_row_id_set(o["d2"][0], 10, 40)],  # d2's second file's first row: 7000
    },
    "a row's commit version dropped (NULL)": lambda o: {
        **o,
        "d1": [_version_dropped(o["d1"][0])],
    },
}
# The check's two ways of reading: local files in one scan, pyarrow's file system's by file
READS = {"local": None, "file system": pafs.LocalFileSystem()}


def test_a_file_systems_files_hash_alike_in_one_chunk_or_one_by_one(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Read through pyarrow's file system, files are hashed in chunks of up to CHUNK_BYTES
    (a file lacking a column the others have reads it as NULL): one chunk, a chunk per
    file and DuckDB's own scan of the local files give the same sums."""
    paths = [
        _write(tmp_path / "old.parquet", _rows(0).drop(["col-w"])),
        _write(tmp_path / "new.parquet", _rows(100)),
        _write(tmp_path / "more.parquet", _rows(200)),
    ]
    deleted: list[tuple[int, ...]] = [(1, 4), (0,), ()]
    files = [  # with their sizes: read at once
        ParquetInput(p, d, size=os.path.getsize(p)) for p, d in zip(paths, deleted, strict=True)
    ]
    local = sums(files, COLUMNS)
    assert local[0] == 30 - 3
    assert sums(files, COLUMNS, pafs.LocalFileSystem()) == local
    monkeypatch.setattr(staged_rewrite, "CHUNK_BYTES", 1)
    assert sums(files, COLUMNS, pafs.LocalFileSystem()) == local


@pytest.mark.parametrize("reads", sorted(READS))
def test_row_tracking_a_correct_rewrite_passes_its_ids_and_versions_from_the_adds(
    tmp_path: Path, reads: str
) -> None:
    parts = _partitions(tmp_path, lambda o: o, tracking=True)
    wrong, rows, _ = check(parts, COLUMNS, READS[reads], TRACKING)
    assert wrong == [] and rows == 28 + 20


@pytest.mark.parametrize("reads", sorted(READS))
@pytest.mark.parametrize("mutation", sorted({**MUTATIONS, **LINEAGE_MUTATIONS}))
def test_row_tracking_every_mutation_is_caught(tmp_path: Path, mutation: str, reads: str) -> None:
    change = {**MUTATIONS, **LINEAGE_MUTATIONS}[mutation]
    wrong, _, _ = check(_partitions(tmp_path, change, True), COLUMNS, READS[reads], TRACKING)
    assert wrong and all(w.startswith("partition day=d") for w in wrong), wrong


def _create(spark_writers: SparkWriters, path: str, row_tracking: bool = False) -> None:
    """d1: four inserts of ten rows (Spark writes each as files of its own), a DELETE's
    deletion vectors on them, a column renamed (column mapping); d2: one insert. With
    `row_tracking`: enabled, and a MERGE's update of a row of d1 (its id materialized in
    the MERGE's file) before the DELETE."""
    table = f"delta.`{path}`"
    props = (
        "'delta.enableDeletionVectors' = true, 'delta.columnMapping.mode' = 'name', "
        "'delta.minReaderVersion' = '3', 'delta.minWriterVersion' = '7'"
    ) + (", 'delta.enableRowTracking' = true" if row_tracking else "")
    update = (  # UPDATE … WHERE raises Delta's scala.MatchError on this table; MERGE does not
        f"MERGE INTO {table} t USING (SELECT 12 AS id) u ON t.day = 'd1' AND t.id = u.id "
        "WHEN MATCHED THEN UPDATE SET x = 'updated'"
    )
    rows = (
        "SELECT id, CAST(id AS STRING), TIMESTAMP '2026-01-01 00:00:00' + make_interval(0, 0, "
        "0, 0, 0, 0, id), named_struct('a', CAST(id AS INT), 'b', IF(id % 2 = 0, 'q', NULL))"
    )
    steps: list[dict[str, Any]] = [
        {
            "sql": f"CREATE TABLE {table} (id BIGINT, x STRING, ts TIMESTAMP, "
            f"s STRUCT<a: INT, b: STRING>, day STRING) USING delta PARTITIONED BY (day) "
            f"TBLPROPERTIES ({props})"
        },
        *(
            {"sql": f"INSERT INTO {table} {rows}, 'd1' FROM range({10 * i}, {10 * i + 10})"}
            for i in range(4)
        ),
        {"sql": f"INSERT INTO {table} {rows}, 'd2' FROM range(100, 110)"},
        *([{"sql": update}] if row_tracking else []),
        {"sql": f"DELETE FROM {table} WHERE day = 'd1' AND id % 7 = 0"},
        {"sql": f"ALTER TABLE {table} RENAME COLUMN x TO label"},
    ]
    spark_writers.run("delta", steps)


PLAN = {"target_file_size_bytes": 1 << 20, "partitions": [{"day": "d1"}]}
# Delta 3.3.3's DeltaOperationMetrics.OPTIMIZE: the metrics its OPTIMIZE commits record
OPTIMIZE_METRICS = {
    "numAddedFiles",
    "numRemovedFiles",
    "numAddedBytes",
    "numRemovedBytes",
    "minFileSize",
    "p25FileSize",
    "p50FileSize",
    "p75FileSize",
    "maxFileSize",
    "numDeletionVectorsRemoved",
}


def _digest(path: str) -> tuple[Digest, Digest]:
    """The newest version's rows as delta-rs and DuckDB's Delta extension read them, each
    compared with itself only (on the struct column their hashes differ: DuckDB reads
    delta-rs' string views inside a struct otherwise)."""
    version = DeltaTable(path).version()
    return delta_rs_digest(path, version), duckdb_digest(path, version)


def _on_disk(path: str) -> set[str]:
    return {os.path.join(d, f) for d, _, files in os.walk(path) for f in files}


@pytest.mark.spark
def test_deletion_vectors_and_column_mapping_are_compacted_checked_then_committed(
    tmp_path: Path, spark_writers: SparkWriters
) -> None:
    path = str(tmp_path / "t")
    _create(spark_writers, path)
    version = DeltaTable(path).version()
    before = _digest(path)
    assert before[0].rows == before[1].rows == 50 - 6  # ids 0, 7, .., 35 deleted
    [done] = spark_writers.run("delta", [{"staged": {"path": path, "plan": PLAN, "task_id": 7}}])
    assert "raised" not in done, done
    assert done["validation"]["status"] == "passed", done
    assert done["validation"]["when"] == "before the commit"
    assert done["validation"]["rows"] == 34 and done["read_version"] == version
    assert done["committed_version"] == version + 1 and done["operation"] == "OPTIMIZE"
    # delta-rs and DuckDB's Delta extension read the same rows before and after
    assert _digest(path) == before
    actions = DeltaTimeline(path).read_actions(version + 1)
    removed = [a["remove"] for a in actions if "remove" in a]
    added = [a["add"] for a in actions if "add" in a]
    assert len(removed) == done["files_removed"] >= 4 and len(added) == 1
    assert all(not a["dataChange"] for a in [*removed, *added])
    assert any(r.get("deletionVector") for r in removed)  # the removes keep their vectors
    assert not added[0].get("deletionVector") and json.loads(added[0]["stats"])["numRecords"] == 34
    # DESCRIBE HISTORY's metrics, as Delta's own OPTIMIZE records them (DeltaOperationMetrics)
    (info,) = [a["commitInfo"] for a in actions if "commitInfo" in a]
    assert set(info["operationMetrics"]) == OPTIMIZE_METRICS
    assert {k: int(v) for k, v in info["operationMetrics"].items()} == {
        **{k: int(added[0]["size"]) for k in OPTIMIZE_METRICS if k.endswith("FileSize")},
        "numAddedFiles": 1,
        "numRemovedFiles": len(removed),
        "numAddedBytes": int(added[0]["size"]),
        "numRemovedBytes": sum(int(r["size"]) for r in removed),
        "numDeletionVectorsRemoved": sum(1 for r in removed if r.get("deletionVector")),
    }
    commit = DeltaTimeline(path).find_job_commits(7)
    assert commit is not None and marker_of(commit.summary) == JobMarker(7, 1)
    # d1's deletion vectors are gone with its files; d2's file is as it was
    vectors = pa.table(DeltaTable(path).deletion_vectors()).to_pylist()
    assert vectors == []


@pytest.mark.spark
def test_a_corrupted_rewrite_commits_nothing_and_leaves_no_file(
    tmp_path: Path, spark_writers: SparkWriters
) -> None:
    path = str(tmp_path / "t")
    _create(spark_writers, path)
    version, files, before = DeltaTable(path).version(), _on_disk(path), _digest(path)
    step = {"path": path, "plan": PLAN, "task_id": 8, "corrupt": True}
    [done] = spark_writers.run("delta", [{"staged": step}])
    assert done["raised"] == "RewriteMismatch", done
    assert "nothing was committed" in done["error"] and "day=d1" in done["error"]
    assert done["metrics"]["validation"]["status"] == "failed"
    assert DeltaTable(path).version() == version
    assert DeltaTimeline(path).find_job_commits(8) is None
    assert _on_disk(path) == files  # the written files (and Hadoop's .crc files) deleted
    assert _digest(path) == before


def _lineage(spark_writers: SparkWriters, path: str) -> set[tuple[int, int, int]]:
    """Each row's (id, row id, row commit version) as Spark reads them (`_metadata`)."""
    sql = f"SELECT id, _metadata.row_id, _metadata.row_commit_version FROM delta.`{path}`"
    [rows] = spark_writers.run("delta", [{"sql": sql}])
    return {(r["id"], r["row_id"], r["row_commit_version"]) for r in rows}


@pytest.mark.spark
def test_row_tracking_is_checked_before_the_commit_and_the_rows_keep_their_ids(
    tmp_path: Path, spark_writers: SparkWriters
) -> None:
    """A table with row tracking (and deletion vectors, a MERGE's materialized row id):
    a corrupted rewrite commits nothing; a correct one is checked over the rows' ids and
    commit versions too and commits as OPTIMIZE (tagged as keeping row tracking), each row
    keeping its `_metadata.row_id` and `row_commit_version` as Spark reads them; and so
    does a Z-order of it after."""
    path = str(tmp_path / "t")
    _create(spark_writers, path, row_tracking=True)
    version, files, before = DeltaTable(path).version(), _on_disk(path), _digest(path)
    lineage = _lineage(spark_writers, path)
    assert len(lineage) == before[0].rows == 50 - 6
    assert len({row_id for _, row_id, _ in lineage}) == len(lineage)

    step = {"path": path, "plan": PLAN, "task_id": 14, "corrupt": True}
    [bad] = spark_writers.run("delta", [{"staged": step}])
    assert bad["raised"] == "RewriteMismatch", bad
    assert DeltaTable(path).version() == version and _on_disk(path) == files

    [done] = spark_writers.run("delta", [{"staged": {"path": path, "plan": PLAN, "task_id": 15}}])
    assert "raised" not in done, done
    assert done["validation"]["when"] == "before the commit"
    assert done["validation"]["status"] == "passed" and done["validation"]["rows"] == 34
    assert done["staged"]["row_tracking"]
    assert done["committed_version"] == version + 1 and done["operation"] == "OPTIMIZE"
    assert _lineage(spark_writers, path) == lineage
    assert _digest(path) == before
    actions = DeltaTimeline(path).read_actions(version + 1)
    [info] = [a["commitInfo"] for a in actions if "commitInfo" in a]
    assert info["tags"]["delta.rowTracking.preserved"] == "true"
    added = [a["add"] for a in actions if "add" in a]
    assert len(added) == 1 and added[0]["baseRowId"] > max(r for _, r, _ in lineage)

    # A Z-order of the same partition (Delta's curve, after the ids are materialized): the
    # rows keep their ids and commit versions too
    zorder = {**PLAN, "zorder": ["id", "label"]}
    [done] = spark_writers.run("delta", [{"staged": {"path": path, "plan": zorder, "task_id": 16}}])
    assert "raised" not in done, done
    assert done["validation"]["status"] == "passed" and done["validation"]["rows"] == 34
    assert done["committed_version"] == version + 2 and done["staged"]["row_tracking"]
    assert _lineage(spark_writers, path) == lineage
    assert _digest(path) == before


def _on_hdfs(path: str) -> set[str]:
    fs, root = warehouse.filesystem(path)
    found = fs.get_file_info(pafs.FileSelector(root, recursive=True))
    return {i.path for i in found if i.type == pafs.FileType.File}


@pytest.mark.spark
def test_a_table_on_hdfs_is_checked_before_its_commit_and_a_corrupted_rewrite_never_lands(
    hdfs: LocalHdfs, spark_writers: SparkWriters
) -> None:
    """The seeds' Delta lake lives on HDFS: Spark rewrites there, hdfs-native and pyarrow
    read the files for DuckDB's check, delta-rs the deletion vectors."""
    path = f"{hdfs.url}/staged-{uuid.uuid4().hex[:8]}/t"
    _create(spark_writers, path)
    version, files = DeltaTable(path).version(), _on_hdfs(path)
    before = delta_rs_digest(path, version)
    assert before.rows == 50 - 6

    step = {"path": path, "plan": PLAN, "task_id": 8, "corrupt": True}
    [bad] = spark_writers.run("delta", [{"staged": step}])
    assert bad["raised"] == "RewriteMismatch", bad
    assert DeltaTable(path).version() == version and _on_hdfs(path) == files

    [done] = spark_writers.run("delta", [{"staged": {"path": path, "plan": PLAN, "task_id": 7}}])
    assert "raised" not in done, done
    assert done["validation"]["when"] == "before the commit"
    assert done["validation"]["status"] == "passed" and done["validation"]["rows"] == 34
    assert done["committed_version"] == version + 1 and done["operation"] == "OPTIMIZE"
    assert delta_rs_digest(path, version + 1) == before
    removed = [a["remove"] for a in DeltaTimeline(path).read_actions(version + 1) if "remove" in a]
    assert any(r.get("deletionVector") for r in removed)  # d1's files with vectors went too


@pytest.mark.spark
def test_a_delete_of_an_input_before_the_commit_is_deltas_conflict(
    tmp_path: Path, spark_writers: SparkWriters
) -> None:
    """Another writer deletes a row of d1 (a deletion vector on one of the inputs) after
    the rewrite wrote its files and before it commits: Delta's conflict checker fails the
    commit, the written files are deleted, and the table holds the writer's delete."""
    path = str(tmp_path / "t")
    _create(spark_writers, path)
    version, files, before = DeltaTable(path).version(), _on_disk(path), _digest(path)
    delete = f"DELETE FROM delta.`{path}` WHERE day = 'd1' AND id = 1"
    step = {"path": path, "plan": PLAN, "task_id": 9, "meanwhile": delete}
    [done] = spark_writers.run("delta", [{"staged": step}])
    assert done["raised"] == "Conflict", done
    assert "ConcurrentDeleteReadException" in done["error"], done["error"]
    assert DeltaTable(path).version() == version + 1  # the DELETE's, not ours
    assert DeltaTimeline(path).find_job_commits(9) is None
    written = {f for f in _on_disk(path) - files if "/_delta_log/" not in f}
    assert all("deletion_vector_" in os.path.basename(f) for f in written), written
    assert _digest(path)[0].rows == before[0].rows - 1


def _create_scattered(spark_writers: SparkWriters, path: str) -> None:
    """d1: four inserts of 25 rows (a file each) whose x and y each span most of 0..99 (every file
    overlaps every other), a DELETE's deletion vectors, y renamed to `why` (column
    mapping); d2: one insert."""
    table = f"delta.`{path}`"
    props = (
        "'delta.enableDeletionVectors' = true, 'delta.columnMapping.mode' = 'name', "
        "'delta.minReaderVersion' = '3', 'delta.minWriterVersion' = '7'"
    )
    rows = "SELECT id, (id * 37) % 100, (id * 53) % 100"
    steps: list[dict[str, Any]] = [
        {
            "sql": f"CREATE TABLE {table} (id BIGINT, x BIGINT, y BIGINT, day STRING) "
            f"USING delta PARTITIONED BY (day) TBLPROPERTIES ({props})"
        },
        *(
            {"sql": f"INSERT INTO {table} {rows}, 'd1' FROM range({25 * i}, {25 * i + 25}, 1, 1)"}
            for i in range(4)
        ),
        {"sql": f"INSERT INTO {table} {rows}, 'd2' FROM range(100, 110)"},
        {"sql": f"DELETE FROM {table} WHERE day = 'd1' AND id % 7 = 0"},
        {"sql": f"ALTER TABLE {table} RENAME COLUMN y TO why"},
    ]
    spark_writers.run("delta", steps)


def _layout(path: str) -> tuple[int, float, float | None]:
    """d1's files, the summed area of their (x, why) boxes, and how many of them a lookup
    on (x, why) opens: their min/max stats as delta-rs reads them from the log (under the
    columns' physical names)."""
    table = DeltaTable(path)
    physical = {
        f["name"]: f["metadata"]["delta.columnMapping.physicalName"]
        for f in json.loads(table.schema().to_json())["fields"]
    }
    adds = pa.table(table.get_add_actions(flatten=True)).to_pylist()
    files = [
        DataFile(
            a["path"],
            a["size_bytes"],
            a["num_records"],
            0,
            (("day", "d1"),),
            {c: (a[f"min.{physical[c]}"], a[f"max.{physical[c]}"]) for c in ("x", "why")},
        )
        for a in adds
        if a["partition.day"] == "d1"
    ]
    area = sum(
        (f.bounds["x"][1] - f.bounds["x"][0]) * (f.bounds["why"][1] - f.bounds["why"][0])
        for f in files
    )
    return len(files), area, files_per_lookup(files, ["x", "why"])


def _zorder_plan(path: str) -> dict[str, Any]:
    """Z-order d1 by (x, why) into files of about a quarter of its bytes (Delta writes
    bytes / target files: four)."""
    adds = pa.table(DeltaTable(path).get_add_actions(flatten=True)).to_pylist()
    d1 = sum(a["size_bytes"] for a in adds if a["partition.day"] == "d1")
    return {
        "target_file_size_bytes": d1 // 4,
        "partitions": [{"day": "d1"}],
        "zorder": ["x", "why"],
    }


@pytest.mark.spark
def test_a_zorder_with_deletion_vectors_is_checked_then_committed_clustered(
    tmp_path: Path, spark_writers: SparkWriters
) -> None:
    """All of d1's files (OPTIMIZE ZORDER BY takes every file of the partition, not only
    small ones) rewritten along Delta's Z-order curve on a renamed column, checked, and
    committed as OPTIMIZE with its zOrderBy; the same rows read by delta-rs and DuckDB, in
    files of smaller (x, why) boxes, fewer of them opened by a lookup."""
    path = str(tmp_path / "t")
    _create_scattered(spark_writers, path)
    version, before = DeltaTable(path).version(), _digest(path)
    inputs, area_before, opened_before = _layout(path)
    assert inputs == 4 and opened_before is not None
    plan = _zorder_plan(path)
    [done] = spark_writers.run("delta", [{"staged": {"path": path, "plan": plan, "task_id": 10}}])
    assert "raised" not in done, done
    assert done["validation"]["status"] == "passed", done
    assert done["validation"]["when"] == "before the commit"
    assert done["validation"]["rows"] == 100 - 15  # ids 0, 7, .., 98 deleted
    assert done["committed_version"] == version + 1 and done["files_removed"] == inputs
    assert _digest(path) == before
    commit = DeltaTimeline(path).find_job_commits(10)
    assert commit is not None and commit.operation == "OPTIMIZE"
    assert json.loads(commit.summary["param.zOrderBy"]) == ["x", "why"]
    assert marker_of(commit.summary) == JobMarker(10, 1)
    # Z-ordered: smaller boxes over (x, why), and a lookup opens fewer files
    outputs, area_after, opened_after = _layout(path)
    assert outputs == done["files_added"] >= 2
    assert area_after < area_before / 2, (area_before, area_after)
    assert opened_after is not None and opened_after < opened_before, (opened_before, opened_after)


@pytest.mark.spark
def test_a_clustering_is_checked_before_its_commit_a_corrupted_one_never_seen(
    tmp_path: Path, spark_writers: SparkWriters
) -> None:
    """A table with liquid clustering and deletion vectors: a clustering whose written
    file loses a row commits nothing (a reader polling delta-rs all along sees one version
    and its rows; the written files are deleted); a correct one commits as OPTIMIZE with
    its clusterBy, its files tagged with one new ZCUBE, the same rows read by delta-rs and
    DuckDB."""
    path = str(tmp_path / "t")
    table = f"delta.`{path}`"
    rows = "SELECT id, (id * 37) % 100, (id * 53) % 100"
    spark_writers.run(
        "delta",
        [
            {
                "sql": f"CREATE TABLE {table} (id BIGINT, x BIGINT, y BIGINT) USING delta "
                "CLUSTER BY (x, y) TBLPROPERTIES ('delta.enableDeletionVectors' = true)"
            },
            *(
                {"sql": f"INSERT INTO {table} {rows} FROM range({25 * i}, {25 * i + 25}, 1, 1)"}
                for i in range(4)
            ),
            {"sql": f"DELETE FROM {table} WHERE id % 7 = 0"},
        ],
    )
    version, files, before = DeltaTable(path).version(), _on_disk(path), _digest(path)
    plan = {"clustering": ["x", "y"], "target_file_size_bytes": 1 << 20, "partitions": None}

    def newest() -> tuple[int, int]:  # delta-rs' scan of it, deletion vectors applied
        at = DeltaTable(path).version()
        return at, delta_rs_digest(path, at).rows

    with read_throughout(newest, 0.05) as seen:
        step = {"path": path, "plan": plan, "task_id": 12, "corrupt": True}
        [corrupted] = spark_writers.run("delta", [{"staged": step}])
    assert corrupted["raised"] == "RewriteMismatch", corrupted
    assert len(seen) >= 3 and set(seen) == {(version, before[0].rows)}, set(seen)
    assert DeltaTable(path).version() == version and _on_disk(path) == files

    [done] = spark_writers.run("delta", [{"staged": {"path": path, "plan": plan, "task_id": 13}}])
    assert "raised" not in done, done
    assert done["validation"]["when"] == "before the commit"
    assert done["validation"]["rows"] == before[0].rows == 100 - 15
    assert done["files_removed"] == 4 and done["committed_version"] == version + 1
    assert _digest(path) == before
    commit = DeltaTimeline(path).find_job_commits(13)
    assert commit is not None and json.loads(commit.summary["param.clusterBy"]) == ["x", "y"]
    added = [a["add"] for a in DeltaTimeline(path).read_actions(version + 1) if "add" in a]
    assert len({a["tags"]["ZCUBE_ID"] for a in added}) == 1
    assert all(a["clusteringProvider"] == "liquid" for a in added)
