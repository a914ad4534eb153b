"""Tasks: list, inspect (with history and runs), trigger by hand, cancel."""

from __future__ import annotations

from typing import Annotated, Literal

from fastapi import APIRouter, HTTPException, Query
from pydantic import ValidationError

from lakewarden import policy_gate
from lakewarden.auth.grants import Role
from lakewarden.catalog import TableRef
from lakewarden.db.models import ManagedTable
from lakewarden.kinds import REGISTRY
from lakewarden.policy import KINDS
from lakewarden.states import TaskState
from lakewarden.tasks import repo
from lakewarden.tasks.states import ALL_STATES
from services.api import errors
from services.api.access import Access, AccessDep, TableDep
from services.api.deps import Id, RuntimeDep, SessionDep, managed
from services.api.paging import PageDep
from services.api.policies import invalid_stored_policy
from services.api.schemas import (
    TABLE_PATTERN,
    TaskDetail,
    TaskIn,
    TaskOut,
    TaskPage,
    documented_pattern,
)

router = APIRouter(prefix="/api/v1", tags=["tasks"])

# Kinds that delete rows or files: running one the policy disables needs admin.
DESTRUCTIVE_KINDS = frozenset({"ttl", "clean"})


def _need_on_task(session: SessionDep, access: Access, role: Role, task_id: int) -> None:
    """`role` on the task's table; a missing task is a 404 (after authentication)."""
    scope = repo.scope_of_task(session, task_id)
    if scope is None:
        raise HTTPException(404, f"task {task_id} does not exist")
    access.need(role, *scope, target=f"task {task_id}")


@router.get(
    "/tasks",
    response_model=TaskPage,
    responses=errors.documented(notes={404: "the `table` is not managed by lakewarden"}),
)
def list_tasks(
    rt: RuntimeDep,
    session: SessionDep,
    access: AccessDep,
    page: PageDep,
    table: Annotated[
        str | None,
        Query(
            max_length=384,
            description="namespace.name (a namespace may have several levels: a.b.name)",
            json_schema_extra=documented_pattern(TABLE_PATTERN),  # enforced by TableRef
        ),
    ] = None,
    catalog_name: Annotated[
        str | None,
        Query(
            alias="catalog",
            max_length=128,
            description="the catalog of `table` (default: the default catalog)",
        ),
    ] = None,
    state: Annotated[Literal[ALL_STATES] | None, Query()] = None,  # type: ignore[valid-type]
    kind: Annotated[Literal[KINDS] | None, Query()] = None,  # type: ignore[valid-type]
) -> TaskPage:
    """Tasks, newest first."""
    visible = access.scope(Role.viewer, ManagedTable.catalog, ManagedTable.namespace)
    table_id = None
    if table is not None:
        ref = TableRef.parse(table)
        catalog = rt.catalogs.entry(catalog_name or rt.settings.catalog_name).name
        access.need(Role.viewer, catalog, ref.namespace, target=ref.dotted)
        table_id = managed(session, catalog, ref).id
    found = repo.list_tasks(session, page, table_id=table_id, state=state, kind=kind, where=visible)
    return TaskPage.of(found, lambda row: TaskOut.of(*row))


@router.get(
    "/tasks/{task_id}",
    response_model=TaskDetail,
    responses=errors.documented(notes={404: "no such task"}),
)
def get_task(task_id: Id, session: SessionDep, access: AccessDep) -> TaskDetail:
    """A task with why it exists, its plan, result, every transition and every run."""
    _need_on_task(session, access, Role.viewer, task_id)
    record = repo.get_task(session, task_id)
    if record is None:
        raise HTTPException(404, f"task {task_id} does not exist")
    return TaskDetail.of_record(record)


TRIGGER_ERRORS = {
    **errors.ON_TABLE,
    409: "a task of the kind is open, the policy disables the kind (see `override_disabled`), "
    "the stored policy is invalid, or a concurrent change won",
}


@router.post(
    "/catalogs/{catalog}/tables/{namespace}/{name}/tasks",
    status_code=201,
    response_model=TaskDetail,
    responses=errors.documented(body=True, notes=TRIGGER_ERRORS),
)
def trigger_task(
    body: TaskIn, row: TableDep, rt: RuntimeDep, session: SessionDep, access: AccessDep
) -> TaskDetail:
    """Ask for a task now, whatever the thresholds say; the worker still plans it.
    Operator; overriding a disabled destructive kind (ttl, clean) needs admin."""
    access.need(Role.operator, row.catalog, row.namespace)
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
    if not policy.enabled and body.kind in DESTRUCTIVE_KINDS:
        access.need(Role.admin, row.catalog, row.namespace)
    actor = access.actor
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
    record = repo.get_task(session, task_id)
    assert record is not None
    return TaskDetail.of_record(record)


@router.post(
    "/tasks/{task_id}/cancel",
    response_model=TaskDetail,
    responses=errors.documented(
        notes={404: "no such task", 409: "the task already ended, or a concurrent change won"}
    ),
)
def cancel_task(task_id: Id, session: SessionDep, access: AccessDep) -> TaskDetail:
    """Cancel a task in any open state; a running Spark job is cancelled by the scheduler."""
    _need_on_task(session, access, Role.operator, task_id)
    task = repo.transition(
        session,
        task_id,
        TaskState.CANCELLED,
        actor=access.actor,
        reason="cancelled through the API",
    )
    return TaskDetail.of_record(repo.record(session, task))
