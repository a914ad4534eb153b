"""TTL's DELETE on real Spark + Iceberg carries the task's commit tags: a retried attempt finds
its earlier commit instead of deleting again, and the runner never takes a writer's commit
(even one from the same Spark application) for its own, also when its DELETE matched nothing."""

from __future__ import annotations

import threading
from datetime import UTC, datetime, timedelta
from typing import Any

import pyarrow as pa
import pytest
from helpers import current, manage, run_one, task_of
from sqlalchemy import text

from lakewarden.catalogs.catalog import TableRef
from lakewarden.kinds import ttl
from lakewarden.outcomes import VerificationFailed
from lakewarden.runtime import Runtime
from lakewarden.spark.commits import (
    ATTEMPT_KEY,
    TASK_KEY,
    committing_as,
    guarded_by,
    with_commit_tags,
)
from services.scheduler.main import Scheduler
from services.worker.main import Worker

pytestmark = pytest.mark.spark

SCHEMA = pa.schema(
    [pa.field("id", pa.int64(), nullable=False), pa.field("ts", pa.timestamp("us", tz="UTC"))]
)
POLICY = {"ttl": {"enabled": True, "column": "ts", "retention_days": 4.5, "max_fraction": 0.9}}


def _planned_ttl(rt: Runtime, name: str) -> tuple[int, dict[str, Any]]:
    """sales.<name>: a row every 6 hours over 8 days, partitioned by day; its TTL task planned."""
    from pyiceberg.transforms import DayTransform

    rt.catalog.create_namespace_if_not_exists("sales")
    table = rt.catalog.create_table(f"sales.{name}", schema=SCHEMA)
    with table.update_spec() as spec:
        spec.add_field("ts", DayTransform(), "ts_day")
    now = datetime.now(UTC)
    stamps = [now - timedelta(hours=6 * i) for i in range(32)]
    table.refresh().append(pa.table({"id": list(range(32)), "ts": stamps}, schema=SCHEMA))
    task_id = manage(rt, name, POLICY, kind="ttl")
    assert Worker(rt).run_once()
    plan = task_of(rt, task_id).plan
    assert plan is not None and plan["rows_to_delete"] > 0
    return task_id, plan


def _ids(rt: Runtime, name: str) -> list[int]:
    return sorted(rt.catalog.load_table(f"sales.{name}").scan().to_arrow()["id"].to_pylist())


def test_a_retried_ttl_attempt_finds_the_commit_of_the_first_and_deletes_nothing_again(
    scheduler: Scheduler, spark_rt: Runtime, spark: Any
) -> None:
    task_id, plan = _planned_ttl(spark_rt, "ttl_twice")
    # Attempt 1 deletes, then its scheduler dies before recording the outcome.
    with committing_as(task_id, 1):
        first = ttl.run(spark, spark_rt.settings.catalog_name, TableRef("sales", "ttl_twice"), plan)
    table = spark_rt.catalog.load_table("sales.ttl_twice")
    summary = current(table).summary
    assert summary is not None and summary.operation.value == "delete"
    assert (summary.get(TASK_KEY), summary.get(ATTEMPT_KEY)) == (str(task_id), "1")
    assert first.committed_snapshot_id == current(table).snapshot_id
    kept, snapshots = _ids(spark_rt, "ttl_twice"), len(table.snapshots())
    assert len(kept) == 32 - plan["rows_to_delete"]

    with spark_rt.engine.begin() as conn:
        conn.execute(
            text("UPDATE tasks SET state = 'planned', attempt = 1 WHERE id = :i"), {"i": task_id}
        )
    assert run_one(scheduler) == "succeeded"  # attempt 2
    table = spark_rt.catalog.load_table("sales.ttl_twice")
    assert len(table.snapshots()) == snapshots and _ids(spark_rt, "ttl_twice") == kept
    result = task_of(spark_rt, task_id).result
    assert result is not None and result["recovered_commit_of_attempt"] == "1"
    assert result["committed_snapshot_id"] == first.committed_snapshot_id


