"""TTL and clean planned by a worker (pyiceberg) and run by the scheduler on Spark, on real
Iceberg tables, checked with pyiceberg: what goes, what stays, what was committed."""

from __future__ import annotations

import hashlib
import os
import shutil
import time
from datetime import UTC, date, datetime, timedelta
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
from helpers import append_batches, current, equal_to, make_table, manage, run_one, task_of

from lakewarden.fingerprint import fingerprint
from lakewarden.runtime import Runtime
from services.scheduler.main import Scheduler
from services.worker.main import Worker

pytestmark = pytest.mark.spark

ARROW_TYPES = {
    "timestamptz": pa.timestamp("us", tz="UTC"),
    "timestamp": pa.timestamp("us"),  # Iceberg `timestamp` (no zone)
    "date": pa.date32(),
}


def _events(
    rt: Runtime,
    name: str,
    column_type: str = "timestamptz",
    *,
    partitioned: bool,
    days: int = 10,
    ago: int = 0,
) -> Any:
    """Rows every two hours over `days` days ending `ago` days ago, one commit per day."""
    from pyiceberg.transforms import DayTransform

    schema = pa.schema(
        [
            pa.field("id", pa.int64(), nullable=False),
            pa.field("ts", ARROW_TYPES[column_type], nullable=False),
            pa.field("v", pa.string()),
        ]
    )
    rt.catalog.create_namespace_if_not_exists("sales")
    table = rt.catalog.create_table(f"sales.{name}", schema=schema)
    if partitioned:
        with table.update_spec() as spec:
            spec.add_field("ts", DayTransform(), "ts_day")
    now = datetime.now(UTC)
    next_id = 0
    for d in range(days + ago, ago - 1, -1):
        day = (now - timedelta(days=d)).replace(hour=0, minute=0, second=0, microsecond=0)
        stamps = [day + timedelta(hours=h) for h in range(0, 24, 2)]
        stamps = [s for s in stamps if s <= now]
        values: list[Any] = stamps
        if column_type == "timestamp":
            values = [s.replace(tzinfo=None) for s in stamps]
        elif column_type == "date":
            values = [s.date() for s in stamps]
        ids = list(range(next_id, next_id + len(stamps)))
        batch = {"id": ids, "ts": values, "v": [f"row-{i}" for i in ids]}
        rt.catalog.load_table(f"sales.{name}").append(pa.table(batch, schema=schema))
        next_id += len(stamps)
    return rt.catalog.load_table(f"sales.{name}")


def _utc(value: Any) -> datetime:
    """A ts value as pyarrow returns it (aware, naive or a date) as an aware UTC datetime."""
    if isinstance(value, datetime):
        return value if value.tzinfo else value.replace(tzinfo=UTC)
    assert isinstance(value, date)
    return datetime(value.year, value.month, value.day, tzinfo=UTC)


def _rows(rt: Runtime, name: str) -> list[tuple[int, datetime, str]]:
    data = rt.catalog.load_table(f"sales.{name}").scan().to_arrow().to_pylist()
    return sorted((r["id"], _utc(r["ts"]), r["v"]) for r in data)


def _digest(rows: list[tuple[int, datetime, str]]) -> str:
    return hashlib.sha256(repr(rows).encode()).hexdigest()


def _plan(rt: Runtime, task_id: int) -> dict[str, Any]:
    task = task_of(rt, task_id)
    assert task.state == "planned" and task.plan is not None, (task.state, task.reason)
    return task.plan


def _data_paths(table: Any) -> set[str]:
    return {t.file.file_path for t in table.refresh().scan().plan_files()}


# --- TTL -------------------------------------------------------------------------------


@pytest.mark.parametrize("column_type", ["timestamptz", "timestamp", "date"])
def test_ttl_partition_level_drops_whole_days_metadata_only(
    scheduler: Scheduler, spark_rt: Runtime, column_type: str
) -> None:
    name = f"tc_days_{column_type}"
    table = _events(spark_rt, name, column_type, partitioned=True)
    before, files_before = _rows(spark_rt, name), _data_paths(table)
    task_id = manage(
        spark_rt,
        name,
        {"ttl": {"enabled": True, "column": "ts", "retention_days": 3.5, "max_fraction": 0.9}},
        kind="ttl",
    )
    planned_at = datetime.now(UTC)
    assert Worker(spark_rt).run_once()
    plan = _plan(spark_rt, task_id)
    cutoff = datetime.fromisoformat(plan["cutoff"])
    retention = datetime.fromisoformat(plan["retention_cutoff"])
    assert (plan["level"], plan["transform"], plan["column_type"]) == (
        "partition",
        "day",
        column_type,
    )
    assert cutoff == cutoff.replace(hour=0, minute=0, second=0, microsecond=0) <= retention
    assert retention <= datetime.now(UTC) - timedelta(days=3.5)
    assert retention >= planned_at - timedelta(days=3.5, hours=24 if column_type == "date" else 0)
    assert run_one(scheduler) == "succeeded"

    after = _rows(spark_rt, name)
    kept = [r for r in before if r[1] >= cutoff]
    assert after == kept and len(after) < len(before)  # exactly the older rows are gone
    assert min(r[1] for r in after) >= cutoff
    assert _digest(after) == _digest(kept)  # every row kept is unchanged
    inside = [r for r in before if r[1] >= retention]  # inside retention when planned
    assert inside and set(inside) <= set(after)

    result = task_of(spark_rt, task_id).result
    assert result is not None
    assert result["deleted_records"] == len(before) - len(after) == plan["estimated_rows"]
    assert (result["added_data_files"], result["metadata_only"]) == (0, True)
    assert result["deleted_data_files"] == plan["files_entirely_expired"]
    table = spark_rt.catalog.load_table(f"sales.{name}")
    assert _data_paths(table) < files_before  # no file rewritten: a subset of the old ones
    snap = current(table)
    assert snap.snapshot_id == result["committed_snapshot_id"] and snap.summary is not None
    assert snap.summary.operation.value == "delete"
    assert snap.summary.get("added-data-files") in (None, "0")  # nothing written


