"""Rewrite validation (lakewarden.spark.validation) on real Spark + Iceberg: a compaction
records per-partition row counts and checksums on its run; with validation off it says it
skipped; a rewrite corrupted on purpose (the test-only failpoint) fails its task with a
critical alert and is never published: it committed to a staging branch only
(lakewarden.spark.staging), so main never held it, and a reader polling main throughout
never sees a row missing or extra. A validated rewrite is published by moving main to it,
or, when a writer committed meanwhile, re-applied on top of the writer's commit; a writer's
conflicting commit leaves it unpublished. Checked with pyiceberg."""

from __future__ import annotations

import shutil
import threading
from collections import Counter
from datetime import UTC, date, datetime, timedelta
from typing import TYPE_CHECKING, Any

import pyarrow as pa
import pytest
from helpers import SCHEMA, append_batches, current, make_table, manage, run_one, task_of
from pyiceberg.table import Table
from pyiceberg.transforms import BucketTransform, DayTransform
from sqlalchemy import select, update
from upserts import create_keyed_table, write_equality_upserts

from lakewarden.alerts.rules import evaluate_task_rules
from lakewarden.catalogs.catalog import TableRef
from lakewarden.db.models import Alert, JobRun, ManagedTable, Task
from lakewarden.db.session import transaction
from lakewarden.formats.iceberg.markers import PUBLISHED_FROM_KEY, is_stage
from lakewarden.health.explain import explain_validation
from lakewarden.policy.model import ValidationPolicy
from lakewarden.runtime import Runtime
from lakewarden.spark import actions, arrow_rewrite, staging
from lakewarden.spark.actions import load_java_table
from lakewarden.spark.binpack import Observed, ObservedGroup
from lakewarden.spark.commits import TASK_KEY
from lakewarden.spark.java import each as each_of
from lakewarden.spark.validation import (
    Span,
    checksum_aggregates,
    chosen_columns,
    compare_spans,
    observed_inputs,
    span_files,
)
from lakewarden.states import TaskState
from lakewarden.tasks import repo
from services.scheduler.main import Scheduler
from services.worker.main import Worker

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

pytestmark = pytest.mark.spark

POLICY = {"compaction": {"min_small_files": 5, "min_input_files": 5, "max_attempts": 3}}


def _rows(table: Table) -> Counter[tuple[Any, ...]]:
    return Counter(tuple(r.values()) for r in table.refresh().scan().to_arrow().to_pylist())


def _run(rt: Runtime, task_id: int) -> JobRun:
    with transaction(rt.engine) as s:
        (run,) = s.scalars(select(JobRun).where(JobRun.task_id == task_id)).all()
        s.expunge(run)
        return run


def _compact(scheduler: Scheduler, rt: Runtime, task_id: int) -> str:
    assert Worker(rt).run_once()
    return run_one(scheduler)


def _open_alerts(rt: Runtime) -> list[tuple[str, str, str]]:
    with transaction(rt.engine) as s:
        evaluate_task_rules(s, rt.settings, datetime.now(UTC))
        return [
            (a.rule, a.key, a.severity)
            for a in s.execute(
                select(Alert.rule, Alert.key, Alert.severity).where(Alert.state != "resolved")
            ).all()
        ]


def test_a_compaction_records_its_validation_and_the_off_switch_skips_it(
    scheduler: Scheduler, spark_rt: Runtime
) -> None:
    table = append_batches(make_table(spark_rt, name="validated"), 6)  # 6 files in a, 6 in b
    rows = _rows(table)
    task_id = manage(spark_rt, "validated", POLICY)
    assert _compact(scheduler, spark_rt, task_id) == TaskState.SUCCEEDED
    validation = _run(spark_rt, task_id).metrics["validation"]  # type: ignore[index]
    assert validation["status"] == "passed"
    assert validation["columns"] == ["id", "region", "amount"]
    assert validation["inputs"] == "observed"  # during the bin-pack's read: only outputs read
    assert sorted(
        (p["partition"]["region"], p["rows_before"], p["rows_after"], p["match"])
        for p in validation["partitions"]
    ) == [("a", 30, 30, True), ("b", 30, 30, True)]
    assert validation["rows"] == 60 and validation["cost_seconds"] >= 0
    (span,) = validation["spans"]
    assert span["after_snapshot"] == current(table.refresh()).snapshot_id
    assert (task_of(spark_rt, task_id).result or {})["validation"]["status"] == "passed"
    assert _rows(table) == rows
    explained = explain_validation(ValidationPolicy(), table)
    assert explained["columns"] == ["id", "region", "amount"] and explained["table_rows"] == 60
    assert explained["applies_to"] == ["compaction", "clustering", "zorder"]

    # Past the cost cap: skipped, counting only the files replaced (a: 30 + 60 rows).
    table = append_batches(table, 6, start=1000, regions=("a",))
    again = _next_compaction(spark_rt, task_id, {"max_rows": 10})
    assert _compact(scheduler, spark_rt, again) == TaskState.SUCCEEDED
    capped = _run(spark_rt, again).metrics["validation"]  # type: ignore[index]
    assert capped["status"] == "skipped" and capped["rows_estimate"] == 90
    assert capped["reason"].startswith("the files the rewrite replaced held 90 rows")

    # Off for this table: the next compaction says it skipped, and why.
    table = append_batches(table, 6, start=2000, regions=("a",))
    again, rows = _next_compaction(spark_rt, task_id, {"enabled": False}), _rows(table)
    assert _compact(scheduler, spark_rt, again) == TaskState.SUCCEEDED
    assert _run(spark_rt, again).metrics["validation"] == {  # type: ignore[index]
        "status": "skipped",
        "reason": "validation is off for this table (validation.enabled: false)",
    }
    off = explain_validation(ValidationPolicy(enabled=False), table)
    assert off["reason"].startswith("off (validation.enabled: false)")
    assert _rows(table) == rows


