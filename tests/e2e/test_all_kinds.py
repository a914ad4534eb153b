"""Register a table with a full policy and let lakewarden keep it healthy by itself:
commits trigger compaction and Z-order, the leader's sweep triggers TTL and clean, the
workers plan and the scheduler runs everything on Spark. Checked with pyiceberg."""

from __future__ import annotations

import random
import time
from datetime import UTC, datetime, timedelta

import pyarrow as pa
import pytest
from conftest import serve
from sqlalchemy import select

from lakewarden.catalogs.catalog import TableRef
from lakewarden.db.models import Task
from lakewarden.db.session import transaction
from lakewarden.health.measure import measure
from lakewarden.runtime import Runtime
from lakewarden.tables import effective_policy_for, get_table
from services.scheduler.main import Scheduler
from services.scheduler.sweeps import sweep_due_tasks
from services.worker.main import Worker

pytestmark = pytest.mark.spark

SCHEMA = pa.schema(
    [
        pa.field("id", pa.int64(), nullable=False),
        pa.field("ts", pa.timestamp("us", tz="UTC"), nullable=False),
        pa.field("a", pa.int64(), nullable=False),
        pa.field("b", pa.int64(), nullable=False),
    ]
)


def test_a_full_policy_keeps_the_table_healthy_across_all_five_kinds(
    scheduler: Scheduler, spark_rt: Runtime
) -> None:
    from pyiceberg.transforms import DayTransform

    rng = random.Random(3)
    rt = spark_rt
    rt.catalog.create_namespace_if_not_exists("sales")
    table = rt.catalog.create_table("sales.everything", schema=SCHEMA)
    with table.update_spec() as spec:
        spec.add_field("ts", DayTransform(), "ts_day")
    now = datetime.now(UTC)
    next_id = 0
    for day in range(8, -1, -1):  # 9 days, 4 small commits a day
        start = (now - timedelta(days=day)).replace(hour=0, minute=0, second=0, microsecond=0)
        for _ in range(4):
            stamps = [
                min(now, start + timedelta(minutes=rng.randrange(24 * 60))) for _ in range(60)
            ]
            table = rt.catalog.load_table("sales.everything")
            table.append(
                pa.table(
                    {
                        "id": list(range(next_id, next_id + 60)),
                        "ts": stamps,
                        "a": [rng.randrange(1000) for _ in range(60)],
                        "b": [rng.randrange(1000) for _ in range(60)],
                    },
                    schema=SCHEMA,
                )
            )
            next_id += 60
    time.sleep(1)  # every snapshot older than clean.max_snapshot_age_hours below (0.36 s)
    rows_before = rt.catalog.load_table("sales.everything").scan().to_arrow().to_pylist()
    policy = {
        "compaction": {"min_small_files": 8, "min_input_files": 3, "priority": 10},
        "zorder": {
            "enabled": True,
            "columns": ["a", "b"],
            "min_changed_files": 5,
            "max_files_per_lookup": 1.5,
        },
        "ttl": {"enabled": True, "column": "ts", "retention_days": 5, "max_fraction": 0.8},
        "clean": {
            "keep_last_snapshots": 3,
            "max_snapshot_age_hours": 0.0001,
            "allow_below_safety_floors": True,
            "rewrite_manifests_min_count": 4,
            "orphan_min_age_hours": 24,
        },
    }
    with serve(rt) as client:
        r = client.post(
            "/api/v1/tables", json={"namespace": "sales", "name": "everything", "policy": policy}
        )
        assert r.status_code == 201, r.text
        with transaction(rt.engine) as s:
            row = get_table(s, "lake", TableRef("sales", "everything"))
            assert row is not None
            health_before = measure(
                rt.catalog.load_table("sales.everything"), effective_policy_for(s, row)
            )
        # Registration evaluated the table as it was: compaction is already due.
        assert client.get("/api/v1/tasks").json()["items"][0]["kind"] == "compaction"
        # More commits, reported by the writer: the commit-driven kinds evaluate them.
        for _ in range(6):
            table = rt.catalog.load_table("sales.everything")
            extra = {"id": next_id, "ts": now, "a": rng.randrange(1000), "b": rng.randrange(1000)}
            table.append(pa.table({k: [v] for k, v in extra.items()}, schema=SCHEMA))
            rows_before.append(extra)
            next_id += 1
        decision = client.post(
            "/api/v1/events", json={"namespace": "sales", "name": "everything"}
        ).json()["event"]
        assert decision["decision_detail"]["compaction"]["decision"] == "task-open"
        assert decision["decision_detail"]["zorder"]["decision"] == "task-created"
    fence = scheduler.fence
    assert fence is not None
    sweep_due_tasks(rt, fence, datetime.now(UTC))  # TTL and clean are due

    worker = Worker(rt)
    for _ in range(30):
        scheduler.renew()
        worked = worker.run_once()
        if scheduler.dispatch_once():
            (entry,) = scheduler.inflight.values()
            entry.future.result(timeout=300)
            worked = True
        if not worked:
            break
    with transaction(rt.engine) as s:
        tasks = {t.kind: t for t in s.scalars(select(Task).order_by(Task.id))}
    assert set(tasks) == {"compaction", "zorder", "ttl", "clean"}, set(tasks)
    summary = {k: (t.state, t.reason) for k, t in tasks.items()}
    assert all(t.state in ("succeeded", "skipped") for t in tasks.values()), summary
    assert tasks["ttl"].state == "succeeded" and tasks["compaction"].state == "succeeded"

    table = rt.catalog.load_table("sales.everything")
    ttl_plan = tasks["ttl"].plan
    assert ttl_plan is not None
    cutoff = datetime.fromisoformat(ttl_plan["cutoff"])
    kept = sorted((r["id"], r["ts"], r["a"], r["b"]) for r in rows_before if r["ts"] >= cutoff)
    after = sorted((r["id"], r["ts"], r["a"], r["b"]) for r in table.scan().to_arrow().to_pylist())
    assert after == kept  # exactly the expired rows are gone; every other row is intact
    with transaction(rt.engine) as s:
        row = get_table(s, "lake", TableRef("sales", "everything"))
        assert row is not None
        health_after = measure(table, effective_policy_for(s, row))
    print(
        f"health {health_before.score} -> {health_after.score}; data files "
        f"{health_before.data_files} -> {health_after.data_files}; snapshots "
        f"{health_before.snapshots['count']:.0f} -> {health_after.snapshots['count']:.0f}; "
        + "; ".join(f"{k}: {st}" for k, (st, _) in summary.items())
    )
    assert health_after.score > health_before.score
    assert health_after.data_files < health_before.data_files