def test_ttl_row_level_on_an_unpartitioned_table(scheduler: Scheduler, spark_rt: Runtime) -> None:
    _events(spark_rt, "tc_rows", partitioned=False, days=6)
    before = _rows(spark_rt, "tc_rows")
    # a retention that puts the cutoff at ~11:01 three days ago: inside that day's file
    now = datetime.now(UTC)
    eleven = (now - timedelta(days=3)).replace(hour=11, minute=0, second=0, microsecond=0)
    days = (now - eleven - timedelta(minutes=1)) / timedelta(days=1)
    task_id = manage(
        spark_rt,
        "tc_rows",
        {"ttl": {"enabled": True, "column": "ts", "retention_days": days, "max_fraction": 0.9}},
        kind="ttl",
    )
    assert Worker(spark_rt).run_once()
    plan = _plan(spark_rt, task_id)
    cutoff = datetime.fromisoformat(plan["cutoff"])
    assert plan["level"] == "row" and plan["cutoff"] == plan["retention_cutoff"]
    assert eleven < cutoff < eleven + timedelta(minutes=10)
    assert cutoff <= datetime.now(UTC) - timedelta(days=days)
    assert plan["files_straddling"] == 1  # one day's file is cut in two
    assert run_one(scheduler) == "succeeded"

    after = _rows(spark_rt, "tc_rows")
    assert after == [r for r in before if r[1] >= cutoff]  # exactly ts < cutoff went
    result = task_of(spark_rt, task_id).result
    assert result is not None and result["operation"] == "overwrite"
    assert result["deleted_records"] == len(before) - len(after) > 0
    # the straddling day's file was rewritten, keeping its rows inside retention
    straddler = [r for r in after if r[1].date() == cutoff.date()]
    assert result["rewritten_rows_kept"] == len(straddler) > 0
    snap = current(spark_rt.catalog.load_table("sales.tc_rows"))
    assert result["committed_snapshot_id"] == snap.snapshot_id
    assert result["metadata_only"] is False and result["added_data_files"] == 1


def test_ttl_is_held_when_every_row_is_past_retention(
    scheduler: Scheduler, spark_rt: Runtime
) -> None:
    table = _events(spark_rt, "tc_stale", partitioned=True, days=3, ago=3)  # writer stopped
    before = fingerprint(table)
    task_id = manage(
        spark_rt,
        "tc_stale",
        {
            "ttl": {
                "enabled": True,
                "column": "ts",
                "retention_days": 1,
                "max_fraction": 1.0,
                "allow_below_safety_floors": True,
            }
        },
        kind="ttl",
    )
    assert Worker(spark_rt).run_once()
    task = task_of(spark_rt, task_id)
    assert task.state == "skipped" and task.plan is None
    assert (task.reason or "").startswith("held: every row is older than the retention")
    assert fingerprint(spark_rt.catalog.load_table("sales.tc_stale")) == before  # untouched


# --- clean -------------------------------------------------------------------------------


def test_clean_expires_old_snapshots_keeping_the_last_and_tagged_ones(
    scheduler: Scheduler, spark_rt: Runtime
) -> None:
    table = append_batches(make_table(spark_rt, name="tc_churn"), 12)
    ids = [s.snapshot_id for s in sorted(table.snapshots(), key=lambda s: s.timestamp_ms)]
    assert len(ids) == 12
    table.manage_snapshots().create_tag(ids[1], "audit").commit()
    before = fingerprint(table)
    time.sleep(1)  # older than max_snapshot_age_hours below (0.36 s)
    task_id = manage(
        spark_rt,
        "tc_churn",
        {
            "clean": {
                "keep_last_snapshots": 3,
                "max_snapshot_age_hours": 0.0001,
                "allow_below_safety_floors": True,
                "remove_orphans": False,
                "rewrite_manifests_min_count": 1000,
            }
        },
        kind="clean",
    )
    assert Worker(spark_rt).run_once()
    plan = _plan(spark_rt, task_id)
    (expire,) = plan["actions"]
    assert expire["name"] == "expire_snapshots" and expire["retain_last"] == 3
    assert expire["expected_expired"] == 8  # 12, minus the last 3 and the tagged one
    assert {"name": "audit", "type": "tag", "snapshot_id": ids[1]} in plan["refs"]
    assert run_one(scheduler) == "succeeded"

    table = spark_rt.catalog.load_table("sales.tc_churn")
    left = {s.snapshot_id for s in table.snapshots()}
    assert left == {*ids[-3:], ids[1]} and len(left) == expire["expected_snapshots_after"]
    assert current(table).snapshot_id == ids[-1] == before.snapshot_id
    assert fingerprint(table) == before  # the data, file for file
    result = task_of(spark_rt, task_id).result
    assert result is not None and result["committed_snapshot_id"] is None  # no new snapshot
    assert result["expire_snapshots"]["deleted_manifest_lists_count"] == 8
    assert result["expired_data_files"] == 0  # appends only: every data file is still live


