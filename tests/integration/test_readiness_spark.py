"""Partition readiness end to end on a real day-partitioned Iceberg table: the writer's
watermark makes a day complete, the compaction readiness asks for runs on Spark, the day
becomes ready (tagged, recorded, a partition_ready notification on the webhook), and a late
write un-readies it, saying which commit did."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import pyarrow as pa
import pytest
from helpers import Receiver, run_one
from sqlalchemy import select

from lakewarden.db.models import ManagedTable, Task
from lakewarden.db.session import transaction
from lakewarden.runtime import Runtime
from lakewarden.states import TaskState
from services.scheduler.main import Scheduler
from services.scheduler.readiness import readiness_round
from services.worker.main import Worker

pytestmark = pytest.mark.spark

SCHEMA = pa.schema(
    [
        pa.field("id", pa.int64(), nullable=False),
        pa.field("ts", pa.timestamp("us", tz="UTC"), nullable=False),
    ]
)
PATH = "/api/v1/tables/sales/ready_days"


def _append(table: Any, stamps: list[datetime], start: int) -> Any:
    ids = list(range(start, start + len(stamps)))
    table.append(pa.table({"id": ids, "ts": stamps}, schema=SCHEMA))
    return table.refresh()


def _round(rt: Runtime, scheduler: Scheduler) -> int:
    fence = scheduler.leading()
    assert fence is not None
    return readiness_round(rt, fence, datetime.now(UTC))


def test_a_day_becomes_ready_after_its_watermark_and_compaction_and_a_late_write_unreadies_it(
    scheduler: Scheduler, spark_rt: Runtime, monkeypatch: pytest.MonkeyPatch
) -> None:
    from conftest import serve
    from pyiceberg.transforms import DayTransform

    receiver = Receiver()
    monkeypatch.setattr(spark_rt.settings, "alert_webhook_url", receiver.url + "/hook")
    spark_rt.catalog.create_namespace_if_not_exists("sales")
    table = spark_rt.catalog.create_table("sales.ready_days", schema=SCHEMA)
    with table.update_spec() as spec:
        spec.add_field("ts", DayTransform(), "ts_day")
    table = table.refresh()
    day = (datetime.now(UTC) - timedelta(days=3)).replace(hour=0, minute=0, second=0, microsecond=0)
    label, end = day.date().isoformat(), day + timedelta(days=1)
    today = datetime.now(UTC).replace(minute=0, second=0, microsecond=0)
    for i in range(6):  # six small files in the day, six in today
        table = _append(table, [day + timedelta(hours=i), today], start=i * 10)

    policy = {
        "compaction": {"min_small_files": 5, "min_input_files": 5},
        "readiness": {
            "enabled": True,
            "partition": "ts",
            "rule": "watermark",
            "require": ["compaction"],
            "tag": True,
            "tag_retention_days": 3,
        },
    }
    with transaction(spark_rt.engine) as s:
        row = ManagedTable(
            catalog=spark_rt.settings.catalog_name,
            namespace="sales",
            name="ready_days",
            policy=policy,
        )
        s.add(row)
        s.flush()
        table_id = row.id

    with serve(spark_rt) as client:
        # Bad input is a 4xx that says what to fix.
        naive = client.post(
            f"{PATH}/watermark", json={"watermark": end.replace(tzinfo=None).isoformat()}
        )
        assert naive.status_code == 422 and "timezone" in naive.text
        future = client.post(
            f"{PATH}/watermark", json={"watermark": (today + timedelta(days=2)).isoformat()}
        )
        assert future.status_code == 422 and "in the future" in future.text
        posted = client.post(f"{PATH}/watermark", json={"watermark": end.isoformat()})
        assert posted.status_code == 200, posted.text
        back = client.post(f"{PATH}/watermark", json={"watermark": day.isoformat()})
        assert back.status_code == 409 and "only moves forward" in back.text

        # The day is complete but compaction has not looked at it: readiness opens a task.
        assert _round(spark_rt, scheduler) == 0
        waiting = client.get(f"{PATH}/partitions", params={"ready": "false"}).json()["items"]
        assert {p["partition"] for p in waiting} == {label, today.date().isoformat()}
        (mine,) = [p for p in waiting if p["partition"] == label]
        assert "compaction to run on it since its last commit" in mine["reason"]
        explained = client.get(f"{PATH}/explain").json()["readiness"]
        (explain_day,) = [p for p in explained["partitions"] if p["partition"] == label]
        assert not explain_day["would_become_ready"]
        assert explain_day["waiting_for"] == [
            f"compaction to run on it since its last commit {mine['last_commit_snapshot_id']}"
        ]
        with transaction(spark_rt.engine) as s:
            (task,) = s.scalars(select(Task).where(Task.table_id == table_id)).all()
            assert task.kind == "compaction" and task.trigger["source"] == "readiness"

        # Compaction runs on Spark; the next round makes the day ready (not today: the
        # watermark has not reached its end).
        assert Worker(spark_rt).run_once()
        assert run_one(scheduler) == TaskState.SUCCEEDED
        assert (
            client.get(f"{PATH}/explain")
            .json()["readiness"]["summary"]
            .startswith(f"would become ready now: {label}")
        )
        assert _round(spark_rt, scheduler) == 1
        (ready,) = client.get(f"{PATH}/partitions", params={"ready": "true"}).json()["items"]
        table = table.refresh()
        snapshot = table.current_snapshot()
        assert snapshot is not None and snapshot.summary is not None
        assert snapshot.summary.operation.value == "replace"  # the compaction's commit
        assert ready["partition"] == label and ready["tag"] == f"ready-{label}"
        assert ready["snapshot_id"] == snapshot.snapshot_id
        assert ready["reason"].startswith(f"complete: watermark {end.isoformat()}")
        tag = table.refs()[f"ready-{label}"]  # pyiceberg reads the tag on that snapshot
        assert tag.snapshot_id == snapshot.snapshot_id
        # Kept 3 days from the tagging: Iceberg counts from the snapshot's commit, so its age
        # (the seconds since the compaction committed) is added.
        kept = tag.max_ref_age_ms
        assert kept is not None and 3 * 24 * 3600 * 1000 < kept < (3 * 24 + 1) * 3600 * 1000
        ((path, sent),) = receiver.received
        assert path == "/hook" and sent["type"] == "notification"
        assert sent["event"] == "partition_ready"
        assert sent["details"]["partition"] == label and sent["details"]["tag"] == f"ready-{label}"

        # A late write into the day: it is not ready any more, and says which commit did.
        table = _append(table, [day + timedelta(hours=20)], start=1000)
        late = table.current_snapshot()
        assert late is not None
        assert _round(spark_rt, scheduler) == 1
        ids = {p["partition"]: p for p in client.get(f"{PATH}/partitions").json()["items"]}
        after = ids[label]
        assert not after["ready"] and after["since"] is None
        assert after["unready_reason"].startswith(f"late commit {late.snapshot_id} at ") and after[
            "unready_reason"
        ].endswith(f"touched partition {label}")
        assert after["last_commit_snapshot_id"] == late.snapshot_id
        assert [b["event"] for _, b in receiver.received] == [
            "partition_ready",
            "partition_unready",
        ]
        assert receiver.received[1][1]["details"]["reason"] == after["unready_reason"]
        assert table.refs()[f"ready-{label}"].snapshot_id == snapshot.snapshot_id  # kept
    receiver.close()
