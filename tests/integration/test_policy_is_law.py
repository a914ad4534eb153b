"""The policy is law, on the real stack: API → worker (pyiceberg) → scheduler → Spark, every
result read back with pyiceberg. A disabled kind never runs; a task planned under an old
policy never runs under it; destructive guards judge exact counts; a TTL leaves an undo
path; clean keeps what every branch and tag needs; orphan ages use the storage's clock."""

from __future__ import annotations

import os
import shutil
import time
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
from conftest import serve
from fastapi.testclient import TestClient
from helpers import manage, run_one, task_of
from sqlalchemy import text

from lakewarden.db.session import transaction
from lakewarden.jobs.execute import policy_check
from lakewarden.kinds import clean, ttl
from lakewarden.outcomes import PolicyChanged
from lakewarden.runtime import Runtime
from lakewarden.spark.commits import guarded_by
from services.scheduler.main import Scheduler
from services.worker.main import Worker

pytestmark = pytest.mark.spark

SCHEMA = pa.schema(
    [
        pa.field("id", pa.int64(), nullable=False),
        pa.field("ts", pa.timestamp("us", tz="UTC"), nullable=False),
    ]
)
NO_EVENTS = {"compaction": {"enabled": False}}  # registration must not start other work


def _table(rt: Runtime, name: str, ages_days: list[float], namespace: str = "sales") -> Any:
    """One commit (one file, unpartitioned) with one row per age."""
    rt.catalog.create_namespace_if_not_exists(namespace)
    table = rt.catalog.create_table(f"{namespace}.{name}", schema=SCHEMA)
    now = datetime.now(UTC)
    table.append(
        pa.table(
            {
                "id": list(range(len(ages_days))),
                "ts": [now - timedelta(days=a) for a in ages_days],
            },
            schema=SCHEMA,
        )
    )
    return rt.catalog.load_table(f"{namespace}.{name}")


def _count(rt: Runtime, name: str, snapshot_id: int | None = None, ns: str = "sales") -> int:
    table = rt.catalog.load_table(f"{ns}.{name}")
    return table.scan(snapshot_id=snapshot_id).to_arrow().num_rows


def _set_policy_in_db(rt: Runtime, name: str, policy: dict[str, Any]) -> None:
    """Change a policy behind the API's back, as a namespace default or an old replica
    would: only the later checks (dispatch, the job) can catch it."""
    import json

    with rt.engine.begin() as conn:
        conn.execute(
            text(
                "UPDATE managed_tables SET policy = CAST(:p AS jsonb), "
                "policy_version = policy_version + 1 WHERE name = :n"
            ),
            {"p": json.dumps(policy), "n": name},
        )


@pytest.fixture
def api(spark_rt: Runtime, scheduler: Scheduler) -> Iterator[TestClient]:
    with serve(spark_rt) as c:
        yield c


def _ttl(enabled: bool, **more: Any) -> dict[str, Any]:
    return {**NO_EVENTS, "ttl": {"enabled": enabled, "column": "ts", "retention_days": 10, **more}}


# --- a disabled kind never runs ---------------------------------------------------------


def test_triggering_a_disabled_ttl_is_refused_and_deletes_nothing(
    api: TestClient, spark_rt: Runtime
) -> None:
    _table(spark_rt, "pl_off", [1] * 60 + [20] * 40)
    body = {"namespace": "sales", "name": "pl_off", "policy": _ttl(False)}
    assert api.post("/api/v1/tables", json=body).status_code == 201

    r = api.post("/api/v1/tables/sales/pl_off/tasks", json={"kind": "ttl"})
    assert r.status_code == 409, r.text
    assert "ttl is disabled" in r.json()["detail"] and "override_disabled" in r.json()["detail"]
    assert not Worker(spark_rt).run_once()  # nothing was queued
    assert _count(spark_rt, "pl_off") == 100


