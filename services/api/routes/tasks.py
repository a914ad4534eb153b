"""Tasks: list, inspect (with history and runs), trigger by hand, cancel."""

from __future__ import annotations

from typing import Annotated, Literal

from fastapi import APIRouter, HTTPException, Query
from pydantic import ValidationError
from sqlalchemy import select
from sqlalchemy.orm import Session

from lakewarden import policy_gate
from lakewarden.catalog import InvalidIdentifier, TableRef
from lakewarden.db.models import JobRun, ManagedTable, Task
from lakewarden.kinds import REGISTRY
from lakewarden.policy import KINDS
from lakewarden.states import TaskState
from lakewarden.tables import get_table
from lakewarden.tasks import repo
from lakewarden.tasks.states import ALL_STATES, TERMINAL_STATES
from services.api import errors
from services.api.deps import Cursor, Id, RuntimeDep, SessionDep, TableDep
from services.api.policies import invalid_stored_policy
from services.api.schemas import (
    TABLE_PATTERN,
    Page,
    RunOut,
    TaskDetail,
    TaskIn,
    TaskOut,
    TransitionOut,
    documented_pattern,
)

router = APIRouter(prefix="/api/v1", tags=["tasks"])


def _out(task: Task, row: ManagedTable) -> TaskOut:
    data = {c: getattr(task, c) for c in TaskOut.model_fields if c != "table"}
    return TaskOut(table=f"{row.namespace}.{row.name}", **data)


def _detail(session: Session, task: Task) -> TaskDetail:
    row = session.get(ManagedTable, task.table_id)
    assert row is not None
    runs = session.scalars(select(JobRun).where(JobRun.task_id == task.id).order_by(JobRun.attempt))
    return TaskDetail(
        **_out(task, row).model_dump(),
        history=[
            TransitionOut.model_validate(t, from_attributes=True)
            for t in repo.history(session, task.id)
        ],
        runs=[RunOut.model_validate(r, from_attributes=True) for r in runs],
    )


@router.get(
    "/tasks",
    response_model=Page[TaskOut],
    responses=errors.documented(notes={404: "the `table` is not managed by lakewarden"}),
)
def list_tasks(
    rt: RuntimeDep,
    session: SessionDep,
    table: Annotated[
        str | None,
        Query(
            max_length=257,
            description="namespace.name",
            json_schema_extra=documented_pattern(TABLE_PATTERN),  # enforced by TableRef
        ),
    ] = None,
    state: Annotated[Literal[ALL_STATES] | None, Query()] = None,  # type: ignore[valid-type]
    kind: Annotated[Literal[KINDS] | None, Query()] = None,  # type: ignore[valid-type]
    limit: Annotated[int, Query(ge=1, le=500)] = 50,
    cursor: Cursor = None,
) -> Page[TaskOut]:
    """Tasks, newest first."""
    q = select(Task, ManagedTable).join(ManagedTable, ManagedTable.id == Task.table_id)
    if table is not None:
        try:
            ref = TableRef.parse(table)
        except InvalidIdentifier as exc:
            raise HTTPException(422, str(exc)) from exc
        row = get_table(session, rt.settings.catalog_name, ref)
        if row is None:
            raise HTTPException(404, f"table {ref.dotted} is not managed by lakewarden")
        q = q.where(Task.table_id == row.id)
    if state is not None:
        q = q.where(Task.state == state)
    if kind is not None:
        q = q.where(Task.kind == kind)
    if cursor is not None:
        q = q.where(Task.id < cursor)
    rows = session.execute(q.order_by(Task.id.desc()).limit(limit + 1)).all()
    more = len(rows) > limit
    rows = rows[:limit]
    return Page(items=[_out(t, r) for t, r in rows], next_cursor=rows[-1][0].id if more else None)


@router.get(
    "/tasks/{task_id}",
    response_model=TaskDetail,
    responses=errors.documented(notes={404: "no such task"}),
)
def read_task(task_id: Id, session: SessionDep) -> TaskDetail:
    """A task with why it exists, its plan, result, every transition and every run."""
    task = session.get(Task, task_id)
    if task is None:
        raise HTTPException(404, f"task {task_id} does not exist")
    return _detail(session, task)


@router.post(
    "/tables/{namespace}/{name}/tasks",
    status_code=201,
    response_model=TaskDetail,
    responses=errors.documented(
        body=True,
        notes={
            **errors.ON_TABLE,
            409: "a task of the kind is open, the policy disables the kind (see "
            "`override_disabled`), the stored policy is invalid, or a concurrent change won",
        },
    ),
)
def trigger_task(body: TaskIn, row: TableDep, rt: RuntimeDep, session: SessionDep) -> TaskDetail:
    """Ask for a task now, whatever the thresholds say; the worker still plans it."""
    if body.kind not in REGISTRY:
        raise HTTPException(422, f"task kind {body.kind!r} is not available yet")
    try:
        policy, stamp = policy_gate.current(session, row, body.kind)
    except ValidationError as exc:
        raise HTTPException(409, invalid_stored_policy(row, exc)) from exc
    if not policy.enabled and not body.override_disabled:
        raise HTTPException(
            409,
            f"{body.kind} is disabled by the policy of {row.namespace}.{row.name} "
            f"({stamp.describe()}); enable it in the policy, or pass "
            '"override_disabled": true to run it once anyway',
        )
    actor = f"api:{rt.process_id}"
    trigger: dict[str, object] = {
        "source": "manual",
        "reason": "requested through the API",
        "policy_version": row.policy_version,
        "policy": stamp.as_json(),
    }
    if not policy.enabled:
        trigger["reason"] = f"requested through the API, overriding the disabled {body.kind}"
        trigger[policy_gate.OVERRIDE_KEY] = {"by": actor}
    task_id = repo.create_task(
        session,
        table_id=row.id,
        kind=body.kind,
        actor=actor,
        priority=policy.priority,
        max_attempts=policy.max_attempts,
        pool=policy.pool,
        trigger=trigger,
    )
    if task_id is None:
        existing = repo.open_task(session, row.id, body.kind)
        raise HTTPException(
            409,
            f"table {row.namespace}.{row.name} already has an open {body.kind} task"
            + (f" ({existing.id}, {existing.state})" if existing else ""),
        )
    task = session.get(Task, task_id)
    assert task is not None
    return _detail(session, task)


@router.post(
    "/tasks/{task_id}/cancel",
    response_model=TaskDetail,
    responses=errors.documented(
        notes={404: "no such task", 409: "the task already ended, or a concurrent change won"}
    ),
)
def cancel_task(task_id: Id, rt: RuntimeDep, session: SessionDep) -> TaskDetail:
    """Cancel a task in any open state; a running Spark job is cancelled by the scheduler."""
    try:
        task = repo.transition(
            session,
            task_id,
            TaskState.CANCELLED,
            actor=f"api:{rt.process_id}",
            reason="cancelled through the API",
        )
    except repo.TransitionRejected as exc:
        task_row = session.get(Task, task_id)
        if task_row is None:
            raise HTTPException(404, f"task {task_id} does not exist") from exc
        if task_row.state in TERMINAL_STATES:
            raise HTTPException(409, f"task {task_id} already ended ({task_row.state})") from exc
        raise HTTPException(409, str(exc)) from exc
    return _detail(session, task)
