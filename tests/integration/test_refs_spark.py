"""Branches and tags on real Spark + Iceberg, read back with pyiceberg: the leader's sweep
makes one daily tag (a second sweep none), clean with the most aggressive settings keeps
what a tag and a branch need, and compaction of a branch rewrites that branch only."""

from __future__ import annotations

import time
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from helpers import append_batches, current, make_table, manage, run_one, task_of
from pyiceberg.table import Table
from pyiceberg.table.refs import SnapshotRefType
from pyiceberg.table.snapshots import Snapshot

from lakewarden import tables
from lakewarden.db.models import ManagedTable
from lakewarden.db.session import transaction
from lakewarden.runtime import Runtime
from lakewarden.spark.commits import TASK_KEY
from services.scheduler import sweeps
from services.scheduler.main import Scheduler
from services.worker.main import Worker

pytestmark = pytest.mark.spark


def _tags(table: Table) -> dict[str, Any]:
    return {
        n: r for n, r in table.metadata.refs.items() if r.snapshot_ref_type == SnapshotRefType.TAG
    }


def _rows(table: Table, snapshot_id: int) -> list[tuple[Any, ...]]:
    data = table.scan(snapshot_id=snapshot_id).to_arrow().sort_by("id").to_pylist()
    return [tuple(r.values()) for r in data]


def test_the_sweep_makes_one_daily_tag(scheduler: Scheduler, spark_rt: Runtime) -> None:
    table = append_batches(make_table(spark_rt, name="rf_daily"), 2)
    policy = {"tags": {"enabled": True, "retention_days": 10}, "clean": {"enabled": False}}
    catalog = spark_rt.settings.catalog_name
    row = ManagedTable(catalog=catalog, namespace="sales", name="rf_daily", policy=policy)
    with transaction(spark_rt.engine) as s:
        s.add(row)
        s.flush()
        tables.pause(s, row, by="oncall", reason="incident")
    scheduler.sweep()
    assert not _tags(table.refresh())  # a tag is a commit too: not while the table is held
    with transaction(spark_rt.engine) as s:
        assert tables.resume(s, s.merge(row))
    scheduler.sweep()
    table = spark_rt.catalog.load_table("sales.rf_daily")
    name = datetime.now(UTC).strftime("daily-%Y%m%d")
    (tag,) = _tags(table).values()
    assert list(_tags(table)) == [name] and tag.snapshot_id == current(table).snapshot_id
    # kept 10 days from now: max-ref-age counts from the snapshot's commit, so it is longer
    assert tag.max_ref_age_ms >= 10 * 86_400_000

    sweeps._TAGGED.clear()  # as after a restart: the sweep reads the table again
    append_batches(table, 1, start=100)  # main moved: still the same day's tag
    scheduler.sweep()
    again = spark_rt.catalog.load_table("sales.rf_daily")
    assert _tags(again) == {name: tag}  # not duplicated, not moved, no failure


def test_clean_keeps_what_a_tag_and_a_branch_need(scheduler: Scheduler, spark_rt: Runtime) -> None:
    table = append_batches(make_table(spark_rt, name="rf_clean"), 6)
    ids = [s.snapshot_id for s in sorted(table.snapshots(), key=lambda s: s.timestamp_ms)]
    table.manage_snapshots().create_tag(ids[1], "audit").commit()
    table.manage_snapshots().create_branch(ids[3], "qa").commit()
    tagged, branched = _rows(table, ids[1]), _rows(table, ids[3])
    time.sleep(0.5)  # every snapshot older than max_snapshot_age_hours below (0.36 s)
    task_id = manage(
        spark_rt,
        "rf_clean",
        {
            "clean": {
                "keep_last_snapshots": 1,
                "max_snapshot_age_hours": 0.0001,
                "allow_below_safety_floors": True,
                "remove_orphans": False,
            }
        },
        kind="clean",
    )
    assert Worker(spark_rt).run_once()
    plan = task_of(spark_rt, task_id).plan
    assert plan is not None, task_of(spark_rt, task_id).reason
    assert plan["actions"][0]["expected_snapshots_after"] == 3
    assert {ids[1], ids[3], ids[-1]} <= set(plan["protected_snapshots"])
    assert run_one(scheduler) == "succeeded"

    table = spark_rt.catalog.load_table("sales.rf_clean")
    assert {s.snapshot_id for s in table.snapshots()} == {ids[1], ids[3], ids[-1]}
    assert _rows(table, table.metadata.refs["audit"].snapshot_id) == tagged
    assert _rows(table, table.metadata.refs["qa"].snapshot_id) == branched