def test_an_explicit_override_runs_once_and_is_recorded(
    api: TestClient, scheduler: Scheduler, spark_rt: Runtime
) -> None:
    _table(spark_rt, "pl_override", [1] * 60 + [20] * 40)
    body = {"namespace": "sales", "name": "pl_override", "policy": _ttl(False)}
    assert api.post("/api/v1/tables", json=body).status_code == 201
    r = api.post(
        "/api/v1/tables/sales/pl_override/tasks", json={"kind": "ttl", "override_disabled": True}
    )
    assert r.status_code == 201, r.text
    task = r.json()
    assert task["trigger"]["override_disabled"]["by"] == "token:test-admin"  # the caller
    assert "overriding the disabled ttl" in task["trigger"]["reason"]
    assert Worker(spark_rt).run_once()
    assert run_one(scheduler) == "succeeded"
    assert _count(spark_rt, "pl_override") == 60


def test_disabling_a_kind_cancels_its_planned_task(
    api: TestClient, scheduler: Scheduler, spark_rt: Runtime
) -> None:
    _table(spark_rt, "pl_change", [1] * 60 + [20] * 40)
    body = {"namespace": "sales", "name": "pl_change", "policy": _ttl(True)}
    assert api.post("/api/v1/tables", json=body).status_code == 201
    task_id = api.post("/api/v1/tables/sales/pl_change/tasks", json={"kind": "ttl"}).json()["id"]
    assert Worker(spark_rt).run_once()
    assert task_of(spark_rt, task_id).state == "planned"

    r = api.put("/api/v1/tables/sales/pl_change/policy", json=_ttl(False))
    assert r.status_code == 200, r.text
    task = task_of(spark_rt, task_id)
    assert task.state == "cancelled"
    assert "policy changed: ttl is disabled" in (task.reason or "")
    scheduler.renew()
    assert not scheduler.dispatch_once()
    assert _count(spark_rt, "pl_change") == 100


def test_namespace_defaults_bind_the_open_tasks_of_every_table_in_it(
    api: TestClient, spark_rt: Runtime
) -> None:
    _table(spark_rt, "t", [1] * 60 + [20] * 40, namespace="pl_ns")
    ttl_on = {"enabled": True, "column": "ts", "retention_days": 10}
    ns_on = {**NO_EVENTS, "ttl": ttl_on}
    assert api.put("/api/v1/namespaces/pl_ns/policy", json=ns_on).status_code == 200
    # the table sets nothing of its own: all it does comes from the namespace
    assert api.post("/api/v1/tables", json={"namespace": "pl_ns", "name": "t"}).status_code == 201
    task_id = api.post("/api/v1/tables/pl_ns/t/tasks", json={"kind": "ttl"}).json()["id"]
    assert Worker(spark_rt).run_once()
    assert task_of(spark_rt, task_id).state == "planned"

    ns_off = {**NO_EVENTS, "ttl": {**ttl_on, "enabled": False}}
    assert api.put("/api/v1/namespaces/pl_ns/policy", json=ns_off).status_code == 200
    task = task_of(spark_rt, task_id)
    assert task.state == "cancelled", task.reason
    assert "ttl is disabled" in (task.reason or "")
    assert "namespace defaults v2" in (task.reason or "")
    assert _count(spark_rt, "t", ns="pl_ns") == 100


def test_dispatch_refuses_a_task_planned_under_an_older_policy(
    scheduler: Scheduler, spark_rt: Runtime
) -> None:
    _table(spark_rt, "pl_dispatch", [1] * 60 + [20] * 40)
    task_id = manage(spark_rt, "pl_dispatch", _ttl(True), kind="ttl")
    assert Worker(spark_rt).run_once()
    assert task_of(spark_rt, task_id).plan["policy"]["digest"]  # type: ignore[index]

    _set_policy_in_db(spark_rt, "pl_dispatch", _ttl(False))
    scheduler.renew()
    assert scheduler.dispatch_once()  # it looked at the task...
    assert not scheduler.inflight  # ...and ran nothing
    task = task_of(spark_rt, task_id)
    assert task.state == "cancelled"
    assert "not dispatched: ttl is disabled by the current policy" in (task.reason or "")
    assert _count(spark_rt, "pl_dispatch") == 100


