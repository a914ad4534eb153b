"""Orphan removal on its own interval, and hard quotas of Spark minutes per hour, on the real
stack: a clean run on real Spark + Iceberg, dispatch on real Postgres, a real job once the
quota has room."""

from __future__ import annotations

import re
from typing import Any

import pytest
from conftest import serve
from helpers import append_batches, make_table, manage, run_one, task_of
from sqlalchemy import text

from lakewarden.db.session import transaction
from lakewarden.runtime import Runtime
from lakewarden.tasks import repo
from services.scheduler.main import Scheduler
from services.worker.main import Worker

pytestmark = pytest.mark.spark


def _table_id(rt: Runtime, task_id: int) -> int:
    return task_of(rt, task_id).table_id


def test_clean_removes_orphans_once_per_orphan_interval(
    scheduler: Scheduler, spark_rt: Runtime
) -> None:
    append_batches(make_table(spark_rt, name="qo_orphans"), 3)
    policy = {"clean": {"keep_last_snapshots": 100, "rewrite_manifests_min_count": 1000}}
    first = manage(spark_rt, "qo_orphans", policy, kind="clean")
    assert Worker(spark_rt).run_once()
    plan = task_of(spark_rt, first).plan
    assert plan is not None and [a["name"] for a in plan["actions"]] == ["remove_orphan_files"]
    assert plan["orphan_removal"] == "orphan removal due: never ran on this table"
    assert run_one(scheduler) == "succeeded"

    # The next clean task within orphan_interval_minutes (default: a day) lists nothing.
    with transaction(spark_rt.engine) as s:
        second = repo.create_task(
            s,
            table_id=_table_id(spark_rt, first),
            kind="clean",
            trigger={"reason": "test"},
            actor="test",
        )
    assert second is not None and Worker(spark_rt).run_once()
    task = task_of(spark_rt, second)
    assert task.state == "skipped", task.reason
    assert re.search(
        r"orphan removal not due: last ran \S+, orphan_interval_minutes 1440; next due at ",
        task.reason or "",
    ), task.reason
    with serve(spark_rt) as client:
        explained = client.get(
            f"/api/v1/catalogs/{spark_rt.settings.catalog_name}/tables/sales/qo_orphans/explain"
        ).json()
    orphans = explained["orphan_removal"]
    assert (orphans["due"], orphans["interval_minutes"]) == (False, 1440)
    assert orphans["next_due"] is not None and orphans["reason"] in (task.reason or "")


def _used_earlier(rt: Runtime, table_id: int, minutes_ago: float, minutes: float) -> None:
    """A finished clean run of the table, `minutes` long, that started `minutes_ago`."""
    with rt.engine.begin() as conn:
        task_id = conn.execute(
            text(
                "INSERT INTO tasks (table_id, kind, state, trigger) "
                "VALUES (:t, 'clean', 'succeeded', '{}') RETURNING id"
            ),
            {"t": table_id},
        ).scalar_one()
        conn.execute(
            text(
                "INSERT INTO job_runs (task_id, attempt, state, scheduler_id, leader_epoch, "
                "started_at, finished_at) VALUES (:id, 1, 'succeeded', 'test', 1, "
                "now() - make_interval(secs => :ago * 60), "
                "now() - make_interval(secs => (:ago - :used) * 60))"
            ),
            {"id": task_id, "ago": minutes_ago, "used": minutes},
        )


def test_a_task_past_its_quota_waits_and_says_until_when(
    scheduler: Scheduler, spark_rt: Runtime, monkeypatch: pytest.MonkeyPatch
) -> None:
    append_batches(make_table(spark_rt, name="qo_quota"), 6)
    policy: dict[str, Any] = {
        "compaction": {"min_small_files": 5, "min_input_files": 5},
        "quota": {"spark_minutes_per_hour": 10},
    }
    task_id = manage(spark_rt, "qo_quota", policy)
    assert Worker(spark_rt).run_once()
    table_id = _table_id(spark_rt, task_id)
    _used_earlier(spark_rt, table_id, minutes_ago=30, minutes=12.3)
    monkeypatch.setattr(spark_rt.settings, "pool_quotas", {"default": 60})

    scheduler.renew()
    assert not scheduler.dispatch_once()  # the only planned task is over its table's quota
    assert task_of(spark_rt, task_id).state == "planned"
    waiting = (
        r"waiting: table sales\.qo_quota used 12\.3 of 10 Spark minutes in the last hour; "
        r"next slot ~\d\d:\d\d UTC"
    )
    with serve(spark_rt) as client:
        on_hold = client.get(f"/api/v1/tasks/{task_id}").json()["on_hold"]
        explained = client.get(
            f"/api/v1/catalogs/{spark_rt.settings.catalog_name}/tables/sales/qo_quota/explain"
        ).json()
    assert re.fullmatch(waiting, on_hold), on_hold
    quota = explained["quota"]
    assert quota["table"]["over"] and quota["table"]["waiting"] == on_hold
    assert quota["pools"]["default"]["over"] is False  # 12.3 of 60
    assert f"it would not start now: {on_hold}" in explained["kinds"]["compaction"]["reason"]

    # Under the table's quota, over the pool's: still waiting, now for the pool.
    with spark_rt.engine.begin() as conn:
        conn.execute(
            text(
                "UPDATE job_runs SET finished_at = started_at + interval '5 minutes' "
                "WHERE scheduler_id = 'test'"
            )
        )
    monkeypatch.setattr(spark_rt.settings, "pool_quotas", {"default": 4})
    assert not scheduler.dispatch_once()
    with serve(spark_rt) as client:
        on_hold = client.get(f"/api/v1/tasks/{task_id}").json()["on_hold"]
    assert on_hold.startswith("waiting: pool default used 5.0 of 4 Spark minutes"), on_hold

    monkeypatch.setattr(spark_rt.settings, "pool_quotas", {"default": 10})
    assert run_one(scheduler) == "succeeded"  # room again: a real job on Spark
    result = task_of(spark_rt, task_id).result
    assert result is not None and result["committed_snapshot_id"] is not None
