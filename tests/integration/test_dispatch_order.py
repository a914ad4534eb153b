"""Which planned task the leader dispatches next: priority, fair share, blockers, exclusivity."""

from __future__ import annotations

import json

from fastapi.testclient import TestClient
from helpers import make_table
from sqlalchemy import text

from lakewarden.db.models import JobRun, ManagedTable
from lakewarden.db.session import transaction
from lakewarden.runtime import Runtime
from lakewarden.tasks import repo
from services.scheduler.dispatch import _NEXT_PLANNED


def _planned(rt: Runtime, name: str, priority: int = 0, kind: str = "compaction") -> int:
    with transaction(rt.engine) as s:
        row = s.query(ManagedTable).filter_by(name=name).one_or_none()
        if row is None:
            row = ManagedTable(catalog="lake", namespace="ns", name=name, policy={})
            s.add(row)
            s.flush()
        task_id = repo.create_task(
            s, table_id=row.id, kind=kind, trigger={}, actor="t", priority=priority
        )
    with rt.engine.begin() as conn:
        conn.execute(text("UPDATE tasks SET state = 'planned' WHERE id = :i"), {"i": task_id})
    assert task_id is not None
    return task_id


def _next(rt: Runtime, pool_limits: dict[str, int] | None = None) -> int | None:
    with transaction(rt.engine) as s:
        row = s.execute(_NEXT_PLANNED, {"pool_limits": json.dumps(pool_limits or {})}).one_or_none()
        return row[0] if row else None


def test_priority_first_then_fair_share_then_age(rt: Runtime) -> None:
    hog = _planned(rt, "hog")
    quiet = _planned(rt, "quiet")
    assert _next(rt) == hog  # same priority, no usage: oldest first
    # The hog table used Spark for 10 minutes in the last hour: the quiet table goes first.
    with transaction(rt.engine) as s:
        old = repo.create_task(
            s,
            table_id=s.query(ManagedTable).filter_by(name="hog").one().id,
            kind="clean",
            trigger={},
            actor="t",
        )
        s.add(
            JobRun(
                task_id=old,
                attempt=1,
                state="succeeded",
                scheduler_id="s",
                leader_epoch=1,
                duration_ms=600_000,
            )
        )
    assert _next(rt) == quiet
    urgent = _planned(rt, "hog", priority=10, kind="ttl")
    assert _next(rt) == urgent  # priority beats fair share


def test_blocked_and_busy_tables_are_skipped(rt: Runtime) -> None:
    a = _planned(rt, "a")
    b = _planned(rt, "b")
    with rt.engine.begin() as conn:
        conn.execute(
            text(
                "INSERT INTO table_blockers (table_id, holder, expires_at) "
                "SELECT table_id, 'flink', now() + interval '5 minutes' FROM tasks WHERE id = :i"
            ),
            {"i": a},
        )
    assert _next(rt) == b
    _planned(rt, "b", kind="clean")
    with rt.engine.begin() as conn:
        conn.execute(text("UPDATE tasks SET state = 'running' WHERE id = :i"), {"i": b})
    assert _next(rt) is None  # a is blocked; b's table already runs a job
    with rt.engine.begin() as conn:
        conn.execute(text("UPDATE table_blockers SET expires_at = now() - interval '1 second'"))
    assert _next(rt) == a  # an expired blocker no longer counts


def test_blockers_api(client: TestClient, rt: Runtime) -> None:
    make_table(rt)
    client.post("/api/v1/tables", json={"namespace": "sales", "name": "orders"})
    r = client.post(
        "/api/v1/tables/sales/orders/blockers",
        json={"holder": "flink-7", "reason": "checkpointing", "ttl_s": 300},
    )
    assert r.status_code == 201, r.text
    blocker = r.json()
    listed = client.get("/api/v1/tables/sales/orders/blockers").json()
    assert [b["holder"] for b in listed] == ["flink-7"]
    assert (
        client.post(
            "/api/v1/tables/sales/orders/blockers", json={"holder": "x", "ttl_s": -1}
        ).status_code
        == 422
    )
    assert client.delete(f"/api/v1/tables/sales/orders/blockers/{blocker['id']}").status_code == 204
    assert client.get("/api/v1/tables/sales/orders/blockers").json() == []
    assert client.delete("/api/v1/tables/sales/orders/blockers/999").status_code == 404