def test_changed_settings_are_replanned_before_anything_runs(
    scheduler: Scheduler, spark_rt: Runtime
) -> None:
    _table(spark_rt, "pl_replan", [1] * 50 + [7] * 30 + [20] * 20)
    task_id = manage(spark_rt, "pl_replan", _ttl(True, retention_days=5), kind="ttl")
    assert Worker(spark_rt).run_once()
    assert task_of(spark_rt, task_id).plan["rows_to_delete"] == 50  # type: ignore[index]

    _set_policy_in_db(spark_rt, "pl_replan", _ttl(True, retention_days=10))
    scheduler.renew()
    assert scheduler.dispatch_once() and not scheduler.inflight
    task = task_of(spark_rt, task_id)
    assert task.state == "pending" and task.plan is None
    assert "policy changed since this task was planned" in (task.reason or "")
    assert Worker(spark_rt).run_once()
    assert task_of(spark_rt, task_id).plan["rows_to_delete"] == 20  # type: ignore[index]
    assert run_one(scheduler) == "succeeded"
    assert _count(spark_rt, "pl_replan") == 80  # the 7-day-old rows stay: retention 10 now


def test_the_job_asks_the_policy_again_right_before_it_deletes(
    scheduler: Scheduler, spark: Any, spark_rt: Runtime
) -> None:
    _table(spark_rt, "pl_guard", [1] * 60 + [20] * 40)
    task_id = manage(spark_rt, "pl_guard", _ttl(True), kind="ttl")
    assert Worker(spark_rt).run_once()
    plan = task_of(spark_rt, task_id).plan
    assert plan is not None
    with transaction(spark_rt.engine) as s:  # as if dispatched
        s.execute(text("UPDATE tasks SET state = 'running' WHERE id = :i"), {"i": task_id})
    _set_policy_in_db(spark_rt, "pl_guard", _ttl(False))  # disabled while the job runs

    with guarded_by(policy_check(scheduler.rt, task_id)), pytest.raises(PolicyChanged) as exc:
        ttl.run(spark, spark_rt.settings.catalog_name, ttl_ref("pl_guard"), plan)
    assert exc.value.cancel and "ttl is disabled" in str(exc.value)
    assert _count(spark_rt, "pl_guard") == 100
    table = spark_rt.catalog.load_table("sales.pl_guard")
    assert not [n for n in table.metadata.refs if n.startswith("lakewarden-pre-ttl")]


def ttl_ref(name: str) -> Any:
    from lakewarden.catalogs.catalog import TableRef

    return TableRef("sales", name)


# --- destructive guards judge exact numbers ---------------------------------------------


def test_the_hold_judges_exact_counts_where_the_estimate_is_too_low(
    scheduler: Scheduler, spark_rt: Runtime
) -> None:
    # one file spanning 29 days: a linear estimate says ~66 % is past 10 days; 99 % is
    _table(spark_rt, "pl_exact_low", [29] * 99 + [0.05])
    task_id = manage(spark_rt, "pl_exact_low", _ttl(True, max_fraction=0.7), kind="ttl")
    assert Worker(spark_rt).run_once()
    task = task_of(spark_rt, task_id)
    assert task.state == "skipped", task.plan
    assert (task.reason or "").startswith("held: would remove 99.0% > max_fraction 70%")
    assert "exact counts" in (task.reason or "")
    assert _count(spark_rt, "pl_exact_low") == 100


def test_exact_counts_let_through_what_the_estimate_would_hold(
    scheduler: Scheduler, spark_rt: Runtime
) -> None:
    # the same span, the other way round: ~66 % estimated, 1 % really past retention
    _table(spark_rt, "pl_exact_high", [29] + [0.05] * 99)
    task_id = manage(spark_rt, "pl_exact_high", _ttl(True), kind="ttl")
    assert Worker(spark_rt).run_once()
    plan = task_of(spark_rt, task_id).plan
    assert plan is not None and plan["rows_to_delete"] == 1 and plan["rows_before"] == 100
    assert run_one(scheduler) == "succeeded"
    assert _count(spark_rt, "pl_exact_high") == 99


