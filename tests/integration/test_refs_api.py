"""GET …/refs and POST …/rollback on a real Iceberg table (pyiceberg, no JVM): the roles,
the refusals (a running task, unknown targets, a snapshot off main's history), the audit
row, and pyiceberg reading main back at the tag's snapshot. Explain's tags entry."""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from typing import Any

from fastapi.testclient import TestClient
from helpers import append_batches, bearer, current, issue_token, make_table, wait_for
from sqlalchemy import select, text

from lakewarden import tables
from lakewarden.db.models import AuditEntry
from lakewarden.db.session import transaction
from lakewarden.runtime import Runtime
from lakewarden.tasks import repo

BASE = "/api/v1/tables/sales/orders"


def _audited(rt: Runtime) -> list[AuditEntry]:
    with transaction(rt.engine) as s:
        rows = s.scalars(select(AuditEntry).where(AuditEntry.action == "rollbackTable")).all()
        s.expunge_all()
        return list(rows)


def _running_task(rt: Runtime, table_id: int) -> int:
    with transaction(rt.engine) as s:
        task_id = repo.create_task(s, table_id=table_id, kind="compaction", trigger={}, actor="t")
        s.execute(text("UPDATE tasks SET state = 'running' WHERE id = :id"), {"id": task_id})
    assert task_id is not None
    return task_id


def test_refs_list_and_rollback_to_a_tag(rt: Runtime, client: TestClient) -> None:
    table = append_batches(make_table(rt), 2)
    good = current(table).snapshot_id
    table.manage_snapshots().create_tag(good, "good", max_ref_age_ms=86_400_000).commit()
    table.manage_snapshots().create_branch(good, "qa").commit()
    table = append_batches(table.refresh(), 2, start=100)
    latest = current(table).snapshot_id
    registered = client.post("/api/v1/tables", json={"namespace": "sales", "name": "orders"})
    assert registered.status_code == 201, registered.text
    table_id = registered.json()["id"]

    listed = client.get(f"{BASE}/refs")
    assert listed.status_code == 200, listed.text
    refs: dict[str, Any] = {r["name"]: r for r in listed.json()["refs"]}
    assert list(refs) == ["main", "qa", "good"]  # main, branches, tags
    assert refs["main"]["snapshot_id"] == latest and refs["main"]["lapses_at"] is None
    assert (refs["good"]["type"], refs["good"]["snapshot_id"]) == ("tag", good)
    assert refs["good"]["max_ref_age_ms"] == 86_400_000 and refs["good"]["lapses_at"]
    assert refs["qa"]["type"] == "branch" and refs["qa"]["age_hours"] >= 0

    operator = bearer(issue_token(rt, "operator", name="op"))
    refused = client.post(f"{BASE}/rollback", json={"to_tag": "good"}, headers=operator)
    assert refused.status_code == 403, refused.text
    assert "admin" in refused.json()["detail"]

    for body in ({}, {"to_tag": "good", "to_snapshot": good}):
        bad = client.post(f"{BASE}/rollback", json=body)
        assert bad.status_code == 422 and "exactly one" in bad.text, bad.text
    assert client.post(f"{BASE}/rollback", json={"to_tag": "nope"}).status_code == 404
    assert client.post(f"{BASE}/rollback", json={"to_snapshot": 12345}).status_code == 404
    branch = client.post(f"{BASE}/rollback", json={"to_tag": "qa"})
    assert branch.status_code == 422 and "branch" in branch.json()["detail"]

    task_id = _running_task(rt, table_id)
    busy = client.post(f"{BASE}/rollback", json={"to_tag": "good"})
    assert busy.status_code == 409 and f"task {task_id}" in busy.json()["detail"], busy.text
    with rt.engine.begin() as conn:
        conn.execute(text("UPDATE tasks SET state = 'cancelled' WHERE id = :id"), {"id": task_id})
    assert current(rt.catalog.load_table("sales.orders")).snapshot_id == latest  # untouched

    done = client.post(f"{BASE}/rollback", json={"to_tag": "good"})
    assert done.status_code == 200, done.text
    assert done.json() == {
        "table": "sales.orders",
        "from_snapshot_id": latest,
        "to_snapshot_id": good,
        "to_tag": "good",
        "rolled_back": True,
        "restore_version": None,  # a Delta table's RESTORE commit
    }
    after = rt.catalog.load_table("sales.orders")
    assert current(after).snapshot_id == good
    assert len(after.scan().to_arrow()) == 20  # the two batches before the tag
    entries = _audited(rt)
    ok = [e for e in entries if e.outcome == "ok"]
    assert len(ok) == 1 and ok[0].change == {
        "main": [latest, good],
        "to_tag": "good",
        "rolled_back": True,
    }
    assert ok[0].target == "sales.orders" and ok[0].actor.startswith("token:")
    assert {e.status for e in entries if e.outcome != "ok"} == {403, 404, 409, 422}

    # The snapshot main had before is no longer in its history: a roll "forward" is refused.
    forward = client.post(f"{BASE}/rollback", json={"to_snapshot": latest})
    assert forward.status_code == 422 and "not an ancestor" in forward.json()["detail"]


