"""Kind holds on the real API and Postgres, no Spark: a kind whose runs fail with the same
error N times in a row is held on the table (and a rewrite that failed validation at
once); a held kind gets no new task by any path (`repo.create_task`, which commit
evaluation, the sweep, readiness and the API share; the sweep and a manual trigger are
tried here, the commit road in the Spark test; a manual trigger answers 409 saying how to
lift it) and a planned one is not dispatched (the leader's own `_NEXT_PLANNED`);
acknowledging the alert or the resume endpoint lifts it, audited. Runs are finished with
`finish_run`, as the scheduler and a submitted application do."""

from __future__ import annotations

import json
import re
from datetime import UTC, datetime
from typing import Any

from fastapi.testclient import TestClient
from helpers import append_batches, bearer, issue_token, lead, make_table
from sqlalchemy import select, text

from lakewarden import holds
from lakewarden.alerts.rules import evaluate_task_rules
from lakewarden.db.models import Alert, JobRun, KindHold, Task
from lakewarden.db.session import transaction
from lakewarden.leader import Fence
from lakewarden.runtime import Runtime
from lakewarden.states import RunState, TaskState
from lakewarden.tasks import repo
from lakewarden.tasks.runs import finish_run
from services.scheduler.dispatch import _NEXT_PLANNED
from services.scheduler.sweeps import sweep_due_tasks

ORDERS = "/api/v1/tables/sales/orders"
# The same fault, as two runs word it: other numbers, another generated file name.
MISSING = "FileNotFoundException: s3://lake/orders/data/0000{n}-{n}-{uuid}-00001.parquet"
UUIDS = ["5f3c1d2e-9a8b-4c7d-8e6f-102030405060", "0a1b2c3d-4e5f-4a6b-8c7d-9e0f1a2b3c4d"]


def _register(client: TestClient, rt: Runtime, max_attempts: int = 3) -> None:
    append_batches(make_table(rt, "sales", "orders"), 1)
    r = client.post("/api/v1/tables", json={"namespace": "sales", "name": "orders"})
    assert r.status_code == 201, r.text
    r = client.put(f"{ORDERS}/policy", json={"compaction": {"max_attempts": max_attempts}})
    assert r.status_code == 200, r.text


def _trigger(client: TestClient) -> int:
    r = client.post(f"{ORDERS}/tasks", json={"kind": "compaction"})
    assert r.status_code == 201, r.text
    return int(r.json()["id"])


def _planned(rt: Runtime, task_id: int) -> None:
    with transaction(rt.engine) as s:
        repo.transition(s, task_id, TaskState.PLANNING, actor="worker")
        repo.transition(s, task_id, TaskState.PLANNED, actor="worker")


def _fail_run(
    rt: Runtime, fence: Fence, task_id: int, error: str, metrics: dict[str, Any] | None = None
) -> str:
    """The task planned, dispatched (a run) and its run failed with `error`, as the
    scheduler records it."""
    _planned(rt, task_id)
    with transaction(rt.engine) as s:
        task = s.get(Task, task_id)
        assert task is not None
        attempt = task.attempt + 1
        repo.transition(
            s, task_id, TaskState.RUNNING, actor=fence.holder, fence=fence, attempt=attempt
        )
        s.add(
            JobRun(
                task_id=task_id,
                attempt=attempt,
                state=RunState.RUNNING,
                scheduler_id=fence.holder,
                leader_epoch=fence.epoch,
            )
        )
    retryable = metrics is None
    return finish_run(
        rt, fence, task_id, attempt, error=RuntimeError(error), metrics=metrics, retryable=retryable
    )


def _next_dispatched(rt: Runtime) -> int | None:
    """The task the leader would start now."""
    with transaction(rt.engine) as s:
        row = s.execute(_NEXT_PLANNED, {"pool_limits": json.dumps({})}).one_or_none()
        return int(row[0]) if row else None


def _held(client: TestClient) -> list[dict[str, object]]:
    r = client.get(ORDERS)
    assert r.status_code == 200, r.text
    return list(r.json()["held"])


def _raise_alerts(rt: Runtime) -> None:
    """The leader's alert round (the task rules)."""
    with transaction(rt.engine) as s:
        evaluate_task_rules(s, rt.settings, datetime.now(UTC))


def _audited(rt: Runtime, action: str) -> list[dict[str, Any]]:
    with rt.engine.connect() as conn:
        return [
            dict(c or {})
            for c in conn.scalars(
                text("SELECT change FROM audit_log WHERE action = :a AND outcome = 'ok'"),
                {"a": action},
            )
        ]