def test_gain_per_mb_and_pool_limits(rt: Runtime) -> None:
    small_gain = _planned(rt, "x")
    big_gain = _planned(rt, "y")
    with rt.engine.begin() as conn:
        for task_id, before, after, size in (
            (small_gain, 10, 8, 100 << 20),
            (big_gain, 500, 5, 10 << 20),
        ):
            conn.execute(
                text("UPDATE tasks SET plan = CAST(:p AS jsonb), pool = 'etl' WHERE id = :i"),
                {
                    "i": task_id,
                    "p": json.dumps(
                        {
                            "files_before": before,
                            "expected_files_after": after,
                            "bytes_to_rewrite": size,
                        }
                    ),
                },
            )
    assert _next(rt) == big_gain  # 49.5 files removed per MB beats 0.02
    # A pool at its limit dispatches nothing more, whatever the order says.
    with rt.engine.begin() as conn:
        conn.execute(text("UPDATE tasks SET state = 'running' WHERE id = :i"), {"i": big_gain})
    assert _next(rt, {"etl": 1}) is None
    assert _next(rt, {"etl": 2}) == small_gain
    assert _next(rt) == small_gain  # pools without a limit are unlimited


def test_a_tables_oldest_task_goes_before_a_newer_compaction_with_a_gain(rt: Runtime) -> None:
    """A live writer keeps a table's compaction due: each new compaction plan has a gain
    and a clean none, so on gain alone the clean planned first waited behind every one."""
    clean = _planned(rt, "live", kind="clean")
    compaction = _planned(rt, "live")
    plan = {"files_before": 40, "expected_files_after": 3, "bytes_to_rewrite": 1 << 20}
    with rt.engine.begin() as conn:
        conn.execute(
            text("UPDATE tasks SET plan = CAST(:p AS jsonb) WHERE id = :i"),
            {"p": json.dumps(plan), "i": compaction},
        )
    assert _next(rt) == clean
    with rt.engine.begin() as conn:
        conn.execute(text("UPDATE tasks SET state = 'succeeded' WHERE id = :i"), {"i": clean})
    assert _next(rt) == compaction


def _batch(
    rt: Runtime, batch: int, pool_limits: dict[str, int], rooms: dict[str, int]
) -> list[int]:
    with transaction(rt.engine) as s:
        rows = s.execute(
            _NEXT_PLANNED,
            {"pool_limits": json.dumps(pool_limits), "rooms": json.dumps(rooms), "batch": batch},
        ).all()
    return [row[0] for row in rows]


def test_a_batch_keeps_the_order_one_task_per_table_and_the_pool_limits(rt: Runtime) -> None:
    """A dispatch round picks several tasks: in the order one at a time would, never two of
    one table (its oldest first), never past a pool's limit counting the batch's own, and
    never more than the mode has room for."""
    urgent = _planned(rt, "a", priority=5)
    old_a = _planned(rt, "b")
    new_b = _planned(rt, "b", kind="clean")  # the table's second: after its first has run
    etl = [_planned(rt, f"etl{i}") for i in range(3)]
    busy = _planned(rt, "busy")
    with rt.engine.begin() as conn:
        conn.execute(text("UPDATE tasks SET pool = 'etl' WHERE id = ANY(:i)"), {"i": etl})
        conn.execute(
            text("UPDATE tasks SET pool = 'etl', state = 'running' WHERE id = :i"), {"i": busy}
        )
    # etl allows 2 at once and 1 runs: one of its three goes, the oldest
    assert _batch(rt, 10, {"etl": 2}, {}) == [urgent, old_a, etl[0]]
    assert new_b not in _batch(rt, 10, {}, {})
    assert _batch(rt, 10, {}, {}) == [urgent, old_a, *etl]
    assert _batch(rt, 2, {}, {}) == [urgent, old_a]  # the batch's size
    assert _batch(rt, 10, {}, {"session": 1}) == [urgent]  # the mode's room
    assert _batch(rt, 10, {}, {"session": 0}) == []
