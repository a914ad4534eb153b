"""Iceberg format v3's row lineage under lakewarden's rewrites, on real Spark (issue 32 §2):
a rewrite that gives rows new ids (the same values written again as new rows: the
`renumber-rewrite` failpoint) is caught by post-rewrite validation and never published;
and a table upgraded from v2 (`'format-version'='3'` set on a table with position deletes)
is measured (health counts its deletion vectors) and compacted with every row's
`_row_id` and `_last_updated_sequence_number` kept."""

from __future__ import annotations

from typing import Any

import pytest
from conftest import serve
from helpers import manage, run_one, task_of
from pyspark.sql import SparkSession
from sqlalchemy import select

from lakewarden.db.models import JobRun
from lakewarden.db.session import transaction
from lakewarden.fingerprint import fingerprint
from lakewarden.runtime import Runtime
from lakewarden.states import TaskState
from services.scheduler.main import Scheduler
from services.worker.main import Worker

pytestmark = pytest.mark.spark

LINEAGE = tuple[Any, Any]  # (_row_id, _last_updated_sequence_number)


def _lineage(spark: SparkSession, full: str) -> dict[int, LINEAGE]:
    spark.sql(f"REFRESH TABLE {full}")
    rows = spark.sql(f"SELECT id, _row_id, _last_updated_sequence_number FROM {full}").collect()
    return {r["id"]: (r["_row_id"], r["_last_updated_sequence_number"]) for r in rows}


def _deletion_vectors(spark: SparkSession, full: str) -> int:
    spark.sql(f"REFRESH TABLE {full}")
    return int(
        spark.sql(
            f"SELECT count(*) AS n FROM {full}.delete_files WHERE file_format = 'PUFFIN'"
        ).collect()[0]["n"]
    )


def _insert(spark: SparkSession, full: str, start: int, stop: int, step: int) -> None:
    spark.sql(
        f"INSERT INTO {full} SELECT id, CASE WHEN id % 2 = 0 THEN 'a' ELSE 'b' END, "
        f"CAST(id AS STRING) FROM range({start}, {stop}, {step})"
    )


def _run(rt: Runtime, scheduler: Scheduler, task_id: int) -> tuple[str, JobRun]:
    assert Worker(rt).run_once()
    planned = task_of(rt, task_id)
    assert planned.state == "planned", planned.reason
    state = run_one(scheduler)
    with transaction(rt.engine) as s:
        run = s.scalars(select(JobRun).where(JobRun.task_id == task_id)).one()
        s.expunge(run)
    return state, run


POLICY = {"compaction": {"min_small_files": 2, "min_input_files": 2, "max_attempts": 3}}


@pytest.mark.timeout(1200)
def test_a_rewrite_that_renumbers_rows_fails_validation_and_is_never_published(
    scheduler: Scheduler,
    spark_rt: Runtime,
    spark: SparkSession,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    name = "v3_renumbered"
    full = f"lake.sales.{name}"
    spark.sql("CREATE NAMESPACE IF NOT EXISTS lake.sales")
    spark.sql(
        f"CREATE TABLE {full} (id BIGINT, region STRING, v STRING) USING iceberg "
        "PARTITIONED BY (region) TBLPROPERTIES ('format-version'='3')"
    )
    for i in range(4):
        _insert(spark, full, i, 400, 4)
    before, head = _lineage(spark, full), spark_rt.catalog.load_table(f"sales.{name}")
    snapshot = head.current_snapshot()
    assert snapshot is not None and None not in {rid for rid, _ in before.values()}
    rows = fingerprint(head)
    task_id = manage(spark_rt, name, POLICY)
    monkeypatch.setattr(spark_rt.settings, "failpoint", "renumber-rewrite")
    monkeypatch.setattr(spark_rt.settings, "failpoints_enabled", True)

    state, run = _run(spark_rt, scheduler, task_id)
    assert state == TaskState.FAILED  # a mismatch is not retried
    validation = (run.metrics or {})["validation"]
    assert validation["status"] == "failed", validation
    assert validation["row_lineage"] == ["_row_id", "_last_updated_sequence_number"]
    assert "(or their row ids)" in validation["reason"]
    assert validation["publish"]["action"] == "not_published"
    reason = task_of(spark_rt, task_id).reason or ""
    assert "post-rewrite validation failed" in reason and "never published" in reason

    # main is where it was: the same rows with the same ids, the staging branch gone
    table = spark_rt.catalog.load_table(f"sales.{name}")
    current = table.current_snapshot()
    assert current is not None and current.snapshot_id == snapshot.snapshot_id
    assert list(table.metadata.refs) == ["main"]
    after = fingerprint(table)
    assert (after.rows, after.checksum) == (rows.rows, rows.checksum)
    assert _lineage(spark, full) == before


@pytest.mark.timeout(1800)
def test_a_table_upgraded_from_v2_is_compacted_with_its_lineage_kept(
    scheduler: Scheduler, spark_rt: Runtime, spark: SparkSession
) -> None:
    name = "v2_upgraded"
    full = f"lake.sales.{name}"
    spark.sql("CREATE NAMESPACE IF NOT EXISTS lake.sales")
    spark.sql(
        f"CREATE TABLE {full} (id BIGINT, region STRING, v STRING) USING iceberg "
        "PARTITIONED BY (region) TBLPROPERTIES ('format-version'='2', "
        "'write.delete.mode'='merge-on-read', 'write.update.mode'='merge-on-read')"
    )
    for i in range(3):
        _insert(spark, full, i, 600, 4)
    spark.sql(f"DELETE FROM {full} WHERE id % 7 = 0")  # v2: position delete files
    spark.sql(f"ALTER TABLE {full} SET TBLPROPERTIES ('format-version'='3')")
    _insert(spark, full, 3, 600, 4)
    spark.sql(f"DELETE FROM {full} WHERE id % 11 = 0")  # v3: deletion vectors
    table = spark_rt.catalog.load_table(f"sales.{name}")
    assert table.metadata.format_version == 3
    dvs = _deletion_vectors(spark, full)
    assert dvs > 0
    before, rows = _lineage(spark, full), fingerprint(table)
    task_id = manage(
        spark_rt,
        name,
        {"compaction": {**POLICY["compaction"], "delete_ratio_threshold": 0.01}},
    )

    with serve(spark_rt) as client:
        health = client.get(f"/api/v1/tables/sales/{name}/health")
        assert health.status_code == 200, health.text
        h = health.json()
        assert h["format_version"] == 3
        assert h["delete_files"]["deletion_vectors"] == dvs

    state, run = _run(spark_rt, scheduler, task_id)
    assert state == TaskState.SUCCEEDED, task_of(spark_rt, task_id).reason
    validation = (run.metrics or {})["validation"]
    assert validation["status"] == "passed", validation
    assert validation["row_lineage"] == ["_row_id", "_last_updated_sequence_number"]
    assert _deletion_vectors(spark, full) == 0
    after = _lineage(spark, full)
    moved = {i: (before[i], after[i]) for i in after if after[i] != before.get(i)}
    assert not moved, f"{len(moved)} rows changed lineage, e.g. {list(moved.items())[:3]}"
    table = spark_rt.catalog.load_table(f"sales.{name}")
    got = fingerprint(table)
    assert (got.rows, got.checksum) == (rows.rows, rows.checksum)
