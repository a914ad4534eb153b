"""TTL and clean on real tables, run by the scheduler on Spark, checked with pyiceberg."""

from __future__ import annotations

import os
import shutil
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pyarrow as pa
import pytest
from helpers import append_batches, make_table, manage, run_one

from lakewarden.db.models import Task
from lakewarden.db.session import transaction
from lakewarden.runtime import Runtime
from lakewarden.verify import fingerprint
from services.worker.main import Worker

pytestmark = pytest.mark.spark

TS_SCHEMA = pa.schema(
    [
        pa.field("id", pa.int64(), nullable=False),
        pa.field("ts", pa.timestamp("us", tz="UTC"), nullable=False),
    ]
)


def _events_table(rt: Runtime, name: str, *, partitioned: bool, days: int = 10, ago: int = 0):  # type: ignore[no-untyped-def]
    """Rows every two hours over `days` days ending `ago` days ago, one commit per day."""
    from pyiceberg.transforms import DayTransform

    rt.catalog.create_namespace_if_not_exists("sales")
    table = rt.catalog.create_table(f"sales.{name}", schema=TS_SCHEMA)
    if partitioned:
        with table.update_spec() as spec:
            spec.add_field("ts", DayTransform(), "ts_day")
    now = datetime.now(UTC)
    next_id = 0
    for d in range(days + ago, ago - 1, -1):
        day = (now - timedelta(days=d)).replace(hour=0, minute=0, second=0, microsecond=0)
        stamps = [
            day + timedelta(hours=h) for h in range(0, 24, 2) if day + timedelta(hours=h) <= now
        ]
        table = rt.catalog.load_table(f"sales.{name}")
        table.append(
            pa.table(
                {"id": list(range(next_id, next_id + len(stamps))), "ts": stamps}, schema=TS_SCHEMA
            )
        )
        next_id += len(stamps)
    return rt.catalog.load_table(f"sales.{name}")


def _rows(rt: Runtime, name: str) -> list[tuple[int, datetime]]:
    data = rt.catalog.load_table(f"sales.{name}").scan().to_arrow().to_pylist()
    return sorted((r["id"], r["ts"]) for r in data)


def _task(rt: Runtime, task_id: int) -> Task:
    with transaction(rt.engine) as s:
        task = s.get(Task, task_id)
        assert task is not None
        return task


def test_ttl_partition_level_drops_whole_days_metadata_only(scheduler, spark_rt: Runtime) -> None:  # type: ignore[no-untyped-def]
    _events_table(spark_rt, "events_p", partitioned=True)
    before = _rows(spark_rt, "events_p")
    task_id = manage(
        spark_rt,
        "events_p",
        {"ttl": {"enabled": True, "column": "ts", "retention_days": 3.5, "max_fraction": 0.9}},
        kind="ttl",
    )
    assert Worker(spark_rt).run_once()
    plan = _task(spark_rt, task_id).plan
    assert plan is not None and plan["level"] == "partition"
    boundary = datetime.fromisoformat(plan["cutoff"])
    assert boundary == boundary.replace(hour=0, minute=0, second=0, microsecond=0)
    assert boundary <= datetime.now(UTC) - timedelta(days=3.5)
    assert run_one(scheduler) == "succeeded"

    after = _rows(spark_rt, "events_p")
    assert after == [r for r in before if r[1] >= boundary]  # exactly the old rows are gone
    assert min(ts for _, ts in after) >= boundary
    result = _task(spark_rt, task_id).result
    assert result is not None and result["metadata_only"] is True  # no file rewritten
    assert result["deleted_records"] == len(before) - len(after) > 0


def test_ttl_row_level_on_an_unpartitioned_table(scheduler, spark_rt: Runtime) -> None:  # type: ignore[no-untyped-def]
    _events_table(spark_rt, "events_u", partitioned=False, days=6)
    before = _rows(spark_rt, "events_u")
    task_id = manage(
        spark_rt,
        "events_u",
        {"ttl": {"enabled": True, "column": "ts", "retention_days": 2.25, "max_fraction": 0.9}},
        kind="ttl",
    )
    assert Worker(spark_rt).run_once()
    plan = _task(spark_rt, task_id).plan
    assert plan is not None and plan["level"] == "row"
    cutoff = datetime.fromisoformat(plan["cutoff"])
    assert run_one(scheduler) == "succeeded"
    assert _rows(spark_rt, "events_u") == [r for r in before if r[1] >= cutoff]