def test_the_same_error_three_times_in_a_row_holds_the_kind(
    rt: Runtime, client: TestClient
) -> None:
    assert rt.settings.hold_after_same_failures == 3  # the default
    _register(client, rt, max_attempts=6)
    fence = lead(rt)
    task_id = _trigger(client)
    same = [MISSING.format(n=n, uuid=UUIDS[n % 2]) for n in range(1, 5)]
    # A, B, A, A: another error breaks the streak, so no hold before the third A in a row.
    for error in (same[0], "OutOfMemoryError: Java heap space", same[1], same[2]):
        assert _fail_run(rt, fence, task_id, error) == TaskState.PENDING
        assert _held(client) == []
    # The third same error in a row: failed for good (attempt 5 of 6: no more retries of
    # a fault that repeats) and the kind held on the table.
    assert _fail_run(rt, fence, task_id, same[3]) == TaskState.FAILED
    with transaction(rt.engine) as s:
        task = s.get(Task, task_id)
        assert task is not None and task.reason is not None
        assert task.reason.startswith("failed 3 times in a row with the same error")
        assert "compaction is now held" in task.reason
    [held] = _held(client)
    assert (held["kind"], held["rule"], held["task_id"], held["alert_id"]) == (
        "compaction",
        holds.FAILED_RULE,
        task_id,
        None,  # raised at the leader's next alert round
    )
    assert "compaction failed 3 times in a row with the same error" in str(held["reason"])

    # Every path that makes tasks goes through create_task: it makes none of a held kind.
    with transaction(rt.engine) as s:
        args = {"table_id": task.table_id, "kind": "compaction", "trigger": {}, "actor": "t"}
        assert repo.create_task(s, **args) is None  # type: ignore[arg-type]
        assert repo.create_task(s, **{**args, "kind": "expire"}) is not None  # type: ignore[arg-type]
    # By hand: a 409 that says it is held and how to lift it; a retry the same.
    r = client.post(f"{ORDERS}/tasks", json={"kind": "compaction"})
    assert r.status_code == 409, r.text
    assert "compaction held since" in r.json()["detail"]
    assert "/kinds/compaction/resume to lift" in r.json()["detail"]
    r = client.post(f"/api/v1/tasks/{task_id}/retry")
    assert r.status_code == 409 and "compaction held since" in r.json()["detail"], r.text

    # The leader's alert round raises task_failed; the hold names it; acknowledging lifts it.
    _raise_alerts(rt)
    with transaction(rt.engine) as s:
        alert = s.scalars(select(Alert).where(Alert.rule == "task_failed")).one()
        alert_id = alert.id
    [held] = _held(client)
    assert held["alert_id"] == alert_id
    assert f"acknowledge alert {alert_id} or POST " in str(held["lift"])
    r = client.post(f"/api/v1/alerts/{alert_id}/ack", json={"by": "oncall"})
    assert r.status_code == 200, r.text
    assert _held(client) == []
    assert _audited(rt, "ackAlert")[-1]["lifted"]["kind"] == "compaction"
    assert _trigger(client) > task_id


def test_a_failed_validation_holds_at_once_until_its_alert_is_acknowledged(
    rt: Runtime, client: TestClient
) -> None:
    _register(client, rt)
    fence = lead(rt)
    first = _trigger(client)
    mismatch = {"validation": {"status": "failed"}}
    assert _fail_run(rt, fence, first, "RewriteMismatch: rows differ", mismatch) == "failed"
    [held] = _held(client)
    assert held["rule"] == holds.VALIDATION_RULE
    assert held["reason"] == (
        f"rewrite of task {first} failed validation (rewrite_mismatch) and was not published"
    )
    _raise_alerts(rt)
    with transaction(rt.engine) as s:
        alert_id = s.scalars(select(Alert.id).where(Alert.rule == "rewrite_mismatch")).one()
    assert f"acknowledge alert {alert_id}" in str(_held(client)[0]["lift"])
    held_metric = 'lakewarden_kinds_held{kind="compaction",rule="rewrite_mismatch"} 1.0'
    assert held_metric in client.get("/metrics").text  # an on-call scrape sees it
    r = client.post(f"/api/v1/alerts/{alert_id}/ack", json={"by": "oncall"})
    assert r.status_code == 200 and _held(client) == [], r.text
    assert "lakewarden_kinds_held{" not in client.get("/metrics").text

    # It fails validation again: held again, and the alert (still acknowledged, refreshed
    # to name the new task) lifts it when acknowledged again.
    second = _trigger(client)
    assert _fail_run(rt, fence, second, "RewriteMismatch: rows differ", mismatch) == "failed"
    _raise_alerts(rt)
    [held] = _held(client)
    assert (held["task_id"], held["alert_id"]) == (second, alert_id)
    assert client.post(f"/api/v1/alerts/{alert_id}/ack", json={"by": "b"}).status_code == 200
    assert _held(client) == []


