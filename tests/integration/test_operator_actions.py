"""The operator's actions on the real API and Postgres: retry a task, pause and resume a
table, freeze and unfreeze the fleet. Dispatch is the leader's own query (`_NEXT_PLANNED`),
the worker's claim is `repo.claim_for_planning`: what they pick is what would run."""

from __future__ import annotations

import json
from typing import Any

import psycopg
from fastapi.testclient import TestClient
from helpers import append_batches, bearer, issue_token, make_table
from sqlalchemy import text

from lakewarden.db.session import transaction
from lakewarden.events.listener import libpq_url
from lakewarden.runtime import Runtime
from lakewarden.states import TaskState
from lakewarden.tasks import repo
from lakewarden.tasks.wakeup import CHANNEL
from services.scheduler.dispatch import _NEXT_PLANNED

ORDERS = "/api/v1/tables/sales/orders"


def _register(client: TestClient, rt: Runtime, namespace: str, name: str) -> None:
    append_batches(make_table(rt, namespace, name), 1)
    r = client.post("/api/v1/tables", json={"namespace": namespace, "name": name})
    assert r.status_code == 201, r.text


def _trigger(client: TestClient, table: str = ORDERS, kind: str = "compaction") -> dict[str, Any]:
    r = client.post(f"{table}/tasks", json={"kind": kind})
    assert r.status_code == 201, r.text
    return dict(r.json())


def _end(rt: Runtime, task_id: int, state: TaskState) -> None:
    """Move a pending task to `state` through the guarded transitions, as a worker would."""
    with transaction(rt.engine) as s:
        if state is not TaskState.CANCELLED:
            repo.transition(s, task_id, TaskState.PLANNING, actor="worker")
        if state is TaskState.SUCCEEDED:
            repo.transition(s, task_id, TaskState.PLANNED, actor="worker")
            repo.transition(s, task_id, TaskState.RUNNING, actor="scheduler")
        repo.transition(s, task_id, state, actor="worker", reason=f"made {state} by the test")


def _planned(rt: Runtime, task_id: int) -> None:
    with rt.engine.begin() as conn:
        conn.execute(text("UPDATE tasks SET state = 'planned' WHERE id = :i"), {"i": task_id})


def _next_dispatched(rt: Runtime) -> int | None:
    """The task the leader would start now."""
    with transaction(rt.engine) as s:
        row = s.execute(_NEXT_PLANNED, {"pool_limits": json.dumps({})}).one_or_none()
        return int(row[0]) if row else None


def test_retry_makes_a_linked_task_once_and_only_of_an_ended_one(
    rt: Runtime, client: TestClient
) -> None:
    _register(client, rt, "sales", "orders")
    first = _trigger(client)
    url = f"/api/v1/tasks/{first['id']}/retry"

    r = client.post(url)
    assert r.status_code == 409 and "is pending" in r.json()["detail"], r.text
    viewer = bearer(issue_token(rt, "viewer@lake/sales", name="viewer"))
    assert client.post(url, headers=viewer).status_code == 403
    assert client.post("/api/v1/tasks/999999/retry").status_code == 404

    _end(rt, first["id"], TaskState.FAILED)
    before = client.get(f"/api/v1/tasks/{first['id']}").json()
    r = client.post(url)
    assert r.status_code == 200, r.text
    retry = r.json()
    assert retry["id"] != first["id"] and retry["state"] == TaskState.PENDING
    assert retry["kind"] == "compaction" and retry["table"] == "sales.orders"
    assert retry["trigger"]["retry_of"] == first["id"]
    assert retry["trigger"]["source"] == "retry"
    assert retry["history"][0]["reason"].startswith(f"retry of task {first['id']} by token:")
    # The failed task stays as it ended: its state and history are its own.
    assert client.get(f"/api/v1/tasks/{first['id']}").json() == before

    # Nothing twice: the failed task has a retry now (open, then ended).
    r = client.post(url)
    assert r.status_code == 409 and f"task {retry['id']} (pending)" in r.json()["detail"]
    # The worker plans the retry like any other task.
    with transaction(rt.engine) as s:
        claimed = repo.claim_for_planning(s, "worker-1")
        assert claimed is not None and claimed.id == retry["id"]
    r = client.post(f"/api/v1/tasks/{retry['id']}/retry")
    assert r.status_code == 409 and "is planning" in r.json()["detail"]


def test_retry_of_cancelled_skipped_and_succeeded_tasks(rt: Runtime, client: TestClient) -> None:
    _register(client, rt, "sales", "orders")
    for state in (TaskState.CANCELLED, TaskState.SKIPPED):
        task = _trigger(client)
        _end(rt, task["id"], state)
        r = client.post(f"/api/v1/tasks/{task['id']}/retry")
        assert r.status_code == 200, (state, r.text)
        _end(rt, r.json()["id"], TaskState.CANCELLED)  # frees the kind's slot
    done = _trigger(client)
    _end(rt, done["id"], TaskState.SUCCEEDED)
    r = client.post(f"/api/v1/tasks/{done['id']}/retry")
    assert r.status_code == 409 and "succeeded" in r.json()["detail"], r.text
    # A failure that a later task of its kind already ran past is not run again.
    failed = _trigger(client, kind="clean")
    _end(rt, failed["id"], TaskState.FAILED)
    later = _trigger(client, kind="clean")
    _end(rt, later["id"], TaskState.SUCCEEDED)
    r = client.post(f"/api/v1/tasks/{failed['id']}/retry")
    assert r.status_code == 409, r.text
    assert f"task {later['id']} (succeeded) came after it" in r.json()["detail"]