def test_ttl_is_held_when_every_row_is_past_retention(scheduler, spark_rt: Runtime) -> None:  # type: ignore[no-untyped-def]
    _events_table(spark_rt, "stale", partitioned=True, days=3, ago=3)  # writer stopped
    before = _rows(spark_rt, "stale")
    task_id = manage(
        spark_rt,
        "stale",
        {"ttl": {"enabled": True, "column": "ts", "retention_days": 1}},
        kind="ttl",
    )
    assert Worker(spark_rt).run_once()
    task = _task(spark_rt, task_id)
    assert task.state == "skipped" and (task.reason or "").startswith("held: every row")
    assert _rows(spark_rt, "stale") == before


def test_clean_expires_snapshots_and_rewrites_manifests_keeping_the_data(
    scheduler,
    spark_rt: Runtime,  # type: ignore[no-untyped-def]
) -> None:
    table = append_batches(make_table(spark_rt, name="churn"), 12)
    before = fingerprint(table)
    assert len(table.snapshots()) == 12
    time.sleep(1)
    task_id = manage(
        spark_rt,
        "churn",
        {
            "clean": {
                "keep_last_snapshots": 3,
                "max_snapshot_age_hours": 0.0001,
                "remove_orphans": False,
                "rewrite_manifests_min_count": 4,
            }
        },
        kind="clean",
    )
    assert Worker(spark_rt).run_once()
    plan = _task(spark_rt, task_id).plan
    assert plan is not None
    assert [a["name"] for a in plan["actions"]] == ["expire_snapshots", "rewrite_manifests"]
    assert run_one(scheduler) == "succeeded"

    table = spark_rt.catalog.load_table("sales.churn")
    after = fingerprint(table)
    assert (after.rows, after.checksum, after.data_files) == (
        before.rows,
        before.checksum,
        before.data_files,
    )
    # 12 snapshots, 3 kept, then rewrite_manifests adds one
    assert len(table.snapshots()) == 4
    assert len(table.current_snapshot().manifests(table.io)) < plan["manifests_before"]
    result = _task(spark_rt, task_id).result
    assert result is not None and result["rewritten_manifests"] == plan["manifests_before"]


def test_orphans_older_than_the_window_go_young_ones_and_live_files_stay(
    scheduler,
    spark_rt: Runtime,  # type: ignore[no-untyped-def]
) -> None:
    table = append_batches(make_table(spark_rt, name="orphans"), 3)
    before = fingerprint(table)
    live = next(iter(table.scan().plan_files())).file.file_path.removeprefix("file://")
    data_dir = Path(live).parent
    old_orphan, young_orphan = data_dir / "old-orphan.parquet", data_dir / "young-orphan.parquet"
    shutil.copy(live, old_orphan)
    shutil.copy(live, young_orphan)
    ten_days_ago = time.time() - 10 * 86400
    os.utime(old_orphan, (ten_days_ago, ten_days_ago))
    os.utime(live, (ten_days_ago, ten_days_ago))  # an old file that IS referenced
    task_id = manage(spark_rt, "orphans", {"clean": {"orphan_min_age_hours": 72}}, kind="clean")
    assert Worker(spark_rt).run_once()
    assert run_one(scheduler) == "succeeded"

    assert not old_orphan.exists()
    assert young_orphan.exists()  # inside the safety window
    assert Path(live).exists()  # referenced by a live snapshot
    result = _task(spark_rt, task_id).result
    assert result is not None and result["orphans_listed"] == 1 == result["orphans_removed"]
    assert result["orphans_sample"][0].endswith("old-orphan.parquet")
    after = fingerprint(spark_rt.catalog.load_table("sales.orphans"))
    assert (after.rows, after.checksum) == (before.rows, before.checksum)