def test_compaction_of_a_branch_leaves_main_alone(scheduler: Scheduler, spark_rt: Runtime) -> None:
    table = append_batches(make_table(spark_rt, name="rf_branch"), 6)
    table.manage_snapshots().create_branch(current(table).snapshot_id, "qa").commit()
    table = append_batches(table.refresh(), 1, start=100)  # main moves on, qa stays
    main_before = current(table).snapshot_id
    main_files = {t.file.file_path for t in table.scan().plan_files()}
    qa_before = table.metadata.refs["qa"].snapshot_id
    qa_rows = _rows(table, qa_before)
    policy = {"compaction": {"branch": "qa", "min_small_files": 2, "min_input_files": 2}}
    task_id = manage(spark_rt, "rf_branch", policy)
    assert Worker(spark_rt).run_once()
    plan = task_of(spark_rt, task_id).plan
    assert plan is not None and plan["branch"] == "qa" and plan["snapshot_id"] == qa_before
    assert plan["files_before"] == 12  # qa's files: 6 commits x 2 regions (main has 14)
    assert run_one(scheduler) == "succeeded"

    table = spark_rt.catalog.load_table("sales.rf_branch")
    assert current(table).snapshot_id == main_before  # main untouched
    assert {t.file.file_path for t in table.scan().plan_files()} == main_files
    qa = table.snapshot_by_name("qa")
    assert qa is not None
    # The rewrite's commits (one per file group batch: partial progress) on top of qa_before.
    ours: list[Snapshot] = []
    walk: Snapshot | None = qa
    while walk is not None and walk.snapshot_id != qa_before:
        ours.append(walk)
        walk = table.snapshot_by_id(walk.parent_snapshot_id)  # type: ignore[arg-type]
    assert walk is not None and ours
    for commit in ours:
        assert commit.summary is not None and commit.summary.operation.value == "replace"
        assert commit.summary[TASK_KEY] == str(task_id)
    assert sorted(table.metadata.refs) == ["main", "qa"]  # the staging branch is gone
    assert len(list(table.scan(snapshot_id=qa.snapshot_id).plan_files())) == 2  # one per region
    assert _rows(table, qa.snapshot_id) == qa_rows
    result = task_of(spark_rt, task_id).result
    assert result is not None and result["committed_snapshot_id"] == qa.snapshot_id
    assert (result["rewritten_data_files"], result["added_data_files"]) == (12, 2)


def test_ttl_on_a_branch_deletes_there_only(scheduler: Scheduler, spark_rt: Runtime) -> None:
    import pyarrow as pa

    schema = pa.schema(
        [pa.field("id", pa.int64(), nullable=False), pa.field("ts", pa.timestamp("us", tz="UTC"))]
    )
    spark_rt.catalog.create_namespace_if_not_exists("sales")
    table = spark_rt.catalog.create_table("sales.rf_ttl", schema=schema)
    now = datetime.now(UTC)
    stamps = [now - timedelta(days=d) for d in range(10)]
    table.append(pa.table({"id": list(range(10)), "ts": stamps}, schema=schema))
    table.manage_snapshots().create_branch(current(table).snapshot_id, "qa").commit()
    main_before = current(table).snapshot_id
    ttl = {"enabled": True, "column": "ts", "retention_days": 3, "max_fraction": 0.9}
    policy = {"ttl": {**ttl, "branch": "qa"}}
    task_id = manage(spark_rt, "rf_ttl", {**policy, "clean": {"enabled": False}}, kind="ttl")
    assert Worker(spark_rt).run_once()
    plan = task_of(spark_rt, task_id).plan
    assert plan is not None and plan["branch"] == "qa", task_of(spark_rt, task_id).reason
    assert run_one(scheduler) == "succeeded"

    table = spark_rt.catalog.load_table("sales.rf_ttl")
    assert current(table).snapshot_id == main_before  # main keeps every row
    qa = table.snapshot_by_name("qa")
    assert qa is not None and qa.snapshot_id != main_before
    assert [r[0] for r in _rows(table, qa.snapshot_id)] == [0, 1, 2]  # younger than 3 days