def test_a_rewrite_past_max_rows_does_not_sum_its_inputs(
    scheduler: Scheduler, spark_rt: Runtime, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Past validation.max_rows validation will not read a rewrite's files, so the bin-pack
    does not sum its inputs either (binpack.run_binpack returns None): Iceberg's action
    rewrites, and validation says why it skipped. Under the cap the runner sums them."""
    table = append_batches(make_table(spark_rt, name="capped_sums"), 6)  # 6 files in a, 6 in b
    task_id = manage(spark_rt, "capped_sums", POLICY)
    ran: list[Any] = []
    real_run = actions.run_binpack

    def recorded(*args: Any) -> Any:
        ran.append(real_run(*args))
        return ran[-1]

    monkeypatch.setattr(actions, "run_binpack", recorded)
    assert _compact(scheduler, spark_rt, task_id) == TaskState.SUCCEEDED
    assert len(ran) == 1 and ran[0] is not None  # 60 rows <= 10 M: summed by its read
    table = append_batches(table, 6, start=1000, regions=("a",))
    rows = _rows(table)
    again = _next_compaction(spark_rt, task_id, {"max_rows": 10})
    assert _compact(scheduler, spark_rt, again) == TaskState.SUCCEEDED
    # 90 rows > 10: pyarrow rewrote the groups (lakewarden.spark.arrow_rewrite), summing
    # nothing; with the Arrow path off, the runner steps aside and Iceberg's action runs
    (arrowed,) = ran[1:]
    assert arrowed is not None and arrowed.observed.groups == ()
    assert arrowed.engine is not None and arrowed.engine["engine"] == "arrow"
    capped = _run(spark_rt, again).metrics["validation"]  # type: ignore[index]
    assert capped["status"] == "skipped" and capped["rows_estimate"] == 90
    assert _rows(table) == rows
    table = append_batches(table, 6, start=2000, regions=("a",))
    rows = _rows(table)
    again = _next_compaction(spark_rt, task_id, {"max_rows": 10}, {"native_rewrite": False})
    assert _compact(scheduler, spark_rt, again) == TaskState.SUCCEEDED
    assert ran[2:] == [None]  # not summed, Iceberg's action ran
    capped = _run(spark_rt, again).metrics["validation"]  # type: ignore[index]
    assert capped["status"] == "skipped" and capped["rows_estimate"] == 150
    assert _rows(table) == rows
    assert len(list(table.refresh().scan().plan_files())) == 2  # one file a partition


def _next_compaction(
    rt: Runtime, task_id: int, validation: dict[str, Any], compaction: dict[str, Any] | None = None
) -> int:
    """The table of `task_id` under POLICY with this validation section (and these
    compaction settings over POLICY's), and a new compaction task on it."""
    with transaction(rt.engine) as s:
        table_id = s.get(Task, task_id).table_id  # type: ignore[union-attr]
        s.execute(
            update(ManagedTable)
            .where(ManagedTable.id == table_id)
            .values(
                policy={
                    "compaction": {**POLICY["compaction"], **(compaction or {})},
                    "validation": validation,
                }
            )
        )
        again = repo.create_task(s, table_id=table_id, kind="compaction", trigger={}, actor="t")
    assert again is not None
    return again


def test_partitions_by_day_and_bucket_are_each_compared(
    scheduler: Scheduler, spark_rt: Runtime
) -> None:
    """Transformed partitions are selected through Iceberg's Spark functions
    (`system.days`, `system.bucket`), and identity partitions of a date, a timestamp and a
    timestamp without zone (kept by Iceberg as numbers) by their value: each is counted
    apart, and nothing is left out."""
    schema = pa.schema(
        [
            pa.field("id", pa.int64(), nullable=False),
            pa.field("ts", pa.timestamp("us", tz="UTC"), nullable=False),
            pa.field("note", pa.string()),
            pa.field("dt", pa.date32(), nullable=False),
            pa.field("local", pa.timestamp("us"), nullable=False),
        ]
    )
    spark_rt.catalog.create_namespace_if_not_exists("sales")
    table = spark_rt.catalog.create_table("sales.transformed", schema=schema)
    with table.update_spec() as spec:
        spec.add_field("ts", DayTransform(), "ts_day")
        spec.add_field("id", BucketTransform(2), "id_bucket")
        spec.add_identity("dt")
        spec.add_identity("local")
    table = spark_rt.catalog.load_table("sales.transformed")
    day = datetime(2026, 11, 1, tzinfo=UTC)
    for batch in range(6):
        ids = list(range(batch * 10, batch * 10 + 10))
        times = [day + timedelta(days=i % 2, hours=3) for i in ids]
        notes = [None if i % 3 else "it's" for i in ids]
        dates = [t.date() for t in times]
        local = [t.replace(tzinfo=None) for t in times]
        columns = {"id": ids, "ts": times, "note": notes, "dt": dates, "local": local}
        table.append(pa.table(columns, schema=schema))
    task_id = manage(spark_rt, "transformed", POLICY)
    assert _compact(scheduler, spark_rt, task_id) == TaskState.SUCCEEDED
    validation = _run(spark_rt, task_id).metrics["validation"]  # type: ignore[index]
    assert validation["status"] == "passed", validation
    assert validation["columns"] == ["id", "ts", "note", "dt", "local"]
    counted = {
        (p["partition"]["ts_day"], p["partition"]["id_bucket"]): p["rows_before"]
        for p in validation["partitions"]
    }
    first = (day.date() - date(1970, 1, 1)).days  # Iceberg's day: days since the epoch
    days = {first, first + 1}
    assert {d for d, _ in counted} == days and {b for _, b in counted} == {0, 1}
    assert len(counted) == 4 and sum(counted.values()) == 60
    assert all(p["match"] and p["rows_after"] == p["rows_before"] for p in validation["partitions"])


def _compared(
    spark: SparkSession,
    ref: TableRef,
    before: int,
    after: int,
    observed: Observed | None = None,
    **how: Any,
) -> list[dict[str, Any]]:
    """What validation finds of the commits from `before` to `after` on `ref` (a span of
    them, as if a rewrite's): per touched partition, its inputs against its outputs. With
    `observed`, the inputs' sums are those (as a bin-pack's read observed them: only the
    outputs are read), which must account for exactly the files the span removed. `how`:
    compare_spans' `driver`, `confirm` and `hasher`."""
    table = load_java_table(spark, "lake", ref)
    commits: list[Any] = []
    snapshot = table.snapshot(after)
    while int(snapshot.snapshotId()) != before:
        commits.insert(0, snapshot)
        snapshot = table.snapshot(snapshot.parentId())
    span = Span(before, commits)
    columns = chosen_columns(table, ValidationPolicy())
    files = span_files(spark._jvm, table, span)
    inputs = None
    if observed is not None:
        sums = observed_inputs(files, observed)
        assert sums is not None, "the observed groups are not the span's inputs"
        inputs = {0: sums}
    return compare_spans(spark, table, [span], [files], columns, inputs, **how)


def _observed(spark: SparkSession, ref: TableRef, snapshot_id: int) -> Observed:
    """The sums a bin-pack's read would observe of every data file at `snapshot_id` in one
    group per partition (deletes applied), computed with validation's own aggregates."""
    from pyspark.sql import functions as F

    name = ref.spark_name("lake")
    columns = chosen_columns(load_java_table(spark, "lake", ref), ValidationPolicy())
    frame = spark.read.option("snapshot-id", snapshot_id).table(name)
    per_file = {
        r["f"]: r["p"]
        for r in frame.select(F.col("_file").alias("f"), F.col("_partition").alias("p"))
        .distinct()
        .collect()
    }
    sums = frame.groupBy(F.col("_partition").alias("p")).agg(*checksum_aggregates(columns))
    table = load_java_table(spark, "lake", ref)
    every = {
        str(t.file().location())
        for t in each_of(table.newScan().useSnapshot(snapshot_id).planFiles())
    }
    groups = []
    for r in sums.collect():
        files = frozenset(f for f, p in per_file.items() if p == r["p"])
        groups.append(ObservedGroup(files, int(r["n"]), (int(r["hi"]) << 32) + int(r["lo"])))
    # a file whose every row was deleted is read as none: it belongs to its partition's group
    empty = every - {f for g in groups for f in g.files}
    assert not empty, f"files with no live rows: {sorted(empty)}"
    return Observed(tuple(columns), tuple(groups))


def test_the_checksum_sees_a_changed_value_and_not_the_order_of_rows(
    spark_rt: Runtime, spark: SparkSession
) -> None:
    """The same rows in other files and order sum to the same checksum; one changed value
    with the same row count does not (what Iceberg's own check of a replace commit, which
    compares row counts, cannot see)."""
    table = make_table(spark_rt, name="checksummed", partitioned=False)
    rows = pa.Table.from_pylist(
        [{"id": i, "region": "a", "amount": float(i)} for i in range(20)], schema=SCHEMA
    )
    table.append(rows.slice(0, 10))
    table.append(rows.slice(10))
    original = current(table.refresh()).snapshot_id
    table.overwrite(pa.concat_tables([rows.slice(15), rows.slice(0, 15)]))  # other order
    reordered = current(table.refresh()).snapshot_id
    changed = rows.to_pylist()
    changed[3]["amount"] = 3.5
    table.overwrite(pa.Table.from_pylist(changed, schema=SCHEMA))
    altered = current(table.refresh()).snapshot_id
    ref = TableRef("sales", "checksummed")
    ((same,),) = [_compared(spark, ref, original, reordered)]
    assert same["match"] and same["rows_before"] == same["rows_after"] == 20
    ((other,),) = [_compared(spark, ref, reordered, altered)]
    assert not other["match"] and other["rows_before"] == other["rows_after"] == 20


def test_the_drivers_checksum_of_a_file_is_sparks(spark_rt: Runtime, spark: SparkSession) -> None:
    """lakewarden.spark.driver_checksum sums a small output file in Python exactly as Spark's
    `row_hash` and `checksum_aggregates` do, for every column type it covers: values at the
    edges of each (NULLs, -0.0 and NaN, long and short strings at every length class of
    xxhash64's loop, negative and wide decimals, times with and without a zone); a type it
    does not cover is left to Spark (None)."""
    from pyspark.sql import functions as F

    from lakewarden.spark.driver_checksum import file_sums

    name = "lake.sales.hashed"
    spark_rt.catalog.create_namespace_if_not_exists("sales")
    spark.sql(f"DROP TABLE IF EXISTS {name}")
    spark.sql(
        f"CREATE TABLE {name} (b boolean, i int, l bigint, f float, d double, "
        "s string, bin binary, small decimal(9,2), wide decimal(38,6), dt date, "
        "ts timestamp, ntz timestamp_ntz, arr array<int>) USING iceberg"
    )
    strings: list[str | None] = ["", "a", "abc", "abcd", "abcdefg", "abcdefgh", "x" * 12]
    strings += ["y" * 31, "z" * 32]
    strings += ["q" * 33, "é漢字🙂" * 9, None]
    floats = ["CAST(-0.0 AS FLOAT)", "CAST(0.0 AS FLOAT)", "CAST('NaN' AS FLOAT)"]
    doubles = ["-0.0D", "CAST('NaN' AS DOUBLE)", "NULL"]
    values = []
    for k, text in enumerate(strings):
        sign = "-" if k % 2 else ""
        row = [
            "NULL" if k == 3 else str(k % 2 == 0).lower(),
            f"{sign}{k * 123457}",
            f"{sign}{k * 9876543210123}",
            floats[k] if k < 3 else f"CAST({sign}{k}.25 AS FLOAT)",
            doubles[k] if k < 3 else f"{sign}{k}.125D",
            "NULL" if text is None else repr(text),
            "NULL" if k == 5 else f"X'{bytes(range(k * 3)).hex()}'",
            f"{sign}{k}.{k:02d}",
            f"CAST('{sign}{k}2345678901234567890123456789.{k:06d}' AS DECIMAL(38,6))",
            f"DATE'19{k + 50}-03-0{k % 9 + 1}'",
            f"TIMESTAMP'2026-11-{k + 1:02d} 10:00:00.{k:06d}+00:00'",
            f"TIMESTAMP_NTZ'1969-12-31 23:59:{k:02d}.5'",  # before the epoch: negative
            f"array({k})",
        ]
        values.append(f"({', '.join(row)})")
    spark.sql(f"INSERT INTO {name} VALUES {', '.join(values)}")
    spark.sql(f"INSERT INTO {name} VALUES {', '.join(values[:3])}")  # a second file
    columns = ["b", "i", "l", "f", "d", "s", "bin", "small", "wide", "dt", "ts", "ntz"]
    types = {f.name: f.dataType.simpleString() for f in spark.table(name).schema.fields}
    per_file = (
        spark.table(name)
        .groupBy(F.col("_file").alias("f"))
        .agg(*checksum_aggregates(columns))
        .collect()
    )
    assert len(per_file) >= 2
    for r in per_file:
        path = str(r["f"]).removeprefix("file:")
        expected = (int(r["n"]), (int(r["hi"]) << 32) + int(r["lo"]))
        assert file_sums(path, [(c, types[c]) for c in columns]) == expected
        for c in columns:  # each type on its own
            (one,) = (
                spark.table(name)
                .where(F.col("_file") == r["f"])
                .agg(*checksum_aggregates([c]))
                .collect()
            )
            assert file_sums(path, [(c, types[c])]) == (
                int(one["n"]),
                (int(one["hi"]) << 32) + int(one["lo"]),
            ), c
        assert file_sums(path, [("arr", types["arr"])]) is None  # not covered: Spark's
    spark.sql(f"DROP TABLE {name}")


def _mutations(
    name: str, one_file: str, x: int, y: int, moved: Any, row_dropped: str
) -> dict[str, tuple[str, Any]]:
    """Issue 30's mutations of a rewrite of `name` (columns id, v, round, w): each a query
    writing the table's rows mutated one way, and how to mangle the files written (None:
    as written). `x` and `y` are two ids of one partition, `one_file` one of its data
    files, `moved` registers one partition's file in another."""
    rows = f"SELECT id, v, round, w FROM {name}"
    return {
        "a file dropped": (rows, lambda files: files[1:]),
        "a file doubled": (f"{rows} UNION ALL {rows} WHERE _file = '{one_file}'", None),
        row_dropped: (f"{rows} WHERE id <> {x}", None),
        "a value changed": (
            f"SELECT id, IF(id = {x}, 'changed', v), round, w FROM {name}",
            None,
        ),
        "a value moved between rows": (
            f"SELECT id, CASE id WHEN {x} THEN concat('v', {y}) WHEN {y} THEN "
            f"concat('v', {x}) ELSE v END, round, w FROM {name}",
            None,
        ),
        "a NULL moved to its neighbour column": (
            f"SELECT id, IF(id = {x}, NULL, v), round, IF(id = {x}, v, w) FROM {name}",
            None,
        ),
        "a partition's rows moved to another": (rows, moved),
    }


def test_every_mutation_of_a_rewrite_that_matters_is_caught(
    spark_rt: Runtime, spark: SparkSession
) -> None:
    """Issue 30's mutation suite. A merge-on-read table bucketed by its key holds position
    deletes (Spark's DELETE) and equality deletes (a Flink-style upsert) in both buckets.
    Each mutation is a corrupted rewrite: one replace commit removing every data file and
    adding files written from the table's rows (deletes applied) mutated one way, compared
    as validation compares a rewrite (its inputs with their deletes against its outputs,
    per partition); then rolled back. Every one is caught; Iceberg's own rewrite, which
    applies both kinds of deletes, passes."""
    catalog, ref, out = "lake", TableRef("sales", "mutated"), TableRef("sales", "mutated_out")
    name = ref.spark_name(catalog)
    spark_rt.catalog.create_namespace_if_not_exists("sales")
    for each in (ref, out):  # the same schema and spec: `out`'s files fit `ref`
        create_keyed_table(spark, catalog, each, 2)
        spark.sql(f"ALTER TABLE {each.spark_name(catalog)} ADD COLUMN w string")
    for start in (0, 20):
        spark.sql(
            f"INSERT INTO {name} SELECT CAST(id AS INT), concat('v', id), 0, NULL "
            f"FROM range({start}, {start + 20})"
        )
    spark.sql(f"DELETE FROM {name} WHERE id % 7 = 0")  # position deletes
    write_equality_upserts(spark, catalog, ref, {5: ("v5-1", 1), 41: ("v41", 1)}, [8, 9])
    kinds = spark.sql(f"SELECT DISTINCT content, partition FROM {name}.delete_files").collect()
    assert {(r.content, r.partition[0]) for r in kinds} == {(1, 0), (1, 1), (2, 0), (2, 1)}
    jvm: Any = spark._jvm
    java = load_java_table(spark, catalog, ref)
    head = int(java.currentSnapshot().snapshotId())
    one_file = spark.sql(f"SELECT _file FROM {name} LIMIT 1").first()[0]  # type: ignore[index]
    by_bucket = spark.sql(f"SELECT id FROM {name} WHERE lake.system.bucket(2, id) = 0").collect()
    x, y = sorted(r.id for r in by_bucket)[:2]  # two rows of one partition
    rows = f"SELECT id, v, round, w FROM {name}"

    observed = _observed(spark, ref, head)

    def rewritten(query: str, mangle: Any = None, label: str = "faithful") -> list[dict[str, Any]]:
        inputs = [t.file() for t in each_of(java.newScan().planFiles())]
        spark.sql(f"INSERT INTO {out.spark_name(catalog)} {query}")
        written = load_java_table(spark, catalog, out).currentSnapshot()
        outputs = list(each_of(written.addedDataFiles(java.io())))
        rewrite = java.newRewrite().validateFromSnapshot(head)
        for f in inputs:
            rewrite = rewrite.deleteFile(f)
        for f in mangle(outputs) if mangle else outputs:
            rewrite = rewrite.addFile(f)
        rewrite.commit()
        after = int(java.currentSnapshot().snapshotId())
        found = _compared(spark, ref, head, after)
        verdicts = [p["match"] for p in found]
        # the same verdicts with the inputs' sums as a bin-pack's own read observes them,
        # the outputs read by Spark, or summed in the driver (small outputs, no Spark job):
        # the driver's own verdict, and the one that stands once Spark confirmed a mismatch
        by_spark = _compared(spark, ref, head, after, observed, driver=False)
        assert [p["match"] for p in by_spark] == verdicts, label
        in_driver = _compared(spark, ref, head, after, observed, confirm=False)
        assert {p["outputs_read_by"] for p in in_driver} == {"driver"}, label
        assert [(p["match"], p["rows_after"]) for p in in_driver] == [
            (p["match"], p["rows_after"]) for p in by_spark
        ], label
        confirmed = _compared(spark, ref, head, after, observed)
        assert [p["match"] for p in confirmed] == verdicts, label
        java.manageSnapshots().rollbackTo(head).commit()
        return found

    def moved(files: list[Any]) -> list[Any]:  # bucket 0's rows registered in bucket 1
        spec = java.spec()
        a, b = files
        builder = jvm.org.apache.iceberg.DataFiles.builder(spec).copy(a)
        return [builder.withPartition(b.partition()).build(), b]

    mutations = _mutations(name, one_file, x, y, moved, "a row dropped in a partition with deletes")
    caught = {}
    for label, (query, mangle) in mutations.items():
        found = rewritten(query, mangle, label)
        bad = [p for p in found if not p["match"]]
        caught[label] = (len(bad), all(p["rows_before"] == p["rows_after"] for p in bad))
    assert caught == {
        "a file dropped": (1, False),
        "a file doubled": (1, False),
        "a row dropped in a partition with deletes": (1, False),
        "a value changed": (1, True),  # the same rows counted: only the checksum sees it
        "a value moved between rows": (1, True),
        "a NULL moved to its neighbour column": (1, True),
        "a partition's rows moved to another": (2, False),  # one short, one long
    }
    faithful = rewritten(rows)
    assert len(faithful) == 2 and all(p["match"] for p in faithful)

    spark.sql(f"REFRESH TABLE {name}")
    expected = Counter(tuple(r) for r in spark.sql(rows).collect())
    spark.sql(
        "CALL lake.system.rewrite_data_files(table => 'sales.mutated', "
        "options => map('rewrite-all', 'true'))"
    ).collect()
    java.refresh()
    after = int(java.currentSnapshot().snapshotId())
    found = _compared(spark, ref, head, after)
    assert after != head and len(found) == 2 and all(p["match"] for p in found), found
    assert (
        sum(p["rows_after"] for p in found) == sum(expected.values()) == 40 - 6 - 3 + 2
    )  # ids % 7, 5/8/9 by key; 5 and 41 upserted
    spark.sql(f"REFRESH TABLE {name}")
    assert Counter(tuple(r) for r in spark.sql(rows).collect()) == expected


def test_every_mutation_is_caught_by_the_arrow_paths_checksum(
    spark_rt: Runtime, spark: SparkSession
) -> None:
    """The mutation suite with the checksum an Arrow-rewritten bin-pack uses on both sides
    (lakewarden.spark.arrow_rewrite: DuckDB's, over the input files as the rewrite sums
    them, and over the outputs in validation), on a table bucketed by its key with no
    delete files (the Arrow path takes none). Every mutation is caught; a faithful rewrite
    passes."""
    catalog, ref, out = "lake", TableRef("sales", "amutated"), TableRef("sales", "amutated_out")
    name = ref.spark_name(catalog)
    spark_rt.catalog.create_namespace_if_not_exists("sales")
    for each in (ref, out):
        spark.sql(
            f"CREATE TABLE {each.spark_name(catalog)} (id int, v string, round int, w string) "
            "USING iceberg PARTITIONED BY (bucket(2, id)) TBLPROPERTIES ('format-version' = '2')"
        )
    for start in (0, 20):
        spark.sql(
            f"INSERT INTO {name} SELECT CAST(id AS INT), concat('v', id), 0, "
            f"IF(id % 3 = 0, 'w', NULL) FROM range({start}, {start + 20})"
        )
    jvm: Any = spark._jvm
    java = load_java_table(spark, catalog, ref)
    head = int(java.currentSnapshot().snapshotId())
    columns = chosen_columns(java, ValidationPolicy())
    by_partition: dict[str, list[str]] = {}
    for task in each_of(java.newScan().planFiles()):
        f = task.file()
        by_partition.setdefault(str(f.partition()), []).append(str(f.location()))
    groups = []
    for files in by_partition.values():
        n, h = arrow_rewrite.sums([arrow_rewrite.local_path(f) or f for f in files], columns)
        groups.append(ObservedGroup(frozenset(files), n, h))
    observed = Observed(tuple(columns), tuple(groups), arrow_rewrite.HASHER)
    one_file = spark.sql(f"SELECT _file FROM {name} LIMIT 1").first()[0]  # type: ignore[index]
    by_bucket = spark.sql(f"SELECT id FROM {name} WHERE lake.system.bucket(2, id) = 0").collect()
    x, y = sorted(r.id for r in by_bucket if r.id % 3)[:2]  # two rows of one partition, w NULL

    def write(query: str) -> list[Any]:
        spark.sql(f"INSERT INTO {out.spark_name(catalog)} {query}")
        written = load_java_table(spark, catalog, out).currentSnapshot()
        return list(each_of(written.addedDataFiles(java.io())))

    def rewritten(query: str, mangle: Any = None) -> list[dict[str, Any]]:
        inputs = [t.file() for t in each_of(java.newScan().planFiles())]
        outputs = write(query)
        # each output summed as the Arrow rewrite sums it once written (before the commit)
        sums = {
            str(f.location()): arrow_rewrite.hash_written(
                str(f.location()), int(f.fileSizeInBytes()), columns
            )
            for f in outputs
        }
        if mangle == "swap":  # an output replaced on disk after it was summed
            (changed,) = [
                f
                for f in write(mutations["a value changed"][0])
                if f.partition() == outputs[0].partition()
            ]
            shutil.copy(
                str(arrow_rewrite.local_path(str(changed.location()))),
                str(arrow_rewrite.local_path(str(outputs[0].location()))),
            )
        rewrite = java.newRewrite().validateFromSnapshot(head)
        for f in inputs:
            rewrite = rewrite.deleteFile(f)
        doubled = mangle == "double"  # Iceberg refuses a replace adding rows: then appended
        for f in mangle(outputs) if callable(mangle) else outputs:
            rewrite = rewrite.addFile(f)
        rewrite.commit()
        if doubled:
            copy = str(outputs[0].location()).replace(".parquet", "-copy.parquet")
            source = arrow_rewrite.local_path(str(outputs[0].location()))
            shutil.copy(str(source), str(arrow_rewrite.local_path(copy)))
            again = jvm.org.apache.iceberg.DataFiles.builder(java.spec()).copy(outputs[0])
            java.newAppend().appendFile(again.withPath(copy).build()).commit()
        after = int(java.currentSnapshot().snapshotId())
        found = _compared(spark, ref, head, after, observed, hasher=arrow_rewrite.HASHER)
        assert {p["outputs_read_by"] for p in found} == {"duckdb"}
        # the same verdicts with the outputs' sums taken as written, where the commit holds
        # exactly those files, unchanged on disk (else validation reads them, as above)
        as_written = _compared(
            spark, ref, head, after, observed, hasher=arrow_rewrite.HASHER, written=sums
        )
        assert [(p["match"], p["rows_after"]) for p in as_written] == [
            (p["match"], p["rows_after"]) for p in found
        ]
        summed_by.append({p["outputs_read_by"] for p in as_written})
        java.manageSnapshots().rollbackTo(head).commit()
        return found

    def moved(files: list[Any]) -> list[Any]:  # bucket 0's rows registered in bucket 1
        a, b = files
        builder = jvm.org.apache.iceberg.DataFiles.builder(java.spec()).copy(a)
        return [builder.withPartition(b.partition()).build(), b]

    mutations = _mutations(name, one_file, x, y, moved, "a row dropped")
    mutations["a file doubled"] = (f"SELECT id, v, round, w FROM {name}", "double")
    rows = f"SELECT id, v, round, w FROM {name}"
    mutations["an output changed on disk after it was summed"] = (rows, "swap")
    caught = {}
    summed_by: list[set[str]] = []  # each rewrite's outputs_read_by, with their sums as written
    by: dict[str, set[str]] = {}
    for label, (query, mangle) in mutations.items():
        bad = [p for p in rewritten(query, mangle) if not p["match"]]
        caught[label] = (len(bad), all(p["rows_before"] == p["rows_after"] for p in bad))
        by[label] = summed_by[-1]
    assert caught == {
        "a file dropped": (1, False),
        "a file doubled": (1, False),
        "a row dropped": (1, False),
        "a value changed": (1, True),  # the same rows counted: only the checksum sees it
        "a value moved between rows": (1, True),
        "a NULL moved to its neighbour column": (1, True),
        "a partition's rows moved to another": (2, False),  # one short, one long
        "an output changed on disk after it was summed": (1, True),
    }
    # committed files other than those summed, or a file changed since: read, not trusted
    read_again = {
        "a file dropped",
        "a file doubled",
        "an output changed on disk after it was summed",
    }
    assert by == {
        label: {"duckdb"} if label in read_again else {"duckdb_as_written"} for label in mutations
    }
    faithful = rewritten(rows)
    assert len(faithful) == 2 and all(p["match"] for p in faithful)
    assert summed_by[-1] == {"duckdb_as_written"}


def _main_history(table: Table) -> list[int]:
    """Every snapshot main has ever pointed to, as its snapshot log records it (a commit
    later rolled away stays in the log)."""
    return [entry.snapshot_id for entry in table.refresh().metadata.snapshot_log]


def _marked(table: Table, snapshot_ids: list[int], task_id: int) -> list[int]:
    out = []
    for snapshot_id in snapshot_ids:
        snapshot = table.snapshot_by_id(snapshot_id)
        if (
            snapshot is not None
            and snapshot.summary is not None
            and snapshot.summary.get(TASK_KEY) == str(task_id)
        ):
            out.append(snapshot_id)
    return out


@pytest.mark.parametrize("failpoint", ["corrupt-rewrite", "corrupt-rewrite-then-write"])
def test_a_corrupted_rewrite_fails_alerts_and_is_never_published(
    scheduler: Scheduler, spark_rt: Runtime, monkeypatch: pytest.MonkeyPatch, failpoint: str
) -> None:
    name = "corrupted" if failpoint == "corrupt-rewrite" else "corrupted_then_written"
    table = append_batches(make_table(spark_rt, name=name), 6)
    rows, before = _rows(table), current(table).snapshot_id
    task_id = manage(spark_rt, name, POLICY)
    monkeypatch.setattr(spark_rt.settings, "failpoint", failpoint)
    monkeypatch.setattr(spark_rt.settings, "failpoints_enabled", True)

    assert _compact(scheduler, spark_rt, task_id) == TaskState.FAILED  # not retried
    run, task = _run(spark_rt, task_id), task_of(spark_rt, task_id)
    validation = (run.metrics or {})["validation"]
    assert validation["status"] == "failed"
    assert validation["inputs"] == "observed"  # the bin-pack's own read checksummed them
    bad = [p for p in validation["partitions"] if not p["match"]]
    assert len(bad) == 1 and bad[0]["rows_after"] < bad[0]["rows_before"] == 30
    assert (task.reason or "").startswith(
        "not retryable: RewriteMismatch: post-rewrite validation failed: 1 of 2 partition(s)"
    )
    assert "never published" in (task.reason or "")
    assert validation["publish"]["action"] == "not_published"
    assert ("rewrite_mismatch", f"sales.{name}:compaction", "critical") in _open_alerts(spark_rt)
    assert not [a for a in _open_alerts(spark_rt) if a[0] == "task_failed" and name in a[1]]

    table = table.refresh()
    # The staging branch is gone, and main never pointed at a commit of the task.
    assert list(table.metadata.refs) == ["main"]
    assert _marked(table, _main_history(table), task_id) == []
    if failpoint == "corrupt-rewrite":
        assert current(table).snapshot_id == before
        assert _rows(table) == rows
    else:
        # The writer's append (to main, while the rewrite was staged) is all main got.
        head = current(table)
        assert head.parent_snapshot_id == before
        assert head.summary is not None and head.summary.get(TASK_KEY) is None
        added = _rows(table) - rows
        assert sum(added.values()) == 1 and next(iter(added)) in rows  # the writer's copy
        assert _rows(table) - added == rows


def test_a_reader_never_sees_a_corrupted_rewrite(
    scheduler: Scheduler, spark_rt: Runtime, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A reader polls main's rows with pyiceberg (its own catalog client) for the whole
    of a corrupted rewrite run by the real scheduler: every read holds exactly the rows the
    table held before. (With the rewrite committed to main and undone afterwards, main
    pointed at the corrupted snapshot for the length of the validation.)"""
    table = append_batches(make_table(spark_rt, name="read_during"), 6)
    rows = _rows(table)
    task_id = manage(spark_rt, "read_during", POLICY)
    monkeypatch.setattr(spark_rt.settings, "failpoint", "corrupt-rewrite")
    monkeypatch.setattr(spark_rt.settings, "failpoints_enabled", True)
    done, reads, wrong = threading.Event(), [0], []

    def read() -> None:
        reader = spark_rt.catalog.load_table("sales.read_during")
        while not done.is_set():
            seen = _rows(reader)
            reads[0] += 1
            if seen != rows:
                wrong.append((current(reader).snapshot_id, sum(seen.values())))

    poller = threading.Thread(target=read, daemon=True)
    poller.start()
    try:
        assert _compact(scheduler, spark_rt, task_id) == TaskState.FAILED
    finally:
        done.set()
        poller.join(timeout=60)
    assert wrong == [] and reads[0] >= 3, (wrong, reads)
    assert _marked(table, _main_history(table), task_id) == []
    assert (task_of(spark_rt, task_id).reason or "").count("never published") == 1


def test_a_rewrite_is_reapplied_over_a_writers_commit_or_not_published_on_conflict(
    scheduler: Scheduler, spark_rt: Runtime, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A writer commits to main while the rewrite is staged (just before it is published):
    the validated file changes are committed on top, the writer's rows kept. When the
    writer's commit removed files the rewrite replaced, Iceberg refuses the re-applied
    commit: nothing of the rewrite reaches main, and the task fails (to be retried). A
    staging branch a crashed job left is dropped when the next rewrite stages."""
    table = append_batches(make_table(spark_rt, name="published_over"), 6)
    # what a crashed job of another task left: dropped when this one stages
    table.manage_snapshots().create_branch(current(table).snapshot_id, "lakewarden-stage-9-1")
    table = table.refresh()
    rows = _rows(table)
    task_id = manage(spark_rt, "published_over", POLICY)
    real_publish = staging.publish
    writes: list[str] = []

    def writer_first(jvm: Any, java_table: Any, stage: staging.Stage) -> dict[str, Any]:
        assert (
            is_stage(stage.name)
            and stage.name in spark_rt.catalog.load_table("sales.published_over").metadata.refs
        )
        writer = spark_rt.catalog.load_table("sales.published_over")
        if writes[-1] == "append":
            append_batches(writer, 1, start=500, regions=("b",))
        else:
            writer.delete("region = 'a'")  # drops partition a's files: the rewrite's inputs
        return real_publish(jvm, java_table, stage)

    monkeypatch.setattr(staging, "publish", writer_first)
    writes.append("append")
    assert _compact(scheduler, spark_rt, task_id) == TaskState.SUCCEEDED
    table = table.refresh()
    validation = _run(spark_rt, task_id).metrics["validation"]  # type: ignore[index]
    assert validation["status"] == "passed"
    published = validation["publish"]
    assert published["action"] == "reapplied", published
    head = current(table)
    assert head.snapshot_id == published["snapshot_id"]
    assert head.summary is not None and head.summary.get(TASK_KEY) == str(task_id)
    assert head.summary.get(PUBLISHED_FROM_KEY) == str(published["staged_snapshot_id"])
    writer = table.snapshot_by_id(head.parent_snapshot_id)  # type: ignore[arg-type]
    assert writer is not None and writer.summary is not None
    assert writer.summary.get(TASK_KEY) is None
    assert list(table.metadata.refs) == ["main"]
    added = _rows(table) - rows
    assert sum(added.values()) == 10 and _rows(table) - added == rows  # the writer's batch
    files = Counter(t.file.partition[0] for t in table.scan().plan_files())
    assert files == {"a": 1, "b": 2}  # a and b compacted; the writer's file in b stays
    result = task_of(spark_rt, task_id).result or {}
    assert result["committed_snapshot_id"] == head.snapshot_id

    # A conflict: the writer removed the files the rewrite replaced.
    table = append_batches(table, 6, start=2000)
    again = _next_compaction(spark_rt, task_id, {})
    writes.append("delete")
    assert _compact(scheduler, spark_rt, again) != TaskState.SUCCEEDED
    table = table.refresh()
    assert list(table.metadata.refs) == ["main"]
    summary = current(table).summary  # the writer's delete
    assert summary is not None and summary.get(TASK_KEY) is None
    assert "not published" in (_run(spark_rt, again).error or "")
    assert {r[1] for r in _rows(table)} == {"b"}