def test_explain_says_which_tag_is_next_and_what_would_lapse(
    rt: Runtime, client: TestClient
) -> None:
    table = append_batches(make_table(rt), 1)
    table.manage_snapshots().create_tag(current(table).snapshot_id, "old", 1).commit()
    policy = {"tags": {"enabled": True, "every": "hourly", "retention_days": 3}}
    body = {"namespace": "sales", "name": "orders", "policy": policy}
    assert client.post("/api/v1/tables", json=body).status_code == 201
    tags = client.get(f"{BASE}/explain").json()["tags"]
    assert tags["enabled"] and tags["due"] and tags["next_tag"].startswith("hourly-")
    assert len(tags["next_tag"]) == len("hourly-YYYYMMDDHH")
    assert [r["name"] for r in tags["would_lapse"]] == ["old"]  # 1 ms max-ref-age


def test_a_rollback_waits_for_a_dispatch_in_flight_and_refuses(
    rt: Runtime, client: TestClient
) -> None:
    """A dispatch that picked a task of the table but has not committed it as running yet
    must not be missed: the rollback waits for it (it locks the table's planned and running
    tasks), then sees the job running and refuses. Meanwhile it holds a blocker, so no
    other job starts; the blocker is gone once it answers."""
    table = append_batches(make_table(rt), 2)
    good = current(table).snapshot_id
    table.manage_snapshots().create_tag(good, "good").commit()
    append_batches(table.refresh(), 1, start=100)
    registered = client.post("/api/v1/tables", json={"namespace": "sales", "name": "orders"})
    table_id = registered.json()["id"]
    with transaction(rt.engine) as s:
        task_id = repo.create_task(s, table_id=table_id, kind="compaction", trigger={}, actor="t")
        s.execute(text("UPDATE tasks SET state = 'planned' WHERE id = :id"), {"id": task_id})

    with rt.engine.connect() as dispatch, ThreadPoolExecutor(1) as pool:
        # As the scheduler's dispatch does: the task row locked, set running, not committed.
        dispatch.execute(text("SELECT id FROM tasks WHERE id = :id FOR UPDATE"), {"id": task_id})
        dispatch.execute(text("UPDATE tasks SET state = 'running' WHERE id = :id"), {"id": task_id})
        answer = pool.submit(client.post, f"{BASE}/rollback", json={"to_tag": "good"})

        def waiting() -> bool:
            with rt.engine.connect() as conn:
                return bool(
                    conn.execute(
                        text(
                            "SELECT count(*) FROM pg_stat_activity WHERE wait_event_type = "
                            "'Lock' AND datname = current_database()"
                        )
                    ).scalar_one()
                )

        wait_for(waiting, 20, "the rollback to wait for the dispatch's lock")
        with transaction(rt.engine) as s:
            holders = [b.holder for b in tables.live_blockers(s, table_id)]
        assert len(holders) == 1 and holders[0].startswith("rollback by ")
        dispatch.commit()
        busy = answer.result(30)
    assert busy.status_code == 409 and f"task {task_id}" in busy.json()["detail"], busy.text
    assert current(rt.catalog.load_table("sales.orders")).snapshot_id != good  # untouched
    with transaction(rt.engine) as s:
        assert tables.live_blockers(s, table_id) == []