def test_pause_holds_dispatch_until_resumed_and_says_why(rt: Runtime, client: TestClient) -> None:
    _register(client, rt, "sales", "orders")
    _register(client, rt, "sales", "items")
    task = _trigger(client)
    _planned(rt, task["id"])
    assert _next_dispatched(rt) == task["id"]
    operator = bearer(issue_token(rt, "operator@lake/sales", name="oncall"))
    viewer = bearer(issue_token(rt, "viewer@lake/sales", name="viewer"))
    assert client.post(f"{ORDERS}/pause", headers=viewer).status_code == 403

    r = client.post(f"{ORDERS}/pause", json={"reason": "backfill"}, headers=operator)
    assert r.status_code == 200, r.text
    paused = r.json()["paused"]
    assert paused["by"] == "token:oncall" and paused["reason"] == "backfill"
    assert _next_dispatched(rt) is None
    # Pausing again keeps the first pause (who and since stay true).
    assert client.post(f"{ORDERS}/pause").json()["paused"] == paused
    assert client.get(ORDERS).json()["paused"] == paused
    assert client.get("/api/v1/tables/sales/items").json()["paused"] is None
    said = f"paused by token:oncall since {paused['since'][:19]}"
    held = client.get(f"/api/v1/tasks/{task['id']}").json()["on_hold"]
    assert held.startswith(said) and held.endswith(": backfill"), held
    listed = client.get("/api/v1/tasks", params={"table": "sales.orders"}).json()["items"]
    assert listed[0]["on_hold"] == held
    explain = client.get(f"{ORDERS}/explain").json()
    assert explain["paused"] == paused and explain["frozen"] is None
    assert said in explain["summary"] and "no job starts until resumed" in explain["summary"]
    assert client.get("/api/v1/maintenance").json()["paused_tables"] == 1
    # A pause is not a writer's blocker: not listed as one, not removable as one.
    assert client.get(f"{ORDERS}/blockers").json() == []
    with rt.engine.connect() as conn:
        pause_id = conn.scalar(text("SELECT id FROM table_blockers"))
    assert client.delete(f"{ORDERS}/blockers/{pause_id}").status_code == 404

    with psycopg.connect(libpq_url(rt.db_url), autocommit=True) as listener:
        listener.execute(f"LISTEN {CHANNEL}")
        r = client.post(f"{ORDERS}/resume", headers=operator)
        assert r.status_code == 200 and r.json()["paused"] is None, r.text
        # The leader's dispatch is woken at once, not at its next poll.
        woken = [n.payload for n in listener.notifies(timeout=10, stop_after=1)]
    assert woken == [TaskState.PLANNED]
    assert _next_dispatched(rt) == task["id"]
    assert client.get(f"/api/v1/tasks/{task['id']}").json()["on_hold"] is None
    assert client.post(f"{ORDERS}/resume").status_code == 200  # nothing to lift: as it is
    with rt.engine.connect() as conn:
        actions = conn.scalars(
            text("SELECT action FROM audit_log WHERE actor = 'token:oncall' AND outcome = 'ok'")
        ).all()
    assert actions == ["pauseTable", "resumeTable"]


def test_freeze_holds_every_table_until_unfrozen(rt: Runtime, client: TestClient) -> None:
    _register(client, rt, "sales", "orders")
    _register(client, rt, "hr", "staff")
    tasks = [_trigger(client)["id"], _trigger(client, "/api/v1/tables/hr/staff")["id"]]
    for task_id in tasks:
        _planned(rt, task_id)
    assert client.get("/api/v1/maintenance").json() == {
        "frozen": False,
        "by": None,
        "since": None,
        "reason": None,
        "paused_tables": 0,
    }
    # Every table at once: an operator of one namespace may not; one of everything may.
    scoped = bearer(issue_token(rt, "operator@lake/sales", name="scoped"))
    r = client.post("/api/v1/maintenance/freeze", headers=scoped)
    assert r.status_code == 403 and "operator role on everything" in r.json()["detail"]
    oncall = bearer(issue_token(rt, "operator", name="oncall"))
    r = client.post("/api/v1/maintenance/freeze", json={"reason": "INC-7"}, headers=oncall)
    assert r.status_code == 200, r.text
    state = r.json()
    assert state["frozen"] and state["by"] == "token:oncall" and state["reason"] == "INC-7"
    assert _next_dispatched(rt) is None
    viewer = bearer(issue_token(rt, "viewer@lake/hr", name="viewer"))
    assert client.get("/api/v1/maintenance", headers=viewer).json() == state
    explain = client.get("/api/v1/tables/hr/staff/explain").json()
    assert explain["frozen"] == {k: state[k] for k in ("by", "since", "reason")}
    assert "frozen (every table) by token:oncall" in explain["summary"]
    assert "no job starts until unfrozen" in explain["summary"]
    held = client.get(f"/api/v1/tasks/{tasks[1]}").json()["on_hold"]
    assert held.startswith("frozen (every table) by token:oncall") and held.endswith(": INC-7")
    # Both at once: the freeze is said first, and both must be lifted.
    client.post(f"{ORDERS}/pause", json={"reason": "backfill"})
    held = client.get(f"/api/v1/tasks/{tasks[0]}").json()["on_hold"]
    assert held.index("frozen") < held.index("paused by"), held
    client.post(f"{ORDERS}/resume")

    assert client.post("/api/v1/maintenance/unfreeze", headers=scoped).status_code == 403
    r = client.post("/api/v1/maintenance/unfreeze", headers=oncall)
    assert r.status_code == 200 and r.json()["frozen"] is False, r.text
    assert _next_dispatched(rt) in tasks
