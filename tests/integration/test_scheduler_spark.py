"""The scheduler running real Spark jobs on real Iceberg tables, checked with pyiceberg."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import pytest
from helpers import (
    append_batches,
    current,
    equal_to,
    make_table,
    manage,
    run_one,
    task_of,
    wait_for,
)
from sqlalchemy import select, text

from lakewarden.catalogs.catalog import TableRef
from lakewarden.db.models import JobRun, Task
from lakewarden.db.session import transaction
from lakewarden.fingerprint import fingerprint
from lakewarden.metadata import read_files
from lakewarden.runtime import Runtime
from lakewarden.tasks import repo
from services.scheduler.main import Scheduler
from services.worker.main import Worker

if TYPE_CHECKING:
    import pyarrow as pa
    from pyspark.sql import SparkSession

    from lakewarden.kinds.base import JobResult

pytestmark = pytest.mark.spark


def test_compaction_job_rewrites_small_files_and_keeps_every_row(
    scheduler: Scheduler, spark_rt: Runtime
) -> None:
    table = append_batches(
        make_table(spark_rt, name="orders"), 10, rows=50, regions=("a", "b", "c")
    )
    before = fingerprint(table)
    assert before.data_files == 30
    task_id = manage(
        spark_rt, "orders", {"compaction": {"min_small_files": 5, "min_input_files": 5}}
    )
    assert Worker(spark_rt).run_once()
    assert run_one(scheduler) == "succeeded"

    after = fingerprint(spark_rt.catalog.load_table("sales.orders"))
    assert after.data_files == 3  # one per partition
    assert (after.rows, after.checksum) == (before.rows, before.checksum)
    with transaction(spark_rt.engine) as s:
        task = s.get(Task, task_id)
        assert task is not None and task.state == "succeeded"
        assert task.result is not None and task.result["rewritten_data_files"] == 30
        assert task.result["committed_snapshot_id"] == after.snapshot_id
        run = s.scalars(select(JobRun).where(JobRun.task_id == task_id)).one()
        assert run.state == "succeeded" and run.spark_app_id and run.duration_ms
        assert run.committed_snapshot_id == after.snapshot_id
        assert [h.to_state for h in repo.history(s, task_id)] == [
            "pending",
            "planning",
            "planned",
            "running",
            "succeeded",
        ]
        assert scheduler.fence is not None
        assert all(
            h.leader_epoch == scheduler.fence.epoch
            for h in repo.history(s, task_id)
            if h.to_state in ("running", "succeeded")
        )


def test_failing_job_is_retried_with_backoff_then_fails_keeping_its_errors(
    scheduler: Scheduler,
    spark_rt: Runtime,
    spark: SparkSession,
) -> None:
    append_batches(make_table(spark_rt, name="doomed"), 6)
    task_id = manage(
        spark_rt,
        "doomed",
        {"compaction": {"min_small_files": 5, "min_input_files": 5, "max_attempts": 2}},
    )
    assert Worker(spark_rt).run_once()
    spark_rt.catalog.drop_table("sales.doomed")  # the job will fail: the table is gone
    assert run_one(scheduler) == "pending"
    with transaction(spark_rt.engine) as s:
        task = s.get(Task, task_id)
        assert task is not None and task.attempt == 1 and task.plan is None
        assert "attempt 1/2 failed, re-planning" in (task.reason or "")
    # Re-planned from scratch; the table is gone, so the worker skips rather than retrying
    # blindly. Force a second run to see the terminal failure path.
    with spark_rt.engine.begin() as conn:
        conn.execute(
            text(
                "UPDATE tasks SET state = 'planned', not_before = now(), "
                "plan = CAST(:p AS jsonb) WHERE id = :i"
            ),
            {
                "i": task_id,
                "p": '{"action": "rewrite_data_files", "strategy": '
                '"binpack", "options": {"min-input-files": "5"}}',
            },
        )
    assert run_one(scheduler) == "failed"
    with transaction(spark_rt.engine) as s:
        task = s.get(Task, task_id)
        assert task is not None and task.state == "failed" and task.attempt == 2
        runs = list(
            s.scalars(select(JobRun).where(JobRun.task_id == task_id).order_by(JobRun.attempt))
        )
        assert [r.state for r in runs] == ["failed", "failed"]
        assert all(r.error and r.log_tail for r in runs)
        assert "attempt 2/2" in (task.reason or "")


def _commit_with_retry(fn: Callable[[], object], attempts: int = 100) -> None:
    """What a real writer does when a concurrent commit wins: refresh and try again (for up
    to ~5 s: a bin-pack commits up to 10 times to its staging branch, 5 groups at once). A
    commit to another branch (a rewrite's staging branch) moves the table's last sequence
    number but not main, and pyiceberg 0.12 then fails its append with a ValueError, not a
    CommitFailedException: the same conflict (Iceberg's REST handlers now answer it as one,
    apache/iceberg#15001), retried the same way."""
    from pyiceberg.exceptions import CommitFailedException

    for _ in range(attempts):
        try:
            fn()
            return
        except CommitFailedException:
            time.sleep(0.05)
        except ValueError as exc:
            if "older than last sequence number" not in str(exc):
                raise
            time.sleep(0.05)
    raise AssertionError("writer could not commit")


def test_compaction_racing_a_writer_keeps_every_writer_commit(
    scheduler: Scheduler, spark_rt: Runtime
) -> None:
    import pyarrow as pa
    from helpers import SCHEMA

    append_batches(make_table(spark_rt, name="raced"), 10, rows=50, regions=("a", "b", "c"))
    task_id = manage(
        spark_rt, "raced", {"compaction": {"min_small_files": 5, "min_input_files": 5}}
    )
    assert Worker(spark_rt).run_once()
    assert scheduler.dispatch_once()
    (entry,) = scheduler.inflight.values()
    future = entry.future

    # While the rewrite runs: appends, and a delete of rows in files being rewritten.
    appended: list[int] = []
    next_id = 10_000
    writer = spark_rt.catalog.load_table("sales.raced")
    deadline = time.monotonic() + 120
    while (not future.done() or len(appended) < 5 * 20) and time.monotonic() < deadline:
        scheduler.renew()  # the test stands in for the scheduler's lease-renewal thread
        ids = list(range(next_id, next_id + 20))
        batch = pa.table({"id": ids, "region": ["a"] * 20, "amount": [1.0] * 20}, schema=SCHEMA)

        def append(batch: pa.Table = batch) -> None:
            writer.refresh().append(batch)

        _commit_with_retry(append)
        appended += ids
        next_id += 20
        if len(appended) == 40:
            _commit_with_retry(lambda: writer.refresh().delete(equal_to("id", 7)))
    outcome = future.result(timeout=300)

    # A conflicting attempt is retried: re-planned from the table's state, run again.
    for _ in range(3):
        scheduler.renew()
        if outcome != "pending":
            break
        with spark_rt.engine.begin() as conn:
            conn.execute(text("UPDATE tasks SET not_before = now() WHERE id = :i"), {"i": task_id})
        assert Worker(spark_rt).run_once()
        outcome = run_one(scheduler)
    assert outcome == "succeeded", task_of(spark_rt, task_id).reason

    ids = (
        spark_rt.catalog.load_table("sales.raced")
        .scan(selected_fields=("id",))
        .to_arrow()["id"]
        .to_pylist()
    )
    expected = (set(range(500)) - {7}) | set(appended)
    assert sorted(ids) == sorted(expected)  # nothing lost, nothing duplicated, delete kept
    with transaction(spark_rt.engine) as s:
        # In attempt order: without an ORDER BY, Postgres returns rows as it finds them
        # (an updated run's row moves), and the last was sometimes an earlier failed one.
        runs = list(s.scalars(select(JobRun).where(JobRun.task_id == task_id).order_by(JobRun.id)))
        assert runs[-1].state == "succeeded"
        assert all(r.state in ("succeeded", "failed") for r in runs)


def test_commit_carries_the_task_and_a_rerun_never_commits_twice(
    scheduler: Scheduler,
    spark_rt: Runtime,
    spark: SparkSession,
) -> None:
    from lakewarden.kinds import get_kind
    from lakewarden.spark.commits import ATTEMPT_KEY, TASK_KEY, committing_as

    append_batches(make_table(spark_rt, name="twice"), 6)
    task_id = manage(
        spark_rt, "twice", {"compaction": {"min_small_files": 5, "min_input_files": 5}}
    )
    assert Worker(spark_rt).run_once()
    with transaction(spark_rt.engine) as s:
        task = s.get(Task, task_id)
        assert task is not None and task.plan is not None
        plan = task.plan
    # Attempt 1 commits, then its scheduler dies before recording the outcome.
    with committing_as(task_id, 1):
        get_kind("compaction").run(spark, "lake", TableRef("sales", "twice"), plan)
    table = spark_rt.catalog.load_table("sales.twice")
    summary = current(table).summary
    assert summary is not None and summary[TASK_KEY] == str(task_id) and summary[ATTEMPT_KEY] == "1"
    snapshots_after_first = len(table.snapshots())
    with spark_rt.engine.begin() as conn:
        conn.execute(
            text("UPDATE tasks SET state = 'planned', attempt = 1 WHERE id = :i"), {"i": task_id}
        )
    assert run_one(scheduler) == "succeeded"  # attempt 2 finds attempt 1's commit
    table = spark_rt.catalog.load_table("sales.twice")
    assert len(table.snapshots()) == snapshots_after_first  # nothing committed again
    with transaction(spark_rt.engine) as s:
        task = s.get(Task, task_id)
        assert task is not None and task.result is not None
        assert task.result["recovered_commit_of_attempt"] == "1"
        assert task.result["committed_snapshot_id"] == current(table).snapshot_id
        # Nobody saw that commit validated: the run says so, rather than nothing.
        assert task.result["validation"]["status"] == "skipped"
        assert "whether its validation ran is not known" in task.result["validation"]["reason"]


def _hanging_kind(monkeypatch: pytest.MonkeyPatch, starts_after_s: float = 0.0) -> None:
    """Fault injection: a kind whose Spark job hangs (a task sleeping in the executor),
    submitted `starts_after_s` after the attempt starts."""
    from lakewarden import kinds
    from lakewarden.kinds.base import JobResult, Kind, PlanOutcome

    def run(spark: SparkSession, catalog: str, ref: TableRef, plan: dict[str, Any]) -> JobResult:
        time.sleep(starts_after_s)
        spark.sql("SELECT reflect('java.lang.Thread', 'sleep', bigint(600000))").collect()
        return JobResult({}, None)

    hang = Kind(name="compaction", plan=lambda *_: PlanOutcome({"hang": True}, "hang"), run=run)
    monkeypatch.setitem(kinds.REGISTRY, "compaction", hang)


def test_a_hanging_job_is_cancelled_at_its_timeout_and_retried(
    scheduler: Scheduler, spark_rt: Runtime, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Its Spark job starts only after the timeout (as a slow start under load does): the
    # first cancel finds no job in the group, so the scheduler must cancel it again.
    _hanging_kind(monkeypatch, starts_after_s=5.0)
    append_batches(make_table(spark_rt, name="hangs"), 1)
    task_id = manage(spark_rt, "hangs", {"compaction": {"timeout_minutes": 0.05}})  # 3 s
    assert Worker(spark_rt).run_once()
    assert scheduler.dispatch_once()
    (entry,) = scheduler.inflight.values()
    started = time.monotonic()
    while not entry.future.done() and time.monotonic() - started < 60:
        scheduler.cancel_requested_jobs()
        time.sleep(0.5)
    assert entry.future.result(timeout=30) == "pending"  # cancelled, to be retried
    assert time.monotonic() - started < 30
    with transaction(spark_rt.engine) as s:
        run = s.scalars(select(JobRun).where(JobRun.task_id == task_id)).one()
        assert run.state == "failed" and "exceeded its timeout of 3s" in (run.error or "")


def test_cancelling_a_running_task_cancels_its_spark_job(
    scheduler: Scheduler, spark_rt: Runtime, spark: SparkSession, monkeypatch: pytest.MonkeyPatch
) -> None:
    _hanging_kind(monkeypatch)
    append_batches(make_table(spark_rt, name="cancelme"), 1)
    task_id = manage(spark_rt, "cancelme", {})
    assert Worker(spark_rt).run_once()
    assert scheduler.dispatch_once()
    (entry,) = scheduler.inflight.values()
    tracker = spark.sparkContext.statusTracker()
    wait_for(lambda: tracker.getJobIdsForGroup(entry.group), 60, "the job to run in Spark")
    with transaction(spark_rt.engine) as s:
        repo.transition(s, task_id, "cancelled", actor="api:test", reason="operator")
    scheduler.cancel_requested_jobs()
    assert entry.future.result(timeout=30) == "cancelled"
    with transaction(spark_rt.engine) as s:
        task = s.get(Task, task_id)
        assert task is not None and task.state == "cancelled"
        run = s.scalars(select(JobRun).where(JobRun.task_id == task_id)).one()
        assert run.state == "cancelled"


def test_delete_file_compaction_on_a_merge_on_read_table(
    scheduler: Scheduler,
    spark_rt: Runtime,
    spark: SparkSession,
) -> None:
    spark.sql("CREATE NAMESPACE IF NOT EXISTS lake.sales")
    spark.sql(
        "CREATE TABLE lake.sales.mor (id BIGINT, v STRING) USING iceberg TBLPROPERTIES ("
        "'format-version'='2', 'write.delete.mode'='merge-on-read')"
    )
    for start in (0, 500):
        spark.range(start, start + 500).selectExpr("id", "cast(id AS STRING) AS v").coalesce(
            1
        ).writeTo("lake.sales.mor").append()
    spark.sql("DELETE FROM lake.sales.mor WHERE id % 3 = 0")  # position deletes: 1/3 of rows
    table = spark_rt.catalog.load_table("sales.mor")
    before = fingerprint(table)
    deletes_before = read_files(table).deletes
    assert deletes_before and all(d.kind == "position" for d in deletes_before)

    task_id = manage(
        spark_rt, "mor", {"compaction": {"min_small_files": 1000, "delete_ratio_threshold": 0.2}}
    )
    assert Worker(spark_rt).run_once()
    with transaction(spark_rt.engine) as s:
        task = s.get(Task, task_id)
        assert task is not None
        plan = task.plan
    assert plan is not None and sum(p["files_with_deletes"] for p in plan["partitions"]) == 2
    assert run_one(scheduler) == "succeeded"

    table = spark_rt.catalog.load_table("sales.mor")
    after = fingerprint(table)
    assert (after.rows, after.checksum) == (before.rows, before.checksum)
    assert after.rows == 1000 - 334  # the deleted rows stay deleted
    assert read_files(table).deletes == []  # no delete file left to apply at read time


def _codecs(table: Any) -> set[str]:
    import pyarrow.parquet as pq

    return {
        pq.ParquetFile(task.file.file_path.removeprefix("file://"))
        .metadata.row_group(0)
        .column(0)
        .compression
        for task in table.scan().plan_files()
    }


@pytest.mark.parametrize(("named", "written"), [(None, "ZSTD"), ("snappy", "SNAPPY")])
def test_a_rewrite_writes_the_tables_codec_and_zstd_where_it_names_none(
    scheduler: Scheduler, spark_rt: Runtime, named: str | None, written: str
) -> None:
    """pyiceberg writes zstd (level 1) without naming it; Iceberg-Java would rewrite such a
    table in gzip (its old fallback), at about twice the CPU, or zstd at level 3. A codec
    the table names stands, at the level it names or not."""
    name = f"codec_{named or 'unset'}"
    table = make_table(spark_rt, name=name)
    if named:
        with table.transaction() as tx:
            tx.set_properties({"write.parquet.compression-codec": named})
    table = append_batches(spark_rt.catalog.load_table(f"sales.{name}"), 6, rows=20)
    manage(spark_rt, name, {"compaction": {"min_small_files": 5, "min_input_files": 5}})
    assert Worker(spark_rt).run_once()
    assert run_one(scheduler) == "succeeded"

    after = spark_rt.catalog.load_table(f"sales.{name}")
    assert _codecs(after) == {written}
    assert after.properties["write.parquet.compression-codec"] == (named or "zstd")
    assert after.properties.get("write.parquet.compression-level") == (None if named else "1")


def test_a_tiered_table_that_goes_quiet_gets_a_major_merge(
    scheduler: Scheduler, spark_rt: Runtime
) -> None:
    """Tiering leaves files no tier can merge yet; once no data commit came for
    tier_quiet_merge_minutes, the leader's sweep opens a compaction task and its plan
    merges every tier into target-size files: one file per partition, every row kept."""
    from datetime import UTC, datetime

    from services.scheduler.sweeps import sweep_due_tasks

    table = append_batches(make_table(spark_rt, name="tiered_quiet"), 3, regions=("a", "b"))
    before = fingerprint(table)
    quiet_s = 3.0
    policy = {
        "compaction": {
            "min_small_files": 5,
            "min_input_files": 5,
            "tiers": 2,
            "tier_quiet_merge_minutes": quiet_s / 60,
        },
        "clean": {"enabled": False},  # the sweep's only task here is compaction
    }
    first = manage(spark_rt, "tiered_quiet", policy)
    assert Worker(spark_rt).run_once()
    assert task_of(spark_rt, first).state == "skipped"  # 3 files a partition: no tier full
    assert scheduler.fence is not None

    def swept_compaction() -> int:
        assert scheduler.fence is not None
        (created,) = sweep_due_tasks(spark_rt, scheduler.fence, datetime.now(UTC))
        assert task_of(spark_rt, created).kind == "compaction"
        return created

    time.sleep(quiet_s)
    swept = swept_compaction()
    assert Worker(spark_rt).run_once()
    task = task_of(spark_rt, swept)
    assert task.state == "planned" and task.plan is not None
    assert task.plan["major_merge"]["quiet_minutes"] >= quiet_s / 60
    assert "major merge: no data commit for" in (task.reason or "")
    assert run_one(scheduler) == "succeeded"

    after = fingerprint(spark_rt.catalog.load_table("sales.tiered_quiet"))
    assert (after.data_files, before.data_files) == (2, 6)
    assert (after.rows, after.checksum) == (before.rows, before.checksum)
    # The table stays quiet: the next sweep's task finds nothing left to merge.
    time.sleep(quiet_s)
    again = swept_compaction()
    assert Worker(spark_rt).run_once()
    assert task_of(spark_rt, again).state == "skipped"
