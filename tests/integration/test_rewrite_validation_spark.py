"""Rewrite validation (lakewarden.spark.validation) on real Spark + Iceberg: a compaction
records per-partition row counts and checksums on its run; with validation off it says it
skipped; a rewrite corrupted on purpose (the test-only failpoint) fails its task with a
critical alert and is never published: it committed to a staging branch only
(lakewarden.spark.staging), so main never held it, and a reader polling main throughout
never sees a row missing or extra. A validated rewrite is published by moving main to it,
or, when a writer committed meanwhile, re-applied on top of the writer's commit; a writer's
conflicting commit leaves it unpublished. Checked with pyiceberg."""

from __future__ import annotations

import threading
from collections import Counter
from datetime import UTC, date, datetime, timedelta
from types import SimpleNamespace
from typing import TYPE_CHECKING, Any

import pyarrow as pa
import pytest
from helpers import SCHEMA, append_batches, current, make_table, manage, run_one, task_of
from pyiceberg.table import Table
from pyiceberg.transforms import BucketTransform, DayTransform
from sqlalchemy import select, update

from lakewarden.alerts.rules import evaluate_task_rules
from lakewarden.db.models import Alert, JobRun, ManagedTable, Task
from lakewarden.db.session import transaction
from lakewarden.formats.iceberg.markers import PUBLISHED_FROM_KEY, is_stage
from lakewarden.health.explain import explain_validation
from lakewarden.policy.model import ValidationPolicy
from lakewarden.runtime import Runtime
from lakewarden.spark import staging
from lakewarden.spark.commits import TASK_KEY
from lakewarden.spark.validation import Span, _aggregate
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

    # Past the cost cap: skipped, counting only the partition touched (a: 30 + 60 rows).
    table = append_batches(table, 6, start=1000, regions=("a",))
    again = _next_compaction(spark_rt, task_id, {"max_rows": 10})
    assert _compact(scheduler, spark_rt, again) == TaskState.SUCCEEDED
    capped = _run(spark_rt, again).metrics["validation"]  # type: ignore[index]
    assert capped["status"] == "skipped" and capped["rows_estimate"] == 90
    assert capped["reason"].startswith("the partitions the rewrite touched held 90 rows")

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


def _next_compaction(rt: Runtime, task_id: int, validation: dict[str, Any]) -> int:
    """The table of `task_id` under POLICY with this validation section, and a new
    compaction task on it."""
    with transaction(rt.engine) as s:
        table_id = s.get(Task, task_id).table_id  # type: ignore[union-attr]
        s.execute(
            update(ManagedTable)
            .where(ManagedTable.id == table_id)
            .values(policy={**POLICY, "validation": validation})
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
    table.append(rows)
    original = current(table.refresh()).snapshot_id
    table.overwrite(pa.concat_tables([rows.slice(10), rows.slice(0, 10)]))  # other order
    reordered = current(table.refresh()).snapshot_id
    changed = rows.to_pylist()
    changed[3]["amount"] = 3.5
    table.overwrite(pa.Table.from_pylist(changed, schema=SCHEMA))
    altered = current(table.refresh()).snapshot_id

    def checksum(after: int) -> tuple[int, str]:
        span = Span(before=original, commits=[SimpleNamespace(snapshotId=lambda: after)])
        counted = _aggregate(
            spark, "`lake`.`sales`.`checksummed`", span, ["TRUE"], ["id", "amount"]
        )
        assert counted[(0, 0)][0] == 20
        return counted[(1, 0)]

    same = checksum(original)
    assert checksum(reordered) == same
    rows_after, sum_after = checksum(altered)
    assert rows_after == 20 and sum_after != same[1]

    # A value moved into its NULL neighbour's column: xxhash64 alone skips NULLs.
    pair = pa.schema([pa.field("x", pa.int64()), pa.field("y", pa.int64())])
    moved = spark_rt.catalog.create_table("sales.moved", schema=pair)
    moved.append(pa.Table.from_pylist([{"x": None, "y": 5}], schema=pair))
    first = current(moved.refresh()).snapshot_id
    moved.overwrite(pa.Table.from_pylist([{"x": 5, "y": None}], schema=pair))
    span = Span(first, [SimpleNamespace(snapshotId=lambda: current(moved.refresh()).snapshot_id)])
    sums = _aggregate(spark, "`lake`.`sales`.`moved`", span, ["TRUE"], ["x", "y"])
    assert sums[(0, 0)][0] == sums[(1, 0)][0] == 1 and sums[(0, 0)][1] != sums[(1, 0)][1]


def test_every_mutation_of_a_rewrite_that_matters_is_caught(
    spark_rt: Runtime, spark: SparkSession
) -> None:
    """Issue 30's mutation suite, on a merge-on-read table with a delete file, partitioned
    by region: each mutation is one commit, compared (as validation compares a span) with
    the commit before it, per touched partition. Each one changes some partition's count or
    checksum; a real rewrite (Iceberg's own) of the last state changes none. (A value
    changed, and a value moved into its NULL neighbour's column: the test above.)"""
    name = "lake.sales.mutated"
    spark.sql("CREATE NAMESPACE IF NOT EXISTS lake.sales")
    spark.sql(
        f"CREATE TABLE {name} (id BIGINT, region STRING, amount DOUBLE) USING iceberg "
        "PARTITIONED BY (region) TBLPROPERTIES ('format-version'='2', "
        "'write.delete.mode'='merge-on-read', 'write.update.mode'='merge-on-read')"
    )
    rows = "SELECT id, IF(id % 2 = 0, 'a', 'b') AS region, CAST(id AS DOUBLE) AS amount"
    spark.sql(f"INSERT INTO {name} {rows} FROM range(0, 40)")
    spark.sql(f"INSERT INTO {name} {rows} FROM range(40, 80)")
    spark.sql(f"DELETE FROM {name} WHERE id = 2")  # a position delete in partition a

    def head() -> int:
        return current(spark_rt.catalog.load_table("sales.mutated")).snapshot_id

    mutations = {
        "a row dropped in a partition with deletes": f"DELETE FROM {name} WHERE id = 4",
        "values moved between rows": f"UPDATE {name} SET amount = CASE id WHEN 6 THEN 8.0 "
        "ELSE 6.0 END WHERE id IN (6, 8)",
        "a partition's row moved to another": f"UPDATE {name} SET region = 'b' WHERE id = 10",
        "a file doubled": f"INSERT INTO {name} SELECT * FROM {name} WHERE region = 'b' "
        "AND id >= 40",
    }
    predicates = ["`region` = 'a'", "`region` = 'b'"]
    columns = ["id", "region", "amount"]

    def compared(before: int, after: int) -> dict[int, bool]:
        span = Span(before, [SimpleNamespace(snapshotId=lambda: after)])
        sums = _aggregate(spark, "`lake`.`sales`.`mutated`", span, predicates, columns)
        return {k: sums.get((0, k)) == sums.get((1, k)) for k in (0, 1)}

    caught = {}
    for label, statement in mutations.items():
        before = head()
        spark.sql(statement)
        caught[label] = compared(before, head())
    assert caught == {
        "a row dropped in a partition with deletes": {0: False, 1: True},
        "values moved between rows": {0: False, 1: True},
        "a partition's row moved to another": {0: False, 1: False},
        "a file doubled": {0: True, 1: False},
    }
    before = head()
    spark.sql(
        "CALL lake.system.rewrite_data_files(table => 'sales.mutated', "
        "options => map('rewrite-all', 'true'))"
    ).collect()
    assert head() != before and compared(before, head()) == {0: True, 1: True}


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