def test_the_job_counts_again_and_holds_when_writers_changed_the_numbers(
    scheduler: Scheduler, spark_rt: Runtime
) -> None:
    table = _table(spark_rt, "pl_recount", [1] * 70 + [20] * 30)
    task_id = manage(spark_rt, "pl_recount", _ttl(True), kind="ttl")
    assert Worker(spark_rt).run_once()
    assert task_of(spark_rt, task_id).plan["rows_to_delete"] == 30  # type: ignore[index]
    now = datetime.now(UTC)  # a backfill of old rows lands between planning and running
    table.append(
        pa.table({"id": list(range(100, 160)), "ts": [now - timedelta(days=30)] * 60}, SCHEMA)
    )
    assert run_one(scheduler) == "skipped"
    task = task_of(spark_rt, task_id)
    assert (task.reason or "").startswith("held: the delete would remove 90 of 160 rows")
    assert task.result is not None and task.result["counted_rows"] == 90
    assert _count(spark_rt, "pl_recount") == 160


def test_a_ttl_leaves_an_undo_tag_and_reports_what_it_really_deleted(
    scheduler: Scheduler, spark: Any, spark_rt: Runtime
) -> None:
    # a fresh and a future-dated row no longer defeat the hold: 500 old rows of 510 is held
    table = _table(spark_rt, "pl_undo", [30] * 500 + [0.01] * 9 + [-1])
    held = manage(spark_rt, "pl_undo", _ttl(True, max_fraction=0.9), kind="ttl")
    assert Worker(spark_rt).run_once()
    assert (task_of(spark_rt, held).reason or "").startswith("held: would remove 98.0%")

    pre = table.current_snapshot().snapshot_id
    with transaction(spark_rt.engine) as s:
        s.execute(text("DELETE FROM managed_tables WHERE name = 'pl_undo'"))
    task_id = manage(spark_rt, "pl_undo", _ttl(True, max_fraction=0.99), kind="ttl")
    assert Worker(spark_rt).run_once()
    assert run_one(scheduler) == "succeeded"
    assert _count(spark_rt, "pl_undo") == 10
    result = task_of(spark_rt, task_id).result
    assert result is not None
    assert result["deleted_records"] == result["counted_rows"] == 500

    table = spark_rt.catalog.load_table("sales.pl_undo")
    tag = table.metadata.refs[f"lakewarden-pre-ttl-{task_id}"]
    assert tag.snapshot_id == pre and result["undo"]["snapshot_id"] == pre
    assert tag.max_ref_age_ms is not None and tag.max_ref_age_ms >= 7 * 86400 * 1000
    assert _count(spark_rt, "pl_undo", snapshot_id=pre) == 510

    # The TTL-then-clean pair: the most aggressive clean the floors allow (and then some)
    # expires and deletes what no ref needs, but the undo tag keeps the rows' files.
    data = Path(_files_of(table, pre)[0]).parent
    old = time.time() - 10 * 86400
    for f in data.parent.rglob("*"):
        os.utime(f, (old, old))
    with transaction(spark_rt.engine) as s:
        s.execute(text("DELETE FROM managed_tables WHERE name = 'pl_undo'"))
    aggressive = {
        "clean": {
            "keep_last_snapshots": 1,
            "max_snapshot_age_hours": 0.0001,
            "allow_below_safety_floors": True,
            "orphan_min_age_hours": 24,
        }
    }
    clean_id = manage(spark_rt, "pl_undo", aggressive, kind="clean")
    assert Worker(spark_rt).run_once()
    assert run_one(scheduler) == "succeeded"
    table = spark_rt.catalog.load_table("sales.pl_undo")
    assert pre in {s.snapshot_id for s in table.snapshots()}, task_of(spark_rt, clean_id).result
    assert all(Path(f).exists() for f in _files_of(table, pre))

    spark.sql(result["undo"]["how"]).collect()  # the undo the result tells an operator
    assert _count(spark_rt, "pl_undo") == 510


def _files_of(table: Any, snapshot_id: int) -> list[str]:
    return [
        t.file.file_path.removeprefix("file://")
        for t in table.scan(snapshot_id=snapshot_id).plan_files()
    ]


# --- clean keeps every ref; orphan ages on the storage's clock ----------------------------