def test_a_planned_task_of_a_held_kind_waits_until_resumed(rt: Runtime, client: TestClient) -> None:
    _register(client, rt)
    fence = lead(rt)
    task_id = _trigger(client)
    _planned(rt, task_id)
    assert _next_dispatched(rt) == task_id
    # Held while it is planned (a task made before the failure that held the kind).
    with transaction(rt.engine) as s:
        task = s.get(Task, task_id)
        assert task is not None
        cause = holds.Cause(holds.FAILED_RULE, "compaction failed 3 times in a row")
        made = holds.hold(s, fence, task, cause)[1]
        again = holds.hold(s, fence, task, holds.Cause(holds.VALIDATION_RULE, "other"))
    assert made and not again[1] and again[0].reason == cause.reason  # idempotent: the first
    assert _next_dispatched(rt) is None
    on_hold = client.get(f"/api/v1/tasks/{task_id}").json()["on_hold"]
    assert on_hold.startswith("compaction held since") and "to lift" in on_hold

    # Resume: operator; a viewer may not; an unknown kind is a 404 that lists the kinds.
    lift = str(_held(client)[0]["lift"])
    path = re.search(r"POST (\S+) to lift", lift)
    assert path is not None
    viewer = bearer(issue_token(rt, "viewer", name="viewer"))
    assert client.post(path[1], headers=viewer).status_code == 403
    r = client.post(path[1].replace("/compaction/", "/compactoin/"))
    assert r.status_code == 404 and "one of" in r.json()["detail"], r.text
    operator = bearer(issue_token(rt, "operator@lake/sales", name="oncall"))
    r = client.post(path[1], headers=operator)
    assert r.status_code == 200 and r.json()["held"] == [], r.text
    assert _next_dispatched(rt) == task_id
    assert client.post(path[1]).status_code == 200  # nothing to lift: as it is
    changes = _audited(rt, "resumeKind")
    assert [c.get("resumed", {}).get("kind") for c in changes] == ["compaction", None]
    with transaction(rt.engine) as s:
        assert s.scalars(select(KindHold)).all() == []


def test_the_dashboard_shows_a_held_kind_and_resumes_it(rt: Runtime, client: TestClient) -> None:
    _register(client, rt)
    fence = lead(rt)
    task_id = _trigger(client)
    mismatch = {"validation": {"status": "failed"}}
    assert _fail_run(rt, fence, task_id, "RewriteMismatch: rows differ", mismatch) == "failed"
    page = client.get(f"/ui/t/{rt.settings.catalog_name}/sales/orders")
    assert page.status_code == 200, page.text
    assert f"rewrite of task {task_id} failed validation (rewrite_mismatch)" in page.text
    assert "/kinds/compaction/resume to lift" in page.text
    assert "Resume compaction</button>" in page.text
    r = client.post(
        f"/ui/t/{rt.settings.catalog_name}/sales/orders/kinds/compaction/resume",
        headers={"Origin": "http://testserver"},
        follow_redirects=False,
    )
    assert r.status_code == 303 and "error" not in r.headers["location"], r.headers
    assert _held(client) == []


def test_the_sweep_makes_no_task_of_a_held_kind(rt: Runtime, client: TestClient) -> None:
    _register(client, rt)
    fence = lead(rt)
    with transaction(rt.engine) as s:
        table_id = s.scalar(text("SELECT id FROM managed_tables WHERE name = 'orders'"))
        task_id = repo.create_task(s, table_id=table_id, kind="clean", trigger={}, actor="t")
        assert task_id is not None
        repo.transition(s, task_id, TaskState.CANCELLED, actor="t")
        # Its last clean task two hours ago: the sweep finds clean due.
        s.execute(
            text("UPDATE tasks SET created_at = now() - interval '2 hours' WHERE id = :i"),
            {"i": task_id},
        )
        task = s.get(Task, task_id)
        assert task is not None
        holds.hold(s, fence, task, holds.Cause(holds.FAILED_RULE, "clean failed 3 times"))
    now = datetime.now(UTC)
    assert sweep_due_tasks(rt, fence, now) == []
    assert client.post(f"{ORDERS}/kinds/clean/resume").status_code == 200
    assert len(sweep_due_tasks(rt, fence, now)) == 1