def test_orphans_older_than_the_window_go_young_ones_and_live_files_stay(
    scheduler: Scheduler, spark_rt: Runtime
) -> None:
    table = append_batches(make_table(spark_rt, name="tc_orphans"), 3)
    first = current(table).snapshot_id
    live = sorted(p.removeprefix("file://") for p in _data_paths(table))
    table.delete(equal_to("region", "a"))  # region a's files: now only in older snapshots
    table = table.refresh()
    before, first_rows = fingerprint(table), table.scan(snapshot_id=first).to_arrow().num_rows
    assert len(_data_paths(table)) < len(live)
    data_dir = Path(live[0]).parent
    old_orphan, young_orphan = data_dir / "old-orphan.parquet", data_dir / "young-orphan.parquet"
    shutil.copy(live[0], old_orphan)
    shutil.copy(live[0], young_orphan)
    ten_days_ago = time.time() - 10 * 86400
    os.utime(old_orphan, (ten_days_ago, ten_days_ago))
    for path in live:  # old files that ARE referenced, by the current or an older snapshot
        os.utime(path, (ten_days_ago, ten_days_ago))
    task_id = manage(spark_rt, "tc_orphans", {"clean": {"orphan_min_age_hours": 72}}, kind="clean")
    assert Worker(spark_rt).run_once()
    plan = _plan(spark_rt, task_id)
    assert [a["name"] for a in plan["actions"]] == ["remove_orphan_files"]
    assert run_one(scheduler) == "succeeded"

    assert not old_orphan.exists()
    assert young_orphan.exists()  # inside the safety window
    assert all(Path(p).exists() for p in live)  # referenced by a live snapshot
    table = spark_rt.catalog.load_table("sales.tc_orphans")
    assert table.scan(snapshot_id=first).to_arrow().num_rows == first_rows == 30  # time travel
    result = task_of(spark_rt, task_id).result
    assert result is not None
    orphans = result["remove_orphan_files"]
    assert {k: orphans[k] for k in ("dry_run_count", "removed_count")} == {
        "dry_run_count": 1,
        "removed_count": 1,
    }
    assert orphans["removed_not_in_dry_run"] == []
    # judged on both clocks; here they agree, so the planned cutoff stands
    assert (
        orphans["older_than"] == orphans["planned_older_than"] == plan["actions"][0]["older_than"]
    )
    assert abs(orphans["storage_clock_behind_s"]) < 60
    assert [Path(p).name for p in result["orphans_sample"]] == ["old-orphan.parquet"]
    assert fingerprint(spark_rt.catalog.load_table("sales.tc_orphans")) == before


def test_rewrite_manifests_leaves_fewer_manifests_and_the_same_data(
    scheduler: Scheduler, spark_rt: Runtime
) -> None:
    table = append_batches(make_table(spark_rt, name="tc_manifests"), 12)
    manifests_before = len(current(table).manifests(table.io))
    assert manifests_before == 12  # one per append
    before = fingerprint(table)
    task_id = manage(
        spark_rt,
        "tc_manifests",
        {
            "clean": {
                "rewrite_manifests_min_count": 2,
                "keep_last_snapshots": 100,
                "remove_orphans": False,
            }
        },
        kind="clean",
    )
    assert Worker(spark_rt).run_once()
    plan = _plan(spark_rt, task_id)
    assert [a["name"] for a in plan["actions"]] == ["rewrite_manifests"]
    assert plan["manifests_before"] == 12 and plan["expected_manifests_after"] == 1
    assert run_one(scheduler) == "succeeded"

    table = spark_rt.catalog.load_table("sales.tc_manifests")
    manifests_after = len(current(table).manifests(table.io))
    assert manifests_after < manifests_before
    after = fingerprint(table)
    assert (after.rows, after.checksum, after.data_files) == (
        before.rows,
        before.checksum,
        before.data_files,
    )
    result = task_of(spark_rt, task_id).result
    assert result is not None and result["rewritten_manifests"] == 12
    assert result["added_manifests"] == manifests_after
    assert result["committed_snapshot_id"] == after.snapshot_id
    summary = current(table).summary
    assert summary is not None and summary.operation.value == "replace"