def test_clean_keeps_every_snapshot_and_file_a_branch_or_tag_needs(
    scheduler: Scheduler, spark: Any, spark_rt: Runtime
) -> None:
    name = "pl_refs"
    table = _table(spark_rt, name, [1] * 10)
    for i in range(3):
        table.append(
            pa.table({"id": [100 + i], "ts": [datetime.now(UTC)]}, SCHEMA)
        )  # main grows: 4 snapshots
        table = table.refresh()
    snaps = [s.snapshot_id for s in table.snapshots()]
    fq = f"`{spark_rt.settings.catalog_name}`.`sales`.`{name}`"
    spark.sql(f"ALTER TABLE {fq} CREATE TAG `audit` AS OF VERSION {snaps[0]}").collect()
    spark.sql(f"ALTER TABLE {fq} CREATE BRANCH `exp` AS OF VERSION {snaps[1]}").collect()
    spark.sql(
        f"INSERT INTO {fq}.`branch_exp` VALUES (999, TIMESTAMP '2020-01-01 00:00:00')"
    ).collect()
    table = spark_rt.catalog.load_table(f"sales.{name}")
    branch_head = table.metadata.refs["exp"].snapshot_id
    want = {
        "audit": _count(spark_rt, name, snaps[0]),
        "exp": _count(spark_rt, name, branch_head),
        "main": _count(spark_rt, name),
    }
    assert want == {"audit": 10, "exp": 12, "main": 13}

    # Every file old, and one real orphan: expiry and orphan removal both have work.
    data_dir = Path(next(iter(table.scan().plan_files())).file.file_path.removeprefix("file://"))
    orphan = data_dir.parent / "orphan.parquet"
    shutil.copy(data_dir, orphan)
    old = time.time() - 10 * 86400
    for root, _, files in os.walk(data_dir.parent.parent):
        for f in files:
            os.utime(Path(root) / f, (old, old))
    policy = {
        "clean": {
            "keep_last_snapshots": 1,
            "max_snapshot_age_hours": 0.0001,
            "allow_below_safety_floors": True,
            "orphan_min_age_hours": 24,
        }
    }
    time.sleep(1)  # every snapshot is now older than the age limit
    task_id = manage(spark_rt, name, policy, kind="clean")
    assert Worker(spark_rt).run_once()
    assert run_one(scheduler) == "succeeded"
    result = task_of(spark_rt, task_id).result
    assert result is not None and result["expired_data_files"] == 0

    table = spark_rt.catalog.load_table(f"sales.{name}")
    left = {s.snapshot_id for s in table.snapshots()}
    assert snaps[0] in left and branch_head in left and table.current_snapshot().snapshot_id in left
    assert snaps[2] not in left  # an old main snapshot no ref needs did go
    assert not orphan.exists() and result["orphans_removed"] == 1
    got = {
        "audit": _count(spark_rt, name, snaps[0]),
        "exp": _count(spark_rt, name, branch_head),
        "main": _count(spark_rt, name),
    }
    assert got == want  # every ref still reads all its rows: its files survived


def test_orphan_age_is_judged_on_the_storage_clock(spark: Any, spark_rt: Runtime) -> None:
    """A scheduler clock three days ahead of the storage's must not make a file written a
    minute ago look old."""
    table = _table(spark_rt, "pl_clock", [1] * 5)
    path = Path(next(iter(table.scan().plan_files())).file.file_path.removeprefix("file://"))
    inflight = path.parent / "inflight.parquet"  # a writer's file, not committed yet
    shutil.copy(path, inflight)
    minute_ago = time.time() - 60
    os.utime(inflight, (minute_ago, minute_ago))
    skewed_now = datetime.now(UTC) + timedelta(days=3)
    action = {
        "name": "remove_orphan_files",
        "older_than": (skewed_now - timedelta(hours=24)).isoformat(),  # planned on that clock
        "min_age_hours": 24,
    }
    ref, catalog = ttl_ref("pl_clock"), spark_rt.settings.catalog_name
    safe, clocks = clean._orphan_cutoff(spark, catalog, ref, action, skewed_now)
    assert datetime.fromisoformat(safe["older_than"]) <= datetime.now(UTC) - timedelta(hours=24)
    assert clocks["storage_clock_behind_s"] > 2 * 86400
    spark.sql(clean.clean_sql(catalog, ref, safe)).collect()
    assert inflight.exists()