def test_ttl_never_takes_a_writers_commit_for_its_own_when_its_delete_matches_nothing(
    spark_rt: Runtime, spark: Any
) -> None:
    task_id, plan = _planned_ttl(spark_rt, "ttl_raced")
    catalog, ref = spark_rt.settings.catalog_name, TableRef("sales", "ttl_raced")
    looks: list[str] = []

    def writer_deletes_first() -> None:
        """The job's last look before its DELETE: a writer of this same Spark application
        deletes the expired rows first (untagged), so the job's DELETE matches nothing."""
        looks.append("look")
        if len(looks) == 2:
            spark.sql(ttl.delete_sql(catalog, ref, plan)).collect()

    with committing_as(task_id, 1), guarded_by(writer_deletes_first):
        result = ttl.run(spark, catalog, ref, plan)
    assert len(looks) == 2  # before the undo tag and right before the delete

    table = spark_rt.catalog.load_table("sales.ttl_raced")
    by_id = {s.snapshot_id: s for s in table.snapshots()}
    writers = sorted(
        (s for s in by_id.values() if s.summary and s.summary.get(TASK_KEY) is None),
        key=lambda s: s.timestamp_ms,
    )
    assert writers[-1].summary is not None and writers[-1].summary.operation.value == "delete"
    assert result.metrics["deleted_records"] == 0
    assert "matched nothing" in result.metrics["note"]
    ours = result.committed_snapshot_id
    assert ours != writers[-1].snapshot_id
    if ours is not None:  # the empty commit, tagged as ours
        summary = by_id[ours].summary
        assert summary is not None and summary.get(TASK_KEY) == str(task_id)
    assert len(_ids(spark_rt, "ttl_raced")) == 32 - plan["rows_to_delete"]  # deleted once


def test_concurrent_jobs_in_one_session_tag_only_their_own_commits(
    spark_rt: Runtime, spark: Any
) -> None:
    """The tags live in a Java thread-local: two jobs deleting at the same moment in the one
    session each tag their own commit, and an untagged statement after them carries none."""
    catalog = spark_rt.settings.catalog_name
    names = ("tags_a", "tags_b")
    for name in names:
        spark_rt.catalog.create_namespace_if_not_exists("sales")
        table = spark_rt.catalog.create_table(f"sales.{name}", schema=SCHEMA)
        stamps = [datetime.now(UTC)] * 4
        table.append(pa.table({"id": list(range(4)), "ts": stamps}, schema=SCHEMA))
    start, failures = threading.Barrier(2), []

    def job(name: str) -> None:
        try:
            start.wait(timeout=60)
            statement = f"DELETE FROM {TableRef('sales', name).spark_name(catalog)} WHERE id = 0"
            with_commit_tags(spark, {TASK_KEY: name}, lambda: spark.sql(statement).collect())
        except BaseException as exc:
            failures.append(exc)

    threads = [threading.Thread(target=job, args=(name,)) for name in names]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not failures
    spark.sql(f"DELETE FROM {TableRef('sales', 'tags_a').spark_name(catalog)} WHERE id = 1")
    table_a = spark_rt.catalog.load_table("sales.tags_a")
    tagged = [
        s.summary.get(TASK_KEY) if s.summary is not None else None
        for s in sorted(table_a.snapshots(), key=lambda s: s.timestamp_ms)
    ]
    assert tagged == [None, "tags_a", None]  # append, our delete, the untagged delete
    summary = current(spark_rt.catalog.load_table("sales.tags_b")).summary
    assert summary is not None and summary.get(TASK_KEY) == "tags_b"


def test_a_delete_whose_commit_lost_its_tags_fails_instead_of_passing(
    spark_rt: Runtime, spark: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Fault: the tags do not reach the commit (e.g. PySpark without pinned threads). The
    delete happened, but nothing can verify it or find it again on a retry: the job fails
    with the undo call rather than reporting 'nothing deleted'."""
    task_id, plan = _planned_ttl(spark_rt, "ttl_untagged")
    monkeypatch.setattr(ttl.commits, "with_commit_tags", lambda spark, tags, action: action())
    with committing_as(task_id, 1), pytest.raises(VerificationFailed, match="carries its tags"):
        ttl.run(spark, spark_rt.settings.catalog_name, TableRef("sales", "ttl_untagged"), plan)
